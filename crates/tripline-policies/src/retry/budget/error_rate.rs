//! Retries off while the recent error rate is above a level.

use std::sync::Mutex;
use std::time::Duration;

use tripline::{Clock, ConfigError, MonotonicClock, Outcome};

use super::{RetryBudget, RetryCause};
use crate::window::Buckets;

const PPM: i128 = 1_000_000;

/// Turns retries off entirely while the error rate over a sliding window is above a level: the
/// client-side rule of the AWS Builders' Library ("Timeouts, retries and backoff with jitter"),
/// best paired with a ratio budget. When most attempts fail, a retry is almost
/// certainly wasted and certainly adds load; when few fail, retrying the few is cheap.
///
/// Every attempt that reached the dependency counts: a success, or a failure (an error the
/// retry predicate would retry, or a timeout). Results the predicate does not retry, and calls
/// refused locally, do not count. The rule holds off until the window has `minimum_calls`
/// results, so one failure out of one call does not read as 100%. The rate is compared in
/// integer parts per million: retries are off when `failures × 10⁶ > threshold_ppm × calls`.
///
/// Defaults: a 10 s window in 1 s buckets, a 10% threshold, 20 calls minimum.
///
/// ```
/// use tripline::{ManualClock, Outcome};
/// use tripline_policies::retry::budget::{ErrorRateBudget, RetryBudget, RetryCause};
///
/// let rule = ErrorRateBudget::builder().build_with_clock(ManualClock::new())?;
/// for i in 0..20 {
///     // 3 failures in 20: 15% is above 10%.
///     rule.on_outcome(if i < 3 { Outcome::Failure } else { Outcome::Success }, None);
/// }
/// assert!(!rule.withdraw(RetryCause::Error));
/// for _ in 0..10 {
///     rule.on_outcome(Outcome::Success, None); // 3 in 30: exactly 10%, not above
/// }
/// assert!(rule.withdraw(RetryCause::Error));
/// # Ok::<(), tripline::ConfigError>(())
/// ```
pub struct ErrorRateBudget<C: Clock = MonotonicClock> {
    /// Guards the calls and failures per bucket. Never run under it: the clock (read before
    /// it is taken).
    window: Mutex<Buckets>,
    threshold_ppm: i64,
    minimum_calls: u32,
    length: Duration,
    clock: C,
}

impl<C: Clock> std::fmt::Debug for ErrorRateBudget<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ErrorRateBudget")
            .field("window", &self.length)
            .field("threshold_ppm", &self.threshold_ppm)
            .field("minimum_calls", &self.minimum_calls)
            .finish_non_exhaustive()
    }
}

impl Default for ErrorRateBudget {
    /// A 10 s window in 1 s buckets, 10%, 20 calls minimum, on the production clock.
    fn default() -> Self {
        ErrorRateBudget::builder()
            .build()
            .expect("the defaults are valid")
    }
}

impl ErrorRateBudget {
    /// A builder with the defaults.
    pub fn builder() -> ErrorRateBudgetBuilder {
        ErrorRateBudgetBuilder {
            window: Duration::from_secs(10),
            bucket: Duration::from_secs(1),
            threshold_percent: 10.0,
            minimum_calls: 20,
        }
    }
}

impl<C: Clock> ErrorRateBudget<C> {
    /// `(calls, failures)` in the window now.
    pub fn counts(&self) -> (u64, u64) {
        // Read before the lock: a user clock may read the budget.
        let now = self.clock.now();
        let [calls, failures] = crate::lock(&self.window).totals(now);
        (calls.max(0) as u64, failures.max(0) as u64)
    }

    /// Whether retries are allowed now.
    pub fn allows_retries(&self) -> bool {
        let (calls, failures) = self.counts();
        calls < u64::from(self.minimum_calls)
            || i128::from(failures) * PPM <= i128::from(self.threshold_ppm) * i128::from(calls)
    }
}

impl<C: Clock> RetryBudget for ErrorRateBudget<C> {
    fn on_outcome(&self, outcome: Outcome, _: Option<RetryCause>) {
        let failure = match outcome {
            Outcome::Success => 0,
            Outcome::Failure => 1,
            Outcome::Ignored => return,
        };
        let now = self.clock.now();
        let mut w = crate::lock(&self.window);
        w.add(now, 0, 1);
        if failure > 0 {
            w.add(now, 1, 1);
        }
    }

    fn withdraw(&self, _: RetryCause) -> bool {
        self.allows_retries()
    }

    fn remaining(&self) -> Option<u64> {
        (!self.allows_retries()).then_some(0)
    }
}

/// Builds an [`ErrorRateBudget`], checking every value.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorRateBudgetBuilder {
    window: Duration,
    bucket: Duration,
    threshold_percent: f64,
    minimum_calls: u32,
}

impl ErrorRateBudgetBuilder {
    /// The window's length and its bucket width: `bucket` in `[1ms, window]`, `window` a whole
    /// number of buckets, at most 3600 of them. Default 10 s in 1 s buckets.
    pub fn window(mut self, window: Duration, bucket: Duration) -> Self {
        self.window = window;
        self.bucket = bucket;
        self
    }

    /// The error rate above which retries are off, in `[0, 100]` percent. Default 10.
    pub fn threshold_percent(mut self, percent: f64) -> Self {
        self.threshold_percent = percent;
        self
    }

    /// Results needed in the window before the rule applies, in `[1, 1000000]`. Default 20.
    pub fn minimum_calls(mut self, n: u32) -> Self {
        self.minimum_calls = n;
        self
    }

    /// The rule on the production clock.
    ///
    /// ```
    /// use tripline_policies::retry::budget::ErrorRateBudget;
    ///
    /// let err = ErrorRateBudget::builder().threshold_percent(150.0).build().unwrap_err();
    /// assert_eq!(err.to_string(), "threshold_percent must be in [0, 100], got 150");
    /// ```
    pub fn build(self) -> Result<ErrorRateBudget, ConfigError> {
        self.build_with_clock(MonotonicClock::new())
    }

    /// The rule on `clock`.
    pub fn build_with_clock<C: Clock>(self, clock: C) -> Result<ErrorRateBudget<C>, ConfigError> {
        let buckets = crate::check_window("window", self.window, self.bucket)?;
        let p = self.threshold_percent;
        if !(0.0..=100.0).contains(&p) {
            return Err(ConfigError::new("threshold_percent", p, "in [0, 100]"));
        }
        if !(1..=1_000_000).contains(&self.minimum_calls) {
            return Err(ConfigError::new(
                "minimum_calls",
                self.minimum_calls,
                "in [1, 1000000]",
            ));
        }
        Ok(ErrorRateBudget {
            window: Mutex::new(Buckets::new(self.bucket, buckets)),
            threshold_ppm: (p * 10_000.0).round() as i64,
            minimum_calls: self.minimum_calls,
            length: self.window,
            clock,
        })
    }
}
