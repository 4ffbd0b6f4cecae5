//! Replaying a trace against breaker configurations (`tripline replay`).
//!
//! The replay runs the real breaker on a [`ManualClock`] over the trace's calls: at each
//! call's start the breaker is asked for a permit, and at its end (start + duration) the
//! trace's outcome is recorded on the permit, so the breaker measures the real duration and
//! sees calls in flight exactly as it would have live. Where the trace has keys, each key
//! gets a breaker of its own (as a [`Registry`](tripline::registry::Registry) would give
//! it). At one instant, results come before new calls, except a call's own result, which
//! comes after it.
//!
//! The replay is counterfactual with the dependency held fixed: a call the configuration
//! refuses is assumed to have met the dependency the trace says (so "would have failed" and
//! "would have succeeded" are the trace's outcomes), and refusing calls is assumed not to
//! change how the dependency behaves for the others. A `rejected` line (refused by the
//! breaker in force when the trace was recorded) has no outcome: a configuration that admits
//! it records it as ignored, and one that refuses it counts it as "outcome unknown". Record
//! in MetricsOnly to have no such lines.
//!
//! # Figures
//! For each configuration, summed over the keys: trips (Closed → Open) and reopens
//! (HalfOpen → Open), time spent Open and HalfOpen, calls refused and, by the trace's
//! outcome, how many of those would have failed anyway, succeeded slowly (at least the bad
//! latency: bad calls, whose refusal spared the caller the wait), succeeded in time (healthy
//! calls refused: the cost of the protection), been ignored, or are unknown; failures
//! admitted, and bad calls (failed, or at least the bad latency) admitted while the
//! dependency was bad (the cost of reacting slowly); and, for each incident, the time to trip
//! after its start.
//!
//! A call is bad by what it did, not by what the configuration did with it: a success that
//! took at least the bad latency is bad when admitted (it counts among the bad calls admitted
//! during an incident) and bad when refused (it is not a healthy call refused). So in an
//! incident where every call succeeds slowly, refusing the calls costs nothing and admitting
//! them costs each one, as in an incident of failures.
//!
//! # Incidents
//! Given (`--incident 60s..420s`, from the trace's origin, for every key), or found per key:
//! the key's calls are binned (1 s), a bin with at least `min_calls` known outcomes is bad
//! when at least `bad_share` of them are bad (failed, or took at least the bad latency:
//! by default 5 × the median duration of the trace's successes), a bin with fewer known
//! outcomes keeps the verdict of the bin before, and runs of bad bins separated by at most
//! `merge_gap` are one incident. The time to trip is 0 when the breaker is already Open or
//! HalfOpen when the incident starts, else the time of its first trip in the incident, and
//! `None` when it never trips during it.
//!
//! ```
//! use tripline_sim::replay::{prepare, replay, Candidate, Detect, ReplayOptions};
//! use tripline::trace::{read, ReadOptions};
//! use tripline::BreakerConfig;
//!
//! // One call a second for a minute; every call fails from 5 s to 30 s.
//! let mut text = String::from("start,duration_ms,outcome\n");
//! for t in 0..60 {
//!     let outcome = if (5..30).contains(&t) { "failure" } else { "success" };
//!     text.push_str(&format!("{},0,{outcome}\n", t * 1000));
//! }
//! let trace = read(text.as_bytes(), &ReadOptions::default()).unwrap();
//! // One call a second: a second's single outcome is enough for a verdict.
//! let opts = ReplayOptions { detect: Detect { min_calls: 1, ..Detect::default() }, ..ReplayOptions::default() };
//! let prepared = prepare(&trace, &opts).unwrap();
//! let fowler = BreakerConfig::builder()
//!     .consecutive_failures(3)
//!     .open_duration(std::time::Duration::from_secs(10))
//!     .half_open_calls(1)
//!     .half_open_policy(tripline::HalfOpenPolicy::Consecutive)
//!     .build()
//!     .unwrap();
//! let r = replay(&prepared, &Candidate::new("fowler", fowler), &opts);
//! let f = &r.totals.figures;
//! assert_eq!((f.trips, f.rejected, f.rejected_would_succeed), (1, 27, 7));
//! assert_eq!(prepared.incidents()[0].start_s, 5.0);
//! assert_eq!(r.totals.max_time_to_trip_s, Some(2.0));
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tripline::trace::{Trace, TraceOutcome};
use tripline::{BreakerConfig, CircuitBreaker, EventKind, ManualClock, Outcome, Permit, State};

use crate::dist::fmt_d;

/// The version of the replay's JSON layout.
pub const REPLAY_SCHEMA_VERSION: u32 = 1;

/// How a trace is replayed.
///
/// ```
/// let o = tripline_sim::replay::ReplayOptions::default();
/// assert!(o.by_key && o.incidents.is_none());
/// ```
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// The seed the breakers' jitter is derived from, as the simulator derives it: a trace
    /// of a simulated run with one shared breaker replays with that run's seed to the same
    /// transitions.
    pub seed: u64,
    /// One breaker per key (default), or one for the whole trace.
    pub by_key: bool,
    /// The incidents, as (start, end) from the trace's origin; `None` finds them.
    pub incidents: Option<Vec<(Duration, Duration)>>,
    /// How incidents are found.
    pub detect: Detect,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        Self {
            seed: 0,
            by_key: true,
            incidents: None,
            detect: Detect::default(),
        }
    }
}

