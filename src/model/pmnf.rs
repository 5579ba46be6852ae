//! The performance model normal form of docs/model.md §6.2:
//! y(p) = c0 + Σ_k c_k · p^(i_k) · log2(p)^(j_k),
//! with rational exponents i and integer log powers j.

use std::cmp::Ordering;
use std::fmt;

/// A rational exponent n/d, kept reduced with d > 0, so that equal exponents
/// compare equal and render as written ("3/2", "-1").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Exponent {
    num: i32,
    den: i32,
}

impl Exponent {
    pub const ZERO: Exponent = Exponent { num: 0, den: 1 };
    pub const ONE: Exponent = Exponent { num: 1, den: 1 };
    /// The largest denominator accepted: enough for the design's set (4ths
    /// and 3rds) and for anything a user would write.
    pub const MAX_DEN: i32 = 12;
    /// The largest magnitude accepted: p^8 is already far beyond any scaling
    /// law.
    pub const MAX_ABS: i32 = 8;

    /// n/d reduced; `None` when d is 0.
    pub fn new(num: i32, den: i32) -> Option<Exponent> {
        if den == 0 {
            return None;
        }
        let g = gcd(num.unsigned_abs(), den.unsigned_abs()) as i32;
        let sign = den.signum();
        Some(Exponent {
            num: sign * num / g,
            den: sign * den / g,
        })
    }

    /// Within what users may write: |value| ≤ MAX_ABS, denominator ≤ MAX_DEN.
    pub fn in_range(self) -> bool {
        self.den <= Self::MAX_DEN && self.num.abs() <= Self::MAX_ABS * self.den
    }

    pub fn integer(n: i32) -> Exponent {
        Exponent { num: n, den: 1 }
    }

    pub fn value(self) -> f64 {
        f64::from(self.num) / f64::from(self.den)
    }

    pub fn is_zero(self) -> bool {
        self.num == 0
    }

    pub fn is_negative(self) -> bool {
        self.num < 0
    }

    pub fn negated(self) -> Exponent {
        Exponent {
            num: -self.num,
            den: self.den,
        }
    }

    pub fn den(self) -> i32 {
        self.den
    }

    pub fn is_integer(self) -> bool {
        self.den == 1
    }

    /// The integer part (the value itself for integers).
    pub fn whole(self) -> i32 {
        self.num / self.den
    }

    pub fn times(self, other: Exponent) -> Exponent {
        Exponent::new(self.num * other.num, self.den * other.den).unwrap_or(Exponent::ZERO)
    }

    pub fn minus(self, other: Exponent) -> Exponent {
        self.plus(other.negated())
    }

    pub fn plus(self, other: Exponent) -> Exponent {
        Exponent::new(
            self.num * other.den + other.num * self.den,
            self.den * other.den,
        )
        .unwrap_or(Exponent::ZERO)
    }

    /// "3/2", "-1", "0.75" or "1.5": an integer, a fraction or a decimal.
    pub fn parse(text: &str) -> Result<Exponent, String> {
        let text = text.trim();
        let invalid = || format!("`{text}` is not a number such as 2, 3/2, -1/4 or 1.5");
        let out_of_range = || {
            format!(
                "`{text}` is out of range: exponents lie within ±{} with denominators up to {}",
                Self::MAX_ABS,
                Self::MAX_DEN
            )
        };
        let (num, den) = if let Some((n, d)) = text.split_once('/') {
            let n: i32 = n.trim().parse().map_err(|_| invalid())?;
            let d: i32 = d.trim().parse().map_err(|_| invalid())?;
            if d == 0 {
                return Err(format!("`{text}` divides by zero"));
            }
            (n, d)
        } else if let Some((whole, fraction)) = text.split_once('.') {
            if fraction.is_empty()
                || fraction.len() > 3
                || !fraction.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(invalid());
            }
            let den = 10i32.pow(fraction.len() as u32);
            let negative = whole.trim_start().starts_with('-');
            let whole: i32 = match whole.trim() {
                "" | "-" | "+" => 0,
                w => w.parse().map_err(|_| invalid())?,
            };
            let fraction: i32 = fraction.parse().map_err(|_| invalid())?;
            let magnitude = whole.abs() * den + fraction;
            (if negative { -magnitude } else { magnitude }, den)
        } else {
            (text.parse().map_err(|_| invalid())?, 1)
        };
        Exponent::new(num, den)
            .filter(|e| e.in_range())
            .ok_or_else(out_of_range)
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a.max(1) } else { gcd(b, a % b) }
}

