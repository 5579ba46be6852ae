//! Capacity questions (docs/model.md §5) as searches over integer node counts.
//!
//! The predictions come in as closures (a fitted model, its max band, a
//! physics law...), so these searches know nothing about how they were made.
//! Predicted curves need not be monotone (a segmented fit, a saturating
//! application, a node count where communication suddenly costs more), so
//! every search here evaluates each node count of its range once instead of
//! bisecting: exact answers, for O(m) evaluations. The caller bounds the
//! range (a cluster's size) to bound the cost.
//!
//! A node count where a closure returns a non-finite value cannot be
//! judged, so it never qualifies.

use std::ops::RangeInclusive;

/// What [`optimal`] minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Objective {
    /// Least Energy-to-Solution.
    Energy,
    /// Least Time-to-Solution.
    Time,
}

/// A node count with its predicted energy and time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    pub nodes: u32,
    pub ets_j: f64,
    pub tts_s: f64,
}

/// The largest node count in `range` whose APC is at most `limit_w`, with
/// that APC. `None` when no node count qualifies.
///
/// The scan runs from the top of the range down and stops at the first
/// qualifying count: APC need not grow with n, so a count above a failing
/// one may still fit, and only a scan can say which is the largest.
pub fn max_nodes(
    range: RangeInclusive<u32>,
    limit_w: f64,
    apc: impl Fn(u32) -> f64,
) -> Option<(u32, f64)> {
    range
        .rev()
        .map(|n| (n, apc(n)))
        .find(|&(_, w)| w.is_finite() && w <= limit_w)
}

/// The node count of `choices` (in ascending node count, as `choices` gives
/// them) that minimises the objective under the given
/// constraints: for `Energy` the least EtS, for `Time` the least TtS, among
/// the counts with TtS ≤ `deadline_s` and EtS ≤ `energy_budget_j` (each
/// when given; both may be). Ties go to the smaller node count, which
/// leaves the other nodes free. `None` when nothing qualifies.
pub fn optimal(
    choices: impl IntoIterator<Item = Choice>,
    objective: Objective,
    deadline_s: Option<f64>,
    energy_budget_j: Option<f64>,
) -> Option<Choice> {
    let key = |c: &Choice| match objective {
        Objective::Energy => c.ets_j,
        Objective::Time => c.tts_s,
    };
    choices
        .into_iter()
        .filter(|c| deadline_s.is_none_or(|d| c.tts_s <= d))
        .filter(|c| energy_budget_j.is_none_or(|b| c.ets_j <= b))
        // Ascending n (as `choices` gives them) and a strict comparison keep
        // the first (smallest) of equal optima.
        .fold(None, |best: Option<Choice>, c| match best {
            Some(b) if key(&b) <= key(&c) => Some(b),
            _ => Some(c),
        })
}

/// The time/energy Pareto front of `choices`: the node counts that no other
/// count beats on one of TtS and EtS without losing on the other, in
/// ascending node count. Of counts with identical time and energy, only the
/// smallest is kept, as `optimal` breaks ties.
///
/// Sorting by time (then energy) and sweeping the least energy seen at
/// strictly shorter times finds the front in O(m log m).
pub fn pareto(choices: impl IntoIterator<Item = Choice>) -> Vec<Choice> {
    let mut all: Vec<Choice> = choices.into_iter().collect();
    all.sort_by(|a, b| {
        a.tts_s
            .total_cmp(&b.tts_s)
            .then(a.ets_j.total_cmp(&b.ets_j))
    });
    let mut front: Vec<Choice> = Vec::new();
    // Least energy among the counts strictly faster than the current group.
    let mut least_faster = f64::INFINITY;
    for group in all.chunk_by(|a, b| a.tts_s == b.tts_s) {
        // Sorted by energy within the group: its first is its least.
        let least = group[0].ets_j;
        if least < least_faster {
            // Of several counts with the same time and energy, the fewest
            // nodes: more would only tie up the machine.
            let fewest = group
                .iter()
                .filter(|c| c.ets_j == least)
                .min_by_key(|c| c.nodes);
            front.extend(fewest.copied());
            least_faster = least;
        }
    }
    front.sort_by_key(|c| c.nodes);
    front
}

