//! The HTTP API: router, middleware, and one module per resource.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use sqlx::PgPool;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnFailure, TraceLayer};
use tracing::Level;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

pub mod admission;
pub mod apps;
pub mod auth;
pub mod budgets;
pub mod capacity;
pub mod caps;
pub mod efficiency;
pub mod error;
pub mod extract;
pub mod health;
pub mod imports;
pub mod jobs;
pub mod models;
pub mod nodes;
mod openapi;
pub mod page;
pub mod power;
pub mod predictions;
pub mod runs;
pub mod tokens;
pub mod ui;
pub mod unreserved;

pub use crate::config::Settings;
use crate::service::Service;
use error::{PROBLEM_JSON, problem_for_status, problem_response};
use extract::BodyLimit;

/// What every request shares: the service, one `Arc` cloned per handler.
#[derive(Clone)]
pub struct AppState(Arc<Service>);

impl std::ops::Deref for AppState {
    type Target = Service;

    fn deref(&self) -> &Service {
        &self.0
    }
}

impl AppState {
    pub fn new(pool: PgPool, settings: Settings) -> AppState {
        AppState(Arc::new(Service::new(pool, settings)))
    }
}

/// The documented API routes, before state and middleware.
fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
        .routes(routes!(runs::create_run))
        .routes(routes!(runs::create_batch))
        .routes(routes!(runs::get_run))
        .routes(routes!(imports::import_sacct))
        .routes(routes!(apps::list_apps))
        .routes(routes!(apps::get_app, apps::put_app))
        .routes(routes!(apps::list_app_runs))
        .routes(routes!(tokens::create_token, tokens::list_tokens))
        .routes(routes!(tokens::revoke_token))
        .routes(routes!(predictions::get_predictions))
        .routes(routes!(predictions::post_predictions))
        .routes(routes!(predictions::get_curve))
        .routes(routes!(predictions::get_model))
        .routes(routes!(admission::admission))
        .routes(routes!(jobs::start_job, jobs::list_jobs))
        .routes(routes!(jobs::finish_job))
        .routes(routes!(jobs::get_job, jobs::cancel_job))
        .routes(routes!(unreserved::report_unreserved))
        .routes(routes!(power::headroom))
        .routes(routes!(budgets::list_budgets))
        .routes(routes!(
            budgets::get_budget,
            budgets::put_budget,
            budgets::delete_budget
        ))
        .routes(routes!(caps::list_caps))
        .routes(routes!(caps::get_cap, caps::put_cap, caps::delete_cap))
        .routes(routes!(capacity::max_nodes))
        .routes(routes!(capacity::optimal_nodes))
        .routes(routes!(capacity::pareto))
        .routes(routes!(nodes::list_nodes))
        .routes(routes!(
            nodes::get_node,
            nodes::put_node,
            nodes::delete_node
        ))
        .routes(routes!(nodes::post_samples))
        .routes(routes!(nodes::get_classification))
        .routes(routes!(
            efficiency::post_efficiency,
            efficiency::get_efficiency
        ))
        .routes(routes!(efficiency::get_scalability))
        .routes(routes!(models::search_models))
        .routes(routes!(models::get_scaling_model))
        .routes(routes!(models::check_rules))
}

/// The OpenAPI document of the service.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api().split_for_parts().1
}

/// The complete service: API, documentation, metrics and middleware.
pub fn router(pool: PgPool, settings: Settings) -> Router {
    router_from(AppState::new(pool, settings))
}

/// The service on a given state (whose caches the caller may also feed).
pub fn router_from(state: AppState) -> Router {
    let (api, spec) = api().split_for_parts();
    let limit = state.settings.max_body_bytes;
    let timeout = state.settings.request_timeout;
    api.merge(SwaggerUi::new("/docs").url("/openapi.json", spec))
        .merge(ui::routes())
        .fallback(not_found)
        .with_state(state)
        .layer(
            // Outermost first.
            ServiceBuilder::new()
                .layer(middleware::from_fn(drop_unusable_request_id))
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(
                    TraceLayer::new_for_http()
                        .make_span_with(request_span)
                        .on_response(log_response)
                        // Mostly clients' doing (a body too slow, the
                        // database away): internal errors and panics are
                        // logged as errors where they happen.
                        .on_failure(DefaultOnFailure::new().level(Level::WARN)),
                )
                .layer(middleware::from_fn(record_metrics))
                .layer(middleware::from_fn(ensure_problem))
                .layer(CatchPanicLayer::custom(panic_response))
                .layer(middleware::from_fn(move |request: Request, next: Next| {
                    refuse_declared_oversize(request, next, limit)
                }))
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::SERVICE_UNAVAILABLE,
                    timeout,
                ))
                .layer(DefaultBodyLimit::max(limit))
                .layer(axum::Extension(BodyLimit(limit))),
        )
}

/// The longest `x-request-id` a client may give.
const REQUEST_ID_MAX: usize = 128;

/// A client's `x-request-id` is echoed and logged with every line of its
/// request, so one that is long (a probe sent 60 KB: 120 MB of log in 0.7 s)
/// or not plain text is replaced by a generated one.
async fn drop_unusable_request_id(mut request: Request, next: Next) -> Response {
    let usable = |id: &HeaderValue| {
        let bytes = id.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= REQUEST_ID_MAX
            && bytes.iter().all(|b| b.is_ascii_graphic())
    };
    let headers = request.headers_mut();
    if headers.get_all("x-request-id").iter().count() > 1
        || headers.get("x-request-id").is_some_and(|id| !usable(id))
    {
        headers.remove("x-request-id");
    }
    next.run(request).await
}

