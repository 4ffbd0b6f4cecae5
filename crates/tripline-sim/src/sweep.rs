//! Sweeps: the whole scenario again for each of several values of one field.
//!
//! Some stories are about a threshold, not a point: a metastable failure recovers below some
//! trigger size and not above it; a retry strategy's cost grows with the number of clients.
//! A `[sweep]` table names one field and its values; every variant runs once per value (the
//! scenario's own value first, in `runs`), and the report adds a table of a few figures, one
//! row per value and one column per variant.
//!
//! ```toml
//! [sweep]
//! field = "dependency.faults[0].until"   # a field of the scenario, as an error would name it
//! values = ["62s", "65s", "70s", "90s"]  # written as the field is
//! metrics = ["recovery_s"]               # the figures to compare
//! ```
//!
//! The fields that can be swept: `arrivals.count`, `arrivals.rate`, `duration`,
//! `dependency.capacity`, and `dependency.faults[N].from`, `.until`, `.capacity` and
//! `.error_rate`. The figures: see [`METRICS`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::report::RunReport;
use crate::scenario::{Bad, Scenario, bad};

/// The figures a sweep can compare, and what each is.
pub const METRICS: &[(&str, &str)] = &[
    ("requests", "requests that arrived"),
    ("succeeded", "requests answered with real data"),
    (
        "failed",
        "requests answered with an error after their attempts",
    ),
    ("rejected_fast", "requests refused by a local policy"),
    (
        "rejected_while_healthy",
        "requests refused although no fault touched them then",
    ),
    (
        "rejected_would_succeed",
        "requests refused although their call would have succeeded",
    ),
    ("shed", "requests shed by the worker pool"),
    ("dependency_calls", "calls that reached the dependency"),
    (
        "load_amplification",
        "calls that reached the dependency ÷ requests",
    ),
    ("completion_s", "when the last request was answered"),
    (
        "recovery_s",
        "from the end of the faults to the start of the healthy seconds that last to the end of the arrivals",
    ),
    (
        "pool_full_s",
        "seconds in which some replica's pool was full",
    ),
    ("retries", "retries made"),
    (
        "refused_in_faults",
        "of the requests answered while the faults lasted (refusals included, shed ones not), the percentage a local policy refused",
    ),
];

const UNKNOWN: &str = "must be one of the fields that can be swept:";
const FIELDS: &str = "arrivals.count, arrivals.rate, duration, dependency.capacity, dependency.faults[N].from, dependency.faults[N].until, dependency.faults[N].capacity, dependency.faults[N].error_rate";

/// The most values a sweep may list.
pub const MAX_VALUES: usize = 12;

/// A `[sweep]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sweep {
    /// The field, dotted (`dependency.faults[0].until`).
    pub field: String,
    /// Its values, written as the field is (numbers, or duration strings).
    pub values: Vec<toml::Value>,
    /// The figures to compare (default: `succeeded` and `dependency_calls`).
    #[serde(default = "default_metrics")]
    pub metrics: Vec<String>,
    /// Runs each value this many times, with the seeds `seed`, `seed + 1`, ..., and reports
    /// the figures' means (default 1; at most 100). A recovery that never came in some
    /// repetition is "never".
    #[serde(default = "one")]
    pub repeat: u32,
    /// What the table shows of the repetitions: `"mean"` (default), or `"median"`: the
    /// median with the lowest and highest value, and how many repetitions never recovered.
    /// The JSON has all of them either way.
    #[serde(default)]
    pub summary: Summary,
}

/// How a sweep's table sums up its repetitions.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Summary {
    /// The mean (a recovery that never came in some repetition makes it "never").
    #[default]
    Mean,
    /// The median and the range, a recovery that never came counting as the longest.
    Median,
}

fn one() -> u32 {
    1
}

fn default_metrics() -> Vec<String> {
    vec!["succeeded".into(), "dependency_calls".into()]
}

