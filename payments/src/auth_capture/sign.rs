//! Client side of `auth-capture` with ERC-3009, as the official `@x402/evm`
//! `AuthCaptureEvmScheme` builds it: a fresh salt, the PaymentInfo with `preApprovalExpiry =
//! now + maxTimeoutSeconds`, its payer-agnostic hash as the nonce, and a
//! `ReceiveWithAuthorization` to the token collector, valid from 0.

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::signers::Signer;
use alloy::sol_types::Eip712Domain;

use super::payment_info::{PaymentInfo, u48, u120};
use super::{
    AUTH_CAPTURE_SCHEME, AuthCaptureExtra, AuthCapturePayload, EscrowAddresses, METHOD_EIP3009,
    receive_signing_hash,
};
use crate::exact::Eip3009Authorization;
use crate::exact::sign::SignError;
use crate::reason::Reason;
use crate::wire::{
    Extensions, PaymentPayload, PaymentRequirements, ResourceInfo, UnknownFields, X402Version2,
};

/// Choices a caller may override; the defaults are the official client's.
#[derive(Debug, Clone, Default)]
pub struct AuthCaptureSignOptions {
    /// The salt (with a bound salt, v1.1: the `saltNonce` inside it); `None` draws 32 bytes from
    /// the OS-seeded CSPRNG.
    pub salt: Option<B256>,
    /// The escrow deployment; `None` takes `extra.authCaptureEscrow` if it names the v1.0
    /// escrow, else the canonical v1.0 deployment. Set it for a deployment elsewhere.
    pub addresses: Option<EscrowAddresses>,
}

/// Signs an `auth-capture` payment of exactly `requirements.amount`, valid from 0 until
/// `now + maxTimeoutSeconds`.
pub async fn sign_auth_capture_payment<S>(
    signer: &S,
    requirements: &PaymentRequirements,
    resource: Option<ResourceInfo>,
    now: u64,
    options: &AuthCaptureSignOptions,
) -> Result<PaymentPayload, SignError>
where
    S: Signer + Send + Sync + ?Sized,
{
    let refuse = SignError::Requirements;
    if requirements.scheme != AUTH_CAPTURE_SCHEME {
        return Err(refuse(Reason::InvalidScheme));
    }
    let chain_id = requirements
        .network
        .chain_id()
        .ok_or(refuse(Reason::InvalidNetwork))?;
    let extra = AuthCaptureExtra::from_requirements(requirements).map_err(refuse)?;
    if extra.asset_transfer_method != METHOD_EIP3009 {
        return Err(refuse(Reason::UnsupportedAssetTransferMethod));
    }
    let addresses = match options.addresses {
        Some(addresses) => addresses,
        None => {
            let default = EscrowAddresses::default();
            match extra.auth_capture_escrow {
                Some(named) if named != default.escrow => {
                    return Err(refuse(Reason::InvalidAuthCaptureExtra));
                }
                _ => default,
            }
        }
    };
    let asset = requirements.evm_asset().map_err(refuse)?;
    let receiver = requirements.evm_pay_to().map_err(refuse)?;
    let max_amount = u120(requirements.amount.get()).ok_or(refuse(Reason::AmountOverflow))?;
    let payer: Address = signer.address();
    let pre_approval_expiry = now.saturating_add(requirements.max_timeout_seconds);
    let fresh = options
        .salt
        .unwrap_or_else(|| B256::from(rand::random::<[u8; 32]>()));
    // v1.1: a non-zero receiver authorizer or policy binds the salt; the fresh bytes travel as
    // `saltNonce` beside the commitment.
    let (salt, salt_nonce) = if extra.salt_bound() {
        let salt = super::bound_salt(
            extra.receiver_authorizer.unwrap_or_default(),
            extra.policy.unwrap_or_default(),
            fresh,
        );
        (salt, Some(fresh))
    } else {
        (fresh, None)
    };
    let info = PaymentInfo {
        operator: extra.capture_authorizer,
        payer,
        receiver,
        token: asset,
        maxAmount: max_amount,
        preApprovalExpiry: u48(pre_approval_expiry),
        authorizationExpiry: u48(extra.capture_deadline),
        refundExpiry: u48(extra.refund_deadline),
        minFeeBps: extra.min_fee_bps,
        maxFeeBps: extra.max_fee_bps,
        feeReceiver: extra.fee_recipient,
        salt: U256::from_be_bytes(salt.0),
    };
    let authorization = Eip3009Authorization {
        from: payer,
        to: addresses.erc3009_collector,
        value: requirements.amount,
        valid_after: 0u64.into(),
        valid_before: pre_approval_expiry.into(),
        nonce: info.hash_payer_agnostic(chain_id, addresses.escrow),
    };
    let domain = Eip712Domain::new(
        Some(extra.domain.name.clone().into()),
        Some(extra.domain.version.clone().into()),
        Some(U256::from(chain_id)),
        Some(asset),
        None,
    );
    let signature = signer
        .sign_hash(&receive_signing_hash(&authorization, &domain))
        .await?;
    let payload = AuthCapturePayload {
        authorization,
        signature: Bytes::copy_from_slice(&signature.as_bytes()),
        salt,
        salt_nonce,
        unknown: UnknownFields::new(),
    };
    Ok(PaymentPayload {
        x402_version: X402Version2,
        resource,
        accepted: requirements.clone(),
        // Strings and maps only: always converts.
        payload: serde_json::to_value(&payload).expect("AuthCapturePayload converts to JSON"),
        extensions: Extensions::new(),
        unknown: UnknownFields::new(),
    })
}
