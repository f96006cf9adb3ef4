//! The access line, written on a path of its own: every request logs one, so it is the one line
//! whose cost every request pays. The fmt layer formats any event: it looks up the request's span
//! and prints its fields (the request id again), and formats each field through `dyn` writers.
//! [`WithAccessLines`] hands every other event and every span to that layer unchanged and writes
//! the access line itself, in the same shape (pretty or JSON) minus the span, whose one field
//! the line carries already.
//!
//! A thread of the gateway's runtime holds its access lines back while it is busy and writes
//! them in one `write` when it goes idle ([`write_deferred`], tokio's park hook), when they
//! reach [`DEFERRED_BYTES`], before any other line it logs, and when it ends. Each `write` of
//! a line was 1.6 µs of an unpaid 402's 48.5 µs of server time, about half of it the kernel
//! rescheduling on the way out; held back, the writes cost 0.17 µs a request (perf, `--bench
//! unpaid`). An idle gateway writes each line at once; a busy one loses at most
//! [`DEFERRED_BYTES`] of access lines per worker to a `kill -9`. Other threads (a test's
//! runtime, a blocking task) write each line at once.

use std::{
    cell::RefCell,
    fmt::Write as _,
    io::Write as _,
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use hiregate_http::layers::ACCESS_LOG_TARGET;
use tracing::{
    Event, Metadata, Subscriber,
    field::{Field, Visit},
    level_filters::LevelFilter,
    span,
    subscriber::Interest,
};
use tracing_subscriber::{Layer, fmt::MakeWriter, layer::Context};

/// How lines are written: the fmt layer's two shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Shape {
    /// `2026-11-28T08:40:00.123456Z  INFO target: message key=value …`, coloured or not.
    Pretty { colours: bool },
    /// One JSON object: `timestamp`, `level`, the fields (`message` among them), `target`.
    #[default]
    Json,
}

/// The most bytes of access lines a busy thread holds back (about 20 lines) and writes in one
/// call: what a pipe takes in one piece (`PIPE_BUF`), so that lines of two threads writing to
/// one pipe at once never interleave.
const DEFERRED_BYTES: usize = 4096;

/// Where access lines are written: the layer's writer.
type Sink = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// The fmt layer `lines`, except that access lines are written here, to `writer`, as `shape`.
pub(super) struct WithAccessLines<L> {
    lines: L,
    sink: Sink,
    shape: Shape,
}

impl<L> WithAccessLines<L> {
    pub(super) fn new<W>(lines: L, writer: W, shape: Shape) -> Self
    where
        W: for<'writer> MakeWriter<'writer> + Send + Sync + 'static,
    {
        // A failed write is dropped, as the fmt layer drops it.
        let sink: Sink = Arc::new(move |bytes: &[u8]| {
            let _ = writer.make_writer().write_all(bytes);
        });
        Self { lines, sink, shape }
    }
}

impl<S, L> Layer<S> for WithAccessLines<L>
where
    S: Subscriber,
    L: Layer<S>,
{
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.lines.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.lines.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.lines.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.lines.enabled(metadata, ctx)
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        self.lines.on_new_span(attrs, id, ctx);
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.lines.max_level_hint()
    }

    fn on_record(&self, span: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        self.lines.on_record(span, values, ctx);
    }

    fn on_follows_from(&self, span: &span::Id, follows: &span::Id, ctx: Context<'_, S>) {
        self.lines.on_follows_from(span, follows, ctx);
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.lines.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if event.metadata().target() == ACCESS_LOG_TARGET {
            self.write_access_line(event);
        } else {
            // The thread's lines stay in the order it logged them.
            let _ = LINE.try_with(|line| line.try_borrow_mut().map(|mut line| line.write_out()));
            self.lines.on_event(event, ctx);
        }
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.lines.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.lines.on_exit(id, ctx);
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        self.lines.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &span::Id, new: &span::Id, ctx: Context<'_, S>) {
        self.lines.on_id_change(old, new, ctx);
    }
}

thread_local! {
    /// Each thread's line under construction and the lines it holds back, kept between lines.
    static LINE: RefCell<Line> = RefCell::new(Line::default());
}

/// The park hook (`on_thread_park`) of the gateway's runtime: the calling thread writes the
/// access lines it holds, in one `write`, and from now on holds them back while it is busy.
pub fn write_deferred() {
    let _ = LINE.try_with(|line| {
        line.try_borrow_mut().map(|mut line| {
            line.deferring = true;
            line.write_out();
        })
    });
}