/// Every node count of `range`, in ascending order, whose predicted EtS and
/// TtS (`ets_and_tts`, read once per count) are both finite.
pub fn choices(
    range: RangeInclusive<u32>,
    ets_and_tts: impl Fn(u32) -> (f64, f64),
) -> impl Iterator<Item = Choice> {
    range
        .map(move |nodes| {
            let (ets_j, tts_s) = ets_and_tts(nodes);
            Choice {
                nodes,
                ets_j,
                tts_s,
            }
        })
        .filter(|c| c.ets_j.is_finite() && c.tts_s.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::theory::Amdahl;

    #[test]
    fn linear_apc_gives_the_floor_of_the_headroom_over_the_slope() {
        // (a, b, W): APC = a + b·n, expected floor((W − a)/b), computed by hand.
        let cases = [
            (150.0, 200.0, 10_150.0, Some(50)),
            (150.0, 200.0, 10_149.5, Some(49)),
            (150.0, 200.0, 10_349.0, Some(50)),
            (0.0, 350.0, 1_000.0, Some(2)),
            (80.0, 212.5, 5_000.0, Some(23)),
            // Below APC at the range's bottom: nothing fits.
            (150.0, 200.0, 349.0, None),
            // Above APC at the range's top: the top.
            (150.0, 200.0, 1e9, Some(128)),
        ];
        for (a, b, w, expected) in cases {
            let found = max_nodes(1..=128, w, |n| a + b * f64::from(n));
            assert_eq!(found.map(|f| f.0), expected, "a={a} b={b} W={w}");
            if let Some((n, apc)) = found {
                assert_eq!(apc, a + b * f64::from(n));
            }
        }
        // The bottom of the range itself qualifies exactly.
        assert_eq!(
            max_nodes(4..=64, 950.0, |n| 150.0 + 200.0 * f64::from(n)),
            Some((4, 950.0))
        );
        assert_eq!(
            max_nodes(4..=64, 949.0, |n| 150.0 + 200.0 * f64::from(n)),
            None
        );
    }

    #[test]
    fn non_monotone_apc_gives_the_largest_qualifying_count() {
        // Over the limit from 10 to 19, under it again at 20..=24, over after:
        // a bisection from the bottom would stop at 9.
        let apc = |n: u32| match n {
            10..=19 => 1_000.0,
            20..=24 => 400.0,
            25.. => 2_000.0,
            _ => 100.0,
        };
        assert_eq!(max_nodes(1..=40, 500.0, apc), Some((24, 400.0)));
        assert_eq!(max_nodes(1..=22, 500.0, apc), Some((22, 400.0)));
        assert_eq!(max_nodes(10..=19, 500.0, apc), None);
        // Unjudgeable counts never qualify; an empty range has no answer.
        assert_eq!(
            max_nodes(1..=10, 500.0, |n| if n > 3 { f64::NAN } else { 1.0 }),
            Some((3, 1.0))
        );
        #[allow(clippy::reversed_empty_ranges)]
        let empty = 5..=4;
        assert_eq!(max_nodes(empty, 500.0, |_| 1.0), None);
        assert_eq!(max_nodes(1..=10, f64::NAN, |_| 1.0), None);
    }

    /// Time with communication overhead, T = 2 + 100/n + n (least at n = 10),
    /// and energy growing linearly with n.
    fn overhead_time(n: u32) -> f64 {
        let n = f64::from(n);
        2.0 + 100.0 / n + n
    }

    fn linear_energy(n: u32) -> f64 {
        1_000.0 + 50.0 * f64::from(n)
    }

    /// The choices of `range` from separate EtS and TtS functions.
    fn over(
        range: RangeInclusive<u32>,
        ets: impl Fn(u32) -> f64,
        tts: impl Fn(u32) -> f64,
    ) -> Vec<Choice> {
        choices(range, |n| (ets(n), tts(n))).collect()
    }

    fn nodes(choices: &[Choice]) -> Vec<u32> {
        choices.iter().map(|c| c.nodes).collect()
    }

    #[test]
    fn pareto_front_ends_where_time_stops_falling() {
        // Amdahl time keeps falling: every n trades energy for time.
        let law = Amdahl { p: 0.9, k: 0.0 };
        let front = pareto(over(1..=32, linear_energy, |n| {
            600.0 * law.time(f64::from(n))
        }));
        assert_eq!(nodes(&front), (1..=32).collect::<Vec<_>>());
        // With overhead, time is least at 10 nodes; more nodes cost both.
        let front = pareto(over(1..=64, linear_energy, overhead_time));
        assert_eq!(nodes(&front), (1..=10).collect::<Vec<_>>());
        assert_eq!(front[9].tts_s, 22.0);
        assert_eq!(front[9].ets_j, 1_500.0);
    }

    #[test]
    fn pareto_drops_a_dominated_point_in_the_middle() {
        // (energy, time) by node count; 3 is beaten by 4 on both, 5 ties 4
        // on time with more energy, 6 ties 2 on energy but is slower.
        let table = |n: u32| match n {
            1 => (100.0, 50.0),
            2 => (120.0, 30.0),
            3 => (150.0, 28.0),
            4 => (140.0, 20.0),
            5 => (145.0, 20.0),
            6 => (120.0, 35.0),
            7 => (200.0, 10.0),
            _ => (f64::NAN, 1.0),
        };
        let front = pareto(over(1..=8, |n| table(n).0, |n| table(n).1));
        assert_eq!(nodes(&front), vec![1, 2, 4, 7]);
        // Identical predictions: the fewest nodes stand for them.
        let front = pareto(over(1..=3, |_| 5.0, |_| 7.0));
        assert_eq!(nodes(&front), vec![1]);
        assert!(pareto(over(1..=3, |_| f64::NAN, |_| 1.0)).is_empty());
    }

    #[test]
    fn optimal_without_constraints_is_the_plain_minimum() {
        // Energy: least at 1 node (linear growth); time: least at 10.
        let best = optimal(
            over(1..=64, linear_energy, overhead_time),
            Objective::Energy,
            None,
            None,
        );
        assert_eq!(best.map(|c| c.nodes), Some(1));
        let best = optimal(
            over(1..=64, linear_energy, overhead_time),
            Objective::Time,
            None,
            None,
        );
        assert_eq!(
            best,
            Some(Choice {
                nodes: 10,
                ets_j: 1_500.0,
                tts_s: 22.0
            })
        );
    }

    #[test]
    fn constraints_exclude_the_unconstrained_optimum() {
        // A deadline of 30 s rules out n ≤ 4 (T(4) = 31, T(5) = 27): the
        // least energy that meets it is at 5 nodes.
        let best = optimal(
            over(1..=64, linear_energy, overhead_time),
            Objective::Energy,
            Some(30.0),
            None,
        );
        assert_eq!(best.map(|c| c.nodes), Some(5));
        // A budget of 1 400 J allows n ≤ 8: the fastest of those is 8
        // (T(8) = 22.5 against the unconstrained optimum's 22 at 10).
        let best = optimal(
            over(1..=64, linear_energy, overhead_time),
            Objective::Time,
            None,
            Some(1_400.0),
        );
        assert_eq!(best.map(|c| c.nodes), Some(8));
        // Both at once: TtS ≤ 30 and EtS ≤ 1 400 leave 5..=8; least energy
        // is 5, least time 8.
        let both = |objective| {
            optimal(
                over(1..=64, linear_energy, overhead_time),
                objective,
                Some(30.0),
                Some(1_400.0),
            )
            .map(|c| c.nodes)
        };
        assert_eq!(both(Objective::Energy), Some(5));
        assert_eq!(both(Objective::Time), Some(8));
        // Nothing meets a 20 s deadline (22 s at best), nor a budget below
        // the 1 050 J of one node, nor both when each alone is met elsewhere.
        for (deadline, budget) in [
            (Some(20.0), None),
            (None, Some(1_000.0)),
            (Some(24.0), Some(1_300.0)),
        ] {
            for objective in [Objective::Energy, Objective::Time] {
                let best = optimal(
                    over(1..=64, linear_energy, overhead_time),
                    objective,
                    deadline,
                    budget,
                );
                assert_eq!(best, None, "{objective:?} {deadline:?} {budget:?}");
            }
        }
    }

    #[test]
    fn ties_go_to_the_smaller_node_count() {
        // Flat energy between 4 and 12, and time flat from 8 on.
        let ets = |n: u32| {
            if (4..=12).contains(&n) {
                900.0
            } else {
                1_000.0
            }
        };
        let tts = |n: u32| if n >= 8 { 10.0 } else { 100.0 / f64::from(n) };
        let best = optimal(over(1..=16, ets, tts), Objective::Energy, None, None);
        assert_eq!(best.map(|c| c.nodes), Some(4));
        let best = optimal(over(1..=16, ets, tts), Objective::Time, None, None);
        assert_eq!(best.map(|c| c.nodes), Some(8));
        // Unjudgeable counts are skipped, not chosen.
        let best = optimal(
            over(1..=16, |n| if n == 4 { f64::NAN } else { ets(n) }, tts),
            Objective::Energy,
            None,
            None,
        );
        assert_eq!(best.map(|c| c.nodes), Some(5));
        // On the Pareto front, 8..=12 tie on time and energy and beat every
        // other count (fastest, and least energy): only 8 is kept.
        let front = pareto(over(1..=16, ets, tts));
        assert_eq!(front.iter().map(|c| c.nodes).collect::<Vec<_>>(), [8]);
    }
}
