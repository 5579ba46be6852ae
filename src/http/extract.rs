//! Extractors whose rejections are problem documents naming the field at fault.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::validate::{FieldError, Tag};

/// A JSON body. Syntax errors are 400; well-formed JSON of the wrong shape
/// (wrong type, missing or unknown field) is 422 naming the field.
pub struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<mime_essence::Essence>().ok())
            .is_some_and(|m| m.is_json());
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        let BodyBytes(bytes) = BodyBytes::from_request(req, state).await?;
        from_json_slice(&bytes).map(Json)
    }
}

/// A whole request body, any type. Like axum's `Bytes`, with rejections as
/// problem documents: too large (413), not received in time (408), or
/// refused while too many bodies arrive at once (503; see
/// `server::ReceivedBody`).
pub struct BodyBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for BodyBytes {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = body_limit(&req);
        let stop = req.extensions().get::<crate::server::BodyStop>().cloned();
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            use crate::server::Stopped;
            match stop.and_then(|s| s.reason()) {
                Some(Stopped::TimedOut(limit)) => ApiError::BodyTimeout(limit.as_secs()),
                Some(Stopped::OverBudget) => ApiError::Unavailable(
                    "too many request bodies are arriving at once; retry shortly",
                ),
                None if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                    ApiError::body_over(limit)
                }
                None => ApiError::bad_request("body", rejection.body_text()),
            }
        })?;
        Ok(BodyBytes(bytes))
    }
}

/// The configured body limit, recorded by the router for error messages.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

fn body_limit(req: &Request) -> usize {
    req.extensions().get::<BodyLimit>().map_or(0, |l| l.0)
}

pub fn from_json_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // Every body is an object. serde reads a struct from an array too, its
    // fields by position: `["app", "c1", "1", 2, ...]` was stored as a run,
    // past the names that `deny_unknown_fields` and the schema check.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(ApiError::invalid("body", NOT_AN_OBJECT));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|e| json_error::<T>(e, bytes))?;
    deserializer
        .end()
        .map_err(|e| ApiError::bad_request("body", e.to_string()))?;
    Ok(value)
}

/// Why an array is refused where an object is read.
const NOT_AN_OBJECT: &str = "must be a JSON object, its fields by name, not an array";

/// Deserialize one element of a larger document (e.g. one run of a batch),
/// naming fields under `prefix`.
pub fn from_json_value<T: DeserializeOwned>(
    value: serde_json::Value,
    prefix: &str,
) -> Result<T, Vec<FieldError>> {
    if value.is_array() {
        return Err(vec![FieldError::new(prefix.to_owned(), NOT_AN_OBJECT)]);
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let (field, reason) = field_and_reason(e.path(), e.inner().to_string());
        // The item itself is not what it should be (a number where an
        // object belongs): name the item, as for an array.
        if field == "body" && !prefix.is_empty() {
            return vec![FieldError::new(prefix.to_owned(), reason)];
        }
        vec![FieldError::new(field, reason).nested(prefix)]
    })
}

/// One item of a batch (a run, a query), read as JSON and checked field by
/// field later, so that each item's problems are its own. Unlike
/// `serde_json::Value`, which keeps the last of a key given twice, it notes
/// the first key its object repeats: the derived readers of whole bodies
/// refuse a repeated field, and an item's must not be quietly replaced.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonItem {
    pub value: serde_json::Value,
    /// The first key of the item's object given more than once.
    pub repeated: Option<String>,
}

impl JsonItem {
    /// The item as its fields' reader takes it, or the repeated key named
    /// under `prefix`.
    pub fn checked(self, prefix: &str) -> Result<serde_json::Value, Vec<FieldError>> {
        match self.repeated {
            None => Ok(self.value),
            Some(key) => Err(vec![
                FieldError::new(key.clone(), format!("duplicate field `{key}`")).nested(prefix),
            ]),
        }
    }

    /// The item read as a `T`, its fields named under `prefix`.
    pub fn read<T: DeserializeOwned>(self, prefix: &str) -> Result<T, Vec<FieldError>> {
        from_json_value(self.checked(prefix)?, prefix)
    }
}

impl<'de> serde::Deserialize<'de> for JsonItem {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ItemVisitor)
    }
}

struct ItemVisitor;