impl<L> WithAccessLines<L> {
    fn write_access_line(&self, event: &Event<'_>) {
        let write = |line: &mut Line| {
            if !line
                .sink
                .as_ref()
                .is_some_and(|s| Arc::ptr_eq(s, &self.sink))
            {
                line.write_out();
                line.sink = Some(Arc::clone(&self.sink));
            }
            let held = line.bytes.len();
            line.start(self.shape, event.metadata());
            event.record(line);
            line.finish(event.metadata());
            if line.bytes.len() > DEFERRED_BYTES {
                line.write_first(held);
            }
            if !line.deferring || line.bytes.len() >= DEFERRED_BYTES {
                line.write_out();
            }
        };
        let written = LINE.try_with(|line| {
            line.try_borrow_mut()
                .map(|mut line| write(&mut line))
                .is_ok()
        });
        // Only if writing a line logged another line on the same thread, or the thread is
        // ending and its line is gone.
        if written != Ok(true) {
            write(&mut Line::default());
        }
    }
}

/// A line being written after the lines held back, with the text of a value that needs
/// escaping before it is written.
#[derive(Default)]
struct Line {
    /// Lines held back, then the line being written.
    bytes: Vec<u8>,
    /// Where [`Line::bytes`] go.
    sink: Option<Sink>,
    /// Whether this thread holds its lines back (it runs [`write_deferred`] when idle).
    deferring: bool,
    /// The shape of the line being written (set by [`Line::start`]).
    shape: Shape,
    text: String,
    /// The timestamp's whole second, as written last on this thread.
    second: Option<(u64, [u8; SECOND_LENGTH])>,
}

/// `2026-11-28T08:40:00`.
const SECOND_LENGTH: usize = 19;

/// `level` right-aligned in five columns, as `{level:>5}` writes it. The uncoloured line is
/// put together byte by byte: each `write!` through the formatting machinery cost about as much
/// as the bytes it wrote, on a line every request pays.
fn padded(level: tracing::Level) -> &'static str {
    match level {
        tracing::Level::ERROR => "ERROR",
        tracing::Level::WARN => " WARN",
        tracing::Level::INFO => " INFO",
        tracing::Level::DEBUG => "DEBUG",
        tracing::Level::TRACE => "TRACE",
    }
}

