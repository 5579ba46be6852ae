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

/// The power of one of a job's nodes: known from its samples, or not.
fn excess_over_best(power: Option<f64>, scale: &Scale) -> f64 {
    power.unwrap_or(scale.mean) - scale.p_min
}

/// Design.md §3's APC_min and APC_max of a job that drew `apc` W on nodes
/// with the given powers (`None`: unknown, counted at the mean).
pub fn job_bounds(apc: f64, node_powers: &[Option<f64>], scale: &Scale) -> Bounds {
    let best = apc
        - node_powers
            .iter()
            .map(|p| excess_over_best(*p, scale))
            .sum::<f64>();
    let worst = apc
        + node_powers
            .iter()
            .map(|p| scale.p_max - p.unwrap_or(scale.mean))
            .sum::<f64>();
    Bounds { best, worst }
}

/// A run's APC as if every node were the best one. A run without a node list
/// (`node_powers` empty while `nodes` > 0) is taken to have run on `nodes`
/// expected nodes.
pub fn normalise(apc: f64, nodes: u32, node_powers: &[Option<f64>], scale: &Scale) -> f64 {
    if node_powers.is_empty() {
        apc - f64::from(nodes) * (scale.mean - scale.p_min)
    } else {
        job_bounds(apc, node_powers, scale).best
    }
}

/// From the best-allocation APC of n nodes: the APC on the worst n nodes.
pub fn worst_of(best: f64, nodes: u32, scale: &Scale) -> f64 {
    best + f64::from(nodes) * (scale.p_max - scale.p_min)
}

/// From the best-allocation APC of n nodes: the APC on the node set whose
/// powers are given (`None`: unknown, counted at the mean).
pub fn on_nodes(best: f64, node_powers: &[Option<f64>], scale: &Scale) -> f64 {
    best + node_powers
        .iter()
        .map(|p| excess_over_best(*p, scale))
        .sum::<f64>()
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
