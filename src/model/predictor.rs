//! The predictor function: continuous piecewise polynomials over the measured
//! node counts, and the rule for going beyond them.

/// Which segmentation of docs/model.md §2 a predictor uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Case {
    /// linear
    I,
    /// non-linear
    II,
    /// linear, non-linear
    III,
    /// non-linear, linear
    IV,
    /// linear, non-linear, linear
    V,
}

impl Case {
    pub fn as_str(self) -> &'static str {
        match self {
            Case::I => "I",
            Case::II => "II",
            Case::III => "III",
            Case::IV => "IV",
            Case::V => "V",
        }
    }
}

pub use crate::domain::SegmentKind;

/// y(n) = Σₖ coeffs[k]·(n − lo)ᵏ for n in [lo, hi].
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub lo: f64,
    pub hi: f64,
    pub kind: SegmentKind,
    pub degree: usize,
    pub coeffs: [f64; 4],
}

impl Segment {
    pub fn value(&self, n: f64) -> f64 {
        let u = n - self.lo;
        self.coeffs.iter().rev().fold(0.0, |acc, c| acc * u + c)
    }

    pub fn slope(&self, n: f64) -> f64 {
        let u = n - self.lo;
        self.coeffs[1] + 2.0 * self.coeffs[2] * u + 3.0 * self.coeffs[3] * u * u
    }

    /// The slope to continue with beyond one end: the line's own slope, or
    /// for a non-linear segment the secant over its last third at that end,
    /// which is far steadier than a fitted polynomial's derivative there.
    pub fn end_slope(&self, at_high_end: bool) -> f64 {
        if self.degree <= 1 {
            return self.slope(self.lo);
        }
        let third = (self.hi - self.lo) / 3.0;
        if at_high_end {
            (self.value(self.hi) - self.value(self.hi - third)) / third
        } else {
            (self.value(self.lo + third) - self.value(self.lo)) / third
        }
    }

    /// The smallest value on [lo, hi]: at an end or where the slope is zero.
    pub fn minimum(&self) -> f64 {
        let mut candidates = vec![self.lo, self.hi];
        // slope(u) = c1 + 2 c2 u + 3 c3 u², with u = n − lo
        let (a, b, c) = (3.0 * self.coeffs[3], 2.0 * self.coeffs[2], self.coeffs[1]);
        if a.abs() > f64::EPSILON * (b.abs() + c.abs()).max(1.0) {
            let discriminant = b * b - 4.0 * a * c;
            if discriminant >= 0.0 {
                let root = discriminant.sqrt();
                candidates.push(self.lo + (-b + root) / (2.0 * a));
                candidates.push(self.lo + (-b - root) / (2.0 * a));
            }
        } else if b != 0.0 {
            candidates.push(self.lo - c / b);
        }
        candidates
            .into_iter()
            .filter(|n| *n >= self.lo && *n <= self.hi)
            .map(|n| self.value(n))
            .fold(f64::INFINITY, f64::min)
    }
}

/// How a predictor was obtained.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// One of the five segmentations, fitted to the history.
    Segmented { case: Case, segments: Vec<Segment> },
    /// A single measured node count: the value there, scaled as the ideal
    /// behaviour of the metric predicts, value(n) = y0·(n/n0)^exponent.
    Scaled { n0: f64, y0: f64, exponent: f64 },
}

/// A predictor function y(n) > 0.
///
/// Inside the measured range it is the fitted piecewise polynomial. Beyond
/// it, it continues with the value and slope at the nearest end (for a
/// non-linear end segment, the secant over its last third): linearly
/// (never a free cubic), except where the line would head towards zero, where
/// a power law n^α with the same value and slope takes over (α within [−1, 2],
/// the steepest the theory allows), so predictions stay positive at any node
/// count.
#[derive(Debug, Clone, PartialEq)]
pub struct Predictor {
    pub shape: Shape,
}

impl Predictor {
    pub fn value(&self, n: f64) -> f64 {
        match &self.shape {
            Shape::Scaled { n0, y0, exponent } => y0 * (n / n0).powf(*exponent),
            Shape::Segmented { segments, .. } => {
                let first = &segments[0];
                let last = &segments[segments.len() - 1];
                if n < first.lo {
                    Continuation::below(first).value(n)
                } else if n > last.hi {
                    Continuation::above(last).value(n)
                } else {
                    segments.iter().find(|s| n <= s.hi).unwrap_or(last).value(n)
                }
            }
        }
    }

    /// Whether this is one straight line (case I).
    pub fn is_line(&self) -> bool {
        matches!(&self.shape, Shape::Segmented { case: Case::I, segments } if segments.len() == 1)
    }

    /// How a segmented predictor continues below and above the measured
    /// range; `None` for a scaled one, whose law holds everywhere.
    pub fn continuations(&self) -> Option<[Continuation; 2]> {
        match &self.shape {
            Shape::Scaled { .. } => None,
            Shape::Segmented { segments, .. } => Some([
                Continuation::below(&segments[0]),
                Continuation::above(&segments[segments.len() - 1]),
            ]),
        }
    }
}