/// `micros` (below a million) in six digits, zeros first, as `{:06}` writes it.
fn six_digits(micros: u32) -> [u8; 6] {
    let mut digits = [b'0'; 6];
    let mut rest = micros % 1_000_000;
    for digit in digits.iter_mut().rev() {
        // A digit: below 10, so the cast keeps it whole.
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    digits
}

const DIM: &str = "\x1b[2m";
const ITALIC: &str = "\x1b[3m";
const RESET: &str = "\x1b[0m";

impl Drop for Line {
    /// A thread that ends writes what it held back.
    fn drop(&mut self) {
        self.write_out();
    }
}

impl Line {
    /// Write the lines held back, in one `write`.
    fn write_out(&mut self) {
        self.write_first(self.bytes.len());
    }

    /// Write the first `len` bytes held back (whole lines), in one `write`.
    fn write_first(&mut self, len: usize) {
        if let Some(sink) = &self.sink
            && len > 0
        {
            sink(&self.bytes[..len]);
        }
        self.bytes.drain(..len);
    }

    fn start(&mut self, shape: Shape, metadata: &Metadata<'_>) {
        self.shape = shape;
        let level = *metadata.level();
        match shape {
            Shape::Pretty { colours } => {
                if colours {
                    self.bytes.extend_from_slice(DIM.as_bytes());
                }
                self.timestamp();
                if colours {
                    let colour = match level {
                        tracing::Level::ERROR => "\x1b[31m",
                        tracing::Level::WARN => "\x1b[33m",
                        tracing::Level::INFO => "\x1b[32m",
                        tracing::Level::DEBUG => "\x1b[34m",
                        tracing::Level::TRACE => "\x1b[35m",
                    };
                    let _ = write!(
                        self.bytes,
                        "{RESET} {colour}{level:>5}{RESET} {DIM}{}{RESET}{DIM}:{RESET}",
                        metadata.target()
                    );
                } else {
                    self.bytes.push(b' ');
                    self.bytes.extend_from_slice(padded(level).as_bytes());
                    self.bytes.push(b' ');
                    self.bytes.extend_from_slice(metadata.target().as_bytes());
                    self.bytes.push(b':');
                }
            }
            Shape::Json => {
                self.bytes.extend_from_slice(b"{\"timestamp\":\"");
                self.timestamp();
                let _ = write!(self.bytes, "\",\"level\":\"{level}\"");
            }
        }
    }

    fn finish(&mut self, metadata: &Metadata<'_>) {
        if self.shape == Shape::Json {
            self.bytes.extend_from_slice(b",\"target\":");
            self.json_string(metadata.target());
            self.bytes.push(b'}');
        }
        self.bytes.push(b'\n');
    }

    /// RFC 3339 in UTC to the microsecond, as the fmt layer writes it; the date and time of day
    /// are formatted once a second.
    fn timestamp(&mut self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let seconds = now.as_secs();
        let text = match self.second {
            Some((second, text)) if second == seconds => text,
            _ => {
                let mut text = [b'0'; SECOND_LENGTH];
                if let Some(time) = i64::try_from(seconds)
                    .ok()
                    .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
                {
                    let formatted = time.format("%Y-%m-%dT%H:%M:%S").to_string();
                    if formatted.len() == SECOND_LENGTH {
                        text.copy_from_slice(formatted.as_bytes());
                    }
                }
                self.second = Some((seconds, text));
                text
            }
        };
        self.bytes.extend_from_slice(&text);
        self.bytes.push(b'.');
        self.bytes
            .extend_from_slice(&six_digits(now.subsec_micros()));
        self.bytes.push(b'Z');
    }

    /// `value` as a JSON string, quotes included.
    fn json_string(&mut self, value: &str) {
        // Writing a `&str` into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut self.bytes, value);
    }

    /// The key of a field: ` key=` (pretty) or `,"key":` (JSON).
    fn key(&mut self, field: &Field) {
        match self.shape {
            Shape::Pretty { colours: true } => {
                let _ = write!(self.bytes, " {ITALIC}{}{RESET}{DIM}={RESET}", field.name());
            }
            Shape::Pretty { colours: false } => {
                self.bytes.push(b' ');
                self.bytes.extend_from_slice(field.name().as_bytes());
                self.bytes.push(b'=');
            }
            Shape::Json => {
                self.bytes.push(b',');
                self.json_string(field.name());
                self.bytes.push(b':');
            }
        }
    }

    fn pretty(&self) -> bool {
        matches!(self.shape, Shape::Pretty { .. })
    }

    /// A number or a boolean, written as it displays in either shape.
    fn plain(&mut self, field: &Field, value: impl std::fmt::Display) {
        self.key(field);
        let _ = write!(self.bytes, "{value}");
    }
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // The message comes first in a pretty line, unnamed, as the fmt layer writes it.
        if self.pretty() && field.name() == "message" {
            let _ = write!(self.bytes, " {value:?}");
            return;
        }
        self.key(field);
        if self.pretty() {
            let _ = write!(self.bytes, "{value:?}");
        } else {
            let mut text = std::mem::take(&mut self.text);
            text.clear();
            let _ = write!(text, "{value:?}");
            self.json_string(&text);
            self.text = text;
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if self.pretty() {
            self.record_debug(field, &value);
        } else {
            self.key(field);
            self.json_string(value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.plain(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.plain(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.plain(field, value);
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if self.pretty() {
            self.plain(field, value);
        } else {
            self.key(field);
            // A number, or null for what JSON has no number for, as the fmt layer writes it.
            let _ = serde_json::to_writer(&mut self.bytes, &value);
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::{fmt, layer::SubscriberExt as _};

    use super::*;
    use crate::telemetry::CapturedLogs;

    /// One access line, outside any span, through the fmt layer alone and through
    /// [`WithAccessLines`] over it.
    fn both_ways(shape: Shape) -> (String, String) {
        let log = || {
            let method = "POST";
            tracing::info!(
                target: ACCESS_LOG_TARGET,
                method = %method,
                route = %"/v1/contracts/{id}/execute",
                status = 402_u16,
                latency_ms = 3_u64,
                request_id = %r#"client "id" \ é"#,
                "request served"
            );
        };
        let by_fmt = CapturedLogs::default();
        let by_hand = CapturedLogs::default();
        let layer = |logs: &CapturedLogs| -> Box<dyn Layer<_> + Send + Sync> {
            match shape {
                Shape::Json => Box::new(
                    fmt::layer()
                        .json()
                        .flatten_event(true)
                        .with_current_span(true)
                        .with_writer(logs.clone()),
                ),
                Shape::Pretty { colours } => {
                    Box::new(fmt::layer().with_ansi(colours).with_writer(logs.clone()))
                }
            }
        };
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer(&by_fmt)), log);
        let hand = WithAccessLines::new(layer(&by_hand), by_hand.clone(), shape);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(hand), log);
        (by_fmt.text(), by_hand.text())
    }

    /// The line after its timestamp (`2026-11-28T08:40:00.123456Z`).
    fn untimed(line: &str) -> &str {
        let (stamp, rest) = line.split_at(SECOND_LENGTH + 8);
        assert!(
            chrono::DateTime::parse_from_rfc3339(stamp.trim_start_matches(DIM)).is_ok(),
            "{line:?}"
        );
        rest
    }

    #[test]
    fn levels_and_microseconds_are_written_as_the_format_strings_write_them() {
        for level in [
            tracing::Level::ERROR,
            tracing::Level::WARN,
            tracing::Level::INFO,
            tracing::Level::DEBUG,
            tracing::Level::TRACE,
        ] {
            assert_eq!(padded(level), format!("{level:>5}"));
        }
        for micros in [0, 7, 42, 1_000, 99_999, 123_456, 999_999] {
            assert_eq!(
                std::str::from_utf8(&six_digits(micros)).unwrap(),
                format!("{micros:06}")
            );
        }
    }

    #[test]
    fn the_pretty_access_line_is_the_fmt_layers_line() {
        for colours in [false, true] {
            let (by_fmt, by_hand) = both_ways(Shape::Pretty { colours });
            assert_eq!(by_hand.lines().count(), 1, "{by_hand}");
            let offset = if colours { DIM.len() } else { 0 };
            assert_eq!(
                untimed(&by_hand[offset..]),
                untimed(&by_fmt[offset..]),
                "colours {colours}"
            );
        }
    }

    fn access_line(request_id: &str) {
        tracing::info!(
            target: ACCESS_LOG_TARGET,
            status = 402_u16,
            request_id = %request_id,
            "request served"
        );
    }

    /// The lines written, as [`CapturedLogs`] keeps them, and the size of each `write` call.
    #[derive(Clone, Default)]
    struct Calls {
        logs: CapturedLogs,
        sizes: Arc<std::sync::Mutex<Vec<usize>>>,
    }

    impl Calls {
        fn sizes(&self) -> Vec<usize> {
            self.sizes.lock().expect("sizes").clone()
        }

        /// The `request_id` (or `message`) of each line written so far.
        fn lines(&self) -> Vec<String> {
            self.logs
                .lines()
                .iter()
                .map(|line| {
                    let key = if line["request_id"].is_null() {
                        "message"
                    } else {
                        "request_id"
                    };
                    line[key].as_str().unwrap_or_default().to_owned()
                })
                .collect()
        }
    }

    impl std::io::Write for Calls {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.sizes.lock().expect("sizes").push(buf.len());
            self.logs.write(buf)
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl MakeWriter<'_> for Calls {
        type Writer = Self;

        fn make_writer(&self) -> Self {
            self.clone()
        }
    }

    #[test]
    fn a_busy_thread_writes_its_access_lines_when_idle_in_the_order_it_logged() {
        let calls = Calls::default();
        let thread_calls = calls.clone();
        let (held, written_before_the_end) = std::thread::spawn(move || {
            let calls = thread_calls;
            let lines = fmt::layer()
                .json()
                .flatten_event(true)
                .with_writer(calls.clone());
            let layer = WithAccessLines::new(lines, calls.clone(), Shape::Json);
            let subscriber = tracing_subscriber::registry().with(layer);
            tracing::subscriber::with_default(subscriber, || {
                access_line("before any park");
                assert_eq!(
                    calls.lines(),
                    ["before any park"],
                    "no park hook yet: at once"
                );

                write_deferred();
                access_line("a");
                access_line("b");
                assert_eq!(calls.lines().len(), 1, "held while the thread is busy");
                write_deferred();
                assert_eq!(calls.lines()[1..], ["a", "b"]);
                assert_eq!(calls.sizes().len(), 2, "both in one write");

                access_line("c");
                tracing::warn!("another line");
                assert_eq!(calls.lines()[3..], ["c", "another line"], "order kept");

                let mut held = 0;
                while calls.lines().len() == 5 {
                    held += 1;
                    access_line(&format!("busy {held}"));
                }
                // The line past the limit stays held: one write never passes it.
                assert_eq!(calls.lines().len(), 5 + held - 1);
                assert!(held > 10, "{held} lines held at most");
                access_line("at the end");
                (held, calls.lines().len())
            })
        })
        .join()
        .expect("the logging thread");
        assert_eq!(
            calls.lines()[written_before_the_end..],
            [format!("busy {held}"), "at the end".to_owned()],
            "the thread wrote what it held when it ended"
        );
        for size in calls.sizes() {
            assert!(size <= DEFERRED_BYTES, "one write of {size} bytes");
        }
    }

    #[test]
    fn the_json_access_line_is_the_fmt_layers_line() {
        let (by_fmt, by_hand) = both_ways(Shape::Json);
        let parse = |text: &str| {
            let mut line: serde_json::Value = serde_json::from_str(text).expect(text);
            let stamp = line["timestamp"].take();
            assert!(
                chrono::DateTime::parse_from_rfc3339(stamp.as_str().unwrap()).is_ok(),
                "{stamp}"
            );
            line
        };
        let ours = parse(&by_hand);
        assert_eq!(ours, parse(&by_fmt));
        assert_eq!(ours["request_id"], r#"client "id" \ é"#);
        assert_eq!(ours["status"], 402);
    }
}
