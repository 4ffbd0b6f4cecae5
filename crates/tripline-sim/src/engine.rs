//! The discrete-event engine.
//!
//! Events wait in a binary heap ordered by (time, sequence number), so two events at the same
//! instant run in the order they were scheduled and every run is reproducible. Before each
//! event the engine sets the run's [`ManualClock`] to the event's time; the breakers read that
//! clock, so open waits, half-open leases and the slow-call rule all run on virtual time.
//!
//! # A request's life
//! 1. It **arrives** at a replica chosen by the load balancer. If a worker is free it starts;
//!    otherwise it waits in the replica's FIFO queue (bounded by `queue_limit`; one more is
//!    shed at once) and is shed if it waits longer than `queue_timeout`.
//! 2. An endpoint that does not use the dependency does its local **work** and answers.
//! 3. An endpoint that uses it makes up to `attempts` **attempts**. With a breaker, each
//!    attempt first asks the breaker for a permit. A rejection is never retried: the request
//!    is answered at once, with the fallback if the variant has one, else with an error. An
//!    admitted attempt takes the dependency's latency (drawn from the phase in force when it
//!    starts, slowed past the dependency's capacity), or the timeout if that is shorter, in
//!    which case it fails. Its outcome is recorded on the permit when it ends. A failed attempt
//!    is retried after `backoff`, holding its worker meanwhile.
//! 4. A successful call (or a fallback) is followed by the endpoint's local work; then the
//!    request is **answered** and frees its worker, which takes the next queued request.
//!
//! # Randomness
//! Arrival times, endpoints, shards and (random) load-balancer picks come from one generator
//! seeded from the run seed, so every variant of a scenario sees the same arrival sequence.
//! Each request has its own generator, seeded from the run seed and the request's number, for
//! its local work and its attempts' outcomes, so the same request meets the same dependency
//! behaviour in every variant (as long as its attempts start in the same phase).
//! All generators are `Pcg64Mcg`, whose output for a seed does not change between versions.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use tripline::{BreakerConfig, CircuitBreaker, EventKind, ManualClock, Outcome, Permit, State};

use crate::dist::{Dist, Rate, nanos};
use crate::scenario::{Balancer, Process, Protection, Scenario, Scope, Sharing};

const SEC: u64 = 1_000_000_000;

/// splitmix64's finalizer: spreads `a` and `b` over 64 bits.
pub(crate) fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Clone, Debug)]
struct Phase {
    from: u64,
    until: u64,
    error_rate: Rate,
    latency: Dist,
    error_latency: Dist,
    /// Affected shards (sorted), or all.
    shards: Option<Vec<u32>>,
}

/// What a request ended as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Out {
    Succeeded = 0,
    Failed = 1,
    Rejected = 2,
    Fallback = 3,
    Shed = 4,
}

/// One second of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bin {
    /// Most workers busy at once, all replicas together.
    pub busy_peak: u32,
    /// Most requests queued at once, all replicas together.
    pub queued_peak: u32,
    /// Whether some replica had every worker busy during the second.
    pub pool_full: bool,
    /// Calls that reached the dependency (attempts admitted).
    pub dependency_calls: u32,
    /// Most calls in progress at the dependency at once, as seen when calls start (tracked
    /// with a capacity only).
    pub dependency_in_flight_peak: u32,
    /// Requests answered with real data.
    pub succeeded: u32,
    /// Requests answered with an error after their attempts.
    pub failed: u32,
    /// Requests whose call the breaker rejected (fallbacks included).
    pub rejected: u32,
    /// Rejected requests answered with the fallback.
    pub fallback: u32,
    /// Requests shed by a full queue or the queue timeout.
    pub shed: u32,
}

/// A breaker transition seen during a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Tr {
    pub(crate) at: u64,
    pub(crate) breaker: u32,
    pub(crate) from: State,
    pub(crate) to: State,
    pub(crate) reason: &'static str,
}

/// The variant being run: the unprotected service or one protection.
pub(crate) struct Variant<'a> {
    pub(crate) protection: Option<&'a Protection>,
    /// Called with each breaker's index once it exists (a trace recorder subscribes here).
    pub(crate) observe: Option<&'a Observe<'a>>,
}

/// What [`Variant::observe`] calls.
pub(crate) type Observe<'a> = dyn Fn(u32, &CircuitBreaker<ManualClock>) + Sync + 'a;

/// A latency sample: the latency as a [`LatencyKey`], and the bin and endpoint packed as
/// `bin << 7 | endpoint`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub(crate) lat: LatencyKey,
    pub(crate) meta: u32,
}

