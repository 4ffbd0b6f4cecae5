//! The figures of a simulation, as a table and as JSON.
//!
//! # JSON schema (`schema_version` 1)
//!
//! The crate's README ("JSON schema") documents every field, the policies' and tiers' ones
//! included; this is its outline. Times are seconds since the start of the run (`*_s`),
//! latencies milliseconds (`*_ms`). A field that does not apply (no incident, a breaker that
//! never tripped) is `null`.
//!
//! ```text
//! {
//!   "schema_version": 1, "scenario", "description", "seed", "duration_s", "dependency",
//!   "replicas", "workers_per_replica", "incident": { "start_s", "end_s" } | null,
//!   "runs": [                               "without" first, then each protection in order
//!     { "label", "protected", "breaker", "timeout_ms", "attempts", "requests", "succeeded",
//!       "failed", "rejected_fast", "shed", "dependency_calls", "load_amplification",
//!       pool and queue figures, "latency", "endpoints", trip and close times,
//!       "transitions", "policies" (retry, bulkhead, gate, throttle, limiter, shed, partial,
//!       chaos, as configured), "tiers", "hosts" }
//!   ]
//! }
//! ```
//!
//! `replica` is `null` for a breaker shared by all replicas, `shard` is `null` for a breaker
//! keyed by the dependency. Percentiles are nearest-rank over every answered request (shed
//! ones included, at the time they were shed), measured from arrival to answer. A new field
//! may appear without a version change; a field's meaning never changes without one.

use std::fmt::Write as _;

use serde::Serialize;
use tripline::State;

use crate::engine::{Bin, LatencyKey, Out, RunOutput, Sample};
use crate::scenario::{Protection, Scenario, Scope, Sharing};

/// Rows of a table: `(label, one value per run)`.
pub type Rows = Vec<(String, Vec<String>)>;

/// The version of the JSON layout.
pub const SCHEMA_VERSION: u32 = 1;

/// The result of simulating one scenario: one run per variant.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The JSON layout's version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// The scenario's name.
    pub scenario: String,
    /// Its description.
    pub description: String,
    /// The seed used.
    pub seed: u64,
    /// How long requests arrived, in seconds.
    pub duration_s: f64,
    /// The dependency's name.
    pub dependency: String,
    /// Replicas.
    pub replicas: u32,
    /// Workers per replica.
    pub workers_per_replica: u32,
    /// The incident window, if the scenario has faults.
    pub incident: Option<Incident>,
    /// The tiers a request crosses, from the first to `[service]` (one without `[[tiers]]`).
    pub tiers: Vec<String>,
    /// The runs: "without" first, then each protection.
    pub runs: Vec<RunReport>,
    /// With a `[sweep]`: a few figures of every run at each of the swept values.
    pub sweep: Option<crate::sweep::SweepReport>,
}

/// When the faults start and end.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Incident {
    /// The earliest fault start, in seconds.
    pub start_s: f64,
    /// The latest fault end, in seconds.
    pub end_s: f64,
}

/// The breaker set-up of a protected run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BreakerInfo {
    /// What a breaker is keyed by.
    pub scope: Scope,
    /// Where its state lives.
    pub sharing: Sharing,
    /// How many breakers the run held.
    pub count: u32,
    /// Whether rejected calls were answered with a fallback.
    pub fallback: bool,
}

/// Latency figures of a class of requests, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Requests answered.
    pub count: u64,
    /// Median.
    pub p50_ms: Option<f64>,
    /// 99th percentile.
    pub p99_ms: Option<f64>,
    /// Slowest.
    pub max_ms: Option<f64>,
    /// 99th percentile of the requests answered before the incident began (the normal level).
    pub baseline_p99_ms: Option<f64>,
}

/// Latency by class of endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LatencyClasses {
    /// Endpoints that call the dependency.
    pub using_dependency: Latency,
    /// Endpoints that never call it.
    pub other: Latency,
}

/// Figures of one endpoint.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EndpointReport {
    /// Its name.
    pub name: String,
    /// Whether it calls the dependency.
    pub uses_dependency: bool,
    /// Its priority: `critical`, `default`, `sheddable` or a number.
    pub priority: crate::adaptive::EndpointPriority,
    /// Requests to it.
    pub requests: u64,
    /// Answered with real data.
    pub succeeded: u64,
    /// Answered with an error.
    pub failed: u64,
    /// Rejected by the breaker (fallbacks included).
    pub rejected: u64,
    /// Answered with the fallback.
    pub fallback: u64,
    /// Shed by the worker pool.
    pub shed: u64,
    /// Median latency.
    pub p50_ms: Option<f64>,
    /// 99th percentile latency.
    pub p99_ms: Option<f64>,
}

/// A breaker transition.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TransitionReport {
    /// When, in seconds.
    pub at_s: f64,
    /// The replica whose breaker moved (`None` for a shared breaker).
    pub replica: Option<u32>,
    /// The shard, for per-shard breakers and for the blamed shards' breakers of
    /// `scope = "server-directed"` (whose dependency-wide breaker's transitions have none).
    pub shard: Option<u32>,
    /// The old state.
    pub from: State,
    /// The new state.
    pub to: State,
    /// The rule that fired.
    pub reason: &'static str,
}

/// Requests refused by each local policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RejectedBy {
    /// By the breaker.
    pub breaker: u64,
    /// By the concurrency gate.
    pub gate: u64,
    /// By the bulkhead (queue full, or `max_wait` passed).
    pub bulkhead: u64,
    /// By the adaptive throttle.
    pub throttle: u64,
    /// By the priority shedder in the client.
    pub shed: u64,
    /// By the adaptive limiter.
    pub limiter: u64,
    /// By the partial breaker.
    pub partial: u64,
}

impl RejectedBy {
    fn of(r: &[u64; crate::layers::POLICIES]) -> Self {
        use crate::layers::Policy as P;
        RejectedBy {
            breaker: r[P::Breaker as usize],
            gate: r[P::Gate as usize],
            bulkhead: r[P::Bulkhead as usize],
            throttle: r[P::Throttle as usize],
            shed: r[P::Shed as usize],
            limiter: r[P::Limiter as usize],
            partial: r[P::Partial as usize],
        }
    }

