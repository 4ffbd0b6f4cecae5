//! A retry policy's settings as data: what a configuration file holds.

use std::sync::Arc;
use std::time::Duration;

use tripline::{Clock, ConfigError, MonotonicClock};

use super::backoff::Jitter;
use super::budget::{
    ErrorRateBudgetBuilder, RetryBudget, TokenBucketBudgetBuilder, TpsBudgetBuilder,
};
use super::policy::{RetryPolicy, RetryPolicyBuilder};

/// The settings of a [`RetryPolicy`] (and its budget) as data, for a configuration file
/// (feature `serde`): the builder's field names, durations written like `"250ms"`.
///
/// ```toml
/// max_attempts = 3          # 3; [1, 100], the first attempt included
/// base_delay = "100ms"      # 100ms; (0, 1h]: the first backoff's ceiling
/// max_delay = "2s"          # 20s; [base_delay, 1d]: the largest backoff
/// jitter = "full"           # "full"; "none", "equal" or "decorrelated"
/// retry_timeouts = true     # true; whether a timeout is retried
/// # seed = 7                # random; seeds the jitter
///
/// [budget]                  # none; or budget = [{ ... }, { ... }]: all must allow a retry
/// kind = "tps"              # "tps", "token-bucket" or "error-rate"
/// retry_ratio = 0.2         # see BudgetConfig for each kind's fields
/// ```
///
/// ```
/// # #[cfg(feature = "serde")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tripline_policies::retry::{Jitter, RetryConfig};
///
/// let config: RetryConfig = toml::from_str(r#"
///     max_attempts = 4
///     max_delay = "2s"
///     jitter = "decorrelated"
///     budget = { kind = "token-bucket", capacity = 100 }
/// "#)?;
/// assert_eq!(config.max_attempts(), 4);
/// assert_eq!(config.jitter(), Jitter::Decorrelated);
/// let policy = config.policy()?;
/// assert_eq!(policy.backoff().cap(), Duration::from_secs(2));
/// assert_eq!(policy.budget().and_then(|b| b.remaining()), Some(20)); // 100 tokens, 5 a retry
///
/// let err = toml::from_str::<RetryConfig>("max_attempts = 3\nmax_delay = \"2d\"").unwrap_err();
/// assert_eq!(err.message(), "max_delay must be in [base_delay, 86400s], got 172800s");
/// assert!(err.to_string().contains("line 2"));
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "serde"))]
/// # fn main() {}
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(try_from = "raw::RawRetry")
)]
pub struct RetryConfig {
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    jitter: Jitter,
    retry_timeouts: bool,
    seed: Option<u64>,
    budget: Option<BudgetConfig>,
}

impl Default for RetryConfig {
    /// [`RetryPolicy::default`]'s settings: 3 attempts, 100 ms doubling to 20 s, full jitter,
    /// timeouts retried, no budget.
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(20),
            jitter: Jitter::Full,
            retry_timeouts: true,
            seed: None,
            budget: None,
        }
    }
}

impl RetryConfig {
    /// Attempts per request, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The first backoff's ceiling.
    pub fn base_delay(&self) -> Duration {
        self.base_delay
    }

    /// The largest backoff.
    pub fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The jitter.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// Whether timeouts are retried.
    pub fn retry_timeouts(&self) -> bool {
        self.retry_timeouts
    }

    /// The jitter's seed, if set.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }

    /// The budget, if any.
    pub fn budget(&self) -> Option<&BudgetConfig> {
        self.budget.as_ref()
    }

    /// The same settings with `budget`.
    pub fn with_budget(mut self, budget: BudgetConfig) -> Self {
        self.budget = Some(budget);
        self
    }

    /// A policy builder with these settings (and a new budget), on the production clock: add
    /// a predicate with [`retry_if`](RetryPolicyBuilder::retry_if).
    pub fn builder(&self) -> Result<RetryPolicyBuilder, ConfigError> {
        self.builder_with_clock(MonotonicClock::new())
    }

