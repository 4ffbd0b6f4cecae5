//! Choosing a configuration from a trace (`tripline tune`).
//!
//! The search replays the trace (see [`crate::replay`]) against candidate configurations
//! drawn from a [`Space`]: window kind and size, minimum calls, the failure-rate and
//! slow-call-rate thresholds, the slow-call duration, the open duration, the half-open probes
//! and their policy. Each dimension is a short ladder of values within the space's bounds
//! (thresholds in steps of 5 %, durations and counts on a 1-2-5 ladder). Half the budget goes
//! to candidates drawn at random, the rest to neighbours (one or two rungs away on one or two
//! dimensions) of the Pareto front found so far, batch by batch; every batch is replayed in
//! parallel, and since each batch depends only on the seed and the figures of the batches
//! before it, a search is reproducible for a given trace, space and seed.
//!
//! Each candidate is scored on two costs, both counted in calls: **bad calls admitted** while
//! the dependency was bad (failed, or at least the bad latency: the cost of reacting slowly)
//! and **healthy calls refused** (refused calls that succeeded faster than the bad latency:
//! the cost of the protection). A call is bad by what the trace says it did: a success that
//! took at least the bad latency is a bad call when it is admitted and a bad call spared when
//! it is refused, never a healthy call refused, so an incident in which every call succeeds
//! slowly weighs as much as one in which they fail. The Pareto front holds the candidates no
//! other beats on both; the chosen one minimises `bad + weight × healthy` (weight 1 by
//! default), then the mean time to trip, among those that trip within `max_time_to_trip` in
//! every incident, when that is set ([`TuneReport::nearest`] names the nearest when none
//! does).
//!
//! **Validation.** With a [`Holdout`] the search sees only the calls before a split, and the
//! choice is replayed on the calls after it ([`TuneReport::held_out`]): figures it was not
//! chosen on, to set beside the fit. **Settings the trace does not constrain** (every value
//! tried gives the same figures: the slow-call settings on a trace of fast errors) keep the
//! value in force ([`TuneOptions::keep`], else tripline's default) and are named
//! ([`TuneReport::unconstrained`]), instead of whatever the search happened to draw. A trace
//! (or fitted part) with no incident is refused: nothing can be learned from it.
//!
//! The chosen configuration is written as TOML that
//! [`BreakerConfig`] reads as is, one `key = value` line per field,
//! so the same lines also read under a registry's `[configs.NAME]` header ([`to_toml`]).
//!
//! ```
//! use tripline_sim::replay::{prepare, ReplayOptions};
//! use tripline_sim::tune::{tune, Space, TuneOptions};
//! use tripline::trace::{read, ReadOptions};
//!
//! let mut text = String::from("start,duration_ms,outcome\n");
//! for i in 0..6000u64 {
//!     let t = i * 10; // 100 calls a second for a minute, failing from 20 s to 40 s
//!     let outcome = if (20_000..40_000).contains(&t) { "failure" } else { "success" };
//!     text.push_str(&format!("{t},5,{outcome}\n"));
//! }
//! let trace = read(text.as_bytes(), &ReadOptions::default()).unwrap();
//! let prepared = prepare(&trace, &ReplayOptions::default()).unwrap();
//! let opts = TuneOptions { budget: 48, ..TuneOptions::default() };
//! let r = tune(&prepared, &Space::default(), &opts, &ReplayOptions::default(), &|_| {}).unwrap();
//! let chosen = &r.chosen.replay.totals;
//! assert!(chosen.max_time_to_trip_s.unwrap() < 1.0);
//! assert!(chosen.figures.rejected_healthy < 500);
//! // The calls are all fast: the slow-call settings keep tripline's defaults.
//! assert!(r.unconstrained.iter().any(|u| u.setting == "slow_call_duration"));
//! let config: tripline::BreakerConfig = toml::from_str(&r.chosen.replay.config).unwrap();
//! assert_eq!(config, r.chosen.config);
//! ```

use std::collections::HashSet;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};
use tripline::{BreakerConfig, HalfOpenPolicy, WindowConfig};

use crate::dist::fmt_d;
use crate::replay::{Candidate, ConfigReplay, Prepared, ReplayOptions, replay};

/// Writes a configuration as TOML, one `field = value` line per field (nested tables inline),
/// so the text reads as a [`BreakerConfig`] and, under a `[configs.NAME]` header, as one of a
/// registry's configurations.
///
/// ```
/// use tripline::BreakerConfig;
/// use tripline::registry::RegistryConfig;
///
/// let c = BreakerConfig::builder().count_window(20).minimum_calls(10).build().unwrap();
/// let text = tripline_sim::tune::to_toml(&c);
/// assert!(text.contains("window = { kind = \"count\", size = 20 }"));
/// assert_eq!(toml::from_str::<BreakerConfig>(&text).unwrap(), c);
/// let registry = format!("[configs.catalog]\n{text}\n[dependencies]\ncatalog = \"catalog\"\n");
/// assert!(RegistryConfig::from_toml(&registry).is_ok());
/// ```
pub fn to_toml(c: &BreakerConfig) -> String {
    let table = match toml::Table::try_from(c) {
        Ok(t) => t,
        Err(e) => return format!("# cannot write the configuration: {e}\n"),
    };
    let mut s = String::new();
    for (k, v) in &table {
        s.push_str(k);
        s.push_str(" = ");
        s.push_str(&inline(v));
        s.push('\n');
    }
    s
}

