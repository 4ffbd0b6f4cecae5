//! One interface for every host of the breaker's rules: the in-process [`CircuitBreaker`] and
//! the fleet-wide breaker whose window and state live in Redis (`tripline_redis::SharedBreaker`).
//!
//! The policies (the pipeline, the tower layer, the reqwest middleware, the gRPC layer), the
//! metrics ([`observe::BreakerMetrics::for_breaker`](crate::observe)) and the operator's page are
//! generic over [`Breaker`], so moving a service from one replica to a fleet changes the line
//! that builds the breaker and nothing on the call path:
//!
//! ```text
//! let breaker = CircuitBreaker::new("catalog", config);                        // one replica
//! let breaker = SharedBreaker::new("catalog", config, shared, backend)?;       // the fleet
//! ```
//!
//! # The shape
//! * **Admission is a future.** [`Breaker::acquire`] returns [`Breaker::Acquire`], a named
//!   `'static` future: the in-process breaker's is [`std::future::Ready`] (it decides in a few
//!   atomic operations and never waits), the shared breaker's may wait for one Redis round
//!   trip (bounded by its `redis_timeout`, after which its local fallback decides). Hosts that
//!   The futures are `Unpin` (a ready value, or a box), so a synchronous host keeps one in a
//!   field without boxing it again. Hosts that
//!   can decide synchronously say so ([`Breaker::ADMITS_AT_ONCE`]) and answer
//!   [`Breaker::try_acquire_now`], so a synchronous host such as a tower service's `call`
//!   keeps the in-process breaker's behaviour and cost exactly (no permit taken before `call`).
//! * **Recording is a future too** ([`BreakerPermit::record_classified`]): the in-process
//!   permit's is ready at once, the shared permit's sends the outcome to Redis.
//! * **A permit dropped without a result** is abandoned on every host: it counts as neither a
//!   success nor a failure and gives back its half-open probe slot (fleet-wide for the shared
//!   breaker).
//! * **Operator moves** ([`Breaker::transition_to`], [`Breaker::force_open`],
//!   [`Breaker::reset`]) follow the edges of [`State::operator_targets`] on every host; the
//!   shared breaker's reach every replica (a kill switch thrown on one holds fleet-wide). The
//!   answer is a future of `Result<(), OperatorError>`.
//! * **State and figures** ([`Breaker::state`], [`Breaker::metrics`]) never wait: the in-process
//!   breaker's are exact, the shared breaker's are the fleet's state as this replica last saw
//!   it and this replica's own counters.
//!
//! The trait's method names are the in-process breaker's, so generic code reads like code for
//! one breaker; on a concrete `CircuitBreaker` the inherent methods (synchronous, returning
//! `()` or `Result`) are the ones a method call finds, and `Breaker::force_open(&b)` names the
//! trait's.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tripline::{Breaker, BreakerConfig, BreakerPermit, CircuitBreaker, Outcome, State};
//!
//! // Code written once for every host.
//! async fn guarded<B: Breaker>(breaker: &B) -> Result<&'static str, tripline::Rejected> {
//!     let permit = breaker.acquire().await?;
//!     permit.record(Outcome::Success).await;
//!     Ok("fresh")
//! }
//!
//! let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
//! assert_eq!(guarded(&breaker).await?, "fresh");
//! Breaker::force_open(&breaker).await?;
//! assert_eq!(Breaker::state(&breaker), State::ForcedOpen);
//! assert!(guarded(&breaker).await.is_err());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::{Future, Ready, ready};

use crate::breaker::{CircuitBreaker, Metrics, OwnedPermit, Recorded};
use crate::clock::Clock;
use crate::config::BreakerConfig;
use crate::error::{Rejected, TransitionError};
use crate::outcome::{Classification, Outcome};
use crate::state::State;

/// Where a breaker's decisions are shared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reach {
    /// This process only (the in-process [`CircuitBreaker`]).
    Process,
    /// Every replica using the same store and scope (the shared breaker in Redis).
    Fleet,
}

impl Reach {
    /// `process` or `fleet`, as the dashboard and the metrics write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reach::Process => "process",
            Reach::Fleet => "fleet",
        }
    }
}

impl fmt::Display for Reach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an operator's move was not made.
///
/// ```
/// use tripline::{OperatorError, State, TransitionError};
/// let e = OperatorError::from(TransitionError::NoSuchEdge { from: State::Closed, to: State::HalfOpen });
/// assert!(e.to_string().starts_with("no operator transition from closed to half-open"));
/// let e = OperatorError::Unreachable("Connection refused".into());
/// assert_eq!(e.to_string(), "the operator's move did not reach the breaker's store: Connection refused");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// There is no such operator edge from the breaker's state, or the open wait asked for is
    /// out of range.
    #[error(transparent)]
    Refused(#[from] TransitionError),
    /// The breaker's store (Redis, for a shared breaker) did not perform it: unreachable, too
    /// slow, or an error, in its own words. Nothing changed fleet-wide.
    #[error("the operator's move did not reach the breaker's store: {0}")]
    Unreachable(String),
}

