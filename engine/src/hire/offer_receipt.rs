//! The x402 `offer-receipt` extension on hiregate's answers (x402 spec
//! `extensions/extension-offer-and-receipt.md`, as `@x402/extensions` 2.27 signs and verifies
//! it), next to hiregate's own JWS receipts ([`super::receipts`]):
//!
//! - every 402 carries one signed offer per `accepts[]` entry in
//!   `extensions["offer-receipt"].info.offers` (the REST contract's, the stable resource's, and
//!   the same `PaymentRequired` over MCP and A2A);
//! - every settled paid answer's settlement response (`PAYMENT-RESPONSE`, MCP's
//!   `x402/payment-response`) carries a signed receipt in
//!   `extensions["offer-receipt"].info.receipt`. There is no `EXTENSION-RESPONSES` header on
//!   it: the x402 specs define that header for a facilitator's `/verify` and `/settle` answers
//!   only (`extensions/bazaar.md`; the HTTP transport names none), and the official resource
//!   server strips it from the buyer's `PAYMENT-RESPONSE`.
//!
//! Both are compact JWS (`EdDSA`), signed with the gateway's active key, the key of its JWS
//! receipts and contract tokens. The header's `kid` is a DID URL ([`OfferReceiptSigner::kid`]):
//! `did:web:<host>#<kid>` when the gateway is served over https (the domain's DID document at
//! `/.well-known/did.json` lists every published key, which binds them to the resources'
//! domain), else `did:key:z…` (did:web resolves over https only; the key is then read from the
//! identifier, and the DID document still lists it).
//!
//! Signed once per offer: a contract's offer at proposal, stored with it (so the offer cache
//! answers unpaid executes with bytes made once), the stable resource's with each fresh offer
//! (which it already signs per call). `validUntil` is the terms' offer expiry.
//!
//! A receipt names the settlement `transaction` (hiregate trades the spec's privacy-minimal
//! default for verifiability): its transfers are the settled amount, which for a metered
//! (`upto`) hire is the verified units' price, below the authorized maximum, and which the
//! settlement response's `amount` and hiregate's own receipt state too (the spec's receipt
//! payload has no amount field). `issuedAt` is when the settlement started, so a receipt is
//! made again identically (Ed25519 is deterministic, the payload canonical): a replayed paid
//! answer carries the same one.

use hiregate_contracts::{
    did::{did_key_url, did_web, ed25519_key_of_did_key, verify_ed25519},
    token::{Jwks, KeyRing},
};
use hiregate_payments::{
    PaymentRequired, SettleResponse,
    offer_receipt::{
        JwsParts, OFFER_RECEIPT, OfferPayload, OfferReceiptError, PAYLOAD_VERSION, ReceiptPayload,
        SignedArtifact, jws_artifact, jws_signing_input, offers_extension, receipt_extension,
        receipt_in,
    },
};
use hiregate_store::PaymentRecord;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use url::Url;

use super::HireService;

/// The JWS algorithm of the gateway's Ed25519 keys.
pub const JWS_ALGORITHM: &str = "EdDSA";

/// Signs offers and receipts with the active key of `keys`, naming it for `base_url`.
#[derive(Debug, Clone, Copy)]
pub struct OfferReceiptSigner<'a> {
    keys: &'a KeyRing,
    base_url: &'a Url,
}

impl<'a> OfferReceiptSigner<'a> {
    /// The signer of the gateway served at `base_url`.
    #[must_use]
    pub fn new(keys: &'a KeyRing, base_url: &'a Url) -> Self {
        Self { keys, base_url }
    }

    /// The JWS `kid`: `did:web:<host>#<kid>` over https, else the active key's `did:key`.
    #[must_use]
    pub fn kid(&self) -> String {
        match did_web(self.base_url) {
            Some(did) if self.base_url.scheme() == "https" => {
                format!("{did}#{}", self.keys.active_kid())
            }
            _ => did_key_url(&self.keys.active_key().public_key_bytes()),
        }
    }

    fn sign<P: Serialize>(&self, payload: &P, accept_index: Option<usize>) -> SignedArtifact {
        let input = jws_signing_input(JWS_ALGORITHM, &self.kid(), payload);
        let signature = self.keys.active_key().sign_bytes(input.as_bytes());
        jws_artifact(&input, &signature, accept_index)
    }

