//! Keyed breakers: one breaker per dependency and, where the dependency is partitioned, per
//! endpoint, host, tenant, shard or region, so that one failing partition does not disable the
//! healthy ones (a breaker aggregates outcomes into one verdict: with one breaker for a sharded
//! dependency, 10 % hot shards would short-circuit 100 % of the traffic, the partial-failure
//! trap Marc Brooker describes).
//!
//! * Breakers are created on first use from a named configuration: the key's own, else its
//!   dependency's, else `default`.
//! * Lookups take no lock (a `papaya` concurrent map with lock-free reads).
//! * Memory is bounded: at most `max_breakers`, and breakers idle for `idle_after` are dropped
//!   by [`Registry::evict_idle`]. A breaker is never evicted while it is not Closed, while its
//!   window holds failures or slow calls, while its ramp after recovery runs or its open
//!   backoff still remembers a recent open period, while a call is in flight, or while anyone
//!   outside the registry holds a handle to it: a missing breaker reads as a fresh Closed one,
//!   so evicting an Open breaker would admit everything (and a ramping one, all at once).
//! * Keys are cheap: every breaker of a named configuration shares one `Arc` of it, and a
//!   breaker holds only its closed-path part (about 410 bytes with a count window of 100) until
//!   it first transitions, is reconfigured by a reload, or gets a listener
//!   ([`Registry::subscribe`], or the `tracing` feature's listener on every key); then it also
//!   allocates the part transitions need (about 470 bytes).
//! * Operators steer breakers per key or per dependency, from code or from the configuration;
//!   a dependency-wide override also applies to breakers created later. Every change is an
//!   event on the breakers' listeners.
//! * [`Registry::reload`] applies a new configuration, keeping each breaker's state and window
//!   where the window shape is unchanged.
//!
//! # Lifecycle of an entry
//! An entry is *live*, *retiring* or *gone*, in one atomic word. Eviction and a reload's
//! rebuild retire an entry first (a compare-and-swap from live), then check, with the entry
//! retiring, that it may go (Closed, clean, and no handle held outside the registry), and only
//! then remove or replace it; if the check fails the entry is live again. A lookup clones the
//! breaker handle and then reads the word: a retiring or gone entry makes it drop the clone and
//! look again. With a sequentially consistent fence on both sides, either the lookup sees the
//! entry retiring, or the retiring side sees the lookup's handle and keeps the entry; so a
//! lookup never returns a breaker the registry no longer holds, and a breaker in use, or one
//! that is not Closed, is never replaced.
//!
//! # Operator overrides
//! Overrides come in two layers: the configuration's `[operator]` section, replaced by each
//! reload, and the run-time layer set by [`Registry::set_operator`], which a reload never
//! touches and only [`Registry::clear_operator`] removes. For a key, the first that is set of
//! run-time key, run-time dependency, configured key and configured dependency decides; so a
//! kill switch thrown during an incident stays thrown through every configuration sync. Every
//! change of either layer moves a version; a breaker remembers the version it last applied,
//! and a lookup that finds it behind applies the overrides in force before returning it, so a
//! breaker created while an override changes still gets it.
//!
//! Keys end up in logs, metrics labels and (with a shared store) a coordinator's keyspace:
//! they must not carry sensitive data.
//!
//! ```
//! use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
//!
//! let registry = Registry::new(RegistryConfig::default())?;
//! let acme = Key::scoped("payments", ScopeKind::Tenant, "acme")?;
//! let breaker = registry.get(&acme)?;
//! breaker.call(|| Ok::<_, ()>("charged")).unwrap();
//! assert_eq!(acme.to_string(), "payments/tenant=acme");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::CircuitBreaker;
use crate::clock::{Clock, MonotonicClock, nanos};
use crate::config::BreakerConfig;
use crate::error::ConfigError;
use crate::event::Listener;
use crate::lifecycle::{Life, publish_fence};
use crate::state::State;

/// What part of a dependency a keyed breaker covers.
///
/// ```
/// use tripline::registry::ScopeKind;
/// assert_eq!(ScopeKind::Shard.as_str(), "shard");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeKind {
    /// One endpoint (route, RPC method) of the dependency.
    Endpoint,
    /// One host or instance.
    Host,
    /// One tenant or customer.
    Tenant,
    /// One shard or cell.
    Shard,
    /// One region or zone.
    Region,
}

impl ScopeKind {
    const ALL: [ScopeKind; 5] = [
        ScopeKind::Endpoint,
        ScopeKind::Host,
        ScopeKind::Tenant,
        ScopeKind::Shard,
        ScopeKind::Region,
    ];

    /// The lowercase name used in keys (`tenant`).
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Endpoint => "endpoint",
            ScopeKind::Host => "host",
            ScopeKind::Tenant => "tenant",
            ScopeKind::Shard => "shard",
            ScopeKind::Region => "region",
        }
    }
}

/// A breaker's key: a dependency and an optional scope. Written `payments` or
/// `payments/tenant=acme`.
///
/// ```
/// use tripline::registry::{Key, ScopeKind};
///
/// let k: Key = "catalog/shard=17".parse()?;
/// assert_eq!(k.dependency(), "catalog");
/// assert_eq!(k.scope(), Some((ScopeKind::Shard, "17")));
/// assert!(Key::new("").is_err());
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Key {
    dependency: Arc<str>,
    scope: Option<(ScopeKind, Arc<str>)>,
    /// The key's hash, computed once with a per-process random seed: a lookup hashes 8 bytes
    /// instead of the key's strings, and crafted tenant names cannot aim at one bucket.
    hash: u64,
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.dependency == other.dependency && self.scope == other.scope
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (&self.dependency, &self.scope).cmp(&(&other.dependency, &other.scope))
    }
}

