//! Client side of `exact`: sign an EIP-3009 `TransferWithAuthorization` for a requirement.

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::signers::Signer;

use super::{Eip3009Authorization, ExactEvmPayload, token_eip712_domain};
use crate::reason::Reason;
use crate::wire::{
    EXACT_SCHEME, Extensions, PaymentPayload, PaymentRequirements, ResourceInfo, UnknownFields,
    X402Version2,
};

/// Choices a caller may override when signing; the defaults are what the reference client does.
#[derive(Debug, Clone, Default)]
pub struct SignOptions {
    /// The paying account when it is not the signer itself: a contract wallet (EIP-1271) whose
    /// owner signs. `None` pays from the signer's address.
    pub payer: Option<Address>,
    /// `validAfter` in unix seconds; `None` means 0, as the current TS and Python clients send.
    pub valid_after: Option<u64>,
    /// The EIP-3009 nonce; `None` draws 32 bytes from the OS-seeded CSPRNG.
    pub nonce: Option<B256>,
}

/// Why a payment could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// The requirements cannot be paid with EIP-3009 `exact` (wrong scheme, non-EVM network,
    /// bad address, missing `extra.name`/`extra.version`).
    #[error("requirements cannot be paid with exact/EIP-3009: {0}")]
    Requirements(Reason),
    /// The signer failed.
    #[error("signer failed")]
    Signer(#[from] alloy::signers::Error),
}

/// Signs a payment of exactly `requirements.amount` to `requirements.payTo`, valid from 0 until
/// `now + maxTimeoutSeconds`, with a fresh random nonce.
///
/// The result has no extensions; a client echoing the server's extensions copies
/// `PaymentRequired.extensions` into it.
pub async fn sign_exact_payment<S>(
    signer: &S,
    requirements: &PaymentRequirements,
    resource: Option<ResourceInfo>,
    now: u64,
) -> Result<PaymentPayload, SignError>
where
    S: Signer + Send + Sync + ?Sized,
{
    sign_exact_payment_with(signer, requirements, resource, now, &SignOptions::default()).await
}

/// [`sign_exact_payment`] with explicit [`SignOptions`].
pub async fn sign_exact_payment_with<S>(
    signer: &S,
    requirements: &PaymentRequirements,
    resource: Option<ResourceInfo>,
    now: u64,
    options: &SignOptions,
) -> Result<PaymentPayload, SignError>
where
    S: Signer + Send + Sync + ?Sized,
{
    if requirements.scheme != EXACT_SCHEME {
        return Err(SignError::Requirements(Reason::InvalidScheme));
    }
    let domain = token_eip712_domain(requirements).map_err(SignError::Requirements)?;
    let to = requirements.evm_pay_to().map_err(SignError::Requirements)?;
    let authorization = Eip3009Authorization {
        from: options.payer.unwrap_or_else(|| signer.address()),
        to,
        value: requirements.amount,
        valid_after: options.valid_after.unwrap_or(0).into(),
        valid_before: (U256::from(now) + U256::from(requirements.max_timeout_seconds)).into(),
        nonce: options
            .nonce
            .unwrap_or_else(|| B256::from(rand::random::<[u8; 32]>())),
    };
    let signature = signer
        .sign_hash(&authorization.signing_hash(&domain))
        .await?;
    let exact = ExactEvmPayload {
        signature: Bytes::copy_from_slice(&signature.as_bytes()),
        authorization,
        unknown: UnknownFields::new(),
    };
    Ok(PaymentPayload {
        x402_version: X402Version2,
        resource,
        accepted: requirements.clone(),
        // An ExactEvmPayload holds only strings and maps, which always convert to a JSON value.
        payload: serde_json::to_value(&exact).expect("ExactEvmPayload converts to JSON"),
        extensions: Extensions::new(),
        unknown: UnknownFields::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exact::{ExactPayment, precheck};
    use crate::wire::{Network, TokenDomain};
    use alloy::primitives::{Signature, address};
    use alloy::signers::local::PrivateKeySigner;

    const NOW: u64 = 1_750_000_000;

    fn requirements() -> PaymentRequirements {
        PaymentRequirements::exact_evm(
            Network::eip155(31337).unwrap(),
            U256::from(1_500_000u64),
            address!("5FbDB2315678afecb367f032d93F642f64180aa3"),
            address!("70997970C51812dc3A010C7d01b50e0d17dc79C8"),
            120,
            &TokenDomain {
                name: "Hiregate Devnet USD".into(),
                version: "2".into(),
            },
        )
    }

    #[tokio::test]
    async fn signed_payment_recovers_to_the_signer_and_passes_precheck() {
        let signer = PrivateKeySigner::random();
        let requirements = requirements();
        let resource = ResourceInfo::new("https://gw.example/v1/contracts/c_1/execute");
        let payload = sign_exact_payment(&signer, &requirements, Some(resource.clone()), NOW)
            .await
            .unwrap();

        assert_eq!(payload.accepted, requirements);
        assert_eq!(payload.resource, Some(resource));
        assert_eq!(precheck(&payload, &requirements, NOW), Ok(()));

        let exact = ExactPayment::parse(&payload, &requirements).unwrap();
        let authorization = &exact.payload.authorization;
        assert_eq!(authorization.from, signer.address());
        assert_eq!(authorization.valid_after.get(), U256::ZERO);
        assert_eq!(authorization.valid_before.get(), U256::from(NOW + 120));
        assert_eq!(exact.payload.signature.len(), 65);
        let signature = Signature::from_raw(&exact.payload.signature).unwrap();
        let recovered = signature
            .recover_address_from_prehash(&exact.signing_hash())
            .unwrap();
        assert_eq!(recovered, signer.address());

        let wire = &payload.payload["authorization"];
        assert_eq!(wire["value"], "1500000");
        assert_eq!(wire["validAfter"], "0");
        assert!(wire["nonce"].as_str().unwrap().len() == 66);
    }

    #[tokio::test]
    async fn nonces_are_fresh_per_payment() {
        let signer = PrivateKeySigner::random();
        let a = sign_exact_payment(&signer, &requirements(), None, NOW)
            .await
            .unwrap();
        let b = sign_exact_payment(&signer, &requirements(), None, NOW)
            .await
            .unwrap();
        assert_ne!(
            a.payment_key().unwrap().nonce,
            b.payment_key().unwrap().nonce
        );
    }

    #[tokio::test]
    async fn refuses_requirements_it_cannot_pay() {
        let signer = PrivateKeySigner::random();
        let mut no_domain = requirements();
        no_domain.extra.clear();
        assert!(matches!(
            sign_exact_payment(&signer, &no_domain, None, NOW).await,
            Err(SignError::Requirements(Reason::MissingEip712Domain))
        ));
        let mut upto = requirements();
        upto.scheme = "upto".into();
        assert!(matches!(
            sign_exact_payment(&signer, &upto, None, NOW).await,
            Err(SignError::Requirements(Reason::InvalidScheme))
        ));
    }
}
