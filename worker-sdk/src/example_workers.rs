//! The example workers, as library code so tests can run them in-process (the `examples/`
//! programs are thin wrappers for echo and faulty):
//!
//! - **echo**: task types `summarize` and `echo`; always answers JSON valid against
//!   [`summary_output_schema`]: `{"summary": …, "confidence": 0.9}`.
//! - **faulty**: same task types; misbehaves on request, per input field `"mode"` (else the
//!   default given at construction): `ok`, `invalid` (schema-invalid JSON), `fail`
//!   (`failed` report), `slow` (sleeps `delay_ms`, then ok), `pending` (answers pending,
//!   finishes after `delay_ms`), `flaky` (fails attempt 1, succeeds from attempt 2 on —
//!   relies on the gateway's `X-Attempt`).
//!
//! - **outputs**: one task type per HIRE output type, each answering the summary of the input
//!   in that form ([`outputs_builder`], [`outputs_handler`], the schemas a listing gives them in
//!   [`outputs_output_schema`]): `output_text` (`text`), `output_json` (`json`), `output_file`
//!   (a `file` the worker hosts, with its `sha256:` checksum), `output_multiple` (`multiple`:
//!   json, text and file), `output_stream` (`stream`: the summary's words as SSE events,
//!   `delay_ms` apart), and `output_partial` (reports progress with the items done so far, then
//!   ends `partial` with `items_done` of `items` summaries).
//!
//! [`configure_from_env`] applies the environment variables the programs share.

use std::env;
use std::str::FromStr;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};
use url::Url;

use crate::callback::CallbackConfig;
use crate::gateway_auth::GatewayKeys;
use crate::handler::{TaskContext, TaskHandler, TaskOutcome};
use crate::hosted::StreamEvent;
use crate::protocol::{Output, Percent, Progress, TaskError};
use crate::webhook::WebhookSecret;
use crate::worker::WorkerBuilder;

/// Task type producing a summary.
pub const SUMMARIZE: &str = "summarize";
/// Task type echoing the input text as the summary.
pub const ECHO: &str = "echo";
/// The confidence both examples report.
pub const CONFIDENCE: f64 = 0.9;
/// Longest summary, in characters.
const SUMMARY_CHARS: usize = 200;
/// Delay of `slow` and `pending` when neither the input nor the default gives one.
pub const DEFAULT_DELAY: Duration = Duration::from_millis(500);

/// The output schema the examples' valid answers satisfy (and `invalid` answers break).
#[must_use]
pub fn summary_output_schema() -> Value {
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["summary", "confidence"],
        "properties": {
            "summary": {"type": "string"},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}
        }
    })
}

/// The echo worker's builder (name, version, task types); add keys and build with
/// [`echo_handler`].
#[must_use]
pub fn echo_builder() -> WorkerBuilder {
    WorkerBuilder::new("echo-worker", env!("CARGO_PKG_VERSION"))
        .task_type(SUMMARIZE)
        .task_type(ECHO)
}

/// The echo worker's handler.
#[must_use]
pub fn echo_handler() -> impl TaskHandler {
    |ctx: TaskContext, input: Value| async move { summary_outcome(&ctx, &input) }
}

/// Task types of the outputs worker, one per HIRE output type (and a partial one).
pub const OUTPUT_TASK_TYPES: [&str; 6] = [
    "output_text",
    "output_json",
    "output_file",
    "output_multiple",
    "output_stream",
    "output_partial",
];

/// The outputs worker's builder; add keys and build with [`outputs_handler`].
#[must_use]
pub fn outputs_builder() -> WorkerBuilder {
    OUTPUT_TASK_TYPES.iter().fold(
        WorkerBuilder::new("outputs-worker", env!("CARGO_PKG_VERSION")),
        |builder, task_type| builder.task_type(*task_type),
    )
}

/// The output schema a listing of the outputs worker gives `task_type` (what its answers
/// satisfy; a stream is judged on its assembled text).
#[must_use]
pub fn outputs_output_schema(task_type: &str) -> Value {
    match task_type {
        "output_text" | "output_stream" => json!({"type": "string", "minLength": 1}),
        "output_multiple" => json!({
            "type": "array",
            "prefixItems": [summary_output_schema(), {"type": "string"}, summary_output_schema()],
            "minItems": 3
        }),
        "output_partial" => json!({"type": "array", "items": summary_output_schema()}),
        _ => summary_output_schema(),
    }
}