/// Routes that supervisors and Prometheus call every few seconds: logged
/// at DEBUG, so that INFO shows what clients asked.
const PROBES: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

fn request_span(request: &Request) -> tracing::Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if PROBES.contains(&route) {
        return tracing::debug_span!("probe", method = %request.method(), route, request_id);
    }
    tracing::info_span!(
        "request",
        method = %request.method(),
        route,
        uri = %request.uri().path(),
        request_id,
    )
}

/// Each answer, in its request's span: at INFO, or at DEBUG for a probe
/// (`request_span`).
fn log_response(response: &Response, latency: std::time::Duration, span: &tracing::Span) {
    let status = response.status().as_u16();
    let latency_us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    if span.metadata().is_some_and(|m| m.name() == "request") {
        tracing::info!(status, latency_us, "finished processing request");
    } else {
        tracing::debug!(status, latency_us, "finished processing request");
    }
}

async fn record_metrics(request: Request, next: Next) -> Response {
    let started = Instant::now();
    // Only standard methods become labels: invented ones must not grow /metrics.
    let method = match *request.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    let route = request.extensions().get::<MatchedPath>().cloned();
    let response = next.run(request).await;
    let route = route.as_ref().map_or("unmatched", MatchedPath::as_str);
    let elapsed = started.elapsed().as_secs_f64();
    RequestSeries::with(method, route, response.status().as_u16(), |series| {
        series.count.increment(1);
        series.duration.record(elapsed);
    });
    response
}

/// The request counter and duration histogram of one (method, route,
/// status), registered once per worker thread: recording a request then
/// takes no lock, copies no label and allocates nothing. The label sets are
/// bounded: standard methods, the router's route templates and status codes.
struct RequestSeries {
    method: &'static str,
    status: u16,
    count: metrics::Counter,
    duration: metrics::Histogram,
}

impl RequestSeries {
    fn with(method: &'static str, route: &str, status: u16, record: impl FnOnce(&RequestSeries)) {
        thread_local! {
            static SERIES: std::cell::RefCell<crate::cache::FastMap<Box<str>, Vec<RequestSeries>>> =
                std::cell::RefCell::default();
        }
        SERIES.with_borrow_mut(|series| {
            if !series.contains_key(route) {
                series.insert(route.into(), Vec::new());
            }
            let of_route = series.get_mut(route).expect("inserted above");
            let index = match of_route
                .iter()
                .position(|s| s.method == method && s.status == status)
            {
                Some(index) => index,
                None => {
                    crate::telemetry::ensure_recorder();
                    let labels = [
                        ("method", method.to_owned()),
                        ("route", route.to_owned()),
                        ("status", status.to_string()),
                    ];
                    of_route.push(RequestSeries {
                        method,
                        status,
                        count: metrics::counter!("http_requests_total", &labels),
                        duration: metrics::histogram!("http_request_duration_seconds", &labels),
                    });
                    of_route.len() - 1
                }
            };
            record(&of_route[index]);
        });
    }
}

/// Every error answer is a problem document, including those made by routing,
/// time-outs and the panic guard rather than by a handler; the dashboard's
/// error pages stay pages.
async fn ensure_problem(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    // Problem documents, and the dashboard's error pages, stay as they are.
    let explained = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| {
            let v = v.as_bytes();
            v.starts_with(PROBLEM_JSON.as_bytes()) || v.starts_with(b"text/html")
        });
    if !(status.is_client_error() || status.is_server_error()) || explained {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let replacement = problem_response(problem_for_status(status));
    let (new_parts, body) = replacement.into_parts();
    // The problem's own headers (its type, Retry-After) over the original's.
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.extend(new_parts.headers);
    parts.status = new_parts.status;
    Response::from_parts(parts, body)
}

/// A body declared (Content-Length) larger than the limit is refused at
/// once, before any of it is read: otherwise the request waits for a body
/// it will refuse, until the time-out, and a client that sent `Expect:
/// 100-continue` is invited to upload it.
async fn refuse_declared_oversize(request: Request, next: Next, limit: usize) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return error::ApiError::body_over(limit).into_response();
    }
    next.run(request).await
}

fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = message, "a request handler panicked");
    problem_response(problem_for_status(StatusCode::INTERNAL_SERVER_ERROR))
}

async fn not_found() -> Response {
    problem_response(problem_for_status(StatusCode::NOT_FOUND))
}

/// A JSON answer serialized into a buffer of `capacity` bytes, for answers
/// whose size is known in advance (axum's `Json` starts small and grows).
pub fn json_reply<T: serde::Serialize>(value: &T, capacity: usize) -> error::ApiResult<Response> {
    Ok(json_response(json_body(value, capacity)?))
}

/// `value` as JSON, written into a buffer of `capacity` bytes at first.
pub fn json_body<T: serde::Serialize>(value: &T, capacity: usize) -> error::ApiResult<Vec<u8>> {
    let mut body = Vec::with_capacity(capacity);
    serde_json::to_writer(&mut body, value)
        .map_err(|e| error::ApiError::Internal(anyhow::anyhow!("serializing an answer: {e}")))?;
    Ok(body)
}

/// A 200 answer of JSON already written.
pub fn json_response(body: impl Into<axum::body::Body>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.into(),
    )
        .into_response()
}