/// How incidents are found from a trace (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct Detect {
    /// The bin width.
    pub bin: Duration,
    /// Known outcomes a bin needs for a verdict.
    pub min_calls: u32,
    /// The share of bad calls that makes a bin bad, in (0, 1].
    pub bad_share: f64,
    /// A call at least this slow is bad; `None`: 5 × the median duration of the successes.
    pub bad_latency: Option<Duration>,
    /// Bad runs at most this far apart are one incident.
    pub merge_gap: Duration,
}

impl Default for Detect {
    fn default() -> Self {
        Self {
            bin: Duration::from_secs(1),
            min_calls: 5,
            bad_share: 0.25,
            bad_latency: None,
            merge_gap: Duration::from_secs(5),
        }
    }
}

/// A configuration to replay, with its label.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// How it is named in the output.
    pub label: String,
    /// The configuration.
    pub config: BreakerConfig,
}

impl Candidate {
    /// A labelled configuration.
    pub fn new(label: impl Into<String>, config: BreakerConfig) -> Self {
        Self {
            label: label.into(),
            config,
        }
    }
}

const IN_INCIDENT: u8 = 1;
const BAD: u8 = 2;

#[derive(Clone, Copy, Debug)]
struct Call {
    start: u64,
    end: u64,
    outcome: TraceOutcome,
    flags: u8,
}

/// An incident of one key.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Incident {
    /// The key's index in [`Prepared::keys`].
    #[serde(skip)]
    pub key: usize,
    /// Start, in seconds from the trace's origin.
    pub start_s: f64,
    /// End.
    pub end_s: f64,
}

#[derive(Debug)]
struct KeyData {
    name: String,
    /// By start (ties in line order).
    calls: Vec<Call>,
    /// Indices into `calls` by end (ties by start order).
    ends: Vec<u32>,
    incidents: Vec<(u64, u64)>,
}

/// A trace made ready for replays: calls sorted per key, incidents found, bad calls marked.
/// Prepare once, replay it against many configurations (from many threads).
#[derive(Debug)]
pub struct Prepared {
    keys: Vec<KeyData>,
    /// Calls in the trace.
    pub calls: u64,
    /// `rejected` lines (outcome unknown).
    pub unknown: u64,
    /// From the origin to the last end.
    pub span: Duration,
    /// The latency at which a call counts as bad.
    pub bad_latency: Duration,
    /// The trace's sample rate.
    pub sample_rate: f64,
    /// The origin, when the trace's times were absolute (nanoseconds since the UNIX epoch).
    pub origin_unix_nanos: Option<i128>,
    /// Per-second shares over the whole trace, for the report: (calls, failures, p50 ms,
    /// p99 ms) of the calls that started in each second.
    pub series: Vec<SecondStats>,
}

/// What the trace's calls did in one second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct SecondStats {
    /// Calls that started in the second (rejected lines included).
    pub calls: u32,
    /// Of those, failures.
    pub failures: u32,
    /// Median duration of the calls made, ms.
    pub p50_ms: Option<f64>,
    /// 99th percentile, ms.
    pub p99_ms: Option<f64>,
}

