//! The policies a scenario can switch on, one section each, and how a tier's client is
//! resolved from them.
//!
//! Every section is the configuration of a real `tripline-policies` type, under the same field
//! names, checked by that type's own builder: `[protection.retry]` (a
//! [`RetryPolicy`](tripline_policies::retry::RetryPolicy) with its
//! [`Backoff`], jitter and budgets),
//! `[protection.bulkhead]` ([`BulkheadConfig`]), `[protection.gate]` ([`GateConfig`]) and
//! `[protection.throttle]` ([`ThrottleConfig`]), next to the breaker (`[protection.breaker]`,
//! tripline's own format) and the timeout. The engine composes them in the pipeline's order
//! (see [`crate::layers`]).
//!
//! A tier's client is resolved in two steps: its own settings (`[client]` for the service,
//! `[tiers.client]` for a tier in front of it), then a protected variant's overrides
//! (`[[protection]]` for the service, `[protection.tiers.NAME]` for a tier in front). A new
//! policy is one more section here, one more field of the resolved client (`ClientSpec`), and
//! one more layer.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use tripline::{BreakerConfig, ConfigError};
use tripline_policies::bulkhead::BulkheadConfig;
use tripline_policies::gate::GateConfig;
use tripline_policies::retry::budget::{
    ErrorRateBudget, RetryBudget, TokenBucketBudget, TpsBudget,
};
use tripline_policies::retry::{Backoff, Jitter, MAX_ATTEMPTS};
use tripline_policies::throttle::ThrottleConfig;

use tripline_policies::limiter::LimiterConfig;
use tripline_policies::partial::PartialConfig;

use crate::adaptive::{
    ChaosSection, ChaosSpec, LimiterSection, PartialSection, ShedAt, ShedSection, ShedSpec,
};
use crate::dist::{Rate, fmt_d};
use crate::scenario::{Scope, Sharing};

/// How a backoff delay is randomised: the jitters of the AWS article "Exponential Backoff
/// and Jitter" ([`Jitter`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JitterKind {
    /// Exactly `min(max_backoff, backoff × 2ⁿ)` before retry `n`.
    #[default]
    None,
    /// Uniform in `[0, min(max_backoff, backoff × 2ⁿ)]`.
    Full,
    /// Half of it, plus uniform in the other half.
    Equal,
    /// `min(max_backoff, uniform in [backoff, 3 × the previous delay])`.
    Decorrelated,
}

impl From<JitterKind> for Jitter {
    fn from(j: JitterKind) -> Self {
        match j {
            JitterKind::None => Jitter::None,
            JitterKind::Full => Jitter::Full,
            JitterKind::Equal => Jitter::Equal,
            JitterKind::Decorrelated => Jitter::Decorrelated,
        }
    }
}

/// A ratio: a number (`0.1`, `2.0`) or a percentage string (`"10%"`), at least 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd, Serialize)]
pub struct Ratio(pub f64);

const RATIO_ALLOWED: &str = "a number at least 0 (0.1) or a percentage string (\"10%\")";

