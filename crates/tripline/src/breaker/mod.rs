//! The circuit breaker: a thin host of [`crate::rules`] in atomics.
//!
//! # Where each job lives
//! * `mod.rs` (this file): the breaker's handle, its shared part ([`Inner`]) and the calls a
//!   caller makes.
//! * [`hot`]: the thresholds, the run of consecutive failures and the per-lane counters, in
//!   atomics every call reads.
//! * [`closed`]: admission and recording in Closed and MetricsOnly, and rejection in Open and
//!   ForcedOpen: the lock-free paths.
//! * [`cause`]: what opened the breaker, for its rejections to carry.
//! * [`counted`]: the failure-count-in-time rule's ring of failure times.
//! * [`round`]: the half-open round: probe leases, their results, the verdict.
//! * [`transition`]: the transition (state word, generation, events), the open wait, the
//!   operator's moves and the timers.
//! * [`ramp`]: gradual recovery after closing.
//! * [`reconfigure`]: a live reconfiguration, and what a registry asks of its breakers (the
//!   operator override the breaker holds, whether it may be evicted).
//! * [`permit`]: permits and what became of their results.
//! * [`metrics`]: the metrics snapshot and the memory figures.
//! * [`counts`]: the current generation's counts (gobreaker's `Counts`).
//! * `async_call` (feature `tokio`): the timeout inside the breaker, and the timer task.
//!
//! # Concurrency
//! The state and its generation share one `AtomicU64`, the state word. Admission in Closed,
//! recording in Closed and rejection in Open read it without a lock and write only atomics (the
//! window, the in-flight cohorts, counters); none of them allocates. Transitions, and the
//! half-open probe bookkeeping (a handful of calls per open period), take one mutex, the core
//! lock; a transition re-reads the state word under it and proceeds only if the word is still
//! the one its decision was based on, so exactly one thread performs each transition.
//!
//! # Locks, and what never runs under them
//! * **The core lock** (`Cold::core`) guards [`transition::Core`]: the configuration in
//!   force, the half-open round, the backoff level, the time spent in each state, the operator
//!   override the breaker holds. Every write of the state word happens under it. Under it run
//!   only the breaker's own code: the rules, the window's reset (which waits a few
//!   instructions for its writers), and the queueing of events. Never under it: a listener, a
//!   clock reading (every operation reads the clock before it takes the lock), a metrics
//!   recorder, a classifier, a fallback, or a registry's lock.
//! * **The event queue's lock** (`Hub::state`, see [`crate::event`]) guards the listeners
//!   and the queued events; it is taken under the core lock to queue a transition's event, and
//!   never while a listener runs.
//! * Nothing else blocks: the count window's writers register in its head word for the few
//!   instructions between a bit and its total, and the reset waits for them; a thread that
//!   finds another delivering events leaves them to it.
//!
//! Events are delivered after every lock is released, by the operation that made them (see
//! [`crate::event`]): a listener, a clock or a state gauge may call back into any public API
//! of the breaker or its registry.

mod cause;
pub(crate) use cause::RawCause;
mod closed;
mod counted;
mod counts;
mod hot;
pub(crate) mod metrics;
pub(crate) mod permit;
mod ramp;
pub(crate) mod reconfigure;
mod round;
pub(crate) mod transition;

#[cfg(feature = "tokio")]
mod async_call;

use std::sync::Arc;

use once_cell::race::OnceBox;

use crate::clock::{Clock, MonotonicClock, nanos};
use crate::config::{BreakerConfig, WindowConfig};
use crate::error::{BreakerName, CallError, Rejected};
use crate::event::{EventKind, Listener};
use crate::outcome::{Classify, ResultClassifier};
use crate::state::{State, Word};
use crate::sync::{AtomicU64, Ordering, lock};
use crate::window::{CountWindow, TimeWindow, Window};

use hot::{Hot, Lane, Lanes, PaddedLane, TIMED_FOR_LISTENERS};
use transition::Cold;

pub use counts::Counts;
pub use metrics::{KindCounts, Metrics, ProbeCounts, Rejections};
pub use permit::{OwnedPermit, Permit, Recorded};

pub(crate) use transition::OpenWait;

/// A circuit breaker for one dependency. Cloning is cheap and clones share the breaker.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, Outcome, State};
///
/// let breaker = CircuitBreaker::new("exercise-catalog", BreakerConfig::default());
///
/// // Acquire, call, record.
/// let permit = breaker.try_acquire().expect("closed breakers admit");
/// let result: Result<&str, &str> = Ok("payload");
/// permit.record(Outcome::from_result(&result));
///
/// // Or let the breaker do all three.
/// let value = breaker.call(|| Ok::<_, std::io::Error>(42)).unwrap();
/// assert_eq!(value, 42);
/// assert_eq!(breaker.state(), State::Closed);
/// ```
pub struct CircuitBreaker<C: Clock = MonotonicClock> {
    inner: Arc<Inner<C>>,
}