impl Prepared {
    /// The keys, in order of first appearance in the trace.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|k| k.name.as_str())
    }

    /// Every incident, key by key.
    pub fn incidents(&self) -> Vec<Incident> {
        self.keys
            .iter()
            .enumerate()
            .flat_map(|(i, k)| {
                k.incidents.iter().map(move |&(a, b)| Incident {
                    key: i,
                    start_s: secs(a),
                    end_s: secs(b),
                })
            })
            .collect()
    }

    /// Bad calls (failed, or at least the bad latency) that started during an incident: the
    /// most a configuration can admit of them, and what
    /// [`Figures::bad_admitted`] is a share of.
    pub fn bad_in_incidents(&self) -> u64 {
        self.keys
            .iter()
            .flat_map(|k| &k.calls)
            .filter(|c| c.flags & (IN_INCIDENT | BAD) == IN_INCIDENT | BAD)
            .count() as u64
    }

    /// The calls that start in `[from, until)` (from the trace's origin), made ready as a
    /// trace of their own: the same keys, the same bad latency, and the incidents found on
    /// the whole trace, cut to the span. A replay of the part starts with fresh breakers at
    /// its first call. This is how [`crate::tune`] holds out a later span of the trace.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline_sim::replay::{prepare, ReplayOptions};
    /// use tripline::trace::{read, ReadOptions};
    ///
    /// let mut text = String::from("start,duration_ms,outcome\n");
    /// for i in 0..600u64 {
    ///     let outcome = if (100..200).contains(&i) || (400..500).contains(&i) { "failure" } else { "success" };
    ///     text.push_str(&format!("{},5,{outcome}\n", i * 100));
    /// }
    /// let trace = read(text.as_bytes(), &ReadOptions::default()).unwrap();
    /// let p = prepare(&trace, &ReplayOptions::default()).unwrap();
    /// assert_eq!(p.incidents().len(), 2);
    /// let later = p.part(Duration::from_secs(30), Duration::MAX);
    /// assert_eq!((later.calls, later.incidents().len()), (300, 1));
    /// assert_eq!(later.incidents()[0].start_s, 40.0);
    /// ```
    pub fn part(&self, from: Duration, until: Duration) -> Prepared {
        let (a, b) = (nanos(from), nanos(until));
        let keys: Vec<KeyData> = self
            .keys
            .iter()
            .map(|k| {
                let lo = k.calls.partition_point(|c| c.start < a);
                let hi = k.calls.partition_point(|c| c.start < b);
                let calls: Vec<Call> = k.calls[lo..hi].to_vec();
                let mut ends: Vec<u32> = (0..calls.len() as u32).collect();
                ends.sort_by_key(|&i| (calls[i as usize].end, i));
                KeyData {
                    name: k.name.clone(),
                    incidents: k
                        .incidents
                        .iter()
                        .map(|&(s, e)| (s.max(a), e.min(b)))
                        .filter(|(s, e)| s < e)
                        .collect(),
                    calls,
                    ends,
                }
            })
            .collect();
        let calls = keys.iter().map(|k| k.calls.len() as u64).sum();
        let unknown = keys
            .iter()
            .flat_map(|k| &k.calls)
            .filter(|c| c.outcome == TraceOutcome::Rejected)
            .count() as u64;
        let last_end = keys
            .iter()
            .flat_map(|k| k.calls.iter().map(|c| c.end))
            .max()
            .unwrap_or(a);
        Prepared {
            keys,
            calls,
            unknown,
            span: Duration::from_nanos(last_end),
            bad_latency: self.bad_latency,
            sample_rate: self.sample_rate,
            origin_unix_nanos: self.origin_unix_nanos,
            series: self.series.clone(),
        }
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Sorts the trace's calls per key, finds (or takes) the incidents and marks the bad calls.
pub fn prepare(trace: &Trace, opts: &ReplayOptions) -> Result<Prepared, String> {
    let d = opts.detect;
    if d.bin.is_zero() || !(d.bad_share > 0.0 && d.bad_share <= 1.0) || d.min_calls == 0 {
        return Err(format!(
            "incident detection needs a bin > 0, a bad share in (0, 1] and min calls >= 1, got {}, {}, {}",
            fmt_d(d.bin),
            d.bad_share,
            d.min_calls
        ));
    }
    let bad_latency = d.bad_latency.map_or_else(
        || {
            let mut ok: Vec<u64> = trace
                .calls
                .iter()
                .filter(|c| c.outcome == TraceOutcome::Success)
                .map(|c| c.duration)
                .collect();
            let median = if ok.is_empty() {
                0
            } else {
                let mid = ok.len() / 2;
                *ok.select_nth_unstable(mid).1
            };
            median.saturating_mul(5).max(1_000_000)
        },
        nanos,
    );
    // Keys by first appearance.
    let mut index: Vec<u32> = vec![u32::MAX; trace.keys.len()];
    let mut keys: Vec<KeyData> = Vec::new();
    for c in &trace.calls {
        let k = if opts.by_key { c.key as usize } else { 0 };
        if index[k] == u32::MAX {
            index[k] = keys.len() as u32;
            keys.push(KeyData {
                name: if opts.by_key {
                    trace.keys[k].clone()
                } else {
                    String::new()
                },
                calls: Vec::new(),
                ends: Vec::new(),
                incidents: Vec::new(),
            });
        }
        let bad = c.outcome == TraceOutcome::Failure
            || (c.outcome == TraceOutcome::Success && c.duration >= bad_latency);
        keys[index[k] as usize].calls.push(Call {
            start: c.start,
            end: c.end(),
            outcome: c.outcome,
            flags: if bad { BAD } else { 0 },
        });
    }
    for k in &mut keys {
        // Stable: ties keep line order.
        k.calls.sort_by_key(|c| c.start);
        let mut ends: Vec<u32> = (0..k.calls.len() as u32).collect();
        ends.sort_by_key(|&i| (k.calls[i as usize].end, i));
        k.ends = ends;
        k.incidents = match &opts.incidents {
            Some(given) => given.iter().map(|&(a, b)| (nanos(a), nanos(b))).collect(),
            None => detect(&k.calls, &d),
        };
        for c in &mut k.calls {
            if k.incidents
                .iter()
                .any(|&(a, b)| c.start >= a && c.start < b)
            {
                c.flags |= IN_INCIDENT;
            }
        }
    }
    Ok(Prepared {
        calls: trace.calls.len() as u64,
        unknown: trace
            .calls
            .iter()
            .filter(|c| c.outcome == TraceOutcome::Rejected)
            .count() as u64,
        span: trace.span(),
        bad_latency: Duration::from_nanos(bad_latency),
        sample_rate: trace.header.sample_rate,
        origin_unix_nanos: trace.origin_unix_nanos,
        series: series(trace),
        keys,
    })
}

fn detect(calls: &[Call], d: &Detect) -> Vec<(u64, u64)> {
    let bin = nanos(d.bin).max(1);
    let Some(last) = calls.iter().map(|c| c.start).max() else {
        return Vec::new();
    };
    // Only the bins that hold calls, so that a trace with a long quiet gap costs what its calls
    // cost, not what its span would in bins. A bin below the minimum keeps the verdict of the
    // bin before it, and so do the empty bins between two that hold calls.
    let mut bins: BTreeMap<u64, (u32, u32)> = BTreeMap::new();
    for c in calls {
        if matches!(c.outcome, TraceOutcome::Success | TraceOutcome::Failure) {
            let e = bins.entry(c.start / bin).or_default();
            e.0 = e.0.saturating_add(1);
            e.1 = e.1.saturating_add(u32::from(c.flags & BAD != 0));
        }
    }
    let mut verdict = false;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let gap = nanos(d.merge_gap);
    let mut add = |from: u64, until: u64| match runs.last_mut() {
        Some(r) if from <= r.1.saturating_add(gap) => r.1 = r.1.max(until),
        _ => runs.push((from, until)),
    };
    let edge = |b: u64| b.saturating_mul(bin);
    let mut next = 0u64; // the first bin not yet covered
    for (&b, &(known, bad)) in &bins {
        if verdict && b > next {
            add(edge(next), edge(b));
        }
        if known >= d.min_calls {
            verdict = f64::from(bad) >= d.bad_share * f64::from(known);
        }
        if verdict {
            add(edge(b), edge(b.saturating_add(1)));
        }
        next = b.saturating_add(1);
    }
    let end = last / bin + 1;
    if verdict && end > next {
        add(edge(next), edge(end));
    }
    runs
}

fn series(trace: &Trace) -> Vec<SecondStats> {
    const SEC: u64 = 1_000_000_000;
    let n = (trace.span().as_secs() + 1).min(14 * 24 * 3600) as usize;
    let mut out = vec![SecondStats::default(); n];
    let mut lat: Vec<Vec<u32>> = vec![Vec::new(); n];
    for c in &trace.calls {
        let b = ((c.start / SEC) as usize).min(n - 1);
        out[b].calls += 1;
        if c.outcome == TraceOutcome::Failure {
            out[b].failures += 1;
        }
        if c.outcome != TraceOutcome::Rejected {
            lat[b].push((c.duration / 1000).min(u64::from(u32::MAX)) as u32);
        }
    }
    for (s, mut l) in out.iter_mut().zip(lat) {
        if l.is_empty() {
            continue;
        }
        l.sort_unstable();
        let at = |p: f64| {
            let rank = ((p * l.len() as f64).ceil() as usize).clamp(1, l.len()) - 1;
            f64::from(l[rank]) / 1000.0
        };
        s.p50_ms = Some(at(0.5));
        s.p99_ms = Some(at(0.99));
    }
    out
}

/// A transition seen in a replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TransitionOut {
    /// When, in seconds from the trace's origin.
    pub at_s: f64,
    /// Old state.
    pub from: State,
    /// New state.
    pub to: State,
    /// The rule that fired.
    pub reason: &'static str,
}

