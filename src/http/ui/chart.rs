//! Charts as SVG written on the server: lines, interval bands, points with
//! their spread, markers and bars. No script and nothing fetched: a page
//! is complete as it arrives, and the numbers behind every mark are in the
//! page (`<title>` on hover, `data-*` for the browser test).

use maud::{Markup, PreEscaped, html};

const W: f64 = 640.0;
const H: f64 = 300.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 40.0;

/// One axis: logarithmic or not, and how its ticks read: values are
/// divided by `divisor` (the unit shown) before ticks are placed, so that
/// they fall on round numbers of that unit.
pub struct Axis<'a> {
    pub label: &'a str,
    pub log: bool,
    pub divisor: f64,
    pub ticks: &'a dyn Fn(f64) -> String,
}

/// A point with an optional spread (low, high) and what hovering shows.
pub struct Dot {
    pub x: f64,
    pub y: f64,
    pub spread: Option<(f64, f64)>,
    pub title: String,
}

/// Marks of one kind and CSS class: band points (x, low, high), bars,
/// line points (x, y) or dots.
pub struct Series<T> {
    pub class: &'static str,
    pub dashed: bool,
    pub points: Vec<T>,
}

impl<T> Series<T> {
    pub fn new(class: &'static str, points: Vec<T>) -> Series<T> {
        Series {
            class,
            dashed: false,
            points,
        }
    }

    pub fn dashed(self) -> Series<T> {
        Series {
            dashed: true,
            ..self
        }
    }
}

/// A bar from x `from` to `to`, `height` high, and what hovering shows.
pub struct Bar {
    pub from: f64,
    pub to: f64,
    pub height: f64,
    pub title: String,
}

/// What a chart draws, back to front: bands, bars, lines, dots, markers.
#[derive(Default)]
pub struct Layers {
    pub bands: Vec<Series<(f64, f64, f64)>>,
    pub bars: Vec<Series<Bar>>,
    pub lines: Vec<Series<(f64, f64)>>,
    pub dots: Vec<Series<Dot>>,
    /// Vertical markers: x and a label.
    pub markers: Vec<(f64, String)>,
    /// Horizontal rules: y and a label.
    pub rules: Vec<(f64, String)>,
}

#[derive(Clone, Copy)]
struct Scale {
    log: bool,
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
}

impl Scale {
    fn new(log: bool, values: impl Iterator<Item = f64>, from: f64, to: f64, pad: bool) -> Scale {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if !lo.is_finite() {
            (lo, hi) = if log { (1.0, 10.0) } else { (0.0, 1.0) };
        }
        let (mut a, mut b) = if log { (lo.ln(), hi.ln()) } else { (lo, hi) };
        if b - a < 1e-9 * a.abs().max(1.0) {
            let d = if log { 0.5 } else { a.abs().max(1.0) * 0.1 };
            (a, b) = (a - d, b + d);
        }
        if pad {
            let d = (b - a) * 0.06;
            (a, b) = (a - d, b + d);
        }
        let (lo, hi) = if log { (a.exp(), b.exp()) } else { (a, b) };
        Scale {
            log,
            lo,
            hi,
            from,
            to,
        }
    }

    fn at(&self, v: f64) -> f64 {
        let f = |x: f64| {
            if self.log {
                x.max(f64::MIN_POSITIVE).ln()
            } else {
                x
            }
        };
        let t = (f(v) - f(self.lo)) / (f(self.hi) - f(self.lo));
        // Not a number (a mark that is not left out): at the start.
        let t = if t.is_nan() { 0.0 } else { t };
        self.from + t.clamp(-0.05, 1.05) * (self.to - self.from)
    }

    /// Tick values: powers of ten (with 2 and 5 when few) on a log scale,
    /// 1-2-5 steps on a linear one.
    /// Ticks at round values of `v / divisor`.
    fn ticks_in(&self, divisor: f64) -> Vec<f64> {
        let shown = Scale {
            lo: self.lo / divisor,
            hi: self.hi / divisor,
            ..*self
        };
        shown.ticks().into_iter().map(|t| t * divisor).collect()
    }

    fn ticks(&self) -> Vec<f64> {
        let within = |v: &f64| *v >= self.lo * (1.0 - 1e-9) && *v <= self.hi * (1.0 + 1e-9);
        if self.log {
            let (a, b) = (
                self.lo.log10().floor() as i32,
                self.hi.log10().ceil() as i32,
            );
            for mantissas in [
                &[1.0][..],
                &[1.0, 2.0, 5.0],
                &[1.0, 1.5, 2.0, 3.0, 5.0, 7.0],
            ] {
                let ticks: Vec<f64> = (a..=b)
                    .flat_map(|e| mantissas.iter().map(move |m| m * 10f64.powi(e)))
                    .filter(within)
                    .collect();
                if ticks.len() >= 3 {
                    return thin(ticks, 8);
                }
            }
            // Less than a decade: even steps read best.
            return self.linear_ticks();
        }
        self.linear_ticks()
    }

