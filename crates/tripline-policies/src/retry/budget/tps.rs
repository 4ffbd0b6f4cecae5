//! The ratio budget of Finagle and tower (`TpsBudget`).

use std::sync::Mutex;
use std::time::Duration;

use tripline::{Clock, ConfigError, MonotonicClock};

use super::{RetryBudget, RetryCause};
use crate::window::Buckets;

/// Buckets per time-to-live, as in tower.
const SLOTS: u32 = 10;
/// A withdrawal's weight; a request deposits `retry_ratio × SCALE` (rounded down to a whole
/// number), so ratios are kept in millionths: 0.6 is exactly 6 retries per 10 requests, and no
/// ratio earns more than `retry_ratio` retries per request.
const SCALE: i64 = 1_000_000;

/// The deposit of one request at `ratio` (in `[0, 1000]`), in millionths of a retry: rounded
/// down, except that a ratio within a billionth (relative) of a whole number of millionths is
/// that number, so that the binary fraction nearest a decimal such as 0.6 or 0.7 deposits
/// exactly its decimal value.
fn deposit(ratio: f64) -> i64 {
    let x = ratio * SCALE as f64;
    let nearest = x.round();
    let d = if (x - nearest).abs() <= nearest * 1e-9 {
        nearest
    } else {
        x.floor()
    };
    // In [0, 1e9]: the ratio was checked.
    d as i64
}

/// Retries capped as a share of requests over a time-to-live, plus a minimum rate: the budget
/// of Finagle and of tower's `TpsBudget`, with their defaults (ttl 10 s, 10 retries per second,
/// 20% of requests).
///
/// Every request deposits `retry_ratio` of a retry; every retry withdraws one. Deposits and
/// withdrawals expire after the ttl (to within a tenth of it), so the budget follows the recent
/// traffic. A reserve of `min_per_sec × ttl` retries that never expires lets a client with
/// little traffic still retry: with no traffic at all, exactly `min_per_sec × ttl` withdrawals
/// succeed within one ttl, whatever the ratio.
///
/// The ratio is kept in millionths, rounded down: a ratio with up to six decimals is exact
/// (0.6 grants 6 retries per 10 requests), and no ratio grants more than `retry_ratio` retries
/// per request. A ratio below one millionth earns nothing beyond the reserve.
///
/// A [refund](RetryBudget::refund) is credited when it is made and expires a ttl later, like a
/// deposit: a retry refused after a long backoff gives its withdrawal back for the ttl that
/// follows the refund.
///
/// ```
/// use std::time::Duration;
/// use tripline::ManualClock;
/// use tripline_policies::retry::budget::{RetryBudget, RetryCause, TpsBudget};
///
/// let clock = ManualClock::new();
/// let budget = TpsBudget::builder().build_with_clock(clock.clone())?;
/// let granted = (0..1000).filter(|_| budget.withdraw(RetryCause::Error)).count();
/// assert_eq!(granted, 100); // 10 per second × 10 s, and no traffic
///
/// for _ in 0..50 {
///     budget.on_request(); // 20% of 50 requests
/// }
/// assert_eq!(budget.remaining(), 10);
/// clock.advance(Duration::from_secs(11));
/// assert_eq!(budget.remaining(), 100); // everything expired; the reserve is back
/// # Ok::<(), tripline::ConfigError>(())
/// ```
pub struct TpsBudget<C: Clock = MonotonicClock> {
    /// Guards the deposits and withdrawals per bucket. Never run under it: the clock (read
    /// before it is taken).
    window: Mutex<Buckets>,
    reserve: i64,
    deposit: i64,
    withdrawal: i64,
    ttl: Duration,
    min_per_sec: u32,
    retry_ratio: f64,
    clock: C,
}

impl<C: Clock> std::fmt::Debug for TpsBudget<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TpsBudget")
            .field("ttl", &self.ttl)
            .field("min_per_sec", &self.min_per_sec)
            .field("retry_ratio", &self.retry_ratio)
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl Default for TpsBudget {
    /// ttl 10 s, 10 retries per second, 20% of requests, on the production clock.
    fn default() -> Self {
        TpsBudget::builder()
            .build()
            .expect("the defaults are valid")
    }
}

