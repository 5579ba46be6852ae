//! APC bounds from node power classification (docs/model.md §3).
//!
//! Nodes of one model draw different power for the same work. With each
//! node's power P_u under a reference workload, and the best and worst nodes'
//! P_min and P_max, a job's average power can be moved to any allocation:
//!
//! ```text
//! APC_min(J) = APC(J) − Σ_{u∈U} (P_u − P_min)    all nodes swapped for the best
//! APC_max(J) = APC(J) + Σ_{u∈U} (P_max − P_u)    all nodes swapped for the worst
//! ```
//!
//! Predictions work on history normalised to the best node: a model fitted to
//! APC_min of past runs gives the best allocation of n nodes; adding
//! n·(P_max − P_min) gives the worst, and Σ_{v∈V} (P_v − P_min) a known node
//! set V. A node whose power is unknown (no samples, or a run without a node
//! list) counts at the mean power: the expected node.

/// The power scale of a set of classified nodes, in W.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    pub p_min: f64,
    pub p_max: f64,
    pub mean: f64,
}

/// A job's best- and worst-allocation APC, W.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub best: f64,
    pub worst: f64,
}

/// A sum of nodes' power above the best node's, kept exactly, in units of
/// 2⁻⁴⁰ W (about 1e-12 W): the same whatever the order or grouping in which
/// nodes are added. A run's nodes may thus be summed one by one as read, or
/// by blocks of consecutive nodes from prefix sums, and give the same bits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Excess(i128);

/// Units of `Excess` in a watt.
const UNITS_PER_W: f64 = (1u64 << 40) as f64;

impl Excess {
    /// The excess of one node: its power, known from its samples or not
    /// (`None`: counted at the mean), above the best node's.
    pub fn of(power: Option<f64>, scale: &Scale) -> Excess {
        // A node draws at most 100 kW (a NaN counts as nothing): held within
        // 1e9 W, no sum of up to 10¹⁷ nodes leaves i128's range.
        let watts = (power.unwrap_or(scale.mean) - scale.p_min).clamp(-1e9, 1e9);
        Excess((watts * UNITS_PER_W).round() as i128)
    }

    /// The excess of a node set.
    pub fn of_nodes(node_powers: &[Option<f64>], scale: &Scale) -> Excess {
        node_powers.iter().map(|p| Excess::of(*p, scale)).sum()
    }

    pub fn watts(self) -> f64 {
        // As high · 2⁶⁴ + low: inline, where `as f64` on an i128 is a library
        // call on every run of a pass. Any fixed rounding serves, as every
        // path converts here.
        let magnitude = self.0.unsigned_abs();
        let units = (magnitude >> 64) as u64 as f64 * 18_446_744_073_709_551_616.0
            + magnitude as u64 as f64;
        let units = if self.0 < 0 { -units } else { units };
        units / UNITS_PER_W
    }
}

impl std::ops::Add for Excess {
    type Output = Excess;
    fn add(self, other: Excess) -> Excess {
        Excess(self.0 + other.0)
    }
}

impl std::ops::Sub for Excess {
    type Output = Excess;
    fn sub(self, other: Excess) -> Excess {
        Excess(self.0 - other.0)
    }
}

impl std::iter::Sum for Excess {
    fn sum<I: Iterator<Item = Excess>>(iter: I) -> Excess {
        iter.fold(Excess::default(), |a, b| a + b)
    }
}

/// Design.md §3's APC_min and APC_max of a job that drew `apc` W on nodes
/// with the given powers (`None`: unknown, counted at the mean).
pub fn job_bounds(apc: f64, node_powers: &[Option<f64>], scale: &Scale) -> Bounds {
    let excess = Excess::of_nodes(node_powers, scale).watts();
    let spread = node_powers.len() as f64 * (scale.p_max - scale.p_min);
    Bounds {
        best: apc - excess,
        worst: apc + (spread - excess),
    }
}

/// A run's APC as if every node were the best one. A run without a node list
/// (`node_powers` empty while `nodes` > 0) is taken to have run on `nodes`
/// expected nodes.
pub fn normalise(apc: f64, nodes: u32, node_powers: &[Option<f64>], scale: &Scale) -> f64 {
    let excess = (!node_powers.is_empty()).then(|| Excess::of_nodes(node_powers, scale));
    normalise_excess(apc, nodes, excess, scale)
}

/// `normalise` given the excess of the run's nodes (`None`: no node list).
pub fn normalise_excess(apc: f64, nodes: u32, excess: Option<Excess>, scale: &Scale) -> f64 {
    match excess {
        Some(excess) => apc - excess.watts(),
        None => apc - f64::from(nodes) * (scale.mean - scale.p_min),
    }
}

