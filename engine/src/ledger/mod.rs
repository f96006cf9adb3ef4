//! The ledger you can audit: the store's settlements against the chain, and settlement metrics.
//!
//! | module | role |
//! |---|---|
//! | [`reconcile`] | [`reconcile::reconcile`]: for a block range, settled payments vs the token's `Transfer` / `AuthorizationUsed` logs (Permit2: the proxy settlement carrying the permit) → [`reconcile::ReconcileReport`] (`hiregate reconcile`, `GET /v1/admin/reconcile`) |
//! | [`escrow`] | escrowed (`auth-capture`) payments: the store's steps (authorize, capture, void, refund, reclaim) against the escrow's events, per payment and in totals per asset |
//! | [`report`] | what both sections of a report speak: [`report::Mismatch`] and its kinds, [`report::Tally`], [`report::ReconcileError`] |
//! | [`chain`] | log reads in block windows (token logs, escrow events), receipts with bounded concurrency |
//! | [`settlement_metrics`] | [`run_settlement_metrics`]: settlement outcomes and settled amounts, and escrow outcomes and amounts, from the store's event bus |

pub mod chain;
pub mod escrow;
pub mod reconcile;
pub mod report;
pub mod settlement_metrics;

pub use reconcile::{ReconcileReport, ReconcileRequest, reconcile};
pub use report::ReconcileError;
pub use settlement_metrics::run_settlement_metrics;
