//! Sign-in-with-x (the x402 `sign-in-with-x` extension, CAIP-122 / EIP-4361): the wallet
//! seeker's second proof of its wallet, next to the per-contract capability token. A contract
//! hired over the stable x402 resource has no API-key seeker; its payer's wallet is the seeker
//! (see `hire::resource`). A `SIGN-IN-WITH-X` header proves that wallet on the read routes of
//! the contracts it paid for (`/v1/contracts/{id}`, its events, receipt, event log, disputes),
//! and lists them (`/v1/wallet/contracts`).
//!
//! ```text
//! SIGN-IN-WITH-X: base64(JSON proof) ──parse──► domain = this gateway's authority, uri on its
//!   origin, version 1, type eip191 on a configured eip155 chain, issuedAt within 5 minutes and
//!   not ahead, expirationTime ahead, notBefore passed ──► the EIP-4361 message rebuilt from the
//!   fields ──► EIP-191 ECDSA by `address`, else the wallet's EIP-1271 `isValidSignature` on
//!   that chain ──► the wallet (the extractor then matches it with the contract's payer and
//!   claims the nonce once, in the store)
//! ```
//!
//! Field names, the header name, the base64 JSON encoding and the message layout are those of
//! the official x402 SDK's implementation (Python `x402.extensions.sign_in_with_x`, whose
//! message is `signinwithethereum`'s `prepare_message`); refusal codes are its `invalid_siwx_*`
//! codes. Nothing of a proof is logged.

use alloy::primitives::{Address, Bytes, FixedBytes, eip191_hash_message};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::TransactionRequest;
use alloy::sol_types::SolCall;
use alloy::transports::TransportError;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use base64::Engine as _;
use chrono::{DateTime, Duration, SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use hiregate_engine::assets::AssetDirectory;

/// The request header carrying a proof (HTTP header names are case-insensitive; the spec
/// writes it `SIGN-IN-WITH-X`).
pub const HEADER: HeaderName = HeaderName::from_static("sign-in-with-x");
/// The key of the extension in a `PaymentRequired`'s `extensions`.
pub const EXTENSION_KEY: &str = "sign-in-with-x";
/// How old a proof's `issuedAt` may be (the spec's default).
pub const MAX_AGE_S: i64 = 300;
/// How far ahead of this instance's clock an `issuedAt` (or behind, a `notBefore`) may be:
/// instances and clients never share one clock exactly.
pub const CLOCK_SKEW_S: i64 = 30;
/// A proof is a few hundred bytes; anything far larger is not one.
const MAX_HEADER_BYTES: usize = 8 * 1024;
/// Bounds of a nonce (EIP-4361: at least 8 alphanumerics; the spec's are 32 hex).
const NONCE_CHARS: std::ops::RangeInclusive<usize> = 8..=128;

alloy::sol! {
    interface IErc1271Wallet {
        function isValidSignature(bytes32 hash, bytes signature) external view returns (bytes4);
    }
}

/// `isValidSignature`'s answer for a valid signature (EIP-1271).
const ERC1271_MAGIC: FixedBytes<4> = FixedBytes([0x16, 0x26, 0xba, 0x7e]);

/// Why a proof is refused: the answer's stable code and a message naming the field at fault
/// (never the signature or the message signed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// One of the SDK's `invalid_siwx_*` codes.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
}

fn refuse(code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

/// A proof whose signature is the wallet's and whose times and binding hold; its nonce is not
/// yet claimed.
#[derive(Debug, Clone)]
pub struct WalletProof {
    /// The wallet proven.
    pub address: Address,
    /// The nonce to claim once.
    pub nonce: String,
    /// Past this the proof is refused by its age anyway, so its nonce need not be kept longer.
    pub claim_until: DateTime<Utc>,
}

/// The header's JSON (camelCase, as the SDK's `SIWxPayload` dumps it by alias). Unknown
/// fields are ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Payload {
    domain: String,
    address: String,
    uri: String,
    version: String,
    chain_id: String,
    #[serde(rename = "type")]
    kind: String,
    nonce: String,
    issued_at: String,
    #[serde(default)]
    statement: Option<String>,
    #[serde(default)]
    expiration_time: Option<String>,
    #[serde(default)]
    not_before: Option<String>,
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    resources: Option<Vec<String>>,
    signature: String,
}

/// What a proof must be bound to: this gateway's public origin and its configured chains.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// The gateway's public base URL (`http.public_base_url`, or the bound address).
    pub base_url: &'a Url,
    /// The chains whose nodes are configured (`chains`), and so whose wallets can be judged.
    pub assets: &'a AssetDirectory,
}

