//! The middleware layers every route shares. Two are written by hand: each does in one step what
//! a stack of generic layers did (request id, trace span, id propagation; metrics, access log,
//! timeout), without their per-request allocations (label strings, boxed services, a second
//! clone of the route). The third narrows tower-http's CORS to the requests that need it. The
//! unpaid 402 is a few microseconds of work: the layers around it were most of its cost
//! (`integration-tests/benches/unpaid.rs` measures it against a raw axum handler).
//!
//! ```text
//! Identify (outermost): x-request-id kept or made → at debug, span "http" {request_id}
//!    → CORS (tower-http, for requests with `Origin`; preflights answered here, outside
//!      metrics; any other request gets CORS's `Vary` alone)
//!    → Observe: timeout (503 `request_timeout`) → metrics + access log + 5xx error event
//!    → the route
//! ← x-request-id on every answer (Identify)
//! ```

use std::{
    collections::HashMap,
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::{Arc, PoisonError, RwLock},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use axum::{
    extract::{MatchedPath, Request},
    http::{HeaderValue, Method, header},
    response::{IntoResponse, Response},
};
use futures::{FutureExt as _, future::Either};
use prometheus_client::metrics::{counter::Counter, histogram::Histogram};
use tower::{Layer, Service};
use tower_http::cors::{self, CorsLayer};
use tracing::Instrument;

use super::X_REQUEST_ID;
use crate::error::ApiError;
use hiregate_engine::metrics::{HttpLabels, Metrics, RouteLabels};

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

/// The target of the access line, which the gateway's log setup writes on a path of its own.
pub const ACCESS_LOG_TARGET: &str = "hiregate_gateway::access";

/// Route label of a request no route matched.
const UNMATCHED: &str = "unmatched";

/// The request id (a client's own is kept, else a v4 UUID), the request's trace span, and the
/// id on the answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Identify;

impl<S> Layer<S> for Identify {
    type Service = IdentifyService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        IdentifyService { inner }
    }
}

/// See [`Identify`].
#[derive(Debug, Clone)]
pub struct IdentifyService<S> {
    inner: S,
}

impl<S> Service<Request> for IdentifyService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let id = match request.headers().get(&X_REQUEST_ID) {
            Some(own) => own.clone(),
            None => {
                let made = new_request_id();
                request.headers_mut().insert(X_REQUEST_ID, made.clone());
                made
            }
        };
        // At debug, every line logged while serving the request carries its id through this
        // span; at info the access line carries it alone (with method, route and status), and
        // the span is not made. A span is made, entered, left and closed through the subscriber
        // and its fields are formatted up front, logged under or not: 2.3 µs of an unpaid
        // 402's 63 µs of server time on a 2-core VM (perf, `--bench unpaid`). Displayed, not
        // debugged: a `&str` field is written escaped char by char.
        let span = tracing::debug_span!("http", request_id = %id.to_str().unwrap_or(""));
        let answer = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        let answer = async move {
            let Ok(mut response) = answer.await;
            response.headers_mut().entry(X_REQUEST_ID).or_insert(id);
            Ok(response)
        };
        if span.is_disabled() {
            Box::pin(answer)
        } else {
            Box::pin(answer.instrument(span))
        }
    }
}

/// CORS for the requests that carry `Origin`, as every cross-origin request from a browser
/// does: those (preflights among them) go through tower-http's CORS. Any other request (an SDK,
/// an agent, curl) gets only the `Vary` that CORS puts on every answer, so that a shared cache
/// never serves a browser an answer made without its origin. CORS builds its answer headers per
/// request (the `Vary` list joined anew, `Access-Control-Expose-Headers`, which only browsers
/// read, merged into the answer): its frames alone were about 1 µs of an unpaid 402's 63 µs
/// (perf, `--bench unpaid`).
///
/// The CORS settings are shared, not held by each route's service: axum clones a route's whole
/// service stack for every request, and tower-http's `Cors` holds its settings by value (the
/// origin list and the `Vary` list are vectors, the other headers `Bytes`), so each request
/// paid two allocations and about eight reference counts for settings it never read.
#[derive(Debug, Clone)]
pub struct BrowserCors(Arc<CorsLayer>);

impl BrowserCors {
    /// `cors` for the requests that carry `Origin`.
    pub fn new(cors: CorsLayer) -> Self {
        // tower-http checks its rules (and panics on a set it refuses) when it wraps a service:
        // wrapped per browser request below, so checked here once, at start-up.
        drop(cors.layer(()));
        Self(Arc::new(cors))
    }
}

impl<S> Layer<S> for BrowserCors {
    type Service = BrowserCorsService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        BrowserCorsService {
            inner,
            cors: Arc::clone(&self.0),
        }
    }
}

/// See [`BrowserCors`].
#[derive(Debug, Clone)]
pub struct BrowserCorsService<S> {
    inner: S,
    cors: Arc<CorsLayer>,
}

/// What tower-http's CORS puts in `Vary` by default, joined as it joins it.
const CORS_VARY: HeaderValue = HeaderValue::from_static(
    "origin, access-control-request-method, access-control-request-headers",
);

type VaryAdded<F> =
    futures::future::Map<F, fn(Result<Response, Infallible>) -> Result<Response, Infallible>>;

