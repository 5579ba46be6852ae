//! API tokens: creating one (for the API, the command line and the first
//! start) and how a stored token is shown.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use std::sync::Arc;

use super::{Error, Result, Service};
use crate::cache::CachedToken;
use crate::store::{self, tokens::TokenRow};
use crate::tokens::{self, Scope};

/// A token's record; the secret itself is never shown again after creation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    pub id: i64,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// Updated at most once a minute.
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

impl From<TokenRow> for TokenInfo {
    fn from(t: TokenRow) -> Self {
        TokenInfo {
            id: t.id,
            name: t.name,
            scopes: t.scopes.iter().filter_map(|s| s.parse().ok()).collect(),
            created_at: t.created_at,
            expires_at: t.expires_at,
            last_used_at: t.last_used_at,
            revoked_at: t.revoked_at,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CreatedToken {
    /// The secret: send it as `Authorization: Bearer <token>`. Shown only once.
    pub token: String,
    #[serde(flatten)]
    pub info: TokenInfo,
}

/// Generate and store a token (shared by the API, the CLI and the first start).
pub async fn create(
    pool: &sqlx::PgPool,
    name: &str,
    scopes: &[Scope],
    expires_at: Option<DateTime<Utc>>,
) -> std::result::Result<CreatedToken, sqlx::Error> {
    let mut scopes = scopes.to_vec();
    scopes.sort();
    scopes.dedup();
    let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
    let new = tokens::generate();
    let row = store::tokens::insert(pool, name, &new.hash, &names, expires_at).await?;
    Ok(CreatedToken {
        token: new.secret,
        info: row.into(),
    })
}

/// The token whose secret is `secret`: from memory while no token changed,
/// else read (and kept); during a database outage, one verified before
/// (docs/operations.md). `Unauthorized` when it is invalid, expired or
/// revoked.
pub async fn authenticate(service: &Service, secret: &str) -> Result<Arc<CachedToken>> {
    let invalid = || Error::Unauthorized("the token is invalid, expired or revoked");
    if !tokens::well_formed(secret) {
        return Err(invalid());
    }
    let hash = tokens::hash(secret);
    let stale = || {
        service
            .caches
            .stale_token(&hash)
            .filter(|_| service.caches.degraded())
    };
    if let Some(token) = service.caches.token(&hash).or_else(stale) {
        return Ok(token);
    }
    if service.caches.bad_token(&hash) {
        return Err(invalid());
    }
    let read_at = service.caches.generation();
    // Boxed: every request's future need not hold the read's.
    let found = match Box::pin(store::tokens::authenticate(&service.pool, &hash)).await {
        Ok(found) => found,
        Err(e) => return service.stale_or(e, service.caches.stale_token(&hash)),
    };
    let Some((id, scopes, expires_at)) = found else {
        service.caches.put_bad_token(hash, read_at);
        return Err(invalid());
    };
    let token = Arc::new(CachedToken {
        id,
        scopes: scopes.iter().filter_map(|s| s.parse().ok()).collect(),
        expires_at,
    });
    service.caches.put_token(hash, token.clone(), read_at);
    Ok(token)
}

/// Every token, revoked ones included.
pub async fn list(service: &Service) -> Result<Vec<TokenInfo>> {
    let rows = store::tokens::list(&service.pool).await?;
    Ok(rows.into_iter().map(TokenInfo::from).collect())
}

/// Revoke token `id` (again, harmlessly): it stops working on every replica.
pub async fn revoke(service: &Service, id: i64) -> Result<TokenInfo> {
    let revoked = store::tokens::revoke(&service.pool, id).await;
    // Even when the write failed: it may have committed before the answer
    // was lost. Only this token, though: forgetting every token in an
    // outage would refuse every client the answers kept in memory. Once
    // committed, the write's notification has every replica forget them all.
    service.caches.forget_token(id);
    let row = revoked?.ok_or_else(|| Error::NotFound(format!("no token with id {id}")))?;
    Ok(row.into())
}
