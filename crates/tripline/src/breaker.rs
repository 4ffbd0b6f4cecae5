//! The circuit breaker.
//!
//! # Concurrency
//! The state and its generation share one `AtomicU64`. Admission in Closed, recording in
//! Closed and rejection in Open read it without a lock and write only atomics (the window, the
//! in-flight cohorts, counters); none of them allocates. Transitions, and the half-open probe
//! bookkeeping (a handful of calls per open period), take a small mutex; a transition re-reads
//! the state word under it and proceeds only if the word is still the one its decision was based
//! on, so exactly one thread performs each transition and queues its event. Listeners run after
//! the mutex is released.

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::clock::{Clock, MonotonicClock, nanos};
use crate::config::{AfterMaxWait, BreakerConfig, HalfOpenPolicy, WindowConfig};
use crate::error::{BreakerName, CallError, ConfigError, RejectReason, Rejected};
use crate::event::{EventKind, Listener, Reason};
use crate::outcome::{Classification, Classify, FailureKind, Outcome, ResultClassifier};
use crate::state::{State, Word};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, AtomicU128, Mutex, Ordering, lock};
use crate::window::{CountWindow, Sample, TimeWindow, Window, WindowSnapshot};
use crate::{
    event::Hub,
    inflight::{Cohort, InFlight},
    sync::tag,
};
use once_cell::race::OnceBox;

const PPM: u64 = 1_000_000;

/// How long a transition to Open waits.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OpenWait {
    /// The configured wait (jitter, backoff), at least the hint (capped).
    Rules(Option<Duration>),
    /// Exactly this many nanoseconds (an operator's explicit wait).
    Exactly(u64),
}

impl OpenWait {
    pub(crate) const RULES: OpenWait = OpenWait::Rules(None);
}

/// The state a half-open breaker goes to after its maximum wait.
fn after_max_wait(c: &BreakerConfig) -> State {
    match c.after_max_wait {
        AfterMaxWait::Open => State::Open,
        AfterMaxWait::Closed => State::Closed,
    }
}

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

/// The thresholds the lock-free paths read, kept in atomics so a live reconfiguration can
/// change them without a lock, and the two flags and the running count the closed path keeps
/// beside them.
#[derive(Debug)]
struct Hot {
    slow_nanos: AtomicU64,
    failure_ppm: AtomicU32,
    slow_ppm: AtomicU32,
    minimum_calls: AtomicU32,
    /// The consecutive-failures limit (0: rule off).
    consecutive_limit: AtomicU32,
    /// `generation tag << 32 | consecutive failures so far` (for the rule and the metrics): a
    /// failure of an older generation can never extend a newer generation's run. A success
    /// reads it and writes only when a run of failures ends.
    consecutive: AtomicU64,
    /// The successes counted (all lanes) when the last failure was, or the state last changed:
    /// the current run of successes is the count since then. Written by failures and
    /// transitions, never by successes.
    success_mark: AtomicU64,
    /// What failures read: the failure-kind weights, a nibble per kind
    /// ([`crate::FailureKindWeights`]), and [`LUMPING`] when lumping is on (its interval is in
    /// the cold part).
    failure_rules: AtomicU32,
    in_flight: AtomicBool,
    /// Whether closed calls are timed: [`TIMED_BY_RULES`] when the configuration needs a
    /// clock reading per call ([`BreakerConfig::needs_time`]), [`TIMED_FOR_LISTENERS`] once a
    /// listener asked for outcome events (which carry durations). 0: the closed path reads no
    /// clock.
    timed: AtomicU32,
    /// Closed and ramping traffic back up after recovery (the ramp's state is in the cold
    /// part); false whenever no ramp runs, so a breaker without one pays one load.
    ramping: AtomicBool,
}

/// [`Hot::timed`]: the configuration's rules need a clock reading per closed call.
const TIMED_BY_RULES: u32 = 1;
/// [`Hot::timed`]: a listener wants outcome events, which carry each call's duration.
const TIMED_FOR_LISTENERS: u32 = 2;
/// The time an untimed closed call passes around: a stand-in never used as a reading (the
/// paths that need the time read the clock when they get it).
const NO_TIME: u64 = u64::MAX;

/// The trip rules, as bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Rules(u32);

impl Rules {
    const FAILURE_RATE: u32 = 1;
    const SLOW_CALL_RATE: u32 = 2;
    const CONSECUTIVE: u32 = 4;

    /// The reasons of the rules that fired, in the order a trip names them: the consecutive
    /// rule (with its run), the failure rate, the slow-call rate.
    fn reasons(self, consecutive: Option<u64>) -> impl Iterator<Item = Reason> {
        let bits = self.0;
        [
            (
                Self::CONSECUTIVE,
                consecutive.map(|count| Reason::ConsecutiveFailures { count }),
            ),
            (Self::FAILURE_RATE, Some(Reason::FailureRate)),
            (Self::SLOW_CALL_RATE, Some(Reason::SlowCallRate)),
        ]
        .into_iter()
        .filter_map(move |(bit, reason)| if bits & bit != 0 { reason } else { None })
    }

    /// The reason a trip names: the first rule that fired.
    fn first(self, consecutive: Option<u64>) -> Option<Reason> {
        self.reasons(consecutive).next()
    }
}

/// The bit of `Hot::failure_rules` that says lumping is on.
const LUMPING: u32 = 1 << 31;

/// Generation tags of the 32-bit packed counters.
#[inline]
fn tag32(generation: u64) -> u64 {
    generation & 0xFFFF_FFFF
}

impl Hot {
    fn new(c: &BreakerConfig) -> Self {
        let h = Self {
            slow_nanos: AtomicU64::new(0),
            failure_ppm: AtomicU32::new(0),
            slow_ppm: AtomicU32::new(0),
            minimum_calls: AtomicU32::new(0),
            consecutive_limit: AtomicU32::new(0),
            consecutive: AtomicU64::new(0),
            success_mark: AtomicU64::new(0),
            failure_rules: AtomicU32::new(0),
            in_flight: AtomicBool::new(false),
            timed: AtomicU32::new(0),
            ramping: AtomicBool::new(false),
        };
        h.set(c);
        h
    }

    fn set(&self, c: &BreakerConfig) {
        let r = Ordering::Relaxed;
        // Validated: both rates are at most 1,000,000 ppm.
        self.failure_ppm
            .store(u32::try_from(c.failure_ppm()).unwrap_or(u32::MAX), r);
        self.slow_ppm
            .store(u32::try_from(c.slow_ppm()).unwrap_or(u32::MAX), r);
        // With the slow-call rule off no call is slow.
        self.slow_nanos.store(
            if c.slow_call_rule {
                nanos(c.slow_call_duration)
            } else {
                u64::MAX
            },
            r,
        );
        self.minimum_calls.store(c.minimum_calls, r);
        self.consecutive_limit
            .store(c.consecutive_failures.unwrap_or(0), r);
        self.in_flight.store(c.counts_in_flight(), r);
        if c.needs_time() {
            self.timed.fetch_or(TIMED_BY_RULES, r);
        } else {
            self.timed.fetch_and(!TIMED_BY_RULES, r);
        }
        let lumping = if c.lumping_interval.is_some() {
            LUMPING
        } else {
            0
        };
        self.failure_rules
            .store(c.failure_kinds.packed() | lumping, r);
    }

    /// How much a failure of `kind` counts.
    #[inline]
    fn weight(&self, kind: FailureKind) -> u32 {
        (self.failure_rules.load(Ordering::Relaxed) >> (4 * kind.index())) & 0xF
    }

    #[inline]
    fn failure_ppm(&self) -> u64 {
        u64::from(self.failure_ppm.load(Ordering::Relaxed))
    }

    #[inline]
    fn slow_ppm(&self) -> u64 {
        u64::from(self.slow_ppm.load(Ordering::Relaxed))
    }

    /// The run of failures `generation` has now (0 when another generation's run is in place).
    #[inline]
    fn failure_run(&self, generation: u64) -> u32 {
        let v = self.consecutive.load(Ordering::Relaxed);
        if v >> 32 == tag32(generation) {
            v as u32
        } else {
            0
        }
    }

    /// Counts a failure of `weight` in `generation`'s run; returns the run's length (0 when a
    /// newer generation's run is in place: this failure is stale).
    #[inline]
    fn consecutive_failure(&self, generation: u64, weight: u32) -> u32 {
        let t = tag32(generation);
        let r = Ordering::Relaxed;
        let next = |v: u64| {
            let (vt, n) = (v >> 32, v as u32);
            if vt == t {
                // Saturating: in MetricsOnly nothing resets a run of failures.
                Some(t << 32 | u64::from(n.saturating_add(weight)))
            } else if tag::newer(vt, t, 32) {
                None
            } else {
                Some(t << 32 | u64::from(weight))
            }
        };
        match self.consecutive.fetch_update(r, r, next) {
            Ok(before) => next(before).map_or(0, |v| v as u32),
            Err(_) => 0,
        }
    }

    /// The current run of failures of `generation` (0 for any other generation's).
    fn consecutive_failures(&self, generation: u64) -> u64 {
        let v = self.consecutive.load(Ordering::Relaxed);
        if v >> 32 == tag32(generation) {
            u64::from(v as u32)
        } else {
            0
        }
    }

