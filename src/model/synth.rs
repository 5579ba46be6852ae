//! Synthetic application histories from the theory of docs/model.md §4, for the
//! accuracy suite: strong and weak scaling, parallel fractions from poor to
//! near-ideal, idle fractions 0.2–0.6, 1–2 % measurement noise, some
//! applications that stop scaling inside the measured range, and node counts
//! drawn the way users ask for them.

use rand::Rng;
use rand::rngs::StdRng;

use super::ScalingMode;
use super::theory::{Amdahl, Gustafson};

/// An application with known true curves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyntheticApp {
    pub mode: ScalingMode,
    /// Parallel fraction: p (strong) or p* (weak).
    pub parallel: f64,
    /// Fraction of a busy node's power drawn by an idle one.
    pub idle: f64,
    /// Beyond this node count nothing scales any more: extra nodes idle.
    pub saturates_at: Option<f64>,
    /// Time on one node, seconds.
    pub t1_s: f64,
    /// Power of one busy node, watts.
    pub busy_node_w: f64,
    /// Relative standard deviation of measured time and power.
    pub noise: f64,
}

/// True (noise-free) energy, power and time on n nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Truth {
    pub energy_j: f64,
    pub power_w: f64,
    pub time_s: f64,
}

impl SyntheticApp {
    /// Time (in units of T(1)) and power (in busy nodes) by the theory, before
    /// saturation.
    fn unsaturated(&self, n: f64) -> (f64, f64) {
        match self.mode {
            ScalingMode::Weak => {
                let g = Gustafson {
                    p: self.parallel,
                    k: self.idle,
                };
                (g.time(n), g.power(n))
            }
            _ => {
                let a = Amdahl {
                    p: self.parallel,
                    k: self.idle,
                };
                (a.time(n), a.power(n))
            }
        }
    }

    pub fn truth(&self, n: f64) -> Truth {
        let (time, power) = match self.saturates_at {
            Some(ns) if n > ns => {
                // The nodes beyond ns add nothing but idle power. Strong
                // scaling keeps the time reached at ns; weak scaling still has
                // n times the work, done at the speed reached at ns.
                let (t_s, p_s) = self.unsaturated(ns);
                let time = match self.mode {
                    ScalingMode::Weak => t_s * n / ns,
                    _ => t_s,
                };
                (time, p_s + (n - ns) * self.idle)
            }
            _ => self.unsaturated(n),
        };
        let time_s = time * self.t1_s;
        let power_w = power * self.busy_node_w;
        Truth {
            energy_j: time_s * power_w,
            power_w,
            time_s,
        }
    }

    /// One measured run: time and power with independent relative noise,
    /// energy their product (as a meter integrating power would give).
    pub fn measure(&self, n: f64, rng: &mut impl Rng) -> Truth {
        let truth = self.truth(n);
        let time_s = truth.time_s * (1.0 + self.noise * gaussian(rng));
        let power_w = truth.power_w * (1.0 + self.noise * gaussian(rng));
        Truth {
            energy_j: time_s * power_w,
            power_w,
            time_s,
        }
    }

    /// A random application: strong or weak, parallel fraction from poor to
    /// near-ideal, idle fraction 0.2–0.6, noise 1–2 %, and one in four
    /// saturating somewhere inside `max_nodes`.
    pub fn random(rng: &mut StdRng, max_nodes: u32) -> SyntheticApp {
        let mode = if rng.random_bool(0.5) {
            ScalingMode::Strong
        } else {
            ScalingMode::Weak
        };
        let parallel = *[0.5, 0.8, 0.9, 0.95, 0.99, 0.999]
            .get(rng.random_range(0..6))
            .unwrap_or(&0.9);
        let saturates_at = rng
            .random_bool(0.25)
            .then(|| f64::from(max_nodes) * rng.random_range(0.25..0.75));
        SyntheticApp {
            mode,
            parallel,
            idle: rng.random_range(0.2..0.6),
            saturates_at,
            t1_s: rng.random_range(600.0..86_400.0),
            busy_node_w: rng.random_range(150.0..450.0),
            noise: rng.random_range(0.01..0.02),
        }
    }
}