fn key_hash(dependency: &str, scope: Option<(ScopeKind, &str)>) -> u64 {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<std::hash::RandomState> = std::sync::OnceLock::new();
    SEED.get_or_init(std::hash::RandomState::new)
        .hash_one((dependency, scope))
}

fn check_name(field: &str, v: &str, max: usize) -> Result<(), ConfigError> {
    let ok = !v.is_empty()
        && v.len() <= max
        && v.chars()
            .all(|c| !c.is_control() && !c.is_whitespace() && !"/={}".contains(c));
    if !ok {
        return Err(ConfigError::new(
            field,
            format!("{v:?}"),
            format!(
                "1 to {max} bytes without whitespace, control characters, '/', '=', '{{' or '}}'"
            ),
        ));
    }
    // Two names that differ only by a character nobody sees (U+200B) or by a bidirectional
    // override (`shard=\u{202E}71` shows as `shard=17`) would look like one key in a log, a
    // metric label or an operator's page: such characters are refused.
    if let Some(c) = v.chars().find(|&c| invisible(c)) {
        return Err(ConfigError::new(
            field,
            format!(
                "{:?} (U+{:04X} at byte {})",
                v,
                u32::from(c),
                v.find(c).unwrap_or(0)
            ),
            "a name without invisible or bidirectional-control characters (Unicode's \
             Default_Ignorable_Code_Point: zero-width spaces and joiners, bidi embeddings, \
             overrides, isolates and marks, the byte-order mark, variation selectors, tags)",
        ));
    }
    Ok(())
}

/// Whether `c` is a Unicode `Default_Ignorable_Code_Point` (DerivedCoreProperties.txt,
/// Unicode 15.1): characters a renderer shows as nothing, the bidirectional controls among
/// them.
fn invisible(c: char) -> bool {
    matches!(
        u32::from(c),
        0x00AD
            | 0x034F
            | 0x061C
            | 0x115F..=0x1160
            | 0x17B4..=0x17B5
            | 0x180B..=0x180F
            | 0x200B..=0x200F
            | 0x202A..=0x202E
            | 0x2060..=0x206F
            | 0x3164
            | 0xFE00..=0xFE0F
            | 0xFEFF
            | 0xFFA0
            | 0xFFF0..=0xFFF8
            | 0x1BCA0..=0x1BCA3
            | 0x1D173..=0x1D17A
            | 0xE0000..=0xE0FFF
    )
}

impl Key {
    /// The key of a whole dependency.
    pub fn new(dependency: &str) -> Result<Self, ConfigError> {
        check_name("key.dependency", dependency, 128)?;
        Ok(Self {
            dependency: dependency.into(),
            scope: None,
            hash: key_hash(dependency, None),
        })
    }

    /// The key of one part of a dependency.
    pub fn scoped(dependency: &str, kind: ScopeKind, value: &str) -> Result<Self, ConfigError> {
        check_name("key.dependency", dependency, 128)?;
        check_name("key.scope", value, 256)?;
        Ok(Self {
            dependency: dependency.into(),
            scope: Some((kind, value.into())),
            hash: key_hash(dependency, Some((kind, value))),
        })
    }

    /// The dependency.
    pub fn dependency(&self) -> &str {
        &self.dependency
    }

    /// The scope, if any.
    pub fn scope(&self) -> Option<(ScopeKind, &str)> {
        self.scope.as_ref().map(|(k, v)| (*k, &**v))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.dependency)?;
        if let Some((kind, v)) = &self.scope {
            write!(f, "/{}={v}", kind.as_str())?;
        }
        Ok(())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

impl std::str::FromStr for Key {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s.split_once('/') {
            None => Key::new(s),
            Some((dep, scope)) => {
                let Some((kind, value)) = scope.split_once('=') else {
                    return Err(ConfigError::new(
                        "key",
                        format!("{s:?}"),
                        "`dependency` or `dependency/kind=value`",
                    ));
                };
                let kind = ScopeKind::ALL
                    .into_iter()
                    .find(|k| k.as_str() == kind)
                    .ok_or_else(|| {
                        ConfigError::new(
                            "key.scope kind",
                            format!("{kind:?}"),
                            "one of endpoint, host, tenant, shard, region",
                        )
                    })?;
                Key::scoped(dep, kind, value)
            }
        }
    }
}

/// An operator's setting for a key or a whole dependency.
///
/// ```
/// use tripline::registry::OperatorState;
/// assert_eq!(OperatorState::default(), OperatorState::Auto);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum OperatorState {
    /// No override: the rules decide (a breaker left in an operator state is reset to Closed).
    #[default]
    Auto,
    /// Kill switch: reject everything.
    ForcedOpen,
    /// Permit everything, record nothing.
    Disabled,
    /// Shadow mode: record, report would-trip, never trip.
    MetricsOnly,
}

/// Which breakers an operator action targets.
///
/// ```
/// use tripline::registry::{Key, Selector};
/// let one = Selector::Key(Key::new("payments")?);
/// let all = Selector::Dependency("payments".into());
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Selector {
    /// Exactly this key.
    Key(Key),
    /// Every key of this dependency, scoped or not, now and later.
    Dependency(String),
}

