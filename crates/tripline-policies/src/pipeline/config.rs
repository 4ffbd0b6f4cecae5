//! A pipeline's settings as data: every stage from one configuration table.

use std::time::Duration;

use rand::SeedableRng;
use tripline::{BreakerConfig, CircuitBreaker, Clock, ConfigError, MonotonicClock};

use super::{Pipeline, PipelineBuilder, RetryPlacement};
use crate::bulkhead::{Bulkhead, BulkheadConfig};
use crate::chaos::{Chaos, ChaosConfig};
use crate::gate::{Gate, GateConfig};
use crate::limiter::{Limiter, LimiterConfig};
use crate::partial::{PartialBreaker, PartialConfig};
use crate::retry::RetryConfig;
use crate::shed::{ShedConfig, Shedder};
use crate::throttle::{Throttle, ThrottleConfig};

/// The settings of a [`Pipeline`] for one dependency, every stage optional (feature
/// `serde`): one table per stage, with the field names of each stage's configuration, in
/// any order (the stages are always assembled in the pipeline's order).
///
/// ```toml
#[doc = include_str!("../../docs/pipeline.toml")]
/// ```
///
/// A bad value is refused with the field, the value and what is allowed, at the line of
/// the field. [`build`](Self::build) makes every stage (the breaker named after the
/// dependency); [`builder`](Self::builder) stops short of building, for what a file cannot
/// say: a classifier, a retry predicate, the reqwest defaults
/// ([`PipelineBuilder::reqwest`]), a breaker from a registry
/// ([`Pipeline::with_breaker`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use tripline_policies::pipeline::{PipelineConfig, Stage};
///
/// let config: PipelineConfig = toml::from_str(include_str!("../../docs/pipeline.toml"))?;
/// let pipeline = config.build("vendor")?;
/// assert_eq!(
///     pipeline.order(),
///     [Stage::Retry, Stage::Breaker, Stage::Gate, Stage::Bulkhead, Stage::Throttle, Stage::Timeout]
/// );
/// assert_eq!(pipeline.timeout(), Some(Duration::from_secs(2)));
/// assert_eq!(pipeline.breaker().unwrap().name(), "vendor");
/// let answer = pipeline.call(|| async { Ok::<_, std::io::Error>(42) }).await?;
/// assert_eq!(answer, 42);
///
/// let err = toml::from_str::<PipelineConfig>("timeout = \"2s\"\n[retry]\nmax_attempts = 0\n")
///     .unwrap_err();
/// assert_eq!(err.message(), "max_attempts must be in [1, 100], got 0");
/// assert!(err.to_string().contains("line 3"), "{err}");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    #[serde(default, deserialize_with = "timeout")]
    timeout: Option<Duration>,
    #[serde(default)]
    retry_inside_breaker: bool,
    #[serde(default)]
    breaker: Option<BreakerConfig>,
    #[serde(default)]
    retry: Option<RetryConfig>,
    #[serde(default)]
    partial: Option<PartialConfig>,
    #[serde(default)]
    gate: Option<GateConfig>,
    #[serde(default)]
    bulkhead: Option<BulkheadConfig>,
    #[serde(default)]
    shed: Option<ShedConfig>,
    #[serde(default)]
    limiter: Option<LimiterConfig>,
    #[serde(default)]
    throttle: Option<ThrottleConfig>,
    #[serde(default)]
    chaos: Option<ChaosConfig>,
}

crate::de::checked! {
    timeout: dur = |v| crate::timeout::check("timeout", v).map(drop);
}

impl PipelineConfig {
    /// The per-attempt timeout, if set.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Whether the retry sits inside the breaker.
    pub fn retry_inside_breaker(&self) -> bool {
        self.retry_inside_breaker
    }

    /// The breaker's settings, if the pipeline has a breaker of its own.
    pub fn breaker(&self) -> Option<&BreakerConfig> {
        self.breaker.as_ref()
    }