impl Ord for Exponent {
    fn cmp(&self, other: &Self) -> Ordering {
        (i64::from(self.num) * i64::from(other.den))
            .cmp(&(i64::from(other.num) * i64::from(self.den)))
    }
}

impl PartialOrd for Exponent {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Exponent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.den == 1 {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

/// The shape p^i · log2(p)^j of a term. Shapes are ordered by asymptotic
/// growth: first the exponent, then the log power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape {
    pub exponent: Exponent,
    /// Negative only in divergences (a ratio of shapes), never in a model.
    pub log_power: i32,
}

impl Shape {
    /// The constant 1.
    pub const ONE: Shape = Shape {
        exponent: Exponent::ZERO,
        log_power: 0,
    };

    pub fn new(exponent: Exponent, log_power: i32) -> Shape {
        Shape {
            exponent,
            log_power,
        }
    }

    pub fn is_constant(self) -> bool {
        self == Shape::ONE
    }

    pub fn at(self, p: f64) -> f64 {
        let power = if self.exponent.is_zero() {
            1.0
        } else if self.exponent.den == 1 {
            p.powi(self.exponent.num)
        } else {
            p.powf(self.exponent.value())
        };
        match self.log_power {
            0 => power,
            1 => power * p.log2(),
            j => power * p.log2().powi(j),
        }
    }

    /// self / other.
    pub fn over(self, other: Shape) -> Shape {
        Shape {
            exponent: self.exponent.minus(other.exponent),
            log_power: self.log_power - other.log_power,
        }
    }

    /// self · other.
    pub fn times(self, other: Shape) -> Shape {
        Shape {
            exponent: self.exponent.plus(other.exponent),
            log_power: self.log_power + other.log_power,
        }
    }
}

impl fmt::Display for Shape {
    /// "1", "p", "p^2", "p^(3/2)", "p^(-1)", "log2(p)^2", "p * log2(p)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_constant() {
            return f.write_str("1");
        }
        let e = self.exponent;
        let power = if e.is_zero() {
            None
        } else if e == Exponent::ONE {
            Some("p".to_owned())
        } else if e.den == 1 && e.num > 0 {
            Some(format!("p^{e}"))
        } else {
            Some(format!("p^({e})"))
        };
        let log = match self.log_power {
            0 => None,
            1 => Some("log2(p)".to_owned()),
            j if j > 0 => Some(format!("log2(p)^{j}")),
            j => Some(format!("log2(p)^({j})")),
        };
        match (power, log) {
            (Some(p), Some(l)) => write!(f, "{p} * {l}"),
            (Some(p), None) => f.write_str(&p),
            (None, Some(l)) => f.write_str(&l),
            (None, None) => f.write_str("1"),
        }
    }
}

/// c · shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Term {
    pub coefficient: f64,
    pub shape: Shape,
}

/// A model in normal form: a constant and up to a few terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub constant: f64,
    /// Ordered by growth, slowest first.
    pub terms: Vec<Term>,
}

impl Model {
    pub fn constant(c0: f64) -> Model {
        Model {
            constant: c0,
            terms: Vec::new(),
        }
    }

    pub fn at(&self, p: f64) -> f64 {
        self.constant
            + self
                .terms
                .iter()
                .map(|t| t.coefficient * t.shape.at(p))
                .sum::<f64>()
    }

    /// The fastest-growing part with a non-zero coefficient: what the model
    /// is in big-O. Terms that shrink with p (negative exponents) lead only
    /// when there is no constant.
    pub fn leading(&self) -> Shape {
        let mut parts = self
            .terms
            .iter()
            .filter(|t| t.coefficient != 0.0)
            .map(|t| t.shape)
            .collect::<Vec<_>>();
        if self.constant != 0.0 {
            parts.push(Shape::ONE);
        }
        parts.into_iter().max().unwrap_or(Shape::ONE)
    }

