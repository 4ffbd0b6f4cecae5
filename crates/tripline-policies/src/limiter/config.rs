//! The limiter's settings.

use std::time::Duration;

use tripline::ConfigError;

use super::LimitAlgorithm;
use crate::shed::Shares;

/// The settings of a [`Limiter`](super::Limiter).
///
/// | field | default | why |
/// |---|---|---|
/// | `algorithm` | Vegas, with concurrency-limits' defaults | the library's default limit |
/// | `shares` | none: every priority may use the whole limit | shedding is opt-in; with [`Shares`] the limit is shared out by priority |
/// | `max_waiting` | 0 | no queue: a call over the limit is refused at once, which is what keeps latency low |
/// | `max_wait` | 0 | how long a queued call waits, in `(0, 1h]` when `max_waiting > 0` |
/// | `seed` | random | the seed of Vegas's probe jitter, for reproducible runs |
///
/// In TOML (feature `serde`):
///
/// ```toml
/// [algorithm]
/// kind = "gradient2"     # "fixed" (with limit), "aimd", "vegas", "gradient2"
/// min_limit = 10
/// max_limit = 400
///
/// [shares]               # optional: priority shedding
/// sheddable = 40
///
/// max_waiting = 100
/// max_wait = "50ms"
/// ```
///
/// ```
/// use tripline_policies::limiter::{LimitAlgorithm, LimiterConfig, VegasConfig};
///
/// let c = LimiterConfig::builder()
///     .algorithm(LimitAlgorithm::Vegas(VegasConfig::builder().max_limit(500).build()?))
///     .build()?;
/// assert_eq!(c.algorithm().max_limit(), 500);
/// let err = LimiterConfig::builder().max_waiting(10).build().unwrap_err();
/// assert_eq!(err.to_string(), "max_wait must be in (0ns, 3600s] when max_waiting > 0, got 0ns");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(try_from = "raw::RawLimiterConfig")
)]
pub struct LimiterConfig {
    algorithm: LimitAlgorithm,
    shares: Option<Shares>,
    max_waiting: u32,
    max_wait: Duration,
    seed: Option<u64>,
}

impl LimiterConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> LimiterConfigBuilder {
        LimiterConfigBuilder(Self::default())
    }

    /// The algorithm.
    pub fn algorithm(&self) -> LimitAlgorithm {
        self.algorithm
    }

    /// The shares by priority, if shedding is on.
    pub fn shares(&self) -> Option<Shares> {
        self.shares
    }

    /// Calls allowed to wait.
    pub fn max_waiting(&self) -> u32 {
        self.max_waiting
    }

    /// How long a call may wait.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// The seed of the algorithm's random draws, if set.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }
}

/// Builds a [`LimiterConfig`], checking every value.
#[derive(Clone, Copy, Debug)]
pub struct LimiterConfigBuilder(LimiterConfig);

impl LimiterConfigBuilder {
    /// The algorithm (each checked when it was built). Default Vegas.
    pub fn algorithm(mut self, algorithm: LimitAlgorithm) -> Self {
        self.0.algorithm = algorithm;
        self
    }

    /// Shares the limit out by priority: a call of priority `p` takes a slot only while fewer
    /// than `ceil(limit × share(p))` calls are in flight. Default: off.
    pub fn shares(mut self, shares: Shares) -> Self {
        self.0.shares = Some(shares);
        self
    }

    /// Calls allowed to wait for a slot, in `[0, 1000000]`, served highest priority first.
    /// Default 0.
    pub fn max_waiting(mut self, n: u32) -> Self {
        self.0.max_waiting = n;
        self
    }

    /// How long a call may wait: in `(0, 1h]` when `max_waiting` is positive. Default 0.
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.0.max_wait = d;
        self
    }

    /// The seed of the algorithm's random draws (Vegas's probe jitter). Default: from the OS.
    pub fn seed(mut self, seed: u64) -> Self {
        self.0.seed = Some(seed);
        self
    }

    /// The configuration.
    pub fn build(self) -> Result<LimiterConfig, ConfigError> {
        let c = self.0;
        crate::check_queue(
            c.max_waiting,
            c.max_wait,
            crate::shed::MAX_SLOTS,
            crate::shed::MAX_WAIT,
        )?;
        Ok(c)
    }
}

#[cfg(feature = "serde")]
mod raw {
    //! The serialized form: every field optional, unknown fields rejected.
    use std::time::Duration;

    use serde::Deserialize;
    use tripline::ConfigError;

    use super::LimiterConfig;
    use crate::limiter::{AimdConfig, FixedLimit, Gradient2Config, LimitAlgorithm, VegasConfig};
    use crate::shed::Shares;

