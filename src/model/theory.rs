//! Scaling theory (docs/model.md §4): closed forms of time, power and energy on n
//! nodes, and the bounds they put on any application's curves.
//!
//! Units: time in multiples of T(1), power in multiples of one busy node.

use super::{Metric, ScalingMode};

/// Strong scaling (Amdahl) with parallel fraction `p` and idle fraction `k`.
#[derive(Debug, Clone, Copy)]
pub struct Amdahl {
    pub p: f64,
    pub k: f64,
}

impl Amdahl {
    /// T(n) = (1 − p) + p / n
    pub fn time(&self, n: f64) -> f64 {
        (1.0 - self.p) + self.p / n
    }

    /// P(n) = [1 + (n − 1)·k·(1 − p)] / [(1 − p) + p / n]
    pub fn power(&self, n: f64) -> f64 {
        (1.0 + (n - 1.0) * self.k * (1.0 - self.p)) / self.time(n)
    }

    /// E(n) = 1 + (n − 1)·k·(1 − p)
    pub fn energy(&self, n: f64) -> f64 {
        1.0 + (n - 1.0) * self.k * (1.0 - self.p)
    }
}

/// Weak scaling (Gustafson) with scaled parallel fraction `p` (p*) and idle
/// fraction `k`. The problem grows with n: n units of work run at speed-up
/// S(n) = 1 + (n − 1)·p*.
#[derive(Debug, Clone, Copy)]
pub struct Gustafson {
    pub p: f64,
    pub k: f64,
}

impl Gustafson {
    pub fn speedup(&self, n: f64) -> f64 {
        1.0 + (n - 1.0) * self.p
    }

    /// T(n) = n / S(n): constant when ideal, linear when nothing scales.
    pub fn time(&self, n: f64) -> f64 {
        n / self.speedup(n)
    }

    /// P(n) = 1 + p*·(n − 1) + (1 − p*)·(n − 1)·k
    pub fn power(&self, n: f64) -> f64 {
        1.0 + self.p * (n - 1.0) + (1.0 - self.p) * (n - 1.0) * self.k
    }

    /// E(n) = P(n)·T(n): linear when ideal, quadratic when nothing scales.
    pub fn energy(&self, n: f64) -> f64 {
        self.power(n) * self.time(n)
    }
}

/// How far a metric may move from a reference point (n0, y0) to n, by the
/// theory of the declared scaling mode: the ratio y(n)/y0 lies in the
/// returned interval. `None` when the mode is unknown.
///
/// For n ≥ n0, with r = n / n0:
/// - strong: EtS in [1, r] (constant when ideal, linear when nothing scales);
///   APC in [1, r] (more nodes never draw less, nor more per node);
///   TtS in [1/r, 1].
/// - weak: EtS in [r, r²]; APC in [1, r]; TtS in [1, r].
///
/// For n < n0 the same holds with the roles of the two points swapped.
pub fn ratio_bounds(mode: ScalingMode, metric: Metric, n0: f64, n: f64) -> Option<(f64, f64)> {
    let (lo_exp, hi_exp) = match (mode, metric) {
        (ScalingMode::Unknown, _) => return None,
        (ScalingMode::Strong, Metric::Ets) => (0, 1),
        (ScalingMode::Strong, Metric::Apc) => (0, 1),
        (ScalingMode::Strong, Metric::Tts) => (-1, 0),
        (ScalingMode::Weak, Metric::Ets) => (1, 2),
        (ScalingMode::Weak, Metric::Apc) => (0, 1),
        (ScalingMode::Weak, Metric::Tts) => (0, 1),
    };
    let r = n / n0;
    // Whole exponents: powi is exact for these, and cheaper than powf.
    let (a, b) = (r.powi(lo_exp), r.powi(hi_exp));
    Some((a.min(b), a.max(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
    }

    #[test]
    fn amdahl_energy_is_power_times_time_and_has_its_limits() {
        for &(p, k) in &[(0.0, 0.3), (0.5, 0.2), (0.95, 0.6), (1.0, 0.4)] {
            let m = Amdahl { p, k };
            for n in [1.0, 2.0, 7.0, 64.0, 1000.0] {
                assert!(close(m.energy(n), m.power(n) * m.time(n)));
            }
            assert!(close(m.time(1.0), 1.0) && close(m.power(1.0), 1.0));
        }
        // Ideal: E constant, P = n. None: E linear in n with slope k.
        let ideal = Amdahl { p: 1.0, k: 0.3 };
        assert!(close(ideal.energy(50.0), 1.0) && close(ideal.power(50.0), 50.0));
        let none = Amdahl { p: 0.0, k: 0.3 };
        assert!(close(none.energy(11.0), 1.0 + 10.0 * 0.3));
        assert!(close(none.time(11.0), 1.0));
    }

    #[test]
    fn gustafson_energy_is_power_times_time_and_has_its_limits() {
        for &(p, k) in &[(0.0, 0.3), (0.5, 0.2), (1.0, 0.6)] {
            let m = Gustafson { p, k };
            for n in [1.0, 3.0, 64.0] {
                assert!(close(m.energy(n), m.power(n) * m.time(n)));
            }
        }
        // Ideal: E linear (n), T constant. None: E quadratic n·(1 + (n − 1)k).
        let ideal = Gustafson { p: 1.0, k: 0.3 };
        assert!(close(ideal.energy(40.0), 40.0) && close(ideal.time(40.0), 1.0));
        let none = Gustafson { p: 0.0, k: 0.5 };
        assert!(close(none.energy(9.0), 9.0 * (1.0 + 8.0 * 0.5)));
    }

    #[test]
    fn the_closed_forms_respect_their_own_bounds() {
        for p in [0.0, 0.3, 0.9, 1.0] {
            for k in [0.2, 0.6] {
                let (a, g) = (Amdahl { p, k }, Gustafson { p, k });
                for (n0, n) in [(2.0, 16.0), (16.0, 2.0), (1.0, 100.0)] {
                    let cases: [(ScalingMode, Metric, f64); 6] = [
                        (ScalingMode::Strong, Metric::Ets, a.energy(n) / a.energy(n0)),
                        (ScalingMode::Strong, Metric::Apc, a.power(n) / a.power(n0)),
                        (ScalingMode::Strong, Metric::Tts, a.time(n) / a.time(n0)),
                        (ScalingMode::Weak, Metric::Ets, g.energy(n) / g.energy(n0)),
                        (ScalingMode::Weak, Metric::Apc, g.power(n) / g.power(n0)),
                        (ScalingMode::Weak, Metric::Tts, g.time(n) / g.time(n0)),
                    ];
                    for (mode, metric, ratio) in cases {
                        let (lo, hi) = ratio_bounds(mode, metric, n0, n).unwrap();
                        assert!(
                            ratio >= lo * (1.0 - 1e-12) && ratio <= hi * (1.0 + 1e-12),
                            "{mode:?} {metric:?} p={p} k={k} {n0}->{n}: {ratio} not in [{lo}, {hi}]"
                        );
                    }
                }
            }
        }
        assert!(ratio_bounds(ScalingMode::Unknown, Metric::Ets, 1.0, 2.0).is_none());
    }
}