/// One incident's figures for one configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IncidentFigures {
    /// The incident's start, in seconds.
    pub start_s: f64,
    /// Its end.
    pub end_s: f64,
    /// From its start to the breaker's first trip in it (0: already Open or HalfOpen).
    pub time_to_trip_s: Option<f64>,
    /// Bad calls admitted during it.
    pub bad_admitted: u64,
}

/// Figures of one key (or of all keys summed, for the totals' counters).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Calls in the trace.
    pub calls: u64,
    /// Calls the breaker admitted.
    pub admitted: u64,
    /// Calls it refused.
    pub rejected: u64,
    /// Refused calls that failed in the trace (the protection saved their wait).
    pub rejected_would_fail: u64,
    /// Refused calls that succeeded in the trace, however slowly (the sum of
    /// [`rejected_slow`](Self::rejected_slow) and [`rejected_healthy`](Self::rejected_healthy)).
    pub rejected_would_succeed: u64,
    /// Of those, the calls that took at least the bad latency: bad calls, whose refusal spared
    /// the caller the wait, as a refused failure does.
    pub rejected_slow: u64,
    /// Of those, the calls faster than the bad latency: healthy calls refused, the
    /// protection's cost.
    pub rejected_healthy: u64,
    /// Refused calls whose outcome said nothing (ignored).
    pub rejected_ignored: u64,
    /// Refused calls the trace has no outcome for (`rejected` lines).
    pub rejected_unknown: u64,
    /// Admitted calls that failed.
    pub failures_admitted: u64,
    /// Admitted failures that started during an incident.
    pub failures_admitted_bad: u64,
    /// Admitted bad calls (failed, or at least the bad latency) that started during an
    /// incident: the cost of reacting slowly.
    pub bad_admitted: u64,
    /// Closed → Open transitions.
    pub trips: u64,
    /// HalfOpen → Open transitions.
    pub reopens: u64,
    /// Seconds spent Open.
    pub time_open_s: f64,
    /// Seconds spent HalfOpen.
    pub time_half_open_s: f64,
}

