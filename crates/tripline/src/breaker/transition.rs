//! Transitions: the one place the state word is written. A transition runs under the core
//! lock, re-checks that the state word is still the one its decision was based on, performs
//! the rules' consequences (the open wait, a fresh window and run, a fresh probe round, a
//! ramp), queues its event and publishes the new word. The event is delivered after the lock
//! is released.
//!
//! Also here: the operator's moves (each a transition along an edge of
//! [`State::operator_targets`], unless the breaker is held by an operator override) and the
//! timers.

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use super::ramp::Ramp;
use super::round::Round;
use super::{CircuitBreaker, Inner};
use crate::clock::{Clock, nanos};
use crate::config::BreakerConfig;
use crate::event::Hub;
use crate::event::{EventKind, Reason};
use crate::rules;
use crate::state::{State, Word};
use crate::sync::{AtomicBool, AtomicU64, AtomicU128, Mutex, Ordering, lock};
use crate::window::WindowSnapshot;

/// How long a transition to Open waits.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OpenWait {
    /// The configured wait (jitter, backoff), at least the hint (capped).
    Rules(Option<Duration>),
    /// Exactly this many nanoseconds (an operator's explicit wait).
    Exactly(u64),
    /// The configuration's open-wait function gave this many nanoseconds (clamped): a wait of
    /// the rules, that grows the backoff level as [`OpenWait::Rules`] does.
    Computed(u64),
}

impl OpenWait {
    pub(crate) const RULES: OpenWait = OpenWait::Rules(None);
}

/// When a Closed generation that begins at `now` ends under `config`'s interval
/// (`u64::MAX`: never).
pub(super) fn interval_end(config: &BreakerConfig, now: u64) -> u64 {
    config
        .interval
        .map_or(u64::MAX, |i| now.saturating_add(nanos(i)))
}

/// When a closed acquire first looks at what is due in a Closed generation that begins at
/// `now`: the first in-flight check (cohorts `width` wide) or the interval's `end`.
pub(super) fn next_closed_check(config: &BreakerConfig, now: u64, width: u64, end: u64) -> u64 {
    let in_flight = if config.counts_in_flight() {
        now.saturating_add(width)
    } else {
        u64::MAX
    };
    in_flight.min(end)
}

/// The open-wait function's `attempt` for an open from `from`: one more than `attempt` for a
/// reopen from HalfOpen, else 1.
fn next_attempt(attempt: u32, from: State) -> u32 {
    if from == State::HalfOpen {
        attempt.saturating_add(1)
    } else {
        1
    }
}

/// What the core lock guards.
#[derive(Debug)]
pub(crate) struct Core {
    pub(super) config: Arc<BreakerConfig>,
    /// Jitter generator, seeded from the OS on first use unless the configuration seeds it.
    rng: Option<Pcg64Mcg>,
    /// Backoff level: how many times the open wait has grown.
    pub(super) level: u32,
    pub(super) ever_opened: bool,
    pub(super) entered_at: u64,
    pub(super) half_open_since: u64,
    pub(super) round: Round,
    pub(super) next_token: u64,
    pub(super) time_in: [u64; 6],
    pub(super) transitions: u64,
    /// The operator state an override holds the breaker in (a registry's
    /// [`set_operator`](crate::registry::Registry::set_operator)): no transition leaves it
    /// until the override is lifted. The breaker owns it, so holding and every operator call
    /// that would leave it are decided under one lock.
    pub(super) hold: Option<State>,
    /// The kind of the failure whose result the next transition follows (set by the result's
    /// path, taken by the transition): part of the [`TripCause`](crate::TripCause).
    pub(super) pending_kind: Option<crate::outcome::FailureKind>,
    /// The lifetime totals when the current generation began (see [`super::counts`]).
    pub(super) base: super::counts::Totals,
    /// Opens in a row: 1 after a trip from Closed, one more for each reopen from HalfOpen
    /// (the open-wait function's `attempt`).
    pub(super) attempt: u32,
    /// A transition to Open decided under the lock and waiting for the open-wait function,
    /// which runs with no lock held (see [`Inner::finish_open`]).
    pub(super) opening: Option<Box<PendingOpen>>,
}

