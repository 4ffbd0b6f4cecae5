//! A tier's client on virtual time: the real `tripline-policies` objects, composed in the
//! pipeline's order.
//!
//! From the outside in, as `tripline_policies::pipeline::Pipeline` composes them:
//!
//! ```text
//! retry → breaker → partial → gate → bulkhead → shed → limiter → throttle → timeout → chaos → the call
//! ```
//!
//! or, with `retry_inside_breaker`, `breaker → retry → partial → gate → ...`.
//! The retry is the request's [`RetryState`](tripline_policies::retry::RetryState) (the real
//! retry loop, told each attempt's result, its delays waited by the engine on virtual time);
//! the timeout is an event of the engine; every other policy is a `Layer`: it admits an
//! attempt (or refuses it, or makes it wait), and settles it when the attempt ends or is
//! refused further in. The layers hold the policies' own handles (a breaker's permit, a gate's
//! guard, a bulkhead's permit or waiter, a throttle's ticket) per request slot, and call
//! exactly what the pipeline calls:
//!
//! | layer | admit | settle |
//! |---|---|---|
//! | breaker | `try_acquire` (a shared store's view first, with `view_ttl`) | `record(outcome)`; a refusal further in is `Ignored` |
//! | gate + bulkhead | `Bulkhead::enter`, then `Gate::try_request`, or `try_pending` while queued and `activate` once served | the slots are dropped, and the bulkhead's next waiter served |
//! | throttle | `try_acquire` | `record(outcome)`; a refusal further in is `not_sent` |
//!
//! and the partial breaker (after the breaker), the shedder and the adaptive limiter (after
//! the bulkhead), in the `adaptive` submodule (their sections: [`crate::adaptive`]). The
//! fault injector plays the tier below, inside the timeout: it is the engine's, at the moment
//! an attempt is sent ([`Chaos::decide`](tripline_policies::chaos::Chaos::decide)); and a
//! shedder at a tier's workers is the engine's too, at the moment a request takes a worker.
//!
//! The gate also gives each retry its retry slot (`try_retry`), held through the backoff and
//! the retry's attempt. Every policy reads the run's `ManualClock`, set by the engine to each
//! event's time.
//!
//! A new policy is one more `Layer`: its section in [`crate::protection`], a field of the
//! resolved client (`ClientSpec`), its objects in `TierPolicies`, and its place in
//! `TierPolicies::layers`.

mod adaptive;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use serde::Serialize;
use tripline::registry::{Blame, DirectedPermit, Key, Registry, RegistryConfig, ServerDirected};
use tripline::{
    BreakerConfig, CircuitBreaker, Classification, EventKind, ManualClock, Outcome, Permit, State,
};
use tripline_policies::bulkhead::{Bulkhead, BulkheadPermit, BulkheadWaiter, Entry};
use tripline_policies::chaos::Chaos;
use tripline_policies::gate::{Gate, GateGuard};
use tripline_policies::limiter::Limiter;
use tripline_policies::partial::PartialBreaker;
use tripline_policies::retry::RetryPolicy;
use tripline_policies::shed::{Priority, Shedder};
use tripline_policies::throttle::{Throttle, ThrottleTicket};

use crate::adaptive::ShedAt;
pub use adaptive::{ChaosReport, LimiterReport, PartialReport, ShedReport};
use adaptive::{PartialLayer, SlotLayer};

use crate::dist::nanos;
use crate::engine::{Tr, mix};
use crate::protection::ClientSpec;
use crate::scenario::{Scope, Sharing};

/// The attempt a layer is asked about.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cx {
    pub(crate) slot: u32,
    pub(crate) replica: u32,
    pub(crate) shard: u32,
    pub(crate) now: u64,
    /// The request's priority (its endpoint's).
    pub(crate) priority: Priority,
}

/// The policy that refused a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Policy {
    Breaker = 0,
    Gate = 1,
    Bulkhead = 2,
    Throttle = 3,
    Shed = 4,
    Limiter = 5,
    Partial = 6,
}

/// How many kinds of [`Policy`] there are.
pub(crate) const POLICIES: usize = 7;

/// A layer's answer to an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// On to the next layer.
    Go,
    /// Refused, at once.
    Refused(Policy),
    /// Waits, at most until this time; the layer reports in `woken` when its turn comes.
    Wait(u64),
}

/// A waiting attempt whose wait ended: its turn came (`None`), or a policy refused it after
/// all (a gate's request limit, once the bulkhead served it).
pub(crate) type Woken = (u32, Option<Policy>);

