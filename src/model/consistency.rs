//! EtS = APC × TtS across the three predictions of one node count
//! (docs/model.md §2.1).
//!
//! Each metric has its own model, chosen by its own back-test, so the three
//! values need not multiply out. The model's intervals are symmetric in the
//! logs (`value ÷ k` to `value × k`), and the product's interval is the
//! product of the intervals. The values are consistent when APC × TtS lies
//! in EtS's interval or EtS in the interval of the product: in the logs,
//! when |ln E − ln P − ln T| is at most the wider of EtS's half-width and the
//! sum of APC's and TtS's. Then nothing moves, since each model was chosen
//! as the best for its own metric. Otherwise the excess is removed in the
//! logs, where the identity is linear: it is shared out in proportion to each
//! prediction's variance, taken from its interval (half-width in the logs,
//! squared). That is the least-squares (minimum variance) adjustment: the
//! metric predicted least surely moves most, and one predicted exactly does
//! not move. Afterwards the product lies on the edge of EtS's interval, or
//! EtS on the edge of the product's. Each interval moves with its value and
//! keeps its width in the logs.
//!
//! A prediction held at a bound (`Held`: beyond the range no faster than
//! n² from its end, or at what one run could measure) moves back inside
//! it, never past it. Where APC or TtS is held and the intervals do not
//! admit the discrepancy, EtS becomes their product exactly: the held
//! metric is a judgement on a curve that went too far, which the energy's
//! own curve (the same curve times the power) shares, and the other metric
//! keeps its model's value.
//!
//! Only the model's answers are reconciled: where runs were measured at the
//! node count, each metric answers with the runs' own aggregate (every run
//! satisfied E = P·T within 5 % at ingestion).

use super::fit::MAX_SPREAD;
use super::{Aggregate, Flag, Held, Model, Prediction, Source};

/// A half-width (in the logs) below which a prediction counts as exact.
const EXACT: f64 = 1e-12;

/// The predictions of `models` (EtS, APC, TtS, in `Metric::ALL`'s order) at
/// `nodes`, reconciled where they come from the models (whose answers do not
/// depend on `aggregate`).
pub fn predict(models: [&Model; 3], nodes: u32, aggregate: Aggregate) -> [Prediction; 3] {
    let [mut ets, mut apc, mut tts] = models.map(|m| m.predict(nodes, aggregate));
    reconcile(&mut ets, &mut apc, &mut tts);
    within_ceilings(models, nodes, [ets, apc, tts])
}

/// The models' own values at `nodes` (their curves, also where runs were
/// measured), reconciled as `predict` reconciles its answers: what a curve
/// or a scan over node counts reads, so that it agrees with the
/// predictions at every count the models answer.
pub fn curves(models: [&Model; 3], nodes: u32) -> [Prediction; 3] {
    let [mut ets, mut apc, mut tts] = models.map(|m| m.predict_model(nodes));
    reconcile(&mut ets, &mut apc, &mut tts);
    within_ceilings(models, nodes, [ets, apc, tts])
}

/// No model's answer past what one run could measure (`Model::ceiling`),
/// after reconciling as before it: a free prediction near its ceiling can
/// be moved past it by another's excess. Held there, it is flagged
/// `bounded`, and EtS = APC × TtS then holds as nearly as the ceiling lets it.
fn within_ceilings(models: [&Model; 3], nodes: u32, mut out: [Prediction; 3]) -> [Prediction; 3] {
    for (model, p) in models.iter().zip(&mut out) {
        if p.source != Source::Model {
            continue;
        }
        let ceiling = model.ceiling(f64::from(nodes));
        if p.value > ceiling {
            p.value = ceiling;
            p.flags.insert(Flag::Bounded);
            p.held = Held::AtMost;
        }
        p.high = p.high.min(ceiling.max(p.value));
        p.low = p.low.min(p.value);
    }
    out
}