// Every bin of a run fits the 25 bits `meta` keeps for it.
const _: () = assert!(crate::scenario::MAX_RUN.as_secs() < 1 << 25);
// Every endpoint fits its 7 bits.
const _: () = assert!(crate::scenario::MAX_ENDPOINTS <= 1 << 7);

impl Sample {
    pub(crate) fn bin(self) -> u32 {
        self.meta >> 7
    }
    pub(crate) fn endpoint(self) -> usize {
        (self.meta & 0x7f) as usize
    }
}

/// A latency in 32 bits, ordered as the latencies are: microseconds below 2³¹ µs (35.8
/// minutes), then milliseconds above, up to 2³¹ ms (24.8 days, past any run's length). So
/// percentiles are taken on the keys, and a latency is exact to the microsecond up to 35
/// minutes and to the millisecond beyond.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LatencyKey(pub(crate) u32);

const COARSE: u32 = 1 << 31;

impl LatencyKey {
    pub(crate) fn from_nanos(ns: u64) -> Self {
        let us = ns / 1000;
        if us < u64::from(COARSE) {
            LatencyKey(us as u32)
        } else {
            let ms = (ns / 1_000_000).min(u64::from(u32::MAX - COARSE));
            LatencyKey(COARSE + ms as u32)
        }
    }

    /// In milliseconds.
    pub(crate) fn ms(self) -> f64 {
        if self.0 < COARSE {
            f64::from(self.0) / 1000.0
        } else {
            f64::from(self.0 - COARSE)
        }
    }
}

/// What one run produced, for the report.
pub(crate) struct RunOutput {
    pub(crate) requests: u64,
    pub(crate) counts: [u64; 5],
    pub(crate) per_endpoint: Vec<[u64; 5]>,
    pub(crate) rejected_healthy: u64,
    pub(crate) rejected_on_retry: u64,
    pub(crate) stale_view_calls: u64,
    pub(crate) dependency_calls: u64,
    pub(crate) pool_peak: u32,
    pub(crate) queue_peak: u32,
    pub(crate) bins: Vec<Bin>,
    pub(crate) samples: Vec<Sample>,
    pub(crate) transitions: Vec<Tr>,
    pub(crate) breakers: u32,
    pub(crate) hosts: Option<crate::hosts::HostsOutput>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Arrival = 0,
    AttemptDone = 1,
    Retry = 2,
    WorkDone = 3,
}

/// A scheduled event, packed in one `u128` so the heap compares and moves 16 bytes: the time
/// in the high 64 bits, then the sequence number (36 bits), the kind (2 bits) and the request
/// slot (26 bits). Ordering by the packed value is ordering by (time, sequence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ev(u128);

const SLOT_BITS: u32 = 26;
/// The most request slots a run may use (requests in the service at once).
pub(crate) const MAX_SLOTS: u64 = 1 << SLOT_BITS;
// Every request held at once (plus one being shed) must fit in a slot number.
const _: () = assert!(crate::scenario::MAX_HELD < MAX_SLOTS);

impl Ev {
    fn new(at: u64, seq: u64, kind: Kind, slot: u32) -> Self {
        let low = (seq << (SLOT_BITS + 2)) | ((kind as u64) << SLOT_BITS) | u64::from(slot);
        Ev((u128::from(at) << 64) | u128::from(low))
    }
    fn at(self) -> u64 {
        (self.0 >> 64) as u64
    }
    fn kind(self) -> Kind {
        match (self.0 as u64 >> SLOT_BITS) & 3 {
            0 => Kind::Arrival,
            1 => Kind::AttemptDone,
            2 => Kind::Retry,
            _ => Kind::WorkDone,
        }
    }
    fn slot(self) -> u32 {
        (self.0 as u64 & (MAX_SLOTS - 1)) as u32
    }
}

impl Ord for Ev {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest first.
        o.0.cmp(&self.0)
    }
}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

#[derive(Clone, Debug)]
struct Req {
    arrived: u64,
    work: u64,
    rng: Pcg64Mcg,
    replica: u32,
    shard: u32,
    endpoint: u16,
    attempt: u8,
    ok: bool,
    /// Waiting in its replica's queue.
    queued: bool,
    outcome: Out,
}

#[derive(Debug, Default)]
struct Replica {
    busy: u32,
    queue: VecDeque<u32>,
}

/// What a replica last heard from a shared store about one breaker.
#[derive(Clone, Copy, Default)]
struct View {
    valid: bool,
    closed: bool,
    generation: u64,
    at: u64,
}