impl Selector {
    /// Whether the action targets `key`.
    ///
    /// ```
    /// use tripline::registry::{Key, ScopeKind, Selector};
    /// let key = Key::scoped("payments", ScopeKind::Tenant, "acme")?;
    /// assert!(Selector::Dependency("payments".into()).selects(&key));
    /// assert!(!Selector::Key(Key::new("payments")?).selects(&key));
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn selects(&self, key: &Key) -> bool {
        match self {
            Selector::Key(k) => k == key,
            Selector::Dependency(d) => key.dependency() == d,
        }
    }
}

/// A registry's configuration: named breaker configurations and which keys use them, bounds,
/// and operator overrides. Loadable from TOML (feature `serde`):
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
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
pub struct RegistryConfig {
    #[cfg_attr(feature = "serde", serde(default = "default_max"))]
    max_breakers: usize,
    #[cfg_attr(
        feature = "serde",
        serde(default = "default_idle", with = "humantime_serde")
    )]
    idle_after: Duration,
    #[cfg_attr(feature = "serde", serde(default))]
    configs: BTreeMap<String, BreakerConfig>,
    #[cfg_attr(feature = "serde", serde(default))]
    dependencies: BTreeMap<String, String>,
    #[cfg_attr(feature = "serde", serde(default))]
    keys: BTreeMap<String, String>,
    #[cfg_attr(feature = "serde", serde(default))]
    operator: BTreeMap<String, OperatorState>,
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

    /// The name of the configuration `key` uses.
    fn config_name_for(&self, key: &Key) -> &str {
        self.keys
            .get(&key.to_string())
            .or_else(|| self.dependencies.get(key.dependency()))
            .map_or("default", String::as_str)
    }
}

/// The registry configuration in force, each named breaker configuration behind one `Arc`
/// that every breaker using it shares (a key's breaker holds a pointer, not a copy).
struct Active {
    config: RegistryConfig,
    shared: BTreeMap<String, Arc<BreakerConfig>>,
}

impl Active {
    /// The configuration in force; a named configuration equal to one of `previous` keeps its
    /// `Arc`, so the breakers built before and after a reload still share it.
    fn new(config: RegistryConfig, previous: Option<&Active>) -> Self {
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

    fn config_for(&self, key: &Key) -> Arc<BreakerConfig> {
        let name = self.config.config_name_for(key);
        let found = self.shared.get(name).or_else(|| self.shared.get("default"));
        found.cloned().unwrap_or_default()
    }
}

/// Why the registry refused a lookup.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The registry holds `max` breakers and none of them may be evicted (each is not Closed,
    /// holds failures, or is in use).
    #[error("breaker registry is full: {max} breakers, none evictable")]
    Full {
        /// The bound.
        max: usize,
    },
}

/// How many breakers of a dependency are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DependencySummary {
    /// Breakers of the dependency.
    pub breakers: usize,
    /// In each state, indexed like [`State::ALL`].
    pub by_state: [usize; 6],
}

impl DependencySummary {
    /// Breakers in `state`.
    pub fn in_state(&self, state: State) -> usize {
        self.by_state[state as usize]
    }
}

/// What a reload did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReloadReport {
    /// Breakers whose configuration changed in place (state and window kept).
    pub reconfigured: Vec<Key>,
    /// Closed breakers rebuilt because their window shape changed.
    pub rebuilt: Vec<Key>,
    /// Breakers whose window shape changed but which are not Closed: they keep the old
    /// configuration until they close and the next reload rebuilds them.
    pub deferred: Vec<Key>,
}

struct Entry<C: Clock> {
    breaker: CircuitBreaker<C>,
    /// The configuration the registry last applied to this breaker (shared, not a copy).
    config: Mutex<Arc<BreakerConfig>>,
    last_used: AtomicU64,
    /// Live, retiring or gone (see the module docs).
    life: Life,
    /// The override in force for this breaker and the override version it was computed at
    /// ([`NEVER`] until the first lookup applies it), and a lock-free copy of the override for
    /// the lookup's check that the breaker is still in it.
    applied: Mutex<OperatorState>,
    applied_version: AtomicU64,
    applied_state: AtomicU8,
    /// The configuration version this breaker was built or last reconfigured at.
    config_version: AtomicU64,
    /// Whether a lookup has handed the breaker out yet (the first one subscribes the
    /// `tracing` listener: a breaker that loses a creation race announces nothing).
    announced: AtomicBool,
    /// How many of the registry's listeners (in subscription order) this breaker has, or is
    /// being given by the thread that claimed them.
    listeners_added: AtomicUsize,
    #[cfg(feature = "metrics")]
    metrics: crate::observe::BreakerMetrics,
}

/// The two layers of operator overrides (see the module docs).
#[derive(Debug, Default)]
struct Overrides {
    /// From the configuration's `[operator]` section; replaced by each reload.
    file: HashMap<String, OperatorState>,
    /// From [`Registry::set_operator`]; kept until [`Registry::clear_operator`]. Keyed by
    /// the selector itself: the unscoped key `prices` and the dependency `prices` (every key
    /// of it) are different selectors.
    runtime: HashMap<Selector, OperatorState>,
}

