//! The HIRE adapter (`seeds/hire-execution.txt`, implemented by worker-sdk):
//! `POST <endpoint>/execute` with `Authorization: Bearer <contract token>`, `X-Contract-ID`,
//! `Idempotency-Key: <contract id>` (so a repeated forward never runs the task twice),
//! `X-Attempt: <n>` (a higher number asks for a rerun after a failure), `X-Task-Type`, and the
//! task input as the JSON body.
//!
//! Answers: 200 `completed` (or a final `partial`) → [`WorkerAnswer::Delivered`]; 200 `failed`
//! → [`WorkerAnswer::Failed`]; 202 `pending`/`partial` → [`WorkerAnswer::Pending`] (a `partial`
//! carries its progress for the event log: the worker's `progress` and how many items are
//! ready); no answer within the SLA → [`WorkerAnswer::TimedOut`]; anything else → `Failed`
//! with a kind that says why. A delivered `stream` output is read by the hire flow's `stream`
//! step, not here.
//!
//! An answer (execute, poll or callback) whose `contract_id` names another contract is a failed
//! attempt with code `contract_mismatch` ([`super::contract_mismatch`]), whatever it delivers;
//! HIRE makes the echo optional, so an answer without it is read as usual. A `task_id` holding
//! U+0000 is a malformed answer: the task id is kept as plain text (see the `store` docs).

use async_trait::async_trait;
use hiregate_contracts::wire::hire::{Delivery, ExecuteResponse, parse_report};
use reqwest::{Method, StatusCode, header};
use serde_json::{Value, json};
use url::Url;

use super::{
    FailureKind, ForwardRequest, PollRequest, WorkerAnswer, WorkerProtocol, contract_mismatch,
};
use crate::outbound::{OutboundClient, OutboundError};

/// Largest worker answer read, bytes (the outbound client's own limit may be lower).
const MAX_ANSWER_BYTES: usize = 10 * 1024 * 1024;

/// The native HIRE protocol.
#[derive(Debug, Clone, Copy, Default)]
pub struct HireProtocol;

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

fn transport_failure(error: &OutboundError) -> WorkerAnswer {
    match error {
        OutboundError::Timeout => WorkerAnswer::TimedOut,
        OutboundError::ResponseTooLarge { .. } => failed(
            FailureKind::BadResponse,
            None,
            "answer_too_large",
            error.to_string(),
        ),
        // Nothing was sent: a plain http poll URL (or endpoint) while https is required.
        OutboundError::InsecureScheme { url } => WorkerAnswer::Failed {
            kind: FailureKind::InsecureUrl,
            http_status: None,
            code: "insecure_url".to_owned(),
            message: error.to_string(),
            details: Some(serde_json::json!({"url": url, "required_scheme": "https"})),
        },
        OutboundError::BlockedTarget { .. } | OutboundError::UnsupportedScheme { .. } => failed(
            FailureKind::Unreachable,
            None,
            "endpoint_not_allowed",
            error.to_string(),
        ),
        _ => failed(
            FailureKind::Unreachable,
            None,
            "worker_unreachable",
            error.to_string(),
        ),
    }
}

#[async_trait]
impl WorkerProtocol for HireProtocol {
    async fn execute(&self, client: &OutboundClient, request: &ForwardRequest<'_>) -> WorkerAnswer {
        let url = request.endpoint.join("execute");
        let builder = match client.request(Method::POST, &url) {
            Ok(builder) => builder,
            Err(error) => return transport_failure(&error),
        };
        let builder = builder
            .timeout(request.timeout)
            .bearer_auth(request.contract_token)
            .header("X-Contract-ID", request.contract_id)
            .header("Idempotency-Key", request.contract_id)
            .header("X-Attempt", request.attempt.to_string())
            .header("X-Task-Type", request.task_type)
            .header(super::CORRELATION_HEADER, request.correlation_id)
            .header(header::ACCEPT, "application/json")
            .json(request.input);
        // Keyed by the contract id: a resend after a connection lost before any answer (a
        // stale keep-alive connection) is answered from the first run if the worker had it.
        let response = match client.send_keyed(builder).await {
            Ok(response) => response,
            Err(error) => return transport_failure(&error),
        };
        let status = response.status();
        let body = match client.read_body(response, MAX_ANSWER_BYTES).await {
            Ok(body) => body,
            Err(error) => return transport_failure(&error),
        };
        classify(status, &body, request.contract_id)
    }