    /// Refusals by policies other than the breaker.
    fn others(&self) -> u64 {
        self.gate + self.bulkhead + self.throttle + self.shed + self.limiter + self.partial
    }
}

/// One tier of a run: the answers it gave, its pool, its calls to the tier below, its
/// policies.
#[derive(Clone, Debug, Serialize)]
pub struct TierReport {
    /// Its name.
    pub name: String,
    /// Replicas.
    pub replicas: u32,
    /// Workers per replica.
    pub workers: u32,
    /// Requests it answered (from the callers, or from the tier above: its retries included).
    pub requests: u64,
    /// Answered with real data.
    pub succeeded: u64,
    /// Answered with an error after their attempts.
    pub failed: u64,
    /// Refused by a local policy (fallbacks included).
    pub rejected: u64,
    /// Of those, answered with the fallback.
    pub fallback: u64,
    /// Shed by the worker pool.
    pub shed: u64,
    /// Of those, refused for their priority by a shedder at its workers.
    pub shed_by_priority: u64,
    /// Refusals by policy.
    pub rejected_by: RejectedBy,
    /// Calls it made to the tier below (or the dependency), retries included.
    pub calls_below: u64,
    /// `calls_below / requests`.
    pub amplification: f64,
    /// Most busy workers on one replica.
    pub pool_peak: u32,
    /// Seconds in which some replica's pool was full.
    pub pool_full_s: u32,
    /// From the incident's end to the end of the last second with a full pool.
    pub pool_full_after_recovery_s: Option<f64>,
    /// Most queued requests on one replica.
    pub queue_peak: u32,
    /// From the incident's end until its answers were healthy for good (see
    /// [`RunReport::recovery_s`]); `None`: never, within the arrivals.
    pub recovery_s: Option<f64>,
    /// Breakers it held in front of the tier below.
    pub breakers: u32,
    /// Breakers that opened at least once.
    pub breakers_tripped: u32,
    /// Its breakers' transitions, in order.
    pub transitions: Vec<TransitionReport>,
    /// Its policies' own counters.
    pub policies: crate::layers::PolicyReport,
    /// Per-second bins (for charts; not part of the JSON).
    #[serde(skip)]
    pub series: Vec<Bin>,
}

/// The share of errors a second may hold and still be healthy: 5 %.
pub const HEALTHY_ERROR_SHARE: f64 = 0.05;

/// Whether a second is healthy: it answered something, and at most
/// [`HEALTHY_ERROR_SHARE`] of its answers were errors (failed, refused without a fallback,
/// or shed).
pub fn healthy(b: &Bin) -> bool {
    let answered =
        u64::from(b.succeeded) + u64::from(b.failed) + u64::from(b.rejected) + u64::from(b.shed);
    let errors = u64::from(b.failed) + u64::from(b.rejected - b.fallback) + u64::from(b.shed);
    answered > 0 && errors as f64 <= HEALTHY_ERROR_SHARE * answered as f64
}

/// From the incident's end (`end_s`) to the start of the first second after which every
/// second up to the end of the arrivals (`duration_s`) is [`healthy`]: 0 when healthy from
/// the end on, `None` when the last second of the arrivals is not healthy, or the incident
/// outlasts them.
pub fn recovery(bins: &[Bin], end_s: f64, duration_s: f64) -> Option<f64> {
    if end_s >= duration_s {
        return None;
    }
    let first = end_s.floor() as usize;
    let last = (duration_s.ceil() as usize).max(first + 1);
    let mut start = None;
    for i in (first..last).rev() {
        if bins.get(i).is_some_and(healthy) {
            start = Some(i);
        } else {
            break;
        }
    }
    start.map(|s| (s as f64 - end_s).max(0.0))
}

/// Per-second series of a run, for charts (not part of the JSON).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    /// The raw one-second bins.
    pub bins: Vec<Bin>,
    /// Latency percentiles per bin, in ms: (p50, p99) of requests using the dependency.
    pub using_dependency: Vec<Option<(f64, f64)>>,
    /// Latency percentiles per bin, in ms: (p50, p99) of the other requests.
    pub other: Vec<Option<(f64, f64)>>,
    /// Share of breakers open (or forced open) at the end of each bin, in [0, 1].
    pub open: Vec<f64>,
    /// Share of breakers half-open at the end of each bin, in [0, 1].
    pub half_open: Vec<f64>,
    /// Every breaker's transitions (its index, the time, the new state), by tier, for the
    /// state timeline; and each tier's breaker count and shard keys.
    pub lanes: Vec<Lanes>,
}

/// The breakers of one tier, for the state timeline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lanes {
    /// The tier's name.
    pub tier: String,
    /// How many breakers.
    pub count: u32,
    /// Shard keys per replica (1 for a breaker keyed by the dependency).
    pub keys: u32,
    /// Whether one breaker set serves every replica.
    pub shared: bool,
    /// `(breaker, at_s, to)` in time order.
    pub transitions: Vec<(u32, f64, State)>,
}

