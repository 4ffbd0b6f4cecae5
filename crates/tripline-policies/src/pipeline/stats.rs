//! The pipeline's counters: calls by how they ended.

use std::sync::atomic::{AtomicU64, Ordering};

use tripline::Outcome;

use super::PipelineError;

/// Calls refused by each local stage of a pipeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Refusals {
    /// By the breaker (open, or its probes busy).
    pub breaker: u64,
    /// By the partial breaker.
    pub partial: u64,
    /// By the concurrency gate.
    pub gate: u64,
    /// By the bulkhead (full, or no slot in time).
    pub bulkhead: u64,
    /// By the priority shedder.
    pub shed: u64,
    /// By the adaptive limiter.
    pub limiter: u64,
    /// By the adaptive throttle.
    pub throttle: u64,
}

impl Refusals {
    /// The refusals of every stage.
    pub fn total(&self) -> u64 {
        self.breaker
            + self.partial
            + self.gate
            + self.bulkhead
            + self.shed
            + self.limiter
            + self.throttle
    }
}

/// A pipeline's calls since it was built, by how each ended: its last attempt's result as the
/// classifier judged it, a timeout, an injected fault, or a refusal by a local stage.
/// Counted once per call, retries included in it; shared by the pipeline's clones.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tripline::ConfigError> {
/// use tripline::{BreakerConfig, CircuitBreaker};
/// use tripline_policies::pipeline::Pipeline;
///
/// let breaker = CircuitBreaker::new("vendor", BreakerConfig::default());
/// let pipeline = Pipeline::builder().breaker(breaker.clone()).build()?;
/// let _ = pipeline.call(|| async { Ok::<_, std::io::Error>(1) }).await;
/// let _ = pipeline.call(|| async { Err::<u8, _>(std::io::Error::other("reset")) }).await;
/// breaker.force_open();
/// let _ = pipeline.call_or_else(|| async { Ok::<_, std::io::Error>(1) }, |_| async { 0 }).await;
/// let stats = pipeline.stats();
/// assert_eq!((stats.calls, stats.succeeded, stats.failed), (3, 1, 1));
/// assert_eq!((stats.refused.breaker, stats.fallbacks), (1, 1));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PipelineStats {
    /// Calls made.
    pub calls: u64,
    /// Calls whose last result the classifier judged a success.
    pub succeeded: u64,
    /// Calls whose last result the classifier judged a failure (an error, or an `Ok` such as
    /// an HTTP 503).
    pub failed: u64,
    /// Calls whose last result the classifier ignored (an HTTP 404, say).
    pub ignored: u64,
    /// Calls whose last attempt timed out.
    pub timed_out: u64,
    /// Calls whose last attempt the fault injector failed.
    pub injected: u64,
    /// Calls a local stage refused, by stage.
    pub refused: Refusals,
    /// Calls whose error [`call_or_else`](super::Pipeline::call_or_else) handed to the
    /// fallback.
    pub fallbacks: u64,
}

/// calls, succeeded, failed, ignored, timed out, injected, fallbacks, then the refusals.
#[derive(Debug, Default)]
pub(super) struct Counters([AtomicU64; 14]);

const CALLS: usize = 0;
const TIMED_OUT: usize = 4;
const INJECTED: usize = 5;
const FALLBACKS: usize = 6;
const REFUSED: usize = 7;

impl Counters {
    fn bump(&self, i: usize) {
        self.0[i].fetch_add(1, Ordering::Relaxed);
    }

    /// A call ended with a result of the dependency's.
    pub(super) fn result(&self, outcome: Outcome) {
        self.bump(CALLS);
        self.bump(match outcome {
            Outcome::Success => 1,
            Outcome::Failure => 2,
            Outcome::Ignored => 3,
        });
    }

    /// A call ended without a result.
    pub(super) fn error<E>(&self, e: &PipelineError<E>) {
        self.bump(CALLS);
        self.bump(match e {
            PipelineError::Timeout(_) => TIMED_OUT,
            PipelineError::Injected(_) => INJECTED,
            PipelineError::Rejected(_) => REFUSED,
            PipelineError::PartiallyOpen(_) => REFUSED + 1,
            PipelineError::Overflow(_) => REFUSED + 2,
            PipelineError::BulkheadFull(_) => REFUSED + 3,
            PipelineError::Shed(_) => REFUSED + 4,
            PipelineError::LimitExceeded(_) => REFUSED + 5,
            PipelineError::Throttled(_) => REFUSED + 6,
            // Only a result of the dependency's is `Failed`: counted by `result`.
            PipelineError::Failed(_) => 2,
        });
    }

    /// A fallback answered.
    pub(super) fn fallback(&self) {
        self.bump(FALLBACKS);
    }

    pub(super) fn snapshot(&self) -> PipelineStats {
        let r = |i: usize| self.0[i].load(Ordering::Relaxed);
        PipelineStats {
            calls: r(CALLS),
            succeeded: r(1),
            failed: r(2),
            ignored: r(3),
            timed_out: r(TIMED_OUT),
            injected: r(INJECTED),
            fallbacks: r(FALLBACKS),
            refused: Refusals {
                breaker: r(REFUSED),
                partial: r(REFUSED + 1),
                gate: r(REFUSED + 2),
                bulkhead: r(REFUSED + 3),
                shed: r(REFUSED + 4),
                limiter: r(REFUSED + 5),
                throttle: r(REFUSED + 6),
            },
        }
    }
}
