//! Server-directed scoping: the server says which part of a dependency failed (a shard, a
//! cell, a host), and the failure is recorded on that part's breaker instead of the
//! dependency-wide one.
//!
//! A breaker aggregates outcomes into one verdict, so with one breaker for a sharded
//! dependency a few hot shards trip it and short-circuit every shard. When the server names
//! the overloaded shard (a response header such as `x-overloaded-shard`, a gRPC metadata
//! entry, an error type), a classifier returns that [`Blame`] beside the outcome
//! ([`Classify::blame`](crate::Classify::blame)), and [`ServerDirected`] records the result on
//! the registry's breaker for `dependency/shard=<blamed>`, created on demand. The next call
//! that names the shard is admitted or refused by the shard's breaker as well as the
//! dependency-wide one; calls to healthy shards never see it, and shards nobody blamed cost no
//! key at all.
//!
//! ```
//! use std::sync::Arc;
//! use tripline::registry::{Blame, Key, Registry, RegistryConfig, ServerDirected};
//! use tripline::{Classification, FailureKind, State};
//!
//! let registry = Arc::new(Registry::new(RegistryConfig::default())?);
//! let catalog = ServerDirected::new(registry.clone(), Key::new("catalog")?)?;
//!
//! // The server answers 503 and blames shard 7, until shard 7's breaker refuses the calls.
//! while let Ok(permit) = catalog.admit(Some("7")) {
//!     permit.record(Classification::failure(FailureKind::Unavailable), Some(&Blame::shard("7")));
//! }
//! assert_eq!(registry.get(&"catalog/shard=7".parse()?)?.state(), State::Open);
//! assert_eq!(catalog.dependency_breaker().state(), State::Closed);
//! assert!(catalog.admit(Some("7")).is_err()); // refused by shard 7's breaker
//! assert!(catalog.admit(Some("8")).is_ok()); // shard 8 never sees it
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What the server says is untrusted input
//! A server (or anything on the path that can set a response header) can name any shard, so
//! a blame is followed to a new breaker only within three bounds:
//!
//! * **The key rules.** A blamed value is a key only if it passes [`Key::scoped`] (1 to 256
//!   bytes, no whitespace, control, invisible or bidirectional characters, no `/`, `=`, `{`,
//!   `}`); a header value that is not visible ASCII is refused before that
//!   ([`Blame::invalid`]). An empty or blank header is refused too.
//! * **A cap per dependency** ([`ServerDirected::with_max_scopes`], default
//!   [`DEFAULT_MAX_SCOPES`] = 64): the dependency's blames create at most that many scope
//!   breakers, counted per dependency across every `ServerDirected` handle of it on the
//!   registry. Scopes the registry evicts (idle, Closed and clean) free their place; breakers
//!   made otherwise (a lookup of the key, an operator's action) do not count, and a blame for
//!   a scope that already has a breaker is always followed. So a server naming 10,000
//!   distinct shards makes 64 breakers, not 10,000, and cannot crowd other dependencies'
//!   breakers out of the registry. The cost: while the cap is taken (a blamed shard's breaker
//!   holds its failures until its window forgets them: a count window only as calls naming
//!   the shard succeed, a time window as time passes), a further shard's failures count
//!   dependency-wide, as they would without server direction.
//! * **The registry's bound** (`max_breakers`, with its own eviction of idle breakers).
//!
//! A blame refused for any of these is not silently dropped: the result is recorded on the
//! dependency-wide breaker (the failure still counts), [`DirectedPermit::record`] says so
//! ([`Attribution::Refused`] with the [`BlameRefused`] reason), the refusal is counted
//! ([`ServerDirected::refused_blames`]; with the `metrics` feature
//! `tripline_directed_blames_refused_total{dependency, reason}`, `reason` = `invalid_scope`,
//! `too_many_scopes`, `registry_full`), and with the `tracing` feature a `WARN` event (target
//! `tripline::registry::directed`) reports it, at most one per dependency every 10 seconds of
//! the registry's clock, with the count of those it held back (`suppressed`). The blamed text
//! appears in the event only as an escaped prefix (at most 32 characters, ASCII only,
//! `\u{202e}` for a bidirectional override, then the value's length in bytes), and in a
//! [`BlameRefused::Key`] error as the key rules quote it when that is at most 96 bytes of
//! printable ASCII, else as that prefix: a hostile value can neither flood a log nor disguise
//! itself in it. Nothing panics.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use super::{Key, Registry, RegistryError, ScopeKind};
use crate::clock::Clock;
use crate::error::{ConfigError, Rejected};
use crate::outcome::{Classification, Outcome};
use crate::sync::{AtomicU64, Mutex, Ordering, lock};
use crate::{CircuitBreaker, OwnedPermit, Recorded};