/// The figures of one run.
#[derive(Clone, Debug, Serialize)]
pub struct RunReport {
    /// "without", or the protection's label.
    pub label: String,
    /// Whether the run had breakers.
    pub protected: bool,
    /// The breaker set-up.
    pub breaker: Option<BreakerInfo>,
    /// Per-attempt timeout.
    pub timeout_ms: Option<f64>,
    /// Attempts per request.
    pub attempts: u32,
    /// Requests that arrived.
    pub requests: u64,
    /// Answered with real data.
    pub succeeded: u64,
    /// Answered with an error after their attempts.
    pub failed: u64,
    /// Refused by a local policy (fallbacks included): a breaker, a gate, a bulkhead or a
    /// throttle refused an attempt and the request was answered at once after the refusal.
    /// This includes requests whose retry was refused after a failed attempt and its backoff
    /// ([`rejected_on_retry`]), which were not answered fast.
    ///
    /// [`rejected_on_retry`]: Self::rejected_on_retry
    pub rejected_fast: u64,
    /// Of `rejected_fast`, by policy.
    pub rejected_by: RejectedBy,
    /// Of `rejected_fast`, the requests whose refused attempt was a retry: they had made at
    /// least one failed attempt (and waited its backoff) before the breaker refused.
    pub rejected_on_retry: u64,
    /// Rejected and answered with the fallback.
    pub fallback_served: u64,
    /// Rejected although no fault touched the request at that moment.
    pub rejected_while_healthy: u64,
    /// Rejected although the call would have succeeded: drawn, at the moment of the refusal,
    /// from the dependency's behaviour then (its error rate for the request's shard, and its
    /// latency against the timeout), its capacity aside: the healthy calls a protection
    /// refused. `None` with `[[tiers]]`, `[dependency.hosts]` or optimistic writes.
    pub rejected_would_succeed: Option<u64>,
    /// Attempts a replica admitted from a shared store's view that still said Closed after
    /// the fleet's breaker had moved on (their results were stale; 0 unless `view_ttl`).
    pub stale_view_calls: u64,
    /// Shed by a full queue or the queue timeout, or (with a shedder at the workers) for
    /// their priority.
    pub shed: u64,
    /// Of `shed`, refused for their priority by a shedder at the workers (at the first tier).
    pub shed_by_priority: u64,
    /// Attempts that reached the dependency.
    pub dependency_calls: u64,
    /// `dependency_calls / requests`.
    pub load_amplification: f64,
    /// Workers per replica.
    pub pool_size: u32,
    /// Most busy workers on one replica.
    pub pool_peak: u32,
    /// Seconds in which some replica's pool was full.
    pub pool_full_s: u32,
    /// Seconds from the incident's end to the end of the last second in which some replica's
    /// pool was full (0 when none was full after the end; `None` without an incident).
    pub pool_full_after_recovery_s: Option<f64>,
    /// Most queued requests on one replica.
    pub queue_peak: u32,
    /// Latency by class.
    pub latency: LatencyClasses,
    /// Figures per endpoint.
    pub endpoints: Vec<EndpointReport>,
    /// First closed→open at or after the incident start, in seconds.
    pub first_trip_s: Option<f64>,
    /// `first_trip_s` − incident start.
    pub time_to_trip_s: Option<f64>,
    /// First time at or after the incident end when every breaker is closed.
    pub all_closed_s: Option<f64>,
    /// `all_closed_s` − incident end.
    pub time_to_close_after_recovery_s: Option<f64>,
    /// Breakers that opened at least once.
    pub breakers_tripped: u32,
    /// Every transition, in order.
    pub transitions: Vec<TransitionReport>,
    /// From the incident's end until the answers were healthy for good: the start of the
    /// first second after which every second up to the end of the arrivals answered at least
    /// one request with at most 5 % errors (failed, refused without a fallback, or shed).
    /// `None`: never within the arrivals (or no incident ending before them).
    pub recovery_s: Option<f64>,
    /// When the last request was answered, in seconds.
    pub completion_s: Option<f64>,
    /// `[service]`'s policies' own counters: retries made and refused by the budget, breaker,
    /// gate, bulkhead and throttle refusals, bulkhead waits.
    pub policies: crate::layers::PolicyReport,
    /// Every tier, from the first to `[service]` (one without `[[tiers]]`).
    pub tiers: Vec<TierReport>,
    /// The dependency's hosts, with `[dependency.hosts]`: ejections, load, panic.
    pub hosts: Option<crate::hosts::HostsReport>,
    /// Per-second series (for charts).
    #[serde(skip)]
    pub series: Series,
}

