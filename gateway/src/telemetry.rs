//! Tracing setup: an env filter (`RUST_LOG` wins over `log.level`) and a pretty or JSON fmt
//! layer. Tests call [`init_for_tests`], which installs a test-writer subscriber once per process
//! and prints only when `TEST_LOG` is set.

use std::sync::Once;

use tracing_subscriber::{EnvFilter, fmt, layer::SubscriberExt, util::SubscriberInitExt};

use crate::config::{LogFormat, LogSettings};

/// The global subscriber could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the tracing subscriber: {0}")]
pub struct TelemetryError(#[from] tracing_subscriber::util::TryInitError);

fn filter_for(level: &str) -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        // Our crates and the HTTP layer at the configured level; dependencies only when noisy.
        EnvFilter::new(format!(
            "warn,hiregate={level},hiregate_gateway={level},hiregate_payments={level},\
             hiregate_contracts={level},tower_http={level}"
        ))
    })
}

/// Install the process-wide subscriber described by `[log]`.
pub fn init(settings: &LogSettings) -> Result<(), TelemetryError> {
    let filter = filter_for(settings.level.as_str());
    let registry = tracing_subscriber::registry().with(filter);
    match settings.format {
        LogFormat::Pretty => registry.with(fmt::layer().with_target(true)).try_init()?,
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(true),
            )
            .try_init()?,
    }
    Ok(())
}

/// Install a subscriber for tests, once; output goes through the test harness's capture and only
/// when `TEST_LOG` is set (debug level, overridable with `RUST_LOG`).
pub fn init_for_tests() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("TEST_LOG").is_none() {
            return;
        }
        // Another harness may have installed one already; that one is then used.
        let _ = tracing_subscriber::registry()
            .with(filter_for("debug"))
            .with(fmt::layer().with_test_writer())
            .try_init();
    });
}