    /// Puts a signed offer of each `accepts[]` entry of `required` (for its `resource.url`,
    /// valid until `valid_until` Unix seconds) into its `extensions["offer-receipt"]`.
    pub fn sign_offers(&self, required: &mut PaymentRequired, valid_until: Option<u64>) {
        let offers: Vec<SignedArtifact> = required
            .accepts
            .iter()
            .enumerate()
            .map(|(index, requirements)| {
                let offer = OfferPayload::for_requirements(
                    &required.resource.url,
                    requirements,
                    valid_until,
                );
                self.sign(&offer, Some(index))
            })
            .collect();
        required
            .extensions
            .insert(OFFER_RECEIPT.to_owned(), offers_extension(&offers));
    }

    /// The signed receipt of a successful `settlement` of the resource at `resource_url`,
    /// issued at `issued_at` (Unix seconds); `None` for a failed one (receipts are only
    /// issued on success) or one that names no payer.
    #[must_use]
    pub fn receipt(
        &self,
        resource_url: &str,
        settlement: &SettleResponse,
        issued_at: u64,
    ) -> Option<SignedArtifact> {
        if !settlement.success {
            return None;
        }
        let receipt = ReceiptPayload {
            version: PAYLOAD_VERSION,
            network: settlement.network.clone(),
            resource_url: resource_url.to_owned(),
            payer: settlement.payer.clone()?,
            issued_at,
            transaction: Some(settlement.transaction.clone()).filter(|tx| !tx.is_empty()),
        };
        Some(self.sign(&receipt, None))
    }
}

/// Verifies a `jws` offer or receipt of the gateway at `base_url` publishing `jwks`: an
/// `EdDSA` signature by a published key, named by its `did:key` or by the gateway's `did:web`;
/// returns the payload (read strictly: unknown fields and other versions are refused).
pub fn verify_artifact<T: DeserializeOwned>(
    artifact: &SignedArtifact,
    jwks: &Jwks,
    base_url: &Url,
) -> Result<T, OfferReceiptError> {
    let parts = JwsParts::<T>::decode(artifact)?;
    if parts.alg != JWS_ALGORITHM {
        return Err(OfferReceiptError::Malformed(format!(
            "JWS algorithm {} is not {JWS_ALGORITHM}",
            parts.alg
        )));
    }
    let unknown = || OfferReceiptError::UnknownKey(parts.kid.clone());
    let public = if let Some(key) = ed25519_key_of_did_key(&parts.kid) {
        // Authorized only if the gateway publishes it.
        jwks.key_ids()
            .into_iter()
            .filter_map(|kid| jwks.ed25519_public_key(kid))
            .find(|published| *published == key)
            .ok_or_else(unknown)?
    } else {
        let (did, kid) = parts.kid.split_once('#').ok_or_else(unknown)?;
        if Some(did) != did_web(base_url).as_deref() {
            return Err(unknown());
        }
        jwks.ed25519_public_key(kid).ok_or_else(unknown)?
    };
    if verify_ed25519(&public, parts.signing_input.as_bytes(), &parts.signature) {
        Ok(parts.payload)
    } else {
        Err(OfferReceiptError::BadSignature)
    }
}

