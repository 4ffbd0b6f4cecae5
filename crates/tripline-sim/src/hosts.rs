//! Hosts behind the caller's balancer, and outlier detection.
//!
//! With `[dependency.hosts]`, the dependency is `count` hosts (pods), each with its own
//! `capacity`: a call that starts while `n` calls are running on its host (`n + 1 >
//! capacity`) takes `latency × (n + 1) / capacity`, and calls keep running on the host after
//! their caller timed out, as the dependency-wide `capacity` does. Every attempt goes to a host
//! picked by the real balancer of `tripline_policies::outlier` (round robin or power of two
//! choices), and its outcome is recorded on the real detector: a fault's error is a 500, a
//! timeout a local-origin timeout. Faults may hit some hosts only (`hosts = [3, 7]`).
//!
//! The unprotected run and protections without an `outlier` table use the same balancer with
//! no ejection (every `enforcing_*` at 0); a protection's `outlier` table sets the detector's
//! fields (Envoy's names, Envoy's defaults for the rest).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_pcg::Pcg64Mcg;
use serde::{Deserialize, Serialize};
use tripline::{ConfigError, ManualClock};
use tripline_policies::outlier::{
    Balance, HostOutcome, OutlierConfig, OutlierDetector, OutlierEventKind, Pick,
};

use crate::dist::{Dist, Rate, nanos};
use crate::scenario::Scenario;

const SEC: u64 = 1_000_000_000;

/// One run's points in a chart panel.
type Line = Vec<(f64, f64)>;

/// The hosts of the dependency.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hosts {
    /// How many hosts (pods), in [1, 1000].
    pub count: u32,
    /// Calls each host serves at full speed at once; past it every new call on that host is
    /// slowed in proportion. In [1, 10000000].
    pub capacity: u32,
    /// `"round-robin"` (default) or `"p2c"` (power of two choices by calls in flight).
    #[serde(default)]
    pub balance: HostBalance,
}

/// How the caller's balancer picks a host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostBalance {
    /// Each selectable host in turn.
    #[default]
    RoundRobin,
    /// The less busy of two selectable hosts drawn at random.
    P2c,
}

/// A protection's outlier detection: Envoy's `OutlierDetection` fields, each optional (Envoy's
/// default when unset), plus the balancer's `healthy_panic_threshold`.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[expect(
    missing_docs,
    reason = "each field is the OutlierConfig setting of the same name"
)]
pub struct Outlier {
    #[serde(default, with = "tripline::duration::serde::option")]
    pub interval: Option<Duration>,
    #[serde(default, with = "tripline::duration::serde::option")]
    pub base_ejection_time: Option<Duration>,
    #[serde(default, with = "tripline::duration::serde::option")]
    pub max_ejection_time: Option<Duration>,
    #[serde(default, with = "tripline::duration::serde::option")]
    pub max_ejection_time_jitter: Option<Duration>,
    pub max_ejection_percent: Option<u32>,
    pub always_eject_one_host: Option<bool>,
    pub consecutive_5xx: Option<u32>,
    pub enforcing_consecutive_5xx: Option<u32>,
    pub consecutive_gateway_failure: Option<u32>,
    pub enforcing_consecutive_gateway_failure: Option<u32>,
    pub split_external_local_origin_errors: Option<bool>,
    pub consecutive_local_origin_failure: Option<u32>,
    pub enforcing_consecutive_local_origin_failure: Option<u32>,
    pub success_rate_minimum_hosts: Option<u32>,
    pub success_rate_request_volume: Option<u32>,
    pub success_rate_stdev_factor: Option<u32>,
    pub enforcing_success_rate: Option<u32>,
    pub enforcing_local_origin_success_rate: Option<u32>,
    pub failure_percentage_threshold: Option<u32>,
    pub failure_percentage_minimum_hosts: Option<u32>,
    pub failure_percentage_request_volume: Option<u32>,
    pub enforcing_failure_percentage: Option<u32>,
    pub enforcing_failure_percentage_local_origin: Option<u32>,
    pub healthy_panic_threshold: Option<f64>,
}

