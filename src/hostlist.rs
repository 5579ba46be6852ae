//! Slurm hostlist expressions (`node[01-04,07],login1`): expanding them into
//! node names as `scontrol show hostnames` does, and compressing node names
//! back into one for display.
//!
//! Two departures from Slurm: a name appearing twice is an error rather than
//! kept, since a node cannot be allocated twice; and only one-dimensional
//! numeric ranges are supported (no `[0x3]` torus coordinates).

use std::collections::HashSet;

use crate::validate::{self, NODE_NAME_MAX};

/// More names than this in one list is taken for a typing mistake
/// (`n[1-999999999]`); the count is checked before any name is built.
pub const MAX_HOSTS: usize = 100_000;

/// Why a hostlist cannot be expanded, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {position}: {reason}")]
pub struct HostlistError {
    /// Byte offset of the problem in the input, counted from 0.
    pub position: usize,
    pub reason: String,
}

impl HostlistError {
    fn new(position: usize, reason: impl Into<String>) -> Self {
        Self {
            position,
            reason: reason.into(),
        }
    }
}

/// How many names `list` expands to, without building them (saturating);
/// the error of a list that cannot be parsed.
pub fn count(list: &str) -> Result<u64, HostlistError> {
    Ok(parse(list)?
        .iter()
        .fold(0u64, |total, entry| total.saturating_add(entry.count())))
}

/// Expand a hostlist into node names, in the order written.
///
/// Entries are separated by commas outside brackets and trimmed of
/// whitespace. A bracket group holds numbers and ranges (`[01-04,07]`); a
/// range keeps the width of its lower bound, so `[08-10]` gives `08 09 10`.
/// Several groups in one entry give every combination, the leftmost group
/// varying slowest. Every name must pass [`validate::node_name`], and no name
/// may appear twice.
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    if list.trim().is_empty() {
        return Err(HostlistError::new(0, "empty host list"));
    }
    let entries = parse(list)?;

    // Counting first means a huge range fails without allocating its names.
    let mut total: u64 = 0;
    for entry in &entries {
        total = total.saturating_add(entry.count());
        if total > MAX_HOSTS as u64 {
            return Err(HostlistError::new(
                entry.start,
                format!("too many hosts: the list expands to more than {MAX_HOSTS} names"),
            ));
        }
    }

    let mut names = Vec::with_capacity(total as usize);
    let mut seen = HashSet::with_capacity(total as usize);
    for entry in &entries {
        if entry.min_name_len() > NODE_NAME_MAX {
            return Err(HostlistError::new(
                entry.start,
                format!(
                    "bad host name: names here would be longer than {NODE_NAME_MAX} characters"
                ),
            ));
        }
        for name in entry.expand() {
            if let Err(reason) = validate::node_name(&name) {
                return Err(HostlistError::new(
                    entry.start,
                    format!("bad host name {name:?}: {reason}"),
                ));
            }
            if !seen.insert(name.clone()) {
                return Err(HostlistError::new(
                    entry.start,
                    format!("duplicate name {name:?}: a node cannot be allocated twice"),
                ));
            }
            names.push(name);
        }
    }
    Ok(names)
}

/// One comma-separated entry: literal text and bracket groups, in order.
struct Entry<'a> {
    /// Byte offset of the (trimmed) entry in the input.
    start: usize,
    parts: Vec<Part<'a>>,
}

enum Part<'a> {
    Literal(&'a str),
    Group(Vec<Range>),
}

/// `lo..=hi`, each number zero-padded to `width` digits.
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn count(&self) -> u64 {
        (self.hi - self.lo).saturating_add(1)
    }
}

impl Entry<'_> {
    fn count(&self) -> u64 {
        self.parts.iter().fold(1u64, |product, part| match part {
            Part::Literal(_) => product,
            Part::Group(ranges) => {
                let in_group = ranges
                    .iter()
                    .fold(0u64, |sum, r| sum.saturating_add(r.count()));
                product.saturating_mul(in_group)
            }
        })
    }

    /// The length of the shortest name this entry gives: a bound checked
    /// before building names, so that a long prefix times many numbers
    /// cannot take much memory.
    fn min_name_len(&self) -> usize {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Literal(text) => text.len(),
                Part::Group(ranges) => ranges.iter().map(|r| r.width).min().unwrap_or(0),
            })
            .fold(0, usize::saturating_add)
    }

    /// Every name, the leftmost group varying slowest. Only called once
    /// `count` is known to be within `MAX_HOSTS`.
    fn expand(&self) -> Vec<String> {
        let mut names = vec![String::new()];
        for part in &self.parts {
            match part {
                Part::Literal(text) => names.iter_mut().for_each(|name| name.push_str(text)),
                Part::Group(ranges) => {
                    names = names
                        .iter()
                        .flat_map(|name| {
                            ranges.iter().flat_map(move |r| {
                                (r.lo..=r.hi)
                                    .map(move |n| format!("{name}{n:0width$}", width = r.width))
                            })
                        })
                        .collect();
                }
            }
        }
        names
    }
}