/// The scenario in engine units (nanoseconds, cumulative weights).
pub(crate) struct Model {
    duration: u64,
    rate: f64,
    process: Process,
    replicas: u32,
    balancer: Balancer,
    workers: u32,
    queue_limit: usize,
    queue_timeout: Option<u64>,
    uses: Vec<bool>,
    work: Vec<Dist>,
    cum_weights: Vec<f64>,
    timeout: Option<u64>,
    attempts: u32,
    backoff: u64,
    base: Phase,
    phases: Vec<Phase>,
    capacity: Option<u32>,
    shards: u32,
    hosts: Option<crate::hosts::HostModel>,
}

impl Model {
    pub(crate) fn new(s: &Scenario) -> Self {
        let dep = &s.dependency;
        let base = Phase {
            from: 0,
            until: u64::MAX,
            error_rate: dep.error_rate,
            latency: dep.latency,
            error_latency: dep.error_latency.unwrap_or(dep.latency),
            shards: None,
        };
        // Faults on some hosts only act through the hosts (`crate::hosts`).
        let phases = dep
            .faults
            .iter()
            .filter(|f| f.hosts.is_none())
            .map(|f| Phase {
                from: nanos(f.from),
                until: nanos(f.until),
                error_rate: f.error_rate.unwrap_or(dep.error_rate),
                latency: f.latency.unwrap_or(dep.latency),
                error_latency: f.error_latency.or(f.latency).unwrap_or(base.error_latency),
                shards: f.shards.as_ref().map(|v| {
                    let mut v = v.clone();
                    v.sort_unstable();
                    v.dedup();
                    v
                }),
            })
            .collect();
        let mut acc = 0.0;
        let cum_weights = s
            .endpoints
            .iter()
            .map(|e| {
                acc += e.weight;
                acc
            })
            .collect();
        Model {
            duration: nanos(s.duration),
            rate: s.arrivals.rate,
            process: s.arrivals.process,
            replicas: s.service.replicas,
            balancer: s.service.load_balancer,
            workers: s.service.workers,
            queue_limit: s.service.queue_limit as usize,
            queue_timeout: s.service.queue_timeout.map(nanos),
            uses: s.endpoints.iter().map(|e| e.uses_dependency).collect(),
            work: s.endpoints.iter().map(|e| e.work).collect(),
            cum_weights,
            timeout: s.client.timeout.map(nanos),
            attempts: s.client.attempts,
            backoff: nanos(s.client.backoff),
            base,
            phases,
            capacity: s.dependency.capacity,
            shards: s.shards.map_or(1, |x| x.count),
            hosts: crate::hosts::HostModel::new(s),
        }
    }

    fn phase(&self, t: u64, shard: u32) -> Option<&Phase> {
        self.phases.iter().find(|p| {
            t >= p.from
                && t < p.until
                && p.shards
                    .as_ref()
                    .is_none_or(|s| s.binary_search(&shard).is_ok())
        })
    }
}

pub(crate) fn reason_str(kind: &EventKind) -> &'static str {
    use tripline::Reason as R;
    match kind {
        EventKind::Transition { reason, .. } => match reason {
            R::FailureRate => "failure-rate",
            R::SlowCallRate => "slow-call-rate",
            R::ConsecutiveFailures { .. } => "consecutive-failures",
            R::OpenElapsed => "open-elapsed",
            R::ProbesSucceeded { .. } => "probes-succeeded",
            R::ProbesFailed { .. } => "probes-failed",
            R::HalfOpenTimeout => "half-open-timeout",
            R::Operator => "operator",
            _ => "other",
        },
        _ => "other",
    }
}

