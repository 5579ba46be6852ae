//! API tokens: scopes, generation and hashing.
//!
//! A token is `jc_` followed by 32 random bytes in URL-safe base64. Only its
//! SHA-256 is stored: the secret has 256 bits of entropy, so a fast hash is as
//! safe as a slow one and keeps authentication cheap on every request.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

const PREFIX: &str = "jc_";
/// The length of 32 bytes in base64 without padding.
const ENCODED_LEN: usize = 43;

/// What a token may do.
///
/// `admin` includes every other scope; `schedule` includes `read`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read applications, runs and predictions.
    Read,
    /// Write runs.
    Ingest,
    /// Scheduler queries and job lifecycle.
    Schedule,
    /// Application metadata, tokens, and everything else.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Ingest, Scope::Schedule, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Ingest => "ingest",
            Scope::Schedule => "schedule",
            Scope::Admin => "admin",
        }
    }

    /// Whether holding `self` grants `required`.
    pub fn grants(self, required: Scope) -> bool {
        self == required
            || self == Scope::Admin
            || (self == Scope::Schedule && required == Scope::Read)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| {
                format!("unknown scope `{s}` (expected read, ingest, schedule or admin)")
            })
    }
}

/// A freshly generated token: the secret to hand out once, and its hash to store.
pub struct NewToken {
    pub secret: String,
    pub hash: [u8; 32],
}

impl fmt::Debug for NewToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NewToken(***)")
    }
}

pub fn generate() -> NewToken {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    let hash = hash(&secret);
    NewToken { secret, hash }
}

/// Whether `secret` has the form of a generated token: the prefix and 43
/// characters of URL-safe base64. Anything else matches no stored token, so
/// it is refused without reading the database (nor, in an outage, waiting
/// for it).
pub fn well_formed(secret: &str) -> bool {
    secret.strip_prefix(PREFIX).is_some_and(|rest| {
        rest.len() == ENCODED_LEN
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

pub fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_tokens_are_distinct_and_hash_to_their_stored_hash() {
        let a = generate();
        let b = generate();
        assert_ne!(a.secret, b.secret);
        assert!(a.secret.starts_with(PREFIX));
        assert_eq!(a.secret.len(), PREFIX.len() + ENCODED_LEN);
        assert_eq!(hash(&a.secret), a.hash);
        assert_ne!(a.hash, b.hash);
    }

    #[test]
    fn only_the_form_of_a_generated_token_is_well_formed() {
        for _ in 0..100 {
            assert!(well_formed(&generate().secret));
        }
        let good = generate().secret;
        for bad in [
            "",
            "jc_",
            "jc_wrong",
            &good[1..],
            &good[..good.len() - 1],
            &format!("{good}A"),
            &good.replace("jc_", "JC_"),
            &format!("jc_{}=", &good[4..]),
            &format!("jc_{}+", &good[4..]),
            &format!("jc_{}é", &good[5..]),
        ] {
            assert!(!well_formed(bad), "{bad}");
        }
    }

    #[test]
    fn scope_grants() {
        assert!(Scope::Admin.grants(Scope::Ingest));
        assert!(Scope::Schedule.grants(Scope::Read));
        assert!(!Scope::Read.grants(Scope::Schedule));
        assert!(!Scope::Ingest.grants(Scope::Read));
        assert!(!Scope::Read.grants(Scope::Ingest));
        assert!(!Scope::Schedule.grants(Scope::Admin));
    }

    #[test]
    fn scope_parses_its_own_names_only() {
        for scope in Scope::ALL {
            assert_eq!(scope.as_str().parse::<Scope>(), Ok(scope));
        }
        assert!("Admin".parse::<Scope>().is_err());
    }
}
