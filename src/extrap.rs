//! Extra-P's text input format, for one parameter:
//!
//! ```text
//! PARAMETER p
//! POINTS 4 8 16 32 64
//! REGION solver
//! METRIC time
//! DATA 1.02 1.01 0.99
//! DATA 2.03 2.00 2.01
//! ...
//! ```
//!
//! One DATA line per point, in the order of POINTS, each holding the
//! repetitions measured there. REGION and METRIC are optional; each one
//! starts a new series of DATA lines. Blank lines and `#` comments are
//! skipped. Points may also be written `( 4 ) ( 8 )`, as Extra-P writes them.

use std::fmt;

/// One series of measurements: a region's metric over the points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub region: Option<String>,
    pub metric: Option<String>,
    /// Each point with its repetitions.
    pub points: Vec<(f64, Vec<f64>)>,
}

impl Series {
    /// The (p, value) observations, repetitions included.
    pub fn observations(&self) -> Vec<(f64, f64)> {
        self.points
            .iter()
            .flat_map(|(p, values)| values.iter().map(move |v| (*p, *v)))
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    pub parameter: String,
    pub series: Vec<Series>,
}

/// What is wrong, and on which line (from 1; 0 for the file as a whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            f.write_str(&self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for ParseError {}

/// The most series a file may hold.
pub const MAX_SERIES: usize = 1000;

pub fn parse(text: &str) -> Result<Experiment, ParseError> {
    let mut parameter: Option<String> = None;
    let mut points: Option<Vec<f64>> = None;
    let mut series: Vec<Series> = Vec::new();
    let mut region: Option<String> = None;
    let mut metric: Option<String> = None;
    // The series being filled and the line that began it.
    let mut current: Option<(Series, usize)> = None;

    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let error = |message: String| ParseError {
            line: number,
            message,
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (keyword, rest) = line
            .split_once(char::is_whitespace)
            .map_or((line, ""), |(k, r)| (k, r.trim()));
        match keyword.to_ascii_uppercase().as_str() {
            "PARAMETER" => {
                if parameter.is_some() {
                    return Err(error(
                        "a second PARAMETER: only single-parameter files are supported".into(),
                    ));
                }
                if rest.is_empty() || rest.contains(char::is_whitespace) {
                    return Err(error(
                        "PARAMETER takes one name, as in `PARAMETER p`".into(),
                    ));
                }
                parameter = Some(rest.to_owned());
            }
            "POINTS" => {
                if parameter.is_none() {
                    return Err(error("POINTS before PARAMETER".into()));
                }
                if points.is_some() {
                    return Err(error("a second POINTS line".into()));
                }
                points = Some(parse_points(rest).map_err(error)?);
            }
            "REGION" | "METRIC" => {
                if rest.is_empty() {
                    return Err(error(format!("{keyword} needs a name")));
                }
                finish(&mut current, &mut series, points.as_deref())?;
                if keyword.eq_ignore_ascii_case("REGION") {
                    region = Some(rest.to_owned());
                } else {
                    metric = Some(rest.to_owned());
                }
            }
            "DATA" => {
                let Some(expected) = points.as_deref() else {
                    return Err(error("DATA before POINTS".into()));
                };
                let values = parse_numbers(rest).map_err(|e| error(format!("DATA: {e}")))?;
                if values.is_empty() {
                    return Err(error("DATA needs at least one value".into()));
                }
                let (open, _) = current.get_or_insert_with(|| {
                    (
                        Series {
                            region: region.clone(),
                            metric: metric.clone(),
                            points: Vec::new(),
                        },
                        number,
                    )
                });
                if open.points.len() == expected.len() {
                    return Err(error(format!(
                        "more DATA lines than the {} POINTS{}",
                        expected.len(),
                        label(open)
                    )));
                }
                open.points.push((expected[open.points.len()], values));
            }
            _ => {
                return Err(error(format!(
                    "unknown line `{keyword}`: expected PARAMETER, POINTS, REGION, METRIC or DATA"
                )));
            }
        }
        if series.len() > MAX_SERIES {
            return Err(error(format!("more than {MAX_SERIES} series")));
        }
    }
    finish(&mut current, &mut series, points.as_deref())?;
    let whole = |message: &str| ParseError {
        line: 0,
        message: message.into(),
    };
    let parameter = parameter.ok_or_else(|| whole("no PARAMETER line"))?;
    if points.is_none() {
        return Err(whole("no POINTS line"));
    }
    if series.is_empty() {
        return Err(whole("no DATA lines"));
    }
    Ok(Experiment { parameter, series })
}

/// Close the open series: it must have a DATA line per point and be new.
fn finish(
    current: &mut Option<(Series, usize)>,
    series: &mut Vec<Series>,
    points: Option<&[f64]>,
) -> Result<(), ParseError> {
    let Some((done, line)) = current.take() else {
        return Ok(());
    };
    let expected = points.map_or(0, <[f64]>::len);
    if done.points.len() != expected {
        return Err(ParseError {
            line,
            message: format!(
                "{} DATA lines for {expected} POINTS{}",
                done.points.len(),
                label(&done)
            ),
        });
    }
    if series
        .iter()
        .any(|s| s.region == done.region && s.metric == done.metric)
    {
        return Err(ParseError {
            line,
            message: format!("a second series{}", label(&done)),
        });
    }
    series.push(done);
    Ok(())
}

fn label(series: &Series) -> String {
    match (&series.region, &series.metric) {
        (None, None) => String::new(),
        (region, metric) => format!(
            " (region {}, metric {})",
            region.as_deref().unwrap_or("-"),
            metric.as_deref().unwrap_or("-")
        ),
    }
}

fn parse_points(text: &str) -> Result<Vec<f64>, String> {
    // `( 4 ) ( 8 )` or `4 8`: a parenthesised group with more than one
    // value is a multi-parameter point.
    let mut points = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('(') {
            let (inside, tail) = after
                .split_once(')')
                .ok_or("POINTS: a `(` without its `)`")?;
            let values = parse_numbers(inside).map_err(|e| format!("POINTS: {e}"))?;
            if values.len() != 1 {
                return Err(
                    "POINTS with several values per point: only single-parameter files are supported"
                        .into(),
                );
            }
            points.push(values[0]);
            rest = tail.trim_start();
        } else {
            let (token, tail) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            points.extend(parse_numbers(token).map_err(|e| format!("POINTS: {e}"))?);
            rest = tail.trim_start();
        }
    }
    if points.is_empty() {
        return Err("POINTS lists no values".into());
    }
    if let Some(bad) = points.iter().find(|p| **p <= 0.0) {
        return Err(format!("POINTS must be positive (got {bad})"));
    }
    let mut sorted = points.clone();
    sorted.sort_by(f64::total_cmp);
    if let Some(pair) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("POINTS lists {} twice", pair[0]));
    }
    Ok(points)
}