/// A value as the report shows it: `20`, `65s`.
pub fn label(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn as_u32(field: &str, v: &toml::Value) -> Result<u32, String> {
    v.as_integer()
        .and_then(|i| u32::try_from(i).ok())
        .ok_or_else(|| format!("{field} takes a whole number, got {v}"))
}

fn as_duration(field: &str, v: &toml::Value) -> Result<Duration, String> {
    let s = v
        .as_str()
        .ok_or_else(|| format!("{field} takes a duration string such as \"65s\", got {v}"))?;
    tripline::duration::parse(s)
        .map_err(|e| format!("{field} takes a duration string such as \"65s\", got {s:?} ({e})"))
}

/// The fault index of `dependency.faults[N].rest`.
fn fault_field(field: &str) -> Option<(usize, &str)> {
    let rest = field.strip_prefix("dependency.faults[")?;
    let close = rest.find(']')?;
    let i = rest[..close].parse().ok()?;
    Some((i, rest[close + 1..].strip_prefix('.')?))
}

impl Sweep {
    /// `base` with the field set to `value`, and no sweep of its own.
    fn apply(&self, base: &Scenario, value: &toml::Value) -> Result<Scenario, String> {
        let mut s = base.clone();
        s.sweep = None;
        let f = self.field.as_str();
        match f {
            "arrivals.count" => s.arrivals.count = Some(as_u32(f, value)?),
            "arrivals.rate" => {
                s.arrivals.rate = Some(
                    value
                        .as_float()
                        .or_else(|| value.as_integer().map(|i| i as f64))
                        .ok_or_else(|| format!("{f} takes a number, got {value}"))?,
                )
            }
            "duration" => s.duration = as_duration(f, value)?,
            "dependency.capacity" => s.dependency.capacity = Some(as_u32(f, value)?),
            _ => {
                let (i, rest) = fault_field(f).ok_or_else(|| self.unknown())?;
                let n = s.dependency.faults.len();
                let fault = s
                    .dependency
                    .faults
                    .get_mut(i)
                    .ok_or_else(|| format!("{f}: the scenario has {n} fault(s)"))?;
                match rest {
                    "from" => fault.from = as_duration(f, value)?,
                    "until" => fault.until = as_duration(f, value)?,
                    "capacity" => fault.capacity = Some(as_u32(f, value)?),
                    "error_rate" => {
                        fault.error_rate = Some(
                            crate::dist::Rate::deserialize(value.clone())
                                .map_err(|e| format!("{f} takes a rate: {}", e.message().trim()))?,
                        )
                    }
                    _ => return Err(self.unknown()),
                }
            }
        }
        Ok(s)
    }

    fn unknown(&self) -> String {
        format!("{UNKNOWN} {}", FIELDS)
    }

    /// Checks the sweep against its scenario: the field, each value (the scenario with it
    /// must be valid), and the metrics.
    pub(crate) fn check(&self, base: &Scenario) -> Result<(), Bad> {
        if self.values.is_empty() || self.values.len() > MAX_VALUES {
            return Err(bad(
                "sweep.values",
                self.values.len(),
                format!("must list 1 to {MAX_VALUES} values"),
            ));
        }
        for (i, m) in self.metrics.iter().enumerate() {
            if !METRICS.iter().any(|(n, _)| n == m) {
                return Err(bad(
                    format!("sweep.metrics[{i}]"),
                    format!("{m:?}"),
                    format!(
                        "must be one of {}",
                        METRICS
                            .iter()
                            .map(|(n, _)| *n)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        crate::scenario::range("sweep.repeat", self.repeat, 1, 100)?;
        if self.metrics.is_empty() || self.metrics.len() > 6 {
            return Err(bad(
                "sweep.metrics",
                self.metrics.len(),
                "must list 1 to 6 figures",
            ));
        }
        for (i, v) in self.values.iter().enumerate() {
            let s = self.apply(base, v).map_err(|e| {
                if e.starts_with(UNKNOWN) {
                    bad("sweep.field", format!("{:?}", self.field), e)
                } else {
                    bad(
                        format!("sweep.values[{i}]"),
                        label(v),
                        format!("must suit the field: {e}"),
                    )
                }
            })?;
            s.validate().map_err(|b| {
                bad(
                    format!("sweep.values[{i}]"),
                    label(v),
                    format!(
                        "must give a valid scenario (with it, {} {}, and it is {})",
                        b.field, b.allowed, b.value
                    ),
                )
            })?;
        }
        Ok(())
    }

    /// The scenario at each value, in order.
    pub fn points(&self, base: &Scenario) -> Vec<(String, Scenario)> {
        self.values
            .iter()
            .filter_map(|v| Some((label(v), self.apply(base, v).ok()?)))
            .collect()
    }
}

/// The median, lowest and highest of one figure over repetitions, and how many had none.
/// For `recovery_s` a repetition with none never recovered and counts as the longest (the
/// median is `None` when more than half never did, the highest when any never did); for the
/// other figures one with none is left out.
///
/// ```
/// use tripline_sim::sweep::spread;
/// let s = spread("recovery_s", &[Some(4.0), None, Some(1.0), Some(9.0), None]);
/// assert_eq!((s.median, s.low, s.high, s.missing), (Some(9.0), Some(1.0), None, 2));
/// let s = spread("succeeded", &[Some(4.0), None, Some(2.0)]);
/// assert_eq!((s.median, s.low, s.high, s.missing), (Some(3.0), Some(2.0), Some(4.0), 1));
/// ```
pub fn spread(name: &str, v: &[Option<f64>]) -> Spread {
    let missing = v.iter().filter(|x| x.is_none()).count() as u32;
    let never_is_longest = name == "recovery_s";
    let mut xs: Vec<f64> = if never_is_longest {
        v.iter().map(|x| x.unwrap_or(f64::INFINITY)).collect()
    } else {
        v.iter().flatten().copied().collect()
    };
    xs.sort_by(f64::total_cmp);
    let finite = |x: f64| x.is_finite().then_some(x);
    let median = match xs.len() {
        0 => None,
        n if n % 2 == 1 => finite(xs[n / 2]),
        n => finite((xs[n / 2 - 1] + xs[n / 2]) / 2.0),
    };
    Spread {
        median,
        low: xs.first().copied().and_then(finite),
        high: xs.last().copied().and_then(finite),
        missing,
    }
}

/// One figure's median and range over a sweep's repetitions ([`spread`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    /// The median (`None`: "never" for a recovery, else no repetition had the figure).
    pub median: Option<f64>,
    /// The lowest.
    pub low: Option<f64>,
    /// The highest (`None` for a recovery: some repetition never recovered).
    pub high: Option<f64>,
    /// Repetitions without the figure (for a recovery: that never recovered).
    pub missing: u32,
}

/// The mean of one figure over repetitions: `None` if any repetition has none.
pub fn mean(v: &[Option<f64>]) -> Option<f64> {
    let mut sum = 0.0;
    for x in v {
        sum += (*x)?;
    }
    (!v.is_empty()).then(|| sum / v.len() as f64)
}

/// One figure of one run, for the sweep table: `None` where it does not apply ("never" for
/// a recovery that did not come). `refused_in_faults` needs the faults' span: see
/// [`metric_in`].
pub fn metric(run: &RunReport, name: &str) -> Option<f64> {
    metric_in(run, name, None)
}

/// The percentage of the requests answered from `from_s` to `until_s` (by the second they
/// were answered in; refusals included, shed requests not) that a local policy refused.
///
/// ```
/// let s = tripline_sim::Scenario::load("fowler")?;
/// let r = tripline_sim::simulate(&s, None);
/// // One request a second; the breaker refuses 20 of the 25 during the faults.
/// let share = tripline_sim::sweep::refused_share(r.run("with").unwrap(), 5.0, 30.0).unwrap();
/// assert_eq!(share, 80.0);
/// # Ok::<(), tripline_sim::ScenarioError>(())
/// ```
pub fn refused_share(run: &RunReport, from_s: f64, until_s: f64) -> Option<f64> {
    let (mut refused, mut answered) = (0u64, 0u64);
    for (i, b) in run.series.bins.iter().enumerate() {
        let t = i as f64;
        if t >= from_s && t < until_s {
            refused += u64::from(b.rejected);
            answered += u64::from(b.succeeded) + u64::from(b.failed) + u64::from(b.rejected);
        }
    }
    (answered > 0).then(|| refused as f64 * 100.0 / answered as f64)
}

/// [`metric`], with the span of the scenario's faults (from the first fault's start to the
/// last one's end, in seconds) for `refused_in_faults`.
pub fn metric_in(run: &RunReport, name: &str, faults: Option<(f64, f64)>) -> Option<f64> {
    Some(match name {
        "requests" => run.requests as f64,
        "succeeded" => run.succeeded as f64,
        "failed" => run.failed as f64,
        "rejected_fast" => run.rejected_fast as f64,
        "rejected_while_healthy" => run.rejected_while_healthy as f64,
        "rejected_would_succeed" => return run.rejected_would_succeed.map(|v| v as f64),
        "shed" => run.shed as f64,
        "dependency_calls" => run.dependency_calls as f64,
        "load_amplification" => run.load_amplification,
        "completion_s" => return run.completion_s,
        "recovery_s" => return run.recovery_s,
        "pool_full_s" => f64::from(run.pool_full_s),
        "retries" => run.policies.retry.as_ref().map_or(0, |r| r.retries) as f64,
        "refused_in_faults" => {
            let (a, b) = faults?;
            return refused_share(run, a, b);
        }
        _ => return None,
    })
}

/// A sweep's results.
#[derive(Clone, Debug, Serialize)]
pub struct SweepReport {
    /// The field swept.
    pub field: String,
    /// The figures compared.
    pub metrics: Vec<String>,
    /// Runs per value (the figures are their means).
    pub repeat: u32,
    /// What the table shows of the repetitions.
    pub summary: Summary,
    /// One point per value, in order.
    pub points: Vec<SweepPoint>,
}

/// The runs at one value of a sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    /// The value, as written (`65s`).
    pub value: String,
    /// Each run's figures, "without" first, in the order of `metrics`.
    pub runs: Vec<SweepRun>,
}

/// One run's figures at one value.
#[derive(Clone, Debug, Serialize)]
pub struct SweepRun {
    /// The run's label.
    pub label: String,
    /// The figures, in the order of the sweep's `metrics` (`null`: does not apply, or a
    /// recovery that never came): their means over the repetitions.
    pub figures: Vec<Option<f64>>,
    /// Each figure's median and range over the repetitions, in the same order.
    pub spread: Vec<Spread>,
}

/// How a sweep's table sums up its repetitions, in words: "" for one run per value, else
/// " (30 seeds each: means)" or " (11 seeds each: median [lowest – highest])".
pub fn repeat_note(sw: &SweepReport) -> String {
    match (sw.repeat, sw.summary) {
        (1, _) => String::new(),
        (n, Summary::Mean) => format!(" ({n} seeds each: means)"),
        (n, Summary::Median) => format!(" ({n} seeds each: median [lowest – highest])"),
    }
}

/// Formats a figure's spread over `repeat` repetitions for a sweep table: "13 s [6 s – never,
/// 3 of 11 never]".
pub fn fmt_spread(name: &str, s: &Spread, repeat: u32) -> String {
    let never = name == "recovery_s";
    let mut out = fmt_metric(name, s.median);
    if repeat > 1 {
        let hi = if never && s.missing > 0 {
            "never".to_string()
        } else {
            fmt_metric(name, s.high)
        };
        out.push_str(&format!(" [{} – {hi}", fmt_metric(name, s.low)));
        if never && s.missing > 0 && s.missing < repeat {
            out.push_str(&format!(", {} of {repeat} never", s.missing));
        }
        out.push(']');
    }
    out
}

/// Formats a figure for the sweep table.
pub fn fmt_metric(name: &str, v: Option<f64>) -> String {
    match (name, v) {
        ("recovery_s", None) => "never".into(),
        (_, None) => "—".into(),
        ("completion_s" | "recovery_s", Some(x)) if x < 10.0 => format!("{x:.2} s"),
        ("completion_s" | "recovery_s", Some(x)) => format!("{x:.1} s"),
        ("load_amplification", Some(x)) => format!("{x:.2}×"),
        ("refused_in_faults", Some(x)) => format!("{x:.1} %"),
        (_, Some(x)) if x.fract() == 0.0 || x >= 100.0 => format!("{x:.0}"),
        (_, Some(x)) => format!("{x:.1}"),
    }
}
