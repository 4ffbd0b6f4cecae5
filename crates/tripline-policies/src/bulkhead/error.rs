//! The bulkhead's rejection.

use std::fmt;
use std::time::Duration;

/// A call the bulkhead refused: every slot was busy and either the wait queue was full, or no
/// slot freed up within `max_wait`. A distinct value, never confused with the dependency's own
/// error; downcastable from a tower `BoxError`.
///
/// ```
/// use tripline_policies::bulkhead::{Bulkhead, BulkheadConfig};
///
/// let bulkhead = Bulkhead::new(BulkheadConfig::builder().max_concurrent(1).build()?);
/// let _slot = bulkhead.try_acquire()?;
/// let full = bulkhead.try_acquire().unwrap_err();
/// assert!(!full.timed_out());
/// assert_eq!(full.to_string(), "bulkhead full: 1 calls in flight and 0 waiting");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkheadFull {
    pub(crate) max_concurrent: u32,
    pub(crate) max_waiting: u32,
    pub(crate) waited: Option<Duration>,
}

impl BulkheadFull {
    /// Whether the call waited `max_wait` in the queue for nothing (rather than finding the
    /// queue full).
    pub fn timed_out(&self) -> bool {
        self.waited.is_some()
    }

    /// How long the call waited before being refused, if it was queued.
    pub fn waited(&self) -> Option<Duration> {
        self.waited
    }
}

impl fmt::Display for BulkheadFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.waited {
            Some(w) => write!(f, "bulkhead full: no slot freed within {w:?}"),
            None => write!(
                f,
                "bulkhead full: {} calls in flight and {} waiting",
                self.max_concurrent, self.max_waiting
            ),
        }
    }
}

impl std::error::Error for BulkheadFull {}
