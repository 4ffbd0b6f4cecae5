//! The lock-free paths: admission, recording and the trip decision in Closed and
//! MetricsOnly, rejection in Open and ForcedOpen, and abandoned permits. They read the state
//! word, write only atomics (the window, the in-flight cohorts, the lane's counters) and ask
//! [`rules`] what the window says; only a transition (a trip) takes the core lock.

use std::time::Duration;

use super::hot::{CHECK_IN_FLIGHT, CHECK_INTERVAL, LUMPING, Lanes, Pending};
use super::permit::{Kind, Recorded, Ticket};
use super::transition::Cold;
use super::{Inner, NO_TIME};
use crate::clock::Clock;
use crate::error::{RejectReason, Rejected};
use crate::event::{EventKind, Reason};
use crate::inflight::Cohort;
use crate::outcome::{Classification, FailureKind, Outcome};
use crate::rules::{self, Fired};
use crate::state::{State, Word};
use crate::sync::{Ordering, lock};
use crate::window::{Sample, Window, WindowSnapshot};

/// The bits of `Cold::would_trip` below the generation: one per rule.
pub(super) const FIRED_BITS: u32 = 4;

/// A MetricsOnly breaker's record of the rules that fired at its last evaluation (the low
/// [`FIRED_BITS`] bits of `Cold::would_trip`, under the generation).
fn fired_bits(f: &Fired) -> u64 {
    u64::from(f.failure_rate)
        | u64::from(f.slow_call_rate) << 1
        | u64::from(f.consecutive.is_some()) << 2
        | u64::from(f.failure_count.is_some()) << 3
}

fn fired_from_bits(bits: u64) -> Fired {
    Fired {
        // The run's length (the count) does not matter for "was it firing".
        consecutive: (bits & 4 != 0).then_some(0),
        failure_count: (bits & 8 != 0).then_some(0),
        failure_rate: bits & 1 != 0,
        slow_call_rate: bits & 2 != 0,
    }
}

