//! The `erc20ApprovalGasSponsoring` extension (x402 `extensions/erc20_gas_sponsoring.md`): a
//! payer who never approved Permit2 on a token without EIP-2612 signs the raw transaction
//! `token.approve(Permit2, amount)` (the official client: `maxUint256`, gas limit 70 000, at its
//! current nonce, with the node's fee estimate) and puts it in
//! `extensions.erc20ApprovalGasSponsoring.info` (`{from, asset, spender, amount,
//! signedTransaction, version}`). The facilitator checks it, funds the payer's gas when its
//! native balance is short, broadcasts the approval, waits for it and then settles through the
//! x402 Permit2 proxy as usual.
//!
//! The checks, in the official facilitator's order and with its reason codes: the `info` shape;
//! `from` is the payer, `asset` the payment's token, `spender` canonical Permit2; the transaction
//! decodes (EIP-2718, alloy's decoder), is sent to the token, calls `approve(Permit2, amount)`
//! with `amount` the extension's and at least what the payment moves, and is signed by the payer.
//! Besides the official ones, because this facilitator pays for the gas: the transaction is for
//! the payment's chain, sends no value, is not a blob or EIP-7702 transaction, and (against the
//! node, [`check_on_chain`]) its nonce is the payer's next one, its gas limit at most
//! [`APPROVAL_GAS_LIMIT_MAX`], its max fee at least the latest base fee and at most
//! [`MAX_FEE_MULTIPLE`] times what the chain asks now (base fee + tip), and the approval would
//! not revert.
//!
//! The spec asks for the funding, the approval and the settlement in one atomic bundle. A plain
//! node (anvil, most RPC endpoints) has none, so the steps run one after the other (see
//! `facilitator::local::approval`): between the funding and the approval, the payer could spend
//! the funded ETH on another transaction at the same nonce; what it gains is bounded by the
//! funding, at most the approval's own gas limit × max fee (both checked above), and the payer
//! gains nothing on the payment itself: without the approval the settlement does not happen.

use alloy::consensus::{Transaction, TxEnvelope};
use alloy::eips::BlockNumberOrTag;
use alloy::eips::eip2718::Decodable2718;
use alloy::primitives::{Address, Bytes, TxHash, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{TransactionInput, TransactionRequest};
use alloy::sol_types::SolCall;
use alloy::transports::TransportError;
use serde_json::{Value, json};

use super::PERMIT2_ADDRESS;
use super::extension::FilledInfo;
use crate::exact::onchain::Refusal;
use crate::reason::Reason;
use crate::wire::{Extensions, PaymentPayload};

/// The extension's key in `extensions`.
pub const ERC20_APPROVAL_GAS_SPONSORING: &str = "erc20ApprovalGasSponsoring";

/// The most gas an approval may ask for (the official client asks for 70 000; an ERC-20
/// `approve` uses under 50 000): the facilitator may fund this times the max fee.
pub const APPROVAL_GAS_LIMIT_MAX: u64 = 200_000;

/// How far above what the chain asks now (latest base fee + suggested tip) an approval's max fee
/// may be: room for the base fee to rise for a few blocks, not a way to be funded more.
pub const MAX_FEE_MULTIPLE: u128 = 4;

/// A floor for the max-fee ceiling, so that a chain whose fees are near zero still accepts the
/// official client's fallback fees (1 gwei max fee, 0.1 gwei tip).
const MAX_FEE_CEILING_FLOOR: u128 = 2_000_000_000;

alloy::sol! {
    /// ERC-20 `approve`.
    interface IApprove {
        function approve(address spender, uint256 amount) external returns (bool);
    }
}

/// What the server puts under [`ERC20_APPROVAL_GAS_SPONSORING`] in `PaymentRequired.extensions`:
/// the spec's `{info, schema}`, where `info` only describes the offer (the client fills in the
/// rest).
#[must_use]
pub fn erc20_approval_gas_sponsoring_offer() -> Value {
    let address = json!({"type": "string", "pattern": "^0x[a-fA-F0-9]{40}$"});
    json!({
        "info": {
            "description": "The facilitator accepts a raw signed approval transaction and will sponsor the gas fees.",
            "version": "1",
        },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "from": address,
                "asset": address,
                "spender": address,
                "amount": {"type": "string", "pattern": "^[0-9]+$"},
                "signedTransaction": {"type": "string", "pattern": "^0x[a-fA-F0-9]+$"},
                "version": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)*$"},
            },
            "required": ["from", "asset", "spender", "amount", "signedTransaction", "version"],
        },
    })
}