fn inline(v: &toml::Value) -> String {
    match v {
        toml::Value::Table(t) => {
            let parts: Vec<String> = t
                .iter()
                .map(|(k, v)| format!("{k} = {}", inline(v)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
        toml::Value::Array(a) => {
            let parts: Vec<String> = a.iter().map(inline).collect();
            format!("[{}]", parts.join(", "))
        }
        other => other.to_string(),
    }
}

/// The bounds of a search. Read from TOML (`tripline tune --space FILE`; `tripline tune
/// --show-space` prints the defaults); every field is optional.
///
/// ```
/// use tripline_sim::tune::Space;
/// let s = Space::from_toml("count_windows = [20, 50]\nopen_duration = [\"5s\", \"30s\"]\n").unwrap();
/// assert_eq!(s.count_windows, [20, 50]);
/// let e = Space::from_toml("failure_rate = [0, 50]").unwrap_err();
/// assert_eq!(e, "failure_rate must be two percentages lo <= hi in (0, 100], got [0, 50]");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Space {
    /// Count windows to try (sizes; empty: none).
    pub count_windows: Vec<u32>,
    /// Time windows to try (lengths, 1 s buckets where they divide; empty: none).
    pub time_windows: Vec<Duration>,
    /// Minimum calls, [lo, hi] (capped at a count window's size).
    pub minimum_calls: [u32; 2],
    /// Failure-rate threshold, percent.
    pub failure_rate: [f64; 2],
    /// Slow-call-rate threshold, percent.
    pub slow_call_rate: [f64; 2],
    /// Slow-call duration.
    pub slow_call_duration: [Duration; 2],
    /// Open duration.
    pub open_duration: [Duration; 2],
    /// Half-open probes.
    pub half_open_calls: [u32; 2],
    /// Half-open policies to try.
    pub policies: Vec<HalfOpenPolicy>,
    /// The failure-count-in-time rule's counts to try (Semian's `error_threshold`), each with
    /// every time of [`failure_count_within`](Self::failure_count_within), beside the rule
    /// off. Empty by default: the rule stays off and the search is the one without it (the
    /// same candidates, drawn in the same order); `failure_counts = [3, 5, 12, 20]` in a space
    /// file searches it too.
    pub failure_counts: Vec<u32>,
    /// The failure-count rule's times to try (Semian's `error_threshold_timeout`).
    pub failure_count_within: Vec<Duration>,
}

impl Default for Space {
    fn default() -> Self {
        Self {
            count_windows: vec![10, 20, 50, 100, 200],
            time_windows: vec![
                Duration::from_secs(5),
                Duration::from_secs(10),
                Duration::from_secs(30),
                Duration::from_secs(60),
            ],
            minimum_calls: [5, 100],
            failure_rate: [20.0, 90.0],
            slow_call_rate: [20.0, 100.0],
            slow_call_duration: [Duration::from_millis(250), Duration::from_secs(10)],
            open_duration: [Duration::from_secs(1), Duration::from_secs(60)],
            half_open_calls: [1, 10],
            policies: vec![HalfOpenPolicy::Consecutive, HalfOpenPolicy::AllProbes],
            failure_counts: Vec::new(),
            failure_count_within: vec![
                Duration::from_secs(10),
                Duration::from_secs(20),
                Duration::from_secs(60),
            ],
        }
    }
}

#[derive(Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSpace {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    count_windows: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    time_windows: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    minimum_calls: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure_rate: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slow_call_rate: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    slow_call_duration: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open_duration: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    half_open_calls: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    policies: Option<Vec<HalfOpenPolicy>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure_counts: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure_count_within: Option<Vec<String>>,
}

fn pair<T: Copy + PartialOrd + std::fmt::Debug>(
    field: &str,
    v: Option<Vec<T>>,
    default: [T; 2],
    ok: impl Fn(T) -> bool,
    what: &str,
) -> Result<[T; 2], String> {
    match v {
        None => Ok(default),
        Some(v) if v.len() == 2 && v[0] <= v[1] && ok(v[0]) && ok(v[1]) => Ok([v[0], v[1]]),
        Some(v) => {
            let (noun, range) = what.split_once(' ').unwrap_or((what, ""));
            Err(format!(
                "{field} must be two {noun} lo <= hi {range}, got {}",
                format!("{v:?}").replace(".0", "")
            ))
        }
    }
}

fn durations(field: &str, v: &[String]) -> Result<Vec<Duration>, String> {
    v.iter()
        .map(|s| {
            tripline::duration::parse(s)
                .map_err(|e| format!("{field} must hold durations such as \"10s\", got {s:?}: {e}"))
        })
        .collect()
}

impl Space {
    /// Reads bounds from TOML; absent fields keep the defaults.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let raw: RawSpace = toml::from_str(text).map_err(|e| e.to_string())?;
        let d = Space::default();
        let dur_pair = |field: &str, v: Option<Vec<String>>, def: [Duration; 2]| match v {
            None => Ok(def),
            Some(v) => {
                let parsed = durations(field, &v)?;
                if parsed.len() == 2
                    && parsed[0] <= parsed[1]
                    && parsed[0] >= Duration::from_millis(1)
                    && parsed[1] <= Duration::from_secs(7 * 24 * 3600)
                {
                    Ok([parsed[0], parsed[1]])
                } else {
                    Err(format!(
                        "{field} must be two durations lo <= hi in [1ms, 7 days], got {v:?}"
                    ))
                }
            }
        };
        let s = Space {
            count_windows: match raw.count_windows {
                None => d.count_windows,
                Some(v) if v.iter().all(|&n| (1..=1_000_000).contains(&n)) => v,
                Some(v) => {
                    return Err(format!(
                        "count_windows must hold sizes in [1, 1000000], got {v:?}"
                    ));
                }
            },
            time_windows: match raw.time_windows {
                None => d.time_windows,
                Some(v) => {
                    let w = durations("time_windows", &v)?;
                    if let Some(bad) = w.iter().find(|l| {
                        **l < Duration::from_millis(10) || **l > Duration::from_secs(3600)
                    }) {
                        return Err(format!(
                            "time_windows must hold lengths in [10ms, 1h], got {}",
                            fmt_d(*bad)
                        ));
                    }
                    w
                }
            },
            minimum_calls: pair(
                "minimum_calls",
                raw.minimum_calls,
                d.minimum_calls,
                |n| (1..=1_000_000).contains(&n),
                "counts in [1, 1000000]",
            )?,
            failure_rate: pair(
                "failure_rate",
                raw.failure_rate,
                d.failure_rate,
                |p| p > 0.0 && p <= 100.0,
                "percentages in (0, 100]",
            )?,
            slow_call_rate: pair(
                "slow_call_rate",
                raw.slow_call_rate,
                d.slow_call_rate,
                |p| p > 0.0 && p <= 100.0,
                "percentages in (0, 100]",
            )?,
            slow_call_duration: dur_pair(
                "slow_call_duration",
                raw.slow_call_duration,
                d.slow_call_duration,
            )?,
            open_duration: dur_pair("open_duration", raw.open_duration, d.open_duration)?,
            half_open_calls: pair(
                "half_open_calls",
                raw.half_open_calls,
                d.half_open_calls,
                |n| (1..=1000).contains(&n),
                "counts in [1, 1000]",
            )?,
            policies: match raw.policies {
                None => d.policies,
                Some(v) if !v.is_empty() => v,
                Some(_) => return Err("policies must name at least one policy".into()),
            },
            failure_counts: match raw.failure_counts {
                None => d.failure_counts,
                Some(v)
                    if v.iter()
                        .all(|n| (1..=tripline::FailureCount::MAX).contains(n)) =>
                {
                    v
                }
                Some(v) => {
                    return Err(format!(
                        "failure_counts must hold counts in [1, {}], got {v:?}",
                        tripline::FailureCount::MAX
                    ));
                }
            },
            failure_count_within: match raw.failure_count_within {
                None => d.failure_count_within,
                Some(v) => {
                    let w = durations("failure_count_within", &v)?;
                    if w.is_empty() {
                        return Err("failure_count_within must hold at least one time (set failure_counts = [] to leave the rule off)".into());
                    }
                    if let Some(bad) = w.iter().find(|l| {
                        **l < Duration::from_millis(1) || **l > Duration::from_secs(7 * 24 * 3600)
                    }) {
                        return Err(format!(
                            "failure_count_within must hold times in [1ms, 7 days], got {}",
                            fmt_d(*bad)
                        ));
                    }
                    w
                }
            },
        };
        if s.count_windows.is_empty() && s.time_windows.is_empty() {
            return Err("count_windows and time_windows cannot both be empty".into());
        }
        Ok(s)
    }

    /// The bounds as TOML (what `tripline tune --show-space` prints).
    pub fn to_toml(&self) -> String {
        let d = |v: &[Duration]| {
            v.iter()
                .map(|d| format!("{:?}", fmt_d(*d)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let policies: Vec<String> = self
            .policies
            .iter()
            .map(|p| match p {
                HalfOpenPolicy::AllProbes => "\"all-probes\"".to_string(),
                _ => "\"consecutive\"".to_string(),
            })
            .collect();
        format!(
            "# The bounds of `tripline tune`; every field is optional.\n\
             count_windows = {:?}          # sizes of count windows to try ([] for none)\n\
             time_windows = [{}]    # lengths of time windows (1 s buckets)\n\
             minimum_calls = {:?}              # [lo, hi], capped at a count window's size\n\
             failure_rate = {:?}             # percent, [lo, hi], in steps of 5\n\
             slow_call_rate = {:?}\n\
             slow_call_duration = [{}]\n\
             open_duration = [{}]\n\
             half_open_calls = {:?}\n\
             policies = [{}]\n\
             failure_counts = {:?}           # the failure-count rule's counts to try beside it off ([]: off)\n\
             failure_count_within = [{}]   # each count with each of these times\n",
            self.count_windows,
            d(&self.time_windows),
            self.minimum_calls,
            self.failure_rate,
            self.slow_call_rate,
            d(&self.slow_call_duration),
            d(&self.open_duration),
            self.half_open_calls,
            policies.join(", "),
            self.failure_counts,
            d(&self.failure_count_within)
        )
    }

    fn ladders(&self) -> Ladders {
        let ladder_u = |[lo, hi]: [u32; 2]| {
            let mut v: Vec<u32> = NICE
                .iter()
                .map(|&x| x as u32)
                .filter(|&x| x >= lo && x <= hi)
                .collect();
            v.push(lo);
            v.push(hi);
            v.sort_unstable();
            v.dedup();
            v
        };
        let ladder_d = |[lo, hi]: [Duration; 2]| {
            let mut v: Vec<Duration> = NICE
                .iter()
                .flat_map(|&x| [Duration::from_millis(x), Duration::from_secs(x)])
                .filter(|&x| x >= lo && x <= hi)
                .collect();
            v.push(lo);
            v.push(hi);
            v.sort_unstable();
            v.dedup();
            v
        };
        let ladder_p = |[lo, hi]: [f64; 2]| {
            let mut v: Vec<f64> = (1..=20)
                .map(|i| f64::from(i) * 5.0)
                .filter(|&x| x >= lo && x <= hi)
                .collect();
            v.push(lo);
            v.push(hi);
            v.sort_by(f64::total_cmp);
            v.dedup();
            v
        };
        let mut windows: Vec<WindowConfig> = self
            .count_windows
            .iter()
            .map(|&size| WindowConfig::Count { size })
            .collect();
        for &length in &self.time_windows {
            let bucket =
                if length >= Duration::from_secs(2) && length.as_nanos() % 1_000_000_000 == 0 {
                    Duration::from_secs(1)
                } else {
                    length / 10
                };
            windows.push(WindowConfig::Time { length, bucket });
        }
        let probes: Vec<u32> = (self.half_open_calls[0]..=self.half_open_calls[1]).collect();
        // Off first, then from the loosest rule (most failures, the shortest time) on.
        let mut counts = self.failure_counts.clone();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        counts.dedup();
        let mut within = self.failure_count_within.clone();
        within.sort_unstable();
        within.dedup();
        let mut failure_count = vec![None];
        for &n in &counts {
            for &w in &within {
                failure_count.push(Some((n, w)));
            }
        }
        Ladders {
            windows,
            minimum_calls: ladder_u(self.minimum_calls),
            failure_rate: ladder_p(self.failure_rate),
            slow_call_rate: ladder_p(self.slow_call_rate),
            slow_call_duration: ladder_d(self.slow_call_duration),
            open_duration: ladder_d(self.open_duration),
            probes,
            policies: self.policies.clone(),
            failure_count,
        }
    }
}

/// 1-2-5 (with 3 and 15 for the breaker's usual counts and waits).
const NICE: [u64; 16] = [
    1, 2, 3, 5, 10, 15, 20, 30, 50, 100, 200, 300, 500, 1000, 2000, 5000,
];

struct Ladders {
    windows: Vec<WindowConfig>,
    minimum_calls: Vec<u32>,
    failure_rate: Vec<f64>,
    slow_call_rate: Vec<f64>,
    slow_call_duration: Vec<Duration>,
    open_duration: Vec<Duration>,
    probes: Vec<u32>,
    policies: Vec<HalfOpenPolicy>,
    failure_count: Vec<Option<(u32, Duration)>>,
}

const DIMS: usize = 9;
type Genome = [u16; DIMS];

/// The settings the search chooses, by their names in a breaker's TOML, in the order of a
/// genome's dimensions.
pub const SETTINGS: [&str; DIMS] = [
    "window",
    "minimum_calls",
    "failure_rate_threshold",
    "slow_call_rate_threshold",
    "slow_call_duration",
    "open.duration",
    "half_open.permitted_calls",
    "half_open.policy",
    "failure_count",
];

/// The nine values the search chooses; the rest of a configuration keeps the builder's
/// defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Settings {
    window: WindowConfig,
    minimum_calls: u32,
    failure_rate: f64,
    slow_call_rate: f64,
    slow_call_duration: Duration,
    open_duration: Duration,
    probes: u32,
    policy: HalfOpenPolicy,
    failure_count: Option<(u32, Duration)>,
}

impl Settings {
    fn of(c: &BreakerConfig) -> Self {
        Self {
            window: c.window(),
            minimum_calls: c.minimum_calls(),
            failure_rate: c.failure_rate_threshold(),
            slow_call_rate: c.slow_call_rate_threshold(),
            slow_call_duration: c.slow_call_duration(),
            open_duration: c.open_duration(),
            probes: c.half_open_calls(),
            policy: c.half_open_policy(),
            failure_count: c.failure_count().map(|f| (f.failures, f.within)),
        }
    }

    fn build(&self) -> Option<BreakerConfig> {
        let mut min = self.minimum_calls;
        if let WindowConfig::Count { size } = self.window {
            min = min.min(size);
        }
        let mut b = BreakerConfig::builder();
        if let Some((n, within)) = self.failure_count {
            b = b.failure_count(n, within);
        }
        b.window(self.window)
            .minimum_calls(min)
            .failure_rate_threshold(self.failure_rate)
            .slow_call_rate_threshold(self.slow_call_rate)
            .slow_call_duration(self.slow_call_duration)
            .open_duration(self.open_duration)
            .half_open_calls(self.probes)
            .half_open_policy(self.policy)
            .build()
            .ok()
    }

    /// These settings with dimension `d` taken from `other`.
    fn with(&self, d: usize, other: &Settings) -> Settings {
        let mut s = *self;
        match d {
            0 => s.window = other.window,
            1 => s.minimum_calls = other.minimum_calls,
            2 => s.failure_rate = other.failure_rate,
            3 => s.slow_call_rate = other.slow_call_rate,
            4 => s.slow_call_duration = other.slow_call_duration,
            5 => s.open_duration = other.open_duration,
            6 => s.probes = other.probes,
            7 => s.policy = other.policy,
            _ => s.failure_count = other.failure_count,
        }
        s
    }

    /// Dimension `d`'s value, as a breaker's TOML writes it.
    fn show(&self, d: usize) -> String {
        match d {
            0 => match self.window {
                WindowConfig::Count { size } => format!("count {size}"),
                WindowConfig::Time { length, .. } => format!("time {}", fmt_d(length)),
            },
            1 => self.minimum_calls.to_string(),
            2 => format!("{}", self.failure_rate),
            3 => format!("{}", self.slow_call_rate),
            4 => format!("{:?}", fmt_d(self.slow_call_duration)),
            5 => format!("{:?}", fmt_d(self.open_duration)),
            6 => self.probes.to_string(),
            7 => match self.policy {
                HalfOpenPolicy::AllProbes => "\"all-probes\"".into(),
                _ => "\"consecutive\"".into(),
            },
            _ => match self.failure_count {
                None => "off".into(),
                Some((n, w)) => format!("{{ failures = {n}, within = {:?} }}", fmt_d(w)),
            },
        }
    }
}

impl Ladders {
    fn lens(&self) -> [usize; DIMS] {
        [
            self.windows.len(),
            self.minimum_calls.len(),
            self.failure_rate.len(),
            self.slow_call_rate.len(),
            self.slow_call_duration.len(),
            self.open_duration.len(),
            self.probes.len(),
            self.policies.len(),
            self.failure_count.len(),
        ]
    }

    fn settings(&self, g: &Genome) -> Settings {
        Settings {
            window: self.windows[g[0] as usize],
            minimum_calls: self.minimum_calls[g[1] as usize],
            failure_rate: self.failure_rate[g[2] as usize],
            slow_call_rate: self.slow_call_rate[g[3] as usize],
            slow_call_duration: self.slow_call_duration[g[4] as usize],
            open_duration: self.open_duration[g[5] as usize],
            probes: self.probes[g[6] as usize],
            policy: self.policies[g[7] as usize],
            failure_count: self.failure_count[g[8] as usize],
        }
    }

    fn config(&self, g: &Genome) -> Option<BreakerConfig> {
        self.settings(g).build()
    }

    /// How many genomes the space holds (saturating).
    fn size(&self) -> usize {
        self.lens().iter().fold(1usize, |n, &l| n.saturating_mul(l))
    }

    /// The `i`-th genome of the space, for `i < size()` (mixed radix, first dimension fastest).
    fn nth(&self, mut i: usize) -> Genome {
        let mut g = [0u16; DIMS];
        for (x, n) in g.iter_mut().zip(self.lens()) {
            *x = (i % n) as u16;
            i /= n;
        }
        g
    }

    /// The dimensions a search draws: the last one (the failure-count rule) only when it is
    /// searched, so that a space without it draws exactly as it did before the rule existed.
    fn drawn(&self) -> usize {
        if self.failure_count.len() > 1 {
            DIMS
        } else {
            DIMS - 1
        }
    }

    fn random(&self, rng: &mut Pcg64Mcg) -> Genome {
        let lens = self.lens();
        let mut g = [0u16; DIMS];
        for (x, n) in g.iter_mut().zip(lens).take(self.drawn()) {
            *x = rng.random_range(0..n) as u16;
        }
        g
    }

    fn neighbour(&self, g: &Genome, rng: &mut Pcg64Mcg) -> Genome {
        let lens = self.lens();
        let mut out = *g;
        let changes = rng.random_range(1..=2);
        for _ in 0..changes {
            let d = rng.random_range(0..self.drawn());
            if lens[d] <= 1 {
                continue;
            }
            let step: i32 = rng.random_range(1..=2) * if rng.random::<bool>() { 1 } else { -1 };
            let v = (i32::from(out[d]) + step).clamp(0, lens[d] as i32 - 1);
            out[d] = v as u16;
        }
        out
    }
}

/// The largest budget a search takes: a million replays of a trace (hours on a large one),
/// and the candidates' results held in memory for the Pareto front.
pub const MAX_BUDGET: usize = 1_000_000;

/// Which part of the trace the choice is checked on, after it was made on the rest.
///
/// ```
/// use tripline_sim::tune::Holdout;
/// assert_eq!(Holdout::from_arg("30%").unwrap(), Holdout::Share(0.3));
/// assert_eq!(Holdout::from_arg("0").unwrap(), Holdout::None);
/// assert_eq!(Holdout::from_arg("600s").unwrap(), Holdout::From(std::time::Duration::from_secs(600)));
/// assert!(Holdout::from_arg("100%").is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Holdout {
    /// Choose on the whole trace; nothing is checked.
    None,
    /// Hold out the last share of the trace's span, in (0, 1). The split keeps clear of the
    /// incidents and of the longest open duration after each ([`split_point`]), so that no
    /// incident is cut in two and what staying open after one costs counts with it.
    Share(f64),
    /// Hold out every call that starts from this time on (from the trace's origin), as given.
    From(Duration),
}

impl Holdout {
    /// Reads `--holdout`: `0` (none), a share (`30%`, `0.3`), or a time (`600s`).
    pub fn from_arg(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad = || {
            format!(
                "--holdout must be 0 (none), a share of the trace in (0, 1) such as 30% or 0.3, \
                 or a time from the trace's origin such as 600s, got {s:?}"
            )
        };
        let share = if let Some(p) = s.strip_suffix('%') {
            p.trim().parse::<f64>().map(|p| p / 100.0).ok()
        } else {
            s.parse::<f64>().ok()
        };
        match share {
            Some(0.0) => Ok(Holdout::None),
            Some(x) if x > 0.0 && x < 1.0 => Ok(Holdout::Share(x)),
            Some(_) => Err(bad()),
            None => tripline::duration::parse(s)
                .map(Holdout::From)
                .map_err(|_| bad()),
        }
    }
}

/// Where the held-out part of `p` starts, if anything is held out (see [`Holdout`]).
///
/// For a [`Holdout::Share`] the split keeps clear of every incident and of the `tail` after
/// it (the longest open duration the search may choose, and a little more), so that what a
/// configuration costs by staying open after an incident counts in the part that holds the
/// incident: a split that falls in an incident or its tail moves back to the incident's
/// start when an incident (with its tail) is left before it, else forward past the tail. A
/// [`Holdout::From`] is taken as given.
///
/// ```
/// use std::time::Duration;
/// use tripline_sim::replay::{prepare, ReplayOptions};
/// use tripline_sim::tune::{split_point, Holdout};
/// use tripline::trace::{read, ReadOptions};
///
/// // 100 s; failing from 60 s to 80 s.
/// let mut text = String::from("start,duration_ms,outcome\n");
/// for i in 0..1000u64 {
///     let outcome = if (600..800).contains(&i) { "failure" } else { "success" };
///     text.push_str(&format!("{},5,{outcome}\n", i * 100));
/// }
/// let trace = read(text.as_bytes(), &ReadOptions::default()).unwrap();
/// let p = prepare(&trace, &ReplayOptions::default()).unwrap();
/// // 30 % held out would split at 70 s, inside the incident, which has nothing before it:
/// // the split moves past the incident and a tail of 5 s.
/// let tail = Duration::from_secs(5);
/// assert_eq!(split_point(&p, Holdout::Share(0.3), tail), Some(Duration::from_secs(85)));
/// assert_eq!(split_point(&p, Holdout::None, tail), None);
/// ```
pub fn split_point(p: &Prepared, holdout: Holdout, tail: Duration) -> Option<Duration> {
    match holdout {
        Holdout::None => None,
        Holdout::From(at) => Some(at),
        Holdout::Share(share) => {
            let tail = tail.as_secs_f64();
            let mut busy: Vec<(f64, f64)> = p
                .incidents()
                .iter()
                .map(|i| (i.start_s, i.end_s + tail))
                .collect();
            busy.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut merged: Vec<(f64, f64)> = Vec::new();
            for (a, b) in busy {
                match merged.last_mut() {
                    Some(last) if a <= last.1 => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            let at = p.span.as_secs_f64() * (1.0 - share);
            let at = match merged.iter().position(|&(a, b)| a < at && at < b) {
                None => at,
                Some(k) if k > 0 => merged[k].0,
                Some(k) => merged[k].1,
            };
            Some(Duration::from_secs_f64(at.max(0.0)))
        }
    }
}

/// The tail a share's split keeps clear after each incident: the longest open duration the
/// space allows, and 5 s.
pub fn holdout_tail(space: &Space) -> Duration {
    space.open_duration[1] + Duration::from_secs(5)
}

/// How a search runs.
///
/// ```
/// let o = tripline_sim::tune::TuneOptions::default();
/// assert_eq!((o.budget, o.healthy_weight), (256, 1.0));
/// assert_eq!(o.holdout, tripline_sim::tune::Holdout::None);
/// ```
#[derive(Clone, Debug)]
pub struct TuneOptions {
    /// Candidates to replay in all, in [1, [`MAX_BUDGET`]].
    pub budget: usize,
    /// The search's seed (candidates drawn, neighbours picked).
    pub seed: u64,
    /// What a healthy call refused costs, in bad calls admitted.
    pub healthy_weight: f64,
    /// Only candidates that trip within this in every incident may be chosen.
    pub max_time_to_trip: Option<Duration>,
    /// The part of the trace held out to check the choice on (default: none; `tripline
    /// tune` holds out 30 %).
    pub holdout: Holdout,
    /// The configuration in force, whose values the choice keeps for the settings the trace
    /// does not constrain (default: tripline's defaults, [`BreakerConfig::default`]).
    pub keep: Option<BreakerConfig>,
}

impl Default for TuneOptions {
    fn default() -> Self {
        Self {
            budget: 256,
            seed: 0,
            healthy_weight: 1.0,
            max_time_to_trip: None,
            holdout: Holdout::None,
            keep: None,
        }
    }
}

/// One evaluated candidate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Evaluated {
    /// Its number in the search, in the order candidates were drawn.
    pub index: usize,
    /// The configuration.
    #[serde(skip)]
    pub config: BreakerConfig,
    /// Its replay.
    pub replay: ConfigReplay,
    /// `bad + weight × healthy`.
    pub cost: f64,
    /// Whether it met `max_time_to_trip` (true when none was set).
    pub eligible: bool,
}

/// A setting the trace does not constrain: every value tried gave the same figures, so the
/// choice keeps the value in force there.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Unconstrained {
    /// The setting, by its name in a breaker's TOML ([`SETTINGS`]).
    pub setting: &'static str,
    /// The value the search had picked.
    pub searched: String,
    /// The value kept (the configuration in force's, or tripline's default).
    pub kept: String,
}

/// What a search found.
#[derive(Clone, Debug, Serialize)]
pub struct TuneReport {
    /// Candidates replayed.
    pub evaluated: usize,
    /// The Pareto front of bad calls admitted against healthy calls refused, by bad calls,
    /// on the part of the trace the choice was made on.
    pub front: Vec<Evaluated>,
    /// The chosen candidate (with the values kept where the trace says nothing: see
    /// `unconstrained`), and its figures on the part the choice was made on.
    pub chosen: Evaluated,
    /// Incidents in the part the choice was made on.
    pub incidents: u64,
    /// Where the held-out part starts, in seconds from the trace's origin (`None`: nothing
    /// was held out).
    pub held_out_from_s: Option<f64>,
    /// The chosen configuration replayed on the held-out part: figures it was not chosen on.
    pub held_out: Option<ConfigReplay>,
    /// The settings the trace does not constrain, kept at the values in force.
    pub unconstrained: Vec<Unconstrained>,
    /// Candidates that met `max_time_to_trip` (all of them when it is not set).
    pub eligible: usize,
    /// When `max_time_to_trip` is set and no candidate met it: the nearest one (the most
    /// incidents tripped, then the shortest longest time to trip, then the lowest cost). The
    /// choice is then the cheapest candidate, which did not meet it either.
    pub nearest: Option<Evaluated>,
}

fn bad(e: &ConfigReplay) -> u64 {
    e.totals.figures.bad_admitted
}

fn healthy(e: &ConfigReplay) -> u64 {
    e.totals.figures.rejected_healthy
}

fn ttt(e: &ConfigReplay) -> f64 {
    e.totals.mean_time_to_trip_s.unwrap_or(f64::INFINITY)
}

fn cost(r: &ConfigReplay, opts: &TuneOptions) -> f64 {
    bad(r) as f64 + opts.healthy_weight * healthy(r) as f64
}

fn eligible(r: &ConfigReplay, opts: &TuneOptions) -> bool {
    opts.max_time_to_trip.is_none_or(|m| {
        r.totals.incidents_tripped == r.totals.incidents
            && r.totals
                .max_time_to_trip_s
                .is_none_or(|t| t <= m.as_secs_f64())
    })
}

/// The candidates that no other beats on both costs, by bad calls admitted (ties: the first
/// drawn).
fn pareto(all: &[Evaluated]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..all.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&all[a].replay, &all[b].replay);
        bad(x)
            .cmp(&bad(y))
            .then(healthy(x).cmp(&healthy(y)))
            .then(ttt(x).total_cmp(&ttt(y)))
            .then(a.cmp(&b))
    });
    let mut front = Vec::new();
    let mut best_healthy = u64::MAX;
    for i in order {
        let h = healthy(&all[i].replay);
        if h < best_healthy {
            best_healthy = h;
            front.push(i);
        }
    }
    front
}