impl<'de> serde::de::Visitor<'de> for ItemVisitor {
    type Value = JsonItem;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<JsonItem, A::Error> {
        let mut object = serde_json::Map::new();
        let mut repeated = None;
        while let Some(key) = map.next_key::<String>()? {
            let value: serde_json::Value = map.next_value()?;
            if object.contains_key(&key) {
                repeated.get_or_insert(key);
            } else {
                object.insert(key, value);
            }
        }
        Ok(JsonItem {
            value: serde_json::Value::Object(object),
            repeated,
        })
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<JsonItem, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<serde_json::Value>()? {
            items.push(item);
        }
        Ok(whole(serde_json::Value::Array(items)))
    }

    fn visit_bool<E>(self, v: bool) -> Result<JsonItem, E> {
        Ok(whole(v.into()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<JsonItem, E> {
        Ok(whole(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<JsonItem, E> {
        Ok(whole(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<JsonItem, E> {
        Ok(whole(v.into()))
    }

    fn visit_str<E>(self, v: &str) -> Result<JsonItem, E> {
        Ok(whole(v.into()))
    }

    fn visit_string<E>(self, v: String) -> Result<JsonItem, E> {
        Ok(whole(v.into()))
    }

    fn visit_unit<E>(self) -> Result<JsonItem, E> {
        Ok(whole(serde_json::Value::Null))
    }

    fn visit_none<E>(self) -> Result<JsonItem, E> {
        Ok(whole(serde_json::Value::Null))
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<JsonItem, D::Error> {
        d.deserialize_any(self)
    }
}

/// An item that is not an object: nothing in it can repeat.
fn whole(value: serde_json::Value) -> JsonItem {
    JsonItem {
        value,
        repeated: None,
    }
}

/// The problem of a body `T` could not be read from: 422 naming the field
/// when the JSON is well formed, else 400.
fn json_error<T: DeserializeOwned>(
    error: serde_path_to_error::Error<serde_json::Error>,
    bytes: &[u8],
) -> ApiError {
    use serde_json::error::Category;
    match error.inner().classify() {
        Category::Data => {
            let (field, reason) = field_and_reason(error.path(), error.inner().to_string());
            ApiError::invalid(&field, reason)
        }
        Category::Syntax | Category::Eof | Category::Io => {
            // serde_json reports a null or a number where an enum's string
            // belongs as a syntax error ("expected value"); the body is
            // well formed, and read as a value the same mistake names its
            // field and type.
            if let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes)
                && let Err(problems) = from_json_value::<T>(value, "")
                && let Some(problem) = problems.into_iter().next()
            {
                return ApiError::invalid(&problem.field, problem.reason);
            }
            ApiError::bad_request("body", format!("malformed JSON: {}", error.inner()))
        }
    }
}

/// The path of the field a deserialization error is about. For an unknown,
/// missing or repeated field, serde reports the enclosing object; the
/// field's own name is in the message.
fn field_and_reason(path: &serde_path_to_error::Path, reason: String) -> (String, String) {
    let base = path.to_string();
    let base = if base == "." { String::new() } else { base };
    let reason = explain_time(reason);
    let named = ["unknown field `", "missing field `", "duplicate field `"]
        .iter()
        .find_map(|prefix| reason.strip_prefix(prefix))
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name.to_owned());
    let field = match named {
        Some(name) if !base.ends_with(&name) => {
            if base.is_empty() {
                name
            } else {
                format!("{base}.{name}")
            }
        }
        _ if base.is_empty() => "body".to_owned(),
        _ => base,
    };
    (field, reason)
}

/// chrono's reasons for refusing a time (its `ParseError`s), which name no
/// format: "premature end of input" for a time without its zone.
const TIME_ERRORS: [&str; 7] = [
    "input is out of range",
    "no possible date and time matching input",
    "input is not enough for unique date and time",
    "input contains invalid characters",
    "premature end of input",
    "trailing input",
    "bad or unsupported format string",
];

/// `reason`, said with the form a time takes when it is one of chrono's.
fn explain_time(reason: String) -> String {
    if TIME_ERRORS.iter().any(|e| reason.starts_with(e)) {
        format!(
            "is not a time in RFC 3339 form with its zone, such as 2026-11-29T10:00:00Z \
             or 2026-11-29T11:00:00+01:00 (in a query, + written %2B) ({reason})"
        )
    } else {
        reason
    }
}

/// A comma-separated query parameter given but blank (`targets=`): refused,
/// so that an empty list is not quietly read as the parameter left out.
pub fn given_blank(field: &str, text: Option<&str>) -> Option<FieldError> {
    text.filter(|t| t.trim().is_empty()).map(|_| {
        FieldError::new(
            field,
            "is empty: give values separated by commas, or leave it out for the defaults",
        )
    })
}

/// The trimmed items of a comma-separated query parameter such as
/// `targets=64,128`; an absent or blank parameter has none.
pub fn comma_separated(text: Option<&str>) -> impl Iterator<Item = &str> {
    text.filter(|t| !t.trim().is_empty())
        .into_iter()
        .flat_map(|t| t.split(','))
        .map(str::trim)
}

/// A query string, strictly parsed: unknown parameters are rejected (400) so a
/// typo is not silently ignored.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Query::parse(parts.uri.query())
    }
}

impl<T: DeserializeOwned> Query<T> {
    /// Parse `query` (absent: empty) as the extractor does, for a handler
    /// that looks at the request before parsing it.
    pub fn parse(query: Option<&str>) -> Result<Self, ApiError> {
        let query = query.unwrap_or_default();
        let deserializer =
            || serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        // A valid query, what every warm prediction brings, is parsed without
        // tracking the path; a rejected one is parsed again to name its field.
        if let Ok(value) = T::deserialize(deserializer()) {
            return Ok(Query(value));
        }
        serde_path_to_error::deserialize(deserializer())
            .map(Query)
            .map_err(|e| {
                let (field, reason) = field_and_reason(e.path(), e.inner().to_string());
                let field = if field == "body" {
                    "query".to_owned()
                } else {
                    field
                };
                ApiError::bad_request(&field, reason)
            })
    }
}

/// The query string of an endpoint that takes no parameters there: any
/// parameter is refused (400 naming it), as `Query` refuses unknown ones, so
/// that a filter or page size the endpoint does not have is not silently
/// ignored.
pub struct NoQuery;

/// No query parameters.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NoParams {}

impl<S: Send + Sync> FromRequestParts<S> for NoQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.uri.query() {
            None | Some("") => Ok(NoQuery),
            query => Query::<NoParams>::parse(query).map(|_| NoQuery),
        }
    }
}

/// The application tag of a `/v1/apps/{app}/…` path, checked here once: a
/// bad tag is a 400 naming `app` (as crates.io's `CratePath`).
pub struct AppPath(pub Tag);

impl<S: Send + Sync> FromRequestParts<S> for AppPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(tag) = Path::<String>::from_request_parts(parts, state).await?;
        crate::service::apps::check_tag(&tag).map(AppPath)
    }
}

/// Path parameters.
pub struct Path<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(rejection) => {
                // Name the parameter: the key the error gives, or the route's
                // only parameter (`/v1/runs/{id}`), else `path`.
                let names: Vec<String> =
                    axum::extract::RawPathParams::from_request_parts(parts, state)
                        .await
                        .map(|raw| raw.iter().map(|(name, _)| name.to_owned()).collect())
                        .unwrap_or_default();
                let (field, reason) = path_problem(&rejection, &names);
                Err(ApiError::bad_request(&field, reason))
            }
        }
    }
}

