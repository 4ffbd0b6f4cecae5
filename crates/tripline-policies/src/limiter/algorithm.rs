//! The limit algorithms, as Netflix concurrency-limits writes them (`AIMDLimit`, `VegasLimit`,
//! `Gradient2Limit`), with their defaults, and a fixed limit.
//!
//! Each is a small state machine fed one sample per call: the call's round-trip time, the
//! calls in flight when it started (itself included) and whether it was *dropped* (failed or
//! timed out). Every setting is checked when built: `min_limit ≤ initial_limit ≤ max_limit`,
//! and every ratio in its range.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use tripline::ConfigError;

/// The largest limit any algorithm may reach.
pub const MAX_LIMIT: u32 = 1_000_000;

fn check_limits(min: u32, initial: u32, max: u32) -> Result<(), ConfigError> {
    if !(1..=MAX_LIMIT).contains(&max) {
        return Err(ConfigError::new(
            "max_limit",
            max,
            format!("in [1, {MAX_LIMIT}]"),
        ));
    }
    if !(1..=max).contains(&min) {
        return Err(ConfigError::new(
            "min_limit",
            min,
            format!("in [1, max_limit = {max}]"),
        ));
    }
    if !(min..=max).contains(&initial) {
        return Err(ConfigError::new(
            "initial_limit",
            initial,
            format!("in [min_limit = {min}, max_limit = {max}]"),
        ));
    }
    Ok(())
}

fn check_unit(field: &str, v: f64, allowed: &str, ok: bool) -> Result<(), ConfigError> {
    if ok && v.is_finite() {
        Ok(())
    } else {
        Err(ConfigError::new(field, v, allowed))
    }
}

/// How the limit moves. See the [module docs](crate::limiter) for the algorithms and why.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LimitAlgorithm {
    /// A limit that never moves: a bulkhead, with priorities and a queue.
    Fixed(FixedLimit),
    /// Additive increase, multiplicative decrease on drops (`AIMDLimit`).
    Aimd(AimdConfig),
    /// TCP Vegas: the queue estimated from the no-load RTT (`VegasLimit`, the library's
    /// default).
    Vegas(VegasConfig),
    /// The gradient between a long-term and the current RTT (`Gradient2Limit`).
    Gradient2(Gradient2Config),
}

impl Default for LimitAlgorithm {
    /// Vegas with its defaults, as concurrency-limits' limiters default to.
    fn default() -> Self {
        LimitAlgorithm::Vegas(VegasConfig::default())
    }
}

impl LimitAlgorithm {
    /// The limit before any sample.
    pub fn initial_limit(&self) -> u32 {
        match self {
            LimitAlgorithm::Fixed(f) => f.limit,
            LimitAlgorithm::Aimd(c) => c.initial_limit,
            LimitAlgorithm::Vegas(c) => c.initial_limit,
            LimitAlgorithm::Gradient2(c) => c.initial_limit,
        }
    }

    /// The lowest the limit may go.
    pub fn min_limit(&self) -> u32 {
        match self {
            LimitAlgorithm::Fixed(f) => f.limit,
            LimitAlgorithm::Aimd(c) => c.min_limit,
            LimitAlgorithm::Vegas(c) => c.min_limit,
            LimitAlgorithm::Gradient2(c) => c.min_limit,
        }
    }

    /// The highest the limit may go.
    pub fn max_limit(&self) -> u32 {
        match self {
            LimitAlgorithm::Fixed(f) => f.limit,
            LimitAlgorithm::Aimd(c) => c.max_limit,
            LimitAlgorithm::Vegas(c) => c.max_limit,
            LimitAlgorithm::Gradient2(c) => c.max_limit,
        }
    }

    /// The algorithm's name: `fixed`, `aimd`, `vegas`, `gradient2`.
    pub fn name(&self) -> &'static str {
        match self {
            LimitAlgorithm::Fixed(_) => "fixed",
            LimitAlgorithm::Aimd(_) => "aimd",
            LimitAlgorithm::Vegas(_) => "vegas",
            LimitAlgorithm::Gradient2(_) => "gradient2",
        }
    }
}