/// Searches the space; `progress` is called with the candidates replayed, batch by batch.
///
/// The cost of a candidate is `bad + weight × healthy`: the bad calls (failed, or at least
/// the bad latency) it admitted during incidents, and the healthy calls (succeeded faster
/// than the bad latency) it refused. A slow success is bad whether it was admitted or
/// refused, so an incident of slow calls costs the candidates that do not trip as an
/// incident of failures does.
///
/// With a [`Holdout`], the search and the choice see only the part before the split, and the
/// choice is then replayed on the part after it (`held_out`). After the choice, each setting
/// is tried at the value in force ([`TuneOptions::keep`]) and at the space's lowest and
/// highest: a setting for which all of them give the same incidents tripped and a cost
/// within 1 % (or one call) of the choice's is not constrained by the trace, and the choice
/// keeps the value in force there (`unconstrained`) rather than the one the search happened
/// to draw.
///
/// Errors: a budget or weight out of range, a space with an empty dimension, and a trace
/// (or the part the choice is made on) with no incident: there is nothing to learn from it,
/// and every configuration that never trips would look perfect.
pub fn tune(
    p: &Prepared,
    space: &Space,
    opts: &TuneOptions,
    replay_opts: &ReplayOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<TuneReport, String> {
    use rayon::prelude::*;
    if !(1..=MAX_BUDGET).contains(&opts.budget) {
        return Err(format!(
            "budget must be a number of candidates in [1, {MAX_BUDGET}], got {}",
            opts.budget
        ));
    }
    if !(opts.healthy_weight.is_finite() && opts.healthy_weight >= 0.0) {
        return Err(format!(
            "the healthy-call weight must be a number >= 0, got {}",
            opts.healthy_weight
        ));
    }
    let ladders = space.ladders();
    if ladders.lens().contains(&0) {
        return Err("the space leaves a dimension without a value".into());
    }
    let split = split_point(p, opts.holdout, holdout_tail(space));
    let parts = split.map(|at| (p.part(Duration::ZERO, at), p.part(at, Duration::MAX)));
    let fit = parts.as_ref().map_or(p, |(f, _)| f);
    let incidents = fit.incidents().len() as u64;
    if incidents == 0 {
        return Err(if split.is_some() && !p.incidents().is_empty() {
            format!(
                "the part of the trace the choice is made on (before {}) holds no incident \
                 (the trace's are all after it): hold out less (--holdout), or nothing \
                 (--holdout 0)",
                fmt_d(split.unwrap_or_default())
            )
        } else {
            "the trace holds no incident (no second in which at least the incident share of \
             the calls failed or took at least the bad latency): there is nothing to tune \
             from, since every configuration that never trips would refuse nothing and look \
             perfect; give the incidents (--incident FROM..UNTIL), lower --incident-share or \
             --bad-latency, or tune on a trace that holds one"
                .to_string()
        });
    }
    let mut rng = Pcg64Mcg::seed_from_u64(opts.seed ^ 0x7A5E_7A5E);
    let mut seen: HashSet<Genome> = HashSet::new();
    let mut all: Vec<Evaluated> = Vec::new();
    let first = (opts.budget / 2).max(1);
    let batch = (opts.budget / 8).max(16);
    // A space no larger than the budget is replayed whole, in order: random draws would only
    // find what is left by chance, more slowly the less is left.
    let size = ladders.size();
    let exhaustive = size <= opts.budget;
    let mut cursor = 0usize;
    while all.len() < opts.budget {
        let want = if all.is_empty() {
            first
        } else {
            batch.min(opts.budget - all.len())
        };
        let front = pareto(&all);
        let mut genomes: Vec<(Genome, BreakerConfig)> = Vec::new();
        while exhaustive && genomes.len() < want && cursor < size {
            let g = ladders.nth(cursor);
            cursor += 1;
            if seen.insert(g) {
                if let Some(c) = ladders.config(&g) {
                    genomes.push((g, c));
                }
            }
        }
        let mut tries = 0usize;
        while !exhaustive && genomes.len() < want && tries < want.saturating_mul(50) {
            tries += 1;
            let g = if front.is_empty() || rng.random_range(0..4) == 0 {
                ladders.random(&mut rng)
            } else {
                let parent = &all[front[rng.random_range(0..front.len())]];
                ladders.neighbour(&genome_of(&ladders, &parent.config), &mut rng)
            };
            if !seen.insert(g) {
                continue;
            }
            if let Some(c) = ladders.config(&g) {
                genomes.push((g, c));
            }
        }
        if genomes.is_empty() {
            break; // the space is exhausted
        }
        let base = all.len();
        let results: Vec<Evaluated> = genomes
            .par_iter()
            .enumerate()
            .map(|(i, (_, c))| {
                let r = replay(
                    fit,
                    &Candidate::new(format!("#{}", base + i), c.clone()),
                    replay_opts,
                );
                progress(1);
                Evaluated {
                    index: base + i,
                    config: c.clone(),
                    cost: cost(&r, opts),
                    eligible: eligible(&r, opts),
                    replay: r,
                }
            })
            .collect();
        all.extend(results);
    }
    let front: Vec<Evaluated> = pareto(&all).into_iter().map(|i| all[i].clone()).collect();
    let pick = |pool: &mut dyn Iterator<Item = &Evaluated>| {
        pool.min_by(|a, b| {
            a.cost
                .total_cmp(&b.cost)
                .then(ttt(&a.replay).total_cmp(&ttt(&b.replay)))
                .then(a.index.cmp(&b.index))
        })
        .cloned()
    };
    let picked = pick(&mut all.iter().filter(|e| e.eligible))
        .or_else(|| pick(&mut all.iter()))
        .ok_or("no candidate could be built from the space")?;
    let n_eligible = all.iter().filter(|e| e.eligible).count();
    let nearest = (opts.max_time_to_trip.is_some() && n_eligible == 0)
        .then(|| {
            all.iter()
                .min_by(|a, b| {
                    let (x, y) = (&a.replay.totals, &b.replay.totals);
                    y.incidents_tripped
                        .cmp(&x.incidents_tripped)
                        .then(
                            x.max_time_to_trip_s
                                .unwrap_or(f64::INFINITY)
                                .total_cmp(&y.max_time_to_trip_s.unwrap_or(f64::INFINITY)),
                        )
                        .then(a.cost.total_cmp(&b.cost))
                        .then(a.index.cmp(&b.index))
                })
                .cloned()
        })
        .flatten();
    let keep = opts.keep.clone().unwrap_or_default();
    let (chosen, unconstrained) =
        keep_unconstrained(fit, &ladders, picked, &keep, opts, replay_opts);
    let held_out = parts.as_ref().map(|(_, later)| {
        replay(
            later,
            &Candidate::new(format!("#{}", chosen.index), chosen.config.clone()),
            replay_opts,
        )
    });
    Ok(TuneReport {
        evaluated: all.len(),
        front,
        chosen,
        incidents,
        held_out_from_s: split.map(|d| d.as_secs_f64()),
        held_out,
        unconstrained,
        eligible: n_eligible,
        nearest,
    })
}

/// The choice with the value in force kept for every setting the trace does not constrain
/// (see [`tune`]), replayed.
fn keep_unconstrained(
    fit: &Prepared,
    ladders: &Ladders,
    picked: Evaluated,
    keep: &BreakerConfig,
    opts: &TuneOptions,
    replay_opts: &ReplayOptions,
) -> (Evaluated, Vec<Unconstrained>) {
    use rayon::prelude::*;
    let base = Settings::of(&picked.config);
    let kept = Settings::of(keep);
    let lowest = ladders.settings(&[0; DIMS]);
    let lens = ladders.lens();
    let mut top = [0u16; DIMS];
    for (t, n) in top.iter_mut().zip(lens) {
        *t = (n - 1) as u16;
    }
    let highest = ladders.settings(&top);
    let same = |r: &ConfigReplay| {
        let c = cost(r, opts);
        r.totals.incidents_tripped == picked.replay.totals.incidents_tripped
            && eligible(r, opts) == picked.eligible
            && (c - picked.cost).abs() <= (0.01 * picked.cost).max(1.0)
    };
    let run = |s: &Settings| -> Option<ConfigReplay> {
        let c = s.build()?;
        Some(replay(
            fit,
            &Candidate::new(format!("#{}", picked.index), c),
            replay_opts,
        ))
    };
    // Every dimension at the kept value and at both ends of its ladder.
    let tries: Vec<(usize, Settings)> = (0..ladders.drawn())
        .flat_map(|d| {
            [&kept, &lowest, &highest]
                .into_iter()
                .map(move |o| (d, base.with(d, o)))
        })
        .filter(|(_, s)| *s != base)
        .collect();
    let verdicts: Vec<(usize, bool)> = tries
        .par_iter()
        .map(|(d, s)| (*d, run(s).is_some_and(|r| same(&r))))
        .collect();
    let free: Vec<usize> = (0..ladders.drawn())
        .filter(|d| verdicts.iter().filter(|(x, _)| x == d).all(|(_, ok)| *ok))
        .collect();
    // All at once if that still gives the same figures, else one by one.
    let mut settings = free.iter().fold(base, |s, &d| s.with(d, &kept));
    let mut kept_dims = free.clone();
    if settings != base && !run(&settings).is_some_and(|r| same(&r)) {
        settings = base;
        kept_dims.clear();
        for &d in &free {
            let next = settings.with(d, &kept);
            if next == settings || run(&next).is_some_and(|r| same(&r)) {
                settings = next;
                kept_dims.push(d);
            }
        }
    }
    let unconstrained = kept_dims
        .iter()
        .map(|&d| Unconstrained {
            setting: SETTINGS[d],
            searched: base.show(d),
            kept: kept.show(d),
        })
        .collect();
    if settings == base {
        return (picked, unconstrained);
    }
    let Some(config) = settings.build() else {
        return (picked, Vec::new());
    };
    let r = replay(
        fit,
        &Candidate::new(format!("#{}", picked.index), config.clone()),
        replay_opts,
    );
    let chosen = Evaluated {
        index: picked.index,
        config,
        cost: cost(&r, opts),
        eligible: eligible(&r, opts),
        replay: r,
    };
    (chosen, unconstrained)
}

/// The genome of a configuration built from `ladders` (its nearest rungs).
fn genome_of(l: &Ladders, c: &BreakerConfig) -> Genome {
    let near_f = |v: &[f64], x: f64| {
        v.iter()
            .enumerate()
            .min_by(|a, b| (a.1 - x).abs().total_cmp(&(b.1 - x).abs()))
            .map_or(0, |(i, _)| i as u16)
    };
    let near_d = |v: &[Duration], x: Duration| {
        v.iter()
            .enumerate()
            .min_by_key(|(_, d)| d.abs_diff(x))
            .map_or(0, |(i, _)| i as u16)
    };
    let near_u = |v: &[u32], x: u32| {
        v.iter()
            .enumerate()
            .min_by_key(|(_, d)| d.abs_diff(x))
            .map_or(0, |(i, _)| i as u16)
    };
    [
        l.windows.iter().position(|w| *w == c.window()).unwrap_or(0) as u16,
        near_u(&l.minimum_calls, c.minimum_calls()),
        near_f(&l.failure_rate, c.failure_rate_threshold()),
        near_f(&l.slow_call_rate, c.slow_call_rate_threshold()),
        near_d(&l.slow_call_duration, c.slow_call_duration()),
        near_d(&l.open_duration, c.open_duration()),
        near_u(&l.probes, c.half_open_calls()),
        l.policies
            .iter()
            .position(|p| *p == c.half_open_policy())
            .unwrap_or(0) as u16,
        // The rule as configured if the ladder holds it, else off.
        l.failure_count
            .iter()
            .position(|f| *f == c.failure_count().map(|f| (f.failures, f.within)))
            .unwrap_or(0) as u16,
    ]
}

/// resilience4j's defaults (`slidingWindowSize` 100, `minimumNumberOfCalls` 100, 50 %,
/// `slowCallRateThreshold` 100 % at 60 s, 60 s open, 10 probes judged together), the
/// usual baseline.
pub fn resilience4j_defaults() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(100)
        .minimum_calls(100)
        .failure_rate_threshold(50.0)
        .slow_call_rate_threshold(100.0)
        .slow_call_duration(Duration::from_secs(60))
        .open_duration(Duration::from_secs(60))
        .half_open_calls(10)
        .half_open_policy(HalfOpenPolicy::AllProbes)
        .build()
        .unwrap_or_default()
}