/// The part of a dependency a server blamed for a result: a scope kind and its value, or why
/// the value the server sent cannot be one (a header that is not text).
///
/// ```
/// use tripline::registry::{Blame, ScopeKind};
/// let b = Blame::shard("17");
/// assert_eq!((b.kind(), b.value().ok()), (ScopeKind::Shard, Some("17")));
/// assert_eq!(b.key("catalog")?.to_string(), "catalog/shard=17");
/// assert_eq!(Blame::shard("a/b").key("catalog").unwrap_err().field(), "key.scope");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blame {
    kind: ScopeKind,
    value: Result<Box<str>, ConfigError>,
}

impl Blame {
    /// The server blamed the `kind` part named `value` (checked when it becomes a key).
    pub fn new(kind: ScopeKind, value: &str) -> Self {
        Self {
            kind,
            value: Ok(value.into()),
        }
    }

    /// The server blamed the shard named `value`.
    pub fn shard(value: &str) -> Self {
        Self::new(ScopeKind::Shard, value)
    }

    /// The server blamed a `kind` part, but what it sent cannot name one (`error` says why: a
    /// header value that is not text, say).
    pub fn invalid(kind: ScopeKind, error: ConfigError) -> Self {
        Self {
            kind,
            value: Err(error),
        }
    }

    /// The kind of part blamed.
    pub fn kind(&self) -> ScopeKind {
        self.kind
    }

    /// The value blamed, or why there is none.
    pub fn value(&self) -> Result<&str, &ConfigError> {
        self.value.as_deref()
    }

    /// The key of the blamed part of `dependency`, under the key rules of [`Key::scoped`].
    pub fn key(&self, dependency: &str) -> Result<Key, ConfigError> {
        match &self.value {
            Ok(v) => Key::scoped(dependency, self.kind, v),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Why a blame was not followed (the result went to the dependency-wide breaker).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlameRefused {
    /// The blamed value cannot be a key.
    #[error("blamed scope refused: {0}")]
    Key(ConfigError),
    /// The registry is full and none of its breakers may go.
    #[error("blamed scope refused: {0}")]
    Full(RegistryError),
    /// The dependency's blames already created `max` scope breakers that the registry still
    /// holds ([`ServerDirected::with_max_scopes`]).
    #[error(
        "blamed scope refused: the dependency's blames already hold {max} scope breakers \
         (max_scopes)"
    )]
    TooManyScopes {
        /// The cap.
        max: usize,
    },
}

impl BlameRefused {
    /// The refusal's reason as a metric label: `invalid_scope`, `registry_full` or
    /// `too_many_scopes`.
    ///
    /// ```
    /// use tripline::registry::BlameRefused;
    /// assert_eq!(BlameRefused::TooManyScopes { max: 64 }.reason(), "too_many_scopes");
    /// ```
    pub fn reason(&self) -> &'static str {
        REASONS[self.index()]
    }

    fn index(&self) -> usize {
        match self {
            BlameRefused::Key(_) => 0,
            BlameRefused::TooManyScopes { .. } => 1,
            BlameRefused::Full(_) => 2,
        }
    }
}

const REASONS: [&str; 3] = ["invalid_scope", "too_many_scopes", "registry_full"];

/// The cap on the scope breakers one dependency's blames create, unless
/// [`ServerDirected::with_max_scopes`] sets another.
pub const DEFAULT_MAX_SCOPES: usize = 64;

/// How many blames of a dependency were refused, by reason, since the registry first saw a
/// [`ServerDirected`] handle of it (see [`ServerDirected::refused_blames`]).
///
/// ```
/// use tripline::registry::RefusedBlames;
/// assert_eq!(RefusedBlames::default().total(), 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefusedBlames {
    /// The blamed value could not be a key ([`BlameRefused::Key`]).
    pub invalid: u64,
    /// The dependency's cap on scopes was taken ([`BlameRefused::TooManyScopes`]).
    pub too_many_scopes: u64,
    /// The registry was full ([`BlameRefused::Full`]).
    pub registry_full: u64,
}

impl RefusedBlames {
    /// All refusals.
    pub fn total(&self) -> u64 {
        self.invalid + self.too_many_scopes + self.registry_full
    }
}

/// At most one `tracing` event per dependency in this many nanoseconds of the registry's
/// clock.
#[cfg(feature = "tracing")]
const WARN_EVERY: u64 = 10_000_000_000;