/// A limit that never moves.
///
/// ```
/// use tripline_policies::limiter::FixedLimit;
/// assert_eq!(FixedLimit::new(10)?.limit(), 10);
/// assert_eq!(FixedLimit::new(0).unwrap_err().to_string(), "limit must be in [1, 1000000], got 0");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedLimit {
    limit: u32,
}

impl FixedLimit {
    /// A limit of `limit`, in `[1, 1000000]`.
    pub fn new(limit: u32) -> Result<Self, ConfigError> {
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ConfigError::new(
                "limit",
                limit,
                format!("in [1, {MAX_LIMIT}]"),
            ));
        }
        Ok(Self { limit })
    }

    /// The limit.
    pub fn limit(&self) -> u32 {
        self.limit
    }
}

macro_rules! builder {
    ($config:ident, $builder:ident { $($(#[$m:meta])* $name:ident: $t:ty),* $(,)? }) => {
        impl $config {
            /// A builder starting from the defaults.
            pub fn builder() -> $builder {
                $builder(Self::default())
            }
            $($(#[$m])* pub fn $name(&self) -> $t { self.$name })*
        }

        #[doc = concat!("Builds a [`", stringify!($config), "`], checking every value.")]
        #[derive(Clone, Copy, Debug)]
        pub struct $builder($config);

        impl $builder {
            $($(#[$m])* pub fn $name(mut self, v: $t) -> Self { self.0.$name = v; self })*

            /// The configuration.
            pub fn build(self) -> Result<$config, ConfigError> {
                self.0.validate()?;
                Ok(self.0)
            }
        }
    };
}

/// Netflix's `AIMDLimit`: a loss-based limit. Each sample that was not dropped (and took at
/// most `timeout`) adds one, if the limiter was at least half full; each drop, or a sample
/// slower than `timeout`, multiplies the limit by `backoff_ratio`.
///
/// | field | default | why (concurrency-limits' defaults) |
/// |---|---|---|
/// | `initial_limit` | 20 | |
/// | `min_limit` | 20 | never starve the dependency of all traffic |
/// | `max_limit` | 200 | |
/// | `backoff_ratio` | 0.9 | in `[0.5, 1)`: a drop costs a tenth of the limit |
/// | `timeout` | 5 s | a sample slower than this counts as a drop, in `(0, 1 day]` |
///
/// ```
/// use tripline_policies::limiter::AimdConfig;
/// let c = AimdConfig::builder().min_limit(5).initial_limit(10).build()?;
/// assert_eq!((c.min_limit(), c.initial_limit(), c.max_limit()), (5, 10, 200));
/// let err = AimdConfig::builder().backoff_ratio(1.0).build().unwrap_err();
/// assert_eq!(err.to_string(), "backoff_ratio must be in [0.5, 1), got 1");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AimdConfig {
    initial_limit: u32,
    min_limit: u32,
    max_limit: u32,
    backoff_ratio: f64,
    timeout: Duration,
}

impl Default for AimdConfig {
    fn default() -> Self {
        Self {
            initial_limit: 20,
            min_limit: 20,
            max_limit: 200,
            backoff_ratio: 0.9,
            timeout: Duration::from_secs(5),
        }
    }
}

builder!(
    AimdConfig,
    AimdConfigBuilder {
        /// The limit before any sample. Default 20.
        initial_limit: u32,
        /// The lowest limit, in `[1, max_limit]`. Default 20.
        min_limit: u32,
        /// The highest limit, in `[1, 1000000]`. Default 200.
        max_limit: u32,
        /// The factor a drop multiplies the limit by, in `[0.5, 1)`. Default 0.9.
        backoff_ratio: f64,
        /// A sample slower than this is a drop, in `(0, 1 day]`. Default 5 s.
        timeout: Duration,
    }
);

impl AimdConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check_limits(self.min_limit, self.initial_limit, self.max_limit)?;
        check_unit(
            "backoff_ratio",
            self.backoff_ratio,
            "in [0.5, 1)",
            (0.5..1.0).contains(&self.backoff_ratio),
        )?;
        crate::timeout::check("timeout", self.timeout)?;
        Ok(())
    }
}

/// Netflix's `VegasLimit`, after TCP Vegas. It keeps the lowest RTT seen (the no-load RTT)
/// and estimates the queue at the dependency as `limit × (1 − rtt_noload / rtt)`: with no
/// queue it grows by `beta`, with a short queue (below `alpha`) by `log10(limit)`, with a long
/// one (above `beta`) it shrinks by `log10(limit)`, and a drop shrinks it too. `alpha` and
/// `beta` scale with `log10(limit)` (3 and 6 times it), so the limit grows quickly at large
/// values. Every `probe_multiplier × limit` samples (times a random factor in `[0.5, 1)`) the
/// no-load RTT is reset to the current sample, so a dependency that became slower for good is
/// relearned.
///
/// | field | default | why (concurrency-limits' defaults) |
/// |---|---|---|
/// | `initial_limit` | 20 | |
/// | `min_limit` | 1 | concurrency-limits' floor |
/// | `max_limit` | 1000 | |
/// | `alpha` | 3 | × `log10(limit)`: below this queue, grow |
/// | `beta` | 6 | × `log10(limit)`: above this queue, shrink; in `[alpha, 1000]` |
/// | `smoothing` | 1.0 | in `(0, 1]`: the share of each new estimate taken (1 = all of it) |
/// | `probe_multiplier` | 30 | relearn the no-load RTT every 15–30 × limit samples |
///
/// ```
/// use tripline_policies::limiter::VegasConfig;
/// let err = VegasConfig::builder().alpha(8).beta(6).build().unwrap_err();
/// assert_eq!(err.to_string(), "beta must be in [alpha = 8, 1000], got 6");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VegasConfig {
    initial_limit: u32,
    min_limit: u32,
    max_limit: u32,
    alpha: u32,
    beta: u32,
    smoothing: f64,
    probe_multiplier: u32,
}

impl Default for VegasConfig {
    fn default() -> Self {
        Self {
            initial_limit: 20,
            min_limit: 1,
            max_limit: 1000,
            alpha: 3,
            beta: 6,
            smoothing: 1.0,
            probe_multiplier: 30,
        }
    }
}

builder!(
    VegasConfig,
    VegasConfigBuilder {
        /// The limit before any sample. Default 20.
        initial_limit: u32,
        /// The lowest limit, in `[1, max_limit]`. Default 1.
        min_limit: u32,
        /// The highest limit, in `[1, 1000000]`. Default 1000.
        max_limit: u32,
        /// The queue below which the limit grows, as a multiple of `log10(limit)`, in `[1, 1000]`.
        /// Default 3.
        alpha: u32,
        /// The queue above which the limit shrinks, as a multiple of `log10(limit)`, in
        /// `[alpha, 1000]`. Default 6.
        beta: u32,
        /// The share of each new estimate taken, in `(0, 1]`. Default 1.
        smoothing: f64,
        /// Samples between resets of the no-load RTT, as a multiple of the limit, in
        /// `[1, 1000000]`. Default 30.
        probe_multiplier: u32,
    }
);

impl VegasConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        check_limits(self.min_limit, self.initial_limit, self.max_limit)?;
        if !(1..=1000).contains(&self.alpha) {
            return Err(ConfigError::new("alpha", self.alpha, "in [1, 1000]"));
        }
        if !(self.alpha..=1000).contains(&self.beta) {
            return Err(ConfigError::new(
                "beta",
                self.beta,
                format!("in [alpha = {}, 1000]", self.alpha),
            ));
        }
        check_unit(
            "smoothing",
            self.smoothing,
            "in (0, 1]",
            self.smoothing > 0.0 && self.smoothing <= 1.0,
        )?;
        if !(1..=1_000_000).contains(&self.probe_multiplier) {
            return Err(ConfigError::new(
                "probe_multiplier",
                self.probe_multiplier,
                "in [1, 1000000]",
            ));
        }
        Ok(())
    }
}

/// Netflix's `Gradient2Limit`: the gradient between a long-term average RTT (an exponential
/// average over `long_window` samples, after a warm-up of 10) and the current sample. The new
/// limit is `limit × gradient + queue_size`, where `gradient = clamp(rtt_tolerance × long /
/// short, 0.5, 1)`, smoothed by `smoothing`. Averages rather than minimums, because RPCs are
/// bursty and a minimum biases towards an impractically low base RTT; the long-term average
/// decays (by 5 % per sample while it is more than twice the current RTT) so it follows the
/// dependency back down after a long overload. As in its source, a drop does not lower the
/// limit by itself: only the RTT does (a timeout is slow).
///
/// | field | default | why (concurrency-limits' defaults) |
/// |---|---|---|
/// | `initial_limit` | 20 | |
/// | `min_limit` | 20 | |
/// | `max_limit` | 200 | |
/// | `smoothing` | 0.2 | in `(0, 1]`: how fast the limit moves towards a new estimate |
/// | `queue_size` | 4 | how much the limit may grow per sample while latency stays low, in `[0, 1000000]` |
/// | `long_window` | 600 | samples in the long-term average, in `[1, 1000000]` |
/// | `rtt_tolerance` | 1.5 | in `[1, 100]`: latency may grow 1.5× before the limit shrinks |
///
/// ```
/// use tripline_policies::limiter::Gradient2Config;
/// let err = Gradient2Config::builder().rtt_tolerance(0.9).build().unwrap_err();
/// assert_eq!(err.to_string(), "rtt_tolerance must be in [1, 100], got 0.9");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gradient2Config {
    initial_limit: u32,
    min_limit: u32,
    max_limit: u32,
    smoothing: f64,
    queue_size: u32,
    long_window: u32,
    rtt_tolerance: f64,
}