    /// A policy builder with these settings, the budget on `clock`.
    pub fn builder_with_clock<C: Clock + Clone>(
        &self,
        clock: C,
    ) -> Result<RetryPolicyBuilder, ConfigError> {
        let mut b = RetryPolicy::builder()
            .max_attempts(self.max_attempts)
            .base_delay(self.base_delay)
            .max_delay(self.max_delay)
            .jitter(self.jitter)
            .retry_timeouts(self.retry_timeouts);
        if let Some(s) = self.seed {
            b = b.seed(s);
        }
        if let Some(budget) = &self.budget {
            b = b.shared_budget(budget.build_with_clock(clock)?);
        }
        Ok(b)
    }

    /// The policy, retrying every `Err` ([`RetryOnError`](super::RetryOnError); give it
    /// another predicate with [`RetryPolicy::with_predicate`]), its budget on the production
    /// clock.
    pub fn policy(&self) -> Result<RetryPolicy, ConfigError> {
        self.builder()?.build()
    }

    /// The policy, its budget on `clock`.
    pub fn policy_with_clock<C: Clock + Clone>(
        &self,
        clock: C,
    ) -> Result<RetryPolicy, ConfigError> {
        self.builder_with_clock(clock)?.build()
    }

    /// Checks every value, as building the policy does.
    #[cfg(feature = "serde")]
    fn validate(&self) -> Result<(), ConfigError> {
        super::backoff::Backoff::new(self.base_delay, self.max_delay, self.jitter)?;
        crate::retry::policy::check_attempts(self.max_attempts)?;
        if let Some(b) = &self.budget {
            b.validate()?;
        }
        Ok(())
    }
}

/// A retry budget's settings (feature `serde`: `budget = { kind = "...", ... }` in a
/// [`RetryConfig`], each kind with its builder's field names and defaults), or several that
/// must all allow a retry (`budget = [{ ... }, { ... }]`).
///
/// ```toml
/// # Finagle's and tower's ratio budget (TpsBudget)
/// kind = "tps"
/// retry_ratio = 0.2             # 0.2; [0, 1000] retries per request
/// min_per_sec = 10              # 10; [0, 1000000] retries per second whatever the traffic
/// ttl = "10s"                   # 10s; [1s, 60s]: how long deposits count
/// ```
///
/// ```toml
/// # The AWS SDKs' standard mode (TokenBucketBudget)
/// kind = "token-bucket"
/// capacity = 500                # 500; [1, 1000000] tokens, full at the start
/// retry_cost = 5                # 5; [1, capacity] tokens a retry takes
/// timeout_retry_cost = 10       # 10; [1, capacity] tokens a retry of a timeout takes
/// success_reward = 1            # 1; [0, capacity] tokens a first-try success puts back
/// ```
///
/// ```toml
/// # Retries off while the error rate is high (ErrorRateBudget)
/// kind = "error-rate"
/// threshold_percent = 10        # 10; [0, 100]: retries off above this error rate
/// window = "10s"                # 10s: a whole number (at most 3600) of buckets
/// bucket = "1s"                 # 1s; [1ms, window]
/// minimum_calls = 20            # 20; [1, 1000000] results before the rule applies
/// ```
///
/// ```
/// # #[cfg(feature = "serde")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tripline_policies::retry::BudgetConfig;
///
/// let both: BudgetConfig = toml::from_str::<toml::Table>(r#"
///     budget = [{ kind = "tps", retry_ratio = 0.1 }, { kind = "error-rate", threshold_percent = 10 }]
/// "#)?["budget"].clone().try_into()?;
/// assert!(matches!(both, BudgetConfig::All(ref b) if b.len() == 2));
/// let budget = both.build()?;
/// assert_eq!(budget.remaining(), Some(100)); // the ratio budget's reserve
///
/// let err = toml::from_str::<BudgetConfig>("kind = \"tps\"\nttl = \"500ms\"").unwrap_err();
/// assert_eq!(err.message(), "ttl must be in [1s, 60s], got 500ms");
/// let err = toml::from_str::<BudgetConfig>("kind = \"tps\"\ncapacity = 5").unwrap_err();
/// assert_eq!(err.message(), "capacity must be a field of kind \"token-bucket\" (kind \"tps\" has retry_ratio, min_per_sec, ttl), got 5");
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "serde"))]
/// # fn main() {}
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum BudgetConfig {
    /// [`TpsBudget`](super::budget::TpsBudget).
    Tps(TpsBudgetBuilder),
    /// [`TokenBucketBudget`](super::budget::TokenBucketBudget).
    TokenBucket(TokenBucketBudgetBuilder),
    /// [`ErrorRateBudget`](super::budget::ErrorRateBudget).
    ErrorRate(ErrorRateBudgetBuilder),
    /// Every one of these must allow a retry ([`RetryBudget::and`]).
    All(Vec<BudgetConfig>),
}

