//! An adaptive concurrency limit: a bulkhead whose size follows the dependency's latency.
//!
//! # Why adaptive?
//!
//! A fixed limit is a guess made once. Little's law says the calls in flight are the arrival
//! rate times the latency, so the right limit moves with both: a bulkhead of 25 that fits a
//! 300 ms dependency is far too large once it answers in 10 s (25 calls then queue for
//! seconds inside the dependency), and too small after a deploy that halves its latency.
//! Netflix, having popularised the circuit breaker with Hystrix, moved to limits "that react
//! to measured latency instead of fixed thresholds" (Netflix's "Performance Under Load";
//! the concurrency-limits library). The limiter measures each call's round-trip time and lets
//! an algorithm move the limit: up while latency stays near its no-load value, down as soon
//! as a queue builds up at the dependency. Calls over the limit are refused at once
//! ([`LimitExceeded`]), or wait in a bounded queue; either way latency stays near the
//! dependency's own instead of growing with a queue nobody sees.
//!
//! # The algorithms
//!
//! Three of concurrency-limits' algorithms, as its sources write them and with its defaults
//! (each documented on its configuration), and a fixed limit:
//!
//! * [`VegasConfig`] (the default): TCP Vegas. The lowest RTT seen is the no-load RTT; the
//!   queue at the dependency is estimated as `limit × (1 − rtt_noload / rtt)`; no queue grows
//!   the limit quickly, a short queue slowly, a long one shrinks it.
//! * [`Gradient2Config`]: the gradient between a long-term average RTT and the current one;
//!   averages, not minimums, so bursty RPCs do not push the limit towards an unrealistically
//!   low base.
//! * [`AimdConfig`]: loss-based. One more per good sample, a tenth less per drop.
//! * [`FixedLimit`]: a bulkhead with priorities and a priority queue.
//!
//! Every algorithm keeps its limit within `[min_limit, max_limit]`
//! (`tests/limiter_props.rs` checks it over random histories).
//!
//! A sample is one call: [`LimiterPermit::success`] feeds its RTT, [`LimiterPermit::dropped`]
//! (a failure or a timeout: the call was dropped by an overloaded dependency) feeds a drop, and
//! [`LimiterPermit::ignore`] (a 4xx, a refusal further in) or dropping the permit feeds nothing,
//! as concurrency-limits' `onSuccess`, `onDropped` and `onIgnore`. The in-flight count of a
//! sample is the one when the call started, itself included.
//!
//! # Busy, and demand that was refused
//!
//! The algorithms grow the limit only while the limiter is busy (at least half full):
//! otherwise a quiet night would grow it without bound ("app-limited", in concurrency-limits'
//! words). But with priorities and [shares](crate::shed::Shares), a class held back by its
//! share never makes the limiter busy, so once the limit had shrunk, that class could be
//! refused for good even after the dependency recovered. So a sample taken after any call was
//! refused or queued counts as a full limiter: refused demand is demand. This is the
//! limiter's fairness rule (see [`shed`](crate::shed)).
//!
//! # Priorities and the queue
//!
//! Each call carries a [`Priority`]. With [`LimiterConfigBuilder::shares`] the limit is shared
//! out by priority as in [`shed`](crate::shed): sheddable calls are refused first, and a call
//! is never refused while a lower one would be admitted. With `max_waiting > 0`, calls over
//! the limit wait (at most `max_wait`) in a queue served highest priority first; a limit that
//! grows, or a call that ends, hands its slots to the waiters at once.
//!
//! # Time
//!
//! RTTs are read from an injected [`Clock`]: [`ManualClock`](tripline::ManualClock) in tests
//! and in a simulator on virtual time, [`MonotonicClock`] by default. [`Limiter::sample`]
//! feeds a sample measured elsewhere. The queue's wait is bounded on tokio's timer by
//! [`Limiter::acquire`]; a caller that runs its own timers uses [`Limiter::admit`] and the
//! ticket's `time_out`.
//!
//! ```
//! use std::time::Duration;
//! use tripline::ManualClock;
//! use tripline_policies::limiter::{Limiter, LimiterConfig};
//! use tripline_policies::shed::Priority;
//!
//! let clock = ManualClock::new();
//! let limiter = Limiter::with_clock(LimiterConfig::builder().seed(1).build()?, clock.clone());
//! assert_eq!(limiter.limit(), 20); // Vegas's initial limit
//! // Twenty calls at a time answer in 10 ms: no queue at the dependency, the limit grows.
//! for _ in 0..3 {
//!     let permits: Vec<_> = (0..20).map(|_| limiter.try_acquire(Priority::DEFAULT).unwrap()).collect();
//!     clock.advance(Duration::from_millis(10));
//!     permits.into_iter().for_each(|p| p.success());
//! }
//! assert!(limiter.limit() > 20);
//! # Ok::<(), tripline::ConfigError>(())
//! ```
//!
//! # Where it differs from concurrency-limits
//!
//! * Every algorithm has a `min_limit` (Vegas's default is 1, its floor there).
//! * Vegas's `alpha` and `beta` are the factors of `log10(limit)` (3 and 6, its default
//!   functions); concurrency-limits also takes arbitrary functions.
//! * Samples feed the algorithm one by one; concurrency-limits' `WindowedLimit`, which
//!   averages samples over windows first, is not provided.
//! * Refused demand counts as load (above), and the queue is ordered by priority.
//! * A limit or share that shrinks below the calls in flight refuses new calls until enough
//!   of them end; calls already admitted are never cut off.