/// `extensions.erc20ApprovalGasSponsoring.info` as the payer sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Erc20ApprovalGasSponsoring {
    /// The token holder (must be the payer).
    pub from: Address,
    /// The token (must be the payment's asset).
    pub asset: Address,
    /// The approved spender (must be Permit2).
    pub spender: Address,
    /// The approved amount (must be what the transaction approves).
    pub amount: U256,
    /// The EIP-2718 encoded signed transaction.
    pub signed_transaction: Bytes,
}

/// A signed approval that passed every check needing no node: what the facilitator broadcasts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedApproval {
    /// The payer, who signed it.
    pub signer: Address,
    /// The token it approves Permit2 on.
    pub token: Address,
    /// The amount approved.
    pub approved: U256,
    /// Its hash.
    pub hash: TxHash,
    /// The payer's nonce it uses.
    pub nonce: u64,
    /// Its gas limit.
    pub gas_limit: u64,
    /// Its max fee per gas (legacy: gas price).
    pub max_fee_per_gas: u128,
    /// The bytes to broadcast.
    pub raw: Bytes,
}

impl Erc20ApprovalGasSponsoring {
    /// The approval in `extensions`, if the payload carries one with `info`. An `info` without
    /// every field is none: it is the server's declaration echoed back, which the official
    /// facilitator ignores too. Present but malformed is
    /// [`Reason::Erc20ApprovalExtensionInvalid`].
    pub fn from_extensions(extensions: &Extensions) -> Result<Option<Self>, Reason> {
        let Some(info) = FilledInfo::of(
            extensions,
            ERC20_APPROVAL_GAS_SPONSORING,
            &[
                "from",
                "asset",
                "spender",
                "amount",
                "signedTransaction",
                "version",
            ],
            Reason::Erc20ApprovalExtensionInvalid,
        ) else {
            return Ok(None);
        };
        let amount = info.number("amount")?;
        let signed_transaction = info.text("signedTransaction")?;
        if !signed_transaction.starts_with("0x") || signed_transaction.len() < 4 {
            return Err(info.invalid());
        }
        let signed_transaction: Bytes = signed_transaction.parse().map_err(|_| info.invalid())?;
        info.version()?;
        Ok(Some(Self {
            from: info.address("from")?,
            asset: info.address("asset")?,
            spender: info.address("spender")?,
            amount,
            signed_transaction,
        }))
    }

    /// Every check that needs no node, for a payment by `payer` moving at most `moved` of
    /// `asset` on `chain_id`: the signed transaction, decoded, approves Permit2 on the token for
    /// `amount` (at least `moved`), is signed by the payer, and is one this facilitator relays.
    pub fn check(
        &self,
        payer: Address,
        asset: Address,
        chain_id: u64,
        moved: U256,
    ) -> Result<SignedApproval, Reason> {
        if self.from != payer {
            return Err(Reason::Erc20ApprovalFromMismatch);
        }
        if self.asset != asset {
            return Err(Reason::Erc20ApprovalAssetMismatch);
        }
        if self.spender != PERMIT2_ADDRESS {
            return Err(Reason::Erc20ApprovalSpenderNotPermit2);
        }
        let envelope = TxEnvelope::decode_2718_exact(&self.signed_transaction)
            .map_err(|_| Reason::Erc20ApprovalTxParseFailed)?;
        if envelope.to() != Some(asset) {
            return Err(Reason::Erc20ApprovalTxWrongTarget);
        }
        let input = envelope.input();
        if !input.starts_with(&IApprove::approveCall::SELECTOR) {
            return Err(Reason::Erc20ApprovalTxWrongSelector);
        }
        let call = IApprove::approveCall::abi_decode(input)
            .map_err(|_| Reason::Erc20ApprovalTxInvalidCalldata)?;
        if call.spender != PERMIT2_ADDRESS {
            return Err(Reason::Erc20ApprovalTxWrongSpender);
        }
        if call.amount != self.amount || call.amount < moved {
            return Err(Reason::Erc20ApprovalTxInvalidCalldata);
        }
        // Recovered as `SignerRecoverable::recover_signer` does (a high `s` is refused, as
        // EIP-2 makes nodes refuse it), without needing alloy's consensus crypto feature.
        let signature = envelope.signature();
        if signature.normalize_s().is_some() {
            return Err(Reason::Erc20ApprovalTxInvalidSignature);
        }
        let signer = signature
            .recover_address_from_prehash(&envelope.signature_hash())
            .map_err(|_| Reason::Erc20ApprovalTxInvalidSignature)?;
        if signer != payer {
            return Err(Reason::Erc20ApprovalTxSignerMismatch);
        }
        if envelope.chain_id() != Some(chain_id)
            || !envelope.value().is_zero()
            || envelope.is_eip4844()
            || envelope.is_eip7702()
        {
            return Err(Reason::Erc20ApprovalTxUnsupported);
        }
        Ok(SignedApproval {
            signer,
            token: asset,
            approved: call.amount,
            hash: *envelope.tx_hash(),
            nonce: envelope.nonce(),
            gas_limit: envelope.gas_limit(),
            max_fee_per_gas: envelope.max_fee_per_gas(),
            raw: self.signed_transaction.clone(),
        })
    }
}

