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
//! What the server says is untrusted input: a blamed value is a key only if it passes the key
//! rules ([`Key::scoped`]: at most 256 bytes, no whitespace, control, invisible or
//! bidirectional characters, no `/`, `=`, `{`, `}`), and only while the registry has room
//! (`max_breakers`, with the registry's own eviction of idle breakers). A blame that is refused
//! either way is reported ([`Attribution::Refused`]) and the result is recorded on the
//! dependency-wide breaker, so nothing is lost and nothing panics.
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

use std::sync::Arc;

use super::{Key, Registry, RegistryError, ScopeKind};
use crate::clock::Clock;
use crate::error::{ConfigError, Rejected};
use crate::outcome::{Classification, Outcome};
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
}

impl<C: Clock + Clone> Clone for ServerDirected<C> {
    fn clone(&self) -> Self {
        Self {
            registry: self.registry.clone(),
            dependency: self.dependency.clone(),
            breaker: self.breaker.clone(),
        }
    }
}

impl<C: Clock + Clone> std::fmt::Debug for ServerDirected<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerDirected")
            .field("dependency", &self.dependency)
            .field("state", &self.breaker.state())
            .finish_non_exhaustive()
    }
}

impl<C: Clock + Clone> ServerDirected<C> {
    /// Results of `dependency` (its scope, if it has one, is dropped: scopes are what the
    /// server blames) recorded on `registry`'s breakers. Takes the dependency-wide breaker
    /// from the registry now (and holds it, so it is never evicted); fails if the registry is
    /// full.
    pub fn new(registry: Arc<Registry<C>>, dependency: Key) -> Result<Self, RegistryError> {
        let dependency = if dependency.scope().is_some() {
            Key::new(dependency.dependency()).unwrap_or(dependency)
        } else {
            dependency
        };
        let breaker = registry.get(&dependency)?;
        Ok(Self {
            registry,
            dependency,
            breaker,
        })
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
    /// scope's breaker (made on demand) instead of the dependency-wide one; with no blame, or
    /// a blame that is refused, on the dependency-wide one. Only a failure's blame is
    /// followed: a success or an ignored result goes where an unblamed one goes, so a server
    /// that names a shard on every answer creates no keys until the shard fails. The scope
    /// the call named records its successes, and its failures only when the server blamed it.
    pub fn record(self, c: Classification, blame: Option<&Blame>) -> Attribution {
        let Self {
            directed,
            dependency,
            scoped,
        } = self;
        let blame = blame.filter(|_| c.outcome == Outcome::Failure);
        let target = match blame {
            None => None,
            Some(b) => match b.key(directed.dependency.dependency()) {
                Err(e) => Some(Err(BlameRefused::Key(e))),
                Ok(k) => Some(Ok(k)),
            },
        };
        match target {
            None => {
                dependency.record_classified(c);
                if let Some((_, p)) = scoped {
                    p.record_classified(named_share(c));
                }
                Attribution::Dependency
            }
            Some(Err(refused)) => {
                dependency.record_classified(c);
                if let Some((_, p)) = scoped {
                    p.record_classified(named_share(c));
                }
                Attribution::Refused(refused)
            }
            Some(Ok(key)) => {
                let (named, other) = match scoped {
                    Some((n, p)) if n == key => (Some(p), None),
                    other => (None, other),
                };
                let blamed = match named {
                    Some(p) => Ok(Ok(p)),
                    None => directed.registry.get(&key).map(|b| b.try_acquire_owned()),
                };
                if let Some((_, p)) = other {
                    p.record_classified(named_share(c));
                }
                match blamed {
                    Err(e) => {
                        dependency.record_classified(c);
                        Attribution::Refused(BlameRefused::Full(e))
                    }
                    Ok(p) => {
                        // The dependency-wide breaker hears of successes, not of the blamed
                        // failure.
                        dependency.record_classified(named_share(c));
                        let r = p.ok().map(|p| p.record_classified(c));
                        Attribution::Scope(key, r)
                    }
                }
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