/// Runs one variant of a scenario. `progress` receives virtual milliseconds as they pass.
pub(crate) fn run(
    scenario: &Scenario,
    model: &Model,
    variant: &Variant<'_>,
    seed: u64,
    progress: &(dyn Fn(u64) + Sync),
) -> RunOutput {
    let clock = ManualClock::new();
    let log: Arc<Mutex<Vec<Tr>>> = Arc::new(Mutex::new(Vec::new()));
    let breakers: Vec<CircuitBreaker<ManualClock>> = match variant.protection {
        None => Vec::new(),
        Some(p) => {
            let n = scenario.breaker_count(p);
            (0..n)
                .map(|i| {
                    let config = seeded(&p.breaker, seed, i);
                    let b = CircuitBreaker::with_clock(
                        scenario.dependency.name.clone(),
                        config,
                        clock.clone(),
                    );
                    let log = log.clone();
                    let idx = i as u32;
                    b.subscribe(move |e: &tripline::Event| {
                        if let EventKind::Transition { from, to, .. } = &e.kind {
                            let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
                            l.push(Tr {
                                at: nanos(e.at),
                                breaker: idx,
                                from: *from,
                                to: *to,
                                reason: reason_str(&e.kind),
                            });
                        }
                    });
                    if let Some(observe) = variant.observe {
                        observe(idx, &b);
                    }
                    b
                })
                .collect()
        }
    };
    let mut out = {
        let hosts = model.hosts.as_ref().map(|h| {
            crate::hosts::Pool::new(
                h,
                crate::hosts::outlier_config(variant.protection),
                clock.clone(),
                crate::hosts::seed(seed),
            )
        });
        let mut engine = Engine::new(model, variant, seed, &breakers, clock);
        engine.hosts = hosts;
        engine.run(progress);
        engine.finish_run()
    };
    out.breakers = breakers.len() as u32;
    drop(breakers);
    out.transitions = std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
    out
}

/// A breaker configuration with its own jitter seed, so replicas do not probe in lockstep and
/// runs stay reproducible.
pub(crate) fn seeded(config: &BreakerConfig, seed: u64, index: u64) -> BreakerConfig {
    let base = mix(seed ^ config.seed().unwrap_or(0), 0xB4EA_4E45);
    config
        .to_builder()
        .seed(mix(base, index))
        .build()
        .unwrap_or_else(|_| config.clone())
}

struct Engine<'b> {
    m: &'b Model,
    clock: ManualClock,
    breakers: &'b [CircuitBreaker<ManualClock>],
    scope_shard: bool,
    shared: bool,
    /// The shared store's view TTL (0: every decision sees the shared state).
    view_ttl: u64,
    /// Per breaker index × replica: what the replica last heard from the store.
    views: Vec<View>,
    stale_view_calls: u64,
    fallback: bool,
    timeout: Option<u64>,
    attempts: u32,
    seed: u64,

    heap: BinaryHeap<Ev>,
    seq: u64,
    reqs: Vec<Req>,
    permits: Vec<Option<Permit<'b, ManualClock>>>,
    free: Vec<u32>,
    replicas: Vec<Replica>,
    /// (deadline, slot) of every request queued with a queue timeout, in arrival order, which
    /// is deadline order (every request has the same timeout). Entries of requests that left
    /// the queue since are skipped, and swept out once they outnumber the queued requests.
    expiry: VecDeque<(u64, u32)>,
    dep_done: BinaryHeap<std::cmp::Reverse<u64>>,

    arrival_rng: Pcg64Mcg,
    next_req: u64,
    now: u64,

    total_busy: u32,
    total_queued: u32,
    full_replicas: u32,
    bins: Vec<Bin>,
    samples: Vec<Sample>,
    counts: [u64; 5],
    per_endpoint: Vec<[u64; 5]>,
    rejected_healthy: u64,
    rejected_on_retry: u64,
    dependency_calls: u64,
    pool_peak: u32,
    queue_peak: u32,
    /// The dependency's hosts and their balancer, with `[dependency.hosts]`.
    hosts: Option<crate::hosts::Pool<'b>>,
}

impl<'b> Engine<'b> {
    fn new(
        m: &'b Model,
        variant: &Variant<'_>,
        seed: u64,
        breakers: &'b [CircuitBreaker<ManualClock>],
        clock: ManualClock,
    ) -> Self {
        let p = variant.protection;
        Engine {
            m,
            clock,
            breakers,
            scope_shard: p.is_some_and(|p| p.scope == Scope::Shard),
            shared: p.is_some_and(|p| p.sharing == Sharing::Shared),
            view_ttl: p
                .filter(|p| p.sharing == Sharing::Shared)
                .map_or(0, |p| nanos(p.view_ttl)),
            // A view per breaker and replica, kept only when replicas decide from views.
            views: match p {
                Some(p) if p.sharing == Sharing::Shared && !p.view_ttl.is_zero() => {
                    vec![View::default(); (m.replicas * breakers.len() as u32) as usize]
                }
                _ => Vec::new(),
            },
            stale_view_calls: 0,
            fallback: p.is_some_and(|p| p.fallback),
            timeout: p.and_then(|p| p.timeout).map(nanos).or(m.timeout),
            attempts: p.and_then(|p| p.attempts).unwrap_or(m.attempts),
            seed,
            heap: BinaryHeap::with_capacity(1024),
            seq: 0,
            reqs: Vec::with_capacity(1024),
            permits: Vec::with_capacity(1024),
            free: Vec::with_capacity(1024),
            replicas: (0..m.replicas).map(|_| Replica::default()).collect(),
            expiry: VecDeque::new(),
            dep_done: BinaryHeap::new(),
            arrival_rng: Pcg64Mcg::seed_from_u64(mix(seed, 0xA441_7A15)),
            next_req: 0,
            now: 0,
            total_busy: 0,
            total_queued: 0,
            full_replicas: 0,
            bins: Vec::with_capacity((m.duration / SEC + 2) as usize),
            samples: Vec::with_capacity(((m.rate * m.duration as f64 / 1e9) as usize).min(1 << 24)),
            counts: [0; 5],
            per_endpoint: vec![[0; 5]; m.uses.len()],
            rejected_healthy: 0,
            rejected_on_retry: 0,
            dependency_calls: 0,
            pool_peak: 0,
            queue_peak: 0,
            hosts: None,
        }
    }

