//! The throttle's rejection.

use std::fmt;

/// A call the adaptive throttle refused locally, with the rejection probability it was drawn
/// against. Downcastable from a tower `BoxError`.
///
/// ```
/// use rand::SeedableRng;
/// use tripline::{ManualClock, Outcome};
/// use tripline_policies::throttle::{Throttle, ThrottleConfig};
///
/// let throttle = Throttle::with_clock_and_rng(
///     ThrottleConfig::default(),
///     ManualClock::new(),
///     rand_pcg::Pcg64Mcg::seed_from_u64(3),
/// );
/// let refused = (0..100)
///     .find_map(|_| match throttle.try_acquire() {
///         Ok(ticket) => {
///             ticket.record(Outcome::Failure);
///             None
///         }
///         Err(throttled) => Some(throttled),
///     })
///     .unwrap();
/// assert!(refused.probability() > 0.0);
/// assert!(refused.to_string().starts_with("throttled locally: rejecting "));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Throttled {
    pub(crate) probability: f64,
}

impl Throttled {
    /// The rejection probability when the call was refused.
    pub fn probability(&self) -> f64 {
        self.probability
    }
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "throttled locally: rejecting {:.1}% of requests",
            self.probability * 100.0
        )
    }
}

impl std::error::Error for Throttled {}