/// The outputs worker's handler (see the module docs).
#[must_use]
pub fn outputs_handler() -> impl TaskHandler {
    |ctx: TaskContext, input: Value| async move {
        let text = input_text(&input);
        let summary = json!({"summary": text, "confidence": CONFIDENCE});
        let delay = input
            .get("delay_ms")
            .and_then(Value::as_u64)
            .map_or(Duration::ZERO, Duration::from_millis);
        let hosted_summary = |ctx: &TaskContext| {
            Output::File(ctx.host_file(
                "summary.json",
                "application/json",
                summary.to_string().into_bytes(),
            ))
        };
        match ctx.task_type().map(|t| t.as_str().to_owned()).as_deref() {
            Some("output_text") => TaskOutcome::text(text),
            Some("output_file") => TaskOutcome::output(hosted_summary(&ctx)),
            Some("output_multiple") => TaskOutcome::output(Output::Multiple {
                items: vec![
                    Output::Json {
                        content: summary.clone(),
                    },
                    Output::Text {
                        content: text.clone(),
                    },
                    hosted_summary(&ctx),
                ],
            }),
            Some("output_stream") => {
                let words: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
                TaskOutcome::stream(futures::stream::unfold(
                    words.into_iter(),
                    move |mut words| async move {
                        let word = words.next()?;
                        tokio::time::sleep(delay).await;
                        Some((StreamEvent::data(word), words))
                    },
                ))
            }
            Some("output_partial") => partial_outcome(&ctx, &input, &summary, delay).await,
            _ => TaskOutcome::json(summary),
        }
    }
}

/// `output_partial`: `items_done` of `items` summaries, progress reported after each.
async fn partial_outcome(
    ctx: &TaskContext,
    input: &Value,
    summary: &Value,
    delay: Duration,
) -> TaskOutcome {
    let wanted = input.get("items").and_then(Value::as_u64).unwrap_or(3);
    let done = input
        .get("items_done")
        .and_then(Value::as_u64)
        .unwrap_or(wanted)
        .min(wanted);
    let mut items = Vec::new();
    for _ in 0..done {
        tokio::time::sleep(delay).await;
        items.push(Output::Json {
            content: summary.clone(),
        });
        ctx.report_partial(progress_of(items.len(), wanted), items.clone());
    }
    let progress = progress_of(items.len(), wanted);
    if done == wanted {
        TaskOutcome::output(Output::Multiple { items })
    } else {
        TaskOutcome::partial(Some(progress), items)
    }
}

/// `done` of `wanted` items as progress.
fn progress_of(done: usize, wanted: u64) -> Progress {
    // Item counts are small: the float conversions are exact.
    #[allow(clippy::cast_precision_loss)]
    let percent = Percent::new(done as f64 * 100.0 / wanted.max(1) as f64).ok();
    Progress {
        percent,
        message: Some(format!("{done} of {wanted} items")),
    }
}

/// The input's `"text"` field if it has one, else the input's JSON.
fn input_text(input: &Value) -> String {
    match input.get("text") {
        Some(Value::String(text)) => text.clone(),
        _ => input.to_string(),
    }
}

/// The faulty worker's builder; add keys and build with [`faulty_handler`].
#[must_use]
pub fn faulty_builder() -> WorkerBuilder {
    WorkerBuilder::new("faulty-worker", env!("CARGO_PKG_VERSION"))
        .task_type(SUMMARIZE)
        .task_type(ECHO)
}

/// The faulty worker's handler; `default` applies when the input names no `mode`.
#[must_use]
pub fn faulty_handler(default: FaultyBehaviour) -> impl TaskHandler {
    move |ctx: TaskContext, input: Value| async move {
        let behaviour = match FaultyBehaviour::from_input(&input, default) {
            Ok(behaviour) => behaviour,
            Err(error) => return TaskOutcome::Failed(error),
        };
        behaviour.perform(ctx, input).await
    }
}