impl Default for Gradient2Config {
    fn default() -> Self {
        Self {
            initial_limit: 20,
            min_limit: 20,
            max_limit: 200,
            smoothing: 0.2,
            queue_size: 4,
            long_window: 600,
            rtt_tolerance: 1.5,
        }
    }
}

builder!(
    Gradient2Config,
    Gradient2ConfigBuilder {
        /// The limit before any sample. Default 20.
        initial_limit: u32,
        /// The lowest limit, in `[1, max_limit]`. Default 20.
        min_limit: u32,
        /// The highest limit, in `[1, 1000000]`. Default 200.
        max_limit: u32,
        /// How fast the limit moves towards a new estimate, in `(0, 1]`. Default 0.2.
        smoothing: f64,
        /// How much the limit may grow per sample while latency stays low. Default 4.
        queue_size: u32,
        /// Samples in the long-term RTT average, in `[1, 1000000]`. Default 600.
        long_window: u32,
        /// How much latency may grow before the limit shrinks, in `[1, 100]`. Default 1.5.
        rtt_tolerance: f64,
    }
);

impl Gradient2Config {
    fn validate(&self) -> Result<(), ConfigError> {
        check_limits(self.min_limit, self.initial_limit, self.max_limit)?;
        check_unit(
            "smoothing",
            self.smoothing,
            "in (0, 1]",
            self.smoothing > 0.0 && self.smoothing <= 1.0,
        )?;
        if self.queue_size > MAX_LIMIT {
            return Err(ConfigError::new(
                "queue_size",
                self.queue_size,
                format!("in [0, {MAX_LIMIT}]"),
            ));
        }
        if !(1..=1_000_000).contains(&self.long_window) {
            return Err(ConfigError::new(
                "long_window",
                self.long_window,
                "in [1, 1000000]",
            ));
        }
        check_unit(
            "rtt_tolerance",
            self.rtt_tolerance,
            "in [1, 100]",
            (1.0..=100.0).contains(&self.rtt_tolerance),
        )?;
        Ok(())
    }
}