    fn linear_ticks(&self) -> Vec<f64> {
        let raw = (self.hi - self.lo) / 5.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 5.0, 10.0]
            .iter()
            .map(|m| m * magnitude)
            .find(|s| *s >= raw)
            .unwrap_or(magnitude * 10.0);
        let first = (self.lo / step).ceil() as i64;
        let last = (self.hi / step).floor() as i64;
        (first..=last).map(|i| i as f64 * step).collect()
    }
}

/// At most `n` of `ticks`, evenly taken.
fn thin(ticks: Vec<f64>, n: usize) -> Vec<f64> {
    if ticks.len() <= n {
        return ticks;
    }
    let every = ticks.len().div_ceil(n);
    ticks.into_iter().step_by(every).collect()
}

fn path(points: impl Iterator<Item = (f64, f64)>) -> String {
    let mut d = String::new();
    for (i, (x, y)) in points.enumerate() {
        let op = if i == 0 { 'M' } else { 'L' };
        d.push_str(&format!("{op}{x:.1},{y:.1} "));
    }
    d
}

/// An x-y chart of `layers`, titled `title` for screen readers.
pub fn chart(title: &str, x: Axis<'_>, y: Axis<'_>, layers: &Layers) -> Markup {
    let xs = layers
        .bands
        .iter()
        .flat_map(|b| b.points.iter().map(|p| p.0))
        .chain(
            layers
                .lines
                .iter()
                .flat_map(|l| l.points.iter().map(|p| p.0)),
        )
        .chain(
            layers
                .dots
                .iter()
                .flat_map(|d| d.points.iter().map(|p| p.x)),
        )
        .chain(
            layers
                .bars
                .iter()
                .flat_map(|b| b.points.iter().flat_map(|p| [p.from, p.to])),
        )
        .chain(layers.markers.iter().map(|m| m.0));
    let ys = layers
        .bands
        .iter()
        .flat_map(|b| b.points.iter().flat_map(|p| [p.1, p.2]))
        .chain(
            layers
                .lines
                .iter()
                .flat_map(|l| l.points.iter().map(|p| p.1)),
        )
        .chain(layers.dots.iter().flat_map(|d| {
            d.points.iter().flat_map(|p| {
                [p.y]
                    .into_iter()
                    .chain(p.spread.into_iter().flat_map(|s| [s.0, s.1]))
            })
        }))
        .chain(
            layers
                .bars
                .iter()
                .flat_map(|b| b.points.iter().map(|p| p.height)),
        )
        .chain(layers.rules.iter().map(|r| r.0));
    let has_bars = !layers.bars.is_empty();
    let sx = Scale::new(x.log, xs, LEFT, W - RIGHT, !has_bars);
    let ys: Vec<f64> = ys.chain(has_bars.then_some(0.0)).collect();
    let sy = Scale::new(y.log, ys.into_iter(), H - BOTTOM, TOP, true);
    html! {
        svg.chart viewBox=(format!("0 0 {W} {H}")) role="img" aria-label=(title)
            preserveAspectRatio="xMidYMid meet" {
            title { (title) }
            g.grid {
                @for t in sy.ticks_in(y.divisor) {
                    line x1=(LEFT) x2=(W - RIGHT) y1=(fmt(sy.at(t))) y2=(fmt(sy.at(t))) {}
                    text.tick x=(LEFT - 6.0) y=(fmt(sy.at(t) + 4.0)) text-anchor="end" { ((y.ticks)(t)) }
                }
                @for t in sx.ticks_in(x.divisor) {
                    line x1=(fmt(sx.at(t))) x2=(fmt(sx.at(t))) y1=(TOP) y2=(H - BOTTOM) {}
                    text.tick x=(fmt(sx.at(t))) y=(H - BOTTOM + 16.0) text-anchor="middle" { ((x.ticks)(t)) }
                }
            }
            text.axis x=(fmt((LEFT + W - RIGHT) / 2.0)) y=(H - 6.0) text-anchor="middle" { (x.label) }
            text.axis x="14" y=(fmt((TOP + H - BOTTOM) / 2.0)) text-anchor="middle"
                transform=(format!("rotate(-90 14 {})", fmt((TOP + H - BOTTOM) / 2.0).0)) { (y.label) }
            @for band in &layers.bands {
                @let band_points: Vec<_> = band.points.iter().filter(|p| finite(&[p.0, p.1, p.2])).collect();
                @let upper = band_points.iter().map(|p| (sx.at(p.0), sy.at(p.2)));
                @let lower = band_points.iter().rev().map(|p| (sx.at(p.0), sy.at(p.1)));
                path class=(format!("band {}", band.class)) d=(format!("{}Z", path(upper.chain(lower)))) {}
            }
            @for bars in &layers.bars {
                @for bar in &bars.points {
                    @let (x0, x1) = (sx.at(bar.from), sx.at(bar.to));
                    @let (y0, y1) = (sy.at(bar.height), sy.at(0.0));
                    rect class=(format!("bar {}", bars.class)) x=(fmt(x0 + 0.5)) y=(fmt(y0))
                        width=(fmt((x1 - x0 - 1.0).max(0.5))) height=(fmt((y1 - y0).max(0.0)))
                        data-value=(bar.height) { title { (bar.title) } }
                }
            }
            @for line in &layers.lines {
                path class=(format!("line {}{}", line.class, if line.dashed { " dashed" } else { "" }))
                    d=(path(line.points.iter().filter(|p| finite(&[p.0, p.1])).map(|p| (sx.at(p.0), sy.at(p.1))))) {}
            }
            @for dots in &layers.dots {
                @for d in dots.points.iter().filter(|d| finite(&[d.x, d.y])) {
                    g class=(format!("dot {}", dots.class)) data-x=(d.x) data-y=(d.y) {
                        @if let Some((lo, hi)) = d.spread {
                            line x1=(fmt(sx.at(d.x))) x2=(fmt(sx.at(d.x))) y1=(fmt(sy.at(lo))) y2=(fmt(sy.at(hi))) {}
                        }
                        circle cx=(fmt(sx.at(d.x))) cy=(fmt(sy.at(d.y))) r="3.5" { title { (d.title) } }
                    }
                }
            }
            @for (i, (at, label)) in layers.markers.iter().enumerate() {
                // Staggered, so that neighbouring labels do not overlap.
                @let label_y = TOP + 12.0 + 14.0 * (i % 3) as f64;
                g.marker {
                    line x1=(fmt(sx.at(*at))) x2=(fmt(sx.at(*at))) y1=(TOP) y2=(H - BOTTOM) {}
                    // Labels near the right edge read leftwards.
                    @if sx.at(*at) > W * 0.75 {
                        text x=(fmt(sx.at(*at) - 4.0)) y=(fmt(label_y)) text-anchor="end" { (label) }
                    } @else {
                        text x=(fmt(sx.at(*at) + 4.0)) y=(fmt(label_y)) { (label) }
                    }
                }
            }
            @for (at, label) in &layers.rules {
                g.rule {
                    line x1=(LEFT) x2=(W - RIGHT) y1=(fmt(sy.at(*at))) y2=(fmt(sy.at(*at))) {}
                    text x=(W - RIGHT - 4.0) y=(fmt(sy.at(*at) - 4.0)) text-anchor="end" { (label) }
                }
            }
        }
    }
}