impl Figures {
    fn add(&mut self, o: &Figures) {
        self.calls += o.calls;
        self.admitted += o.admitted;
        self.rejected += o.rejected;
        self.rejected_would_fail += o.rejected_would_fail;
        self.rejected_would_succeed += o.rejected_would_succeed;
        self.rejected_slow += o.rejected_slow;
        self.rejected_healthy += o.rejected_healthy;
        self.rejected_ignored += o.rejected_ignored;
        self.rejected_unknown += o.rejected_unknown;
        self.failures_admitted += o.failures_admitted;
        self.failures_admitted_bad += o.failures_admitted_bad;
        self.bad_admitted += o.bad_admitted;
        self.trips += o.trips;
        self.reopens += o.reopens;
        self.time_open_s += o.time_open_s;
        self.time_half_open_s += o.time_half_open_s;
    }
}

/// One key's replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeyReplay {
    /// The key (`""`: calls without one).
    pub key: String,
    /// Its figures.
    #[serde(flatten)]
    pub figures: Figures,
    /// Its incidents.
    pub incidents: Vec<IncidentFigures>,
    /// Its transitions (all of them, in order).
    pub transitions: Vec<TransitionOut>,
}

/// The totals of a configuration's replay.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Totals {
    /// The counters, summed over keys.
    #[serde(flatten)]
    pub figures: Figures,
    /// Incidents (over all keys).
    pub incidents: u64,
    /// Incidents in which the breaker tripped (or was already open).
    pub incidents_tripped: u64,
    /// Mean time to trip over the incidents in which it tripped, in seconds.
    pub mean_time_to_trip_s: Option<f64>,
    /// The longest time to trip; `None` when it tripped in no incident.
    pub max_time_to_trip_s: Option<f64>,
    /// Bad calls that started during an incident, admitted or not: what
    /// `bad_admitted` is a share of.
    pub bad_in_incidents: u64,
}

/// A configuration's replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfigReplay {
    /// Its label.
    pub label: String,
    /// The configuration, as tripline TOML.
    pub config: String,
    /// Summed over keys.
    pub totals: Totals,
    /// Key by key.
    pub keys: Vec<KeyReplay>,
}

/// Replays one configuration over every key of a prepared trace.
pub fn replay(p: &Prepared, c: &Candidate, opts: &ReplayOptions) -> ConfigReplay {
    let keys: Vec<KeyReplay> = p
        .keys
        .iter()
        .enumerate()
        .map(|(i, k)| replay_key(k, &c.config, opts.seed, i as u64))
        .collect();
    let mut totals = Totals {
        bad_in_incidents: p.bad_in_incidents(),
        ..Totals::default()
    };
    let mut ttt = Vec::new();
    for k in &keys {
        totals.figures.add(&k.figures);
        for inc in &k.incidents {
            totals.incidents += 1;
            if let Some(t) = inc.time_to_trip_s {
                totals.incidents_tripped += 1;
                ttt.push(t);
            }
        }
    }
    if !ttt.is_empty() {
        totals.mean_time_to_trip_s = Some(ttt.iter().sum::<f64>() / ttt.len() as f64);
        totals.max_time_to_trip_s = ttt.iter().copied().reduce(f64::max);
    }
    ConfigReplay {
        label: c.label.clone(),
        config: crate::tune::to_toml(&c.config),
        totals,
        keys,
    }
}