/// What a registry keeps per server-directed dependency: the scopes its blames created, and
/// its refused blames. Shared by every [`ServerDirected`] handle of the dependency.
pub(crate) struct Ledger {
    scopes: Mutex<Scopes>,
    refused: [AtomicU64; 3],
    #[cfg(feature = "tracing")]
    /// When the last event was sent, plus one (0: never).
    warned_at: AtomicU64,
    #[cfg(feature = "tracing")]
    suppressed: AtomicU64,
    #[cfg(feature = "metrics")]
    counters: [metrics::Counter; 3],
}

#[derive(Default)]
struct Scopes {
    /// The scopes the blames created (or are creating: the count of lookups in flight).
    held: HashMap<Key, u32>,
    /// The registry's removals when `held` was last checked against it.
    removals_seen: u64,
}

impl Ledger {
    pub(crate) fn new(dependency: &str) -> Self {
        #[cfg(not(feature = "metrics"))]
        let _ = dependency;
        Self {
            scopes: Mutex::new(Scopes::default()),
            refused: std::array::from_fn(|_| AtomicU64::new(0)),
            #[cfg(feature = "tracing")]
            warned_at: AtomicU64::new(0),
            #[cfg(feature = "tracing")]
            suppressed: AtomicU64::new(0),
            #[cfg(feature = "metrics")]
            counters: REASONS.map(|reason| {
                metrics::counter!(
                    "tripline_directed_blames_refused_total",
                    "dependency" => dependency.to_string(),
                    "reason" => reason
                )
            }),
        }
    }

    /// Drops the scopes the registry no longer holds (when it removed any since the last
    /// look, or `always`). Runs no user code: the registry's map is read with atomics.
    fn prune<H: ScopeHolder>(&self, s: &mut Scopes, holder: &H, always: bool) {
        let removals = holder.removals();
        if always || removals != s.removals_seen {
            s.removals_seen = removals;
            s.held.retain(|k, pending| *pending > 0 || holder.holds(k));
        }
    }

    /// Takes a place for `key` under `max`; `false` when the places are taken.
    fn reserve<H: ScopeHolder>(&self, key: &Key, max: usize, registry: &H) -> bool {
        let mut s = lock(&self.scopes);
        if let Some(pending) = s.held.get_mut(key) {
            *pending += 1;
            return true;
        }
        if s.held.len() >= max {
            self.prune(&mut s, registry, false);
            if s.held.len() >= max {
                return false;
            }
        }
        s.held.insert(key.clone(), 1);
        true
    }

    /// The lookup for a reserved `key` is over; it made (or found) the breaker, or not.
    fn settle<H: ScopeHolder>(&self, key: &Key, made: bool, registry: &H) {
        let mut s = lock(&self.scopes);
        if let Some(pending) = s.held.get_mut(key) {
            *pending = pending.saturating_sub(1);
            if !made && *pending == 0 && !registry.holds(key) {
                s.held.remove(key);
            }
        }
    }

    /// The blamed scope's breaker: one `holder` holds, else a new one within `max` and the
    /// holder's bound.
    fn scope_breaker<H: ScopeHolder>(
        &self,
        holder: &H,
        key: &Key,
        max: usize,
    ) -> Result<H::Breaker, BlameRefused> {
        if let Some(b) = holder.held(key) {
            return Ok(b);
        }
        if !self.reserve(key, max, holder) {
            return Err(BlameRefused::TooManyScopes { max });
        }
        let got = holder.breaker(key);
        self.settle(key, got.is_ok(), holder);
        got.map_err(H::refusal)
    }

    fn held<H: ScopeHolder>(&self, registry: &H) -> usize {
        let mut s = lock(&self.scopes);
        self.prune(&mut s, registry, true);
        s.held.len()
    }

    /// Counts a refused blame of `raw` (the blamed text) for `dependency`, and reports it
    /// (rate-limited on `now`, the holder's clock, read only when an event may be due).
    fn note(&self, dependency: &Key, refused: &BlameRefused, raw: &str, now: impl FnOnce() -> u64) {
        let i = refused.index();
        self.refused[i].fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        self.counters[i].increment(1);
        #[cfg(feature = "tracing")]
        if let Some(suppressed) = self.may_warn(now()) {
            tracing::warn!(
                target: "tripline::registry::directed",
                dependency = %dependency,
                reason = refused.reason(),
                blamed = %shown(raw),
                suppressed,
                "a blamed scope was refused; the result was recorded on the dependency-wide breaker"
            );
        }
        #[cfg(not(feature = "tracing"))]
        let _ = (dependency, raw, now);
    }

