//! The WattSwarm adapter (`seeds/wattswarm-executor-contract.txt`): `POST <endpoint>/execute`
//! with the seed's ExecuteRequest, answered by an ExecuteResponse whose `candidate_output` is
//! the deliverable and whose `evidence_refs` (with their `sha256:` digests) become the
//! deliverable's evidence, fetched and digest-checked by the verification step like any other.
//!
//! Idempotency: WattSwarm executors dedupe on `execution_id`, so the adapter derives it from
//! the contract id and the attempt number ([`super::execution_id`]). A transport failure
//! (connection refused or dropped mid-answer, 5xx) is retried with the *same* request within
//! the SLA, so a
//! runtime that already ran the task answers from its store instead of running it again. A
//! new gateway attempt (after a reported failure) gets a new `execution_id`, which asks for a
//! real rerun.
//!
//! WattSwarm runtimes refuse with a status and a plain-text reason; 4xx maps to
//! [`FailureKind::Refused`], everything unparsable to [`FailureKind::BadResponse`].
//!
//! The seed's ExecuteResponse carries no ids, but runtimes may echo the request's `task_id`
//! and `execution_id`: an echo that differs from what was sent (another contract, or another
//! attempt's execution) is a failed attempt with code `contract_mismatch`, never a delivery.

use std::time::Duration;

