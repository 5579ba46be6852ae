//! Expectations (docs/model.md §6.3): a stated growth in big-O, compared with the
//! leading term of a fitted model.
//!
//! The divergence model is δ(p) = G(p)/E(p) for the model's leading term G
//! and the expectation E. The expectation is met (*match*) when δ is O(1),
//! i.e. the model grows no faster than expected; *approximate* when δ grows,
//! but no faster than the deviation limit (default O(log p): a log factor
//! more than expected); *no match* otherwise.

use std::fmt;

use super::pmnf::{Exponent, Shape};

/// The deviation limit when none is given: one log factor.
pub const DEFAULT_DEVIATION: Shape = Shape {
    exponent: Exponent::ZERO,
    log_power: 1,
};

/// Why an expectation could not be read: what was expected, and where
/// (character offset from 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub position: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at character {}", self.message, self.position + 1)
    }
}

impl std::error::Error for ParseError {}

/// Read a big-O expression: `O(1)`, `O(log p)`, `O(p)`, `O(p log p)`,
/// `O(p^2)`, `O(p^(3/2))`, `O(sqrt(p))`, `O(log^2 p)`, `O(log(p)^2)`,
/// `O(p^2 * log2(p))`, `O(1/p)`. The variable is `p` (or `n`); `log` is
/// read as log2, which changes no big-O class.
pub fn parse(text: &str) -> Result<Shape, ParseError> {
    let mut parser = Parser {
        chars: text.chars().collect(),
        at: 0,
    };
    parser.expect_word("O")?;
    parser.expect('(')?;
    let shape = parser.product()?;
    parser.expect(')')?;
    parser.skip_space();
    if parser.at < parser.chars.len() {
        return Err(parser.error(format!(
            "unexpected `{}` after the closing parenthesis",
            parser.chars[parser.at]
        )));
    }
    Ok(shape)
}

pub use crate::domain::Outcome;

/// A model's leading term compared with an expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comparison {
    pub leading: Shape,
    pub expected: Shape,
    /// δ(p) = leading / expected.
    pub divergence: Shape,
    pub outcome: Outcome,
}

pub fn compare(leading: Shape, expected: Shape, deviation: Shape) -> Comparison {
    let divergence = leading.over(expected);
    let outcome = if divergence <= Shape::ONE {
        Outcome::Match
    } else if divergence <= deviation {
        Outcome::Approximate
    } else {
        Outcome::NoMatch
    };
    Comparison {
        leading,
        expected,
        divergence,
        outcome,
    }
}

/// The leading term of a sum: the fastest-growing of its parts' leading terms.
pub fn leading_of_sum(parts: &[Shape]) -> Shape {
    parts.iter().copied().max().unwrap_or(Shape::ONE)
}

