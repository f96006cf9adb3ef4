//! Tracing setup: an env filter (`RUST_LOG` wins over `log.level`) and a pretty or JSON fmt
//! layer, whose access lines are written on a path of their own ([`access`]). Tests call
//! [`init_for_tests`], which installs a test-writer subscriber once per process and prints only
//! when `TEST_LOG` is set, or [`capture`], which records the current thread's log lines in the
//! production JSON format to check what is (and is not) logged.

use std::{
    io::IsTerminal as _,
    sync::{Arc, Mutex, Once, PoisonError},
};

use tracing_subscriber::{
    EnvFilter, Registry, filter::Targets, fmt, fmt::MakeWriter, layer::SubscriberExt,
    util::SubscriberInitExt,
};

use hiregate_engine::settings::{LogFormat, LogSettings};

pub use access::write_deferred as write_deferred_access_lines;
use access::{Shape, WithAccessLines};

mod access;

/// The global subscriber could not be installed.
#[derive(Debug, thiserror::Error)]
#[error("cannot install the tracing subscriber: {0}")]
pub struct TelemetryError(#[from] tracing_subscriber::util::TryInitError);

/// A filter layer over the registry, whichever kind [`filter_for`] chose.
type Filter = Box<dyn tracing_subscriber::Layer<Registry> + Send + Sync>;

/// `RUST_LOG` when it is set and valid (an `EnvFilter`, which also takes span and field
/// directives), else our crates at `level` as a plain per-target filter. An `EnvFilter` looks up
/// a lock-guarded table of spans each time a span is made, entered, left and closed, even when
/// no directive needs it: with one span per request that was 0.3 µs of an unpaid 402's 36 µs of
/// server time (perf, `--bench unpaid`). A per-target filter decides once per call site.
fn filter_for(level: &str) -> Filter {
    if let Ok(filter) = EnvFilter::try_from_default_env() {
        return Box::new(filter);
    }
    match directives(level).parse::<Targets>() {
        Ok(targets) => Box::new(targets),
        Err(_) => Box::new(EnvFilter::new(directives(level))),
    }
}

/// Our crates and the HTTP layer at `level`; dependencies only when noisy.
fn directives(level: &str) -> String {
    format!(
        "warn,hiregate={level},hiregate_gateway={level},hiregate_http={level},\
         hiregate_engine={level},hiregate_store={level},hiregate_payments={level},\
         hiregate_contracts={level},tower_http={level}"
    )
}

/// The JSON lines of `log.format = "json"`.
fn json_layer<S, W>(writer: W) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    W: for<'writer> MakeWriter<'writer> + Clone + Send + Sync + 'static,
{
    let lines = fmt::layer()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_writer(writer.clone());
    WithAccessLines::new(lines, writer, Shape::Json)
}

/// The pretty lines of `log.format = "pretty"`, coloured when `colours`.
fn pretty_layer<S, W>(writer: W, colours: bool) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    W: for<'writer> MakeWriter<'writer> + Clone + Send + Sync + 'static,
{
    let lines = fmt::layer()
        .with_target(true)
        .with_ansi(colours)
        .with_writer(writer.clone());
    WithAccessLines::new(lines, writer, Shape::Pretty { colours })
}

/// Install the process-wide subscriber described by `[log]`, writing to stdout. The pretty
/// format is coloured only on a terminal: in a file or a log collector the colour codes are
/// noise. (Their cost is small: `--bench unpaid`, 5 runs each, ratio median 0.615 uncoloured
/// against 0.563 coloured, within the runs' spread of 0.46–0.69.)
pub fn init(settings: &LogSettings) -> Result<(), TelemetryError> {
    let colours = std::io::stdout().is_terminal();
    match unlocked_stdout() {
        Some(stdout) => init_writing_to(settings, stdout, colours),
        None => init_writing_to(settings, std::io::stdout, colours),
    }
}

/// Standard output without `std::io::Stdout`'s lock: a second handle on it, through which each
/// `write` goes straight to the file. `Stdout` holds its lock across the `write` call, so two
/// workers logging at once queue on it, and the one that waits is put to sleep and woken: with
/// a sink behind such a lock, strace of the 402 bench counted one `futex` call per request,
/// against one per 13 requests without logging. Each call is whole lines, at most 4 KiB of
/// them unless one line is longer: a file or terminal takes each call whole and a pipe up to
/// 4 KiB at once, so lines from two threads do not interleave (a longer line into a pipe
/// might).
fn unlocked_stdout() -> Option<Arc<std::fs::File>> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd as _;
        let handle = std::io::stdout().as_fd().try_clone_to_owned().ok()?;
        Some(Arc::new(std::fs::File::from(handle)))
    }
    #[cfg(not(unix))]
    None
}

/// [`init`], writing to `writer`, coloured when `colours`: the 402 bench installs the shipped
/// subscriber over `/dev/null`. Lines are written by the thread that logs them, one `write`
/// each (access lines of a busy runtime worker: several at once, see
/// [`write_deferred_access_lines`]): a writer thread of their own (`tracing-appender`, batched)
/// made the unpaid 402 slower on 2 cores, 0.52 → 0.43 of a raw axum handler (`--bench
/// unpaid`), most likely because its wake-ups cost more than the writes it took over.
pub fn init_writing_to<W>(
    settings: &LogSettings,
    writer: W,
    colours: bool,
) -> Result<(), TelemetryError>
where
    W: for<'writer> MakeWriter<'writer> + Clone + Send + Sync + 'static,
{
    let filter = filter_for(settings.level.as_str());
    let registry = tracing_subscriber::registry().with(filter);
    match settings.format {
        LogFormat::Pretty => registry.with(pretty_layer(writer, colours)).try_init()?,
        LogFormat::Json => registry.with(json_layer(writer)).try_init()?,
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

/// Log lines recorded by [`capture`].
#[derive(Debug, Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    /// Everything logged so far, one JSON object per line.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The lines, parsed (lines that are not JSON are skipped).
    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.text()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

impl std::io::Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl MakeWriter<'_> for CapturedLogs {
    type Writer = Self;

    fn make_writer(&self) -> Self::Writer {
        self.clone()
    }
}

/// Keeps a [`capture`] recording; dropping it stops it.
#[derive(Debug)]
pub struct CaptureGuard {
    _default: tracing::subscriber::DefaultGuard,
    _second: tracing::Dispatch,
}

/// Record this thread's logs at `level` (our crates; dependencies at warn) in the JSON format of
/// `log.format = "json"`, until the guard is dropped. On a current-thread runtime that is
/// everything the gateway's tasks log.
pub fn capture(level: &str) -> (CaptureGuard, CapturedLogs) {
    let logs = CapturedLogs::default();
    let subscriber = tracing_subscriber::registry()
        .with(EnvFilter::new(directives(level)))
        .with(json_layer(logs.clone()));
    let default = tracing::subscriber::set_default(subscriber);
    // tracing caches each callsite's interest when it is first hit. With a single registered
    // dispatcher it asks only the hitting thread's default, so a callsite first hit on another
    // test's thread (no subscriber there) would be cached as "never" and silence this capture.
    // A second, uninterested dispatcher makes tracing ask every registered one, this included.
    let second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    (
        CaptureGuard {
            _default: default,
            _second: second,
        },
        logs,
    )
}
