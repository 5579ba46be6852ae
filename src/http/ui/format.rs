//! Quantities in the units people read (kWh, kW, hours), with the SI value
//! the API gives on hover (`title`) and in `data-si`, which the browser test
//! compares with the API's answers.

use maud::{Markup, html};

pub use crate::text::sig3;

/// The unit a value of `magnitude` (SI) reads best in: its divisor and name.
fn scale(magnitude: f64, units: &[(f64, &'static str)]) -> (f64, &'static str) {
    let a = magnitude.abs();
    units
        .iter()
        .rev()
        .find(|(divisor, _)| a >= *divisor)
        .copied()
        .unwrap_or(units[0])
}

const ENERGY: &[(f64, &str)] = &[
    (3.6e3, "Wh"),
    (3.6e6, "kWh"),
    (3.6e9, "MWh"),
    (3.6e12, "GWh"),
];
const POWER: &[(f64, &str)] = &[(1.0, "W"), (1e3, "kW"), (1e6, "MW")];
const TIME: &[(f64, &str)] = &[
    (1.0, "s"),
    (120.0, "min"),
    (7200.0, "h"),
    (172_800.0, "days"),
];

/// A quantity of `si` in `unit` (SI), shown as `text`.
fn quantity(si: f64, unit: &str, text: String) -> Markup {
    html! {
        span.q title=(format!("{si} {unit}")) data-si=(si) data-unit=(unit) { (text) }
    }
}

/// The unit `si` reads best in among `units`: its divisor and name.
/// Minutes, hours and days are 60, 3,600 and 86,400 s, whatever the
/// threshold at which they take over.
fn unit_of(si: f64, units: &[(f64, &'static str)]) -> (f64, &'static str) {
    let (divisor, name) = scale(si, units);
    let divisor = match name {
        "min" => 60.0,
        "h" => 3600.0,
        "days" => 86_400.0,
        _ => divisor,
    };
    (divisor, name)
}

fn scaled(si: f64, units: &[(f64, &'static str)], unit: &str) -> Markup {
    let (divisor, name) = unit_of(si, units);
    quantity(si, unit, format!("{} {name}", sig3(si / divisor)))
}

/// Energy, J.
pub fn energy(j: f64) -> Markup {
    scaled(j, ENERGY, "J")
}

/// Power, W.
pub fn power(w: f64) -> Markup {
    scaled(w, POWER, "W")
}

/// A duration, s.
pub fn duration(s: f64) -> Markup {
    scaled(s, TIME, "s")
}

/// An axis of values in SI `unit` (J, W or s) up to about `max`: the unit
/// its ticks read in, and how a tick reads (one unit for the whole axis).
pub fn axis(unit: &str, max: f64) -> (&'static str, f64, impl Fn(f64) -> String + use<>) {
    let (divisor, name) = unit_of(max, units_of(unit));
    (name, divisor, move |v: f64| sig3(v / divisor))
}

/// A value in SI `unit` (J, W or s), short, in the unit it reads best in.
pub fn short(unit: &str, v: f64) -> String {
    let (divisor, name) = unit_of(v, units_of(unit));
    format!("{} {name}", sig3(v / divisor))
}

fn units_of(unit: &str) -> &'static [(f64, &'static str)] {
    match unit {
        "J" => ENERGY,
        "W" => POWER,
        _ => TIME,
    }
}

/// A value of one of the API's enums as the API names it.
pub fn name(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        _ => String::new(),
    }
}

/// A percentage, given in percent.
pub fn percent(pct: f64) -> Markup {
    quantity(pct, "%", format!("{} %", sig3(pct)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_people_read_with_the_si_value_kept() {
        let e = energy(7.2e6).into_string();
        assert!(
            e.contains(">2.00 kWh<") && e.contains("data-si=\"7200000\""),
            "{e}"
        );
        assert!(power(2300.0).into_string().contains(">2.30 kW<"));
        assert!(power(-120.0).into_string().contains(">-120 W<"));
        assert!(duration(5400.0).into_string().contains(">90.0 min<"));
        assert!(
            duration(3.0 * 86_400.0)
                .into_string()
                .contains(">3.00 days<")
        );
        assert!(energy(5.0e9).into_string().contains(">1.39 MWh<"));
    }
}
