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
//!   so evicting an Open breaker would admit everything (and a ramping one, all at once). A
//!   lookup on a full registry makes room and is refused only when none of the breakers may
//!   go.
//! * Keys are cheap: every breaker of a named configuration shares one `Arc` of it, and a
//!   breaker holds only its closed-path part (about 410 bytes with a count window of 100) until
//!   it first transitions, is reconfigured by a reload, or gets a listener
//!   ([`Registry::subscribe`], the `tracing` feature's listener on every key, or the
//!   `metrics` feature's state gauges); then it also allocates the part transitions need
//!   (about 510 bytes).
//! * Operators steer breakers per key or per dependency, from code or from the configuration;
//!   a dependency-wide override also applies to breakers created later. Every change is an
//!   event on the breakers' listeners.
//! * [`Registry::reload`] applies a new configuration, keeping each breaker's state and window
//!   where the window shape is unchanged.
//! * Where the server says which part failed (`x-overloaded-shard: 17`), [`ServerDirected`]
//!   records the result on that part's breaker, made on demand under the same bound and key
//!   rules and a cap per dependency, instead of the dependency-wide one (see [`directed`]);
//!   [`DirectedOn`] does the same, asynchronously, over any [`ScopeHolder`] (this registry,
//!   or the fleet-wide `tripline_redis::SharedRegistry`).
//!
//! # One record, followed by each breaker
//! The registry keeps one record of what is in force: the active configuration and the table
//! of operator overrides. A breaker does not keep a copy of its override: it *holds* it
//! ([`CircuitBreaker::operator_hold`]), and while it holds ForcedOpen, Disabled or
//! MetricsOnly no operator call on any of its handles, and no `Registry::reset`, moves it
//! elsewhere (the check and the move happen under the breaker's own lock, so a reset racing a
//! kill switch cannot leave the breaker Closed). A breaker follows the record by reading its
//! key's part of it under its own lock and applying it there (see
//! `breaker::reconfigure`), so two syncs of one breaker apply in the order they read and the
//! last one applies the newest record: no versions, no re-sync on every lookup.
//!
//! A change of the record (`set_operator`, `clear_operator`, `reload`) writes the record,
//! then, after a sequentially consistent fence, walks the map and has each selected breaker
//! follow it. A new entry is inserted, then (after the fence of its first hand-out) set up by
//! the lookups that find it not yet ready: given the registry's listeners, then made to follow
//! the record. Either the walk sees the new entry, or its set-up sees the change; so a breaker
//! created while an override or a configuration changes still gets it, and the listeners see
//! the override as a transition.
//!
//! # Lifecycle of an entry
//! An entry is *live*, *retiring* or *gone*, in one atomic word. Eviction and a rebuild (a
//! configuration of another window shape) retire an entry first (a compare-and-swap from
//! live), then check, with the entry retiring, that it may go (Closed, clean, and no handle
//! held outside the registry), and only then remove or replace it; if the check fails the
//! entry is live again. A lookup clones the breaker handle and then reads the word: a retiring
//! or gone entry makes it drop the clone and look again. With a sequentially consistent fence
//! on both sides, either the lookup sees the entry retiring, or the retiring side sees the
//! lookup's handle and keeps the entry; so a lookup never returns a breaker the registry no
//! longer holds, and a breaker in use, or one that is not Closed, is never replaced.
//!
//! # Locks, and what never runs under them
//! * `record`, a read-write lock: the active configuration and the overrides. Written briefly
//!   by `reload`, `set_operator` and `clear_operator`; read briefly by lookups of new keys
//!   and, under a breaker's core lock, by a breaker following it.
//! * `listeners`, a mutex: the registry's listeners, copied out before any is subscribed.
//! * `maintenance`, a mutex: one thread makes room or evicts idle breakers at a time. Under it
//!   run only the breakers' own checks (state, window, handles held); the clock is read before
//!   it is taken, and evicted breakers' gauges are cleared after it is released.
//! * `dependency_gauges` (feature `metrics`), a mutex: the per-dependency gauge handles; the
//!   gauges are registered with the recorder and set after it is released.
//!
//! No listener, clock reading, metrics recorder or `for_each` callback runs under any of these,
//! nor under a breaker's lock: a listener may call back into the registry (look a key up, make
//! room, reset, reload, set or clear an override, subscribe) from inside its event.
//!
//! # Operator overrides
//! Overrides come in two layers: the configuration's `[operator]` section, replaced by each
//! reload, and the run-time layer set by [`Registry::set_operator`], which a reload never
//! touches and only [`Registry::clear_operator`] removes. For a key, the first that is set of
//! run-time key, run-time dependency, configured key and configured dependency decides; so a
//! kill switch thrown during an incident stays thrown through every configuration sync, every
//! reset and every rebuild or eviction (a breaker made again for the key follows the record).
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