    /// A good result ends `generation`'s run of failures.
    #[inline]
    fn consecutive_success(&self, generation: u64) {
        let t = tag32(generation);
        let v = self.consecutive.load(Ordering::Relaxed);
        if v as u32 != 0 && !tag::newer(v >> 32, t, 32) {
            let _ =
                self.consecutive
                    .compare_exchange(v, t << 32, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// What each call writes: outcome and rejection counters and the calls in flight. A
/// breaker with one stripe has one lane; a striped breaker gives each writer stripe (thread)
/// its own, so concurrent callers write different cache lines.
#[derive(Debug)]
struct Lane {
    successes: AtomicU64,
    failures: AtomicU64,
    slow_successes: AtomicU64,
    slow_failures: AtomicU64,
    ignored: AtomicU64,
    abandoned: AtomicU64,
    /// Refusals while Open and ForcedOpen (the lock-free refusals; HalfOpen's are counted in
    /// the cold part, under the lock that refused them).
    rejected: [AtomicU64; 2],
    inflight: InFlight,
}

impl Lane {
    fn new(slow_nanos: u64) -> Self {
        Self {
            successes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            slow_successes: AtomicU64::new(0),
            slow_failures: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            rejected: std::array::from_fn(|_| AtomicU64::new(0)),
            inflight: InFlight::new(slow_nanos),
        }
    }

    /// Counts one result; `None` for an ignored outcome, else whether it failed.
    #[inline]
    fn count(&self, outcome: Outcome, slow: bool) -> Option<bool> {
        let r = Ordering::Relaxed;
        let failure = match outcome {
            Outcome::Ignored => {
                self.ignored.fetch_add(1, r);
                return None;
            }
            Outcome::Failure => {
                self.failures.fetch_add(1, r);
                true
            }
            Outcome::Success => {
                self.successes.fetch_add(1, r);
                false
            }
        };
        if slow {
            if failure {
                self.slow_failures.fetch_add(1, r);
            } else {
                self.slow_successes.fetch_add(1, r);
            }
        }
        Some(failure)
    }
}

/// A striped breaker's lanes, behind one thin pointer (an unstriped breaker holds none).
#[derive(Debug)]
struct Lanes(Box<[PaddedLane]>);

/// A lane on its own pair of cache lines (adjacent-line prefetchers fetch lines in pairs).
#[derive(Debug)]
#[repr(align(128))]
struct PaddedLane(Lane);

#[derive(Clone, Copy, Debug)]
struct Lease {
    token: u64,
    deadline: u64,
}

#[derive(Debug)]
struct Round {
    leases: Vec<Option<Lease>>,
    /// Probes admitted in this round (expired, abandoned and ignored ones included).
    admitted: u32,
    results: u32,
    failures: u32,
    slow: u32,
    successes: u32,
}

impl Round {
    fn new(k: u32) -> Self {
        Self {
            leases: vec![None; k as usize],
            admitted: 0,
            results: 0,
            failures: 0,
            slow: 0,
            successes: 0,
        }
    }
    fn in_flight(&self) -> usize {
        self.leases.iter().filter(|l| l.is_some()).count()
    }
}

#[derive(Debug)]
struct Core {
    config: Arc<BreakerConfig>,
    /// Jitter generator, seeded from the OS on first use unless the configuration seeds it.
    rng: Option<Pcg64Mcg>,
    /// Backoff level: how many times the open wait has grown.
    level: u32,
    ever_opened: bool,
    entered_at: u64,
    half_open_since: u64,
    round: Round,
    next_token: u64,
    time_in: [u64; 6],
    transitions: u64,
}

/// The part of a breaker that only transitions, probes, listeners and the counters of stale
/// results and expired probes need. It is allocated the first time one of them is, so a
/// breaker that has never left Closed (most of a registry's keys) holds only [`Inner`]'s
/// closed-path part.
#[derive(Debug)]
struct Cold {
    core: Mutex<Core>,
    hub: Hub,
    stale: AtomicU64,
    expired_probes: AtomicU64,
    /// Failures by the kind their classifier gave (whatever the kind's weight).
    kind_failures: [AtomicU64; 7],
    /// Failures lumped into an earlier one.
    lumped: AtomicU64,
    /// Refusals while HalfOpen (every probe slot taken).
    half_open_rejected: AtomicU64,
    /// Lumping: `generation << 64 | 1 + when the last counted failure was` (0: none yet).
    lump: AtomicU128,
    /// The lumping interval in nanoseconds (read while `Hot::failure_rules` says lumping is on).
    lump_nanos: AtomicU64,
    /// Gradual recovery after closing.
    ramp: Ramp,
    /// MetricsOnly (which only a transition enters): `generation tag << 32 | rules that fired
    /// at the last evaluation` (bits of [`Rules`]), so each rule is reported once each time it
    /// starts firing.
    would_trip: AtomicU64,
    #[cfg(feature = "tokio")]
    notify: tokio::sync::Notify,
}

/// A ramp in progress (see [`RampUp`](crate::RampUp)): its start and step length, fixed when
/// the breaker closes, and one word for the current step: `step index << 48 | share in ppm <<
/// 28 | calls seen in the step`. A call's index in its step decides it: the `n`-th call (from
/// 0) is admitted when `floor((n + 1) × share)` exceeds `floor(n × share)`, so of the first `n`
/// calls of a step exactly `floor(n × share)` are admitted.
#[derive(Debug)]
struct Ramp {
    generation: AtomicU64,
    start: AtomicU64,
    step_nanos: AtomicU64,
    /// The ramp's configuration: `from` as f64 bits, the steps, the curve (1: exponential).
    from_bits: AtomicU64,
    steps: AtomicU32,
    exponential: AtomicBool,
    step: AtomicU64,
    rejected: AtomicU64,
}

const RAMP_COUNT_BITS: u32 = 28;
const RAMP_COUNT_MAX: u64 = (1 << RAMP_COUNT_BITS) - 1;
const RAMP_SHARE_SHIFT: u32 = RAMP_COUNT_BITS;
const RAMP_STEP_SHIFT: u32 = 48;

impl Ramp {
    fn new() -> Self {
        Self {
            generation: AtomicU64::new(0),
            start: AtomicU64::new(0),
            step_nanos: AtomicU64::new(1),
            from_bits: AtomicU64::new(0),
            steps: AtomicU32::new(1),
            exponential: AtomicBool::new(false),
            step: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    fn config(&self) -> crate::config::RampUp {
        crate::config::RampUp {
            from: f64::from_bits(self.from_bits.load(Ordering::Relaxed)),
            over: Duration::from_nanos(
                self.step_nanos
                    .load(Ordering::Relaxed)
                    .saturating_mul(u64::from(self.steps.load(Ordering::Relaxed))),
            ),
            steps: self.steps.load(Ordering::Relaxed),
            curve: if self.exponential.load(Ordering::Relaxed) {
                crate::config::RampCurve::Exponential
            } else {
                crate::config::RampCurve::Linear
            },
        }
    }

    /// Starts a ramp for `generation` at `now` (under the core lock, before the word).
    fn begin(&self, ramp: &crate::config::RampUp, generation: u64, now: u64) {
        let r = Ordering::Relaxed;
        self.generation.store(generation, r);
        self.start.store(now, r);
        self.step_nanos
            .store((nanos(ramp.over) / u64::from(ramp.steps.max(1))).max(1), r);
        self.from_bits.store(ramp.from.to_bits(), r);
        self.steps.store(ramp.steps.max(1), r);
        self.exponential
            .store(ramp.curve == crate::config::RampCurve::Exponential, r);
        self.step.store(ramp.share_ppm(0) << RAMP_SHARE_SHIFT, r);
    }

    /// Whether the ramp of `generation` still runs at `now` (it would refuse some calls).
    fn running(&self, generation: u64, now: u64) -> bool {
        let r = Ordering::Relaxed;
        self.generation.load(r) == generation
            && now.saturating_sub(self.start.load(r)) / self.step_nanos.load(r)
                < u64::from(self.steps.load(r))
    }

    /// Whether the ramp of `generation` admits a call at `now`: `None` once the ramp is over.
    fn admits(&self, generation: u64, now: u64) -> Option<bool> {
        let r = Ordering::Relaxed;
        if self.generation.load(r) != generation {
            return None;
        }
        let i = now.saturating_sub(self.start.load(r)) / self.step_nanos.load(r);
        if i >= u64::from(self.steps.load(r)) {
            return None;
        }
        let mut cur = self.step.load(r);
        loop {
            let (step, share, n) = (
                cur >> RAMP_STEP_SHIFT,
                (cur >> RAMP_SHARE_SHIFT) & ((1 << 20) - 1),
                cur & RAMP_COUNT_MAX,
            );
            let (new, share, n) = if step == i {
                (cur + u64::from(n < RAMP_COUNT_MAX), share, n)
            } else if step < i {
                // The first call of a new step computes its share.
                let share = self.config().share_ppm(i as u32);
                (
                    i << RAMP_STEP_SHIFT | share << RAMP_SHARE_SHIFT | 1,
                    share,
                    0,
                )
            } else {
                // A newer step is in place (this reading is old): judge by it.
                (cur + u64::from(n < RAMP_COUNT_MAX), share, n)
            };
            match self.step.compare_exchange(cur, new, r, r) {
                Ok(_) => return Some((n + 1) * share / 1_000_000 > n * share / 1_000_000),
                Err(actual) => cur = actual,
            }
        }
    }
}

pub(crate) struct Inner<C> {
    word: AtomicU64,
    open_until: AtomicU64,
    hot: Hot,
    window: Window,
    next_inflight_check: AtomicU64,
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
    cold: OnceBox<Cold>,
    /// The state gauges of the `metrics` feature, kept current by every transition.
    #[cfg(feature = "metrics")]
    state_gauges: OnceBox<crate::observe::StateGauges>,
}

/// What happened to a recorded result.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, Outcome, Recorded};
///
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// let permit = breaker.try_acquire().unwrap();
/// breaker.reset(); // a transition: the permit's generation is now old
/// assert_eq!(permit.record(Outcome::Success), Recorded::Stale);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The result counted.
    Counted,
    /// The outcome was `Ignored`: nothing was recorded.
    Ignored,
    /// The result belonged to an older generation (or to a probe whose lease had expired and
    /// been reclaimed) and was discarded.
    Stale,
    /// The breaker is Disabled and records nothing.
    Disabled,
    /// A failure within the lumping interval of the last counted one: counted in the metrics,
    /// not in the window.
    Lumped,
}

impl Recorded {
    /// Whether the result counted.
    pub fn counted(self) -> bool {
        self == Recorded::Counted
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Window { cohort: Cohort, lane: u32 },
    Probe { slot: u32, token: u64 },
    Passthrough,
}

/// What a permit is: its generation, start time and kind. Shared by [`Permit`] and
/// [`OwnedPermit`].
#[derive(Clone, Copy, Debug)]
struct Ticket {
    generation: u64,
    started: u64,
    kind: Kind,
}

/// The right to make one call. Record its outcome with [`Permit::record`]; a permit dropped
/// without a result (a cancelled future, a panic) is counted as abandoned and gives back its
/// half-open probe slot, never counting as a success or a failure.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker};
///
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// drop(breaker.try_acquire().unwrap());
/// assert_eq!(breaker.metrics().abandoned_permits, 1);
/// ```
#[must_use = "record the call's outcome, or the permit counts as abandoned"]
pub struct Permit<'a, C: Clock = MonotonicClock> {
    inner: &'a Inner<C>,
    ticket: Ticket,
    done: bool,
}

/// A [`Permit`] that owns a handle to its breaker, so it can live in a `'static` future or a
/// struct beside the breaker (tower's `ResponseFuture`). Costs one reference-count increment
/// more than a [`Permit`]; no allocation.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, Outcome};
///
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// let permit = breaker.try_acquire_owned().unwrap();
/// let handle = std::thread::spawn(move || permit.record(Outcome::Success));
/// assert!(handle.join().unwrap().counted());
/// ```
#[must_use = "record the call's outcome, or the permit counts as abandoned"]
pub struct OwnedPermit<C: Clock = MonotonicClock> {
    inner: Arc<Inner<C>>,
    ticket: Ticket,
    done: bool,
}

macro_rules! permit_methods {
    () => {
        /// Records the call's outcome.
        pub fn record(self, outcome: Outcome) -> Recorded {
            self.record_classified(Classification::new(outcome))
        }

        /// Records a classification, with its optional `Retry-After` hint and failure kind.
        pub fn record_classified(mut self, c: Classification) -> Recorded {
            self.done = true;
            self.inner.settle(self.ticket, c, None)
        }

        /// Records an outcome or a classification with the call's duration as the caller
        /// measured it (an HTTP client's own timing, a batched job), instead of the time since
        /// the permit was granted. The duration decides whether the call was slow; the result
        /// still lands in the window at the time it is recorded.
        ///
        /// ```
        /// use std::time::Duration;
        /// use tripline::{BreakerConfig, CircuitBreaker};
        ///
        /// let config = BreakerConfig::builder().slow_call_duration(Duration::from_secs(2)).build()?;
        /// let breaker = CircuitBreaker::new("batch", config);
        /// let permit = breaker.try_acquire().unwrap();
        /// permit.record_with_duration(tripline::Outcome::Success, Duration::from_secs(3));
        /// assert_eq!(breaker.metrics().slow_successful_calls, 1);
        /// # Ok::<(), tripline::ConfigError>(())
        /// ```
        pub fn record_with_duration(
            mut self,
            c: impl Into<Classification>,
            duration: Duration,
        ) -> Recorded {
            self.done = true;
            self.inner
                .settle(self.ticket, c.into(), Some(nanos(duration)))
        }

        /// The generation this permit was granted in.
        pub fn generation(&self) -> u64 {
            self.ticket.generation
        }

        /// Whether this is a half-open probe.
        pub fn is_probe(&self) -> bool {
            matches!(self.ticket.kind, Kind::Probe { .. })
        }

        /// Time since the permit was granted, on the breaker's clock (zero for a breaker that
        /// does not time its calls: see [`BreakerConfig::needs_time`]).
        pub fn elapsed(&self) -> Duration {
            Duration::from_nanos(self.inner.clock.now().saturating_sub(self.ticket.started))
        }
    };
}

impl<C: Clock> Permit<'_, C> {
    permit_methods!();
}

impl<C: Clock> OwnedPermit<C> {
    permit_methods!();
}

impl<C: Clock> std::fmt::Debug for Permit<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("breaker", &self.inner.name)
            .field("generation", &self.ticket.generation)
            .field("probe", &self.is_probe())
            .finish()
    }
}

impl<C: Clock> std::fmt::Debug for OwnedPermit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedPermit")
            .field("breaker", &self.inner.name)
            .field("generation", &self.ticket.generation)
            .field("probe", &self.is_probe())
            .finish()
    }
}

