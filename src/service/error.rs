//! What can go wrong in a use case, whatever the caller: the HTTP layer
//! turns each kind into its status and problem document (`http::error`).

use crate::tokens::Scope;
use crate::validate::FieldError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Well-formed input that breaks a rule, field by field.
    #[error("invalid request")]
    Invalid(Vec<FieldError>),
    /// Malformed input: syntax, or a parameter that is not what it names.
    #[error("bad request")]
    BadRequest(Vec<FieldError>),
    #[error("unauthorized: {0}")]
    Unauthorized(&'static str),
    #[error("forbidden: needs scope {0}")]
    Forbidden(Scope),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {detail}")]
    Conflict {
        detail: String,
        errors: Vec<FieldError>,
    },
    /// The request is more than the service takes at once: the detail says
    /// what.
    #[error("payload too large: {0}")]
    PayloadTooLarge(String),
    /// The request's body did not arrive within this many seconds.
    #[error("request body not received within {0} s")]
    BodyTimeout(u64),
    #[error("unsupported media type")]
    UnsupportedMediaType,
    #[error("service unavailable: {0}")]
    Unavailable(&'static str),
    /// Too much heavy work under way: retry shortly.
    #[error("busy: {0}")]
    Busy(&'static str),
    #[error("internal error: {0:#}")]
    Internal(#[from] anyhow::Error),
}

impl Error {
    pub fn invalid(field: &str, reason: impl Into<String>) -> Self {
        Error::Invalid(vec![FieldError::new(field, reason)])
    }

    pub fn bad_request(field: &str, reason: impl Into<String>) -> Self {
        Error::BadRequest(vec![FieldError::new(field, reason)])
    }

    /// A request body over `limit` bytes.
    pub fn body_over(limit: usize) -> Self {
        Error::PayloadTooLarge(format!(
            "the request body is larger than the limit of {limit} bytes"
        ))
    }
}

impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            // Also what a burst that takes every pooled connection meets: the
            // answer must not blame the database alone.
            sqlx::Error::PoolTimedOut => {
                tracing::warn!(%error, "no database connection came free in time");
                Error::Unavailable(
                    "no database connection came free in time (the service is busy or \
                     the database unavailable); retry later",
                )
            }
            sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                tracing::warn!(%error, "database unavailable");
                Error::Unavailable("the database is unavailable; retry later")
            }
            // Connection exceptions (08), insufficient resources (53) and operator
            // intervention such as a server shutting down (57P): not the client's doing.
            sqlx::Error::Database(db)
                if db.code().is_some_and(|c| {
                    c.starts_with("08") || c.starts_with("53") || c.starts_with("57P")
                }) =>
            {
                tracing::warn!(%error, "database unavailable");
                Error::Unavailable("the database is unavailable; retry later")
            }
            // Undefined table, column or function (42P01, 42703, 42883): the
            // schema is behind this build (started with --no-migrate before
            // `joulecast migrate` ran). /readyz says so too.
            sqlx::Error::Database(db)
                if db
                    .code()
                    .is_some_and(|c| matches!(&*c, "42P01" | "42703" | "42883")) =>
            {
                tracing::error!(%error, "the database schema is not migrated");
                Error::Unavailable("database migrations are not applied; retry later")
            }
            // A deadlock or serialization failure between concurrent writes
            // (40P01, 40001): PostgreSQL rolled this one back; it may be retried.
            sqlx::Error::Database(_) if crate::store::is_retryable(&error) => {
                tracing::warn!(%error, "a write lost a race with another; asked to retry");
                Error::Unavailable("a concurrent write got in the way; retry")
            }
            // Data exceptions (22): a value PostgreSQL cannot take. Validation
            // should have caught it; answer for the request, and log the miss.
            sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("22")) => {
                tracing::warn!(%error, "a value reached the database unvalidated");
                metrics::counter!(UNVALIDATED_VALUES).increment(1);
                Error::bad_request("body", "a value is out of the range the database can store")
            }
            // A check constraint (23514): the same, for a rule between values.
            sqlx::Error::Database(db) if db.code().is_some_and(|c| c == "23514") => {
                tracing::warn!(%error, "a value reached the database unvalidated");
                metrics::counter!(UNVALIDATED_VALUES).increment(1);
                let rule = db.constraint().unwrap_or("a check");
                Error::bad_request(
                    "body",
                    format!("the values break the database's rule `{rule}`"),
                )
            }
            sqlx::Error::Database(db) if db.is_unique_violation() => Error::Conflict {
                detail: "the resource already exists".into(),
                errors: vec![],
            },
            // A row referred to was removed meanwhile (a node deleted while
            // its samples were being stored).
            sqlx::Error::Database(db) if db.is_foreign_key_violation() => Error::Conflict {
                detail: "something this refers to was removed meanwhile; retry".into(),
                errors: vec![],
            },
            _ => Error::Internal(error.into()),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// The counter of values PostgreSQL refused that validation let through
/// (each a 400 naming `body`, and a validation gap to close): it should
/// stay 0, and the fuzzing test checks that it does.
pub const UNVALIDATED_VALUES: &str = "db_values_refused_total";