impl Binding<'_> {
    /// `host[:port]`, as a proof's `domain` must name it (the port only when the URL has one).
    pub fn domain(&self) -> String {
        let host = self.base_url.host_str().unwrap_or_default();
        match self.base_url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        }
    }

    fn origin(&self) -> String {
        self.base_url.origin().ascii_serialization()
    }

    /// The `extensions["sign-in-with-x"]` of a challenge for `path`: a fresh nonce and times,
    /// this gateway's domain and the resource's URI, one `eip191` entry per configured chain.
    pub fn challenge(&self, path: &str, now: DateTime<Utc>) -> Value {
        let uri = format!("{}{path}", self.origin());
        let nonce = hex::encode(rand::random::<[u8; 16]>());
        let at = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        let chains: Vec<Value> = self
            .assets
            .chain_ids()
            .into_iter()
            .map(|id| json!({ "chainId": format!("eip155:{id}"), "type": "eip191" }))
            .collect();
        json!({
            "info": {
                "domain": self.domain(),
                "uri": uri,
                "version": "1",
                "nonce": nonce,
                "issuedAt": at(now),
                "expirationTime": at(now + Duration::seconds(MAX_AGE_S)),
                "statement": "Sign in to read the contracts this wallet paid for",
                "resources": [uri],
            },
            "supportedChains": chains,
            "schema": schema(),
        })
    }

    /// Judge the proof in `headers`: `None` without the header; `Err` only when the chain could
    /// not be asked about a contract wallet.
    pub async fn verify(
        &self,
        headers: &HeaderMap,
        now: DateTime<Utc>,
    ) -> Result<Option<Result<WalletProof, Refusal>>, TransportError> {
        let Some(value) = headers.get(HEADER) else {
            return Ok(None);
        };
        let (payload, chain_id, address) = match self.check_fields(value, now) {
            Ok(checked) => checked,
            Err(refusal) => return Ok(Some(Err(refusal))),
        };
        let Some(signature) = payload
            .signature
            .strip_prefix("0x")
            .and_then(|hex| hex::decode(hex).ok())
        else {
            return Ok(Some(Err(refuse(
                "invalid_siwx_malformed_signature",
                "signature: not 0x-prefixed hex",
            ))));
        };
        let message = siwe_message(&payload, chain_id);
        let signed = signature_recovers(&signature, &message, address)
            || match self.assets.chain(chain_id) {
                Some((provider, _)) => {
                    wallet_accepts(&provider, address, &message, &signature).await?
                }
                None => false,
            };
        if !signed {
            return Ok(Some(Err(refuse(
                "invalid_siwx_signature",
                "the signature is not the address's over the EIP-4361 message of these fields",
            ))));
        }
        let issued_at = parse_time(&payload.issued_at).unwrap_or(now);
        Ok(Some(Ok(WalletProof {
            address,
            nonce: payload.nonce,
            claim_until: issued_at + Duration::seconds(MAX_AGE_S + CLOCK_SKEW_S),
        })))
    }

    /// Every check but the signature's, in the SDK's order.
    fn check_fields(
        &self,
        value: &HeaderValue,
        now: DateTime<Utc>,
    ) -> Result<(Payload, u64, Address), Refusal> {
        let payload = decode(value)?;
        if payload.domain != self.domain() {
            return Err(refuse(
                "invalid_siwx_domain_mismatch",
                format!("domain: expected {:?}", self.domain()),
            ));
        }
        let uri_origin = Url::parse(&payload.uri)
            .ok()
            .map(|uri| uri.origin().ascii_serialization());
        if uri_origin.as_deref() != Some(self.origin().as_str()) {
            return Err(refuse(
                "invalid_siwx_uri_mismatch",
                format!("uri: expected a URL on {}", self.origin()),
            ));
        }
        if payload.version != "1" {
            return Err(refuse("invalid_siwx_version", "version: expected \"1\""));
        }
        let chain_id = payload
            .chain_id
            .strip_prefix("eip155:")
            .and_then(|id| id.parse::<u64>().ok())
            .ok_or_else(|| refuse("invalid_siwx_chain_id", "chainId: expected eip155:<number>"))?;
        if payload.kind != "eip191" || !self.assets.chain_ids().contains(&chain_id) {
            return Err(refuse(
                "invalid_siwx_unsupported_chain",
                "chainId/type: expected eip191 on a chain this gateway serves",
            ));
        }
        if !NONCE_CHARS.contains(&payload.nonce.len())
            || !payload.nonce.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(refuse(
                "invalid_siwx_nonce",
                "nonce: expected 8 to 128 alphanumeric characters",
            ));
        }
        let issued_at = parse_time(&payload.issued_at)
            .ok_or_else(|| refuse("invalid_siwx_issued_at", "issuedAt: not an RFC 3339 time"))?;
        if now - issued_at > Duration::seconds(MAX_AGE_S) {
            return Err(refuse(
                "invalid_siwx_issued_at_too_old",
                format!("issuedAt: older than {MAX_AGE_S} s"),
            ));
        }
        if issued_at - now > Duration::seconds(CLOCK_SKEW_S) {
            return Err(refuse(
                "invalid_siwx_issued_at_in_future",
                "issuedAt: in the future",
            ));
        }
        if let Some(expiration) = &payload.expiration_time {
            let expiration = parse_time(expiration).ok_or_else(|| {
                refuse(
                    "invalid_siwx_expiration_time",
                    "expirationTime: not an RFC 3339 time",
                )
            })?;
            if expiration <= now {
                return Err(refuse("invalid_siwx_expired", "expirationTime: passed"));
            }
        }
        if let Some(not_before) = &payload.not_before {
            let not_before = parse_time(not_before).ok_or_else(|| {
                refuse("invalid_siwx_not_before", "notBefore: not an RFC 3339 time")
            })?;
            if not_before - now > Duration::seconds(CLOCK_SKEW_S) {
                return Err(refuse(
                    "invalid_siwx_not_yet_valid",
                    "notBefore: not reached",
                ));
            }
        }
        let address = payload
            .address
            .parse::<Address>()
            .map_err(|_| refuse("invalid_siwx_header", "address: not an EVM address"))?;
        Ok((payload, chain_id, address))
    }
}

