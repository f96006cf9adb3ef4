//! The client side of Permit2 payments, as the official `@x402/evm` 2.27 client builds them: a
//! random 256-bit nonce, `validAfter` 0, `deadline = now + maxTimeoutSeconds`, the scheme's
//! proxy as spender, the witness `to = payTo` (and for `upto`, `facilitator =
//! extra.facilitatorAddress`); and, for the `eip2612GasSponsoring` extension, the EIP-2612
//! permit approving Permit2 for the payment's amount.

use alloy::primitives::{Address, Bytes, U256};
use alloy::signers::Signer;
use alloy::sol_types::{Eip712Domain, SolStruct};
use serde_json::json;

use super::extension::EIP2612_GAS_SPONSORING;
use super::{
    METHOD_PERMIT2, PERMIT2_ADDRESS, Permit2Authorization, Permit2Payload, Permit2Scheme,
    Permit2Witness, Permitted,
};
use crate::exact::sign::SignError;
use crate::reason::Reason;
use crate::wire::{
    Extensions, PaymentPayload, PaymentRequirements, ResourceInfo, TokenDomain, UnknownFields,
    X402Version2,
};

alloy::sol! {
    /// EIP-2612's typed-data struct.
    #[derive(Debug)]
    struct Permit {
        address owner;
        address spender;
        uint256 value;
        uint256 nonce;
        uint256 deadline;
    }
}

/// Choices a caller may override; the defaults are the official client's.
#[derive(Debug, Clone, Default)]
pub struct Permit2SignOptions {
    /// The Permit2 nonce; `None` draws 256 random bits.
    pub nonce: Option<U256>,
    /// `witness.validAfter`; `None` is 0.
    pub valid_after: Option<u64>,
}

/// Signs a Permit2 payment for `requirements` (`exact` with `assetTransferMethod: "permit2"`, or
/// `upto`), valid from `validAfter` until `now + maxTimeoutSeconds`.
pub async fn sign_permit2_payment<S>(
    signer: &S,
    requirements: &PaymentRequirements,
    resource: Option<ResourceInfo>,
    now: u64,
    options: &Permit2SignOptions,
) -> Result<PaymentPayload, SignError>
where
    S: Signer + Send + Sync + ?Sized,
{
    let refuse = SignError::Requirements;
    let scheme =
        Permit2Scheme::of_scheme(&requirements.scheme).ok_or(refuse(Reason::InvalidScheme))?;
    if scheme == Permit2Scheme::Exact && requirements.asset_transfer_method() != METHOD_PERMIT2 {
        return Err(refuse(Reason::UnsupportedAssetTransferMethod));
    }
    let chain_id = requirements
        .network
        .chain_id()
        .ok_or(refuse(Reason::InvalidNetwork))?;
    let facilitator = match scheme {
        Permit2Scheme::Exact => None,
        Permit2Scheme::Upto => Some(requirements.upto_facilitator().map_err(refuse)?),
    };
    let authorization = Permit2Authorization {
        from: signer.address(),
        permitted: Permitted {
            token: requirements.evm_asset().map_err(refuse)?,
            amount: requirements.amount,
        },
        spender: scheme.proxy(),
        nonce: options
            .nonce
            .unwrap_or_else(|| U256::from_be_bytes(rand::random::<[u8; 32]>()))
            .into(),
        deadline: (U256::from(now) + U256::from(requirements.max_timeout_seconds)).into(),
        witness: Permit2Witness {
            to: requirements.evm_pay_to().map_err(refuse)?,
            facilitator,
            valid_after: options.valid_after.unwrap_or(0).into(),
        },
    };
    let hash = authorization
        .signing_hash(scheme, chain_id)
        .ok_or(refuse(Reason::InvalidPaymentRequirements))?;
    let signature = signer.sign_hash(&hash).await?;
    let permit2 = Permit2Payload {
        signature: Bytes::copy_from_slice(&signature.as_bytes()),
        permit2_authorization: authorization,
        unknown: UnknownFields::new(),
    };
    Ok(PaymentPayload {
        x402_version: X402Version2,
        resource,
        accepted: requirements.clone(),
        // Strings and maps only: always converts.
        payload: serde_json::to_value(&permit2).expect("Permit2Payload converts to JSON"),
        extensions: Extensions::new(),
        unknown: UnknownFields::new(),
    })
}

/// Signs the EIP-2612 permit approving Permit2 for `amount` of `token` (whose EIP-712 domain is
/// `domain` on `chain_id`), at the holder's EIP-2612 `nonce`, and adds it to `payload` as the
/// `eip2612GasSponsoring` extension, in the official client's shape.
#[allow(clippy::too_many_arguments)]
pub async fn add_eip2612_permit<S>(
    signer: &S,
    payload: &mut PaymentPayload,
    token: Address,
    domain: &TokenDomain,
    chain_id: u64,
    nonce: U256,
    deadline: u64,
    amount: U256,
) -> Result<(), SignError>
where
    S: Signer + Send + Sync + ?Sized,
{
    let owner = signer.address();
    let permit = Permit {
        owner,
        spender: PERMIT2_ADDRESS,
        value: amount,
        nonce,
        deadline: U256::from(deadline),
    };
    let domain = Eip712Domain::new(
        Some(domain.name.clone().into()),
        Some(domain.version.clone().into()),
        Some(U256::from(chain_id)),
        Some(token),
        None,
    );
    let signature = signer
        .sign_hash(&permit.eip712_signing_hash(&domain))
        .await?;
    payload.extensions.insert(
        EIP2612_GAS_SPONSORING.into(),
        json!({
            "info": {
                "from": owner.to_checksum(None),
                "asset": token.to_checksum(None),
                "spender": PERMIT2_ADDRESS.to_checksum(None),
                "amount": amount.to_string(),
                "nonce": nonce.to_string(),
                "deadline": deadline.to_string(),
                "signature": Bytes::copy_from_slice(&signature.as_bytes()).to_string(),
                "version": "1",
            }
        }),
    );
    Ok(())
}
