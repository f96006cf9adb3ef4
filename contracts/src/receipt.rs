//! Receipts: the gateway's signed statement of how a contract ended.
//!
//! A receipt is a compact JWS (`typ` = [`RECEIPT_TOKEN_TYPE`]) over [`Receipt`], signed by the
//! gateway's [`KeyRing`](crate::token::KeyRing). It binds everything a party needs to argue about
//! the contract later without trusting the gateway's database: the terms hash, the payment
//! authorization that paid it (and the settlement transaction, if any), the digests of the
//! delivered bytes, the policy that judged them, the verifier's result hash, the outcome and any
//! dispute decision. Anyone holding the gateway's JWKS checks it offline with
//! [`verify_receipt`]; a key rotated out of signing still verifies its receipts for as long as
//! it is published.

use serde::{Deserialize, Serialize};

use crate::{
    canonical::Digest,
    id::ContractId,
    state::{ContractState, DisputeDecision},
    token::{ISSUER, Jwks, RECEIPT_TOKEN_TYPE, TokenError, verify_signed_json},
};

/// What a receipt states. Field names are the wire format; do not rename.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    /// Always [`ISSUER`].
    pub iss: String,
    /// The contract.
    pub sub: ContractId,
    /// When the receipt was issued, Unix seconds.
    pub iat: i64,
    /// Canonical hash of the signed terms.
    pub terms_hash: Digest,
    /// The terminal state the contract ended in.
    pub outcome: ContractState,
    /// The payment that paid the contract, if it was ever paid.
    pub payment: Option<ReceiptPayment>,
    /// `sha256:` digests of the stored deliverable document and evidence files, by position.
    pub deliverable_digests: Vec<Digest>,
    /// Hash of the verification policy that judged the delivery, if one was judged.
    pub policy_hash: Option<Digest>,
    /// The verifier's result hash (replaying the policy on the same bytes gives the same one).
    pub verifier_result_hash: Option<Digest>,
    /// `passed`, `failed` or `inconclusive`, if the delivery was judged.
    pub verification_status: Option<String>,
    /// How a dispute was decided, if there was one.
    pub dispute: Option<ReceiptDispute>,
}

/// The payment authorization a receipt binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptPayment {
    /// CAIP-2 network, e.g. `eip155:31337`.
    pub network: String,
    /// Token contract address.
    pub asset: String,
    /// Payer address.
    pub payer: String,
    /// EIP-3009 authorization nonce.
    pub nonce: String,
    /// Atomic units authorized, decimal.
    pub amount: String,
    /// Settlement transaction hash, if the payment was settled (or its settlement attempted).
    pub tx_hash: Option<String>,
}

/// A dispute decision a receipt binds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptDispute {
    /// Dispute id (`dsp_…`).
    pub dispute_id: String,
    /// Settle or void.
    pub decision: DisputeDecision,
    /// Who decided (`replay` or `admin:<id>`).
    pub decided_by: String,
    /// Why.
    pub reason: String,
}

/// Why a receipt did not verify.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    /// Signature, key, `typ` or JSON shape is wrong.
    #[error("receipt does not verify: {0}")]
    Token(#[from] TokenError),
    /// Signed by a key in the JWKS, but not issued by the gateway.
    #[error("receipt issuer is `{0}`, expected `{ISSUER}`")]
    WrongIssuer(String),
    /// A receipt is only issued for a contract that has ended.
    #[error("receipt outcome `{0}` is not a terminal state")]
    NotTerminal(ContractState),
}

