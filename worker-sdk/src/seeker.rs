//! Typed seeker client: discover workers, propose a contract, and execute it, paying the
//! gateway's x402 v2 challenge with an alloy signer.
//!
//! The gateway speaks plain x402 v2, so any standard client can pay it; this client exists so
//! that Rust seekers (and hiregate's own demo and tests) do not have to assemble the 402 → sign →
//! retry dance by hand, and so that a caller can resend one payment on purpose (duplicate and
//! replay tests need exactly that, which the standard clients never do).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use alloy::primitives::Address;
use alloy::signers::Signer;
use hiregate_payments::{
    AUTH_CAPTURE_SCHEME, AuthCaptureSignOptions, HeaderError, PaymentPayload, PaymentRequired,
    Permit2SignOptions, SettleResponse, SignError, decode_header, encode_header,
    permit2::METHOD_PERMIT2, sign_auth_capture_payment, sign_exact_payment, sign_permit2_payment,
};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use url::Url;

/// Header names of x402 v2 (HTTP names are case-insensitive; these are the spec's spelling).
pub const PAYMENT_REQUIRED_HEADER: &str = "PAYMENT-REQUIRED";
/// See [`PAYMENT_REQUIRED_HEADER`].
pub const PAYMENT_SIGNATURE_HEADER: &str = "PAYMENT-SIGNATURE";
/// See [`PAYMENT_REQUIRED_HEADER`].
pub const PAYMENT_RESPONSE_HEADER: &str = "PAYMENT-RESPONSE";

/// The signer a seeker pays with: any alloy signer (local key, hardware, remote).
pub type SeekerSigner = Arc<dyn Signer + Send + Sync>;

