//! The discrete-event engine.
//!
//! Events wait in a binary heap ordered by (time, sequence number), so two events at the same
//! instant run in the order they were scheduled and every run is reproducible. Before each
//! event the engine sets the run's [`ManualClock`] to the event's time; every policy reads
//! that clock (the breakers' open waits, probe leases and slow-call rule, the budgets' and the
//! throttle's windows, the outlier detector's sweeps), so they all run on virtual time.
//!
//! # A request's life
//! 1. It **arrives** at a replica of the first tier (the first `[[tiers]]`, or `[service]`)
//!    chosen by that tier's load balancer. If a worker is free it starts; otherwise it waits
//!    in the replica's FIFO queue (bounded by `queue_limit`; one more is shed at once) and is
//!    shed if it waits longer than `queue_timeout`.
//! 2. At `[service]`, an endpoint that does not use the dependency does its local **work** and
//!    answers.
//! 3. Every other request **calls** the tier below (or, at `[service]`, the dependency)
//!    through its tier's client: the real policies, in the pipeline's order
//!    ([`crate::layers`]). The retry loop is the real [`RetryState`]: each attempt's result is
//!    told to it, and a retry waits the delay it returns (holding the worker). A local
//!    refusal is never retried: the request is answered at once, with the fallback if the
//!    variant has one, else with an error. An attempt to the dependency takes its latency
//!    (drawn from the phase in force when it starts, slowed or refused past the dependency's
//!    capacity), or the timeout if that is shorter, in which case it fails. An attempt to a
//!    tier below is a request there (step 1): it succeeds when that request is answered with
//!    real data or a fallback, and fails when it is answered with an error, is shed, or is
//!    still running when the timeout passes (it keeps running below, holding what it holds).
//! 4. A successful call (or a fallback) is followed by the local work; then the request is
//!    **answered** and frees its worker, which takes the next queued request.
//!
//! # Randomness
//! Arrival times, endpoints, shards and (random) load-balancer picks of the first tier come
//! from one generator seeded from the run seed, so every variant of a scenario sees the same
//! arrival sequence. Each request has its own generator, seeded from the run seed and the
//! request's number, for its local work and its attempts' outcomes, so the same request meets
//! the same dependency behaviour in every variant (as long as its attempts start in the same
//! phase); a request sent to a tier below draws its generator's seed from its caller's. The
//! retry policies' jitter, the throttles' draws and the breakers' open jitter have seeds of
//! their own, derived from the run seed. All generators are `Pcg64Mcg`, whose output for a
//! seed does not change between versions.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use tripline::{CircuitBreaker, ManualClock, Outcome, State};
use tripline_policies::chaos::{Chaos, Fault};
use tripline_policies::retry::budget::RetryCause;
use tripline_policies::retry::{AttemptResult, RetryPolicy, RetryState};
use tripline_policies::shed::{Priority, ShedPermit, Shedder};

use crate::dist::{Dist, Rate, nanos};
use crate::layers::{Cx, POLICIES, Policy, PolicyReport, TierPolicies, Woken};
use crate::scenario::{Balancer, Overload, Process, Protection, Scenario};

const SEC: u64 = 1_000_000_000;
/// No request (a parent or child link that is not set).
const NONE: u32 = u32::MAX;

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
    capacity: Option<u32>,
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

/// One second of a run, at one tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bin {
    /// Most workers busy at once, all replicas together.
    pub busy_peak: u32,
    /// Most requests queued at once, all replicas together.
    pub queued_peak: u32,
    /// Whether some replica had every worker busy during the second.
    pub pool_full: bool,
    /// Calls that reached the dependency (attempts admitted); at a tier in front of the
    /// service, the calls it made to the tier below.
    pub dependency_calls: u32,
    /// Most calls in progress at the dependency at once, as seen when calls start (tracked
    /// with a capacity only).
    pub dependency_in_flight_peak: u32,
    /// Requests answered with real data.
    pub succeeded: u32,
    /// Requests answered with an error after their attempts.
    pub failed: u32,
    /// Requests a local policy refused (fallbacks included).
    pub rejected: u32,
    /// Rejected requests answered with the fallback.
    pub fallback: u32,
    /// Requests shed by a full queue or the queue timeout.
    pub shed: u32,
    /// Retries granted by the retry policy (made after their backoff, unless refused then).
    pub retries: u32,
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

/// The variant being run: the unprotected service (`index` `None`) or one protection.
pub(crate) struct Variant<'a> {
    pub(crate) index: Option<usize>,
    pub(crate) protection: Option<&'a Protection>,
    /// Called with each of `[service]`'s breakers and its index once it exists (a trace
    /// recorder subscribes here).
    pub(crate) observe: Option<&'a Observe<'a>>,
}

/// What [`Variant::observe`] calls.
pub(crate) type Observe<'a> = dyn Fn(u32, &CircuitBreaker<ManualClock>) + Sync + 'a;

pub(crate) use crate::layers::{reason_str, seeded};

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

/// What one tier did in one run.
pub(crate) struct TierOutput {
    pub(crate) counts: [u64; 5],
    pub(crate) refused: [u64; POLICIES],
    pub(crate) rejected_healthy: u64,
    /// Refused attempts to the dependency that would have succeeded (`[service]` only).
    pub(crate) rejected_would_succeed: u64,
    /// Requests a shedder at the tier's workers refused for their priority.
    pub(crate) shed_by_priority: u64,
    pub(crate) rejected_on_retry: u64,
    pub(crate) calls_below: u64,
    pub(crate) pool_peak: u32,
    pub(crate) queue_peak: u32,
    pub(crate) bins: Vec<Bin>,
    pub(crate) transitions: Vec<Tr>,
    /// With `scope = "server-directed"`: the blamed shards' breakers' transitions, `breaker`
    /// numbered `replica × shards + shard` (the replica 0 when shared).
    pub(crate) scope_transitions: Vec<Tr>,
    pub(crate) breakers: u32,
    pub(crate) policies: PolicyReport,
}

/// What one run produced, for the report.
pub(crate) struct RunOutput {
    pub(crate) requests: u64,
    pub(crate) counts: [u64; 5],
    pub(crate) per_endpoint: Vec<[u64; 5]>,
    pub(crate) rejected_healthy: u64,
    pub(crate) rejected_on_retry: u64,
    pub(crate) stale_view_calls: u64,
    /// Refused attempts that would have succeeded (one tier, no hosts, no optimistic
    /// writes: `None` otherwise).
    pub(crate) rejected_would_succeed: Option<u64>,
    pub(crate) dependency_calls: u64,
    pub(crate) pool_peak: u32,
    pub(crate) queue_peak: u32,
    pub(crate) bins: Vec<Bin>,
    pub(crate) samples: Vec<Sample>,
    pub(crate) transitions: Vec<Tr>,
    /// `[service]`'s [`TierOutput::scope_transitions`].
    pub(crate) scope_transitions: Vec<Tr>,
    pub(crate) breakers: u32,
    pub(crate) hosts: Option<crate::hosts::HostsOutput>,
    /// Every tier, from the first to `[service]`.
    pub(crate) tiers: Vec<TierOutput>,
    /// When the last request of the first tier was answered.
    pub(crate) last_answer: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Arrival = 0,
    AttemptDone = 1,
    Retry = 2,
    WorkDone = 3,
    /// A call to the tier below reached its timeout.
    Timeout = 4,
    /// A wait for a slot (a bulkhead's, a shedder's, a limiter's) reached `max_wait`.
    Expire = 5,
    /// An attempt held back by an injected latency goes out.
    Dispatch = 6,
}