impl Outlier {
    /// The detector's configuration: Envoy's defaults, overridden by the fields set.
    pub fn config(&self) -> Result<OutlierConfig, ConfigError> {
        let mut b = OutlierConfig::builder();
        macro_rules! set {
            ($($f:ident),*) => { $(if let Some(v) = self.$f { b = b.$f(v); })* };
        }
        set!(
            interval,
            base_ejection_time,
            max_ejection_time,
            max_ejection_time_jitter,
            max_ejection_percent,
            always_eject_one_host,
            consecutive_5xx,
            enforcing_consecutive_5xx,
            consecutive_gateway_failure,
            enforcing_consecutive_gateway_failure,
            split_external_local_origin_errors,
            consecutive_local_origin_failure,
            enforcing_consecutive_local_origin_failure,
            success_rate_minimum_hosts,
            success_rate_request_volume,
            success_rate_stdev_factor,
            enforcing_success_rate,
            enforcing_local_origin_success_rate,
            failure_percentage_threshold,
            failure_percentage_minimum_hosts,
            failure_percentage_request_volume,
            enforcing_failure_percentage,
            enforcing_failure_percentage_local_origin,
            healthy_panic_threshold
        );
        b.build()
    }
}

#[derive(Clone, Debug)]
struct HostPhase {
    from: u64,
    until: u64,
    error_rate: Rate,
    latency: Dist,
    error_latency: Dist,
    shards: Option<Vec<u32>>,
    hosts: Option<Vec<u32>>,
}

/// The hosts in engine units.
pub(crate) struct HostModel {
    count: u32,
    capacity: u32,
    balance: Balance,
    base: HostPhase,
    phases: Vec<HostPhase>,
}

impl HostModel {
    pub(crate) fn new(s: &Scenario) -> Option<Self> {
        let h = s.dependency.hosts?;
        let dep = &s.dependency;
        let base = HostPhase {
            from: 0,
            until: u64::MAX,
            error_rate: dep.error_rate,
            latency: dep.latency,
            error_latency: dep.error_latency.unwrap_or(dep.latency),
            shards: None,
            hosts: None,
        };
        let sorted = |v: &Option<Vec<u32>>| {
            v.as_ref().map(|v| {
                let mut v = v.clone();
                v.sort_unstable();
                v.dedup();
                v
            })
        };
        let phases = dep
            .faults
            .iter()
            .map(|f| HostPhase {
                from: nanos(f.from),
                until: nanos(f.until),
                error_rate: f.error_rate.unwrap_or(dep.error_rate),
                latency: f.latency.unwrap_or(dep.latency),
                error_latency: f.error_latency.or(f.latency).unwrap_or(base.error_latency),
                shards: sorted(&f.shards),
                hosts: sorted(&f.hosts),
            })
            .collect();
        Some(Self {
            count: h.count,
            capacity: h.capacity,
            balance: match h.balance {
                HostBalance::RoundRobin => Balance::RoundRobin,
                HostBalance::P2c => Balance::PowerOfTwoChoices,
            },
            base,
            phases,
        })
    }

    fn phase(&self, t: u64, shard: u32, host: u32) -> &HostPhase {
        let has =
            |v: &Option<Vec<u32>>, x: u32| v.as_ref().is_none_or(|v| v.binary_search(&x).is_ok());
        self.phases
            .iter()
            .find(|p| t >= p.from && t < p.until && has(&p.shards, shard) && has(&p.hosts, host))
            .unwrap_or(&self.base)
    }
}

