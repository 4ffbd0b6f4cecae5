//! Operator transitions: an operator (or a runbook, or a control plane) moves a breaker to a
//! state of their choosing, as resilience4j's `transitionTo*State` calls do.
//!
//! # The edges
//! The automatic edges stay the only ones the rules take (Closed→Open, Open→HalfOpen,
//! HalfOpen→Closed, HalfOpen→Open). An operator has these, each a transition like any other:
//! it bumps the generation (so results of calls admitted before it are stale), and listeners
//! get [`EventKind::Transition`](crate::EventKind::Transition) with
//! [`Reason::Operator`](crate::Reason::Operator) (and `open_for` for Open).
//!
//! | from \ to | Closed | Open | HalfOpen | Disabled | MetricsOnly | ForcedOpen |
//! |---|---|---|---|---|---|---|
//! | Closed | reset: fresh window | trip | **refused** | yes | yes | yes |
//! | Open | yes | a new wait | skip the rest of the wait | yes | yes | yes |
//! | HalfOpen | yes | yes | nothing | yes | yes | yes |
//! | Disabled | yes | yes | **refused** | nothing | yes | yes |
//! | MetricsOnly | yes | yes | **refused** | yes | nothing | yes |
//! | ForcedOpen | yes | yes | probe now | yes | yes | nothing |
//!
//! Half-open means "recovering from open": a breaker that is Closed, Disabled or MetricsOnly
//! has nothing to recover from, so an operator's HalfOpen from there is refused with a
//! [`TransitionError::NoSuchEdge`] that lists the edges there are
//! ([`State::operator_targets`]). resilience4j allows Disabled→HalfOpen; tripline does not.
//! Going to Closed always starts a fresh window, also from Closed: a reset is a transition
//! (resilience4j's `reset()` is an event of its own). An Open target waits the configured open
//! wait (jitter and backoff included) unless the call says for how long. Two more edges differ
//! from resilience4j on purpose (`docs/porting.md` pins each with a test): MetricsOnly→Open
//! exists (every state may go to Open), and HalfOpen→HalfOpen keeps the round in flight
//! (asking for the current state changes nothing but for Closed and Open).
//!
//! A breaker held by an operator override ([`CircuitBreaker::operator_hold`]: a registry's
//! `set_operator`) stays in the held state: a move elsewhere is accepted and does nothing until
//! the override is cleared. Each move is decided by [`rules::operator_edge`] and
//! [`rules::hold_permits`] under the breaker's lock.
//!
//! [`rules::operator_edge`]: crate::rules::operator_edge
//! [`rules::hold_permits`]: crate::rules::hold_permits
//!
//! ```
//! use std::time::Duration;
//! use tripline::{BreakerConfig, CircuitBreaker, ManualClock, State};
//!
//! let clock = ManualClock::new();
//! let breaker = CircuitBreaker::with_clock("catalog", BreakerConfig::default(), clock.clone());
//! // The vendor said it is down until it says otherwise: hold calls for 5 minutes.
//! breaker.transition_to_open_for(Duration::from_secs(300))?;
//! assert_eq!(breaker.try_acquire().unwrap_err().retry_after(), Some(Duration::from_secs(300)));
//! // It came back early: probe now.
//! breaker.transition_to_half_open()?;
//! assert!(breaker.try_acquire().unwrap().is_probe());
//! # Ok::<(), tripline::TransitionError>(())
//! ```

use std::time::Duration;

use crate::breaker::OpenWait;
use crate::clock::{Clock, nanos};
use crate::error::{ConfigError, TransitionError};
use crate::{CircuitBreaker, State};

/// The longest explicit open wait.
const MAX_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

fn explicit(field: &str, wait: Duration) -> Result<OpenWait, TransitionError> {
    explicit_wait(field, wait)?;
    Ok(OpenWait::Exactly(nanos(wait)))
}

/// An operator's explicit open wait in nanoseconds, if it is at most 7 days.
pub(crate) fn explicit_wait(field: &str, wait: Duration) -> Result<u64, TransitionError> {
    if wait > MAX_WAIT {
        return Err(ConfigError::new(
            field,
            crate::config::fmt_d(wait),
            "between 0 and 7days (use transition_to_forced_open to hold calls until told otherwise)",
        )
        .into());
    }
    Ok(nanos(wait))
}