mod config;
pub mod directed;
mod key;

pub use config::RegistryConfig;
pub use directed::{
    Attribution, Blame, BlameRefused, DEFAULT_MAX_SCOPES, DirectedOn, DirectedOnPermit,
    DirectedPermit, RefusedBlames, ScopeHolder, ServerDirected,
};
pub use key::{Key, OperatorState, ScopeKind, Selector};

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::CircuitBreaker;
use crate::clock::{Clock, MonotonicClock, nanos};
use crate::config::BreakerConfig;
use crate::error::ConfigError;
use crate::event::Listener;
use crate::lifecycle::{Life, publish_fence};
use crate::state::State;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, RwLock, lock};
use config::Record;

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
    /// When a lookup last handed the breaker out, to within the registry's touch granularity.
    last_used: AtomicU64,
    /// Live, retiring or gone (see the module docs).
    life: Life,
    /// Whether the entry is set up: its breaker has the registry's listeners and has followed
    /// the record since it was inserted (see the module docs).
    ready: AtomicBool,
    /// How many of the registry's listeners (in subscription order) this breaker has, or is
    /// being given by the thread that claimed them.
    listeners_added: AtomicUsize,
    /// Whether the `tracing` feature's listener was subscribed (by the first set-up).
    announced: AtomicBool,
    #[cfg(feature = "metrics")]
    metrics: crate::observe::BreakerMetrics,
}

/// A bounded, lock-free-read registry of keyed breakers.
pub struct Registry<C: Clock + Clone = MonotonicClock> {
    map: papaya::HashMap<Key, Arc<Entry<C>>>,
    /// What is in force (see the module docs).
    record: RwLock<Record>,
    /// Breakers held, counted by the lookups that insert and the maintenance that removes, so
    /// racing lookups cannot take the registry past `max_breakers`.
    count: AtomicUsize,
    listeners: Mutex<Vec<Arc<dyn Listener>>>,
    /// `listeners.len()`, readable without the lock.
    listener_count: AtomicUsize,
    maintenance: Mutex<()>,
    /// How stale a lookup lets an entry's `last_used` get before writing it (a sixty-fourth of
    /// `idle_after`), so that hot keys read-share their cache line.
    touch_granularity: AtomicU64,
    clock: C,
    /// Entries removed from the map so far (evicted): a [`ServerDirected`] dependency at its
    /// cap of blamed scopes looks for scopes that went only when this moved.
    removals: AtomicU64,
    /// Per dependency, the scopes its servers' blames created (see [`directed`]): shared by
    /// every [`ServerDirected`] handle of the dependency on this registry.
    ledgers: Mutex<std::collections::HashMap<Box<str>, Arc<directed::Ledger>>>,
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

fn granularity(idle_after: std::time::Duration) -> u64 {
    (nanos(idle_after) / 64).max(1)
}

impl Registry<MonotonicClock> {
    /// A registry on the production clock: the coarse (millisecond) one when every named
    /// configuration (and the default) allows it, else the precise one (see
    /// [`MonotonicClock::for_config`]). A configuration reloaded later with finer durations
    /// keeps the registry's clock, and its breakers read the clock's precise readings from
    /// then on (see [`CircuitBreaker::reconfigure`]).
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
        let touch = granularity(config.idle_after);
        Ok(Self {
            map: papaya::HashMap::new(),
            record: RwLock::new(Record::new(config)),
            count: AtomicUsize::new(0),
            listeners: Mutex::new(Vec::new()),
            listener_count: AtomicUsize::new(0),
            maintenance: Mutex::new(()),
            touch_granularity: AtomicU64::new(touch),
            clock,
            removals: AtomicU64::new(0),
            ledgers: Mutex::new(Default::default()),
            #[cfg(feature = "metrics")]
            dependency_gauges: Mutex::new(Default::default()),
        })
    }