/// One second of the hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HostBin {
    /// Most hosts ejected at once.
    pub ejected: u32,
    /// Hosts in the balancer (not ejected, or any host in panic) but down: more than half of
    /// the calls that ended on them during the second timed out (or, with none ended, more
    /// calls in flight than their capacity), at the end of the second.
    pub down: u32,
    /// Hosts in the balancer and not down, at the end of the second.
    pub serving: u32,
    /// The busiest host's calls in flight ÷ its capacity, at the end of the second.
    pub busiest_load: f64,
    /// Calls started on the busiest host during the second.
    pub busiest_calls: u32,
    /// Whether the balancer was in panic at some point in the second.
    pub panic: bool,
    /// Requests answered with an error, rejected without a fallback, or shed: errors reaching
    /// users (filled by the report from the run's bins).
    pub user_errors: u32,
}

/// An ejection or a return.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostEvent {
    /// When, in seconds.
    pub at_s: f64,
    /// The host (`null` for panic events).
    pub host: Option<u32>,
    /// `ejected`, `returned`, `panic-started` or `panic-ended`.
    pub kind: &'static str,
    /// For ejections: the rule (Envoy's name) and how long, in seconds.
    pub rule: Option<&'static str>,
    /// For ejections: the ejection's length in seconds.
    pub for_s: Option<f64>,
    /// Hosts ejected after the event.
    pub ejected: u32,
}

/// What the hosts did in one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostsReport {
    /// Hosts.
    pub count: u32,
    /// Capacity of each.
    pub capacity: u32,
    /// The balancer: `round-robin` or `p2c`.
    pub balance: HostBalance,
    /// Whether the run ejects hosts (an `outlier` table).
    pub outlier_detection: bool,
    /// The cap, in percent, and the panic threshold, when ejecting.
    pub max_ejection_percent: Option<u32>,
    /// The panic threshold, in percent, when ejecting.
    pub healthy_panic_threshold: Option<f64>,
    /// Most hosts ejected at once.
    pub max_ejected: u32,
    /// Ejections carried out.
    pub ejections_enforced: u64,
    /// Ejections refused by the cap.
    pub ejections_overflow: u64,
    /// Seconds in which the balancer was in panic.
    pub panic_s: u32,
    /// Seconds with no host serving (every host out of the balancer or down).
    pub no_host_serving_s: u32,
    /// The fewest hosts serving in a second.
    pub min_serving: u32,
    /// The busiest host's peak load (calls in flight ÷ capacity).
    pub busiest_load_peak: f64,
    /// Calls each host received.
    pub calls_per_host: Vec<u64>,
    /// Ejections, returns and panic changes, in order (at most 10 000).
    pub events: Vec<HostEvent>,
    /// Events in all.
    pub event_count: u64,
    /// Per-second series (for charts; not part of the JSON).
    #[serde(skip)]
    pub series: Vec<HostBin>,
}

/// What the hosts produced in one run.
pub(crate) struct HostsOutput {
    report: HostsReport,
}

const MAX_EVENTS: usize = 10_000;

/// The hosts of one run: the real detector and balancer, and each host's calls in progress.
pub(crate) struct Pool<'m> {
    m: &'m HostModel,
    detector: OutlierDetector<u32, ManualClock>,
    ejecting: Option<OutlierConfig>,
    running: Vec<BinaryHeap<Reverse<u64>>>,
    /// Per request slot: the attempt's pick and its outcome for the host.
    picks: Vec<Option<(Pick<u32>, HostOutcome)>>,
    calls: Vec<u64>,
    bin_calls: Vec<u32>,
    /// Per host, this second: calls that ended, and those of them that timed out.
    bin_ended: Vec<u32>,
    bin_timeouts: Vec<u32>,
    bins: Vec<HostBin>,
    bin_ejected: u32,
    bin_panic: bool,
    log: Arc<Mutex<(Vec<HostEvent>, u64)>>,
}

