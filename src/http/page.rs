//! Keyset pagination: opaque cursors and page sizes.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::error::ApiError;

pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 1000;

/// The page size asked for, checked against the maximum.
pub fn limit(asked: Option<u32>) -> Result<i64, ApiError> {
    match asked.unwrap_or(DEFAULT_LIMIT) {
        0 => Err(ApiError::bad_request("limit", "must be at least 1")),
        n if n > MAX_LIMIT => Err(ApiError::bad_request(
            "limit",
            format!("must be at most {MAX_LIMIT} (got {n})"),
        )),
        n => Ok(i64::from(n)),
    }
}

/// The cursor asked for; an empty `cursor=` means the first page.
pub fn cursor(asked: Option<&str>) -> Option<&str> {
    asked.filter(|c| !c.is_empty())
}

/// A cursor for the listing `kind`, continuing after `key`. Opaque to clients.
pub fn encode(kind: &str, key: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{kind}:{key}"))
}

/// The key a cursor of listing `kind` continues after.
pub fn decode(kind: &str, cursor: &str) -> Result<String, ApiError> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| text.strip_prefix(&format!("{kind}:")).map(str::to_owned))
        .ok_or_else(|| {
            ApiError::bad_request(
                "cursor",
                "is not a cursor of this listing (use next_cursor)",
            )
        })
}

/// Given a page fetched with one row more than `limit`, drop the extra row and
/// return the cursor after the last kept one if there is more.
pub fn next_cursor<T>(
    rows: &mut Vec<T>,
    limit: i64,
    cursor: impl Fn(&T) -> String,
) -> Option<String> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(cursor)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_are_tied_to_their_listing() {
        let cursor = encode("runs", "42");
        assert_eq!(decode("runs", &cursor).unwrap(), "42");
        assert!(decode("apps", &cursor).is_err());
        assert!(decode("runs", "not base64!").is_err());
    }

    #[test]
    fn limits() {
        assert_eq!(limit(None).unwrap(), i64::from(DEFAULT_LIMIT));
        assert!(limit(Some(0)).is_err());
        assert!(limit(Some(MAX_LIMIT + 1)).is_err());
        assert_eq!(limit(Some(MAX_LIMIT)).unwrap(), i64::from(MAX_LIMIT));
    }
}