impl<S> Service<Request> for BrowserCorsService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<cors::ResponseFuture<S::Future>, VaryAdded<S::Future>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if request.headers().contains_key(header::ORIGIN) {
            // The service made ready goes to CORS; this one keeps a clone (tower's idiom for
            // handing a ready service on).
            let fresh = self.inner.clone();
            let ready = std::mem::replace(&mut self.inner, fresh);
            return Either::Left(self.cors.layer(ready).call(request));
        }
        let add_vary: fn(Result<Response, Infallible>) -> Result<Response, Infallible> = |answer| {
            let Ok(mut response) = answer;
            response.headers_mut().append(header::VARY, CORS_VARY);
            Ok(response)
        };
        Either::Right(self.inner.call(request).map(add_vary))
    }
}

/// A v4 UUID, encoded without an intermediate `String`.
fn new_request_id() -> HeaderValue {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    HeaderValue::from_str(id.hyphenated().encode_lower(&mut text))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Request metrics, one access log line per request at info (target
/// `hiregate_gateway::access`: method, matched route (never the raw path or query, which may
/// carry ids and tokens), status, latency and request id; headers and bodies are never logged,
/// they carry API keys and payment signatures), an error event for a 5xx, and the request
/// timeout (`http.request_timeout_s`, answered as 503 `request_timeout`).
#[derive(Debug, Clone)]
pub struct Observe {
    meters: Arc<Meters>,
    timeout: Duration,
}

impl Observe {
    /// Meters into `metrics`, cutting requests off after `timeout`.
    pub fn new(metrics: Arc<Metrics>, timeout: Duration) -> Self {
        Self {
            meters: Arc::new(Meters {
                metrics,
                routes: RwLock::default(),
            }),
            timeout,
        }
    }
}

impl<S> Layer<S> for Observe {
    type Service = ObserveService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ObserveService {
            inner,
            observe: self.clone(),
        }
    }
}

/// See [`Observe`].
#[derive(Debug, Clone)]
pub struct ObserveService<S> {
    inner: S,
    observe: Observe,
}

impl<S> Service<Request> for ObserveService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let method = request.method().clone();
        let route = request.extensions().get::<MatchedPath>().cloned();
        let request_id = request.headers().get(&X_REQUEST_ID).cloned();
        let meters = Arc::clone(&self.observe.meters);
        let timeout = self.observe.timeout;
        let started = Instant::now();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let response = match tokio::time::timeout(timeout, answer).await {
                Ok(Ok(response)) => response,
                Err(_elapsed) => ApiError::RequestTimeout.into_response(),
            };
            let elapsed = started.elapsed();
            let status = response.status().as_u16();
            let route = route.as_ref().map_or(UNMATCHED, MatchedPath::as_str);
            let latency_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
            let request_id = request_id_text(
                request_id
                    .as_ref()
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or(""),
            );
            tracing::info!(
                target: ACCESS_LOG_TARGET,
                method = %method,
                route = %route,
                status,
                latency_ms,
                request_id = %request_id,
                "request served"
            );
            if response.status().is_server_error() {
                tracing::error!(status, latency_ms, request_id = %request_id, "response failed");
            }
            meters.observe(&method, route, status, elapsed);
            Ok(response)
        })
    }
}

/// A request id as logged (and as a hire's correlation id): at most 128 characters of a
/// client's own.
pub(crate) fn request_id_text(id: &str) -> &str {
    match id.char_indices().nth(128) {
        Some((end, _)) => &id[..end],
        None => id,
    }
}

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meters").finish_non_exhaustive()
    }
}

/// The metric series of each (route, method, status) seen, found again without building
/// their label sets.
struct Meters {
    metrics: Arc<Metrics>,
    /// By route, then method and status (a handful each).
    routes: RwLock<HashMap<String, Vec<MethodMeters>>>,
}

struct MethodMeters {
    method: Method,
    duration: Histogram,
    requests: Vec<(u16, Counter)>,
}

impl Meters {
    fn observe(&self, method: &Method, route: &str, status: u16, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        {
            let routes = self.routes.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(meters) = routes
                .get(route)
                .and_then(|methods| methods.iter().find(|m| m.method == *method))
                && let Some((_, requests)) = meters.requests.iter().find(|(s, _)| *s == status)
            {
                meters.duration.observe(seconds);
                requests.inc();
                return;
            }
        }
        let mut routes = self.routes.write().unwrap_or_else(PoisonError::into_inner);
        let methods = routes.entry(route.to_owned()).or_default();
        let index = match methods.iter().position(|m| m.method == *method) {
            Some(index) => index,
            None => {
                let duration = self
                    .metrics
                    .http_request_duration
                    .get_or_create(&RouteLabels {
                        method: method.to_string(),
                        route: route.to_owned(),
                    })
                    .clone();
                methods.push(MethodMeters {
                    method: method.clone(),
                    duration,
                    requests: Vec::new(),
                });
                methods.len() - 1
            }
        };
        let meters = &mut methods[index];
        let requests = match meters.requests.iter().find(|(s, _)| *s == status) {
            Some((_, counter)) => counter.clone(),
            None => {
                let counter = self
                    .metrics
                    .http_requests
                    .get_or_create(&HttpLabels {
                        method: method.to_string(),
                        route: route.to_owned(),
                        status,
                    })
                    .clone();
                meters.requests.push((status, counter.clone()));
                counter
            }
        };
        meters.duration.observe(seconds);
        requests.inc();
    }
}