impl<C: Clock> CircuitBreaker<C> {
    /// Operator: moves the breaker to `to` along an edge of [`State::operator_targets`] (see
    /// the table in the module docs); Open waits the configured open wait. Asking for the state
    /// the breaker is in does nothing, except that Closed starts a fresh window and Open a new
    /// wait.
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker, State};
    /// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
    /// breaker.transition_to(State::MetricsOnly)?;
    /// assert_eq!(breaker.state(), State::MetricsOnly);
    /// assert!(breaker.transition_to(State::HalfOpen).is_err());
    /// # Ok::<(), tripline::TransitionError>(())
    /// ```
    pub fn transition_to(&self, to: State) -> Result<(), TransitionError> {
        self.inner().operator_transition(to, OpenWait::RULES)
    }

    /// Operator: to Closed with a fresh window, from any state (a reset).
    pub fn transition_to_closed(&self) -> Result<(), TransitionError> {
        self.transition_to(State::Closed)
    }

    /// Operator: to Open for the configured open wait (jitter and backoff included), from any
    /// state; from Open, the wait starts again.
    pub fn transition_to_open(&self) -> Result<(), TransitionError> {
        self.transition_to(State::Open)
    }

    /// Operator: to Open for exactly `wait` (no jitter; the backoff level is left alone), at
    /// most 7 days; then the next acquire probes as after any open wait.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline::{BreakerConfig, CircuitBreaker};
    /// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
    /// let err = breaker.transition_to_open_for(Duration::from_secs(8 * 86_400)).unwrap_err();
    /// assert!(err.to_string().starts_with("open_for must be between 0 and 7days"), "{err}");
    /// ```
    pub fn transition_to_open_for(&self, wait: Duration) -> Result<(), TransitionError> {
        let open = explicit("open_for", wait)?;
        self.inner().operator_transition(State::Open, open)
    }

    /// Operator: to Open until the breaker's clock reads `at` (a reading like
    /// [`Event::at`](crate::Event::at): time since the clock's origin), at most 7 days from
    /// now. A time already past opens with no wait left: the next acquire probes.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline::{BreakerConfig, CircuitBreaker, Clock, ManualClock};
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_secs(100));
    /// let breaker = CircuitBreaker::with_clock("db", BreakerConfig::default(), clock.clone());
    /// breaker.transition_to_open_until(Duration::from_secs(130))?;
    /// assert_eq!(breaker.try_acquire().unwrap_err().retry_after(), Some(Duration::from_secs(30)));
    /// # Ok::<(), tripline::TransitionError>(())
    /// ```
    pub fn transition_to_open_until(&self, at: Duration) -> Result<(), TransitionError> {
        let now = self.inner().now();
        let wait = Duration::from_nanos(nanos(at).saturating_sub(now));
        let open = explicit("open_until", wait)?;
        self.inner().operator_transition(State::Open, open)
    }

    /// Operator: to HalfOpen (a fresh probe round) from Open or ForcedOpen; refused from
    /// Closed, Disabled and MetricsOnly.
    pub fn transition_to_half_open(&self) -> Result<(), TransitionError> {
        self.transition_to(State::HalfOpen)
    }

    /// Operator: to Disabled (permit everything, record nothing), from any state.
    pub fn transition_to_disabled(&self) -> Result<(), TransitionError> {
        self.transition_to(State::Disabled)
    }

    /// Operator: to MetricsOnly (shadow mode; entering it starts a fresh window, and from
    /// MetricsOnly it changes nothing), from any state.
    pub fn transition_to_metrics_only(&self) -> Result<(), TransitionError> {
        self.transition_to(State::MetricsOnly)
    }

    /// Operator: to ForcedOpen (kill switch), from any state.
    pub fn transition_to_forced_open(&self) -> Result<(), TransitionError> {
        self.transition_to(State::ForcedOpen)
    }
}