    /// The entries held now, with their keys (a copy: nothing is pinned while the caller works
    /// on them).
    fn entries(&self) -> Vec<(Key, Arc<Entry<C>>)> {
        self.map
            .pin()
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect()
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
        for (_, e) in self.entries() {
            self.catch_up(&e);
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
            // A copy, so no lock is held while listeners receive their Initial event.
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
            // The common case, a ready entry, is handed out under the map's pin (atomics
            // only); anything that may run user code (a set-up, listeners to catch up) runs on
            // a copy of the entry, with nothing pinned.
            let found = {
                let map = self.map.pin();
                match map.get(key) {
                    Some(e) => match self.hand_out_ready(e, now) {
                        Ok(b) => return Ok(b),
                        Err(true) => Some(Some(e.clone())),
                        Err(false) => Some(None),
                    },
                    None => None,
                }
            };
            match found {
                Some(Some(e)) => {
                    if let Some(b) = self.hand_out(key, &e, now) {
                        return Ok(b);
                    }
                    continue;
                }
                Some(None) => {
                    // Being retired: look again.
                    crate::sync::spin(0);
                    continue;
                }
                None => {}
            }
            let max = read(&self.record).active.config.max_breakers;
            if !self.reserve(max) {
                return Err(RegistryError::Full { max });
            }
            let mut made = None;
            let entry = self
                .map
                .pin()
                .get_or_insert_with(key.clone(), || {
                    let e = self.create(key, now);
                    made = Some(e.clone());
                    e
                })
                .clone();
            if !made.is_some_and(|m| Arc::ptr_eq(&m, &entry)) {
                // Another lookup inserted first: give the reservation back.
                self.count.fetch_sub(1, Ordering::AcqRel);
            }
            if let Some(b) = self.hand_out(key, &entry, now) {
                return Ok(b);
            }
        }
    }

