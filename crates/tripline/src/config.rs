//! Configuration: a validated [`BreakerConfig`], built with [`BreakerConfigBuilder`] or read
//! from TOML/JSON (feature `serde`, durations written like `"250ms"` or `"15s"`).
//!
//! # Defaults, and why
//!
//! | field | default | why |
//! |---|---|---|
//! | `window` | count, 100 calls | resilience4j's `slidingWindowSize` |
//! | `minimum_calls` | 20 | Hystrix's request-volume threshold. resilience4j's 100 with a 100-call window means a quiet service never reacts; 20 still keeps one unlucky call from tripping |
//! | `failure_rate_threshold` | 50 % | resilience4j, Hystrix |
//! | `slow_call_rate_threshold` | 100 % | resilience4j: the slow-call rule is effectively opt-in |
//! | `slow_call_duration` | 60 s | resilience4j; set it near your latency SLO |
//! | `slow_call_rule` | on | off: no call is slow, calls in flight are not counted, and a count window's closed path reads no clock at all (failure rate only, as recloser and gobreaker judge) |
//! | `consecutive_failures` | off | the classic (Fowler) rule, for low-traffic dependencies |
//! | `count_in_flight_as_slow` | on | a hung dependency trips the slow rule before timeouts fire |
//! | `open.duration` | 60 s | resilience4j's `waitDurationInOpenState` |
//! | `open.jitter` | 0 | add some with several replicas, so they do not probe in lockstep |
//! | `open.max_retry_after` | 5 min | a `Retry-After` longer than this is not trusted |
//! | `half_open.permitted_calls` | 10 | resilience4j |
//! | `half_open.policy` | all-probes | resilience4j: one unlucky probe does not reopen |
//! | `half_open.max_wait` | none | resilience4j waits forever; the probe lease already reclaims hung probes |
//! | `half_open.probe_lease` | 60 s | longer than the slowest probe: set it to your timeout |
//! | `half_open.after_max_wait` | open | resilience4j's default; `closed` is resilience4j 2.4's other choice |
//! | `failure_kinds` | every kind weighs 1 | a failure is a failure until you say otherwise |
//! | `lumping_interval` | off | Semian's error lumping, for bursty clients that report one outage many times |
//! | `call_durations` | off | the window's total and mean call duration cost a few atomics per call |
//! | `interval` | off | gobreaker's `Interval`: a Closed generation that ends at a fixed boundary, every count cleared; for rules meant per period ("3 failures a minute") |
//! | `ramp_up` | off | a breaker that closes sends full traffic at once, as every peer does; ramp it for a dependency that recovers slowly (start at 10 % over 30 s in 10 steps, say) |
//!
//! These defaults suit a slow internal RPC, as the resilience4j ones they follow do. For a
//! checkout path, tune them from data (the `tripline` simulator replays traces).
//!
//! # In TOML
//!
//! With the `serde` feature a [`BreakerConfig`] deserializes from TOML (or JSON, YAML...)
//! with the builder's field names, `open.*` and `half_open.*` in tables of their own. Every
//! field:
//!
//! ```toml
#![doc = include_str!("../docs/breaker.toml")]
//! ```
//!
//! A bad value is refused with the field, the value and what is allowed, at the line of the
//! field (a rule that relates two fields, such as a minimum larger than the window, points at
//! the table that holds them). A [registry](crate::registry::RegistryConfig) reads the same
//! shape under `[configs.NAME]`.
//!
//! ```
//! # #[cfg(feature = "serde")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tripline::{BreakerConfig, HalfOpenPolicy, WindowConfig};
//!
//! let config: BreakerConfig = toml::from_str(include_str!("../docs/breaker.toml"))?;
//! assert_eq!(
//!     config.window(),
//!     WindowConfig::Time { length: Duration::from_secs(30), bucket: Duration::from_secs(1) }
//! );
//! assert_eq!(config.half_open_policy(), HalfOpenPolicy::AllProbes);
//! assert_eq!(config.open_backoff().map(|b| b.max), Some(Duration::from_secs(300)));
//!
//! let err = toml::from_str::<BreakerConfig>("minimum_calls = 5\nfailure_rate_threshold = 150\n")
//!     .unwrap_err();
//! assert_eq!(err.message(), "failure_rate_threshold must be in (0, 100], got 150");
//! assert!(err.to_string().contains("line 2"), "{err}");
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "serde"))]
//! # fn main() {}
//! ```

use std::time::Duration;

use crate::error::ConfigError;
use crate::outcome::FailureKind;

/// What the breaker measures over.
///
/// ```
/// use tripline::WindowConfig;
/// use std::time::Duration;
/// let w = WindowConfig::Time { length: Duration::from_secs(10), bucket: Duration::from_secs(1) };
/// assert_ne!(w, WindowConfig::Count { size: 100 });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowConfig {
    /// The last `size` recorded outcomes.
    Count {
        /// How many outcomes the ring holds.
        size: u32,
    },
    /// The outcomes recorded in the last `length`, kept as a ring of `length / bucket` buckets.
    Time {
        /// How far back the window reaches.
        length: Duration,
        /// The width of one bucket; `length` must be a whole number of buckets.
        bucket: Duration,
    },
}

/// How half-open probes decide.
///
/// ```
/// use tripline::HalfOpenPolicy;
/// assert_eq!(HalfOpenPolicy::default(), HalfOpenPolicy::AllProbes);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum HalfOpenPolicy {
    /// Wait for `permitted_calls` results and close if their failure and slow-call rates are
    /// under the thresholds (resilience4j). Reopens early once enough probes have failed that
    /// the verdict can no longer be "close".
    #[default]
    AllProbes,
    /// Close after `permitted_calls` consecutive good probes; the first failed or slow probe
    /// reopens (the classic pattern, as the Azure Architecture Center describes it).
    Consecutive,
}

/// Where a half-open breaker goes when `half_open.max_wait` passes without a verdict.
///
/// ```
/// use tripline::AfterMaxWait;
/// assert_eq!(AfterMaxWait::default(), AfterMaxWait::Open);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum AfterMaxWait {
    /// Back to Open with a fresh open wait: no verdict is no proof of recovery
    /// (resilience4j's default).
    #[default]
    Open,
    /// On to Closed with a fresh window: the probes did not fail within the wait, so let traffic
    /// decide (resilience4j 2.4's `transitionToStateAfterWaitDuration = CLOSED`).
    Closed,
}

/// How much a failure of each [`FailureKind`] counts: 0 ignores it (as if the classifier had
/// said [`Outcome::Ignored`](crate::Outcome::Ignored)), 1 counts it once (the default), `n`
/// counts it as `n` failed calls (`n` outcomes in the window, `n` in the run of consecutive
/// failures). A half-open probe of a weighted kind is one failed probe; of a kind weighing 0,
/// an ignored one.
///
/// ```
/// use tripline::{FailureKind, FailureKindWeights};
/// let w = FailureKindWeights::default().with(FailureKind::RateLimited, 0);
/// assert_eq!(w.get(FailureKind::RateLimited), 0);
/// assert_eq!(w.get(FailureKind::Timeout), 1);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FailureKindWeights([u8; 7]);

impl Default for FailureKindWeights {
    fn default() -> Self {
        Self([1; 7])
    }
}

impl FailureKindWeights {
    /// The most a failure may weigh.
    pub const MAX: u8 = 10;

    /// The weight of `kind`.
    pub fn get(&self, kind: FailureKind) -> u8 {
        self.0[kind.index()]
    }

    /// The same weights with `kind` weighing `weight` (checked by the configuration's
    /// validation: at most [`FailureKindWeights::MAX`]).
    pub fn with(mut self, kind: FailureKind, weight: u8) -> Self {
        self.0[kind.index()] = weight;
        self
    }

    /// Whether every kind weighs 1.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The weights as nibbles, kind `i` at bits `4i..4i+4` (what the hot path reads).
    pub(crate) fn packed(&self) -> u32 {
        self.0
            .iter()
            .enumerate()
            .fold(0, |acc, (i, w)| acc | u32::from(*w & 0xF) << (4 * i))
    }
}

