//! The partial breaker's rejection.

use std::fmt;

/// A call the [`PartialBreaker`](super::PartialBreaker) rejected, with the rejection rate it
/// was drawn against. Downcastable from a tower `BoxError`.
///
/// ```
/// use tripline_policies::partial::PartiallyOpen;
///
/// let e = PartiallyOpen::new(0.176);
/// assert_eq!(e.to_string(), "partially open: rejecting 17.6% of calls");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PartiallyOpen {
    pub(crate) rejection_rate: f64,
}

impl PartiallyOpen {
    /// A rejection at `rejection_rate`.
    pub const fn new(rejection_rate: f64) -> Self {
        Self { rejection_rate }
    }

    /// The rejection rate when the call was rejected.
    pub fn rejection_rate(&self) -> f64 {
        self.rejection_rate
    }
}

impl fmt::Display for PartiallyOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "partially open: rejecting {:.1}% of calls",
            self.rejection_rate * 100.0
        )
    }
}

impl std::error::Error for PartiallyOpen {}
