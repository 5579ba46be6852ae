//! Errors as RFC 7807 `application/problem+json`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

pub use crate::service::Error as ApiError;
use crate::validate::FieldError;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 7807 problem document.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem, e.g. `urn:joulecast:problem:validation`.
    #[serde(rename = "type")]
    #[schema(example = "urn:joulecast:problem:validation")]
    pub kind: String,
    #[schema(example = "Invalid request")]
    pub title: String,
    #[schema(example = 422)]
    pub status: u16,
    #[schema(example = "1 field is invalid")]
    pub detail: String,
    /// The fields at fault and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ProblemField>,
}

/// The problem answers that many operations share, as named OpenAPI
/// response components (`response = Unauthorized` in a path's responses).
pub mod responses {
    use utoipa::ToResponse;

    use super::Problem;

    macro_rules! problem_responses {
        ($($name:ident: $description:literal;)*) => {$(
            #[derive(ToResponse)]
            #[response(description = $description, content_type = "application/problem+json")]
            pub struct $name(#[allow(dead_code)] Problem);
        )*};
    }

    problem_responses! {
        Unauthorized: "Missing or invalid token";
        Unavailable: "Database unavailable, or the request took too long; retry";
        NeedsRead: "Token lacks the `read` scope";
        NeedsIngest: "Token lacks the `ingest` scope";
        NeedsSchedule: "Token lacks the `schedule` scope";
        NeedsAdmin: "Token lacks the `admin` scope";
        NotJson: "Body is not JSON";
        TooLarge: "Body too large";
        MalformedJson: "Malformed JSON, or a query parameter, which this endpoint takes none of";
        UnknownApp: "Unknown application";
        BadQuery: "Bad query parameter";
        BadParameter: "Bad parameter";
        FitsBusy: "Too many fits with an allowed_rmse_pct of their own under way; retry after `Retry-After` seconds";
        HeavyBusy: "Too many heavy requests under way; retry after `Retry-After` seconds";
        NoRuns: "The application has no runs yet";
    }
}

/// One invalid field.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct ProblemField {
    /// Path of the field, e.g. `nodes`, `runs[3].energy_j` or a query parameter.
    #[schema(example = "nodes")]
    pub field: String,
    #[schema(example = "must be between 1 and 1000000 (got 0)")]
    pub reason: String,
}

impl From<FieldError> for ProblemField {
    fn from(e: FieldError) -> Self {
        ProblemField {
            field: e.field,
            reason: e.reason,
        }
    }
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The problem document (logging the details of an internal error).
    pub fn into_problem(self) -> Problem {
        let status = self.status();
        let (slug, detail, errors) = match self {
            ApiError::Invalid(errors) => ("validation", count_fields(&errors), errors),
            ApiError::BadRequest(errors) => ("bad-request", count_fields(&errors), errors),
            ApiError::Unauthorized(reason) => ("unauthorized", reason.to_owned(), vec![]),
            ApiError::Forbidden(scope) => (
                "forbidden",
                format!("this request needs a token with the `{scope}` scope"),
                vec![],
            ),
            ApiError::NotFound(detail) => ("not-found", detail, vec![]),
            ApiError::Conflict { detail, errors } => ("conflict", detail, errors),
            ApiError::PayloadTooLarge(detail) => ("payload-too-large", detail, vec![]),
            ApiError::BodyTimeout(seconds) => (
                "body-timeout",
                format!("the request body did not arrive within {seconds} s"),
                vec![],
            ),
            ApiError::UnsupportedMediaType => (
                "unsupported-media-type",
                "the request body must be JSON (Content-Type: application/json)".to_owned(),
                vec![],
            ),
            ApiError::Unavailable(reason) => ("unavailable", reason.to_owned(), vec![]),
            ApiError::Busy(reason) => ("busy", reason.to_owned(), vec![]),
            ApiError::Internal(error) => {
                // Details stay in the log; the client learns only that it was not its fault.
                tracing::error!(error = format!("{error:#}"), "internal error");
                (
                    "internal",
                    "the service failed to handle the request; it has been logged".to_owned(),
                    vec![],
                )
            }
        };
        Problem {
            kind: format!("urn:joulecast:problem:{slug}"),
            title: title_of(slug).to_owned(),
            status: status.as_u16(),
            detail,
            errors: errors.into_iter().map(ProblemField::from).collect(),
        }
    }
}

/// The title of a problem type: one per type, whichever path (a handler's
/// error or the router's status) produced it, as RFC 9457 asks.
fn title_of(slug: &str) -> &'static str {
    match slug {
        "validation" => "Invalid request",
        "bad-request" => "Bad request",
        "unauthorized" => "Unauthorized",
        "forbidden" => "Forbidden",
        "not-found" => "Not found",
        "method-not-allowed" => "Method not allowed",
        "conflict" => "Conflict",
        "payload-too-large" => "Payload too large",
        "body-timeout" => "Request timeout",
        "timeout" => "Timed out",
        "unsupported-media-type" => "Unsupported media type",
        "unavailable" => "Service unavailable",
        "busy" => "Too many requests",
        "internal" => "Internal error",
        _ => "Request not handled",
    }
}

fn count_fields(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        _ => format!("{} fields are invalid", errors.len()),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let unauthorized = matches!(self, ApiError::Unauthorized(_));
        let mut response = problem_response(self.into_problem());
        if unauthorized {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"joulecast\""),
            );
        }
        response
    }
}

/// Seconds a client is asked to wait after a 429 or a 503.
pub const RETRY_AFTER_S: &str = "1";

/// A problem document as an answer; a 503 or a 429 (unavailable, timed
/// out, busy) also asks the client to retry after `RETRY_AFTER_S`.
pub fn problem_response(problem: Problem) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(problem)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    if matches!(
        status,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
    ) {
        headers.insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
    }
    response
}

/// A problem document for an error response produced outside the handlers
/// (routing, time-outs, panics), from its status alone.
pub fn problem_for_status(status: StatusCode) -> Problem {
    let (slug, detail) = match status {
        StatusCode::NOT_FOUND => ("not-found", "no such resource"),
        StatusCode::METHOD_NOT_ALLOWED => (
            "method-not-allowed",
            "this method is not allowed on this resource (see the Allow header)",
        ),
        StatusCode::REQUEST_TIMEOUT | StatusCode::SERVICE_UNAVAILABLE => (
            "timeout",
            "the request did not complete within the service's time limit",
        ),
        StatusCode::PAYLOAD_TOO_LARGE => ("payload-too-large", "the request body is too large"),
        s if s.is_server_error() => ("internal", "the service failed to handle the request"),
        _ => ("http", "the request could not be handled"),
    };
    Problem {
        kind: format!("urn:joulecast:problem:{slug}"),
        title: title_of(slug).to_owned(),
        status: status.as_u16(),
        detail: detail.to_owned(),
        errors: vec![],
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