    /// The model as a readable formula: "10 + 2.5 * p", "3 - 0.5 * log2(p)".
    pub fn formula(&self) -> String {
        let mut out = number(self.constant);
        for term in &self.terms {
            let (sign, magnitude) = if term.coefficient < 0.0 {
                ('-', -term.coefficient)
            } else {
                ('+', term.coefficient)
            };
            out.push_str(&format!(" {sign} {} * {}", number(magnitude), term.shape));
        }
        out
    }
}

/// A number with six significant digits, without trailing zeros; scientific
/// notation outside [1e-4, 1e7).
pub fn number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return if x.is_finite() {
            "0".into()
        } else {
            x.to_string()
        };
    }
    let magnitude = x.abs().log10().floor() as i32;
    if !(-4..7).contains(&magnitude) {
        let text = format!("{x:.5e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        return format!("{}e{exponent}", trim_zeros(mantissa));
    }
    let decimals = (5 - magnitude).max(0) as usize;
    trim_zeros(&format!("{x:.decimals$}")).to_owned()
}

fn trim_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(text: &str) -> Exponent {
        Exponent::parse(text).unwrap()
    }

    #[test]
    fn exponents_parse_reduce_and_render_as_written() {
        assert_eq!(e("3/2").to_string(), "3/2");
        assert_eq!(e("6/4"), e("3/2"));
        assert_eq!(e("1.5"), e("3/2"));
        assert_eq!(e("-0.25"), e("-1/4"));
        assert_eq!(e("-1").to_string(), "-1");
        assert_eq!(e("2/-4").to_string(), "-1/2");
        assert_eq!(e(".5"), e("1/2"));
        assert!(e("1/3") < e("1/2") && e("-1") < e("0"));
        for bad in ["", "x", "1/0", "1.", "1.2345", "9", "1/13", "a/b"] {
            assert!(Exponent::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shapes_evaluate_and_render() {
        let shape = Shape::new(e("3/2"), 2);
        assert!((shape.at(16.0) - 64.0 * 16.0).abs() < 1e-9);
        assert_eq!(shape.to_string(), "p^(3/2) * log2(p)^2");
        assert_eq!(Shape::new(Exponent::ONE, 0).to_string(), "p");
        assert_eq!(Shape::new(e("2"), 0).to_string(), "p^2");
        assert_eq!(Shape::new(e("-1"), 0).to_string(), "p^(-1)");
        assert_eq!(Shape::new(Exponent::ZERO, 1).to_string(), "log2(p)");
        assert_eq!(Shape::ONE.to_string(), "1");
        assert!((Shape::new(e("-1"), 0).at(4.0) - 0.25).abs() < 1e-12);
    }

    #[test]
    fn shapes_order_by_growth() {
        let log = Shape::new(Exponent::ZERO, 1);
        let sqrt = Shape::new(e("1/2"), 0);
        let p_log = Shape::new(Exponent::ONE, 1);
        let p = Shape::new(Exponent::ONE, 0);
        let inverse = Shape::new(e("-1"), 0);
        let mut shapes = vec![p_log, sqrt, Shape::ONE, p, log, inverse];
        shapes.sort();
        assert_eq!(shapes, vec![inverse, Shape::ONE, log, sqrt, p, p_log]);
    }

    #[test]
    fn the_leading_term_is_the_fastest_growing_non_zero_one() {
        let model = Model {
            constant: 5.0,
            terms: vec![
                Term {
                    coefficient: 2.0,
                    shape: Shape::new(e("-1"), 0),
                },
                Term {
                    coefficient: 0.0,
                    shape: Shape::new(e("2"), 0),
                },
            ],
        };
        assert_eq!(model.leading(), Shape::ONE);
        let no_constant = Model {
            constant: 0.0,
            ..model.clone()
        };
        assert_eq!(no_constant.leading(), Shape::new(e("-1"), 0));
    }

    #[test]
    fn formulas_are_readable() {
        let model = Model {
            constant: 10.0,
            terms: vec![
                Term {
                    coefficient: -0.5,
                    shape: Shape::new(Exponent::ZERO, 1),
                },
                Term {
                    coefficient: 2.5e-9,
                    shape: Shape::new(e("3/2"), 0),
                },
            ],
        };
        assert_eq!(model.formula(), "10 - 0.5 * log2(p) + 2.5e-9 * p^(3/2)");
        assert_eq!(number(1234.5678), "1234.57");
        assert_eq!(number(0.000123456), "0.000123456");
        assert_eq!(number(-3.0), "-3");
    }
}
