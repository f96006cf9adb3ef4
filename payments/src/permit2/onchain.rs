//! The facilitator's on-chain half of Permit2 payments: the checks against a node (proxy
//! deployed, signature by ECDSA or EIP-1271 as Permit2 checks it, nonce unused in the payer's
//! bitmap, allowance to Permit2 or an EIP-2612 permit or a signed approval, balance, and an
//! `eth_call` of the settlement through the proxy), the settlement call itself, revert data →
//! [`Reason`], and what a mined receipt says moved.
//!
//! Permit2 emits no event of its own for a signature transfer, and the proxies' `Settled` has no
//! arguments: the token's `Transfer(payer → to, amount)` in a successful transaction to the proxy
//! is what a settlement moved, and the payer's nonce bit is what says the permit is spent.

use alloy::primitives::{Address, B256, Bytes, TxHash, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{TransactionInput, TransactionReceipt, TransactionRequest};
use alloy::sol_types::{SolCall, SolEvent, SolInterface};
use alloy::transports::{RpcError, TransportError};

use super::{PERMIT2_ADDRESS, Permit2Payment, Permit2Scheme};
use crate::auth_capture::abi::ICollectorReverts;
use crate::exact::onchain::{ERC1271_MAGIC, ERC6492_SUFFIX, IErc1271, Refusal};
use crate::reason::Reason;

alloy::sol! {
    /// Permit2's tokens and deadline (`ISignatureTransfer.PermitTransferFrom`).
    #[derive(Debug, PartialEq, Eq)]
    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    /// `ISignatureTransfer.PermitTransferFrom`.
    #[derive(Debug, PartialEq, Eq)]
    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    /// The `exact` proxy's witness, as its ABI takes it.
    #[derive(Debug, PartialEq, Eq)]
    struct ExactWitness {
        address to;
        uint256 validAfter;
    }

    /// The `upto` proxy's witness, as its ABI takes it.
    #[derive(Debug, PartialEq, Eq)]
    struct UptoWitness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    /// An EIP-2612 permit approving Permit2, as the proxies' `settleWithPermit` takes it.
    #[derive(Debug, PartialEq, Eq)]
    struct Eip2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    /// Uniswap Permit2, the parts x402 uses.
    interface IPermit2 {
        event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask);
        function nonceBitmap(address owner, uint256 wordPos) external view returns (uint256);
        error InvalidNonce();
        error SignatureExpired(uint256 signatureDeadline);
        error InvalidAmount(uint256 maxAmount);
        error InvalidSignatureLength();
        error InvalidSignature();
        error InvalidSigner();
        error InvalidContractSignature();
    }

    /// `x402ExactPermit2Proxy` (the official 2.27 ABI).
    interface IExactPermit2Proxy {
        event Settled();
        event SettledWithPermit();
        function PERMIT2() external view returns (address);
        function settle(PermitTransferFrom permit, address owner, ExactWitness witness, bytes signature) external;
        function settleWithPermit(Eip2612Permit permit2612, PermitTransferFrom permit, address owner, ExactWitness witness, bytes signature) external;
        error InvalidAmount();
        error InvalidDestination();
        error InvalidOwner();
        error InvalidPermit2Address();
        error PaymentTooEarly();
        error Permit2612AmountMismatch();
        error ReentrancyGuardReentrantCall();
    }

    /// `x402UptoPermit2Proxy` (the official 2.27 ABI): `settle` takes the amount to move.
    interface IUptoPermit2Proxy {
        function settle(PermitTransferFrom permit, uint256 amount, address owner, UptoWitness witness, bytes signature) external;
        function settleWithPermit(Eip2612Permit permit2612, PermitTransferFrom permit, uint256 amount, address owner, UptoWitness witness, bytes signature) external;
        error AmountExceedsPermitted();
        error UnauthorizedFacilitator();
    }

    /// The ERC-20 reads and event a Permit2 payment involves.
    interface IErc20 {
        event Transfer(address indexed from, address indexed to, uint256 value);
        function balanceOf(address account) external view returns (uint256);
        function allowance(address owner, address spender) external view returns (uint256);
    }
}

