//! The registry's configuration: named breaker configurations and which keys use them,
//! bounds, and the configured operator overrides; and the record of what is in force.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use super::key::{Key, OperatorState, Selector, check_name};
use crate::config::BreakerConfig;
use crate::error::ConfigError;

/// A registry's configuration: named breaker configurations and which keys use them, bounds,
/// and operator overrides. Loadable from TOML (feature `serde`), and written back to it
/// (`Serialize`: `toml::to_string` reads back as the same configuration):
///
/// ```toml
/// max_breakers = 10000
/// idle_after = "10m"
///
/// [configs.default]
/// minimum_calls = 20
///
/// [configs.vendor]
/// window = { kind = "count", size = 20 }
/// minimum_calls = 10
///
/// [dependencies]
/// exercise-catalog = "vendor"      # every key of the dependency
///
/// [keys]
/// "payments/tenant=acme" = "vendor"  # one key
///
/// [operator]
/// "recommendations" = "forced-open"  # a key or a whole dependency
/// ```
///
/// ```
/// use tripline::registry::RegistryConfig;
/// use tripline::BreakerConfig;
///
/// let config = RegistryConfig::default()
///     .with_config("vendor", BreakerConfig::builder().count_window(20).minimum_calls(10).build()?)
///     .with_dependency("exercise-catalog", "vendor");
/// assert!(config.validate().is_ok());
/// let bad = RegistryConfig::default().with_dependency("x", "nope");
/// assert_eq!(
///     bad.validate().unwrap_err().to_string(),
///     "dependencies.x must be a configuration name (one of: default), got \"nope\""
/// );
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct RegistryConfig {
    #[cfg_attr(feature = "serde", serde(default = "default_max"))]
    pub(super) max_breakers: usize,
    #[cfg_attr(
        feature = "serde",
        serde(default = "default_idle", with = "crate::duration::serde")
    )]
    pub(super) idle_after: Duration,
    #[cfg_attr(feature = "serde", serde(default))]
    pub(super) configs: BTreeMap<String, BreakerConfig>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub(super) dependencies: BTreeMap<String, String>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub(super) keys: BTreeMap<String, String>,
    #[cfg_attr(feature = "serde", serde(default))]
    pub(super) operator: BTreeMap<String, OperatorState>,
}

fn default_max() -> usize {
    10_000
}

fn default_idle() -> Duration {
    Duration::from_secs(600)
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            max_breakers: default_max(),
            idle_after: default_idle(),
            configs: BTreeMap::new(),
            dependencies: BTreeMap::new(),
            keys: BTreeMap::new(),
            operator: BTreeMap::new(),
        }
    }
}

impl RegistryConfig {
    /// At most this many breakers (default 10 000).
    pub fn with_max_breakers(mut self, n: usize) -> Self {
        self.max_breakers = n;
        self
    }

    /// Breakers unused this long may be evicted (default 10 minutes).
    pub fn with_idle_after(mut self, d: Duration) -> Self {
        self.idle_after = d;
        self
    }

    /// Adds a named breaker configuration; `default` replaces the built-in default.
    pub fn with_config(mut self, name: &str, config: BreakerConfig) -> Self {
        self.configs.insert(name.to_string(), config);
        self
    }

    /// Every key of `dependency` uses the configuration `name`.
    pub fn with_dependency(mut self, dependency: &str, name: &str) -> Self {
        self.dependencies
            .insert(dependency.to_string(), name.to_string());
        self
    }

    /// The key (written `dep` or `dep/kind=value`) uses the configuration `name`.
    pub fn with_key(mut self, key: &str, name: &str) -> Self {
        self.keys.insert(key.to_string(), name.to_string());
        self
    }

    /// An operator override for a key or a whole dependency.
    pub fn with_operator(mut self, selector: &str, state: OperatorState) -> Self {
        self.operator.insert(selector.to_string(), state);
        self
    }