impl<C: Clock> Drop for Permit<'_, C> {
    fn drop(&mut self) {
        if !self.done {
            self.inner.abandon(self.ticket.generation, self.ticket.kind);
        }
    }
}

impl<C: Clock> Drop for OwnedPermit<C> {
    fn drop(&mut self) {
        if !self.done {
            self.inner.abandon(self.ticket.generation, self.ticket.kind);
        }
    }
}

/// Refused calls by the state that refused them (resilience4j's "not permitted calls", per
/// state).
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, State};
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// breaker.force_open();
/// let _ = breaker.try_acquire();
/// assert_eq!(breaker.metrics().rejections.in_state(State::ForcedOpen), 1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Rejections {
    /// Refused while Open.
    pub open: u64,
    /// Refused while HalfOpen, every probe slot taken.
    pub half_open: u64,
    /// Refused while ForcedOpen.
    pub forced_open: u64,
    /// Refused while Closed, ramping traffic back up after recovery
    /// ([`RampUp`](crate::RampUp)).
    pub ramping_up: u64,
}

impl Rejections {
    /// Refusals in `state` (0 for the states that never refuse).
    pub fn in_state(&self, state: State) -> u64 {
        match state {
            State::Open => self.open,
            State::HalfOpen => self.half_open,
            State::ForcedOpen => self.forced_open,
            State::Closed => self.ramping_up,
            _ => 0,
        }
    }

    /// All refusals.
    pub fn total(&self) -> u64 {
        self.open + self.half_open + self.forced_open + self.ramping_up
    }
}

/// The probes of the current half-open round (all zero in other states).
///
/// ```
/// use tripline::ProbeCounts;
/// assert_eq!(ProbeCounts::default().admitted, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ProbeCounts {
    /// Probes admitted in this round (expired, abandoned and ignored ones included).
    pub admitted: u32,
    /// Probes in flight now.
    pub in_flight: u32,
    /// Probe results that were successes (slow ones included).
    pub succeeded: u32,
    /// Probe results that were failures.
    pub failed: u32,
    /// Probe results that were slow (successful or not).
    pub slow: u32,
}

/// Failures by [`FailureKind`], counted whatever the kind's weight.
///
/// ```
/// use tripline::{KindCounts, FailureKind};
/// assert_eq!(KindCounts::default().get(FailureKind::Timeout), 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCounts([u64; 7]);

impl KindCounts {
    /// Failures of `kind`.
    pub fn get(&self, kind: FailureKind) -> u64 {
        self.0[kind.index()]
    }

    /// Every kind with its count, in [`FailureKind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (FailureKind, u64)> + '_ {
        FailureKind::ALL.into_iter().map(|k| (k, self.get(k)))
    }

    /// Failures that carried a kind.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for KindCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(7))?;
        for (k, n) in self.iter() {
            m.serialize_entry(k.as_str(), &n)?;
        }
        m.end()
    }
}

/// A snapshot of a breaker's state and counters since creation.
///
/// The counters (`*_calls`, `rejections`, `failures_by_kind`, ...) count since the breaker was
/// made; the window, its rates and durations, the runs of consecutive outcomes and the probe
/// counts describe now.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, State};
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// let _ = breaker.call(|| Err::<(), _>("boom"));
/// let m = breaker.metrics();
/// assert_eq!((m.state, m.failed_calls, m.window.failures), (State::Closed, 1, 1));
/// // One call is below the default minimum of 20: the rates are not evaluated yet.
/// assert_eq!(m.failure_rate, None);
/// assert_eq!(m.consecutive_failures, 1);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Metrics {
    /// Current state.
    pub state: State,
    /// Current generation.
    pub generation: u64,
    /// The closed window now, with overdue in-flight calls.
    pub window: WindowSnapshot,
    /// The window's failure rate in percent, or `None` while it holds fewer than the minimum
    /// calls: not yet evaluated (resilience4j reports -1 there), which is not the same as 0.
    pub failure_rate: Option<f64>,
    /// The window's slow-call rate in percent (overdue in-flight calls included), or `None`
    /// below the minimum calls.
    pub slow_call_rate: Option<f64>,
    /// The total duration of the window's calls (`None` unless `call_durations` is on). A
    /// weighted failure counts its duration once per outcome it adds.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub total_duration: Option<Duration>,
    /// The mean duration of the window's calls (`None` unless `call_durations` is on and the
    /// window holds a call).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub mean_duration: Option<Duration>,
    /// Calls recorded as successes (slow ones included).
    pub successful_calls: u64,
    /// Calls recorded as failures (lumped ones included).
    pub failed_calls: u64,
    /// Calls recorded as slow (successful or not): `slow_successful_calls + slow_failed_calls`.
    pub slow_calls: u64,
    /// Successful calls that were slow.
    pub slow_successful_calls: u64,
    /// Failed calls that were slow.
    pub slow_failed_calls: u64,
    /// Calls whose outcome was ignored (failures of a kind weighing 0 included).
    pub ignored_calls: u64,
    /// Failures by the kind their classifier gave.
    pub failures_by_kind: KindCounts,
    /// Failures lumped into an earlier one (`lumping_interval`).
    pub lumped_failures: u64,
    /// The current run of failures since the last success or state change (a weighted
    /// failure adds its weight; a lumped one adds nothing: it counts once with the failure it
    /// was lumped into).
    pub consecutive_failures: u64,
    /// The current run of successes since the last failure (lumped ones included) or state
    /// change (approximate while results race each other).
    pub consecutive_successes: u64,
    /// Calls the breaker refused: `rejections.total()`.
    pub rejected_calls: u64,
    /// Calls the breaker refused, by state.
    pub rejections: Rejections,
    /// The current half-open round.
    pub probes: ProbeCounts,
    /// Results discarded because their generation (or probe lease) was old.
    pub stale_results: u64,
    /// Permits dropped without a result.
    pub abandoned_permits: u64,
    /// Probe leases that expired and were reclaimed.
    pub expired_probes: u64,
    /// Transitions so far.
    pub transitions: u64,
    /// Probes in flight now.
    pub probes_in_flight: u32,
    /// Time spent Open or ForcedOpen.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub time_open: Duration,
    /// Time spent HalfOpen.
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub time_half_open: Duration,
    /// Time since the breaker entered its current state (since its creation when it never
    /// left Closed).
    #[cfg_attr(feature = "serde", serde(with = "humantime_serde"))]
    pub time_in_state: Duration,
    /// Listener panics caught.
    pub listener_panics: u64,
}