impl Overrides {
    fn for_key(&self, key: &Key) -> OperatorState {
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

/// A bounded, lock-free-read registry of keyed breakers.
pub struct Registry<C: Clock + Clone = MonotonicClock> {
    map: papaya::HashMap<Key, Arc<Entry<C>>>,
    config: RwLock<Arc<Active>>,
    overrides: RwLock<Overrides>,
    /// Moves on every change of either override layer.
    override_version: AtomicU64,
    /// Moves on every reload.
    config_version: AtomicU64,
    /// Breakers held, counted by the lookups that insert and the maintenance that removes, so
    /// racing lookups cannot take the registry past `max_breakers`.
    count: AtomicUsize,
    listeners: Mutex<Vec<Arc<dyn Listener>>>,
    /// `listeners.len()`, readable without the lock.
    listener_count: AtomicUsize,
    maintenance: Mutex<()>,
    clock: C,
    #[cfg(feature = "metrics")]
    dependency_gauges: Mutex<crate::observe::DependencyGauges>,
}

impl<C: Clock + Clone> fmt::Debug for Registry<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("breakers", &self.len())
            .finish_non_exhaustive()
    }
}

struct Shared(Arc<dyn Listener>);

impl Listener for Shared {
    fn on_event(&self, event: &crate::Event) {
        self.0.on_event(event)
    }
    fn wants_call_events(&self) -> bool {
        self.0.wants_call_events()
    }
    fn wants_outcome_events(&self) -> bool {
        self.0.wants_outcome_events()
    }
}

impl Registry<MonotonicClock> {
    /// A registry on the production clock: the coarse (millisecond) one when every named
    /// configuration (and the default) allows it, else the precise one (see
    /// [`MonotonicClock::for_config`]; a configuration reloaded later with finer durations
    /// keeps the registry's clock, so build with [`with_clock`](Self::with_clock) to choose).
    pub fn new(config: RegistryConfig) -> Result<Self, ConfigError> {
        let coarse = std::iter::once(&BreakerConfig::default())
            .chain(config.configs.values())
            .all(|c| MonotonicClock::for_config(c).is_coarse());
        let clock = if coarse {
            MonotonicClock::coarse()
        } else {
            MonotonicClock::new()
        };
        Self::with_clock(config, clock)
    }
}

impl<C: Clock + Clone> Registry<C> {
    /// A registry whose breakers read `clock`.
    pub fn with_clock(config: RegistryConfig, clock: C) -> Result<Self, ConfigError> {
        config.validate()?;
        let overrides = Overrides {
            file: config.operator.clone().into_iter().collect(),
            runtime: HashMap::new(),
        };
        Ok(Self {
            map: papaya::HashMap::new(),
            config: RwLock::new(Arc::new(Active::new(config, None))),
            overrides: RwLock::new(overrides),
            override_version: AtomicU64::new(0),
            config_version: AtomicU64::new(0),
            count: AtomicUsize::new(0),
            listeners: Mutex::new(Vec::new()),
            listener_count: AtomicUsize::new(0),
            maintenance: Mutex::new(()),
            clock,
            #[cfg(feature = "metrics")]
            dependency_gauges: Mutex::new(Default::default()),
        })
    }

    /// Adds a listener to every breaker, existing and future: each breaker subscribes it
    /// exactly once, also when it is created while this runs.
    pub fn subscribe(&self, listener: impl Listener) {
        let listener: Arc<dyn Listener> = Arc::new(listener);
        let n = {
            let mut listeners = lock(&self.listeners);
            listeners.push(listener);
            listeners.len()
        };
        self.listener_count.store(n, Ordering::Release);
        for (_, e) in self.map.pin().iter() {
            self.catch_up(e);
        }
    }

    /// Gives `e`'s breaker the registry listeners it lacks; two loads when it lacks none. A
    /// breaker created while [`Registry::subscribe`] walks the map may be missed by the walk;
    /// its lookup then sees the new count and catches up here.
    #[inline]
    fn catch_up(&self, e: &Entry<C>) {
        if e.listeners_added.load(Ordering::Acquire) < self.listener_count.load(Ordering::Acquire) {
            self.subscribe_missing(e);
        }
    }

    #[cold]
    fn subscribe_missing(&self, e: &Entry<C>) {
        loop {
            let added = e.listeners_added.load(Ordering::Acquire);
            // A copy, so no lock is held while listeners receive their Initial event (one may
            // call back into the registry).
            let listeners = lock(&self.listeners).clone();
            if added >= listeners.len() {
                return;
            }
            // Claim the missing ones; whoever wins subscribes them, once.
            if e.listeners_added
                .compare_exchange(added, listeners.len(), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                for l in &listeners[added..] {
                    e.breaker.subscribe(Shared(l.clone()));
                }
                return;
            }
        }
    }

    /// Breakers held now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the registry holds no breaker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The breaker for `key`, created on first use. When the registry is full, idle and then
    /// least recently used evictable breakers make room; if none may go, the lookup fails.
    pub fn get(&self, key: &Key) -> Result<CircuitBreaker<C>, RegistryError> {
        let now = self.clock.recent();
        loop {
            {
                let map = self.map.pin();
                if let Some(e) = map.get(key) {
                    if let Some(b) = self.hand_out(key, e, now) {
                        return Ok(b);
                    }
                    // Being retired: look again.
                    std::hint::spin_loop();
                    continue;
                }
            }
            let max = read(&self.config).config.max_breakers;
            if !self.reserve(max) {
                return Err(RegistryError::Full { max });
            }
            let map = self.map.pin();
            let mut made = None;
            let entry = map.get_or_insert_with(key.clone(), || {
                let e = self.create(key, now);
                made = Some(e.clone());
                e
            });
            if !made.is_some_and(|m| Arc::ptr_eq(&m, entry)) {
                // Another lookup inserted first: give the reservation back.
                self.count.fetch_sub(1, Ordering::AcqRel);
            }
            if let Some(b) = self.hand_out(key, entry, now) {
                return Ok(b);
            }
        }
    }

