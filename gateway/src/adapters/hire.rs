//! The HIRE adapter (`seeds/hire-execution.txt`, implemented by worker-sdk):
//! `POST <endpoint>/execute` with `Authorization: Bearer <contract token>`, `X-Contract-ID`,
//! `Idempotency-Key: <contract id>` (so a repeated forward never runs the task twice),
//! `X-Attempt: <n>` (a higher number asks for a rerun after a failure), `X-Task-Type`, and the
//! task input as the JSON body.
//!
//! Answers: 200 `completed` (or a final `partial`) → [`WorkerAnswer::Delivered`]; 200 `failed`
//! → [`WorkerAnswer::Failed`]; 202 `pending`/`partial` → [`WorkerAnswer::Pending`]; no answer
//! within the SLA → [`WorkerAnswer::TimedOut`]; anything else → `Failed` with a kind that says
//! why.

use async_trait::async_trait;
use hiregate_contracts::wire::hire::ExecuteResponse;
use reqwest::{Method, StatusCode, header};
use serde_json::Value;
use url::Url;

use super::{FailureKind, ForwardRequest, PollRequest, WorkerAnswer, WorkerProtocol};
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
            .header(header::ACCEPT, "application/json")
            .json(request.input);
        let response = match client.send(builder).await {
            Ok(response) => response,
            Err(error) => return transport_failure(&error),
        };
        let status = response.status();
        let body = match client.read_body(response, MAX_ANSWER_BYTES).await {
            Ok(body) => body,
            Err(error) => return transport_failure(&error),
        };
        classify(status, &body)
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
        classify_poll(status, &body)
    }
}

/// `GET <poll_url>` answers the task's current report, always with 200: `pending` and
/// `partial` mean the work goes on (a partial report while polling is progress, not a
/// delivery); `completed`/`failed` are its end.
pub fn classify_poll(status: StatusCode, body: &[u8]) -> WorkerAnswer {
    if status == StatusCode::OK
        && let Ok(ExecuteResponse::Partial(_)) = serde_json::from_slice::<ExecuteResponse>(body)
    {
        return classify(StatusCode::ACCEPTED, body);
    }
    classify(status, body)
}

/// Reads a worker's answer. Public for unit tests of hostile answers.
pub fn classify(status: StatusCode, body: &[u8]) -> WorkerAnswer {
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
    let in_progress = status == StatusCode::ACCEPTED;
    match parsed {
        ExecuteResponse::Pending(pending) => WorkerAnswer::Pending {
            task_id: Some(pending.task_id),
            poll_url: Some(pending.poll_url),
            http_status: status.as_u16(),
        },
        // 202 partial is progress, not a delivery: the work goes on.
        ExecuteResponse::Partial(_) if in_progress => {
            let raw = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
            WorkerAnswer::Pending {
                task_id: raw
                    .get("task_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                poll_url: raw
                    .get("poll_url")
                    .and_then(Value::as_str)
                    .and_then(|u| Url::parse(u).ok()),
                http_status: status.as_u16(),
            }
        }
        ExecuteResponse::Failed(failure) => WorkerAnswer::Failed {
            kind: FailureKind::Reported,
            http_status,
            code: failure.error.code.chars().take(64).collect(),
            message: failure.error.message.chars().take(500).collect(),
            details: failure.error.details,
        },
        answer @ (ExecuteResponse::Completed(_) | ExecuteResponse::Partial(_)) => {
            match answer.deliverable() {
                Some(Ok(deliverable)) => WorkerAnswer::Delivered {
                    deliverable,
                    http_status: status.as_u16(),
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

    #[test]
    fn answers_are_classified() {
        let completed =
            br#"{"status":"completed","contract_id":"ctr_01J9ZQ4X1V8E6W0M3C5T7B2N4K","task_id":"t1","output":{"type":"json","content":{"summary":"x","confidence":0.9}}}"#;
        assert!(matches!(
            classify(StatusCode::OK, completed),
            WorkerAnswer::Delivered {
                http_status: 200,
                ..
            }
        ));
        let failed_report =
            br#"{"status":"failed","error":{"code":"SIMULATED_FAILURE","message":"no"}}"#;
        assert!(matches!(
            classify(StatusCode::OK, failed_report),
            WorkerAnswer::Failed { kind: FailureKind::Reported, ref code, .. } if code == "SIMULATED_FAILURE"
        ));
        let pending =
            br#"{"status":"pending","task_id":"t1","poll_url":"http://w.example/tasks/t1"}"#;
        assert!(matches!(
            classify(StatusCode::ACCEPTED, pending),
            WorkerAnswer::Pending { .. }
        ));
        let progress = br#"{"status":"partial","task_id":"t1","poll_url":"http://w.example/tasks/t1","progress":{"percent":50}}"#;
        assert!(matches!(
            classify(StatusCode::ACCEPTED, progress),
            WorkerAnswer::Pending {
                poll_url: Some(_),
                ..
            }
        ));
        let refused = br#"{"error":{"code":"invalid_token","message":"bad"}}"#;
        assert!(matches!(
            classify(StatusCode::UNAUTHORIZED, refused),
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
                    classify(status, body),
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
            classify(StatusCode::BAD_GATEWAY, b""),
            WorkerAnswer::Failed {
                kind: FailureKind::Unreachable,
                ..
            }
        ));
    }
}
