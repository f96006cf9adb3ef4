//! Protocol shapes the gateway exchanges with workers, and their conversion into the internal
//! [`Deliverable`](crate::deliverable::Deliverable).
//!
//! | module | protocol | deliverable comes from |
//! |---|---|---|
//! | [`hire`] | HIRE (native, `worker-sdk`) | `output` or `deliverables` of a `completed`/`partial` response |
//! | [`wattswarm`] | WattSwarm executor | `candidate_output` + `evidence_inline` + `evidence_refs` |
//! | [`superwire`] | Superwire executor | the `workflow_completed` event's `output` (or the sync body) |

pub mod hire;
pub mod superwire;
pub mod wattswarm;