impl CircuitBreaker<MonotonicClock> {
    /// A breaker on the production clock: the coarse (millisecond) one where the configuration
    /// allows it, as the defaults do, else the precise one ([`MonotonicClock::for_config`]). The
    /// coarse clock's readings are refreshed by one process-wide background thread, started by
    /// the first breaker that needs it. Use [`with_clock`](Self::with_clock) to choose.
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
    /// A breaker on the given clock.
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
        let now = clock.now();
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
        let lanes = (config.stripes > 1).then(|| {
            Box::new(Lanes(
                (0..config.stripes)
                    .map(|_| PaddedLane(Lane::new(slow_nanos)))
                    .collect(),
            ))
        });
        let inner = Inner {
            word: AtomicU64::new(Word::new(State::Closed, 0).0),
            open_until: AtomicU64::new(0),
            hot: Hot::new(&config),
            window,
            next_inflight_check: AtomicU64::new(now.saturating_add(lane.inflight.width())),
            closed_since: AtomicU64::new(now),
            closed_generation: AtomicU64::new(0),
            lane,
            lanes,
            name: name.into(),
            clock,
            config,
            cold: OnceBox::new(),
            #[cfg(feature = "metrics")]
            state_gauges: OnceBox::new(),
        };
        // loom cannot see through `OnceBox`'s std atomics, so under the model checker the cold
        // part exists before the breaker is shared; its lazy publication is once_cell's.
        #[cfg(loom)]
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
        Word(self.inner.word.load(Ordering::Acquire)).state()
    }

    /// The current generation (bumped by every transition).
    pub fn generation(&self) -> u64 {
        Word(self.inner.word.load(Ordering::Acquire)).generation()
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
        Ok(Permit {
            inner: &self.inner,
            ticket,
            done: false,
        })
    }

    /// [`try_acquire`](Self::try_acquire), returning a permit that owns a handle to the
    /// breaker (for `'static` futures and tower services).
    #[inline]
    pub fn try_acquire_owned(&self) -> Result<OwnedPermit<C>, Rejected> {
        let ticket = self.inner.acquire()?;
        Ok(OwnedPermit {
            inner: self.inner.clone(),
            ticket,
            done: false,
        })
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

    /// A snapshot of the state and counters.
    pub fn metrics(&self) -> Metrics {
        let inner = &*self.inner;
        let r = Ordering::Relaxed;
        let sum = |f: fn(&Lane) -> &AtomicU64| inner.lanes().map(|l| f(l).load(r)).sum();
        let rejections = Rejections {
            open: sum(|l| &l.rejected[0]),
            half_open: inner.cold.get().map_or(0, |c| c.half_open_rejected.load(r)),
            forced_open: sum(|l| &l.rejected[1]),
            ramping_up: inner.cold.get().map_or(0, |c| c.ramp.rejected.load(r)),
        };
        let slow_successful_calls = sum(|l| &l.slow_successes);
        let slow_failed_calls = sum(|l| &l.slow_failures);
        let mut m = Metrics {
            state: State::Closed,
            generation: 0,
            window: WindowSnapshot::default(),
            failure_rate: None,
            slow_call_rate: None,
            total_duration: None,
            mean_duration: None,
            successful_calls: sum(|l| &l.successes),
            failed_calls: sum(|l| &l.failures),
            slow_calls: slow_successful_calls + slow_failed_calls,
            slow_successful_calls,
            slow_failed_calls,
            ignored_calls: sum(|l| &l.ignored),
            failures_by_kind: KindCounts::default(),
            lumped_failures: 0,
            consecutive_failures: 0,
            consecutive_successes: 0,
            rejected_calls: rejections.total(),
            rejections,
            probes: ProbeCounts::default(),
            stale_results: 0,
            abandoned_permits: sum(|l| &l.abandoned),
            expired_probes: 0,
            transitions: 0,
            probes_in_flight: 0,
            time_open: Duration::ZERO,
            time_half_open: Duration::ZERO,
            time_in_state: Duration::ZERO,
            listener_panics: 0,
        };
        // The word first: if the cold part is missing after it was read, no transition had
        // happened by then (Closed, generation 0, no time elsewhere); if it exists, the word is
        // read again under the core lock, consistent with the core's figures.
        let mut word = Word(inner.word.load(Ordering::Acquire));
        let core = inner.cold.get().map(|cold| {
            m.stale_results = cold.stale.load(r);
            m.expired_probes = cold.expired_probes.load(r);
            m.listener_panics = cold.hub.listener_panics.load(r);
            m.lumped_failures = cold.lumped.load(r);
            m.failures_by_kind = KindCounts(std::array::from_fn(|i| cold.kind_failures[i].load(r)));
            let core = lock(&cold.core);
            word = Word(inner.word.load(Ordering::Acquire));
            core
        });
        let now = inner.clock.now();
        (m.state, m.generation) = (word.state(), word.generation());
        let closed_generation = inner.closed_generation.load(Ordering::Acquire);
        m.window = inner.snapshot_of(closed_generation, now);
        let min = u64::from(inner.hot.minimum_calls.load(r).max(1));
        if m.window.calls >= min {
            m.failure_rate = Some(m.window.failure_rate());
        }
        if m.window.total() >= min {
            m.slow_call_rate = Some(m.window.slow_rate());
        }
        if let Some(d) = inner.window.durations(closed_generation, now) {
            let us = |n: u64| Duration::from_micros(n);
            if d.calls == 0 || m.window.calls == 0 {
                m.total_duration = Some(Duration::ZERO);
            } else {
                let mean = d.micros / d.calls;
                m.mean_duration = Some(us(mean));
                // A time bucket whose durations were halved keeps their mean, not their sum.
                m.total_duration = Some(us(if d.calls == m.window.calls {
                    d.micros
                } else {
                    mean.saturating_mul(m.window.calls)
                }));
            }
        }
        m.consecutive_failures = inner.hot.consecutive_failures(word.generation());
        if m.consecutive_failures == 0 {
            m.consecutive_successes = m
                .successful_calls
                .saturating_sub(inner.hot.success_mark.load(r));
        }
        // Without the cold part the breaker never left Closed: in it since its creation.
        m.time_in_state =
            Duration::from_nanos(now.saturating_sub(inner.closed_since.load(Ordering::Relaxed)));
        if let Some(core) = core {
            let current = now.saturating_sub(core.entered_at);
            m.time_in_state = Duration::from_nanos(current);
            let time_in =
                |s: State| core.time_in[s as usize] + if word.state() == s { current } else { 0 };
            m.transitions = core.transitions;
            if word.state() == State::HalfOpen {
                let round = &core.round;
                m.probes_in_flight = round.in_flight() as u32;
                m.probes = ProbeCounts {
                    admitted: round.admitted,
                    in_flight: m.probes_in_flight,
                    succeeded: round.results - round.failures,
                    failed: round.failures,
                    slow: round.slow,
                };
            }
            m.time_open = Duration::from_nanos(time_in(State::Open) + time_in(State::ForcedOpen));
            m.time_half_open = Duration::from_nanos(time_in(State::HalfOpen));
        }
        m
    }

    /// Subscribes a listener. It first receives [`EventKind::Initial`] with the current state,
    /// then every later event in order.
    pub fn subscribe(&self, listener: impl Listener) {
        let inner = &*self.inner;
        if listener.wants_outcome_events() {
            // Outcome events carry durations: time every call from now on.
            inner
                .hot
                .timed
                .fetch_or(TIMED_FOR_LISTENERS, Ordering::Relaxed);
        }
        let cold = inner.cold();
        {
            let _core = lock(&cold.core);
            let word = Word(inner.word.load(Ordering::Acquire));
            cold.hub.subscribe(
                Arc::new(listener),
                inner.clock.now(),
                &inner.name,
                EventKind::Initial {
                    state: word.state(),
                    generation: word.generation(),
                },
            );
        }
        cold.hub.dispatch();
    }

    /// Operator: reject every call until told otherwise (kill switch).
    pub fn force_open(&self) {
        self.inner.operator(State::ForcedOpen);
    }

    /// Operator: permit every call and record nothing.
    pub fn disable(&self) {
        self.inner.operator(State::Disabled);
    }

    /// Operator: permit and record every call, report when the rules would trip, never trip
    /// (shadow mode, for tuning thresholds). Entering MetricsOnly starts a fresh window; called
    /// while already MetricsOnly it changes nothing (the window stays).
    pub fn metrics_only(&self) {
        self.inner.operator(State::MetricsOnly);
    }

    /// Operator: back to Closed with a fresh window, whatever the state.
    pub fn reset(&self) {
        self.inner.operator(State::Closed);
    }

    /// Drives timers: moves Open to HalfOpen when the wait has elapsed (if
    /// `half_open.automatic_transition` is on) and HalfOpen back to Open when its maximum wait
    /// has passed. Returns the time until the next timer is due, if any. Call it from a timer
    /// of your own, or use `run_timer` (feature `tokio`).
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker, ManualClock, State};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let config = BreakerConfig::builder()
    ///     .automatic_transition(true)
    ///     .open_duration(Duration::from_secs(10))
    ///     .build()?;
    /// let breaker = CircuitBreaker::with_clock("db", config, clock.clone());
    /// breaker.trip();
    /// assert_eq!(breaker.tick(), Some(Duration::from_secs(10)));
    /// clock.advance(Duration::from_secs(10));
    /// breaker.tick();
    /// assert_eq!(breaker.state(), State::HalfOpen);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn tick(&self) -> Option<Duration> {
        let inner = &*self.inner;
        let now = inner.clock.now();
        let word = Word(inner.word.load(Ordering::Acquire));
        match word.state() {
            State::Open => {
                let auto = lock(&inner.cold().core).config.automatic_transition;
                if auto && now >= inner.open_until.load(Ordering::Acquire) {
                    inner.open_to_half_open(word, now);
                }
            }
            State::HalfOpen => {
                let cold = inner.cold();
                let mut core = lock(&cold.core);
                if Word(inner.word.load(Ordering::Acquire)) == word
                    && core
                        .config
                        .half_open_max_wait
                        .is_some_and(|w| now >= core.half_open_since.saturating_add(nanos(w)))
                {
                    let to = after_max_wait(&core.config);
                    let snap = inner.snapshot(now);
                    inner.transition(
                        &mut core,
                        word,
                        to,
                        Reason::HalfOpenTimeout,
                        snap,
                        now,
                        OpenWait::RULES,
                    );
                }
                drop(core);
                cold.hub.dispatch();
            }
            _ => {}
        }
        self.next_deadline()
    }

    /// Time until the next timer-driven transition is due, if one is scheduled.
    pub fn next_deadline(&self) -> Option<Duration> {
        let inner = &*self.inner;
        // Without the cold part the breaker has never left Closed.
        let core = lock(&inner.cold.get()?.core);
        let now = inner.clock.now();
        let word = Word(inner.word.load(Ordering::Acquire));
        match word.state() {
            State::Open if core.config.automatic_transition => Some(Duration::from_nanos(
                inner.open_until.load(Ordering::Acquire).saturating_sub(now),
            )),
            State::HalfOpen => core.config.half_open_max_wait.map(|w| {
                Duration::from_nanos(
                    core.half_open_since
                        .saturating_add(nanos(w))
                        .saturating_sub(now),
                )
            }),
            _ => None,
        }
    }

    /// Trips the breaker now, as if the rules had fired (Closed or MetricsOnly to Open;
    /// no effect in other states). For tests and for callers with out-of-band evidence.
    pub fn trip(&self) {
        let inner = &*self.inner;
        let now = inner.clock.now();
        let cold = inner.cold();
        let mut core = lock(&cold.core);
        let word = Word(inner.word.load(Ordering::Acquire));
        if matches!(word.state(), State::Closed | State::MetricsOnly) {
            let snap = inner.snapshot(now);
            inner.transition(
                &mut core,
                word,
                State::Open,
                Reason::Operator,
                snap,
                now,
                OpenWait::RULES,
            );
        }
        drop(core);
        cold.hub.dispatch();
    }

    /// Replaces the configuration, keeping state, generation and window. The window's shape
    /// (kind, size, length, bucket, stripes) is fixed for a breaker's life: a configuration
    /// that changes it is refused, and the breaker is left untouched. A Closed breaker's
    /// window is judged at once by the new thresholds (lower ones may trip it then), and a
    /// waiting timer task (`run_timer`, feature `tokio`) follows the new schedule.
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker};
    /// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
    /// let looser = breaker.config().to_builder().failure_rate_threshold(80.0).build()?;
    /// breaker.reconfigure(looser)?;
    /// let other_shape = BreakerConfig::builder().count_window(10).minimum_calls(5).build()?;
    /// assert_eq!(breaker.reconfigure(other_shape).unwrap_err().field(), "window");
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn reconfigure(&self, config: impl Into<Arc<BreakerConfig>>) -> Result<(), ConfigError> {
        let config = config.into();
        config.validate()?;
        let inner = &*self.inner;
        let cold = inner.cold();
        let mut core = lock(&cold.core);
        if !config.same_shape(&core.config) {
            return Err(ConfigError::new(
                "window",
                config.shape(),
                format!(
                    "the live breaker's shape, {}; build a new breaker to change it",
                    core.config.shape()
                ),
            ));
        }
        let word = Word(inner.word.load(Ordering::Acquire));
        if word.state() == State::HalfOpen {
            // Probes already out keep their leases (and count against the new number); the
            // next claim decides a round that already has the results the new number asks for.
            let held = core
                .round
                .leases
                .iter()
                .rposition(Option::is_some)
                .map_or(0, |i| i + 1);
            core.round
                .leases
                .resize((config.half_open_calls as usize).max(held), None);
        }
        if config.slow_call_duration != core.config.slow_call_duration {
            let slow = nanos(config.slow_call_duration);
            let now = inner.clock.now();
            inner.lane.inflight.set_slow_call_duration(slow, now);
            for lane in inner.striped() {
                lane.inflight.set_slow_call_duration(slow, now);
            }
            // The acquire-time check follows the new cohort width from now.
            let next = inner
                .clock
                .now()
                .saturating_add(inner.lane.inflight.width());
            inner.next_inflight_check.store(next, Ordering::Relaxed);
        }
        cold.lump_nanos
            .store(config.lumping_interval.map_or(0, nanos), Ordering::Relaxed);
        if config.ramp_up.is_none() {
            // A ramp in progress ends with the setting.
            inner.hot.ramping.store(false, Ordering::Relaxed);
        }
        inner.hot.set(&config);
        core.config = config;
        let now = inner.clock.now();
        cold.hub.queue(
            now,
            &inner.name,
            EventKind::Reconfigured {
                generation: word.generation(),
            },
        );
        // Lower thresholds may condemn the window as it stands: evaluate it now rather than
        // wait for the next failure.
        if word.state() == State::Closed {
            if let Some((reason, snap)) = inner.trip_reason(word.generation(), now, None, true) {
                inner.transition(
                    &mut core,
                    word,
                    State::Open,
                    reason,
                    snap,
                    now,
                    OpenWait::RULES,
                );
            }
        }
        drop(core);
        cold.hub.dispatch();
        // The new configuration may schedule what the old one did not (automatic transition
        // turned on, a half-open max wait added): a timer waiting for the next transition
        // looks again.
        #[cfg(feature = "tokio")]
        cold.notify.notify_one();
        Ok(())
    }

    /// The shared part, for the other modules of the crate.
    pub(crate) fn inner(&self) -> &Inner<C> {
        &self.inner
    }

    /// Makes `gauges` follow every transition of this breaker from now on, showing the state
    /// now; `false` (and nothing changed) if other gauges already follow it.
    #[cfg(feature = "metrics")]
    pub(crate) fn attach_state_gauges(&self, gauges: &crate::observe::StateGauges) -> bool {
        let inner = &*self.inner;
        if inner.state_gauges.set(Box::new(gauges.clone())).is_err() {
            return false;
        }
        crate::sync::fence(Ordering::SeqCst);
        // A transition that missed the gauges published its word before looking: show the
        // state until it reads the same after showing it.
        loop {
            let s = self.state();
            gauges.show(s);
            if self.state() == s {
                return true;
            }
        }
    }

    /// Whether handles other than the caller's `holders` exist (a call in flight, a caller
    /// keeping one).
    pub(crate) fn in_use(&self, holders: usize) -> bool {
        Arc::strong_count(&self.inner) > holders
    }

    /// Whether a registry may drop this breaker: Closed, nothing bad in its window, no ramp
    /// running and no open backoff it still remembers, no call in
    /// flight through it, and no handle held outside the registry (`holders` is how many
    /// handles the caller itself holds).
    pub(crate) fn evictable(&self, holders: usize) -> bool {
        if Arc::strong_count(&self.inner) > holders || self.state() != State::Closed {
            return false;
        }
        let inner = &*self.inner;
        let now = inner.clock.now();
        let snap = inner.snapshot(now);
        if snap.failures != 0 || snap.slow_calls != 0 || snap.in_flight_slow != 0 {
            return false;
        }
        !self.remembers_recovery_at(now)
    }

    /// Whether this Closed breaker remembers more than its window: a ramp after recovery still
    /// running, or, with open backoff, a recent open period that makes the next one longer. A
    /// fresh breaker in its place would forget both.
    pub(crate) fn remembers_recovery(&self) -> bool {
        self.remembers_recovery_at(self.inner.clock.now())
    }

    fn remembers_recovery_at(&self, now: u64) -> bool {
        let inner = &*self.inner;
        let Some(cold) = inner.cold.get() else {
            return false;
        };
        let generation = Word(inner.word.load(Ordering::Acquire)).generation();
        if inner.hot.ramping.load(Ordering::Relaxed) && cold.ramp.running(generation, now) {
            return true;
        }
        let core = lock(&cold.core);
        core.ever_opened
            && core.config.open_backoff.is_some_and(|b| {
                now.saturating_sub(inner.closed_since.load(Ordering::Relaxed))
                    < nanos(b.healthy_after)
            })
    }

    /// Approximate bytes held by this breaker: the shared part, the window's heap, the name
    /// and, once allocated, the part transitions need. A configuration shared with other
    /// breakers (one `Arc<BreakerConfig>` passed to each) is not counted.
    pub fn memory_bytes(&self) -> usize {
        let inner = &*self.inner;
        // A configuration counts when this breaker holds every reference to it.
        let held = |c: &Arc<BreakerConfig>, refs: usize| {
            if Arc::strong_count(c) <= refs {
                std::mem::size_of::<BreakerConfig>()
            } else {
                0
            }
        };
        let (own_config, cold) = match inner.cold.get() {
            None => (held(&inner.config, 1), 0),
            Some(cold) => {
                let core = lock(&cold.core);
                let configs = if Arc::ptr_eq(&inner.config, &core.config) {
                    held(&inner.config, 2)
                } else {
                    held(&inner.config, 1) + held(&core.config, 1)
                };
                let leases = core.round.leases.capacity() * std::mem::size_of::<Option<Lease>>();
                (configs, std::mem::size_of::<Cold>() + leases)
            }
        };
        std::mem::size_of::<Inner<C>>()
            + inner.lanes.as_ref().map_or(0, |l| {
                std::mem::size_of::<Lanes>() + std::mem::size_of_val::<[PaddedLane]>(&l.0)
            })
            + inner.window.heap_bytes()
            + inner.name.len()
            + own_config
            + cold
    }
}

