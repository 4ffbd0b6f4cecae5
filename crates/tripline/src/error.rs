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

/// A call the breaker refused: which breaker, in which state, and how long until a probe may
/// be admitted (`None` when no automatic change is scheduled: forced open, or every probe slot
/// busy without a deadline). Never confused with the dependency's own error.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, State};
///
/// let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
/// breaker.force_open();
/// let rejected = breaker.try_acquire().unwrap_err();
/// assert_eq!(rejected.breaker(), "catalog");
/// assert_eq!(rejected.state(), State::ForcedOpen);
/// assert_eq!(rejected.retry_after(), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    pub(crate) breaker: BreakerName,
    pub(crate) state: State,
    pub(crate) retry_after: Option<Duration>,
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

    /// How long until a probe may be admitted, if known.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "circuit breaker '{}' is {}", self.breaker, self.state)?;
        if let Some(d) = self.retry_after {
            write!(f, "; next probe in {}", crate::config::fmt_d(d))?;
        }
        Ok(())
    }
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