    async fn poll(&self, client: &OutboundClient, request: &PollRequest<'_>) -> WorkerAnswer {
        let builder = match client.request(Method::GET, request.poll_url) {
            Ok(builder) => builder,
            Err(error) => return transport_failure(&error),
        };
        let builder = builder
            .timeout(request.timeout)
            .bearer_auth(request.contract_token)
            .header("X-Contract-ID", request.contract_id)
            .header(super::CORRELATION_HEADER, request.correlation_id)
            .header(header::ACCEPT, "application/json");
        let response = match client.send(builder).await {
            Ok(response) => response,
            Err(error) => return transport_failure(&error),
        };
        let status = response.status();
        let body = match client.read_body(response, MAX_ANSWER_BYTES).await {
            Ok(body) => body,
            Err(error) => return transport_failure(&error),
        };
        classify_poll(status, &body, request.contract_id)
    }
}

/// `GET <poll_url>` answers the task's current report, always with 200: `pending` means the
/// work goes on, and so does a `partial` that names a `poll_url` (progress, not a delivery);
/// a `partial` without one is the work's final, partial result; `completed`/`failed` are its
/// end.
pub fn classify_poll(status: StatusCode, body: &[u8], contract_id: &str) -> WorkerAnswer {
    if status == StatusCode::OK
        && let Ok(ExecuteResponse::Partial(_)) = serde_json::from_slice::<ExecuteResponse>(body)
        && serde_json::from_slice::<Value>(body)
            .is_ok_and(|raw| raw.get("poll_url").is_some_and(|url| !url.is_null()))
    {
        return classify(StatusCode::ACCEPTED, body, contract_id);
    }
    classify(status, body, contract_id)
}

/// Reads a worker's completion callback for `contract_id`: HIRE's webhook shape (`event`:
/// `task_completed` / `task_failed`, no `status`) or a task report (`status`, with or without
/// worker-sdk's `event`). A body that is neither is a `BadResponse` failure.
pub fn classify_callback(body: &[u8], contract_id: &str) -> WorkerAnswer {
    let report = match parse_report(body) {
        Ok(report) => report,
        Err(error) => {
            return failed(
                FailureKind::BadResponse,
                None,
                "malformed_answer",
                format!("the callback is not a HIRE task report: {error}"),
            );
        }
    };
    // The event shape was read into a status-tagged report; what it did not name (a partial's
    // poll_url) stays out, as a callback has nothing to poll.
    match serde_json::to_vec(&report) {
        Ok(normalized) => classify(StatusCode::OK, &normalized, contract_id),
        Err(error) => failed(
            FailureKind::BadResponse,
            None,
            "malformed_answer",
            error.to_string(),
        ),
    }
}

/// Largest worker `progress` object relayed as is, canonical bytes; a larger one is summarised.
const MAX_PROGRESS_BYTES: usize = 2048;

/// What the contract's event log shows of a progress report: the worker's `progress` (percent,
/// message), and how many output items are ready, not the items (nothing unpaid is shown).
fn progress_of(raw: &Value, delivery: &Delivery) -> Value {
    let progress = raw.get("progress").cloned().unwrap_or(Value::Null);
    let size = hiregate_contracts::canonical::to_canonical_vec(&progress)
        .map_or(usize::MAX, |bytes| bytes.len());
    let progress = if size <= MAX_PROGRESS_BYTES {
        progress
    } else {
        json!({"withheld": true, "bytes": size})
    };
    let items_ready = delivery
        .output
        .as_ref()
        .map(hiregate_contracts::deliverable::Output::item_count)
        .or_else(|| delivery.deliverables.as_ref().map(Vec::len))
        .unwrap_or(0);
    json!({"progress": progress, "items_ready": items_ready})
}

/// The `contract_id` an answer echoes, if it does.
fn echoed_contract(answer: &ExecuteResponse) -> Option<&str> {
    let echoed = match answer {
        ExecuteResponse::Completed(delivery) | ExecuteResponse::Partial(delivery) => {
            delivery.contract_id.as_ref()
        }
        ExecuteResponse::Failed(failure) => failure.contract_id.as_ref(),
        ExecuteResponse::Pending(pending) => pending.contract_id.as_ref(),
    };
    echoed.map(|id| id.as_str())
}