impl<C: Clock> Clone for CircuitBreaker<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<C: Clock> std::fmt::Debug for CircuitBreaker<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("name", &self.inner.name)
            .field("state", &self.state())
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

/// The time an untimed closed call passes around: a stand-in never used as a reading (the
/// paths that need the time read the clock when they get it).
const NO_TIME: u64 = u64::MAX;

/// What every handle of one breaker shares.
pub(crate) struct Inner<C> {
    /// The state word: state and generation. Written only by a transition, under the core
    /// lock.
    word: AtomicU64,
    /// When the current open period ends; written by a transition to Open before the word.
    open_until: AtomicU64,
    hot: Hot,
    window: Window,
    /// The failure-count-in-time rule's ring, when the rule is on (its size is part of the
    /// shape, fixed for the breaker's life).
    failure_times: Option<Box<counted::FailureTimes>>,
    /// When a closed acquire next looks at what is due (`Hot::closed_checks`): the next
    /// in-flight check, or the end of the generation's interval, whichever comes first.
    next_closed_check: AtomicU64,
    /// When the current Closed generation's `interval` ends (`u64::MAX`: no interval).
    /// Written by a transition into Closed before the word.
    interval_end: AtomicU64,
    /// When the breaker last entered Closed (or MetricsOnly); its creation time until the
    /// first transition.
    closed_since: AtomicU64,
    /// The generation of that entry: the generation the window and the in-flight cohorts
    /// being counted belong to.
    closed_generation: AtomicU64,
    /// The lane of an unstriped breaker.
    lane: Lane,
    /// A striped breaker's lanes, one per stripe (empty when unstriped).
    lanes: Option<Box<Lanes>>,
    name: BreakerName,
    clock: C,
    /// The configuration the breaker was built with; the cold part's copy is the one in force
    /// once that part exists.
    config: Arc<BreakerConfig>,
    /// Everything transitions, probes and listeners need, allocated the first time one of
    /// them is, so a breaker that has never left Closed (most of a registry's keys) holds only
    /// the closed-path part above.
    cold: OnceBox<Cold>,
    /// Whether the `metrics` feature's state gauges follow this breaker.
    #[cfg(feature = "metrics")]
    gauges: crate::sync::AtomicBool,
}

impl CircuitBreaker<MonotonicClock> {
    /// A breaker on the production clock: the coarse (millisecond) one where the configuration
    /// allows it, as the defaults do, else the precise one ([`MonotonicClock::for_config`]). The
    /// coarse clock's readings are refreshed by one process-wide background thread, started by
    /// the first breaker that needs it. A breaker reconfigured later to rules that need finer
    /// time reads the clock's precise readings from then on. Use
    /// [`with_clock`](Self::with_clock) to choose.
    ///
    /// `config` is a [`BreakerConfig`] or an `Arc<BreakerConfig>`; breakers built from clones
    /// of one `Arc` share it instead of each holding a copy (a registry's keys do).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tripline::{BreakerConfig, CircuitBreaker};
    ///
    /// let config = Arc::new(BreakerConfig::default());
    /// let a = CircuitBreaker::new("tenant-a", config.clone());
    /// let b = CircuitBreaker::new("tenant-b", config.clone());
    /// assert_eq!(Arc::strong_count(&config), 3);
    /// # drop((a, b));
    /// ```
    pub fn new(name: impl Into<BreakerName>, config: impl Into<Arc<BreakerConfig>>) -> Self {
        let config = config.into();
        let clock = MonotonicClock::for_config(&config);
        Self::with_clock(name, config, clock)
    }
}