    /// Parses a TOML document.
    #[cfg(feature = "serde")]
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let c: Self = toml::from_str(text).map_err(|e| {
            ConfigError::new(
                "registry",
                e.to_string().trim_end(),
                "a valid registry configuration",
            )
        })?;
        c.validate()?;
        Ok(c)
    }

    /// Checks bounds, names and references.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_breakers == 0 || self.max_breakers > 100_000_000 {
            return Err(ConfigError::new(
                "max_breakers",
                self.max_breakers,
                "in [1, 100000000]",
            ));
        }
        if self.idle_after < Duration::from_millis(1) {
            return Err(ConfigError::new(
                "idle_after",
                crate::config::fmt_d(self.idle_after),
                "at least 1ms",
            ));
        }
        for (name, c) in &self.configs {
            check_name("configs", name, 128)?;
            c.validate().map_err(|e| {
                ConfigError::new(
                    format!("configs.{name}.{}", e.field()),
                    e.value(),
                    e.allowed(),
                )
            })?;
        }
        let known = || {
            let mut names: Vec<&str> = self.configs.keys().map(String::as_str).collect();
            if !self.configs.contains_key("default") {
                names.insert(0, "default");
            }
            names.join(", ")
        };
        let check_ref = |field: String, name: &str| {
            if name == "default" || self.configs.contains_key(name) {
                Ok(())
            } else {
                Err(ConfigError::new(
                    field,
                    format!("{name:?}"),
                    format!("a configuration name (one of: {})", known()),
                ))
            }
        };
        for (dep, name) in &self.dependencies {
            Key::new(dep)?;
            check_ref(format!("dependencies.{dep}"), name)?;
        }
        for (key, name) in &self.keys {
            key.parse::<Key>()?;
            check_ref(format!("keys.{key}"), name)?;
        }
        for sel in self.operator.keys() {
            sel.parse::<Key>()?;
        }
        Ok(())
    }

    /// The most breakers the registry holds.
    ///
    /// ```
    /// use tripline::registry::RegistryConfig;
    /// assert_eq!(RegistryConfig::default().with_max_breakers(64).max_breakers(), 64);
    /// ```
    pub fn max_breakers(&self) -> usize {
        self.max_breakers
    }

    /// How long a breaker may go unused before [`Registry::evict_idle`](super::Registry::evict_idle)
    /// may drop it.
    pub fn idle_after(&self) -> Duration {
        self.idle_after
    }

    /// The breaker configuration `key` uses: the key's own, else its dependency's, else
    /// `default` (the default configuration when none is named so), as the registry resolves
    /// it. Keyed holders of other breakers (the fleet-wide ones of `tripline-redis`) resolve
    /// keys the same way with it.
    ///
    /// ```
    /// use tripline::BreakerConfig;
    /// use tripline::registry::{Key, RegistryConfig, ScopeKind};
    ///
    /// let strict = BreakerConfig::builder().minimum_calls(5).build()?;
    /// let config = RegistryConfig::default()
    ///     .with_config("strict", strict.clone())
    ///     .with_dependency("payments", "strict");
    /// let key = Key::scoped("payments", ScopeKind::Tenant, "acme")?;
    /// assert_eq!(config.config_for(&key), strict);
    /// assert_eq!(config.config_for(&Key::new("search")?), BreakerConfig::default());
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn config_for(&self, key: &Key) -> BreakerConfig {
        let name = self.config_name_for(key);
        self.configs
            .get(name)
            .or_else(|| self.configs.get("default"))
            .cloned()
            .unwrap_or_default()
    }

    /// The name of the configuration `key` uses.
    pub(super) fn config_name_for(&self, key: &Key) -> &str {
        self.keys
            .get(&key.to_string())
            .or_else(|| self.dependencies.get(key.dependency()))
            .map_or("default", String::as_str)
    }
}

/// The registry configuration in force, each named breaker configuration behind one `Arc`
/// that every breaker using it shares (a key's breaker holds a pointer, not a copy).
pub(super) struct Active {
    pub(super) config: RegistryConfig,
    shared: BTreeMap<String, Arc<BreakerConfig>>,
}

impl Active {
    /// The configuration in force; a named configuration equal to one of `previous` keeps its
    /// `Arc`, so the breakers built before and after a reload still share it.
    pub(super) fn new(config: RegistryConfig, previous: Option<&Active>) -> Self {
        let arc = |c: &BreakerConfig| {
            previous
                .and_then(|p| p.shared.values().find(|a| ***a == *c))
                .cloned()
                .unwrap_or_else(|| Arc::new(c.clone()))
        };
        let mut shared: BTreeMap<String, Arc<BreakerConfig>> = config
            .configs
            .iter()
            .map(|(name, c)| (name.clone(), arc(c)))
            .collect();
        shared
            .entry("default".to_string())
            .or_insert_with(|| arc(&BreakerConfig::default()));
        Self { config, shared }
    }

    pub(super) fn config_for(&self, key: &Key) -> Arc<BreakerConfig> {
        let name = self.config.config_name_for(key);
        let found = self.shared.get(name).or_else(|| self.shared.get("default"));
        found.cloned().unwrap_or_default()
    }
}

/// The two layers of operator overrides (see the registry's docs).
#[derive(Debug, Default)]
pub(super) struct Overrides {
    /// From the configuration's `[operator]` section; replaced by each reload.
    pub(super) file: HashMap<String, OperatorState>,
    /// From [`Registry::set_operator`](super::Registry::set_operator); kept until
    /// [`Registry::clear_operator`](super::Registry::clear_operator). Keyed by the selector
    /// itself: the unscoped key `prices` and the dependency `prices` (every key of it) are
    /// different selectors.
    pub(super) runtime: HashMap<Selector, OperatorState>,
}

impl Overrides {
    pub(super) fn for_key(&self, key: &Key) -> OperatorState {
        let k = key.to_string();
        let d = key.dependency();
        self.runtime
            .get(&Selector::Key(key.clone()))
            .or_else(|| self.runtime.get(&Selector::Dependency(d.to_string())))
            .or_else(|| self.file.get(&k))
            .or_else(|| self.file.get(d))
            .copied()
            .unwrap_or_default()
    }
}

/// What is in force: the active configuration and the operator overrides. The registry's one
/// record; each breaker reads its part of it under its own lock when it follows it.
pub(super) struct Record {
    pub(super) active: Arc<Active>,
    pub(super) overrides: Overrides,
}

impl Record {
    pub(super) fn new(config: RegistryConfig) -> Self {
        Self {
            overrides: Overrides {
                file: config.operator.clone().into_iter().collect(),
                runtime: HashMap::new(),
            },
            active: Arc::new(Active::new(config, None)),
        }
    }

    /// The configuration and the override in force for `key`.
    pub(super) fn for_key(&self, key: &Key) -> (Arc<BreakerConfig>, Option<crate::State>) {
        (
            self.active.config_for(key),
            self.overrides.for_key(key).held(),
        )
    }

    /// Replaces the configuration (and its `[operator]` section), keeping the run-time
    /// overrides.
    pub(super) fn reload(&mut self, config: RegistryConfig) {
        self.overrides.file = config.operator.clone().into_iter().collect();
        self.active = Arc::new(Active::new(config, Some(&self.active)));
    }
}
