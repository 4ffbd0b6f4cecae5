//! The sections of the policies that answer the binary breaker's weaknesses, and request
//! priorities.
//!
//! A breaker is modal: it sends everything or almost nothing. `tripline-policies` has four
//! answers, each a section of a protected variant, each the configuration of the real type
//! under its own field names, checked by that type's own builder:
//!
//! | section | the real type | what it does in a run |
//! |---|---|---|
//! | `[protection.limiter]` | [`Limiter`](tripline_policies::limiter::Limiter) ([`LimiterConfig`]) | a concurrency limit per replica that follows the calls' round-trip times on virtual time (Vegas, Gradient2, AIMD, or fixed), an optional queue served highest priority first |
//! | `[protection.shed]` | [`Shedder`](tripline_policies::shed::Shedder) ([`ShedConfig`]) | slots shared out by the request's priority: in front of the dependency (`at = "client"`), or at the tier's own worker pool (`at = "workers"`) |
//! | `[protection.partial]` | [`PartialBreaker`](tripline_policies::partial::PartialBreaker) ([`PartialConfig`]) | Shopify Semian's adaptive breaker per replica: a share of calls refused in proportion to the excess error rate |
//! | `[protection.chaos]` | [`Chaos`](tripline_policies::chaos::Chaos) ([`ChaosConfig`]) | injected latency, errors or hangs for a share of the calls, switched on and off at given times (a game day) |
//!
//! and the breaker's own `ramp_up` (gradual recovery, [`tripline::RampUp`]) in
//! `[protection.breaker]`. Each endpoint has a [`Priority`] (`priority = "critical"`,
//! `"default"`, `"sheddable"` or a number in [0, 255]), which every request to it carries to
//! the shedder and the limiter, at every tier.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use tripline::ConfigError;
use tripline_policies::chaos::{ChaosConfig, Fault, FaultRule};
use tripline_policies::limiter::{
    AimdConfig, FixedLimit, Gradient2Config, LimitAlgorithm, LimiterConfig, VegasConfig,
};
use tripline_policies::partial::PartialConfig;
use tripline_policies::shed::{Priority, Shares, ShedConfig};

use crate::dist::fmt_d;
use crate::protection::Bad;

/// How much a request matters when capacity is short: an endpoint's `priority`, carried by
/// every request to it (and its calls to the tiers below) to the shedder and the limiter.
/// Written `"critical"`, `"default"`, `"sheddable"` or a number in [0, 255] (default
/// `"default"`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct EndpointPriority(pub Priority);

const PRIORITY_ALLOWED: &str = "\"critical\", \"default\", \"sheddable\" or a number in [0, 255]";