/// Why a seeker call failed.
#[derive(Debug, thiserror::Error)]
pub enum SeekerError {
    /// The gateway could not be reached or its answer could not be read.
    #[error("gateway request failed: {0}")]
    Transport(#[from] reqwest::Error),
    /// The gateway answered with a JSON error.
    #[error("gateway answered {status}: {code}: {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// Stable error code.
        code: String,
        /// Human-readable message.
        message: String,
        /// The whole error body.
        body: Value,
    },
    /// A 402 came without a readable `PAYMENT-REQUIRED` header.
    #[error("unreadable payment challenge: {0}")]
    Challenge(#[from] HeaderError),
    /// A 402 came without any `PAYMENT-REQUIRED` header.
    #[error("402 without a PAYMENT-REQUIRED header")]
    MissingChallenge,
    /// None of the offered ways to pay is `exact` or `auth-capture` on an EVM network.
    #[error("no payable offer in the challenge")]
    NoPayableOffer,
    /// Signing the payment failed.
    #[error("could not sign the payment: {0}")]
    Sign(#[from] SignError),
    /// A URL could not be built from the gateway base URL.
    #[error("bad URL: {0}")]
    Url(#[from] url::ParseError),
    /// The client was built without a wallet and was asked to pay.
    #[error("no wallet to pay with")]
    NoWallet,
}

/// Discovery filters of `GET /v1/workers`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DiscoveryFilter {
    /// Only workers offering this task type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_type: Option<String>,
    /// Only workers at or below this price (atomic units).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_price: Option<String>,
    /// Only healthy workers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
}

/// One task a listed worker offers.
#[derive(Debug, Clone, Deserialize)]
pub struct OfferedTask {
    /// Price in atomic units of the listing's asset.
    pub price: String,
    /// The JSON Schema every deliverable must satisfy.
    pub output_schema: Value,
}

/// A worker listing as seekers see it.
#[derive(Debug, Clone, Deserialize)]
pub struct WorkerSummary {
    /// Worker id (`wk_…`).
    pub id: String,
    /// `hire`, `wattswarm` or `superwire`.
    pub protocol: String,
    /// Payout address.
    pub pay_to: String,
    /// CAIP-2 network.
    pub network: String,
    /// Token contract.
    pub asset: String,
    /// Task type → price and output schema.
    pub tasks: std::collections::BTreeMap<String, OfferedTask>,
    /// `healthy` or `unhealthy`.
    pub health: String,
}

#[derive(Debug, Deserialize)]
struct DiscoveryPage {
    workers: Vec<WorkerSummary>,
}

/// A contract as the gateway returned it: the few fields a seeker acts on, plus the whole body.
#[derive(Debug, Clone)]
pub struct ContractView {
    /// Contract id (`ctr_…`).
    pub id: String,
    /// Lifecycle state (`offered`, `settled`, …).
    pub state: String,
    /// The whole JSON the gateway answered.
    pub body: Value,
}

impl ContractView {
    fn from_body(body: Value) -> Self {
        let field = |name: &str| {
            body.get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        Self {
            id: field("contract_id"),
            state: field("state"),
            body,
        }
    }
}

/// What one execute call ended in.
#[derive(Debug, Clone)]
pub struct ExecuteOutcome {
    /// HTTP status of the final answer (200 completed, 202 pending, 422 rejected, …).
    pub status: u16,
    /// Its JSON body (`Value::Null` when empty or not JSON).
    pub body: Value,
    /// The decoded `PAYMENT-RESPONSE`, present when the gateway settled.
    pub payment_response: Option<SettleResponse>,
    /// The payment this call sent, if it paid (resend it with
    /// [`SeekerClient::execute_with_payment`]).
    pub payment: Option<PaymentPayload>,
    /// The challenge this call answered, if the gateway asked for payment.
    pub challenge: Option<PaymentRequired>,
}

/// Filters of `GET /v1/contracts` (the caller's own contracts, newest first).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ContractFilter {
    /// Only contracts in this state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Only contracts with this worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// Created at or after this RFC 3339 time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_after: Option<String>,
    /// Created before this RFC 3339 time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_before: Option<String>,
    /// Page size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// One page of `GET /v1/contracts`.
#[derive(Debug, Clone, Deserialize)]
pub struct ContractPage {
    /// Contract views, newest first.
    pub contracts: Vec<Value>,
    /// Pass as `cursor` for the next page; `None` on the last page.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// A seeker's view of one gateway: its API key and, when it pays, the wallet it pays with.
#[derive(Clone)]
pub struct SeekerClient {
    http: reqwest::Client,
    base: Url,
    api_key: String,
    signer: Option<SeekerSigner>,
}

impl std::fmt::Debug for SeekerClient {
    // The API key is a credential: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeekerClient")
            .field("base", &self.base.as_str())
            .field("payer", &self.payer())
            .finish_non_exhaustive()
    }
}

impl SeekerClient {
    /// A client for the gateway at `base` (e.g. `http://127.0.0.1:8402/`, its default address).
    pub fn new(base: Url, api_key: impl Into<String>, signer: SeekerSigner) -> Self {
        Self {
            http: reqwest::Client::new(),
            base,
            api_key: api_key.into(),
            signer: Some(signer),
        }
    }

    /// A client that reads and proposes but cannot pay (discovery, contract views, disputes).
    pub fn without_wallet(base: Url, api_key: impl Into<String>) -> Self {
        Self {
            http: reqwest::Client::new(),
            base,
            api_key: api_key.into(),
            signer: None,
        }
    }

    /// Uses this HTTP client (timeouts, proxies) instead of a default one.
    #[must_use]
    pub fn with_http_client(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// The address this client pays from (`None` without a wallet).
    pub fn payer(&self) -> Option<Address> {
        self.signer.as_ref().map(|signer| signer.address())
    }

    /// `GET /v1/workers`: listed workers matching `filter` (first page).
    pub async fn discover(
        &self,
        filter: &DiscoveryFilter,
    ) -> Result<Vec<WorkerSummary>, SeekerError> {
        let response = self
            .http
            .get(self.base.join("v1/workers")?)
            .query(filter)
            .send()
            .await?;
        let page: DiscoveryPage = Self::json_or_error(response).await?;
        Ok(page.workers)
    }

    /// `POST /v1/contracts`: proposes a contract; the body is the gateway's proposal JSON
    /// (worker_id, task_type, input, verification, sla, retry_policy, …).
    pub async fn propose(&self, proposal: &Value) -> Result<ContractView, SeekerError> {
        let response = self
            .http
            .post(self.base.join("v1/contracts")?)
            .bearer_auth(&self.api_key)
            .json(proposal)
            .send()
            .await?;
        Ok(ContractView::from_body(
            Self::json_or_error(response).await?,
        ))
    }

    /// `GET /v1/contracts/{id}`.
    pub async fn contract(&self, contract_id: &str) -> Result<ContractView, SeekerError> {
        let response = self
            .http
            .get(self.contract_url(contract_id, "")?)
            .bearer_auth(&self.api_key)
            .send()
            .await?;
        Ok(ContractView::from_body(
            Self::json_or_error(response).await?,
        ))
    }

    /// `GET /v1/contracts?state=&worker_id=&created_after=&created_before=&limit=&cursor=`: one
    /// page of the caller's contracts, newest first.
    pub async fn contracts(&self, filter: &ContractFilter) -> Result<ContractPage, SeekerError> {
        let response = self
            .http
            .get(self.base.join("v1/contracts")?)
            .query(filter)
            .bearer_auth(&self.api_key)
            .send()
            .await?;
        Self::json_or_error(response).await
    }

    /// `POST /v1/contracts/{id}/disputes`: opens a dispute; the gateway's dispute JSON.
    pub async fn open_dispute(
        &self,
        contract_id: &str,
        reason: &str,
        claim: Option<&Value>,
    ) -> Result<Value, SeekerError> {
        let mut body = serde_json::json!({ "reason": reason });
        if let Some(claim) = claim {
            body["claim"] = claim.clone();
        }
        let response = self
            .http
            .post(self.contract_url(contract_id, "/disputes")?)
            .bearer_auth(&self.api_key)
            .json(&body)
            .send()
            .await?;
        Self::json_or_error(response).await
    }

    /// `POST /v1/contracts/{id}/execute`, paying the challenge if one comes: the first call
    /// goes without payment; a 402 is answered with a freshly signed payment of the scheme the
    /// contract's offer names (`exact`, or `auth-capture` for an escrowed contract).
    pub async fn execute(&self, contract_id: &str) -> Result<ExecuteOutcome, SeekerError> {
        let first = self.send_execute(contract_id, None).await?;
        if first.status() != StatusCode::PAYMENT_REQUIRED {
            return Self::outcome(first, None, None).await;
        }
        let challenge = Self::challenge_of(&first)?;
        let payment = self.sign_for(&challenge).await?;
        let paid = self.send_execute(contract_id, Some(&payment)).await?;
        Self::outcome(paid, Some(payment), Some(challenge)).await
    }

    /// Fetches the challenge of a contract (the 402) without paying it.
    pub async fn challenge(&self, contract_id: &str) -> Result<PaymentRequired, SeekerError> {
        let response = self.send_execute(contract_id, None).await?;
        if response.status() != StatusCode::PAYMENT_REQUIRED {
            return Err(Self::api_error(response).await);
        }
        Self::challenge_of(&response)
    }

    /// Signs a payment for the first `exact` or `auth-capture` offer of `challenge` on an EVM
    /// network, echoing its extensions. An `auth-capture` payment is signed as the official
    /// `@x402/evm` client signs it, for the escrow the offer names (the canonical v1.0 one).
    pub async fn sign_for(
        &self,
        challenge: &PaymentRequired,
    ) -> Result<PaymentPayload, SeekerError> {
        let offer = challenge
            .accepts
            .iter()
            .find(|offer| {
                (offer.scheme == "exact" || offer.scheme == AUTH_CAPTURE_SCHEME)
                    && offer.network.as_str().starts_with("eip155:")
            })
            .ok_or(SeekerError::NoPayableOffer)?;
        let signer = self.signer.as_deref().ok_or(SeekerError::NoWallet)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_secs())
            .unwrap_or_default();
        let resource = Some(challenge.resource.clone());
        let mut payment = if offer.scheme == AUTH_CAPTURE_SCHEME {
            sign_auth_capture_payment(
                signer,
                offer,
                resource,
                now,
                &AuthCaptureSignOptions::default(),
            )
            .await?
        } else if offer.asset_transfer_method() == METHOD_PERMIT2 {
            // Any ERC-20: the wallet must have approved Permit2 on the token once.
            sign_permit2_payment(signer, offer, resource, now, &Permit2SignOptions::default())
                .await?
        } else {
            sign_exact_payment(signer, offer, resource, now).await?
        };
        payment.extensions = challenge.extensions.clone();
        Ok(payment)
    }

    /// Sends `payment` as the `PAYMENT-SIGNATURE` of an execute, as it is: for resending a
    /// payment on purpose (idempotency, replay), or a payment built elsewhere.
    pub async fn execute_with_payment(
        &self,
        contract_id: &str,
        payment: &PaymentPayload,
    ) -> Result<ExecuteOutcome, SeekerError> {
        let response = self.send_execute(contract_id, Some(payment)).await?;
        Self::outcome(response, Some(payment.clone()), None).await
    }

    async fn send_execute(
        &self,
        contract_id: &str,
        payment: Option<&PaymentPayload>,
    ) -> Result<reqwest::Response, SeekerError> {
        let mut request = self
            .http
            .post(self.contract_url(contract_id, "/execute")?)
            .bearer_auth(&self.api_key);
        if let Some(payment) = payment {
            request = request.header(PAYMENT_SIGNATURE_HEADER, encode_header(payment));
        }
        Ok(request.send().await?)
    }

    fn contract_url(&self, contract_id: &str, suffix: &str) -> Result<Url, SeekerError> {
        // The id goes through `join` as one path segment; ids are `ctr_` + ULID, so nothing in
        // them needs escaping, and anything else is refused by the gateway as not found.
        Ok(self
            .base
            .join(&format!("v1/contracts/{contract_id}{suffix}"))?)
    }

    fn challenge_of(response: &reqwest::Response) -> Result<PaymentRequired, SeekerError> {
        let header = response
            .headers()
            .get(PAYMENT_REQUIRED_HEADER)
            .and_then(|value| value.to_str().ok())
            .ok_or(SeekerError::MissingChallenge)?;
        Ok(decode_header(header)?)
    }

    async fn outcome(
        response: reqwest::Response,
        payment: Option<PaymentPayload>,
        challenge: Option<PaymentRequired>,
    ) -> Result<ExecuteOutcome, SeekerError> {
        let status = response.status().as_u16();
        let payment_response = match response
            .headers()
            .get(PAYMENT_RESPONSE_HEADER)
            .and_then(|value| value.to_str().ok())
        {
            Some(header) => Some(decode_header::<SettleResponse>(header)?),
            None => None,
        };
        let body = response.bytes().await?;
        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
        Ok(ExecuteOutcome {
            status,
            body,
            payment_response,
            payment,
            challenge,
        })
    }

    async fn json_or_error<T: serde::de::DeserializeOwned>(
        response: reqwest::Response,
    ) -> Result<T, SeekerError> {
        if !response.status().is_success() {
            return Err(Self::api_error(response).await);
        }
        Ok(response.json().await?)
    }

    async fn api_error(response: reqwest::Response) -> SeekerError {
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let field = |name: &str| {
            body.pointer(&format!("/error/{name}"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        SeekerError::Api {
            status,
            code: field("code"),
            message: field("message"),
            body: body.clone(),
        }
    }
}
