//! Readiness checks behind `GET /readyz`.
//!
//! The database check is built in; the app always registers the facilitator's check
//! ([`crate::facilitator::FacilitatorReadiness`]: the embedded facilitator's chain nodes, or the
//! external facilitator's `/supported`), and callers may add more through
//! `hiregate::startup::AppOptions::readiness_checks` (the binary).

use async_trait::async_trait;

/// One dependency the gateway needs to serve traffic.
#[async_trait]
pub trait ReadinessCheck: Send + Sync + 'static {
    /// Key under `checks` in the `/readyz` body, e.g. `facilitator`.
    fn name(&self) -> &'static str;

    /// `Ok` when usable; `Err` with a short, secret-free reason otherwise.
    async fn check(&self) -> Result<(), String>;
}