/// Make `ets`, `apc` and `tts` consistent in place (EtS = APC × TtS within
/// the intervals), when all three come from the model; otherwise leave them
/// as they are.
pub fn reconcile(ets: &mut Prediction, apc: &mut Prediction, tts: &mut Prediction) {
    let all = [&*ets, &*apc, &*tts];
    if all
        .iter()
        .any(|p| p.source != Source::Model || p.value.is_nan() || p.value <= 0.0)
    {
        return;
    }
    // Half-widths in the logs, below and above the value: an interval held
    // at what a run could measure (`Model::predict_model`) is narrower above.
    let side = |ratio: f64| {
        let half = ratio.ln();
        if half.is_finite() {
            half.max(EXACT)
        } else {
            // An interval that gives none: the widest a model gives.
            MAX_SPREAD.ln()
        }
    };
    let [(ed, eu), (pd, pu), (td, tu)] =
        all.map(|p| (side(p.value / p.low), side(p.high / p.value)));
    // Each prediction's variance from its wider side.
    let [he, hp, ht] = [(ed, eu), (pd, pu), (td, tu)].map(|(down, up)| down.max(up));
    // ln E − ln P − ln T, with one logarithm unless the quotient leaves
    // the normal range.
    let quotient = ets.value / apc.value / tts.value;
    let r = if quotient.is_normal() {
        quotient.ln()
    } else {
        ets.value.ln() - apc.value.ln() - tts.value.ln()
    };
    if !r.is_finite() {
        return;
    }
    // The discrepancy the intervals already admit, on the side it lies: EtS
    // above APC × TtS is admitted by EtS's interval below its value or the
    // product's above it, and the other way round. (Taken symmetric, the
    // wider side admitted what the clipped one did not: at a million nodes,
    // EtS lay outside the product's interval and the product outside EtS's.)
    let admitted = if r > 0.0 {
        ed.max(pu + tu)
    } else {
        eu.max(pd + td)
    };
    if r.abs() <= admitted {
        return;
    }
    // A prediction held at a bound (`Held`) moves back inside it, never
    // past it. EtS moves against the discrepancy, APC and TtS with it.
    let free = [ets.held.allows(-r), apc.held.allows(r), tts.held.allows(r)];
    // APC or TtS held where the excess would move it past its bound (a time
    // growing faster than n², a power past what a node draws): EtS, their
    // product, is that product, and the other keeps its own model's value
    // (a metric held but free to move back inside its bound shares the
    // excess below, by variance). The held metric is a judgement on a curve that
    // went too far, which the energy's curve shares: moved only to the edge
    // of its interval, EtS stayed 100 times the product at 100,000 nodes of
    // a time measured growing as n³; shared by variance, a power fitted
    // exactly as 300 W a node took the whole excess and answered 595 W a
    // node, above every run. (Within the intervals nothing moves, as
    // elsewhere: moving EtS there too raised the 90th percentile of EtS at
    // 1.5× and 2× on the synthetic histories measured once per count.)
    if free[0] && !(free[1] && free[2]) {
        // The product itself, not EtS scaled by e^−r, which overflows where
        // EtS was held at the smallest positive number.
        let product = apc.value * tts.value;
        if !(product.is_finite() && product > 0.0) {
            return;
        }
        // The interval keeps its width in the logs, as a ratio to the value.
        let (below, above) = (ets.low / ets.value, ets.high / ets.value);
        ets.value = product;
        ets.low = (product * below).clamp(f64::MIN_POSITIVE, product);
        ets.high = (product * above).clamp(product, f64::MAX);
        return;
    }
    // Onto the edge, and a hair inside it, so that rounding leaves the
    // value within the interval rather than 1e-16 beyond.
    let excess = r - (admitted * (1.0 - 1e-12)).copysign(r);
    // In proportion to the variances of those free to move; when none is,
    // nothing moves.
    let half = [he, hp, ht];
    let [ve, vp, vt]: [f64; 3] =
        std::array::from_fn(|i| if free[i] { half[i] * half[i] } else { 0.0 });
    let total = ve + vp + vt;
    if total <= 0.0 {
        return;
    }
    for (p, shift) in [
        (ets, -excess * ve / total),
        (apc, excess * vp / total),
        (tts, excess * vt / total),
    ] {
        let factor = shift.exp();
        p.value *= factor;
        p.low *= factor;
        p.high *= factor;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model's prediction whose interval is `half` either way in the logs.
    fn model(value: f64, half: f64) -> Prediction {
        Prediction {
            value,
            source: Source::Model,
            family: None,
            low: value * (-half).exp(),
            high: value * half.exp(),
            flags: Default::default(),
            held: Held::Free,
        }
    }

    /// A power a hair below 100 kW a node, a flat time and an energy a
    /// hundred times their product: reconciled, the power would rise past
    /// what a run could draw; answered, it stops at 100 kW a node, flagged.
    #[test]
    fn no_reconciled_answer_passes_what_a_run_could_measure() {
        use crate::model::Metric;
        use crate::model::fit::tests::two_counts;
        let ets = two_counts(Metric::Ets, [(1, 1e9), (2, 2e9)]);
        let apc = two_counts(Metric::Apc, [(1, 99e3), (2, 198e3)]);
        let tts = two_counts(Metric::Tts, [(1, 100.0), (2, 100.0)]);
        let ceiling = 3.0 * crate::domain::MAX_POWER_PER_NODE_W;
        let [mut e, mut p, mut t] = [&ets, &apc, &tts].map(|m| m.predict(3, Aggregate::Mean));
        reconcile(&mut e, &mut p, &mut t);
        assert!(p.value > ceiling, "the case itself: {p:?}");
        let [_, p, _] = predict([&ets, &apc, &tts], 3, Aggregate::Mean);
        assert!(p.value <= ceiling && p.high <= ceiling, "{p:?}");
        assert!(p.flags.contains(Flag::Bounded) && p.low <= p.value, "{p:?}");
    }

    #[test]
    fn consistent_answers_are_left_alone() {
        // 1010 J against 10 W × 100 s = 1000 J: within EtS's ±3 %.
        let (mut e, mut p, mut t) = (model(1010.0, 0.03), model(10.0, 0.0), model(100.0, 0.01));
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!((e.value, p.value, t.value), (1010.0, 10.0, 100.0));
        // 1030.4 J: the product, 1000 J, is still above its E·e^−0.03 = 999.95 J.
        let (mut e, mut p, mut t) = (model(1030.4, 0.03), model(10.0, 0.0), model(100.0, 0.0));
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!(e.value, 1030.4);
        // 1030.6 J is not (1000.14 J): it moves.
        let (mut e, mut p, mut t) = (model(1030.6, 0.03), model(10.0, 0.0), model(100.0, 0.0));
        reconcile(&mut e, &mut p, &mut t);
        assert!(e.value < 1030.6);
    }

    fn held(value: f64, half: f64, held: Held) -> Prediction {
        Prediction {
            held,
            ..model(value, half)
        }
    }

    /// A prediction held at a bound does not move past it. Where APC or
    /// TtS is held, EtS follows their product and the other keeps its
    /// value; with all three held against the move, nothing moves.
    #[test]
    fn a_bounded_prediction_does_not_move_past_its_bound() {
        // APC held at most 10 W, EtS 5000 J five times APC × TtS: APC would
        // have to rise, so EtS alone comes down, to the product.
        let (mut e, mut p, mut t) = (
            model(5000.0, 0.1),
            held(10.0, 0.5, Held::AtMost),
            model(100.0, 0.1),
        );
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!((p.value, t.value), (10.0, 100.0));
        assert!((e.value - 1000.0).abs() < 1e-9, "{e:?}");
        let (mut e, mut p, mut t) = (
            held(5000.0, 0.1, Held::AtLeast),
            held(10.0, 0.5, Held::AtMost),
            held(100.0, 0.1, Held::Fixed),
        );
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!((e.value, p.value, t.value), (5000.0, 10.0, 100.0));
        // EtS held where it should come down: back inside its bound, alone
        // (APC exact, TtS free but surer than EtS: the variances decide).
        let (mut e, mut p, mut t) = (
            held(5000.0, 0.1, Held::AtMost),
            model(10.0, 0.0),
            model(100.0, 0.01),
        );
        reconcile(&mut e, &mut p, &mut t);
        assert!(e.value < 5000.0 && t.value > 100.0 && p.value == 10.0);
        // APC held at least (raised to a floor) and EtS above the product:
        // APC may rise back inside, so the excess is shared by variance,
        // not all taken by EtS.
        let (mut e, mut p, mut t) = (
            model(5000.0, 0.1),
            held(10.0, 0.5, Held::AtLeast),
            model(100.0, 0.1),
        );
        reconcile(&mut e, &mut p, &mut t);
        assert!(p.value > 10.0 && e.value < 5000.0 && t.value > 100.0);
        // EtS held at the smallest positive number, TtS held too: EtS
        // becomes the product, finite, where e^−r would overflow.
        let (mut e, mut p, mut t) = (
            held(f64::MIN_POSITIVE, 0.1, Held::AtLeast),
            model(1e5, 0.1),
            held(1e8, 0.1, Held::AtLeast),
        );
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!(e.value, 1e13);
        assert!(e.low > 0.0 && e.low <= e.value && e.value <= e.high && e.high.is_finite());
        // EtS held at most where it should go up: APC and TtS come down.
        let (mut e, mut p, mut t) = (
            held(500.0, 0.1, Held::AtMost),
            model(10.0, 0.1),
            model(100.0, 0.1),
        );
        reconcile(&mut e, &mut p, &mut t);
        assert!(e.value == 500.0 && p.value < 10.0 && t.value < 100.0);
    }

    /// The reviewer's case (2026-11-29): 300 W a node exactly, TtS 60·n³
    /// measured on 1 to 8 nodes, so EtS 18,000·n⁴. At 16 nodes TtS is held
    /// to n² growth from 8 (122,880 s, not 245,760): APC stays 4,800 W and
    /// EtS follows APC × TtS, where APC took the excess and answered 9,525 W.
    /// And the other way: TtS falling as 1/n³, held to 1/n², APC stays.
    #[test]
    fn energy_follows_a_held_time_and_power_keeps_its_model() {
        let (mut e, mut p, mut t) = (
            model(18_000.0 * 16f64.powi(4), 1e-6),
            model(4800.0, 0.0),
            held(122_880.0, 1e-6, Held::AtMost),
        );
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!((p.value, t.value), (4800.0, 122_880.0));
        assert!(
            (e.value / (4800.0 * 122_880.0) - 1.0).abs() < 1e-12,
            "{e:?}"
        );
        let (mut e, mut p, mut t) = (
            model(300.0 * 1e6 / 64f64.powi(2), 1e-6),
            model(300.0 * 64.0, 0.0),
            held(1e6 / 8f64.powi(3) / 64.0, 1e-6, Held::AtLeast),
        );
        let (power, time) = (p.value, t.value);
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!((p.value, t.value), (power, time));
        assert!((e.value / (power * time) - 1.0).abs() < 1e-12, "{e:?}");
    }

    #[test]
    fn the_least_sure_prediction_takes_the_excess_and_an_exact_one_none() {
        // APC exact, TtS ±0.01 and EtS ±0.03 in the logs: EtS 10 % above
        // the product, which EtS's interval reaches down to E·e^−0.03; EtS
        // takes 9/10 of the excess, TtS 1/10.
        let (mut e, mut p, mut t) = (model(1100.0, 0.03), model(10.0, 0.0), model(100.0, 0.01));
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!(p.value, 10.0);
        let excess = 1.1f64.ln() - 0.03;
        assert!((t.value - 100.0 * (0.1 * excess).exp()).abs() < 1e-9);
        assert!((e.value - 1100.0 * (-0.9 * excess).exp()).abs() < 1e-9);
        // The product now sits on the lower edge of EtS's interval.
        assert!((p.value * t.value - e.low).abs() < 1e-9 * e.value);
        // Intervals keep their widths in the logs around the new values.
        assert!((e.high / e.value - 0.03f64.exp()).abs() < 1e-12);
    }

    #[test]
    fn history_answers_are_left_as_measured() {
        let mut e = model(1100.0, 0.03);
        e.source = Source::History;
        let (mut p, mut t) = (model(10.0, 0.01), model(100.0, 0.01));
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!((e.value, p.value, t.value), (1100.0, 10.0, 100.0));
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

            /// Afterwards APC × TtS lies in EtS's interval or EtS in the
            /// product's; no value moved by more than the discrepancy (in the
            /// logs); and consistent inputs are unchanged.
            #[test]
            fn energy_is_power_times_time_within_the_intervals(
                e in 1e-3f64..1e12, p in 1e-3f64..1e7, t in 1e-3f64..1e6,
                he in 0.0f64..0.9, hp in 0.0f64..0.9, ht in 0.0f64..0.9,
            ) {
                let (mut me, mut mp, mut mt) = (model(e, he), model(p, hp), model(t, ht));
                reconcile(&mut me, &mut mp, &mut mt);
                let product = mp.value * mt.value;
                let in_energy = me.low * (1.0 - 1e-9) <= product && product <= me.high * (1.0 + 1e-9);
                let in_product = mp.low * mt.low * (1.0 - 1e-9) <= me.value
                    && me.value <= mp.high * mt.high * (1.0 + 1e-9);
                prop_assert!(in_energy || in_product, "{me:?} {mp:?} {mt:?}");
                let r = (e / (p * t)).ln().abs();
                for (before, after) in [(e, me.value), (p, mp.value), (t, mt.value)] {
                    prop_assert!((after / before).ln().abs() <= r + 1e-9);
                }
                prop_assert!(me.low <= me.value && me.value <= me.high);
                let (mut ce, mut cp, mut ct) = (model(p * t, he), model(p, hp), model(t, ht));
                reconcile(&mut ce, &mut cp, &mut ct);
                prop_assert!(ce.value == p * t && cp.value == p && ct.value == t);
                // Just inside either edge of EtS's interval: unchanged too.
                // (Symmetric intervals: each edge is at `he`.)
                for edge in [0.999 * he, -0.999 * he] {
                    let energy = p * t * edge.exp();
                    let (mut ce, mut cp, mut ct) = (model(energy, he), model(p, hp), model(t, ht));
                    reconcile(&mut ce, &mut cp, &mut ct);
                    prop_assert!(ce.value == energy && cp.value == p && ct.value == t, "{edge}");
                }
            }

            /// A held prediction never moves past its bound; where APC or
            /// TtS is held and EtS may move, only EtS moves; and whenever
            /// some prediction may move the way the excess asks, the three
            /// end consistent.
            #[test]
            fn held_predictions_stay_within_their_bounds(
                e in 1e-3f64..1e12, p in 1e-3f64..1e7, t in 1e-3f64..1e6,
                he in 0.0f64..0.9, hp in 0.0f64..0.9, ht in 0.0f64..0.9,
                held in proptest::array::uniform3(0usize..4),
            ) {
                let kinds = [Held::Free, Held::AtMost, Held::AtLeast, Held::Fixed];
                let [ke, kp, kt] = held.map(|k| kinds[k]);
                let (mut me, mut mp, mut mt) = (
                    Prediction { held: ke, ..model(e, he) },
                    Prediction { held: kp, ..model(p, hp) },
                    Prediction { held: kt, ..model(t, ht) },
                );
                reconcile(&mut me, &mut mp, &mut mt);
                for (kind, before, after) in [(ke, e, me.value), (kp, p, mp.value), (kt, t, mt.value)] {
                    match kind {
                        Held::Free => {}
                        Held::AtMost => prop_assert!(after <= before, "{kind:?} {before} → {after}"),
                        Held::AtLeast => prop_assert!(after >= before, "{kind:?} {before} → {after}"),
                        Held::Fixed => prop_assert_eq!(after, before),
                    }
                }
                let ln_r = (e / (p * t)).ln();
                let free = [ke.allows(-ln_r), kp.allows(ln_r), kt.allows(ln_r)];
                if free[0] && !(free[1] && free[2]) {
                    prop_assert!(mp.value == p && mt.value == t, "{mp:?} {mt:?}");
                    // The product exactly, or nothing moved (within the intervals).
                    prop_assert!(
                        (me.value / (p * t) - 1.0).abs() < 1e-9 || me.value == e,
                        "{me:?}"
                    );
                }
                if free.iter().any(|f| *f) {
                    let product = mp.value * mt.value;
                    let in_energy = me.low * (1.0 - 1e-9) <= product && product <= me.high * (1.0 + 1e-9);
                    let in_product = mp.low * mt.low * (1.0 - 1e-9) <= me.value
                        && me.value <= mp.high * mt.high * (1.0 + 1e-9);
                    prop_assert!(in_energy || in_product, "{me:?} {mp:?} {mt:?}");
                }
            }

            /// Intervals held below what a run could measure are narrower
            /// above their value than below it: consistency is judged on the
            /// side where the discrepancy lies (at a million nodes, EtS lay
            /// outside the product's interval and the product outside
            /// EtS's, and nothing moved).
            #[test]
            fn energy_is_power_times_time_within_clipped_intervals(
                e in 1e-3f64..1e20, p in 1e-3f64..1e10, t in 1e-3f64..1e9,
                he in 0.0f64..4.6, hp in 0.0f64..4.6, ht in 0.0f64..4.6,
                ce in 0.0f64..=1.0, cp in 0.0f64..=1.0, ct in 0.0f64..=1.0,
            ) {
                let clipped = |value: f64, half: f64, kept: f64| Prediction {
                    high: value * (half * kept).exp(),
                    ..model(value, half)
                };
                let (mut me, mut mp, mut mt) = (clipped(e, he, ce), clipped(p, hp, cp), clipped(t, ht, ct));
                reconcile(&mut me, &mut mp, &mut mt);
                let product = mp.value * mt.value;
                let slack = 1e-12;
                let in_energy = me.low * (1.0 - slack) <= product && product <= me.high * (1.0 + slack);
                let in_product = mp.low * mt.low * (1.0 - slack) <= me.value
                    && me.value <= mp.high * mt.high * (1.0 + slack);
                prop_assert!(in_energy || in_product, "{me:?} {mp:?} {mt:?}");
                for m in [&me, &mp, &mt] {
                    prop_assert!(m.low <= m.value && m.value <= m.high, "{m:?}");
                }
            }
        }
    }
}