/// What the faulty worker does with one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultyBehaviour {
    /// The misbehaviour.
    pub mode: FaultyMode,
    /// Delay used by `slow` and `pending`.
    pub delay: Duration,
}

impl FaultyBehaviour {
    /// `mode` with the [`DEFAULT_DELAY`].
    #[must_use]
    pub fn new(mode: FaultyMode) -> Self {
        Self {
            mode,
            delay: DEFAULT_DELAY,
        }
    }

    /// The input's `"mode"` and `"delay_ms"` override the defaults.
    fn from_input(input: &Value, default: Self) -> Result<Self, TaskError> {
        let mode = match input.get("mode") {
            None => default.mode,
            Some(Value::String(raw)) => raw.parse().map_err(|_| {
                TaskError::new("INVALID_INPUT", format!("unknown mode {raw:?}"))
                    .with_details(json!({"field": "mode", "expected": FaultyMode::NAMES}))
            })?,
            Some(_) => {
                return Err(TaskError::new("INVALID_INPUT", "mode must be a string")
                    .with_details(json!({"field": "mode"})));
            }
        };
        let delay = match input.get("delay_ms") {
            None => default.delay,
            Some(value) => value.as_u64().map(Duration::from_millis).ok_or_else(|| {
                TaskError::new("INVALID_INPUT", "delay_ms must be a whole number")
                    .with_details(json!({"field": "delay_ms"}))
            })?,
        };
        Ok(Self { mode, delay })
    }

    async fn perform(self, ctx: TaskContext, input: Value) -> TaskOutcome {
        match self.mode {
            FaultyMode::Ok => summary_outcome(&ctx, &input),
            FaultyMode::Invalid => {
                // `summary` must be a string and `confidence` is required.
                TaskOutcome::json(json!({"summary": 42}))
            }
            FaultyMode::Fail => {
                TaskOutcome::failed("SIMULATED_FAILURE", "the faulty worker was asked to fail")
            }
            FaultyMode::Slow => {
                tokio::time::sleep(self.delay).await;
                summary_outcome(&ctx, &input)
            }
            FaultyMode::Pending => {
                let eta = chrono::Duration::from_std(self.delay)
                    .ok()
                    .map(|d| Utc::now() + d);
                let delay = self.delay;
                TaskOutcome::pending(eta, async move {
                    tokio::time::sleep(delay).await;
                    summary_outcome(&ctx, &input)
                })
            }
            FaultyMode::Flaky if ctx.attempt().get() == 1 => TaskOutcome::failed(
                "TRANSIENT_FAILURE",
                "the faulty worker fails the first attempt",
            ),
            FaultyMode::Flaky => summary_outcome(&ctx, &input),
        }
    }
}

/// The faulty worker's modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultyMode {
    /// Valid output.
    Ok,
    /// Schema-invalid JSON output.
    Invalid,
    /// A `failed` report.
    Fail,
    /// Valid output after a delay.
    Slow,
    /// `pending`, then valid output after a delay.
    Pending,
    /// Fails the first attempt, then valid output.
    Flaky,
}

impl FaultyMode {
    /// The mode names accepted in `"mode"` and `FAULTY_MODE`.
    pub const NAMES: [&'static str; 6] = ["ok", "invalid", "fail", "slow", "pending", "flaky"];
}

/// A mode name outside [`FaultyMode::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown faulty-worker mode {0:?}")]
pub struct UnknownMode(String);

impl FromStr for FaultyMode {
    type Err = UnknownMode;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "ok" => Ok(Self::Ok),
            "invalid" => Ok(Self::Invalid),
            "fail" => Ok(Self::Fail),
            "slow" => Ok(Self::Slow),
            "pending" => Ok(Self::Pending),
            "flaky" => Ok(Self::Flaky),
            other => Err(UnknownMode(other.to_owned())),
        }
    }
}

