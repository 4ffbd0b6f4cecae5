//! The partial breaker's settings: Semian's adaptive circuit breaker's, with its defaults.

use std::time::Duration;

use tripline::ConfigError;

/// The settings of a [`PartialBreaker`](super::PartialBreaker). Every field and default is
/// Semian's adaptive circuit breaker's (its README: "We highly recommend just setting that
/// configuration and not any other"), apart from `seed`.
///
/// | field | default | why (Semian) |
/// |---|---|---|
/// | `kp` | 1.0 | the proportional gain: how quickly the rejection rate follows the latest excess |
/// | `ki` | 0.2 | the integral gain: memory, which ignores noise |
/// | `kd` | 0.0 | the derivative gain (complex with this error function, so off) |
/// | `integral_upper_cap` | 10 | bounds the integral (no wind-up) |
/// | `integral_lower_cap` | −10 | |
/// | `window` | 10 s | the error rate is measured over the last 10 s of calls |
/// | `interval` | 1 s | the window slides, and the controller updates, every second |
/// | `dead_zone_ratio` | 0.25 | an error rate within 25 % above the ideal one is noise |
/// | `initial_error_rate` | 0.05 | the first guess of the ideal error rate |
/// | `ideal_error_rate_cap` | 0.1 | observations above 10 % never teach the ideal rate |
/// | `seed` | random | the seed of the rejection draws, for reproducible runs |
///
/// Ranges: gains in `[0, 100]`, not both `kp` and `ki` zero (the breaker would never reject);
/// `integral_upper_cap` in `[0, 1000]` and `integral_lower_cap` in `[−1000, 0]`; `interval` in
/// `[1ms, window]` and `window` a whole number (at most 3600) of intervals; `dead_zone_ratio`
/// in `[0, 10]`; `initial_error_rate` in `[0, ideal_error_rate_cap]` and
/// `ideal_error_rate_cap` in `[0, 1)`.
///
/// ```
/// use tripline_policies::partial::PartialConfig;
///
/// let c = PartialConfig::builder().ki(0.1).build()?;
/// assert_eq!(c.ki(), 0.1);
/// let err = PartialConfig::builder().initial_error_rate(0.2).build().unwrap_err();
/// assert_eq!(err.to_string(), "initial_error_rate must be in [0, ideal_error_rate_cap = 0.1], got 0.2");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(try_from = "raw::RawPartialConfig")
)]
pub struct PartialConfig {
    pub(crate) kp: f64,
    pub(crate) ki: f64,
    pub(crate) kd: f64,
    pub(crate) integral_upper_cap: f64,
    pub(crate) integral_lower_cap: f64,
    pub(crate) window: Duration,
    pub(crate) interval: Duration,
    pub(crate) dead_zone_ratio: f64,
    pub(crate) initial_error_rate: f64,
    pub(crate) ideal_error_rate_cap: f64,
    pub(crate) seed: Option<u64>,
}

impl Default for PartialConfig {
    fn default() -> Self {
        Self {
            kp: 1.0,
            ki: 0.2,
            kd: 0.0,
            integral_upper_cap: 10.0,
            integral_lower_cap: -10.0,
            window: Duration::from_secs(10),
            interval: Duration::from_secs(1),
            dead_zone_ratio: 0.25,
            initial_error_rate: 0.05,
            ideal_error_rate_cap: 0.1,
            seed: None,
        }
    }
}