/// Whether all of `values` are finite: a mark undefined somewhere (a curve
/// beyond its domain) is left out, not drawn at an edge.
fn finite(values: &[f64]) -> bool {
    values.iter().all(|v| v.is_finite())
}

fn fmt(v: f64) -> PreEscaped<String> {
    PreEscaped(format!("{v:.1}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(v: f64) -> String {
        format!("{v}")
    }

    #[test]
    fn log_ticks_are_powers_of_ten_or_their_multiples() {
        let s = Scale::new(true, [1.0, 1000.0].into_iter(), 0.0, 100.0, false);
        assert_eq!(s.ticks(), vec![1.0, 10.0, 100.0, 1000.0]);
        let s = Scale::new(true, [2.0, 16.0].into_iter(), 0.0, 100.0, false);
        assert_eq!(s.ticks(), vec![2.0, 5.0, 10.0]);
        assert!((s.at(2.0) - 0.0).abs() < 1e-9 && (s.at(16.0) - 100.0).abs() < 1e-9);
    }

    #[test]
    fn linear_ticks_step_by_one_two_or_five() {
        let s = Scale::new(false, [0.0, 2300.0].into_iter(), 0.0, 100.0, false);
        assert_eq!(s.ticks(), vec![0.0, 500.0, 1000.0, 1500.0, 2000.0]);
    }

    #[test]
    fn a_chart_carries_its_points() {
        let layers = Layers {
            dots: vec![Series::new(
                "history",
                vec![Dot {
                    x: 4.0,
                    y: 250.0,
                    spread: Some((240.0, 260.0)),
                    title: "4 nodes".into(),
                }],
            )],
            lines: vec![Series::new("model", vec![(1.0, 1000.0), (8.0, 125.0)])],
            ..Layers::default()
        };
        let svg = chart(
            "TtS",
            Axis {
                label: "nodes",
                log: true,
                divisor: 1.0,
                ticks: &plain,
            },
            Axis {
                label: "s",
                log: true,
                divisor: 1.0,
                ticks: &plain,
            },
            &layers,
        )
        .into_string();
        assert!(svg.contains("data-x=\"4\" data-y=\"250\""), "{svg}");
        assert!(svg.contains("<title>4 nodes</title>"));
        assert!(svg.contains("class=\"line model\""));
    }
}