impl<C: Clock> CircuitBreaker<C> {
    /// A breaker on the given clock. Where the configuration needs finer time than the
    /// clock's readings resolve ([`Clock::resolution`], [`rules::clock_serves`]), the breaker
    /// reads [`Clock::precise_now`].
    ///
    /// [`rules::clock_serves`]: crate::rules::clock_serves
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker, ManualClock};
    /// let clock = ManualClock::new();
    /// let breaker = CircuitBreaker::with_clock("db", BreakerConfig::default(), clock.clone());
    /// assert_eq!(breaker.name(), "db");
    /// ```
    pub fn with_clock(
        name: impl Into<BreakerName>,
        config: impl Into<Arc<BreakerConfig>>,
        clock: C,
    ) -> Self {
        let config = config.into();
        let hot = Hot::new(&config, clock.resolution());
        let now = if hot.precise.load(Ordering::Relaxed) {
            clock.precise_now()
        } else {
            clock.now()
        };
        let window = match config.window {
            WindowConfig::Count { size } => {
                Window::Count(CountWindow::new(size, config.call_durations))
            }
            WindowConfig::Time { length, bucket } => Window::Time(Box::new(TimeWindow::new(
                nanos(bucket),
                // At most 4,096 buckets (validated).
                u32::try_from(length.as_nanos() / bucket.as_nanos()).unwrap_or(u32::MAX),
                config.stripes,
                now,
                config.call_durations,
            ))),
        };
        let slow_nanos = nanos(config.slow_call_duration);
        let lane = Lane::new(slow_nanos);
        let interval_end = transition::interval_end(&config, now);
        let batch = match &window {
            Window::Count(w) => w.batch().map_or(0, u64::from),
            Window::Time(_) => 0,
        };
        let lanes = (config.stripes > 1).then(|| {
            Box::new(Lanes(
                (0..config.stripes)
                    .map(|_| PaddedLane(Lane::new(slow_nanos), AtomicU64::new(0)))
                    .collect(),
                batch,
            ))
        });
        let inner = Inner {
            word: AtomicU64::new(Word::new(State::Closed, 0).0),
            open_until: AtomicU64::new(0),
            hot,
            window,
            failure_times: config
                .failure_count
                .map(|f| Box::new(counted::FailureTimes::new(f.failures))),
            next_closed_check: AtomicU64::new(transition::next_closed_check(
                &config,
                now,
                lane.inflight.width(),
                interval_end,
            )),
            interval_end: AtomicU64::new(interval_end),
            closed_since: AtomicU64::new(now),
            closed_generation: AtomicU64::new(0),
            lane,
            lanes,
            name: name.into(),
            clock,
            config,
            cold: OnceBox::new(),
            #[cfg(feature = "metrics")]
            gauges: crate::sync::AtomicBool::new(false),
        };
        // loom cannot see through `OnceBox`'s std atomics, so under the model checkers the cold
        // part exists before the breaker is shared; its lazy publication is once_cell's.
        #[cfg(any(loom, shuttle))]
        let _ = inner.cold();
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Whether two handles are the same breaker.
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker};
    /// let a = CircuitBreaker::new("db", BreakerConfig::default());
    /// let b = CircuitBreaker::new("db", BreakerConfig::default());
    /// assert!(a.ptr_eq(&a.clone()));
    /// assert!(!a.ptr_eq(&b));
    /// ```
    pub fn ptr_eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The breaker's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The clock the breaker reads.
    pub fn clock(&self) -> &C {
        &self.inner.clock
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.inner.word().state()
    }

    /// The current generation (bumped by every transition).
    pub fn generation(&self) -> u64 {
        self.inner.word().generation()
    }

    /// The configuration in force.
    pub fn config(&self) -> BreakerConfig {
        BreakerConfig::clone(&self.inner.config_arc())
    }

    /// Asks to make one call. In Closed this is a few atomic operations; in Open a rejection;
    /// in HalfOpen a probe slot if one is free. An open breaker whose wait has elapsed moves to
    /// HalfOpen here (lazily), unless a timer already did.
    #[inline]
    pub fn try_acquire(&self) -> Result<Permit<'_, C>, Rejected> {
        let ticket = self.inner.acquire()?;
        Ok(Permit::new(&self.inner, ticket))
    }

    /// [`try_acquire`](Self::try_acquire), returning a permit that owns a handle to the
    /// breaker (for `'static` futures and tower services).
    #[inline]
    pub fn try_acquire_owned(&self) -> Result<OwnedPermit<C>, Rejected> {
        let ticket = self.inner.acquire()?;
        Ok(OwnedPermit::new(self.inner.clone(), ticket))
    }

    /// Runs `f` through the breaker: `Ok` is a success, `Err` a failure.
    pub fn call<T, E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<T, CallError<E>> {
        self.call_classified(ResultClassifier, f)
    }

    /// Runs `f` through the breaker, classifying its result with `classify`.
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker, Classification, Outcome};
    ///
    /// let breaker = CircuitBreaker::new("api", BreakerConfig::default());
    /// let status = breaker.call_classified(
    ///     |r: &Result<u16, ()>| Classification::new(Outcome::from_http_status(*r.as_ref().unwrap_or(&500))),
    ///     || Ok(404),
    /// );
    /// assert_eq!(status.unwrap(), 404);
    /// assert_eq!(breaker.metrics().ignored_calls, 1);
    /// ```
    pub fn call_classified<T, E, K: Classify<T, E>>(
        &self,
        classify: K,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, CallError<E>> {
        let permit = self.try_acquire().map_err(CallError::Rejected)?;
        let result = f();
        let _ = permit.record_classified(classify.classify(&result));
        result.map_err(CallError::Failed)
    }

    /// Runs `f` through the breaker and hands any rejection or error to `fallback`.
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker};
    ///
    /// let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
    /// breaker.force_open();
    /// let card = breaker.call_or_else(|| Ok::<_, ()>("full card"), |_| "cached card");
    /// assert_eq!(card, "cached card");
    /// ```
    pub fn call_or_else<T, E>(
        &self,
        f: impl FnOnce() -> Result<T, E>,
        fallback: impl FnOnce(CallError<E>) -> T,
    ) -> T {
        self.call(f).unwrap_or_else(fallback)
    }

    /// Subscribes a listener. It first receives [`EventKind::Initial`] with the current state,
    /// then every later event in order. A listener may call back into the breaker (see
    /// [`Listener`]).
    pub fn subscribe(&self, listener: impl Listener) {
        let inner = &*self.inner;
        if listener.wants_outcome_events() {
            // Outcome events carry durations: time every call from now on.
            inner
                .hot
                .timed
                .fetch_or(TIMED_FOR_LISTENERS, Ordering::Relaxed);
        }
        let now = inner.now();
        let cold = inner.cold();
        {
            let _core = lock(&cold.core);
            let word = inner.word();
            cold.hub.subscribe(
                Arc::new(listener),
                now,
                &inner.name,
                EventKind::Initial {
                    state: word.state(),
                    generation: word.generation(),
                },
            );
        }
        inner.drain(cold);
    }

    /// The shared part, for the other modules of the crate.
    pub(crate) fn inner(&self) -> &Inner<C> {
        &self.inner
    }

    /// Makes `gauges` follow every transition of this breaker from now on, showing the state
    /// now; `false` (and nothing changed) if other gauges already follow it. The gauges are a
    /// listener: they are set from the event queue, after every lock is released, in sequence
    /// order.
    #[cfg(feature = "metrics")]
    pub(crate) fn attach_state_gauges(&self, gauges: &crate::observe::StateGauges) -> bool {
        if self.inner.gauges.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.subscribe(crate::observe::FollowState(gauges.clone()));
        true
    }

    /// Whether handles other than the caller's `holders` exist (a call in flight, a caller
    /// keeping one).
    pub(crate) fn in_use(&self, holders: usize) -> bool {
        Arc::strong_count(&self.inner) > holders
    }
}