impl<C: Clock> Inner<C> {
    #[inline]
    pub(super) fn acquire(&self) -> Result<Ticket, Rejected> {
        loop {
            let word = self.word();
            match word.state() {
                State::Closed | State::MetricsOnly => {
                    // A count window judged by its failure rate alone reads no clock.
                    let mut now = if self.hot.timed.load(Ordering::Relaxed) != 0 {
                        self.now()
                    } else {
                        NO_TIME
                    };
                    let checks = self.hot.closed_checks.load(Ordering::Relaxed);
                    if checks != 0 {
                        // In flight and the interval need the time (a reconfiguration may have
                        // turned them on between the two loads). Before the ramp, so that a
                        // generation that ends here costs its ramp no call.
                        now = self.real_now(now);
                        if now >= self.next_closed_check.load(Ordering::Relaxed)
                            && self.closed_check(word, now)
                        {
                            continue;
                        }
                    }
                    if self.hot.ramping.load(Ordering::Relaxed) {
                        now = self.real_now(now);
                        if !self.ramp_admits(word, now) {
                            return Err(self.ramp_reject(now));
                        }
                    }
                    let mut cohort = Cohort::NONE;
                    let mut lane = 0;
                    if checks != 0 {
                        let l = self.lane();
                        if checks & CHECK_IN_FLIGHT != 0 {
                            cohort = l.1.inflight.enter(now, word.generation());
                            lane = l.0;
                        }
                        l.1.admitted.fetch_add(1, Ordering::Relaxed);
                    } else {
                        self.lane().1.admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(Ticket {
                        generation: word.generation(),
                        started: now,
                        kind: Kind::Window { cohort, lane },
                    });
                }
                State::Open => {
                    let until = self.open_until.load(Ordering::Acquire);
                    let recent = self.clock.recent();
                    if !rules::open_elapsed(until, recent) {
                        return Err(self.reject::<0>(
                            Some(until - recent),
                            recent,
                            word.generation(),
                        ));
                    }
                    // The cheap reading says the wait is over: the full one decides (and a
                    // clock whose cheap reading runs ahead gets a rejection, not a spin).
                    let now = self.now();
                    if !rules::open_elapsed(until, now) {
                        return Err(self.reject::<0>(Some(until - now), now, word.generation()));
                    }
                    self.open_to_half_open(word, now);
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
                    return Err(self.reject::<2>(None, self.clock.recent(), word.generation()));
                }
            }
        }
    }

    /// Whether a listener wants per-call events (none can before the cold part exists).
    #[inline]
    pub(super) fn call_events(&self) -> Option<&Cold> {
        self.cold.get().filter(|c| c.hub.wants_call_events())
    }

    /// Records a permit's result; `elapsed` is the caller's own measure of the call, if given.
    pub(super) fn settle(&self, t: Ticket, c: Classification, elapsed: Option<u64>) -> Recorded {
        let (recorded, now) = match t.kind {
            Kind::Passthrough => return Recorded::Disabled,
            Kind::Window { cohort, lane } => {
                self.lane_at(lane).inflight.exit(cohort, t.generation);
                // An untimed call (started at NO_TIME) took no measurable time.
                let (now, took) = if t.started == NO_TIME {
                    (NO_TIME, elapsed.unwrap_or(0))
                } else {
                    let now = self.now();
                    (
                        now,
                        elapsed.unwrap_or_else(|| now.saturating_sub(t.started)),
                    )
                };
                (self.record_window(t.generation, took, now, c), now)
            }
            Kind::Probe { slot, token } => {
                let now = self.now();
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
        // before a listener asked for outcomes, reports none).
        let elapsed = took.unwrap_or_else(|| {
            if t.started == NO_TIME {
                0
            } else {
                now.saturating_sub(t.started)
            }
        });
        cold.hub.call_event(
            now,
            &self.name,
            EventKind::CallOutcome {
                outcome,
                duration: Duration::from_nanos(elapsed),
                slow: rules::is_slow(elapsed, self.hot.slow_nanos.load(Ordering::Relaxed)),
                generation: t.generation,
                probe: matches!(t.kind, Kind::Probe { .. }),
                counted: r == Recorded::Counted,
            },
        );
    }

    /// A permit dropped without a result: leaves its cohort or gives back its probe slot.
    pub(super) fn abandon(&self, generation: u64, kind: Kind) {
        let (probe, current) = match kind {
            Kind::Passthrough => return,
            Kind::Window { cohort, lane } => {
                self.lane_at(lane).inflight.exit(cohort, generation);
                (false, self.word().generation() == generation)
            }
            Kind::Probe { slot, token } => (true, self.abandon_probe(slot, token)),
        };
        self.lane().1.abandoned.fetch_add(1, Ordering::Relaxed);
        if !current {
            // Admitted in an earlier generation (or a probe whose lease was reclaimed): not
            // the current generation's (see `counts`). Only after a transition, so the cold
            // part exists.
            self.cold().stale_abandoned.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(cold) = self.call_events() {
            cold.hub.call_event(
                self.now(),
                &self.name,
                EventKind::Abandoned { generation, probe },
            );
        }
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
            let last = (g == generation && at != 0).then(|| at - 1);
            if rules::lumped(last, interval, now) {
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
    /// (a reset meanwhile ends them), its kind, the run of failures, its time for the
    /// failure-count rule. Returns the rules it fires: the run if the consecutive rule fires,
    /// the count if the failure-count rule does.
    #[inline(never)]
    fn counted_failure(
        &self,
        generation: u64,
        now: u64,
        sample: Sample,
        weight: u32,
        kind: Option<FailureKind>,
    ) -> Fired {
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
        let failure_count = self.failure_times.as_ref().and_then(|times| {
            times.record(generation, now, weight);
            times.fires(
                generation,
                self.hot.count_within.load(Ordering::Relaxed),
                now,
            )
        });
        Fired {
            consecutive: rules::consecutive_fires(n, self.hot.consecutive_limit()).then_some(n),
            failure_count,
            ..Fired::default()
        }
    }

    /// The failure-count rule's count at `now`, if it fires on `generation`'s failures.
    pub(super) fn failure_count_at(&self, generation: u64, now: u64) -> Option<u64> {
        self.failure_times.as_ref().and_then(|times| {
            times.fires(
                generation,
                self.hot.count_within.load(Ordering::Relaxed),
                now,
            )
        })
    }

    /// The window of the last entry into Closed (or MetricsOnly) with its overdue in-flight
    /// calls: the current window while Closed, the one that tripped while Open.
    pub(super) fn snapshot(&self, now: u64) -> WindowSnapshot {
        self.snapshot_of(self.closed_generation.load(Ordering::Acquire), now)
    }

    /// `generation`'s window and overdue in-flight calls (empty for a generation that is not
    /// the window's).
    pub(super) fn snapshot_of(&self, generation: u64, now: u64) -> WindowSnapshot {
        let mut snap = self.window_snapshot(generation, now);
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
    /// ForcedOpen 2) at `generation`; the slot is a constant, so the counter, the state and the
    /// reason cost nothing to find. It carries what opened the breaker, when the cause written
    /// is this open period's.
    #[cold]
    pub(super) fn reject<const SLOT: usize>(
        &self,
        retry_after: Option<u64>,
        now: u64,
        generation: u64,
    ) -> Rejected {
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
            self.rejection_event(cold, state, reason, retry_after, now);
        }
        Rejected {
            breaker: self.name.clone(),
            state,
            reason,
            retry_after,
            cause: self.cold().cause.read_for(state, generation),
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn rejection_event(
        &self,
        cold: &Cold,
        state: State,
        reason: RejectReason,
        retry_after: Option<Duration>,
        now: u64,
    ) {
        cold.hub.call_event(
            now,
            &self.name,
            EventKind::Rejected {
                state,
                reason,
                retry_after,
            },
        );
    }

    pub(super) fn stale(&self, permit_generation: u64, now: u64) -> Recorded {
        // A result is stale only after a transition, so the cold part exists.
        let cold = self.cold();
        cold.stale.fetch_add(1, Ordering::Relaxed);
        if cold.hub.wants_call_events() {
            let generation = self.word().generation();
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

    /// Every rule that fires on `generation`'s window now ([`rules::fired`]), and the window.
    /// The slow-call rate counts overdue in-flight calls when `with_in_flight` (and in-flight
    /// counting is on); `events` holds the rules a failure fired (the run of failures, the
    /// failure count), which the window does not show.
    fn fired_on(
        &self,
        generation: u64,
        now: u64,
        events: Fired,
        with_in_flight: bool,
    ) -> (Fired, WindowSnapshot) {
        let snap = if with_in_flight {
            self.snapshot_of(generation, now)
        } else {
            self.window_snapshot(generation, now)
        };
        let t = self.hot.thresholds();
        if let Window::Time(w) = &self.window {
            w.evaluated(
                generation,
                !rules::minimum_reached(snap.calls, t.minimum_calls),
            );
        }
        let fired = Fired {
            failure_count: events.failure_count,
            ..rules::fired(&snap, &t, events.consecutive)
        };
        (fired, snap)
    }

    /// The reason a trip names now, with the window behind it, if any rule fires.
    pub(super) fn trip_reason(
        &self,
        generation: u64,
        now: u64,
        events: Fired,
        with_in_flight: bool,
    ) -> Option<(Reason, WindowSnapshot)> {
        let (fired, snap) = self.fired_on(generation, now, events, with_in_flight);
        fired.reason().map(|reason| (reason, snap))
    }

    /// The window's success gate for a good result ([`rules::count_success_gate`],
    /// [`rules::time_success_gate`]).
    #[inline]
    fn success_gate(&self, filling: bool, generation: u64, now: u64) -> bool {
        match &self.window {
            Window::Count(_) => rules::count_success_gate(filling),
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
        let word = self.word();
        if word.generation() != generation {
            return self.stale(generation, self.real_now(now));
        }
        let r = Ordering::Relaxed;
        // A result at or after the interval's end belongs to a generation that is over (an
        // untimed call, admitted before a reconfiguration set an interval, waits for the next
        // acquire to end it).
        if self.hot.closed_checks.load(r) & CHECK_INTERVAL != 0
            && now != NO_TIME
            && rules::interval_over(self.interval_end.load(r), now)
            && self.end_interval(word, now)
        {
            return self.stale(generation, now);
        }
        let slow = rules::is_slow(elapsed, self.hot.slow_nanos.load(r));
        let mut weight = 1;
        let failure = match c.outcome {
            Outcome::Ignored => {
                self.lane().1.count(c.outcome, slow);
                return Recorded::Ignored;
            }
            // A fast success of a full striped count window: kept in this thread's lane, no
            // shared line written; with a full ring and nothing fired, it evaluates nothing.
            Outcome::Success => {
                if !slow
                    && word.state() == State::Closed
                    && self
                        .batching()
                        .is_some_and(|lanes| self.batch_success(lanes, generation))
                {
                    self.lane().1.count(c.outcome, slow);
                    self.hot.consecutive_success(generation);
                    return Recorded::Counted;
                }
                false
            }
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
        // Every success kept in a lane goes in first: none lands after a result that came
        // after it.
        let batching = self.batching();
        if let Some(lanes) = batching {
            self.flush_lanes(lanes, generation);
        }
        let Some(filling) = self.window.record(generation, now, sample) else {
            return self.stale(generation, self.real_now(now));
        };
        if let Some(lanes) = batching.filter(|_| !filling && !failure && !slow) {
            self.ring_seen_full(lanes, generation);
        }
        self.lane().1.count(c.outcome, slow);
        let events = if failure {
            self.counted_failure(generation, now, sample, weight, c.kind)
        } else {
            self.hot.consecutive_success(generation);
            Fired::default()
        };
        if word.state() == State::MetricsOnly {
            self.shadow_evaluate(word, self.real_now(now), events);
        } else if rules::result_evaluates(failure, slow, events.any(), || {
            self.success_gate(filling, generation, now)
        }) {
            // An untimed call's rules (a count window, no calls in flight) need no time; the
            // trip does, and so do calls in flight (counted once a reconfiguration turned the
            // slow-call rule on after this call was admitted untimed).
            let eval_now = if self.hot.in_flight.load(r) {
                self.real_now(now)
            } else {
                now
            };
            if let Some((reason, snap)) =
                self.trip_reason(generation, eval_now, events, failure || slow)
            {
                self.trip_from(
                    word,
                    self.real_now(now),
                    reason,
                    snap,
                    c.retry_after,
                    c.kind.filter(|_| failure),
                );
            }
        }
        Recorded::Counted
    }

    /// A striped count window's lanes, when its fast successes are batched (a count window
    /// without call durations, of at least two slots, with stripes).
    #[inline(always)]
    fn batching(&self) -> Option<&Lanes> {
        self.lanes.as_deref().filter(|l| l.1 != 0)
    }

    /// This thread's lane's word of kept successes.
    #[inline]
    fn pending(lanes: &Lanes) -> &crate::sync::AtomicU64 {
        &lanes.0[crate::sync::stripe_index() % lanes.0.len()].1
    }

    /// Keeps a fast success of `generation` in this thread's lane, once the lane has seen the
    /// ring full, and puts the lane's batch in the ring when it is full: true. False: the
    /// success takes the ring's own path.
    #[inline(never)]
    fn batch_success(&self, lanes: &Lanes, generation: u64) -> bool {
        let batch = lanes.1;
        let pending = Self::pending(lanes);
        let tag = Pending::tag(generation);
        let mut v = pending.load(Ordering::Relaxed);
        loop {
            if !Pending::batching(v, tag) {
                return false;
            }
            let n = Pending::count(v) + 1;
            let next = if n >= batch {
                Pending::emptied(v)
            } else {
                v + 1
            };
            match pending.compare_exchange_weak(v, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    if n >= batch {
                        // `None`: a reset ran since the word was this generation's; the batch
                        // goes with the window it belonged to.
                        self.window_successes(generation, n);
                    }
                    return true;
                }
                Err(actual) => v = actual,
            }
        }
    }

    /// `n` successes of `generation` into a count window's ring at once.
    fn window_successes(&self, generation: u64, n: u64) {
        if let Window::Count(w) = &self.window {
            let _ = w.record_successes(generation, u32::try_from(n).unwrap_or(u32::MAX));
        }
    }

    /// A fast success found `generation`'s ring full: this thread's lane keeps its next ones
    /// (a striped count window). A word of a newer generation is left alone.
    #[cold]
    fn ring_seen_full(&self, lanes: &Lanes, generation: u64) {
        let pending = Self::pending(lanes);
        let tag = Pending::tag(generation);
        let v = pending.load(Ordering::Relaxed);
        if !Pending::batching(v, tag) && !Pending::newer(v, tag) {
            // Another (older) generation's successes go with its window.
            let _ = pending.compare_exchange(
                v,
                Pending::full(tag),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Puts every lane's kept successes of `generation` in the ring (before any other result
    /// and before every snapshot).
    #[inline(never)]
    fn flush_lanes(&self, lanes: &Lanes, generation: u64) {
        let tag = Pending::tag(generation);
        for lane in lanes.0.iter() {
            let pending = &lane.1;
            let mut v = pending.load(Ordering::Relaxed);
            while Pending::batching(v, tag) && Pending::count(v) != 0 {
                match pending.compare_exchange_weak(
                    v,
                    Pending::emptied(v),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        self.window_successes(generation, Pending::count(v));
                        break;
                    }
                    Err(actual) => v = actual,
                }
            }
        }
    }

    /// `generation`'s window at `now`, every lane's kept successes in it.
    fn window_snapshot(&self, generation: u64, now: u64) -> WindowSnapshot {
        if let Some(lanes) = self.batching() {
            self.flush_lanes(lanes, generation);
        }
        self.window.snapshot(generation, now)
    }

    /// MetricsOnly: evaluates every rule as Closed would (in-flight calls included) and
    /// reports each rule that starts firing, once, as a would-trip event.
    #[cold]
    fn shadow_evaluate(&self, word: Word, now: u64, events: Fired) {
        let generation = word.generation();
        // The consecutive rule goes on firing while its run lasts, and the failure-count rule
        // while its failures are recent enough, also when this evaluation did not come from a
        // failure (the acquire-time in-flight check).
        let consecutive = events.consecutive.or_else(|| {
            let run = self.hot.failure_run(generation);
            rules::consecutive_fires(run, self.hot.consecutive_limit()).then_some(run)
        });
        let failure_count = events
            .failure_count
            .or_else(|| self.failure_count_at(generation, now));
        let events = Fired {
            consecutive,
            failure_count,
            ..Fired::default()
        };
        let (fired, window) = self.fired_on(generation, now, events, true);
        let cold = self.cold();
        let before = cold.would_trip.swap(
            generation << FIRED_BITS | fired_bits(&fired),
            Ordering::Relaxed,
        );
        let before = if before >> FIRED_BITS == generation {
            fired_from_bits(before & ((1 << FIRED_BITS) - 1))
        } else {
            Fired::default()
        };
        let new = fired.since(before);
        if !new.any() {
            return;
        }
        {
            let _core = lock(&cold.core);
            if word == self.word() {
                for reason in new.reasons() {
                    cold.hub
                        .push(now, &self.name, EventKind::WouldTrip { reason, window });
                }
            }
        }
        self.drain(cold);
    }

    /// What a closed acquire finds due at `now`: the end of the generation's interval, or the
    /// in-flight check. Whether the acquire should look at the state word again.
    #[cold]
    fn closed_check(&self, word: Word, now: u64) -> bool {
        if rules::interval_over(self.interval_end.load(Ordering::Relaxed), now) {
            return self.end_interval(word, now);
        }
        self.check_in_flight(word, now)
    }

    /// Ends the Closed (or MetricsOnly) generation `word` whose interval is over at `now`: a
    /// transition to the same state, starting a new generation with every count cleared.
    /// Whether the word moved (by this transition or another).
    #[cold]
    pub(super) fn end_interval(&self, word: Word, now: u64) -> bool {
        let cold = self.cold();
        {
            let mut core = lock(&cold.core);
            let end = self.interval_end.load(Ordering::Relaxed);
            if self.word() == word
                && matches!(word.state(), State::Closed | State::MetricsOnly)
                && rules::interval_over(end, now)
                && !core.opening_from(word)
            {
                let snap = self.snapshot(now);
                self.transition(
                    &mut core,
                    word,
                    word.state(),
                    Reason::IntervalElapsed,
                    snap,
                    now,
                    super::OpenWait::RULES,
                );
            }
        }
        self.drain(cold);
        self.word() != word
    }

    /// Re-checks in-flight calls on acquire, at most once per cohort width. Returns whether the
    /// breaker tripped (MetricsOnly reports instead of tripping).
    #[cold]
    fn check_in_flight(&self, word: Word, now: u64) -> bool {
        let due = self.next_closed_check.load(Ordering::Relaxed);
        let in_flight = self.hot.in_flight.load(Ordering::Relaxed);
        let next = if in_flight {
            now.saturating_add(self.lane.inflight.width())
        } else {
            u64::MAX
        }
        .min(self.interval_end.load(Ordering::Relaxed));
        if now < due
            || self
                .next_closed_check
                .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
            || !in_flight
        {
            return false;
        }
        if word.state() == State::MetricsOnly {
            self.shadow_evaluate(word, now, Fired::default());
            return false;
        }
        match self.trip_reason(word.generation(), now, Fired::default(), true) {
            Some((reason, snap)) => self.trip_from(word, now, reason, snap, None, None),
            None => false,
        }
    }
}
