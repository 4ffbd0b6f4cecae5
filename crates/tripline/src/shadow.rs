//! A candidate configuration on trial beside the live breaker.
//!
//! Before a tuned configuration replaces the one in production, run it beside the live
//! breaker on the live traffic: [`ShadowCandidate`] asks both breakers about every call, lets
//! only the live one decide, gives each the outcomes of the calls it admitted, and counts
//! where the two disagreed: calls the candidate would have refused (and whether they then
//! failed, which the refusal would have saved, or succeeded, which it would have cost) and
//! calls the candidate would have let through while the live breaker refused them. This is
//! Shopify Semian's dual circuit breaker (two breakers recording the same traffic, one of them
//! deciding), with the candidate's decisions counted instead of switched to.
//!
//! The candidate runs its full rules (it trips, waits, probes), on the live breaker's clock;
//! it is counterfactual exactly as `tripline replay` is: a call it would have refused is not
//! recorded on it (it would not have been made), and a call only it would have admitted has
//! no outcome and is recorded as ignored. With the live breaker in MetricsOnly (a service
//! recording before it trusts a breaker), every call is made and the candidate's figures are
//! what it would have done.
//!
//! ```
//! use tripline::shadow::ShadowCandidate;
//! use tripline::{BreakerConfig, CircuitBreaker, ManualClock, Outcome};
//!
//! let clock = ManualClock::new();
//! let live = CircuitBreaker::with_clock("catalog", BreakerConfig::default(), clock.clone());
//! let tuned = BreakerConfig::builder().count_window(20).minimum_calls(5).build()?;
//! let shadow = ShadowCandidate::new(live, tuned)?;
//!
//! for _ in 0..10 {
//!     let _ = shadow.call(|| Err::<(), _>("503")); // the live breaker needs 20 calls, the candidate 5
//! }
//! let r = shadow.report();
//! assert_eq!(r.candidate_would_reject, 5);
//! assert_eq!(r.candidate_would_reject_failed, 5); // the refusals would have saved 5 failures
//! assert_eq!(r.disagreements[0].calls, 5);
//! # Ok::<(), tripline::ConfigError>(())
//! ```

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::{
    BreakerConfig, CallError, CircuitBreaker, Classification, Classify, Clock, ConfigError,
    Outcome, Permit, Recorded, Rejected, ResultClassifier, State,
};

/// The most disagreement periods a report keeps (the first ones).
pub const MAX_DISAGREEMENTS: usize = 1000;

/// A period in which the two breakers decided differently, in the same way, call after call:
/// a call on which they agree ends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disagreement {
    /// The first call of the period, on the breakers' clock.
    pub from: Duration,
    /// The last.
    pub until: Duration,
    /// The live breaker's state then.
    pub live: State,
    /// The candidate's.
    pub candidate: State,
    /// Whether the candidate refused (true) or admitted (false) the calls.
    pub candidate_rejected: bool,
    /// Calls in the period.
    pub calls: u64,
}

/// Where the candidate would have decided differently.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShadowReport {
    /// Calls asked about.
    pub calls: u64,
    /// Both admitted.
    pub both_admitted: u64,
    /// Both refused.
    pub both_rejected: u64,
    /// The live breaker admitted, the candidate would have refused.
    pub candidate_would_reject: u64,
    /// ... and the call failed: the candidate would have saved the wait.
    pub candidate_would_reject_failed: u64,
    /// ... and the call succeeded: the candidate would have refused a healthy call.
    pub candidate_would_reject_succeeded: u64,
    /// The live breaker refused, the candidate would have admitted (outcome unknown).
    pub candidate_would_admit: u64,
    /// The candidate's transitions so far.
    pub candidate_transitions: u64,
    /// The first periods of disagreement (at most [`MAX_DISAGREEMENTS`]).
    pub disagreements: Vec<Disagreement>,
}

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    both_admitted: AtomicU64,
    both_rejected: AtomicU64,
    would_reject: AtomicU64,
    would_reject_failed: AtomicU64,
    would_reject_succeeded: AtomicU64,
    would_admit: AtomicU64,
}

/// The live breaker and a candidate configuration on trial beside it (see the module docs).
#[derive(Debug)]
pub struct ShadowCandidate<C: Clock + Clone> {
    live: CircuitBreaker<C>,
    candidate: CircuitBreaker<C>,
    counters: Counters,
    disagreements: Mutex<Periods>,
}

/// The periods of disagreement, and the call (by its number) the last one ended with: a
/// period goes on only with the very next call, so one agreeing call between two
/// disagreements makes them two periods.
#[derive(Debug, Default)]
struct Periods {
    list: Vec<Disagreement>,
    last_call: u64,
}

/// The right to make one call, from the live breaker (and, if it would have admitted it, the
/// candidate). Record the outcome with [`ShadowPermit::record`]; dropped without a result, both
/// permits are abandoned.
#[must_use = "record the call's outcome, or the permit counts as abandoned"]
#[derive(Debug)]
pub struct ShadowPermit<'a, C: Clock + Clone> {
    live: Permit<'a, C>,
    candidate: Option<Permit<'a, C>>,
    counters: &'a Counters,
}