/// One figure of a replay, as the held-out table shows it.
type Figure = dyn Fn(&ConfigReplay) -> String;

/// A share of bad calls admitted: "195 (0.4 %)".
fn bad_of(r: &ConfigReplay) -> String {
    let t = &r.totals;
    if t.bad_in_incidents == 0 {
        return t.figures.bad_admitted.to_string();
    }
    format!(
        "{} ({:.1} %)",
        t.figures.bad_admitted,
        t.figures.bad_admitted as f64 * 100.0 / t.bad_in_incidents as f64
    )
}

impl TuneReport {
    /// The front and the choice, as a table, with the settings kept, the nearest candidate
    /// when none met `max_time_to_trip`, and the choice's figures on the held-out part.
    /// `baselines` are replays of the configurations to compare with on the part the choice
    /// was made on.
    pub fn table(&self, baselines: &[ConfigReplay]) -> String {
        self.table_with(baselines, &[])
    }

    /// [`table`](Self::table), with the baselines' figures on the held-out part (`held_out`:
    /// their replays there, matched by label; empty when nothing was held out) beside the
    /// choice's.
    pub fn table_with(&self, baselines: &[ConfigReplay], held_out: &[ConfigReplay]) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} candidates replayed{}; Pareto front of bad calls admitted in incidents against \
             healthy calls refused ({} configurations):\n",
            self.evaluated,
            self.held_out_from_s
                .map(|t| format!(" on the calls before {t:.1} s"))
                .unwrap_or_default(),
            self.front.len()
        );
        let _ = writeln!(
            s,
            "  {:>6}  {:>10}  {:>10}  {:>9}  {:>6}  configuration",
            "", "bad", "healthy", "to trip", "trips"
        );
        let row = |s: &mut String, mark: &str, label: &str, r: &ConfigReplay, c: &str| {
            let _ = writeln!(
                s,
                "{mark} {label:>6}  {:>10}  {:>10}  {:>9}  {:>6}  {c}",
                bad(r),
                healthy(r),
                r.totals
                    .mean_time_to_trip_s
                    .map_or("—".to_string(), |t| format!("{t:.2} s")),
                r.totals.figures.trips,
            );
        };
        for e in &self.front {
            let mark = if e.index == self.chosen.index {
                "*"
            } else {
                " "
            };
            row(
                &mut s,
                mark,
                &format!("#{}", e.index),
                &e.replay,
                &summary(&e.config),
            );
        }
        if !self.front.iter().any(|e| e.index == self.chosen.index) {
            row(
                &mut s,
                "*",
                &format!("#{}", self.chosen.index),
                &self.chosen.replay,
                &summary(&self.chosen.config),
            );
        }
        if !baselines.is_empty() {
            let _ = writeln!(s, "\nbaselines:");
            for b in baselines {
                let c: Option<BreakerConfig> = toml::from_str(&b.config).ok();
                row(
                    &mut s,
                    " ",
                    "",
                    b,
                    &format!(
                        "{} ({})",
                        b.label,
                        c.map(|c| summary(&c)).unwrap_or_default()
                    ),
                );
            }
        }
        let _ = writeln!(
            s,
            "\nchosen: #{} ({}), cost {} = bad + weight × healthy",
            self.chosen.index,
            summary(&self.chosen.config),
            self.chosen.cost
        );
        if !self.unconstrained.is_empty() {
            let _ = writeln!(
                s,
                "not constrained by the trace (every value tried gave the same figures), kept at \
                 the values in force: {}",
                self.unconstrained
                    .iter()
                    .map(|u| format!(
                        "{} = {} (the search drew {})",
                        u.setting, u.kept, u.searched
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if let Some(n) = &self.nearest {
            let t = &n.replay.totals;
            let _ = writeln!(
                s,
                "no candidate trips within the time to trip asked for in every incident; the \
                 nearest: #{} ({}) trips in {} of {} incidents{}",
                n.index,
                summary(&n.config),
                t.incidents_tripped,
                t.incidents,
                t.max_time_to_trip_s
                    .map(|x| format!(", within {x:.2} s"))
                    .unwrap_or_default()
            );
        }
        if let (Some(from), Some(h)) = (self.held_out_from_s, &self.held_out) {
            let _ = writeln!(
                s,
                "\nthe choice on the part it was chosen on (before {from:.1} s) and on the \
                 held-out part (from {from:.1} s), which it was not chosen on:"
            );
            let w = 18usize;
            let _ = writeln!(s, "  {:34}  {:>w$}  {:>w$}", "", "chosen on", "held out");
            let lines: [(&str, &Figure); 5] = [
                ("incidents tripped", &|r| {
                    format!("{} of {}", r.totals.incidents_tripped, r.totals.incidents)
                }),
                ("bad calls admitted in incidents", &bad_of),
                ("healthy calls refused", &|r| healthy(r).to_string()),
                ("time to trip (mean)", &|r| {
                    r.totals
                        .mean_time_to_trip_s
                        .map_or("—".into(), |t| format!("{t:.2} s"))
                }),
                ("time to trip (longest)", &|r| {
                    r.totals
                        .max_time_to_trip_s
                        .map_or("—".into(), |t| format!("{t:.2} s"))
                }),
            ];
            let held = |label: &str| held_out.iter().find(|b| b.label == label);
            for (name, f) in lines {
                let _ = writeln!(
                    s,
                    "  {name:34}  {:>w$}  {:>w$}",
                    f(&self.chosen.replay),
                    f(h)
                );
                for b in baselines {
                    if let Some(hb) = held(&b.label) {
                        let _ = writeln!(s, "    {:32}  {:>w$}  {:>w$}", b.label, f(b), f(hb));
                    }
                }
            }
            if h.totals.incidents == 0 {
                let _ = writeln!(
                    s,
                    "the held-out part holds no incident: it checks only the healthy calls \
                     refused (trips on noise)"
                );
            }
        }
        s
    }
}

/// One line describing a configuration.
pub fn summary(c: &BreakerConfig) -> String {
    let w = match c.window() {
        WindowConfig::Count { size } => format!("count {size}"),
        WindowConfig::Time { length, .. } => format!("time {}", fmt_d(length)),
    };
    let counted = c.failure_count().map_or(String::new(), |f| {
        format!(", {} failures in {}", f.failures, fmt_d(f.within))
    });
    format!(
        "{w}, min {}, fail {}%, slow {}% > {}, open {}, {} probe(s) {}{counted}",
        c.minimum_calls(),
        c.failure_rate_threshold(),
        c.slow_call_rate_threshold(),
        fmt_d(c.slow_call_duration()),
        fmt_d(c.open_duration()),
        c.half_open_calls(),
        match c.half_open_policy() {
            HalfOpenPolicy::AllProbes => "all-probes",
            _ => "consecutive",
        }
    )
}