    fn refused(&self) -> RefusedBlames {
        let n = |i: usize| self.refused[i].load(Ordering::Relaxed);
        RefusedBlames {
            invalid: n(0),
            too_many_scopes: n(1),
            registry_full: n(2),
        }
    }

    /// Whether to send an event now, and if so how many were held back since the last one.
    #[cfg(feature = "tracing")]
    fn may_warn(&self, now: u64) -> Option<u64> {
        let last = self.warned_at.load(Ordering::Acquire);
        let due = last == 0 || now.saturating_sub(last - 1) >= WARN_EVERY;
        if due
            && self
                .warned_at
                .compare_exchange(
                    last,
                    now.saturating_add(1),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::AcqRel));
        }
        self.suppressed.fetch_add(1, Ordering::AcqRel);
        None
    }
}

/// Untrusted text as it may appear in an error, a log or an event: at most 32 characters,
/// escaped to printable ASCII (`\u{202e}`, `\n`), quoted, and the length in bytes when cut.
fn shown(v: &str) -> String {
    const MAX: usize = 32;
    let mut out = String::from("\"");
    out.extend(v.chars().take(MAX).flat_map(char::escape_default));
    out.push('"');
    if v.chars().nth(MAX).is_some() {
        let _ = write!(out, "... ({} bytes)", v.len());
    }
    out
}

/// `e` (why `blame` cannot be a key) with its value bounded: kept when it is short printable
/// ASCII, else replaced by [`shown`] of the blamed text.
fn bounded(e: ConfigError, blame: &Blame) -> ConfigError {
    let v = e.value();
    if v.len() <= 96 && v.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return e;
    }
    let raw = blame.value().unwrap_or(v);
    ConfigError::new(e.field(), shown(raw), e.allowed())
}

/// Where [`DirectedPermit::record`] recorded a result.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attribution {
    /// Nobody was blamed (or the result was not a failure): the dependency-wide breaker (and
    /// the named scope's, if the call named one that has a breaker) recorded it.
    Dependency,
    /// The blamed scope's breaker recorded it (`Recorded::Stale` or a refusal there, when the
    /// scope's breaker is already open or its probes are taken, drops it: that breaker
    /// already says the scope is sick).
    Scope(Key, Option<Recorded>),
    /// The blame was refused; the dependency-wide breaker recorded the result.
    Refused(BlameRefused),
}

/// A dependency whose results are recorded where the server directs: see the [module
/// docs](self). Cloning shares the registry and the dependency-wide breaker.
pub struct ServerDirected<C: Clock + Clone = crate::MonotonicClock> {
    registry: Arc<Registry<C>>,
    dependency: Key,
    breaker: CircuitBreaker<C>,
    ledger: Arc<Ledger>,
    max_scopes: usize,
}

impl<C: Clock + Clone> Clone for ServerDirected<C> {
    fn clone(&self) -> Self {
        Self {
            registry: self.registry.clone(),
            dependency: self.dependency.clone(),
            breaker: self.breaker.clone(),
            ledger: self.ledger.clone(),
            max_scopes: self.max_scopes,
        }
    }
}

impl<C: Clock + Clone> std::fmt::Debug for ServerDirected<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerDirected")
            .field("dependency", &self.dependency)
            .field("state", &self.breaker.state())
            .field("max_scopes", &self.max_scopes)
            .finish_non_exhaustive()
    }
}

impl<C: Clock + Clone> ServerDirected<C> {
    /// Results of `dependency` (its scope, if it has one, is dropped: scopes are what the
    /// server blames) recorded on `registry`'s breakers. Takes the dependency-wide breaker
    /// from the registry now (and holds it, so it is never evicted); fails if the registry is
    /// full. Its blames create at most [`DEFAULT_MAX_SCOPES`] scope breakers (see
    /// [`with_max_scopes`](Self::with_max_scopes)).
    pub fn new(registry: Arc<Registry<C>>, dependency: Key) -> Result<Self, RegistryError> {
        let dependency = if dependency.scope().is_some() {
            Key::new(dependency.dependency()).unwrap_or(dependency)
        } else {
            dependency
        };
        let breaker = registry.get(&dependency)?;
        let ledger = registry.ledger(dependency.dependency());
        Ok(Self {
            registry,
            dependency,
            breaker,
            ledger,
            max_scopes: DEFAULT_MAX_SCOPES,
        })
    }