use async_trait::async_trait;
use hiregate_contracts::{
    deliverable::DeliverableError,
    schema::OutputSchema,
    wire::wattswarm::{ExecuteRequest, ExecuteResponse},
};
use reqwest::{Method, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{
    FailureKind, ForwardRequest, WorkerAnswer, WorkerProtocol, contract_mismatch, execution_id,
};
use crate::outbound::{OutboundClient, OutboundError};
use hiregate_store::states::EventKind;

/// Largest executor answer read, bytes (the outbound client's own limit may be lower).
const MAX_ANSWER_BYTES: usize = 10 * 1024 * 1024;
/// Sends of one ExecuteRequest at most (the first plus transport retries).
const MAX_SENDS: u32 = 3;
/// Pause before the first transport retry; doubled for each further one.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Profile sent when the terms pin none (contracts signed before profiles were pinned).
pub const DEFAULT_PROFILE: &str = "default";
/// Lifecycle stage of work: a hire's answer is a candidate that the gateway's policy then
/// verifies, which is WattSwarm's `explore` step. Cross-check votes are the `verify` stage,
/// asked on `/verify` (`hire::crosscheck`), not here.
pub const STAGE: &str = "explore";
/// Code of an answer produced by another runtime than the one the contract pinned.
pub const RUNTIME_MISMATCH: &str = "runtime_mismatch";

/// The WattSwarm executor protocol.
#[derive(Debug, Clone, Copy, Default)]
pub struct WattswarmProtocol;

/// The `output_schema` of the task contract: the single schema, or `allOf` when the seeker
/// added a stricter one (the deliverable must satisfy all of them).
fn combined_output_schema(schemas: &[OutputSchema]) -> Value {
    match schemas {
        [] => json!({}),
        [only] => only.document().clone(),
        many => json!({"allOf": many.iter().map(|s| s.document().clone()).collect::<Vec<_>>()}),
    }
}

/// The seed's ExecuteRequest for `request`.
#[must_use]
pub fn execute_request(request: &ForwardRequest<'_>) -> ExecuteRequest {
    let output_schema = combined_output_schema(request.output_schemas);
    // The seed's `inputs` is an object; a hire's input may be any JSON value.
    let inputs = if request.input.is_object() {
        request.input.clone()
    } else {
        json!({"input": request.input})
    };
    let terms = request.terms;
    let profile = terms
        .execution()
        .and_then(|execution| execution.profile.clone())
        .unwrap_or_else(|| DEFAULT_PROFILE.to_owned());
    ExecuteRequest {
        task_id: request.contract_id.to_owned(),
        execution_id: execution_id(request.contract_id, request.attempt),
        task_type: request.task_type.to_owned(),
        inputs: inputs.clone(),
        profile,
        task_contract: json!({
            "task_id": request.contract_id,
            "task_type": request.task_type,
            "inputs": inputs,
            "output_schema": output_schema,
            "policy": terms.verification().to_wire(),
            "budget": {
                "max_latency_ms": u64::try_from(request.timeout.as_millis()).unwrap_or(u64::MAX),
                "max_attempts": terms.retry_policy().max_attempts(),
                "price": terms.price(),
            },
        }),
        stage: STAGE.to_owned(),
        attempt_id: format!("attempt-{}", request.attempt),
        seed_bundle: None,
    }
}

fn failed(
    kind: FailureKind,
    http_status: Option<u16>,
    code: impl Into<String>,
    message: impl Into<String>,
) -> WorkerAnswer {
    WorkerAnswer::Failed {
        kind,
        http_status,
        code: code.into(),
        message: message.into(),
        details: None,
    }
}

/// One send's outcome: an answer to return, or a transport failure worth resending.
enum SendOutcome {
    Final(WorkerAnswer),
    Retryable(WorkerAnswer),
}

fn transport_outcome(error: &OutboundError) -> SendOutcome {
    match error {
        OutboundError::Timeout => SendOutcome::Final(WorkerAnswer::TimedOut),
        OutboundError::ResponseTooLarge { .. } => SendOutcome::Final(failed(
            FailureKind::BadResponse,
            None,
            "answer_too_large",
            error.to_string(),
        )),
        OutboundError::BlockedTarget { .. } | OutboundError::UnsupportedScheme { .. } => {
            SendOutcome::Final(failed(
                FailureKind::Unreachable,
                None,
                "endpoint_not_allowed",
                error.to_string(),
            ))
        }
        // Connection refused, reset, or dropped mid-body: the executor may have run the task,
        // so the resend carries the same execution_id.
        _ => SendOutcome::Retryable(failed(
            FailureKind::Unreachable,
            None,
            "worker_unreachable",
            error.to_string(),
        )),
    }
}

async fn send_once(
    client: &OutboundClient,
    request: &ForwardRequest<'_>,
    body: &ExecuteRequest,
    timeout: Duration,
) -> SendOutcome {
    let url = request.endpoint.join("execute");
    let builder = match client.request(Method::POST, &url) {
        Ok(builder) => builder,
        Err(error) => return transport_outcome(&error),
    };
    let builder = builder
        .timeout(timeout)
        .header(super::CORRELATION_HEADER, request.correlation_id)
        .header(header::ACCEPT, "application/json")
        .json(body);
    // Keyed by the execution_id, as the resends below.
    let response = match client.send_keyed(builder).await {
        Ok(response) => response,
        Err(error) => return transport_outcome(&error),
    };
    let status = response.status();
    let bytes = match client.read_body(response, MAX_ANSWER_BYTES).await {
        Ok(bytes) => bytes,
        Err(error) => return transport_outcome(&error),
    };
    if status.is_server_error() {
        return SendOutcome::Retryable(failed(
            FailureKind::Unreachable,
            Some(status.as_u16()),
            "worker_error",
            format!("the executor answered {status}"),
        ));
    }
    let answer = classify(status, &bytes, body, &pinned_runtime(request));
    if let Some(runtime) = answered_runtime(&bytes) {
        request
            .events
            .relay(
                EventKind::WorkerRuntime,
                json!({
                    "execution_id": body.execution_id,
                    "attempt_id": body.attempt_id,
                    "provider_family": runtime.provider_family,
                    "model_id": runtime.model_id,
                }),
            )
            .await;
    }
    SendOutcome::Final(answer)
}

/// The runtime that produced an answer, or the one a contract pinned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runtime {
    /// WattSwarm `provider_family`.
    pub provider_family: Option<String>,
    /// WattSwarm `model_id`.
    pub model_id: Option<String>,
}

fn pinned_runtime(request: &ForwardRequest<'_>) -> Runtime {
    request
        .terms
        .execution()
        .map(|execution| Runtime {
            provider_family: execution.provider_family.clone(),
            model_id: execution.model_id.clone(),
        })
        .unwrap_or_default()
}

