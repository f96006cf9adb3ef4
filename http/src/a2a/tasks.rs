//! A2A tasks: the `Task` JSON the interface answers, and `GetTask`, which reads a paid task (its
//! contract) with its capability token.

use chrono::{SecondsFormat, Utc};
use serde_json::{Value, json};

use super::{CONTRACT_KEY, RpcError, X402_ERROR, X402_RECEIPTS, X402_STATUS, code};
use crate::{extract::Party, state::AppState};
use hiregate_contracts::state::ContractState;
use hiregate_engine::hire::error::ErrorKind;

/// The artifact of a verified deliverable (`content`), with its verification result.
pub(super) fn artifact(task_id: &str, content: Value, verification: Option<Value>) -> Value {
    let mut artifact = json!({
        "artifactId": format!("{task_id}-deliverable"),
        "name": "deliverable",
        "description": "The deliverable, verified against the contract's pinned policy before \
                        the payment settled",
    });
    let mut part = json!({"mediaType": "application/json"});
    part["data"] = content;
    artifact["parts"] = json!([part]);
    if let Some(verification) = verification.filter(|v| !v.is_null()) {
        artifact["metadata"] = json!({"verification": verification});
    }
    artifact
}

/// An A2A v1.0 `Task` whose status message (from the agent) says `text` with `metadata`.
pub(super) fn task(
    task_id: &str,
    context_id: &str,
    state: &str,
    text: &str,
    metadata: Value,
    artifact: Option<Value>,
) -> Value {
    let mut task = json!({
        "id": task_id,
        "contextId": context_id,
        "status": {
            "state": state,
            "message": {
                "messageId": format!("msg_{}", ulid::Ulid::new()),
                "role": "ROLE_AGENT",
                "taskId": task_id,
                "contextId": context_id,
                "parts": [{"text": text}],
            },
            "timestamp": Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true),
        },
    });
    task["status"]["message"]["metadata"] = metadata;
    if let Some(artifact) = artifact {
        task["artifacts"] = json!([artifact]);
    }
    task
}

/// `GetTask`: the paid task (the contract) for the holder of its capability token (or the key
/// of its seeker or its worker's operator).
pub(super) async fn get_task(
    state: &AppState,
    party: Option<&Party>,
    params: &Value,
) -> Result<Value, RpcError> {
    let id = params
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| RpcError::params("params.id (the task id) is required"))?;
    let party = party.ok_or_else(task_not_found)?;
    let view = match state.hire.view_contract(&party.principal_id, id).await {
        Ok(view) => view,
        Err(error) if error.kind == ErrorKind::NotFound => return Err(task_not_found()),
        Err(error) => return Err(RpcError::of(error)),
    };
    Ok(task_of_view(id, &view))
}

/// The one answer for a task the caller may not see, whether or not it exists.
pub(super) fn task_not_found() -> RpcError {
    RpcError::new(
        code::TASK_NOT_FOUND,
        "task_not_found",
        "no such task for this caller: a task exists once paid, and is read with the \
         capability token of its paid answer (Authorization: Bearer hg_cap_…)",
    )
}

/// A contract view (`GET /v1/contracts/{id}`) as an A2A task.
pub(super) fn task_of_view(id: &str, view: &Value) -> Value {
    let contract_state = view
        .get("state")
        .cloned()
        .and_then(|s| serde_json::from_value::<ContractState>(s).ok());
    let content = view
        .pointer("/deliverable/content")
        .filter(|c| !c.is_null())
        .cloned();
    let receipts: Vec<Value> = view
        .pointer("/settlement/response")
        .filter(|r| !r.is_null())
        .cloned()
        .into_iter()
        .collect();
    let metadata =
        |status: &str| json!({X402_STATUS: status, X402_RECEIPTS: receipts, CONTRACT_KEY: id});
    use ContractState as S;
    let (state, text, metadata, artifact) = match contract_state {
        Some(S::Settled) if content.is_some() => (
            "TASK_STATE_COMPLETED",
            "Paid: the deliverable passed its verification and the payment settled.",
            metadata("payment-completed"),
            content.map(|c| artifact(id, c, view.get("verification").cloned())),
        ),
        Some(S::Offered) => (
            "TASK_STATE_INPUT_REQUIRED",
            "Waiting for its payment.",
            metadata("payment-required"),
            None,
        ),
        Some(S::Rejected | S::Voided) => (
            "TASK_STATE_FAILED",
            "The deliverable did not pass its verification; nothing was settled.",
            json!({X402_STATUS: "payment-failed", X402_ERROR: "VERIFICATION_FAILED", X402_RECEIPTS: receipts, CONTRACT_KEY: id}),
            None,
        ),
        Some(S::Failed | S::SettlementFailed | S::Expired | S::Refunded) => (
            "TASK_STATE_FAILED",
            "The hire ended without a settled deliverable.",
            json!({X402_STATUS: "payment-failed", X402_ERROR: view.get("state").and_then(Value::as_str).unwrap_or("failed").to_uppercase(), X402_RECEIPTS: receipts, CONTRACT_KEY: id}),
            None,
        ),
        Some(S::Cancelled) => (
            "TASK_STATE_CANCELED",
            "Cancelled before delivery; nothing was settled.",
            metadata("payment-failed"),
            None,
        ),
        _ => (
            "TASK_STATE_WORKING",
            "Paid; the work goes on.",
            metadata("payment-verified"),
            None,
        ),
    };
    task(id, id, state, text, metadata, artifact)
}
