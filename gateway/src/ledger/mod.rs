//! The ledger you can audit: the store's settlements against the chain, and settlement metrics.
//!
//! | module | role |
//! |---|---|
//! | [`reconcile`] | [`reconcile::reconcile`]: for a block range, settled payments vs the token's `Transfer` / `AuthorizationUsed` logs → [`reconcile::ReconcileReport`] (`hiregate reconcile`, `GET /v1/admin/reconcile`) |
//! | [`chain`] | log reads in block windows, settlement receipts with bounded concurrency |
//! | [`settlement_metrics`] | [`run_settlement_metrics`]: settlement outcomes and settled amounts from the store's event bus |

pub mod chain;
pub mod reconcile;
pub mod settlement_metrics;

pub use reconcile::{ReconcileError, ReconcileReport, ReconcileRequest, reconcile};
pub use settlement_metrics::run_settlement_metrics;