/// One sample: a call's round trip, the calls in flight when it started (itself included),
/// and whether it was dropped.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub(crate) rtt: u64,
    pub(crate) in_flight: u32,
    pub(crate) dropped: bool,
}

/// `max(1, floor(log10(n)))`, concurrency-limits' `Log10RootIntFunction`.
fn log10(n: u32) -> u32 {
    n.checked_ilog10().unwrap_or(0).max(1)
}

/// concurrency-limits' `ExpAvgMeasurement`: the plain mean of the first `warmup` samples,
/// then an exponential average with factor `2 / (window + 1)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExpAvg {
    value: f64,
    sum: f64,
    count: u32,
    factor: f64,
}

impl ExpAvg {
    const WARMUP: u32 = 10;

    fn new(window: u32) -> Self {
        Self {
            value: 0.0,
            sum: 0.0,
            count: 0,
            factor: 2.0 / (f64::from(window) + 1.0),
        }
    }

    fn add(&mut self, sample: f64) -> f64 {
        if self.count < Self::WARMUP {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / f64::from(self.count);
        } else {
            self.value = self.value * (1.0 - self.factor) + sample * self.factor;
        }
        self.value
    }
}

/// The state of one algorithm.
#[derive(Debug)]
pub(crate) enum Algorithm {
    Fixed(u32),
    Aimd {
        config: AimdConfig,
        limit: u32,
        last_rtt: u64,
    },
    Vegas {
        config: VegasConfig,
        estimate: f64,
        rtt_noload: u64,
        last_rtt: u64,
        probe_count: u64,
        probe_jitter: f64,
        rng: Pcg64Mcg,
    },
    Gradient2 {
        config: Gradient2Config,
        estimate: f64,
        last_rtt: u64,
        long_rtt: ExpAvg,
    },
}