    /// The same dependency whose blames create at most `max` scope breakers (0: none; a
    /// blame is then followed only to a scope that already has a breaker). The count is the
    /// dependency's on this registry, shared by all its handles (each refuses a new scope
    /// once the count reaches its own cap); scopes the registry evicts free their place. A
    /// blame for a new scope above the cap is recorded on the dependency-wide breaker and
    /// reported as [`BlameRefused::TooManyScopes`] (see the [module docs](self)).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tripline::registry::{Attribution, Blame, BlameRefused, Key, Registry, RegistryConfig, ServerDirected};
    /// use tripline::{Classification, FailureKind};
    ///
    /// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
    /// let catalog = ServerDirected::new(registry.clone(), Key::new("catalog")?)?.with_max_scopes(2);
    /// let fail = Classification::failure(FailureKind::Unavailable);
    /// for shard in ["1", "2", "3"] {
    ///     let at = catalog.admit(None)?.record(fail, Some(&Blame::shard(shard)));
    ///     if shard == "3" {
    ///         assert_eq!(at, Attribution::Refused(BlameRefused::TooManyScopes { max: 2 }));
    ///     }
    /// }
    /// assert_eq!(catalog.scopes(), 2);
    /// assert_eq!(catalog.dependency_breaker().metrics().failed_calls, 1);
    /// assert_eq!(catalog.refused_blames().too_many_scopes, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_max_scopes(mut self, max: usize) -> Self {
        self.max_scopes = max;
        self
    }

    /// The cap on the scope breakers this handle's blames create.
    pub fn max_scopes(&self) -> usize {
        self.max_scopes
    }

    /// How many scope breakers the dependency's blames created that the registry still holds
    /// (those it evicted no longer count).
    pub fn scopes(&self) -> usize {
        self.ledger.held(&*self.registry)
    }

    /// How many of the dependency's blames were refused, by reason (all its handles on this
    /// registry together).
    pub fn refused_blames(&self) -> RefusedBlames {
        self.ledger.refused()
    }

    /// The blamed scope's breaker: one the registry holds, else a new one within the cap and
    /// the registry's bound.
    fn scope_breaker(&self, key: &Key) -> Result<CircuitBreaker<C>, BlameRefused> {
        self.ledger
            .scope_breaker(&*self.registry, key, self.max_scopes)
    }

    fn note_refused(&self, refused: &BlameRefused, raw: &str) {
        self.ledger
            .note(&self.dependency, refused, raw, || self.registry.now());
    }

    /// The registry.
    pub fn registry(&self) -> &Arc<Registry<C>> {
        &self.registry
    }

    /// The dependency's key.
    pub fn dependency(&self) -> &Key {
        &self.dependency
    }

    /// The dependency-wide breaker.
    pub fn dependency_breaker(&self) -> &CircuitBreaker<C> {
        &self.breaker
    }

    /// The key of the shard named `shard`, if it can be one.
    pub fn shard_key(&self, shard: &str) -> Result<Key, ConfigError> {
        Key::scoped(self.dependency.dependency(), ScopeKind::Shard, shard)
    }

    /// A permit for a call, naming the shard it goes to (if the caller knows): the
    /// dependency-wide breaker must admit it, and so must the shard's breaker if one exists
    /// (one is made only when a server blames the shard: naming a shard creates no key). A
    /// name that cannot be a key names no shard.
    pub fn admit(&self, shard: Option<&str>) -> Result<DirectedPermit<C>, Rejected> {
        self.admit_scoped(shard.and_then(|s| self.shard_key(s).ok()))
    }

    /// [`admit`](Self::admit) for a call naming any scope of the dependency (`key`'s dependency
    /// should be this one's; its scope is what the call names).
    pub fn admit_scoped(&self, key: Option<Key>) -> Result<DirectedPermit<C>, Rejected> {
        let scoped = match key.and_then(|k| self.registry.peek(&k).map(|b| (k, b))) {
            Some((k, b)) => Some((k, b.try_acquire_owned()?)),
            None => None,
        };
        let dependency = self.breaker.try_acquire_owned()?;
        Ok(DirectedPermit {
            directed: self.clone(),
            dependency,
            scoped,
        })
    }
}

/// The right to make one call of a [`ServerDirected`] dependency. Dropping it abandons the
/// call (nothing is recorded).
#[derive(Debug)]
pub struct DirectedPermit<C: Clock + Clone = crate::MonotonicClock> {
    directed: ServerDirected<C>,
    dependency: OwnedPermit<C>,
    scoped: Option<(Key, OwnedPermit<C>)>,
}

impl<C: Clock + Clone> DirectedPermit<C> {
    /// The key of the scope whose breaker admitted the call too, if any.
    pub fn scope(&self) -> Option<&Key> {
        self.scoped.as_ref().map(|(k, _)| k)
    }

