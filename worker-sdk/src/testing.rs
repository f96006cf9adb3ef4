//! Test support: a stand-in for the gateway's token signer, so workers can be exercised
//! with real contract tokens without a running gateway.
//!
//! Uses `hiregate_contracts::token` exactly as the gateway does (Ed25519 [`KeyRing`], the
//! contract-token `typ` and claims); only the key lives here. Not for production use.

use chrono::Utc;
use hiregate_contracts::canonical::Digest;
use hiregate_contracts::id::SeekerId;
use hiregate_contracts::token::{
    CONTRACT_TOKEN_TYPE, ContractTokenClaims, GatewayKey, ISSUER, KeyRing, TokenError,
};
use serde::Serialize;
use serde_json::json;

use crate::gateway_auth::Jwks;
use crate::ids::{ContractId, WorkerId};

/// How long [`TestTokenIssuer::token_for`] tokens are valid.
const TOKEN_LIFETIME_S: i64 = 600;

/// Issues contract tokens like the gateway does, with a fresh random key.
#[derive(Debug)]
pub struct TestTokenIssuer {
    ring: KeyRing,
    worker: WorkerId,
}

impl TestTokenIssuer {
    /// An issuer with a random key published under key id `kid`, issuing tokens for a
    /// random worker id (see [`TestTokenIssuer::worker_id`]).
    ///
    /// # Errors
    /// [`TokenError::InvalidKeyId`] for a key id outside `[A-Za-z0-9._-]{1,64}`.
    pub fn new(kid: &str) -> Result<Self, TokenError> {
        Ok(Self {
            ring: KeyRing::new(GatewayKey::generate(kid.parse()?)?),
            worker: WorkerId::generate(),
        })
    }

    /// The worker id the tokens name.
    #[must_use]
    pub fn worker_id(&self) -> &WorkerId {
        &self.worker
    }

    /// The key set holding this issuer's public key.
    #[must_use]
    pub fn jwks(&self) -> Jwks {
        self.ring.jwks()
    }

    /// One key set holding the public keys of several issuers (key rotation).
    ///
    /// # Errors
    /// Only if the key sets cannot be re-serialised (not expected).
    pub fn jwks_of(issuers: &[&Self]) -> Result<Jwks, serde_json::Error> {
        let keys: Vec<_> = issuers
            .iter()
            .flat_map(|issuer| issuer.ring.jwks().keys().to_vec())
            .collect();
        serde_json::from_value(json!({ "keys": keys }))
    }

    /// A token for `contract_id` and this issuer's worker, valid for ten minutes.
    ///
    /// # Errors
    /// [`TokenError`] if signing fails (not expected).
    pub fn token_for(&self, contract_id: &ContractId) -> Result<String, TokenError> {
        self.token_for_worker(contract_id, &self.worker)
    }

    /// A token for `contract_id` naming `worker`.
    ///
    /// # Errors
    /// [`TokenError`] if signing fails (not expected).
    pub fn token_for_worker(
        &self,
        contract_id: &ContractId,
        worker: &WorkerId,
    ) -> Result<String, TokenError> {
        let now = Utc::now().timestamp();
        self.token_with_claims(&ContractTokenClaims {
            iss: ISSUER.to_owned(),
            sub: contract_id.clone(),
            iat: now,
            exp: now + TOKEN_LIFETIME_S,
            contract_id: contract_id.clone(),
            // Stands in for the terms hash; workers do not recompute it.
            terms_hash: Digest::of_bytes(contract_id.as_str().as_bytes()),
            seeker: SeekerId::generate(),
            worker: worker.clone(),
        })
    }

    /// A contract token with exactly these claims (to test expiry, missing claims…).
    ///
    /// # Errors
    /// [`TokenError`] if signing fails (not expected).
    pub fn token_with_claims<T: Serialize>(&self, claims: &T) -> Result<String, TokenError> {
        self.ring.sign_json(CONTRACT_TOKEN_TYPE, claims)
    }
}