fn clamp(v: f64, min: u32, max: u32) -> f64 {
    v.max(f64::from(min)).min(f64::from(max))
}

/// An estimate as a limit: rounded down, within `[min, max]`.
fn floor_limit(estimate: f64, min: u32, max: u32) -> u32 {
    (estimate as u32).clamp(min, max)
}

impl Algorithm {
    pub(crate) fn new(algorithm: LimitAlgorithm, seed: u64) -> Self {
        match algorithm {
            LimitAlgorithm::Fixed(f) => Algorithm::Fixed(f.limit),
            LimitAlgorithm::Aimd(config) => Algorithm::Aimd {
                config,
                limit: config.initial_limit,
                last_rtt: 0,
            },
            LimitAlgorithm::Vegas(config) => {
                let mut rng = Pcg64Mcg::seed_from_u64(seed);
                Algorithm::Vegas {
                    config,
                    estimate: f64::from(config.initial_limit),
                    rtt_noload: 0,
                    last_rtt: 0,
                    probe_count: 0,
                    probe_jitter: rng.random_range(0.5..1.0),
                    rng,
                }
            }
            LimitAlgorithm::Gradient2(config) => Algorithm::Gradient2 {
                config,
                estimate: f64::from(config.initial_limit),
                last_rtt: 0,
                long_rtt: ExpAvg::new(config.long_window),
            },
        }
    }

    /// The limit now: the estimate rounded down, within `[min_limit, max_limit]`.
    pub(crate) fn limit(&self) -> u32 {
        match self {
            Algorithm::Fixed(l) => *l,
            Algorithm::Aimd { limit, .. } => *limit,
            Algorithm::Vegas {
                config, estimate, ..
            } => floor_limit(*estimate, config.min_limit, config.max_limit),
            Algorithm::Gradient2 {
                config, estimate, ..
            } => floor_limit(*estimate, config.min_limit, config.max_limit),
        }
    }

    /// The last sample's RTT, in nanoseconds (0 before any).
    pub(crate) fn last_rtt(&self) -> u64 {
        match self {
            Algorithm::Fixed(_) => 0,
            Algorithm::Aimd { last_rtt, .. }
            | Algorithm::Vegas { last_rtt, .. }
            | Algorithm::Gradient2 { last_rtt, .. } => *last_rtt,
        }
    }

    /// The algorithm's baseline RTT, in nanoseconds: Vegas's no-load RTT, Gradient2's long-term
    /// average; 0 for the others and before any sample.
    pub(crate) fn baseline_rtt(&self) -> u64 {
        match self {
            Algorithm::Vegas { rtt_noload, .. } => *rtt_noload,
            Algorithm::Gradient2 { long_rtt, .. } => long_rtt.value as u64,
            _ => 0,
        }
    }