    /// Reserves room for one more breaker, making room while full; `false` only when the
    /// registry is full of breakers none of which may go.
    fn reserve(&self, max: usize) -> bool {
        loop {
            let n = self.count.load(Ordering::Acquire);
            if n < max {
                if self
                    .count
                    .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            if !self.make_room(max) {
                return false;
            }
        }
    }

    /// The breaker for `key` if it exists, without creating it or marking it used. A breaker
    /// whose lookup is still setting it up is set up first (given the registry's listeners and
    /// the override in force), so a peek never hands out a breaker that has not yet followed a
    /// kill switch.
    pub fn peek(&self, key: &Key) -> Option<CircuitBreaker<C>> {
        loop {
            let e = {
                let map = self.map.pin();
                let e = map.get(key)?;
                match self.ready(e) {
                    Ok(b) => return Some(b),
                    Err(true) => e.clone(),
                    Err(false) => {
                        crate::sync::spin(0);
                        continue;
                    }
                }
            };
            if let Some(b) = self.settle(key, &e) {
                return Some(b);
            }
        }
    }

    /// The breaker for `key` if it exists, marked used as by [`get`](Self::get), without
    /// creating it.
    pub(crate) fn get_held(&self, key: &Key) -> Option<CircuitBreaker<C>> {
        let now = self.clock.recent();
        loop {
            let e = {
                let map = self.map.pin();
                let e = map.get(key)?;
                match self.hand_out_ready(e, now) {
                    Ok(b) => return Some(b),
                    Err(true) => e.clone(),
                    Err(false) => {
                        crate::sync::spin(0);
                        continue;
                    }
                }
            };
            if let Some(b) = self.hand_out(key, &e, now) {
                return Some(b);
            }
        }
    }

    /// Whether the map holds an entry for `key` (live or being retired): atomics only, no
    /// user code.
    pub(crate) fn contains(&self, key: &Key) -> bool {
        self.map.pin().contains_key(key)
    }

    /// How many entries were removed from the map so far.
    pub(crate) fn removals(&self) -> u64 {
        self.removals.load(Ordering::Acquire)
    }

    /// The ledger of the scopes `dependency`'s blames created, made on first use (outside the
    /// lock: making it registers metrics, which runs a recorder's code).
    pub(crate) fn ledger(&self, dependency: &str) -> Arc<directed::Ledger> {
        if let Some(l) = lock(&self.ledgers).get(dependency) {
            return l.clone();
        }
        let made = Arc::new(directed::Ledger::new(dependency));
        lock(&self.ledgers)
            .entry(dependency.into())
            .or_insert(made)
            .clone()
    }

    /// A handle to a live entry's breaker that needs nothing more (it is set up and has every
    /// registry listener): atomics only. `Err(true)`: live but it needs more ([`hand_out`]);
    /// `Err(false)`: being retired.
    ///
    /// [`hand_out`]: Self::hand_out
    #[inline]
    fn hand_out_ready(&self, e: &Entry<C>, now: u64) -> Result<CircuitBreaker<C>, bool> {
        let b = self.ready(e)?;
        touch(e, now, self.touch_granularity.load(Ordering::Relaxed));
        Ok(b)
    }

    /// A handle to a live entry's breaker that needs nothing more, without marking it used;
    /// errors as [`hand_out_ready`](Self::hand_out_ready).
    #[inline]
    fn ready(&self, e: &Entry<C>) -> Result<CircuitBreaker<C>, bool> {
        let b = hold(e).ok_or(false)?;
        if !e.ready.load(Ordering::Acquire)
            || e.listeners_added.load(Ordering::Acquire)
                < self.listener_count.load(Ordering::Acquire)
        {
            return Err(true);
        }
        Ok(b)
    }

    /// A handle to a live entry's breaker, set up (and given the listeners it lacks) first;
    /// `None` when the entry is being retired (or was just rebuilt): look again.
    #[cold]
    fn hand_out(&self, key: &Key, e: &Arc<Entry<C>>, now: u64) -> Option<CircuitBreaker<C>> {
        let b = self.settle(key, e)?;
        touch(e, now, self.touch_granularity.load(Ordering::Relaxed));
        Some(b)
    }

    /// [`hand_out`](Self::hand_out) without marking the entry used.
    #[cold]
    fn settle(&self, key: &Key, e: &Arc<Entry<C>>) -> Option<CircuitBreaker<C>> {
        // Live now? (The handle is let go at once: a set-up may rebuild the entry, which it
        // can only do with no handle out.)
        hold(e)?;
        if !e.ready.load(Ordering::Acquire) {
            self.set_up(key, e);
        }
        self.catch_up(e);
        hold(e)
    }

    /// Sets a new entry up (any lookup that finds it not ready may, and each step is done
    /// once or is idempotent): the registry's listeners, then the record in force for the key,
    /// so the listeners see the override as a transition.
    #[cold]
    fn set_up(&self, key: &Key, e: &Arc<Entry<C>>) {
        self.catch_up(e);
        if e.announced
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            #[cfg(feature = "tracing")]
            e.breaker.subscribe(crate::observe::TracingListener);
        }
        let followed = e.breaker.inner().follow(|| read(&self.record).for_key(key));
        if followed.new_shape {
            // Built from a configuration a reload replaced since, of another shape: replaced
            // by a breaker of the new shape if it may go; else it keeps its own until a later
            // reload can rebuild it.
            self.rebuild(key, e);
        }
        e.ready.store(true, Ordering::Release);
    }