impl<'m> Pool<'m> {
    /// The pool of a run: ejecting with `outlier`, else a plain balancer.
    pub(crate) fn new(
        m: &'m HostModel,
        outlier: Option<OutlierConfig>,
        clock: ManualClock,
        seed: u64,
    ) -> Self {
        let config = outlier.unwrap_or_else(|| OutlierConfig::default().detection_only());
        let config = config
            .to_builder()
            .max_hosts(m.count.max(config.max_hosts()))
            .build()
            .unwrap_or(config);
        let detector = OutlierDetector::builder(config)
            .name("dependency")
            .clock(clock)
            .seed(seed)
            .balance(m.balance)
            .build(0..m.count)
            .unwrap_or_else(|e| panic!("validated host set: {e}"));
        let log: Arc<Mutex<(Vec<HostEvent>, u64)>> = Arc::default();
        let l = log.clone();
        detector.subscribe(move |e| {
            let (kind, rule, for_s) = match &e.kind {
                OutlierEventKind::Ejected {
                    ejection_type,
                    duration,
                    ..
                } => (
                    "ejected",
                    Some(ejection_type.as_str()),
                    Some(duration.as_secs_f64()),
                ),
                OutlierEventKind::Returned | OutlierEventKind::ReturnedEarly => {
                    ("returned", None, None)
                }
                OutlierEventKind::PanicStarted => ("panic-started", None, None),
                OutlierEventKind::PanicEnded => ("panic-ended", None, None),
                _ => return,
            };
            let mut g = l.lock().unwrap_or_else(|p| p.into_inner());
            g.1 += 1;
            if g.0.len() < MAX_EVENTS {
                g.0.push(HostEvent {
                    at_s: e.at as f64 / 1e9,
                    host: e.host,
                    kind,
                    rule,
                    for_s,
                    ejected: e.ejections_active,
                });
            }
        });
        let n = m.count as usize;
        Self {
            m,
            detector,
            ejecting: outlier,
            running: vec![BinaryHeap::new(); n],
            picks: Vec::new(),
            calls: vec![0; n],
            bin_calls: vec![0; n],
            bin_ended: vec![0; n],
            bin_timeouts: vec![0; n],
            bins: Vec::new(),
            bin_ejected: 0,
            bin_panic: false,
            log,
        }
    }

    /// Closes the seconds before `t`'s.
    fn observe(&mut self, t: u64) {
        let b = (t / SEC) as usize;
        while self.bins.len() < b {
            let end = (self.bins.len() as u64 + 1) * SEC;
            let mut down = 0;
            let mut busiest: f64 = 0.0;
            let mut serving = 0;
            // Out of the balancer: ejected, unless the balancer is in panic (then it picks
            // among every host).
            let mut out = vec![false; self.running.len()];
            if !self.detector.in_panic() {
                for h in self.detector.ejected() {
                    out[h as usize] = true;
                }
            }
            for (h, heap) in self.running.iter_mut().enumerate() {
                while heap.peek().is_some_and(|d| d.0 <= end) {
                    heap.pop();
                }
                let load = heap.len() as f64 / f64::from(self.m.capacity);
                busiest = busiest.max(load);
                if !out[h] {
                    let (ended, timeouts) = (self.bin_ended[h], self.bin_timeouts[h]);
                    let is_down = if ended == 0 {
                        heap.len() as u64 > u64::from(self.m.capacity)
                    } else {
                        timeouts * 2 > ended
                    };
                    if is_down {
                        down += 1;
                    } else {
                        serving += 1;
                    }
                }
            }
            let stats = self.detector.stats();
            self.bins.push(HostBin {
                ejected: self.bin_ejected.max(stats.ejections_active),
                down,
                serving,
                busiest_load: busiest,
                busiest_calls: self.bin_calls.iter().copied().max().unwrap_or(0),
                panic: self.bin_panic || stats.panic,
                user_errors: 0,
            });
            for v in [
                &mut self.bin_calls,
                &mut self.bin_ended,
                &mut self.bin_timeouts,
            ] {
                v.iter_mut().for_each(|c| *c = 0);
            }
            self.bin_ejected = stats.ejections_active;
            self.bin_panic = stats.panic;
        }
    }