fn replay_key(k: &KeyData, config: &BreakerConfig, seed: u64, index: u64) -> KeyReplay {
    let clock = ManualClock::new();
    let config = crate::engine::seeded(config, seed, index);
    let breaker = CircuitBreaker::with_clock(k.name.clone(), config, clock.clone());
    let log: Arc<Mutex<Vec<TransitionOut>>> = Arc::new(Mutex::new(Vec::new()));
    {
        let log = log.clone();
        breaker.subscribe(move |e: &tripline::Event| {
            if let EventKind::Transition { from, to, .. } = &e.kind {
                log.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(TransitionOut {
                        at_s: e.at.as_secs_f64(),
                        from: *from,
                        to: *to,
                        reason: crate::engine::reason_str(&e.kind),
                    });
            }
        });
    }
    let n = k.calls.len();
    let mut f = Figures {
        calls: n as u64,
        ..Figures::default()
    };
    let mut slot_of: Vec<u32> = vec![u32::MAX; n];
    let mut permits: Vec<Option<Permit<'_, ManualClock>>> = Vec::new();
    let mut free: Vec<u32> = Vec::new();
    let mut incident_bad: Vec<u64> = vec![0; k.incidents.len()];
    let (mut i, mut j) = (0usize, 0usize);
    let mut now = 0u64;
    while i < n || j < n {
        let take_end = j < n && {
            let e = k.ends[j] as usize;
            (e < i) && (i == n || k.calls[e].end <= k.calls[i].start)
        };
        if take_end {
            let e = k.ends[j] as usize;
            j += 1;
            let slot = slot_of[e];
            if slot == u32::MAX {
                continue;
            }
            let call = k.calls[e];
            now = call.end;
            clock.set(Duration::from_nanos(now));
            if let Some(permit) = permits[slot as usize].take() {
                let _ = permit.record(call.outcome.outcome().unwrap_or(Outcome::Ignored));
            }
            free.push(slot);
            continue;
        }
        let call = k.calls[i];
        now = call.start;
        clock.set(Duration::from_nanos(now));
        match breaker.try_acquire() {
            Ok(permit) => {
                f.admitted += 1;
                if call.outcome == TraceOutcome::Failure {
                    f.failures_admitted += 1;
                    if call.flags & IN_INCIDENT != 0 {
                        f.failures_admitted_bad += 1;
                    }
                }
                if call.flags & (IN_INCIDENT | BAD) == IN_INCIDENT | BAD {
                    f.bad_admitted += 1;
                    if let Some(x) = k
                        .incidents
                        .iter()
                        .position(|&(a, b)| call.start >= a && call.start < b)
                    {
                        incident_bad[x] += 1;
                    }
                }
                let slot = match free.pop() {
                    Some(s) => {
                        permits[s as usize] = Some(permit);
                        s
                    }
                    None => {
                        permits.push(Some(permit));
                        (permits.len() - 1) as u32
                    }
                };
                slot_of[i] = slot;
            }
            Err(_) => {
                f.rejected += 1;
                match call.outcome {
                    TraceOutcome::Failure => f.rejected_would_fail += 1,
                    TraceOutcome::Success => {
                        f.rejected_would_succeed += 1;
                        if call.flags & BAD != 0 {
                            f.rejected_slow += 1;
                        } else {
                            f.rejected_healthy += 1;
                        }
                    }
                    TraceOutcome::Ignored => f.rejected_ignored += 1,
                    TraceOutcome::Rejected => f.rejected_unknown += 1,
                }
            }
        }
        i += 1;
    }
    drop(permits);
    clock.set(Duration::from_nanos(now));
    let m = breaker.metrics();
    f.time_open_s = m.time_open.as_secs_f64();
    f.time_half_open_s = m.time_half_open.as_secs_f64();
    drop(breaker);
    let transitions = std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
    for t in &transitions {
        if t.to == State::Open {
            match t.from {
                State::Closed => f.trips += 1,
                State::HalfOpen => f.reopens += 1,
                _ => {}
            }
        }
    }
    let incidents = k
        .incidents
        .iter()
        .zip(incident_bad)
        .map(|(&(a, b), bad)| IncidentFigures {
            start_s: secs(a),
            end_s: secs(b),
            time_to_trip_s: time_to_trip(&transitions, secs(a), secs(b)),
            bad_admitted: bad,
        })
        .collect();
    KeyReplay {
        key: k.name.clone(),
        figures: f,
        incidents,
        transitions,
    }
}

fn time_to_trip(tr: &[TransitionOut], start: f64, end: f64) -> Option<f64> {
    let before = tr.iter().take_while(|t| t.at_s < start).last();
    if before.is_some_and(|t| matches!(t.to, State::Open | State::HalfOpen | State::ForcedOpen)) {
        return Some(0.0);
    }
    tr.iter()
        .find(|t| t.at_s >= start && t.at_s < end && t.to == State::Open)
        .map(|t| t.at_s - start)
}

/// The replay of several configurations over one trace, for the table, the JSON and the
/// report.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    /// [`REPLAY_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Where the trace came from (its path).
    pub trace: String,
    /// Calls in the trace.
    pub calls: u64,
    /// `rejected` lines.
    pub unknown_outcomes: u64,
    /// Keys (breakers).
    pub keys: usize,
    /// Bad lines skipped.
    pub skipped_lines: u64,
    /// From the origin to the last end, in seconds.
    pub span_s: f64,
    /// The origin as an RFC 3339 time, when the trace's times were absolute.
    pub origin: Option<String>,
    /// The trace's sample rate.
    pub sample_rate: f64,
    /// The latency from which a call counts as bad, in ms.
    pub bad_latency_ms: f64,
    /// The seed.
    pub seed: u64,
    /// Incidents, key by key.
    pub incidents: Vec<KeyIncident>,
    /// One replay per configuration, in the order given.
    pub configs: Vec<ConfigReplay>,
    /// Per-second figures of the trace (for the charts).
    #[serde(skip)]
    pub series: Vec<SecondStats>,
}

/// An incident and its key.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeyIncident {
    /// The key.
    pub key: String,
    /// Start, in seconds.
    pub start_s: f64,
    /// End, in seconds.
    pub end_s: f64,
}

/// Replays every candidate (in parallel) and gathers the report.
pub fn replay_all(
    path: &str,
    trace: &Trace,
    p: &Prepared,
    candidates: &[Candidate],
    opts: &ReplayOptions,
) -> ReplayReport {
    use rayon::prelude::*;
    let configs: Vec<ConfigReplay> = candidates.par_iter().map(|c| replay(p, c, opts)).collect();
    ReplayReport {
        schema_version: REPLAY_SCHEMA_VERSION,
        trace: path.to_string(),
        calls: p.calls,
        unknown_outcomes: p.unknown,
        keys: p.keys.len(),
        skipped_lines: trace.skipped,
        span_s: p.span.as_secs_f64(),
        origin: p.origin_unix_nanos.and_then(|n| {
            let t = time::OffsetDateTime::from_unix_timestamp_nanos(n).ok()?;
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        }),
        sample_rate: p.sample_rate,
        bad_latency_ms: p.bad_latency.as_secs_f64() * 1000.0,
        seed: opts.seed,
        incidents: p
            .incidents()
            .into_iter()
            .map(|i| KeyIncident {
                key: p.keys[i.key].name.clone(),
                start_s: i.start_s,
                end_s: i.end_s,
            })
            .collect(),
        configs,
        series: p.series.clone(),
    }
}