/// One policy of a client, over every request slot. See the [module docs](self).
pub(crate) trait Layer {
    /// Admits, refuses or parks the attempt of `cx.slot`. A slot freed on the way (a
    /// bulkhead slot given back because the gate refused) may serve waiters: they are pushed
    /// on `woken`.
    fn admit(&mut self, cx: &Cx, woken: &mut Vec<Woken>) -> Admit;
    /// The attempt this layer admitted ended with `outcome`, or did not go (`None`: refused
    /// further in).
    fn settle(&mut self, cx: &Cx, outcome: Option<Outcome>, woken: &mut Vec<Woken>);
    /// The attempt waiting in this layer ran out of time: it gives up its place. Returns the
    /// policy that refuses it.
    fn expire(&mut self, cx: &Cx, woken: &mut Vec<Woken>) -> Policy {
        let _ = (cx, woken);
        Policy::Bulkhead
    }
    /// A retry of `cx.slot` is about to wait its backoff: takes its retry slot, if this
    /// layer limits retries. `false` refuses the retry.
    fn take_retry_slot(&mut self, cx: &Cx) -> bool {
        let _ = cx;
        true
    }
    /// The retry's attempt is over: gives its retry slot back.
    fn release_retry_slot(&mut self, slot: u32) {
        let _ = slot;
    }
    /// Adds this layer's counters to the report.
    fn report(&self, r: &mut PolicyReport);
}

/// A client's layers, in order.
pub(crate) type Layers<'p> = Vec<Box<dyn Layer + 'p>>;

fn put<T>(v: &mut Vec<Option<T>>, slot: u32, x: T) {
    let i = slot as usize;
    if v.len() <= i {
        v.resize_with(i + 1, || None);
    }
    v[i] = Some(x);
}

fn take<T>(v: &mut [Option<T>], slot: u32) -> Option<T> {
    v.get_mut(slot as usize).and_then(Option::take)
}

/// The counters of one tier's policies in one run, summed over its replicas: the policies'
/// own figures (`RetryPolicy::stats`, `Gate::overflows`, `Bulkhead::rejections`,
/// `Throttle::rejected`) and the breakers' rejections.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PolicyReport {
    /// The retry policy, when requests may make more than one attempt.
    pub retry: Option<RetryReport>,
    /// The breakers.
    pub breaker: Option<BreakerReport>,
    /// The concurrency gates.
    pub gate: Option<GateReport>,
    /// The bulkheads.
    pub bulkhead: Option<BulkheadReport>,
    /// The adaptive throttles.
    pub throttle: Option<ThrottleReport>,
    /// The partial breakers.
    pub partial: Option<PartialReport>,
    /// The shedders (in the client, or at the tier's workers).
    pub shed: Option<ShedReport>,
    /// The adaptive limiters.
    pub limiter: Option<LimiterReport>,
    /// The fault injectors.
    pub chaos: Option<ChaosReport>,
}

/// What the retry policies did ([`RetryStats`](tripline_policies::retry::RetryStats)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RetryReport {
    /// The budgets, by kind (`tps`, `token-bucket`, `error-rate`); empty without one.
    pub budget: Vec<&'static str>,
    /// Requests started.
    pub requests: u64,
    /// Retries made (granted and sent on).
    pub retries: u64,
    /// Retries the budget refused.
    pub budget_refused: u64,
    /// Retries the gate's retry limit refused.
    pub gate_refused: u64,
    /// Requests that still failed after their last attempt.
    pub attempts_exhausted: u64,
    /// Attempts refused by a local policy (never retried).
    pub local_refusals: u64,
}

/// What the breakers did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BreakerReport {
    /// Breakers held.
    pub count: u32,
    /// Attempts they refused.
    pub rejected: u64,
    /// Of those, refused while Closed and ramping traffic back up after recovery
    /// (`RejectReason::RampingUp`).
    pub ramping_up: u64,
    /// Attempts admitted from a shared store's outdated view.
    pub stale_view_calls: u64,
}

/// What the gates did: Envoy's overflow counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GateReport {
    /// Refused by `max_requests`.
    pub upstream_rq_overflow: u64,
    /// Refused by `max_pending`.
    pub upstream_rq_pending_overflow: u64,
    /// Retries refused by the retry limit.
    pub upstream_rq_retry_overflow: u64,
}

/// What the bulkheads did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BulkheadReport {
    /// Attempts that waited in the queue and were then served.
    pub waited: u64,
    /// Refused at once: every slot busy and the queue full.
    pub queue_full: u64,
    /// Refused after waiting `max_wait`.
    pub timed_out: u64,
}

/// What the throttles did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ThrottleReport {
    /// Attempts refused locally.
    pub rejected: u64,
}

