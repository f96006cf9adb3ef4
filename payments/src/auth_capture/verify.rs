//! The facilitator's side of `auth-capture` verification in the spec's order, and the
//! settlement call it sends.
//!
//! | step | where |
//! |---|---|
//! | 1–5, 8 | [`AuthCapturePayment::parse`] |
//! | 6, 7 | [`AuthCapturePayment::check_times`] |
//! | 10 | [`check_signature`]: ECDSA for an account without code, EIP-1271 otherwise |
//! | 11, 12 | [`AuthCapturePayment::check_amount_and_nonce`] |
//! | before 13 | `paymentState` (a collected PaymentInfo is `payment_already_collected`), payer balance |
//! | 13 | `eth_call` of `authorize` (or `charge` with `autoCapture`) from the relayer, reverts decoded by [`super::escrow::revert_reason`] |

use alloy::primitives::{Address, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::sol_types::SolCall;
use alloy::transports::TransportError;

use super::abi::{IAuthCaptureEscrow, IErc20Allowance};
use super::escrow::{escrow_not_deployed, payment_state, simulate};
use super::{AuthCapturePayment, Refusal};
use crate::exact::onchain::{ERC1271_MAGIC, IErc1271};
use crate::reason::Reason;

/// Step 10: the signature is the payer's, by ECDSA for an account without code or by the
/// wallet's `isValidSignature` (EIP-1271) for a contract.
pub async fn check_signature(
    provider: &DynProvider,
    payment: &AuthCapturePayment,
) -> Result<Result<(), Refusal>, TransportError> {
    if payment.signature_recovers() {
        return Ok(Ok(()));
    }
    let code = provider.get_code_at(payment.payer()).await?;
    if code.is_empty() {
        return Ok(Err(Reason::Signature.into()));
    }
    let call = IErc1271::isValidSignatureCall {
        hash: payment.signing_hash(),
        signature: payment.payload.signature.clone(),
    };
    let valid = match simulate(provider, Address::ZERO, payment.payer(), call.abi_encode()).await? {
        Ok(bytes) => {
            IErc1271::isValidSignatureCall::abi_decode_returns(&bytes).ok() == Some(ERC1271_MAGIC)
        }
        Err(_) => false,
    };
    Ok(if valid {
        Ok(())
    } else {
        Err(Reason::Signature.into())
    })
}

/// The escrow call that settles `payment`: `authorize`, or `charge` when the offer asks for it
/// (v1.0 `autoCapture: true`, v1.1 `paymentFlow: authorization`): with the server's completion
/// when the payload carries one, else of the full amount at `minFeeBps`
/// (taking `minFeeBps` to `feeRecipient`, or to the operator when the offer left the fee
/// receiver open).
#[must_use]
pub fn settlement_calldata(payment: &AuthCapturePayment) -> Vec<u8> {
    let info = payment.info.clone();
    let amount = info.max_amount();
    let collector = payment.addresses.erc3009_collector;
    let collector_data = payment.payload.signature.clone();
    if let Some(completion) = &payment.completion {
        return IAuthCaptureEscrow::chargeCall {
            paymentInfo: info,
            amount: completion.amount,
            tokenCollector: collector,
            collectorData: collector_data,
            feeBps: completion.fee_bps,
            feeReceiver: completion.fee_receiver,
        }
        .abi_encode();
    }
    if payment.extra.settles_by_charge() {
        let fee_receiver = if info.feeReceiver == Address::ZERO {
            info.operator
        } else {
            info.feeReceiver
        };
        IAuthCaptureEscrow::chargeCall {
            feeBps: info.minFeeBps,
            feeReceiver: fee_receiver,
            paymentInfo: info,
            amount,
            tokenCollector: collector,
            collectorData: collector_data,
        }
        .abi_encode()
    } else {
        IAuthCaptureEscrow::authorizeCall {
            paymentInfo: info,
            amount,
            tokenCollector: collector,
            collectorData: collector_data,
        }
        .abi_encode()
    }
}

/// Steps 10–13 for a payment that passed [`AuthCapturePayment::parse`] and
/// [`AuthCapturePayment::check_times`], simulated as sent by `relayer` (which must be the
/// offer's `captureAuthorizer`, else `invalid_capture_authorizer`).
///
/// `Ok(Err(refusal))` is a verdict; `Err` means the node could not be asked.
pub async fn verify_onchain(
    provider: &DynProvider,
    relayer: Address,
    payment: &AuthCapturePayment,
) -> Result<Result<(), Refusal>, TransportError> {
    if let Err(refusal) = check_signature(provider, payment).await? {
        return Ok(Err(refusal));
    }
    if let Some(completion) = &payment.completion
        && let Err(refusal) = completion.check(payment)
    {
        return Ok(Err(refusal));
    }
    if let Err(reason) = payment.check_amount_and_nonce() {
        // The commonest cause in practice: the official client signs for the v1.1 escrow
        // unless the offer names one.
        let hint = (reason == Reason::NonceMismatch && payment.extra.auth_capture_escrow.is_none())
            .then(|| {
                format!(
                    "offer names no authCaptureEscrow; clients may have signed for another \
                     deployment than {}",
                    payment.addresses.escrow
                )
            });
        return Ok(Err(Refusal {
            reason,
            message: hint,
        }));
    }
    let escrow = payment.addresses.escrow;
    if provider.get_code_at(escrow).await?.is_empty() {
        return Ok(Err(escrow_not_deployed(escrow)));
    }
    let state = payment_state(provider, escrow, payment.payment_hash()).await?;
    if state.has_collected_payment {
        return Ok(Err(Reason::PaymentAlreadyCollected.into()));
    }
    let balance_call = IErc20Allowance::balanceOfCall {
        account: payment.payer(),
    };
    let balance = match simulate(
        provider,
        Address::ZERO,
        payment.info.token,
        balance_call.abi_encode(),
    )
    .await?
    {
        Ok(bytes) => IErc20Allowance::balanceOfCall::abi_decode_returns(&bytes).ok(),
        Err(_) => None,
    };
    match balance {
        None => return Ok(Err(Reason::Eip3009NotSupported.into())),
        Some(balance) if balance < U256::from(payment.info.maxAmount) => {
            return Ok(Err(Reason::InsufficientBalance.into()));
        }
        Some(_) => {}
    }
    Ok(
        simulate(provider, relayer, escrow, settlement_calldata(payment))
            .await?
            .map(|_| ()),
    )
}