impl BudgetConfig {
    /// The budget, on the production clock.
    pub fn build(&self) -> Result<Arc<dyn RetryBudget>, ConfigError> {
        self.build_with_clock(MonotonicClock::new())
    }

    /// The budget, on `clock` (the token bucket needs none).
    pub fn build_with_clock<C: Clock + Clone>(
        &self,
        clock: C,
    ) -> Result<Arc<dyn RetryBudget>, ConfigError> {
        Ok(match self {
            BudgetConfig::Tps(b) => Arc::new(b.clone().build_with_clock(clock)?),
            BudgetConfig::TokenBucket(b) => Arc::new(b.clone().build()?),
            BudgetConfig::ErrorRate(b) => Arc::new(b.clone().build_with_clock(clock)?),
            BudgetConfig::All(all) => {
                let mut budgets = all.iter().map(|b| b.build_with_clock(clock.clone()));
                let Some(first) = budgets.next() else {
                    return Err(empty());
                };
                let mut acc = first?;
                for b in budgets {
                    acc = Arc::new(acc.and(b?));
                }
                acc
            }
        })
    }

    /// Checks every value, as building does (a clock that is never read).
    #[cfg(feature = "serde")]
    fn validate(&self) -> Result<(), ConfigError> {
        self.build_with_clock(tripline::ManualClock::new())
            .map(drop)
    }
}

fn empty() -> ConfigError {
    ConfigError::new("budget", "[]", "at least one budget")
}

#[cfg(feature = "serde")]
mod raw {
    //! The serialized forms: every field optional, unknown fields rejected, single-field
    //! ranges checked as read.
    use std::fmt;
    use std::time::Duration;

    use serde::de::{self, MapAccess, SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer};
    use tripline::ConfigError;

    use super::{BudgetConfig, RetryConfig};
    use crate::de::{checked, within};
    use crate::retry::Jitter;
    use crate::retry::budget::{ErrorRateBudget, TokenBucketBudget, TpsBudget};

    checked! {
        max_attempts: u32 = |v| crate::retry::policy::check_attempts(*v);
        min_per_sec: u32 = |v| within("min_per_sec", *v, 0, 1_000_000);
        capacity: u32 = |v| within("capacity", *v, 1, 1_000_000);
        retry_cost: u32 = |v| positive("retry_cost", *v);
        timeout_retry_cost: u32 = |v| positive("timeout_retry_cost", *v);
        minimum_calls: u32 = |v| within("minimum_calls", *v, 1, 1_000_000);
    }

    checked! {
        retry_ratio: f64 = |v| within("retry_ratio", *v, 0.0, 1000.0);
        threshold_percent: f64 = |v| within("threshold_percent", *v, 0.0, 100.0);
    }

    checked! {
        base_delay: dur = |v| {
            if v.is_zero() || v > crate::retry::MAX_BASE_DELAY {
                Err(ConfigError::new(
                    "base_delay",
                    format!("{v:?}"),
                    format!("in (0ns, {:?}]", crate::retry::MAX_BASE_DELAY),
                ))
            } else {
                Ok(())
            }
        };
        max_delay: dur = |v| {
            if v > crate::retry::MAX_DELAY {
                Err(ConfigError::new(
                    "max_delay",
                    format!("{v:?}"),
                    format!("in [base_delay, {:?}]", crate::retry::MAX_DELAY),
                ))
            } else {
                Ok(())
            }
        };
        ttl: dur = |v| {
            if (Duration::from_secs(1)..=Duration::from_secs(60)).contains(&v) {
                Ok(())
            } else {
                Err(ConfigError::new("ttl", format!("{v:?}"), "in [1s, 60s]"))
            }
        };
        bucket: dur = |v| {
            if v < Duration::from_millis(1) {
                Err(ConfigError::new("bucket", format!("{v:?}"), "in [1ms, window]"))
            } else {
                Ok(())
            }
        };
    }