/// One tier's policies in one run: the real objects, per replica (or shared), on the run's
/// clock.
pub(crate) struct TierPolicies {
    pub(crate) spec: ClientSpec,
    pub(crate) breakers: Vec<CircuitBreaker<ManualClock>>,
    /// With `scope = "server-directed"`: per replica (or shared), the dependency whose
    /// registry holds the dependency-wide breaker (`breakers`) and the blamed shards' ones.
    directed: Vec<ServerDirected<ManualClock>>,
    /// The shard-scoped faults, `(from, until, shards)`: a failure of a shard during one is
    /// blamed on the shard by the server.
    pub(crate) blamed: Vec<(u64, u64, Vec<u32>)>,
    pub(crate) retries: Vec<RetryPolicy>,
    gates: Vec<Gate>,
    bulkheads: Vec<Bulkhead>,
    throttles: Vec<Throttle>,
    partials: Vec<PartialBreaker>,
    shedders: Vec<Shedder>,
    /// Shedders at the tier's own workers, per replica (`[protection.shed] at = "workers"`).
    pub(crate) pool_shedders: Vec<Shedder>,
    limiters: Vec<Limiter>,
    /// Fault injectors, per replica.
    pub(crate) chaos: Vec<Chaos>,
    /// Breaker transitions, as they happen.
    pub(crate) log: Arc<Mutex<Vec<Tr>>>,
    /// With `scope = "server-directed"`: the blamed shards' breakers' transitions, as they
    /// happen (`breaker` = replica × shards + shard; the replica 0 when shared).
    pub(crate) scope_log: Arc<Mutex<Vec<Tr>>>,
    replicas: u32,
    shards: u32,
}