    /// The retry's settings, if set.
    pub fn retry(&self) -> Option<&RetryConfig> {
        self.retry.as_ref()
    }

    /// The partial breaker's settings, if set.
    pub fn partial(&self) -> Option<&PartialConfig> {
        self.partial.as_ref()
    }

    /// The gate's settings, if set.
    pub fn gate(&self) -> Option<&GateConfig> {
        self.gate.as_ref()
    }

    /// The bulkhead's settings, if set.
    pub fn bulkhead(&self) -> Option<&BulkheadConfig> {
        self.bulkhead.as_ref()
    }

    /// The shedder's settings, if set.
    pub fn shed(&self) -> Option<&ShedConfig> {
        self.shed.as_ref()
    }

    /// The limiter's settings, if set.
    pub fn limiter(&self) -> Option<&LimiterConfig> {
        self.limiter.as_ref()
    }

    /// The throttle's settings, if set.
    pub fn throttle(&self) -> Option<&ThrottleConfig> {
        self.throttle.as_ref()
    }

    /// The fault injector's settings, if set.
    pub fn chaos(&self) -> Option<&ChaosConfig> {
        self.chaos.as_ref()
    }

    /// Every stage built, on the production clock; the breaker (if configured) named `name`.
    pub fn build(&self, name: &str) -> Result<Pipeline, ConfigError> {
        self.builder(name)?.build()
    }

    /// A builder holding every stage, on the production clock, for what a file cannot say
    /// (a classifier, a retry predicate, [`reqwest`](PipelineBuilder::reqwest)).
    pub fn builder(&self, name: &str) -> Result<PipelineBuilder, ConfigError> {
        let b = self.stages(Pipeline::builder(), MonotonicClock::new())?;
        Ok(match &self.breaker {
            Some(c) => b.breaker(CircuitBreaker::new(name.to_string(), c.clone())),
            None => b,
        })
    }

    /// A builder holding every stage, each that reads time on `clock` (the breaker, the
    /// budgets, the throttle, the limiter, the partial breaker); the timeout, the backoff and
    /// the bulkhead's wait run on tokio's timer.
    pub fn builder_with_clock<C: Clock + Clone>(
        &self,
        name: &str,
        clock: C,
    ) -> Result<PipelineBuilder<C>, ConfigError> {
        let b = self
            .stages(Pipeline::builder(), clock.clone())?
            .without_breaker::<C>();
        Ok(match &self.breaker {
            Some(c) => b.breaker(CircuitBreaker::with_clock(
                name.to_string(),
                c.clone(),
                clock,
            )),
            None => b,
        })
    }

    /// Every stage but the breaker.
    fn stages<C: Clock + Clone>(
        &self,
        mut b: PipelineBuilder,
        clock: C,
    ) -> Result<PipelineBuilder, ConfigError> {
        if let Some(t) = self.timeout {
            b = b.timeout(t);
        }
        if self.retry_inside_breaker {
            b = b.placement(RetryPlacement::InsideBreaker);
        }
        if let Some(r) = &self.retry {
            b = b.retry(r.policy_with_clock(clock.clone())?);
        }
        if let Some(c) = self.partial {
            b = b.partial(PartialBreaker::with_clock(c, clock.clone()));
        }
        if let Some(c) = self.gate {
            b = b.gate(Gate::new(c));
        }
        if let Some(c) = self.bulkhead {
            b = b.bulkhead(Bulkhead::new(c));
        }
        if let Some(c) = self.shed {
            b = b.shed(Shedder::new(c));
        }
        if let Some(c) = self.limiter {
            b = b.limiter(Limiter::with_clock(c, clock.clone()));
        }
        if let Some(c) = self.throttle {
            b = b.throttle(Throttle::with_clock_and_rng(
                c,
                clock,
                rand_pcg::Pcg64Mcg::from_os_rng(),
            ));
        }
        if let Some(c) = &self.chaos {
            b = b.chaos(Chaos::new(c.clone()));
        }
        Ok(b)
    }
}