    /// Starts an attempt of request `slot` at `t`: picks a host, draws the call's latency and
    /// outcome from the host's phase and load. Returns how long the attempt takes for the
    /// caller, whether it succeeds, and whether it times out.
    pub(crate) fn start(
        &mut self,
        slot: u32,
        t: u64,
        shard: u32,
        rng: &mut Pcg64Mcg,
        timeout: Option<u64>,
    ) -> (u64, bool, bool) {
        self.observe(t);
        let pick = self.detector.pick();
        let h = *pick.host();
        let active = self.detector.ejections_active();
        self.bin_ejected = self.bin_ejected.max(active);
        let phase = self.m.phase(t, shard, h);
        let error = phase.error_rate.happens(rng);
        let dist = if error {
            &phase.error_latency
        } else {
            &phase.latency
        };
        let mut lat = dist.sample(rng);
        let heap = &mut self.running[h as usize];
        while heap.peek().is_some_and(|d| d.0 <= t) {
            heap.pop();
        }
        let n = heap.len() as u64 + 1;
        if n > u64::from(self.m.capacity) {
            let scaled = lat as f64 * n as f64 / f64::from(self.m.capacity);
            lat = scaled.min(crate::dist::MAX_LATENCY.as_nanos() as f64) as u64;
        }
        heap.push(Reverse(t.saturating_add(lat)));
        self.calls[h as usize] += 1;
        self.bin_calls[h as usize] += 1;
        let s = slot as usize;
        if self.picks.len() <= s {
            self.picks.resize_with(s + 1, || None);
        }
        let (took, outcome) = match timeout {
            Some(to) if lat > to => (to, HostOutcome::Timeout),
            _ if error => (lat, HostOutcome::Status(500)),
            _ => (lat, HostOutcome::Success),
        };
        self.picks[s] = Some((pick, outcome));
        (
            took,
            outcome == HostOutcome::Success,
            outcome == HostOutcome::Timeout,
        )
    }

    /// The attempt of `slot` ended at `t`: records its outcome on the detector.
    pub(crate) fn done(&mut self, slot: u32, t: u64) {
        self.observe(t);
        if let Some((pick, outcome)) = self.picks.get_mut(slot as usize).and_then(Option::take) {
            let h = *pick.host() as usize;
            self.bin_ended[h] += 1;
            if outcome == HostOutcome::Timeout {
                self.bin_timeouts[h] += 1;
            }
            self.detector.record(pick, outcome);
        }
        self.bin_panic |= self.detector.in_panic();
    }

    pub(crate) fn finish(mut self, end: u64) -> HostsOutput {
        self.observe(end.saturating_add(SEC - 1));
        let stats = self.detector.stats();
        let (events, event_count) =
            std::mem::take(&mut *self.log.lock().unwrap_or_else(|p| p.into_inner()));
        let bins = self.bins;
        HostsOutput {
            report: HostsReport {
                count: self.m.count,
                capacity: self.m.capacity,
                balance: match self.m.balance {
                    Balance::PowerOfTwoChoices => HostBalance::P2c,
                    _ => HostBalance::RoundRobin,
                },
                outlier_detection: self.ejecting.is_some(),
                max_ejection_percent: self.ejecting.map(|c| c.max_ejection_percent()),
                healthy_panic_threshold: self.ejecting.map(|c| c.healthy_panic_threshold()),
                max_ejected: bins.iter().map(|b| b.ejected).max().unwrap_or(0),
                ejections_enforced: stats.ejections_enforced_total,
                ejections_overflow: stats.ejections_overflow,
                panic_s: bins.iter().filter(|b| b.panic).count() as u32,
                no_host_serving_s: bins.iter().filter(|b| b.serving == 0).count() as u32,
                min_serving: bins.iter().map(|b| b.serving).min().unwrap_or(self.m.count),
                busiest_load_peak: bins.iter().map(|b| b.busiest_load).fold(0.0, f64::max),
                calls_per_host: self.calls,
                events,
                event_count,
                series: bins,
            },
        }
    }
}

