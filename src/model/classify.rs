//! Node power classification (docs/model.md §3).
//!
//! Each node's average draw P_u under a reference workload is summarised
//! (P_min, P_max, spread), grouped into k power classes and screened for
//! outliers.
//!
//! Classes are the optimal 1-D k-means partition (Jenks natural breaks,
//! ckmeans): the split of the sorted powers into k contiguous groups with the
//! least within-class sum of squares. Fixed thresholds (say ±5 % of the
//! median) would put every node of a tight cluster in "typical" and cut a
//! wide one arbitrarily; the optimal partition follows the gaps the
//! manufacturing spread actually left.
//!
//! Outliers are judged by the modified z-score of Iglewicz & Hoaglin,
//! 0.6745·(x − median)/MAD, flagged above [`OUTLIER_Z`]: median and MAD are
//! not dragged along by the very outliers they are meant to expose, as the
//! mean and standard deviation are. The classes are drawn through the
//! inliers; each outlier then joins the class at its end (a node far above
//! the rest is `hungry`), so that one odd node cannot take a class of its
//! own and merge two real groups.

use std::cmp::Ordering;

/// The classes asked for when the caller does not say: efficient, typical,
/// hungry.
pub const DEFAULT_CLASSES: usize = 3;
/// |modified z| above which a node is an outlier (Iglewicz & Hoaglin's
/// recommendation).
pub const OUTLIER_Z: f64 = 3.5;

/// Turns MAD into a consistent estimate of σ for normal data: z = this ·
/// (x − median) / MAD.
const MAD_Z: f64 = 0.6745;
/// σ ≈ this × mean absolute deviation for normal data (√(π/2)); the scale
/// used when the MAD is 0.
const MEAN_AD_SIGMA: f64 = 1.253314;

/// One node's average power under the reference workload (P_u).
#[derive(Debug, Clone, PartialEq)]
pub struct NodePower {
    pub node: String,
    pub power_w: f64,
}

/// A power class: a contiguous range of node powers.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    pub name: String,
    /// The least power of a member.
    pub lower_w: f64,
    /// The greatest power of a member.
    pub upper_w: f64,
    /// The members' mean power.
    pub centre_w: f64,
    pub nodes: usize,
}

/// Where one node stands.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClass {
    pub node: String,
    pub power_w: f64,
    /// Index into [`Classification::classes`].
    pub class: usize,
    /// Modified z-score (see [`classify`]).
    pub robust_z: f64,
    /// |robust_z| > [`OUTLIER_Z`].
    pub outlier: bool,
}