    /// Feeds one sample; returns the new limit.
    pub(crate) fn update(&mut self, s: Sample) -> u32 {
        match self {
            Algorithm::Fixed(l) => *l,
            Algorithm::Aimd {
                config,
                limit,
                last_rtt,
            } => {
                *last_rtt = s.rtt;
                let timeout = u64::try_from(config.timeout.as_nanos()).unwrap_or(u64::MAX);
                let mut l = *limit;
                if s.dropped || s.rtt > timeout {
                    l = (f64::from(l) * config.backoff_ratio) as u32;
                } else if u64::from(s.in_flight) * 2 >= u64::from(l) {
                    l = l.saturating_add(1);
                }
                *limit = l.clamp(config.min_limit, config.max_limit);
                *limit
            }
            Algorithm::Vegas {
                config,
                estimate,
                rtt_noload,
                last_rtt,
                probe_count,
                probe_jitter,
                rng,
            } => {
                let rtt = s.rtt.max(1);
                *last_rtt = rtt;
                *probe_count += 1;
                let probe_at = *probe_jitter * f64::from(config.probe_multiplier) * *estimate;
                if probe_at <= *probe_count as f64 {
                    *probe_jitter = rng.random_range(0.5..1.0);
                    *probe_count = 0;
                    *rtt_noload = rtt;
                    return floor_limit(*estimate, config.min_limit, config.max_limit);
                }
                if *rtt_noload == 0 || rtt < *rtt_noload {
                    *rtt_noload = rtt;
                    return floor_limit(*estimate, config.min_limit, config.max_limit);
                }
                let est = *estimate;
                let queue = (est * (1.0 - *rtt_noload as f64 / rtt as f64)).ceil();
                let l = est as u32;
                let log = f64::from(log10(l));
                let new = if s.dropped {
                    est - log
                } else if f64::from(s.in_flight) * 2.0 < est {
                    return floor_limit(*estimate, config.min_limit, config.max_limit);
                } else {
                    let alpha = f64::from(config.alpha) * log;
                    let beta = f64::from(config.beta) * log;
                    let threshold = log;
                    if queue <= threshold {
                        est + beta
                    } else if queue < alpha {
                        est + log
                    } else if queue > beta {
                        est - log
                    } else {
                        return floor_limit(*estimate, config.min_limit, config.max_limit);
                    }
                };
                let new = clamp(new, config.min_limit, config.max_limit);
                *estimate = (1.0 - config.smoothing) * est + config.smoothing * new;
                floor_limit(*estimate, config.min_limit, config.max_limit)
            }
            Algorithm::Gradient2 {
                config,
                estimate,
                last_rtt,
                long_rtt,
            } => {
                let rtt = s.rtt.max(1);
                *last_rtt = rtt;
                let est = *estimate;
                let short = rtt as f64;
                let long = long_rtt.add(short);
                if long / short > 2.0 {
                    long_rtt.value *= 0.95;
                }
                if f64::from(s.in_flight) < est / 2.0 {
                    return floor_limit(est, config.min_limit, config.max_limit);
                }
                let gradient = (config.rtt_tolerance * long / short).clamp(0.5, 1.0);
                let new = est * gradient + f64::from(config.queue_size);
                let new = est * (1.0 - config.smoothing) + new * config.smoothing;
                *estimate = clamp(new, config.min_limit, config.max_limit);
                floor_limit(*estimate, config.min_limit, config.max_limit)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn sample(rtt_ms: u64, in_flight: u32) -> Sample {
        Sample {
            rtt: rtt_ms * MS,
            in_flight,
            dropped: false,
        }
    }

    fn vegas(initial: u32, max: u32) -> Algorithm {
        let c = VegasConfig::builder()
            .initial_limit(initial)
            .max_limit(max)
            .build()
            .unwrap();
        Algorithm::new(LimitAlgorithm::Vegas(c), 7)
    }

    #[test]
    fn log10_is_concurrency_limits_table() {
        assert_eq!(
            [0, 1, 9, 10, 99, 100, 999, 1000, 10_000].map(log10),
            [1, 1, 1, 1, 1, 2, 2, 3, 4]
        );
    }

    // The cases of concurrency-limits' VegasLimitTest (alpha 3, beta 6, smoothing 1, initial
    // 10, max 20: at a limit of 10, log10 is 1, so the scaled alpha and beta are 3 and 6).
    #[test]
    fn vegas_increases_with_no_queue() {
        let mut v = vegas(10, 20);
        assert_eq!(v.update(sample(10, 10)), 10); // the first sample is the no-load RTT
        assert_eq!(v.update(sample(10, 11)), 16); // no queue: + beta
    }

    #[test]
    fn vegas_decreases_with_a_long_queue() {
        let mut v = vegas(10, 20);
        v.update(sample(10, 10));
        assert_eq!(v.update(sample(50, 11)), 9); // queue ceil(10 × 0.8) = 8 > 6
    }

    #[test]
    fn vegas_holds_within_the_thresholds() {
        let mut v = vegas(10, 20);
        v.update(sample(10, 10));
        assert_eq!(v.update(sample(14, 14)), 10); // queue 3: neither below 3 nor above 6
    }

    #[test]
    fn vegas_grows_fast_at_large_limits() {
        let mut v = vegas(10_000, 20_000);
        assert_eq!(v.update(sample(10_000, 5000)), 10_000);
        assert_eq!(v.update(sample(10_000, 6000)), 10_024); // + 6 × log10(10000)
    }

    #[test]
    fn vegas_does_not_grow_while_app_limited() {
        let mut v = vegas(10, 20);
        v.update(sample(10, 10));
        assert_eq!(v.update(sample(10, 4)), 10);
    }

    // concurrency-limits' AIMDLimitTest.
    #[test]
    fn aimd_increases_on_success_and_backs_off_on_drops() {
        let c = AimdConfig::builder().initial_limit(20).build().unwrap();
        let mut a = Algorithm::new(LimitAlgorithm::Aimd(c), 0);
        assert_eq!(a.update(sample(1, 10)), 21);
        let c = AimdConfig::builder().initial_limit(30).build().unwrap();
        let mut a = Algorithm::new(LimitAlgorithm::Aimd(c), 0);
        let drop = Sample {
            rtt: 0,
            in_flight: 0,
            dropped: true,
        };
        assert_eq!(a.update(drop), 27);
        let c = AimdConfig::builder()
            .min_limit(1)
            .initial_limit(21)
            .max_limit(21)
            .build()
            .unwrap();
        let mut a = Algorithm::new(LimitAlgorithm::Aimd(c), 0);
        assert_eq!(a.update(sample(1, 10)), 21, "capped at the max");
    }

    #[test]
    fn aimd_counts_a_sample_slower_than_the_timeout_as_a_drop() {
        let mut a = Algorithm::new(LimitAlgorithm::Aimd(AimdConfig::default()), 0);
        for _ in 0..10 {
            a.update(sample(1, 100));
        }
        assert_eq!(a.limit(), 30);
        assert_eq!(a.update(sample(6000, 100)), 27);
    }

    #[test]
    fn gradient2_shrinks_when_latency_grows_and_grows_back() {
        let mut g = Algorithm::new(LimitAlgorithm::Gradient2(Gradient2Config::default()), 0);
        // No queue: each sample adds smoothing × queue_size = 0.8.
        for _ in 0..50 {
            g.update(sample(10, 200));
        }
        assert_eq!(g.limit(), 60);
        for _ in 0..150 {
            g.update(sample(10, 200));
        }
        let grown = g.limit();
        assert!(grown > 150, "{grown}");
        for _ in 0..50 {
            g.update(sample(100, 200));
        }
        let shrunk = g.limit();
        assert!(shrunk < grown / 2, "{shrunk} vs {grown}");
        for _ in 0..200 {
            g.update(sample(10, 200));
        }
        assert!(g.limit() > shrunk, "recovers");
    }

    #[test]
    fn gradient2_long_rtt_warms_up_as_a_plain_mean() {
        let mut e = ExpAvg::new(600);
        for x in [10.0, 20.0, 30.0] {
            e.add(x);
        }
        assert_eq!(e.value, 20.0);
    }
}