impl Core {
    /// Whether a transition to Open from `word` is underway (waiting for the open-wait
    /// function): no rule moves the breaker from `word` meanwhile.
    pub(super) fn opening_from(&self, word: Word) -> bool {
        self.opening.as_ref().is_some_and(|p| p.word == word)
    }
}

/// A transition to Open waiting for the open-wait function: everything the transition needs,
/// taken when it was decided.
#[derive(Debug)]
pub(crate) struct PendingOpen {
    word: Word,
    reason: Reason,
    window: WindowSnapshot,
    now: u64,
    kind: Option<crate::outcome::FailureKind>,
    /// The configuration's wait, if the function panics.
    fallback: u64,
    args: crate::config::OpenWaitArgs,
    f: crate::config::OpenDurationFn,
    /// The function is running (on the thread that took it): it stays here meanwhile, so
    /// that no rule (nor the function, calling back in) decides another open from `word`.
    running: bool,
}

/// The part of a breaker that only transitions, probes, listeners and the counters of stale
/// results and expired probes need.
#[derive(Debug)]
pub(crate) struct Cold {
    pub(super) core: Mutex<Core>,
    pub(super) hub: Hub,
    pub(super) stale: AtomicU64,
    /// Permits abandoned after their generation ended (or their probe lease was reclaimed):
    /// counted in the lifetime total, left out of the generation's counts.
    pub(super) stale_abandoned: AtomicU64,
    /// Whether `Core::opening` holds a transition waiting for the open-wait function (read
    /// without the lock after each lock is released).
    pub(super) opening: AtomicBool,
    /// Open-wait function panics caught (the configured wait applied instead).
    pub(super) open_wait_panics: AtomicU64,
    pub(super) expired_probes: AtomicU64,
    /// Failures by the kind their classifier gave (whatever the kind's weight).
    pub(super) kind_failures: [AtomicU64; 7],
    /// Failures lumped into an earlier one.
    pub(super) lumped: AtomicU64,
    /// Refusals while HalfOpen (every probe slot taken).
    pub(super) half_open_rejected: AtomicU64,
    /// Lumping: `generation << 64 | 1 + when the last counted failure was` (0: none yet).
    pub(super) lump: AtomicU128,
    /// The lumping interval in nanoseconds (read while lumping is on).
    pub(super) lump_nanos: AtomicU64,
    /// Gradual recovery after closing.
    pub(super) ramp: Ramp,
    /// MetricsOnly (which only a transition enters): `generation << FIRED_BITS | rules that fired at
    /// the last evaluation`, so each rule is reported once each time it starts firing.
    pub(super) would_trip: AtomicU64,
    /// What opened the breaker last (its rejections carry it).
    pub(super) cause: super::cause::CauseCell,
    #[cfg(feature = "tokio")]
    pub(super) notify: tokio::sync::Notify,
}

impl Cold {
    pub(super) fn new(config: Arc<BreakerConfig>, created: u64) -> Self {
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
                hold: None,
                pending_kind: None,
                base: super::counts::Totals::default(),
                attempt: 0,
                opening: None,
            }),
            hub: Hub::new(),
            stale: AtomicU64::new(0),
            stale_abandoned: AtomicU64::new(0),
            opening: AtomicBool::new(false),
            open_wait_panics: AtomicU64::new(0),
            expired_probes: AtomicU64::new(0),
            kind_failures: std::array::from_fn(|_| AtomicU64::new(0)),
            lumped: AtomicU64::new(0),
            half_open_rejected: AtomicU64::new(0),
            lump: AtomicU128::new(0),
            lump_nanos: AtomicU64::new(lump_nanos),
            ramp: Ramp::new(),
            would_trip: AtomicU64::new(0),
            cause: super::cause::CauseCell::new(),
            #[cfg(feature = "tokio")]
            notify: tokio::sync::Notify::new(),
        }
    }
}

impl<C: Clock> CircuitBreaker<C> {
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

