//! A service's whole resilience file: a registry's breakers and a pipeline per dependency.

use std::collections::BTreeMap;

use tripline::ConfigError;
use tripline::registry::{Registry, RegistryConfig};

use crate::pipeline::{Pipeline, PipelineBuilder, PipelineConfig};

/// A service's resilience settings in one file (feature `serde`), as resilience4j's
/// `application.yml` holds an instance per backend: a [`RegistryConfig`] under `[registry]`
/// (keyed breakers: per tenant, per host, per shard, with named configurations) and a
/// [`PipelineConfig`] per dependency under `[pipelines.NAME]`.
///
/// ```toml
#[doc = include_str!("../../docs/resilience.toml")]
/// ```
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tripline::registry::{Key, ScopeKind};
/// use tripline_policies::config::ResilienceConfig;
///
/// let config: ResilienceConfig = toml::from_str(include_str!("../../docs/resilience.toml"))?;
/// let registry = config.registry()?;
/// let pipeline = config.pipeline("vendor")?;
/// // One breaker per tenant, from the registry, around the vendor's retry, budget and timeout.
/// let breaker = registry.get(&Key::scoped("vendor", ScopeKind::Tenant, "acme")?)?;
/// let price = pipeline
///     .with_breaker(breaker)
///     .call(|| async { Ok::<_, std::io::Error>(42) })
///     .await?;
/// assert_eq!(price, 42);
///
/// let err = config.pipeline("catalog").unwrap_err();
/// assert_eq!(err.to_string(), "pipelines must be a dependency with a [pipelines.catalog] table (one of: vendor), got \"catalog\"");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResilienceConfig {
    #[serde(default)]
    registry: Option<RegistryConfig>,
    #[serde(default)]
    pipelines: BTreeMap<String, PipelineConfig>,
}

impl ResilienceConfig {
    /// The registry's settings, if the file has a `[registry]` table.
    pub fn registry_config(&self) -> Option<&RegistryConfig> {
        self.registry.as_ref()
    }

    /// The registry (its defaults without a `[registry]` table), validated.
    pub fn registry(&self) -> Result<Registry, ConfigError> {
        Registry::new(self.registry.clone().unwrap_or_default())
    }

    /// The pipelines' settings, by dependency.
    pub fn pipelines(&self) -> &BTreeMap<String, PipelineConfig> {
        &self.pipelines
    }

    /// The settings under `[pipelines.NAME]`, or an error naming the ones there are.
    pub fn pipeline_config(&self, name: &str) -> Result<&PipelineConfig, ConfigError> {
        self.pipelines.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.pipelines.keys().map(String::as_str).collect();
            ConfigError::new(
                "pipelines",
                format!("{name:?}"),
                format!(
                    "a dependency with a [pipelines.{name}] table (one of: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })
    }

    /// The pipeline of `name`, every stage built (see [`PipelineConfig::build`]).
    pub fn pipeline(&self, name: &str) -> Result<Pipeline, ConfigError> {
        self.pipeline_config(name)?.build(name)
    }

    /// A builder holding the pipeline of `name`'s stages (see [`PipelineConfig::builder`]).
    pub fn pipeline_builder(&self, name: &str) -> Result<PipelineBuilder, ConfigError> {
        self.pipeline_config(name)?.builder(name)
    }
}
