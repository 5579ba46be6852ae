//! Field-level validation shared by every way data comes in.

use std::fmt;

use crate::text::exact;

/// One problem with one field of the input, as reported to clients.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field, e.g. `nodes` or `runs[3].energy_j`.
    pub field: String,
    pub reason: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The same error, for a field nested under `prefix` (e.g. `runs[3]`;
    /// an empty prefix is the top level, and leaves the field as it is).
    pub fn nested(mut self, prefix: &str) -> Self {
        if prefix.is_empty() {
            return self;
        }
        self.field = if self.field.is_empty() {
            prefix.to_owned()
        } else {
            format!("{prefix}.{}", self.field)
        };
        self
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// Collects the errors of one input so that all of them are reported at once.
#[derive(Debug, Default)]
pub struct Errors(Vec<FieldError>);

impl Errors {
    pub fn add(&mut self, field: &str, reason: impl Into<String>) {
        self.0.push(FieldError::new(field, reason));
    }

    /// Record `check`'s error, if any, against `field`.
    pub fn check(&mut self, field: &str, check: Result<(), String>) {
        if let Err(reason) = check {
            self.add(field, reason);
        }
    }

    /// Free text of at most `max` characters: each broken rule is recorded.
    pub fn check_text(&mut self, field: &str, value: &str, max: usize) {
        let length = value.chars().count();
        if length > max {
            self.add(
                field,
                format!("must be at most {max} characters (got {length})"),
            );
        }
        self.check(field, text(value));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_vec(self) -> Vec<FieldError> {
        self.0
    }

    pub fn into_result<T>(self, value: T) -> Result<T, Vec<FieldError>> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(self.0)
        }
    }
}

/// Characters allowed in identifiers (application tags, sources, job ids,
/// accounts): safe in URL paths and query strings without escaping.
const IDENT_PUNCT: &[char] = &['.', '_', ':', '@', '+', '=', '-'];

pub const TAG_MAX: usize = 128;
pub const SOURCE_MAX: usize = 64;
pub const JOB_ID_MAX: usize = 128;
pub const ACCOUNT_MAX: usize = 128;
pub const NODE_NAME_MAX: usize = 64;

/// `parsed`'s value, or `None` after recording why under `field`: for
/// checks that report every problem of an input at once.
pub fn checked<T>(
    problems: &mut Vec<FieldError>,
    field: &str,
    parsed: Result<T, String>,
) -> Option<T> {
    parsed
        .map_err(|reason| problems.push(FieldError::new(field, reason)))
        .ok()
}

/// Names checked once where they enter (a request, the command line, a
/// file), so that what takes one needs no check of its own.
macro_rules! checked_name {
    ($(#[$doc:meta])* $name:ident, $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name(String);

        impl $name {
            /// `value` as one, or why it is not one.
            pub fn parse(value: &str) -> Result<$name, String> {
                let check: fn(&str) -> Result<(), String> = $check;
                check(value).map(|()| $name(value.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;

            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl From<$name> for String {
            fn from(name: $name) -> String {
                name.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

checked_name!(
    /// An application tag: 1 to `TAG_MAX` characters of
    /// `A-Z a-z 0-9 . _ : @ + = -`, starting with a letter or digit.
    Tag,
    |value| identifier(value, TAG_MAX)
);

checked_name!(
    /// An accounting project, as budgets and jobs name it: an identifier
    /// of at most `ACCOUNT_MAX` characters.
    Account,
    |value| identifier(value, ACCOUNT_MAX)
);

checked_name!(
    /// The system a job or run comes from (a Slurm cluster): an identifier
    /// of at most `SOURCE_MAX` characters.
    Source,
    |value| identifier(value, SOURCE_MAX)
);

checked_name!(
    /// A job's id in its source (`1234`, an array task `1234_7`): an
    /// identifier of at most `JOB_ID_MAX` characters.
    JobId,
    |value| identifier(value, JOB_ID_MAX)
);

checked_name!(
    /// A node (host) name (see `node_name`).
    NodeName,
    node_name
);

/// An identifier: 1 to `max` characters from `A-Z a-z 0-9 . _ : @ + = -`,
/// starting with a letter or digit.
pub fn identifier(value: &str, max: usize) -> Result<(), String> {
    let len = value.chars().count();
    if len == 0 {
        return Err("must not be empty".into());
    }
    if len > max {
        return Err(format!("must be at most {max} characters (got {len})"));
    }
    if !value.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err("must start with a letter or digit".into());
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !c.is_ascii_alphanumeric() && !IDENT_PUNCT.contains(c))
    {
        return Err(format!(
            "contains {bad:?}; allowed are letters, digits and . _ : @ + = -"
        ));
    }
    Ok(())
}

/// The application a free-text name stands for (a Slurm job name, comment or
/// WCKey), so that every job has one: each byte outside the identifier
/// characters becomes `-`, leading characters other than a letter or digit
/// are dropped, and the rest is cut to `TAG_MAX`; `UNNAMED_APP` when nothing
/// is left. A valid tag stands for itself. `deploy/slurm` applies the same
/// rule (`joulecast_tag` in the scripts, `tag_from_name` in the plugin).
pub fn tag_from_name(name: &str) -> String {
    let mapped: String = name
        .bytes()
        .map(|b| {
            let c = char::from(b);
            if c.is_ascii_alphanumeric() || IDENT_PUNCT.contains(&c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let start = mapped
        .find(|c: char| c.is_ascii_alphanumeric())
        .unwrap_or(mapped.len());
    let tag = &mapped[start..mapped.len().min(start + TAG_MAX)];
    if tag.is_empty() {
        UNNAMED_APP.to_owned()
    } else {
        tag.to_owned()
    }
}

/// The application of jobs whose name has no letter or digit.
pub const UNNAMED_APP: &str = "unnamed";

/// A node (host) name: 1 to 64 characters from `A-Z a-z 0-9 . _ -`, starting
/// with a letter or digit.
pub fn node_name(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > NODE_NAME_MAX {
        return Err(format!("must be 1 to {NODE_NAME_MAX} characters"));
    }
    let valid = value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{value:?} is not a node name (letters, digits, . _ -, starting with a letter or digit)"
        ))
    }
}

/// Most characters of a description (applications, power caps).
pub const DESCRIPTION_MAX: usize = 4096;

/// Free text: no NUL characters (PostgreSQL cannot store them).
pub fn text(value: &str) -> Result<(), String> {
    if value.contains('\0') {
        Err("must not contain NUL characters".into())
    } else {
        Ok(())
    }
}

/// A name: no control characters.
pub fn name(value: &str) -> Result<(), String> {
    match value.chars().find(|c| c.is_control()) {
        Some(c) => Err(format!("must not contain control characters (found {c:?})")),
        None => Ok(()),
    }
}

/// `time` as PostgreSQL keeps it: a leap second (23:59:60) is the start of
/// the next second, as PostgreSQL reads one, and the time is cut to the
/// microsecond. Times compared before they are stored (an end after its
/// start, a window's ends) must be compared so, or values that differ by
/// less than a microsecond pass the check and break the database's rule.
///
/// The microseconds are cut from the time's own fraction of a second, which
/// works for every year (chrono's `duration_trunc` counts nanoseconds in 64
/// bits, and fails outside 1677–2262, where a cap's window shorter than a
/// microsecond then passed the check and was refused by the database).
pub fn as_stored(time: chrono::DateTime<chrono::Utc>) -> chrono::DateTime<chrono::Utc> {
    use chrono::Timelike;
    let nanos = time.nanosecond();
    let time = match nanos.checked_sub(1_000_000_000) {
        Some(within) => time
            .with_nanosecond(within)
            .and_then(|t| t.checked_add_signed(chrono::Duration::seconds(1)))
            .unwrap_or(time),
        None => time,
    };
    time.with_nanosecond(time.nanosecond() / 1_000 * 1_000)
        .unwrap_or(time)
}

/// A time within years 1 to 9999, which every layer down to PostgreSQL
/// handles, as it is kept (`as_stored`: 9999-12-31T23:59:60 is year 10000).
pub fn time_in_range(time: chrono::DateTime<chrono::Utc>) -> Result<(), String> {
    use chrono::Datelike;
    if (1..=9999).contains(&as_stored(time).year()) {
        Ok(())
    } else {
        Err(format!("must be between years 1 and 9999 (got {time})"))
    }
}

/// Larger node counts are taken for a unit or typing mistake.
pub const MAX_NODES: i64 = 1_000_000;

/// A node count: 1 to `MAX_NODES`.
pub fn node_count(nodes: i64) -> Result<u32, String> {
    if (1..=MAX_NODES).contains(&nodes) {
        Ok(nodes as u32)
    } else {
        Err(format!("must be between 1 and {MAX_NODES} (got {nodes})"))
    }
}

/// An allowed %RMSE: in (0, 100].
pub fn allowed_rmse_pct(pct: f64) -> Result<(), String> {
    if pct > 0.0 && pct <= 100.0 {
        Ok(())
    } else {
        Err(format!("must be in (0, 100] (got {})", exact(pct)))
    }
}

/// The range of a positive quantity (energy, power, time, a cap or a
/// budget): its square, which the history's sufficient statistics sum in
/// PostgreSQL, neither overflows nor underflows to zero there (either is an
/// error).
pub const POSITIVE_RANGE: (f64, f64) = (1e-100, 1e100);

/// A finite, strictly positive number within `POSITIVE_RANGE`.
pub fn positive(value: f64) -> Result<(), String> {
    let (low, high) = POSITIVE_RANGE;
    if !value.is_finite() {
        Err("must be a finite number".into())
    } else if value <= 0.0 {
        Err(format!("must be greater than 0 (got {})", exact(value)))
    } else if !(low..=high).contains(&value) {
        Err(format!(
            "must be from {low:e} to {high:e} (got {})",
            exact(value)
        ))
    } else {
        Ok(())
    }
}

/// A run's quality weight: from `POSITIVE_RANGE`'s low end to 1. Its
/// products with a quantity's square, which the history's statistics sum in
/// PostgreSQL, then stay above the smallest normal number (an underflow
/// there is an error).
pub fn quality(weight: f64) -> Result<(), String> {
    let low = POSITIVE_RANGE.0;
    if (low..=1.0).contains(&weight) {
        Ok(())
    } else {
        Err(format!("must be from {low:e} to 1 (got {})", exact(weight)))
    }
}

pub use crate::domain::MAX_DURATION_S;

/// A job's time limit, s: positive and at most ten years, as a run's
/// duration. Its reservation ends at its start plus this limit, which must
/// stay a date PostgreSQL and RFC 3339 can hold.
pub fn time_limit(seconds: f64) -> Result<(), String> {
    positive(seconds)?;
    if seconds > MAX_DURATION_S {
        Err(format!(
            "must be at most {MAX_DURATION_S} s (ten years; got {}); is the unit seconds?",
            exact(seconds)
        ))
    } else {
        Ok(())
    }
}

/// Node names one request may name in all its node lists together (each
/// list is also held to `hostlist::MAX_HOSTS`): the work and memory of
/// expanding and checking them stay bounded, whatever the batch.
pub const MAX_NODE_NAMES_PER_REQUEST: u64 = 200_000;

/// Check the node lists of a batch's items (JSON objects with an optional
/// `node_list`: names, or a hostlist string) against
/// `MAX_NODE_NAMES_PER_REQUEST`, before any of them is expanded. Lists that
/// do not parse count for nothing here: their item is rejected later.
pub fn node_names_within_budget<'a>(
    items: impl IntoIterator<Item = &'a serde_json::Value>,
) -> Result<(), String> {
    let mut total: u64 = 0;
    for item in items {
        total = total.saturating_add(match item.get("node_list") {
            Some(serde_json::Value::String(list)) => crate::hostlist::count(list).unwrap_or(0),
            Some(serde_json::Value::Array(names)) => names.len() as u64,
            _ => 0,
        });
    }
    if total > MAX_NODE_NAMES_PER_REQUEST {
        return Err(format!(
            "the node lists name {total} nodes in all; at most \
             {MAX_NODE_NAMES_PER_REQUEST} per request (split the batch)"
        ));
    }
    Ok(())
}

pub use crate::domain::MAX_POWER_PER_NODE_W;

/// One node's power: finite, positive, at most `MAX_POWER_PER_NODE_W`.
pub fn node_power(watts: f64) -> Result<(), String> {
    positive(watts)?;
    if watts > MAX_POWER_PER_NODE_W {
        return Err(format!(
            "{watts} W is implausible for one node (limit {MAX_POWER_PER_NODE_W} W); is the unit watts?"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_cut_to_the_microsecond_in_every_year() {
        let at = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        for year in ["0001", "1600", "2026", "3000", "9999"] {
            assert_eq!(
                as_stored(at(&format!("{year}-06-01T12:00:00.0000019Z"))),
                at(&format!("{year}-06-01T12:00:00.000001Z")),
                "{year}"
            );
        }
        assert_eq!(
            as_stored(at("2016-12-31T23:59:60.5000004Z")),
            at("2017-01-01T00:00:00.5Z")
        );
    }

    #[test]
    fn a_tag_is_checked_once_where_it_enters() {
        let tag = Tag::parse("cp2k-h2o_64").unwrap();
        assert_eq!((tag.as_str(), tag.len()), ("cp2k-h2o_64", 11));
        assert_eq!(tag.to_string(), "cp2k-h2o_64");
        for bad in ["", "-lead", "a b", &"x".repeat(TAG_MAX + 1)] {
            assert_eq!(
                Tag::parse(bad).err(),
                identifier(bad, TAG_MAX).err(),
                "{bad:?}"
            );
            assert!(Tag::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_checked_name_holds_only_what_its_rule_accepts() {
        type Parse = fn(&str) -> Option<String>;
        type Rule = fn(&str) -> Result<(), String>;
        let rules: [(Parse, Rule); 4] = [
            (
                |v| Account::parse(v).map(String::from).err(),
                |v| identifier(v, ACCOUNT_MAX),
            ),
            (
                |v| Source::parse(v).map(String::from).err(),
                |v| identifier(v, SOURCE_MAX),
            ),
            (
                |v| JobId::parse(v).map(String::from).err(),
                |v| identifier(v, JOB_ID_MAX),
            ),
            (|v| NodeName::parse(v).map(String::from).err(), node_name),
        ];
        let long = "x".repeat(JOB_ID_MAX.max(ACCOUNT_MAX).max(SOURCE_MAX) + 1);
        for (parse, rule) in rules {
            for value in [
                "proj42", "1234_7", "cn001", "", "-lead", "a b", "a:b", &long,
            ] {
                assert_eq!(parse(value), rule(value).err(), "{value:?}");
            }
        }
        assert_eq!(JobId::parse("1234_7").unwrap().as_str(), "1234_7");
        assert_eq!(&*NodeName::parse("cn001").unwrap(), "cn001");
        assert!(NodeName::parse("a:b").is_err() && Account::parse("a:b").is_ok());
    }

    #[test]
    fn node_name_budgets() {
        use serde_json::json;
        let list = |n: u64| json!({"node_list": format!("n[1-{n}]")});
        let within = [
            list(100_000),
            list(100_000),
            json!({"node_list": ["a", "b"]}),
        ];
        assert!(node_names_within_budget(&within[..2]).is_ok());
        assert!(node_names_within_budget(&within).is_err());
        let error = node_names_within_budget(&[list(100_000), list(100_001)]).unwrap_err();
        assert!(error.contains("200001"), "{error}");
        // Unparseable lists and items without one count for nothing.
        let odd = [json!({"node_list": "n[1-"}), json!({}), json!(3)];
        assert!(node_names_within_budget(&odd).is_ok());
    }

    #[test]
    fn node_powers() {
        assert!(node_power(350.0).is_ok());
        assert!(node_power(MAX_POWER_PER_NODE_W).is_ok());
        for bad in [
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            1e200,
            MAX_POWER_PER_NODE_W * 1.01,
        ] {
            assert!(node_power(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn identifiers() {
        assert!(identifier("lammps-in.lj_2.4GHz", TAG_MAX).is_ok());
        assert!(identifier("a", TAG_MAX).is_ok());
        assert!(identifier(&"a".repeat(TAG_MAX), TAG_MAX).is_ok());
        assert!(identifier(&"a".repeat(TAG_MAX + 1), TAG_MAX).is_err());
        assert!(identifier("", TAG_MAX).is_err());
        assert!(identifier("-leading", TAG_MAX).is_err());
        assert!(identifier("has space", TAG_MAX).is_err());
        assert!(identifier("slash/inside", TAG_MAX).is_err());
        assert!(identifier("ünicode", TAG_MAX).is_err());
    }

    #[test]
    fn free_text_names_map_to_valid_tags() {
        for (name, tag) in [
            ("lammps-in.lj_2.4GHz", "lammps-in.lj_2.4GHz"),
            ("my job!", "my-job-"),
            ("  -_run vasp", "run-vasp"),
            ("ünicode", "nicode"),
            ("x/ü", "x---"),
            ("!!!", UNNAMED_APP),
            ("", UNNAMED_APP),
            ("(null)", "null-"),
        ] {
            assert_eq!(tag_from_name(name), tag, "{name:?}");
            assert!(identifier(&tag_from_name(name), TAG_MAX).is_ok());
        }
        let long = tag_from_name(&format!("_{}", "a".repeat(300)));
        assert_eq!(long.len(), TAG_MAX);
        assert!(identifier(&long, TAG_MAX).is_ok());
    }

    #[test]
    fn node_names() {
        assert!(node_name("node001").is_ok());
        assert!(node_name("r1-c2.cluster").is_ok());
        assert!(node_name("a,b").is_err());
        assert!(node_name("").is_err());
        assert!(node_name("node[1-4]").is_err());
    }

    #[test]
    fn texts_names_and_times() {
        assert!(text("line one\nline two").is_ok());
        assert!(text("nul\0here").is_err());
        assert!(name("slurm prolog").is_ok());
        assert!(name("tab\there").is_err());
        assert!(time_in_range("2026-01-01T00:00:00Z".parse().unwrap()).is_ok());
        assert!(time_in_range("-5000-01-01T00:00:00Z".parse().unwrap()).is_err());
        assert!(time_in_range("+10000-01-01T00:00:00Z".parse().unwrap()).is_err());
    }

    #[test]
    fn positives() {
        assert!(positive(1e-9).is_ok());
        assert!(positive(0.0).is_err());
        assert!(positive(-1.0).is_err());
        assert!(positive(f64::NAN).is_err());
        assert!(positive(f64::INFINITY).is_err());
        assert!(positive(1e-100).is_ok() && positive(1e100).is_ok());
        assert!(positive(1e-101).is_err() && positive(1e101).is_err());
    }

    #[test]
    fn quality_weights_are_from_the_range_low_end_to_one() {
        assert!(quality(1.0).is_ok() && quality(1e-100).is_ok() && quality(0.5).is_ok());
        for bad in [
            0.0,
            -0.1,
            1e-101,
            1e-200,
            1.0000001,
            f64::NAN,
            f64::INFINITY,
        ] {
            assert!(quality(bad).is_err(), "{bad}");
        }
        // Its least product with the least quantity's square stays normal.
        let (low, _) = POSITIVE_RANGE;
        assert!((low * low * low).is_normal());
    }

    #[test]
    fn time_limits_are_positive_and_at_most_ten_years() {
        let ten_years = MAX_DURATION_S;
        assert!(time_limit(1.0).is_ok() && time_limit(ten_years).is_ok());
        assert!(time_limit(ten_years * 1.001).is_err());
        assert!(time_limit(2.43e16).is_err());
        assert!(time_limit(0.0).is_err() && time_limit(f64::NAN).is_err());
    }

    #[test]
    fn nested_fields_get_the_prefix() {
        let e = FieldError::new("nodes", "must be at least 1").nested("runs[2]");
        assert_eq!(e.field, "runs[2].nodes");
        assert_eq!(FieldError::new("", "x").nested("runs[0]").field, "runs[0]");
        assert_eq!(FieldError::new("nodes", "x").nested("").field, "nodes");
    }
}