    fn schedule(&mut self, at: u64, kind: Kind, slot: u32) {
        self.seq += 1;
        self.heap.push(Ev::new(at, self.seq, kind, slot));
    }

    /// The bin of time `t`, creating the bins up to it. Call it before changing a level at
    /// `t`: a bin that starts before `t` opens with the levels in force until `t` (nothing
    /// happened in between), and one that starts at `t` exactly opens empty (the levels
    /// before `t` ended as it began; [`record_levels`](Self::record_levels) adds the levels
    /// after the events at `t`).
    fn bin(&mut self, t: u64) -> usize {
        let b = (t / SEC) as usize;
        while self.bins.len() <= b {
            let start = self.bins.len() as u64 * SEC;
            if start == t {
                self.bins.push(Bin::default());
                continue;
            }
            // Calls that ended by the start of this bin are no longer in progress in it.
            while self.dep_done.peek().is_some_and(|d| d.0 <= start) {
                self.dep_done.pop();
            }
            self.bins.push(Bin {
                busy_peak: self.total_busy,
                queued_peak: self.total_queued,
                pool_full: self.full_replicas > 0,
                dependency_in_flight_peak: self.dep_done.len() as u32,
                ..Bin::default()
            });
        }
        b
    }

    /// Records the levels after every event at instant `t` (a level holds from one instant to
    /// the next, so the states an instant passes through between its events last no time and
    /// count nowhere): in `t`'s bin, and in the peaks of the replicas those events touched.
    fn record_levels(&mut self, t: u64, touched: &[u32]) {
        let b = self.bin(t);
        let (busy, queued, full) = (self.total_busy, self.total_queued, self.full_replicas > 0);
        let bin = &mut self.bins[b];
        bin.busy_peak = bin.busy_peak.max(busy);
        bin.queued_peak = bin.queued_peak.max(queued);
        bin.pool_full |= full;
        for &r in touched {
            let rep = &self.replicas[r as usize];
            self.pool_peak = self.pool_peak.max(rep.busy);
            self.queue_peak = self.queue_peak.max(rep.queue.len() as u32);
        }
    }

    fn arrival_time(&mut self, k: u64, prev: u64) -> u64 {
        match self.m.process {
            Process::Constant => (k as f64 * 1e9 / self.m.rate).round() as u64,
            Process::Poisson => {
                let u = 1.0 - self.arrival_rng.random::<f64>();
                let gap = -u.ln() / self.m.rate * 1e9;
                prev.saturating_add(gap.min(1e18) as u64)
            }
        }
    }

    fn run(&mut self, progress: &(dyn Fn(u64) + Sync)) {
        let first = self.arrival_time(0, 0);
        if first < self.m.duration {
            self.schedule(first, Kind::Arrival, 0);
        }
        let mut events: u64 = 0;
        let mut reported_ms = 0u64;
        // The instant being processed and the replicas its events touched.
        let mut instant = None;
        let mut touched: Vec<u32> = Vec::new();
        while let Some(ev) = self.heap.pop() {
            let (at, slot) = (ev.at(), ev.slot());
            if instant.is_some_and(|i| i < at) {
                if let Some(i) = instant {
                    self.record_levels(i, &touched);
                }
                touched.clear();
            }
            instant = Some(at);
            self.now = at;
            self.clock.set(Duration::from_nanos(at));
            self.expire(at);
            let replica = match ev.kind() {
                Kind::Arrival => self.on_arrival(at),
                Kind::AttemptDone => self.on_attempt_done(slot, at),
                Kind::Retry => {
                    let r = self.reqs[slot as usize].replica;
                    self.attempt(slot, at);
                    r
                }
                Kind::WorkDone => {
                    let r = self.reqs[slot as usize].replica;
                    let out = self.reqs[slot as usize].outcome;
                    self.answer(slot, at, out, true);
                    r
                }
            };
            self.admit(replica, at);
            if !touched.contains(&replica) {
                touched.push(replica);
            }
            events += 1;
            if events & 0xFFFF == 0 {
                let ms = (at / 1_000_000).min(self.m.duration / 1_000_000);
                if ms > reported_ms {
                    progress(ms - reported_ms);
                    reported_ms = ms;
                }
            }
        }
        if let Some(i) = instant {
            self.record_levels(i, &touched);
        }
        let total_ms = self.m.duration / 1_000_000;
        if total_ms > reported_ms {
            progress(total_ms - reported_ms);
        }
    }