    /// Records the call's classification where `blame` directs: a failure on the blamed
    /// scope's breaker (made on demand, within the dependency's
    /// [cap](ServerDirected::with_max_scopes) and the registry's bound) instead of the
    /// dependency-wide one; with no blame, or a blame that is refused (counted, and reported
    /// as the [module docs](self) say), on the dependency-wide one. Only a failure's blame is
    /// followed: a success or an ignored result goes where an unblamed one goes, so a server
    /// that names a shard on every answer creates no keys until the shard fails. The scope
    /// the call named records its successes, and its failures only when the server blamed it.
    pub fn record(self, c: Classification, blame: Option<&Blame>) -> Attribution {
        let Self {
            directed,
            dependency,
            scoped,
        } = self;
        let Some(blame) = blame.filter(|_| c.outcome == Outcome::Failure) else {
            dependency.record_classified(c);
            if let Some((_, p)) = scoped {
                p.record_classified(named_share(c));
            }
            return Attribution::Dependency;
        };
        // The blamed text, for the report of a refusal.
        let raw = blame.value().unwrap_or_else(|e| e.value());
        let key = match blame.key(directed.dependency.dependency()) {
            Ok(k) => k,
            Err(e) => {
                dependency.record_classified(c);
                if let Some((_, p)) = scoped {
                    p.record_classified(named_share(c));
                }
                let refused = BlameRefused::Key(bounded(e, blame));
                directed.note_refused(&refused, raw);
                return Attribution::Refused(refused);
            }
        };
        let (named, other) = match scoped {
            Some((n, p)) if n == key => (Some(p), None),
            other => (None, other),
        };
        let blamed = match named {
            Some(p) => Ok(Ok(p)),
            None => directed.scope_breaker(&key).map(|b| b.try_acquire_owned()),
        };
        if let Some((_, p)) = other {
            p.record_classified(named_share(c));
        }
        match blamed {
            Err(refused) => {
                dependency.record_classified(c);
                directed.note_refused(&refused, raw);
                Attribution::Refused(refused)
            }
            Ok(p) => {
                // The dependency-wide breaker hears of successes, not of the blamed failure.
                dependency.record_classified(named_share(c));
                let r = p.ok().map(|p| p.record_classified(c));
                Attribution::Scope(key, r)
            }
        }
    }
}

/// Keyed breakers a server-directed dependency can record on, whichever host keeps them: the
/// in-process [`Registry`] and the fleet-wide `tripline_redis::SharedRegistry` (whose
/// breakers' state lives in Redis). [`DirectedOn`] runs a dependency over any of them.
///
/// ```
/// use tripline::registry::{Key, Registry, RegistryConfig, ScopeHolder};
/// let registry = Registry::new(RegistryConfig::default())?;
/// let key: Key = "catalog/shard=7".parse()?;
/// assert!(registry.held(&key).is_none());
/// registry.breaker(&key)?;
/// assert!(registry.holds(&key));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait ScopeHolder: Send + Sync + 'static {
    /// Its breakers.
    type Breaker: crate::Breaker;
    /// Why it gave no breaker for a key.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The breaker for `key`, made on first use, under the holder's bound.
    fn breaker(&self, key: &Key) -> Result<Self::Breaker, Self::Error>;

    /// The breaker for `key` if the holder holds one, marked used; never makes one.
    fn held(&self, key: &Key) -> Option<Self::Breaker>;

    /// Whether the holder holds a breaker for `key`. Called under a lock of the dependency's:
    /// it must run no user code (no listener, clock or recorder) and never block for long.
    fn holds(&self, key: &Key) -> bool;

    /// How many breakers the holder dropped so far (evicted, or to make room); a dependency at
    /// its cap of scopes looks for the scopes that went only when this moved.
    fn removals(&self) -> u64;

    /// The holder's clock, in nanoseconds (rate-limits the reports of refused blames).
    fn now(&self) -> u64;

    /// `error`, from a lookup of a blamed scope, as the reason the blame was refused.
    fn refusal(error: Self::Error) -> BlameRefused;
}

impl<C: Clock + Clone> ScopeHolder for Registry<C> {
    type Breaker = CircuitBreaker<C>;
    type Error = RegistryError;

    fn breaker(&self, key: &Key) -> Result<CircuitBreaker<C>, RegistryError> {
        self.get(key)
    }

    fn held(&self, key: &Key) -> Option<CircuitBreaker<C>> {
        self.get_held(key)
    }

    fn holds(&self, key: &Key) -> bool {
        self.contains(key)
    }

    fn removals(&self) -> u64 {
        Registry::removals(self)
    }

    fn now(&self) -> u64 {
        self.clock.recent()
    }