impl<C: Clock> Inner<C> {
    /// The state word.
    #[inline]
    fn word(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    /// A reading of the breaker's clock, as precise as its configuration needs.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        if self.hot.precise.load(Ordering::Relaxed) {
            self.clock.precise_now()
        } else {
            self.clock.now()
        }
    }

    /// `now`, or a fresh reading for an untimed call.
    #[inline]
    fn real_now(&self, now: u64) -> u64 {
        if now == NO_TIME { self.now() } else { now }
    }

    /// The cold part, allocated the first time it is needed. Until then the breaker has never
    /// left Closed, so `closed_since` is still its creation time.
    #[inline]
    fn cold(&self) -> &Cold {
        self.cold.get_or_init(|| {
            Box::new(Cold::new(
                self.config.clone(),
                self.closed_since.load(Ordering::Relaxed),
            ))
        })
    }

    /// The calling thread's lane and its index.
    #[inline]
    fn lane(&self) -> (u32, &Lane) {
        match &self.lanes {
            None => (0, &self.lane),
            Some(lanes) => {
                let i = crate::sync::stripe_index() % lanes.0.len();
                (i as u32, &lanes.0[i].0)
            }
        }
    }

    /// The lane a permit entered.
    #[inline]
    fn lane_at(&self, i: u32) -> &Lane {
        match self.lanes.as_ref().and_then(|l| l.0.get(i as usize)) {
            Some(l) => &l.0,
            None => &self.lane,
        }
    }

    /// A striped breaker's lanes (none when unstriped).
    fn striped(&self) -> impl Iterator<Item = &Lane> {
        self.lanes.iter().flat_map(|l| l.0.iter().map(|p| &p.0))
    }

    /// Every lane in use.
    fn lanes(&self) -> impl Iterator<Item = &Lane> {
        let unstriped = self.lanes.is_none().then_some(&self.lane);
        unstriped.into_iter().chain(self.striped())
    }

    /// The configuration in force.
    fn config_arc(&self) -> Arc<BreakerConfig> {
        match self.cold.get() {
            Some(cold) => lock(&cold.core).config.clone(),
            None => self.config.clone(),
        }
    }

    /// Successes counted so far (every lane).
    fn successes(&self) -> u64 {
        self.lanes()
            .map(|l| l.successes.load(Ordering::Relaxed))
            .sum()
    }
}