/// Split at commas outside brackets, checking the brackets on the way.
fn parse(list: &str) -> Result<Vec<Entry<'_>>, HostlistError> {
    let mut entries = Vec::new();
    let mut entry_start = 0;
    let mut open: Option<usize> = None;
    for (i, c) in list.char_indices() {
        match (c, open) {
            ('[', Some(_)) => {
                return Err(HostlistError::new(i, "nested bracket: '[' inside '[...]'"));
            }
            ('[', None) => open = Some(i),
            (']', None) => {
                return Err(HostlistError::new(
                    i,
                    "unbalanced bracket: ']' without a matching '['",
                ));
            }
            (']', Some(_)) => open = None,
            (',', None) => {
                entries.push(parse_entry(list, entry_start, i)?);
                entry_start = i + 1;
            }
            _ => {}
        }
    }
    if let Some(i) = open {
        return Err(HostlistError::new(
            i,
            "unbalanced bracket: '[' is never closed",
        ));
    }
    entries.push(parse_entry(list, entry_start, list.len())?);
    Ok(entries)
}

/// Parse `list[start..end]`, whose brackets `parse` found balanced and flat.
fn parse_entry(list: &str, start: usize, end: usize) -> Result<Entry<'_>, HostlistError> {
    let raw = &list[start..end];
    let text = raw.trim();
    if text.is_empty() {
        return Err(HostlistError::new(
            start,
            "empty entry: two commas in a row, or a comma at the start or end",
        ));
    }
    let start = start + (raw.len() - raw.trim_start().len());

    let mut parts = Vec::new();
    let mut rest = text;
    let mut offset = start;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']').map(|c| open + c) else {
            return Err(HostlistError::new(
                offset + open,
                "unbalanced bracket: '[' is never closed",
            ));
        };
        if open > 0 {
            parts.push(Part::Literal(&rest[..open]));
        }
        parts.push(Part::Group(parse_group(
            &rest[open + 1..close],
            offset + open,
        )?));
        rest = &rest[close + 1..];
        offset += close + 1;
    }
    if !rest.is_empty() {
        parts.push(Part::Literal(rest));
    }
    Ok(Entry { start, parts })
}

/// Parse the inside of one `[...]`, whose `[` is at byte `open`.
fn parse_group(inside: &str, open: usize) -> Result<Vec<Range>, HostlistError> {
    if inside.is_empty() {
        return Err(HostlistError::new(
            open,
            "empty range: '[]' needs numbers, as in [1-4]",
        ));
    }
    let mut ranges = Vec::new();
    let mut at = open + 1;
    for item in inside.split(',') {
        ranges.push(parse_range(item, at)?);
        at += item.len() + 1;
    }
    Ok(ranges)
}

/// Parse `7` or `01-04`, starting at byte `at`.
fn parse_range(item: &str, at: usize) -> Result<Range, HostlistError> {
    if item.is_empty() {
        return Err(HostlistError::new(
            at,
            "empty range: nothing between ',' and its neighbour inside '[...]'",
        ));
    }
    let (lo_text, hi_text) = match item.split_once('-') {
        Some((lo, hi)) => (lo, Some(hi)),
        None => (item, None),
    };
    if lo_text.is_empty() {
        return Err(HostlistError::new(
            at,
            format!("empty range: {item:?} has no lower bound (negative numbers are not allowed)"),
        ));
    }
    let lo = parse_number(lo_text, at)?;
    let hi = match hi_text {
        None => lo,
        Some("") => {
            return Err(HostlistError::new(
                at,
                format!("empty range: {item:?} has no upper bound"),
            ));
        }
        Some(hi) => parse_number(hi, at + lo_text.len() + 1)?,
    };
    if lo > hi {
        return Err(HostlistError::new(
            at,
            format!("reversed range {item:?}: the first number must not exceed the second"),
        ));
    }
    Ok(Range {
        lo,
        hi,
        width: lo_text.len(),
    })
}

