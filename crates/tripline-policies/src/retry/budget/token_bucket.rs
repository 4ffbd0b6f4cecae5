//! The token bucket of the AWS SDKs' standard retry mode.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tripline::{ConfigError, Outcome};

use super::{RetryBudget, RetryCause};

/// The retry quota of the AWS SDKs' standard mode, with its defaults: a bucket of 500 tokens;
/// a retry takes 5 (10 when it retries a timeout); a success on the first try puts 1 back
/// (never above the capacity); a success on a retry puts back what that retry took. When the
/// bucket cannot pay for a retry, the retry is refused; first attempts never consult it, so
/// they still go out.
///
/// The bucket needs no clock: it refills with successes, not with time, so a dependency that
/// stops answering stops refilling it.
///
/// ```
/// use tripline::Outcome;
/// use tripline_policies::retry::budget::{RetryBudget, RetryCause, TokenBucketBudget};
///
/// let bucket = TokenBucketBudget::default();
/// let granted = (0..1000).filter(|_| bucket.withdraw(RetryCause::Error)).count();
/// assert_eq!(granted, 100); // 500 / 5
/// assert_eq!(bucket.tokens(), 0);
///
/// bucket.on_outcome(Outcome::Success, Some(RetryCause::Error)); // a retry succeeded: refund 5
/// bucket.on_outcome(Outcome::Success, None); // a first try succeeded: +1
/// assert_eq!(bucket.tokens(), 6);
/// ```
#[derive(Debug)]
pub struct TokenBucketBudget {
    tokens: AtomicU32,
    capacity: u32,
    retry_cost: u32,
    timeout_retry_cost: u32,
    success_reward: u32,
    refused: AtomicU64,
}

impl Default for TokenBucketBudget {
    /// 500 tokens, retry cost 5, timeout retry cost 10, 1 per first-try success.
    fn default() -> Self {
        TokenBucketBudget::builder()
            .build()
            .expect("the defaults are valid")
    }
}

impl TokenBucketBudget {
    /// A builder with the AWS defaults.
    pub fn builder() -> TokenBucketBudgetBuilder {
        TokenBucketBudgetBuilder {
            capacity: 500,
            retry_cost: 5,
            timeout_retry_cost: 10,
            success_reward: 1,
        }
    }

    /// Tokens in the bucket now.
    pub fn tokens(&self) -> u32 {
        self.tokens.load(Ordering::Acquire)
    }

    /// The bucket's capacity (and initial balance).
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Retries refused so far because the bucket could not pay.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn cost(&self, cause: RetryCause) -> u32 {
        match cause {
            RetryCause::Error => self.retry_cost,
            RetryCause::Timeout => self.timeout_retry_cost,
        }
    }

    fn put(&self, amount: u32) {
        let cap = self.capacity;
        let _ = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                (t < cap).then(|| t.saturating_add(amount).min(cap))
            });
    }
}

impl RetryBudget for TokenBucketBudget {
    fn on_outcome(&self, outcome: Outcome, retry: Option<RetryCause>) {
        if outcome != Outcome::Success {
            return;
        }
        match retry {
            None => self.put(self.success_reward),
            Some(cause) => self.put(self.cost(cause)),
        }
    }

    fn withdraw(&self, cause: RetryCause) -> bool {
        let cost = self.cost(cause);
        let ok = self
            .tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| t.checked_sub(cost))
            .is_ok();
        if !ok {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    fn refund(&self, cause: RetryCause) {
        self.put(self.cost(cause));
    }

    fn remaining(&self) -> Option<u64> {
        Some(u64::from(self.tokens() / self.retry_cost))
    }
}

/// Builds a [`TokenBucketBudget`], checking every value.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBucketBudgetBuilder {
    capacity: u32,
    retry_cost: u32,
    timeout_retry_cost: u32,
    success_reward: u32,
}

impl TokenBucketBudgetBuilder {
    /// The bucket's capacity and initial balance, in `[1, 1000000]`. Default 500.
    pub fn capacity(mut self, capacity: u32) -> Self {
        self.capacity = capacity;
        self
    }

    /// Tokens a retry takes, in `[1, capacity]`. Default 5.
    pub fn retry_cost(mut self, cost: u32) -> Self {
        self.retry_cost = cost;
        self
    }

    /// Tokens a retry of a timeout takes, in `[1, capacity]`. Default 10.
    pub fn timeout_retry_cost(mut self, cost: u32) -> Self {
        self.timeout_retry_cost = cost;
        self
    }

    /// Tokens a first-try success puts back, in `[0, capacity]`. Default 1.
    pub fn success_reward(mut self, reward: u32) -> Self {
        self.success_reward = reward;
        self
    }

    /// The bucket, full.
    ///
    /// ```
    /// use tripline_policies::retry::budget::TokenBucketBudget;
    ///
    /// let err = TokenBucketBudget::builder().retry_cost(0).build().unwrap_err();
    /// assert_eq!(err.to_string(), "retry_cost must be in [1, capacity = 500], got 0");
    /// ```
    pub fn build(self) -> Result<TokenBucketBudget, ConfigError> {
        let cap = self.capacity;
        if !(1..=1_000_000).contains(&cap) {
            return Err(ConfigError::new("capacity", cap, "in [1, 1000000]"));
        }
        let allowed = format!("in [1, capacity = {cap}]");
        if !(1..=cap).contains(&self.retry_cost) {
            return Err(ConfigError::new("retry_cost", self.retry_cost, allowed));
        }
        if !(1..=cap).contains(&self.timeout_retry_cost) {
            return Err(ConfigError::new(
                "timeout_retry_cost",
                self.timeout_retry_cost,
                allowed,
            ));
        }
        if self.success_reward > cap {
            return Err(ConfigError::new(
                "success_reward",
                self.success_reward,
                format!("in [0, capacity = {cap}]"),
            ));
        }
        Ok(TokenBucketBudget {
            tokens: AtomicU32::new(cap),
            capacity: cap,
            retry_cost: self.retry_cost,
            timeout_retry_cost: self.timeout_retry_cost,
            success_reward: self.success_reward,
            refused: AtomicU64::new(0),
        })
    }
}