/// Checks a receipt offline: EdDSA signature by a key in `jwks`, `typ`, issuer, and that the
/// outcome is terminal. Returns what it states.
pub fn verify_receipt(token: &str, jwks: &Jwks) -> Result<Receipt, ReceiptError> {
    let receipt: Receipt = verify_signed_json(token.trim(), jwks, RECEIPT_TOKEN_TYPE)?;
    if receipt.iss != ISSUER {
        return Err(ReceiptError::WrongIssuer(receipt.iss));
    }
    if !receipt.outcome.is_terminal() {
        return Err(ReceiptError::NotTerminal(receipt.outcome));
    }
    Ok(receipt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::{GatewayKey, KeyId, KeyRing};

    fn key(kid: &str, seed: u8) -> GatewayKey {
        GatewayKey::from_seed(kid.parse::<KeyId>().unwrap(), [seed; 32]).unwrap()
    }

    fn sample() -> Receipt {
        Receipt {
            iss: ISSUER.to_owned(),
            sub: "ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K".parse().unwrap(),
            iat: 1_790_000_000,
            terms_hash: Digest::of_bytes(b"terms"),
            outcome: ContractState::Settled,
            payment: Some(ReceiptPayment {
                network: "eip155:31337".to_owned(),
                asset: "0x5FbDB2315678afecb367f032d93F642f64180aa3".to_owned(),
                payer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".to_owned(),
                nonce: format!("0x{}", "ab".repeat(32)),
                amount: "10000".to_owned(),
                tx_hash: Some(format!("0x{}", "cd".repeat(32))),
            }),
            deliverable_digests: vec![Digest::of_bytes(b"deliverable")],
            policy_hash: Some(Digest::of_bytes(b"policy")),
            verifier_result_hash: Some(Digest::of_bytes(b"result")),
            verification_status: Some("passed".to_owned()),
            dispute: None,
        }
    }

    #[test]
    fn a_signed_receipt_verifies_and_round_trips() {
        let ring = KeyRing::new(key("k1", 1));
        let token = ring.sign_json(RECEIPT_TOKEN_TYPE, &sample()).unwrap();
        assert_eq!(verify_receipt(&token, &ring.jwks()).unwrap(), sample());
    }

    #[test]
    fn any_edited_byte_fails_verification() {
        let ring = KeyRing::new(key("k1", 1));
        let token = ring.sign_json(RECEIPT_TOKEN_TYPE, &sample()).unwrap();
        let jwks = ring.jwks();
        let mut failures = 0;
        for index in 0..token.len() {
            let mut bytes = token.clone().into_bytes();
            // Flip to a different base64url character (or a dot into a letter).
            bytes[index] = if bytes[index] == b'A' { b'B' } else { b'A' };
            let edited = String::from_utf8(bytes).unwrap();
            if edited == token {
                continue;
            }
            // Base64url's last character of a segment can carry unused low bits: flipping
            // only those decodes to the same bytes, so the claim must be "no edit verifies to
            // a different payload", and every edit of a used bit fails.
            match verify_receipt(&edited, &jwks) {
                Ok(receipt) => assert_eq!(receipt, sample(), "edit at {index} changed claims"),
                Err(_) => failures += 1,
            }
        }
        assert!(failures >= token.len() - 3, "{failures} of {}", token.len());
    }

    #[test]
    fn a_receipt_signed_by_a_rotated_key_verifies_until_that_key_is_retired() {
        let mut ring = KeyRing::new(key("old", 1));
        let token = ring.sign_json(RECEIPT_TOKEN_TYPE, &sample()).unwrap();
        ring.rotate(key("new", 2)).unwrap();
        assert_eq!(ring.active_kid().as_str(), "new");
        assert!(verify_receipt(&token, &ring.jwks()).is_ok());
        ring.retire(&"old".parse().unwrap()).unwrap();
        assert!(matches!(
            verify_receipt(&token, &ring.jwks()),
            Err(ReceiptError::Token(TokenError::UnknownKeyId(_)))
        ));
    }

    #[test]
    fn a_contract_token_or_a_non_terminal_outcome_is_not_a_receipt() {
        let ring = KeyRing::new(key("k1", 1));
        let wrong_type = ring
            .sign_json(crate::token::CONTRACT_TOKEN_TYPE, &sample())
            .unwrap();
        assert!(matches!(
            verify_receipt(&wrong_type, &ring.jwks()),
            Err(ReceiptError::Token(TokenError::WrongType { .. }))
        ));
        let mut open = sample();
        open.outcome = ContractState::Accepted;
        let token = ring.sign_json(RECEIPT_TOKEN_TYPE, &open).unwrap();
        assert!(matches!(
            verify_receipt(&token, &ring.jwks()),
            Err(ReceiptError::NotTerminal(ContractState::Accepted))
        ));
    }
}