impl Cold {
    fn new(config: Arc<BreakerConfig>, created: u64) -> Self {
        let lump_nanos = config.lumping_interval.map_or(0, nanos);
        Self {
            core: Mutex::new(Core {
                // Probe leases are made on entering HalfOpen.
                round: Round::new(0),
                rng: config.seed.map(Pcg64Mcg::seed_from_u64),
                config,
                level: 0,
                ever_opened: false,
                entered_at: created,
                half_open_since: 0,
                next_token: 1,
                time_in: [0; 6],
                transitions: 0,
            }),
            hub: Hub::new(),
            stale: AtomicU64::new(0),
            expired_probes: AtomicU64::new(0),
            kind_failures: std::array::from_fn(|_| AtomicU64::new(0)),
            lumped: AtomicU64::new(0),
            half_open_rejected: AtomicU64::new(0),
            lump: AtomicU128::new(0),
            lump_nanos: AtomicU64::new(lump_nanos),
            ramp: Ramp::new(),
            would_trip: AtomicU64::new(0),
            #[cfg(feature = "tokio")]
            notify: tokio::sync::Notify::new(),
        }
    }
}

impl<C: Clock> Inner<C> {
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

    /// Whether a listener wants per-call events (none can before the cold part exists).
    #[inline]
    fn call_events(&self) -> Option<&Cold> {
        self.cold.get().filter(|c| c.hub.wants_call_events())
    }

    /// Records a permit's result; `elapsed` is the caller's own measure of the call, if given.
    fn settle(&self, t: Ticket, c: Classification, elapsed: Option<u64>) -> Recorded {
        let (recorded, now) = match t.kind {
            Kind::Passthrough => return Recorded::Disabled,
            Kind::Window { cohort, lane } => {
                self.lane_at(lane).inflight.exit(cohort, t.generation);
                // An untimed call (started at NO_TIME) took no measurable time.
                let (now, took) = if t.started == NO_TIME {
                    (NO_TIME, elapsed.unwrap_or(0))
                } else {
                    let now = self.clock.now();
                    (
                        now,
                        elapsed.unwrap_or_else(|| now.saturating_sub(t.started)),
                    )
                };
                (self.record_window(t.generation, took, now, c), now)
            }
            Kind::Probe { slot, token } => {
                let now = self.clock.now();
                (
                    self.record_probe(
                        t.generation,
                        slot,
                        token,
                        now,
                        elapsed.unwrap_or_else(|| now.saturating_sub(t.started)),
                        c,
                    ),
                    now,
                )
            }
        };
        // One atomic load when no listener wants outcomes (none can before the cold part).
        if let Some(cold) = self.cold.get().filter(|c| c.hub.wants_outcome_events()) {
            let now = self.real_now(now);
            self.outcome_event(cold, t, now, elapsed, c.outcome, recorded);
        }
        recorded
    }

    #[cold]
    fn outcome_event(
        &self,
        cold: &Cold,
        t: Ticket,
        now: u64,
        took: Option<u64>,
        outcome: Outcome,
        r: Recorded,
    ) {
        // The caller's own measure of the call when it gave one (an untimed call, admitted
        // before a listener asked for outcomes, reports none). The failure's kind is in the
        // classification (`c.kind`) at the call site, for an event that carries it.
        let elapsed = took.unwrap_or_else(|| {
            if t.started == NO_TIME {
                0
            } else {
                now.saturating_sub(t.started)
            }
        });
        cold.hub.outcome_event(
            now,
            &self.name,
            EventKind::CallOutcome {
                outcome,
                duration: Duration::from_nanos(elapsed),
                slow: elapsed > self.hot.slow_nanos.load(Ordering::Relaxed),
                generation: t.generation,
                probe: matches!(t.kind, Kind::Probe { .. }),
                counted: r == Recorded::Counted,
            },
        );
    }