    fn on_arrival(&mut self, t: u64) -> u32 {
        let k = self.next_req;
        self.next_req += 1;
        // Draws in a fixed order: endpoint, shard, replica, next gap.
        let total = *self.m.cum_weights.last().unwrap_or(&1.0);
        let x = self.arrival_rng.random::<f64>() * total;
        let endpoint = self
            .m
            .cum_weights
            .partition_point(|&c| c <= x)
            .min(self.m.cum_weights.len() - 1);
        let shard = if self.m.shards > 1 {
            self.arrival_rng.random_range(0..self.m.shards)
        } else {
            0
        };
        let replica = match self.m.balancer {
            Balancer::RoundRobin => (k % u64::from(self.m.replicas)) as u32,
            Balancer::Random => self.arrival_rng.random_range(0..self.m.replicas),
        };
        let next = self.arrival_time(k + 1, t);
        if next < self.m.duration {
            self.schedule(next, Kind::Arrival, 0);
        }
        let mut rng = Pcg64Mcg::new(
            (u128::from(mix(self.seed, k)) << 64) | u128::from(mix(k, self.seed ^ 0x5EED)),
        );
        let work = self.m.work[endpoint].sample(&mut rng);
        let req = Req {
            arrived: t,
            work,
            rng,
            replica,
            shard,
            endpoint: endpoint as u16,
            attempt: 0,
            ok: false,
            queued: false,
            outcome: Out::Succeeded,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.reqs[s as usize] = req;
                s
            }
            None => {
                self.reqs.push(req);
                self.permits.push(None);
                (self.reqs.len() - 1) as u32
            }
        };
        let rep = &self.replicas[replica as usize];
        if rep.busy < self.m.workers {
            self.start(slot, t);
        } else if rep.queue.len() < self.m.queue_limit {
            // The seconds before `t` keep the queue as it was.
            self.bin(t);
            self.replicas[replica as usize].queue.push_back(slot);
            self.total_queued += 1;
            self.reqs[slot as usize].queued = true;
            if let Some(limit) = self.m.queue_timeout {
                self.expiry.push_back((t.saturating_add(limit), slot));
                if self.expiry.len() > 2 * self.total_queued as usize + 1024 {
                    let reqs = &self.reqs;
                    self.expiry
                        .retain(|&(d, s)| Self::still_queued(reqs, s, d, limit));
                }
            }
        } else {
            self.answer(slot, t, Out::Shed, false);
        }
        replica
    }

    /// Whether the expiry entry (`deadline`, `slot`) is still a request waiting in a queue.
    fn still_queued(reqs: &[Req], slot: u32, deadline: u64, limit: u64) -> bool {
        let r = &reqs[slot as usize];
        r.queued && r.arrived.saturating_add(limit) == deadline
    }

    /// Sheds every queued request that has waited longer than the queue timeout by `now`, at
    /// the moment its wait reached the timeout: on every replica, so that the figures of the
    /// seconds between see it gone. A request whose wait reaches the timeout at `now` exactly
    /// may still get a worker at `now`.
    fn expire(&mut self, now: u64) {
        let Some(limit) = self.m.queue_timeout else {
            return;
        };
        while let Some(&(deadline, slot)) = self.expiry.front() {
            if deadline >= now {
                break;
            }
            self.expiry.pop_front();
            if !Self::still_queued(&self.reqs, slot, deadline, limit) {
                continue;
            }
            // The oldest request of its replica's FIFO queue.
            let replica = self.reqs[slot as usize].replica as usize;
            let queue = &mut self.replicas[replica].queue;
            match queue.iter().position(|&s| s == slot) {
                Some(0) => {
                    queue.pop_front();
                }
                Some(i) => {
                    queue.remove(i);
                }
                None => continue,
            }
            self.reqs[slot as usize].queued = false;
            // Answered before the queue level drops: the seconds up to the deadline saw it.
            self.answer(slot, deadline, Out::Shed, false);
            self.total_queued -= 1;
            // The shed is the last thing to happen at its instant: the levels after it hold
            // until `now` (in a second that starts at the deadline, too).
            self.record_levels(deadline, &[replica as u32]);
        }
    }

    /// Starts queued requests while workers are free.
    fn admit(&mut self, replica: u32, t: u64) {
        loop {
            let rep = &mut self.replicas[replica as usize];
            if rep.busy >= self.m.workers {
                return;
            }
            let Some(slot) = rep.queue.pop_front() else {
                return;
            };
            self.reqs[slot as usize].queued = false;
            self.total_queued -= 1;
            self.start(slot, t);
        }
    }

    fn start(&mut self, slot: u32, t: u64) {
        // The seconds before `t` keep the levels before this start.
        self.bin(t);
        let r = self.reqs[slot as usize].replica as usize;
        let rep = &mut self.replicas[r];
        rep.busy += 1;
        self.total_busy += 1;
        if rep.busy == self.m.workers {
            self.full_replicas += 1;
        }
        let req = &self.reqs[slot as usize];
        if self.m.uses[req.endpoint as usize] {
            self.attempt(slot, t);
        } else {
            let at = t.saturating_add(req.work);
            self.schedule(at, Kind::WorkDone, slot);
        }
    }

    /// Whether a replica admits a call from a fresh view that still says Closed although the
    /// shared breaker has moved on (a shared store's `view_ttl`).
    fn stale_view_admits(&self, idx: usize, replica: u32, t: u64) -> bool {
        if self.view_ttl == 0 {
            return false;
        }
        let v = self.views[self.view_index(idx, replica)];
        v.valid
            && v.closed
            && t.saturating_sub(v.at) < self.view_ttl
            && self.breakers[idx].generation() != v.generation
    }

    /// The replica talked to the store at `t`: its view is the shared state now.
    fn see(&mut self, idx: usize, replica: u32, t: u64) {
        if self.view_ttl == 0 {
            return;
        }
        let b = &self.breakers[idx];
        let i = self.view_index(idx, replica);
        self.views[i] = View {
            valid: true,
            closed: b.state() == State::Closed,
            generation: b.generation(),
            at: t,
        };
    }

    fn view_index(&self, idx: usize, replica: u32) -> usize {
        idx * self.m.replicas as usize + replica as usize
    }

    fn breaker_index(&self, replica: u32, shard: u32) -> usize {
        let keys = if self.scope_shard { self.m.shards } else { 1 };
        let key = if self.scope_shard { shard } else { 0 };
        let rep = if self.shared { 0 } else { replica };
        (rep * keys + key) as usize
    }

    /// Starts an attempt (or answers at once when the breaker rejects without a fallback).
    fn attempt(&mut self, slot: u32, t: u64) {
        let (replica, shard) = {
            let r = &self.reqs[slot as usize];
            (r.replica, r.shard)
        };
        if !self.breakers.is_empty() {
            let breakers = self.breakers;
            let idx = self.breaker_index(replica, shard);
            let b = &breakers[idx];
            let acquired = if self.stale_view_admits(idx, replica, t) {
                // The replica's view still says Closed: the store is not asked, the call
                // goes out, and its result will be discarded as stale.
                self.stale_view_calls += 1;
                Ok(None)
            } else {
                let r = b.try_acquire().map(Some);
                self.see(idx, replica, t);
                r
            };
            match acquired {
                Ok(p) => self.permits[slot as usize] = p,
                Err(_) => {
                    if self.m.phase(t, shard).is_none() {
                        self.rejected_healthy += 1;
                    }
                    if self.reqs[slot as usize].attempt > 0 {
                        self.rejected_on_retry += 1;
                    }
                    if self.fallback {
                        let req = &mut self.reqs[slot as usize];
                        req.outcome = Out::Fallback;
                        let at = t.saturating_add(req.work);
                        self.schedule(at, Kind::WorkDone, slot);
                    } else {
                        self.answer(slot, t, Out::Rejected, true);
                    }
                    return;
                }
            }
        }
        self.dependency_calls += 1;
        let b = self.bin(t);
        self.bins[b].dependency_calls += 1;
        if let Some(pool) = self.hosts.as_mut() {
            let req = &mut self.reqs[slot as usize];
            let (took, ok) = pool.start(slot, t, req.shard, &mut req.rng, self.timeout);
            req.ok = ok;
            self.schedule(t.saturating_add(took), Kind::AttemptDone, slot);
            return;
        }
        let m = self.m;
        let phase = m.phase(t, shard).unwrap_or(&m.base);
        let req = &mut self.reqs[slot as usize];
        let error = phase.error_rate.happens(&mut req.rng);
        let dist = if error {
            &phase.error_latency
        } else {
            &phase.latency
        };
        let mut lat = dist.sample(&mut req.rng);
        if let Some(cap) = m.capacity {
            while self.dep_done.peek().is_some_and(|d| d.0 <= t) {
                self.dep_done.pop();
            }
            let n = self.dep_done.len() as u64 + 1;
            if n > u64::from(cap) {
                let scaled = lat as f64 * n as f64 / f64::from(cap);
                lat = scaled.min(crate::dist::MAX_LATENCY.as_nanos() as f64) as u64;
            }
            self.dep_done.push(std::cmp::Reverse(t.saturating_add(lat)));
            let bin = &mut self.bins[b];
            bin.dependency_in_flight_peak = bin.dependency_in_flight_peak.max(n as u32);
        }
        let (took, ok) = match self.timeout {
            Some(to) if lat > to => (to, false),
            _ => (lat, !error),
        };
        req.ok = ok;
        self.schedule(t.saturating_add(took), Kind::AttemptDone, slot);
    }

    fn on_attempt_done(&mut self, slot: u32, t: u64) -> u32 {
        let s = slot as usize;
        let ok = self.reqs[s].ok;
        if let Some(p) = self.permits[s].take() {
            let _ = p.record(if ok {
                Outcome::Success
            } else {
                Outcome::Failure
            });
        }
        if let Some(pool) = self.hosts.as_mut() {
            pool.done(slot, t);
        }
        let replica = self.reqs[s].replica;
        if self.view_ttl > 0 {
            // The outcome's round trip brings the store's state back.
            let idx = self.breaker_index(replica, self.reqs[s].shard);
            self.see(idx, replica, t);
        }
        if ok {
            let req = &mut self.reqs[s];
            req.outcome = Out::Succeeded;
            let at = t.saturating_add(req.work);
            self.schedule(at, Kind::WorkDone, slot);
        } else if u32::from(self.reqs[s].attempt) + 1 < self.attempts {
            self.reqs[s].attempt += 1;
            if self.m.backoff == 0 {
                self.attempt(slot, t);
            } else {
                self.schedule(t.saturating_add(self.m.backoff), Kind::Retry, slot);
            }
        } else {
            self.answer(slot, t, Out::Failed, true);
        }
        replica
    }

    /// Answers a request: records its latency and outcome, frees its worker (if it held one)
    /// and its slot.
    fn answer(&mut self, slot: u32, t: u64, out: Out, held_worker: bool) {
        let (arrived, endpoint, replica) = {
            let r = &self.reqs[slot as usize];
            (r.arrived, r.endpoint, r.replica)
        };
        let b = self.bin(t);
        let bin = &mut self.bins[b];
        match out {
            Out::Succeeded => bin.succeeded += 1,
            Out::Failed => bin.failed += 1,
            Out::Rejected => bin.rejected += 1,
            Out::Fallback => {
                bin.rejected += 1;
                bin.fallback += 1;
            }
            Out::Shed => bin.shed += 1,
        }
        self.counts[out as usize] += 1;
        self.per_endpoint[endpoint as usize][out as usize] += 1;
        self.samples.push(Sample {
            lat: LatencyKey::from_nanos(t.saturating_sub(arrived)),
            meta: ((b as u32) << 7) | u32::from(endpoint),
        });
        if held_worker {
            let rep = &mut self.replicas[replica as usize];
            if rep.busy == self.m.workers {
                self.full_replicas -= 1;
            }
            rep.busy -= 1;
            self.total_busy -= 1;
        }
        self.free.push(slot);
    }

    fn finish_run(self) -> RunOutput {
        RunOutput {
            requests: self.next_req,
            counts: self.counts,
            per_endpoint: self.per_endpoint,
            rejected_healthy: self.rejected_healthy,
            rejected_on_retry: self.rejected_on_retry,
            stale_view_calls: self.stale_view_calls,
            dependency_calls: self.dependency_calls,
            pool_peak: self.pool_peak,
            queue_peak: self.queue_peak,
            bins: self.bins,
            samples: self.samples,
            transitions: Vec::new(),
            breakers: 0,
            hosts: self.hosts.map(|p| p.finish(self.now)),
        }
    }
}
