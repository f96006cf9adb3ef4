//! Superwire executor output (seeds/superwire-executor-api.txt): the sync `/execute` body is
//! the workflow `output` block; over SSE the terminal `workflow_completed` event carries
//! `{"output": …}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::deliverable::{Deliverable, DeliverableError, Output};

/// Name of the terminal success event.
pub const WORKFLOW_COMPLETED: &str = "workflow_completed";
/// Name of the terminal failure event.
pub const WORKFLOW_FAILED: &str = "workflow_failed";

/// `data` of a `workflow_completed` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowCompleted {
    /// The workflow's output block.
    pub output: Value,
}

impl WorkflowCompleted {
    /// The deliverable: the output block as a `json` output.
    pub fn to_deliverable(&self) -> Result<Deliverable, DeliverableError> {
        deliverable_from_output(self.output.clone())
    }
}

/// The deliverable of a synchronous `/execute` response body (the output block itself).
pub fn deliverable_from_output(output: Value) -> Result<Deliverable, DeliverableError> {
    Deliverable::completed(Output::Json { content: output })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sse_and_sync_forms_give_the_same_deliverable() {
        let event: WorkflowCompleted =
            serde_json::from_str(r#"{"output":{"result":{"message":"Welcome to Superwire."}}}"#)
                .unwrap();
        let from_event = event.to_deliverable().unwrap();
        let from_body =
            deliverable_from_output(json!({"result": {"message": "Welcome to Superwire."}}))
                .unwrap();
        assert_eq!(from_event.digest().unwrap(), from_body.digest().unwrap());
    }
}