/// `O(...)` as written back: "O(p * log2(p))".
pub fn big_o(shape: Shape) -> String {
    format!("O({shape})")
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

impl Parser {
    fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError {
            position: self.at,
            message: message.into(),
        }
    }

    fn skip_space(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.chars.get(self.at).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: char) -> Result<(), ParseError> {
        if self.eat(c) {
            Ok(())
        } else {
            let found = self
                .peek()
                .map_or("the end".to_owned(), |f| format!("`{f}`"));
            Err(self.error(format!("expected `{c}` but found {found}")))
        }
    }

    /// The next run of letters and digits (not consumed).
    fn word(&mut self) -> String {
        self.skip_space();
        self.chars[self.at..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect()
    }

    fn expect_word(&mut self, word: &str) -> Result<(), ParseError> {
        let found = self.word();
        if found.eq_ignore_ascii_case(word) {
            self.at += found.len();
            Ok(())
        } else {
            Err(self.error(format!(
                "expected `{word}(` to begin a big-O expression such as O(p log p)"
            )))
        }
    }

    /// factor (('*' | ' ' | '/') factor)*
    fn product(&mut self) -> Result<Shape, ParseError> {
        let mut shape = self.factor()?;
        loop {
            match self.peek() {
                Some(')') | None => return Ok(shape),
                Some('/') => {
                    self.at += 1;
                    shape = shape.over(self.factor()?);
                }
                Some('*' | '·') => {
                    self.at += 1;
                    shape = shape.times(self.factor()?);
                }
                Some(_) => shape = shape.times(self.factor()?),
            }
        }
    }

    /// 1 | p [^ power] | sqrt(p) | log[2] [^ int] (p | (p)) [^ int] | ( product )
    fn factor(&mut self) -> Result<Shape, ParseError> {
        let start = self.at;
        if self.eat('(') {
            let inner = self.product()?;
            self.expect(')')?;
            return self.power_of(inner);
        }
        let word = self.word();
        match word.to_ascii_lowercase().as_str() {
            "1" => {
                self.at += 1;
                Ok(Shape::ONE)
            }
            "p" | "n" => {
                self.at += 1;
                self.power_of(Shape::new(Exponent::ONE, 0))
            }
            "sqrt" => {
                self.at += word.len();
                self.expect('(')?;
                let inner = self.product()?;
                self.expect(')')?;
                if inner != Shape::new(Exponent::ONE, 0) {
                    return Err(ParseError {
                        position: start,
                        message: "sqrt applies to p only".into(),
                    });
                }
                self.power_of(Shape::new(Exponent::new(1, 2).expect("1/2"), 0))
            }
            "log" | "log2" | "ln" | "lg" => {
                self.at += word.len();
                if self.chars.get(self.at) == Some(&'_') {
                    self.at += 1;
                    let base = self.word();
                    if base.is_empty() || !base.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(self.error("expected the log's base, as in log_2"));
                    }
                    self.at += base.len();
                }
                let before = self.log_power()?;
                let argument_at = self.at;
                let argument = if self.eat('(') {
                    let inner = self.product()?;
                    self.expect(')')?;
                    inner
                } else {
                    self.factor_variable()?
                };
                if argument != Shape::new(Exponent::ONE, 0) {
                    return Err(ParseError {
                        position: argument_at,
                        message: "log applies to p only".into(),
                    });
                }
                let after = self.log_power()?;
                if before != 1 && after != 1 {
                    return Err(self.error("give the log's power once, as log^2 p or log(p)^2"));
                }
                Ok(Shape::new(Exponent::ZERO, before * after))
            }
            "" => {
                let found = self
                    .peek()
                    .map_or("the end".to_owned(), |f| format!("`{f}`"));
                Err(self.error(format!("expected 1, p, log p or sqrt(p) but found {found}")))
            }
            other => Err(self.error(format!(
                "unknown term `{other}`: use 1, p, log p, sqrt(p), powers (p^2, p^(3/2)) and products"
            ))),
        }
    }

    fn factor_variable(&mut self) -> Result<Shape, ParseError> {
        let word = self.word();
        if word.eq_ignore_ascii_case("p") || word.eq_ignore_ascii_case("n") {
            self.at += 1;
            Ok(Shape::new(Exponent::ONE, 0))
        } else {
            Err(self.error("expected p after log"))
        }
    }

    /// An optional `^k` after log, a small non-negative integer; 1 if absent.
    fn log_power(&mut self) -> Result<i32, ParseError> {
        if !self.eat('^') {
            return Ok(1);
        }
        let digits = self.word();
        match digits.parse::<i32>() {
            Ok(k) if (1..=9).contains(&k) => {
                self.at += digits.len();
                Ok(k)
            }
            _ => Err(self.error("a log's power must be an integer from 1 to 9")),
        }
    }

    /// An optional `^e` after a base: `p^2`, `p^-1`, `p^(3/2)`, `p^1.5`.
    fn power_of(&mut self, base: Shape) -> Result<Shape, ParseError> {
        if !self.eat('^') {
            return Ok(base);
        }
        self.skip_space();
        let start = self.at;
        let text: String = if self.eat('(') {
            let inner: String = self.chars[self.at..]
                .iter()
                .take_while(|c| **c != ')')
                .collect();
            self.at += inner.chars().count();
            self.expect(')')?;
            inner
        } else {
            let text: String = self.chars[self.at..]
                .iter()
                .enumerate()
                .take_while(|(k, c)| c.is_ascii_digit() || **c == '.' || (*k == 0 && **c == '-'))
                .map(|(_, c)| *c)
                .collect();
            self.at += text.chars().count();
            text
        };
        let exponent = Exponent::parse(&text).map_err(|reason| ParseError {
            position: start,
            message: format!("bad power: {reason}"),
        })?;
        let power = base.exponent.times(exponent);
        if base.log_power != 0 {
            // (p log p)^k: the log's power must stay whole.
            if !exponent.is_integer() || exponent.is_negative() {
                return Err(ParseError {
                    position: start,
                    message: "a power of a log must be a whole number".into(),
                });
            }
        }
        if !power.in_range() {
            return Err(ParseError {
                position: start,
                message: "the power is out of range".into(),
            });
        }
        Ok(Shape::new(power, base.log_power * exponent.whole()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(exponent: &str, log_power: i32) -> Shape {
        Shape::new(Exponent::parse(exponent).unwrap(), log_power)
    }

    #[test]
    fn the_common_classes_parse() {
        let cases = [
            ("O(1)", shape("0", 0)),
            ("O(log p)", shape("0", 1)),
            ("O(log2(p))", shape("0", 1)),
            ("O(log_2 p)", shape("0", 1)),
            ("o( p )", shape("1", 0)),
            ("O(p log p)", shape("1", 1)),
            ("O(p*log(p))", shape("1", 1)),
            ("O(p^2)", shape("2", 0)),
            ("O(p^(3/2))", shape("3/2", 0)),
            ("O(p^1.5)", shape("3/2", 0)),
            ("O(sqrt(p))", shape("1/2", 0)),
            ("O(log^2 p)", shape("0", 2)),
            ("O(log(p)^2)", shape("0", 2)),
            ("O(p^2 * log2(p))", shape("2", 1)),
            ("O(1/p)", shape("-1", 0)),
            ("O(p^-1)", shape("-1", 0)),
            ("O(n log n)", shape("1", 1)),
            ("O((p log p)^2)", shape("2", 2)),
        ];
        for (text, expected) in cases {
            assert_eq!(parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn errors_say_what_and_where() {
        let cases = [
            ("p", 0, "expected `O(`"),
            ("O p", 2, "expected `(`"),
            ("O(p", 3, "expected `)`"),
            ("O(q)", 2, "unknown term `q`"),
            ("O()", 2, "expected 1, p"),
            ("O(log x)", 6, "expected p after log"),
            ("O(p^x)", 4, "bad power"),
            ("O(p) extra", 5, "unexpected `e`"),
            ("O(log^0 p)", 6, "integer from 1 to 9"),
        ];
        for (text, position, message) in cases {
            let error = parse(text).unwrap_err();
            assert!(error.message.contains(message), "{text}: {error}");
            assert_eq!(error.position, position, "{text}: {error}");
        }
    }

    #[test]
    fn each_outcome_on_constructed_cases() {
        let p = shape("1", 0);
        let p_log = shape("1", 1);
        let p2 = shape("2", 0);
        // Same class: δ = 1.
        let same = compare(p, p, DEFAULT_DEVIATION);
        assert_eq!(
            (same.outcome, same.divergence),
            (Outcome::Match, Shape::ONE)
        );
        // Slower than expected is within O(E): still a match, δ = 1/log p.
        let slower = compare(p, p_log, DEFAULT_DEVIATION);
        assert_eq!(slower.outcome, Outcome::Match);
        assert_eq!(slower.divergence, shape("0", -1));
        // A log factor more: approximate.
        let log_more = compare(p_log, p, DEFAULT_DEVIATION);
        assert_eq!(
            (log_more.outcome, log_more.divergence),
            (Outcome::Approximate, shape("0", 1))
        );
        // A power more: no match.
        let power_more = compare(p2, p, DEFAULT_DEVIATION);
        assert_eq!(
            (power_more.outcome, power_more.divergence),
            (Outcome::NoMatch, p)
        );
        // Two log factors exceed the default limit, not a wider one.
        let two_logs = shape("1", 2);
        assert_eq!(
            compare(two_logs, p, DEFAULT_DEVIATION).outcome,
            Outcome::NoMatch
        );
        assert_eq!(
            compare(two_logs, p, shape("0", 2)).outcome,
            Outcome::Approximate
        );
        // A small power within a p^(1/4) limit.
        assert_eq!(
            compare(shape("5/4", 0), p, shape("1/4", 0)).outcome,
            Outcome::Approximate
        );
    }

    #[test]
    fn the_leading_term_of_a_sum_is_its_fastest_part() {
        assert_eq!(
            leading_of_sum(&[shape("0", 1), shape("1", 0), Shape::ONE]),
            shape("1", 0)
        );
        assert_eq!(leading_of_sum(&[]), Shape::ONE);
        assert_eq!(big_o(shape("1", 1)), "O(p * log2(p))");
    }
}