    /// A new entry, without side effects: a lookup that loses the race to insert it throws it
    /// away unseen. The lookups that hand it out set it up.
    fn create(&self, key: &Key, now: u64) -> Arc<Entry<C>> {
        let config = read(&self.record).active.config_for(key);
        let breaker = CircuitBreaker::with_clock(key.to_string(), config, self.clock.clone());
        Arc::new(Entry {
            #[cfg(feature = "metrics")]
            metrics: crate::observe::BreakerMetrics::for_key(&breaker, key),
            breaker,
            last_used: AtomicU64::new(now),
            life: Life::new(),
            ready: AtomicBool::new(false),
            listeners_added: AtomicUsize::new(0),
            announced: AtomicBool::new(false),
        })
    }

    /// Replaces `e` (whose configuration in force has another window shape) by a breaker built
    /// from the record, if it is Closed, not held outside the registry and remembers nothing a
    /// fresh one would forget. Whether it did.
    fn rebuild(&self, key: &Key, e: &Arc<Entry<C>>) -> bool {
        let now = self.clock.now();
        // Made before the entry retires: making it runs user code (the clock, a metrics
        // recorder), which may look the key up, and a lookup waits while its entry retires.
        let fresh = self.create(key, self.clock.recent());
        if !e.life.retire(|| {
            let b = &e.breaker;
            b.state() == State::Closed && !b.in_use(1) && !b.remembers_recovery(now)
        }) {
            return false;
        }
        self.map.pin().insert(key.clone(), fresh);
        e.life.finish(true);
        true
    }

    /// Removes a retired entry from the map (if it is still the one stored for `key`).
    fn remove_retired(&self, key: &Key, e: &Arc<Entry<C>>) -> bool {
        let removed = matches!(
            self.map.pin().remove_if(key, |_, v| Arc::ptr_eq(v, e)),
            Ok(Some(_))
        );
        if removed {
            self.count.fetch_sub(1, Ordering::AcqRel);
            self.removals.fetch_add(1, Ordering::AcqRel);
        }
        e.life.finish(removed);
        removed
    }

    /// The evicted entries are gone: their state gauges read 0 (after every lock is released:
    /// a recorder's code runs here).
    fn gone(&self, evicted: Vec<Arc<Entry<C>>>) -> usize {
        #[cfg(feature = "metrics")]
        for e in &evicted {
            e.metrics.retire();
        }
        evicted.len()
    }

    /// Makes room for one more breaker: idle ones go first, then the least recently used
    /// evictable ones down to 7/8 of `max`. `false` when the registry is full and none may go.
    fn make_room(&self, max: usize) -> bool {
        // The clock is user code: read before the maintenance lock.
        let (now, resolution) = (self.clock.now(), self.clock.resolution());
        let (room, evicted) = {
            let _g = lock(&self.maintenance);
            if self.count.load(Ordering::Acquire) < max {
                return true;
            }
            let mut evicted = self.evict_idle_locked(now, resolution);
            if self.count.load(Ordering::Acquire) >= max {
                evicted.extend(self.evict_lru_locked(max, now));
            }
            // Room, or some breaker went (a racing lookup may have taken the room: try again),
            // or a reservation in flight will show its breaker (or give the room back).
            let pending = self.map.len() < self.count.load(Ordering::Acquire);
            let room = !evicted.is_empty() || self.count.load(Ordering::Acquire) < max || pending;
            (room, evicted)
        };
        self.gone(evicted);
        if room && self.count.load(Ordering::Acquire) >= max {
            crate::sync::yield_now();
        }
        room
    }