impl TierPolicies {
    /// Builds tier `tier`'s policies (`service`: the tier that calls the dependency):
    /// `replicas` replicas, `shards` shard keys, the run's `clock` and `seed`.
    #[expect(
        clippy::too_many_arguments,
        reason = "the tier's place and size, and the run's"
    )]
    pub(crate) fn new(
        spec: ClientSpec,
        tier: usize,
        service: bool,
        replicas: u32,
        shards: u32,
        name: &str,
        clock: &ManualClock,
        seed: u64,
    ) -> Self {
        let tseed = mix(seed, 0x7153_0000 + tier as u64);
        let log: Arc<Mutex<Vec<Tr>>> = Arc::new(Mutex::new(Vec::new()));
        let scope_log: Arc<Mutex<Vec<Tr>>> = Arc::new(Mutex::new(Vec::new()));
        let mut directed = Vec::new();
        let breakers = match &spec.breaker {
            None => Vec::new(),
            Some(b) => {
                let per = if b.scope == Scope::Shard { shards } else { 1 };
                let n = match b.sharing {
                    Sharing::Local => u64::from(replicas) * u64::from(per),
                    Sharing::Shared => u64::from(per),
                };
                // The service's breakers keep the seeds they always had.
                let bseed = if service { seed } else { tseed };
                (0..n)
                    .map(|i| {
                        let config = seeded(&b.config, bseed, i);
                        let cb = if b.scope == Scope::ServerDirected {
                            let d = server_directed(name, config, shards, clock);
                            log_scopes(&d, i as u32 * shards, shards, &scope_log);
                            let cb = d.dependency_breaker().clone();
                            directed.push(d);
                            cb
                        } else {
                            CircuitBreaker::with_clock(name.to_string(), config, clock.clone())
                        };
                        let log = log.clone();
                        let idx = i as u32;
                        cb.subscribe(move |e: &tripline::Event| {
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
                        cb
                    })
                    .collect()
            }
        };
        let retries = if spec.attempts > 1 {
            (0..replicas)
                .map(|r| {
                    let b = spec.backoff;
                    let builder = RetryPolicy::builder()
                        .max_attempts(spec.attempts)
                        .base_delay(b.base())
                        .max_delay(b.cap())
                        .jitter(b.jitter())
                        .retry_timeouts(spec.retry_timeouts)
                        .seed(mix(tseed, 0x3E7F_0000 + u64::from(r)));
                    let builder = match crate::protection::combined(&spec.budgets, clock) {
                        Some(budget) => builder.budget(Arc::new(budget)),
                        None => builder,
                    };
                    builder.build().unwrap_or_default()
                })
                .collect()
        } else {
            Vec::new()
        };
        let gates = spec
            .gate
            .map_or_else(Vec::new, |g| (0..replicas).map(|_| Gate::new(g)).collect());
        let bulkheads = spec.bulkhead.map_or_else(Vec::new, |b| {
            (0..replicas).map(|_| Bulkhead::new(b)).collect()
        });
        let throttles = spec.throttle.map_or_else(Vec::new, |t| {
            (0..replicas)
                .map(|r| {
                    Throttle::with_clock_and_rng(
                        t,
                        clock.clone(),
                        Pcg64Mcg::seed_from_u64(mix(tseed, 0x7A07_0000 + u64::from(r))),
                    )
                })
                .collect()
        });
        let partials = spec.partial.map_or_else(Vec::new, |c| {
            (0..replicas)
                .map(|r| {
                    PartialBreaker::with_clock_and_rng(
                        c,
                        clock.clone(),
                        Pcg64Mcg::seed_from_u64(mix(tseed, 0x9A47_0000 + u64::from(r))),
                    )
                })
                .collect()
        });
        let (shedders, pool_shedders) = match spec.shed {
            None => (Vec::new(), Vec::new()),
            Some(s) => {
                let all = (0..replicas).map(|_| Shedder::new(s.config)).collect();
                match s.at {
                    ShedAt::Client => (all, Vec::new()),
                    ShedAt::Workers => (Vec::new(), all),
                }
            }
        };
        let limiters = spec.limiter.map_or_else(Vec::new, |c| {
            (0..replicas)
                .map(|r| {
                    let c =
                        crate::adaptive::seeded_limiter(&c, mix(tseed, 0x1171_0000 + u64::from(r)));
                    Limiter::with_clock(c, clock.clone())
                })
                .collect()
        });
        let chaos = spec.chaos.as_ref().map_or_else(Vec::new, |c| {
            (0..replicas)
                .map(|r| {
                    Chaos::with_rng(
                        c.config.clone(),
                        Pcg64Mcg::seed_from_u64(mix(tseed, 0xC4A0_0000 + u64::from(r))),
                    )
                })
                .collect()
        });
        Self {
            spec,
            breakers,
            directed,
            blamed: Vec::new(),
            retries,
            gates,
            bulkheads,
            throttles,
            partials,
            shedders,
            pool_shedders,
            limiters,
            chaos,
            log,
            scope_log,
            replicas,
            shards,
        }
    }

    /// The layers, in the pipeline's order: `(outer, inner)`. The outer ones admit a request
    /// once, around its retry loop (the breaker, with `retry_inside_breaker`); the inner ones
    /// admit every attempt.
    pub(crate) fn layers(&self) -> (Layers<'_>, Layers<'_>) {
        let mut outer: Layers<'_> = Vec::new();
        let mut inner: Layers<'_> = Vec::new();
        if let Some(b) = &self.spec.breaker {
            let layer: Box<dyn Layer + '_> = if b.scope == Scope::ServerDirected {
                Box::new(DirectedLayer {
                    directed: &self.directed,
                    blamed: &self.blamed,
                    names: (0..self.shards).map(|s| s.to_string()).collect(),
                    permits: Vec::new(),
                    shared: b.sharing == Sharing::Shared,
                    rejected: 0,
                    ramping_up: 0,
                })
            } else {
                Box::new(BreakerLayer {
                    breakers: &self.breakers,
                    permits: Vec::new(),
                    keys: if b.scope == Scope::Shard {
                        self.shards
                    } else {
                        1
                    },
                    shared: b.sharing == Sharing::Shared,
                    replicas: self.replicas,
                    view_ttl: nanos(b.view_ttl),
                    views: if b.sharing == Sharing::Shared && !b.view_ttl.is_zero() {
                        vec![View::default(); self.replicas as usize * self.breakers.len()]
                    } else {
                        Vec::new()
                    },
                    stale_view_calls: 0,
                    rejected: 0,
                    ramping_up: 0,
                })
            };
            if self.spec.retry_inside_breaker {
                outer.push(layer);
            } else {
                inner.push(layer);
            }
        }
        if !self.partials.is_empty() {
            inner.push(Box::new(PartialLayer {
                breakers: &self.partials,
                permits: Vec::new(),
                highest: 0.0,
            }));
        }
        if !self.gates.is_empty() || !self.bulkheads.is_empty() {
            inner.push(Box::new(AdmissionLayer {
                gates: &self.gates,
                bulkheads: &self.bulkheads,
                held: Vec::new(),
                waiting: Vec::new(),
                retry_slots: Vec::new(),
                queues: vec![VecDeque::new(); self.bulkheads.len()],
                max_wait: self.spec.bulkhead.map_or(0, |b| nanos(b.max_wait())),
                waited: 0,
            }));
        }
        if !self.shedders.is_empty() {
            inner.push(Box::new(SlotLayer::new(&self.shedders)));
        }
        if !self.limiters.is_empty() {
            inner.push(Box::new(SlotLayer::new(&self.limiters)));
        }
        if !self.throttles.is_empty() {
            inner.push(Box::new(ThrottleLayer {
                throttles: &self.throttles,
                tickets: Vec::new(),
            }));
        }
        (outer, inner)
    }

    /// The counters the policies kept themselves.
    pub(crate) fn report(&self, r: &mut PolicyReport) {
        if !self.retries.is_empty() {
            let mut x = RetryReport {
                budget: self.spec.budgets.iter().map(|b| b.kind()).collect(),
                ..RetryReport::default()
            };
            for p in &self.retries {
                let s = p.stats();
                x.requests += s.requests;
                x.retries += s.retries;
                x.budget_refused += s.budget_exhausted;
                x.gate_refused += s.gate_overflows;
                x.attempts_exhausted += s.attempts_exhausted;
                x.local_refusals += s.local_rejections;
            }
            r.retry = Some(x);
        }
        if !self.gates.is_empty() {
            let mut g = GateReport::default();
            for gate in &self.gates {
                let o = gate.overflows();
                g.upstream_rq_overflow += o.upstream_rq_overflow;
                g.upstream_rq_pending_overflow += o.upstream_rq_pending_overflow;
                g.upstream_rq_retry_overflow += o.upstream_rq_retry_overflow;
            }
            r.gate = Some(g);
        }
        if !self.bulkheads.is_empty() {
            let mut b = r.bulkhead.take().unwrap_or_default();
            for bh in &self.bulkheads {
                let x = bh.rejections();
                b.queue_full += x.queue_full;
                b.timed_out += x.timed_out;
            }
            r.bulkhead = Some(b);
        }
        if !self.throttles.is_empty() {
            r.throttle = Some(ThrottleReport {
                rejected: self.throttles.iter().map(Throttle::rejected).sum(),
            });
        }
        for (shedders, at) in [(&self.shedders, "client"), (&self.pool_shedders, "workers")] {
            if !shedders.is_empty() {
                let mut x = ShedReport {
                    at,
                    ..ShedReport::default()
                };
                for s in shedders {
                    x.add(s.stats());
                }
                r.shed = Some(x);
            }
        }
        if let Some(first) = self.limiters.first() {
            let x = r.limiter.get_or_insert_with(LimiterReport::default);
            let a = first.config().algorithm();
            x.algorithm = a.name();
            x.initial_limit = a.initial_limit();
            for l in &self.limiters {
                let s = l.snapshot();
                x.final_limit += s.limit;
                x.successes += s.successes;
                x.drops += s.drops;
                x.slots.add(s.slots);
            }
            x.slots.at = "client";
        }
        if !self.chaos.is_empty() {
            let mut x = ChaosReport::default();
            for c in &self.chaos {
                let s = c.stats();
                x.calls += s.calls;
                x.latency += s.latency;
                x.errors += s.errors;
                x.hangs += s.hangs;
            }
            r.chaos = Some(x);
        }
    }
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

pub(crate) fn reason_str(kind: &EventKind) -> &'static str {
    use tripline::Reason as R;
    match kind {
        EventKind::Transition { reason, .. } => match reason {
            R::FailureRate => "failure-rate",
            R::SlowCallRate => "slow-call-rate",
            R::ConsecutiveFailures { .. } => "consecutive-failures",
            R::FailureCount { .. } => "failure-count",
            R::OpenElapsed => "open-elapsed",
            R::ProbesSucceeded { .. } => "probes-succeeded",
            R::ProbesFailed { .. } => "probes-failed",
            R::HalfOpenTimeout => "half-open-timeout",
            R::Operator => "operator",
            R::IntervalElapsed => "interval-elapsed",
            _ => "other",
        },
        _ => "other",
    }
}