/// base64 (standard or URL-safe, padded or not) of the JSON proof.
fn decode(value: &HeaderValue) -> Result<Payload, Refusal> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
    let garbled = || {
        refuse(
            "invalid_siwx_header",
            "SIGN-IN-WITH-X: expected base64 of the JSON proof",
        )
    };
    if value.len() > MAX_HEADER_BYTES {
        return Err(garbled());
    }
    let text = value.to_str().map_err(|_| garbled())?.trim();
    let bytes = [STANDARD, URL_SAFE, STANDARD_NO_PAD, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .ok_or_else(garbled)?;
    serde_json::from_slice(&bytes).map_err(|error| {
        refuse(
            "invalid_siwx_header",
            format!("SIGN-IN-WITH-X: not a proof: {}", error.classify_message()),
        )
    })
}

/// What `serde_json` says is wrong, without the value (which may be part of a signature).
trait Classify {
    fn classify_message(&self) -> &'static str;
}

impl Classify for serde_json::Error {
    fn classify_message(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Data => "a required field is missing or of the wrong type",
            _ => "not JSON",
        }
    }
}

fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The EIP-4361 message of `payload`, laid out as `signinwithethereum`'s `prepare_message`
/// (and `siwe`'s `toMessage`) lay it out: the strings exactly as sent, a blank line for an
/// absent statement, `Resources:` whenever the list is present.
fn siwe_message(payload: &Payload, chain_id: u64) -> String {
    let mut message = format!(
        "{} wants you to sign in with your Ethereum account:\n{}\n\n",
        payload.domain, payload.address
    );
    match &payload.statement {
        Some(statement) => {
            message.push_str(statement);
            message.push_str("\n\n");
        }
        None => message.push('\n'),
    }
    message.push_str(&format!(
        "URI: {}\nVersion: {}\nChain ID: {chain_id}\nNonce: {}\nIssued At: {}",
        payload.uri, payload.version, payload.nonce, payload.issued_at
    ));
    if let Some(expiration) = &payload.expiration_time {
        message.push_str(&format!("\nExpiration Time: {expiration}"));
    }
    if let Some(not_before) = &payload.not_before {
        message.push_str(&format!("\nNot Before: {not_before}"));
    }
    if let Some(request_id) = &payload.request_id {
        message.push_str(&format!("\nRequest ID: {request_id}"));
    }
    if let Some(resources) = &payload.resources {
        message.push_str("\nResources:");
        for resource in resources {
            message.push_str(&format!("\n- {resource}"));
        }
    }
    message
}

