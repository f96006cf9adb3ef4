//! `SendMessage`: a new task's offer (unpaid, nothing stored) and a task's payment (the contract
//! made from the echoed offer, run by the engine), mapped to A2A tasks.

use axum::body::Bytes;
use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::{
    ACCESS_KEY, CONTRACT_KEY, ERROR_KEY, OFFER_INPUT_KEY, RpcError, TASK_TYPE_KEY, WORKER_KEY,
    X402_ERROR, X402_PAYLOAD, X402_RECEIPTS, X402_REQUIRED, X402_STATUS, code,
    tasks::{artifact, task},
};
use crate::state::AppState;
use hiregate_contracts::id::WorkerId;
use hiregate_engine::hire::{
    error::{ErrorKind, HireError},
    outcome::{Outcome, Settlement},
    resource::{OFFER_EXTRA_KEY, ResourceExecution, ResourceRequest},
};

/// The task input a message carries: its first `data` part, else its first `text` part (the
/// JSON it holds, or the text as a JSON string).
fn input_of(message: &Map<String, Value>) -> Option<Value> {
    let parts = message.get("parts")?.as_array()?;
    if let Some(data) = parts.iter().find_map(|part| part.get("data")) {
        return Some(data.clone());
    }
    let text = parts
        .iter()
        .find_map(|part| part.get("text").and_then(Value::as_str))?;
    Some(serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())))
}

pub(super) fn non_empty<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// `SendMessage`: a declined offer ends its task; a payment pays its task ([`paid`]); anything
/// else is a new task, answered with its offer ([`unpaid`]).
pub(super) async fn send_message(
    state: &AppState,
    path_worker: Option<&str>,
    params: &Value,
    correlation_id: String,
) -> Result<Value, RpcError> {
    let message = params
        .get("message")
        .and_then(Value::as_object)
        .ok_or_else(|| RpcError::params("params.message is required"))?;
    let metadata = message
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let task_id = non_empty(message, "taskId").map(str::to_owned);
    let context_id = non_empty(message, "contextId").map(str::to_owned);
    if metadata.get(X402_STATUS).and_then(Value::as_str) == Some("payment-rejected") {
        // The client declined the offer: the task ends; nothing was stored for it.
        let task_id = task_id.ok_or_else(|| {
            RpcError::params("a payment-rejected message names the task it declines (taskId)")
        })?;
        let context_id = context_id.unwrap_or_else(|| task_id.clone());
        return Ok(task(
            &task_id,
            &context_id,
            "TASK_STATE_FAILED",
            "The payment requirements were declined; nothing was paid or run.",
            json!({X402_STATUS: "payment-rejected", X402_RECEIPTS: []}),
            None,
        ));
    }
    match metadata.get(X402_PAYLOAD) {
        Some(payload) => {
            // A payment message's text is talk ("here is the payment"); only a data part can
            // be the input sent again.
            let input = message
                .get("parts")
                .and_then(Value::as_array)
                .and_then(|parts| parts.iter().find_map(|part| part.get("data")))
                .cloned();
            paid(
                state,
                path_worker,
                &metadata,
                payload,
                input,
                task_id,
                context_id,
                correlation_id,
            )
            .await
        }
        None if task_id.is_some() => Err(RpcError::params(format!(
            "a message to a task waiting for its payment carries the signed payment in \
             metadata[{X402_PAYLOAD:?}] ({X402_STATUS}: payment-submitted), or declines it \
             ({X402_STATUS}: payment-rejected)"
        ))),
        None => {
            unpaid(
                state,
                path_worker,
                &metadata,
                input_of(message),
                context_id,
                correlation_id,
            )
            .await
        }
    }
}