impl TpsBudget {
    /// A builder with the defaults: ttl 10 s, 10 retries per second, ratio 0.2.
    pub fn builder() -> TpsBudgetBuilder {
        TpsBudgetBuilder {
            ttl: Duration::from_secs(10),
            min_per_sec: 10,
            retry_ratio: 0.2,
        }
    }
}

impl<C: Clock> TpsBudget<C> {
    /// The retries the budget would grant now.
    pub fn remaining(&self) -> u64 {
        let sum = self.balance();
        u64::try_from(sum / self.withdrawal).unwrap_or(0)
    }

    fn balance(&self) -> i64 {
        let now = self.clock.now();
        let totals = crate::lock(&self.window).totals(now);
        totals[0].saturating_add(self.reserve)
    }

    /// The time-to-live of deposits and withdrawals.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

impl<C: Clock> RetryBudget for TpsBudget<C> {
    fn on_request(&self) {
        if self.deposit > 0 {
            let now = self.clock.now();
            crate::lock(&self.window).add(now, 0, self.deposit);
        }
    }

    fn withdraw(&self, _: RetryCause) -> bool {
        let now = self.clock.now();
        let mut w = crate::lock(&self.window);
        if w.totals(now)[0].saturating_add(self.reserve) < self.withdrawal {
            return false;
        }
        w.add(now, 0, -self.withdrawal);
        true
    }

    fn refund(&self, _: RetryCause) {
        let now = self.clock.now();
        crate::lock(&self.window).add(now, 0, self.withdrawal);
    }

    fn remaining(&self) -> Option<u64> {
        Some(TpsBudget::remaining(self))
    }
}

/// Builds a [`TpsBudget`], checking every value.
#[derive(Clone, Debug, PartialEq)]
pub struct TpsBudgetBuilder {
    ttl: Duration,
    min_per_sec: u32,
    retry_ratio: f64,
}

impl TpsBudgetBuilder {
    /// How long deposits and withdrawals count, in `[1s, 60s]`. Default 10 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Retries per second allowed whatever the traffic, in `[0, 1000000]`. Default 10.
    pub fn min_per_sec(mut self, min_per_sec: u32) -> Self {
        self.min_per_sec = min_per_sec;
        self
    }

    /// Retries allowed per request, in `[0, 1000]`: 0.2 lets one request in five be retried,
    /// 2.0 lets every request be retried twice. Default 0.2.
    pub fn retry_ratio(mut self, retry_ratio: f64) -> Self {
        self.retry_ratio = retry_ratio;
        self
    }

    /// The budget on the production clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline_policies::retry::budget::TpsBudget;
    ///
    /// let err = TpsBudget::builder().ttl(Duration::from_millis(500)).build().unwrap_err();
    /// assert_eq!(err.to_string(), "ttl must be in [1s, 60s], got 500ms");
    /// let err = TpsBudget::builder().retry_ratio(-0.5).build().unwrap_err();
    /// assert_eq!(err.field(), "retry_ratio");
    /// ```
    pub fn build(self) -> Result<TpsBudget, ConfigError> {
        self.build_with_clock(MonotonicClock::new())
    }

    /// The budget on `clock`.
    pub fn build_with_clock<C: Clock>(self, clock: C) -> Result<TpsBudget<C>, ConfigError> {
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.ttl) {
            return Err(ConfigError::new(
                "ttl",
                format!("{:?}", self.ttl),
                "in [1s, 60s]",
            ));
        }
        if self.min_per_sec > 1_000_000 {
            return Err(ConfigError::new(
                "min_per_sec",
                self.min_per_sec,
                "in [0, 1000000]",
            ));
        }
        let ratio = self.retry_ratio;
        if !(0.0..=1000.0).contains(&ratio) {
            return Err(ConfigError::new("retry_ratio", ratio, "in [0, 1000]"));
        }
        // At most 1e6 retries per second × 60 s × SCALE: 6e13, far from overflowing.
        let ttl_ms = self.ttl.as_millis() as i64;
        let reserve = i64::from(self.min_per_sec) * ttl_ms / 1000 * SCALE;
        Ok(TpsBudget {
            window: Mutex::new(Buckets::new(self.ttl / SLOTS, SLOTS)),
            reserve,
            deposit: deposit(ratio),
            withdrawal: SCALE,
            ttl: self.ttl,
            min_per_sec: self.min_per_sec,
            retry_ratio: ratio,
            clock,
        })
    }
}