    fn positive(field: &str, v: u32) -> Result<(), ConfigError> {
        if v == 0 {
            Err(ConfigError::new(field, v, "in [1, capacity]"))
        } else {
            Ok(())
        }
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawRetry {
        #[serde(default, deserialize_with = "max_attempts")]
        max_attempts: Option<u32>,
        #[serde(default, deserialize_with = "base_delay")]
        base_delay: Option<Duration>,
        #[serde(default, deserialize_with = "max_delay")]
        max_delay: Option<Duration>,
        #[serde(default)]
        jitter: Option<Jitter>,
        #[serde(default)]
        retry_timeouts: Option<bool>,
        #[serde(default)]
        seed: Option<u64>,
        #[serde(default)]
        budget: Option<BudgetConfig>,
    }

    impl TryFrom<RawRetry> for RetryConfig {
        type Error = ConfigError;
        fn try_from(r: RawRetry) -> Result<Self, ConfigError> {
            let d = RetryConfig::default();
            let c = RetryConfig {
                max_attempts: r.max_attempts.unwrap_or(d.max_attempts),
                base_delay: r.base_delay.unwrap_or(d.base_delay),
                max_delay: r.max_delay.unwrap_or(d.max_delay),
                jitter: r.jitter.unwrap_or(d.jitter),
                retry_timeouts: r.retry_timeouts.unwrap_or(d.retry_timeouts),
                seed: r.seed,
                budget: r.budget,
            };
            c.validate()?;
            Ok(c)
        }
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
    #[serde(rename_all = "kebab-case")]
    enum Kind {
        Tps,
        TokenBucket,
        ErrorRate,
    }

    impl Kind {
        fn name(self) -> &'static str {
            match self {
                Kind::Tps => "tps",
                Kind::TokenBucket => "token-bucket",
                Kind::ErrorRate => "error-rate",
            }
        }

        fn fields(self) -> &'static [&'static str] {
            match self {
                Kind::Tps => &["retry_ratio", "min_per_sec", "ttl"],
                Kind::TokenBucket => &[
                    "capacity",
                    "retry_cost",
                    "timeout_retry_cost",
                    "success_reward",
                ],
                Kind::ErrorRate => &["threshold_percent", "window", "bucket", "minimum_calls"],
            }
        }
    }

    /// One budget table: every kind's fields, those of another kind refused.
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RawBudget {
        kind: Kind,
        #[serde(default, deserialize_with = "retry_ratio")]
        retry_ratio: Option<f64>,
        #[serde(default, deserialize_with = "min_per_sec")]
        min_per_sec: Option<u32>,
        #[serde(default, deserialize_with = "ttl")]
        ttl: Option<Duration>,
        #[serde(default, deserialize_with = "capacity")]
        capacity: Option<u32>,
        #[serde(default, deserialize_with = "retry_cost")]
        retry_cost: Option<u32>,
        #[serde(default, deserialize_with = "timeout_retry_cost")]
        timeout_retry_cost: Option<u32>,
        #[serde(default)]
        success_reward: Option<u32>,
        #[serde(default, deserialize_with = "threshold_percent")]
        threshold_percent: Option<f64>,
        #[serde(default, with = "tripline::duration::serde::option")]
        window: Option<Duration>,
        #[serde(default, deserialize_with = "bucket")]
        bucket: Option<Duration>,
        #[serde(default, deserialize_with = "minimum_calls")]
        minimum_calls: Option<u32>,
    }