/// The listing and task type a new message is for: the path's (or `hiregate.workerId`'s)
/// listing, and `hiregate.taskType` or the listing's only task type.
async fn resource_of(
    state: &AppState,
    path_worker: Option<&str>,
    metadata: &Map<String, Value>,
) -> Result<(WorkerId, String), RpcError> {
    let raw = path_worker
        .or_else(|| non_empty(metadata, WORKER_KEY))
        .ok_or_else(|| {
            RpcError::params(format!(
                "name the listing in message.metadata[{WORKER_KEY:?}] (or use its own interface, \
                 /a2a/workers/{{id}}, named by its agent card)"
            ))
        })?;
    let not_found = || RpcError::new(code::INVALID_PARAMS, "not_found", "no such listing");
    let worker_id: WorkerId = raw.parse().map_err(|_| not_found())?;
    if let Some(task_type) = non_empty(metadata, TASK_TYPE_KEY) {
        return Ok((worker_id, task_type.to_owned()));
    }
    let listing = state
        .store
        .get_worker(&worker_id)
        .await
        .map_err(|e| RpcError::of(HireError::from(e)))?
        .ok_or_else(not_found)?;
    let task_types = listing.tasks.task_types();
    match task_types.as_slice() {
        [only] => Ok((worker_id, only.as_str().to_owned())),
        several => Err(RpcError::params(format!(
            "this listing offers several task types: name one in \
             message.metadata[{TASK_TYPE_KEY:?}] ({})",
            several
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn body_of(input: &Value) -> Result<Bytes, RpcError> {
    serde_json::to_vec(input)
        .map(Bytes::from)
        .map_err(|e| RpcError::of(HireError::internal(e)))
}

/// A new task: the engine's signed offer, nothing stored.
async fn unpaid(
    state: &AppState,
    path_worker: Option<&str>,
    metadata: &Map<String, Value>,
    input: Option<Value>,
    context_id: Option<String>,
    correlation_id: String,
) -> Result<Value, RpcError> {
    let (worker_id, task_type) = resource_of(state, path_worker, metadata).await?;
    let input = input.ok_or_else(|| {
        RpcError::params("the message carries no task input: send it as a data part")
    })?;
    let hired = state
        .hire
        .hire_resource(ResourceRequest {
            worker_id,
            task_type,
            body: body_of(&input)?,
            payment_signature: None,
            webhook_url: None,
            correlation_id,
        })
        .await;
    let demand = match hired.execution.result {
        Ok(Outcome::PaymentRequired(demand)) => demand,
        Ok(_) => {
            return Err(RpcError::of(HireError::internal_msg(
                "an unpaid resource call answered something else than its offer",
            )));
        }
        Err(error) => return Err(RpcError::of(error)),
    };
    let mut required = serde_json::to_value(&demand.challenge)
        .map_err(|e| RpcError::of(HireError::internal(e)))?;
    let mut task_id = None;
    if let Some(accepts) = required.get_mut("accepts").and_then(Value::as_array_mut) {
        for accepted in accepts {
            if let Some(offer) = accepted
                .pointer_mut(&format!("/extra/{OFFER_EXTRA_KEY}"))
                .and_then(Value::as_object_mut)
            {
                task_id = task_id.or_else(|| {
                    offer
                        .get("terms")
                        .and_then(|t| t.get("contract_id"))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                });
                offer.insert(OFFER_INPUT_KEY.to_owned(), input.clone());
            }
        }
    }
    let task_id = task_id.ok_or_else(|| {
        RpcError::of(HireError::internal_msg(
            "the resource offer names no contract",
        ))
    })?;
    let context_id = context_id.unwrap_or_else(|| task_id.clone());
    Ok(task(
        &task_id,
        &context_id,
        "TASK_STATE_INPUT_REQUIRED",
        &format!(
            "Payment is required: {} Sign one of x402.payment.required's accepts (x402 v2) and \
             send it in this task's next message as x402.payment.payload.",
            demand.message
        ),
        json!({X402_STATUS: "payment-required", X402_REQUIRED: required}),
        None,
    ))
}

/// The offer's signed terms field at `pointer`, if the payment echoes an offer.
pub(super) fn offered(payload: &Value, pointer: &str) -> Option<String> {
    payload
        .pointer(&format!("/accepted/extra/{OFFER_EXTRA_KEY}/terms{pointer}"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A payment for a task: the engine makes the contract from the offer it echoes (once) and
/// runs it.
#[allow(clippy::too_many_arguments)]
async fn paid(
    state: &AppState,
    path_worker: Option<&str>,
    metadata: &Map<String, Value>,
    payload: &Value,
    input: Option<Value>,
    task_id: Option<String>,
    context_id: Option<String>,
    correlation_id: String,
) -> Result<Value, RpcError> {
    let mut payload = payload.clone();
    if !payload.is_object() {
        return Err(RpcError::params(format!(
            "metadata[{X402_PAYLOAD:?}] must be an x402 v2 PaymentPayload object"
        )));
    }
    let offered_input = payload
        .pointer_mut(&format!("/accepted/extra/{OFFER_EXTRA_KEY}"))
        .and_then(Value::as_object_mut)
        .and_then(|offer| offer.remove(OFFER_INPUT_KEY));
    let offered_task = offered(&payload, "/contract_id");
    if let (Some(task_id), Some(offered_task)) = (&task_id, &offered_task)
        && task_id != offered_task
    {
        return Err(RpcError::params(format!(
            "the payment answers the offer of task {offered_task}, not of task {task_id}"
        )));
    }
    let raw_worker = path_worker
        .map(str::to_owned)
        .or_else(|| offered(&payload, "/worker/id"))
        .or_else(|| non_empty(metadata, WORKER_KEY).map(str::to_owned))
        .ok_or_else(|| {
            RpcError::params("the payment echoes no hiregate offer and names no listing")
        })?;
    let worker_id: WorkerId = raw_worker
        .parse()
        .map_err(|_| RpcError::new(code::INVALID_PARAMS, "not_found", "no such listing"))?;
    let task_type = offered(&payload, "/task/task_type")
        .or_else(|| non_empty(metadata, TASK_TYPE_KEY).map(str::to_owned))
        .ok_or_else(|| {
            RpcError::params("the payment echoes no hiregate offer and names no task type")
        })?;
    let input = input.or(offered_input).ok_or_else(|| {
        RpcError::params(
            "no task input: echo the offer of x402.payment.required unchanged (it carries the \
             input), or send the input again as a data part",
        )
    })?;
    let network = payload
        .pointer("/accepted/network")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let payer = payload
        .pointer("/payload/authorization/from")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let header = base64::engine::general_purpose::STANDARD
        .encode(serde_json::to_vec(&payload).map_err(|e| RpcError::of(HireError::internal(e)))?);
    let hired = state
        .hire
        .hire_resource(ResourceRequest {
            worker_id,
            task_type,
            body: body_of(&input)?,
            payment_signature: Some(header),
            webhook_url: None,
            correlation_id,
        })
        .await;
    let task_id = hired
        .contract_id
        .clone()
        .or(task_id)
        .or(offered_task)
        .unwrap_or_default();
    let context_id = context_id.unwrap_or_else(|| task_id.clone());
    paid_task(
        state,
        &task_id,
        &context_id,
        hired,
        &Receipt { network, payer },
    )
}

/// What a failed receipt names.
struct Receipt {
    network: String,
    payer: Option<String>,
}

impl Receipt {
    fn failed(&self, reason: &str) -> Value {
        let mut receipt = json!({
            "success": false,
            "errorReason": reason,
            "transaction": "",
            "network": self.network,
        });
        if let Some(payer) = &self.payer {
            receipt["payer"] = json!(payer);
        }
        receipt
    }
}

/// The task a paid message came to.
fn paid_task(
    state: &AppState,
    task_id: &str,
    context_id: &str,
    hired: ResourceExecution,
    receipt: &Receipt,
) -> Result<Value, RpcError> {
    let ResourceExecution {
        execution,
        contract_id,
        capability,
        ..
    } = hired;
    let mut extra = Map::new();
    if let Some(contract_id) = &contract_id {
        extra.insert(CONTRACT_KEY.to_owned(), json!(contract_id));
        if let Some(token) = &capability {
            extra.insert(ACCESS_KEY.to_owned(), access(state, contract_id, token));
        }
    }
    let failed = |code: &str, text: &str, extra: Map<String, Value>| {
        let mut metadata = json!({
            X402_STATUS: "payment-failed",
            X402_ERROR: code.to_uppercase(),
            X402_RECEIPTS: [receipt.failed(text)],
        });
        if let Some(object) = metadata.as_object_mut() {
            object.extend(extra);
        }
        task(
            task_id,
            context_id,
            "TASK_STATE_FAILED",
            text,
            metadata,
            None,
        )
    };
    let working = |text: &str, extra: Map<String, Value>| {
        let mut metadata = json!({X402_STATUS: "payment-verified", X402_RECEIPTS: []});
        if let Some(object) = metadata.as_object_mut() {
            object.extend(extra);
        }
        task(
            task_id,
            context_id,
            "TASK_STATE_WORKING",
            text,
            metadata,
            None,
        )
    };
    let outcome = match execution.result {
        Ok(outcome) => outcome,
        // A transient failure (facilitator or chain unreachable, a full queue) charged
        // nothing and may pass: an error to retry, not a failed task.
        Err(error)
            if contract_id.is_some()
                && !matches!(error.kind, ErrorKind::Busy | ErrorKind::Unavailable) =>
        {
            return Ok(failed(error.code.as_str(), &error.message, extra));
        }
        Err(error) => return Err(RpcError::of(error)),
    };
    Ok(match outcome {
        Outcome::PaymentRequired(demand) => {
            let reason = demand
                .challenge
                .error
                .clone()
                .unwrap_or_else(|| demand.message.clone());
            failed(
                demand.code.as_str(),
                &format!(
                    "The payment was refused ({reason}); nothing was paid or run. Send a new message for a fresh offer."
                ),
                extra,
            )
        }
        Outcome::Accepted(work) => {
            let receipts: Vec<Value> = work
                .payment_response
                .as_ref()
                .and_then(|r| serde_json::to_value(r).ok())
                .into_iter()
                .collect();
            let settled = matches!(work.settlement, Settlement::Settled { .. });
            match work.deliverable {
                Some(content) if settled => {
                    let mut metadata =
                        json!({X402_STATUS: "payment-completed", X402_RECEIPTS: receipts});
                    if let Some(object) = metadata.as_object_mut() {
                        object.extend(extra);
                    }
                    task(
                        task_id,
                        context_id,
                        "TASK_STATE_COMPLETED",
                        "Paid: the deliverable passed its verification and the payment settled.",
                        metadata,
                        Some(artifact(task_id, content, work.verification)),
                    )
                }
                _ => working(
                    "The deliverable passed its verification; it is released when the payment \
                     settles (GetTask).",
                    extra,
                ),
            }
        }
        Outcome::SettlementFailed(failure) => {
            let reason = failure
                .reason
                .clone()
                .unwrap_or_else(|| "settlement_failed".to_owned());
            let mut task = failed(
                "settlement_failed",
                &format!("The settlement failed ({reason}); the deliverable is withheld."),
                extra,
            );
            if let Some(settlement) = failure
                .settlement
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
            {
                task["status"]["message"]["metadata"][X402_RECEIPTS] = json!([settlement]);
            }
            task
        }
        Outcome::Pending(_) | Outcome::InProgress(_) | Outcome::Queued(_) => working(
            "Paid; the work goes on: follow it with GetTask (Authorization: Bearer the \
             hiregate.access token).",
            extra,
        ),
        Outcome::Failed(failure) => {
            // Whether sending the payment again retries the work (HIRE's `retry_allowed`), the
            // attempts and the worker's own error.
            let mut extra = extra;
            extra.insert(
                ERROR_KEY.to_owned(),
                json!({"code": failure.code.as_str(), "details": failure.details}),
            );
            failed(failure.code.as_str(), &failure.message, extra)
        }
    })
}

/// The capability token of a paid task, and where it reads.
fn access(state: &AppState, contract_id: &str, token: &str) -> Value {
    let base = state
        .hire
        .base_url()
        .as_str()
        .trim_end_matches('/')
        .to_owned();
    let contract = format!("{base}/v1/contracts/{contract_id}");
    json!({
        "token_type": "Bearer",
        "token": token,
        "grants": ["GetTask", "contract", "events", "receipt", "disputes"],
        "contract": contract,
        "events": format!("{contract}/events"),
        "receipt": format!("{contract}/receipt"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_input_is_the_first_data_part_else_the_text() {
        let message = json!({"parts": [{"text": "hi"}, {"data": {"a": 1}}]});
        assert_eq!(
            input_of(message.as_object().unwrap()),
            Some(json!({"a": 1}))
        );
        let message = json!({"parts": [{"text": "{\"a\": 2}"}]});
        assert_eq!(
            input_of(message.as_object().unwrap()),
            Some(json!({"a": 2}))
        );
        let message = json!({"parts": [{"text": "plain"}]});
        assert_eq!(input_of(message.as_object().unwrap()), Some(json!("plain")));
        assert_eq!(input_of(json!({"parts": []}).as_object().unwrap()), None);
    }
}
