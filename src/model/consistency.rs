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
//! Only the model's answers are reconciled: where runs were measured at the
//! node count, each metric answers with the runs' own aggregate (every run
//! satisfied E = P·T within 5 % at ingestion).

use super::fit::MAX_SPREAD;
use super::{Aggregate, Flag, Model, Prediction, Source};

/// A half-width (in the logs) below which a prediction counts as exact.
const EXACT: f64 = 1e-12;

/// The predictions of `models` (EtS, APC, TtS, in `Metric::ALL`'s order) at
/// `nodes`, reconciled where they come from the models (whose answers do not
/// depend on `aggregate`).
pub fn predict(models: [&Model; 3], nodes: u32, aggregate: Aggregate) -> [Prediction; 3] {
    let [mut ets, mut apc, mut tts] = models.map(|m| m.predict(nodes, aggregate));
    reconcile(&mut ets, &mut apc, &mut tts);
    [ets, apc, tts]
}

/// The models' own values at `nodes` (their curves, also where runs were
/// measured), reconciled as `predict` reconciles its answers: what a curve
/// or a scan over node counts reads, so that it agrees with the
/// predictions at every count the models answer.
pub fn curves(models: [&Model; 3], nodes: u32) -> [Prediction; 3] {
    let [mut ets, mut apc, mut tts] = models.map(|m| m.predict_model(nodes));
    reconcile(&mut ets, &mut apc, &mut tts);
    [ets, apc, tts]
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
    if !r.is_finite() || r.abs() <= admitted {
        return;
    }
    // Onto the edge, and a hair inside it, so that rounding leaves the
    // value within the interval rather than 1e-16 beyond.
    let excess = r - (admitted * (1.0 - 1e-12)).copysign(r);
    // A prediction held at its bound (`Flag::Bounded`) does not move: the
    // others take the excess, or, when all are held, nothing moves.
    let [ve, vp, vt] = [(he, &*ets), (hp, &*apc), (ht, &*tts)].map(|(h, p)| {
        if p.flags.contains(Flag::Bounded) {
            0.0
        } else {
            h * h
        }
    });
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
        }
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

    /// A prediction held at a bound keeps its value: the others take the
    /// excess; with all three held, nothing moves.
    #[test]
    fn a_bounded_prediction_does_not_move() {
        let bounded = |value, half| {
            let mut p = model(value, half);
            p.flags.insert(Flag::Bounded);
            p
        };
        let (mut e, mut p, mut t) = (model(5000.0, 0.1), bounded(10.0, 0.5), model(100.0, 0.1));
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!(p.value, 10.0);
        assert!(e.value < 5000.0 && t.value > 100.0);
        let (mut e, mut p, mut t) = (
            bounded(5000.0, 0.1),
            bounded(10.0, 0.5),
            bounded(100.0, 0.1),
        );
        reconcile(&mut e, &mut p, &mut t);
        assert_eq!((e.value, p.value, t.value), (5000.0, 10.0, 100.0));
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