mod algorithm;
mod config;
pub mod error;
#[cfg(feature = "tower")]
pub mod future;
#[cfg(feature = "tower")]
mod layer;
#[cfg(feature = "metrics")]
mod metrics;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tripline::{Clock, MonotonicClock, Outcome};

pub use algorithm::{
    AimdConfig, AimdConfigBuilder, FixedLimit, Gradient2Config, Gradient2ConfigBuilder,
    LimitAlgorithm, MAX_LIMIT, VegasConfig, VegasConfigBuilder,
};
use algorithm::{Algorithm, Sample};
pub use config::{LimiterConfig, LimiterConfigBuilder};
pub use error::LimitExceeded;
#[cfg(feature = "tower")]
pub use layer::LimiterLayer;
#[cfg(feature = "metrics")]
pub use metrics::LimiterMetrics;

use crate::shed::slots::{Admit, Slot, Slots, Ticket};
use crate::shed::{Priority, Refusal, ShedStats};

struct Inner {
    config: LimiterConfig,
    /// A fixed limit reads no clock and feeds no algorithm.
    fixed: bool,
    slots: Arc<Slots>,
    /// Guards the algorithm's state; the new limit reaches the slots under it (so limits
    /// arrive in the order computed). Never run under it: the clock (read before) and the
    /// waiters' wakers (the slots' grants are sent after it is released).
    algorithm: Mutex<Algorithm>,
    clock: Box<dyn Clock>,
    successes: AtomicU64,
    drops: AtomicU64,
    ignored: AtomicU64,
}

/// An adaptive concurrency limit shared by every call to one dependency. Cloning is cheap;
/// clones share the limit and its slots. See the [module docs](self).
#[derive(Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("algorithm", &self.inner.config.algorithm().name())
            .field("limit", &self.limit())
            .field("in_flight", &self.in_flight())
            .field("waiting", &self.waiting())
            .finish_non_exhaustive()
    }
}

impl Default for Limiter {
    /// A Vegas limiter with concurrency-limits' defaults, on the production clock.
    fn default() -> Self {
        Self::new(LimiterConfig::default())
    }
}

/// What the limiter shows now: its limit, its load and its RTT estimates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimiterSnapshot {
    /// The limit.
    pub limit: u32,
    /// Calls holding a slot.
    pub in_flight: u32,
    /// Calls waiting in the queue.
    pub waiting: u32,
    /// The last sample's RTT (zero before any, and for a fixed limit, which reads no clock).
    pub last_rtt: Duration,
    /// The algorithm's baseline: Vegas's no-load RTT, Gradient2's long-term average (zero for
    /// the others, and before any sample).
    pub baseline_rtt: Duration,
    /// Samples fed as successes.
    pub successes: u64,
    /// Samples fed as drops.
    pub drops: u64,
    /// Permits that fed nothing.
    pub ignored: u64,
    /// What the slots decided: admissions and refusals by reason.
    pub slots: ShedStats,
}

/// What [`Limiter::admit`] decided: a slot now, or a place in the queue.
#[derive(Debug)]
pub enum LimiterAdmission {
    /// A slot, now.
    Now(LimiterPermit),
    /// A place in the queue.
    Queued(LimiterTicket),
}

impl Limiter {
    /// A limiter on the production clock.
    pub fn new(config: LimiterConfig) -> Self {
        Self::with_clock(config, MonotonicClock::new())
    }