/// What a replica last heard from a shared store about one breaker.
#[derive(Clone, Copy, Default)]
struct View {
    valid: bool,
    closed: bool,
    generation: u64,
    at: u64,
}

/// The breaker: one per replica (local) or one for all (shared), per shard with `scope =
/// "shard"`. With a shared breaker and a `view_ttl`, a replica decides from the state the
/// store last told it: while that view says Closed it admits calls without asking, and their
/// results are stale.
struct BreakerLayer<'p> {
    breakers: &'p [CircuitBreaker<ManualClock>],
    permits: Vec<Option<Permit<'p, ManualClock>>>,
    keys: u32,
    shared: bool,
    replicas: u32,
    view_ttl: u64,
    views: Vec<View>,
    stale_view_calls: u64,
    rejected: u64,
    ramping_up: u64,
}

impl BreakerLayer<'_> {
    fn index(&self, cx: &Cx) -> usize {
        let key = if self.keys > 1 { cx.shard } else { 0 };
        let rep = if self.shared { 0 } else { cx.replica };
        (rep * self.keys + key) as usize
    }

    fn view_index(&self, idx: usize, replica: u32) -> usize {
        idx * self.replicas as usize + replica as usize
    }

    /// Whether the replica admits from a view that still says Closed although the shared
    /// breaker has moved on.
    fn stale_view_admits(&self, idx: usize, cx: &Cx) -> bool {
        if self.view_ttl == 0 {
            return false;
        }
        let v = self.views[self.view_index(idx, cx.replica)];
        v.valid
            && v.closed
            && cx.now.saturating_sub(v.at) < self.view_ttl
            && self.breakers[idx].generation() != v.generation
    }

    /// The replica talked to the store: its view is the shared state now.
    fn see(&mut self, idx: usize, cx: &Cx) {
        if self.view_ttl == 0 {
            return;
        }
        let b = &self.breakers[idx];
        let i = self.view_index(idx, cx.replica);
        self.views[i] = View {
            valid: true,
            closed: b.state() == State::Closed,
            generation: b.generation(),
            at: cx.now,
        };
    }
}

