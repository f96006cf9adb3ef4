//! Facilitators: who verifies and settles payments.
//!
//! - [`Facilitator`]: the trait the gateway calls; verdicts are values, only an unknown
//!   outcome is an error. A replayed settle of a used authorization is refused
//!   (`invalid_exact_evm_nonce_already_used`), as in the reference facilitator.
//! - [`local::LocalFacilitator`]: in-process, on EVM chains through alloy and a relayer key.
//! - [`http_client::HttpFacilitatorClient`]: a remote facilitator by URL.
//! - [`server`]: the HTTP face of any facilitator (`POST /verify`, `POST /settle`,
//!   `GET /supported`, `GET /health`) and `server::serve` for `hiregate facilitator` (feature `server`).
//! - [`config`]: [`config::FacilitatorConfig`] for the local facilitator.
//! - [`turns`]: [`turns::KeyTurns`], how senders that share a key take turns (the gateway's
//!   instances on one PostgreSQL).

pub mod config;
pub mod http_client;
pub mod local;
pub(crate) mod relayer;
#[cfg(feature = "server")]
pub mod server;
pub mod turns;

use std::sync::Arc;
use std::time::Duration;

use alloy::primitives::TxHash;
use alloy::rpc::types::TransactionReceipt;
use async_trait::async_trait;

use crate::wire::{
    SettleRequest, SettleResponse, SupportedResponse, VerifyRequest, VerifyResponse,
};

/// Verifies and settles x402 payments.
///
/// A refused payment is `Ok` with `isValid: false` / `success: false` and a reason; `Err` is
/// reserved for "the outcome is unknown" (the facilitator could not be asked or did not answer
/// intelligibly), which a resource server must not treat as a refusal.
#[async_trait]
pub trait Facilitator: Send + Sync {
    /// Would this payment settle? Moves nothing.
    async fn verify(&self, request: &VerifyRequest) -> Result<VerifyResponse, FacilitatorError>;

    /// Moves the money, at most once per authorization, and answers `success: true` at most
    /// once per authorization, as the reference facilitator does: settling an authorization
    /// that is already used on chain (by an earlier settle, another facilitator, or a payer's
    /// cancellation) answers `success: false` with [`Reason::NonceAlreadyUsed`].
    ///
    /// Retrying after an unknown outcome or a [`Reason::SettlementPending`] answer is safe (it
    /// never transfers twice), but a refusal with a used nonce does not say whether the earlier
    /// attempt was the one that settled: the caller asks the chain
    /// ([`crate::exact::onchain::find_settlement`]).
    ///
    /// [`Reason::NonceAlreadyUsed`]: crate::Reason::NonceAlreadyUsed
    /// [`Reason::PaymentAlreadyCollected`]: crate::Reason::PaymentAlreadyCollected
    /// [`Reason::SettlementPending`]: crate::Reason::SettlementPending
    async fn settle(&self, request: &SettleRequest) -> Result<SettleResponse, FacilitatorError>;

    /// `request` will probably be settled within moments (its deliverable is being judged): a
    /// facilitator may start now what that settlement will ask of the chain, so that less of it
    /// is left for [`Self::settle`]. It moves nothing and decides nothing; `settle` may use a
    /// simulation made here, if it is recent (the local relayer's bound is 500 ms). Returns at
    /// once. No default: a wrapper must pass it on.
    fn prepare_settle(&self, request: &SettleRequest);

    /// The (version, scheme, network) kinds this facilitator handles.
    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError>;

    /// The receipt of `transaction`, one of this facilitator's own settlements, as the node
    /// answered it when it was mined: an in-process facilitator's caller can confirm the
    /// settlement on chain from it without asking the node for it again. `None` (always, from
    /// a remote facilitator) means "ask the node". No default: a wrapper must pass it on.
    fn mined_receipt(&self, transaction: TxHash) -> Option<Arc<TransactionReceipt>>;
}

/// A facilitator call whose outcome is not a verdict.
#[derive(Debug, thiserror::Error)]
pub enum FacilitatorError {
    /// Nobody knows whether the payment verified or settled: retry later, never treat as a
    /// refusal (the gateway answers 503).
    #[error("facilitator outcome unknown: {0}")]
    Unknown(#[from] UnknownOutcome),
}

/// Why a facilitator's outcome is unknown.
#[derive(Debug, thiserror::Error)]
pub enum UnknownOutcome {
    /// No answer within the configured time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Connection or protocol failure before an answer.
    #[error("transport failure")]
    Transport(#[source] reqwest::Error),
    /// `/supported` answered a status other than 2xx (it carries a list, not a verdict).
    #[error("facilitator answered unexpected status {status}")]
    UnexpectedStatus {
        /// HTTP status.
        status: u16,
    },
    /// The answer's body is not a verdict (or, for `/supported`, not a list), whatever its
    /// status: an HTML error page, `{"error": …}`, truncated JSON.
    #[error("facilitator's {status} body is not a verdict")]
    BadBody {
        /// HTTP status.
        status: u16,
        /// Why it did not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The answer's body exceeded the size the client reads.
    #[error("facilitator's {status} body exceeds {limit} bytes")]
    BodyTooLarge {
        /// HTTP status.
        status: u16,
        /// The limit in bytes.
        limit: usize,
    },
    /// The auth-header hook failed, so nothing was sent.
    #[error("auth header hook failed")]
    AuthHeaders(#[source] http_client::AuthHeaderError),
    /// The chain node could not be asked (local facilitator).
    #[error("chain RPC failed")]
    Rpc(#[source] alloy::transports::TransportError),
}

impl From<alloy::transports::TransportError> for FacilitatorError {
    fn from(error: alloy::transports::TransportError) -> Self {
        Self::Unknown(UnknownOutcome::Rpc(error))
    }
}