impl RunReport {
    /// With `scope = "server-directed"`: how many shard breakers the blames made (the
    /// registry's breakers less the dependency-wide ones: the simulator's registry never
    /// evicts) and how many of them opened at least once (their transitions are among
    /// [`transitions`](Self::transitions), with their `shard`). `None` for other runs.
    pub fn shard_breakers(&self) -> Option<(u32, u32)> {
        let info = self.breaker.as_ref()?;
        if info.scope != Scope::ServerDirected {
            return None;
        }
        let held = self.policies.breaker.as_ref().map_or(0, |b| b.count);
        let mut opened: Vec<(Option<u32>, u32)> = self
            .transitions
            .iter()
            .filter(|t| t.to == State::Open)
            .filter_map(|t| t.shard.map(|s| (t.replica, s)))
            .collect();
        opened.sort_unstable();
        opened.dedup();
        Some((held.saturating_sub(info.count), opened.len() as u32))
    }
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn ms(key: u32) -> f64 {
    LatencyKey(key).ms()
}

/// Nearest-rank percentile of an unsorted slice of latency keys (reordered in place).
fn pct(v: &mut [u32], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    let (_, x, _) = v.select_nth_unstable(rank);
    Some(ms(*x))
}

fn pct_sorted(v: &[u32], p: f64) -> f64 {
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    ms(v[rank])
}

fn latency_of(
    samples: &[Sample],
    keep: impl Fn(&Sample) -> bool,
    before_bin: Option<u32>,
) -> Latency {
    let mut v: Vec<u32> = samples
        .iter()
        .filter(|s| keep(s))
        .map(|s| s.lat.0)
        .collect();
    let mut base: Vec<u32> = match before_bin {
        Some(b) => samples
            .iter()
            .filter(|s| keep(s) && s.bin() < b)
            .map(|s| s.lat.0)
            .collect(),
        None => Vec::new(),
    };
    Latency {
        count: v.len() as u64,
        max_ms: v.iter().max().map(|&x| ms(x)),
        p50_ms: pct(&mut v, 0.50),
        p99_ms: pct(&mut v, 0.99),
        baseline_p99_ms: pct(&mut base, 0.99),
    }
}

/// Per-bin (p50, p99) of the samples `keep` selects.
fn per_bin(
    samples: &[Sample],
    keep: impl Fn(&Sample) -> bool,
    bins: usize,
) -> Vec<Option<(f64, f64)>> {
    let mut keys: Vec<u64> = samples
        .iter()
        .filter(|s| keep(s))
        .map(|s| (u64::from(s.bin()) << 32) | u64::from(s.lat.0))
        .collect();
    keys.sort_unstable();
    let mut out = vec![None; bins];
    let mut lat: Vec<u32> = Vec::new();
    let mut i = 0;
    while i < keys.len() {
        let bin = (keys[i] >> 32) as usize;
        lat.clear();
        while i < keys.len() && (keys[i] >> 32) as usize == bin {
            lat.push(keys[i] as u32);
            i += 1;
        }
        if bin < bins {
            out[bin] = Some((pct_sorted(&lat, 0.5), pct_sorted(&lat, 0.99)));
        }
    }
    out
}

/// The transitions of one tier's breakers, named by replica and shard.
fn transition_reports(
    trs: &[crate::engine::Tr],
    keys: u32,
    shared: bool,
    by_shard: bool,
) -> Vec<TransitionReport> {
    trs.iter()
        .map(|t| TransitionReport {
            at_s: secs(t.at),
            replica: (!shared).then_some(t.breaker / keys),
            shard: (keys > 1 || by_shard).then_some(t.breaker % keys),
            from: t.from,
            to: t.to,
            reason: t.reason,
        })
        .collect()
}

/// The transitions of one tier's breakers and, with `scope = "server-directed"`, of the
/// blamed shards' breakers (`scope`, numbered replica × `shards` + shard), in time order.
fn all_transition_reports(
    trs: &[crate::engine::Tr],
    scope: &[crate::engine::Tr],
    (keys, shared, by_shard): (u32, bool, bool),
    shards: u32,
) -> Vec<TransitionReport> {
    let mut all = transition_reports(trs, keys, shared, by_shard);
    if !scope.is_empty() {
        all.extend(transition_reports(scope, shards.max(1), shared, true));
        all.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    }
    all
}

fn tripped(trs: &[crate::engine::Tr], n: usize) -> u32 {
    let mut tripped = vec![false; n];
    for t in trs {
        if t.to == State::Open {
            if let Some(x) = tripped.get_mut(t.breaker as usize) {
                *x = true;
            }
        }
    }
    tripped.iter().filter(|&&t| t).count() as u32
}

pub(crate) fn run_report(scenario: &Scenario, variant: Option<usize>, o: RunOutput) -> RunReport {
    let protection: Option<&Protection> = variant.and_then(|i| scenario.protection.get(i));
    let last = scenario.tier_count() - 1;
    let spec = scenario.client_spec(variant, last).ok();
    let incident = scenario.incident();
    let before_bin = incident.map(|(s, _)| s.as_secs() as u32);
    let uses: Vec<bool> = scenario
        .endpoints
        .iter()
        .map(|e| e.uses_dependency)
        .collect();
    let using = |s: &Sample| uses[s.endpoint()];
    let latency = LatencyClasses {
        using_dependency: latency_of(&o.samples, using, before_bin),
        other: latency_of(&o.samples, |s| !using(s), before_bin),
    };
    let endpoints = scenario
        .endpoints
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let c = o.per_endpoint[i];
            let mut v: Vec<u32> = o
                .samples
                .iter()
                .filter(|s| s.endpoint() == i)
                .map(|s| s.lat.0)
                .collect();
            EndpointReport {
                name: e.name.clone(),
                uses_dependency: e.uses_dependency,
                priority: e.priority,
                requests: c.iter().sum(),
                succeeded: c[Out::Succeeded as usize],
                failed: c[Out::Failed as usize],
                rejected: c[Out::Rejected as usize] + c[Out::Fallback as usize],
                fallback: c[Out::Fallback as usize],
                shed: c[Out::Shed as usize],
                p50_ms: pct(&mut v, 0.5),
                p99_ms: pct(&mut v, 0.99),
            }
        })
        .collect();

    // Breaker timeline.
    let n = o.breakers as usize;
    let keys = match protection {
        Some(p) if p.scope == Scope::Shard => scenario.shards.map_or(1, |s| s.count),
        _ => 1,
    };
    let shared = protection.is_some_and(|p| p.sharing == Sharing::Shared);
    let by_shard = protection.is_some_and(|p| p.scope == Scope::Shard);
    let shards = scenario.shards.map_or(1, |s| s.count);
    let transitions = all_transition_reports(
        &o.transitions,
        &o.scope_transitions,
        (keys, shared, by_shard),
        shards,
    );
    let start = incident.map_or(0, |(s, _)| crate::dist::nanos(s));
    let first_trip = o
        .transitions
        .iter()
        .find(|t| t.at >= start && t.from == State::Closed && t.to == State::Open)
        .map(|t| t.at);
    let all_closed = match (incident, first_trip) {
        (Some((_, end)), Some(_)) => all_closed_after(&o.transitions, n, crate::dist::nanos(end)),
        _ => None,
    };

    let hosts = o.hosts.map(|h| h.into_report(&o.bins));

    // Series.
    let bins = o.bins.len();
    let mut open = vec![0.0; bins];
    let mut half = vec![0.0; bins];
    if n > 0 {
        let mut state = vec![State::Closed; n];
        let (mut n_open, mut n_half) = (0i64, 0i64);
        let mut it = o.transitions.iter().peekable();
        for b in 0..bins {
            let end = (b as u64 + 1) * 1_000_000_000;
            while let Some(t) = it.next_if(|t| t.at < end) {
                let s = &mut state[t.breaker as usize];
                match *s {
                    State::Open | State::ForcedOpen => n_open -= 1,
                    State::HalfOpen => n_half -= 1,
                    _ => {}
                }
                *s = t.to;
                match t.to {
                    State::Open | State::ForcedOpen => n_open += 1,
                    State::HalfOpen => n_half += 1,
                    _ => {}
                }
            }
            open[b] = n_open as f64 / n as f64;
            half[b] = n_half as f64 / n as f64;
        }
    }
    let duration_s = scenario.duration.as_secs_f64();
    let end_s = incident.map(|(_, e)| e.as_secs_f64());
    let full_after = |bins: &[Bin]| {
        end_s.map(|end| {
            let last_full = bins.iter().rposition(|b| b.pool_full);
            last_full.map_or(0.0, |b| ((b + 1) as f64 - end).max(0.0))
        })
    };
    let mut lanes = Vec::new();
    let tiers: Vec<TierReport> = o
        .tiers
        .into_iter()
        .enumerate()
        .map(|(k, t)| {
            let (keys, shared, by_shard, workers, replicas) = if k == last {
                (
                    keys,
                    shared,
                    by_shard,
                    scenario.service.workers,
                    scenario.service.replicas,
                )
            } else {
                let tm = &scenario.tiers[k];
                (1, false, false, tm.workers, tm.replicas)
            };
            let c = t.counts;
            let requests: u64 = c.iter().sum();
            lanes.push(Lanes {
                tier: scenario.tier_name(k).to_string(),
                count: t.breakers,
                keys,
                shared,
                transitions: t
                    .transitions
                    .iter()
                    .map(|x| (x.breaker, secs(x.at), x.to))
                    .collect(),
            });
            TierReport {
                name: scenario.tier_name(k).to_string(),
                replicas,
                workers,
                requests,
                succeeded: c[Out::Succeeded as usize],
                failed: c[Out::Failed as usize],
                rejected: c[Out::Rejected as usize] + c[Out::Fallback as usize],
                fallback: c[Out::Fallback as usize],
                shed: c[Out::Shed as usize],
                shed_by_priority: t.shed_by_priority,
                rejected_by: RejectedBy::of(&t.refused),
                calls_below: t.calls_below,
                amplification: if requests == 0 {
                    0.0
                } else {
                    t.calls_below as f64 / requests as f64
                },
                pool_peak: t.pool_peak,
                pool_full_s: t.bins.iter().filter(|b| b.pool_full).count() as u32,
                pool_full_after_recovery_s: full_after(&t.bins),
                queue_peak: t.queue_peak,
                recovery_s: end_s.and_then(|e| recovery(&t.bins, e, duration_s)),
                breakers: t.breakers,
                breakers_tripped: tripped(&t.transitions, t.breakers as usize),
                transitions: all_transition_reports(
                    &t.transitions,
                    &t.scope_transitions,
                    (keys, shared, by_shard),
                    shards,
                ),
                policies: t.policies,
                series: t.bins,
            }
        })
        .collect();
    let entry_refused = tiers.first().map(|t| t.rejected_by).unwrap_or_default();
    let entry_shed_by_priority = tiers.first().map_or(0, |t| t.shed_by_priority);
    let policies = tiers.last().map(|t| t.policies.clone()).unwrap_or_default();
    let series = Series {
        using_dependency: per_bin(&o.samples, using, bins),
        other: per_bin(&o.samples, |s| !using(s), bins),
        bins: o.bins,
        open,
        half_open: half,
        lanes,
    };

    let c = o.counts;
    let timeout = spec.as_ref().and_then(|s| s.timeout);
    RunReport {
        label: protection.map_or_else(|| "without".to_string(), |p| p.label.clone()),
        protected: protection.is_some(),
        breaker: protection.filter(|p| p.breakers).map(|p| BreakerInfo {
            scope: p.scope,
            sharing: p.sharing,
            count: o.breakers,
            fallback: p.fallback,
        }),
        timeout_ms: timeout.map(|t| t.as_secs_f64() * 1000.0),
        attempts: spec
            .as_ref()
            .map_or(scenario.client.attempts, |s| s.attempts),
        requests: o.requests,
        succeeded: c[Out::Succeeded as usize],
        failed: c[Out::Failed as usize],
        rejected_fast: c[Out::Rejected as usize] + c[Out::Fallback as usize],
        rejected_by: entry_refused,
        rejected_on_retry: o.rejected_on_retry,
        fallback_served: c[Out::Fallback as usize],
        rejected_while_healthy: o.rejected_healthy,
        rejected_would_succeed: o.rejected_would_succeed,
        stale_view_calls: o.stale_view_calls,
        shed: c[Out::Shed as usize],
        shed_by_priority: entry_shed_by_priority,
        dependency_calls: o.dependency_calls,
        load_amplification: if o.requests == 0 {
            0.0
        } else {
            o.dependency_calls as f64 / o.requests as f64
        },
        pool_size: scenario.service.workers,
        pool_peak: o.pool_peak,
        pool_full_s: series.bins.iter().filter(|b| b.pool_full).count() as u32,
        pool_full_after_recovery_s: full_after(&series.bins),
        queue_peak: o.queue_peak,
        latency,
        endpoints,
        first_trip_s: first_trip.map(secs),
        time_to_trip_s: first_trip.map(|t| secs(t - start)),
        all_closed_s: all_closed.map(secs),
        time_to_close_after_recovery_s: match (all_closed, incident) {
            (Some(a), Some((_, end))) => Some(secs(a.saturating_sub(crate::dist::nanos(end)))),
            _ => None,
        },
        breakers_tripped: tripped(&o.transitions, n),
        transitions,
        recovery_s: end_s.and_then(|e| recovery(&series.bins, e, duration_s)),
        completion_s: o.last_answer.map(secs),
        policies,
        tiers,
        hosts,
        series,
    }
}