    fn evict_lru_locked(&self, max: usize, now: u64) -> Vec<Arc<Entry<C>>> {
        let target = max - max / 8;
        let mut candidates: Vec<(u64, Key, Arc<Entry<C>>)> = self
            .entries()
            .into_iter()
            .filter(|(_, e)| e.breaker.evictable(1, now))
            .map(|(k, e)| (e.last_used.load(Ordering::Relaxed), k, e))
            .collect();
        candidates.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let wanted = self
            .count
            .load(Ordering::Acquire)
            .saturating_sub(target)
            .max(1);
        let mut evicted = Vec::new();
        for (_, key, e) in candidates {
            if evicted.len() >= wanted {
                break;
            }
            if e.life.retire(|| e.breaker.evictable(1, now)) && self.remove_retired(&key, &e) {
                evicted.push(e);
            }
        }
        evicted
    }

    /// Evicts breakers unused for `idle_after` that may go (Closed, clean, not in use).
    /// Returns how many were evicted. Call it periodically, or let `get` call it when full.
    /// A breaker handed out within `idle_after` is never evicted; one unused for `idle_after`
    /// and a sixty-fourth more (the granularity at which lookups note their use) always may be.
    pub fn evict_idle(&self) -> usize {
        // The clock is user code: read before the maintenance lock.
        let (now, resolution) = (self.clock.now(), self.clock.resolution());
        let evicted = {
            let _g = lock(&self.maintenance);
            self.evict_idle_locked(now, resolution)
        };
        self.gone(evicted)
    }

    fn evict_idle_locked(&self, now: u64, resolution: std::time::Duration) -> Vec<Arc<Entry<C>>> {
        let idle = nanos(read(&self.record).active.config.idle_after);
        // `last_used` lags a use by less than the granularity, and by the clock's resolution.
        let slack = self
            .touch_granularity
            .load(Ordering::Relaxed)
            .saturating_add(nanos(resolution));
        let idle_for = |e: &Entry<C>| {
            now.saturating_sub(e.last_used.load(Ordering::Relaxed)) >= idle.saturating_add(slack)
        };
        let mut evicted = Vec::new();
        for (k, e) in self.entries() {
            // The walk holds the entry, not the breaker: one handle is the registry's.
            if idle_for(&e)
                && e.life
                    .retire(|| idle_for(&e) && e.breaker.evictable(1, now))
                && self.remove_retired(&k, &e)
            {
                evicted.push(e);
            }
        }
        evicted
    }