/// The word of a payer's nonce bitmap and the bit within it that nonce `nonce` uses.
#[must_use]
pub fn nonce_position(nonce: U256) -> (U256, U256) {
    let bit: usize = (nonce & U256::from(0xffu8)).to::<usize>();
    (nonce >> 8, U256::from(1u8) << bit)
}

/// The stable reason for a revert of a settlement through a proxy: the proxies' errors,
/// Permit2's, then the token's (custom errors or FiatToken/OpenZeppelin-style strings).
#[must_use]
pub fn revert_reason(data: Option<&[u8]>, message: &str) -> Reason {
    use IExactPermit2Proxy::IExactPermit2ProxyErrors as Exact;
    use IPermit2::IPermit2Errors as P2;
    use IUptoPermit2Proxy::IUptoPermit2ProxyErrors as Upto;
    if let Some(data) = data {
        if let Ok(error) = Exact::abi_decode(data) {
            return match error {
                Exact::InvalidAmount(_) => Reason::ValueMismatch,
                Exact::InvalidDestination(_) => Reason::RecipientMismatch,
                Exact::InvalidOwner(_) => Reason::InvalidPayload,
                Exact::InvalidPermit2Address(_) => Reason::Permit2ProxyNotDeployed,
                Exact::PaymentTooEarly(_) => Reason::ValidAfter,
                Exact::Permit2612AmountMismatch(_) => Reason::Permit2612AmountMismatch,
                Exact::ReentrancyGuardReentrantCall(_) => Reason::SimulationFailed,
            };
        }
        if let Ok(error) = Upto::abi_decode(data) {
            return match error {
                Upto::AmountExceedsPermitted(_) => Reason::UptoSettlementExceedsAmount,
                Upto::UnauthorizedFacilitator(_) => Reason::UptoFacilitatorMismatch,
            };
        }
        if let Ok(error) = P2::abi_decode(data) {
            return match error {
                P2::InvalidNonce(_) => Reason::NonceAlreadyUsed,
                P2::SignatureExpired(_) => Reason::ValidBefore,
                P2::InvalidAmount(_) => Reason::UptoSettlementExceedsAmount,
                P2::InvalidSignatureLength(_)
                | P2::InvalidSignature(_)
                | P2::InvalidSigner(_)
                | P2::InvalidContractSignature(_) => Reason::Signature,
            };
        }
        if let Ok(error) = ICollectorReverts::ICollectorRevertsErrors::abi_decode(data) {
            use ICollectorReverts::ICollectorRevertsErrors as Token;
            return match error {
                Token::InsufficientBalance(_) | Token::ERC20InsufficientBalance(_) => {
                    Reason::InsufficientBalance
                }
                Token::InsufficientAllowance(_) | Token::ERC20InsufficientAllowance(_) => {
                    Reason::Permit2AllowanceRequired
                }
                _ => Reason::SimulationFailed,
            };
        }
    }
    let text = message.to_ascii_lowercase();
    if text.contains("exceeds allowance") || text.contains("insufficient allowance") {
        Reason::Permit2AllowanceRequired
    } else if text.contains("exceeds balance") || text.contains("insufficient balance") {
        Reason::InsufficientBalance
    } else {
        Reason::SimulationFailed
    }
}

/// The node's answer to a call that reverted, as a refusal; `None` when the node failed.
fn revert_refusal(error: &TransportError) -> Option<Refusal> {
    let RpcError::ErrorResp(payload) = error else {
        return None;
    };
    let reverted = payload.code == 3 || payload.message.to_ascii_lowercase().contains("revert");
    reverted.then(|| Refusal {
        reason: revert_reason(
            payload.as_revert_data().as_ref().map(|data| data.as_ref()),
            &payload.message,
        ),
        message: Some(payload.message.clone().into_owned()),
    })
}

/// `eth_call`: `Ok(Ok(bytes))` returned, `Ok(Err(refusal))` reverted, `Err` the node failed.
async fn call(
    provider: &DynProvider,
    from: Option<Address>,
    to: Address,
    calldata: Vec<u8>,
) -> Result<Result<Bytes, Refusal>, TransportError> {
    let mut request = TransactionRequest::default()
        .to(to)
        .input(TransactionInput::new(calldata.into()));
    if let Some(from) = from {
        request = request.from(from);
    }
    match provider.call(request).await {
        Ok(bytes) => Ok(Ok(bytes)),
        Err(error) => match revert_refusal(&error) {
            Some(refusal) => Ok(Err(refusal)),
            None => Err(error),
        },
    }
}