fn parse_number(text: &str, at: usize) -> Result<u64, HostlistError> {
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostlistError::new(at, format!("{text:?} is not a number")));
    }
    // Longer numbers could never fit in a node name; refusing them here also
    // keeps zero-padding widths small.
    if text.len() > NODE_NAME_MAX {
        return Err(HostlistError::new(
            at,
            format!(
                "number {text:?} is longer than a node name may be ({NODE_NAME_MAX} characters)"
            ),
        ));
    }
    text.parse()
        .map_err(|_| HostlistError::new(at, format!("number {text:?} is too large")))
}

/// Write node names as a hostlist, for display: `node01,node02,node03,gpu7`
/// becomes `node[01-03],gpu7`.
///
/// Order is kept: only neighbouring names that differ in their last run of
/// digits (same text before and after it) share brackets, and a range needs
/// consecutive ascending numbers of the same zero-padded width. So for any
/// list of distinct valid node names, `expand(&compress(names))` gives back
/// `names` exactly, whatever their order; sort the names first (numerically,
/// as `expand` produces them) for the shortest result. No names give `""`,
/// which `expand` refuses as an empty list.
pub fn compress(names: &[String]) -> String {
    let mut entries: Vec<String> = Vec::new();
    let mut i = 0;
    while i < names.len() {
        let Some(first) = Numbered::split(&names[i]) else {
            entries.push(names[i].clone());
            i += 1;
            continue;
        };
        let mut run = vec![first];
        while let Some(next) = names.get(i + run.len()).and_then(|n| Numbered::split(n)) {
            if next.prefix != first.prefix || next.suffix != first.suffix {
                break;
            }
            run.push(next);
        }
        i += run.len();
        if run.len() == 1 {
            entries.push(format!("{}{}{}", first.prefix, first.digits, first.suffix));
        } else {
            entries.push(format!(
                "{}[{}]{}",
                first.prefix,
                compress_numbers(&run),
                first.suffix
            ));
        }
    }
    entries.join(",")
}

/// `01,02,03,07` → `01-03,07`, keeping the order given.
fn compress_numbers(run: &[Numbered<'_>]) -> String {
    let mut ranges: Vec<String> = Vec::new();
    let mut i = 0;
    while i < run.len() {
        let lo = &run[i];
        let width = lo.digits.len();
        let mut end = i;
        // `expand` pads every number of a range to its lower bound's width,
        // so a name only joins the range if that padding reproduces it.
        while let Some(next) = run.get(end + 1) {
            let follows = run[end].value.checked_add(1) == Some(next.value);
            if !follows || next.digits != format!("{:0width$}", next.value) {
                break;
            }
            end += 1;
        }
        if end == i {
            ranges.push(lo.digits.to_owned());
        } else {
            ranges.push(format!("{}-{}", lo.digits, run[end].digits));
        }
        i = end + 1;
    }
    ranges.join(",")
}

/// A name cut around its last run of digits: `rack1-n07.ib` is `rack1-n`,
/// `07`, `.ib`.
#[derive(Clone, Copy)]
struct Numbered<'a> {
    prefix: &'a str,
    digits: &'a str,
    value: u64,
    suffix: &'a str,
}