    /// Visits every breaker the registry holds now, with its key, in no particular order,
    /// without creating or touching any (a read never makes state). A breaker whose lookup is
    /// still setting it up is set up first, as [`peek`](Self::peek) does, so `f` never sees a
    /// breaker that has not yet followed a kill switch. `f` may call back into the registry: it
    /// runs on a copy of the entries, with no lock held.
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
        for (k, e) in self.entries() {
            // A breaker whose lookup is still setting it up is set up first, as `peek` does.
            if !e.ready.load(Ordering::Acquire) && self.settle(&k, &e).is_none() {
                continue;
            }
            f(&k, &e.breaker);
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
        read(&self.record).overrides.for_key(key)
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
    /// dependency, those created later) are held in `state`, whatever the configuration's
    /// `[operator]` section says, through every [`reload`](Self::reload), reset, rebuild and
    /// eviction, until [`clear_operator`](Self::clear_operator). [`OperatorState::Auto`] is an
    /// override too: the rules decide for the selection even where the configuration forces a
    /// state. Returns how many existing breakers changed state.
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
    /// // A configuration sync does not lift a kill switch thrown at run time, nor a reset.
    /// registry.reload(RegistryConfig::default())?;
    /// registry.reset(&kill);
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
    /// has one. Returns how many existing breakers changed state.
    pub fn clear_operator(&self, selector: &Selector) -> usize {
        self.change_overrides(selector, |o, selector| {
            o.runtime.remove(&selector);
        })
    }

    /// The run-time overrides in force: dependency-wide ones first, then per key, each sorted
    /// by name.
    pub fn operator_overrides(&self) -> Vec<(Selector, OperatorState)> {
        let mut all: Vec<(Selector, OperatorState)> = read(&self.record)
            .overrides
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
        read(&self.record).overrides.runtime.get(selector).copied()
    }

    fn change_overrides(
        &self,
        selector: &Selector,
        change: impl FnOnce(&mut config::Overrides, Selector),
    ) -> usize {
        change(&mut write(&self.record).overrides, selector.clone());
        // Pairs with the fence of a lookup (`hold`): either that lookup's set-up sees the
        // change, or this walk sees the breaker it created.
        publish_fence();
        self.follow_record(Some(selector)).0
    }

    /// Has every (selected) breaker follow the record; how many changed state, and what the
    /// reload report says of each.
    fn follow_record(&self, only: Option<&Selector>) -> (usize, ReloadReport) {
        let mut moved = 0;
        let mut report = ReloadReport::default();
        for (k, e) in self.entries() {
            if only.is_some_and(|s| !s.selects(&k)) {
                continue;
            }
            let f = e.breaker.inner().follow(|| read(&self.record).for_key(&k));
            moved += usize::from(f.moved);
            if f.reconfigured {
                report.reconfigured.push(k.clone());
            }
            if f.new_shape {
                if self.rebuild(&k, &e) {
                    report.rebuilt.push(k);
                } else {
                    report.deferred.push(k);
                }
            }
        }
        (moved, report)
    }

    /// Operator: back to Closed with a fresh window, for the selected breakers (overrides
    /// stay as they are: a breaker an override holds stays where it is). Returns how many
    /// breakers were reset.
    pub fn reset(&self, selector: &Selector) -> usize {
        self.entries()
            .into_iter()
            .filter(|(k, _)| selector.selects(k))
            .filter(|(_, e)| e.breaker.inner().operator(State::Closed))
            .count()
    }

    /// Applies a new configuration to the live registry: bounds, named configurations and
    /// the configured operator overrides (run-time ones stay). Each breaker whose configuration
    /// changed is reconfigured in place (state, generation and window kept); one whose window
    /// shape changed is rebuilt if it is Closed and nobody outside the registry holds it, else
    /// deferred (see [`ReloadReport`]). A breaker created while the reload runs follows the
    /// new configuration once its lookup returns.
    pub fn reload(&self, config: RegistryConfig) -> Result<ReloadReport, ConfigError> {
        config.validate()?;
        self.touch_granularity
            .store(granularity(config.idle_after), Ordering::Relaxed);
        write(&self.record).reload(config);
        // Pairs with the fence of a lookup (`hold`), as for an override.
        publish_fence();
        Ok(self.follow_record(None).1)
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
        for (_, e) in self.entries() {
            e.metrics.update(&e.breaker);
        }
        let summary = self.summary();
        // Registering a gauge runs the recorder's code: not under the lock.
        let missing = lock(&self.dependency_gauges).missing(&summary);
        let made = missing
            .into_iter()
            .map(crate::observe::DependencyGauges::register)
            .collect();
        let sets = lock(&self.dependency_gauges).plan(&summary, made);
        for (g, v) in sets {
            g.set(v);
        }
    }
}

/// A handle to `e`'s breaker if `e` is live (see the module docs on the lifecycle).
#[inline]
fn hold<C: Clock>(e: &Entry<C>) -> Option<CircuitBreaker<C>> {
    e.life.hold(|| e.breaker.clone())
}

/// Marks an entry used at `now`; writes only when the stored use is `granularity` old or
/// more, so hot keys read-share their cache line.
#[inline]
fn touch<C: Clock>(e: &Entry<C>, now: u64, granularity: u64) {
    if now.saturating_sub(e.last_used.load(Ordering::Relaxed)) >= granularity {
        e.last_used.store(now, Ordering::Relaxed);
    }
}

fn read<T>(m: &RwLock<T>) -> crate::sync::RwLockReadGuard<'_, T> {
    crate::sync::read(m)
}

fn write<T>(m: &RwLock<T>) -> crate::sync::RwLockWriteGuard<'_, T> {
    crate::sync::write(m)
}