/// A uint256 view answer, `None` when the call reverted or returned something else.
async fn read_u256(
    provider: &DynProvider,
    to: Address,
    calldata: Vec<u8>,
) -> Result<Option<U256>, TransportError> {
    Ok(call(provider, None, to, calldata)
        .await?
        .ok()
        .and_then(|bytes| (bytes.len() == 32).then(|| U256::from_be_slice(&bytes))))
}

/// Whether `owner`'s Permit2 nonce `nonce` is spent (used, or invalidated by the owner).
pub async fn nonce_used(
    provider: &DynProvider,
    owner: Address,
    nonce: U256,
) -> Result<bool, TransportError> {
    let (word, bit) = nonce_position(nonce);
    let read = IPermit2::nonceBitmapCall {
        owner,
        wordPos: word,
    };
    Ok(read_u256(provider, PERMIT2_ADDRESS, read.abi_encode())
        .await?
        .is_some_and(|bitmap| bitmap & bit != U256::ZERO))
}

/// The settlement call of `payment` moving `amount` (the signed amount for `exact`; for `upto`
/// the amount to settle, at most the signed maximum): `(proxy, calldata)`, through
/// `settleWithPermit` when the payload carries an EIP-2612 permit.
#[must_use]
pub fn settlement_call(payment: &Permit2Payment, amount: U256) -> (Address, Vec<u8>) {
    let authorization = &payment.payload.permit2_authorization;
    let permit = PermitTransferFrom {
        permitted: TokenPermissions {
            token: authorization.permitted.token,
            amount: authorization.permitted.amount.get(),
        },
        nonce: authorization.nonce.get(),
        deadline: authorization.deadline.get(),
    };
    let owner = authorization.from;
    let signature = payment.payload.signature.clone();
    let permit2612 = payment.eip2612.as_ref().map(|eip2612| {
        let (v, r, s) = eip2612.vrs();
        Eip2612Permit {
            value: eip2612.amount,
            deadline: eip2612.deadline,
            r: r.into(),
            s: s.into(),
            v,
        }
    });
    let calldata = match payment.scheme {
        Permit2Scheme::Exact => {
            let witness = ExactWitness {
                to: authorization.witness.to,
                validAfter: authorization.witness.valid_after.get(),
            };
            match permit2612 {
                Some(permit2612) => IExactPermit2Proxy::settleWithPermitCall {
                    permit2612,
                    permit,
                    owner,
                    witness,
                    signature,
                }
                .abi_encode(),
                None => IExactPermit2Proxy::settleCall {
                    permit,
                    owner,
                    witness,
                    signature,
                }
                .abi_encode(),
            }
        }
        Permit2Scheme::Upto => {
            let witness = UptoWitness {
                to: authorization.witness.to,
                facilitator: authorization.witness.facilitator.unwrap_or_default(),
                validAfter: authorization.witness.valid_after.get(),
            };
            match permit2612 {
                Some(permit2612) => IUptoPermit2Proxy::settleWithPermitCall {
                    permit2612,
                    permit,
                    amount,
                    owner,
                    witness,
                    signature,
                }
                .abi_encode(),
                None => IUptoPermit2Proxy::settleCall {
                    permit,
                    amount,
                    owner,
                    witness,
                    signature,
                }
                .abi_encode(),
            }
        }
    };
    (payment.scheme.proxy(), calldata)
}

/// The permit a proxy call carries: `(owner, nonce)`, for any of the four settlement calls.
#[must_use]
pub fn permit_in_calldata(calldata: &[u8]) -> Option<(Address, U256)> {
    if let Ok(call) = IExactPermit2Proxy::settleCall::abi_decode(calldata) {
        return Some((call.owner, call.permit.nonce));
    }
    if let Ok(call) = IExactPermit2Proxy::settleWithPermitCall::abi_decode(calldata) {
        return Some((call.owner, call.permit.nonce));
    }
    if let Ok(call) = IUptoPermit2Proxy::settleCall::abi_decode(calldata) {
        return Some((call.owner, call.permit.nonce));
    }
    IUptoPermit2Proxy::settleWithPermitCall::abi_decode(calldata)
        .ok()
        .map(|call| (call.owner, call.permit.nonce))
}