impl HireService {
    /// The gateway's offer and receipt signer.
    pub(crate) fn offer_receipt_signer(&self) -> OfferReceiptSigner<'_> {
        OfferReceiptSigner::new(&self.inner.keys, &self.inner.base_url)
    }

    /// The gateway's `did:web` DID document (`GET /.well-known/did.json`): every key of its
    /// JWKS; `None` when the public base URL has no host.
    pub fn did_document(&self) -> Option<Value> {
        let did = did_web(&self.inner.base_url)?;
        Some(hiregate_contracts::did::did_document(
            &did,
            &self.inner.keys.jwks(),
        ))
    }

    /// The x402 receipt of a settled contract (`GET /v1/contracts/{id}/receipt` shows it beside
    /// the gateway's JWS receipt): the one its paid answer carried. `None` before settlement,
    /// for other outcomes, and for a contract the caller may not see (the JWS receipt's
    /// lookup answers that).
    pub async fn x402_receipt_of_contract(
        &self,
        contract_id: &str,
    ) -> Result<Option<SignedArtifact>, super::error::HireError> {
        let store = &self.inner.store;
        let Some(contract) = store.get_contract(contract_id).await? else {
            return Ok(None);
        };
        if contract.state != hiregate_contracts::state::ContractState::Settled {
            return Ok(None);
        }
        let payment = store.payment_of_contract(contract_id).await?;
        let Some(settlement) = payment
            .as_ref()
            .and_then(|p| p.settle_response.clone())
            .and_then(|r| serde_json::from_value::<SettleResponse>(r).ok())
        else {
            return Ok(None);
        };
        let resource_url = contract
            .payment_offer
            .as_ref()
            .map(|offer| offer.payment_required.resource.url.clone())
            .unwrap_or_else(|| self.execute_url(contract_id));
        let settlement = self.with_x402_receipt(&resource_url, payment.as_ref(), settlement);
        Ok(receipt_in(&settlement.extensions).ok().flatten())
    }

    /// `settlement` of the contract offered at `resource_url` (paid by `payment`) with its
    /// signed x402 receipt.
    pub(crate) fn with_x402_receipt(
        &self,
        resource_url: &str,
        payment: Option<&PaymentRecord>,
        mut settlement: SettleResponse,
    ) -> SettleResponse {
        let Some(payment) = payment else {
            return settlement;
        };
        let issued_at = payment
            .settle_started_at
            .unwrap_or(payment.updated_at)
            .timestamp();
        if settlement.payer.is_none() {
            settlement.payer = Some(payment.payer.to_checksum(None));
        }
        if let Some(receipt) = self.offer_receipt_signer().receipt(
            resource_url,
            &settlement,
            u64::try_from(issued_at).unwrap_or_default(),
        ) {
            settlement
                .extensions
                .insert(OFFER_RECEIPT.to_owned(), receipt_extension(&receipt));
        }
        settlement
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::{Address, U256};
    use hiregate_contracts::token::GatewayKey;
    use hiregate_payments::{
        PaymentRequirements, ResourceInfo, TokenDomain,
        offer_receipt::offers_in,
        wire::{Extensions, Network, UnknownFields, X402Version2},
    };

    fn ring(kid: &str, seed: u8) -> KeyRing {
        KeyRing::new(GatewayKey::from_seed(kid.parse().unwrap(), [seed; 32]).unwrap())
    }

    fn challenge(resource: &str) -> PaymentRequired {
        PaymentRequired {
            x402_version: X402Version2,
            error: None,
            resource: ResourceInfo::new(resource),
            accepts: vec![PaymentRequirements::exact_evm(
                Network::eip155(31_337).unwrap(),
                U256::from(500_000u64),
                Address::repeat_byte(0xaa),
                Address::repeat_byte(0xbb),
                600,
                &TokenDomain {
                    name: "USD Coin".into(),
                    version: "2".into(),
                },
            )],
            extensions: Extensions::new(),
            unknown: UnknownFields::new(),
        }
    }

    fn settled(tx: &str) -> SettleResponse {
        let mut response = SettleResponse::settled(
            &Network::eip155(31_337).unwrap(),
            Address::repeat_byte(0xcc),
            tx,
        );
        response.amount = Some("400000".into());
        response
    }

    #[test]
    fn over_plain_http_the_kid_is_the_keys_did_key_and_over_https_the_gateways_did_web() {
        let keys = ring("hg-k1", 3);
        let http: Url = "http://127.0.0.1:4021/".parse().unwrap();
        let kid = OfferReceiptSigner::new(&keys, &http).kid();
        assert_eq!(
            ed25519_key_of_did_key(&kid),
            Some(keys.active_key().public_key_bytes())
        );
        let https: Url = "https://gw.example/".parse().unwrap();
        assert_eq!(
            OfferReceiptSigner::new(&keys, &https).kid(),
            "did:web:gw.example#hg-k1"
        );
    }

    #[test]
    fn signed_offers_verify_and_match_their_entry_and_a_tampered_one_does_not() {
        for base in ["http://127.0.0.1:4021/", "https://gw.example/"] {
            let base: Url = base.parse().unwrap();
            let keys = ring("hg-k1", 3);
            let signer = OfferReceiptSigner::new(&keys, &base);
            let mut required = challenge("https://gw.example/v1/contracts/ctr_1/execute");
            signer.sign_offers(&mut required, Some(1_900_000_000));
            let offers = offers_in(&required.extensions).unwrap();
            assert_eq!(offers.len(), 1);
            assert_eq!(offers[0].accept_index, Some(0));
            assert!(offers[0].payload.is_none(), "JWS carries its payload");
            let offer: OfferPayload = verify_artifact(&offers[0], &keys.jwks(), &base).unwrap();
            assert!(offer.matches(&required.accepts[0]));
            assert_eq!(offer.resource_url, required.resource.url);
            assert_eq!(offer.valid_until, Some(1_900_000_000));

            // The payload changed after signing (a cheaper amount): the signature fails.
            let mut tampered = offers[0].clone();
            let mut parts: Vec<String> = tampered.signature.split('.').map(str::to_owned).collect();
            let cheaper = OfferPayload {
                amount: "1".into(),
                ..offer.clone()
            };
            let input = jws_signing_input(JWS_ALGORITHM, "x", &cheaper);
            parts[1] = input.split('.').nth(1).unwrap().to_owned();
            tampered.signature = parts.join(".");
            assert_eq!(
                verify_artifact::<OfferPayload>(&tampered, &keys.jwks(), &base).unwrap_err(),
                OfferReceiptError::BadSignature
            );

            // Signed by a key the gateway does not publish: refused whatever it names.
            let stranger = ring("hg-k1", 9);
            let mut forged = challenge("https://gw.example/v1/contracts/ctr_1/execute");
            OfferReceiptSigner::new(&stranger, &base).sign_offers(&mut forged, None);
            let forged = offers_in(&forged.extensions).unwrap();
            assert!(verify_artifact::<OfferPayload>(&forged[0], &keys.jwks(), &base).is_err());
        }
    }

    #[test]
    fn a_receipt_binds_payer_network_resource_and_transaction_and_only_on_success() {
        let base: Url = "http://127.0.0.1:4021/".parse().unwrap();
        let keys = ring("hg-k1", 3);
        let signer = OfferReceiptSigner::new(&keys, &base);
        let tx = format!("0x{}", "ab".repeat(32));
        let artifact = signer
            .receipt("http://127.0.0.1:4021/x402/r", &settled(&tx), 1_800_000_000)
            .unwrap();
        // The same inputs sign the same bytes: a replayed answer repeats its receipt.
        assert_eq!(
            signer.receipt("http://127.0.0.1:4021/x402/r", &settled(&tx), 1_800_000_000),
            Some(artifact.clone())
        );
        let mut settlement = settled(&tx);
        settlement
            .extensions
            .insert(OFFER_RECEIPT.into(), receipt_extension(&artifact));
        let read = receipt_in(&settlement.extensions).unwrap().unwrap();
        let receipt: ReceiptPayload = verify_artifact(&read, &keys.jwks(), &base).unwrap();
        assert_eq!(receipt.transaction.as_deref(), Some(tx.as_str()));
        assert_eq!(receipt.payer, Address::repeat_byte(0xcc).to_checksum(None));
        assert_eq!(receipt.network, "eip155:31337");
        assert_eq!(receipt.issued_at, 1_800_000_000);

        // Another transaction spliced into the payload does not verify.
        let other = ReceiptPayload {
            transaction: Some(format!("0x{}", "cd".repeat(32))),
            ..receipt
        };
        let mut parts: Vec<String> = read.signature.split('.').map(str::to_owned).collect();
        parts[1] = jws_signing_input(JWS_ALGORITHM, "x", &other)
            .split('.')
            .nth(1)
            .unwrap()
            .to_owned();
        let spliced = SignedArtifact {
            signature: parts.join("."),
            ..read
        };
        assert_eq!(
            verify_artifact::<ReceiptPayload>(&spliced, &keys.jwks(), &base).unwrap_err(),
            OfferReceiptError::BadSignature
        );

        let failed = SettleResponse::failed(
            "eip155:31337",
            hiregate_payments::Reason::InsufficientBalance,
            Some(Address::repeat_byte(0xcc)),
            None,
            None,
        );
        assert!(
            signer
                .receipt("http://127.0.0.1:4021/x402/r", &failed, 1)
                .is_none()
        );
    }
}
