//! Errors and the rejection value.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::state::State;

/// A configuration value out of range: names the field, the value and what is allowed.
///
/// ```
/// use tripline::BreakerConfig;
/// let err = BreakerConfig::builder().minimum_calls(0).build().unwrap_err();
/// assert_eq!(err.field(), "minimum_calls");
/// assert_eq!(err.to_string(), "minimum_calls must be in [1, 1000000], got 0");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} must be {allowed}, got {value}")]
pub struct ConfigError {
    field: String,
    value: String,
    allowed: String,
}

impl ConfigError {
    /// An error for `field`, which held `value` where `allowed` was expected.
    pub fn new(
        field: impl Into<String>,
        value: impl fmt::Display,
        allowed: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }

    /// The offending field, dotted for nested ones (`half_open.permitted_calls`).
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The value it held.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// What is allowed.
    pub fn allowed(&self) -> &str {
        &self.allowed
    }
}

/// A breaker's name. Cloning a name made from a `&'static str` costs nothing, which keeps
/// rejections cheap; other names are shared behind an `Arc`.
///
/// ```
/// use tripline::BreakerName;
/// let a = BreakerName::from("payments");
/// let b = BreakerName::from(String::from("payments"));
/// assert_eq!(a, b);
/// assert_eq!(&*a, "payments");
/// ```
#[derive(Clone)]
pub struct BreakerName(NameRepr);

#[derive(Clone)]
enum NameRepr {
    Static(&'static str),
    Shared(Arc<str>),
}

impl BreakerName {
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            NameRepr::Static(s) => s,
            NameRepr::Shared(s) => s,
        }
    }
}

impl std::ops::Deref for BreakerName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for BreakerName {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}
impl Eq for BreakerName {}

impl std::hash::Hash for BreakerName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl fmt::Debug for BreakerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for BreakerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&'static str> for BreakerName {
    fn from(s: &'static str) -> Self {
        Self(NameRepr::Static(s))
    }
}

impl From<String> for BreakerName {
    fn from(s: String) -> Self {
        Self(NameRepr::Shared(s.into()))
    }
}

impl From<Arc<str>> for BreakerName {
    fn from(s: Arc<str>) -> Self {
        Self(NameRepr::Shared(s))
    }
}

/// Why a call was refused, and what its [`Rejected::retry_after`] means.
///
/// | reason | state | `retry_after` |
/// |---|---|---|
/// | [`Open`](Self::Open) | Open | the rest of the open wait: then the next acquire is a probe (if a slot is free) |
/// | [`ProbesBusy`](Self::ProbesBusy) | HalfOpen | until the earliest probe lease expires: the latest a slot comes free while the breaker stays half-open (a verdict or the maximum half-open wait may change the state sooner) |
/// | [`ForcedOpen`](Self::ForcedOpen) | ForcedOpen | `None`: only an operator lifts a kill switch |
/// | [`RampingUp`](Self::RampingUp) | Closed | `None`: the next call may be admitted; a breaker ramping traffic back up after recovery ([`RampUp`](crate::RampUp)) admits a growing share of calls |
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, RejectReason};
/// let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
/// breaker.force_open();
/// assert_eq!(breaker.try_acquire().unwrap_err().reason(), RejectReason::ForcedOpen);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
#[non_exhaustive]
pub enum RejectReason {
    /// The breaker is Open and its wait has not elapsed.
    Open,
    /// The breaker is HalfOpen and every probe slot is taken (or its probes are settled and
    /// the verdict is pending on the ones in flight).
    ProbesBusy,
    /// An operator forced the breaker open (kill switch).
    ForcedOpen,
    /// A breaker ramping traffic back up after recovery ([`RampUp`](crate::RampUp)) refused
    /// this call: the step's share was taken.
    RampingUp,
}

