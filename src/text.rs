//! Numbers in words: what reasons, messages and pages print.

/// `x` in whole units from 1 up to 1e15, else to three significant digits
/// in scientific notation: a cap of 1e-9 W is not "0 W", and one of 1e100 W
/// is not a hundred digits.
pub fn whole(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 || (1.0..1e15).contains(&a) {
        format!("{x:.0}")
    } else {
        format!("{x:.2e}")
    }
}

/// `more` and `less` (`more` > `less`) as `whole` writes them, with as many
/// decimals as it takes (up to 6) for `more` to read as more: a time 0.4 s
/// past a deadline is not "399 s, beyond the deadline of 399 s".
pub fn whole_apart(more: f64, less: f64) -> (String, String) {
    let (a, b) = (whole(more), whole(less));
    if a != b || !more.is_finite() || !less.is_finite() || more.abs() >= 1e15 {
        return (a, b);
    }
    (1..=6)
        .map(|d| (format!("{more:.d$}"), format!("{less:.d$}")))
        .find(|(a, b)| a != b)
        .unwrap_or((a, b))
}

/// The first `most` of `names`, comma-separated, and how many more there
/// are: "a, b and 3 more".
pub fn names_shown(names: &[&str], most: usize) -> String {
    let mut shown = names[..names.len().min(most)].join(", ");
    if names.len() > most {
        shown.push_str(&format!(" and {} more", names.len() - most));
    }
    shown
}

/// "1 node", "2 nodes".
pub fn nodes(n: impl Into<u64>) -> String {
    match n.into() {
        1 => "1 node".to_owned(),
        n => format!("{n} nodes"),
    }
}

/// "1 run", "2 runs".
pub fn runs(n: u64) -> String {
    match n {
        1 => "1 run".to_owned(),
        n => format!("{n} runs"),
    }
}

/// `x` to three significant digits: plain from 1e-3 up to 1e6, in
/// scientific notation outside, where plain digits would run long
/// ("0.000000000", or a hundred digits).
pub fn sig3(x: f64) -> String {
    if !x.is_finite() {
        return "–".into();
    }
    let a = x.abs();
    if a != 0.0 && !(1e-3..1e6).contains(&a) {
        return format!("{x:.2e}");
    }
    let digits = if a >= 100.0 || a == 0.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        // 0.0123 → 4 decimals: three significant digits.
        (2 - a.log10().floor() as i32).clamp(3, 5) as usize
    };
    format!("{x:.digits$}")
}

/// `x` exactly as given (the shortest digits that read back as it), in
/// scientific notation outside 1e-4 up to 1e15, where plain digits would run
/// to hundreds: what a reason quotes back ("got 1e-300", not "got 0.000…").
pub fn exact(x: f64) -> String {
    let a = x.abs();
    if !x.is_finite() || a == 0.0 || (1e-4..1e15).contains(&a) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_apart_read_apart() {
        assert_eq!(whole_apart(399.4, 399.0), ("399.4".into(), "399.0".into()));
        assert_eq!(whole_apart(420.0, 399.0), ("420".into(), "399".into()));
        // Closer than six decimals tell: as `whole` writes them.
        assert_eq!(whole_apart(1.000_000_1, 1.0), ("1".into(), "1".into()));
        assert_eq!(names_shown(&["a", "b", "c"], 2), "a, b and 1 more");
        assert_eq!(names_shown(&["a", "b"], 2), "a, b");
        assert_eq!(nodes(1u32), "1 node");
        assert_eq!(nodes(3u32), "3 nodes");
    }

    #[test]
    fn given_values_are_quoted_exactly_and_short() {
        assert_eq!(exact(1e-300), "1e-300");
        assert_eq!(exact(-2.5e300), "-2.5e300");
        assert_eq!(exact(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(exact(1234.5), "1234.5");
        assert_eq!(exact(0.0), "0");
        assert_eq!(
            exact(f64::MIN_POSITIVE).parse::<f64>(),
            Ok(f64::MIN_POSITIVE)
        );
        assert_eq!(exact(f64::NAN), "NaN");
    }

    #[test]
    fn whole_units_keep_small_and_huge_values_short() {
        assert_eq!(whole(1234.4), "1234");
        assert_eq!(whole(0.0), "0");
        assert_eq!(whole(-2.5), "-2");
        assert_eq!(whole(1e-100), "1.00e-100");
        assert_eq!(whole(0.25), "2.50e-1");
        assert_eq!(whole(1e100), "1.00e100");
    }

    #[test]
    fn three_significant_digits() {
        assert_eq!(sig3(1234.5), "1234");
        assert_eq!(sig3(12.345), "12.3");
        assert_eq!(sig3(1.2345), "1.23");
        assert_eq!(sig3(0.012345), "0.0123");
        assert_eq!(sig3(0.0), "0");
        assert_eq!(sig3(-2.5), "-2.50");
        assert_eq!(sig3(1.5e-10), "1.50e-10");
        assert_eq!(sig3(3.16e13), "3.16e13");
        assert_eq!(sig3(f64::NAN), "–");
    }
}
