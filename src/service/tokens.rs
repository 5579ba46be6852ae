//! API tokens: creating one (for the API, the command line and the first
//! start) and how a stored token is shown.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
) -> Result<CreatedToken, sqlx::Error> {
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