/// From the best-allocation APC of n nodes: the APC on the worst n nodes.
pub fn worst_of(best: f64, nodes: u32, scale: &Scale) -> f64 {
    best + f64::from(nodes) * (scale.p_max - scale.p_min)
}

/// From the best-allocation APC of n nodes: the APC on the node set whose
/// powers are given (`None`: unknown, counted at the mean).
pub fn on_nodes(best: f64, node_powers: &[Option<f64>], scale: &Scale) -> f64 {
    best + Excess::of_nodes(node_powers, scale).watts()
}

/// The power to reserve for a job on nodes with the given powers: as
/// `on_nodes`, but a node without samples counts at the worst node's
/// power, not the mean. The least known nodes (new, replaced, never
/// measured) are not the ones reserved the least.
pub fn reserve_on_nodes(best: f64, node_powers: &[Option<f64>], scale: &Scale) -> f64 {
    let unknown = node_powers.iter().filter(|p| p.is_none()).count() as f64;
    on_nodes(best, node_powers, scale) + unknown * (scale.p_max - scale.mean).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCALE: Scale = Scale {
        p_min: 180.0,
        p_max: 240.0,
        mean: 200.0,
    };

    #[test]
    fn job_bounds_by_hand() {
        // A job of 1000 W on nodes of 190, 200 and 230 W:
        // best  = 1000 − (10 + 20 + 50) = 920
        // worst = 1000 + (50 + 40 + 10) = 1100
        let b = job_bounds(1000.0, &[Some(190.0), Some(200.0), Some(230.0)], &SCALE);
        assert_eq!(
            b,
            Bounds {
                best: 920.0,
                worst: 1100.0
            }
        );
        // An unknown node counts at the mean (200 W): best 1000 − 20, worst 1000 + 40.
        let b = job_bounds(1000.0, &[None], &SCALE);
        assert_eq!((b.best, b.worst), (980.0, 1040.0));
    }

    #[test]
    fn normalising_then_adding_back_the_same_nodes_gives_the_job() {
        let nodes = [Some(190.0), Some(235.0), None, Some(181.0)];
        let best = normalise(2000.0, 4, &nodes, &SCALE);
        assert!((on_nodes(best, &nodes, &SCALE) - 2000.0).abs() < 1e-9);
        // Without a node list: n expected nodes, 4 × (200 − 180) = 80 W above the best.
        assert_eq!(normalise(2000.0, 4, &[], &SCALE), 1920.0);
    }

    /// A node set's excess is exact: any order or grouping gives the same
    /// bits, within a rounding of the f64 sum.
    #[test]
    fn an_excess_is_the_same_in_any_order() {
        let powers: Vec<Option<f64>> = (0..1000)
            .map(|k| (k % 9 != 0).then(|| 180.0 + k as f64 / 3.0 + 0.1 * (k % 7) as f64))
            .collect();
        let forward = Excess::of_nodes(&powers, &SCALE);
        let mut reversed = powers.clone();
        reversed.reverse();
        assert_eq!(Excess::of_nodes(&reversed, &SCALE), forward);
        // By prefix sums over blocks of 7.
        let mut below = vec![Excess::default()];
        for p in &powers {
            below.push(*below.last().unwrap() + Excess::of(*p, &SCALE));
        }
        let blocks: Excess = (0..powers.len())
            .step_by(7)
            .map(|i| below[(i + 7).min(powers.len())] - below[i])
            .sum();
        assert_eq!(blocks, forward);
        let float: f64 = powers
            .iter()
            .map(|p| p.unwrap_or(SCALE.mean) - SCALE.p_min)
            .sum();
        assert!(
            (forward.watts() - float).abs() < 1e-9 * float,
            "{forward:?} {float}"
        );
        // A NaN power counts as nothing rather than poisoning the sum.
        assert_eq!(Excess::of(Some(f64::NAN), &SCALE), Excess::default());
    }

    #[test]
    fn the_worst_allocation_adds_the_full_spread_per_node() {
        // 8 nodes, spread 60 W: worst = best + 480.
        assert_eq!(worst_of(1500.0, 8, &SCALE), 1980.0);
        // On the worst nodes, on_nodes agrees with worst_of.
        let worst_nodes = [Some(240.0); 8];
        assert_eq!(
            on_nodes(1500.0, &worst_nodes, &SCALE),
            worst_of(1500.0, 8, &SCALE)
        );
        // And the best node set adds nothing.
        assert_eq!(on_nodes(1500.0, &[Some(180.0); 8], &SCALE), 1500.0);
    }
}