    /// Operator: back to Closed with a fresh window, whatever the state (unless an operator
    /// override holds the breaker: see [`operator_hold`](Self::operator_hold)).
    pub fn reset(&self) {
        self.inner.operator(State::Closed);
    }

    /// The operator state an override holds this breaker in, if any: a registry's
    /// [`set_operator`](crate::registry::Registry::set_operator) (or its configuration's
    /// `[operator]` section) holds the breakers it selects, and while it does, no operator
    /// call on their handles (`reset`, `trip`, `transition_to`, ...) moves them elsewhere;
    /// [`clear_operator`](crate::registry::Registry::clear_operator) lets them go.
    ///
    /// ```
    /// use tripline::registry::{Key, OperatorState, Registry, RegistryConfig, Selector};
    /// use tripline::State;
    ///
    /// let registry = Registry::new(RegistryConfig::default())?;
    /// let key = Key::new("recommendations")?;
    /// let breaker = registry.get(&key)?;
    /// registry.set_operator(&Selector::Key(key.clone()), OperatorState::ForcedOpen);
    /// assert_eq!(breaker.operator_hold(), Some(State::ForcedOpen));
    /// breaker.reset(); // held: nothing changes
    /// assert_eq!(breaker.state(), State::ForcedOpen);
    /// registry.clear_operator(&Selector::Key(key));
    /// assert_eq!((breaker.operator_hold(), breaker.state()), (None, State::Closed));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn operator_hold(&self) -> Option<State> {
        self.inner.cold.get().and_then(|c| lock(&c.core).hold)
    }

    /// Drives timers: moves Open to HalfOpen when the wait has elapsed (if
    /// `half_open.automatic_transition` is on) and HalfOpen back to Open when its maximum wait
    /// has passed, and, with an `interval`, ends a Closed generation whose interval is over.
    /// Returns the time until the next timer is due, if any. Call it from a timer
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
        let now = inner.now();
        let word = inner.word();
        match word.state() {
            State::Open => {
                let auto = lock(&inner.cold().core).config.automatic_transition;
                if auto && rules::open_elapsed(inner.open_until.load(Ordering::Acquire), now) {
                    inner.open_to_half_open(word, now);
                }
            }
            State::HalfOpen => {
                let cold = inner.cold();
                {
                    let mut core = lock(&cold.core);
                    if inner.word() == word && !core.opening_from(word) {
                        inner.end_half_open_past_max_wait(&mut core, word, now);
                    }
                }
                inner.drain(cold);
            }
            State::Closed | State::MetricsOnly
                if rules::interval_over(inner.interval_end.load(Ordering::Relaxed), now) =>
            {
                inner.end_interval(word, now);
            }
            _ => {}
        }
        self.next_deadline()
    }

    /// Time until the next timer-driven transition is due, if one is scheduled (in Closed,
    /// the end of the generation's `interval`, if one is set).
    pub fn next_deadline(&self) -> Option<Duration> {
        let inner = &*self.inner;
        let now = inner.now();
        let interval = || {
            let end = inner.interval_end.load(Ordering::Relaxed);
            (end != u64::MAX).then(|| Duration::from_nanos(end.saturating_sub(now)))
        };
        // Without the cold part the breaker has never left Closed.
        let Some(cold) = inner.cold.get() else {
            return interval();
        };
        let core = lock(&cold.core);
        let word = inner.word();
        match word.state() {
            State::Closed | State::MetricsOnly => interval(),
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
    /// no effect in other states, nor on a breaker an operator override holds). For tests and
    /// for callers with out-of-band evidence.
    pub fn trip(&self) {
        let inner = &*self.inner;
        let now = inner.now();
        let cold = inner.cold();
        {
            let mut core = lock(&cold.core);
            let word = inner.word();
            if matches!(word.state(), State::Closed | State::MetricsOnly)
                && rules::hold_permits(core.hold, State::Open)
            {
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
        }
        inner.drain(cold);
    }
}

impl<C: Clock> Inner<C> {
    /// Trips the breaker from `word` if it is still in it; whether it did.
    #[cold]
    pub(super) fn trip_from(
        &self,
        word: Word,
        now: u64,
        reason: Reason,
        snap: WindowSnapshot,
        retry_after: Option<Duration>,
        kind: Option<crate::outcome::FailureKind>,
    ) -> bool {
        let cold = self.cold();
        let done = {
            let mut core = lock(&cold.core);
            let done = self.word() == word;
            if done {
                core.pending_kind = kind;
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
            done
        };
        self.drain(cold);
        done
    }

    #[cold]
    pub(super) fn open_to_half_open(&self, word: Word, now: u64) {
        let cold = self.cold();
        {
            let mut core = lock(&cold.core);
            if self.word() == word
                && rules::open_elapsed(self.open_until.load(Ordering::Acquire), now)
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
        }
        self.drain(cold);
    }

    /// An operator's move to `to` (force open, disable, metrics only, reset): a transition
    /// unless it asks for the state the breaker is in (Closed always starts a fresh window) or
    /// an override holds the breaker elsewhere. Whether it moved.
    pub(crate) fn operator(&self, to: State) -> bool {
        let now = self.now();
        let cold = self.cold();
        let moved = {
            let mut core = lock(&cold.core);
            let word = self.word();
            let moves = rules::operator_edge(word.state(), to) == Some(true)
                && rules::hold_permits(core.hold, to);
            if moves {
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
            moves
        };
        self.drain(cold);
        moved
    }

    /// An operator transition to `to` along an edge of [`State::operator_targets`]; `open`
    /// says how long an Open target waits. Asking for the current state does nothing, except
    /// that Closed starts a fresh window and Open a new wait; a breaker an override holds
    /// stays where it is.
    pub(crate) fn operator_transition(
        &self,
        to: State,
        open: OpenWait,
    ) -> Result<(), crate::TransitionError> {
        let now = self.now();
        let cold = self.cold();
        let result = {
            let mut core = lock(&cold.core);
            let word = self.word();
            match rules::operator_edge(word.state(), to) {
                None => Err(crate::TransitionError::NoSuchEdge {
                    from: word.state(),
                    to,
                }),
                Some(moves) => {
                    if moves && rules::hold_permits(core.hold, to) {
                        let snap = self.snapshot(now);
                        self.transition(&mut core, word, to, Reason::Operator, snap, now, open);
                    }
                    Ok(())
                }
            }
        };
        self.drain(cold);
        result
    }

    /// A half-open breaker past its maximum wait goes where the configuration says; whether it
    /// did. Called under the core lock, the word checked to be `word`.
    pub(super) fn end_half_open_past_max_wait(
        &self,
        core: &mut Core,
        word: Word,
        now: u64,
    ) -> bool {
        let max_wait = core.config.half_open_max_wait.map(nanos);
        if !rules::half_open_expired(core.half_open_since, max_wait, now) {
            return false;
        }
        let to = rules::after_max_wait(core.config.after_max_wait);
        let snap = self.snapshot(now);
        self.transition(
            core,
            word,
            to,
            Reason::HalfOpenTimeout,
            snap,
            now,
            OpenWait::RULES,
        );
        true
    }

    /// Holds the breaker in `hold` (or lets it go: `None`), moving it there now; a breaker let
    /// go while in an operator state goes back to Closed. Called under the core lock.
    /// Whether the state changed.
    pub(super) fn apply_hold(&self, core: &mut Core, hold: Option<State>, now: u64) -> bool {
        let before = std::mem::replace(&mut core.hold, hold);
        let word = self.word();
        let to = match hold {
            Some(s) if word.state() != s => s,
            None if before.is_some() && word.state().is_operator_state() => State::Closed,
            _ => return false,
        };
        let snap = self.snapshot(now);
        self.transition(core, word, to, Reason::Operator, snap, now, OpenWait::RULES);
        true
    }

    /// The open wait for the next open period, at the current backoff level (see
    /// [`rules::open_wait`]).
    fn open_wait(&self, core: &mut Core, hint: Option<Duration>) -> u64 {
        self.open_wait_at(core, core.level, hint)
    }

    /// The open wait at backoff `level`.
    fn open_wait_at(&self, core: &mut Core, level: u32, hint: Option<Duration>) -> u64 {
        let rule = rules::OpenWaitRule::of(&core.config);
        let draw = if rule.jitter > 0 {
            let rng = core.rng.get_or_insert_with(Pcg64Mcg::from_os_rng);
            rng.random_range(0..=rule.jitter)
        } else {
            0
        };
        rules::open_wait(&rule, level, draw, hint.map(nanos))
    }

    /// The first step of a transition to Open with an open-wait function: the decision is
    /// taken (under the core lock) with everything the function's arguments and the
    /// transition need, and the breaker stays where it is until [`finish_open`] has the wait.
    ///
    /// [`finish_open`]: Self::finish_open
    #[expect(
        clippy::too_many_arguments,
        reason = "the transition's whole decision, kept for its second step"
    )]
    fn defer_open(
        &self,
        core: &mut Core,
        from: Word,
        reason: Reason,
        window: WindowSnapshot,
        now: u64,
        hint: Option<Duration>,
        f: crate::config::OpenDurationFn,
    ) {
        // The configured wait at the level this open will have: the function's fallback.
        let closed_for = now.saturating_sub(self.closed_since.load(Ordering::Relaxed));
        let level = rules::next_backoff_level(
            core.level,
            from.state(),
            false,
            core.ever_opened,
            closed_for,
            rules::OpenWaitRule::of(&core.config).healthy_after,
        );
        let fallback = self.open_wait_at(core, level, hint);
        let args = crate::config::OpenWaitArgs {
            attempt: next_attempt(core.attempt, from.state()),
            failures: window.failures,
            calls: window.calls,
            failure_rate: window.failure_rate(),
            slow_call_rate: window.slow_rate(),
            reason,
            retry_after: hint,
            configured: Duration::from_nanos(fallback),
        };
        core.opening = Some(Box::new(PendingOpen {
            word: from,
            reason,
            window,
            now,
            kind: core.pending_kind.take(),
            fallback,
            args,
            f,
            running: false,
        }));
        self.cold().opening.store(true, Ordering::Release);
    }

    /// The second step: calls the open-wait function with no lock held (a panic is caught,
    /// counted, and the configured wait applies), then opens, if the breaker is still where
    /// the decision found it (an operator may have moved it meanwhile, the function itself
    /// too), for the function's wait clamped to [`rules::clamp_open_wait`]'s bounds, from the
    /// time of the decision.
    #[cold]
    fn finish_open(&self, cold: &Cold) {
        let (word, args, f, fallback) = {
            let mut core = lock(&cold.core);
            match core.opening.as_deref_mut() {
                // Another thread runs it (or this one, and the function called back in).
                Some(p) if !p.running => {
                    p.running = true;
                    (p.word, p.args.clone(), p.f.clone(), p.fallback)
                }
                _ => return,
            }
        };
        // An operator that moved the breaker meanwhile has overtaken the open.
        let wait = (self.word() == word).then(|| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.call(&args))) {
                Ok(d) => rules::clamp_open_wait(nanos(d)),
                Err(_) => {
                    cold.open_wait_panics.fetch_add(1, Ordering::Relaxed);
                    fallback
                }
            }
        });
        let mut core = lock(&cold.core);
        // A later open, decided after an operator's move, may have taken the place: it is its
        // decider's to finish.
        if !core.opening.as_ref().is_some_and(|p| p.word == word) {
            return;
        }
        let Some(p) = core.opening.take() else { return };
        cold.opening.store(false, Ordering::Relaxed);
        if let Some(wait) = wait.filter(|_| self.word() == word) {
            core.pending_kind = p.kind;
            self.transition(
                &mut core,
                word,
                State::Open,
                p.reason,
                p.window,
                p.now,
                OpenWait::Computed(wait),
            );
        }
    }

    /// After the core lock is released: completes a transition to Open waiting for the
    /// open-wait function, then delivers the events queued.
    pub(super) fn drain(&self, cold: &Cold) {
        if cold.opening.load(Ordering::Acquire) {
            self.finish_open(cold);
        }
        cold.hub.drain();
    }

    /// Performs a transition. Caller holds the core lock and has checked that the state word
    /// is still `from`; lock-free paths never write the word, so it cannot move meanwhile.
    #[expect(
        clippy::too_many_arguments,
        reason = "a transition takes its whole decision: from, to, why, the window and when"
    )]
    pub(super) fn transition(
        &self,
        core: &mut Core,
        from: Word,
        to: State,
        reason: Reason,
        window: WindowSnapshot,
        now: u64,
        open: OpenWait,
    ) {
        // A transition to Open waiting for the open-wait function holds the breaker where it
        // is: only an operator moves it meanwhile (and an operator's trip, an open like it,
        // finds it underway).
        let rules_open = to == State::Open && matches!(open, OpenWait::Rules(_));
        if core.opening_from(from)
            && !matches!(open, OpenWait::Computed(_))
            && (reason != Reason::Operator || rules_open)
        {
            return;
        }
        if rules_open {
            if let (OpenWait::Rules(hint), Some(f)) = (open, core.config.open_duration_fn.clone()) {
                self.defer_open(core, from, reason, window, now, hint, f);
                return;
            }
        }
        let new = from.next(to);
        // An interval's new generation stays in the state it was in: its time goes on.
        let interval = reason == Reason::IntervalElapsed;
        if !interval {
            core.time_in[from.state() as usize] += now.saturating_sub(core.entered_at);
            core.entered_at = now;
        }
        let mut open_for = None;
        match to {
            State::Open => {
                core.attempt = next_attempt(core.attempt, from.state());
                let explicit = matches!(open, OpenWait::Exactly(_));
                let closed_for = now.saturating_sub(self.closed_since.load(Ordering::Relaxed));
                let healthy_after = rules::OpenWaitRule::of(&core.config).healthy_after;
                core.level = rules::next_backoff_level(
                    core.level,
                    from.state(),
                    explicit,
                    core.ever_opened,
                    closed_for,
                    healthy_after,
                );
                let wait = match open {
                    OpenWait::Exactly(w) | OpenWait::Computed(w) => w,
                    OpenWait::Rules(hint) => self.open_wait(core, hint),
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
                    .store(g << super::closed::FIRED_BITS, Ordering::Relaxed);
                if !interval {
                    // The open backoff's `healthy_after` counts from the close, not from the
                    // interval's start.
                    self.closed_since.store(now, Ordering::Relaxed);
                }
                self.closed_generation.store(g, Ordering::Release);
                let end = interval_end(&core.config, now);
                self.interval_end.store(end, Ordering::Relaxed);
                self.next_closed_check.store(
                    next_closed_check(&core.config, now, self.lane.inflight.width(), end),
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
        // A ramp in progress goes on through an interval's new generation.
        let carried = interval && self.hot.ramping.load(Ordering::Relaxed);
        if carried {
            self.cold().ramp.carry(new.generation());
        }
        self.hot
            .ramping
            .store(ramp.is_some() || carried, Ordering::Relaxed);
        if to == State::HalfOpen {
            core.round = Round::new(core.config.half_open_calls);
        } else if from.state() == State::HalfOpen {
            core.round = Round::new(0);
        }
        // Runs of consecutive outcomes start over with every state (gobreaker's counts do).
        self.hot.start_run(new.generation());
        self.hot
            .success_mark
            .store(self.successes(), Ordering::Relaxed);
        core.transitions += 1;
        // The new generation's counts start from the totals now (under the lock that
        // `counts` reads them under).
        core.base = self.totals();
        let cold = self.cold();
        // What opened the breaker, for its rejections, before the word that makes them.
        let kind = core.pending_kind.take();
        if matches!(to, State::Open | State::ForcedOpen) {
            cold.cause.write(&crate::error::TripCause {
                reason,
                kind,
                window,
                generation: new.generation(),
            });
        }
        // The event takes its place in the sequence before the new word is published: any
        // event a thread makes after seeing the new state comes after this one.
        cold.hub.push(
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
        self.word.store(new.0, Ordering::Release);
        #[cfg(feature = "tokio")]
        cold.notify.notify_one();
    }
}