impl RejectReason {
    /// A stable snake_case name, as used in metric labels (`probes_busy`).
    pub const fn as_str(self) -> &'static str {
        match self {
            RejectReason::Open => "open",
            RejectReason::ProbesBusy => "probes_busy",
            RejectReason::ForcedOpen => "forced_open",
            RejectReason::RampingUp => "ramping_up",
        }
    }

    /// The reason a refusal in `state` has (Open for any state that is not HalfOpen or
    /// ForcedOpen).
    pub const fn of_state(state: State) -> Self {
        match state {
            State::HalfOpen => RejectReason::ProbesBusy,
            State::ForcedOpen => RejectReason::ForcedOpen,
            _ => RejectReason::Open,
        }
    }
}

/// A call the breaker refused: which breaker, in which state, why, and how long until a probe
/// may be admitted (`None` when no automatic change is scheduled: forced open). Never confused
/// with the dependency's own error. See [`RejectReason`] for what each `retry_after` means.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, RejectReason, State};
///
/// let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
/// breaker.force_open();
/// let rejected = breaker.try_acquire().unwrap_err();
/// assert_eq!(rejected.breaker(), "catalog");
/// assert_eq!(rejected.state(), State::ForcedOpen);
/// assert_eq!(rejected.reason(), RejectReason::ForcedOpen);
/// assert_eq!(rejected.retry_after(), None);
/// assert_eq!(rejected.to_string(), "circuit breaker 'catalog' is forced open");
/// ```
///
/// Two rejections are equal when their breaker, state, reason and `retry_after` are; the
/// [`cause`](Self::cause) they carry is context, not compared.
#[derive(Clone, Debug)]
pub struct Rejected {
    pub(crate) breaker: BreakerName,
    pub(crate) state: State,
    pub(crate) reason: RejectReason,
    pub(crate) retry_after: Option<Duration>,
    /// The cause as the breaker stores it, decoded only when asked for ([`Rejected::cause`]),
    /// so that a rejection copies a few words and decodes nothing.
    pub(crate) cause: Option<crate::breaker::RawCause>,
}

impl PartialEq for Rejected {
    fn eq(&self, other: &Self) -> bool {
        self.breaker == other.breaker
            && self.state == other.state
            && self.reason == other.reason
            && self.retry_after == other.retry_after
    }
}

impl Eq for Rejected {}

/// What opened the breaker that refused a call ([`Rejected::cause`]): the rule that tripped
/// it (or [`Operator`](crate::Reason::Operator) for an operator's Open or ForcedOpen,
/// [`ProbesFailed`](crate::Reason::ProbesFailed) for failed probes,
/// [`HalfOpenTimeout`](crate::Reason::HalfOpenTimeout)), the kind of the failure whose result
/// tripped it (as its classifier labelled it: `None` for an unlabelled failure, a slow call,
/// a trip by calls in flight or by a reconfiguration, an operator), the window behind the
/// decision, and the generation the trip began. Polly hands the last exception to its
/// rejections; tripline keeps no error value (it holds no `E`), but says which failure and
/// which rule.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, Classification, FailureKind, Reason};
///
/// let breaker = CircuitBreaker::new("payments", BreakerConfig::builder().consecutive_failures(2).build()?);
/// for _ in 0..2 {
///     let p = breaker.try_acquire().unwrap();
///     p.record_classified(Classification::failure(FailureKind::Timeout));
/// }
/// let rejected = breaker.try_acquire().unwrap_err();
/// let cause = rejected.cause().expect("what opened it");
/// assert_eq!(cause.reason, Reason::ConsecutiveFailures { count: 2 });
/// assert_eq!(cause.kind, Some(FailureKind::Timeout));
/// assert_eq!(cause.window.failures, 2);
/// assert_eq!(cause.generation, breaker.generation());
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TripCause {
    /// The rule that opened the breaker, as its transition event names it.
    pub reason: crate::event::Reason,
    /// The kind of the failure whose result opened it, if it had one.
    pub kind: Option<crate::outcome::FailureKind>,
    /// The window behind the decision (for probe verdicts, the closed window as it was).
    pub window: crate::window::WindowSnapshot,
    /// The generation of the open period it began.
    pub generation: u64,
}

impl Rejected {
    /// The breaker's name.
    pub fn breaker(&self) -> &str {
        &self.breaker
    }

