//! What a finished hire reports, shared by the MCP `hire` tool and `hiregate seeker hire`: the
//! contract's state and outcome from its view, and whether it is still worth waiting for.

use serde_json::{Value, json};

/// States in which the gateway is still working on a paid contract (settlement included: an
/// `exact` contract shows its deliverable once the money has moved).
const IN_PROGRESS: &[&str] = &[
    "paid",
    "executing",
    "pending",
    "delivered",
    "verifying",
    "settling",
];
/// States in which the seeker got what it paid for.
pub const ACCEPTED: &[&str] = &["accepted", "settling", "settled"];

/// What a finished hire reports (the MCP `hire` tool returns it, `hiregate seeker hire` prints
/// it): the contract's state, deliverable, verification, payment, settlement and receipt from
/// its view `body`, and the `PAYMENT-RESPONSE` of the paid execute.
pub fn hire_report(
    contract_id: &str,
    state: &str,
    body: &Value,
    payment_response: Option<&hiregate_payments::SettleResponse>,
) -> Value {
    json!({
        "contract_id": contract_id,
        "state": state,
        "deliverable": body["deliverable"],
        "verification": body["verification"],
        "payment": body["payment"],
        "settlement": body["settlement"],
        "payment_response": payment_response,
        "receipt": body["receipt"],
    })
}

/// Still worth waiting for: a working state, or `accepted` with no acceptance window (settlement
/// follows at once; with a window it waits for the window, which the callers do not).
pub fn in_progress(state: &str, view: &Value) -> bool {
    IN_PROGRESS.contains(&state)
        || (state == "accepted"
            && view
                .pointer("/terms/acceptance_window_s")
                .and_then(Value::as_u64)
                == Some(0))
}