impl<'p> Layer for BreakerLayer<'p> {
    fn admit(&mut self, cx: &Cx, _: &mut Vec<Woken>) -> Admit {
        let idx = self.index(cx);
        if self.stale_view_admits(idx, cx) {
            // The view still says Closed: the store is not asked, the call goes out, and its
            // result will be discarded as stale.
            self.stale_view_calls += 1;
            return Admit::Go;
        }
        let breakers: &'p [CircuitBreaker<ManualClock>] = self.breakers;
        let r = breakers[idx].try_acquire();
        self.see(idx, cx);
        match r {
            Ok(p) => {
                put(&mut self.permits, cx.slot, p);
                Admit::Go
            }
            Err(e) => refused(&e, &mut self.rejected, &mut self.ramping_up),
        }
    }

    fn settle(&mut self, cx: &Cx, outcome: Option<Outcome>, _: &mut Vec<Woken>) {
        if let Some(p) = take(&mut self.permits, cx.slot) {
            let _ = p.record(outcome.unwrap_or(Outcome::Ignored));
        }
        if outcome.is_some() && self.view_ttl > 0 {
            // The outcome's round trip brings the store's state back.
            let idx = self.index(cx);
            self.see(idx, cx);
        }
    }

    fn report(&self, r: &mut PolicyReport) {
        r.breaker = Some(BreakerReport {
            count: self.breakers.len() as u32,
            rejected: self.rejected,
            ramping_up: self.ramping_up,
            stale_view_calls: self.stale_view_calls,
        });
    }
}

/// A breaker's refusal, counted in `rejected` (and in `ramping_up` while it ramps up).
fn refused(e: &tripline::Rejected, rejected: &mut u64, ramping_up: &mut u64) -> Admit {
    *rejected += 1;
    if e.reason() == tripline::RejectReason::RampingUp {
        *ramping_up += 1;
    }
    Admit::Refused(Policy::Breaker)
}

/// A server-directed dependency of `name`: its registry holds the dependency-wide breaker
/// and at most one breaker per shard, all with `config`.
fn server_directed(
    name: &str,
    config: BreakerConfig,
    shards: u32,
    clock: &ManualClock,
) -> ServerDirected<ManualClock> {
    let registry = RegistryConfig::default()
        .with_config("default", config)
        .with_max_breakers(1 + shards as usize);
    // Checked when the scenario was read: a dependency name is a key, the bound is valid.
    let registry = Arc::new(
        Registry::with_clock(registry, clock.clone())
            .unwrap_or_else(|e| panic!("validated registry: {e}")),
    );
    let key = Key::new(name).unwrap_or_else(|e| panic!("validated dependency name: {e}"));
    ServerDirected::new(registry, key).unwrap_or_else(|e| panic!("an empty registry: {e}"))
}