    /// Reserves room for one more breaker, making room when full; `false` when none can go.
    fn reserve(&self, max: usize) -> bool {
        let mut made_room = false;
        loop {
            let n = self.count.load(Ordering::Acquire);
            if n >= max {
                if made_room {
                    return false;
                }
                self.make_room(max);
                made_room = true;
                continue;
            }
            if self
                .count
                .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return true;
            }
        }
    }

    /// The breaker for `key` if it exists, without creating it or marking it used.
    pub fn peek(&self, key: &Key) -> Option<CircuitBreaker<C>> {
        loop {
            let map = self.map.pin();
            let e = map.get(key)?;
            if let Some(b) = hold(e) {
                return Some(b);
            }
            std::hint::spin_loop();
        }
    }

    /// A handle to a live entry's breaker, brought up to date with the registry's listeners
    /// and overrides; `None` when the entry is being retired.
    #[inline]
    fn hand_out(&self, key: &Key, e: &Arc<Entry<C>>, now: u64) -> Option<CircuitBreaker<C>> {
        let b = hold(e)?;
        // A breaker built while a reload ran may have the configuration the reload replaced:
        // let this lookup apply the new one (the fence of `hold` pairs with the reload's).
        if e.config_version.load(Ordering::Acquire) < self.config_version.load(Ordering::SeqCst)
            && self.resync_config(key, e, b)
        {
            return None;
        }
        let b = hold(e)?;
        touch(e, now);
        self.catch_up(e);
        if !e.announced.load(Ordering::Acquire) {
            self.announce(e);
        }
        self.sync_override(key, e);
        Some(b)
    }

    /// The first hand-out of a breaker: the listeners that are not the registry's.
    #[cold]
    fn announce(&self, e: &Entry<C>) {
        if e.announced
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            #[cfg(feature = "tracing")]
            e.breaker.subscribe(crate::observe::TracingListener);
        }
    }

    /// Brings a breaker built during a reload up to the configuration in force (as the reload
    /// would have). Returns whether the caller must look again (the breaker was rebuilt, or
    /// another reload holds the maintenance lock and will be seen on a later lookup).
    #[cold]
    fn resync_config(&self, key: &Key, e: &Arc<Entry<C>>, held: CircuitBreaker<C>) -> bool {
        // This lookup's own handle would keep the breaker from being rebuilt.
        drop(held);
        if IN_MAINTENANCE.with(std::cell::Cell::get) {
            // A listener called back from a reload on this thread: the reload brings the
            // breaker up to date itself.
            return false;
        }
        let _g = self.maintain();
        let version = self.config_version.load(Ordering::SeqCst);
        if e.config_version.load(Ordering::Acquire) >= version {
            return false;
        }
        let active = read(&self.config).clone();
        let mut report = ReloadReport::default();
        self.reload_entry(&active, key, e, &mut report);
        e.config_version.store(version, Ordering::Release);
        !report.rebuilt.is_empty()
    }

    /// Takes the maintenance lock, marking this thread as maintaining (a listener that looks
    /// a breaker up from inside a reload must not wait for the reload).
    fn maintain(&self) -> Maintaining<'_> {
        let guard = lock(&self.maintenance);
        IN_MAINTENANCE.with(|m| m.set(true));
        Maintaining { _guard: guard }
    }

    /// Applies the overrides in force if they changed since `e` last applied them; two loads
    /// when they did not.
    #[inline]
    fn sync_override(&self, key: &Key, e: &Entry<C>) {
        if e.applied_version.load(Ordering::Acquire) != self.override_version.load(Ordering::SeqCst)
            || Self::left_its_override(e)
        {
            self.resync_override(key, e);
        }
    }

    /// Whether a breaker under an override is no longer in its state (a handle's `reset`, say).
    #[inline]
    fn left_its_override(e: &Entry<C>) -> bool {
        match e.applied_state.load(Ordering::Acquire) {
            0 => false,
            s => Some(e.breaker.state()) != override_state(s),
        }
    }

    /// Applies the overrides in force to `e`; whether its state changed.
    #[cold]
    fn resync_override(&self, key: &Key, e: &Entry<C>) -> bool {
        let mut applied = lock(&e.applied);
        // Read the version before the overrides: a change after this read moves it again, and
        // the next lookup applies that change.
        let version = self.override_version.load(Ordering::SeqCst);
        let want = read(&self.overrides).for_key(key);
        // Re-applied also when the breaker left the override's state by other means (a reset
        // through a handle): a kill switch holds until an operator clears it.
        let changed = *applied != want || Self::left_its_override(e);
        if changed {
            apply(&e.breaker, *applied, want);
            *applied = want;
            e.applied_state
                .store(override_code(want), Ordering::Release);
        }
        e.applied_version.store(version, Ordering::Release);
        changed
    }

    /// A new entry, without side effects: a lookup that loses the race to insert it throws it
    /// away unseen. The lookup that hands it out first gives it the registry's listeners, then
    /// the override in force (so listeners see the override as a transition).
    fn create(&self, key: &Key, now: u64) -> Arc<Entry<C>> {
        let config_version = self.config_version.load(Ordering::SeqCst);
        let config = read(&self.config).config_for(key);
        let breaker =
            CircuitBreaker::with_clock(key.to_string(), config.clone(), self.clock.clone());
        Arc::new(Entry {
            #[cfg(feature = "metrics")]
            metrics: crate::observe::BreakerMetrics::for_key(&breaker, key),
            breaker,
            config: Mutex::new(config),
            last_used: AtomicU64::new(now),
            life: Life::new(),
            applied: Mutex::new(OperatorState::Auto),
            applied_version: AtomicU64::new(NEVER),
            applied_state: AtomicU8::new(0),
            config_version: AtomicU64::new(config_version),
            announced: AtomicBool::new(false),
            listeners_added: AtomicUsize::new(0),
        })
    }

    fn override_for(&self, key: &Key) -> OperatorState {
        read(&self.overrides).for_key(key)
    }

    /// Retires `e` if `may_go` holds for it while it is retiring (see the module docs);
    /// `false` leaves it live.
    fn retire(&self, e: &Entry<C>, may_go: impl FnOnce(&CircuitBreaker<C>) -> bool) -> bool {
        e.life.retire(|| may_go(&e.breaker))
    }

    /// Removes a retired entry from the map (if it is still the one stored for `key`).
    fn remove_retired(&self, key: &Key, e: &Arc<Entry<C>>) -> bool {
        // While the entry is retiring a lookup of its key waits for it to go, so a breaker made
        // for the key afterwards shows its state after this.
        #[cfg(feature = "metrics")]
        e.metrics.retire();
        let removed = matches!(
            self.map.pin().remove_if(key, |_, v| Arc::ptr_eq(v, e)),
            Ok(Some(_))
        );
        if removed {
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
        e.life.finish(removed);
        removed
    }

    fn make_room(&self, max: usize) {
        let _g = self.maintain();
        if self.map.len() < max {
            return;
        }
        // Drop idle ones first, then the least recently used evictable ones down to 7/8.
        self.evict_idle_locked();
        let target = max - max / 8;
        let len = self.map.len();
        if len < max {
            return;
        }
        let mut candidates: Vec<(u64, Key, Arc<Entry<C>>)> = self
            .map
            .pin()
            .iter()
            .filter(|(_, e)| e.breaker.evictable(1))
            .map(|(k, e)| (e.last_used.load(Ordering::Relaxed), k.clone(), e.clone()))
            .collect();
        candidates.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut evicted = 0;
        let wanted = len.saturating_sub(target).max(1);
        for (_, key, e) in candidates {
            if evicted >= wanted {
                break;
            }
            if self.retire(&e, |b| b.evictable(1)) && self.remove_retired(&key, &e) {
                evicted += 1;
            }
        }
    }

    /// Evicts breakers unused for `idle_after` that may go (Closed, clean, not in use).
    /// Returns how many were evicted. Call it periodically, or let `get` call it when full.
    pub fn evict_idle(&self) -> usize {
        let _g = self.maintain();
        self.evict_idle_locked()
    }

    fn evict_idle_locked(&self) -> usize {
        let idle = nanos(read(&self.config).config.idle_after);
        let now = self.clock.now();
        let idle_for =
            |e: &Entry<C>| now.saturating_sub(e.last_used.load(Ordering::Relaxed)) >= idle;
        let stale: Vec<(Key, Arc<Entry<C>>)> = self
            .map
            .pin()
            .iter()
            .filter(|(_, e)| idle_for(e))
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        stale
            .iter()
            .filter(|(k, e)| {
                // The walk holds the entry, not the breaker: one handle is the registry's.
                self.retire(e, |b| idle_for(e) && b.evictable(1)) && self.remove_retired(k, e)
            })
            .count()
    }

    /// Visits every breaker the registry holds now, with its key, in no particular order,
    /// without creating or touching any (a read never makes state).
    ///
    /// ```
    /// use tripline::registry::{Key, Registry, RegistryConfig};
    ///
    /// let registry = Registry::new(RegistryConfig::default())?;
    /// registry.get(&"catalog/shard=1".parse()?)?;
    /// registry.get(&"catalog/shard=2".parse()?)?;
    /// let mut keys = Vec::new();
    /// registry.for_each(|key, breaker| keys.push((key.to_string(), breaker.state())));
    /// keys.sort();
    /// assert_eq!(keys.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_each(&self, mut f: impl FnMut(&Key, &CircuitBreaker<C>)) {
        for (k, e) in self.map.pin().iter() {
            f(k, &e.breaker);
        }
    }

    /// Every key the registry holds now, sorted.
    pub fn keys(&self) -> Vec<Key> {
        let mut keys: Vec<Key> = self.map.pin().keys().cloned().collect();
        keys.sort();
        keys
    }

    /// The operator override in force for `key` (run-time layer first, then the
    /// configuration's; [`OperatorState::Auto`] when none), whether or not its breaker exists.
    pub fn operator_for(&self, key: &Key) -> OperatorState {
        self.override_for(key)
    }

    /// Breakers per dependency, by state.
    pub fn summary(&self) -> BTreeMap<String, DependencySummary> {
        let mut out: BTreeMap<String, DependencySummary> = BTreeMap::new();
        for (k, e) in self.map.pin().iter() {
            let s = out.entry(k.dependency().to_string()).or_default();
            s.breakers += 1;
            s.by_state[e.breaker.state() as usize] += 1;
        }
        out
    }

    /// How many breakers of `dependency` are Open (or ForcedOpen).
    pub fn open_count(&self, dependency: &str) -> usize {
        self.summary().get(dependency).map_or(0, |s| {
            s.in_state(State::Open) + s.in_state(State::ForcedOpen)
        })
    }

    /// Sets a run-time operator override: from now on the selected breakers (and, for a
    /// dependency, those created later) are in `state`, whatever the configuration's
    /// `[operator]` section says and through every [`reload`](Self::reload), until
    /// [`clear_operator`](Self::clear_operator). [`OperatorState::Auto`] is an override too:
    /// the rules decide for the selection even where the configuration forces a state.
    /// Returns how many existing breakers changed.
    ///
    /// ```
    /// use tripline::registry::{Key, OperatorState, Registry, RegistryConfig, Selector};
    /// use tripline::State;
    ///
    /// let registry = Registry::new(RegistryConfig::default())?;
    /// let recs = Key::new("recommendations")?;
    /// let kill = Selector::Dependency("recommendations".into());
    /// registry.set_operator(&kill, OperatorState::ForcedOpen);
    /// assert_eq!(registry.get(&recs)?.state(), State::ForcedOpen);
    /// // A configuration sync does not lift a kill switch thrown at run time.
    /// registry.reload(RegistryConfig::default())?;
    /// assert_eq!(registry.get(&recs)?.state(), State::ForcedOpen);
    /// registry.clear_operator(&kill);
    /// assert_eq!(registry.get(&recs)?.state(), State::Closed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_operator(&self, selector: &Selector, state: OperatorState) -> usize {
        self.change_overrides(selector, |o, selector| {
            o.runtime.insert(selector, state);
        })
    }

    /// Removes the run-time override of `selector` (exactly that key, or that dependency's
    /// dependency-wide one); the configuration's `[operator]` section applies again where it
    /// has one. Returns how many existing breakers changed.
    pub fn clear_operator(&self, selector: &Selector) -> usize {
        self.change_overrides(selector, |o, selector| {
            o.runtime.remove(&selector);
        })
    }

    /// The run-time overrides in force: dependency-wide ones first, then per key, each sorted
    /// by name.
    pub fn operator_overrides(&self) -> Vec<(Selector, OperatorState)> {
        let mut all: Vec<(Selector, OperatorState)> = read(&self.overrides)
            .runtime
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        all.sort_by(|(a, _), (b, _)| match (a, b) {
            (Selector::Dependency(x), Selector::Dependency(y)) => x.cmp(y),
            (Selector::Key(x), Selector::Key(y)) => x.cmp(y),
            (Selector::Dependency(_), Selector::Key(_)) => std::cmp::Ordering::Less,
            (Selector::Key(_), Selector::Dependency(_)) => std::cmp::Ordering::Greater,
        });
        all
    }

    /// The run-time override set for exactly `selector`, if any (not the one in force for a
    /// key: see [`operator_for`](Self::operator_for)).
    ///
    /// ```
    /// use tripline::registry::{Key, OperatorState, Registry, RegistryConfig, Selector};
    ///
    /// let registry = Registry::new(RegistryConfig::default())?;
    /// let key = Selector::Key(Key::new("prices")?);
    /// registry.set_operator(&key, OperatorState::ForcedOpen);
    /// assert_eq!(registry.operator_override(&key), Some(OperatorState::ForcedOpen));
    /// // The unscoped key is not the whole dependency.
    /// assert_eq!(registry.operator_override(&Selector::Dependency("prices".into())), None);
    /// let shard: Key = "prices/shard=1".parse()?;
    /// assert_eq!(registry.operator_for(&shard), OperatorState::Auto);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn operator_override(&self, selector: &Selector) -> Option<OperatorState> {
        read(&self.overrides).runtime.get(selector).copied()
    }

    fn change_overrides(
        &self,
        selector: &Selector,
        change: impl FnOnce(&mut Overrides, Selector),
    ) -> usize {
        {
            let mut o = write(&self.overrides);
            change(&mut o, selector.clone());
            self.override_version.fetch_add(1, Ordering::SeqCst);
        }
        // Pairs with the fence of a lookup (`hold`): either that lookup sees the new version,
        // or this walk sees the breaker it created.
        publish_fence();
        self.apply_overrides(Some(selector))
    }

    /// Operator: back to Closed with a fresh window, for the selected breakers (overrides
    /// stay as they are). Returns how many breakers were reset.
    pub fn reset(&self, selector: &Selector) -> usize {
        let mut n = 0;
        for (k, e) in self.map.pin().iter() {
            // A breaker under an override stays in it: clear the override to let it run.
            if selector.selects(k) && *lock(&e.applied) == OperatorState::Auto {
                e.breaker.reset();
                n += 1;
            }
        }
        n
    }

    fn apply_overrides(&self, only: Option<&Selector>) -> usize {
        let mut n = 0;
        for (k, e) in self.map.pin().iter() {
            if only.is_some_and(|s| !s.selects(k)) {
                continue;
            }
            if self.resync_override(k, e) {
                n += 1;
            }
        }
        n
    }

    /// Applies a new configuration to the live registry: bounds, named configurations and
    /// the configured operator overrides (run-time ones stay). Each breaker whose configuration
    /// changed is reconfigured in place (state, generation and window kept); one whose window
    /// shape changed is rebuilt if it is Closed and nobody outside the registry holds it, else
    /// deferred (see [`ReloadReport`]).
    pub fn reload(&self, config: RegistryConfig) -> Result<ReloadReport, ConfigError> {
        config.validate()?;
        let _g = self.maintain();
        let previous = read(&self.config).clone();
        let active = Arc::new(Active::new(config, Some(&previous)));
        *write(&self.config) = active.clone();
        // Walked breakers are marked with the next version before the registry moves to it, so
        // lookups during the walk do not wait; a breaker built meanwhile from the previous
        // configuration is behind once the version moves, and its lookup (or the second pass
        // below) brings it up to date.
        let version = self.config_version.load(Ordering::SeqCst) + 1;
        {
            let mut o = write(&self.overrides);
            o.file = active.config.operator.clone().into_iter().collect();
            self.override_version.fetch_add(1, Ordering::SeqCst);
        }
        publish_fence();
        let mut report = ReloadReport::default();
        let entries: Vec<(Key, Arc<Entry<C>>)> = self
            .map
            .pin()
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        for (k, e) in entries {
            self.reload_entry(&active, &k, &e, &mut report);
            e.config_version.store(version, Ordering::Release);
        }
        self.config_version.store(version, Ordering::SeqCst);
        publish_fence();
        let behind: Vec<(Key, Arc<Entry<C>>)> = self
            .map
            .pin()
            .iter()
            .filter(|(_, e)| e.config_version.load(Ordering::Acquire) < version)
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        for (k, e) in behind {
            self.reload_entry(&active, &k, &e, &mut report);
            e.config_version.store(version, Ordering::Release);
        }
        self.apply_overrides(None);
        Ok(report)
    }

    /// What a reload does for one breaker: reconfigure it in place, rebuild it (Closed, not
    /// held, no ramp running and no open backoff remembered), or defer it. Called with the
    /// maintenance lock held.
    fn reload_entry(&self, active: &Active, k: &Key, e: &Arc<Entry<C>>, report: &mut ReloadReport) {
        let want = active.config_for(k);
        let mut current = lock(&e.config);
        if Arc::ptr_eq(&want, &current) || want == *current {
            return;
        }
        if want.same_shape(&current) {
            // Same shape and validated, so this cannot fail.
            if e.breaker.reconfigure(want.clone()).is_ok() {
                *current = want;
                report.reconfigured.push(k.clone());
            }
        } else if self.retire(e, |b| {
            b.state() == State::Closed && !b.in_use(1) && !b.remembers_recovery()
        }) {
            drop(current);
            let now = self.clock.recent();
            let fresh = self.create(k, now);
            self.map.pin().insert(k.clone(), fresh);
            e.life.finish(true);
            report.rebuilt.push(k.clone());
        } else {
            report.deferred.push(k.clone());
        }
    }

    /// Pushes every breaker's current figures to the `metrics` recorder (feature `metrics`),
    /// and per dependency how many breakers are in each state
    /// (`tripline_registry_breakers{dependency, state}`). The metric handles were created once
    /// per breaker; call this on each scrape or on a timer. The state gauges need no call: each
    /// breaker's follow its transitions.
    ///
    /// # Cardinality
    /// Each key has its own series (37), so keys that come and go (tenants, hosts) would
    /// grow a recorder without end. The registry bounds what is live: at most `max_breakers`
    /// keys; an evicted key's state gauges drop to 0 and none of its series is touched again,
    /// so an exporter that forgets idle series keeps the series to the live keys (for
    /// `metrics-exporter-prometheus`, `PrometheusBuilder::idle_timeout` longer than the export
    /// interval). The per-dependency summary is bounded by the dependencies alone; dashboards
    /// over many tenants should prefer it.
    #[cfg(feature = "metrics")]
    pub fn export_metrics(&self) {
        for (_, e) in self.map.pin().iter() {
            e.metrics.update(&e.breaker);
        }
        let summary = self.summary();
        lock(&self.dependency_gauges).update(&summary);
    }
}

