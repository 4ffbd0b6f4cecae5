//! The detector's settings: Envoy's `OutlierDetection` fields, with Envoy's defaults, plus the
//! load balancer's panic threshold and a bound on the host set.

use std::time::Duration;

use tripline::ConfigError;

/// The most hosts one detector may hold (the bound [`OutlierConfigBuilder::max_hosts`] may be
/// raised to).
pub const MAX_HOSTS: u32 = 1_000_000;
/// The longest `interval`, `base_ejection_time`, `max_ejection_time` and
/// `max_ejection_time_jitter`.
pub const MAX_TIME: Duration = Duration::from_secs(24 * 3600);
/// The largest consecutive-failure threshold.
pub const MAX_CONSECUTIVE: u32 = 1 << 20;
/// The largest `success_rate_stdev_factor` (in thousandths: a factor of 1000).
pub const MAX_STDEV_FACTOR: u32 = 1_000_000;

/// The settings of an [`OutlierDetector`](super::OutlierDetector).
///
/// Every field is Envoy's (`config.cluster.v3.OutlierDetection`), with Envoy's default, except
/// `healthy_panic_threshold` (the load balancer's, `common_lb_config.healthy_panic_threshold`
/// in Envoy, default 50 %) and `max_hosts` (a bound on memory, default 10 000).
///
/// | field | default | meaning |
/// |---|---|---|
/// | `interval` | 10 s | time between sweeps: success-rate and failure-percentage checks, returns, decay |
/// | `base_ejection_time` | 30 s | an ejection lasts this × the host's ejection multiplier |
/// | `max_ejection_time` | max(300 s, base) | ... capped at this |
/// | `max_ejection_time_jitter` | 0 | a uniform random extra, per ejection |
/// | `max_ejection_percent` | 10 | never more than this share of hosts ejected at once |
/// | `always_eject_one_host` | false | allow one ejection even when the share would exceed the cap |
/// | `consecutive_5xx` / `enforcing_consecutive_5xx` | 5 / 100 % | 5xx in a row (and, unsplit, local-origin failures) |
/// | `consecutive_gateway_failure` / `enforcing_…` | 5 / 0 % | 502, 503, 504 in a row (and, unsplit, local-origin failures) |
/// | `split_external_local_origin_errors` | false | count timeouts and connect failures apart from responses |
/// | `consecutive_local_origin_failure` / `enforcing_…` | 5 / 100 % | local-origin failures in a row (split mode) |
/// | `success_rate_minimum_hosts` | 5 | hosts with enough volume for the success-rate check |
/// | `success_rate_request_volume` | 100 | requests in one interval for a host to count |
/// | `success_rate_stdev_factor` | 1900 | thousandths: eject below mean − 1.9 × stdev |
/// | `enforcing_success_rate` / `enforcing_local_origin_success_rate` | 100 % / 100 % | |
/// | `failure_percentage_threshold` | 85 | eject at or above this failure percentage |
/// | `failure_percentage_minimum_hosts` / `…_request_volume` | 5 / 50 | |
/// | `enforcing_failure_percentage` / `…_local_origin` | 0 % / 0 % | |
/// | `healthy_panic_threshold` | 50 % | fewer healthy hosts than this share: balance over all |
/// | `max_hosts` | 10 000 | the host set may hold at most this many hosts |
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutlierConfig {
    pub(crate) interval: Duration,
    pub(crate) base_ejection_time: Duration,
    pub(crate) max_ejection_time: Option<Duration>,
    pub(crate) max_ejection_time_jitter: Duration,
    pub(crate) max_ejection_percent: u32,
    pub(crate) always_eject_one_host: bool,
    pub(crate) consecutive_5xx: u32,
    pub(crate) enforcing_consecutive_5xx: u32,
    pub(crate) consecutive_gateway_failure: u32,
    pub(crate) enforcing_consecutive_gateway_failure: u32,
    pub(crate) split_external_local_origin_errors: bool,
    pub(crate) consecutive_local_origin_failure: u32,
    pub(crate) enforcing_consecutive_local_origin_failure: u32,
    pub(crate) success_rate_minimum_hosts: u32,
    pub(crate) success_rate_request_volume: u32,
    pub(crate) success_rate_stdev_factor: u32,
    pub(crate) enforcing_success_rate: u32,
    pub(crate) enforcing_local_origin_success_rate: u32,
    pub(crate) failure_percentage_threshold: u32,
    pub(crate) failure_percentage_minimum_hosts: u32,
    pub(crate) failure_percentage_request_volume: u32,
    pub(crate) enforcing_failure_percentage: u32,
    pub(crate) enforcing_failure_percentage_local_origin: u32,
    pub(crate) healthy_panic_threshold: f64,
    pub(crate) max_hosts: u32,
}