/// Logs the transitions of `d`'s shard breakers (made by the registry when the server blames
/// a shard) into `log`, shard `s` as breaker `base + s`.
fn log_scopes(d: &ServerDirected<ManualClock>, base: u32, shards: u32, log: &Arc<Mutex<Vec<Tr>>>) {
    let log = log.clone();
    d.registry().subscribe(move |e: &tripline::Event| {
        let EventKind::Transition { from, to, .. } = &e.kind else {
            return;
        };
        // The shard breakers' names are `dependency/shard=<index>`; the dependency-wide
        // breaker (logged with the others) has no scope.
        let shard = e
            .breaker
            .as_str()
            .parse::<Key>()
            .ok()
            .and_then(|k| k.scope().and_then(|(_, v)| v.parse::<u32>().ok()))
            .filter(|&s| s < shards);
        if let Some(s) = shard {
            let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
            l.push(Tr {
                at: nanos(e.at),
                breaker: base + s,
                from: *from,
                to: *to,
                reason: reason_str(&e.kind),
            });
        }
    });
}

/// The server-directed breakers (`scope = "server-directed"`): a request is admitted by the
/// dependency-wide breaker and by its shard's, if the server has blamed the shard before; a
/// failure during a shard-scoped fault is blamed on the shard by the server and recorded on
/// the shard's breaker instead. The real `tripline::registry::ServerDirected`.
struct DirectedLayer<'p> {
    directed: &'p [ServerDirected<ManualClock>],
    blamed: &'p [(u64, u64, Vec<u32>)],
    /// The shards' names, made once.
    names: Vec<String>,
    permits: Vec<Option<DirectedPermit<ManualClock>>>,
    shared: bool,
    rejected: u64,
    ramping_up: u64,
}

impl DirectedLayer<'_> {
    fn directed(&self, cx: &Cx) -> &ServerDirected<ManualClock> {
        &self.directed[if self.shared { 0 } else { cx.replica as usize }]
    }

    fn name(&self, cx: &Cx) -> Option<&str> {
        self.names.get(cx.shard as usize).map(String::as_str)
    }
}

impl Layer for DirectedLayer<'_> {
    fn admit(&mut self, cx: &Cx, _: &mut Vec<Woken>) -> Admit {
        match self.directed(cx).admit(self.name(cx)) {
            Ok(p) => {
                put(&mut self.permits, cx.slot, p);
                Admit::Go
            }
            Err(e) => refused(&e, &mut self.rejected, &mut self.ramping_up),
        }
    }

    fn settle(&mut self, cx: &Cx, outcome: Option<Outcome>, _: &mut Vec<Woken>) {
        let Some(p) = take(&mut self.permits, cx.slot) else {
            return;
        };
        let outcome = outcome.unwrap_or(Outcome::Ignored);
        let blamed = outcome == Outcome::Failure
            && self.blamed.iter().any(|(from, until, shards)| {
                (*from..*until).contains(&cx.now) && shards.binary_search(&cx.shard).is_ok()
            });
        let blame = if blamed {
            self.name(cx).map(Blame::shard)
        } else {
            None
        };
        let _ = p.record(Classification::new(outcome), blame.as_ref());
    }

    fn report(&self, r: &mut PolicyReport) {
        r.breaker = Some(BreakerReport {
            count: self
                .directed
                .iter()
                .map(|d| d.registry().len() as u32)
                .sum(),
            rejected: self.rejected,
            ramping_up: self.ramping_up,
            stale_view_calls: 0,
        });
    }
}

/// The gate and the bulkhead, admitted together as the pipeline admits them: a request slot
/// at once when the bulkhead has a free slot; a pending slot while waiting in its queue,
/// turned into a request slot once served.
struct AdmissionLayer<'p> {
    gates: &'p [Gate],
    bulkheads: &'p [Bulkhead],
    /// Per slot: the bulkhead's permit and the gate's request slot of an admitted attempt.
    held: Vec<Option<(Option<BulkheadPermit>, Option<GateGuard>)>>,
    /// Per slot: a waiting attempt's place in the bulkhead's queue and its pending slot.
    waiting: Vec<Option<(BulkheadWaiter, Option<GateGuard>)>>,
    /// Per slot: a retry's slot in the gate.
    retry_slots: Vec<Option<GateGuard>>,
    /// Per bulkhead: the slots waiting in it, in the order they queued.
    queues: Vec<VecDeque<u32>>,
    max_wait: u64,
    waited: u64,
}