/// Growth of the open wait on repeated trips.
///
/// ```
/// use tripline::Backoff;
/// use std::time::Duration;
/// let b = Backoff { multiplier: 2.0, max: Duration::from_secs(300), healthy_after: Duration::from_secs(60) };
/// assert_eq!(b.multiplier, 2.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// Each re-open multiplies the wait by this (at least 1).
    pub multiplier: f64,
    /// No open wait exceeds this, jitter and `Retry-After` hints included: a grown wait is
    /// capped at `max - open_jitter` (but not below the base wait), so the jitter still spreads
    /// replicas at the cap, and anything beyond `max` is cut.
    pub max: Duration,
    /// The growth decays back to the base wait only after the breaker stayed closed this long
    /// before its next trip; a breaker that flaps keeps its longer wait.
    pub healthy_after: Duration,
}

/// The failure-count-in-time rule (Shopify Semian's classic breaker, `error_threshold` within
/// `error_timeout`): the breaker trips once `failures` failures were recorded within `within`
/// of each other, at most `within` before the last of them, whatever the window's rates say.
/// A failure recorded exactly `within` after an earlier one still counts with it (Semian's
/// inclusive boundary); successes do not dilute it, so it suits low-traffic dependencies,
/// where a rate needs volume. A failure of a kind that weighs `n`
/// ([`FailureKindWeights`]) counts `n` times, a lumped failure not at all. The rule keeps the
/// times of the last `failures` failures of the Closed period (16 bytes each); their number is
/// part of the breaker's shape, fixed for its life, while `within` can be reconfigured.
///
/// ```
/// use tripline::{BreakerConfig, FailureCount};
/// use std::time::Duration;
/// // Semian's classic breaker as in its experiments: 12 errors in 20 s.
/// let c = BreakerConfig::builder().failure_count(12, Duration::from_secs(20)).build()?;
/// assert_eq!(c.failure_count(), Some(FailureCount { failures: 12, within: Duration::from_secs(20) }));
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailureCount {
    /// Failures that trip the breaker, in [1, 1000].
    pub failures: u32,
    /// How close together they must be, in [1ms, 7 days].
    pub within: Duration,
}

impl FailureCount {
    /// The most failures the rule may count.
    pub const MAX: u32 = 1000;
}

/// Gradual recovery: after HalfOpen → Closed, the breaker admits a share of calls that grows
/// from `from` percent to 100 % over `over`, in `steps` equal steps, and refuses the rest with
/// [`RejectReason::RampingUp`](crate::RejectReason::RampingUp). Within each step it admits at
/// most the step's share of the calls that step has seen (a low-discrepancy count, not a coin:
/// of the first `n` calls of a step, `floor(n × share)` are admitted), so a recovering
/// dependency never sees more than the ramp allows. The closed rules apply throughout: a
/// failure-rate trip during the ramp reopens the breaker as usual.
///
/// ```
/// use tripline::{RampCurve, RampUp};
/// use std::time::Duration;
/// let ramp = RampUp { from: 10.0, over: Duration::from_secs(30), steps: 10, curve: RampCurve::Linear };
/// assert_eq!(ramp.share_ppm(0), 100_000);
/// assert_eq!(ramp.share_ppm(5), 550_000);
/// assert_eq!(ramp.share_ppm(10), 1_000_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RampUp {
    /// The first step's share, in percent, in (0, 100).
    pub from: f64,
    /// How long the ramp lasts, in [1ms, 1h]: after it every call is admitted.
    pub over: Duration,
    /// Equal steps, in [1, 1000]; each at least 1 ms long.
    pub steps: u32,
    /// How the share grows from step to step.
    pub curve: RampCurve,
}

/// How a [`RampUp`]'s share grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum RampCurve {
    /// By the same number of points each step (10 %, 19 %, 28 %, ...).
    Linear,
    /// By the same factor each step (10 %, 12.6 %, 15.8 %, ... 100 %): slow at first, as a
    /// cold cache or a scaled-down pool recovers.
    Exponential,
}

impl RampUp {
    /// The share step `i` admits, in parts per million (1,000,000 from step `steps` on),
    /// rounded toward refusing ([`rules::ramp_share_ppm`](crate::rules::ramp_share_ppm)).
    pub fn share_ppm(&self, i: u32) -> u64 {
        crate::rules::ramp_share_ppm(self.from, self.steps, self.curve, i)
    }
}

/// A validated breaker configuration. Build one with [`BreakerConfig::builder`] or deserialize
/// it; both validate every field.
///
/// ```
/// use tripline::BreakerConfig;
/// use std::time::Duration;
///
/// let config = BreakerConfig::builder()
///     .count_window(20)
///     .minimum_calls(10)
///     .failure_rate_threshold(50.0)
///     .slow_call_rate_threshold(30.0)
///     .slow_call_duration(Duration::from_secs(2))
///     .open_duration(Duration::from_secs(15))
///     .half_open_calls(3)
///     .build()?;
/// assert_eq!(config.minimum_calls(), 10);
///
/// let err = BreakerConfig::builder().failure_rate_threshold(150.0).build().unwrap_err();
/// assert_eq!(err.to_string(), "failure_rate_threshold must be in (0, 100], got 150");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(try_from = "raw::RawConfig", into = "raw::RawConfig")
)]
pub struct BreakerConfig {
    pub(crate) window: WindowConfig,
    pub(crate) minimum_calls: u32,
    pub(crate) failure_rate_threshold: f64,
    pub(crate) slow_call_rate_threshold: f64,
    pub(crate) slow_call_duration: Duration,
    pub(crate) slow_call_rule: bool,
    pub(crate) consecutive_failures: Option<u32>,
    pub(crate) failure_count: Option<FailureCount>,
    pub(crate) count_in_flight_as_slow: bool,
    pub(crate) open_duration: Duration,
    pub(crate) open_jitter: Duration,
    pub(crate) open_backoff: Option<Backoff>,
    pub(crate) max_retry_after: Duration,
    pub(crate) half_open_calls: u32,
    pub(crate) half_open_policy: HalfOpenPolicy,
    pub(crate) half_open_max_wait: Option<Duration>,
    pub(crate) after_max_wait: AfterMaxWait,
    pub(crate) probe_lease: Duration,
    pub(crate) automatic_transition: bool,
    pub(crate) stripes: u32,
    pub(crate) seed: Option<u64>,
    pub(crate) failure_kinds: FailureKindWeights,
    pub(crate) lumping_interval: Option<Duration>,
    pub(crate) call_durations: bool,
    pub(crate) ramp_up: Option<RampUp>,
    pub(crate) interval: Option<Duration>,
    pub(crate) open_duration_fn: Option<OpenDurationFn>,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            window: WindowConfig::Count { size: 100 },
            minimum_calls: 20,
            failure_rate_threshold: 50.0,
            slow_call_rate_threshold: 100.0,
            slow_call_duration: Duration::from_secs(60),
            slow_call_rule: true,
            consecutive_failures: None,
            failure_count: None,
            count_in_flight_as_slow: true,
            open_duration: Duration::from_secs(60),
            open_jitter: Duration::ZERO,
            open_backoff: None,
            max_retry_after: Duration::from_secs(300),
            half_open_calls: 10,
            half_open_policy: HalfOpenPolicy::AllProbes,
            half_open_max_wait: None,
            after_max_wait: AfterMaxWait::Open,
            probe_lease: Duration::from_secs(60),
            automatic_transition: false,
            stripes: 1,
            seed: None,
            failure_kinds: FailureKindWeights::default(),
            lumping_interval: None,
            call_durations: false,
            ramp_up: None,
            interval: None,
            open_duration_fn: None,
        }
    }
}

