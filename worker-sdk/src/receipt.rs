//! Offline check of a gateway receipt: the signed statement of how a contract ended (terms
//! hash, payment, deliverable digests, policy and verifier result hashes, outcome, dispute
//! decision). Fetch the gateway's JWKS once (`/.well-known/jwks.json`) and keep it: receipts
//! signed by a rotated-out key still verify while that key is published.

pub use hiregate_contracts::receipt::{Receipt, ReceiptDispute, ReceiptError, ReceiptPayment};
use hiregate_contracts::token::Jwks;

/// Verifies `token` (a compact JWS, surrounding whitespace ignored) against `jwks`: EdDSA
/// signature by a published key, receipt `typ`, gateway issuer, terminal outcome.
pub fn verify_receipt(token: &str, jwks: &Jwks) -> Result<Receipt, ReceiptError> {
    hiregate_contracts::receipt::verify_receipt(token, jwks)
}