impl Default for OutlierConfig {
    /// Envoy's defaults (see the table on [`OutlierConfig`]).
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(10),
            base_ejection_time: Duration::from_secs(30),
            max_ejection_time: None,
            max_ejection_time_jitter: Duration::ZERO,
            max_ejection_percent: 10,
            always_eject_one_host: false,
            consecutive_5xx: 5,
            enforcing_consecutive_5xx: 100,
            consecutive_gateway_failure: 5,
            enforcing_consecutive_gateway_failure: 0,
            split_external_local_origin_errors: false,
            consecutive_local_origin_failure: 5,
            enforcing_consecutive_local_origin_failure: 100,
            success_rate_minimum_hosts: 5,
            success_rate_request_volume: 100,
            success_rate_stdev_factor: 1900,
            enforcing_success_rate: 100,
            enforcing_local_origin_success_rate: 100,
            failure_percentage_threshold: 85,
            failure_percentage_minimum_hosts: 5,
            failure_percentage_request_volume: 50,
            enforcing_failure_percentage: 0,
            enforcing_failure_percentage_local_origin: 0,
            healthy_panic_threshold: 50.0,
            max_hosts: 10_000,
        }
    }
}

macro_rules! getters {
    ($($(#[$m:meta])* $name:ident: $t:ty),* $(,)?) => {
        impl OutlierConfig {
            $($(#[$m])* pub fn $name(&self) -> $t { self.$name })*
        }
    };
}

getters! {
    /// Time between sweeps.
    interval: Duration,
    /// The base ejection time.
    base_ejection_time: Duration,
    /// The most random extra time added to one ejection.
    max_ejection_time_jitter: Duration,
    /// The most hosts ejected at once, in percent of the host set.
    max_ejection_percent: u32,
    /// Whether one host may be ejected even when that exceeds `max_ejection_percent`.
    always_eject_one_host: bool,
    /// 5xx responses in a row that make a host an outlier.
    consecutive_5xx: u32,
    /// The chance, in percent, that a consecutive-5xx outlier is ejected.
    enforcing_consecutive_5xx: u32,
    /// Gateway failures (502, 503, 504) in a row that make a host an outlier.
    consecutive_gateway_failure: u32,
    /// The chance, in percent, that a consecutive-gateway-failure outlier is ejected.
    enforcing_consecutive_gateway_failure: u32,
    /// Whether local-origin failures (timeouts, connect failures) are counted apart.
    split_external_local_origin_errors: bool,
    /// Local-origin failures in a row that make a host an outlier (split mode).
    consecutive_local_origin_failure: u32,
    /// The chance, in percent, that a consecutive-local-origin-failure outlier is ejected.
    enforcing_consecutive_local_origin_failure: u32,
    /// Hosts with enough volume needed for the success-rate check.
    success_rate_minimum_hosts: u32,
    /// Requests in one interval for a host to take part in the success-rate check.
    success_rate_request_volume: u32,
    /// The success-rate factor in thousandths (1900 is 1.9).
    success_rate_stdev_factor: u32,
    /// The chance, in percent, that a success-rate outlier is ejected.
    enforcing_success_rate: u32,
    /// The chance, in percent, that a local-origin success-rate outlier is ejected.
    enforcing_local_origin_success_rate: u32,
    /// The failure percentage at or above which a host is an outlier.
    failure_percentage_threshold: u32,
    /// Hosts with enough volume needed for the failure-percentage check.
    failure_percentage_minimum_hosts: u32,
    /// Requests in one interval for a host to take part in the failure-percentage check.
    failure_percentage_request_volume: u32,
    /// The chance, in percent, that a failure-percentage outlier is ejected.
    enforcing_failure_percentage: u32,
    /// The chance, in percent, that a local-origin failure-percentage outlier is ejected.
    enforcing_failure_percentage_local_origin: u32,
    /// Below this share of healthy hosts, in percent, the balancer uses every host.
    healthy_panic_threshold: f64,
    /// The most hosts the host set may hold.
    max_hosts: u32,
}

impl OutlierConfig {
    /// A builder starting from Envoy's defaults.
    pub fn builder() -> OutlierConfigBuilder {
        OutlierConfigBuilder(Self::default())
    }

    /// The longest ejection: as set, else the larger of 300 s and `base_ejection_time` (as
    /// Envoy).
    pub fn max_ejection_time(&self) -> Duration {
        self.max_ejection_time
            .unwrap_or_else(|| self.base_ejection_time.max(Duration::from_secs(300)))
    }

    /// The same settings with every `enforcing_*` at 0: hosts are watched and outliers
    /// counted as detected, but none is ever ejected. A balancer on it is a plain balancer.
    ///
    /// ```
    /// use tripline_policies::outlier::OutlierConfig;
    /// let c = OutlierConfig::default().detection_only();
    /// assert_eq!(c.enforcing_consecutive_5xx(), 0);
    /// assert_eq!(c.consecutive_5xx(), 5);
    /// ```
    pub fn detection_only(mut self) -> Self {
        self.enforcing_consecutive_5xx = 0;
        self.enforcing_consecutive_gateway_failure = 0;
        self.enforcing_consecutive_local_origin_failure = 0;
        self.enforcing_success_rate = 0;
        self.enforcing_local_origin_success_rate = 0;
        self.enforcing_failure_percentage = 0;
        self.enforcing_failure_percentage_local_origin = 0;
        self
    }

    /// A builder starting from these settings.
    pub fn to_builder(&self) -> OutlierConfigBuilder {
        OutlierConfigBuilder(*self)
    }
}

/// Builds an [`OutlierConfig`], checking every value.
#[derive(Clone, Copy, Debug)]
pub struct OutlierConfigBuilder(OutlierConfig);

macro_rules! setters {
    ($($(#[$m:meta])* $name:ident: $t:ty),* $(,)?) => {
        impl OutlierConfigBuilder {
            $($(#[$m])* pub fn $name(mut self, v: $t) -> Self { self.0.$name = v; self })*
        }
    };
}

setters! {
    /// Time between sweeps, in `[1ms, 1 day]`. Default 10 s.
    interval: Duration,
    /// The base ejection time, in `[1ms, 1 day]`. Default 30 s.
    base_ejection_time: Duration,
    /// The most random extra time added to one ejection, in `[0, 1 day]`. Default 0.
    max_ejection_time_jitter: Duration,
    /// The most hosts ejected at once, in percent, in `[0, 100]`. Default 10.
    max_ejection_percent: u32,
    /// Whether one host may be ejected even when that exceeds `max_ejection_percent` (a 10 %
    /// cap on fewer than 10 hosts otherwise ejects none). Default false, as Envoy.
    always_eject_one_host: bool,
    /// 5xx responses in a row that make a host an outlier, in `[1, 2²⁰]`. Default 5.
    consecutive_5xx: u32,
    /// The chance, in percent, that a consecutive-5xx outlier is ejected, in `[0, 100]`.
    /// Default 100.
    enforcing_consecutive_5xx: u32,
    /// Gateway failures in a row that make a host an outlier, in `[1, 2²⁰]`. Default 5.
    consecutive_gateway_failure: u32,
    /// The chance, in percent, that a gateway-failure outlier is ejected, in `[0, 100]`.
    /// Default 0.
    enforcing_consecutive_gateway_failure: u32,
    /// Whether local-origin failures are counted apart from responses. Default false.
    split_external_local_origin_errors: bool,
    /// Local-origin failures in a row that make a host an outlier, in `[1, 2²⁰]`. Default 5.
    consecutive_local_origin_failure: u32,
    /// The chance, in percent, that a local-origin outlier is ejected, in `[0, 100]`.
    /// Default 100.
    enforcing_consecutive_local_origin_failure: u32,
    /// Hosts with enough volume needed for the success-rate check. Default 5.
    success_rate_minimum_hosts: u32,
    /// Requests in one interval for a host to take part in the success-rate check.
    /// Default 100.
    success_rate_request_volume: u32,
    /// The success-rate factor in thousandths, in `[0, 10⁶]`. Default 1900 (1.9).
    success_rate_stdev_factor: u32,
    /// The chance, in percent, that a success-rate outlier is ejected, in `[0, 100]`.
    /// Default 100.
    enforcing_success_rate: u32,
    /// The chance, in percent, that a local-origin success-rate outlier is ejected, in
    /// `[0, 100]`. Default 100.
    enforcing_local_origin_success_rate: u32,
    /// The failure percentage at or above which a host is an outlier, in `[0, 100]`.
    /// Default 85.
    failure_percentage_threshold: u32,
    /// Hosts with enough volume needed for the failure-percentage check. Default 5.
    failure_percentage_minimum_hosts: u32,
    /// Requests in one interval for a host to take part in the failure-percentage check.
    /// Default 50.
    failure_percentage_request_volume: u32,
    /// The chance, in percent, that a failure-percentage outlier is ejected, in `[0, 100]`.
    /// Default 0.
    enforcing_failure_percentage: u32,
    /// The chance, in percent, that a local-origin failure-percentage outlier is ejected, in
    /// `[0, 100]`. Default 0.
    enforcing_failure_percentage_local_origin: u32,
    /// Below this share of healthy (not ejected) hosts, in percent, the balancer uses every
    /// host, ejected or not; in `[0, 100]`, 0 turns panic off. Default 50 (Envoy's
    /// `healthy_panic_threshold`).
    healthy_panic_threshold: f64,
    /// The most hosts the host set may hold, in `[1, 10⁶]`. Default 10 000.
    max_hosts: u32,
}

impl OutlierConfigBuilder {
    /// The longest ejection, in `[base_ejection_time, 1 day]`. Default: the larger of 300 s and
    /// `base_ejection_time`.
    pub fn max_ejection_time(mut self, v: Duration) -> Self {
        self.0.max_ejection_time = Some(v);
        self
    }

    /// The configuration.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline_policies::outlier::OutlierConfig;
    ///
    /// let err = OutlierConfig::builder().max_ejection_percent(150).build().unwrap_err();
    /// assert_eq!(err.to_string(), "max_ejection_percent must be in [0, 100], got 150");
    /// let err = OutlierConfig::builder().interval(Duration::ZERO).build().unwrap_err();
    /// assert_eq!(err.to_string(), "interval must be in [1ms, 86400s], got 0ns");
    /// let err = OutlierConfig::builder()
    ///     .base_ejection_time(Duration::from_secs(60))
    ///     .max_ejection_time(Duration::from_secs(30))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(err.field(), "max_ejection_time");
    /// ```
    pub fn build(self) -> Result<OutlierConfig, ConfigError> {
        let c = self.0;
        let dur = |field: &str, v: Duration, lo: Duration| {
            if v < lo || v > MAX_TIME {
                return Err(ConfigError::new(
                    field,
                    format!("{v:?}"),
                    format!("in [{lo:?}, {MAX_TIME:?}]"),
                ));
            }
            Ok(())
        };
        let ms = Duration::from_millis(1);
        dur("interval", c.interval, ms)?;
        dur("base_ejection_time", c.base_ejection_time, ms)?;
        dur(
            "max_ejection_time_jitter",
            c.max_ejection_time_jitter,
            Duration::ZERO,
        )?;
        if let Some(max) = c.max_ejection_time {
            if max < c.base_ejection_time || max > MAX_TIME {
                return Err(ConfigError::new(
                    "max_ejection_time",
                    format!("{max:?}"),
                    format!(
                        "in [base_ejection_time = {:?}, {MAX_TIME:?}]",
                        c.base_ejection_time
                    ),
                ));
            }
        }
        for (field, v) in [
            ("max_ejection_percent", c.max_ejection_percent),
            ("enforcing_consecutive_5xx", c.enforcing_consecutive_5xx),
            (
                "enforcing_consecutive_gateway_failure",
                c.enforcing_consecutive_gateway_failure,
            ),
            (
                "enforcing_consecutive_local_origin_failure",
                c.enforcing_consecutive_local_origin_failure,
            ),
            ("enforcing_success_rate", c.enforcing_success_rate),
            (
                "enforcing_local_origin_success_rate",
                c.enforcing_local_origin_success_rate,
            ),
            (
                "failure_percentage_threshold",
                c.failure_percentage_threshold,
            ),
            (
                "enforcing_failure_percentage",
                c.enforcing_failure_percentage,
            ),
            (
                "enforcing_failure_percentage_local_origin",
                c.enforcing_failure_percentage_local_origin,
            ),
        ] {
            if v > 100 {
                return Err(ConfigError::new(field, v, "in [0, 100]"));
            }
        }
        for (field, v) in [
            ("consecutive_5xx", c.consecutive_5xx),
            ("consecutive_gateway_failure", c.consecutive_gateway_failure),
            (
                "consecutive_local_origin_failure",
                c.consecutive_local_origin_failure,
            ),
        ] {
            if !(1..=MAX_CONSECUTIVE).contains(&v) {
                return Err(ConfigError::new(
                    field,
                    v,
                    format!(
                        "in [1, {MAX_CONSECUTIVE}] (set its enforcing_ percentage to 0 to turn it off)"
                    ),
                ));
            }
        }
        if c.success_rate_stdev_factor > MAX_STDEV_FACTOR {
            return Err(ConfigError::new(
                "success_rate_stdev_factor",
                c.success_rate_stdev_factor,
                format!("in [0, {MAX_STDEV_FACTOR}] (thousandths: 1900 is 1.9)"),
            ));
        }
        let p = c.healthy_panic_threshold;
        if !(0.0..=100.0).contains(&p) {
            return Err(ConfigError::new(
                "healthy_panic_threshold",
                p,
                "in [0, 100]",
            ));
        }
        if !(1..=MAX_HOSTS).contains(&c.max_hosts) {
            return Err(ConfigError::new(
                "max_hosts",
                c.max_hosts,
                format!("in [1, {MAX_HOSTS}]"),
            ));
        }
        Ok(c)
    }
}
