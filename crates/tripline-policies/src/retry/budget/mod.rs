//! Retry budgets.
//!
//! # Why budgets and not max retries?
//!
//! A maximum number of attempts bounds the retries of *one* request; it does nothing about the
//! total. When a dependency fails, every request fails, every request retries, and three
//! attempts per request triple the load on a dependency that was already too weak to answer:
//! the retries re-amplify exactly what a breaker would stop. A budget bounds retries as a share
//! of the traffic instead, so a blip is retried and an outage is not.
//!
//! Three budgets are provided, each from a system that runs them at scale:
//!
//! * [`TpsBudget`], the ratio budget of Finagle and tower: retries may be at most a fraction of
//!   the requests over a time-to-live (20% over 10 s by default), plus a small reserve (10 per
//!   second) so that a quiet client can still retry.
//! * [`TokenBucketBudget`], the AWS SDKs' standard mode: a bucket of 500 tokens, 5 taken per
//!   retry (10 per retry of a timeout), 1 given back per success on the first try, and the cost
//!   refunded when a retry succeeds. At zero, retries stop; first attempts still go out.
//! * [`ErrorRateBudget`], the rule from the AWS Builders' Library: retries are off entirely
//!   while the recent error rate is above a level (10% by default).
//!
//! They combine with [`RetryBudget::and`], for instance "10% of requests,
//! and none at all while the error rate is above 10%":
//!
//! ```
//! use std::sync::Arc;
//! use tripline_policies::retry::budget::{ErrorRateBudget, RetryBudget, RetryCause, TpsBudget};
//!
//! let budget = TpsBudget::builder().retry_ratio(0.1).build()?
//!     .and(ErrorRateBudget::builder().threshold_percent(10.0).build()?);
//! budget.on_request();
//! assert!(budget.withdraw(RetryCause::Error));
//! # Ok::<(), tripline::ConfigError>(())
//! ```
//!
//! A budget is shared by every request to one dependency: keep it in an `Arc` and hand clones
//! to the retry policies that call that dependency.

mod error_rate;
mod token_bucket;
mod tps;

use std::fmt;

use tripline::Outcome;

pub use error_rate::{ErrorRateBudget, ErrorRateBudgetBuilder};
pub use token_bucket::{TokenBucketBudget, TokenBucketBudgetBuilder};
pub use tps::{TpsBudget, TpsBudgetBuilder};

/// Why a retry is wanted: some budgets charge more to retry a timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RetryCause {
    /// The attempt failed with an error.
    Error,
    /// The attempt timed out.
    Timeout,
}