/// Whether `signature` is `payer`'s over `hash` as Permit2 checks it for an account without
/// code: 65 bytes (r ‖ s ‖ v) or 64 (EIP-2098), recovering to the payer.
#[must_use]
pub fn ecdsa_signs(signature: &[u8], hash: &B256, payer: Address) -> bool {
    let parsed = match signature.len() {
        65 => alloy::primitives::Signature::from_raw(signature).ok(),
        64 => Some(alloy::primitives::Signature::from_erc2098(signature)),
        _ => None,
    };
    parsed
        .and_then(|parsed| parsed.recover_address_from_prehash(hash).ok())
        .is_some_and(|recovered| recovered == payer)
}

/// Runs the checks that need a node for `payment` settling `amount` (the signed amount, or for
/// `upto` the worst case at verification and the asked amount at settlement), simulated as
/// sent by `relayer`. The order follows the official facilitator: proxy deployed, signature,
/// then nonce, allowance (or the EIP-2612 permit), balance, and the simulation, whose revert
/// is decoded to name what is wrong.
///
/// An `upto` settlement of zero moves nothing, so for `amount == 0` only what makes the
/// authorization the payer's and still unspent is checked (proxy, signature, nonce): a payer
/// whose balance or allowance went away after rejected work still settles at zero.
///
/// `Ok(Err(refusal))` is a verdict; `Err` means the node could not be asked.
pub async fn verify(
    provider: &DynProvider,
    relayer: Address,
    payment: &Permit2Payment,
    amount: U256,
) -> Result<Result<(), Refusal>, TransportError> {
    let payer = payment.payer();
    let nonce = payment.payload.permit2_authorization.nonce.get();
    let (proxy, calldata) = settlement_call(payment, amount);
    let allowance_read = IErc20::allowanceCall {
        owner: payer,
        spender: PERMIT2_ADDRESS,
    };
    let balance_read = IErc20::balanceOfCall { account: payer };
    let (proxy_code, permit2_code, payer_code, used, allowance, balance) = tokio::try_join!(
        provider.get_code_at(proxy),
        provider.get_code_at(PERMIT2_ADDRESS),
        provider.get_code_at(payer),
        nonce_used(provider, payer, nonce),
        read_u256(provider, payment.asset, allowance_read.abi_encode()),
        read_u256(provider, payment.asset, balance_read.abi_encode()),
    )?;
    if proxy_code.is_empty() || permit2_code.is_empty() {
        return Ok(Err(Reason::Permit2ProxyNotDeployed.into()));
    }
    let signature = &payment.payload.signature;
    let hash = payment.signing_hash();
    if payer_code.is_empty() {
        if signature.len() > 65 && signature.ends_with(&ERC6492_SUFFIX) {
            return Ok(Err(Reason::UndeployedSmartWallet.into()));
        }
        if !ecdsa_signs(signature, &hash, payer) {
            return Ok(Err(Reason::Signature.into()));
        }
    } else {
        let check = IErc1271::isValidSignatureCall {
            hash,
            signature: signature.clone(),
        };
        let valid = call(provider, None, payer, check.abi_encode())
            .await?
            .ok()
            .and_then(|bytes| IErc1271::isValidSignatureCall::abi_decode_returns(&bytes).ok())
            == Some(ERC1271_MAGIC);
        if !valid {
            return Ok(Err(Reason::Signature.into()));
        }
    }
    if used {
        return Ok(Err(Reason::NonceAlreadyUsed.into()));
    }
    if amount.is_zero() {
        return Ok(Ok(()));
    }
    let Some(balance) = balance else {
        return Ok(Err(Reason::AssetNotDeployed.into()));
    };
    let approval_pending = allowance.unwrap_or_default() < amount && payment.eip2612.is_none();
    if approval_pending {
        let Some(approval) = &payment.erc20_approval else {
            return Ok(Err(Reason::Permit2AllowanceRequired.into()));
        };
        if let Err(refusal) = super::approval::check_on_chain(provider, approval).await? {
            return Ok(Err(refusal));
        }
    }
    if balance < amount {
        return Ok(Err(Reason::InsufficientBalance.into()));
    }
    if approval_pending {
        // The settlement cannot be simulated before the approval is mined (a plain node has no
        // bundle to simulate both in); the approval itself was, and the proxy is checked again
        // by the relayer's gas estimate just before the settlement is sent.
        return Ok(Ok(()));
    }
    Ok(call(provider, Some(relayer), proxy, calldata)
        .await?
        .map(|_| ()))
}