macro_rules! fields {
    ($($(#[$m:meta])* $name:ident: $t:ty),* $(,)?) => {
        impl PartialConfig {
            $($(#[$m])* pub fn $name(&self) -> $t { self.$name })*
        }
        impl PartialConfigBuilder {
            $($(#[$m])* pub fn $name(mut self, v: $t) -> Self { self.0.$name = v; self })*
        }
    };
}

/// Builds a [`PartialConfig`], checking every value.
#[derive(Clone, Copy, Debug)]
pub struct PartialConfigBuilder(PartialConfig);

fields! {
    /// The proportional gain, in `[0, 100]`. Default 1.
    kp: f64,
    /// The integral gain, in `[0, 100]`. Default 0.2.
    ki: f64,
    /// The derivative gain, in `[0, 100]`. Default 0.
    kd: f64,
    /// The integral's upper bound, in `[0, 1000]`. Default 10.
    integral_upper_cap: f64,
    /// The integral's lower bound, in `[−1000, 0]`. Default −10.
    integral_lower_cap: f64,
    /// The window the error rate is measured over: a whole number of intervals. Default 10 s.
    window: Duration,
    /// How often the window slides and the controller updates, in `[1ms, window]`. Default 1 s.
    interval: Duration,
    /// The dead zone above the ideal error rate, as a share of it, in `[0, 10]`. Default 0.25.
    dead_zone_ratio: f64,
    /// The first guess of the ideal error rate, in `[0, ideal_error_rate_cap]`. Default 0.05.
    initial_error_rate: f64,
    /// Observations above this never teach the ideal rate, in `[0, 1)`. Default 0.1.
    ideal_error_rate_cap: f64,
}

impl PartialConfig {
    /// A builder starting from Semian's defaults.
    pub fn builder() -> PartialConfigBuilder {
        PartialConfigBuilder(Self::default())
    }

    /// The seed of the rejection draws, if set.
    pub fn seed(&self) -> Option<u64> {
        self.seed
    }
}

impl PartialConfigBuilder {
    /// The seed of the rejection draws. Default: from the OS.
    pub fn seed(mut self, seed: u64) -> Self {
        self.0.seed = Some(seed);
        self
    }

    /// The configuration.
    pub fn build(self) -> Result<PartialConfig, ConfigError> {
        let c = self.0;
        let within = |field: &str, v: f64, lo: f64, hi: f64, allowed: &str| {
            if v.is_finite() && (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(ConfigError::new(field, v, allowed))
            }
        };
        within("kp", c.kp, 0.0, 100.0, "in [0, 100]")?;
        within("ki", c.ki, 0.0, 100.0, "in [0, 100]")?;
        within("kd", c.kd, 0.0, 100.0, "in [0, 100]")?;
        if c.kp == 0.0 && c.ki == 0.0 {
            return Err(ConfigError::new(
                "kp",
                c.kp,
                "positive when ki is 0 (with both 0 the breaker never rejects)",
            ));
        }
        within(
            "integral_upper_cap",
            c.integral_upper_cap,
            0.0,
            1000.0,
            "in [0, 1000]",
        )?;
        within(
            "integral_lower_cap",
            c.integral_lower_cap,
            -1000.0,
            0.0,
            "in [-1000, 0]",
        )?;
        crate::check_window("window", c.window, c.interval).map_err(|e| {
            if e.field() == "window.bucket" {
                ConfigError::new("interval", e.value(), e.allowed())
            } else {
                ConfigError::new(
                    "window",
                    e.value(),
                    format!(
                        "a whole number (1 to 3600) of intervals of {:?}",
                        c.interval
                    ),
                )
            }
        })?;
        within(
            "dead_zone_ratio",
            c.dead_zone_ratio,
            0.0,
            10.0,
            "in [0, 10]",
        )?;
        if !(c.ideal_error_rate_cap.is_finite() && (0.0..1.0).contains(&c.ideal_error_rate_cap)) {
            return Err(ConfigError::new(
                "ideal_error_rate_cap",
                c.ideal_error_rate_cap,
                "in [0, 1)",
            ));
        }
        within(
            "initial_error_rate",
            c.initial_error_rate,
            0.0,
            c.ideal_error_rate_cap,
            &format!("in [0, ideal_error_rate_cap = {}]", c.ideal_error_rate_cap),
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

    use super::PartialConfig;

    use crate::de::checked;

    /// `v` finite and in `[lo, hi]`, as the builder checks it.
    fn within(field: &str, v: f64, lo: f64, hi: f64) -> Result<(), ConfigError> {
        if v.is_finite() && (lo..=hi).contains(&v) {
            Ok(())
        } else {
            Err(ConfigError::new(field, v, format!("in [{lo}, {hi}]")))
        }
    }

    // Each field's own range, checked as it is read: an error points at the field's line.
    checked! {
        kp: f64 = |v| within("kp", *v, 0.0, 100.0);
        ki: f64 = |v| within("ki", *v, 0.0, 100.0);
        kd: f64 = |v| within("kd", *v, 0.0, 100.0);
        integral_upper_cap: f64 = |v| within("integral_upper_cap", *v, 0.0, 1000.0);
        integral_lower_cap: f64 = |v| within("integral_lower_cap", *v, -1000.0, 0.0);
        dead_zone_ratio: f64 = |v| within("dead_zone_ratio", *v, 0.0, 10.0);
        ideal_error_rate_cap: f64 = |v| {
            if v.is_finite() && (0.0..1.0).contains(v) {
                Ok(())
            } else {
                Err(ConfigError::new("ideal_error_rate_cap", *v, "in [0, 1)"))
            }
        };
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawPartialConfig {
        #[serde(default, deserialize_with = "kp")]
        kp: Option<f64>,
        #[serde(default, deserialize_with = "ki")]
        ki: Option<f64>,
        #[serde(default, deserialize_with = "kd")]
        kd: Option<f64>,
        #[serde(default, deserialize_with = "integral_upper_cap")]
        integral_upper_cap: Option<f64>,
        #[serde(default, deserialize_with = "integral_lower_cap")]
        integral_lower_cap: Option<f64>,
        #[serde(with = "tripline::duration::serde::option", default)]
        window: Option<Duration>,
        #[serde(with = "tripline::duration::serde::option", default)]
        interval: Option<Duration>,
        #[serde(default, deserialize_with = "dead_zone_ratio")]
        dead_zone_ratio: Option<f64>,
        initial_error_rate: Option<f64>,
        #[serde(default, deserialize_with = "ideal_error_rate_cap")]
        ideal_error_rate_cap: Option<f64>,
        seed: Option<u64>,
    }

    impl TryFrom<RawPartialConfig> for PartialConfig {
        type Error = ConfigError;
        fn try_from(r: RawPartialConfig) -> Result<Self, ConfigError> {
            let d = PartialConfig::default();
            let mut b = PartialConfig::builder()
                .kp(r.kp.unwrap_or(d.kp))
                .ki(r.ki.unwrap_or(d.ki))
                .kd(r.kd.unwrap_or(d.kd))
                .integral_upper_cap(r.integral_upper_cap.unwrap_or(d.integral_upper_cap))
                .integral_lower_cap(r.integral_lower_cap.unwrap_or(d.integral_lower_cap))
                .window(r.window.unwrap_or(d.window))
                .interval(r.interval.unwrap_or(d.interval))
                .dead_zone_ratio(r.dead_zone_ratio.unwrap_or(d.dead_zone_ratio))
                .initial_error_rate(r.initial_error_rate.unwrap_or(d.initial_error_rate))
                .ideal_error_rate_cap(r.ideal_error_rate_cap.unwrap_or(d.ideal_error_rate_cap));
            if let Some(s) = r.seed {
                b = b.seed(s);
            }
            b.build()
        }
    }
}