/// A valid summary of the input: its `"text"` field if it has one, else the input's JSON.
fn summary_outcome(ctx: &TaskContext, input: &Value) -> TaskOutcome {
    let text = match input.get("text") {
        Some(Value::String(text)) => text.clone(),
        _ => input.to_string(),
    };
    let summary = if ctx.task_type().is_some_and(|t| t.as_str() == ECHO) {
        text
    } else {
        text.chars().take(SUMMARY_CHARS).collect()
    };
    TaskOutcome::json(json!({"summary": summary, "confidence": CONFIDENCE}))
}

/// An environment variable had an unusable value.
#[derive(Debug, thiserror::Error)]
#[error("environment variable {name}: {reason}")]
pub struct EnvConfigError {
    name: &'static str,
    reason: String,
}

fn env_var(name: &'static str) -> Option<String> {
    env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn env_parse<T: FromStr>(name: &'static str) -> Result<Option<T>, EnvConfigError>
where
    T::Err: std::fmt::Display,
{
    env_var(name)
        .map(|raw| {
            raw.trim().parse().map_err(|e: T::Err| EnvConfigError {
                name,
                reason: e.to_string(),
            })
        })
        .transpose()
}

/// Applies the examples' environment to a builder:
///
/// | variable | meaning |
/// |---|---|
/// | `WORKER_GATEWAY_JWKS_URL` | gateway JWKS URL (`<gateway>/.well-known/jwks.json`) |
/// | `WORKER_INSECURE_NO_AUTH=1` | skip the token check (local development only) |
/// | `WORKER_PUBLIC_URL` | base URL for `poll_url` |
/// | `WORKER_CALLBACK_GATEWAY_URL` + `WORKER_CALLBACK_SECRET` | completion callbacks (`whsec_…`) |
/// | `WORKER_SYNC_WAIT_MS` | wait before answering `pending` |
/// | `WORKER_MAX_CONCURRENT_TASKS` | handler slots |
///
/// # Errors
/// [`EnvConfigError`] naming the variable with an unusable value.
pub fn configure_from_env(mut builder: WorkerBuilder) -> Result<WorkerBuilder, EnvConfigError> {
    if let Some(url) = env_parse::<Url>("WORKER_GATEWAY_JWKS_URL")? {
        builder = builder.gateway_keys(GatewayKeys::remote(url));
    } else if env_var("WORKER_INSECURE_NO_AUTH").as_deref() == Some("1") {
        builder = builder.allow_unauthenticated_for_local_dev();
    }
    if let Some(url) = env_parse::<Url>("WORKER_PUBLIC_URL")? {
        builder = builder.public_url(url);
    }
    let callback_url = env_parse::<Url>("WORKER_CALLBACK_GATEWAY_URL")?;
    let callback_secret = env_parse::<WebhookSecret>("WORKER_CALLBACK_SECRET")?;
    match (callback_url, callback_secret) {
        (Some(url), Some(secret)) => {
            builder = builder.completion_callback(CallbackConfig::new(url, secret));
        }
        (None, None) => {}
        _ => {
            return Err(EnvConfigError {
                name: "WORKER_CALLBACK_SECRET",
                reason:
                    "set both WORKER_CALLBACK_GATEWAY_URL and WORKER_CALLBACK_SECRET, or neither"
                        .to_owned(),
            });
        }
    }
    if let Some(ms) = env_parse::<u64>("WORKER_SYNC_WAIT_MS")? {
        builder = builder.sync_wait(Duration::from_millis(ms));
    }
    if let Some(max) = env_parse::<usize>("WORKER_MAX_CONCURRENT_TASKS")? {
        builder = builder.max_concurrent_tasks(max);
    }
    Ok(builder)
}

/// The faulty worker's default behaviour from `FAULTY_MODE` (default `ok`) and
/// `FAULTY_DELAY_MS`.
///
/// # Errors
/// [`EnvConfigError`] for an unknown mode or a non-numeric delay.
pub fn faulty_behaviour_from_env() -> Result<FaultyBehaviour, EnvConfigError> {
    let mode = env_parse::<FaultyMode>("FAULTY_MODE")?.unwrap_or(FaultyMode::Ok);
    let delay = env_parse::<u64>("FAULTY_DELAY_MS")?
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_DELAY);
    Ok(FaultyBehaviour { mode, delay })
}