fn parse_numbers(text: &str) -> Result<Vec<f64>, String> {
    text.split_whitespace()
        .map(|token| match token.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(format!("`{token}` is not a finite number")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_with_regions_and_metrics_gives_one_series_each() {
        let text = "# scaling study\nPARAMETER p\nPOINTS ( 4 ) ( 8 ) ( 16 )\n\
                    REGION main\nMETRIC time\nDATA 1 1.2\nDATA 2\nDATA 4 4.1 3.9\n\
                    METRIC energy\nDATA 10\nDATA 20\nDATA 40\n";
        let experiment = parse(text).unwrap();
        assert_eq!(experiment.parameter, "p");
        assert_eq!(experiment.series.len(), 2);
        let time = &experiment.series[0];
        assert_eq!(
            (time.region.as_deref(), time.metric.as_deref()),
            (Some("main"), Some("time"))
        );
        assert_eq!(time.points[2], (16.0, vec![4.0, 4.1, 3.9]));
        assert_eq!(time.observations().len(), 6);
        assert_eq!(experiment.series[1].metric.as_deref(), Some("energy"));
        assert_eq!(experiment.series[1].region.as_deref(), Some("main"));
    }

    #[test]
    fn a_bare_file_has_one_unnamed_series() {
        let experiment = parse("PARAMETER x\nPOINTS 1 2 3\nDATA 1\nDATA 2\nDATA 3").unwrap();
        assert_eq!(experiment.series[0].region, None);
        assert_eq!(experiment.series[0].points.len(), 3);
    }

    #[test]
    fn errors_name_the_line_and_the_reason() {
        let cases = [
            ("POINTS 1 2", 1, "POINTS before PARAMETER"),
            ("PARAMETER p\nPARAMETER q", 2, "single-parameter"),
            ("PARAMETER p\nPOINTS (1 2) (3 4)", 2, "single-parameter"),
            ("PARAMETER p\nPOINTS 1 x", 2, "`x` is not a finite number"),
            ("PARAMETER p\nPOINTS 1 1", 2, "twice"),
            ("PARAMETER p\nPOINTS 0 1", 2, "positive"),
            ("PARAMETER p\nDATA 1", 2, "DATA before POINTS"),
            (
                "PARAMETER p\nPOINTS 1 2\nDATA 1\nDATA 2\nDATA 3",
                5,
                "more DATA lines",
            ),
            (
                "PARAMETER p\nPOINTS 1 2\nDATA 1\nMETRIC m\nDATA 1",
                3,
                "1 DATA lines for 2",
            ),
            ("PARAMETER p\nPOINTS 1 2\nDATA 1 nan\n", 3, "`nan`"),
            ("PARAMETER p\nPOINTS 1 2\nDATA\n", 3, "at least one value"),
            ("PARAMETER p\nPOINTS 1\nFOO 1", 3, "unknown line `FOO`"),
            (
                "PARAMETER p\nPOINTS 1\nMETRIC a\nDATA 1\nMETRIC a\nDATA 1",
                6,
                "a second series",
            ),
            ("PARAMETER p\nPOINTS 1 2", 0, "no DATA lines"),
            ("", 0, "no PARAMETER"),
        ];
        for (text, line, message) in cases {
            let error = parse(text).unwrap_err();
            assert_eq!(error.line, line, "{text:?}: {error}");
            assert!(error.message.contains(message), "{text:?}: {error}");
        }
    }
}
