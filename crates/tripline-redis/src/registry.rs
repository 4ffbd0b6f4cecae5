//! Keyed fleet-wide breakers: [`SharedRegistry`].

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tripline::registry::{Key, RegistryConfig, RegistryError};
use tripline::{Breaker as _, Clock, ConfigError, MonotonicClock, State};

use crate::{Backend, SharedBreaker, SharedConfig};

/// Why a [`SharedRegistry`] gave no breaker for a key.
///
/// ```
/// use tripline::registry::RegistryError;
/// use tripline_redis::SharedRegistryError;
/// let e = SharedRegistryError::from(RegistryError::Full { max: 2 });
/// assert_eq!(e.to_string(), "breaker registry is full: 2 breakers, none evictable");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SharedRegistryError {
    /// The holder is full and no handle may go.
    #[error(transparent)]
    Full(#[from] RegistryError),
    /// The key's breaker could not be made: its scope or its configuration cannot be a shared
    /// breaker's (the error names the field, the value and what is allowed).
    #[error(transparent)]
    Config(#[from] ConfigError),
}

struct Entry<C: Clock + Clone> {
    breaker: SharedBreaker<C>,
    /// The holder's clock when the handle was last handed out.
    used: u64,
}

/// Keyed fleet-wide breakers: one [`SharedBreaker`] per dependency and, where the dependency is
/// partitioned, per endpoint, host, tenant, shard or region, keyed exactly as the in-process
/// [`tripline::registry::Registry`] keys its breakers.
///
/// # Why a holder of its own, and not the in-process registry made generic
/// The in-process registry's work is keeping breakers' *state* safe in memory: it never
/// evicts a breaker that is not Closed (a missing breaker reads as a fresh Closed one), it
/// holds operator overrides in its record and has each breaker follow it under the breaker's
/// own lock, it rebuilds breakers on a reload while keeping their windows. For a shared
/// breaker none of that lives in the process: the state, the window and the kill switch are in
/// Redis, where every replica reads them, and a handle dropped and made again reads the same
/// record. What a replica holds is a *handle* (a connection's worth of view and counters), so
/// the holder is simpler, and making the lock-free registry generic over both would have
/// given the in-process one costs it does not need. What the two share is what a caller sees:
/// the keys ([`Key`]: the same rules and the same `dependency/kind=value` names), the
/// configuration ([`RegistryConfig`]: named breaker configurations chosen per key, then per
/// dependency, then `default`; `max_breakers`; `idle_after`), and the bound: at most
/// `max_breakers` handles, idle ones dropped by [`SharedRegistry::evict_idle`], room made on a
/// full holder by dropping the least recently used handle that may go, and a lookup refused
/// ([`RegistryError::Full`]) only when none may.
///
/// A handle may go when no one outside the holder keeps a clone of it (no call in flight, no
/// buffered outcomes' flusher) and the fleet's state as it last saw it is Closed: a replica
/// that saw the breaker Open remembers it, to bring it back should Redis lose it (see the
/// crate docs, "Lost state"), so that handle stays.
///
/// Operator moves go to each key's breaker ([`tripline::Breaker::force_open`] and the rest,
/// or the operator's page): they are fleet-wide already, and outlive every handle. The
/// configuration's `[operator]` section is the in-process registry's and is not applied here.
///
/// A lookup takes one short mutex (a map of at most `max_breakers` entries); a shared
/// breaker's call costs a round trip to Redis, beside which the lock is nothing.
///
/// ```no_run
/// use tripline::registry::{Key, RegistryConfig, ScopeKind};
/// use tripline_redis::{Backend, SharedConfig, SharedRegistry};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let registry = SharedRegistry::new(
///     RegistryConfig::default().with_max_breakers(1_000),
///     SharedConfig::default(),
///     Backend::single("redis://127.0.0.1:6379/")?,
/// )?;
/// let acme = registry.get(&Key::scoped("payments", ScopeKind::Tenant, "acme")?)?;
/// let permit = acme.acquire().await?;
/// permit.record(tripline::Outcome::Success).await;
/// # Ok(())
/// # }
/// ```
pub struct SharedRegistry<C: Clock + Clone = MonotonicClock> {
    config: RegistryConfig,
    shared: SharedConfig,
    backend: Backend,
    clock: C,
    map: Mutex<BTreeMap<Key, Entry<C>>>,
    /// Handles dropped so far (to make room, or idle).
    removals: AtomicU64,
}

impl<C: Clock + Clone> std::fmt::Debug for SharedRegistry<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRegistry")
            .field("breakers", &self.len())
            .field("max_breakers", &self.config.max_breakers())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SharedRegistry<MonotonicClock> {
    /// A holder of the fleet-wide breakers of `config`'s keys, on `backend` (one connection for
    /// them all), each with `shared`'s settings.
    pub fn new(
        config: RegistryConfig,
        shared: SharedConfig,
        backend: Backend,
    ) -> Result<Self, ConfigError> {
        Self::with_clock(config, shared, backend, MonotonicClock::new())
    }
}

impl<C: Clock + Clone> SharedRegistry<C> {
    /// [`SharedRegistry::new`] on a clock of your choice (the breakers' clock, and the one
    /// idleness is measured on).
    pub fn with_clock(
        config: RegistryConfig,
        shared: SharedConfig,
        backend: Backend,
        clock: C,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        shared.validate()?;
        Ok(Self {
            config,
            shared,
            backend,
            clock,
            map: Mutex::new(BTreeMap::new()),
            removals: AtomicU64::new(0),
        })
    }

    /// The registry configuration.
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    /// The fleet-wide breaker for `key` (its scope is the key's name, `payments/tenant=acme`),
    /// made on first use from the key's configuration. On a full holder the least recently
    /// used handle that may go makes room; if none may, the lookup fails.
    pub fn get(&self, key: &Key) -> Result<SharedBreaker<C>, SharedRegistryError> {
        let now = self.clock.now();
        let mut map = lock(&self.map);
        if let Some(e) = map.get_mut(key) {
            e.used = now;
            return Ok(e.breaker.clone());
        }
        let max = self.config.max_breakers();
        if map.len() >= max {
            let victim = map
                .iter()
                .filter(|(_, e)| may_go(&e.breaker))
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            match victim {
                Some(k) => {
                    map.remove(&k);
                    self.removals.fetch_add(1, Ordering::AcqRel);
                }
                None => return Err(RegistryError::Full { max }.into()),
            }
        }
        let breaker = SharedBreaker::with_clock(
            &key.to_string(),
            self.config.config_for(key),
            self.shared.clone(),
            self.backend.clone(),
            self.clock.clone(),
        )?;
        map.insert(
            key.clone(),
            Entry {
                breaker: breaker.clone(),
                used: now,
            },
        );
        Ok(breaker)
    }

    /// The handle for `key` if the holder has one, without making it or marking it used.
    pub fn peek(&self, key: &Key) -> Option<SharedBreaker<C>> {
        lock(&self.map).get(key).map(|e| e.breaker.clone())
    }

    /// Handles held.
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    /// Whether the holder holds no handle.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys held, in order.
    pub fn keys(&self) -> Vec<Key> {
        lock(&self.map).keys().cloned().collect()
    }

    /// Calls `f` with every key and its handle, in key order (on a copy: `f` may look keys up).
    pub fn for_each(&self, mut f: impl FnMut(&Key, &SharedBreaker<C>)) {
        let entries: Vec<_> = lock(&self.map)
            .iter()
            .map(|(k, e)| (k.clone(), e.breaker.clone()))
            .collect();
        for (k, b) in &entries {
            f(k, b);
        }
    }

    /// Drops the handles unused for `idle_after` that may go (see [`SharedRegistry`]);
    /// how many went. The breakers' records stay in Redis: a later lookup reads them again.
    pub fn evict_idle(&self) -> usize {
        let now = self.clock.now();
        let idle = u64::try_from(self.config.idle_after().as_nanos()).unwrap_or(u64::MAX);
        let mut map = lock(&self.map);
        let before = map.len();
        map.retain(|_, e| now.saturating_sub(e.used) < idle || !may_go(&e.breaker));
        let gone = before - map.len();
        self.removals.fetch_add(gone as u64, Ordering::AcqRel);
        gone
    }
}

/// A server-directed dependency over fleet-wide breakers:
/// [`DirectedOn`](tripline::registry::DirectedOn)`<SharedRegistry>` records a failure the
/// server blames on a shard on that shard's breaker in Redis, so one replica's blamed failures
/// open the shard for every replica holding a handle to it (see `DirectedOn` for when a
/// replica takes one).
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use tripline::registry::{Blame, DirectedOn, Key, RegistryConfig};
/// use tripline::{Classification, FailureKind};
/// use tripline_redis::{Backend, SharedConfig, SharedRegistry};
///
/// let registry = Arc::new(SharedRegistry::new(
///     RegistryConfig::default(),
///     SharedConfig::default(),
///     Backend::single("redis://127.0.0.1:6379")?,
/// )?);
/// let catalog = DirectedOn::new(registry, Key::new("catalog")?)?;
/// let permit = catalog.admit(Some("7")).await?;
/// let fail = Classification::failure(FailureKind::Unavailable);
/// permit.record(fail, Some(&Blame::shard("7"))).await;
/// # Ok(())
/// # }
/// ```
impl<C: Clock + Clone> tripline::registry::ScopeHolder for SharedRegistry<C> {
    type Breaker = SharedBreaker<C>;
    type Error = SharedRegistryError;

    fn breaker(&self, key: &Key) -> Result<SharedBreaker<C>, SharedRegistryError> {
        self.get(key)
    }

    fn held(&self, key: &Key) -> Option<SharedBreaker<C>> {
        let now = self.clock.now();
        let mut map = lock(&self.map);
        let e = map.get_mut(key)?;
        e.used = now;
        Some(e.breaker.clone())
    }

    fn holds(&self, key: &Key) -> bool {
        lock(&self.map).contains_key(key)
    }

    fn removals(&self) -> u64 {
        self.removals.load(Ordering::Acquire)
    }

    fn now(&self) -> u64 {
        self.clock.now()
    }

    fn refusal(error: SharedRegistryError) -> tripline::registry::BlameRefused {
        match error {
            SharedRegistryError::Full(e) => tripline::registry::BlameRefused::Full(e),
            SharedRegistryError::Config(e) => tripline::registry::BlameRefused::Key(e),
        }
    }
}

/// Whether a handle held by the holder alone, whose last view of the fleet is Closed, may be
/// dropped.
fn may_go<C: Clock + Clone>(b: &SharedBreaker<C>) -> bool {
    !b.in_use(1) && matches!(b.last_known_state(), None | Some(State::Closed)) && {
        // The interface's state falls back to the shadow's before Redis answered.
        b.state() == State::Closed
    }
}