impl<'de> Deserialize<'de> for EndpointPriority {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = EndpointPriority;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(PRIORITY_ALLOWED)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<EndpointPriority, E> {
                u8::try_from(v)
                    .map(|n| EndpointPriority(Priority::new(n)))
                    .map_err(|_| E::custom(format!("must be {PRIORITY_ALLOWED}, got {v}")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<EndpointPriority, E> {
                u8::try_from(v)
                    .map(|n| EndpointPriority(Priority::new(n)))
                    .map_err(|_| E::custom(format!("must be {PRIORITY_ALLOWED}, got {v}")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<EndpointPriority, E> {
                Err(E::custom(format!("must be {PRIORITY_ALLOWED}, got {v}")))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<EndpointPriority, E> {
                match s {
                    "critical" | "default" | "sheddable" => s
                        .parse::<Priority>()
                        .map(EndpointPriority)
                        .map_err(|e| E::custom(e.to_string())),
                    _ => Err(E::custom(format!("must be {PRIORITY_ALLOWED}, got {s:?}"))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for EndpointPriority {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// `shares = { critical = 100, default = 90, sheddable = 50 }`: the percentages of the slots
/// each priority may fill ([`Shares`]; unset ones keep its defaults).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SharesSection {
    /// Critical calls' share, in (0, 100] (default 100).
    #[serde(default)]
    pub critical: Option<f64>,
    /// Default calls' share, in (0, critical] (default 90).
    #[serde(default)]
    pub default: Option<f64>,
    /// Sheddable calls' share, in (0, default] (default 50).
    #[serde(default)]
    pub sheddable: Option<f64>,
}

impl SharesSection {
    fn shares(&self) -> Result<Shares, ConfigError> {
        let d = Shares::default();
        Shares::new(
            self.critical.unwrap_or(d.critical()),
            self.default.unwrap_or(d.default_share()),
            self.sheddable.unwrap_or(d.sheddable()),
        )
    }
}

/// Where a shedder sits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShedAt {
    /// In the client, in front of the tier below (the pipeline's place: after the bulkhead,
    /// before the limiter): a call of a priority over its share is refused, never retried.
    #[default]
    Client,
    /// At the tier's own worker pool: a request takes a worker only within its priority's
    /// share of the workers, and is shed otherwise (a full pool queues only the priorities
    /// that may use every worker).
    Workers,
}

/// `[protection.shed]`: [`ShedConfig`]'s fields, and where the shedder sits.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShedSection {
    /// `"client"` (default) or `"workers"`.
    #[serde(default)]
    pub at: ShedAt,
    /// Slots (default 25); at the workers, the pool's workers (not set).
    #[serde(default)]
    pub capacity: Option<u32>,
    /// The shares by priority.
    #[serde(default)]
    pub shares: Option<SharesSection>,
    /// Calls allowed to wait for a slot, highest priority first (default 0; not at the
    /// workers, whose queue is the replica's own).
    #[serde(default)]
    pub max_waiting: Option<u32>,
    /// How long a call may wait.
    #[serde(default, with = "tripline::duration::serde::option")]
    pub max_wait: Option<Duration>,
}

/// A resolved shedder: where, and its configuration.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ShedSpec {
    pub(crate) at: ShedAt,
    pub(crate) config: ShedConfig,
}

impl ShedSection {
    /// The shedder of a tier whose replicas have `workers` workers, checked; errors name
    /// fields below `prefix` (`protection[0].shed.`).
    pub(crate) fn resolve(&self, workers: u32, prefix: &str) -> Result<ShedSpec, Bad> {
        let mut b = ShedConfig::builder();
        if self.at == ShedAt::Workers {
            for (field, v) in [
                ("capacity", self.capacity.map(|c| c.to_string())),
                ("max_waiting", self.max_waiting.map(|c| c.to_string())),
                ("max_wait", self.max_wait.map(fmt_d)),
            ] {
                if let Some(v) = v {
                    return Err((
                        format!("{prefix}{field}"),
                        v,
                        "must not be set with at = \"workers\" (the shedder's slots are the pool's workers, its queue the replica's own)".into(),
                    ));
                }
            }
            b = b.capacity(workers);
        }
        if let Some(c) = self.capacity {
            b = b.capacity(c);
        }
        if let Some(s) = &self.shares {
            b = b.shares(s.shares().map_err(|e| config_bad(prefix, &e))?);
        }
        if let Some(n) = self.max_waiting {
            b = b.max_waiting(n);
        }
        if let Some(d) = self.max_wait {
            b = b.max_wait(d);
        }
        let config = b.build().map_err(|e| config_bad(prefix, &e))?;
        Ok(ShedSpec {
            at: self.at,
            config,
        })
    }
}

/// A config error's field below `prefix`.
pub(crate) fn config_bad(prefix: &str, e: &ConfigError) -> Bad {
    (
        format!("{prefix}{}", e.field()),
        e.value().to_string(),
        format!("must be {}", e.allowed()),
    )
}

/// Which of concurrency-limits' algorithms a limiter runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AlgorithmKind {
    /// A limit that never moves (`limit`): a bulkhead with priorities and a priority queue.
    Fixed,
    /// Additive increase, multiplicative decrease on drops.
    Aimd,
    /// TCP Vegas: the queue at the dependency estimated from the lowest RTT (the default).
    #[default]
    Vegas,
    /// The gradient between a long-term average RTT and the current one.
    Gradient2,
}

impl AlgorithmKind {
    /// The kind as the file writes it.
    pub fn name(self) -> &'static str {
        match self {
            AlgorithmKind::Fixed => "fixed",
            AlgorithmKind::Aimd => "aimd",
            AlgorithmKind::Vegas => "vegas",
            AlgorithmKind::Gradient2 => "gradient2",
        }
    }

    fn fields(self) -> &'static [&'static str] {
        match self {
            AlgorithmKind::Fixed => &["limit"],
            AlgorithmKind::Aimd => &[
                "initial_limit",
                "min_limit",
                "max_limit",
                "backoff_ratio",
                "timeout",
            ],
            AlgorithmKind::Vegas => &[
                "initial_limit",
                "min_limit",
                "max_limit",
                "alpha",
                "beta",
                "smoothing",
                "probe_multiplier",
            ],
            AlgorithmKind::Gradient2 => &[
                "initial_limit",
                "min_limit",
                "max_limit",
                "smoothing",
                "queue_size",
                "long_window",
                "rtt_tolerance",
            ],
        }
    }
}

/// `algorithm = { kind = "gradient2", ... }`: one of concurrency-limits' algorithms with its
/// settings ([`LimitAlgorithm`]); unset fields keep the algorithm's defaults, and a field of
/// another kind is an error.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlgorithmSection {
    /// `"fixed"`, `"aimd"`, `"vegas"` (default) or `"gradient2"`.
    #[serde(default)]
    pub kind: AlgorithmKind,
    /// `fixed`: the limit, in [1, 1000000] (required).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The limit before any sample (default 20, within the bounds).
    #[serde(default)]
    pub initial_limit: Option<u32>,
    /// The lowest limit (Vegas 1, AIMD and Gradient2 20).
    #[serde(default)]
    pub min_limit: Option<u32>,
    /// The highest limit (Vegas 1000, AIMD and Gradient2 200).
    #[serde(default)]
    pub max_limit: Option<u32>,
    /// `aimd`: the factor a drop multiplies the limit by, in [0.5, 1) (default 0.9).
    #[serde(default)]
    pub backoff_ratio: Option<f64>,
    /// `aimd`: a sample slower than this is a drop (default 5 s).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub timeout: Option<Duration>,
    /// `vegas`: the queue below which the limit grows, × log10(limit) (default 3).
    #[serde(default)]
    pub alpha: Option<u32>,
    /// `vegas`: the queue above which it shrinks, × log10(limit) (default 6).
    #[serde(default)]
    pub beta: Option<u32>,
    /// `vegas` (default 1) and `gradient2` (default 0.2): how much of each new estimate is
    /// taken, in (0, 1].
    #[serde(default)]
    pub smoothing: Option<f64>,
    /// `vegas`: samples between resets of the no-load RTT, × the limit (default 30).
    #[serde(default)]
    pub probe_multiplier: Option<u32>,
    /// `gradient2`: how much the limit may grow per sample (default 4).
    #[serde(default)]
    pub queue_size: Option<u32>,
    /// `gradient2`: samples in the long-term RTT average (default 600).
    #[serde(default)]
    pub long_window: Option<u32>,
    /// `gradient2`: how much latency may grow before the limit shrinks, in [1, 100] (default
    /// 1.5).
    #[serde(default)]
    pub rtt_tolerance: Option<f64>,
}

/// The default initial limit clamped into the bounds, as `tripline-policies`' TOML reader does,
/// so that setting only a bound never makes the default initial limit invalid.
fn initial(initial: Option<u32>, default: u32, min: u32, max: u32) -> u32 {
    initial.unwrap_or(default.clamp(min.min(max), max))
}

impl AlgorithmSection {
    /// The first field set that belongs to another kind: `(field, value)`.
    fn stray_field(&self) -> Option<(&'static str, String)> {
        let set: [(&'static str, Option<String>); 13] = [
            ("limit", self.limit.map(|v| v.to_string())),
            ("initial_limit", self.initial_limit.map(|v| v.to_string())),
            ("min_limit", self.min_limit.map(|v| v.to_string())),
            ("max_limit", self.max_limit.map(|v| v.to_string())),
            ("backoff_ratio", self.backoff_ratio.map(|v| v.to_string())),
            ("timeout", self.timeout.map(fmt_d)),
            ("alpha", self.alpha.map(|v| v.to_string())),
            ("beta", self.beta.map(|v| v.to_string())),
            ("smoothing", self.smoothing.map(|v| v.to_string())),
            (
                "probe_multiplier",
                self.probe_multiplier.map(|v| v.to_string()),
            ),
            ("queue_size", self.queue_size.map(|v| v.to_string())),
            ("long_window", self.long_window.map(|v| v.to_string())),
            ("rtt_tolerance", self.rtt_tolerance.map(|v| v.to_string())),
        ];
        set.into_iter()
            .find(|(f, v)| v.is_some() && !self.kind.fields().contains(f))
            .and_then(|(f, v)| Some((f, v?)))
    }

    /// The real algorithm, checked by its builder.
    fn algorithm(&self, prefix: &str) -> Result<LimitAlgorithm, Bad> {
        if let Some((field, value)) = self.stray_field() {
            return Err((
                format!("{prefix}{field}"),
                value,
                format!(
                    "must not be set for kind = \"{}\" (its fields: {})",
                    self.kind.name(),
                    self.kind.fields().join(", ")
                ),
            ));
        }
        let bad = |e: ConfigError| config_bad(prefix, &e);
        Ok(match self.kind {
            AlgorithmKind::Fixed => {
                let Some(limit) = self.limit else {
                    return Err((
                        format!("{prefix}limit"),
                        "nothing".into(),
                        "must be set for kind = \"fixed\" (the limit, in [1, 1000000])".into(),
                    ));
                };
                LimitAlgorithm::Fixed(FixedLimit::new(limit).map_err(bad)?)
            }
            AlgorithmKind::Aimd => {
                let d = AimdConfig::default();
                let (min, max) = (
                    self.min_limit.unwrap_or(d.min_limit()),
                    self.max_limit.unwrap_or(d.max_limit()),
                );
                LimitAlgorithm::Aimd(
                    AimdConfig::builder()
                        .min_limit(min)
                        .max_limit(max)
                        .initial_limit(initial(self.initial_limit, d.initial_limit(), min, max))
                        .backoff_ratio(self.backoff_ratio.unwrap_or(d.backoff_ratio()))
                        .timeout(self.timeout.unwrap_or(d.timeout()))
                        .build()
                        .map_err(bad)?,
                )
            }
            AlgorithmKind::Vegas => {
                let d = VegasConfig::default();
                let (min, max) = (
                    self.min_limit.unwrap_or(d.min_limit()),
                    self.max_limit.unwrap_or(d.max_limit()),
                );
                LimitAlgorithm::Vegas(
                    VegasConfig::builder()
                        .min_limit(min)
                        .max_limit(max)
                        .initial_limit(initial(self.initial_limit, d.initial_limit(), min, max))
                        .alpha(self.alpha.unwrap_or(d.alpha()))
                        .beta(self.beta.unwrap_or(d.beta()))
                        .smoothing(self.smoothing.unwrap_or(d.smoothing()))
                        .probe_multiplier(self.probe_multiplier.unwrap_or(d.probe_multiplier()))
                        .build()
                        .map_err(bad)?,
                )
            }
            AlgorithmKind::Gradient2 => {
                let d = Gradient2Config::default();
                let (min, max) = (
                    self.min_limit.unwrap_or(d.min_limit()),
                    self.max_limit.unwrap_or(d.max_limit()),
                );
                LimitAlgorithm::Gradient2(
                    Gradient2Config::builder()
                        .min_limit(min)
                        .max_limit(max)
                        .initial_limit(initial(self.initial_limit, d.initial_limit(), min, max))
                        .smoothing(self.smoothing.unwrap_or(d.smoothing()))
                        .queue_size(self.queue_size.unwrap_or(d.queue_size()))
                        .long_window(self.long_window.unwrap_or(d.long_window()))
                        .rtt_tolerance(self.rtt_tolerance.unwrap_or(d.rtt_tolerance()))
                        .build()
                        .map_err(bad)?,
                )
            }
        })
    }
}

/// `[protection.limiter]`: [`LimiterConfig`]'s fields (the algorithm, the shares by priority,
/// the queue); unset ones keep its defaults (Vegas, no shares, no queue).
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimiterSection {
    /// The algorithm and its settings (default Vegas with concurrency-limits' defaults).
    #[serde(default)]
    pub algorithm: Option<AlgorithmSection>,
    /// Shares of the limit by priority (default: none, every priority may use all of it).
    #[serde(default)]
    pub shares: Option<SharesSection>,
    /// Calls allowed to wait for a slot, highest priority first (default 0: refused at once).
    #[serde(default)]
    pub max_waiting: Option<u32>,
    /// How long a call may wait (holding its worker).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub max_wait: Option<Duration>,
}

impl LimiterSection {
    /// The configuration, checked; errors name fields below `prefix` (`protection[0].limiter.`).
    pub(crate) fn config(&self, prefix: &str) -> Result<LimiterConfig, Bad> {
        let mut b = LimiterConfig::builder();
        if let Some(a) = &self.algorithm {
            b = b.algorithm(a.algorithm(&format!("{prefix}algorithm."))?);
        }
        if let Some(s) = &self.shares {
            b = b.shares(s.shares().map_err(|e| config_bad(prefix, &e))?);
        }
        if let Some(n) = self.max_waiting {
            b = b.max_waiting(n);
        }
        if let Some(d) = self.max_wait {
            b = b.max_wait(d);
        }
        b.build().map_err(|e| config_bad(prefix, &e))
    }
}

/// The same limiter with the seed of its draws (Vegas's probe jitter).
pub(crate) fn seeded_limiter(c: &LimiterConfig, seed: u64) -> LimiterConfig {
    let mut b = LimiterConfig::builder()
        .algorithm(c.algorithm())
        .max_waiting(c.max_waiting())
        .max_wait(c.max_wait())
        .seed(seed);
    if let Some(s) = c.shares() {
        b = b.shares(s);
    }
    b.build().unwrap_or(*c)
}

/// `[protection.partial]`: [`PartialConfig`]'s fields, Semian's defaults for those unset.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartialSection {
    /// The proportional gain (default 1).
    #[serde(default)]
    pub kp: Option<f64>,
    /// The integral gain (default 0.2).
    #[serde(default)]
    pub ki: Option<f64>,
    /// The derivative gain (default 0).
    #[serde(default)]
    pub kd: Option<f64>,
    /// The integral's upper bound (default 10).
    #[serde(default)]
    pub integral_upper_cap: Option<f64>,
    /// The integral's lower bound (default −10).
    #[serde(default)]
    pub integral_lower_cap: Option<f64>,
    /// The window the error rate is measured over (default 10 s).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub window: Option<Duration>,
    /// How often the controller updates (default 1 s).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub interval: Option<Duration>,
    /// The dead zone above the ideal error rate, as a share of it (default 0.25).
    #[serde(default)]
    pub dead_zone_ratio: Option<f64>,
    /// The first guess of the ideal error rate (default 0.05).
    #[serde(default)]
    pub initial_error_rate: Option<f64>,
    /// Observations above this never teach the ideal rate (default 0.1).
    #[serde(default)]
    pub ideal_error_rate_cap: Option<f64>,
}

impl PartialSection {
    /// The configuration, checked; errors name fields below `prefix`.
    pub(crate) fn config(&self, prefix: &str) -> Result<PartialConfig, Bad> {
        let d = PartialConfig::default();
        PartialConfig::builder()
            .kp(self.kp.unwrap_or(d.kp()))
            .ki(self.ki.unwrap_or(d.ki()))
            .kd(self.kd.unwrap_or(d.kd()))
            .integral_upper_cap(self.integral_upper_cap.unwrap_or(d.integral_upper_cap()))
            .integral_lower_cap(self.integral_lower_cap.unwrap_or(d.integral_lower_cap()))
            .window(self.window.unwrap_or(d.window()))
            .interval(self.interval.unwrap_or(d.interval()))
            .dead_zone_ratio(self.dead_zone_ratio.unwrap_or(d.dead_zone_ratio()))
            .initial_error_rate(self.initial_error_rate.unwrap_or(d.initial_error_rate()))
            .ideal_error_rate_cap(
                self.ideal_error_rate_cap
                    .unwrap_or(d.ideal_error_rate_cap()),
            )
            .build()
            .map_err(|e| config_bad(prefix, &e))
    }
}

/// Which fault a chaos rule injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// An extra `delay` before the call.
    Latency,
    /// The call is not made and fails at once.
    Error,
    /// The call is not made and never answers: only the timeout ends it.
    Hang,
}

/// One rule: `{ fault = "latency", rate = 0.2, delay = "5s" }`, `{ fault = "error", rate =
/// 0.05 }`, `{ fault = "hang", rate = 0.01 }` ([`FaultRule`]).
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSection {
    /// `"latency"`, `"error"` or `"hang"`.
    pub fault: FaultKind,
    /// The share of calls it hits, in [0, 1].
    pub rate: f64,
    /// `latency` only: the extra delay, in (0, 1 day].
    #[serde(default, with = "tripline::duration::serde::option")]
    pub delay: Option<Duration>,
}

/// `[protection.chaos]`: the fault injector's rules ([`ChaosConfig`]), and when the game day
/// switches it on and off ([`Chaos::enable`](tripline_policies::chaos::Chaos::enable) and
/// `disable` on virtual time).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChaosSection {
    /// Switched on at (default: from the start).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub from: Option<Duration>,
    /// Switched off at (default: never).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub until: Option<Duration>,
    /// The rules, tried in order; a call gets at most one fault (at most 64 rules).
    #[serde(default)]
    pub rules: Vec<RuleSection>,
}

/// A resolved fault injector: its rules and its window in virtual time.
#[derive(Clone, Debug)]
pub(crate) struct ChaosSpec {
    pub(crate) config: ChaosConfig,
    pub(crate) from: Duration,
    pub(crate) until: Option<Duration>,
}

impl ChaosSpec {
    /// The longest injected latency.
    pub(crate) fn longest_delay(&self) -> Duration {
        self.config
            .rules()
            .iter()
            .filter_map(|r| match r.fault() {
                Fault::Latency(d) => Some(d),
                _ => None,
            })
            .max()
            .unwrap_or_default()
    }
}

impl ChaosSection {
    /// The injector, checked; errors name fields below `prefix` (`protection[0].chaos.`).
    /// `timeout` is the tier's per-attempt timeout: a hang needs one.
    pub(crate) fn resolve(
        &self,
        prefix: &str,
        timeout: Option<Duration>,
    ) -> Result<ChaosSpec, Bad> {
        let limit = Duration::from_secs(14 * 24 * 3600);
        for (field, v) in [("from", self.from), ("until", self.until)] {
            if let Some(v) = v {
                if v > limit {
                    return Err((
                        format!("{prefix}{field}"),
                        fmt_d(v),
                        "must be at most 14 days".into(),
                    ));
                }
            }
        }
        let from = self.from.unwrap_or_default();
        if let Some(until) = self.until {
            if until <= from {
                return Err((
                    format!("{prefix}until"),
                    fmt_d(until),
                    format!("must be after `from` ({})", fmt_d(from)),
                ));
            }
        }
        let mut b = ChaosConfig::builder();
        for (i, r) in self.rules.iter().enumerate() {
            let at = format!("{prefix}rules[{i}].");
            let fault = match (r.fault, r.delay) {
                (FaultKind::Latency, Some(d)) => Fault::Latency(d),
                (FaultKind::Latency, None) => {
                    return Err((
                        format!("{at}delay"),
                        "nothing".into(),
                        "must be set for fault = \"latency\" (the extra delay, in (0, 1 day])"
                            .into(),
                    ));
                }
                (kind, Some(d)) => {
                    return Err((
                        format!("{at}delay"),
                        fmt_d(d),
                        format!(
                            "must not be set for fault = \"{}\" (only a latency has a delay)",
                            if kind == FaultKind::Error {
                                "error"
                            } else {
                                "hang"
                            }
                        ),
                    ));
                }
                (FaultKind::Error, None) => Fault::Error,
                (FaultKind::Hang, None) => Fault::Hang,
            };
            let rule = FaultRule::new(fault, r.rate).map_err(|e| config_bad(&at, &e))?;
            if fault == Fault::Hang && r.rate > 0.0 && timeout.is_none() {
                return Err((
                    format!("{at}fault"),
                    "\"hang\"".into(),
                    "must be \"latency\" or \"error\" without a timeout at this tier (a hung call ends only at its timeout: set the variant's timeout or the client's)".into(),
                ));
            }
            b = b.rule(rule);
        }
        let config = b
            .enabled(false)
            .build()
            .map_err(|e| config_bad(prefix, &e))?;
        Ok(ChaosSpec {
            config,
            from,
            until: self.until,
        })
    }
}
