//! The escrow's `PaymentInfo` (base/commerce-payments v1.0.0 `AuthCaptureEscrow.PaymentInfo`),
//! its hashes, and the ERC-3009 nonce a payer signs.
//!
//! | function | upstream |
//! |---|---|
//! | [`PAYMENT_INFO_TYPEHASH`] | `AuthCaptureEscrow.PAYMENT_INFO_TYPEHASH` |
//! | [`PaymentInfo::get_hash`] | `AuthCaptureEscrow.getHash(paymentInfo)` on chain `chain_id` at `escrow`: the key of `paymentState` and of every escrow event |
//! | [`PaymentInfo::hash_payer_agnostic`] | `TokenCollector._getHashPayerAgnostic`: `getHash` with `payer` zeroed, the ERC-3009 nonce |

use alloy::primitives::aliases::{U48, U120};

use alloy::primitives::{Address, B256, U256, b256, keccak256};
use alloy::sol_types::SolValue;

pub use super::abi::PaymentInfo;

/// `keccak256("PaymentInfo(address operator,address payer,…,uint256 salt)")`.
pub const PAYMENT_INFO_TYPEHASH: B256 =
    b256!("ae68ac7ce30c86ece8196b61a7c486d8f0061f575037fbd34e7fe4e2820c6591");

impl PaymentInfo {
    /// `getHash` of the escrow at `escrow` on chain `chain_id`:
    /// `keccak256(abi.encode(chainId, escrow, keccak256(abi.encode(TYPEHASH, info))))`.
    #[must_use]
    pub fn get_hash(&self, chain_id: u64, escrow: Address) -> B256 {
        // Every field is static, so `abi.encode(TYPEHASH, info)` is the flat concatenation.
        let inner = keccak256((PAYMENT_INFO_TYPEHASH, self.clone()).abi_encode());
        keccak256((U256::from(chain_id), escrow, inner).abi_encode())
    }

    /// [`Self::get_hash`] with `payer` zeroed: what the payer signs as the ERC-3009 nonce, as
    /// the payer is not known when the offer is made.
    #[must_use]
    pub fn hash_payer_agnostic(&self, chain_id: u64, escrow: Address) -> B256 {
        let mut agnostic = self.clone();
        agnostic.payer = Address::ZERO;
        agnostic.get_hash(chain_id, escrow)
    }

    /// The amount as a `U256` (it is a uint120 on chain).
    #[must_use]
    pub fn max_amount(&self) -> U256 {
        U256::from(self.maxAmount)
    }
}

/// A `uint48` timestamp.
#[must_use]
pub(crate) fn u48(value: u64) -> U48 {
    U48::saturating_from(value)
}

/// A `uint120` amount, `None` above its range.
#[must_use]
pub(crate) fn u120(value: U256) -> Option<U120> {
    U120::checked_from_limbs_slice(value.as_limbs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::address;
    use alloy::sol_types::SolStruct;

    #[test]
    fn typehash_is_the_escrow_constant() {
        assert_eq!(
            keccak256(PaymentInfo::eip712_encode_type().as_bytes()),
            PAYMENT_INFO_TYPEHASH
        );
        assert_eq!(
            keccak256(
                "PaymentInfo(address operator,address payer,address receiver,address token,uint120 maxAmount,uint48 preApprovalExpiry,uint48 authorizationExpiry,uint48 refundExpiry,uint16 minFeeBps,uint16 maxFeeBps,address feeReceiver,uint256 salt)"
            ),
            PAYMENT_INFO_TYPEHASH
        );
    }

    #[test]
    fn payer_agnostic_hash_ignores_the_payer_and_get_hash_does_not() {
        let info = PaymentInfo {
            operator: address!("1111111111111111111111111111111111111111"),
            payer: address!("2222222222222222222222222222222222222222"),
            receiver: address!("3333333333333333333333333333333333333333"),
            token: address!("4444444444444444444444444444444444444444"),
            maxAmount: U120::from(1_000_000u64),
            preApprovalExpiry: u48(1_700_000_060),
            authorizationExpiry: u48(1_700_003_600),
            refundExpiry: u48(1_700_086_400),
            minFeeBps: 0,
            maxFeeBps: 1000,
            feeReceiver: address!("5555555555555555555555555555555555555555"),
            salt: U256::from(0xabcu64),
        };
        let escrow = address!("BdEA0D1bcC5966192B070Fdf62aB4EF5b4420cff");
        let mut other_payer = info.clone();
        other_payer.payer = address!("6666666666666666666666666666666666666666");
        assert_eq!(
            info.hash_payer_agnostic(8453, escrow),
            other_payer.hash_payer_agnostic(8453, escrow)
        );
        assert_ne!(
            info.get_hash(8453, escrow),
            other_payer.get_hash(8453, escrow)
        );
        assert_ne!(
            info.hash_payer_agnostic(8453, escrow),
            info.hash_payer_agnostic(84532, escrow)
        );
        // The struct hash is the EIP-712 hashStruct: all fields are static words.
        assert_eq!(
            keccak256((PAYMENT_INFO_TYPEHASH, info.clone()).abi_encode()),
            info.eip712_hash_struct()
        );
    }
}
