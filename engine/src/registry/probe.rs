//! Worker probes, one implementation per protocol.
//!
//! A probe answers "is this endpoint alive, and does it offer these task types?". The gateway
//! runs it before listing a worker, when an endpoint or catalog changes, and periodically.
//! `hire` and `wattswarm` share the same contract (`GET /health` → 2xx, `GET /capabilities`
//! → `{"task_types": [...]}`), so both use [`CapabilitiesProbe`]. Superwire executors have
//! neither endpoint: [`SuperwireProbe`] sends the listing's workflow source to
//! `POST /validate`, which runs nothing and needs no secrets, and shows in one call that the
//! executor is reachable, speaks the protocol and accepts the exact workflow every hire sends.

use std::{collections::HashMap, fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use serde::Deserialize;

use crate::outbound::{OutboundClient, OutboundError};
use hiregate_store::listing::model::{Protocol, ProtocolOptions, TaskType, WorkerEndpoint};

/// Which step of a probe failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeCheck {
    /// `GET <endpoint>/health`.
    Health,
    /// `GET <endpoint>/capabilities`.
    Capabilities,
    /// Superwire `POST <endpoint>/validate` with the listing's workflow source.
    Validate,
}

impl ProbeCheck {
    /// Stable name, used in error details.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Health => "health",
            Self::Capabilities => "capabilities",
            Self::Validate => "validate",
        }
    }
}

/// Why a probe failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeFailureKind {
    /// The endpoint is a private/loopback target and those are not allowed.
    TargetNotAllowed,
    /// No connection, a timeout, or a transport error.
    Unreachable,
    /// A non-2xx status.
    BadStatus(u16),
    /// The body is not what the protocol specifies.
    BadBody,
    /// `/capabilities` does not list these task types.
    MissingTaskTypes(Vec<String>),
}

/// A failed probe: which check, why, and a short secret-free description.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} check failed: {detail}", check.as_str())]
pub struct ProbeFailure {
    /// The step that failed.
    pub check: ProbeCheck,
    /// Classification.
    pub kind: ProbeFailureKind,
    /// Human-readable detail.
    pub detail: String,
    /// What the worker said about the refusal (Superwire `/validate` issues), bounded.
    pub diagnostics: Option<serde_json::Value>,
}

impl ProbeFailure {
    fn new(check: ProbeCheck, kind: ProbeFailureKind, detail: impl Into<String>) -> Self {
        Self {
            check,
            kind,
            detail: detail.into(),
            diagnostics: None,
        }
    }

    fn from_outbound(check: ProbeCheck, error: &OutboundError) -> Self {
        let kind = match error {
            OutboundError::BlockedTarget { .. }
            | OutboundError::UnsupportedScheme { .. }
            | OutboundError::InsecureScheme { .. } => ProbeFailureKind::TargetNotAllowed,
            OutboundError::ResponseTooLarge { .. } => ProbeFailureKind::BadBody,
            _ => ProbeFailureKind::Unreachable,
        };
        Self::new(check, kind, error.to_string())
    }
}

/// What a passed probe learned beyond "alive".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeReport {
    /// What the worker said about the listing (Superwire `/validate` diagnostics: warnings,
    /// issues), shown to the operator; `None` when it said nothing.
    pub diagnostics: Option<serde_json::Value>,
}

/// Checks one protocol's liveness and capability endpoints.
#[async_trait]
pub trait WorkerProbe: Send + Sync + 'static {
    /// Probe `endpoint`; `task_types` must all be offered. `options` are the listing's
    /// protocol settings (the Superwire workflow source).
    async fn probe(
        &self,
        client: &OutboundClient,
        endpoint: &WorkerEndpoint,
        task_types: &[&TaskType],
        options: &ProtocolOptions,
        timeout: Duration,
    ) -> Result<ProbeReport, ProbeFailure>;
}

/// Probes by protocol.
#[derive(Clone)]
pub struct ProbeRegistry {
    probes: HashMap<Protocol, Arc<dyn WorkerProbe>>,
}

