//! Per-generation counts (gobreaker's `Counts`): differences of the lifetime totals the calls
//! already keep, against the totals a transition takes under the core lock as it starts the
//! generation.
//!
//! # What is exact, and what races
//! A call writes no counter of its own for these figures but the admission count, which sits
//! on the lane the call's result writes anyway (stripe-local in a striped breaker); successes,
//! failures, ignored results, abandoned permits and refusals are the totals the metrics
//! already count. A transition reads them all under the core lock, before it publishes the new
//! generation, and [`CircuitBreaker::counts`] reads them under the same lock, so with one
//! caller at a time (and always in HalfOpen, whose probes are admitted and settled under the
//! lock) every figure is exact and `requests = successes + failures + ignored + abandoned +
//! expired_probes + in_flight`.
//!
//! Lock-free calls racing a transition may land on the wrong side of it: a closed call that
//! read the old generation but counts its admission after the transition's snapshot counts
//! in the new generation's `requests` though its result will be stale (it then reads as in
//! flight there for the rest of that generation), and a result that passed the staleness
//! check just before the transition but counts just after counts in the new generation. Each
//! moves at most one call per caller racing that one transition; nothing is counted twice or
//! lost from the lifetime totals of [`Metrics`](crate::Metrics). `in_flight` is what remains
//! of `requests` once every result is accounted for, never below zero.

use super::{CircuitBreaker, Inner};
use crate::clock::Clock;
use crate::state::State;
use crate::sync::{Ordering, lock};

/// The lifetime totals the per-generation counts are differences of.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Totals {
    admitted: u64,
    successes: u64,
    failures: u64,
    ignored: u64,
    /// Abandoned permits of the generation that admitted them (stale ones left out).
    abandoned: u64,
    expired: u64,
    rejected: u64,
}

/// What the breaker has counted in its current generation: since the last transition (every
/// state change, every reset, every `interval` boundary in Closed), as gobreaker's `Counts`
/// are. Read with [`CircuitBreaker::counts`].
///
/// `requests` counts the calls admitted in this generation (in Closed, MetricsOnly and
/// HalfOpen; none are admitted in Open and ForcedOpen, and a Disabled breaker counts
/// nothing). Each ends in exactly one of the other columns, or is still `in_flight`:
/// `requests == successes + failures + ignored + abandoned + expired_probes + in_flight`.
/// Results of an earlier generation's calls are stale and count in none of them (the metrics'
/// `stale_results` counts them).
///
/// # Exact, and approximate
/// With one caller at a time, and always in HalfOpen (whose probes are admitted and settled
/// under the breaker's lock), every figure is exact. Lock-free closed calls racing a
/// transition may land on the wrong side of it: a call that read the old generation but
/// counts its admission just after the transition counts in the new generation's `requests`
/// though its result will be stale (it then reads as in flight there for the rest of that
/// generation), and a result that passed the staleness check just before the transition but
/// counts just after counts in the new generation. Each race moves at most one call per caller
/// racing that one transition; nothing is counted twice, and the lifetime totals of
/// [`Metrics`](crate::Metrics) lose nothing. `in_flight` is what remains of `requests` once
/// every other column is taken, never below zero.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, Outcome};
///
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// let _ = breaker.call(|| Ok::<_, ()>(()));
/// let _ = breaker.call(|| Err::<(), _>("boom"));
/// let pending = breaker.try_acquire().unwrap();
/// let c = breaker.counts();
/// assert_eq!((c.requests, c.successes, c.failures, c.in_flight), (3, 1, 1, 1));
/// assert_eq!(c.consecutive_failures, 1);
///
/// breaker.reset(); // a new generation: every count starts over
/// assert_eq!(pending.record(Outcome::Success), tripline::Recorded::Stale);
/// let c = breaker.counts();
/// assert_eq!((c.generation, c.requests, c.successes, c.in_flight), (1, 0, 0, 0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Counts {
    /// The state the counts are of.
    pub state: State,
    /// The generation the counts are of.
    pub generation: u64,
    /// Calls admitted in this generation (gobreaker's `Requests`).
    pub requests: u64,
    /// Of them, results recorded as successes (slow ones included; gobreaker's
    /// `TotalSuccesses`).
    pub successes: u64,
    /// Results recorded as failures (lumped ones included; gobreaker's `TotalFailures`).
    pub failures: u64,
    /// Results whose outcome was ignored (failures of a kind weighing 0 included).
    pub ignored: u64,
    /// Permits dropped without a result.
    pub abandoned: u64,
    /// Half-open probes whose lease expired and was reclaimed (their late results are stale).
    pub expired_probes: u64,
    /// Admitted, no result yet, not abandoned: `requests` less every column above.
    pub in_flight: u64,
    /// Calls refused in this generation (Open, ForcedOpen, HalfOpen with every probe slot
    /// taken, Closed while ramping up).
    pub rejected: u64,
    /// The current run of successes (gobreaker's `ConsecutiveSuccesses`; approximate while
    /// results race each other, as in [`Metrics`](crate::Metrics)).
    pub consecutive_successes: u64,
    /// The current run of failures (gobreaker's `ConsecutiveFailures`; a weighted failure
    /// adds its weight).
    pub consecutive_failures: u64,
}

