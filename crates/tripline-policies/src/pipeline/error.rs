//! Why a call through the pipeline did not return a value.

use std::fmt;

use tripline::Rejected;

use crate::bulkhead::BulkheadFull;
use crate::chaos::InjectedFault;
use crate::gate::GateOverflow;
use crate::limiter::LimitExceeded;
use crate::partial::PartiallyOpen;
use crate::shed::Shed;
use crate::throttle::Throttled;
use crate::timeout::Elapsed;

/// Why a call through a [`Pipeline`](super::Pipeline) did not return a value: a local policy
/// refused it (the dependency was not touched), it timed out, a fault was injected, or the
/// dependency failed. The local refusals never come from the dependency, and are never
/// retried.
///
/// The error is transparent: it displays as the error it holds and its
/// [`source`](std::error::Error::source) is that error's source, so a report that prints a
/// chain of causes prints the inner error once. Match on the variant to reach the inner error.
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
    /// The partial breaker rejected the call.
    PartiallyOpen(PartiallyOpen),
    /// The concurrency gate's limit was reached.
    Overflow(GateOverflow),
    /// The bulkhead was full, or no slot freed in time.
    BulkheadFull(BulkheadFull),
    /// The shedder refused the call's priority a slot.
    Shed(Shed),
    /// The adaptive limiter refused the call.
    LimitExceeded(LimitExceeded),
    /// The adaptive throttle refused the call locally.
    Throttled(Throttled),
    /// The attempt did not finish within the timeout.
    Timeout(Elapsed),
    /// The fault injector failed the attempt (it plays the dependency's failure).
    Injected(InjectedFault),
    /// The dependency's own error.
    Failed(E),
}

impl<E> PipelineError<E> {
    /// Whether a local policy refused the call (breaker, partial breaker, gate, bulkhead,
    /// shedder, limiter, throttle).
    pub fn is_local_rejection(&self) -> bool {
        matches!(
            self,
            PipelineError::Rejected(_)
                | PipelineError::PartiallyOpen(_)
                | PipelineError::Overflow(_)
                | PipelineError::BulkheadFull(_)
                | PipelineError::Shed(_)
                | PipelineError::LimitExceeded(_)
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
            PipelineError::PartiallyOpen(e) => e.fmt(f),
            PipelineError::Overflow(e) => e.fmt(f),
            PipelineError::BulkheadFull(e) => e.fmt(f),
            PipelineError::Shed(e) => e.fmt(f),
            PipelineError::LimitExceeded(e) => e.fmt(f),
            PipelineError::Throttled(e) => e.fmt(f),
            PipelineError::Timeout(e) => e.fmt(f),
            PipelineError::Injected(e) => e.fmt(f),
            PipelineError::Failed(e) => e.fmt(f),
        }
    }
}

/// The inner error's source, not the inner error itself: `Display` already prints the inner
/// error, and a chain that held it twice would print it twice.
///
/// ```
/// use std::error::Error;
/// use tripline_policies::pipeline::PipelineError;
///
/// #[derive(Debug)]
/// struct Refused(std::io::Error);
/// impl std::fmt::Display for Refused {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("card service answered 503")
///     }
/// }
/// impl Error for Refused {
///     fn source(&self) -> Option<&(dyn Error + 'static)> {
///         Some(&self.0)
///     }
/// }
///
/// let e = PipelineError::Failed(Refused(std::io::Error::other("connection reset")));
/// let mut chain = vec![e.to_string()];
/// let mut cause = e.source();
/// while let Some(c) = cause {
///     chain.push(c.to_string());
///     cause = c.source();
/// }
/// assert_eq!(chain, ["card service answered 503", "connection reset"]);
/// ```
impl<E: std::error::Error + 'static> std::error::Error for PipelineError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PipelineError::Rejected(e) => e.source(),
            PipelineError::PartiallyOpen(e) => e.source(),
            PipelineError::Overflow(e) => e.source(),
            PipelineError::BulkheadFull(e) => e.source(),
            PipelineError::Shed(e) => e.source(),
            PipelineError::LimitExceeded(e) => e.source(),
            PipelineError::Throttled(e) => e.source(),
            PipelineError::Timeout(e) => e.source(),
            PipelineError::Injected(e) => e.source(),
            PipelineError::Failed(e) => e.source(),
        }
    }
}