impl fmt::Debug for ProbeRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeRegistry")
            .field("protocols", &self.probes.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Default for ProbeRegistry {
    /// `hire` and `wattswarm` with [`CapabilitiesProbe`], `superwire` with [`SuperwireProbe`].
    fn default() -> Self {
        Self {
            probes: HashMap::from([
                (
                    Protocol::Hire,
                    Arc::new(CapabilitiesProbe::default()) as Arc<dyn WorkerProbe>,
                ),
                (
                    Protocol::Wattswarm,
                    // The profile is chosen per contract among the declared ones
                    // (`hire::protocol_terms`), so no particular one is required here.
                    Arc::new(CapabilitiesProbe::default()) as Arc<dyn WorkerProbe>,
                ),
                (
                    Protocol::Superwire,
                    Arc::new(SuperwireProbe) as Arc<dyn WorkerProbe>,
                ),
            ]),
        }
    }
}

impl ProbeRegistry {
    /// Add or replace the probe for `protocol`.
    #[must_use]
    pub fn with(mut self, protocol: Protocol, probe: Arc<dyn WorkerProbe>) -> Self {
        self.probes.insert(protocol, probe);
        self
    }

    /// The probe for `protocol`, if one is registered.
    pub fn get(&self, protocol: Protocol) -> Option<&Arc<dyn WorkerProbe>> {
        self.probes.get(&protocol)
    }
}

/// `GET /health` must answer 2xx; `GET /capabilities` must answer 2xx with JSON whose
/// `task_types` lists every task type of the listing (as strings, or as objects with a
/// `task_type` or `name` field).
/// For WattSwarm (`required_profile`), a declared `profiles` list must also hold the profile
/// the adapter sends.
#[derive(Debug, Clone, Copy, Default)]
pub struct CapabilitiesProbe {
    /// Profile that a declared `profiles` list must contain.
    pub required_profile: Option<&'static str>,
}

/// Largest `/capabilities` body read.
const CAPABILITIES_MAX_BYTES: usize = 256 * 1024;

#[derive(Deserialize)]
struct Capabilities {
    task_types: Vec<CapabilityEntry>,
    /// WattSwarm execution profiles (absent for hire workers).
    #[serde(default)]
    profiles: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CapabilityEntry {
    Name(String),
    Object {
        #[serde(alias = "name")]
        task_type: String,
    },
}

impl CapabilityEntry {
    fn task_type(&self) -> &str {
        match self {
            Self::Name(name) | Self::Object { task_type: name } => name,
        }
    }
}

#[async_trait]
impl WorkerProbe for CapabilitiesProbe {
    async fn probe(
        &self,
        client: &OutboundClient,
        endpoint: &WorkerEndpoint,
        task_types: &[&TaskType],
        _options: &ProtocolOptions,
        timeout: Duration,
    ) -> Result<ProbeReport, ProbeFailure> {
        let health = client
            .get(&endpoint.join("health"), timeout)
            .await
            .map_err(|e| ProbeFailure::from_outbound(ProbeCheck::Health, &e))?;
        if !health.status().is_success() {
            let status = health.status().as_u16();
            return Err(ProbeFailure::new(
                ProbeCheck::Health,
                ProbeFailureKind::BadStatus(status),
                format!("GET /health answered {status}"),
            ));
        }

        let check = ProbeCheck::Capabilities;
        let response = client
            .get(&endpoint.join("capabilities"), timeout)
            .await
            .map_err(|e| ProbeFailure::from_outbound(check, &e))?;
        if !response.status().is_success() {
            let status = response.status().as_u16();
            return Err(ProbeFailure::new(
                check,
                ProbeFailureKind::BadStatus(status),
                format!("GET /capabilities answered {status}"),
            ));
        }
        let body = client
            .read_body(response, CAPABILITIES_MAX_BYTES)
            .await
            .map_err(|e| ProbeFailure::from_outbound(check, &e))?;
        let capabilities: Capabilities = serde_json::from_slice(&body).map_err(|e| {
            ProbeFailure::new(
                check,
                ProbeFailureKind::BadBody,
                format!("GET /capabilities is not {{\"task_types\": [...]}}: {e}"),
            )
        })?;
        let offered: Vec<&str> = capabilities
            .task_types
            .iter()
            .map(CapabilityEntry::task_type)
            .collect();
        let missing: Vec<String> = task_types
            .iter()
            .filter(|wanted| !offered.contains(&wanted.as_str()))
            .map(|t| t.as_str().to_owned())
            .collect();
        if !missing.is_empty() {
            return Err(ProbeFailure::new(
                check,
                ProbeFailureKind::MissingTaskTypes(missing.clone()),
                format!("/capabilities does not list {}", missing.join(", ")),
            ));
        }
        if let (Some(profile), Some(profiles)) = (self.required_profile, &capabilities.profiles)
            && !profiles.iter().any(|p| p == profile)
        {
            return Err(ProbeFailure::new(
                check,
                ProbeFailureKind::BadBody,
                format!("/capabilities does not list the profile `{profile}` the gateway sends"),
            ));
        }
        Ok(ProbeReport::default())
    }
}

/// Superwire: `POST /validate` with `{"workflow_source_base64": …}` (the listing's
/// `protocol_options.workflow_source_base64`, required). 2xx lists the worker, with any
/// diagnostics it returned kept for the operator; 4xx refuses it (the executor's validation
/// issues go back to the operator in the error details); no connection, a timeout or a
/// 5xx means unreachable. Task types are the listing's own names for the workflow, so there
/// is nothing to compare them with.
#[derive(Debug, Clone, Copy)]
pub struct SuperwireProbe;

/// Largest `/validate` body read (its diagnostics go back to the operator).
const VALIDATE_MAX_BYTES: usize = 64 * 1024;
/// Most diagnostics entries kept per list.
const MAX_DIAGNOSTICS: usize = 50;

/// The diagnostics in a `/validate` answer (or its `error` object): the lists the seed's
/// shapes use (`issues`, and `diagnostics`/`warnings` should an executor send them), each
/// bounded to [`MAX_DIAGNOSTICS`] entries; `None` when there are none. The seed gives
/// `/validate`'s purpose, not its body, so anything else is ignored.
fn validate_diagnostics(answer: &serde_json::Value) -> Option<serde_json::Value> {
    let mut kept = serde_json::Map::new();
    for field in ["diagnostics", "warnings", "issues"] {
        if let Some(list) = answer.get(field).and_then(|v| v.as_array())
            && !list.is_empty()
        {
            let bounded = list.iter().take(MAX_DIAGNOSTICS).cloned().collect();
            kept.insert(field.to_owned(), serde_json::Value::Array(bounded));
        }
    }
    (!kept.is_empty()).then_some(serde_json::Value::Object(kept))
}

#[async_trait]
impl WorkerProbe for SuperwireProbe {
    async fn probe(
        &self,
        client: &OutboundClient,
        endpoint: &WorkerEndpoint,
        _task_types: &[&TaskType],
        options: &ProtocolOptions,
        timeout: Duration,
    ) -> Result<ProbeReport, ProbeFailure> {
        let check = ProbeCheck::Validate;
        let Some(source) = &options.workflow_source_base64 else {
            return Err(ProbeFailure::new(
                check,
                ProbeFailureKind::BadBody,
                "a superwire listing needs protocol_options.workflow_source_base64",
            ));
        };
        let builder = client
            .request(reqwest::Method::POST, &endpoint.join("validate"))
            .map_err(|e| ProbeFailure::from_outbound(check, &e))?
            .timeout(timeout)
            .json(&serde_json::json!({"workflow_source_base64": source.as_base64()}));
        let response = client
            .send(builder)
            .await
            .map_err(|e| ProbeFailure::from_outbound(check, &e))?;
        let status = response.status();
        let body = client
            .read_body(response, VALIDATE_MAX_BYTES)
            .await
            .unwrap_or_default();
        let answer = serde_json::from_slice::<serde_json::Value>(&body).ok();
        if status.is_success() {
            return Ok(ProbeReport {
                diagnostics: answer.and_then(|answer| validate_diagnostics(&answer)),
            });
        }
        // The seed's error body is {"error": {kind, message, issues}}; read it leniently.
        let message = answer
            .as_ref()
            .and_then(|v| v.pointer("/error/message").and_then(|m| m.as_str()))
            .map(|m| m.chars().take(300).collect::<String>())
            .unwrap_or_default();
        let kind = if status.is_client_error() {
            ProbeFailureKind::BadBody
        } else {
            ProbeFailureKind::BadStatus(status.as_u16())
        };
        let mut failure = ProbeFailure::new(
            check,
            kind,
            format!("POST /validate answered {status}: {message}"),
        );
        failure.diagnostics = answer
            .as_ref()
            .and_then(|v| v.get("error"))
            .and_then(validate_diagnostics);
        Err(failure)
    }
}