/// Who produced the answer: `provider_family` / `model_id` when the executor echoes them,
/// else the seed's evidence `producer` (`"<provider_family>/<model_id>"`) of the first
/// evidence ref that names one.
fn answered_runtime_of(raw: &Value) -> Option<Runtime> {
    let text = |field: &str| raw.get(field).and_then(Value::as_str).map(str::to_owned);
    let echoed = Runtime {
        provider_family: text("provider_family"),
        model_id: text("model_id"),
    };
    if echoed != Runtime::default() {
        return Some(echoed);
    }
    raw.get("evidence_refs")?
        .as_array()?
        .iter()
        .filter_map(|item| item.get("producer")?.as_str())
        .find_map(|producer| producer.split_once('/'))
        .map(|(family, model)| Runtime {
            provider_family: Some(family.to_owned()),
            model_id: Some(model.to_owned()),
        })
}

fn answered_runtime(body: &[u8]) -> Option<Runtime> {
    answered_runtime_of(&serde_json::from_slice(body).ok()?)
}

/// The first runtime field the answer names differently from what the terms pinned, as
/// `(field, pinned, answered)`. A field either side leaves out is not compared.
fn runtime_mismatch(
    pinned: &Runtime,
    answered: &Runtime,
) -> Option<(&'static str, String, String)> {
    [
        (
            "provider_family",
            &pinned.provider_family,
            &answered.provider_family,
        ),
        ("model_id", &pinned.model_id, &answered.model_id),
    ]
    .into_iter()
    .find_map(|(field, pinned, answered)| match (pinned, answered) {
        (Some(pinned), Some(answered)) if pinned != answered => {
            Some((field, pinned.clone(), answered.chars().take(128).collect()))
        }
        _ => None,
    })
}