/// The parameter a path rejection concerns, and why, in words.
fn path_problem(
    rejection: &axum::extract::rejection::PathRejection,
    names: &[String],
) -> (String, String) {
    use axum::extract::path::ErrorKind;
    use axum::extract::rejection::PathRejection;
    let only = || match names {
        [name] => name.clone(),
        _ => "path".to_owned(),
    };
    let expected = |value: &str, expected_type: &str| match expected_type {
        "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64" | "usize" | "isize" => {
            format!("must be a whole number (got {value:?})")
        }
        _ => format!("cannot be read as {expected_type} (got {value:?})"),
    };
    if let PathRejection::FailedToDeserializePathParams(error) = rejection {
        match error.kind() {
            ErrorKind::ParseErrorAtKey {
                key,
                value,
                expected_type,
            } => return (key.clone(), expected(value, expected_type)),
            ErrorKind::ParseErrorAtIndex {
                index,
                value,
                expected_type,
            } => {
                let name = names.get(*index).cloned().unwrap_or_else(only);
                return (name, expected(value, expected_type));
            }
            ErrorKind::ParseError {
                value,
                expected_type,
            } => return (only(), expected(value, expected_type)),
            ErrorKind::InvalidUtf8InPathParam { key } => {
                return (key.clone(), "is not valid UTF-8 once decoded".to_owned());
            }
            _ => {}
        }
    }
    (only(), rejection.body_text())
}