impl AdmissionLayer<'_> {
    /// Serves the bulkhead's waiters whose turn came (the bulkhead hands a freed slot to the
    /// first in its queue).
    fn serve(&mut self, replica: u32, woken: &mut Vec<Woken>) {
        let q = replica as usize;
        while let Some(&slot) = self.queues.get(q).and_then(VecDeque::front) {
            let Some((waiter, _)) = self.waiting.get_mut(slot as usize).and_then(Option::as_mut)
            else {
                self.queues[q].pop_front();
                continue;
            };
            let Some(permit) = waiter.try_slot() else {
                return;
            };
            self.queues[q].pop_front();
            let Some((_, pending)) = take(&mut self.waiting, slot) else {
                continue;
            };
            match pending.map(GateGuard::activate).transpose() {
                Ok(guard) => {
                    self.waited += 1;
                    put(&mut self.held, slot, (Some(permit), guard));
                    woken.push((slot, None));
                }
                Err(_) => {
                    // Served, but the gate's request limit refuses it: the slot goes on.
                    drop(permit);
                    woken.push((slot, Some(Policy::Gate)));
                }
            }
        }
    }
}

impl Layer for AdmissionLayer<'_> {
    fn admit(&mut self, cx: &Cx, woken: &mut Vec<Woken>) -> Admit {
        let r = cx.replica as usize;
        let gate = self.gates.get(r);
        let Some(bulkhead) = self.bulkheads.get(r) else {
            return match gate.map(Gate::try_request).transpose() {
                Ok(guard) => {
                    put(&mut self.held, cx.slot, (None, guard));
                    Admit::Go
                }
                Err(_) => Admit::Refused(Policy::Gate),
            };
        };
        match bulkhead.enter() {
            Ok(Entry::Admitted(permit)) => match gate.map(Gate::try_request).transpose() {
                Ok(guard) => {
                    put(&mut self.held, cx.slot, (Some(permit), guard));
                    Admit::Go
                }
                Err(_) => {
                    drop(permit);
                    self.serve(cx.replica, woken);
                    Admit::Refused(Policy::Gate)
                }
            },
            Ok(Entry::Queued(waiter)) => match gate.map(Gate::try_pending).transpose() {
                Ok(pending) => {
                    put(&mut self.waiting, cx.slot, (waiter, pending));
                    self.queues[r].push_back(cx.slot);
                    Admit::Wait(cx.now.saturating_add(self.max_wait))
                }
                Err(_) => Admit::Refused(Policy::Gate),
            },
            Err(_) => Admit::Refused(Policy::Bulkhead),
        }
    }

    fn settle(&mut self, cx: &Cx, _: Option<Outcome>, woken: &mut Vec<Woken>) {
        if let Some((permit, guard)) = take(&mut self.held, cx.slot) {
            drop(guard);
            if permit.is_some() {
                drop(permit);
                self.serve(cx.replica, woken);
            }
        }
    }

    fn expire(&mut self, cx: &Cx, woken: &mut Vec<Woken>) -> Policy {
        if let Some((waiter, pending)) = take(&mut self.waiting, cx.slot) {
            let q = &mut self.queues[cx.replica as usize];
            if let Some(i) = q.iter().position(|&s| s == cx.slot) {
                q.remove(i);
            }
            let _ = waiter.time_out();
            drop(pending);
            // A slot handed to it, uncollected, went on to the next waiter.
            self.serve(cx.replica, woken);
        }
        Policy::Bulkhead
    }

    fn take_retry_slot(&mut self, cx: &Cx) -> bool {
        let Some(gate) = self.gates.get(cx.replica as usize) else {
            return true;
        };
        match gate.try_retry() {
            Ok(g) => {
                put(&mut self.retry_slots, cx.slot, g);
                true
            }
            Err(_) => false,
        }
    }

    fn release_retry_slot(&mut self, slot: u32) {
        drop(take(&mut self.retry_slots, slot));
    }

    fn report(&self, r: &mut PolicyReport) {
        if !self.bulkheads.is_empty() {
            let b = r.bulkhead.get_or_insert_with(BulkheadReport::default);
            b.waited += self.waited;
        }
    }
}

/// The adaptive throttle, next to the wire: every attempt that reaches it is a request, its
/// answer an accept unless it failed.
struct ThrottleLayer<'p> {
    throttles: &'p [Throttle],
    tickets: Vec<Option<ThrottleTicket>>,
}

impl Layer for ThrottleLayer<'_> {
    fn admit(&mut self, cx: &Cx, _: &mut Vec<Woken>) -> Admit {
        match self.throttles[cx.replica as usize].try_acquire() {
            Ok(t) => {
                put(&mut self.tickets, cx.slot, t);
                Admit::Go
            }
            Err(_) => Admit::Refused(Policy::Throttle),
        }
    }

    fn settle(&mut self, cx: &Cx, outcome: Option<Outcome>, _: &mut Vec<Woken>) {
        if let Some(t) = take(&mut self.tickets, cx.slot) {
            match outcome {
                Some(o) => t.record(o),
                None => t.not_sent(),
            }
        }
    }

    fn report(&self, _: &mut PolicyReport) {}
}