    /// The state that refused the call.
    pub fn state(&self) -> State {
        self.state
    }

    /// Why the call was refused.
    pub fn reason(&self) -> RejectReason {
        self.reason
    }

    /// How long until a probe may be admitted, if known (see [`RejectReason`]).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// What opened the breaker that refused this call ([`TripCause`]), for a rejection in
    /// Open, HalfOpen (the Open before it) and ForcedOpen by the in-process breaker. `None`
    /// for a ramp's refusal (the breaker is Closed), for a rejection made while the breaker
    /// moved on to its next open period (the cause it carries is always its own period's,
    /// never another's), and for stores that do not keep one (the Redis store's rejections
    /// carry none).
    pub fn cause(&self) -> Option<TripCause> {
        self.cause
            .as_ref()
            .and_then(crate::breaker::RawCause::decode)
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = &self.breaker;
        match self.reason {
            RejectReason::Open => write!(f, "circuit breaker '{b}' is open")?,
            RejectReason::ProbesBusy => write!(
                f,
                "circuit breaker '{b}' is half-open with every probe slot taken"
            )?,
            RejectReason::ForcedOpen => write!(f, "circuit breaker '{b}' is forced open")?,
            RejectReason::RampingUp => write!(f, "circuit breaker '{b}' is ramping up")?,
        }
        if let Some(d) = self.retry_after {
            let what = match self.reason {
                RejectReason::ProbesBusy => "a probe slot frees",
                _ => "next probe",
            };
            // To the millisecond, rounded up: a probe is never sooner than said.
            let shown = if d >= Duration::from_millis(1) {
                Duration::from_millis(
                    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
                )
            } else {
                d
            };
            write!(f, "; {what} in {}", crate::config::fmt_d(shown))?;
        }
        Ok(())
    }
}

/// An operator transition that was refused: an edge that does not exist, or a wait out of
/// range.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, State, TransitionError};
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// breaker.transition_to_disabled().unwrap();
/// let err = breaker.transition_to_half_open().unwrap_err();
/// assert_eq!(err, TransitionError::NoSuchEdge { from: State::Disabled, to: State::HalfOpen });
/// assert_eq!(
///     err.to_string(),
///     "no operator transition from disabled to half-open; from disabled an operator may go to \
///      closed, open, disabled, metrics-only, forced-open",
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The operator edge `from -> to` does not exist (see [`State::operator_targets`]).
    #[error(
        "no operator transition from {from} to {to}; from {from} an operator may go to {}",
        from.operator_targets().iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
    )]
    NoSuchEdge {
        /// The state the breaker was in.
        from: State,
        /// The state asked for.
        to: State,
    },
    /// The open wait asked for is out of range.
    #[error(transparent)]
    Wait(#[from] ConfigError),
}

impl std::error::Error for Rejected {}

/// Why a call through the breaker did not return a value.
///
/// ```
/// use tripline::{BreakerConfig, CallError, CircuitBreaker};
///
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// let r: Result<u32, CallError<&str>> = breaker.call(|| Err("connection refused"));
/// assert!(matches!(r, Err(CallError::Failed("connection refused"))));
/// ```
#[derive(Debug, PartialEq, Eq)]
pub enum CallError<E> {
    /// The breaker refused the call; the dependency was not touched.
    Rejected(Rejected),
    /// The call did not finish within its timeout (counted as a failure).
    Timeout(Duration),
    /// The dependency returned an error.
    Failed(E),
}

impl<E> CallError<E> {
    /// The dependency's error, if that is what this is.
    pub fn into_failed(self) -> Option<E> {
        match self {
            CallError::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// Whether the breaker refused the call.
    pub fn is_rejected(&self) -> bool {
        matches!(self, CallError::Rejected(_))
    }
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Rejected(r) => r.fmt(f),
            CallError::Timeout(d) => write!(f, "call timed out after {}", crate::config::fmt_d(*d)),
            CallError::Failed(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for CallError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Rejected(r) => Some(r),
            CallError::Timeout(_) => None,
            CallError::Failed(e) => Some(e),
        }
    }
}