fn opt_s(v: Option<f64>) -> String {
    match v {
        Some(s) => format!("{s:.2} s"),
        None => "—".into(),
    }
}

impl ReplayReport {
    /// The report as JSON (schema below, `schema_version` 1).
    ///
    /// ```text
    /// { "schema_version": 1, "trace": "calls.jsonl", "calls", "unknown_outcomes", "keys",
    ///   "skipped_lines", "span_s", "origin": "2026-12-01T12:00:00Z" | null, "sample_rate",
    ///   "bad_latency_ms", "seed",
    ///   "incidents": [ { "key", "start_s", "end_s" } ],
    ///   "configs": [ { "label", "config": "<TOML>",
    ///     "totals": { <figures>, "incidents", "incidents_tripped", "mean_time_to_trip_s",
    ///                 "max_time_to_trip_s", "bad_in_incidents" },
    ///     "keys": [ { "key", <figures>, "incidents": [ { "start_s", "end_s",
    ///                 "time_to_trip_s", "bad_admitted" } ],
    ///                 "transitions": [ { "at_s", "from", "to", "reason" } ] } ] } ] }
    /// <figures>: "calls", "admitted", "rejected", "rejected_would_fail",
    ///   "rejected_would_succeed" (= "rejected_slow" + "rejected_healthy"), "rejected_slow",
    ///   "rejected_healthy", "rejected_ignored", "rejected_unknown", "failures_admitted",
    ///   "failures_admitted_bad", "bad_admitted", "trips", "reopens", "time_open_s",
    ///   "time_half_open_s"
    /// ```
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The side-by-side table.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "replay of {}: {} calls, {} key(s), {:.1} s{}",
            self.trace,
            self.calls,
            self.keys,
            self.span_s,
            self.origin
                .as_ref()
                .map(|o| format!(" from {o}"))
                .unwrap_or_default()
        );
        if self.unknown_outcomes > 0 {
            let _ = writeln!(
                s,
                "{} calls were refused when the trace was recorded: their outcome is unknown \
                 (record in MetricsOnly for a complete trace)",
                self.unknown_outcomes
            );
        }
        if self.sample_rate < 1.0 {
            let _ = writeln!(
                s,
                "the trace keeps {:.1} % of the calls: count windows and minimum calls see fewer \
                 calls than they would live",
                self.sample_rate * 100.0
            );
        }
        if self.skipped_lines > 0 {
            let _ = writeln!(s, "{} bad lines skipped", self.skipped_lines);
        }
        let _ = writeln!(
            s,
            "incidents: {} (bad: failed, or at least {:.0} ms){}",
            self.incidents.len(),
            self.bad_latency_ms,
            self.incidents
                .iter()
                .take(5)
                .map(|i| format!(
                    "{}{:.1} s – {:.1} s",
                    if self.keys > 1 {
                        format!("{}: ", i.key)
                    } else {
                        String::new()
                    },
                    i.start_s,
                    i.end_s
                ))
                .collect::<Vec<_>>()
                .join(", ")
                .split_terminator('\n')
                .map(|x| format!("; {x}"))
                .collect::<String>()
        );
        let _ = writeln!(s);
        let w = self
            .configs
            .iter()
            .map(|c| c.label.chars().count())
            .max()
            .unwrap_or(0)
            .max(14);
        let _ = write!(s, "{:36}", "");
        for c in &self.configs {
            let _ = write!(s, "  {:>w$}", c.label);
        }
        let _ = writeln!(s);
        type Row<'a> = (&'a str, Box<dyn Fn(&Totals) -> String + 'a>);
        let rows: Vec<Row<'_>> = vec![
            (
                "trips (closed → open)",
                Box::new(|t| t.figures.trips.to_string()),
            ),
            (
                "reopens (half-open → open)",
                Box::new(|t| t.figures.reopens.to_string()),
            ),
            (
                "time open",
                Box::new(|t| format!("{:.1} s", t.figures.time_open_s)),
            ),
            (
                "calls refused",
                Box::new(|t| t.figures.rejected.to_string()),
            ),
            (
                "  would have failed",
                Box::new(|t| t.figures.rejected_would_fail.to_string()),
            ),
            (
                "  would have succeeded, slowly (bad)",
                Box::new(|t| t.figures.rejected_slow.to_string()),
            ),
            (
                "  would have succeeded (healthy)",
                Box::new(|t| t.figures.rejected_healthy.to_string()),
            ),
            (
                "  ignored",
                Box::new(|t| t.figures.rejected_ignored.to_string()),
            ),
            (
                "  outcome unknown",
                Box::new(|t| t.figures.rejected_unknown.to_string()),
            ),
            (
                "failures admitted",
                Box::new(|t| t.figures.failures_admitted.to_string()),
            ),
            (
                "bad calls admitted in incidents",
                Box::new(|t| t.figures.bad_admitted.to_string()),
            ),
            (
                "incidents tripped",
                Box::new(|t| format!("{} of {}", t.incidents_tripped, t.incidents)),
            ),
            (
                "time to trip (mean)",
                Box::new(|t| opt_s(t.mean_time_to_trip_s)),
            ),
            (
                "time to trip (longest)",
                Box::new(|t| opt_s(t.max_time_to_trip_s)),
            ),
        ];
        for (name, f) in rows {
            let _ = write!(s, "{name:36}");
            for c in &self.configs {
                let _ = write!(s, "  {:>w$}", f(&c.totals));
            }
            let _ = writeln!(s);
        }
        for c in &self.configs {
            let tr: Vec<(&str, &TransitionOut)> = c
                .keys
                .iter()
                .flat_map(|k| k.transitions.iter().map(move |t| (k.key.as_str(), t)))
                .collect();
            if tr.is_empty() {
                continue;
            }
            let _ = writeln!(s, "\n{}: transitions ({})", c.label, tr.len());
            let mut sorted = tr;
            sorted.sort_by(|a, b| a.1.at_s.total_cmp(&b.1.at_s));
            for (key, t) in sorted.iter().take(12) {
                let _ = writeln!(
                    s,
                    "  t={:>10.3} s: {} → {} ({}){}",
                    t.at_s,
                    t.from,
                    t.to,
                    t.reason,
                    if self.keys > 1 {
                        format!(" [{key}]")
                    } else {
                        String::new()
                    }
                );
            }
            if sorted.len() > 12 {
                let _ = writeln!(
                    s,
                    "  ... {} more (--json lists them all)",
                    sorted.len() - 12
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod detect_tests {
    use super::*;
    use proptest::prelude::*;

    /// The bin-by-bin reading that `detect` must equal: every bin from 0 to the last start's,
    /// a bin below the minimum keeping the verdict before it.
    fn dense(calls: &[Call], d: &Detect) -> Vec<(u64, u64)> {
        let bin = nanos(d.bin).max(1);
        let Some(last) = calls.iter().map(|c| c.start).max() else {
            return Vec::new();
        };
        let n = (last / bin + 1) as usize;
        let (mut known, mut bad) = (vec![0u32; n], vec![0u32; n]);
        for c in calls {
            if matches!(c.outcome, TraceOutcome::Success | TraceOutcome::Failure) {
                let b = (c.start / bin) as usize;
                known[b] += 1;
                bad[b] += u32::from(c.flags & BAD != 0);
            }
        }
        let (mut verdict, mut runs) = (false, Vec::<(u64, u64)>::new());
        let gap = nanos(d.merge_gap);
        for b in 0..n {
            if known[b] >= d.min_calls {
                verdict = f64::from(bad[b]) >= d.bad_share * f64::from(known[b]);
            }
            if verdict {
                let (from, until) = (b as u64 * bin, (b as u64 + 1) * bin);
                match runs.last_mut() {
                    Some(r) if from <= r.1.saturating_add(gap) => r.1 = until,
                    _ => runs.push((from, until)),
                }
            }
        }
        runs
    }

    fn call(start_ms: u64, kind: u8) -> Call {
        let (outcome, flags) = match kind % 4 {
            0 => (TraceOutcome::Success, 0),
            1 => (TraceOutcome::Failure, BAD),
            2 => (TraceOutcome::Success, BAD), // slow
            _ => (TraceOutcome::Rejected, 0),
        };
        let start = start_ms * 1_000_000;
        Call {
            start,
            end: start,
            outcome,
            flags,
        }
    }

    proptest! {
        #[test]
        fn sparse_bins_read_as_every_bin_would(
            calls in proptest::collection::vec((0u64..120_000, any::<u8>()), 0..400),
            min_calls in 1u32..6,
            bad_share in 0.1f64..1.0,
            gap_s in 0u64..8,
        ) {
            let calls: Vec<Call> = calls.into_iter().map(|(t, k)| call(t, k)).collect();
            let d = Detect {
                min_calls,
                bad_share,
                merge_gap: Duration::from_secs(gap_s),
                ..Detect::default()
            };
            prop_assert_eq!(detect(&calls, &d), dense(&calls, &d));
        }
    }

    /// Two calls 32 years apart: a handful of bins, not a billion.
    #[test]
    fn a_long_quiet_gap_costs_nothing() {
        let year_ms = 365 * 24 * 3600 * 1000;
        let mut calls: Vec<Call> = (0..10).map(|i| call(i, 1)).collect();
        calls.extend((0..10).map(|i| call(32 * year_ms + i, 1)));
        let runs = detect(&calls, &Detect::default());
        // Bad from the start, and no call in between says otherwise: one run to the end.
        assert_eq!(runs, [(0, (32 * year_ms / 1000 + 1) * 1_000_000_000)]);
    }
}