/// What an open-wait function ([`BreakerConfigBuilder::open_duration_fn`]) is told about the
/// open period it decides, Polly's `BreakDurationGeneratorArguments`.
///
/// ```
/// use std::time::Duration;
/// use tripline::{BreakerConfig, OpenWaitArgs};
///
/// // Polly's example: a longer break for each reopen in a row, up to ten minutes.
/// let by_attempt = |a: &OpenWaitArgs| Duration::from_secs(10 * u64::from(a.attempt)).min(Duration::from_secs(600));
/// let config = BreakerConfig::builder().open_duration_fn(by_attempt).build()?;
/// assert!(config.open_duration_fn().is_some());
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OpenWaitArgs {
    /// Opens in a row, this one included: 1 for a trip from Closed, 2 for the first reopen
    /// from HalfOpen (failed probes, or a half-open maximum wait that goes to Open), 3 for the
    /// next, and so on until the breaker closes (Polly's `HalfOpenAttempts`, plus one).
    pub attempt: u32,
    /// Failures in the window the trip judged (for a reopen from HalfOpen, the window of the
    /// last Closed generation; the probes' results are in `reason`).
    pub failures: u64,
    /// Calls in that window.
    pub calls: u64,
    /// Its failure rate, in percent (0 for an empty window).
    pub failure_rate: f64,
    /// Its slow-call rate, in percent (calls in flight past the slow-call duration included).
    pub slow_call_rate: f64,
    /// Why the breaker opens: the rule that tripped, the probes that failed, the half-open
    /// timeout, or an operator's `trip`.
    pub reason: crate::Reason,
    /// The `Retry-After` hint of the result that opened the breaker, if it carried one.
    pub retry_after: Option<Duration>,
    /// The wait the configuration alone would give (`open.duration` with its backoff level,
    /// jitter and hint): what applies if the function panics.
    pub configured: Duration,
}

/// An open-wait function (see [`BreakerConfigBuilder::open_duration_fn`]): cheap to clone
/// (one `Arc`). Two are equal when they are the same function object (the same `Arc`), so a
/// configuration and its clones compare equal, and two configurations built with separate
/// closures do not.
///
/// ```
/// use std::time::Duration;
/// use tripline::BreakerConfig;
/// let a = BreakerConfig::builder().open_duration_fn(|_| Duration::from_secs(5)).build()?;
/// let b = BreakerConfig::builder().open_duration_fn(|_| Duration::from_secs(5)).build()?;
/// assert_eq!(a, a.clone());
/// assert_ne!(a, b);
/// assert_eq!(format!("{:?}", a.open_duration_fn().unwrap()), "OpenDurationFn(..)");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct OpenDurationFn(std::sync::Arc<dyn Fn(&OpenWaitArgs) -> Duration + Send + Sync>);

impl OpenDurationFn {
    /// Wraps `f`.
    pub fn new(f: impl Fn(&OpenWaitArgs) -> Duration + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(f))
    }

    /// Calls the function (the breaker calls it with no lock held, and catches a panic).
    pub fn call(&self, args: &OpenWaitArgs) -> Duration {
        (self.0)(args)
    }
}

impl std::fmt::Debug for OpenDurationFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OpenDurationFn(..)")
    }
}