    #[derive(Deserialize)]
    #[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
    pub(super) enum RawAlgorithm {
        Fixed {
            limit: u32,
        },
        Aimd {
            initial_limit: Option<u32>,
            min_limit: Option<u32>,
            max_limit: Option<u32>,
            backoff_ratio: Option<f64>,
            #[serde(with = "tripline::duration::serde::option", default)]
            timeout: Option<Duration>,
        },
        Vegas {
            initial_limit: Option<u32>,
            min_limit: Option<u32>,
            max_limit: Option<u32>,
            alpha: Option<u32>,
            beta: Option<u32>,
            smoothing: Option<f64>,
            probe_multiplier: Option<u32>,
        },
        Gradient2 {
            initial_limit: Option<u32>,
            min_limit: Option<u32>,
            max_limit: Option<u32>,
            smoothing: Option<f64>,
            queue_size: Option<u32>,
            long_window: Option<u32>,
            rtt_tolerance: Option<f64>,
        },
    }

    /// `initial_limit` defaults to the default clamped into `[min_limit, max_limit]`, so that
    /// setting only a bound never makes the default initial limit invalid.
    fn initial(initial: Option<u32>, default: u32, min: u32, max: u32) -> u32 {
        initial.unwrap_or(default.clamp(min.min(max), max))
    }

    impl TryFrom<RawAlgorithm> for LimitAlgorithm {
        type Error = ConfigError;
        fn try_from(r: RawAlgorithm) -> Result<Self, ConfigError> {
            Ok(match r {
                RawAlgorithm::Fixed { limit } => LimitAlgorithm::Fixed(FixedLimit::new(limit)?),
                RawAlgorithm::Aimd {
                    initial_limit,
                    min_limit,
                    max_limit,
                    backoff_ratio,
                    timeout,
                } => {
                    let d = AimdConfig::default();
                    let min = min_limit.unwrap_or(d.min_limit());
                    let max = max_limit.unwrap_or(d.max_limit());
                    LimitAlgorithm::Aimd(
                        AimdConfig::builder()
                            .min_limit(min)
                            .max_limit(max)
                            .initial_limit(initial(initial_limit, d.initial_limit(), min, max))
                            .backoff_ratio(backoff_ratio.unwrap_or(d.backoff_ratio()))
                            .timeout(timeout.unwrap_or(d.timeout()))
                            .build()?,
                    )
                }
                RawAlgorithm::Vegas {
                    initial_limit,
                    min_limit,
                    max_limit,
                    alpha,
                    beta,
                    smoothing,
                    probe_multiplier,
                } => {
                    let d = VegasConfig::default();
                    let min = min_limit.unwrap_or(d.min_limit());
                    let max = max_limit.unwrap_or(d.max_limit());
                    LimitAlgorithm::Vegas(
                        VegasConfig::builder()
                            .min_limit(min)
                            .max_limit(max)
                            .initial_limit(initial(initial_limit, d.initial_limit(), min, max))
                            .alpha(alpha.unwrap_or(d.alpha()))
                            .beta(beta.unwrap_or(d.beta()))
                            .smoothing(smoothing.unwrap_or(d.smoothing()))
                            .probe_multiplier(probe_multiplier.unwrap_or(d.probe_multiplier()))
                            .build()?,
                    )
                }
                RawAlgorithm::Gradient2 {
                    initial_limit,
                    min_limit,
                    max_limit,
                    smoothing,
                    queue_size,
                    long_window,
                    rtt_tolerance,
                } => {
                    let d = Gradient2Config::default();
                    let min = min_limit.unwrap_or(d.min_limit());
                    let max = max_limit.unwrap_or(d.max_limit());
                    LimitAlgorithm::Gradient2(
                        Gradient2Config::builder()
                            .min_limit(min)
                            .max_limit(max)
                            .initial_limit(initial(initial_limit, d.initial_limit(), min, max))
                            .smoothing(smoothing.unwrap_or(d.smoothing()))
                            .queue_size(queue_size.unwrap_or(d.queue_size()))
                            .long_window(long_window.unwrap_or(d.long_window()))
                            .rtt_tolerance(rtt_tolerance.unwrap_or(d.rtt_tolerance()))
                            .build()?,
                    )
                }
            })
        }
    }

    impl<'de> Deserialize<'de> for LimitAlgorithm {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            LimitAlgorithm::try_from(RawAlgorithm::deserialize(d)?)
                .map_err(serde::de::Error::custom)
        }
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawLimiterConfig {
        algorithm: Option<LimitAlgorithm>,
        shares: Option<Shares>,
        max_waiting: Option<u32>,
        #[serde(with = "tripline::duration::serde::option", default)]
        max_wait: Option<Duration>,
        seed: Option<u64>,
    }

    impl TryFrom<RawLimiterConfig> for LimiterConfig {
        type Error = ConfigError;
        fn try_from(r: RawLimiterConfig) -> Result<Self, ConfigError> {
            let d = LimiterConfig::default();
            let mut b = LimiterConfig::builder()
                .algorithm(r.algorithm.unwrap_or(d.algorithm))
                .max_waiting(r.max_waiting.unwrap_or(d.max_waiting))
                .max_wait(r.max_wait.unwrap_or(d.max_wait));
            if let Some(s) = r.shares {
                b = b.shares(s);
            }
            if let Some(seed) = r.seed {
                b = b.seed(seed);
            }
            b.build()
        }
    }
}