/// The malformed-answer failure for a pending task id holding U+0000 (task ids are kept as
/// plain text, see the `store` docs), if it does.
fn refuse_nul_task_id(task_id: Option<&str>, http_status: Option<u16>) -> Option<WorkerAnswer> {
    task_id.filter(|id| id.contains('\0')).map(|_| {
        failed(
            FailureKind::BadResponse,
            http_status,
            "malformed_answer",
            "the worker's task_id holds U+0000",
        )
    })
}

/// Reads a worker's answer to a call for `contract_id`. Public for unit tests of hostile
/// answers.
pub fn classify(status: StatusCode, body: &[u8], contract_id: &str) -> WorkerAnswer {
    let http_status = Some(status.as_u16());
    if status.is_server_error() {
        return failed(
            FailureKind::Unreachable,
            http_status,
            "worker_error",
            format!("the worker answered {status}"),
        );
    }
    if status.is_client_error() {
        // worker-sdk refusals are {"error": {"code", "message"}}.
        let error = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("error").cloned());
        let code = error
            .as_ref()
            .and_then(|e| e.get("code"))
            .and_then(Value::as_str)
            .map(|code| code.chars().take(64).collect::<String>())
            .unwrap_or_else(|| "worker_refused".to_owned());
        return failed(
            FailureKind::Refused,
            http_status,
            code,
            format!("the worker refused the task with {status}"),
        );
    }
    if status != StatusCode::OK && status != StatusCode::ACCEPTED {
        return failed(
            FailureKind::BadResponse,
            http_status,
            "unexpected_status",
            format!("the worker answered {status}"),
        );
    }
    let parsed: ExecuteResponse = match serde_json::from_slice(body) {
        Ok(parsed) => parsed,
        Err(error) => {
            return failed(
                FailureKind::BadResponse,
                http_status,
                "malformed_answer",
                format!("the worker's answer is not a HIRE execute response: {error}"),
            );
        }
    };
    if let Some(echoed) = echoed_contract(&parsed)
        && echoed != contract_id
    {
        return contract_mismatch(http_status, "contract_id", contract_id, echoed);
    }
    let in_progress = status == StatusCode::ACCEPTED;
    match parsed {
        ExecuteResponse::Pending(pending) => {
            refuse_nul_task_id(Some(&pending.task_id), http_status).unwrap_or_else(|| {
                WorkerAnswer::Pending {
                    task_id: Some(pending.task_id),
                    poll_url: Some(pending.poll_url),
                    estimated_completion: pending.estimated_completion,
                    http_status: status.as_u16(),
                    progress: None,
                }
            })
        }
        // 202 partial is progress, not a delivery: the work goes on.
        ExecuteResponse::Partial(delivery) if in_progress => {
            let raw = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
            let task_id = raw.get("task_id").and_then(Value::as_str);
            refuse_nul_task_id(task_id, http_status).unwrap_or_else(|| WorkerAnswer::Pending {
                task_id: task_id.map(str::to_owned),
                poll_url: raw
                    .get("poll_url")
                    .and_then(Value::as_str)
                    .and_then(|u| Url::parse(u).ok()),
                estimated_completion: raw
                    .get("estimated_completion")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                http_status: status.as_u16(),
                progress: Some(progress_of(&raw, &delivery)),
            })
        }
        ExecuteResponse::Failed(failure) => WorkerAnswer::Failed {
            kind: FailureKind::Reported,
            http_status,
            code: failure.error.code.chars().take(64).collect(),
            message: failure.error.message.chars().take(500).collect(),
            details: failure.error.details,
        },
        answer @ (ExecuteResponse::Completed(_) | ExecuteResponse::Partial(_)) => {
            let metadata = match &answer {
                ExecuteResponse::Completed(delivery) | ExecuteResponse::Partial(delivery) => {
                    delivery.metadata.clone()
                }
                _ => None,
            };
            match answer.deliverable() {
                Some(Ok(deliverable)) => WorkerAnswer::Delivered {
                    deliverable,
                    http_status: status.as_u16(),
                    metadata,
                },
                Some(Err(error)) => failed(
                    FailureKind::BadResponse,
                    http_status,
                    "invalid_deliverable",
                    error.to_string(),
                ),
                None => failed(
                    FailureKind::BadResponse,
                    http_status,
                    "invalid_deliverable",
                    "no deliverable in the answer",
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTRACT: &str = "ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K";

    #[test]
    fn answers_naming_another_contract_are_failed_attempts() {
        let other = "ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4M";
        let bodies = [
            (
                StatusCode::OK,
                format!(
                    r#"{{"status":"completed","contract_id":"{other}","output":{{"type":"json","content":{{}}}}}}"#
                ),
            ),
            (
                StatusCode::OK,
                format!(
                    r#"{{"status":"failed","contract_id":"{other}","error":{{"code":"X","message":"no"}}}}"#
                ),
            ),
            (
                StatusCode::ACCEPTED,
                format!(
                    r#"{{"status":"pending","contract_id":"{other}","task_id":"t1","poll_url":"http://w.example/t1"}}"#
                ),
            ),
            (
                StatusCode::ACCEPTED,
                format!(
                    r#"{{"status":"partial","contract_id":"{other}","task_id":"t1","output":{{"type":"json","content":{{}}}}}}"#
                ),
            ),
        ];
        for (status, body) in bodies {
            for answer in [
                classify(status, body.as_bytes(), CONTRACT),
                classify_poll(StatusCode::OK, body.as_bytes(), CONTRACT),
            ] {
                assert!(
                    matches!(
                        &answer,
                        WorkerAnswer::Failed { kind: FailureKind::ContractMismatch, code, details: Some(details), .. }
                            if code == "contract_mismatch"
                                && details["field"] == "contract_id"
                                && details["answered"] == other
                    ),
                    "{body}: {answer:?}"
                );
            }
        }
        // HIRE makes the echo optional: no contract_id, no mismatch.
        let silent = br#"{"status":"completed","output":{"type":"json","content":{}}}"#;
        assert!(matches!(
            classify(StatusCode::OK, silent, CONTRACT),
            WorkerAnswer::Delivered { .. }
        ));
    }

    #[test]
    fn a_task_id_with_nul_is_malformed() {
        let body = br#"{"status":"pending","task_id":"t\u0000","poll_url":"http://w.example/t1"}"#;
        assert!(matches!(
            classify(StatusCode::ACCEPTED, body, CONTRACT),
            WorkerAnswer::Failed { kind: FailureKind::BadResponse, ref code, .. } if code == "malformed_answer"
        ));
    }

    #[test]
    fn answers_are_classified() {
        let completed =
            br#"{"status":"completed","contract_id":"ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K","task_id":"t1","output":{"type":"json","content":{"summary":"x","confidence":0.9}}}"#;
        assert!(matches!(
            classify(StatusCode::OK, completed, CONTRACT),
            WorkerAnswer::Delivered {
                http_status: 200,
                ..
            }
        ));
        let failed_report =
            br#"{"status":"failed","error":{"code":"SIMULATED_FAILURE","message":"no"}}"#;
        assert!(matches!(
            classify(StatusCode::OK, failed_report, CONTRACT),
            WorkerAnswer::Failed { kind: FailureKind::Reported, ref code, .. } if code == "SIMULATED_FAILURE"
        ));
        let pending =
            br#"{"status":"pending","task_id":"t1","poll_url":"http://w.example/tasks/t1"}"#;
        assert!(matches!(
            classify(StatusCode::ACCEPTED, pending, CONTRACT),
            WorkerAnswer::Pending { .. }
        ));
        let progress = br#"{"status":"partial","task_id":"t1","poll_url":"http://w.example/tasks/t1","progress":{"percent":50}}"#;
        assert!(matches!(
            classify(StatusCode::ACCEPTED, progress, CONTRACT),
            WorkerAnswer::Pending {
                poll_url: Some(_),
                ..
            }
        ));
        let refused = br#"{"error":{"code":"invalid_token","message":"bad"}}"#;
        assert!(matches!(
            classify(StatusCode::UNAUTHORIZED, refused, CONTRACT),
            WorkerAnswer::Failed { kind: FailureKind::Refused, ref code, .. } if code == "invalid_token"
        ));
        for (status, body) in [
            (StatusCode::OK, &b"not json"[..]),
            (StatusCode::OK, br#"{"status":"completed"}"#),
            (StatusCode::OK, br#"{"status":"exploded"}"#),
            (StatusCode::CREATED, br#"{}"#),
        ] {
            assert!(
                matches!(
                    classify(status, body, CONTRACT),
                    WorkerAnswer::Failed {
                        kind: FailureKind::BadResponse,
                        ..
                    }
                ),
                "{status} {}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, b"", CONTRACT),
            WorkerAnswer::Failed {
                kind: FailureKind::Unreachable,
                ..
            }
        ));
    }
}