impl SignedApproval {
    /// The approval a stored payment carries (already checked when it was verified), for
    /// reading the chain about it later; `None` when it carries none or it no longer decodes.
    #[must_use]
    pub fn in_payload(payload: &PaymentPayload) -> Option<Self> {
        let extension = Erc20ApprovalGasSponsoring::from_extensions(&payload.extensions).ok()??;
        let chain_id = payload.accepted.network.chain_id()?;
        extension
            .check(extension.from, extension.asset, chain_id, U256::ZERO)
            .ok()
    }

    /// The most the payer may need to hold to send it: gas limit × max fee.
    #[must_use]
    pub fn gas_cost(&self) -> U256 {
        U256::from(self.gas_limit) * U256::from(self.max_fee_per_gas)
    }

    /// Whether the chain would still take it: its nonce is the payer's next (at the latest
    /// block). Once the payer used the nonce otherwise, only the chain's allowance counts.
    pub async fn still_usable(&self, provider: &DynProvider) -> Result<bool, TransportError> {
        Ok(provider.get_transaction_count(self.signer).await? == self.nonce)
    }
}

/// The checks of `approval` against the node: its nonce is the payer's next one, its gas limit
/// and fees are sane for what the chain asks now (the facilitator funds them), and the approval
/// would not revert. `Ok(Err(refusal))` is a verdict; `Err` means the node could not be asked.
pub async fn check_on_chain(
    provider: &DynProvider,
    approval: &SignedApproval,
) -> Result<Result<(), Refusal>, TransportError> {
    let (next_nonce, block, tip) = tokio::try_join!(
        provider.get_transaction_count(approval.signer),
        provider.get_block_by_number(BlockNumberOrTag::Latest),
        provider.get_max_priority_fee_per_gas(),
    )?;
    if approval.nonce != next_nonce {
        return Ok(Err(Refusal {
            reason: Reason::Erc20ApprovalTxNonceMismatch,
            message: Some(format!(
                "the approval uses nonce {}, the payer's next nonce is {next_nonce}",
                approval.nonce
            )),
        }));
    }
    let base_fee = block
        .and_then(|block| block.header.base_fee_per_gas)
        .map_or(0, u128::from);
    let ceiling = (base_fee.saturating_add(tip))
        .saturating_mul(MAX_FEE_MULTIPLE)
        .max(MAX_FEE_CEILING_FLOOR);
    if approval.gas_limit > APPROVAL_GAS_LIMIT_MAX
        || approval.max_fee_per_gas < base_fee
        || approval.max_fee_per_gas > ceiling
    {
        return Ok(Err(Refusal {
            reason: Reason::Erc20ApprovalTxFeesOutOfRange,
            message: Some(format!(
                "gas limit {} (at most {APPROVAL_GAS_LIMIT_MAX}), max fee {} wei (between the \
                 base fee {base_fee} and {ceiling})",
                approval.gas_limit, approval.max_fee_per_gas
            )),
        }));
    }
    let calldata = IApprove::approveCall {
        spender: PERMIT2_ADDRESS,
        amount: approval.approved,
    }
    .abi_encode();
    let simulation = provider
        .call(
            TransactionRequest::default()
                .from(approval.signer)
                .to(approval.token)
                .gas_limit(approval.gas_limit)
                .input(TransactionInput::new(calldata.into())),
        )
        .await;
    Ok(match simulation {
        Ok(_) => Ok(()),
        Err(error) if error.as_error_resp().is_some() => Err(Refusal {
            reason: Reason::Erc20ApprovalTxFailed,
            message: Some(error.to_string()),
        }),
        Err(error) => return Err(error),
    })
}

#[cfg(test)]
mod tests;
