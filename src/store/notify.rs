//! The notifications by which every replica's caches learn of a committed
//! write (`crate::cache`): one PostgreSQL channel, and one payload per kind
//! of change. Sent inside the writing transaction, they are delivered when
//! it commits, and not at all if it rolls back.

use sqlx::PgExecutor;

/// The notification channel.
pub const CHANNEL: &str = "joulecast";
/// Payload prefix of an application change: `app:<tag>`.
const APP_PREFIX: &str = "app:";
const TOKENS: &str = "tokens";
const NODES: &str = "nodes";
const LOAD: &str = "load";

/// What a write changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An application's row or history.
    App(String),
    /// A token was revoked.
    Tokens,
    /// The node registry or its power samples.
    Nodes,
    /// The running jobs.
    Load,
}

impl Change {
    /// The change a payload names; `None` for a payload this version does
    /// not know (a newer replica's), which the caches take as "anything".
    pub fn parse(payload: &str) -> Option<Change> {
        match payload {
            TOKENS => Some(Change::Tokens),
            NODES => Some(Change::Nodes),
            LOAD => Some(Change::Load),
            _ => payload
                .strip_prefix(APP_PREFIX)
                .map(|tag| Change::App(tag.to_owned())),
        }
    }

    pub fn payload(&self) -> String {
        match self {
            Change::App(tag) => format!("{APP_PREFIX}{tag}"),
            Change::Tokens => TOKENS.to_owned(),
            Change::Nodes => NODES.to_owned(),
            Change::Load => LOAD.to_owned(),
        }
    }
}

/// Notify `change` in the transaction of `executor`.
pub async fn send(executor: impl PgExecutor<'_>, change: &Change) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(change.payload())
        .execute(executor)
        .await?;
    Ok(())
}

/// An SQL expression notifying `change`, for a query that notifies as it
/// writes (in a `RETURNING` list, say).
pub fn sql(change: &Change) -> String {
    let payload = change.payload().replace('\'', "''");
    format!("pg_notify('{CHANNEL}', '{payload}')")
}

/// An SQL expression notifying a change to the application whose tag the
/// SQL expression `tag` gives.
pub fn sql_app(tag: &str) -> String {
    format!("pg_notify('{CHANNEL}', '{APP_PREFIX}' || {tag})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_name_their_change_and_back() {
        for change in [
            Change::App("lulesh:n512".into()),
            Change::Tokens,
            Change::Nodes,
            Change::Load,
        ] {
            assert_eq!(Change::parse(&change.payload()), Some(change.clone()));
        }
        assert_eq!(Change::parse("something new"), None);
        assert_eq!(sql(&Change::Load), "pg_notify('joulecast', 'load')");
        assert_eq!(
            sql(&Change::App("o'brien".into())),
            "pg_notify('joulecast', 'app:o''brien')"
        );
        assert_eq!(sql_app("a.tag"), "pg_notify('joulecast', 'app:' || a.tag)");
    }
}