/// A scheduled event, packed in one `u128` so the heap compares and moves 16 bytes: the time
/// in the high 64 bits, then the sequence number (35 bits), the kind (3 bits) and the request
/// slot (26 bits). Ordering by the packed value is ordering by (time, sequence).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ev(u128);

const SLOT_BITS: u32 = 26;
const KIND_BITS: u32 = 3;
/// The most request slots a run may use (requests in the service at once).
pub(crate) const MAX_SLOTS: u64 = 1 << SLOT_BITS;
// Every request held at once (plus one being shed) must fit in a slot number.
const _: () = assert!(crate::scenario::MAX_HELD < MAX_SLOTS);

impl Ev {
    fn new(at: u64, seq: u64, kind: Kind, slot: u32) -> Self {
        let low = (seq << (SLOT_BITS + KIND_BITS)) | ((kind as u64) << SLOT_BITS) | u64::from(slot);
        Ev((u128::from(at) << 64) | u128::from(low))
    }
    fn at(self) -> u64 {
        (self.0 >> 64) as u64
    }
    fn kind(self) -> Kind {
        match (self.0 as u64 >> SLOT_BITS) & ((1 << KIND_BITS) - 1) {
            0 => Kind::Arrival,
            1 => Kind::AttemptDone,
            2 => Kind::Retry,
            3 => Kind::WorkDone,
            4 => Kind::Timeout,
            5 => Kind::Expire,
            _ => Kind::Dispatch,
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

/// Where a request stands between events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Queued, working, or waiting its backoff.
    Idle,
    /// Waiting in layer `wait_layer` (a bulkhead's queue) until `deadline`.
    Waiting,
    /// Its attempt is out: at the dependency, or at the tier below until `deadline`.
    InCall,
}

#[derive(Clone, Debug)]
struct Req {
    arrived: u64,
    work: u64,
    rng: Pcg64Mcg,
    replica: u32,
    shard: u32,
    endpoint: u16,
    tier: u8,
    /// Attempts made before the current one.
    attempt: u8,
    wait_layer: u8,
    ok: bool,
    timed_out: bool,
    /// Waiting in its replica's queue.
    queued: bool,
    stage: Stage,
    outcome: Out,
    deadline: u64,
    /// The request (at the tier above) whose attempt this is, or [`NONE`].
    parent: u32,
    /// This request's attempt at the tier below, while it is out, or [`NONE`].
    child: u32,
}

impl Req {
    /// A request arriving at `tier` at `arrived`, on (replica, shard, endpoint), sent by
    /// `parent` (or [`NONE`]).
    fn new(
        arrived: u64,
        work: u64,
        rng: Pcg64Mcg,
        (replica, shard, endpoint): (u32, u32, u16),
        tier: u8,
        parent: u32,
    ) -> Self {
        Req {
            arrived,
            work,
            rng,
            replica,
            shard,
            endpoint,
            tier,
            attempt: 0,
            wait_layer: 0,
            ok: false,
            timed_out: false,
            queued: false,
            stage: Stage::Idle,
            outcome: Out::Succeeded,
            deadline: 0,
            parent,
            child: NONE,
        }
    }
}

#[derive(Debug, Default)]
struct Replica {
    busy: u32,
    queue: VecDeque<u32>,
}

/// A tier in engine units.
pub(crate) struct TierModel {
    replicas: u32,
    balancer: Balancer,
    workers: u32,
    queue_limit: usize,
    queue_timeout: Option<u64>,
    work: Dist,
}

/// The scenario in engine units (nanoseconds, cumulative weights).
pub(crate) struct Model {
    duration: u64,
    rate: f64,
    process: Process,
    count: u64,
    tiers: Vec<TierModel>,
    uses: Vec<bool>,
    work: Vec<Dist>,
    /// Each endpoint's priority, carried by its requests.
    priorities: Vec<Priority>,
    cum_weights: Vec<f64>,
    base: Phase,
    phases: Vec<Phase>,
    /// Whether calls in progress at the dependency are tracked (some capacity is set).
    track: bool,
    overload: Overload,
    occ: bool,
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
            capacity: dep.capacity,
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
                capacity: f.capacity.or(dep.capacity),
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
        let mut tiers: Vec<TierModel> = s
            .tiers
            .iter()
            .map(|t| TierModel {
                replicas: t.replicas,
                balancer: t.load_balancer,
                workers: t.workers,
                queue_limit: t.queue_limit as usize,
                queue_timeout: t.queue_timeout.map(nanos),
                work: t.work,
            })
            .collect();
        let sv = &s.service;
        tiers.push(TierModel {
            replicas: sv.replicas,
            balancer: sv.load_balancer,
            workers: sv.workers,
            queue_limit: sv.queue_limit as usize,
            queue_timeout: sv.queue_timeout.map(nanos),
            work: Dist::Fixed(Duration::ZERO),
        });
        Model {
            duration: nanos(s.duration),
            rate: s.arrivals.rate.unwrap_or(1.0),
            process: s.arrivals.process,
            count: u64::from(s.arrivals.count.unwrap_or(0)),
            tiers,
            uses: s.endpoints.iter().map(|e| e.uses_dependency).collect(),
            work: s.endpoints.iter().map(|e| e.work).collect(),
            priorities: s.endpoints.iter().map(|e| e.priority.0).collect(),
            cum_weights,
            base,
            phases,
            track: dep.capacity.is_some() || dep.faults.iter().any(|f| f.capacity.is_some()),
            overload: dep.overload,
            occ: dep.optimistic_writes,
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

    fn last(&self) -> usize {
        self.tiers.len() - 1
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
    let n = model.tiers.len();
    let policies: Vec<TierPolicies> = (0..n)
        .map(|k| {
            // Checked when the scenario was read.
            let spec = scenario
                .client_spec(variant.index, k)
                .unwrap_or_else(|(f, v, a)| panic!("validated client {f}: {a}, got {v}"));
            let below = if k + 1 < n {
                scenario.tier_name(k + 1).to_string()
            } else {
                scenario.dependency.name.clone()
            };
            TierPolicies::new(
                spec,
                k,
                k + 1 == n,
                model.tiers[k].replicas,
                if k + 1 == n { model.shards } else { 1 },
                &below,
                &clock,
                seed,
            )
        })
        .collect();
    let mut policies = policies;
    if let Some(service) = policies.last_mut() {
        service.blamed = model
            .phases
            .iter()
            .filter_map(|p| Some((p.from, p.until, p.shards.clone()?)))
            .collect();
    }
    let mut out = {
        let hosts = model.hosts.as_ref().map(|h| {
            crate::hosts::Pool::new(
                h,
                crate::hosts::outlier_config(variant.protection),
                clock.clone(),
                crate::hosts::seed(seed),
            )
        });
        if let (Some(observe), Some(service)) = (variant.observe, policies.last()) {
            for (i, b) in service.breakers.iter().enumerate() {
                observe(i as u32, b);
            }
        }
        let clients = policies.iter().map(Client::new).collect();
        let mut engine = Engine::new(model, clients, seed, clock);
        engine.hosts = hosts;
        engine.run(progress);
        engine.finish_run()
    };
    for (k, p) in policies.iter().enumerate() {
        let t = &mut out.tiers[k];
        p.report(&mut t.policies);
        t.breakers = p.breakers.len() as u32;
    }
    let logs: Vec<_> = policies
        .iter()
        .map(|p| (p.log.clone(), p.scope_log.clone()))
        .collect();
    drop(policies);
    for (k, (log, scope_log)) in logs.iter().enumerate() {
        out.tiers[k].transitions =
            std::mem::take(&mut *log.lock().unwrap_or_else(|p| p.into_inner()));
        out.tiers[k].scope_transitions =
            std::mem::take(&mut *scope_log.lock().unwrap_or_else(|p| p.into_inner()));
    }
    let service = &out.tiers[n - 1];
    out.transitions = service.transitions.clone();
    out.scope_transitions = service.scope_transitions.clone();
    out.breakers = service.breakers;
    out.stale_view_calls = service
        .policies
        .breaker
        .as_ref()
        .map_or(0, |b| b.stale_view_calls);
    out
}

/// A tier's client in a run: its layers and its retry policies.
struct Client<'p> {
    outer: crate::layers::Layers<'p>,
    inner: crate::layers::Layers<'p>,
    retries: &'p [RetryPolicy],
    timeout: Option<u64>,
    fallback: bool,
    /// The fault injectors, per replica, switched on over `[chaos_from, chaos_until)`.
    chaos: &'p [Chaos],
    chaos_from: u64,
    chaos_until: u64,
    chaos_on: bool,
    /// The shedders at the tier's workers, per replica.
    pool_shedders: &'p [Shedder],
}

impl<'p> Client<'p> {
    fn new(p: &'p TierPolicies) -> Self {
        let (outer, inner) = p.layers();
        let window = p.spec.chaos.as_ref().map_or((0, u64::MAX), |c| {
            (nanos(c.from), c.until.map_or(u64::MAX, nanos))
        });
        Self {
            outer,
            inner,
            retries: &p.retries,
            timeout: p.spec.timeout.map(nanos),
            fallback: p.spec.fallback,
            chaos: &p.chaos,
            chaos_from: window.0,
            chaos_until: window.1,
            chaos_on: false,
            pool_shedders: &p.pool_shedders,
        }
    }

    /// The fault the injector of `replica` decides for an attempt sent at `t`: switched on
    /// and off (`Chaos::set_enabled`) as the game day's window opens and closes.
    fn chaos_at(&mut self, replica: u32, t: u64) -> Option<Fault> {
        if self.chaos.is_empty() {
            return None;
        }
        let on = self.chaos_from <= t && t < self.chaos_until;
        if on != self.chaos_on {
            for c in self.chaos {
                c.set_enabled(on);
            }
            self.chaos_on = on;
        }
        self.chaos.get(replica as usize).and_then(Chaos::decide)
    }
}

/// A tier while a run goes: its replicas and the figures it keeps.
struct TierRt {
    replicas: Vec<Replica>,
    total_busy: u32,
    total_queued: u32,
    full_replicas: u32,
    /// (deadline, slot) of every request queued with a queue timeout, in arrival order, which
    /// is deadline order (every request of the tier has the same timeout). Entries of requests
    /// that left the queue since are skipped, and swept out once they outnumber the queued
    /// requests.
    expiry: VecDeque<(u64, u32)>,
    bins: Vec<Bin>,
    counts: [u64; 5],
    refused: [u64; POLICIES],
    rejected_healthy: u64,
    rejected_would_succeed: u64,
    shed_by_priority: u64,
    rejected_on_retry: u64,
    calls_below: u64,
    pool_peak: u32,
    queue_peak: u32,
    /// The next replica of a round-robin balancer (below the first tier).
    rr: u64,
    /// The balancer's draws (below the first tier).
    route_rng: Pcg64Mcg,
}

struct Engine<'p> {
    m: &'p Model,
    clock: ManualClock,
    clients: Vec<Client<'p>>,
    seed: u64,

    heap: BinaryHeap<Ev>,
    seq: u64,
    reqs: Vec<Req>,
    retry: Vec<Option<RetryState>>,
    /// Per request slot: the slot a shedder at its tier's workers gave it.
    pool_permits: Vec<Option<ShedPermit>>,
    free: Vec<u32>,
    tiers: Vec<TierRt>,
    dep_done: BinaryHeap<std::cmp::Reverse<u64>>,
    /// Writes on their way to an optimistically written row: (arrival, read's time, slot,
    /// return leg), the slot [`NONE`] for a call whose caller will have given up.
    writes: BinaryHeap<std::cmp::Reverse<(u64, u64, u32, u64)>>,
    /// When the row's last successful write landed.
    last_commit: Option<u64>,
    woken: Vec<Woken>,
    /// The replicas (tier, replica) the current instant's events touched.
    touched: Vec<(u8, u32)>,
    /// Workers freed by the current event, to hand to queued requests after it.
    freed: Vec<(u8, u32)>,

    arrival_rng: Pcg64Mcg,
    next_req: u64,
    now: u64,
    last_answer: Option<u64>,

    samples: Vec<Sample>,
    per_endpoint: Vec<[u64; 5]>,
    dependency_calls: u64,
    /// The dependency's hosts and their balancer, with `[dependency.hosts]`.
    hosts: Option<crate::hosts::Pool<'p>>,
}

impl<'p> Engine<'p> {
    fn new(m: &'p Model, clients: Vec<Client<'p>>, seed: u64, clock: ManualClock) -> Self {
        let expected = match m.process {
            Process::Burst => m.count as f64,
            _ => m.rate * m.duration as f64 / 1e9,
        };
        let tiers = m
            .tiers
            .iter()
            .enumerate()
            .map(|(k, t)| TierRt {
                replicas: (0..t.replicas).map(|_| Replica::default()).collect(),
                total_busy: 0,
                total_queued: 0,
                full_replicas: 0,
                expiry: VecDeque::new(),
                bins: Vec::with_capacity((m.duration / SEC + 2) as usize),
                counts: [0; 5],
                refused: [0; POLICIES],
                rejected_healthy: 0,
                rejected_would_succeed: 0,
                shed_by_priority: 0,
                rejected_on_retry: 0,
                calls_below: 0,
                pool_peak: 0,
                queue_peak: 0,
                rr: 0,
                route_rng: Pcg64Mcg::seed_from_u64(mix(seed, 0x2007_0000 + k as u64)),
            })
            .collect();
        Engine {
            m,
            clock,
            clients,
            seed,
            heap: BinaryHeap::with_capacity(1024),
            seq: 0,
            reqs: Vec::with_capacity(1024),
            retry: Vec::with_capacity(1024),
            pool_permits: Vec::new(),
            free: Vec::with_capacity(1024),
            tiers,
            dep_done: BinaryHeap::new(),
            writes: BinaryHeap::new(),
            last_commit: None,
            woken: Vec::new(),
            touched: Vec::new(),
            freed: Vec::new(),
            arrival_rng: Pcg64Mcg::seed_from_u64(mix(seed, 0xA441_7A15)),
            next_req: 0,
            now: 0,
            last_answer: None,
            samples: Vec::with_capacity((expected as usize).min(1 << 24)),
            per_endpoint: vec![[0; 5]; m.uses.len()],
            dependency_calls: 0,
            hosts: None,
        }
    }

    fn schedule(&mut self, at: u64, kind: Kind, slot: u32) {
        self.seq += 1;
        self.heap.push(Ev::new(at, self.seq, kind, slot));
    }

    /// The bin of time `t`, creating the bins up to it in every tier. Call it before changing
    /// a level at `t`: a bin that starts before `t` opens with the levels in force until `t`
    /// (nothing happened in between), and one that starts at `t` exactly opens empty (the
    /// levels before `t` ended as it began; [`record_levels`](Self::record_levels) adds the
    /// levels after the events at `t`).
    fn bin(&mut self, t: u64) -> usize {
        let b = (t / SEC) as usize;
        let last = self.m.last();
        for (k, tier) in self.tiers.iter_mut().enumerate() {
            while tier.bins.len() <= b {
                let start = tier.bins.len() as u64 * SEC;
                if start == t {
                    tier.bins.push(Bin::default());
                    continue;
                }
                let mut in_flight = 0;
                if k == last {
                    // Calls that ended by the start of this bin are no longer in progress in it.
                    while self.dep_done.peek().is_some_and(|d| d.0 <= start) {
                        self.dep_done.pop();
                    }
                    in_flight = self.dep_done.len() as u32;
                }
                tier.bins.push(Bin {
                    busy_peak: tier.total_busy,
                    queued_peak: tier.total_queued,
                    pool_full: tier.full_replicas > 0,
                    dependency_in_flight_peak: in_flight,
                    ..Bin::default()
                });
            }
        }
        b
    }

    /// Records the levels after every event at instant `t` (a level holds from one instant to
    /// the next, so the states an instant passes through between its events last no time and
    /// count nowhere): in `t`'s bin, and in the peaks of the replicas those events touched.
    fn record_levels(&mut self, t: u64, touched: &[(u8, u32)]) {
        let b = self.bin(t);
        for tier in &mut self.tiers {
            let (busy, queued, full) = (tier.total_busy, tier.total_queued, tier.full_replicas > 0);
            let bin = &mut tier.bins[b];
            bin.busy_peak = bin.busy_peak.max(busy);
            bin.queued_peak = bin.queued_peak.max(queued);
            bin.pool_full |= full;
        }
        for &(k, r) in touched {
            let tier = &mut self.tiers[k as usize];
            let rep = &tier.replicas[r as usize];
            tier.pool_peak = tier.pool_peak.max(rep.busy);
            tier.queue_peak = tier.queue_peak.max(rep.queue.len() as u32);
        }
    }

    fn touch(&mut self, tier: u8, replica: u32) {
        if !self.touched.contains(&(tier, replica)) {
            self.touched.push((tier, replica));
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
            Process::Burst => {
                if k < self.m.count {
                    0
                } else {
                    u64::MAX
                }
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
        // The instant being processed.
        let mut instant = None;
        loop {
            // Writes reaching an optimistically written row go first at their instant.
            let next = self.heap.peek().map(|e| e.at());
            if let Some(&std::cmp::Reverse((w, ..))) = self.writes.peek() {
                if next.is_none_or(|e| w <= e) {
                    self.land_writes(w);
                    continue;
                }
            }
            let Some(ev) = self.heap.pop() else {
                break;
            };
            let (at, slot) = (ev.at(), ev.slot());
            if instant.is_some_and(|i| i < at) {
                if let Some(i) = instant {
                    let touched = std::mem::take(&mut self.touched);
                    self.record_levels(i, &touched);
                    self.touched = touched;
                    self.touched.clear();
                }
            }
            instant = Some(at);
            self.now = at;
            self.clock.set(Duration::from_nanos(at));
            self.expire_queues(at);
            match ev.kind() {
                Kind::Arrival => self.on_arrival(at),
                Kind::AttemptDone => {
                    let (ok, timed_out) = {
                        let r = &self.reqs[slot as usize];
                        (r.ok, r.timed_out)
                    };
                    if let Some(pool) = self.hosts.as_mut() {
                        pool.done(slot, at);
                    }
                    self.attempt_done(slot, at, ok, timed_out);
                }
                Kind::Retry => {
                    if let Some(rs) = self.retry[slot as usize].as_mut() {
                        rs.send();
                    }
                    self.admit_from(slot, at, 0);
                }
                Kind::WorkDone => {
                    let out = self.reqs[slot as usize].outcome;
                    self.answer(slot, at, out, true);
                }
                Kind::Timeout => self.on_timeout(slot, at),
                Kind::Expire => self.on_expire(slot, at),
                Kind::Dispatch => self.on_dispatch(slot, at),
            }
            while !self.woken.is_empty() || !self.freed.is_empty() {
                self.drain_woken(at);
                self.hand_out_workers(at);
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
            let touched = std::mem::take(&mut self.touched);
            self.record_levels(i, &touched);
        }
        let total_ms = self.m.duration / 1_000_000;
        if total_ms > reported_ms {
            progress(total_ms - reported_ms);
        }
    }

    /// A new request slot holding `req`.
    fn slot_for(&mut self, req: Req) -> u32 {
        match self.free.pop() {
            Some(s) => {
                self.reqs[s as usize] = req;
                s
            }
            None => {
                self.reqs.push(req);
                self.retry.push(None);
                (self.reqs.len() - 1) as u32
            }
        }
    }

    fn on_arrival(&mut self, t: u64) {
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
        let first = &self.m.tiers[0];
        let replica = match first.balancer {
            Balancer::RoundRobin => (k % u64::from(first.replicas)) as u32,
            Balancer::Random => self.arrival_rng.random_range(0..first.replicas),
        };
        let next = self.arrival_time(k + 1, t);
        if next < self.m.duration {
            self.schedule(next, Kind::Arrival, 0);
        }
        let mut rng = Pcg64Mcg::new(
            (u128::from(mix(self.seed, k)) << 64) | u128::from(mix(k, self.seed ^ 0x5EED)),
        );
        let work = self.work_of(0, endpoint, &mut rng);
        let req = Req::new(t, work, rng, (replica, shard, endpoint as u16), 0, NONE);
        let slot = self.slot_for(req);
        self.enter(slot, t);
    }

    /// The local work of a request at `tier`: its endpoint's at `[service]`, the tier's own
    /// in front of it.
    fn work_of(&self, tier: usize, endpoint: usize, rng: &mut Pcg64Mcg) -> u64 {
        if tier == self.m.last() {
            self.m.work[endpoint].sample(rng)
        } else {
            self.m.tiers[tier].work.sample(rng)
        }
    }

    /// A request arrives at its replica: it takes a free worker, or waits in the queue, or is
    /// shed.
    fn enter(&mut self, slot: u32, t: u64) {
        let (k, replica) = {
            let r = &self.reqs[slot as usize];
            (r.tier as usize, r.replica)
        };
        self.touch(k as u8, replica);
        let tm = &self.m.tiers[k];
        let rep = &self.tiers[k].replicas[replica as usize];
        let free = rep.busy < tm.workers;
        if let Some(shedder) = self.clients[k].pool_shedders.get(replica as usize) {
            // A shedder at the workers: a request takes a worker only within its priority's
            // share of them; with every worker busy, only a priority that may use them all
            // waits in the queue, and the others are refused at once.
            let p = self.m.priorities[self.reqs[slot as usize].endpoint as usize];
            if free || shedder.cutoff(p) < shedder.capacity() {
                match shedder.try_acquire(p) {
                    Ok(permit) if free => {
                        put_permit(&mut self.pool_permits, slot, permit);
                        self.start(slot, t);
                        return;
                    }
                    // Its slots are the busy workers: no slot is free while they all are.
                    Ok(_) => {}
                    Err(_) => {
                        self.tiers[k].shed_by_priority += 1;
                        self.answer(slot, t, Out::Shed, false);
                        return;
                    }
                }
            }
        }
        if free {
            self.start(slot, t);
        } else if rep.queue.len() < tm.queue_limit {
            // The seconds before `t` keep the queue as it was.
            self.bin(t);
            let tier = &mut self.tiers[k];
            tier.replicas[replica as usize].queue.push_back(slot);
            tier.total_queued += 1;
            self.reqs[slot as usize].queued = true;
            if let Some(limit) = tm.queue_timeout {
                let tier = &mut self.tiers[k];
                tier.expiry.push_back((t.saturating_add(limit), slot));
                if tier.expiry.len() > 2 * tier.total_queued as usize + 1024 {
                    let reqs = &self.reqs;
                    tier.expiry
                        .retain(|&(d, s)| Self::still_queued(reqs, s, d, limit));
                }
            }
        } else {
            self.answer(slot, t, Out::Shed, false);
        }
    }

    /// Whether the expiry entry (`deadline`, `slot`) is still a request waiting in a queue.
    fn still_queued(reqs: &[Req], slot: u32, deadline: u64, limit: u64) -> bool {
        let r = &reqs[slot as usize];
        r.queued && r.arrived.saturating_add(limit) == deadline
    }

    /// Sheds every queued request that has waited longer than its tier's queue timeout by
    /// `now`, at the moment its wait reached the timeout: on every replica, so that the figures
    /// of the seconds between see it gone. A request whose wait reaches the timeout at `now`
    /// exactly may still get a worker at `now`.
    fn expire_queues(&mut self, now: u64) {
        for k in 0..self.tiers.len() {
            let Some(limit) = self.m.tiers[k].queue_timeout else {
                continue;
            };
            while let Some(&(deadline, slot)) = self.tiers[k].expiry.front() {
                if deadline >= now {
                    break;
                }
                self.tiers[k].expiry.pop_front();
                if !Self::still_queued(&self.reqs, slot, deadline, limit) {
                    continue;
                }
                // The oldest request of its replica's FIFO queue.
                let replica = self.reqs[slot as usize].replica as usize;
                let queue = &mut self.tiers[k].replicas[replica].queue;
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
                self.tiers[k].total_queued -= 1;
                // The shed is the last thing to happen at its instant: the levels after it
                // hold until `now` (in a second that starts at the deadline, too).
                self.record_levels(deadline, &[(k as u8, replica as u32)]);
            }
        }
    }

    /// Starts queued requests while workers are free, on the replicas whose workers the last
    /// event freed.
    fn hand_out_workers(&mut self, t: u64) {
        while let Some((k, replica)) = self.freed.pop() {
            loop {
                let tier = &mut self.tiers[k as usize];
                let rep = &mut tier.replicas[replica as usize];
                if rep.busy >= self.m.tiers[k as usize].workers {
                    break;
                }
                let Some(slot) = rep.queue.pop_front() else {
                    break;
                };
                tier.total_queued -= 1;
                self.reqs[slot as usize].queued = false;
                if let Some(shedder) = self.clients[k as usize].pool_shedders.get(replica as usize)
                {
                    let p = self.m.priorities[self.reqs[slot as usize].endpoint as usize];
                    match shedder.try_acquire(p) {
                        Ok(permit) => put_permit(&mut self.pool_permits, slot, permit),
                        Err(_) => {
                            self.tiers[k as usize].shed_by_priority += 1;
                            self.answer(slot, t, Out::Shed, false);
                            continue;
                        }
                    }
                }
                self.start(slot, t);
            }
        }
    }

    fn start(&mut self, slot: u32, t: u64) {
        // The seconds before `t` keep the levels before this start.
        self.bin(t);
        let (k, r) = {
            let req = &self.reqs[slot as usize];
            (req.tier as usize, req.replica as usize)
        };
        let workers = self.m.tiers[k].workers;
        let tier = &mut self.tiers[k];
        let rep = &mut tier.replicas[r];
        rep.busy += 1;
        tier.total_busy += 1;
        if rep.busy == workers {
            tier.full_replicas += 1;
        }
        let req = &self.reqs[slot as usize];
        if k == self.m.last() && !self.m.uses[req.endpoint as usize] {
            let at = t.saturating_add(req.work);
            self.schedule(at, Kind::WorkDone, slot);
        } else {
            self.begin_call(slot, t);
        }
    }

    fn cx(&self, slot: u32, t: u64) -> Cx {
        let r = &self.reqs[slot as usize];
        Cx {
            slot,
            replica: r.replica,
            shard: r.shard,
            now: t,
            priority: self.m.priorities[r.endpoint as usize],
        }
    }

    /// A request starts calling the tier below (or the dependency): its retry loop begins,
    /// and the layers around it admit it once.
    fn begin_call(&mut self, slot: u32, t: u64) {
        let (k, replica) = {
            let r = &mut self.reqs[slot as usize];
            r.attempt = 0;
            (r.tier as usize, r.replica)
        };
        let cx = self.cx(slot, t);
        let client = &mut self.clients[k];
        for i in 0..client.outer.len() {
            // The layers around the retry loop never wait (the breaker).
            if let crate::layers::Admit::Refused(p) = client.outer[i].admit(&cx, &mut self.woken) {
                for j in (0..i).rev() {
                    client.outer[j].settle(&cx, None, &mut self.woken);
                }
                self.refused(slot, t, p, false);
                return;
            }
        }
        // The retry loop starts inside the layers around it, as the pipeline's does.
        if let Some(p) = self.clients[k].retries.get(replica as usize) {
            self.retry[slot as usize] = Some(p.begin_request());
        }
        self.admit_from(slot, t, 0);
    }

    /// Admits the current attempt through the inner layers from layer `from`, then sends it;
    /// or parks it (a bulkhead's queue), or refuses it.
    fn admit_from(&mut self, slot: u32, t: u64, from: usize) {
        let k = self.reqs[slot as usize].tier as usize;
        let cx = self.cx(slot, t);
        let n = self.clients[k].inner.len();
        for i in from..n {
            let client = &mut self.clients[k];
            match client.inner[i].admit(&cx, &mut self.woken) {
                crate::layers::Admit::Go => {}
                crate::layers::Admit::Wait(deadline) => {
                    let r = &mut self.reqs[slot as usize];
                    r.stage = Stage::Waiting;
                    r.wait_layer = i as u8;
                    r.deadline = deadline;
                    self.schedule(deadline, Kind::Expire, slot);
                    return;
                }
                crate::layers::Admit::Refused(p) => {
                    self.unwind(k, &cx, i);
                    self.refused(slot, t, p, true);
                    return;
                }
            }
        }
        self.send(slot, t);
    }

    /// The attempt did not go: the inner layers before layer `upto` that admitted it give
    /// their part back, innermost first.
    fn unwind(&mut self, k: usize, cx: &Cx, upto: usize) {
        let client = &mut self.clients[k];
        for j in (0..upto).rev() {
            client.inner[j].settle(cx, None, &mut self.woken);
        }
    }

    /// Attempts whose wait ended while the last event ran: on through the layers, or refused.
    fn drain_woken(&mut self, t: u64) {
        let mut i = 0;
        while i < self.woken.len() {
            let (slot, refusal) = self.woken[i];
            i += 1;
            let r = &mut self.reqs[slot as usize];
            if r.stage != Stage::Waiting {
                continue;
            }
            r.stage = Stage::Idle;
            let (k, layer) = (r.tier as usize, r.wait_layer as usize);
            match refusal {
                None => self.admit_from(slot, t, layer + 1),
                Some(p) => {
                    let cx = self.cx(slot, t);
                    self.unwind(k, &cx, layer);
                    self.refused(slot, t, p, true);
                }
            }
        }
        self.woken.clear();
    }

    /// The attempt passed every layer and its timer starts. The fault injector, playing the
    /// tier below inside the timeout, may hold it back (an injected latency: it goes out
    /// after the delay, with what is left of its timeout, or times out first), fail it at
    /// once, or hang it until its timeout; such an attempt never reaches the tier below.
    fn send(&mut self, slot: u32, t: u64) {
        let (k, replica) = {
            let r = &mut self.reqs[slot as usize];
            r.stage = Stage::InCall;
            (r.tier as usize, r.replica)
        };
        let timeout = self.clients[k].timeout;
        match self.clients[k].chaos_at(replica, t) {
            None => self.dispatch(slot, t, timeout),
            Some(Fault::Latency(d)) => match timeout {
                Some(to) if nanos(d) >= to => self.injected(slot, t.saturating_add(to), true),
                _ => {
                    self.reqs[slot as usize].deadline =
                        timeout.map_or(u64::MAX, |to| t.saturating_add(to));
                    self.schedule(t.saturating_add(nanos(d)), Kind::Dispatch, slot);
                }
            },
            Some(Fault::Error) => self.injected(slot, t, false),
            // A hang needs a timeout (checked when the scenario is read).
            Some(Fault::Hang) => {
                let end = timeout.map_or(u64::MAX, |to| t.saturating_add(to));
                self.injected(slot, end, true);
            }
        }
    }

    /// An attempt the fault injector failed (`timed_out`: hung, or held back, until its
    /// timeout) ends at `at`, without reaching the tier below.
    fn injected(&mut self, slot: u32, at: u64, timed_out: bool) {
        let r = &mut self.reqs[slot as usize];
        r.ok = false;
        r.timed_out = timed_out;
        self.schedule(at, Kind::AttemptDone, slot);
    }

    /// An attempt held back by an injected latency goes out, with what is left of its
    /// timeout.
    fn on_dispatch(&mut self, slot: u32, t: u64) {
        let r = &self.reqs[slot as usize];
        if r.stage != Stage::InCall {
            return;
        }
        let left = (r.deadline != u64::MAX).then(|| r.deadline.saturating_sub(t));
        self.dispatch(slot, t, left);
    }

    /// The attempt goes out: to the dependency, or to the tier below.
    fn dispatch(&mut self, slot: u32, t: u64, timeout: Option<u64>) {
        let k = self.reqs[slot as usize].tier as usize;
        let b = self.bin(t);
        self.tiers[k].calls_below += 1;
        self.tiers[k].bins[b].dependency_calls += 1;
        if k < self.m.last() {
            self.send_below(slot, t, timeout);
            return;
        }
        self.dependency_calls += 1;
        if self.m.occ {
            self.send_write(slot, t, timeout);
            return;
        }
        if let Some(pool) = self.hosts.as_mut() {
            let req = &mut self.reqs[slot as usize];
            let (took, ok, timed_out) = pool.start(slot, t, req.shard, &mut req.rng, timeout);
            req.ok = ok;
            req.timed_out = timed_out;
            self.schedule(t.saturating_add(took), Kind::AttemptDone, slot);
            return;
        }
        let m = self.m;
        let shard = self.reqs[slot as usize].shard;
        let phase = m.phase(t, shard).unwrap_or(&m.base);
        let req = &mut self.reqs[slot as usize];
        let mut error = phase.error_rate.happens(&mut req.rng);
        let mut lat = if error {
            phase.error_latency.sample(&mut req.rng)
        } else {
            phase.latency.sample(&mut req.rng)
        };
        if m.track {
            while self.dep_done.peek().is_some_and(|d| d.0 <= t) {
                self.dep_done.pop();
            }
            let n = self.dep_done.len() as u64 + 1;
            match phase.capacity {
                Some(cap) if n > u64::from(cap) && m.overload == Overload::Fail => {
                    // Busy: refused at once (a conflict), holding nothing.
                    error = true;
                    lat = phase.error_latency.sample(&mut req.rng);
                }
                Some(cap) => {
                    if n > u64::from(cap) {
                        let scaled = lat as f64 * n as f64 / f64::from(cap);
                        lat = scaled.min(crate::dist::MAX_LATENCY.as_nanos() as f64) as u64;
                    }
                    self.dep_done.push(std::cmp::Reverse(t.saturating_add(lat)));
                }
                None => self.dep_done.push(std::cmp::Reverse(t.saturating_add(lat))),
            }
            let bin = &mut self.tiers[k].bins[b];
            bin.dependency_in_flight_peak = bin.dependency_in_flight_peak.max(n as u32);
        }
        let (took, ok, timed_out) = match timeout {
            Some(to) if lat > to => (to, false, true),
            _ => (lat, !error, false),
        };
        req.ok = ok;
        req.timed_out = timed_out;
        self.schedule(t.saturating_add(took), Kind::AttemptDone, slot);
    }

    /// The writes that reach the optimistically written row by `now`, in time order: each
    /// lands if no other write landed since its read, and its answer heads back.
    fn land_writes(&mut self, now: u64) {
        while let Some(&std::cmp::Reverse((at, read, slot, back))) = self.writes.peek() {
            if at > now {
                break;
            }
            self.writes.pop();
            let landed = self.last_commit.is_none_or(|c| c <= read);
            if landed {
                self.last_commit = Some(at);
            }
            if slot != NONE {
                let req = &mut self.reqs[slot as usize];
                req.ok = req.ok && landed;
                self.schedule(at.saturating_add(back), Kind::AttemptDone, slot);
            }
        }
    }

    /// An optimistic update of the row: a read's round trip, then the write's, each leg drawn
    /// from the phase's latency. The write's fate is decided when it reaches the row.
    fn send_write(&mut self, slot: u32, t: u64, timeout: Option<u64>) {
        let m = self.m;
        let shard = self.reqs[slot as usize].shard;
        let phase = m.phase(t, shard).unwrap_or(&m.base);
        let req = &mut self.reqs[slot as usize];
        let error = phase.error_rate.happens(&mut req.rng);
        let legs: [u64; 4] = std::array::from_fn(|_| phase.latency.sample(&mut req.rng));
        let read = t.saturating_add(legs[0]);
        let write = read.saturating_add(legs[1]).saturating_add(legs[2]);
        let total = write.saturating_add(legs[3]) - t;
        req.ok = !error;
        req.timed_out = false;
        match timeout {
            Some(to) if total > to => {
                // The caller gives up first; the write still reaches the row.
                req.ok = false;
                req.timed_out = true;
                self.writes
                    .push(std::cmp::Reverse((write, read, NONE, legs[3])));
                self.schedule(t.saturating_add(to), Kind::AttemptDone, slot);
            }
            _ => self
                .writes
                .push(std::cmp::Reverse((write, read, slot, legs[3]))),
        }
    }

    /// The attempt of `slot` is a request at the tier below.
    fn send_below(&mut self, slot: u32, t: u64, timeout: Option<u64>) {
        let (k, endpoint, shard, seed) = {
            let r = &mut self.reqs[slot as usize];
            (
                r.tier as usize + 1,
                r.endpoint,
                r.shard,
                r.rng.random::<u64>(),
            )
        };
        let tm = &self.m.tiers[k];
        let tier = &mut self.tiers[k];
        let replica = match tm.balancer {
            Balancer::RoundRobin => {
                let r = (tier.rr % u64::from(tm.replicas)) as u32;
                tier.rr += 1;
                r
            }
            Balancer::Random => tier.route_rng.random_range(0..tm.replicas),
        };
        let mut rng = Pcg64Mcg::seed_from_u64(seed);
        let work = self.work_of(k, endpoint as usize, &mut rng);
        let child = self.slot_for(Req::new(
            t,
            work,
            rng,
            (replica, shard, endpoint),
            k as u8,
            slot,
        ));
        let r = &mut self.reqs[slot as usize];
        r.child = child;
        r.deadline = timeout.map_or(u64::MAX, |to| t.saturating_add(to));
        if let Some(to) = timeout {
            self.schedule(t.saturating_add(to), Kind::Timeout, slot);
        }
        self.enter(child, t);
    }

    /// A call to the tier below reached its timeout: the attempt fails; the request below
    /// keeps running, and its answer will go nowhere.
    fn on_timeout(&mut self, slot: u32, t: u64) {
        let r = &self.reqs[slot as usize];
        if r.stage != Stage::InCall || r.deadline != t || r.child == NONE {
            return;
        }
        let child = r.child;
        self.reqs[child as usize].parent = NONE;
        self.reqs[slot as usize].child = NONE;
        self.attempt_done(slot, t, false, true);
    }

    /// A wait for a bulkhead's slot reached `max_wait`: refused.
    fn on_expire(&mut self, slot: u32, t: u64) {
        let r = &self.reqs[slot as usize];
        if r.stage != Stage::Waiting || r.deadline != t {
            return;
        }
        let (k, layer) = (r.tier as usize, r.wait_layer as usize);
        self.reqs[slot as usize].stage = Stage::Idle;
        let cx = self.cx(slot, t);
        let policy = self.clients[k].inner[layer].expire(&cx, &mut self.woken);
        self.unwind(k, &cx, layer);
        self.refused(slot, t, policy, true);
    }

    /// The current attempt of `slot` ended: the layers learn its outcome, and the retry loop
    /// decides.
    fn attempt_done(&mut self, slot: u32, t: u64, ok: bool, timed_out: bool) {
        let k = self.reqs[slot as usize].tier as usize;
        self.reqs[slot as usize].stage = Stage::Idle;
        let cx = self.cx(slot, t);
        let outcome = if ok {
            Outcome::Success
        } else {
            Outcome::Failure
        };
        let client = &mut self.clients[k];
        for layer in client.inner.iter_mut().rev() {
            layer.settle(&cx, Some(outcome), &mut self.woken);
        }
        for layer in client.inner.iter_mut() {
            layer.release_retry_slot(slot);
        }
        if ok {
            self.complete(slot, t, true);
            return;
        }
        let cause = if timed_out {
            RetryCause::Timeout
        } else {
            RetryCause::Error
        };
        let delay = self.retry[slot as usize]
            .as_mut()
            .and_then(|rs| rs.next(AttemptResult::Failure(cause)));
        let Some(delay) = delay else {
            self.complete(slot, t, false);
            return;
        };
        let client = &mut self.clients[k];
        let granted = client.inner.iter_mut().all(|l| l.take_retry_slot(&cx));
        if !granted {
            for layer in client.inner.iter_mut() {
                layer.release_retry_slot(slot);
            }
            if let Some(rs) = self.retry[slot as usize].as_mut() {
                rs.cancel();
            }
            self.complete(slot, t, false);
            return;
        }
        let b = self.bin(t);
        self.tiers[k].bins[b].retries += 1;
        self.reqs[slot as usize].attempt = self.reqs[slot as usize].attempt.saturating_add(1);
        self.schedule(t.saturating_add(nanos_of(delay)), Kind::Retry, slot);
    }

    /// The request's call is over: it succeeded (its work follows) or failed (it answers an
    /// error). The layers around the retry loop learn the call's result.
    fn complete(&mut self, slot: u32, t: u64, ok: bool) {
        if let Some(mut rs) = self.retry[slot as usize].take() {
            if ok {
                rs.next(AttemptResult::Success);
            }
        }
        let k = self.reqs[slot as usize].tier as usize;
        if !self.clients[k].outer.is_empty() {
            let cx = self.cx(slot, t);
            let outcome = if ok {
                Outcome::Success
            } else {
                Outcome::Failure
            };
            for layer in self.clients[k].outer.iter_mut().rev() {
                layer.settle(&cx, Some(outcome), &mut self.woken);
            }
        }
        if ok {
            let req = &mut self.reqs[slot as usize];
            req.outcome = Out::Succeeded;
            let at = t.saturating_add(req.work);
            self.schedule(at, Kind::WorkDone, slot);
        } else {
            self.answer(slot, t, Out::Failed, true);
        }
    }

    /// A local policy refused the request's attempt (`inner`) or its whole call: never
    /// retried; answered at once, with the fallback if the variant has one.
    fn refused(&mut self, slot: u32, t: u64, p: Policy, inner: bool) {
        let (k, shard, attempt) = {
            let r = &mut self.reqs[slot as usize];
            r.stage = Stage::Idle;
            (r.tier as usize, r.shard, r.attempt)
        };
        let would_succeed = self.would_succeed(slot, t);
        let tier = &mut self.tiers[k];
        tier.refused[p as usize] += 1;
        if self.m.phase(t, shard).is_none() {
            tier.rejected_healthy += 1;
        }
        if would_succeed {
            tier.rejected_would_succeed += 1;
        }
        if attempt > 0 {
            tier.rejected_on_retry += 1;
        }
        let client = &mut self.clients[k];
        for layer in client.inner.iter_mut() {
            layer.release_retry_slot(slot);
        }
        if let Some(mut rs) = self.retry[slot as usize].take() {
            rs.next(AttemptResult::Refused);
        }
        if inner && !client.outer.is_empty() {
            // Refused inside the layers around the retry loop: nothing to say about the
            // dependency.
            let cx = self.cx(slot, t);
            for layer in self.clients[k].outer.iter_mut().rev() {
                layer.settle(&cx, None, &mut self.woken);
            }
        }
        if self.clients[k].fallback {
            let req = &mut self.reqs[slot as usize];
            req.outcome = Out::Fallback;
            let at = t.saturating_add(req.work);
            self.schedule(at, Kind::WorkDone, slot);
        } else {
            self.answer(slot, t, Out::Rejected, true);
        }
    }

    /// Whether a refused attempt of `slot` to the dependency would have succeeded had it been
    /// sent at `t`: drawn from the phase in force for its shard (its error rate, then its
    /// latency against the timeout), as `dispatch` draws, the capacity aside. Only at
    /// `[service]`, without hosts or optimistic writes. The draws come from the request's own
    /// generator, which a refused request never uses again.
    fn would_succeed(&mut self, slot: u32, t: u64) -> bool {
        let m = self.m;
        let k = self.reqs[slot as usize].tier as usize;
        if k != m.last() || m.hosts.is_some() || m.occ {
            return false;
        }
        let timeout = self.clients[k].timeout;
        let req = &mut self.reqs[slot as usize];
        let phase = m.phase(t, req.shard).unwrap_or(&m.base);
        if phase.error_rate.happens(&mut req.rng) {
            return false;
        }
        let lat = phase.latency.sample(&mut req.rng);
        timeout.is_none_or(|to| lat <= to)
    }

    /// Answers a request: records its outcome (and, at the first tier, its latency), frees its
    /// worker (if it held one) and its slot, and hands the outcome to the caller above.
    fn answer(&mut self, slot: u32, t: u64, out: Out, held_worker: bool) {
        let (arrived, endpoint, replica, k, parent) = {
            let r = &self.reqs[slot as usize];
            (r.arrived, r.endpoint, r.replica, r.tier as usize, r.parent)
        };
        let b = self.bin(t);
        let tier = &mut self.tiers[k];
        let bin = &mut tier.bins[b];
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
        tier.counts[out as usize] += 1;
        if let Some(p) = self.pool_permits.get_mut(slot as usize) {
            // Its worker is given back below: so is its share of them.
            drop(p.take());
        }
        if held_worker {
            let workers = self.m.tiers[k].workers;
            let rep = &mut tier.replicas[replica as usize];
            if rep.busy == workers {
                tier.full_replicas -= 1;
            }
            rep.busy -= 1;
            tier.total_busy -= 1;
            if !self.freed.contains(&(k as u8, replica)) {
                self.freed.push((k as u8, replica));
            }
            self.touch(k as u8, replica);
        }
        if k == 0 {
            self.per_endpoint[endpoint as usize][out as usize] += 1;
            self.samples.push(Sample {
                lat: LatencyKey::from_nanos(t.saturating_sub(arrived)),
                meta: ((b as u32) << 7) | u32::from(endpoint),
            });
            self.last_answer = Some(self.last_answer.map_or(t, |l| l.max(t)));
        }
        self.free.push(slot);
        if parent != NONE {
            self.reqs[parent as usize].child = NONE;
            let ok = matches!(out, Out::Succeeded | Out::Fallback);
            self.attempt_done(parent, t, ok, false);
        }
    }

    fn finish_run(self) -> RunOutput {
        let last = self.m.last();
        let tiers: Vec<TierOutput> = self
            .tiers
            .into_iter()
            .map(|t| TierOutput {
                counts: t.counts,
                refused: t.refused,
                rejected_healthy: t.rejected_healthy,
                rejected_would_succeed: t.rejected_would_succeed,
                shed_by_priority: t.shed_by_priority,
                rejected_on_retry: t.rejected_on_retry,
                calls_below: t.calls_below,
                pool_peak: t.pool_peak,
                queue_peak: t.queue_peak,
                bins: t.bins,
                transitions: Vec::new(),
                scope_transitions: Vec::new(),
                breakers: 0,
                policies: PolicyReport::default(),
            })
            .collect();
        let mut policies: Vec<PolicyReport> = Vec::with_capacity(tiers.len());
        for c in &self.clients {
            let mut r = PolicyReport::default();
            for l in c.outer.iter().chain(&c.inner) {
                l.report(&mut r);
            }
            policies.push(r);
        }
        let mut tiers = tiers;
        for (t, p) in tiers.iter_mut().zip(policies) {
            t.policies = p;
        }
        // The run's bins: the levels and the calls of `[service]`, the answers of the first
        // tier (the same tier without `[[tiers]]`).
        let mut bins = tiers[last].bins.clone();
        if last > 0 {
            let first = &tiers[0].bins;
            if bins.len() < first.len() {
                bins.resize(first.len(), Bin::default());
            }
            for (i, b) in bins.iter_mut().enumerate() {
                let f = first.get(i).copied().unwrap_or_default();
                b.succeeded = f.succeeded;
                b.failed = f.failed;
                b.rejected = f.rejected;
                b.fallback = f.fallback;
                b.shed = f.shed;
            }
        }
        let entry = &tiers[0];
        RunOutput {
            requests: self.next_req,
            counts: entry.counts,
            per_endpoint: self.per_endpoint,
            rejected_healthy: entry.rejected_healthy,
            rejected_on_retry: entry.rejected_on_retry,
            stale_view_calls: 0,
            rejected_would_succeed: (last == 0 && self.hosts.is_none() && !self.m.occ)
                .then_some(entry.rejected_would_succeed),
            dependency_calls: self.dependency_calls,
            pool_peak: tiers[last].pool_peak,
            queue_peak: tiers[last].queue_peak,
            bins,
            samples: self.samples,
            transitions: Vec::new(),
            scope_transitions: Vec::new(),
            breakers: 0,
            hosts: self.hosts.map(|p| p.finish(self.now)),
            tiers,
            last_answer: self.last_answer,
        }
    }
}

fn nanos_of(d: Duration) -> u64 {
    nanos(d)
}

fn put_permit(v: &mut Vec<Option<ShedPermit>>, slot: u32, p: ShedPermit) {
    let i = slot as usize;
    if v.len() <= i {
        v.resize_with(i + 1, || None);
    }
    v[i] = Some(p);
}
