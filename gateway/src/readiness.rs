//! Readiness checks behind `GET /readyz`.
//!
//! The database check is built in. Seam for the execute flow: the facilitator (embedded chain
//! RPC, or the external facilitator's `/supported`) plugs in as another [`ReadinessCheck`]
//! through [`crate::startup::AppOptions::readiness_checks`]; until one is registered, `/readyz`
//! reports only what it checked.

use async_trait::async_trait;

/// One dependency the gateway needs to serve traffic.
#[async_trait]
pub trait ReadinessCheck: Send + Sync + 'static {
    /// Key under `checks` in the `/readyz` body, e.g. `facilitator`.
    fn name(&self) -> &'static str;

    /// `Ok` when usable; `Err` with a short, secret-free reason otherwise.
    async fn check(&self) -> Result<(), String>;
}