/// A token movement of a Permit2 settlement, with where the chain records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit2Transfer {
    /// The transaction.
    pub transaction: TxHash,
    /// Its block.
    pub block_number: Option<u64>,
    /// The `Transfer` log's index in the block.
    pub log_index: Option<u64>,
    /// The token.
    pub token: Address,
    /// The payer.
    pub from: Address,
    /// The recipient.
    pub to: Address,
    /// Atomic units moved.
    pub amount: U256,
}

/// In a successful `receipt` of a call to a Permit2 proxy, the `token`'s `Transfer` from
/// `payer` to `to`: what the settlement moved. `None` for a reverted transaction, one to another
/// contract, or one without that transfer.
#[must_use]
pub fn transfer_in_receipt(
    receipt: &TransactionReceipt,
    token: Address,
    payer: Address,
    to: Address,
) -> Option<Permit2Transfer> {
    let proxies = [Permit2Scheme::Exact.proxy(), Permit2Scheme::Upto.proxy()];
    if !receipt.status() || !receipt.to.is_some_and(|callee| proxies.contains(&callee)) {
        return None;
    }
    receipt.logs().iter().find_map(|log| {
        if log.address() != token {
            return None;
        }
        let transfer = IErc20::Transfer::decode_log(&log.inner).ok()?;
        (transfer.from == payer && transfer.to == to).then_some(Permit2Transfer {
            transaction: receipt.transaction_hash,
            block_number: receipt.block_number,
            log_index: log.log_index,
            token,
            from: payer,
            to,
            amount: transfer.value,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::sol_types::SolError;

    #[test]
    fn nonce_positions_follow_permit2s_bitmap() {
        assert_eq!(nonce_position(U256::ZERO), (U256::ZERO, U256::from(1u8)));
        assert_eq!(
            nonce_position(U256::from(257u64)),
            (U256::from(1u8), U256::from(2u8))
        );
        let (word, bit) = nonce_position(U256::MAX);
        assert_eq!(word, U256::MAX >> 8);
        assert_eq!(bit, U256::from(1u8) << 255);
    }

    #[test]
    fn proxy_and_permit2_errors_map_to_stable_codes() {
        let cases: [(Vec<u8>, Reason); 6] = [
            (
                IPermit2::InvalidNonce {}.abi_encode(),
                Reason::NonceAlreadyUsed,
            ),
            (
                IPermit2::SignatureExpired {
                    signatureDeadline: U256::from(1u8),
                }
                .abi_encode(),
                Reason::ValidBefore,
            ),
            (IPermit2::InvalidSigner {}.abi_encode(), Reason::Signature),
            (
                IExactPermit2Proxy::PaymentTooEarly {}.abi_encode(),
                Reason::ValidAfter,
            ),
            (
                IUptoPermit2Proxy::UnauthorizedFacilitator {}.abi_encode(),
                Reason::UptoFacilitatorMismatch,
            ),
            (
                ICollectorReverts::InsufficientAllowance {
                    spender: Address::ZERO,
                    allowance: U256::ZERO,
                    needed: U256::from(1u8),
                }
                .abi_encode(),
                Reason::Permit2AllowanceRequired,
            ),
        ];
        for (data, reason) in cases {
            assert_eq!(revert_reason(Some(&data), "execution reverted"), reason);
        }
        assert_eq!(
            revert_reason(
                None,
                "execution reverted: ERC20: transfer amount exceeds balance"
            ),
            Reason::InsufficientBalance
        );
    }
}