/// Node counts as users request them: mostly powers of two, some any count,
/// up to `max_nodes` (which is always among them).
pub fn node_counts(rng: &mut StdRng, max_nodes: u32, runs: usize) -> Vec<u32> {
    let powers: Vec<u32> = (0..32)
        .map(|k| 1u32 << k)
        .take_while(|&p| p <= max_nodes)
        .collect();
    let mut counts: Vec<u32> = (1..runs)
        .map(|_| {
            if rng.random_bool(0.6) {
                powers[rng.random_range(0..powers.len())]
            } else {
                rng.random_range(1..=max_nodes)
            }
        })
        .collect();
    counts.push(max_nodes);
    counts
}

/// A standard normal deviate (Box–Muller).
pub(crate) fn gaussian(rng: &mut impl Rng) -> f64 {
    let u1: f64 = rng.random_range(f64::EPSILON..1.0);
    let u2: f64 = rng.random_range(0.0..1.0);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn app(mode: ScalingMode, saturates_at: Option<f64>) -> SyntheticApp {
        SyntheticApp {
            mode,
            parallel: 0.9,
            idle: 0.4,
            saturates_at,
            t1_s: 1000.0,
            busy_node_w: 300.0,
            noise: 0.0,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
    }

    #[test]
    fn curves_follow_the_closed_forms() {
        let strong = app(ScalingMode::Strong, None);
        let amdahl = Amdahl { p: 0.9, k: 0.4 };
        let weak = app(ScalingMode::Weak, None);
        let gustafson = Gustafson { p: 0.9, k: 0.4 };
        for n in [1.0, 2.0, 6.0, 64.0, 500.0] {
            let t = strong.truth(n);
            assert!(close(t.time_s, 1000.0 * amdahl.time(n)));
            assert!(close(t.power_w, 300.0 * amdahl.power(n)));
            assert!(close(t.energy_j, 300_000.0 * amdahl.energy(n)));
            let t = weak.truth(n);
            assert!(close(t.time_s, 1000.0 * gustafson.time(n)));
            assert!(close(t.power_w, 300.0 * gustafson.power(n)));
            assert!(close(t.energy_j, 300_000.0 * gustafson.energy(n)));
        }
    }

    #[test]
    fn saturation_stops_the_scaling_and_keeps_the_curves_continuous() {
        for mode in [ScalingMode::Strong, ScalingMode::Weak] {
            let saturating = app(mode, Some(32.0));
            let plain = app(mode, None);
            assert_eq!(saturating.truth(20.0), plain.truth(20.0));
            let (at, after) = (saturating.truth(32.0), saturating.truth(32.0 + 1e-9));
            assert!((at.energy_j - after.energy_j).abs() / at.energy_j < 1e-9);
            // Beyond: each extra node adds exactly idle power.
            let (a, b) = (saturating.truth(40.0), saturating.truth(41.0));
            assert!(close(b.power_w - a.power_w, 0.4 * 300.0));
        }
        // Strong scaling: time stops falling.
        let s = app(ScalingMode::Strong, Some(32.0));
        assert!(close(s.truth(64.0).time_s, s.truth(32.0).time_s));
    }

    #[test]
    fn measurements_scatter_by_the_noise_around_the_truth() {
        let mut noisy = app(ScalingMode::Strong, None);
        noisy.noise = 0.015;
        let mut rng = StdRng::seed_from_u64(7);
        let truth = noisy.truth(8.0);
        let samples: Vec<f64> = (0..4000)
            .map(|_| noisy.measure(8.0, &mut rng).time_s / truth.time_s - 1.0)
            .collect();
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        let sd =
            (samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / samples.len() as f64).sqrt();
        assert!(mean.abs() < 0.002, "{mean}");
        assert!((sd - 0.015).abs() < 0.002, "{sd}");
    }

    #[test]
    fn node_counts_include_the_maximum_and_favour_powers_of_two() {
        let mut rng = StdRng::seed_from_u64(3);
        let counts = node_counts(&mut rng, 128, 2000);
        assert!(counts.contains(&128));
        assert!(counts.iter().all(|&n| (1..=128).contains(&n)));
        let powers = counts.iter().filter(|n| n.is_power_of_two()).count();
        assert!(powers > counts.len() / 2);
    }
}