/// The first time at or after `end` when every breaker is closed, replaying the transitions.
fn all_closed_after(transitions: &[crate::engine::Tr], n: usize, end: u64) -> Option<u64> {
    let mut state = vec![State::Closed; n];
    let mut not_closed = 0usize;
    let mut apply = |t: &crate::engine::Tr, not_closed: &mut usize| {
        let s = &mut state[t.breaker as usize];
        match (*s == State::Closed, t.to == State::Closed) {
            (true, false) => *not_closed += 1,
            (false, true) => *not_closed -= 1,
            _ => {}
        }
        *s = t.to;
    };
    let split = transitions.partition_point(|t| t.at <= end);
    for t in &transitions[..split] {
        apply(t, &mut not_closed);
    }
    if not_closed == 0 {
        return Some(end);
    }
    for t in &transitions[split..] {
        apply(t, &mut not_closed);
        if not_closed == 0 {
            return Some(t.at);
        }
    }
    None
}

/// A latency for the table: "0.4 ms", "40 ms", "1.25 s".
pub(crate) fn fmt_ms(v: Option<f64>) -> String {
    match v {
        None => "—".into(),
        Some(x) if x < 1.0 => format!("{x:.1} ms"),
        Some(x) if x < 1000.0 => format!("{x:.0} ms"),
        Some(x) => format!("{:.2} s", x / 1000.0),
    }
}

/// A recovery time for the table: seconds, "never" (within the arrivals), or "—" (no
/// incident ending before the arrivals do).
fn fmt_recovery(v: Option<f64>, incident: Option<Incident>, duration_s: f64) -> String {
    match (v, incident) {
        (Some(x), _) => fmt_s(Some(x)),
        (None, Some(i)) if i.end_s < duration_s => "never".into(),
        _ => "—".into(),
    }
}