impl<'de> Deserialize<'de> for Ratio {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Ratio;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(RATIO_ALLOWED)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Ratio, E> {
                if v.is_finite() && v >= 0.0 {
                    Ok(Ratio(v))
                } else {
                    Err(E::custom(format!("must be {RATIO_ALLOWED}, got {v}")))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ratio, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ratio, E> {
                self.visit_f64(v as f64)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Ratio, E> {
                let bad = || E::custom(format!("must be {RATIO_ALLOWED}, got {s:?}"));
                let pct = s.trim().strip_suffix('%').ok_or_else(bad)?;
                let v: f64 = pct.trim().parse().map_err(|_| bad())?;
                if v.is_finite() && v >= 0.0 {
                    Ok(Ratio(v / 100.0))
                } else {
                    Err(bad())
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Which of the three budgets of `tripline_policies::retry::budget` a `budget` table is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BudgetKind {
    /// [`TpsBudget`]: retries at most `ratio` of the requests over `ttl`, plus `min_per_sec`.
    Tps,
    /// [`TokenBucketBudget`]: the AWS SDKs' standard mode.
    TokenBucket,
    /// [`ErrorRateBudget`]: retries off while the error rate is above `threshold`.
    ErrorRate,
}

impl BudgetKind {
    /// The kind as the file writes it.
    pub fn name(self) -> &'static str {
        match self {
            BudgetKind::Tps => "tps",
            BudgetKind::TokenBucket => "token-bucket",
            BudgetKind::ErrorRate => "error-rate",
        }
    }

    /// The fields of this kind.
    fn fields(self) -> &'static [&'static str] {
        match self {
            BudgetKind::Tps => &["ratio", "min_per_sec", "ttl"],
            BudgetKind::TokenBucket => &[
                "capacity",
                "retry_cost",
                "timeout_retry_cost",
                "success_reward",
            ],
            BudgetKind::ErrorRate => &["threshold", "window", "bucket", "minimum_calls"],
        }
    }
}

/// A retry budget (`budget = { kind = ... }`): one of the three of
/// `tripline_policies::retry::budget`, with their field names; unset fields keep the
/// budget's own defaults, and a field of another kind is an error.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// `"tps"`, `"token-bucket"` or `"error-rate"`.
    pub kind: BudgetKind,
    /// `tps`: retries per request (`0.1` or `"10%"`; default 20 %).
    #[serde(default)]
    pub ratio: Option<Ratio>,
    /// `tps`: retries per second allowed whatever the traffic (default 10).
    #[serde(default)]
    pub min_per_sec: Option<u32>,
    /// `tps`: how long deposits and withdrawals count (default 10 s).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub ttl: Option<Duration>,
    /// `token-bucket`: tokens (default 500).
    #[serde(default)]
    pub capacity: Option<u32>,
    /// `token-bucket`: tokens a retry takes (default 5).
    #[serde(default)]
    pub retry_cost: Option<u32>,
    /// `token-bucket`: tokens a retry of a timeout takes (default 10).
    #[serde(default)]
    pub timeout_retry_cost: Option<u32>,
    /// `token-bucket`: tokens a first-try success puts back (default 1).
    #[serde(default)]
    pub success_reward: Option<u32>,
    /// `error-rate`: the error rate above which retries are off (default 10 %).
    #[serde(default)]
    pub threshold: Option<Rate>,
    /// `error-rate`: the window (default 10 s).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub window: Option<Duration>,
    /// `error-rate`: the window's bucket (default 1 s).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub bucket: Option<Duration>,
    /// `error-rate`: results needed before the rule applies (default 20).
    #[serde(default)]
    pub minimum_calls: Option<u32>,
}

impl Budget {
    /// The budget's name in the report: `tps`, `token-bucket`, `error-rate`.
    pub fn kind(&self) -> &'static str {
        self.kind.name()
    }

    /// The first field set that belongs to another kind: `(field, value)`.
    fn stray_field(&self) -> Option<(&'static str, String)> {
        let set: [(&'static str, Option<String>); 11] = [
            ("ratio", self.ratio.map(|r| r.0.to_string())),
            ("min_per_sec", self.min_per_sec.map(|v| v.to_string())),
            ("ttl", self.ttl.map(fmt_d)),
            ("capacity", self.capacity.map(|v| v.to_string())),
            ("retry_cost", self.retry_cost.map(|v| v.to_string())),
            (
                "timeout_retry_cost",
                self.timeout_retry_cost.map(|v| v.to_string()),
            ),
            ("success_reward", self.success_reward.map(|v| v.to_string())),
            (
                "threshold",
                self.threshold.map(|v| v.fraction().to_string()),
            ),
            ("window", self.window.map(fmt_d)),
            ("bucket", self.bucket.map(fmt_d)),
            ("minimum_calls", self.minimum_calls.map(|v| v.to_string())),
        ];
        set.into_iter()
            .find(|(f, v)| v.is_some() && !self.kind.fields().contains(f))
            .and_then(|(f, v)| Some((f, v?)))
    }

    /// Builds the real budget on `clock`.
    pub(crate) fn build(
        &self,
        clock: tripline::ManualClock,
    ) -> Result<Arc<dyn RetryBudget>, ConfigError> {
        Ok(match self.kind {
            BudgetKind::Tps => {
                let mut b = TpsBudget::builder();
                if let Some(r) = self.ratio {
                    b = b.retry_ratio(r.0);
                }
                if let Some(m) = self.min_per_sec {
                    b = b.min_per_sec(m);
                }
                if let Some(t) = self.ttl {
                    b = b.ttl(t);
                }
                Arc::new(b.build_with_clock(clock)?)
            }
            BudgetKind::TokenBucket => {
                let mut b = TokenBucketBudget::builder();
                if let Some(c) = self.capacity {
                    b = b.capacity(c);
                }
                if let Some(c) = self.retry_cost {
                    b = b.retry_cost(c);
                }
                if let Some(c) = self.timeout_retry_cost {
                    b = b.timeout_retry_cost(c);
                }
                if let Some(r) = self.success_reward {
                    b = b.success_reward(r);
                }
                Arc::new(b.build()?)
            }
            BudgetKind::ErrorRate => {
                let mut b = ErrorRateBudget::builder();
                if let Some(t) = self.threshold {
                    b = b.threshold_percent(t.fraction() * 100.0);
                }
                if self.window.is_some() || self.bucket.is_some() {
                    b = b.window(
                        self.window.unwrap_or(Duration::from_secs(10)),
                        self.bucket.unwrap_or(Duration::from_secs(1)),
                    );
                }
                if let Some(m) = self.minimum_calls {
                    b = b.minimum_calls(m);
                }
                Arc::new(b.build_with_clock(clock)?)
            }
        })
    }

    /// The config error's field named as the scenario file names it.
    fn field(&self, e: &ConfigError) -> String {
        match (self.kind, e.field()) {
            (BudgetKind::Tps, "retry_ratio") => "ratio".into(),
            (BudgetKind::ErrorRate, "threshold_percent") => "threshold".into(),
            (BudgetKind::ErrorRate, "window.bucket") => "bucket".into(),
            (_, f) => f.into(),
        }
    }
}

/// One budget or several that must all allow a retry (`budget = { ... }` or
/// `budget = [{ ... }, { ... }]`): "10 % of requests, and none above 10 % errors".
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Budgets(pub Vec<Budget>);

impl<'de> Deserialize<'de> for Budgets {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Budgets;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a budget table ({ kind = \"tps\", ratio = \"10%\" }) or an array of them",
                )
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Budgets, A::Error> {
                let b = Budget::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(Budgets(vec![b]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Budgets, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = seq.next_element::<Budget>()? {
                    v.push(b);
                }
                Ok(Budgets(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[protection.retry]`: a variant's retry policy; unset fields keep the client's.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySection {
    /// Attempts per request, the first included, in [1, 100].
    #[serde(default)]
    pub attempts: Option<u32>,
    /// The first retry's wait (the backoff's base).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub backoff: Option<Duration>,
    /// The longest wait: `min(max_backoff, backoff × 2ⁿ)` before retry `n`.
    #[serde(default, with = "tripline::duration::serde::option")]
    pub max_backoff: Option<Duration>,
    /// `"none"`, `"full"`, `"equal"` or `"decorrelated"`.
    #[serde(default)]
    pub jitter: Option<JitterKind>,
    /// Whether a timeout is retried (default true).
    #[serde(default)]
    pub retry_timeouts: Option<bool>,
    /// The retry budget(s): all must allow a retry.
    #[serde(default)]
    pub budget: Option<Budgets>,
}

/// `[protection.bulkhead]`: [`BulkheadConfig`]'s fields; unset ones keep its defaults (25
/// concurrent, no waiting).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkheadSection {
    /// Calls in flight allowed.
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// Calls allowed to wait for a slot.
    #[serde(default)]
    pub max_waiting: Option<u32>,
    /// How long a call may wait for a slot (the worker is held meanwhile).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub max_wait: Option<Duration>,
}

impl BulkheadSection {
    fn config(&self) -> Result<BulkheadConfig, ConfigError> {
        let mut b = BulkheadConfig::builder();
        if let Some(n) = self.max_concurrent {
            b = b.max_concurrent(n);
        }
        if let Some(n) = self.max_waiting {
            b = b.max_waiting(n);
        }
        if let Some(d) = self.max_wait {
            b = b.max_wait(d);
        }
        b.build()
    }
}

/// `[protection.gate]`'s retry budget: Envoy's `retry_budget`.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateRetryBudget {
    /// Retries in flight as a percentage of active and pending requests (default 20).
    #[serde(default)]
    pub budget_percent: Option<f64>,
    /// Retries always allowed in flight (default 3).
    #[serde(default)]
    pub min_retry_concurrency: Option<u32>,
}

/// `[protection.gate]`: Envoy's cluster thresholds ([`GateConfig`]); unset ones keep Envoy's
/// defaults (1024, 1024, 3).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateSection {
    /// Requests in flight allowed.
    #[serde(default)]
    pub max_requests: Option<u32>,
    /// Requests waiting (for a bulkhead's slot) allowed.
    #[serde(default)]
    pub max_pending: Option<u32>,
    /// Retries in flight allowed.
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// A retry budget instead of `max_retries`.
    #[serde(default)]
    pub retry_budget: Option<GateRetryBudget>,
}

impl GateSection {
    fn config(&self) -> Result<GateConfig, ConfigError> {
        let mut b = GateConfig::builder();
        if let Some(n) = self.max_requests {
            b = b.max_requests(n);
        }
        if let Some(n) = self.max_pending {
            b = b.max_pending(n);
        }
        if let Some(n) = self.max_retries {
            b = b.max_retries(n);
        }
        if let Some(r) = self.retry_budget {
            b = b.retry_budget(
                r.budget_percent.unwrap_or(20.0),
                r.min_retry_concurrency.unwrap_or(3),
            );
        }
        b.build()
    }
}

/// `[protection.throttle]`: the Google SRE book's client-side throttling ([`ThrottleConfig`]);
/// unset fields keep its defaults (2 minutes in 1 s buckets, `k = 2`).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThrottleSection {
    /// The window over which requests and accepts are counted.
    #[serde(default, with = "tripline::duration::serde::option")]
    pub window: Option<Duration>,
    /// The window's bucket.
    #[serde(default, with = "tripline::duration::serde::option")]
    pub bucket: Option<Duration>,
    /// The multiplier: requests are refused once they pass `k` × accepts.
    #[serde(default)]
    pub k: Option<f64>,
}

impl ThrottleSection {
    fn config(&self) -> Result<ThrottleConfig, ConfigError> {
        let mut b = ThrottleConfig::builder();
        if self.window.is_some() || self.bucket.is_some() {
            b = b.window(
                self.window.unwrap_or(Duration::from_secs(120)),
                self.bucket.unwrap_or(Duration::from_secs(1)),
            );
        }
        if let Some(k) = self.k {
            b = b.k(k);
        }
        b.build()
    }
}

/// The policies of a variant at one tier: the fields `[[protection]]` sets for the service,
/// and `[protection.tiers.NAME]` for a tier in front of it.
#[derive(Clone, Debug, Default)]
pub struct Policies<'a> {
    /// Per-attempt timeout.
    pub timeout: Option<Duration>,
    /// Attempts (a shortcut for `retry.attempts`).
    pub attempts: Option<u32>,
    /// Whether a local refusal is answered with a fallback.
    pub fallback: Option<bool>,
    /// Whether the retry sits inside the breaker.
    pub retry_inside_breaker: bool,
    /// The breaker (tripline's configuration), if any.
    pub breaker: Option<&'a BreakerConfig>,
    /// How breakers are keyed and shared (the service tier only).
    pub scope: Scope,
    /// Where their state lives.
    pub sharing: Sharing,
    /// A shared store's view TTL.
    pub view_ttl: Duration,
    /// The retry section.
    pub retry: Option<&'a RetrySection>,
    /// The bulkhead section.
    pub bulkhead: Option<&'a BulkheadSection>,
    /// The gate section.
    pub gate: Option<&'a GateSection>,
    /// The throttle section.
    pub throttle: Option<&'a ThrottleSection>,
    /// The partial breaker section.
    pub partial: Option<&'a PartialSection>,
    /// The shedder section.
    pub shed: Option<&'a ShedSection>,
    /// The adaptive limiter section.
    pub limiter: Option<&'a LimiterSection>,
    /// The fault injector section.
    pub chaos: Option<&'a ChaosSection>,
}

/// `[protection.tiers.NAME]`: a variant's policies at a tier in front of the service.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierProtection {
    /// The per-attempt timeout to the tier below (default: the tier's own).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub timeout: Option<Duration>,
    /// Attempts per request (default: the tier's own).
    #[serde(default)]
    pub attempts: Option<u32>,
    /// Whether a local refusal is answered with a fallback (default false).
    #[serde(default)]
    pub fallback: Option<bool>,
    /// Puts the retry inside the breaker.
    #[serde(default)]
    pub retry_inside_breaker: bool,
    /// A breaker per replica of this tier, in front of the tier below.
    #[serde(default)]
    pub breaker: Option<BreakerConfig>,
    /// The retry policy.
    #[serde(default)]
    pub retry: Option<RetrySection>,
    /// A bulkhead per replica.
    #[serde(default)]
    pub bulkhead: Option<BulkheadSection>,
    /// A gate per replica.
    #[serde(default)]
    pub gate: Option<GateSection>,
    /// A throttle per replica.
    #[serde(default)]
    pub throttle: Option<ThrottleSection>,
    /// A partial breaker per replica.
    #[serde(default)]
    pub partial: Option<PartialSection>,
    /// A shedder per replica (in the client, or at this tier's workers).
    #[serde(default)]
    pub shed: Option<ShedSection>,
    /// An adaptive limiter per replica.
    #[serde(default)]
    pub limiter: Option<LimiterSection>,
    /// A fault injector per replica, playing the tier below.
    #[serde(default)]
    pub chaos: Option<ChaosSection>,
}

impl TierProtection {
    /// The policies it sets.
    pub fn policies(&self) -> Policies<'_> {
        Policies {
            timeout: self.timeout,
            attempts: self.attempts,
            fallback: self.fallback,
            retry_inside_breaker: self.retry_inside_breaker,
            breaker: self.breaker.as_ref(),
            scope: Scope::Dependency,
            sharing: Sharing::Local,
            view_ttl: Duration::ZERO,
            retry: self.retry.as_ref(),
            bulkhead: self.bulkhead.as_ref(),
            gate: self.gate.as_ref(),
            throttle: self.throttle.as_ref(),
            partial: self.partial.as_ref(),
            shed: self.shed.as_ref(),
            limiter: self.limiter.as_ref(),
            chaos: self.chaos.as_ref(),
        }
    }
}

/// A client's own settings: `[client]` for the service, `[tiers.client]` for a tier in front.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Client {
    /// Each attempt gives up after this and counts as a failure (default: no timeout).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub timeout: Option<Duration>,
    /// Attempts per request, the first included, in [1, 100] (default 1: no retries).
    #[serde(default = "one")]
    pub attempts: u32,
    /// The wait before the first retry, holding the worker (default 0: at once, 1 ns later).
    #[serde(default, with = "tripline::duration::serde")]
    pub backoff: Duration,
    /// The longest wait; before retry `n` the wait is `min(max_backoff, backoff × 2ⁿ)`
    /// (default: `backoff`, a fixed wait).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub max_backoff: Option<Duration>,
    /// How the wait is randomised (default `"none"`).
    #[serde(default)]
    pub jitter: JitterKind,
    /// Whether timeouts are retried (default true).
    #[serde(default = "yes")]
    pub retry_timeouts: bool,
}

fn one() -> u32 {
    1
}
fn yes() -> bool {
    true
}

impl Default for Client {
    fn default() -> Self {
        Self {
            timeout: None,
            attempts: 1,
            backoff: Duration::ZERO,
            max_backoff: None,
            jitter: JitterKind::None,
            retry_timeouts: true,
        }
    }
}

/// The breaker part of a resolved client.
#[derive(Clone, Debug)]
pub(crate) struct BreakerSpec {
    pub(crate) config: BreakerConfig,
    pub(crate) scope: Scope,
    pub(crate) sharing: Sharing,
    pub(crate) view_ttl: Duration,
}

/// A tier's client in one variant, resolved and checked: what the engine builds its policies
/// from.
#[derive(Clone, Debug)]
pub(crate) struct ClientSpec {
    pub(crate) timeout: Option<Duration>,
    pub(crate) attempts: u32,
    pub(crate) backoff: Backoff,
    pub(crate) retry_timeouts: bool,
    pub(crate) budgets: Vec<Budget>,
    pub(crate) breaker: Option<BreakerSpec>,
    pub(crate) bulkhead: Option<BulkheadConfig>,
    pub(crate) gate: Option<GateConfig>,
    pub(crate) throttle: Option<ThrottleConfig>,
    pub(crate) partial: Option<PartialConfig>,
    pub(crate) shed: Option<ShedSpec>,
    pub(crate) limiter: Option<LimiterConfig>,
    pub(crate) chaos: Option<ChaosSpec>,
    pub(crate) fallback: bool,
    pub(crate) retry_inside_breaker: bool,
}

/// A bad value: (field below the section's prefix, value, what is allowed).
pub(crate) type Bad = (String, String, String);

fn from_config(prefix: &str, field: &str, e: &ConfigError) -> Bad {
    (
        format!("{prefix}{field}"),
        e.value().to_string(),
        format!("must be {}", e.allowed()),
    )
}

/// The smallest wait the retry policy can express: a zero backoff retries after 1 ns.
const SMALLEST_BACKOFF: Duration = Duration::from_nanos(1);

impl ClientSpec {
    /// Resolves a client: `base` its own settings, `p` a variant's policies at that tier.
    /// `prefix` names the variant's section in errors (`protection[2].`, or
    /// `protection[2].tiers.gateway.`), `base_prefix` the client's own (`client.`);
    /// `workers` is the tier's workers per replica (a shedder at the workers has as many slots).
    pub(crate) fn resolve(
        base: &Client,
        base_prefix: &str,
        p: Option<&Policies<'_>>,
        prefix: &str,
        workers: u32,
    ) -> Result<Self, Bad> {
        if !(1..=MAX_ATTEMPTS).contains(&base.attempts) {
            return Err((
                format!("{base_prefix}attempts"),
                base.attempts.to_string(),
                format!("must be in [1, {MAX_ATTEMPTS}]"),
            ));
        }
        let retry = p.and_then(|p| p.retry);
        let (mut attempts, mut attempts_field) = (base.attempts, format!("{base_prefix}attempts"));
        if let Some(a) = p.and_then(|p| p.attempts) {
            (attempts, attempts_field) = (a, format!("{prefix}attempts"));
        }
        if let Some(a) = retry.and_then(|r| r.attempts) {
            if p.and_then(|p| p.attempts).is_some() {
                return Err((
                    format!("{prefix}retry.attempts"),
                    a.to_string(),
                    format!("must not be set together with {prefix}attempts (set it in one place)"),
                ));
            }
            (attempts, attempts_field) = (a, format!("{prefix}retry.attempts"));
        }
        if !(1..=MAX_ATTEMPTS).contains(&attempts) {
            return Err((
                attempts_field,
                attempts.to_string(),
                format!("must be in [1, {MAX_ATTEMPTS}]"),
            ));
        }
        let (backoff, backoff_field) = match retry.and_then(|r| r.backoff) {
            Some(b) => (b, format!("{prefix}retry.backoff")),
            None => (base.backoff, format!("{base_prefix}backoff")),
        };
        let (max, max_field) = match retry.and_then(|r| r.max_backoff) {
            Some(m) => (Some(m), format!("{prefix}retry.max_backoff")),
            None => (base.max_backoff, format!("{base_prefix}max_backoff")),
        };
        let jitter = retry.and_then(|r| r.jitter).unwrap_or(base.jitter);
        if backoff > Duration::from_secs(3600) {
            return Err((backoff_field, fmt_d(backoff), "must be at most 1h".into()));
        }
        let base_delay = backoff.max(SMALLEST_BACKOFF);
        let cap = max.unwrap_or(backoff).max(base_delay);
        if let Some(m) = max {
            if m < backoff || m > Duration::from_secs(86_400) {
                return Err((
                    max_field,
                    fmt_d(m),
                    format!("must be in [backoff ({}), 1d]", fmt_d(backoff)),
                ));
            }
        }
        let backoff = Backoff::new(base_delay, cap, jitter.into()).map_err(|e| {
            let field = if e.field() == "base_delay" {
                backoff_field.clone()
            } else {
                max_field.clone()
            };
            (
                field,
                e.value().to_string(),
                format!("must be {}", e.allowed()),
            )
        })?;
        let budgets = retry
            .and_then(|r| r.budget.as_ref())
            .map(|b| b.0.clone())
            .unwrap_or_default();
        for (i, b) in budgets.iter().enumerate() {
            let at = if retry
                .and_then(|r| r.budget.as_ref())
                .is_some_and(|b| b.0.len() > 1)
            {
                format!("{prefix}retry.budget[{i}].")
            } else {
                format!("{prefix}retry.budget.")
            };
            if let Some((field, value)) = b.stray_field() {
                return Err((
                    format!("{at}{field}"),
                    value,
                    format!(
                        "must not be set for kind = \"{}\" (its fields: {})",
                        b.kind(),
                        b.kind.fields().join(", ")
                    ),
                ));
            }
            if let Err(e) = b.build(tripline::ManualClock::new()) {
                return Err(from_config(&at, &b.field(&e), &e));
            }
        }
        let timeout = p.and_then(|p| p.timeout).or(base.timeout);
        for (t, field) in [
            (base.timeout, format!("{base_prefix}timeout")),
            (p.and_then(|p| p.timeout), format!("{prefix}timeout")),
        ] {
            if let Some(t) = t {
                if t.is_zero() || t > Duration::from_secs(3600) {
                    return Err((field, fmt_d(t), "must be between 1ns and 1h".into()));
                }
            }
        }
        let bulkhead = p
            .and_then(|p| p.bulkhead)
            .map(|b| b.config())
            .transpose()
            .map_err(|e| from_config(&format!("{prefix}bulkhead."), e.field(), &e))?;
        let gate = p
            .and_then(|p| p.gate)
            .map(|g| g.config())
            .transpose()
            .map_err(|e| from_config(&format!("{prefix}gate."), e.field(), &e))?;
        let throttle = p
            .and_then(|p| p.throttle)
            .map(|t| t.config())
            .transpose()
            .map_err(|e| {
                let field = if e.field() == "window.bucket" {
                    "bucket"
                } else {
                    e.field()
                };
                from_config(&format!("{prefix}throttle."), field, &e)
            })?;
        let partial = p
            .and_then(|p| p.partial)
            .map(|s| s.config(&format!("{prefix}partial.")))
            .transpose()?;
        let shed = p
            .and_then(|p| p.shed)
            .map(|s| s.resolve(workers, &format!("{prefix}shed.")))
            .transpose()?;
        let limiter = p
            .and_then(|p| p.limiter)
            .map(|s| s.config(&format!("{prefix}limiter.")))
            .transpose()?;
        let chaos = p
            .and_then(|p| p.chaos)
            .map(|s| s.resolve(&format!("{prefix}chaos."), timeout))
            .transpose()?;
        let breaker = p.and_then(|p| {
            p.breaker.map(|c| BreakerSpec {
                config: c.clone(),
                scope: p.scope,
                sharing: p.sharing,
                view_ttl: p.view_ttl,
            })
        });
        Ok(ClientSpec {
            timeout,
            attempts,
            backoff,
            retry_timeouts: retry
                .and_then(|r| r.retry_timeouts)
                .unwrap_or(base.retry_timeouts),
            budgets,
            breaker,
            bulkhead,
            gate,
            throttle,
            partial,
            shed,
            limiter,
            chaos,
            fallback: p.and_then(|p| p.fallback).unwrap_or(false),
            retry_inside_breaker: p.is_some_and(|p| p.retry_inside_breaker),
        })
    }

    /// An upper bound on the backoff waits of one request, all retries together.
    pub(crate) fn longest_backoffs(&self) -> Duration {
        let retries = self.attempts.saturating_sub(1);
        (0..retries)
            .map(|n| match self.backoff.jitter() {
                Jitter::Decorrelated => self.backoff.cap(),
                _ => self.backoff.ceiling(n),
            })
            .fold(Duration::ZERO, |a, b| a.saturating_add(b))
    }

    /// The longest an attempt may wait for its slots: the bulkhead's, the shedder's and the
    /// limiter's queues, one after the other.
    pub(crate) fn longest_wait(&self) -> Duration {
        let shed = self
            .shed
            .filter(|s| s.at == ShedAt::Client)
            .map_or(Duration::ZERO, |s| s.config.max_wait());
        self.bulkhead
            .map_or(Duration::ZERO, |b| b.max_wait())
            .saturating_add(shed)
            .saturating_add(self.limiter.map_or(Duration::ZERO, |l| l.max_wait()))
    }

    /// The longest extra delay the fault injector adds to an attempt.
    pub(crate) fn longest_injected(&self) -> Duration {
        self.chaos
            .as_ref()
            .map_or(Duration::ZERO, ChaosSpec::longest_delay)
    }
}

/// The budgets of one client as one: all must allow a retry ([`RetryBudget::and`]).
pub(crate) fn combined(
    budgets: &[Budget],
    clock: &tripline::ManualClock,
) -> Option<Arc<dyn RetryBudget>> {
    let mut it = budgets.iter().filter_map(|b| b.build(clock.clone()).ok());
    let first = it.next()?;
    Some(it.fold(first, |acc, b| {
        Arc::new(tripline_policies::retry::budget::Both(acc, b)) as Arc<dyn RetryBudget>
    }))
}