#[async_trait]
impl WorkerProtocol for WattswarmProtocol {
    async fn execute(&self, client: &OutboundClient, request: &ForwardRequest<'_>) -> WorkerAnswer {
        let body = execute_request(request);
        let deadline = Instant::now() + request.timeout;
        let mut pause = FIRST_RETRY_PAUSE;
        let mut sends = 0;
        loop {
            sends += 1;
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return WorkerAnswer::TimedOut;
            }
            match send_once(client, request, &body, remaining).await {
                SendOutcome::Final(answer) => return answer,
                SendOutcome::Retryable(answer) => {
                    if sends >= MAX_SENDS
                        || deadline.saturating_duration_since(Instant::now()) <= pause
                    {
                        return answer;
                    }
                    tracing::info!(
                        contract_id = request.contract_id,
                        execution_id = %body.execution_id,
                        sends,
                        "WattSwarm executor transport failure; resending the same execution"
                    );
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
    }
}

/// The first id the answer echoes differently from `sent`, as `(field, expected, answered)`.
/// `null` counts as not echoed; any other non-matching value (a number, another string) is a
/// mismatch.
fn mismatched_echo<'a>(
    answer: &Value,
    sent: &'a ExecuteRequest,
) -> Option<(&'static str, &'a str, String)> {
    [
        ("task_id", sent.task_id.as_str()),
        ("execution_id", sent.execution_id.as_str()),
    ]
    .into_iter()
    .find_map(|(field, expected)| match answer.get(field) {
        None | Some(Value::Null) => None,
        Some(Value::String(echoed)) if echoed == expected => None,
        Some(Value::String(echoed)) => Some((field, expected, echoed.clone())),
        Some(other) => Some((field, expected, other.to_string())),
    })
}

/// Reads an executor's non-5xx answer to `sent`, from a contract that pinned `pinned`.
/// Public for unit tests of hostile answers.
pub fn classify(
    status: StatusCode,
    body: &[u8],
    sent: &ExecuteRequest,
    pinned: &Runtime,
) -> WorkerAnswer {
    let http_status = Some(status.as_u16());
    if status.is_client_error() {
        // The seed's runtimes answer `(StatusCode, String)`: keep a bounded prefix of the
        // reason for the operator.
        let reason: String = String::from_utf8_lossy(body).chars().take(200).collect();
        return failed(
            FailureKind::Refused,
            http_status,
            "worker_refused",
            format!("the executor refused the task with {status}: {reason}"),
        );
    }
    if status != StatusCode::OK {
        return failed(
            FailureKind::BadResponse,
            http_status,
            "unexpected_status",
            format!("the executor answered {status}"),
        );
    }
    let parsed = serde_json::from_slice::<Value>(body).and_then(|raw| {
        let parsed = ExecuteResponse::deserialize(&raw)?;
        Ok((raw, parsed))
    });
    let (raw, parsed) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => {
            return failed(
                FailureKind::BadResponse,
                http_status,
                "malformed_answer",
                format!("the executor's answer is not a WattSwarm ExecuteResponse: {error}"),
            );
        }
    };
    if let Some((field, expected, answered)) = mismatched_echo(&raw, sent) {
        return contract_mismatch(http_status, field, expected, &answered);
    }
    if let Some((field, pinned, answered)) =
        answered_runtime_of(&raw).and_then(|answered| runtime_mismatch(pinned, &answered))
    {
        return WorkerAnswer::Failed {
            kind: FailureKind::ContractMismatch,
            http_status,
            code: RUNTIME_MISMATCH.to_owned(),
            message: format!(
                "the answer was produced by {field} `{answered}`, not the `{pinned}` the \
                 executor declared in /capabilities when the contract was signed"
            ),
            details: Some(json!({"field": field, "pinned": pinned, "answered": answered})),
        };
    }
    match parsed.to_deliverable() {
        Ok(deliverable) => WorkerAnswer::Delivered {
            deliverable,
            http_status: status.as_u16(),
            metadata: None,
        },
        Err(error @ DeliverableError::InlineEvidenceTooLarge) => failed(
            FailureKind::BadResponse,
            http_status,
            "evidence_inline_too_large",
            error.to_string(),
        ),
        Err(error) => failed(
            FailureKind::BadResponse,
            http_status,
            "invalid_deliverable",
            error.to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_ids_are_stable_per_attempt() {
        assert_eq!(execution_id("ctr_1", 1), execution_id("ctr_1", 1));
        assert_ne!(execution_id("ctr_1", 1), execution_id("ctr_1", 2));
        assert_ne!(execution_id("ctr_1", 1), execution_id("ctr_2", 1));
    }

    fn sent() -> ExecuteRequest {
        ExecuteRequest {
            task_id: "ctr_1".to_owned(),
            execution_id: execution_id("ctr_1", 1),
            task_type: "t".to_owned(),
            inputs: json!({}),
            profile: DEFAULT_PROFILE.to_owned(),
            task_contract: json!({}),
            stage: STAGE.to_owned(),
            attempt_id: "attempt-1".to_owned(),
            seed_bundle: None,
        }
    }

    #[test]
    fn echoed_ids_must_be_this_calls() {
        let answer = |extra: &Value| {
            let mut body = json!({"candidate_output": {"answer": "x"}});
            if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
                body.extend(extra.clone());
            }
            classify(
                StatusCode::OK,
                &serde_json::to_vec(&body).unwrap(),
                &sent(),
                &Runtime::default(),
            )
        };
        for (extra, field) in [
            (json!({"task_id": "ctr_2"}), "task_id"),
            (
                json!({"task_id": "ctr_1", "execution_id": "ctr_1-attempt-2"}),
                "execution_id",
            ),
            (json!({"execution_id": 7}), "execution_id"),
        ] {
            assert!(
                matches!(
                    answer(&extra),
                    WorkerAnswer::Failed { kind: FailureKind::ContractMismatch, ref code, details: Some(ref details), .. }
                        if code == "contract_mismatch" && details["field"] == field
                ),
                "{extra}"
            );
        }
        for extra in [
            json!({}),
            json!({"task_id": "ctr_1", "execution_id": "ctr_1-attempt-1"}),
            json!({"task_id": null}),
        ] {
            assert!(
                matches!(answer(&extra), WorkerAnswer::Delivered { .. }),
                "{extra}"
            );
        }
    }

    #[test]
    fn answers_are_classified() {
        let digest = format!("sha256:{}", "0a".repeat(32));
        let body = json!({
            "candidate_output": {"answer": "x", "confidence": 0.9},
            "evidence_inline": [{"mime": "text/plain", "content": "trace:attempt-1"}],
            "evidence_refs": [{
                "uri": "https://runtime.example/e/1", "digest": digest, "size_bytes": 3,
                "mime": "application/json", "created_at": 1_710_000_000_000_u64,
                "producer": "rt/m"
            }]
        });
        let bytes = serde_json::to_vec(&body).unwrap();
        match classify(StatusCode::OK, &bytes, &sent(), &Runtime::default()) {
            WorkerAnswer::Delivered { deliverable, .. } => {
                assert_eq!(deliverable.evidence_refs().len(), 1);
            }
            other => panic!("expected a delivery, got {other:?}"),
        }
        assert!(matches!(
            classify(
                StatusCode::BAD_REQUEST,
                b"task_type `x` is not declared",
                &sent(),
                &Runtime::default()
            ),
            WorkerAnswer::Failed {
                kind: FailureKind::Refused,
                ..
            }
        ));
        for (status, body) in [
            (StatusCode::OK, &b"not json"[..]),
            (StatusCode::OK, br#"{"evidence_refs": []}"#),
            (StatusCode::ACCEPTED, br#"{"candidate_output": {}}"#),
        ] {
            assert!(
                matches!(
                    classify(status, body, &sent(), &Runtime::default()),
                    WorkerAnswer::Failed {
                        kind: FailureKind::BadResponse,
                        ..
                    }
                ),
                "{status} {}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn an_answer_from_another_runtime_than_the_pinned_one_is_a_failed_attempt() {
        let pinned = Runtime {
            provider_family: Some("rt".to_owned()),
            model_id: Some("m1".to_owned()),
        };
        let digest = format!("sha256:{}", "0a".repeat(32));
        let answer = |extra: Value| {
            let mut body = json!({"candidate_output": {"answer": "x"}});
            if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
                body.extend(extra.clone());
            }
            classify(
                StatusCode::OK,
                &serde_json::to_vec(&body).unwrap(),
                &sent(),
                &pinned,
            )
        };
        let refs = |producer: &str| json!({"evidence_refs": [{"uri": "https://rt.example/e", "digest": digest, "producer": producer}]});
        for (extra, field) in [
            (json!({"provider_family": "other"}), "provider_family"),
            (
                json!({"provider_family": "rt", "model_id": "m2"}),
                "model_id",
            ),
            (refs("rt/m2"), "model_id"),
            (refs("imposter/m1"), "provider_family"),
        ] {
            assert!(
                matches!(
                    answer(extra.clone()),
                    WorkerAnswer::Failed { kind: FailureKind::ContractMismatch, ref code, details: Some(ref details), .. }
                        if code == RUNTIME_MISMATCH && details["field"] == field
                ),
                "{extra}"
            );
        }
        for extra in [
            json!({}),
            json!({"model_id": "m1"}),
            refs("rt/m1"),
            refs("no-slash"),
        ] {
            assert!(
                matches!(answer(extra.clone()), WorkerAnswer::Delivered { .. }),
                "{extra}"
            );
        }
    }

    #[test]
    fn oversized_inline_evidence_is_refused_and_small_evidence_is_kept() {
        let with_evidence = |content: String| {
            let body = json!({
                "candidate_output": {"answer": "x"},
                "evidence_inline": [{"mime": "text/plain", "content": content}],
            });
            classify(
                StatusCode::OK,
                &serde_json::to_vec(&body).unwrap(),
                &sent(),
                &Runtime::default(),
            )
        };
        match with_evidence("trace:attempt-1".to_owned()) {
            WorkerAnswer::Delivered { deliverable, .. } => {
                assert_eq!(deliverable.evidence_inline()[0].content, "trace:attempt-1");
            }
            other => panic!("expected a delivery, got {other:?}"),
        }
        let oversized = "x".repeat(hiregate_contracts::deliverable::MAX_INLINE_EVIDENCE_BYTES + 1);
        assert!(matches!(
            with_evidence(oversized),
            WorkerAnswer::Failed { kind: FailureKind::BadResponse, ref code, .. } if code == "evidence_inline_too_large"
        ));
    }
}
