//! Prometheus metrics, one registry per [`crate::startup::App`].
//!
//! Why `prometheus-client` rather than the `metrics` facade + exporter: the facade installs a
//! process-global recorder, and tests run many gateways in one process; a registry per app keeps
//! their counters apart. Rendered in the OpenMetrics text format, which Prometheus scrapes.

use prometheus_client::{
    encoding::{EncodeLabelSet, EncodeLabelValue, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

/// Content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Labels of HTTP request metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// Request method.
    pub method: String,
    /// Matched route template (`/v1/workers/{id}`), or `unmatched`; never the raw path, which
    /// would make label cardinality unbounded.
    pub route: String,
    /// Response status code.
    pub status: u16,
}

/// Labels of HTTP latency.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// Request method.
    pub method: String,
    /// Matched route template.
    pub route: String,
}

/// Result of a worker probe.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum ProbeOutcome {
    /// Probe passed.
    Passed,
    /// Probe failed.
    Failed,
}

/// Labels of probe counters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// Probe result.
    pub outcome: ProbeOutcome,
}

/// The gateway's metric set.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Requests served.
    pub http_requests: Family<HttpLabels, Counter>,
    /// Request latency, seconds.
    pub http_request_duration: Family<RouteLabels, Histogram>,
    /// Worker health probes.
    pub worker_probes: Family<ProbeLabels, Counter>,
    /// Workers that turned unhealthy.
    pub workers_marked_unhealthy: Counter,
    /// Workers that recovered.
    pub workers_marked_healthy: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("hiregate");
        let http_requests = Family::<HttpLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests served",
            http_requests.clone(),
        );
        let http_request_duration = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            // 1 ms … ~32 s.
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency",
            http_request_duration.clone(),
        );
        let worker_probes = Family::<ProbeLabels, Counter>::default();
        registry.register(
            "worker_probes",
            "Worker health probes",
            worker_probes.clone(),
        );
        let workers_marked_unhealthy = Counter::default();
        registry.register(
            "workers_marked_unhealthy",
            "Workers that crossed the miss threshold",
            workers_marked_unhealthy.clone(),
        );
        let workers_marked_healthy = Counter::default();
        registry.register(
            "workers_marked_healthy",
            "Unhealthy workers that passed a probe again",
            workers_marked_healthy.clone(),
        );
        Self {
            registry,
            http_requests,
            http_request_duration,
            worker_probes,
            workers_marked_unhealthy,
            workers_marked_healthy,
        }
    }

    /// The current values in OpenMetrics text.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