impl HostsOutput {
    /// The report, with the errors reaching users per second from the run's bins.
    pub(crate) fn into_report(self, run_bins: &[crate::engine::Bin]) -> HostsReport {
        let mut r = self.report;
        for (i, h) in r.series.iter_mut().enumerate() {
            if let Some(b) = run_bins.get(i) {
                h.user_errors = b.failed + (b.rejected - b.fallback) + b.shed;
            }
        }
        r
    }
}

/// Table rows for runs with hosts: `(label, one value per run)`.
pub(crate) fn table_rows(report: &crate::Report) -> Vec<(String, Vec<String>)> {
    if report.runs.iter().all(|r| r.hosts.is_none()) {
        return Vec::new();
    }
    let col = |f: &dyn Fn(&HostsReport) -> String| -> Vec<String> {
        report
            .runs
            .iter()
            .map(|r| r.hosts.as_ref().map_or_else(|| "—".to_string(), f))
            .collect()
    };
    vec![
        (
            "requests succeeded".into(),
            report
                .runs
                .iter()
                .map(|r| {
                    format!(
                        "{:.1} %",
                        100.0 * r.succeeded as f64 / r.requests.max(1) as f64
                    )
                })
                .collect(),
        ),
        (
            "hosts × capacity, balancer".into(),
            col(&|h| {
                let b = match h.balance {
                    HostBalance::RoundRobin => "rr",
                    HostBalance::P2c => "p2c",
                };
                format!("{} × {}, {b}", h.count, h.capacity)
            }),
        ),
        (
            "ejection cap / panic below".into(),
            col(
                &|h| match (h.max_ejection_percent, h.healthy_panic_threshold) {
                    (Some(c), Some(p)) => format!("{c} % / {p:.0} %"),
                    _ => "no ejection".into(),
                },
            ),
        ),
        (
            "most hosts ejected at once".into(),
            col(&|h| format!("{}/{}", h.max_ejected, h.count)),
        ),
        (
            "ejections (refused)".into(),
            col(&|h| format!("{} ({})", h.ejections_enforced, h.ejections_overflow)),
        ),
        ("seconds in panic".into(), col(&|h| h.panic_s.to_string())),
        (
            "fewest hosts serving".into(),
            col(&|h| format!("{}/{}", h.min_serving, h.count)),
        ),
        (
            "seconds with no host serving".into(),
            col(&|h| h.no_host_serving_s.to_string()),
        ),
        (
            "busiest host's peak load".into(),
            col(&|h| format!("{:.1}× capacity", h.busiest_load_peak)),
        ),
        (
            "calls per host (min–max)".into(),
            col(&|h| {
                let min = h.calls_per_host.iter().min().copied().unwrap_or(0);
                let max = h.calls_per_host.iter().max().copied().unwrap_or(0);
                format!("{min}–{max}")
            }),
        ),
    ]
}

/// The ejection log of runs with hosts, as the table prints it (the first 12 per run).
pub(crate) fn table_events(report: &crate::Report, out: &mut String) {
    use std::fmt::Write as _;
    for r in &report.runs {
        let Some(h) = &r.hosts else { continue };
        if h.events.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n{}: ejections", r.label);
        const SHOW: usize = 12;
        for e in h.events.iter().take(SHOW) {
            let who = e.host.map(|x| format!(" host {x}")).unwrap_or_default();
            let what = match (e.rule, e.for_s) {
                (Some(rule), Some(s)) => format!("{} ({rule}, {s:.0} s)", e.kind),
                _ => e.kind.to_string(),
            };
            let _ = writeln!(
                out,
                "  t={:>9.3} s{who}: {what}, {}/{} ejected",
                e.at_s, e.ejected, h.count
            );
        }
        if h.event_count as usize > SHOW {
            let _ = writeln!(out, "  … {} in all (--json lists them)", h.event_count);
        }
    }
}