impl PartialEq for OpenDurationFn {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

macro_rules! getters {
    ($($(#[$m:meta])* $name:ident: $ty:ty;)*) => {
        $( $(#[$m])* pub fn $name(&self) -> $ty { self.$name } )*
    };
}

impl BreakerConfig {
    /// Whether calls in flight past the slow-call duration count as slow: the slow-call rule
    /// is on and `count_in_flight_as_slow` asks for it.
    pub fn counts_in_flight(&self) -> bool {
        self.slow_call_rule && self.count_in_flight_as_slow
    }

    /// Whether the closed path needs a clock reading per call: for the slow-call rule (call
    /// durations, calls in flight), a time window's buckets, call durations, lumping or a
    /// ramp. A count window judged by its failure rate alone needs none.
    pub fn needs_time(&self) -> bool {
        self.slow_call_rule
            || matches!(self.window, WindowConfig::Time { .. })
            || self.call_durations
            || self.lumping_interval.is_some()
            || self.ramp_up.is_some()
            || self.failure_count.is_some()
            || self.interval.is_some()
    }

    /// The finest duration the configuration compares call times against: the slow-call
    /// duration (with the slow-call rule on), a time window's bucket, the lumping interval;
    /// `None` when calls are not timed. A clock that reads to the millisecond serves every
    /// configuration whose finest duration is at least 100 ms (an error of 1 % at most).
    pub fn finest_duration(&self) -> Option<Duration> {
        let mut finest: Option<Duration> = None;
        let mut take = |d: Duration| finest = Some(finest.map_or(d, |f| f.min(d)));
        if self.slow_call_rule {
            take(self.slow_call_duration);
        }
        if let WindowConfig::Time { bucket, .. } = self.window {
            take(bucket);
        }
        if let Some(l) = self.lumping_interval {
            take(l);
        }
        if let Some(f) = self.failure_count {
            take(f.within);
        }
        if let Some(r) = self.ramp_up {
            take(r.over / r.steps.max(1));
        }
        if let Some(i) = self.interval {
            take(i);
        }
        finest
    }

    /// The open-wait function, if one is set (see
    /// [`BreakerConfigBuilder::open_duration_fn`]).
    pub fn open_duration_fn(&self) -> Option<&OpenDurationFn> {
        self.open_duration_fn.as_ref()
    }

    /// A builder starting from the defaults.
    pub fn builder() -> BreakerConfigBuilder {
        BreakerConfigBuilder {
            config: Self::default(),
        }
    }

    /// A builder starting from this configuration, to derive a variant.
    ///
    /// ```
    /// use tripline::BreakerConfig;
    /// let base = BreakerConfig::default();
    /// let tighter = base.to_builder().minimum_calls(5).build()?;
    /// assert_eq!(tighter.minimum_calls(), 5);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn to_builder(&self) -> BreakerConfigBuilder {
        BreakerConfigBuilder {
            config: self.clone(),
        }
    }

    getters! {
        /// The window shape.
        window: WindowConfig;
        /// Calls the window must hold before the rates are evaluated.
        minimum_calls: u32;
        /// Percent of failed calls that trips the breaker, in (0, 100].
        failure_rate_threshold: f64;
        /// Percent of slow calls that trips the breaker, in (0, 100].
        slow_call_rate_threshold: f64;
        /// A call slower than this counts as slow.
        slow_call_duration: Duration;
        /// Whether the slow-call rule is on (see [`BreakerConfigBuilder::slow_call_rule`]).
        slow_call_rule: bool;
        /// Trip after this many consecutive failures, whatever the window holds.
        consecutive_failures: Option<u32>;
        /// Trip after this many failures within this long, whatever the window holds (see
        /// [`FailureCount`]).
        failure_count: Option<FailureCount>;
        /// Whether calls still running past the slow-call duration count as slow.
        count_in_flight_as_slow: bool;
        /// The base wait in Open before a probe may be admitted.
        open_duration: Duration;
        /// A uniform random extra wait in `[0, open_jitter]` added to each open period.
        open_jitter: Duration;
        /// Growth of the open wait on repeated trips.
        open_backoff: Option<Backoff>;
        /// The longest `Retry-After` hint honoured.
        max_retry_after: Duration;
        /// Probes admitted in HalfOpen (at most this many in flight, and the verdict's sample size).
        half_open_calls: u32;
        /// How probes decide.
        half_open_policy: HalfOpenPolicy;
        /// HalfOpen without a verdict for this long goes to [`after_max_wait`](Self::after_max_wait).
        half_open_max_wait: Option<Duration>;
        /// Where HalfOpen goes when `half_open_max_wait` passes without a verdict.
        after_max_wait: AfterMaxWait;
        /// How long a probe holds its slot before the slot may be reclaimed.
        probe_lease: Duration;
        /// Whether a timer (see `CircuitBreaker::tick`) moves Open to HalfOpen, rather than the next acquire.
        automatic_transition: bool;
        /// Writer stripes: each thread writes its stripe's outcome counters, in-flight cohorts and
        /// (time window) buckets, on cache lines of their own, so concurrent callers do not
        /// contend. A count window's ring stays one ring, exact: each stripe keeps its fast
        /// successes (neither failed nor slow, once the ring is full) and puts them in by
        /// batches of `size / 2` (2 to 64), and every other result and every snapshot puts
        /// every stripe's in first, so the ring holds what an unstriped one holds (successes
        /// look alike, and none goes in after a result that came after it); a window that
        /// keeps call durations records each call in the ring. Each stripe costs
        /// 256 bytes (its counters and cohorts on a pair of cache lines of their own), plus, for
        /// a time window, its own buckets (16 bytes each, rounded up to 8 buckets).
        stripes: u32;
        /// Seed of the jitter generator; random when `None`.
        seed: Option<u64>;
        /// How much a failure of each kind counts.
        failure_kinds: FailureKindWeights;
        /// Failures within this interval of the last counted one count once (error lumping).
        lumping_interval: Option<Duration>;
        /// Whether the window keeps its calls' durations (total and mean in the metrics). Part of
        /// the window's shape: fixed for a breaker's life.
        call_durations: bool;
        /// Gradual recovery after closing, if on.
        ramp_up: Option<RampUp>;
        /// The fixed Closed interval, if set: each Closed generation ends at this boundary
        /// and a new one begins with every count cleared (gobreaker's `Interval`; see
        /// [`BreakerConfigBuilder::interval`]).
        interval: Option<Duration>;
    }

    /// Whether `other` has this configuration's window shape (kind, size, length, bucket,
    /// stripes, call durations), which is fixed for a breaker's life.
    pub(crate) fn same_shape(&self, other: &BreakerConfig) -> bool {
        self.window == other.window
            && self.stripes == other.stripes
            && self.call_durations == other.call_durations
            && self.counted_failures() == other.counted_failures()
    }

    /// How many failure times the failure-count rule keeps (0: the rule is off): part of the
    /// shape.
    pub(crate) fn counted_failures(&self) -> u32 {
        self.failure_count.map_or(0, |f| f.failures)
    }

    /// The window shape, in words.
    pub(crate) fn shape(&self) -> String {
        format!(
            "{:?} with {} stripe(s){}{}",
            self.window,
            self.stripes,
            if self.call_durations {
                " and call durations"
            } else {
                ""
            },
            match self.failure_count {
                Some(f) => format!(", counting {} failures in time", f.failures),
                None => String::new(),
            }
        )
    }

    /// Checks every field; the error names the first bad one.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        const MS: Duration = Duration::from_millis(1);
        const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);
        match self.window {
            WindowConfig::Count { size } => {
                range("window.size", size, 1, 1_000_000)?;
                if self.minimum_calls > size {
                    return Err(ConfigError::new(
                        "minimum_calls",
                        self.minimum_calls,
                        format!("at most window.size ({size}), or the breaker could never trip"),
                    ));
                }
            }
            WindowConfig::Time { length, bucket } => {
                if bucket < MS || bucket > Duration::from_secs(3600) {
                    return Err(ConfigError::new(
                        "window.bucket",
                        fmt_d(bucket),
                        "between 1ms and 1h",
                    ));
                }
                if length < bucket || length > WEEK {
                    return Err(ConfigError::new(
                        "window.length",
                        fmt_d(length),
                        format!("between window.bucket ({}) and 7 days", fmt_d(bucket)),
                    ));
                }
                if length.as_nanos() % bucket.as_nanos() != 0 {
                    return Err(ConfigError::new(
                        "window.length",
                        fmt_d(length),
                        format!("a whole number of buckets of {}", fmt_d(bucket)),
                    ));
                }
                let n = length.as_nanos() / bucket.as_nanos();
                if n > 4096 {
                    return Err(ConfigError::new(
                        "window.length",
                        fmt_d(length),
                        format!("at most 4096 buckets of {} (got {n})", fmt_d(bucket)),
                    ));
                }
            }
        }
        range("minimum_calls", self.minimum_calls, 1, 1_000_000)?;
        percent("failure_rate_threshold", self.failure_rate_threshold)?;
        percent("slow_call_rate_threshold", self.slow_call_rate_threshold)?;
        dur("slow_call_duration", self.slow_call_duration, MS, WEEK)?;
        if let Some(n) = self.consecutive_failures {
            range("consecutive_failures", n, 1, 1_000_000)?;
        }
        if let Some(f) = self.failure_count {
            range("failure_count.failures", f.failures, 1, FailureCount::MAX)?;
            dur("failure_count.within", f.within, MS, WEEK)?;
        }
        dur("open.duration", self.open_duration, MS, WEEK)?;
        dur("open.jitter", self.open_jitter, Duration::ZERO, WEEK)?;
        dur(
            "open.max_retry_after",
            self.max_retry_after,
            Duration::ZERO,
            WEEK,
        )?;
        if let Some(b) = self.open_backoff {
            if !(b.multiplier.is_finite() && (1.0..=100.0).contains(&b.multiplier)) {
                return Err(ConfigError::new(
                    "open.backoff.multiplier",
                    b.multiplier,
                    "a number in [1, 100]",
                ));
            }
            if b.max < self.open_duration || b.max > WEEK {
                return Err(ConfigError::new(
                    "open.backoff.max",
                    fmt_d(b.max),
                    format!(
                        "between open.duration ({}) and 7 days",
                        fmt_d(self.open_duration)
                    ),
                ));
            }
            dur(
                "open.backoff.healthy_after",
                b.healthy_after,
                Duration::ZERO,
                WEEK,
            )?;
        }
        range("half_open.permitted_calls", self.half_open_calls, 1, 1000)?;
        if let Some(w) = self.half_open_max_wait {
            dur("half_open.max_wait", w, MS, WEEK)?;
        } else if self.after_max_wait != AfterMaxWait::Open {
            return Err(ConfigError::new(
                "half_open.after_max_wait",
                "closed",
                "\"open\" unless half_open.max_wait is set (without a maximum wait there is nothing to go to Closed after)",
            ));
        }
        dur("half_open.probe_lease", self.probe_lease, MS, WEEK)?;
        range("stripes", self.stripes, 1, 64)?;
        for kind in FailureKind::ALL {
            let w = self.failure_kinds.get(kind);
            if w > FailureKindWeights::MAX {
                return Err(ConfigError::new(
                    format!("failure_kinds.{}", kind.as_str().replace('_', "-")),
                    w,
                    format!("in [0, {}]", FailureKindWeights::MAX),
                ));
            }
        }
        if let Some(r) = self.ramp_up {
            if !(r.from.is_finite() && r.from > 0.0 && r.from < 100.0) {
                return Err(ConfigError::new(
                    "ramp_up.from",
                    r.from,
                    "a percentage in (0, 100)",
                ));
            }
            dur("ramp_up.over", r.over, MS, Duration::from_secs(3600))?;
            range("ramp_up.steps", r.steps, 1, 1000)?;
            if r.over / r.steps < MS {
                return Err(ConfigError::new(
                    "ramp_up.steps",
                    r.steps,
                    format!(
                        "steps of at least 1ms: at most {} for ramp_up.over = {}",
                        (r.over.as_millis()).max(1),
                        fmt_d(r.over)
                    ),
                ));
            }
        }
        if let Some(l) = self.lumping_interval {
            dur("lumping_interval", l, MS, Duration::from_secs(3600))?;
        }
        if let Some(i) = self.interval {
            dur("interval", i, MS, WEEK)?;
        }
        Ok(())
    }

    /// The failure-rate threshold in parts per million, the integer form the rules compare in
    /// (`failures * 1_000_000 >= ppm * calls`). Other hosts of the rules (the Redis store) use
    /// the same integers, so they decide exactly alike. A percentage that is not a whole number
    /// of ppm is rounded down, toward tripping ([`rules::ppm_of_percent`]), so that
    /// `100 k / n` percent trips at exactly `k` failures of `n` calls.
    ///
    /// [`rules::ppm_of_percent`]: crate::rules::ppm_of_percent
    ///
    /// ```
    /// use tripline::BreakerConfig;
    ///
    /// let c = BreakerConfig::builder().failure_rate_threshold(33.3).build().unwrap();
    /// assert_eq!(c.failure_ppm(), 333_000);
    /// let two_of_three = BreakerConfig::builder().failure_rate_threshold(100.0 * 2.0 / 3.0).build().unwrap();
    /// assert_eq!(two_of_three.failure_ppm(), 666_666);
    /// ```
    pub fn failure_ppm(&self) -> u64 {
        ppm(self.failure_rate_threshold)
    }

    /// The slow-call-rate threshold in parts per million; see [`BreakerConfig::failure_ppm`].
    ///
    /// ```
    /// use tripline::BreakerConfig;
    ///
    /// assert_eq!(BreakerConfig::default().slow_ppm(), 1_000_000);
    /// ```
    pub fn slow_ppm(&self) -> u64 {
        ppm(self.slow_call_rate_threshold)
    }
}

fn ppm(percent: f64) -> u64 {
    // Validated to (0, 100].
    crate::rules::ppm_of_percent(percent)
}

pub(crate) fn fmt_d(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn range(field: &'static str, v: u32, lo: u32, hi: u32) -> Result<(), ConfigError> {
    if v < lo || v > hi {
        return Err(ConfigError::new(field, v, format!("in [{lo}, {hi}]")));
    }
    Ok(())
}

fn percent(field: &'static str, v: f64) -> Result<(), ConfigError> {
    if !(v.is_finite() && v > 0.0 && v <= 100.0) {
        return Err(ConfigError::new(field, v, "in (0, 100]"));
    }
    Ok(())
}

fn dur(field: &'static str, v: Duration, lo: Duration, hi: Duration) -> Result<(), ConfigError> {
    if v < lo || v > hi {
        let lo_s = if lo.is_zero() {
            "0".to_string()
        } else {
            fmt_d(lo)
        };
        return Err(ConfigError::new(
            field,
            fmt_d(v),
            format!("between {lo_s} and {}", fmt_d(hi)),
        ));
    }
    Ok(())
}

/// Builds a [`BreakerConfig`]; [`build`](Self::build) validates.
///
/// ```
/// use tripline::{BreakerConfig, HalfOpenPolicy};
/// use std::time::Duration;
///
/// // Martin Fowler's CircuitBreaker: open after 3 consecutive failures, 10 s cooldown, one probe.
/// let fowler = BreakerConfig::builder()
///     .consecutive_failures(3)
///     .open_duration(Duration::from_secs(10))
///     .half_open_calls(1)
///     .half_open_policy(HalfOpenPolicy::Consecutive)
///     .build()?;
/// assert_eq!(fowler.consecutive_failures(), Some(3));
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct BreakerConfigBuilder {
    config: BreakerConfig,
}

macro_rules! setters {
    ($($(#[$m:meta])* $name:ident($field:ident: $ty:ty) => $e:expr;)*) => {
        $( $(#[$m])* pub fn $name(mut self, $field: $ty) -> Self { self.config.$field = $e; self } )*
    };
}

impl BreakerConfigBuilder {
    setters! {
        /// Sets the window shape.
        window(window: WindowConfig) => window;
        /// Calls the window must hold before the rates are evaluated.
        minimum_calls(minimum_calls: u32) => minimum_calls;
        /// Percent of failures that trips, in (0, 100].
        failure_rate_threshold(failure_rate_threshold: f64) => failure_rate_threshold;
        /// Percent of slow calls that trips, in (0, 100].
        slow_call_rate_threshold(slow_call_rate_threshold: f64) => slow_call_rate_threshold;
        /// A call slower than this counts as slow.
        slow_call_duration(slow_call_duration: Duration) => slow_call_duration;
        /// Whether the slow-call rule is on (default). Off, no call is slow, calls in flight
        /// are not counted (`count_in_flight_as_slow` is then moot), and a breaker whose rules
        /// need no time (a count window, no lumping, no ramp, no call durations) reads no clock
        /// on its closed path: it judges by the failure rate (and consecutive failures) alone,
        /// as recloser and gobreaker do.
        ///
        /// ```
        /// use tripline::BreakerConfig;
        /// let c = BreakerConfig::builder().slow_call_rule(false).build()?;
        /// assert!(!c.slow_call_rule());
        /// assert!(!c.needs_time());
        /// assert!(BreakerConfig::default().needs_time());
        /// # Ok::<(), tripline::ConfigError>(())
        /// ```
        slow_call_rule(slow_call_rule: bool) => slow_call_rule;
        /// Whether calls running past the slow-call duration count as slow while in flight.
        count_in_flight_as_slow(count_in_flight_as_slow: bool) => count_in_flight_as_slow;
        /// The base open wait.
        open_duration(open_duration: Duration) => open_duration;
        /// The random extra open wait, uniform in `[0, jitter]`.
        open_jitter(open_jitter: Duration) => open_jitter;
        /// The longest `Retry-After` hint honoured.
        max_retry_after(max_retry_after: Duration) => max_retry_after;
        /// Probes in HalfOpen.
        half_open_calls(half_open_calls: u32) => half_open_calls;
        /// How probes decide.
        half_open_policy(half_open_policy: HalfOpenPolicy) => half_open_policy;
        /// How long a probe holds its slot.
        probe_lease(probe_lease: Duration) => probe_lease;
        /// Whether a timer moves Open to HalfOpen.
        automatic_transition(automatic_transition: bool) => automatic_transition;
        /// Writer stripes (per-thread counters, in-flight cohorts, time-window buckets and a
        /// count window's batches of fast successes), in [1, 64].
        stripes(stripes: u32) => stripes;
    }

    /// A count-based window of the last `size` outcomes.
    pub fn count_window(mut self, size: u32) -> Self {
        self.config.window = WindowConfig::Count { size };
        self
    }

    /// A time-based window of `length`, in buckets of `bucket`.
    pub fn time_window(mut self, length: Duration, bucket: Duration) -> Self {
        self.config.window = WindowConfig::Time { length, bucket };
        self
    }

    /// Trips after `n` consecutive failures.
    pub fn consecutive_failures(mut self, n: u32) -> Self {
        self.config.consecutive_failures = Some(n);
        self
    }

    /// Trips after `failures` failures within `within` (see [`FailureCount`]); `failures` in
    /// [1, 1000], `within` in [1ms, 7 days].
    ///
    /// ```
    /// use tripline::BreakerConfig;
    /// use std::time::Duration;
    /// let err = BreakerConfig::builder().failure_count(0, Duration::from_secs(20)).build();
    /// assert_eq!(err.unwrap_err().to_string(), "failure_count.failures must be in [1, 1000], got 0");
    /// let err = BreakerConfig::builder().failure_count(12, Duration::ZERO).build();
    /// assert_eq!(err.unwrap_err().field(), "failure_count.within");
    /// ```
    pub fn failure_count(mut self, failures: u32, within: Duration) -> Self {
        self.config.failure_count = Some(FailureCount { failures, within });
        self
    }

    /// Grows the open wait on repeated trips.
    pub fn open_backoff(mut self, backoff: Backoff) -> Self {
        self.config.open_backoff = Some(backoff);
        self
    }

    /// HalfOpen without a verdict for `wait` goes back to Open (or on to Closed, see
    /// [`half_open_after_max_wait`](Self::half_open_after_max_wait)).
    pub fn half_open_max_wait(mut self, wait: Duration) -> Self {
        self.config.half_open_max_wait = Some(wait);
        self
    }

    /// Where HalfOpen goes when its maximum wait passes without a verdict (needs
    /// [`half_open_max_wait`](Self::half_open_max_wait)).
    ///
    /// ```
    /// use tripline::{AfterMaxWait, BreakerConfig};
    /// use std::time::Duration;
    /// let c = BreakerConfig::builder()
    ///     .half_open_max_wait(Duration::from_secs(30))
    ///     .half_open_after_max_wait(AfterMaxWait::Closed)
    ///     .build()?;
    /// assert_eq!(c.after_max_wait(), AfterMaxWait::Closed);
    /// let bad = BreakerConfig::builder().half_open_after_max_wait(AfterMaxWait::Closed).build();
    /// assert_eq!(bad.unwrap_err().field(), "half_open.after_max_wait");
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn half_open_after_max_wait(mut self, to: AfterMaxWait) -> Self {
        self.config.after_max_wait = to;
        self
    }

    /// How much a failure of `kind` counts: 0 ignores it, `n` in [1, 10] counts it as `n`
    /// failed calls (see [`FailureKindWeights`]).
    ///
    /// ```
    /// use tripline::{BreakerConfig, FailureKind};
    /// // A 429 asks the caller to slow down; it says nothing about the dependency's health.
    /// let c = BreakerConfig::builder().failure_kind_weight(FailureKind::RateLimited, 0).build()?;
    /// assert_eq!(c.failure_kinds().get(FailureKind::RateLimited), 0);
    /// let err = BreakerConfig::builder().failure_kind_weight(FailureKind::Timeout, 11).build();
    /// assert_eq!(err.unwrap_err().to_string(), "failure_kinds.timeout must be in [0, 10], got 11");
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn failure_kind_weight(mut self, kind: FailureKind, weight: u8) -> Self {
        self.config.failure_kinds = self.config.failure_kinds.with(kind, weight);
        self
    }

    /// Failures within `interval` of the last counted failure count once, as Shopify Semian's
    /// `lumping_interval` does: a bursty client that sees one outage as forty errors in a
    /// second then reports it as one. In [1ms, 1h].
    ///
    /// ```
    /// use tripline::BreakerConfig;
    /// use std::time::Duration;
    /// let c = BreakerConfig::builder().lumping_interval(Duration::from_secs(1)).build()?;
    /// assert_eq!(c.lumping_interval(), Some(Duration::from_secs(1)));
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn lumping_interval(mut self, interval: Duration) -> Self {
        self.config.lumping_interval = Some(interval);
        self
    }

    /// Ramps traffic back up after HalfOpen → Closed (see [`RampUp`]).
    ///
    /// ```
    /// use tripline::{BreakerConfig, RampCurve, RampUp};
    /// use std::time::Duration;
    /// let ramp = RampUp { from: 10.0, over: Duration::from_secs(30), steps: 10, curve: RampCurve::Exponential };
    /// let c = BreakerConfig::builder().ramp_up(ramp).build()?;
    /// assert_eq!(c.ramp_up(), Some(ramp));
    /// let bad = RampUp { from: 0.0, ..ramp };
    /// assert_eq!(
    ///     BreakerConfig::builder().ramp_up(bad).build().unwrap_err().to_string(),
    ///     "ramp_up.from must be a percentage in (0, 100), got 0"
    /// );
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn ramp_up(mut self, ramp: RampUp) -> Self {
        self.config.ramp_up = Some(ramp);
        self
    }

    /// Keep each window call's duration, so the metrics show the window's total and mean call
    /// duration (off by default: it costs a few atomic operations per call).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline::{BreakerConfig, CircuitBreaker, Outcome};
    /// let breaker = CircuitBreaker::new("db", BreakerConfig::builder().call_durations(true).build()?);
    /// let permit = breaker.try_acquire().unwrap();
    /// permit.record_with_duration(Outcome::Success, Duration::from_millis(40));
    /// assert_eq!(breaker.metrics().mean_duration, Some(Duration::from_millis(40)));
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn call_durations(mut self, on: bool) -> Self {
        self.config.call_durations = on;
        self
    }

    /// A fixed Closed interval, as gobreaker's `Interval`: in Closed (and MetricsOnly) the
    /// generation ends `interval` after it began (on the breaker's clock) and a new one begins,
    /// as a [`reset`](crate::CircuitBreaker::reset) would begin it: the window (count or time),
    /// the runs of consecutive outcomes, the failure-count rule's failures and the
    /// [`counts`](crate::CircuitBreaker::counts) are all cleared, and results of calls admitted
    /// before the boundary are stale ([`Recorded::Stale`](crate::Recorded::Stale)). So a rule
    /// sees only the current interval's calls: with a time window longer than the interval,
    /// the window never holds calls from before the interval began; with a shorter one, it
    /// slides within the interval as usual.
    ///
    /// The new generation begins at the first acquire or result at or after the boundary (or
    /// at [`tick`](crate::CircuitBreaker::tick)), whichever comes first, and its interval
    /// runs from then. It is a transition from Closed to Closed, with its event
    /// ([`Reason::IntervalElapsed`](crate::Reason::IntervalElapsed)) and a count in the
    /// metrics' `transitions`; it keeps the time in state, a ramp in progress and the open
    /// backoff's memory of the last close. Without an interval (the default) a Closed
    /// generation lasts until the state changes, as gobreaker's `Interval` of 0 does. In
    /// [1ms, 7 days]; in TOML, `interval = "60s"`. The fleet-wide breaker of
    /// `tripline-redis` does not host it, and refuses a configuration that sets it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline::{BreakerConfig, CircuitBreaker, ManualClock, Outcome, State};
    ///
    /// let config = BreakerConfig::builder()
    ///     .consecutive_failures(3)
    ///     .interval(Duration::from_secs(30))
    ///     .build()?;
    /// let clock = ManualClock::new();
    /// let breaker = CircuitBreaker::with_clock("db", config, clock.clone());
    /// let _ = breaker.call(|| Err::<(), _>("boom"));
    /// let _ = breaker.call(|| Err::<(), _>("boom"));
    /// clock.advance(Duration::from_secs(30)); // a new generation: the run starts over
    /// let _ = breaker.call(|| Err::<(), _>("boom"));
    /// assert_eq!((breaker.state(), breaker.counts().failures), (State::Closed, 1));
    ///
    /// let err = BreakerConfig::builder().interval(Duration::ZERO).build().unwrap_err();
    /// assert_eq!(err.to_string(), "interval must be between 1ms and 7days, got 0s");
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn interval(mut self, interval: Duration) -> Self {
        self.config.interval = Some(interval);
        self
    }

    /// Computes each open wait with `f` instead of `open.duration`, its backoff and jitter, as
    /// Polly's `BreakDurationGenerator` does: `f` gets the open period's [`OpenWaitArgs`]
    /// (opens in a row, the window's failures and rates, the rule that tripped, the
    /// `Retry-After` hint, the configured wait) and returns the wait, which is clamped to
    /// `open.duration`'s bounds, [1ms, 7 days] ([`rules::clamp_open_wait`]). It applies to
    /// every open the rules decide (a trip, failed probes, a half-open maximum wait that goes
    /// to Open, [`trip`](crate::CircuitBreaker::trip)); an operator's explicit wait
    /// ([`transition_to_open_for`](crate::CircuitBreaker::transition_to_open_for)) stays
    /// as given.
    ///
    /// `f` runs with no lock of the breaker's held, on the thread whose call decided the
    /// open, before that call returns: it may call back into the breaker (read its state or
    /// metrics, reset it). The open is decided first and the breaker stays where it was while
    /// `f` runs (calls go on being admitted, no rule moves it meanwhile); then it opens, from
    /// the time of the decision, unless an operator (or `f` itself) moved it meanwhile. A
    /// panic in `f` is caught and counted (the metrics' `open_wait_panics`), and the
    /// configured wait applies.
    ///
    /// A function cannot be written in TOML: a configuration read from TOML has none, and
    /// one written out loses it (set it again with [`BreakerConfig::to_builder`]). The
    /// fleet-wide breaker of `tripline-redis` does not host it, and refuses a configuration
    /// that sets it (the fleet opens for the configured wait).
    ///
    /// [`rules::clamp_open_wait`]: crate::rules::clamp_open_wait
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline::{BreakerConfig, CircuitBreaker, ManualClock, State};
    ///
    /// let config = BreakerConfig::builder()
    ///     .consecutive_failures(1)
    ///     .open_duration_fn(|a| Duration::from_secs(1 << a.attempt))
    ///     .build()?;
    /// let clock = ManualClock::new();
    /// let breaker = CircuitBreaker::with_clock("db", config, clock.clone());
    /// let _ = breaker.call(|| Err::<(), _>("boom"));
    /// assert_eq!(breaker.state(), State::Open);
    /// assert_eq!(breaker.try_acquire().unwrap_err().retry_after(), Some(Duration::from_secs(2)));
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn open_duration_fn(
        mut self,
        f: impl Fn(&OpenWaitArgs) -> Duration + Send + Sync + 'static,
    ) -> Self {
        self.config.open_duration_fn = Some(OpenDurationFn::new(f));
        self
    }

    /// Seeds the jitter generator, for reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = Some(seed);
        self
    }

    /// Validates and returns the configuration.
    pub fn build(self) -> Result<BreakerConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(feature = "serde")]
mod raw {
    //! The serialized form: every field optional, unknown fields rejected.
    //!
    //! A field whose range does not depend on another field is checked as it is read (the
    //! `checked` functions below), so a TOML error for an out-of-range value points at that
    //! field's line rather than at its table; the whole configuration is then validated as
    //! built, for the rules that relate fields (a minimum larger than the window, a backoff
    //! cap below the open wait).
    use super::*;
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize};
    use std::collections::BTreeMap;

    const MS: Duration = Duration::from_millis(1);
    const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);
    const HOUR: Duration = Duration::from_secs(3600);

    /// Reads a `T` and checks it, the error raised where the value is.
    fn check<'de, D, T>(d: D, ok: impl FnOnce(&T) -> Result<(), ConfigError>) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        let v = T::deserialize(d)?;
        ok(&v).map_err(D::Error::custom)?;
        Ok(v)
    }

    /// Reads a human duration (`"250ms"`) and checks it is within `[lo, hi]`.
    fn check_dur<'de, D: Deserializer<'de>>(
        d: D,
        field: &'static str,
        lo: Duration,
        hi: Duration,
    ) -> Result<Duration, D::Error> {
        let v: Duration = crate::duration::serde::deserialize(d)?;
        dur(field, v, lo, hi).map_err(D::Error::custom)?;
        Ok(v)
    }

    /// One checked reader per field: `name(field, type) = check;` reads an `Option`.
    macro_rules! checked {
        ($($name:ident: $t:ty = |$v:ident| $ok:expr;)*) => {$(
            fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<$t>, D::Error> {
                check(d, |$v: &$t| $ok).map(Some)
            }
        )*};
    }

    macro_rules! checked_dur {
        ($($name:ident: $field:literal in [$lo:expr, $hi:expr];)*) => {$(
            fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
                check_dur(d, $field, $lo, $hi).map(Some)
            }
        )*};
    }

    checked! {
        minimum_calls: u32 = |v| range("minimum_calls", *v, 1, 1_000_000);
        failure_rate: f64 = |v| percent("failure_rate_threshold", *v);
        slow_rate: f64 = |v| percent("slow_call_rate_threshold", *v);
        consecutive: u32 = |v| range("consecutive_failures", *v, 1, 1_000_000);
        stripes: u32 = |v| range("stripes", *v, 1, 64);
        permitted_calls: u32 = |v| range("half_open.permitted_calls", *v, 1, 1000);
    }

    checked_dur! {
        slow_call_duration: "slow_call_duration" in [MS, WEEK];
        open_duration: "open.duration" in [MS, WEEK];
        open_jitter: "open.jitter" in [Duration::ZERO, WEEK];
        max_retry_after: "open.max_retry_after" in [Duration::ZERO, WEEK];
        max_wait: "half_open.max_wait" in [MS, WEEK];
        probe_lease: "half_open.probe_lease" in [MS, WEEK];
        lumping: "lumping_interval" in [MS, HOUR];
        interval: "interval" in [MS, WEEK];
    }

    fn window_size<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        check(d, |v| range("window.size", *v, 1, 1_000_000))
    }

    fn window_bucket<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v: Duration = crate::duration::serde::deserialize(d)?;
        if v < MS || v > HOUR {
            return Err(D::Error::custom(ConfigError::new(
                "window.bucket",
                fmt_d(v),
                "between 1ms and 1h",
            )));
        }
        Ok(v)
    }