impl<C: Clock> CircuitBreaker<C> {
    /// What the breaker has counted in its current generation (see [`Counts`]): gobreaker's
    /// `Counts`, with the calls still in flight, ignored, abandoned and refused beside them.
    /// Reads a few counters per stripe under the core lock; takes no clock reading.
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker, State};
    ///
    /// let config = BreakerConfig::builder().consecutive_failures(2).build()?;
    /// let breaker = CircuitBreaker::new("db", config);
    /// let _ = breaker.call(|| Err::<(), _>("boom"));
    /// let _ = breaker.call(|| Err::<(), _>("boom"));
    /// assert_eq!(breaker.state(), State::Open);
    /// let _ = breaker.call(|| Ok::<_, ()>(())); // refused
    /// let c = breaker.counts();
    /// assert_eq!((c.state, c.requests, c.failures, c.rejected), (State::Open, 0, 0, 1));
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn counts(&self) -> Counts {
        self.inner.counts()
    }
}

impl<C: Clock> Inner<C> {
    /// The lifetime totals now.
    pub(super) fn totals(&self) -> Totals {
        let r = Ordering::Relaxed;
        let mut t = Totals::default();
        for l in self.lanes() {
            t.admitted += l.admitted.load(r);
            t.successes += l.successes.load(r);
            t.failures += l.failures.load(r);
            t.ignored += l.ignored.load(r);
            t.abandoned += l.abandoned.load(r);
            t.rejected += l.rejected.iter().map(|c| c.load(r)).sum::<u64>();
        }
        if let Some(cold) = self.cold.get() {
            t.abandoned = t.abandoned.saturating_sub(cold.stale_abandoned.load(r));
            t.expired = cold.expired_probes.load(r);
            t.rejected += cold.half_open_rejected.load(r) + cold.ramp.rejected.load(r);
        }
        t
    }

    fn counts(&self) -> Counts {
        // The word first: without the cold part after it, no transition had happened by then
        // (generation 0, nothing to subtract); with it, word and totals are read under the
        // core lock, which every transition holds while it takes its snapshot.
        let word = self.word();
        let (word, base, now) = match self.cold.get() {
            None => (word, Totals::default(), self.totals()),
            Some(cold) => {
                let core = lock(&cold.core);
                (self.word(), core.base, self.totals())
            }
        };
        let d = |f: fn(&Totals) -> u64| f(&now).saturating_sub(f(&base));
        let mut c = Counts {
            state: word.state(),
            generation: word.generation(),
            requests: d(|t| t.admitted),
            successes: d(|t| t.successes),
            failures: d(|t| t.failures),
            ignored: d(|t| t.ignored),
            abandoned: d(|t| t.abandoned),
            expired_probes: d(|t| t.expired),
            in_flight: 0,
            rejected: d(|t| t.rejected),
            consecutive_successes: 0,
            consecutive_failures: self.hot.failure_run(word.generation()),
        };
        c.in_flight = c
            .requests
            .saturating_sub(c.successes + c.failures + c.ignored + c.abandoned + c.expired_probes);
        if c.consecutive_failures == 0 {
            c.consecutive_successes = now
                .successes
                .saturating_sub(self.hot.success_mark.load(Ordering::Relaxed));
        }
        c
    }
}