    impl RawBudget {
        /// The first field set that belongs to another kind.
        fn stray(&self) -> Option<(&'static str, String)> {
            let set: [(&'static str, Option<String>); 11] = [
                ("retry_ratio", self.retry_ratio.map(|v| v.to_string())),
                ("min_per_sec", self.min_per_sec.map(|v| v.to_string())),
                ("ttl", self.ttl.map(|v| format!("{v:?}"))),
                ("capacity", self.capacity.map(|v| v.to_string())),
                ("retry_cost", self.retry_cost.map(|v| v.to_string())),
                (
                    "timeout_retry_cost",
                    self.timeout_retry_cost.map(|v| v.to_string()),
                ),
                ("success_reward", self.success_reward.map(|v| v.to_string())),
                (
                    "threshold_percent",
                    self.threshold_percent.map(|v| v.to_string()),
                ),
                ("window", self.window.map(|v| format!("{v:?}"))),
                ("bucket", self.bucket.map(|v| format!("{v:?}"))),
                ("minimum_calls", self.minimum_calls.map(|v| v.to_string())),
            ];
            set.into_iter()
                .find(|(f, v)| v.is_some() && !self.kind.fields().contains(f))
                .and_then(|(f, v)| Some((f, v?)))
        }

        fn config(self) -> Result<BudgetConfig, ConfigError> {
            if let Some((field, value)) = self.stray() {
                let owner = [Kind::Tps, Kind::TokenBucket, Kind::ErrorRate]
                    .into_iter()
                    .find(|k| k.fields().contains(&field))
                    .map_or("", Kind::name);
                return Err(ConfigError::new(
                    field,
                    value,
                    format!(
                        "a field of kind \"{owner}\" (kind \"{}\" has {})",
                        self.kind.name(),
                        self.kind.fields().join(", ")
                    ),
                ));
            }
            let c = match self.kind {
                Kind::Tps => {
                    let mut b = TpsBudget::builder();
                    if let Some(v) = self.retry_ratio {
                        b = b.retry_ratio(v);
                    }
                    if let Some(v) = self.min_per_sec {
                        b = b.min_per_sec(v);
                    }
                    if let Some(v) = self.ttl {
                        b = b.ttl(v);
                    }
                    BudgetConfig::Tps(b)
                }
                Kind::TokenBucket => {
                    let mut b = TokenBucketBudget::builder();
                    if let Some(v) = self.capacity {
                        b = b.capacity(v);
                    }
                    if let Some(v) = self.retry_cost {
                        b = b.retry_cost(v);
                    }
                    if let Some(v) = self.timeout_retry_cost {
                        b = b.timeout_retry_cost(v);
                    }
                    if let Some(v) = self.success_reward {
                        b = b.success_reward(v);
                    }
                    BudgetConfig::TokenBucket(b)
                }
                Kind::ErrorRate => {
                    let mut b = ErrorRateBudget::builder();
                    if let Some(v) = self.threshold_percent {
                        b = b.threshold_percent(v);
                    }
                    if self.window.is_some() || self.bucket.is_some() {
                        b = b.window(
                            self.window.unwrap_or(Duration::from_secs(10)),
                            self.bucket.unwrap_or(Duration::from_secs(1)),
                        );
                    }
                    if let Some(v) = self.minimum_calls {
                        b = b.minimum_calls(v);
                    }
                    BudgetConfig::ErrorRate(b)
                }
            };
            c.validate().map_err(|e| match (self.kind, e.field()) {
                // The builder's window check names the bucket `window.bucket`.
                (Kind::ErrorRate, "window.bucket") => {
                    ConfigError::new("bucket", e.value(), e.allowed())
                }
                _ => e,
            })?;
            Ok(c)
        }
    }

    impl<'de> Deserialize<'de> for BudgetConfig {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = BudgetConfig;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str(
                        "a budget table ({ kind = \"tps\", retry_ratio = 0.1 }) or an array of them",
                    )
                }
                fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<BudgetConfig, A::Error> {
                    RawBudget::deserialize(de::value::MapAccessDeserializer::new(map))?
                        .config()
                        .map_err(de::Error::custom)
                }
                fn visit_seq<A: SeqAccess<'de>>(
                    self,
                    mut seq: A,
                ) -> Result<BudgetConfig, A::Error> {
                    let mut all = Vec::new();
                    while let Some(b) = seq.next_element::<BudgetConfig>()? {
                        all.push(b);
                    }
                    if all.is_empty() {
                        return Err(de::Error::custom(super::empty()));
                    }
                    Ok(BudgetConfig::All(all))
                }
            }
            d.deserialize_any(V)
        }
    }
}