    /// A limiter reading RTTs from `clock`.
    pub fn with_clock(config: LimiterConfig, clock: impl Clock) -> Self {
        let seed = config.seed().unwrap_or_else(|| {
            use rand::{RngCore, SeedableRng};
            rand_pcg::Pcg64Mcg::from_os_rng().next_u64()
        });
        let algorithm = Algorithm::new(config.algorithm(), seed);
        let slots = Slots::new(algorithm.limit(), config.shares(), config.max_waiting());
        Self {
            inner: Arc::new(Inner {
                config,
                fixed: matches!(config.algorithm(), LimitAlgorithm::Fixed(_)),
                slots,
                algorithm: Mutex::new(algorithm),
                clock: Box::new(clock),
                successes: AtomicU64::new(0),
                drops: AtomicU64::new(0),
                ignored: AtomicU64::new(0),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> LimiterConfig {
        self.inner.config
    }

    fn exceeded(&self, priority: Priority, reason: Refusal) -> LimitExceeded {
        LimitExceeded {
            priority,
            reason,
            limit: self.limit(),
            in_flight: self.in_flight(),
        }
    }

    fn permit(&self, slot: Slot) -> LimiterPermit {
        LimiterPermit {
            start: if self.inner.fixed {
                0
            } else {
                self.inner.clock.now()
            },
            in_flight: slot.in_flight_at_start(),
            slot: Some(slot),
            limiter: self.clone(),
        }
    }

    /// A slot for a call of `priority` if the limit (and its share) allows one now; never
    /// waits.
    pub fn try_acquire(&self, priority: Priority) -> Result<LimiterPermit, LimitExceeded> {
        match self.inner.slots.try_admit(priority) {
            Ok(slot) => Ok(self.permit(slot)),
            Err(r) => Err(self.exceeded(priority, r)),
        }
    }

    /// A slot now, a place in the queue, or the refusal; never waits. For callers that run
    /// the wait themselves: poll the ticket with [`LimiterTicket::try_take`], give up with
    /// [`LimiterTicket::time_out`].
    pub fn admit(&self, priority: Priority) -> Result<LimiterAdmission, LimitExceeded> {
        match self.inner.slots.admit(priority) {
            Ok(Admit::Now(slot)) => Ok(LimiterAdmission::Now(self.permit(slot))),
            Ok(Admit::Queued(ticket)) => Ok(LimiterAdmission::Queued(LimiterTicket {
                ticket,
                limiter: self.clone(),
            })),
            Err(r) => Err(self.exceeded(priority, r)),
        }
    }

    /// A slot for a call of `priority`, waiting for one (in the queue, for at most
    /// `max_wait`, on tokio's timer) if the limit is reached. Cancellation-safe.
    pub async fn acquire(&self, priority: Priority) -> Result<LimiterPermit, LimitExceeded> {
        match self.admit(priority)? {
            LimiterAdmission::Now(p) => Ok(p),
            LimiterAdmission::Queued(t) => t.wait(self.inner.config.max_wait()).await,
        }
    }

    /// Feeds a sample measured elsewhere: a call that took `rtt` with `in_flight` calls in
    /// flight when it started, dropped or not. The limit moves as the algorithm says.
    pub fn sample(&self, rtt: Duration, in_flight: u32, dropped: bool) {
        let rtt = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
        self.feed(rtt, in_flight, dropped);
    }

    fn feed(&self, rtt: u64, in_flight: u32, dropped: bool) {
        let i = &*self.inner;
        let counter = if dropped { &i.drops } else { &i.successes };
        counter.fetch_add(1, Ordering::Relaxed);
        if i.fixed {
            return;
        }
        let refused = i.slots.take_demand_refused();
        let grants = {
            let mut a = i.algorithm.lock().unwrap_or_else(PoisonError::into_inner);
            // Refused demand is demand: count the limiter as full (see the module docs).
            let in_flight = if refused {
                in_flight.max(a.limit())
            } else {
                in_flight
            };
            let limit = a.update(Sample {
                rtt,
                in_flight,
                dropped,
            });
            // Under the algorithm's lock, so that limits reach the slots in the order computed.
            i.slots.set_limit(limit)
        };
        // The slots a larger limit hands to waiters go out after every lock is released: the
        // waiters' wakers may call the limiter.
        grants.send();
    }

    /// The limit now.
    pub fn limit(&self) -> u32 {
        self.inner.slots.limit()
    }

    /// Calls holding a slot now.
    pub fn in_flight(&self) -> u32 {
        self.inner.slots.in_flight()
    }

    /// Calls waiting now.
    pub fn waiting(&self) -> u32 {
        self.inner.slots.waiting()
    }

    /// The priorities of the calls waiting now, in the order they will be served.
    pub fn queue(&self) -> Vec<Priority> {
        self.inner.slots.queued()
    }

    /// Whether a call of `priority` would take a slot at once now.
    pub fn would_admit(&self, priority: Priority) -> bool {
        self.inner.slots.would_admit(priority)
    }

    /// The limit, the load, the RTT estimates and the counts, now.
    pub fn snapshot(&self) -> LimiterSnapshot {
        let i = &*self.inner;
        let (last, baseline) = {
            let a = i.algorithm.lock().unwrap_or_else(PoisonError::into_inner);
            (a.last_rtt(), a.baseline_rtt())
        };
        LimiterSnapshot {
            limit: self.limit(),
            in_flight: self.in_flight(),
            waiting: self.waiting(),
            last_rtt: Duration::from_nanos(last),
            baseline_rtt: Duration::from_nanos(baseline),
            successes: i.successes.load(Ordering::Relaxed),
            drops: i.drops.load(Ordering::Relaxed),
            ignored: i.ignored.load(Ordering::Relaxed),
            slots: i.slots.counts().into(),
        }
    }
}

/// A slot under the limit. Report how the call went with [`success`](Self::success),
/// [`dropped`](Self::dropped), [`ignore`](Self::ignore) or [`record`](Self::record); a permit
/// dropped without a report feeds nothing (as `ignore`). The slot is given back either way,
/// after the sample moved the limit.
#[must_use = "report how the call went; the slot is released when the permit is dropped"]
#[derive(Debug)]
pub struct LimiterPermit {
    slot: Option<Slot>,
    limiter: Limiter,
    start: u64,
    in_flight: u32,
}

impl LimiterPermit {
    /// The priority the slot was taken for.
    pub fn priority(&self) -> Priority {
        self.slot.as_ref().map_or(Priority::DEFAULT, Slot::priority)
    }

    /// Calls in flight when this one started, itself included.
    pub fn in_flight_at_start(&self) -> u32 {
        self.in_flight
    }

    fn finish(mut self, dropped: Option<bool>) {
        let slot = self.slot.take();
        match dropped {
            Some(d) => {
                let rtt = if self.limiter.inner.fixed {
                    0
                } else {
                    self.limiter.inner.clock.now().saturating_sub(self.start)
                };
                self.limiter.feed(rtt, self.in_flight, d);
            }
            None => {
                self.limiter.inner.ignored.fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(slot);
    }

    /// The call succeeded: its RTT is a sample.
    pub fn success(self) {
        self.finish(Some(false));
    }

    /// The call was dropped (it failed, or timed out): a drop.
    pub fn dropped(self) {
        self.finish(Some(true));
    }

    /// The call says nothing about the dependency's load (a 4xx, a refusal further in).
    pub fn ignore(self) {
        self.finish(None);
    }

    /// [`success`](Self::success) for [`Outcome::Success`], [`dropped`](Self::dropped) for
    /// [`Outcome::Failure`], [`ignore`](Self::ignore) for [`Outcome::Ignored`].
    pub fn record(self, outcome: Outcome) {
        match outcome {
            Outcome::Success => self.success(),
            Outcome::Failure => self.dropped(),
            Outcome::Ignored => self.ignore(),
        }
    }
}

impl Drop for LimiterPermit {
    fn drop(&mut self) {
        if self.slot.take().is_some() {
            self.limiter.inner.ignored.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A place in a [`Limiter`]'s wait queue. Dropping it leaves the queue.
#[derive(Debug)]
pub struct LimiterTicket {
    ticket: Ticket,
    limiter: Limiter,
}

impl LimiterTicket {
    /// The priority it waits with.
    pub fn priority(&self) -> Priority {
        self.ticket.priority()
    }

    /// The permit, once a slot was granted (its RTT is timed from this call); the refusal,
    /// once pushed out of the queue by a higher priority; `None` while still waiting.
    pub fn try_take(&mut self) -> Option<Result<LimiterPermit, LimitExceeded>> {
        let p = self.ticket.priority();
        self.ticket.try_take().map(|g| match g {
            Ok(slot) => Ok(self.limiter.permit(slot)),
            Err(r) => Err(self.limiter.exceeded(p, r)),
        })
    }

    /// Gives up waiting ([`Refusal::TimedOut`], counted), unless a slot was granted, or the
    /// place taken, first.
    pub fn time_out(self) -> Result<LimiterPermit, LimitExceeded> {
        let p = self.ticket.priority();
        let limiter = self.limiter;
        match self.ticket.time_out() {
            Ok(slot) => Ok(limiter.permit(slot)),
            Err(r) => Err(limiter.exceeded(p, r)),
        }
    }

    /// Waits for a slot for at most `max_wait` from now, on tokio's timer.
    pub(crate) fn wait(
        self,
        max_wait: Duration,
    ) -> impl std::future::Future<Output = Result<LimiterPermit, LimitExceeded>> + Send + 'static
    {
        let deadline = tokio::time::Instant::now() + max_wait;
        self.wait_until(deadline)
    }

    async fn wait_until(
        mut self,
        deadline: tokio::time::Instant,
    ) -> Result<LimiterPermit, LimitExceeded> {
        let p = self.ticket.priority();
        match tokio::time::timeout_at(deadline, self.ticket.outcome()).await {
            Ok(Ok(slot)) => Ok(self.limiter.permit(slot)),
            Ok(Err(r)) => Err(self.limiter.exceeded(p, r)),
            Err(_) => self.time_out(),
        }
    }
}

#[cfg(feature = "tower")]
mod service {
    use std::task::{Context, Poll};

    use tower_service::Service;
    use tripline::{Classify, ResultClassifier};

    use super::future::ResponseFuture;
    use super::{Limiter, LimiterAdmission};
    use crate::BoxError;
    use crate::shed::{DefaultPriority, Prioritize};

    /// A service behind a [`Limiter`]: each request takes a slot for its priority (from `P`)
    /// until its response is ready, and its result, classified by `K`, is a sample (success),
    /// a drop (failure) or nothing (ignored, or a refusal by a local policy further in). A
    /// request over the limit waits in the queue, if there is one, or fails with a
    /// [`LimitExceeded`](super::LimitExceeded). Made by [`LimiterLayer`](super::LimiterLayer).
    ///
    /// Readiness is the inner service's. A waiting call keeps the inner service it was made
    /// ready with (a clone is left in its place), so the service must be `Clone`; calls that
    /// find a slot allocate nothing, calls that queue allocate their wait once.
    #[derive(Clone, Debug)]
    pub struct LimiterService<S, K = ResultClassifier, P = DefaultPriority> {
        inner: S,
        limiter: Limiter,
        classifier: K,
        prioritize: P,
    }

    impl<S, K, P> LimiterService<S, K, P> {
        /// `inner` behind `limiter`.
        pub const fn new(inner: S, limiter: Limiter, classifier: K, prioritize: P) -> Self {
            Self {
                inner,
                limiter,
                classifier,
                prioritize,
            }
        }

        /// The limiter.
        pub fn limiter(&self) -> &Limiter {
            &self.limiter
        }

        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// The inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    }

    impl<S, K, P, Req> Service<Req> for LimiterService<S, K, P>
    where
        S: Service<Req> + Clone,
        S::Error: Into<BoxError>,
        K: Classify<S::Response, BoxError> + Clone,
        P: Prioritize<Req>,
    {
        type Response = S::Response;
        type Error = BoxError;
        type Future = ResponseFuture<S, Req, K>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            self.inner.poll_ready(cx).map_err(Into::into)
        }

        fn call(&mut self, req: Req) -> Self::Future {
            let priority = self.prioritize.priority(&req);
            let classifier = self.classifier.clone();
            match self.limiter.admit(priority) {
                Ok(LimiterAdmission::Now(permit)) => {
                    ResponseFuture::called(self.inner.call(req), permit, classifier)
                }
                Ok(LimiterAdmission::Queued(ticket)) => {
                    let wait = Box::pin(ticket.wait(self.limiter.config().max_wait()));
                    let clone = self.inner.clone();
                    let ready = std::mem::replace(&mut self.inner, clone);
                    ResponseFuture::queued(wait, ready, req, classifier)
                }
                Err(e) => ResponseFuture::refused(e, classifier),
            }
        }
    }
}

#[cfg(feature = "tower")]
pub use service::LimiterService;
