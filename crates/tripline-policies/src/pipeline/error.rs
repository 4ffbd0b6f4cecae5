//! Why a call through the pipeline did not return a value.

use std::fmt;

use tripline::Rejected;

use crate::bulkhead::BulkheadFull;
use crate::gate::GateOverflow;
use crate::throttle::Throttled;
use crate::timeout::Elapsed;

/// Why a call through a [`Pipeline`](super::Pipeline) did not return a value: a local policy
/// refused it (the dependency was not touched), it timed out, or the dependency failed. The
/// first four never come from the dependency, and are never retried.
///
/// ```
/// use tripline_policies::pipeline::PipelineError;
/// use tripline_policies::timeout::Elapsed;
/// use std::time::Duration;
///
/// let e: PipelineError<std::io::Error> = PipelineError::Timeout(Elapsed::new(Duration::from_secs(2)));
/// assert!(!e.is_local_rejection());
/// assert_eq!(e.to_string(), "call timed out after 2s");
/// ```
#[derive(Debug)]
pub enum PipelineError<E> {
    /// The breaker is open (or its probes are busy).
    Rejected(Rejected),
    /// The concurrency gate's limit was reached.
    Overflow(GateOverflow),
    /// The bulkhead was full, or no slot freed in time.
    BulkheadFull(BulkheadFull),
    /// The adaptive throttle refused the call locally.
    Throttled(Throttled),
    /// The attempt did not finish within the timeout.
    Timeout(Elapsed),
    /// The dependency's own error.
    Failed(E),
}

impl<E> PipelineError<E> {
    /// Whether a local policy refused the call (breaker, gate, bulkhead, throttle).
    pub fn is_local_rejection(&self) -> bool {
        matches!(
            self,
            PipelineError::Rejected(_)
                | PipelineError::Overflow(_)
                | PipelineError::BulkheadFull(_)
                | PipelineError::Throttled(_)
        )
    }

    /// The dependency's error, if that is what this is.
    pub fn into_failed(self) -> Option<E> {
        match self {
            PipelineError::Failed(e) => Some(e),
            _ => None,
        }
    }
}

impl<E: fmt::Display> fmt::Display for PipelineError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PipelineError::Rejected(e) => e.fmt(f),
            PipelineError::Overflow(e) => e.fmt(f),
            PipelineError::BulkheadFull(e) => e.fmt(f),
            PipelineError::Throttled(e) => e.fmt(f),
            PipelineError::Timeout(e) => e.fmt(f),
            PipelineError::Failed(e) => e.fmt(f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for PipelineError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(match self {
            PipelineError::Rejected(e) => e,
            PipelineError::Overflow(e) => e,
            PipelineError::BulkheadFull(e) => e,
            PipelineError::Throttled(e) => e,
            PipelineError::Timeout(e) => e,
            PipelineError::Failed(e) => e,
        })
    }
}