    fn refusal(error: RegistryError) -> BlameRefused {
        BlameRefused::Full(error)
    }
}

/// [`ServerDirected`] over any [`ScopeHolder`], with the admission and the recording as
/// futures (a shared breaker's decisions may take a round trip): the same rules, cap,
/// attribution and reports. Over `tripline_redis::SharedRegistry` the shard breakers are
/// fleet-wide: one replica's blamed failures open the shard's breaker for every replica that
/// holds a handle to it; a replica takes a handle when the server first blames the shard to
/// it (its own recorded failure then meets the fleet's Open state and is refused there), or
/// when [`watch`](Self::watch) names the shard. The cap on scopes is this handle's and its
/// clones' (not the holder's, as it is for [`ServerDirected`] on a [`Registry`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use tripline::registry::{Blame, DirectedOn, Key, Registry, RegistryConfig};
/// use tripline::{Classification, FailureKind};
///
/// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
/// let catalog = DirectedOn::new(registry, Key::new("catalog")?)?;
/// while let Ok(permit) = catalog.admit(Some("7")).await {
///     let fail = Classification::failure(FailureKind::Unavailable);
///     permit.record(fail, Some(&Blame::shard("7"))).await;
/// }
/// assert_eq!(catalog.admit(Some("7")).await.unwrap_err().breaker(), "catalog/shard=7");
/// assert!(catalog.admit(Some("8")).await.is_ok());
/// # Ok(())
/// # }
/// ```
pub struct DirectedOn<H: ScopeHolder> {
    holder: Arc<H>,
    dependency: Key,
    breaker: H::Breaker,
    ledger: Arc<Ledger>,
    max_scopes: usize,
}

impl<H: ScopeHolder> Clone for DirectedOn<H> {
    fn clone(&self) -> Self {
        Self {
            holder: self.holder.clone(),
            dependency: self.dependency.clone(),
            breaker: self.breaker.clone(),
            ledger: self.ledger.clone(),
            max_scopes: self.max_scopes,
        }
    }
}

impl<H: ScopeHolder> std::fmt::Debug for DirectedOn<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::Breaker as _;
        f.debug_struct("DirectedOn")
            .field("dependency", &self.dependency)
            .field("state", &self.breaker.state())
            .field("max_scopes", &self.max_scopes)
            .finish_non_exhaustive()
    }
}

impl<H: ScopeHolder> DirectedOn<H> {
    /// Results of `dependency` (its scope, if any, dropped) recorded on `holder`'s breakers;
    /// takes the dependency-wide breaker from the holder now. At most [`DEFAULT_MAX_SCOPES`]
    /// scope breakers made by blames (see [`with_max_scopes`](Self::with_max_scopes)).
    pub fn new(holder: Arc<H>, dependency: Key) -> Result<Self, H::Error> {
        let dependency = match dependency.scope() {
            Some(_) => Key::new(dependency.dependency()).unwrap_or(dependency),
            None => dependency,
        };
        let breaker = holder.breaker(&dependency)?;
        Ok(Self {
            holder,
            ledger: Arc::new(Ledger::new(dependency.dependency())),
            dependency,
            breaker,
            max_scopes: DEFAULT_MAX_SCOPES,
        })
    }

    /// The same dependency whose blames make at most `max` scope breakers (see
    /// [`ServerDirected::with_max_scopes`]).
    #[must_use]
    pub fn with_max_scopes(mut self, max: usize) -> Self {
        self.max_scopes = max;
        self
    }

    /// The holder.
    pub fn holder(&self) -> &Arc<H> {
        &self.holder
    }

    /// The dependency's key.
    pub fn dependency(&self) -> &Key {
        &self.dependency
    }

    /// The dependency-wide breaker.
    pub fn dependency_breaker(&self) -> &H::Breaker {
        &self.breaker
    }

    /// How many scope breakers this handle's blames made that the holder still holds.
    pub fn scopes(&self) -> usize {
        self.ledger.held(&*self.holder)
    }

    /// How many of this handle's (and its clones') blames were refused, by reason.
    pub fn refused_blames(&self) -> RefusedBlames {
        self.ledger.refused()
    }

    /// The key of the shard named `shard`, if it can be one.
    pub fn shard_key(&self, shard: &str) -> Result<Key, ConfigError> {
        Key::scoped(self.dependency.dependency(), ScopeKind::Shard, shard)
    }