/// Writes rows as an aligned text table under the column heads.
fn write_table(out: &mut String, corner: &str, heads: &[String], rows: &[(String, Vec<String>)]) {
    let w0 = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .chain([corner.chars().count()])
        .max()
        .unwrap_or(0);
    let widths: Vec<usize> = (0..heads.len())
        .map(|i| {
            rows.iter()
                .map(|(_, v)| v.get(i).map_or(0, |x| x.chars().count()))
                .chain([heads[i].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let pad = w0 - corner.chars().count();
    let _ = write!(out, "{corner}{}", " ".repeat(pad));
    for (h, w) in heads.iter().zip(&widths) {
        let _ = write!(out, "   {h:>w$}", w = *w);
    }
    out.push('\n');
    for (label, vals) in rows {
        let pad = w0 - label.chars().count();
        let _ = write!(out, "{label}{}", " ".repeat(pad));
        for (v, w) in vals.iter().zip(&widths) {
            let pad = w - v.chars().count();
            let _ = write!(out, "   {}{v}", " ".repeat(pad));
        }
        out.push('\n');
    }
}

/// A sweep as rows: one per value, one column per run, the figures joined by " / ".
pub(crate) fn sweep_rows(
    sw: &crate::sweep::SweepReport,
) -> (Vec<String>, Vec<(String, Vec<String>)>) {
    let heads: Vec<String> = sw
        .points
        .first()
        .map(|p| p.runs.iter().map(|r| r.label.clone()).collect())
        .unwrap_or_default();
    let rows = sw
        .points
        .iter()
        .map(|p| {
            (
                p.value.clone(),
                p.runs
                    .iter()
                    .map(|r| {
                        sw.metrics
                            .iter()
                            .enumerate()
                            .map(|(i, m)| match sw.summary {
                                crate::sweep::Summary::Median => crate::sweep::fmt_spread(
                                    m,
                                    &r.spread.get(i).copied().unwrap_or_default(),
                                    sw.repeat,
                                ),
                                crate::sweep::Summary::Mean => {
                                    crate::sweep::fmt_metric(m, r.figures.get(i).copied().flatten())
                                }
                            })
                            .collect::<Vec<_>>()
                            .join(" / ")
                    })
                    .collect(),
            )
        })
        .collect();
    (heads, rows)
}

/// The rows of some runs' policy counters (one report per run), for the policies some run
/// has.
fn policy_rows_of(p: &[&crate::layers::PolicyReport], prefix: &str) -> Vec<(String, Vec<String>)> {
    let mut rows = Vec::new();
    let col = |f: &dyn Fn(&crate::layers::PolicyReport) -> Option<String>| -> Vec<String> {
        p.iter()
            .map(|r| f(r).unwrap_or_else(|| "—".into()))
            .collect()
    };
    if p.iter().any(|r| r.retry.is_some()) {
        rows.push((
            format!("{prefix}retries made"),
            col(&|r| r.retry.as_ref().map(|x| x.retries.to_string())),
        ));
        if p.iter()
            .any(|r| r.retry.as_ref().is_some_and(|x| !x.budget.is_empty()))
        {
            rows.push((
                format!("{prefix}  refused by the retry budget"),
                col(&|r| {
                    r.retry.as_ref().map(|x| {
                        if x.budget.is_empty() {
                            "no budget".into()
                        } else {
                            format!("{} ({})", x.budget_refused, x.budget.join(" + "))
                        }
                    })
                }),
            ));
        }
        if p.iter()
            .any(|r| r.retry.as_ref().is_some_and(|x| x.gate_refused > 0))
        {
            rows.push((
                format!("{prefix}  refused by the gate's retry limit"),
                col(&|r| r.retry.as_ref().map(|x| x.gate_refused.to_string())),
            ));
        }
    }
    if p.iter().any(|r| r.gate.is_some()) {
        rows.push((
            format!("{prefix}gate overflows (requests / pending / retries)"),
            col(&|r| {
                r.gate.as_ref().map(|g| {
                    format!(
                        "{} / {} / {}",
                        g.upstream_rq_overflow,
                        g.upstream_rq_pending_overflow,
                        g.upstream_rq_retry_overflow
                    )
                })
            }),
        ));
    }
    if p.iter().any(|r| r.bulkhead.is_some()) {
        rows.push((
            format!("{prefix}bulkhead: waited / queue full / timed out"),
            col(&|r| {
                r.bulkhead
                    .as_ref()
                    .map(|b| format!("{} / {} / {}", b.waited, b.queue_full, b.timed_out))
            }),
        ));
    }
    if p.iter().any(|r| r.throttle.is_some()) {
        rows.push((
            format!("{prefix}throttle: refused locally"),
            col(&|r| r.throttle.as_ref().map(|t| t.rejected.to_string())),
        ));
    }
    if p.iter()
        .any(|r| r.breaker.as_ref().is_some_and(|b| b.ramping_up > 0))
    {
        rows.push((
            format!("{prefix}breaker: refused while ramping up"),
            col(&|r| r.breaker.as_ref().map(|b| b.ramping_up.to_string())),
        ));
    }
    if p.iter().any(|r| r.partial.is_some()) {
        rows.push((
            format!("{prefix}partial breaker: refused (highest rate)"),
            col(&|r| {
                r.partial
                    .as_ref()
                    .map(|x| format!("{} ({:.0}%)", x.rejected, 100.0 * x.highest_rejection_rate))
            }),
        ));
    }
    if p.iter().any(|r| r.shed.is_some()) {
        rows.push((
            format!("{prefix}shedder: shed / full / queue full, timed out"),
            col(&|r| {
                r.shed.as_ref().map(|x| {
                    format!(
                        "{} / {} / {} ({})",
                        x.shed,
                        x.full,
                        x.queue_full + x.evicted + x.timed_out,
                        x.at
                    )
                })
            }),
        ));
    }
    if p.iter().any(|r| r.limiter.is_some()) {
        rows.push((
            format!("{prefix}limiter: lowest–highest limit"),
            col(&|r| {
                r.limiter
                    .as_ref()
                    .map(|x| format!("{} {}–{}", x.algorithm, x.lowest_limit, x.highest_limit))
            }),
        ));
        rows.push((
            format!("{prefix}limiter: refused"),
            col(&|r| r.limiter.as_ref().map(|x| x.slots.refused().to_string())),
        ));
    }
    if p.iter().any(|r| r.chaos.is_some()) {
        rows.push((
            format!("{prefix}faults injected (latency / errors / hangs)"),
            col(&|r| {
                r.chaos
                    .as_ref()
                    .map(|x| format!("{} / {} / {}", x.latency, x.errors, x.hangs))
            }),
        ));
    }
    rows
}

fn fmt_s(v: Option<f64>) -> String {
    match v {
        None => "—".into(),
        Some(x) if x < 10.0 => format!("{x:.2} s"),
        Some(x) => format!("{x:.1} s"),
    }
}

impl Report {
    /// The report as pretty-printed JSON (see the module docs for the schema).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The rows of the comparison, one value per run: `(label, values)`. The text table and
    /// the HTML page show these.
    pub fn rows(&self) -> Rows {
        let dep = &self.dependency;
        // With tiers in front, the pool rows are the service's (the last tier's).
        let of_service = match self.tiers.last() {
            Some(name) if self.tiers.len() > 1 => format!("{name} "),
            _ => String::new(),
        };
        let others = self.runs.iter().any(|r| r.rejected_by.others() > 0);
        let rejected = if others {
            "rejected fast by a local policy"
        } else {
            "rejected fast by the breaker"
        };
        let mut rows: Vec<(String, Vec<String>)> = vec![
            ("requests".into(), self.col(|r| r.requests.to_string())),
            ("succeeded".into(), self.col(|r| r.succeeded.to_string())),
            (
                "failed (errors, timeouts)".into(),
                self.col(|r| r.failed.to_string()),
            ),
            (rejected.into(), self.col(|r| r.rejected_fast.to_string())),
        ];
        if others {
            for (label, f) in [
                (
                    "  by the breaker",
                    (|b: &RejectedBy| b.breaker) as fn(&RejectedBy) -> u64,
                ),
                ("  by the gate", |b: &RejectedBy| b.gate),
                ("  by the partial breaker", |b: &RejectedBy| b.partial),
                ("  by the bulkhead", |b: &RejectedBy| b.bulkhead),
                ("  by the shedder", |b: &RejectedBy| b.shed),
                ("  by the limiter", |b: &RejectedBy| b.limiter),
                ("  by the throttle", |b: &RejectedBy| b.throttle),
            ] {
                if self.runs.iter().any(|r| f(&r.rejected_by) > 0) {
                    rows.push((label.into(), self.col(|r| f(&r.rejected_by).to_string())));
                }
            }
        }
        rows.extend([
            (
                "  on a retry".into(),
                self.col(|r| r.rejected_on_retry.to_string()),
            ),
            (
                "  fallback served".into(),
                self.col(|r| r.fallback_served.to_string()),
            ),
            (
                "  rejected while healthy".into(),
                self.col(|r| r.rejected_while_healthy.to_string()),
            ),
        ]);
        if self
            .runs
            .iter()
            .any(|r| r.rejected_fast > 0 && r.rejected_would_succeed.is_some())
        {
            rows.push((
                "  rejected that would have succeeded".into(),
                self.col(|r| {
                    r.rejected_would_succeed
                        .map_or_else(|| "—".into(), |v| v.to_string())
                }),
            ));
        }
        rows.push((
            "shed by the worker pool".into(),
            self.col(|r| r.shed.to_string()),
        ));
        if self.runs.iter().any(|r| r.shed_by_priority > 0) {
            rows.push((
                "  of them for their priority".into(),
                self.col(|r| r.shed_by_priority.to_string()),
            ));
        }
        rows.extend([(
            format!("calls that reached {dep}"),
            self.col(|r| r.dependency_calls.to_string()),
        )]);
        if self.runs.iter().any(|r| r.stale_view_calls > 0) {
            // Right after "calls that reached ...": the stale-view calls are among them.
            rows.push((
                "  on a stale shared view".into(),
                self.col(|r| r.stale_view_calls.to_string()),
            ));
        }
        rows.extend(self.policy_rows());
        rows.extend([
            (
                "load amplification (calls/request)".into(),
                self.col(|r| format!("{:.2}×", r.load_amplification)),
            ),
            (
                format!("worker-pool peak (one {}replica)", of_service),
                self.col(|r| format!("{}/{}", r.pool_peak, r.pool_size)),
            ),
            (
                format!("seconds with a full {}pool", of_service),
                self.col(|r| r.pool_full_s.to_string()),
            ),
            (
                format!("{}pool still full after recovery", of_service),
                self.col(|r| fmt_s(r.pool_full_after_recovery_s)),
            ),
            (
                format!("p50 / p99, endpoints using {dep}"),
                self.col(|r| {
                    let l = r.latency.using_dependency;
                    format!("{} / {}", fmt_ms(l.p50_ms), fmt_ms(l.p99_ms))
                }),
            ),
            (
                "p50 / p99, other endpoints".into(),
                self.col(|r| {
                    let l = r.latency.other;
                    format!("{} / {}", fmt_ms(l.p50_ms), fmt_ms(l.p99_ms))
                }),
            ),
        ]);
        if self.incident.is_some() {
            rows.push((
                "back to healthy after the faults".into(),
                self.col(|r| fmt_recovery(r.recovery_s, self.incident, self.duration_s)),
            ));
        } else {
            rows.push((
                "last request answered at".into(),
                self.col(|r| fmt_s(r.completion_s)),
            ));
        }
        rows.extend([
            ("time to trip".into(), self.col(|r| fmt_s(r.time_to_trip_s))),
            (
                "time to close after recovery".into(),
                self.col(|r| fmt_s(r.time_to_close_after_recovery_s)),
            ),
            (
                "breaker transitions".into(),
                self.col(|r| {
                    if r.breaker.is_some() {
                        r.transitions.len().to_string()
                    } else {
                        "—".into()
                    }
                }),
            ),
        ]);
        if self.runs.iter().any(|r| {
            r.breaker
                .as_ref()
                .is_some_and(|b| b.scope == Scope::ServerDirected)
        }) {
            rows.push((
                "  shard breakers made (opened)".into(),
                self.col(|r| match r.shard_breakers() {
                    Some((made, opened)) => format!("{made} ({opened})"),
                    None => "—".into(),
                }),
            ));
        }
        rows.extend(crate::hosts::table_rows(self));
        rows
    }

    /// The rows of `[service]`'s policies' own counters, for the policies some run has.
    fn policy_rows(&self) -> Vec<(String, Vec<String>)> {
        policy_rows_of(
            &self.runs.iter().map(|r| &r.policies).collect::<Vec<_>>(),
            "",
        )
    }

    /// Rows per tier, for scenarios with `[[tiers]]`: `(tier, rows)`.
    pub fn tier_rows(&self) -> Vec<(String, Rows)> {
        if self.tiers.len() < 2 {
            return Vec::new();
        }
        (0..self.tiers.len())
            .map(|k| {
                let below = self.tiers.get(k + 1).unwrap_or(&self.dependency);
                let t = |r: &RunReport| r.tiers.get(k).cloned();
                let col = |f: &dyn Fn(&TierReport) -> String| -> Vec<String> {
                    self.runs
                        .iter()
                        .map(|r| t(r).map_or_else(|| "—".into(), |x| f(&x)))
                        .collect()
                };
                let mut rows = vec![
                    (
                        "requests answered".to_string(),
                        col(&|x| x.requests.to_string()),
                    ),
                    ("succeeded".into(), col(&|x| x.succeeded.to_string())),
                    (
                        "errors (failed, refused, shed)".into(),
                        col(&|x| (x.failed + x.rejected - x.fallback + x.shed).to_string()),
                    ),
                    ("  of them shed".into(), col(&|x| x.shed.to_string())),
                    (
                        format!("calls to {below}"),
                        col(&|x| format!("{} ({:.2}×)", x.calls_below, x.amplification)),
                    ),
                    (
                        "worker-pool peak (one replica)".into(),
                        col(&|x| format!("{}/{}", x.pool_peak, x.workers)),
                    ),
                    (
                        "seconds with a full pool".into(),
                        col(&|x| x.pool_full_s.to_string()),
                    ),
                ];
                if self.incident.is_some() {
                    rows.push((
                        "back to healthy after the faults".into(),
                        col(&|x| fmt_recovery(x.recovery_s, self.incident, self.duration_s)),
                    ));
                }
                let policies: Vec<crate::layers::PolicyReport> = self
                    .runs
                    .iter()
                    .map(|r| t(r).map(|x| x.policies).unwrap_or_default())
                    .collect();
                rows.extend(policy_rows_of(&policies.iter().collect::<Vec<_>>(), ""));
                if self
                    .runs
                    .iter()
                    .any(|r| t(r).is_some_and(|x| x.breakers > 0))
                {
                    rows.push((
                        "breakers tripped (transitions)".into(),
                        col(&|x| {
                            if x.breakers == 0 {
                                "—".into()
                            } else {
                                format!(
                                    "{}/{} ({})",
                                    x.breakers_tripped,
                                    x.breakers,
                                    x.transitions.len()
                                )
                            }
                        }),
                    ));
                }
                (self.tiers[k].clone(), rows)
            })
            .collect()
    }

    /// The side-by-side table (runs as columns), with the transitions of small runs, each
    /// tier's figures, and a sweep's table.
    pub fn table(&self) -> String {
        self.table_at(None)
    }

    /// [`table`](Self::table), its tables laid out for `width` characters (the runs in
    /// groups of columns that fit, see [`crate::screen`]), or in full for `None`.
    pub fn table_at(&self, width: Option<usize>) -> String {
        let put =
            |out: &mut String, corner: &str, heads: &[String], rows: &[(String, Vec<String>)]| {
                match width {
                    Some(w) => crate::screen::fit_table(out, w, corner, heads, rows),
                    None => write_table(out, corner, heads, rows),
                }
            };
        let mut out = String::new();
        let _ = writeln!(out, "{} — {}", self.scenario, self.description);
        let incident = self.incident.map_or_else(
            || "no faults".to_string(),
            |i| format!("faults from {:.0} s to {:.0} s", i.start_s, i.end_s),
        );
        let _ = writeln!(
            out,
            "seed {} · {:.0} s of arrivals · {} replica(s) × {} workers · {}\n",
            self.seed, self.duration_s, self.replicas, self.workers_per_replica, incident
        );
        let labels: Vec<String> = self.runs.iter().map(|r| r.label.clone()).collect();
        put(&mut out, "", &labels, &self.rows());
        for (tier, rows) in self.tier_rows() {
            let _ = writeln!(out, "\n{tier}");
            put(&mut out, "", &labels, &rows);
        }
        if let Some(sw) = &self.sweep {
            let (head, rows) = sweep_rows(sw);
            let _ = writeln!(
                out,
                "\nsweep over {}: {}{}",
                sw.field,
                sw.metrics.join(" / "),
                crate::sweep::repeat_note(sw)
            );
            put(&mut out, &sw.field, &head, &rows);
        }
        for r in self.runs.iter() {
            if r.transitions.is_empty() {
                continue;
            }
            let _ = writeln!(out, "\n{}: breaker transitions", r.label);
            const SHOW: usize = 12;
            for t in r.transitions.iter().take(SHOW) {
                let who = match (t.replica, t.shard) {
                    (Some(rp), Some(s)) if self.replicas > 1 => format!(" replica {rp} shard {s}"),
                    (_, Some(s)) => format!(" shard {s}"),
                    (Some(rp), None) if self.replicas > 1 => format!(" replica {rp}"),
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "  t={:>9.3} s{who}: {} → {} ({})",
                    t.at_s, t.from, t.to, t.reason
                );
            }
            if r.transitions.len() > SHOW {
                let _ = writeln!(
                    out,
                    "  … {} in all (--json lists every one)",
                    r.transitions.len()
                );
            }
        }
        crate::hosts::table_events(self, &mut out);
        out
    }

    fn col(&self, f: impl Fn(&RunReport) -> String) -> Vec<String> {
        self.runs.iter().map(f).collect()
    }

    /// The run with this label.
    pub fn run(&self, label: &str) -> Option<&RunReport> {
        self.runs.iter().find(|r| r.label == label)
    }
}