/// EIP-191 `personal_sign` by an EOA: the 65-byte signature recovers `address`.
fn signature_recovers(signature: &[u8], message: &str, address: Address) -> bool {
    alloy::primitives::Signature::from_raw(signature)
        .ok()
        .and_then(|signature| signature.recover_address_from_msg(message).ok())
        == Some(address)
}

/// A contract wallet's verdict (EIP-1271) on the EIP-191 hash of `message`; `false` for an
/// account without code or a call that reverts.
async fn wallet_accepts(
    provider: &DynProvider,
    address: Address,
    message: &str,
    signature: &[u8],
) -> Result<bool, TransportError> {
    let code = provider.get_code_at(address).await?;
    if code.is_empty() {
        return Ok(false);
    }
    let call = IErc1271Wallet::isValidSignatureCall {
        hash: eip191_hash_message(message),
        signature: Bytes::copy_from_slice(signature),
    };
    let request = TransactionRequest::default()
        .to(address)
        .input(call.abi_encode().into());
    Ok(match provider.call(request).await {
        Ok(answer) => {
            IErc1271Wallet::isValidSignatureCall::abi_decode_returns(&answer).ok()
                == Some(ERC1271_MAGIC)
        }
        Err(alloy::transports::RpcError::ErrorResp(_)) => false,
        Err(error) => return Err(error),
    })
}

/// The spec's JSON Schema of a proof.
fn schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "domain": { "type": "string" },
            "address": { "type": "string" },
            "statement": { "type": "string" },
            "uri": { "type": "string", "format": "uri" },
            "version": { "type": "string" },
            "chainId": { "type": "string" },
            "type": { "type": "string" },
            "nonce": { "type": "string" },
            "issuedAt": { "type": "string", "format": "date-time" },
            "expirationTime": { "type": "string", "format": "date-time" },
            "notBefore": { "type": "string", "format": "date-time" },
            "requestId": { "type": "string" },
            "resources": { "type": "array", "items": { "type": "string", "format": "uri" } },
            "signature": { "type": "string" }
        },
        "required": [
            "domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt",
            "signature"
        ]
    })
}

/// The contract id a wallet proof is judged against: `{id}` of the parties' routes of a
/// contract (`/v1/contracts/{id}`, `/events`, `/events.jsonl`, `/receipt`, `/disputes`).
/// Other routes (a seeker key's, the admin's) take no wallet proof.
pub fn contract_of_path(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v1/contracts/")?;
    let (id, sub) = rest.split_once('/').unwrap_or((rest, ""));
    (!id.is_empty() && ["", "events", "events.jsonl", "receipt", "disputes"].contains(&sub))
        .then_some(id)
}

/// The signed-in wallet's own list of the contracts it paid for.
pub const WALLET_CONTRACTS_PATH: &str = "/v1/wallet/contracts";

/// Whether a wallet proof opens `path`: a contract's parties' route, or the wallet's list.
pub fn takes_wallet_proof(path: &str) -> bool {
    path == WALLET_CONTRACTS_PATH || contract_of_path(path).is_some()
}

/// Layer of the API router: a 401 of a route a wallet proof can open carries the extension's
/// challenge in `PAYMENT-REQUIRED` (an x402 v2 `PaymentRequired` with no `accepts`: nothing is
/// for sale, the wallet is asked to sign in), as the spec declares it in a 402's `extensions`.
///
/// A tower layer written by hand rather than `axum::middleware::from_fn`: every request passes
/// it and only the wallet routes look at their answer, so the others go straight to the route.
/// As `from_fn` it cloned the state, copied the path and boxed a clone of the route on every
/// request: 13 % of the server's samples of an unpaid 402 (perf, `benches/unpaid.rs`).
#[derive(Clone)]
pub struct DeclareLayer {
    state: crate::state::AppState,
}

impl DeclareLayer {
    /// The layer over `state`'s assets and base URL.
    pub fn new(state: crate::state::AppState) -> Self {
        Self { state }
    }
}

impl<S> tower::Layer<S> for DeclareLayer {
    type Service = Declare<S>;
    fn layer(&self, inner: S) -> Self::Service {
        Declare {
            inner,
            state: self.state.clone(),
        }
    }
}

/// See [`DeclareLayer`].
#[derive(Clone)]
pub struct Declare<S> {
    inner: S,
    state: crate::state::AppState,
}

impl std::fmt::Debug for DeclareLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeclareLayer").finish_non_exhaustive()
    }
}

impl<S> std::fmt::Debug for Declare<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Declare").finish_non_exhaustive()
    }
}