/// A budget for retries, shared by every request to one dependency.
///
/// The retry loop calls [`on_request`](Self::on_request) once per request, before its first
/// attempt; [`on_outcome`](Self::on_outcome) after every attempt that reached the dependency;
/// and [`withdraw`](Self::withdraw) before every retry. A withdrawal that is not used after all
/// is given back with [`refund`](Self::refund): when the gate's retry limit refuses the retry,
/// when a local policy further in (an open breaker, a full bulkhead, the gate, the throttle)
/// refuses its attempt, and when the request is dropped during the retry's backoff. A retry
/// whose attempt was sent on counts as used, even if its request is dropped before it answers.
///
/// ```
/// use tripline::Outcome;
/// use tripline_policies::retry::budget::{RetryBudget, RetryCause};
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// /// At most `n` retries, ever.
/// #[derive(Debug)]
/// struct AtMost(AtomicU32);
///
/// impl RetryBudget for AtMost {
///     fn withdraw(&self, _: RetryCause) -> bool {
///         self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
///     }
///     fn refund(&self, _: RetryCause) {
///         self.0.fetch_add(1, Ordering::AcqRel);
///     }
/// }
///
/// let b = AtMost(AtomicU32::new(1));
/// assert!(b.withdraw(RetryCause::Error));
/// assert!(!b.withdraw(RetryCause::Error));
/// ```
pub trait RetryBudget: fmt::Debug + Send + Sync + 'static {
    /// A request starts; called once, before its first attempt.
    fn on_request(&self) {}

    /// The outcome of an attempt that reached the dependency. `retry` is the cause of the
    /// retry this attempt was (`None` for a first attempt). `Ignored` is a result that says
    /// nothing about the dependency (an error the retry predicate does not retry).
    fn on_outcome(&self, outcome: Outcome, retry: Option<RetryCause>) {
        let _ = (outcome, retry);
    }

    /// Asks for one retry; `false` means the budget is spent and the retry must not be made.
    fn withdraw(&self, cause: RetryCause) -> bool;

    /// Gives back a withdrawal whose retry was not made after all.
    fn refund(&self, cause: RetryCause) {
        let _ = cause;
    }

    /// The retries (of errors) the budget would grant now, for a gauge: `None` when it does
    /// not count them (a rule that is simply on, as [`ErrorRateBudget`] while the error rate
    /// is low). The default is `None`.
    ///
    /// ```
    /// use tripline_policies::retry::budget::{ErrorRateBudget, RetryBudget, TokenBucketBudget, TpsBudget};
    ///
    /// assert_eq!(TokenBucketBudget::default().remaining(), Some(100)); // 500 tokens, 5 a retry
    /// let tps = TpsBudget::default();
    /// assert_eq!(RetryBudget::remaining(&tps), Some(100)); // the reserve: 10/s for 10 s
    /// assert_eq!(ErrorRateBudget::default().remaining(), None); // retries on, uncounted
    /// let both = TpsBudget::default().and(TokenBucketBudget::builder().capacity(50).build()?);
    /// assert_eq!(both.remaining(), Some(10));
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    fn remaining(&self) -> Option<u64> {
        None
    }

    /// A budget that allows a retry only when both `self` and `other` do.
    fn and<B: RetryBudget>(self, other: B) -> Both<Self, B>
    where
        Self: Sized,
    {
        Both(self, other)
    }
}

impl<B: RetryBudget + ?Sized> RetryBudget for std::sync::Arc<B> {
    fn on_request(&self) {
        (**self).on_request()
    }
    fn on_outcome(&self, outcome: Outcome, retry: Option<RetryCause>) {
        (**self).on_outcome(outcome, retry)
    }
    fn withdraw(&self, cause: RetryCause) -> bool {
        (**self).withdraw(cause)
    }
    fn refund(&self, cause: RetryCause) {
        (**self).refund(cause)
    }
    fn remaining(&self) -> Option<u64> {
        (**self).remaining()
    }
}

/// Two budgets that must both allow a retry; see [`RetryBudget::and`]. Events reach both; a
/// withdrawal the second refuses is refunded to the first.
///
/// ```
/// use tripline_policies::retry::budget::{RetryBudget, RetryCause, TokenBucketBudget, TpsBudget};
///
/// let both = TpsBudget::default().and(TokenBucketBudget::default());
/// assert!(both.withdraw(RetryCause::Timeout));
/// assert_eq!(both.1.tokens(), 490);
/// ```
#[derive(Debug)]
pub struct Both<A, B>(pub A, pub B);

impl<A: RetryBudget, B: RetryBudget> RetryBudget for Both<A, B> {
    fn on_request(&self) {
        self.0.on_request();
        self.1.on_request();
    }

    fn on_outcome(&self, outcome: Outcome, retry: Option<RetryCause>) {
        self.0.on_outcome(outcome, retry);
        self.1.on_outcome(outcome, retry);
    }

    fn withdraw(&self, cause: RetryCause) -> bool {
        if !self.0.withdraw(cause) {
            return false;
        }
        if !self.1.withdraw(cause) {
            self.0.refund(cause);
            return false;
        }
        true
    }

    fn refund(&self, cause: RetryCause) {
        self.0.refund(cause);
        self.1.refund(cause);
    }

    fn remaining(&self) -> Option<u64> {
        match (self.0.remaining(), self.1.remaining()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