/// A handle to `e`'s breaker if `e` is live (see the module docs on the lifecycle).
#[inline]
fn hold<C: Clock>(e: &Entry<C>) -> Option<CircuitBreaker<C>> {
    e.life.hold(|| e.breaker.clone())
}

/// An entry's override version before the first lookup applies one.
const NEVER: u64 = u64::MAX;

/// [`Entry::applied_state`]: 0 for Auto, else the state an override keeps the breaker in.
fn override_code(o: OperatorState) -> u8 {
    match o {
        OperatorState::Auto => 0,
        OperatorState::ForcedOpen => 1,
        OperatorState::Disabled => 2,
        OperatorState::MetricsOnly => 3,
    }
}

fn override_state(code: u8) -> Option<State> {
    match code {
        1 => Some(State::ForcedOpen),
        2 => Some(State::Disabled),
        3 => Some(State::MetricsOnly),
        _ => None,
    }
}

thread_local! {
    /// Whether this thread holds a registry's maintenance lock.
    static IN_MAINTENANCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The maintenance lock, held; clears the thread's mark when dropped.
struct Maintaining<'a> {
    _guard: std::sync::MutexGuard<'a, ()>,
}

impl Drop for Maintaining<'_> {
    fn drop(&mut self) {
        IN_MAINTENANCE.with(|m| m.set(false));
    }
}

fn apply<C: Clock>(breaker: &CircuitBreaker<C>, from: OperatorState, to: OperatorState) {
    match to {
        OperatorState::ForcedOpen => breaker.force_open(),
        OperatorState::Disabled => breaker.disable(),
        OperatorState::MetricsOnly => breaker.metrics_only(),
        OperatorState::Auto => {
            if from != OperatorState::Auto && breaker.state().is_operator_state() {
                breaker.reset();
            }
        }
    }
}

/// Marks an entry used; writes only when the coarse time moved (~1 s), so hot keys read-share
/// their cache line.
#[inline]
fn touch<C: Clock>(e: &Entry<C>, now: u64) {
    if now >> 30 != e.last_used.load(Ordering::Relaxed) >> 30 {
        e.last_used.store(now, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}