impl<S> tower::Service<axum::extract::Request> for Declare<S>
where
    S: tower::Service<
            axum::extract::Request,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        >,
    S::Future: Send + 'static,
{
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = futures::future::Either<
        S::Future,
        futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: axum::extract::Request) -> Self::Future {
        use futures::FutureExt as _;
        if !takes_wallet_proof(request.uri().path()) {
            return futures::future::Either::Left(self.inner.call(request));
        }
        let path = request.uri().path().to_owned();
        let state = self.state.clone();
        let answer = self.inner.call(request);
        futures::future::Either::Right(
            async move { Ok(declare(&state, &path, answer.await?)) }.boxed(),
        )
    }
}

/// `response` of the wallet route `path`, with the challenge when it is a 401.
fn declare(
    state: &crate::state::AppState,
    path: &str,
    mut response: axum::response::Response,
) -> axum::response::Response {
    if response.status() != axum::http::StatusCode::UNAUTHORIZED
        || state.assets.chain_ids().is_empty()
    {
        return response;
    }
    let binding = Binding {
        base_url: state.hire.base_url(),
        assets: &state.assets,
    };
    let uri = format!("{}{path}", binding.origin());
    let required = json!({
        "x402Version": 2,
        "error": "sign in with the wallet that paid for this contract, or send its capability token",
        "resource": { "url": uri, "description": "a contract's parties' route", "mimeType": "application/json" },
        "accepts": [],
        "extensions": { EXTENSION_KEY: binding.challenge(path, Utc::now()) },
    });
    let encoded = base64::engine::general_purpose::STANDARD.encode(required.to_string());
    if let Ok(value) = HeaderValue::from_str(&encoded) {
        response
            .headers_mut()
            .insert(HeaderName::from_static("payment-required"), value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(statement: Option<&str>, resources: Option<Vec<String>>) -> Payload {
        Payload {
            domain: "api.example.com".into(),
            address: "0x857b06519E91e3A54538791bDbb0E22373e36b66".into(),
            uri: "https://api.example.com/premium-data".into(),
            version: "1".into(),
            chain_id: "eip155:8453".into(),
            kind: "eip191".into(),
            nonce: "a1b2c3d4e5f67890a1b2c3d4e5f67890".into(),
            issued_at: "2024-01-15T10:30:00.000Z".into(),
            statement: statement.map(str::to_owned),
            expiration_time: Some("2024-01-15T10:35:00.000Z".into()),
            not_before: None,
            request_id: None,
            resources,
            signature: String::new(),
        }
    }

    #[test]
    fn the_message_is_the_specs_example() {
        let message = siwe_message(
            &payload(
                Some("Sign in to access premium data"),
                Some(vec!["https://api.example.com/premium-data".into()]),
            ),
            8453,
        );
        assert_eq!(
            message,
            "api.example.com wants you to sign in with your Ethereum account:\n\
             0x857b06519E91e3A54538791bDbb0E22373e36b66\n\nSign in to access premium data\n\n\
             URI: https://api.example.com/premium-data\nVersion: 1\nChain ID: 8453\n\
             Nonce: a1b2c3d4e5f67890a1b2c3d4e5f67890\nIssued At: 2024-01-15T10:30:00.000Z\n\
             Expiration Time: 2024-01-15T10:35:00.000Z\nResources:\n\
             - https://api.example.com/premium-data"
        );
    }

    #[test]
    fn an_absent_statement_leaves_a_blank_line() {
        let message = siwe_message(&payload(None, None), 8453);
        assert!(message.contains("b66\n\n\nURI: "), "{message}");
        assert!(!message.contains("Resources:"));
    }

    #[test]
    fn contract_ids_come_from_contract_paths_only() {
        assert_eq!(contract_of_path("/v1/contracts/ctr_1"), Some("ctr_1"));
        assert_eq!(
            contract_of_path("/v1/contracts/ctr_1/events"),
            Some("ctr_1")
        );
        assert_eq!(
            contract_of_path("/v1/contracts/ctr_1/receipt"),
            Some("ctr_1")
        );
        assert_eq!(contract_of_path("/v1/contracts/"), None);
        assert_eq!(contract_of_path("/v1/contracts/ctr_1/execute"), None);
        assert_eq!(
            contract_of_path("/v1/contracts/ctr_1/webhook-deliveries"),
            None
        );
        assert_eq!(contract_of_path("/v1/disputes/dsp_1"), None);
    }
}