/// Media type checks without another dependency: `type/subtype` before any
/// parameters, compared case-insensitively.
mod mime_essence {
    pub struct Essence(String);

    impl std::str::FromStr for Essence {
        type Err = ();

        fn from_str(s: &str) -> Result<Self, ()> {
            let essence = s.split(';').next().unwrap_or_default().trim();
            Ok(Essence(essence.to_ascii_lowercase()))
        }
    }

    impl Essence {
        pub fn is_json(&self) -> bool {
            self.0 == "application/json"
                || (self.0.starts_with("application/") && self.0.ends_with("+json"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        nodes: u32,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        runs: Vec<Inner>,
    }

    fn fields(error: ApiError) -> Vec<String> {
        match error {
            ApiError::Invalid(errors) | ApiError::BadRequest(errors) => {
                errors.into_iter().map(|e| e.field).collect()
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn type_errors_name_the_nested_field() {
        let error =
            from_json_slice::<Outer>(br#"{"runs":[{"nodes":1},{"nodes":"x"}]}"#).unwrap_err();
        assert_eq!(fields(error), ["runs[1].nodes"]);
    }

    #[test]
    fn unknown_fields_are_named() {
        let error = from_json_slice::<Outer>(br#"{"runs":[{"nodes":1,"colour":2}]}"#).unwrap_err();
        assert_eq!(fields(error), ["runs[0].colour"]);
        let error = from_json_slice::<Outer>(br#"{"runs":[],"extra":1}"#).unwrap_err();
        assert_eq!(fields(error), ["extra"]);
        let error = from_json_slice::<Outer>(br#"{"runs":[{}]}"#).unwrap_err();
        assert_eq!(fields(error), ["runs[0].nodes"]);
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Window {
        limit: Option<u32>,
        from: Option<chrono::DateTime<chrono::Utc>>,
    }

    fn problem(error: ApiError) -> (String, String) {
        match error {
            ApiError::Invalid(mut errors) | ApiError::BadRequest(mut errors) => {
                let e = errors.remove(0);
                (e.field, e.reason)
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_repeated_query_parameter_is_named() {
        let Err(error) = Query::<Window>::parse(Some("limit=1&limit=2")) else {
            panic!("a repeated parameter was accepted");
        };
        let (field, reason) = problem(error);
        assert_eq!(field, "limit");
        assert!(reason.contains("duplicate"), "{reason}");
    }

    #[test]
    fn a_time_without_its_zone_is_explained() {
        let Err(error) = Query::<Window>::parse(Some("from=2026-11-29T10:00:00")) else {
            panic!("a time without a zone was accepted");
        };
        let (field, reason) = problem(error);
        assert_eq!(field, "from");
        assert!(
            reason.contains("RFC 3339") && reason.contains("zone"),
            "{reason}"
        );
        let error = from_json_slice::<Window>(br#"{"from":"29/11/2026"}"#).unwrap_err();
        let (field, reason) = problem(error);
        assert_eq!(field, "from");
        assert!(reason.contains("RFC 3339"), "{reason}");
        // Other reasons are left as they were.
        let error = from_json_slice::<Window>(br#"{"limit":"x"}"#).unwrap_err();
        assert!(!problem(error).1.contains("RFC 3339"));
    }

    #[test]
    fn an_item_that_is_not_an_object_is_named_itself() {
        for item in [json!(5), json!("x"), json!([])] {
            let problems = from_json_value::<Inner>(item.clone(), "queries[0]").unwrap_err();
            assert_eq!(problems[0].field, "queries[0]", "{item}");
        }
        let problems = from_json_value::<Inner>(json!({"nodes": "x"}), "queries[0]").unwrap_err();
        assert_eq!(problems[0].field, "queries[0].nodes");
    }

    #[test]
    fn syntax_errors_are_bad_requests() {
        let error = from_json_slice::<Outer>(br#"{"runs":["#).unwrap_err();
        assert!(matches!(error, ApiError::BadRequest(_)));
        let error = from_json_slice::<Outer>(br#"{"runs":[]} trailing"#).unwrap_err();
        assert!(matches!(error, ApiError::BadRequest(_)));
    }

    #[test]
    fn media_types() {
        let is_json = |s: &str| s.parse::<mime_essence::Essence>().unwrap().is_json();
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("text/plain"));
    }
}