    /// Takes a handle to the breaker of the shard named `shard` (within the cap), so that
    /// calls naming it consult it before the server blames it to this process: with a shared
    /// holder, where other replicas' blames may already have opened it. Whether this handle
    /// holds it now.
    pub fn watch(&self, shard: &str) -> bool {
        self.shard_key(shard)
            .ok()
            .is_some_and(|k| self.scope_breaker(&k).is_ok())
    }

    /// A permit for a call naming the shard it goes to, if known: the dependency-wide breaker
    /// must admit it, and so must the shard's breaker if the holder holds one (see
    /// [`ServerDirected::admit`]).
    pub async fn admit(&self, shard: Option<&str>) -> Result<DirectedOnPermit<H>, Rejected> {
        let key = shard.and_then(|s| self.shard_key(s).ok());
        self.admit_scoped(key).await
    }

    /// [`admit`](Self::admit) for a call naming any scope of the dependency.
    pub async fn admit_scoped(&self, key: Option<Key>) -> Result<DirectedOnPermit<H>, Rejected> {
        use crate::Breaker as _;
        let scoped = match key.and_then(|k| self.holder.held(&k).map(|b| (k, b))) {
            Some((k, b)) => Some((k, b.acquire().await?)),
            None => None,
        };
        let dependency = self.breaker.acquire().await?;
        Ok(DirectedOnPermit {
            directed: self.clone(),
            dependency,
            scoped,
        })
    }

    fn scope_breaker(&self, key: &Key) -> Result<H::Breaker, BlameRefused> {
        self.ledger
            .scope_breaker(&*self.holder, key, self.max_scopes)
    }

    fn note_refused(&self, refused: &BlameRefused, raw: &str) {
        self.ledger
            .note(&self.dependency, refused, raw, || self.holder.now());
    }
}

/// The right to make one call of a [`DirectedOn`] dependency; dropping it abandons the call.
pub struct DirectedOnPermit<H: ScopeHolder> {
    directed: DirectedOn<H>,
    dependency: <H::Breaker as crate::Breaker>::Permit,
    scoped: Option<(Key, <H::Breaker as crate::Breaker>::Permit)>,
}

impl<H: ScopeHolder> std::fmt::Debug for DirectedOnPermit<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectedOnPermit")
            .field("dependency", &self.directed.dependency)
            .field("scope", &self.scope())
            .finish_non_exhaustive()
    }
}

impl<H: ScopeHolder> DirectedOnPermit<H> {
    /// The key of the scope whose breaker admitted the call too, if any.
    pub fn scope(&self) -> Option<&Key> {
        self.scoped.as_ref().map(|(k, _)| k)
    }

    /// Records the call's classification where `blame` directs, as
    /// [`DirectedPermit::record`] does.
    pub async fn record(self, c: Classification, blame: Option<&Blame>) -> Attribution {
        use crate::{Breaker as _, BreakerPermit as _};
        let Self {
            directed,
            dependency,
            scoped,
        } = self;
        let Some(blame) = blame.filter(|_| c.outcome == Outcome::Failure) else {
            dependency.record_classified(c).await;
            if let Some((_, p)) = scoped {
                p.record_classified(named_share(c)).await;
            }
            return Attribution::Dependency;
        };
        let raw = blame.value().unwrap_or_else(|e| e.value());
        let key = match blame.key(directed.dependency.dependency()) {
            Ok(k) => k,
            Err(e) => {
                dependency.record_classified(c).await;
                if let Some((_, p)) = scoped {
                    p.record_classified(named_share(c)).await;
                }
                let refused = BlameRefused::Key(bounded(e, blame));
                directed.note_refused(&refused, raw);
                return Attribution::Refused(refused);
            }
        };
        let (named, other) = match scoped {
            Some((n, p)) if n == key => (Some(p), None),
            other => (None, other),
        };
        let blamed = match named {
            Some(p) => Ok(Ok(p)),
            None => match directed.scope_breaker(&key) {
                Ok(b) => Ok(b.acquire().await),
                Err(e) => Err(e),
            },
        };
        if let Some((_, p)) = other {
            p.record_classified(named_share(c)).await;
        }
        match blamed {
            Err(refused) => {
                dependency.record_classified(c).await;
                directed.note_refused(&refused, raw);
                Attribution::Refused(refused)
            }
            Ok(p) => {
                dependency.record_classified(named_share(c)).await;
                let r = match p {
                    Ok(p) => Some(p.record_classified(c).await),
                    Err(_) => None,
                };
                Attribution::Scope(key, r)
            }
        }
    }
}

/// What a breaker that was not blamed hears of a result: its successes, nothing else.
fn named_share(c: Classification) -> Classification {
    match c.outcome {
        Outcome::Success => c,
        _ => Classification::new(Outcome::Ignored),
    }
}
