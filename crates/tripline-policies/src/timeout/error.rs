//! The timeout's error.

use std::fmt;
use std::time::Duration;

/// A call that did not finish within its timeout. A breaker outside the timeout counts it as a
/// failure. Downcastable from a tower `BoxError`.
///
/// ```
/// use std::time::Duration;
/// use tripline_policies::timeout::Elapsed;
///
/// let e = Elapsed::new(Duration::from_millis(250));
/// assert_eq!(e.to_string(), "call timed out after 250ms");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Elapsed {
    after: Duration,
}

impl Elapsed {
    /// A timeout after `after`.
    pub const fn new(after: Duration) -> Self {
        Self { after }
    }

    /// The timeout that elapsed.
    pub const fn after(&self) -> Duration {
        self.after
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call timed out after {:?}", self.after)
    }
}

impl std::error::Error for Elapsed {}