    fn multiplier<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        check(d, |m: &f64| {
            if m.is_finite() && (1.0..=100.0).contains(m) {
                Ok(())
            } else {
                Err(ConfigError::new(
                    "open.backoff.multiplier",
                    *m,
                    "a number in [1, 100]",
                ))
            }
        })
    }

    fn healthy_after<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        check_dur(d, "open.backoff.healthy_after", Duration::ZERO, WEEK)
    }

    fn ramp_from<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        check(d, |f: &f64| {
            if f.is_finite() && *f > 0.0 && *f < 100.0 {
                Ok(())
            } else {
                Err(ConfigError::new(
                    "ramp_up.from",
                    *f,
                    "a percentage in (0, 100)",
                ))
            }
        })
    }

    fn ramp_over<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        check_dur(d, "ramp_up.over", MS, HOUR)
    }

    fn ramp_steps<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        check(d, |v| range("ramp_up.steps", *v, 1, 1000))
    }

    /// `failure_kinds = { timeout = 2, rate-limited = 0 }`: each weight checked as it is read.
    fn failure_kinds<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<FailureKind, u8>, D::Error> {
        struct Weights;
        struct Weight(FailureKind);
        impl<'de> serde::de::DeserializeSeed<'de> for Weight {
            type Value = u8;
            fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u8, D::Error> {
                let kind = self.0;
                check(d, |w: &u8| {
                    if *w > FailureKindWeights::MAX {
                        Err(ConfigError::new(
                            format!("failure_kinds.{}", kind.as_str().replace('_', "-")),
                            *w,
                            format!("in [0, {}]", FailureKindWeights::MAX),
                        ))
                    } else {
                        Ok(())
                    }
                })
            }
        }
        impl<'de> serde::de::Visitor<'de> for Weights {
            type Value = BTreeMap<FailureKind, u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table of failure kinds and their weights")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(kind) = map.next_key::<FailureKind>()? {
                    let w = map.next_value_seed(Weight(kind))?;
                    out.insert(kind, w);
                }
                Ok(out)
            }
        }
        d.deserialize_map(Weights)
    }

    #[derive(Serialize, Deserialize)]
    #[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
    pub(super) enum RawWindow {
        Count {
            #[serde(deserialize_with = "window_size")]
            size: u32,
        },
        Time {
            #[serde(with = "crate::duration::serde")]
            length: Duration,
            #[serde(
                serialize_with = "crate::duration::serde::serialize",
                deserialize_with = "window_bucket",
                default = "one_second"
            )]
            bucket: Duration,
        },
    }

    fn one_second() -> Duration {
        Duration::from_secs(1)
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawBackoff {
        #[serde(deserialize_with = "multiplier")]
        multiplier: f64,
        #[serde(with = "crate::duration::serde")]
        max: Duration,
        #[serde(
            serialize_with = "crate::duration::serde::serialize",
            deserialize_with = "healthy_after",
            default
        )]
        healthy_after: Duration,
    }

    #[derive(Serialize, Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawOpen {
        #[serde(
            serialize_with = "crate::duration::serde::option::serialize",
            deserialize_with = "open_duration",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        duration: Option<Duration>,
        #[serde(
            serialize_with = "crate::duration::serde::option::serialize",
            deserialize_with = "open_jitter",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        jitter: Option<Duration>,
        #[serde(
            serialize_with = "crate::duration::serde::option::serialize",
            deserialize_with = "max_retry_after",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        max_retry_after: Option<Duration>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backoff: Option<RawBackoff>,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawRampUp {
        #[serde(deserialize_with = "ramp_from")]
        from: f64,
        #[serde(
            serialize_with = "crate::duration::serde::serialize",
            deserialize_with = "ramp_over"
        )]
        over: Duration,
        #[serde(deserialize_with = "ramp_steps", default = "ten")]
        steps: u32,
        #[serde(default = "linear")]
        curve: RampCurve,
    }

    /// `failure_count = { failures = 12, within = "20s" }`.
    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawFailureCount {
        #[serde(deserialize_with = "counted_failures")]
        failures: u32,
        #[serde(
            serialize_with = "crate::duration::serde::serialize",
            deserialize_with = "counted_within"
        )]
        within: Duration,
    }

    fn counted_failures<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
        check(d, |v| {
            range("failure_count.failures", *v, 1, FailureCount::MAX)
        })
    }

    fn counted_within<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        check_dur(d, "failure_count.within", MS, WEEK)
    }

    fn ten() -> u32 {
        10
    }

    fn linear() -> RampCurve {
        RampCurve::Linear
    }

    #[derive(Serialize, Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawHalfOpen {
        #[serde(
            deserialize_with = "permitted_calls",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        permitted_calls: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy: Option<HalfOpenPolicy>,
        #[serde(
            serialize_with = "crate::duration::serde::option::serialize",
            deserialize_with = "max_wait",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        max_wait: Option<Duration>,
        #[serde(
            serialize_with = "crate::duration::serde::option::serialize",
            deserialize_with = "probe_lease",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        probe_lease: Option<Duration>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        automatic_transition: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_max_wait: Option<AfterMaxWait>,
    }

    #[derive(Serialize, Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    pub(crate) struct RawConfig {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<RawWindow>,
        #[serde(
            deserialize_with = "minimum_calls",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        minimum_calls: Option<u32>,
        #[serde(
            deserialize_with = "failure_rate",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        failure_rate_threshold: Option<f64>,
        #[serde(
            deserialize_with = "slow_rate",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        slow_call_rate_threshold: Option<f64>,
        #[serde(
            serialize_with = "crate::duration::serde::option::serialize",
            deserialize_with = "slow_call_duration",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        slow_call_duration: Option<Duration>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slow_call_rule: Option<bool>,
        #[serde(
            deserialize_with = "consecutive",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        consecutive_failures: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure_count: Option<RawFailureCount>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count_in_flight_as_slow: Option<bool>,
        #[serde(
            deserialize_with = "stripes",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        stripes: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seed: Option<u64>,
        #[serde(
            deserialize_with = "failure_kinds",
            default,
            skip_serializing_if = "BTreeMap::is_empty"
        )]
        failure_kinds: BTreeMap<FailureKind, u8>,
        #[serde(
            serialize_with = "crate::duration::serde::option::serialize",
            deserialize_with = "lumping",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        lumping_interval: Option<Duration>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_durations: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ramp_up: Option<RawRampUp>,
        #[serde(
            serialize_with = "crate::duration::serde::option::serialize",
            deserialize_with = "interval",
            default,
            skip_serializing_if = "Option::is_none"
        )]
        interval: Option<Duration>,
        #[serde(default)]
        open: RawOpen,
        #[serde(default)]
        half_open: RawHalfOpen,
    }

    impl TryFrom<RawConfig> for BreakerConfig {
        type Error = ConfigError;
        fn try_from(r: RawConfig) -> Result<Self, ConfigError> {
            let d = BreakerConfig::default();
            let c = BreakerConfig {
                window: match r.window {
                    None => d.window,
                    Some(RawWindow::Count { size }) => WindowConfig::Count { size },
                    Some(RawWindow::Time { length, bucket }) => {
                        WindowConfig::Time { length, bucket }
                    }
                },
                minimum_calls: r.minimum_calls.unwrap_or(d.minimum_calls),
                failure_rate_threshold: r
                    .failure_rate_threshold
                    .unwrap_or(d.failure_rate_threshold),
                slow_call_rate_threshold: r
                    .slow_call_rate_threshold
                    .unwrap_or(d.slow_call_rate_threshold),
                slow_call_duration: r.slow_call_duration.unwrap_or(d.slow_call_duration),
                slow_call_rule: r.slow_call_rule.unwrap_or(d.slow_call_rule),
                consecutive_failures: r.consecutive_failures,
                failure_count: r.failure_count.map(|f| FailureCount {
                    failures: f.failures,
                    within: f.within,
                }),
                count_in_flight_as_slow: r
                    .count_in_flight_as_slow
                    .unwrap_or(d.count_in_flight_as_slow),
                open_duration: r.open.duration.unwrap_or(d.open_duration),
                open_jitter: r.open.jitter.unwrap_or(d.open_jitter),
                open_backoff: r.open.backoff.map(|b| Backoff {
                    multiplier: b.multiplier,
                    max: b.max,
                    healthy_after: b.healthy_after,
                }),
                max_retry_after: r.open.max_retry_after.unwrap_or(d.max_retry_after),
                half_open_calls: r.half_open.permitted_calls.unwrap_or(d.half_open_calls),
                half_open_policy: r.half_open.policy.unwrap_or(d.half_open_policy),
                half_open_max_wait: r.half_open.max_wait,
                after_max_wait: r.half_open.after_max_wait.unwrap_or(d.after_max_wait),
                probe_lease: r.half_open.probe_lease.unwrap_or(d.probe_lease),
                automatic_transition: r
                    .half_open
                    .automatic_transition
                    .unwrap_or(d.automatic_transition),
                stripes: r.stripes.unwrap_or(d.stripes),
                seed: r.seed,
                failure_kinds: r
                    .failure_kinds
                    .iter()
                    .fold(d.failure_kinds, |w, (k, v)| w.with(*k, *v)),
                lumping_interval: r.lumping_interval,
                call_durations: r.call_durations.unwrap_or(d.call_durations),
                ramp_up: r.ramp_up.map(|u| RampUp {
                    from: u.from,
                    over: u.over,
                    steps: u.steps,
                    curve: u.curve,
                }),
                interval: r.interval,
                // A function has no serialized form.
                open_duration_fn: None,
            };
            c.validate()?;
            Ok(c)
        }
    }

    impl From<BreakerConfig> for RawConfig {
        fn from(c: BreakerConfig) -> Self {
            RawConfig {
                window: Some(match c.window {
                    WindowConfig::Count { size } => RawWindow::Count { size },
                    WindowConfig::Time { length, bucket } => RawWindow::Time { length, bucket },
                }),
                minimum_calls: Some(c.minimum_calls),
                failure_rate_threshold: Some(c.failure_rate_threshold),
                slow_call_rate_threshold: Some(c.slow_call_rate_threshold),
                slow_call_duration: Some(c.slow_call_duration),
                slow_call_rule: Some(c.slow_call_rule),
                consecutive_failures: c.consecutive_failures,
                failure_count: c.failure_count.map(|f| RawFailureCount {
                    failures: f.failures,
                    within: f.within,
                }),
                count_in_flight_as_slow: Some(c.count_in_flight_as_slow),
                stripes: Some(c.stripes),
                seed: c.seed,
                failure_kinds: FailureKind::ALL
                    .into_iter()
                    .filter(|k| c.failure_kinds.get(*k) != 1)
                    .map(|k| (k, c.failure_kinds.get(k)))
                    .collect(),
                lumping_interval: c.lumping_interval,
                call_durations: Some(c.call_durations),
                ramp_up: c.ramp_up.map(|u| RawRampUp {
                    from: u.from,
                    over: u.over,
                    steps: u.steps,
                    curve: u.curve,
                }),
                interval: c.interval,
                open: RawOpen {
                    duration: Some(c.open_duration),
                    jitter: Some(c.open_jitter),
                    max_retry_after: Some(c.max_retry_after),
                    backoff: c.open_backoff.map(|b| RawBackoff {
                        multiplier: b.multiplier,
                        max: b.max,
                        healthy_after: b.healthy_after,
                    }),
                },
                half_open: RawHalfOpen {
                    permitted_calls: Some(c.half_open_calls),
                    policy: Some(c.half_open_policy),
                    max_wait: c.half_open_max_wait,
                    probe_lease: Some(c.probe_lease),
                    automatic_transition: Some(c.automatic_transition),
                    after_max_wait: Some(c.after_max_wait),
                },
            }
        }
    }
}