/// The right to make one call through a [`Breaker`]. Record the call's outcome with
/// [`record`](Self::record) or [`record_classified`](Self::record_classified) and await it; a
/// permit dropped without a result is abandoned (neither a success nor a failure; a probe's
/// slot goes back).
pub trait BreakerPermit: Send + fmt::Debug + 'static {
    /// The future of a recorded result: ready at once in-process, a round trip (or a place in
    /// a batch) for a shared breaker.
    type Record: Future<Output = Recorded> + Send + Unpin + 'static;

    /// Records a classification, with its optional `Retry-After` hint and failure kind.
    fn record_classified(self, classification: Classification) -> Self::Record;

    /// Records the call's outcome.
    fn record(self, outcome: Outcome) -> Self::Record
    where
        Self: Sized,
    {
        self.record_classified(Classification::new(outcome))
    }

    /// Whether this permit is a half-open probe.
    fn is_probe(&self) -> bool;
}

/// A circuit breaker, whichever host keeps its window and state: see the [module docs](self).
///
/// Cloning is cheap and clones share the breaker, as with both implementations.
pub trait Breaker: Clone + fmt::Debug + Send + Sync + 'static {
    /// The clock the breaker measures calls with.
    type Clock: Clock;
    /// A permit to make one call.
    type Permit: BreakerPermit;
    /// The future of an admission decision.
    type Acquire: Future<Output = Result<Self::Permit, Rejected>> + Send + Unpin + 'static;
    /// The future of an operator's move.
    type Operation: Future<Output = Result<(), OperatorError>> + Send + Unpin + 'static;

    /// Whether [`try_acquire_now`](Self::try_acquire_now) always decides (the in-process
    /// breaker); hosts that may need a round trip leave it `false`, and a synchronous host
    /// (a tower service) then admits in `poll_ready`.
    const ADMITS_AT_ONCE: bool = false;

    /// The breaker's name (for a shared breaker, its scope as given).
    fn name(&self) -> &str;

    /// The name as it may be shown outside the process (metrics labels, pages): the name
    /// itself unless the host hides it (a shared breaker with hashed scopes shows the hash).
    fn label(&self) -> &str {
        self.name()
    }

    /// Where the breaker's decisions are shared.
    fn reach(&self) -> Reach;

    /// The breaker configuration in force.
    fn config(&self) -> BreakerConfig;

    /// Asks to make one call.
    fn acquire(&self) -> Self::Acquire;

    /// Decides without waiting, where the host can: `Some` always when
    /// [`ADMITS_AT_ONCE`](Self::ADMITS_AT_ONCE), `None` from a host that would have to wait.
    fn try_acquire_now(&self) -> Option<Result<Self::Permit, Rejected>> {
        None
    }

    /// The state, without waiting (a shared breaker's: as this replica last saw the fleet's).
    fn state(&self) -> State;

    /// The figures, without waiting: the state and window as in [`state`](Self::state), and
    /// the counters of the calls this process made.
    fn metrics(&self) -> Metrics;

    /// Operator: moves the breaker to `to` along an edge of [`State::operator_targets`].
    fn transition_to(&self, to: State) -> Self::Operation;

    /// Operator: reject every call until told otherwise (the kill switch).
    fn force_open(&self) -> Self::Operation {
        self.transition_to(State::ForcedOpen)
    }

    /// Operator: back to Closed with a fresh window.
    fn reset(&self) -> Self::Operation {
        self.transition_to(State::Closed)
    }

    /// Whether two handles are the same breaker (clones of one handle).
    fn same_breaker(&self, other: &Self) -> bool;

    /// The `metrics` facade's handles for this breaker, with `extra` labels beside `breaker`
    /// (feature `metrics`); what [`BreakerMetrics::for_breaker`](crate::observe) returns. The
    /// default publishes every series from [`metrics`](Self::metrics) on each update; the
    /// in-process breaker's also follows its transitions as they happen.
    #[cfg(feature = "metrics")]
    fn breaker_metrics(&self, extra: Vec<metrics::Label>) -> crate::observe::BreakerMetrics {
        crate::observe::BreakerMetrics::from_figures(self, extra)
    }
}

impl<C: Clock> BreakerPermit for OwnedPermit<C> {
    type Record = Ready<Recorded>;

    fn record_classified(self, classification: Classification) -> Self::Record {
        ready(OwnedPermit::record_classified(self, classification))
    }

    fn is_probe(&self) -> bool {
        OwnedPermit::is_probe(self)
    }
}

impl<C: Clock> Breaker for CircuitBreaker<C> {
    type Clock = C;
    type Permit = OwnedPermit<C>;
    type Acquire = Ready<Result<OwnedPermit<C>, Rejected>>;
    type Operation = Ready<Result<(), OperatorError>>;

    const ADMITS_AT_ONCE: bool = true;

    fn name(&self) -> &str {
        CircuitBreaker::name(self)
    }

    fn reach(&self) -> Reach {
        Reach::Process
    }

    fn config(&self) -> BreakerConfig {
        CircuitBreaker::config(self)
    }

    fn acquire(&self) -> Self::Acquire {
        ready(self.try_acquire_owned())
    }

    fn try_acquire_now(&self) -> Option<Result<Self::Permit, Rejected>> {
        Some(self.try_acquire_owned())
    }

    fn state(&self) -> State {
        CircuitBreaker::state(self)
    }

    fn metrics(&self) -> Metrics {
        CircuitBreaker::metrics(self)
    }

    fn transition_to(&self, to: State) -> Self::Operation {
        ready(CircuitBreaker::transition_to(self, to).map_err(OperatorError::from))
    }

    fn same_breaker(&self, other: &Self) -> bool {
        self.ptr_eq(other)
    }

    #[cfg(feature = "metrics")]
    fn breaker_metrics(&self, extra: Vec<metrics::Label>) -> crate::observe::BreakerMetrics {
        crate::observe::BreakerMetrics::new(self, extra)
    }
}
