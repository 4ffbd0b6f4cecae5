//! Permits: the right to make one call, and what became of its result.

use std::sync::Arc;
use std::time::Duration;

use super::Inner;
use crate::clock::{Clock, MonotonicClock, nanos};
use crate::inflight::Cohort;
use crate::outcome::{Classification, Outcome};

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
pub(super) enum Kind {
    Window { cohort: Cohort, lane: u32 },
    Probe { slot: u32, token: u64 },
    Passthrough,
}

/// What a permit is: its generation, start time and kind. Shared by [`Permit`] and
/// [`OwnedPermit`].
#[derive(Clone, Copy, Debug)]
pub(super) struct Ticket {
    pub(super) generation: u64,
    pub(super) started: u64,
    pub(super) kind: Kind,
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
        /// does not time its calls: see [`BreakerConfig::needs_time`](crate::BreakerConfig::needs_time)).
        pub fn elapsed(&self) -> Duration {
            Duration::from_nanos(self.inner.now().saturating_sub(self.ticket.started))
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

impl<'a, C: Clock> Permit<'a, C> {
    pub(super) fn new(inner: &'a Inner<C>, ticket: Ticket) -> Self {
        Self {
            inner,
            ticket,
            done: false,
        }
    }
}

impl<C: Clock> OwnedPermit<C> {
    pub(super) fn new(inner: Arc<Inner<C>>, ticket: Ticket) -> Self {
        Self {
            inner,
            ticket,
            done: false,
        }
    }
}