    /// Counts a failure of `kind` in the metrics.
    #[cold]
    fn count_kind(&self, kind: FailureKind) {
        self.cold().kind_failures[kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Whether a failure of `generation` at `now` falls within the lumping interval of the last
    /// counted one (and so counts only in the metrics); if not, it becomes the last counted one.
    #[cold]
    fn lumped(&self, generation: u64, now: u64) -> bool {
        let cold = self.cold();
        let interval = cold.lump_nanos.load(Ordering::Relaxed);
        let lump = &cold.lump;
        let mut cur = lump.load(Ordering::Relaxed);
        loop {
            // `at` is the time plus one (saturating), so 0 says "none counted yet".
            let (g, at) = ((cur >> 64) as u64, cur as u64);
            if g == generation && at != 0 && now >= at - 1 && now - (at - 1) < interval {
                return true;
            }
            // A newer generation's interval is not this failure's to move: its result is stale
            // and the window will say so.
            if g > generation {
                return false;
            }
            let new = u128::from(generation) << 64 | u128::from(now.saturating_add(1));
            match lump.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return false,
                Err(actual) => cur = actual,
            }
        }
    }

    /// What a failure weighs, or how it was recorded instead of counting in the window (its
    /// kind weighs 0, or it is lumped into an earlier one).
    #[inline(never)]
    fn admit_failure(
        &self,
        generation: u64,
        now: u64,
        kind: Option<FailureKind>,
        slow: bool,
    ) -> Result<u32, Recorded> {
        let mut weight = 1;
        if let Some(kind) = kind {
            weight = self.hot.weight(kind);
            if weight == 0 {
                self.count_kind(kind);
                self.lane().1.count(Outcome::Ignored, slow);
                return Err(Recorded::Ignored);
            }
        }
        if self.hot.failure_rules.load(Ordering::Relaxed) & LUMPING != 0
            && self.lumped(generation, now)
        {
            if let Some(kind) = kind {
                self.count_kind(kind);
            }
            self.cold().lumped.fetch_add(1, Ordering::Relaxed);
            self.lane().1.count(Outcome::Failure, slow);
            // It counts once with the earlier failure, but it is the latest result: the run
            // of successes is over.
            self.hot
                .success_mark
                .store(self.successes(), Ordering::Relaxed);
            return Err(Recorded::Lumped);
        }
        Ok(weight)
    }

    /// After a failure landed in the window: its further outcomes if it weighs more than one
    /// (a reset meanwhile ends them), its kind, the run of failures. Returns the run if the
    /// consecutive rule fires.
    #[inline(never)]
    fn counted_failure(
        &self,
        generation: u64,
        now: u64,
        sample: Sample,
        weight: u32,
        kind: Option<FailureKind>,
    ) -> Option<u64> {
        for _ in 1..weight {
            if self.window.record(generation, now, sample).is_none() {
                break;
            }
        }
        if let Some(kind) = kind {
            self.count_kind(kind);
        }
        let n = self.hot.consecutive_failure(generation, weight);
        self.hot
            .success_mark
            .store(self.successes(), Ordering::Relaxed);
        let limit = self.hot.consecutive_limit.load(Ordering::Relaxed);
        (limit != 0 && n >= limit).then_some(u64::from(n))
    }

    /// Successes counted so far (every lane).
    fn successes(&self) -> u64 {
        self.lanes()
            .map(|l| l.successes.load(Ordering::Relaxed))
            .sum()
    }

    #[inline]
    fn acquire(&self) -> Result<Ticket, Rejected> {
        loop {
            let word = Word(self.word.load(Ordering::Acquire));
            match word.state() {
                State::Closed | State::MetricsOnly => {
                    // A count window judged by its failure rate alone reads no clock.
                    let mut now = if self.hot.timed.load(Ordering::Relaxed) != 0 {
                        self.clock.now()
                    } else {
                        NO_TIME
                    };
                    if self.hot.ramping.load(Ordering::Relaxed) {
                        now = self.real_now(now);
                        if !self.ramp_admits(word, now) {
                            return Err(self.ramp_reject(now));
                        }
                    }
                    let mut cohort = Cohort::NONE;
                    let mut lane = 0;
                    if self.hot.in_flight.load(Ordering::Relaxed) {
                        // In flight needs the time (a reconfiguration may have turned it on
                        // between the two loads).
                        now = self.real_now(now);
                        if now >= self.next_inflight_check.load(Ordering::Relaxed)
                            && self.check_in_flight(word, now)
                        {
                            continue;
                        }
                        let l;
                        (lane, l) = self.lane();
                        cohort = l.inflight.enter(now, word.generation());
                    }
                    return Ok(Ticket {
                        generation: word.generation(),
                        started: now,
                        kind: Kind::Window { cohort, lane },
                    });
                }
                State::Open => {
                    let now = self.clock.recent();
                    let until = self.open_until.load(Ordering::Acquire);
                    if now < until {
                        return Err(self.reject::<0>(Some(until - now), now));
                    }
                    self.open_to_half_open(word, self.clock.now());
                }
                State::HalfOpen => {
                    if let Some(r) = self.claim_probe(word) {
                        return r;
                    }
                }
                State::Disabled => {
                    return Ok(Ticket {
                        generation: word.generation(),
                        started: 0,
                        kind: Kind::Passthrough,
                    });
                }
                State::ForcedOpen => {
                    return Err(self.reject::<2>(None, self.clock.recent()));
                }
            }
        }
    }

    /// The window of the last entry into Closed (or MetricsOnly) with its overdue in-flight
    /// calls: the current window while Closed, the one that tripped while Open.
    fn snapshot(&self, now: u64) -> WindowSnapshot {
        self.snapshot_of(self.closed_generation.load(Ordering::Acquire), now)
    }

    /// `generation`'s window and overdue in-flight calls (empty for a generation that is not
    /// the window's).
    fn snapshot_of(&self, generation: u64, now: u64) -> WindowSnapshot {
        let mut snap = self.window.snapshot(generation, now);
        if self.hot.in_flight.load(Ordering::Relaxed) {
            let slow = self.hot.slow_nanos.load(Ordering::Relaxed);
            snap.in_flight_slow = self
                .lanes()
                .map(|l| l.inflight.overdue(now, slow, generation))
                .sum();
        }
        snap
    }

    /// A refusal by the state of slot `SLOT` of `Lane::rejected` (Open 0, HalfOpen 1,
    /// ForcedOpen 2); the slot is a constant, so the counter, the state and the reason cost
    /// nothing to find.
    #[cold]
    fn reject<const SLOT: usize>(&self, retry_after: Option<u64>, now: u64) -> Rejected {
        const STATES: [State; 3] = [State::Open, State::HalfOpen, State::ForcedOpen];
        let state = STATES[SLOT];
        let reason = RejectReason::of_state(state);
        match SLOT {
            1 => self
                .cold()
                .half_open_rejected
                .fetch_add(1, Ordering::Relaxed),
            _ => self.lane().1.rejected[SLOT / 2].fetch_add(1, Ordering::Relaxed),
        };
        let retry_after = retry_after.map(Duration::from_nanos);
        if let Some(cold) = self.call_events() {
            Self::rejection_event(cold, &self.name, state, reason, retry_after, now);
        }
        Rejected {
            breaker: self.name.clone(),
            state,
            reason,
            retry_after,
        }
    }

    /// Whether a ramping breaker admits a call now; ends the ramp once it is over.
    #[cold]
    #[inline(never)]
    fn ramp_admits(&self, word: Word, now: u64) -> bool {
        let Some(cold) = self.cold.get() else {
            return true;
        };
        match cold.ramp.admits(word.generation(), now) {
            Some(admit) => admit,
            None => {
                if word.state() == State::Closed {
                    // Over (or another generation's): full traffic from now on.
                    let core = lock(&cold.core);
                    if Word(self.word.load(Ordering::Acquire)) == word {
                        self.hot.ramping.store(false, Ordering::Relaxed);
                    }
                    drop(core);
                }
                true
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn ramp_reject(&self, now: u64) -> Rejected {
        let cold = self.cold();
        cold.ramp.rejected.fetch_add(1, Ordering::Relaxed);
        let reason = RejectReason::RampingUp;
        if let Some(cold) = self.call_events() {
            Self::rejection_event(cold, &self.name, State::Closed, reason, None, now);
        }
        Rejected {
            breaker: self.name.clone(),
            state: State::Closed,
            reason,
            retry_after: None,
        }
    }

    #[cold]
    #[inline(never)]
    fn rejection_event(
        cold: &Cold,
        name: &BreakerName,
        state: State,
        reason: RejectReason,
        retry_after: Option<Duration>,
        now: u64,
    ) {
        cold.hub.call_event(
            now,
            name,
            EventKind::Rejected {
                state,
                reason,
                retry_after,
            },
        );
    }

    fn stale(&self, permit_generation: u64, now: u64) -> Recorded {
        // A result is stale only after a transition, so the cold part exists.
        let cold = self.cold();
        cold.stale.fetch_add(1, Ordering::Relaxed);
        if cold.hub.wants_call_events() {
            let generation = Word(self.word.load(Ordering::Acquire)).generation();
            cold.hub.call_event(
                now,
                &self.name,
                EventKind::StaleResult {
                    permit_generation,
                    generation,
                },
            );
        }
        Recorded::Stale
    }

    /// Every rule that fires on `generation`'s window now, and the window. The failure rate is
    /// over recorded calls; the slow-call rate also counts overdue in-flight calls (when
    /// `with_in_flight` and enabled); `consecutive` is the run of failures, if the rule fired.
    fn rules(
        &self,
        generation: u64,
        now: u64,
        consecutive: Option<u64>,
        with_in_flight: bool,
    ) -> (Rules, WindowSnapshot) {
        let snap = if with_in_flight {
            self.snapshot_of(generation, now)
        } else {
            self.window.snapshot(generation, now)
        };
        let mut fired = 0;
        if consecutive.is_some() {
            fired |= Rules::CONSECUTIVE;
        }
        let min = u64::from(self.hot.minimum_calls.load(Ordering::Relaxed).max(1));
        if let Window::Time(w) = &self.window {
            w.evaluated(generation, snap.calls < min);
        }
        if snap.calls >= min && snap.failures * PPM >= self.hot.failure_ppm() * snap.calls {
            fired |= Rules::FAILURE_RATE;
        }
        let total = snap.total();
        if total >= min
            && (snap.slow_calls + snap.in_flight_slow) * PPM >= self.hot.slow_ppm() * total
        {
            fired |= Rules::SLOW_CALL_RATE;
        }
        (Rules(fired), snap)
    }

    /// The first rule that trips now (consecutive failures, then the failure rate, then the
    /// slow-call rate), with the window behind it.
    fn trip_reason(
        &self,
        generation: u64,
        now: u64,
        consecutive: Option<u64>,
        with_in_flight: bool,
    ) -> Option<(Reason, WindowSnapshot)> {
        let (fired, snap) = self.rules(generation, now, consecutive, with_in_flight);
        fired.first(consecutive).map(|reason| (reason, snap))
    }

    /// Whether a good result should evaluate the rules: it can trip only by bringing the window
    /// to the minimum calls (a count window still filling; a time window whose last evaluation
    /// saw fewer than the minimum), or, for a time window, after old buckets expired (checked
    /// at most once per bucket, by the first result past each bucket boundary).
    #[inline]
    fn evaluate_on_success(&self, filling: bool, generation: u64, now: u64) -> bool {
        match &self.window {
            // A full ring: the success replaced an outcome, which cannot raise either rate.
            Window::Count(_) => filling,
            Window::Time(w) => w.success_evaluation_due(generation, now),
        }
    }

    fn record_window(
        &self,
        generation: u64,
        elapsed: u64,
        now: u64,
        c: Classification,
    ) -> Recorded {
        let word = Word(self.word.load(Ordering::Acquire));
        if word.generation() != generation {
            return self.stale(generation, self.real_now(now));
        }
        let r = Ordering::Relaxed;
        let slow = elapsed > self.hot.slow_nanos.load(r);
        let mut weight = 1;
        let failure = match c.outcome {
            Outcome::Ignored => {
                self.lane().1.count(c.outcome, slow);
                return Recorded::Ignored;
            }
            Outcome::Success => false,
            Outcome::Failure => {
                match self.admit_failure(generation, now, c.kind, slow) {
                    Ok(w) => weight = w,
                    Err(recorded) => return recorded,
                }
                true
            }
        };
        // The window decides whether the result is this generation's: a reset that ran since
        // the check above leaves the result nowhere.
        let sample = Sample {
            failure,
            slow,
            nanos: elapsed,
        };
        let Some(filling) = self.window.record(generation, now, sample) else {
            return self.stale(generation, self.real_now(now));
        };
        self.lane().1.count(c.outcome, slow);
        // Failure kinds in outcome events: `EventKind::CallOutcome` (sent from `settle`) does
        // not carry the failure's kind yet; `c.kind` and its `weight` are known here.
        let consecutive = if failure {
            self.counted_failure(generation, now, sample, weight, c.kind)
        } else {
            self.hot.consecutive_success(generation);
            None
        };
        if word.state() == State::MetricsOnly {
            self.shadow_evaluate(word, self.real_now(now), consecutive);
        } else if failure
            || slow
            || consecutive.is_some()
            || self.evaluate_on_success(filling, generation, now)
        {
            // An untimed call's rules (a count window, no calls in flight) need no time; the
            // trip does, and so do calls in flight (counted once a reconfiguration turned the
            // slow-call rule on after this call was admitted untimed).
            let eval_now = if self.hot.in_flight.load(r) {
                self.real_now(now)
            } else {
                now
            };
            if let Some((reason, snap)) =
                self.trip_reason(generation, eval_now, consecutive, failure || slow)
            {
                self.trip_from(word, self.real_now(now), reason, snap, c.retry_after);
            }
        }
        Recorded::Counted
    }

    /// `now`, or a fresh reading for an untimed call.
    #[inline]
    fn real_now(&self, now: u64) -> u64 {
        if now == NO_TIME {
            self.clock.now()
        } else {
            now
        }
    }

    /// MetricsOnly: evaluates every rule as Closed would (in-flight calls included) and
    /// reports each rule that starts firing, once, as a would-trip event.
    #[cold]
    fn shadow_evaluate(&self, word: Word, now: u64, consecutive: Option<u64>) {
        let generation = word.generation();
        // The consecutive rule goes on firing while its run lasts, also when this evaluation
        // did not come from a failure (the acquire-time in-flight check).
        let consecutive = consecutive.or_else(|| {
            let limit = self.hot.consecutive_limit.load(Ordering::Relaxed);
            let run = self.hot.failure_run(generation);
            (limit != 0 && run >= limit).then_some(u64::from(run))
        });
        let (fired, window) = self.rules(generation, now, consecutive, true);
        let t = tag32(generation);
        let packed = t << 32 | u64::from(fired.0);
        let cold = self.cold();
        let before = cold.would_trip.swap(packed, Ordering::Relaxed);
        let before = if before >> 32 == t { before as u32 } else { 0 };
        let new = fired.0 & !before;
        if new == 0 {
            return;
        }
        let core = lock(&cold.core);
        if word == Word(self.word.load(Ordering::Acquire)) {
            for reason in Rules(new).reasons(consecutive) {
                cold.hub
                    .queue(now, &self.name, EventKind::WouldTrip { reason, window });
            }
        }
        drop(core);
        cold.hub.dispatch();
    }

    /// Re-checks in-flight calls on acquire, at most once per cohort width. Returns whether the
    /// breaker tripped (MetricsOnly reports instead of tripping).
    #[cold]
    fn check_in_flight(&self, word: Word, now: u64) -> bool {
        let due = self.next_inflight_check.load(Ordering::Relaxed);
        if now < due
            || self
                .next_inflight_check
                .compare_exchange(
                    due,
                    now.saturating_add(self.lane.inflight.width()),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return false;
        }
        if word.state() == State::MetricsOnly {
            self.shadow_evaluate(word, now, None);
            return false;
        }
        match self.trip_reason(word.generation(), now, None, true) {
            Some((reason, snap)) => self.trip_from(word, now, reason, snap, None),
            None => false,
        }
    }

    #[cold]
    fn trip_from(
        &self,
        word: Word,
        now: u64,
        reason: Reason,
        snap: WindowSnapshot,
        retry_after: Option<Duration>,
    ) -> bool {
        let cold = self.cold();
        let mut core = lock(&cold.core);
        let done = Word(self.word.load(Ordering::Acquire)) == word;
        if done {
            self.transition(
                &mut core,
                word,
                State::Open,
                reason,
                snap,
                now,
                OpenWait::Rules(retry_after),
            );
        }
        drop(core);
        cold.hub.dispatch();
        done
    }

    #[cold]
    fn open_to_half_open(&self, word: Word, now: u64) {
        let cold = self.cold();
        let mut core = lock(&cold.core);
        if Word(self.word.load(Ordering::Acquire)) == word
            && now >= self.open_until.load(Ordering::Acquire)
        {
            let snap = self.snapshot(now);
            self.transition(
                &mut core,
                word,
                State::HalfOpen,
                Reason::OpenElapsed,
                snap,
                now,
                OpenWait::RULES,
            );
        }
        drop(core);
        cold.hub.dispatch();
    }

    /// Claims a probe slot. `None`: the state moved; look again.
    fn claim_probe(&self, word: Word) -> Option<Result<Ticket, Rejected>> {
        let now = self.clock.now();
        let cold = self.cold();
        let mut core = lock(&cold.core);
        if Word(self.word.load(Ordering::Acquire)) != word {
            return None;
        }
        if let Some(max) = core.config.half_open_max_wait {
            if now >= core.half_open_since.saturating_add(nanos(max)) {
                let to = after_max_wait(&core.config);
                let snap = self.snapshot(now);
                self.transition(
                    &mut core,
                    word,
                    to,
                    Reason::HalfOpenTimeout,
                    snap,
                    now,
                    OpenWait::RULES,
                );
                drop(core);
                cold.hub.dispatch();
                return None;
            }
        }
        // Reclaim expired leases: their probes' results will be refused as stale.
        for lease in core.round.leases.iter_mut() {
            if lease.is_some_and(|l| l.deadline <= now) {
                *lease = None;
                cold.expired_probes.fetch_add(1, Ordering::Relaxed);
            }
        }
        let k = core.config.half_open_calls;
        let settled = match core.config.half_open_policy {
            HalfOpenPolicy::AllProbes => core.round.results,
            HalfOpenPolicy::Consecutive => core.round.successes,
        };
        if settled >= k {
            // A round begun under a larger `half_open_calls` (a reconfiguration while
            // HalfOpen) already holds the results this configuration asks for: decide it by
            // this configuration's rule, over the results it has (no probe could).
            let round = &core.round;
            let (probes, failures, slow) = (round.results, round.failures, round.slow);
            let open = match core.config.half_open_policy {
                HalfOpenPolicy::AllProbes => self.round_fails(failures, slow, probes),
                HalfOpenPolicy::Consecutive => false,
            };
            let (to, reason) = if open {
                let r = Reason::ProbesFailed {
                    probes,
                    failures,
                    slow,
                };
                (State::Open, r)
            } else {
                let r = Reason::ProbesSucceeded {
                    probes,
                    failures,
                    slow,
                };
                (State::Closed, r)
            };
            let snap = self.snapshot(now);
            self.transition(&mut core, word, to, reason, snap, now, OpenWait::RULES);
            drop(core);
            cold.hub.dispatch();
            return None;
        }
        let in_flight = core.round.in_flight() as u32;
        if in_flight + settled < k {
            if let Some(slot) = core.round.leases.iter().position(Option::is_none) {
                let token = core.next_token;
                core.next_token += 1;
                let deadline = now.saturating_add(nanos(core.config.probe_lease));
                core.round.leases[slot] = Some(Lease { token, deadline });
                core.round.admitted = core.round.admitted.saturating_add(1);
                return Some(Ok(Ticket {
                    generation: word.generation(),
                    started: now,
                    kind: Kind::Probe {
                        slot: slot as u32,
                        token,
                    },
                }));
            }
        }
        let retry = core
            .round
            .leases
            .iter()
            .flatten()
            .map(|l| l.deadline.saturating_sub(now))
            .min();
        drop(core);
        Some(Err(self.reject::<1>(retry, now)))
    }

    /// Whether a half-open round's failures or slow probes reach their thresholds out of `of`
    /// probes (the round's size, or the results it holds when it is decided early).
    fn round_fails(&self, failures: u32, slow: u32, of: u32) -> bool {
        let of = u64::from(of);
        u64::from(failures) * PPM >= self.hot.failure_ppm() * of
            || u64::from(slow) * PPM >= self.hot.slow_ppm() * of
    }

    fn record_probe(
        &self,
        generation: u64,
        slot: u32,
        token: u64,
        now: u64,
        elapsed: u64,
        c: Classification,
    ) -> Recorded {
        let cold = self.cold();
        let mut core = lock(&cold.core);
        let word = Word(self.word.load(Ordering::Acquire));
        let lease_ok = core
            .round
            .leases
            .get(slot as usize)
            .copied()
            .flatten()
            .is_some_and(|l| l.token == token);
        if word.generation() != generation || word.state() != State::HalfOpen || !lease_ok {
            drop(core);
            return self.stale(generation, now);
        }
        core.round.leases[slot as usize] = None;
        let slow = elapsed > self.hot.slow_nanos.load(Ordering::Relaxed);
        let mut outcome = c.outcome;
        if outcome == Outcome::Failure {
            if let Some(kind) = c.kind {
                cold.kind_failures[kind.index()].fetch_add(1, Ordering::Relaxed);
                if self.hot.weight(kind) == 0 {
                    outcome = Outcome::Ignored;
                }
            }
        }
        let Some(failure) = self.lane().1.count(outcome, slow) else {
            return Recorded::Ignored;
        };
        // A probe is one sample of the round, whatever its kind's weight.
        if failure {
            self.hot.consecutive_failure(generation, 1);
            self.hot
                .success_mark
                .store(self.successes(), Ordering::Relaxed);
        } else {
            self.hot.consecutive_success(generation);
        }
        let k = core.config.half_open_calls;
        let round = &mut core.round;
        round.results += 1;
        round.failures += u32::from(failure);
        round.slow += u32::from(slow);
        round.successes += u32::from(!failure && !slow);
        let (probes, failures, slow_n) = (round.results, round.failures, round.slow);
        let verdict = match core.config.half_open_policy {
            HalfOpenPolicy::AllProbes => {
                if self.round_fails(failures, slow_n, k) {
                    Some(State::Open)
                } else if probes >= k {
                    Some(State::Closed)
                } else {
                    None
                }
            }
            HalfOpenPolicy::Consecutive => {
                if failure || slow {
                    Some(State::Open)
                } else if core.round.successes >= k {
                    Some(State::Closed)
                } else {
                    None
                }
            }
        };
        if let Some(to) = verdict {
            let reason = if to == State::Open {
                Reason::ProbesFailed {
                    probes,
                    failures,
                    slow: slow_n,
                }
            } else {
                Reason::ProbesSucceeded {
                    probes,
                    failures,
                    slow: slow_n,
                }
            };
            let snap = self.snapshot(now);
            self.transition(
                &mut core,
                word,
                to,
                reason,
                snap,
                now,
                OpenWait::Rules(c.retry_after),
            );
        }
        drop(core);
        cold.hub.dispatch();
        Recorded::Counted
    }

    fn abandon(&self, generation: u64, kind: Kind) {
        let probe = match kind {
            Kind::Passthrough => return,
            Kind::Window { cohort, lane } => {
                self.lane_at(lane).inflight.exit(cohort, generation);
                false
            }
            Kind::Probe { slot, token } => {
                let mut core = lock(&self.cold().core);
                if let Some(lease) = core.round.leases.get_mut(slot as usize) {
                    if lease.is_some_and(|l| l.token == token) {
                        *lease = None;
                    }
                }
                true
            }
        };
        self.lane().1.abandoned.fetch_add(1, Ordering::Relaxed);
        if let Some(cold) = self.call_events() {
            cold.hub.call_event(
                self.clock.now(),
                &self.name,
                EventKind::Abandoned { generation, probe },
            );
        }
    }

    fn operator(&self, to: State) {
        let now = self.clock.now();
        let cold = self.cold();
        let mut core = lock(&cold.core);
        let word = Word(self.word.load(Ordering::Acquire));
        if word.state() != to || to == State::Closed {
            let snap = self.snapshot(now);
            self.transition(
                &mut core,
                word,
                to,
                Reason::Operator,
                snap,
                now,
                OpenWait::RULES,
            );
        }
        drop(core);
        cold.hub.dispatch();
    }

    /// An operator transition to `to` along an edge of [`State::operator_targets`]; `open`
    /// says how long an Open target waits. Asking for the current state does nothing, except
    /// that Closed starts a fresh window and Open a new wait.
    pub(crate) fn operator_transition(
        &self,
        to: State,
        open: OpenWait,
    ) -> Result<(), crate::TransitionError> {
        let now = self.clock.now();
        let cold = self.cold();
        let mut core = lock(&cold.core);
        let word = Word(self.word.load(Ordering::Acquire));
        let from = word.state();
        if !from.operator_targets().contains(&to) {
            return Err(crate::TransitionError::NoSuchEdge { from, to });
        }
        if from != to || matches!(to, State::Closed | State::Open) {
            let snap = self.snapshot(now);
            self.transition(&mut core, word, to, Reason::Operator, snap, now, open);
        }
        drop(core);
        cold.hub.dispatch();
        Ok(())
    }

    /// The open wait for the next open period, at the current backoff level.
    /// With `open_backoff`, every wait (jitter and `Retry-After` hint included) is at most its
    /// `max`: a grown wait is capped at `max - open_jitter` (but not below `open_duration`), so
    /// the jitter still spreads replicas at the cap, and whatever is left above `max` is cut.
    fn open_wait(&self, core: &mut Core, retry_after: Option<Duration>) -> u64 {
        let c = &core.config;
        let mut wait = nanos(c.open_duration);
        let jitter = nanos(c.open_jitter);
        let cap = c.open_backoff.map(|b| nanos(b.max));
        if let Some(b) = c.open_backoff {
            let grown =
                c.open_duration.as_secs_f64() * b.multiplier.powi(core.level.min(1000) as i32);
            let room = nanos(b.max)
                .saturating_sub(jitter)
                .max(nanos(c.open_duration));
            wait = if grown.is_finite() && grown < room as f64 / 1e9 {
                nanos(Duration::from_secs_f64(grown))
            } else {
                room
            };
        }
        if jitter > 0 {
            let rng = core.rng.get_or_insert_with(Pcg64Mcg::from_os_rng);
            wait = wait.saturating_add(rng.random_range(0..=jitter));
        }
        if let Some(hint) = retry_after {
            wait = wait.max(nanos(hint.min(c.max_retry_after)));
        }
        cap.map_or(wait, |cap| wait.min(cap))
    }

    /// Performs a transition. Caller holds the core lock and has checked that the state word
    /// is still `from`; lock-free paths never write the word, so it cannot move meanwhile.
    #[expect(
        clippy::too_many_arguments,
        reason = "a transition takes its whole decision: from, to, why, the window and when"
    )]
    fn transition(
        &self,
        core: &mut Core,
        from: Word,
        to: State,
        reason: Reason,
        window: WindowSnapshot,
        now: u64,
        open: OpenWait,
    ) {
        let new = from.next(to);
        core.time_in[from.state() as usize] += now.saturating_sub(core.entered_at);
        core.entered_at = now;
        let mut open_for = None;
        match to {
            State::Open => {
                let hint = match open {
                    OpenWait::Rules(hint) => hint,
                    OpenWait::Exactly(_) => None,
                };
                match from.state() {
                    // An operator's explicit wait leaves the backoff level alone.
                    _ if matches!(open, OpenWait::Exactly(_)) => {}
                    State::HalfOpen => core.level = core.level.saturating_add(1),
                    _ => {
                        let healthy_after = core
                            .config
                            .open_backoff
                            .map_or(0, |b| nanos(b.healthy_after));
                        let closed_for =
                            now.saturating_sub(self.closed_since.load(Ordering::Relaxed));
                        if !core.ever_opened || closed_for >= healthy_after {
                            core.level = 0;
                        } else {
                            core.level = core.level.saturating_add(1);
                        }
                    }
                }
                let wait = match open {
                    OpenWait::Exactly(w) => w,
                    OpenWait::Rules(_) => self.open_wait(core, hint),
                };
                self.open_until
                    .store(now.saturating_add(wait), Ordering::Release);
                core.ever_opened = true;
                open_for = Some(Duration::from_nanos(wait));
            }
            State::HalfOpen => {
                core.half_open_since = now;
            }
            State::Closed | State::MetricsOnly => {
                // The new generation's window, run of failures and reports start empty before
                // the word announcing the generation is published.
                let g = new.generation();
                self.window.begin(g);
                self.cold()
                    .would_trip
                    .store(tag32(g) << 32, Ordering::Relaxed);
                self.closed_since.store(now, Ordering::Relaxed);
                self.closed_generation.store(g, Ordering::Release);
                self.next_inflight_check.store(
                    now.saturating_add(self.lane.inflight.width()),
                    Ordering::Relaxed,
                );
            }
            State::Disabled | State::ForcedOpen => {}
        }
        // Gradual recovery: only when probes closed the breaker, and only with a ramp set.
        let ramp = match core.config.ramp_up {
            Some(r) if to == State::Closed && matches!(reason, Reason::ProbesSucceeded { .. }) => {
                Some(r)
            }
            _ => None,
        };
        if let Some(r) = ramp {
            self.cold().ramp.begin(&r, new.generation(), now);
        }
        self.hot.ramping.store(ramp.is_some(), Ordering::Relaxed);
        if to == State::HalfOpen {
            core.round = Round::new(core.config.half_open_calls);
        } else if from.state() == State::HalfOpen {
            core.round = Round::new(0);
        }
        // Runs of consecutive outcomes start over with every state (gobreaker's counts do).
        self.hot
            .consecutive
            .store(tag32(new.generation()) << 32, Ordering::Relaxed);
        self.hot
            .success_mark
            .store(self.successes(), Ordering::Relaxed);
        self.word.store(new.0, Ordering::Release);
        #[cfg(feature = "metrics")]
        {
            // Pairs with the fence of `attach_state_gauges`: either it sees the new word, or
            // this sees its gauges.
            crate::sync::fence(Ordering::SeqCst);
            if let Some(g) = self.state_gauges.get() {
                g.show(to);
            }
        }
        core.transitions += 1;
        let cold = self.cold();
        cold.hub.queue(
            now,
            &self.name,
            EventKind::Transition {
                from: from.state(),
                to,
                generation: new.generation(),
                reason,
                window,
                open_for,
            },
        );
        #[cfg(feature = "tokio")]
        cold.notify.notify_one();
    }
}

#[cfg(feature = "tokio")]
mod async_call {
    use super::*;
    use std::future::Future;

    impl<C: Clock> CircuitBreaker<C> {
        /// Runs the future `f` makes through the breaker, with `timeout` inside the breaker: every
        /// admitted call settles, and a timeout counts as a failure of kind
        /// [`FailureKind::Timeout`]. `f` is not called when the
        /// breaker rejects. If the returned future is dropped mid-call, the permit is abandoned
        /// (it frees its probe slot and counts as neither success nor failure).
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
        /// # async fn main() {
        /// use tripline::{BreakerConfig, CallError, CircuitBreaker, TokioClock};
        /// use std::time::Duration;
        ///
        /// let breaker = CircuitBreaker::with_clock("vendor", BreakerConfig::default(), TokioClock::new());
        /// let slow = breaker
        ///     .call_async(Some(Duration::from_millis(2500)), || async {
        ///         tokio::time::sleep(Duration::from_secs(10)).await;
        ///         Ok::<_, std::io::Error>("late")
        ///     })
        ///     .await;
        /// assert!(matches!(slow, Err(CallError::Timeout(_))));
        /// assert_eq!(breaker.metrics().failed_calls, 1);
        /// # }
        /// ```
        pub async fn call_async<T, E, F, Fut>(
            &self,
            timeout: Option<Duration>,
            f: F,
        ) -> Result<T, CallError<E>>
        where
            F: FnOnce() -> Fut,
            Fut: Future<Output = Result<T, E>>,
        {
            self.call_async_classified(timeout, ResultClassifier, f)
                .await
        }

        /// [`call_async`](Self::call_async) with a classifier.
        pub async fn call_async_classified<T, E, K, F, Fut>(
            &self,
            timeout: Option<Duration>,
            classify: K,
            f: F,
        ) -> Result<T, CallError<E>>
        where
            K: Classify<T, E>,
            F: FnOnce() -> Fut,
            Fut: Future<Output = Result<T, E>>,
        {
            let permit = self.try_acquire().map_err(CallError::Rejected)?;
            let result = match timeout {
                Some(t) => match tokio::time::timeout(t, f()).await {
                    Ok(r) => r,
                    Err(_) => {
                        // The breaker's own timeout: a failure of kind Timeout (its weight, and
                        // `failures_by_kind`, apply as to a classifier's timeouts).
                        let _ =
                            permit.record_classified(Classification::failure(FailureKind::Timeout));
                        return Err(CallError::Timeout(t));
                    }
                },
                None => f().await,
            };
            let _ = permit.record_classified(classify.classify(&result));
            result.map_err(CallError::Failed)
        }

        /// [`call_async`](Self::call_async), handing a rejection, a timeout or an error to
        /// `fallback`, which produces the caller's answer (a cached value, a default).
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() {
        /// use tripline::{BreakerConfig, CircuitBreaker};
        ///
        /// let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
        /// breaker.force_open();
        /// let card = breaker
        ///     .call_async_or_else(None, || async { Ok::<_, ()>("full card") }, |_| async { "cached card" })
        ///     .await;
        /// assert_eq!(card, "cached card");
        /// # }
        /// ```
        pub async fn call_async_or_else<T, E, F, Fut, G, GFut>(
            &self,
            timeout: Option<Duration>,
            f: F,
            fallback: G,
        ) -> T
        where
            F: FnOnce() -> Fut,
            Fut: Future<Output = Result<T, E>>,
            G: FnOnce(CallError<E>) -> GFut,
            GFut: Future<Output = T>,
        {
            match self.call_async(timeout, f).await {
                Ok(v) => v,
                Err(e) => fallback(e).await,
            }
        }

        /// Drives the breaker's timers forever (see [`tick`](Self::tick)): spawn it as a task
        /// to move Open to HalfOpen on schedule without waiting for traffic.
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
        /// # async fn main() {
        /// use tripline::{BreakerConfig, CircuitBreaker, State, TokioClock};
        /// use std::time::Duration;
        ///
        /// let config = BreakerConfig::builder().automatic_transition(true)
        ///     .open_duration(Duration::from_secs(5)).build().unwrap();
        /// let breaker = CircuitBreaker::with_clock("db", config, TokioClock::new());
        /// let timer = tokio::spawn({ let b = breaker.clone(); async move { b.run_timer().await } });
        /// breaker.trip();
        /// tokio::time::sleep(Duration::from_secs(6)).await;
        /// assert_eq!(breaker.state(), State::HalfOpen);
        /// timer.abort();
        /// # }
        /// ```
        pub async fn run_timer(&self) {
            loop {
                let notified = self.inner.cold().notify.notified();
                match self.tick() {
                    Some(d) => {
                        let _ =
                            tokio::time::timeout(d.max(Duration::from_millis(1)), notified).await;
                    }
                    None => notified.await,
                }
            }
        }
    }
}