/// One histogram bin, [lower_w, upper_w) except the last, which is closed.
#[derive(Debug, Clone, PartialEq)]
pub struct Bin {
    pub lower_w: f64,
    pub upper_w: f64,
    pub nodes: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Classification {
    /// P_min: the best node's power.
    pub p_min_w: f64,
    /// P_max: the worst node's power.
    pub p_max_w: f64,
    pub mean_w: f64,
    pub median_w: f64,
    /// Sample standard deviation (n − 1); 0 for one node.
    pub std_dev_w: f64,
    /// Median absolute deviation from the median, unscaled.
    pub mad_w: f64,
    /// (P_max − P_min) / P_min × 100.
    pub spread_pct: f64,
    /// Ordered from least to most power.
    pub classes: Vec<Class>,
    /// Ordered by power ascending, ties by node name.
    pub nodes: Vec<NodeClass>,
    pub histogram: Vec<Bin>,
}

/// Classify nodes by power into `k` classes, with a `bins`-bin histogram.
///
/// `None` when `nodes` is empty. Powers must be finite and positive and node
/// names unique (the caller checks).
///
/// - `k` is clamped to 1..=(number of distinct powers), so one node, or all
///   nodes equal, give a single class. Equal powers always share a class.
///   Names: `typical` (k = 1), `efficient`/`hungry` (k = 2),
///   `efficient`/`typical`/`hungry` (k = 3), else `class_1` … `class_k`.
/// - Robust z is 0.6745·(x − median)/MAD. When more than half the nodes draw
///   the same power the MAD is 0; the scale then falls back to
///   1.253314 × the mean absolute deviation from the median, z = (x −
///   median)/(1.253314·MeanAD) (both estimate σ for normal data). When that
///   is 0 too, every node equals the median and every z is 0.
/// - The histogram has `bins` (at least 1) equal-width bins from P_min to
///   P_max; a single bin holding every node when P_min = P_max.
///
/// Cost: O(n log n) to sort, then O(k·d·log d) time and O(k·d) memory for the
/// classes, d being the number of distinct powers; O(n + bins) for the rest.
/// The caller bounds `k` and `bins`.
pub fn classify(nodes: &[NodePower], k: usize, bins: usize) -> Option<Classification> {
    if nodes.is_empty() {
        return None;
    }
    let mut sorted: Vec<&NodePower> = nodes.iter().collect();
    sorted.sort_by(|a, b| {
        a.power_w
            .total_cmp(&b.power_w)
            .then_with(|| a.node.cmp(&b.node))
    });
    let powers: Vec<f64> = sorted.iter().map(|n| n.power_w).collect();
    let n = powers.len();
    let p_min_w = powers[0];
    let p_max_w = powers[n - 1];
    let mean_w = powers.iter().sum::<f64>() / n as f64;
    let median_w = median_of_sorted(&powers);
    let std_dev_w = if n > 1 {
        (powers.iter().map(|p| (p - mean_w).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    let mut deviations: Vec<f64> = powers.iter().map(|p| (p - median_w).abs()).collect();
    deviations.sort_by(f64::total_cmp);
    let mad_w = median_of_sorted(&deviations);
    let mean_ad = deviations.iter().sum::<f64>() / n as f64;
    let z_of = robust_z(median_w, mad_w, mean_ad);

    // Classes are drawn through the inliers only: an outlier would otherwise
    // take a class of its own and merge two real groups. Outliers sit at the
    // ends of the sorted powers (their distance from the median is what makes
    // them outliers) and join the class at their end.
    let zs: Vec<f64> = powers.iter().map(|p| z_of(*p)).collect();
    let lo = zs.iter().position(|z| z.abs() <= OUTLIER_Z).unwrap_or(0);
    let hi = zs
        .iter()
        .rposition(|z| z.abs() <= OUTLIER_Z)
        .map_or(n, |i| i + 1);
    let inliers = &powers[lo..hi];
    let (distinct, counts) = distinct_with_counts(inliers);
    let breaks = optimal_breaks(&distinct, &counts, k);
    let class_count = breaks.len() + 1;
    let names = class_names(class_count);

    // Class of each distinct inlier power, then of each node in sorted order.
    let mut class_of_distinct = Vec::with_capacity(distinct.len());
    let mut class = 0;
    for i in 0..distinct.len() {
        if class < breaks.len() && i >= breaks[class] {
            class += 1;
        }
        class_of_distinct.push(class);
    }
    let mut node_classes = Vec::with_capacity(n);
    let mut d = 0;
    for (i, node) in sorted.iter().enumerate() {
        if i > lo && i < hi && powers[i] != powers[i - 1] {
            d += 1;
        }
        let class = if i < lo {
            0
        } else if i >= hi {
            class_count - 1
        } else {
            class_of_distinct[d]
        };
        node_classes.push(NodeClass {
            node: node.node.clone(),
            power_w: node.power_w,
            class,
            robust_z: zs[i],
            outlier: zs[i].abs() > OUTLIER_Z,
        });
    }

    let classes = names
        .into_iter()
        .enumerate()
        .map(|(c, name)| {
            let members: Vec<f64> = node_classes
                .iter()
                .filter(|nc| nc.class == c)
                .map(|nc| nc.power_w)
                .collect();
            Class {
                name,
                lower_w: members[0],
                upper_w: members[members.len() - 1],
                centre_w: members.iter().sum::<f64>() / members.len() as f64,
                nodes: members.len(),
            }
        })
        .collect();

    Some(Classification {
        p_min_w,
        p_max_w,
        mean_w,
        median_w,
        std_dev_w,
        mad_w,
        spread_pct: (p_max_w - p_min_w) / p_min_w * 100.0,
        classes,
        nodes: node_classes,
        histogram: histogram(&powers, bins),
    })
}

/// The median of a non-empty sorted slice.
fn median_of_sorted(values: &[f64]) -> f64 {
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The modified z-score as a function of power, with the fallbacks for a
/// zero MAD described on [`classify`].
fn robust_z(median: f64, mad: f64, mean_ad: f64) -> impl Fn(f64) -> f64 {
    let sigma = if mad > 0.0 {
        mad / MAD_Z
    } else {
        MEAN_AD_SIGMA * mean_ad
    };
    move |x| {
        if sigma > 0.0 {
            (x - median) / sigma
        } else {
            0.0
        }
    }
}

/// The distinct values of a sorted slice and how often each occurs.
fn distinct_with_counts(sorted: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut values: Vec<f64> = Vec::new();
    let mut counts: Vec<f64> = Vec::new();
    for (i, &x) in sorted.iter().enumerate() {
        if i > 0 && x == sorted[i - 1] {
            counts[values.len() - 1] += 1.0;
        } else {
            values.push(x);
            counts.push(1.0);
        }
    }
    (values, counts)
}

fn class_names(k: usize) -> Vec<String> {
    let fixed: &[&str] = match k {
        1 => &["typical"],
        2 => &["efficient", "hungry"],
        3 => &["efficient", "typical", "hungry"],
        _ => &[],
    };
    if fixed.is_empty() {
        (1..=k).map(|i| format!("class_{i}")).collect()
    } else {
        fixed.iter().map(|s| s.to_string()).collect()
    }
}

/// Weighted sums over prefixes of the distinct values, for the within-class
/// sum of squares of any run of them in O(1).
struct Prefix {
    weight: Vec<f64>,
    sum: Vec<f64>,
    sum_sq: Vec<f64>,
}

impl Prefix {
    /// Values are shifted by `shift` (a central value) so that Σx² − (Σx)²/w
    /// does not cancel away the digits that matter: a 200 W cluster's squares
    /// are 4·10⁴ W², its within-class spread a few W².
    fn new(values: &[f64], counts: &[f64], shift: f64) -> Prefix {
        let mut p = Prefix {
            weight: vec![0.0; values.len() + 1],
            sum: vec![0.0; values.len() + 1],
            sum_sq: vec![0.0; values.len() + 1],
        };
        for (i, (&x, &c)) in values.iter().zip(counts).enumerate() {
            let x = x - shift;
            p.weight[i + 1] = p.weight[i] + c;
            p.sum[i + 1] = p.sum[i] + c * x;
            p.sum_sq[i + 1] = p.sum_sq[i] + c * x * x;
        }
        p
    }

    /// Within-class sum of squares of distinct values j..i (i > j).
    fn cost(&self, j: usize, i: usize) -> f64 {
        let w = self.weight[i] - self.weight[j];
        let s = self.sum[i] - self.sum[j];
        let ss = self.sum_sq[i] - self.sum_sq[j];
        (ss - s * s / w).max(0.0)
    }
}

/// The optimal k-means partition of sorted distinct `values` (with
/// multiplicities `counts`) into min(max(k, 1), d) classes, as the indices
/// where classes 2, 3, … start.
///
/// D[m][i], the least cost of splitting the first i values into m classes, is
/// min over j of D[m−1][j] + cost(j, i). The interval cost obeys the
/// quadrangle inequality, so the best j never decreases as i grows, and each
/// row is filled by divide and conquer in O(d log d) instead of O(d²)
/// (as in Ckmeans.1d.dp, Wang & Song 2011).
fn optimal_breaks(values: &[f64], counts: &[f64], k: usize) -> Vec<usize> {
    let d = values.len();
    let k = k.clamp(1, d);
    if k == d {
        return (1..d).collect();
    }
    let prefix = Prefix::new(values, counts, values[d / 2]);
    let mut prev: Vec<f64> = (0..=d)
        .map(|i| if i == 0 { 0.0 } else { prefix.cost(0, i) })
        .collect();
    // best_start[m - 2][i]: where the last of m classes over the first i
    // values starts.
    let mut best_start: Vec<Vec<u32>> = Vec::with_capacity(k - 1);
    for m in 2..=k {
        let mut row = Row {
            prefix: &prefix,
            prev: &prev,
            cost: vec![f64::INFINITY; d + 1],
            start: vec![0; d + 1],
            min_start: m - 1,
        };
        // The last row is only needed at i = d.
        let lo = if m == k { d } else { m };
        row.fill(lo, d, m - 1, d - 1);
        let Row { cost, start, .. } = row;
        prev = cost;
        best_start.push(start);
    }
    let mut breaks = Vec::with_capacity(k - 1);
    let mut i = d;
    for starts in best_start.iter().rev() {
        i = starts[i] as usize;
        breaks.push(i);
    }
    breaks.reverse();
    breaks
}

/// One row of the k-means recurrence, filled by divide and conquer.
struct Row<'a> {
    prefix: &'a Prefix,
    prev: &'a [f64],
    cost: Vec<f64>,
    start: Vec<u32>,
    /// With m classes the last starts at m − 1 or later: each earlier class
    /// holds at least one value.
    min_start: usize,
}

impl Row<'_> {
    /// Fill i in lo..=hi, knowing their best starts lie in from..=to.
    fn fill(&mut self, lo: usize, hi: usize, from: usize, to: usize) {
        if lo > hi {
            return;
        }
        let mid = lo + (hi - lo) / 2;
        let mut best = (f64::INFINITY, from.max(self.min_start));
        for j in from.max(self.min_start)..=to.min(mid - 1) {
            let c = self.prev[j] + self.prefix.cost(j, mid);
            if c.partial_cmp(&best.0) == Some(Ordering::Less) {
                best = (c, j);
            }
        }
        self.cost[mid] = best.0;
        self.start[mid] = best.1 as u32;
        if mid > lo {
            self.fill(lo, mid - 1, from, best.1);
        }
        self.fill(mid + 1, hi, best.1, to);
    }
}

/// `bins` (at least 1) equal-width bins from the least to the greatest of
/// sorted, non-empty `powers`.
fn histogram(powers: &[f64], bins: usize) -> Vec<Bin> {
    let (min, max) = (powers[0], powers[powers.len() - 1]);
    if min == max {
        return vec![Bin {
            lower_w: min,
            upper_w: max,
            nodes: powers.len(),
        }];
    }
    let bins = bins.max(1);
    let width = (max - min) / bins as f64;
    let edge = |i: usize| {
        if i == bins {
            max
        } else {
            min + width * i as f64
        }
    };
    let mut histogram: Vec<Bin> = (0..bins)
        .map(|i| Bin {
            lower_w: edge(i),
            upper_w: edge(i + 1),
            nodes: 0,
        })
        .collect();
    for &x in powers {
        // The division can land one bin off the edges as computed above;
        // the edges decide, so that each node sits inside its bin's bounds.
        let mut i = (((x - min) / width) as usize).min(bins - 1);
        while i > 0 && x < histogram[i].lower_w {
            i -= 1;
        }
        while i + 1 < bins && x >= histogram[i + 1].lower_w {
            i += 1;
        }
        histogram[i].nodes += 1;
    }
    histogram
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny deterministic generator (Knuth's MMIX LCG), uniform in [0, 1).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn nodes(powers: &[f64]) -> Vec<NodePower> {
        powers
            .iter()
            .enumerate()
            .map(|(i, &power_w)| NodePower {
                node: format!("n{i:03}"),
                power_w,
            })
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    /// Within-class sum of squares of the classification, from its output.
    fn within_ss(c: &Classification) -> f64 {
        c.nodes
            .iter()
            .map(|n| (n.power_w - c.classes[n.class].centre_w).powi(2))
            .sum()
    }

    fn sse(values: &[f64]) -> f64 {
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        values.iter().map(|v| (v - mean).powi(2)).sum()
    }

    /// The least within-class sum of squares over every way to cut sorted
    /// `values` into k non-empty runs.
    fn brute_force(values: &[f64], k: usize) -> f64 {
        fn go(values: &[f64], k: usize) -> f64 {
            if k == 1 {
                return sse(values);
            }
            (1..=values.len() + 1 - k)
                .map(|cut| sse(&values[..cut]) + go(&values[cut..], k - 1))
                .fold(f64::INFINITY, f64::min)
        }
        go(values, k)
    }

    fn assert_finite(c: &Classification) {
        let stats = [
            c.p_min_w,
            c.p_max_w,
            c.mean_w,
            c.median_w,
            c.std_dev_w,
            c.mad_w,
            c.spread_pct,
        ];
        assert!(stats.iter().all(|v| v.is_finite()), "{stats:?}");
        for class in &c.classes {
            assert!(class.lower_w.is_finite() && class.upper_w.is_finite());
            assert!(class.centre_w.is_finite());
        }
        assert!(c.nodes.iter().all(|n| n.robust_z.is_finite()));
        assert!(
            c.histogram
                .iter()
                .all(|b| b.lower_w.is_finite() && b.upper_w.is_finite())
        );
    }

    #[test]
    fn empty_input_has_no_classification() {
        assert_eq!(classify(&[], DEFAULT_CLASSES, 10), None);
    }

    #[test]
    fn finds_three_known_groups() {
        let mut rng = Lcg(7);
        let mut input = Vec::new();
        for (group, centre) in [("a", 180.0), ("b", 200.0), ("c", 230.0)] {
            for i in 0..10 {
                input.push(NodePower {
                    node: format!("{group}{i}"),
                    power_w: centre + 4.0 * (rng.next() - 0.5),
                });
            }
        }
        let c = classify(&input, DEFAULT_CLASSES, 10).unwrap();
        let names: Vec<&str> = c.classes.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["efficient", "typical", "hungry"]);
        assert!(c.classes.iter().all(|k| k.nodes == 10));
        for n in &c.nodes {
            let expected = match &n.node[..1] {
                "a" => 0,
                "b" => 1,
                _ => 2,
            };
            assert_eq!(n.class, expected, "{n:?}");
            assert!(!n.outlier);
        }
        for (class, centre) in c.classes.iter().zip([180.0, 200.0, 230.0]) {
            assert!((class.centre_w - centre).abs() < 2.0);
            assert!(class.lower_w <= class.centre_w && class.centre_w <= class.upper_w);
            assert!((class.lower_w - centre).abs() <= 2.0);
            assert!((class.upper_w - centre).abs() <= 2.0);
        }
        assert!(c.nodes.windows(2).all(|w| w[0].power_w <= w[1].power_w));
    }

    #[test]
    fn two_classes_are_efficient_and_hungry_and_more_are_numbered() {
        let powers = [180.0, 181.0, 182.0, 220.0, 221.0, 250.0, 251.0, 290.0];
        let c = classify(&nodes(&powers), 2, 4).unwrap();
        let names: Vec<&str> = c.classes.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["efficient", "hungry"]);
        let c = classify(&nodes(&powers), 4, 4).unwrap();
        let names: Vec<&str> = c.classes.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["class_1", "class_2", "class_3", "class_4"]);
        let sizes: Vec<usize> = c.classes.iter().map(|k| k.nodes).collect();
        assert_eq!(sizes, [3, 2, 2, 1]);
    }

    #[test]
    fn flags_a_hungry_outlier_only() {
        let mut rng = Lcg(11);
        let mut powers: Vec<f64> = (0..20).map(|_| 200.0 + 6.0 * (rng.next() - 0.5)).collect();
        powers.push(300.0);
        let c = classify(&nodes(&powers), DEFAULT_CLASSES, 10).unwrap();
        for n in &c.nodes {
            assert_eq!(n.outlier, n.power_w == 300.0, "{n:?}");
        }
        let worst = c.nodes.last().unwrap();
        assert!(worst.robust_z > OUTLIER_Z);
        assert_eq!(worst.class, c.classes.len() - 1);
    }

    #[test]
    fn an_outlier_joins_the_class_at_its_end_rather_than_taking_one() {
        // Three groups and one node far above: plain 3-means would give the
        // outlier a class of its own and merge the two lower groups.
        let mut powers = Vec::new();
        for base in [180.0, 200.0, 230.0] {
            powers.extend((0..10).map(|i| base + f64::from(i % 3)));
        }
        powers.push(322.0);
        let c = classify(&nodes(&powers), 3, 10).unwrap();
        let sizes: Vec<usize> = c.classes.iter().map(|k| k.nodes).collect();
        assert_eq!(sizes, [10, 10, 11]);
        assert_eq!(c.classes[2].upper_w, 322.0);
        let outlier = c.nodes.last().unwrap();
        assert!(outlier.outlier && outlier.class == 2);
    }

    #[test]
    fn classes_are_optimal_against_brute_force() {
        let mut rng = Lcg(2024);
        for trial in 0..400 {
            let n = 2 + (rng.next() * 9.0) as usize;
            // Every other trial rounds to whole watts, so ties occur.
            let mut powers: Vec<f64> = (0..n)
                .map(|_| {
                    let p = 150.0 + 100.0 * rng.next();
                    if trial % 2 == 0 { p.round() } else { p }
                })
                .collect();
            powers.sort_by(f64::total_cmp);
            let mut distinct = powers.clone();
            distinct.dedup();
            for k in [2, 3] {
                let c = classify(&nodes(&powers), k, 5).unwrap();
                if c.nodes.iter().any(|n| n.outlier) {
                    // Classes are drawn through the inliers only (tested
                    // below); the brute force knows nothing of outliers.
                    continue;
                }
                assert_eq!(c.classes.len(), k.min(distinct.len()));
                let best = brute_force(&powers, c.classes.len());
                let got = within_ss(&c);
                assert!(
                    close(got, best),
                    "trial {trial}, k {k}: {got} vs {best} for {powers:?}"
                );
            }
        }
    }

    #[test]
    fn classes_are_contiguous_and_keep_ties_together() {
        let mut rng = Lcg(5);
        let powers: Vec<f64> = (0..500)
            .map(|_| (190.0 + 40.0 * rng.next()).round())
            .collect();
        for k in [1, 2, 3, 5, 8] {
            let c = classify(&nodes(&powers), k, 7).unwrap();
            assert_eq!(c.classes.len(), k);
            assert_eq!(c.classes.iter().map(|k| k.nodes).sum::<usize>(), 500);
            assert!(c.classes.windows(2).all(|w| w[0].upper_w < w[1].lower_w));
            assert!(c.nodes.windows(2).all(|w| w[0].class <= w[1].class));
            assert_finite(&c);
        }
    }

    #[test]
    fn k_is_clamped_to_distinct_powers() {
        let powers = [200.0, 210.0, 200.0, 210.0, 210.0];
        let c = classify(&nodes(&powers), 5, 3).unwrap();
        assert_eq!(c.classes.len(), 2);
        assert_eq!(c.classes[0].name, "efficient");
        assert_eq!((c.classes[0].lower_w, c.classes[0].upper_w), (200.0, 200.0));
        assert_eq!(c.classes[0].nodes, 2);
        assert_eq!(c.classes[1].name, "hungry");
        assert_eq!(c.classes[1].nodes, 3);
        let c = classify(&nodes(&powers), 0, 3).unwrap();
        assert_eq!(c.classes.len(), 1);
        assert_eq!(c.classes[0].name, "typical");
    }

    #[test]
    fn one_node_is_typical_and_unremarkable() {
        let c = classify(&nodes(&[215.0]), DEFAULT_CLASSES, 10).unwrap();
        assert_eq!(c.classes.len(), 1);
        assert_eq!(c.classes[0].name, "typical");
        assert_eq!(c.classes[0].centre_w, 215.0);
        assert_eq!((c.p_min_w, c.p_max_w, c.median_w), (215.0, 215.0, 215.0));
        assert_eq!((c.std_dev_w, c.mad_w, c.spread_pct), (0.0, 0.0, 0.0));
        assert_eq!(c.nodes[0].robust_z, 0.0);
        assert!(!c.nodes[0].outlier);
        assert_eq!(
            c.histogram,
            [Bin {
                lower_w: 215.0,
                upper_w: 215.0,
                nodes: 1
            }]
        );
    }

    #[test]
    fn identical_powers_give_zero_scores() {
        let c = classify(&nodes(&[200.0; 12]), DEFAULT_CLASSES, 10).unwrap();
        assert_finite(&c);
        assert_eq!(c.classes.len(), 1);
        assert_eq!(c.mad_w, 0.0);
        assert!(c.nodes.iter().all(|n| n.robust_z == 0.0 && !n.outlier));
        assert_eq!(c.histogram.len(), 1);
        assert_eq!(c.histogram[0].nodes, 12);
    }

    #[test]
    fn zero_mad_falls_back_to_mean_absolute_deviation() {
        // Median 200, MAD 0; mean absolute deviation 10/5 = 2, so the scale
        // is 1.253314 · 2 and the 210 W node scores 10/2.506628 = 3.98942.
        let c = classify(&nodes(&[200.0, 200.0, 200.0, 200.0, 210.0]), 2, 2).unwrap();
        assert_finite(&c);
        assert_eq!(c.mad_w, 0.0);
        let hungry = c.nodes.last().unwrap();
        assert!((hungry.robust_z - 3.98942).abs() < 1e-4, "{hungry:?}");
        assert!(hungry.outlier);
        assert!(c.nodes[..4].iter().all(|n| n.robust_z == 0.0 && !n.outlier));
    }

    #[test]
    fn summary_statistics_by_hand() {
        // Mean 1050/5 = 210; squared deviations 400+100+25+25+900 = 1450,
        // so s = √(1450/4); |x − 205| = 15, 5, 0, 10, 35 → MAD 10.
        let c = classify(&nodes(&[240.0, 190.0, 215.0, 200.0, 205.0]), 3, 5).unwrap();
        assert_eq!((c.p_min_w, c.p_max_w), (190.0, 240.0));
        assert!(close(c.mean_w, 210.0));
        assert_eq!(c.median_w, 205.0);
        assert!(close(c.std_dev_w, 362.5f64.sqrt()));
        assert_eq!(c.mad_w, 10.0);
        assert!(close(c.spread_pct, 50.0 / 190.0 * 100.0));
        let top = c.nodes.last().unwrap();
        assert_eq!(top.node, "n000");
        assert!(close(top.robust_z, 0.6745 * 35.0 / 10.0));
        assert!(!top.outlier);
        assert!(close(c.nodes[0].robust_z, -0.6745 * 15.0 / 10.0));
        // Bins of 10 W from 190 W: 190 | 200, 205 | 215 | – | 240.
        let counts: Vec<usize> = c.histogram.iter().map(|b| b.nodes).collect();
        assert_eq!(counts, [1, 2, 1, 0, 1]);
        assert_eq!(c.histogram[0].lower_w, 190.0);
        assert_eq!(c.histogram[4].upper_w, 240.0);
    }

    #[test]
    fn histogram_counts_every_node_once() {
        let mut rng = Lcg(99);
        let powers: Vec<f64> = (0..1000).map(|_| 170.0 + 80.0 * rng.next()).collect();
        let max = powers.iter().copied().fold(f64::MIN, f64::max);
        for bins in [0, 1, 3, 7, 10, 64, 2000] {
            let c = classify(&nodes(&powers), DEFAULT_CLASSES, bins).unwrap();
            assert_eq!(c.histogram.len(), bins.max(1));
            assert_eq!(c.histogram.iter().map(|b| b.nodes).sum::<usize>(), 1000);
            let last = c.histogram.last().unwrap();
            assert_eq!(last.upper_w, max);
            assert!(last.nodes >= 1);
            assert!(c.histogram.windows(2).all(|w| w[0].upper_w == w[1].lower_w));
            assert_finite(&c);
        }
        // Two nodes: the maximum lands in the last bin, not past it.
        let c = classify(&nodes(&[190.0, 230.0]), 2, 4).unwrap();
        let counts: Vec<usize> = c.histogram.iter().map(|b| b.nodes).collect();
        assert_eq!(counts, [1, 0, 0, 1]);
    }

    #[test]
    fn ties_in_power_are_ordered_by_name() {
        let input = [
            NodePower {
                node: "b".into(),
                power_w: 200.0,
            },
            NodePower {
                node: "a".into(),
                power_w: 200.0,
            },
            NodePower {
                node: "c".into(),
                power_w: 190.0,
            },
        ];
        let c = classify(&input, DEFAULT_CLASSES, 2).unwrap();
        let order: Vec<&str> = c.nodes.iter().map(|n| n.node.as_str()).collect();
        assert_eq!(order, ["c", "a", "b"]);
        assert_eq!(c.nodes[1].class, c.nodes[2].class);
    }

    #[test]
    fn ten_thousand_nodes_sit_nearest_their_own_centre() {
        // 10,000 nodes: a check that the divide and conquer is not quadratic
        // in practice, and that no single node can move to a neighbouring
        // class and lower the cost (a necessary condition of optimality).
        let mut rng = Lcg(3);
        let powers: Vec<f64> = (0..10_000).map(|_| 180.0 + 60.0 * rng.next()).collect();
        let c = classify(&nodes(&powers), 6, 50).unwrap();
        assert_finite(&c);
        for n in &c.nodes {
            let own = (n.power_w - c.classes[n.class].centre_w).abs();
            for other in &c.classes {
                assert!(own <= (n.power_w - other.centre_w).abs() + 1e-9);
            }
        }
    }
}
