//! Bearer-token authentication and scope checks.
//!
//! Handlers take `Authorized<Ingest>` (or `Read`, `Admin`, ...) as their first
//! argument, so that a request without a valid token is refused before its
//! body is even read: missing or invalid token → 401, wrong scope → 403.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use std::marker::PhantomData;

use super::AppState;
use super::error::ApiError;
use crate::cache::CachedToken;
use crate::service;
use crate::tokens::Scope;

/// The scope a handler requires, as a type.
pub trait Required {
    const SCOPE: Scope;
}

macro_rules! required {
    ($($name:ident => $scope:ident),*) => {$(
        pub struct $name;
        impl Required for $name {
            const SCOPE: Scope = Scope::$scope;
        }
    )*};
}
required!(Read => Read, Ingest => Ingest, Schedule => Schedule, Admin => Admin);

/// Proof that the caller may do what `R` requires. `token_id` is `None` for an
/// anonymous reader of a `--public-read` service.
pub struct Authorized<R> {
    pub token_id: Option<i64>,
    _required: PhantomData<R>,
}

impl<R: Required> FromRequestParts<AppState> for Authorized<R> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(secret) = bearer(&parts.headers) else {
            if R::SCOPE == Scope::Read && state.settings.public_read {
                return Ok(Authorized {
                    token_id: None,
                    _required: PhantomData,
                });
            }
            return Err(ApiError::Unauthorized(
                "this request needs a bearer token (Authorization: Bearer <token>)",
            ));
        };
        let token = service::tokens::authenticate(state, secret?).await?;
        authorized(&token)
    }
}

/// The secret of the `Authorization: Bearer <token>` header: `None`
/// without the header, an error when it is not of that form.
pub fn bearer(headers: &HeaderMap) -> Option<Result<&str, ApiError>> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next()?;
    // One credential per request (a singleton field, RFC 9110 §11.6.2):
    // of two, neither is taken for the other.
    if values.next().is_some() {
        return Some(Err(ApiError::Unauthorized(
            "send one Authorization header, not several",
        )));
    }
    // The scheme name is case-insensitive (RFC 9110, section 11.1).
    let secret = value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|s| !s.is_empty())
        .ok_or(ApiError::Unauthorized(
            "the Authorization header must be `Bearer <token>`",
        ));
    Some(secret)
}

/// `token`, verified, if its scopes grant `R`.
pub fn authorized<R: Required>(token: &CachedToken) -> Result<Authorized<R>, ApiError> {
    if !token.scopes.iter().any(|scope| scope.grants(R::SCOPE)) {
        return Err(ApiError::Forbidden(R::SCOPE));
    }
    Ok(Authorized {
        token_id: Some(token.id),
        _required: PhantomData,
    })
}