/// The steepest power laws the theory allows (docs/model.md §4): time falls at
/// most like 1/n, energy grows at most like n².
pub const EXPONENT_RANGE: (f64, f64) = (-1.0, 2.0);

/// The predictor beyond one end of the measured range: from the value at
/// `from_nodes` with `slope`, a line while it moves away from zero, otherwise
/// the power law y·(n/from_nodes)^exponent with the same value and slope (its
/// exponent kept within what the theory allows).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Continuation {
    pub from_nodes: f64,
    pub value: f64,
    pub slope: f64,
    /// `Some` where the continuation is a power law.
    pub exponent: Option<f64>,
}

impl Continuation {
    fn below(first: &Segment) -> Continuation {
        Continuation::new(
            first.lo,
            first.value(first.lo),
            first.end_slope(false),
            -1.0,
        )
    }

    fn above(last: &Segment) -> Continuation {
        Continuation::new(last.hi, last.value(last.hi), last.end_slope(true), 1.0)
    }

    /// Continue from (x0, y0) with `slope` in `direction` (−1 down, +1 up).
    fn new(x0: f64, y0: f64, slope: f64, direction: f64) -> Continuation {
        let towards_zero = direction * slope < 0.0;
        Continuation {
            from_nodes: x0,
            value: y0,
            slope,
            exponent: towards_zero
                .then(|| (slope * x0 / y0).clamp(EXPONENT_RANGE.0, EXPONENT_RANGE.1)),
        }
    }

    pub fn value(&self, n: f64) -> f64 {
        match self.exponent {
            Some(alpha) => self.value * (n / self.from_nodes).powf(alpha),
            None => self.value + self.slope * (n - self.from_nodes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(lo: f64, hi: f64, coeffs: [f64; 4]) -> Segment {
        Segment {
            lo,
            hi,
            kind: SegmentKind::NonLinear,
            degree: 3,
            coeffs,
        }
    }

    #[test]
    fn segments_evaluate_in_local_powers() {
        let s = segment(2.0, 6.0, [1.0, 2.0, 3.0, 4.0]);
        // u = 1: 1 + 2 + 3 + 4
        assert_eq!(s.value(3.0), 10.0);
        assert_eq!(s.slope(3.0), 2.0 + 6.0 + 12.0);
    }

    #[test]
    fn the_minimum_of_a_segment_is_found_between_its_ends() {
        // (n − 3)² + 1 on [1, 6]: minimum 1 at n = 3.
        let s = segment(1.0, 6.0, [5.0, -4.0, 1.0, 0.0]);
        assert!((s.minimum() - 1.0).abs() < 1e-12);
        // A cubic dipping below zero inside: u³ − 3u + 1 on u ∈ [0, 2] has min −1 at u = 1.
        let s = segment(0.0, 2.0, [1.0, -3.0, 0.0, 1.0]);
        assert!((s.minimum() + 1.0).abs() < 1e-12);
    }

    #[test]
    fn extrapolation_is_linear_outward_and_a_power_law_towards_zero() {
        let rising = Predictor {
            shape: Shape::Segmented {
                case: Case::I,
                segments: vec![Segment {
                    lo: 10.0,
                    hi: 20.0,
                    kind: SegmentKind::Linear,
                    degree: 1,
                    coeffs: [100.0, 5.0, 0.0, 0.0],
                }],
            },
        };
        assert_eq!(rising.value(40.0), 100.0 + 5.0 * 30.0);
        let [low, high] = rising.continuations().unwrap();
        assert_eq!(
            (high.from_nodes, high.slope, high.exponent),
            (20.0, 5.0, None)
        );
        // 100 at 10 with slope 5: n^0.5 has the same value and slope there.
        assert_eq!((low.from_nodes, low.exponent), (10.0, Some(0.5)));
        // Below the range the line would head to zero at n = −10: power law instead.
        let below = rising.value(1.0);
        assert!(below > 0.0 && below < 100.0);
        // Same value and slope at the end of the range.
        let h = 1e-6;
        let slope = (rising.value(10.0) - rising.value(10.0 - h)) / h;
        assert!((slope - 5.0).abs() < 1e-3, "{slope}");

        let falling = Predictor {
            shape: Shape::Segmented {
                case: Case::I,
                segments: vec![Segment {
                    lo: 1.0,
                    hi: 8.0,
                    kind: SegmentKind::Linear,
                    degree: 1,
                    coeffs: [100.0, -10.0, 0.0, 0.0],
                }],
            },
        };
        for n in [16.0, 100.0, 1e6] {
            let v = falling.value(n);
            assert!(v > 0.0 && v.is_finite(), "{n}: {v}");
        }
    }
}
