//! The limiter's refusal.

use std::fmt;

use crate::shed::{Priority, Refusal};

/// A call the [`Limiter`](super::Limiter) refused: its priority, why, and the limit and calls
/// in flight at that moment. A distinct value, never confused with the dependency's own error;
/// downcastable from a tower `BoxError`.
///
/// ```
/// use tripline_policies::limiter::{FixedLimit, LimitAlgorithm, Limiter, LimiterConfig};
/// use tripline_policies::shed::{Priority, Refusal};
///
/// let config = LimiterConfig::builder()
///     .algorithm(LimitAlgorithm::Fixed(FixedLimit::new(1)?))
///     .build()?;
/// let limiter = Limiter::new(config);
/// let _held = limiter.try_acquire(Priority::DEFAULT)?;
/// let err = limiter.try_acquire(Priority::DEFAULT).unwrap_err();
/// assert_eq!(err.reason(), Refusal::Full);
/// assert_eq!(err.to_string(), "limiter refused a default call (limit 1, 1 in flight): every slot is busy");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitExceeded {
    pub(crate) priority: Priority,
    pub(crate) reason: Refusal,
    pub(crate) limit: u32,
    pub(crate) in_flight: u32,
}

impl LimitExceeded {
    /// The call's priority.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Why it was refused.
    pub fn reason(&self) -> Refusal {
        self.reason
    }

    /// The limit then.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Calls in flight then.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }
}

impl fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "limiter refused a {} call (limit {}, {} in flight): {}",
            self.priority, self.limit, self.in_flight, self.reason
        )
    }
}

impl std::error::Error for LimitExceeded {}