/// Chart panels for runs with hosts: (title, one line per run).
pub(crate) fn panels(report: &crate::Report) -> Vec<(&'static str, Vec<Line>)> {
    if report.runs.iter().all(|r| r.hosts.is_none()) {
        return Vec::new();
    }
    let line = |f: &dyn Fn(&HostBin) -> f64| -> Vec<Line> {
        report
            .runs
            .iter()
            .map(|r| {
                r.hosts.as_ref().map_or_else(Vec::new, |h| {
                    h.series
                        .iter()
                        .enumerate()
                        .map(|(i, b)| (i as f64, f(b)))
                        .collect()
                })
            })
            .collect()
    };
    vec![
        (
            "hosts ejected (peak per second)",
            line(&|b| f64::from(b.ejected)),
        ),
        (
            "hosts serving: in the balancer and not timing out (per second)",
            line(&|b| f64::from(b.serving)),
        ),
        (
            "busiest host: calls in flight ÷ capacity (end of each second)",
            line(&|b| b.busiest_load),
        ),
        (
            "errors reaching users (per second)",
            line(&|b| f64::from(b.user_errors)),
        ),
    ]
}

/// Checks the hosts, per-host faults and outlier tables; `Err((field, value, allowed))`.
pub(crate) fn validate(s: &Scenario) -> Result<(), (String, String, String)> {
    let bad = |f: &str, v: String, a: String| Err((f.to_string(), v, a));
    let hosts = s.dependency.hosts;
    if let Some(h) = hosts {
        if !(1..=1000).contains(&h.count) {
            return bad(
                "dependency.hosts.count",
                h.count.to_string(),
                "must be in [1, 1000]".into(),
            );
        }
        if !(1..=10_000_000).contains(&h.capacity) {
            return bad(
                "dependency.hosts.capacity",
                h.capacity.to_string(),
                "must be in [1, 10000000]".into(),
            );
        }
        if s.dependency.capacity.is_some() {
            return bad(
                "dependency.capacity",
                format!("{}", s.dependency.capacity.unwrap_or(0)),
                "must be unset with [dependency.hosts] (each host has its own capacity)".into(),
            );
        }
    }
    for (i, f) in s.dependency.faults.iter().enumerate() {
        if let Some(list) = &f.hosts {
            let Some(h) = hosts else {
                return bad(
                    &format!("dependency.faults[{i}].hosts"),
                    format!("{list:?}"),
                    "needs a [dependency.hosts] table with the host count".into(),
                );
            };
            if let Some(x) = list.iter().find(|&&x| x >= h.count) {
                return bad(
                    &format!("dependency.faults[{i}].hosts"),
                    x.to_string(),
                    format!(
                        "must list host numbers below dependency.hosts.count ({})",
                        h.count
                    ),
                );
            }
        }
    }
    for (i, p) in s.protection.iter().enumerate() {
        let Some(o) = &p.outlier else { continue };
        if hosts.is_none() {
            return bad(
                &format!("protection[{i}].outlier"),
                "a table".into(),
                "needs a [dependency.hosts] table (outlier detection ejects hosts)".into(),
            );
        }
        if let Err(e) = o.config() {
            return bad(
                &format!("protection[{i}].outlier.{}", e.field()),
                e.value().to_string(),
                format!("must be {}", e.allowed()),
            );
        }
    }
    Ok(())
}

/// The detector configuration of a variant, if it ejects.
pub(crate) fn outlier_config(p: Option<&crate::scenario::Protection>) -> Option<OutlierConfig> {
    p.and_then(|p| p.outlier.as_ref())
        .and_then(|o| o.config().ok())
}

/// A seed for the detector of a run.
pub(crate) fn seed(run_seed: u64) -> u64 {
    crate::engine::mix(run_seed, 0x0E7E_C7ED)
}