impl<'a> Numbered<'a> {
    fn split(name: &'a str) -> Option<Self> {
        let end = name.rfind(|c: char| c.is_ascii_digit())? + 1;
        let start = name[..end]
            .trim_end_matches(|c: char| c.is_ascii_digit())
            .len();
        let digits = &name[start..end];
        // Numbers too long for `expand` stay literal text.
        if digits.len() > NODE_NAME_MAX {
            return None;
        }
        Some(Self {
            prefix: &name[..start],
            digits,
            value: digits.parse().ok()?,
            suffix: &name[end..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(list: &str) -> Vec<String> {
        expand(list).unwrap_or_else(|e| panic!("{list:?}: {e}"))
    }

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|&n| n.to_owned()).collect()
    }

    /// Asserts the error's position and that its reason contains `reason`.
    fn fails(list: &str, position: usize, reason: &str) {
        match expand(list) {
            Ok(names) => panic!("{list:?} expanded to {names:?}"),
            Err(e) => {
                assert_eq!(e.position, position, "{list:?}: {e}");
                assert!(e.reason.contains(reason), "{list:?}: {e}");
            }
        }
    }

    #[test]
    fn ranges_and_lists_in_brackets() {
        assert_eq!(ok("gpu[1-3]"), ["gpu1", "gpu2", "gpu3"]);
        assert_eq!(
            ok("node[01-04,07]"),
            ["node01", "node02", "node03", "node04", "node07"]
        );
        assert_eq!(ok("n[5,1,3-4]"), ["n5", "n1", "n3", "n4"]);
        assert_eq!(ok("node[7]"), ["node7"]);
        assert_eq!(ok("n[1-3].ib"), ["n1.ib", "n2.ib", "n3.ib"]);
        assert_eq!(ok("[1-2]"), ["1", "2"]);
    }

    #[test]
    fn zero_padding_follows_the_lower_bound() {
        let padded = ok("n[01-10]");
        assert_eq!(padded.len(), 10);
        assert_eq!(padded[0], "n01");
        assert_eq!(padded[9], "n10");
        assert_eq!(ok("n[1-10]")[..2], ["n1", "n2"]);
        assert_eq!(ok("n[1-10]")[9], "n10");
        assert_eq!(ok("n[001-003]"), ["n001", "n002", "n003"]);
        assert_eq!(ok("n[098-100]"), ["n098", "n099", "n100"]);
        assert_eq!(ok("n[98-100]"), ["n98", "n99", "n100"]);
        assert_eq!(ok("n[0-1]"), ["n0", "n1"]);
        assert_eq!(ok("n[007]"), ["n007"]);
    }

    #[test]
    fn plain_lists_and_whitespace() {
        assert_eq!(ok("a,b,c"), ["a", "b", "c"]);
        assert_eq!(ok("login1"), ["login1"]);
        assert_eq!(ok("  a , n[1-2]\t,\nb "), ["a", "n1", "n2", "b"]);
    }

    #[test]
    fn several_groups_give_every_combination_left_slowest() {
        assert_eq!(
            ok("rack[1-2]-n[01-02]"),
            ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
        );
        assert_eq!(
            ok("r[1,3]c[1-2]s[5]"),
            ["r1c1s5", "r1c2s5", "r3c1s5", "r3c2s5"]
        );
        assert_eq!(ok("x[1-2][7-8]"), ["x17", "x18", "x27", "x28"]);
    }

    #[test]
    fn bracket_errors() {
        fails("node[1-2", 4, "unbalanced bracket");
        fails("node1-2]", 7, "unbalanced bracket");
        fails("a,b]", 3, "unbalanced bracket");
        fails("n[1-[2]]", 4, "nested bracket");
        fails("a[", 1, "unbalanced bracket");
        fails("[", 0, "unbalanced bracket");
        fails("]", 0, "unbalanced bracket");
    }

    #[test]
    fn range_errors() {
        fails("node[]", 4, "empty range");
        fails("n[1,,2]", 4, "empty range");
        fails("n[1,]", 4, "empty range");
        fails("n[,1]", 2, "empty range");
        fails("a[1-]", 2, "no upper bound");
        fails("a[-1]", 2, "no lower bound");
        fails("a[1--2]", 4, "\"-2\" is not a number");
        fails("n[1-x]", 4, "\"x\" is not a number");
        fails("n[a]", 2, "\"a\" is not a number");
        fails("n[1-2-3]", 4, "\"2-3\" is not a number");
        fails("n[+1]", 2, "is not a number");
        fails("n[1, 2]", 4, "\" 2\" is not a number");
        fails("n[99999999999999999999]", 2, "too large");
        fails(
            &format!("n[{}]", "0".repeat(65)),
            2,
            "longer than a node name",
        );
        fails("n[1,5-3]", 4, "reversed range \"5-3\"");
    }

    #[test]
    fn entry_errors() {
        fails("", 0, "empty host list");
        fails("   ", 0, "empty host list");
        fails("a,,b", 2, "empty entry");
        fails("a,b,", 4, "empty entry");
        fails(",a", 0, "empty entry");
        fails("a, ,b", 2, "empty entry");
    }

    #[test]
    fn names_are_validated() {
        fails("a,node 1", 2, "bad host name \"node 1\"");
        fails("n[1-2],-x", 7, "bad host name \"-x\"");
        fails("a,x[1-2]/y", 2, "bad host name \"x1/y\"");
        fails("nöde[1-2]", 0, "bad host name");
        fails(&"a".repeat(65), 0, "bad host name");
        // A long prefix is refused before its names are built.
        fails(
            &format!("{}[1-99999]", "a".repeat(1000)),
            0,
            "longer than 64 characters",
        );
    }

    #[test]
    fn duplicates_are_refused() {
        fails("a,b,a", 4, "duplicate name \"a\"");
        fails("n[1-3,2]", 0, "duplicate name \"n2\"");
        fails("n[1-2],n[01-02],n2", 16, "duplicate name \"n2\"");
        assert_eq!(ok("n[1-2],n[01-02]"), ["n1", "n2", "n01", "n02"]);
    }

    #[test]
    fn too_many_hosts_fails_before_building_names() {
        fails("n[1-999999999]", 0, "too many hosts");
        fails("n[0-18446744073709551615]", 0, "too many hosts");
        fails(
            "r[0-18446744073709551615]n[0-18446744073709551615]",
            0,
            "too many hosts",
        );
        fails("a,n[1-100000]", 2, "too many hosts");
        fails("x[1-1000]y[1-1000]", 0, "too many hosts");
        assert_eq!(ok("n[1-100000]").len(), MAX_HOSTS);
    }

    #[test]
    fn display_gives_the_position() {
        let e = expand("n[5-3]").unwrap_err();
        assert_eq!(
            e.to_string(),
            "at character 2: reversed range \"5-3\": the first number must not exceed the second"
        );
    }

    #[test]
    fn garbage_never_panics() {
        for list in [
            "[",
            "]",
            "[]",
            "][",
            "a[",
            "a[1-",
            "a[-1]",
            "a[1--2]",
            "a[1-2]]",
            "[[",
            ",",
            ",,",
            "-",
            "[-]",
            "[,]",
            "a[1-2",
            "é",
            "é[1-2]",
            "[é]",
            "n[1-é]",
            "🦀,🦀",
            "a[1]b[",
            "\u{0}",
            "a\u{200b}b",
            "n[٣]",
            "n[1-٣]",
        ] {
            assert!(expand(list).is_err(), "{list:?}");
        }
    }

    #[test]
    fn compress_groups_neighbours_by_their_last_number() {
        let names = ok("node[01-04,07],gpu7,login,rack1-n[01-03].ib");
        assert_eq!(
            compress(&names),
            "node[01-04,07],gpu7,login,rack1-n[01-03].ib"
        );
        assert_eq!(compress(&ok("n[8-12]")), "n[8-12]");
        assert_eq!(compress(&ok("n[08-12]")), "n[08-12]");
        assert_eq!(compress(&strings(&["n9", "n010"])), "n[9,010]");
        assert_eq!(compress(&strings(&["n1", "n3", "n2"])), "n[1,3,2]");
        assert_eq!(compress(&strings(&["a1", "b1", "a2"])), "a1,b1,a2");
        assert_eq!(compress(&[]), "");
    }

    fn round_trips(names: &[String]) {
        let list = compress(names);
        assert_eq!(expand(&list).as_deref(), Ok(names), "{list}");
    }

    #[test]
    fn compress_round_trips() {
        round_trips(&ok("node[001-120],gpu[1-16],login[1-2],mgmt"));
        round_trips(&ok("rack[1-3]-n[01-12]"));
        round_trips(&ok("n[0-1],n[00-01],n[000-001]"));
        round_trips(&ok("n[98-102],m[098-102],k[8-12]x"));
        round_trips(&strings(&[
            "n18446744073709551615",
            "n18446744073709551614",
        ]));
        round_trips(&strings(&[&"9".repeat(30), "a"]));

        // Sorted as strings rather than numerically: still exact, just longer.
        let mut sorted = ok("n[1-20],n1a,n2a,m[1-3]");
        sorted.sort();
        round_trips(&sorted);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    /// Names built from few prefixes, suffixes and widths, so that many
    /// share brackets.
    fn name() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec!["n", "gpu", "r1-n", "x9y", ""]),
            0u64..40,
            0usize..4,
            prop::sample::select(vec!["", ".ib", "a"]),
        )
            .prop_map(|(prefix, n, width, suffix)| format!("{prefix}{n:0width$}{suffix}"))
    }

    proptest! {
        // Failing seeds are kept beside this file (hostlist.proptest-regressions),
        // not in a directory at the top of the project.
        #![proptest_config(ProptestConfig {
            cases: 256,
            failure_persistence: Some(Box::new(
                proptest::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
            )),
            ..ProptestConfig::default()
        })]

        /// Distinct names, in any order, come back exactly.
        #[test]
        fn compress_then_expand_is_identity(names in prop::collection::vec(name(), 0..60)) {
            let mut seen = HashSet::new();
            let names: Vec<String> = names.into_iter().filter(|n| seen.insert(n.clone())).collect();
            prop_assume!(!names.is_empty());
            let list = compress(&names);
            prop_assert_eq!(expand(&list), Ok(names), "{}", list);
        }

        /// Any input gives names or an error, never a panic.
        #[test]
        fn expand_never_panics(
            chars in prop::collection::vec(
                prop::sample::select(vec!['[', ']', ',', '-', '0', '1', '9', 'n', ' ', 'é']),
                0..24,
            ),
        ) {
            let list: String = chars.into_iter().collect();
            let _ = expand(&list);
        }
    }
}