impl<C: Clock + Clone> ShadowPermit<'_, C> {
    /// Records the outcome on the live breaker (whose result is returned) and on the
    /// candidate, if it admitted the call.
    pub fn record(self, outcome: Outcome) -> Recorded {
        self.record_classified(Classification::new(outcome))
    }

    /// [`record`](Self::record) with a classification.
    pub fn record_classified(self, c: Classification) -> Recorded {
        match self.candidate {
            Some(p) => {
                let _ = p.record_classified(c);
            }
            None => {
                let r = Ordering::Relaxed;
                match c.outcome {
                    Outcome::Failure => self.counters.would_reject_failed.fetch_add(1, r),
                    Outcome::Success => self.counters.would_reject_succeeded.fetch_add(1, r),
                    Outcome::Ignored => 0,
                };
            }
        }
        self.live.record_classified(c)
    }

    /// Whether the candidate would have refused this call.
    pub fn candidate_rejected(&self) -> bool {
        self.candidate.is_none()
    }
}

impl<C: Clock + Clone> ShadowCandidate<C> {
    /// Puts `candidate` on trial beside `live`, on `live`'s clock. The candidate is named
    /// after the live breaker with `~candidate` appended.
    pub fn new(
        live: CircuitBreaker<C>,
        candidate: impl Into<std::sync::Arc<BreakerConfig>>,
    ) -> Result<Self, ConfigError> {
        let candidate = candidate.into();
        candidate.validate()?;
        let name = format!("{}~candidate", live.name());
        let candidate = CircuitBreaker::with_clock(name, candidate, live.clock().clone());
        Ok(Self {
            live,
            candidate,
            counters: Counters::default(),
            disagreements: Mutex::new(Periods::default()),
        })
    }

    /// The live breaker.
    pub fn live(&self) -> &CircuitBreaker<C> {
        &self.live
    }

    /// The candidate's breaker (subscribe a listener to it to see its transitions).
    pub fn candidate(&self) -> &CircuitBreaker<C> {
        &self.candidate
    }

    /// Asks both breakers; the live one decides.
    pub fn try_acquire(&self) -> Result<ShadowPermit<'_, C>, Rejected> {
        let r = Ordering::Relaxed;
        let call = self.counters.calls.fetch_add(1, r);
        let live = self.live.try_acquire();
        let candidate = self.candidate.try_acquire();
        match (live, candidate) {
            (Ok(l), Ok(c)) => {
                self.counters.both_admitted.fetch_add(1, r);
                Ok(ShadowPermit {
                    live: l,
                    candidate: Some(c),
                    counters: &self.counters,
                })
            }
            (Ok(l), Err(_)) => {
                self.counters.would_reject.fetch_add(1, r);
                self.disagree(call, true);
                Ok(ShadowPermit {
                    live: l,
                    candidate: None,
                    counters: &self.counters,
                })
            }
            (Err(e), Ok(c)) => {
                self.counters.would_admit.fetch_add(1, r);
                self.disagree(call, false);
                // Never made: no outcome to give it.
                let _ = c.record(Outcome::Ignored);
                Err(e)
            }
            (Err(e), Err(_)) => {
                self.counters.both_rejected.fetch_add(1, r);
                Err(e)
            }
        }
    }

    /// Runs `f` through the live breaker: `Ok` is a success, `Err` a failure.
    pub fn call<T, E>(&self, f: impl FnOnce() -> Result<T, E>) -> Result<T, CallError<E>> {
        self.call_classified(ResultClassifier, f)
    }

    /// [`call`](Self::call) with a classifier.
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

    #[cold]
    fn disagree(&self, call: u64, candidate_rejected: bool) {
        let now = Duration::from_nanos(self.live.clock().now());
        let (live, candidate) = (self.live.state(), self.candidate.state());
        let mut p = self
            .disagreements
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let follows = p.last_call.checked_add(1) == Some(call) && !p.list.is_empty();
        p.last_call = call;
        let same = follows
            && p.list.last().is_some_and(|l| {
                l.candidate_rejected == candidate_rejected
                    && l.live == live
                    && l.candidate == candidate
            });
        if let (true, Some(last)) = (same, p.list.last_mut()) {
            last.until = now;
            last.calls += 1;
        } else if p.list.len() < MAX_DISAGREEMENTS {
            p.list.push(Disagreement {
                from: now,
                until: now,
                live,
                candidate,
                candidate_rejected,
                calls: 1,
            });
        }
    }

    /// The figures so far.
    pub fn report(&self) -> ShadowReport {
        let r = Ordering::Relaxed;
        let c = &self.counters;
        ShadowReport {
            calls: c.calls.load(r),
            both_admitted: c.both_admitted.load(r),
            both_rejected: c.both_rejected.load(r),
            candidate_would_reject: c.would_reject.load(r),
            candidate_would_reject_failed: c.would_reject_failed.load(r),
            candidate_would_reject_succeeded: c.would_reject_succeeded.load(r),
            candidate_would_admit: c.would_admit.load(r),
            candidate_transitions: self.candidate.metrics().transitions,
            disagreements: self
                .disagreements
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .list
                .clone(),
        }
    }
}
