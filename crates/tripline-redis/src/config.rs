//! How a shared breaker talks to Redis, and what it does when Redis is slow or down.

use std::time::Duration;

use serde::Deserialize;
use tripline::{BreakerConfig, ConfigError};

/// Where the functions' clock comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimeSource {
    /// Redis `TIME`, read inside the functions, so replicas with skewed clocks agree. The default.
    #[default]
    Redis,
    /// The replica's own clock (the breaker's [`tripline::Clock`]). For tests and simulations
    /// driving a manual clock; in production every replica would need the same clock.
    Local,
}

/// What a replica decides when Redis cannot be reached in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fallback {
    /// Decide with the replica's local shadow breaker, which sees this replica's outcomes all
    /// along. The default.
    #[default]
    Local,
    /// Reject every call until Redis answers again (fail closed).
    Reject,
}

/// Buffering of outcomes while Closed.
///
/// A batch goes out when it holds `max_batch` outcomes, when a failure or a slow call in it has
/// waited `flush_every`, or when its oldest outcome has waited `success_wait`, whichever comes
/// first; one function call applies at most `max_batch` outcomes, in order. So the fleet learns
/// of this replica's failures and slow calls within `flush_every` (plus a round trip), of its
/// successes within `success_wait`; and this replica learns of the fleet's state within the
/// shared config's `view_ttl`. With `success_wait` = `flush_every` (the default) every outcome
/// waits at most `flush_every`; [`Batching::lean`] lets a healthy replica send a batch only a
/// few times a second.
///
/// ```
/// use std::time::Duration;
/// use tripline_redis::Batching;
///
/// let lean = Batching::lean();
/// assert_eq!(lean.flush_every, Duration::from_millis(10));
/// assert_eq!(lean.success_wait(), Duration::from_millis(250));
/// assert_eq!(Batching::default().success_wait(), Duration::from_millis(10));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batching {
    /// The longest a failure or a slow call waits in the buffer (the added reaction delay for
    /// outcomes that can trip the breaker). Default 10 ms.
    #[serde(with = "tripline::duration::serde", default = "default_flush_every")]
    pub flush_every: Duration,
    /// A buffer this full is sent at once, and no batch holds more. Default 256.
    #[serde(default = "default_max_batch")]
    pub max_batch: u32,
    /// The longest a buffer of fast successes waits (at least `flush_every`). `None` (the
    /// default): the same as `flush_every`.
    #[serde(with = "tripline::duration::serde::option", default)]
    pub success_wait: Option<Duration>,
}

impl Batching {
    /// Few round trips for a healthy replica: failures and slow calls go out within 10 ms,
    /// successes within 250 ms, at most 256 outcomes a batch. At 500 calls per second a replica
    /// then sends about 4 batches a second, and asks Redis for the state once per `view_ttl`.
    pub fn lean() -> Self {
        Self {
            flush_every: default_flush_every(),
            max_batch: default_max_batch(),
            success_wait: Some(Duration::from_millis(250)),
        }
    }

    /// How long a buffer of fast successes waits: `success_wait`, or `flush_every`.
    pub fn success_wait(&self) -> Duration {
        self.success_wait.unwrap_or(self.flush_every)
    }
}

fn default_flush_every() -> Duration {
    Duration::from_millis(10)
}

fn default_max_batch() -> u32 {
    256
}

impl Default for Batching {
    fn default() -> Self {
        Self {
            flush_every: default_flush_every(),
            max_batch: default_max_batch(),
            success_wait: None,
        }
    }
}

/// A value echoed in an error: at most 40 characters of it, and its length in bytes.
pub(crate) fn excerpt(s: &str) -> String {
    if s.len() <= 40 {
        return format!("{s:?}");
    }
    let head: String = s.chars().take(40).collect();
    format!("{head:?}... ({} bytes)", s.len())
}

/// The quorum rule: the shared breaker trips only when failures come from at least
/// `replicas` distinct replicas, each with a failure in the last `within`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quorum {
    /// Distinct failing replicas needed (2 or more).
    pub replicas: u32,
    /// How recent a replica's last failure must be to count.
    #[serde(with = "tripline::duration::serde")]
    pub within: Duration,
}

/// The secret of [`SharedConfigBuilder::hash_scopes`]: never printed, never serialized.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct ScopeSecret(std::sync::Arc<[u8]>);

impl std::fmt::Debug for ScopeSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScopeSecret(..)")
    }
}

impl ScopeSecret {
    /// The label a scope goes by outside the process: `h:` and the first 128 bits of
    /// HMAC-SHA256(secret, scope), in hex.
    pub(crate) fn label(&self, scope: &str) -> String {
        use hmac::{Mac, digest::KeyInit};
        let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(scope.as_bytes());
        let tag = mac.finalize().into_bytes();
        let mut out = String::with_capacity(34);
        out.push_str("h:");
        for b in &tag[..16] {
            out.push_str(&format!("{b:02x}"));
        }
        out
    }
}

/// The shared store's settings (the breaker's own rules are a [`BreakerConfig`]).
///
/// ```
/// use std::time::Duration;
/// use tripline_redis::{Batching, SharedConfig};
///
/// let c = SharedConfig::builder()
///     .key_prefix("shop")
///     .redis_timeout(Duration::from_millis(20))
///     .batching(Batching::default())
///     .build()
///     .unwrap();
/// assert_eq!(c.redis_timeout(), Duration::from_millis(20));
///
/// let err = SharedConfig::builder().redis_timeout(Duration::ZERO).build().unwrap_err();
/// assert_eq!(err.to_string(), "redis_timeout must be in [1ms, 10s], got 0s");
/// ```
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SharedConfig {
    pub(crate) key_prefix: String,
    #[serde(with = "tripline::duration::serde")]
    pub(crate) redis_timeout: Duration,
    #[serde(with = "tripline::duration::serde")]
    pub(crate) view_ttl: Duration,
    pub(crate) fallback: Fallback,
    pub(crate) batching: Option<Batching>,
    pub(crate) quorum: Option<Quorum>,
    pub(crate) replica_id: Option<String>,
    pub(crate) time_source: TimeSource,
    #[serde(with = "tripline::duration::serde")]
    pub(crate) idle_ttl: Duration,
    pub(crate) redis_breaker: Option<BreakerConfig>,
    #[serde(with = "tripline::duration::serde")]
    pub(crate) loss_hold: Duration,
    /// Set only by [`SharedConfigBuilder::hash_scopes`], never read from a file.
    #[serde(skip)]
    pub(crate) scope_secret: Option<ScopeSecret>,
}

impl Default for SharedConfig {
    fn default() -> Self {
        Self {
            key_prefix: "tripline".into(),
            redis_timeout: Duration::from_millis(25),
            view_ttl: Duration::from_millis(100),
            fallback: Fallback::Local,
            batching: None,
            quorum: None,
            replica_id: None,
            time_source: TimeSource::Redis,
            idle_ttl: Duration::from_secs(24 * 3600),
            redis_breaker: None,
            loss_hold: Duration::ZERO,
            scope_secret: None,
        }
    }
}

/// Builds a [`SharedConfig`].
#[derive(Clone, Debug)]
pub struct SharedConfigBuilder {
    config: SharedConfig,
}

impl SharedConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> SharedConfigBuilder {
        SharedConfigBuilder {
            config: Self::default(),
        }
    }

    /// The prefix of every key (default `tripline`).
    pub fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The most a caller waits for Redis on one call (default 25 ms).
    pub fn redis_timeout(&self) -> Duration {
        self.redis_timeout
    }

    /// How long a replica may decide from the state Redis last told it (default 100 ms; zero
    /// asks Redis on every acquire).
    pub fn view_ttl(&self) -> Duration {
        self.view_ttl
    }

    /// What happens while Redis is unreachable.
    pub fn fallback(&self) -> Fallback {
        self.fallback
    }

    /// Buffering of outcomes while Closed, if on.
    pub fn batching(&self) -> Option<Batching> {
        self.batching
    }

    /// The quorum rule, if on.
    pub fn quorum(&self) -> Option<Quorum> {
        self.quorum
    }

    /// Where the functions' clock comes from.
    pub fn time_source(&self) -> TimeSource {
        self.time_source
    }

    /// How long an idle Closed record lives (default 24 h). A record in any other state never
    /// expires.
    pub fn idle_ttl(&self) -> Duration {
        self.idle_ttl
    }

    /// How long a replica that cannot know whether Redis lost a trip holds its calls (default
    /// zero: it does not); see [`SharedConfigBuilder::loss_hold`].
    pub fn loss_hold(&self) -> Duration {
        self.loss_hold
    }

    /// Whether scopes are hashed ([`SharedConfigBuilder::hash_scopes`]).
    pub fn hashes_scopes(&self) -> bool {
        self.scope_secret.is_some()
    }

    /// Checks every field, naming the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let prefix_ok = !self.key_prefix.is_empty()
            && self.key_prefix.len() <= 64
            && !self.key_prefix.contains(['{', '}']);
        if !prefix_ok {
            return Err(ConfigError::new(
                "key_prefix",
                excerpt(&self.key_prefix),
                "1 to 64 bytes without '{' or '}'",
            ));
        }
        dur(
            "redis_timeout",
            self.redis_timeout,
            Duration::from_millis(1),
            Duration::from_secs(10),
        )?;
        dur(
            "view_ttl",
            self.view_ttl,
            Duration::ZERO,
            Duration::from_secs(3600),
        )?;
        dur(
            "idle_ttl",
            self.idle_ttl,
            Duration::from_secs(1),
            Duration::from_secs(365 * 24 * 3600),
        )?;
        dur(
            "loss_hold",
            self.loss_hold,
            Duration::ZERO,
            Duration::from_secs(60),
        )?;
        if let Some(b) = self.batching {
            dur(
                "batching.flush_every",
                b.flush_every,
                Duration::from_millis(1),
                Duration::from_secs(10),
            )?;
            if !(1..=MAX_BATCH).contains(&b.max_batch) {
                return Err(ConfigError::new(
                    "batching.max_batch",
                    b.max_batch,
                    format!("in [1, {MAX_BATCH}]"),
                ));
            }
            if b.success_wait() < b.flush_every || b.success_wait() > Duration::from_secs(60) {
                return Err(ConfigError::new(
                    "batching.success_wait",
                    fmt(b.success_wait()),
                    format!("in [flush_every ({}), 1m]", fmt(b.flush_every)),
                ));
            }
        }
        if let Some(q) = self.quorum {
            if !(2..=10_000).contains(&q.replicas) {
                return Err(ConfigError::new(
                    "quorum.replicas",
                    q.replicas,
                    "in [2, 10000]",
                ));
            }
            dur(
                "quorum.within",
                q.within,
                Duration::from_millis(1),
                Duration::from_secs(24 * 3600),
            )?;
        }
        if self.scope_secret.as_ref().is_some_and(|s| s.0.len() < 16) {
            return Err(ConfigError::new(
                "hash_scopes",
                "a secret shorter than 16 bytes",
                "a secret of at least 16 bytes",
            ));
        }
        if let Some(id) = &self.replica_id {
            if id.is_empty() || id.len() > 128 {
                return Err(ConfigError::new(
                    "replica_id",
                    excerpt(id),
                    "1 to 128 bytes",
                ));
            }
        }
        Ok(())
    }
}

/// The most outcomes one batch may carry: a batch holds Redis for well under a millisecond per
/// thousand outcomes, so no batch holds it long.
pub const MAX_BATCH: u32 = 10_000;

fn fmt(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn dur(field: &str, d: Duration, lo: Duration, hi: Duration) -> Result<(), ConfigError> {
    if d < lo || d > hi {
        return Err(ConfigError::new(
            field,
            fmt(d),
            format!("in [{}, {}]", fmt(lo), fmt(hi)),
        ));
    }
    Ok(())
}

macro_rules! setters {
    ($($(#[$m:meta])* $name:ident: $ty:ty;)*) => {
        $( $(#[$m])* pub fn $name(mut self, v: $ty) -> Self { self.config.$name = v; self } )*
    };
}

impl SharedConfigBuilder {
    setters! {
        /// See [`SharedConfig::redis_timeout`].
        redis_timeout: Duration;
        /// See [`SharedConfig::view_ttl`].
        view_ttl: Duration;
        /// See [`SharedConfig::fallback`].
        fallback: Fallback;
        /// See [`SharedConfig::time_source`].
        time_source: TimeSource;
        /// See [`SharedConfig::idle_ttl`].
        idle_ttl: Duration;
    }

    /// Fails closed for `hold` where Redis may have lost a trip this replica cannot know of.
    /// When this replica's view of a breaker is Closed and Redis shows that it may have lost
    /// state (the connection reached another server process, a restart or a failover; or the
    /// breaker's record started over, not at an operator's word, or its epoch went back), the
    /// lost record may have been Open, and only a replica that saw the trip can bring it back.
    /// For `hold` this replica rejects the breaker's calls (Open, with the hold's time left),
    /// asking Redis on each, so that a replica remembering the trip reaches Redis first: then
    /// no call is admitted that the fleet held Open. The cost: after every restart or failover
    /// of Redis, every breaker this replica saw Closed rejects for `hold`, tripped or not.
    /// Zero, the default: no hold (a replica that never saw the trip admits until a
    /// remembering replica reaches Redis). At most 1 minute; a few times the reconnection
    /// time (250 ms) plus `redis_timeout` is enough.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline_redis::SharedConfig;
    /// let c = SharedConfig::builder().loss_hold(Duration::from_millis(500)).build().unwrap();
    /// assert_eq!(c.loss_hold(), Duration::from_millis(500));
    /// ```
    pub fn loss_hold(mut self, hold: Duration) -> Self {
        self.config.loss_hold = hold;
        self
    }

    /// See [`SharedConfig::key_prefix`].
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.key_prefix = prefix.into();
        self
    }

    /// Turns batching on.
    pub fn batching(mut self, b: Batching) -> Self {
        self.config.batching = Some(b);
        self
    }

    /// Turns the quorum rule on.
    pub fn quorum(mut self, q: Quorum) -> Self {
        self.config.quorum = Some(q);
        self
    }

    /// Names this replica (default: host name, process id and a random suffix). Used by the
    /// quorum and in-flight rules and in the events stream.
    pub fn replica_id(mut self, id: impl Into<String>) -> Self {
        self.config.replica_id = Some(id.into());
        self
    }

    /// Scopes that carry no secret: every scope is known outside this process only by a keyed
    /// hash of it, `h:` and 32 hex digits (the first 128 bits of HMAC-SHA256 keyed with
    /// `secret`). Redis keys, the events stream, the shadow breaker's name (so its metrics
    /// labels and trace lines), rejections and log lines all carry the hash; the readable scope
    /// stays in this process ([`SharedBreaker::name`](crate::SharedBreaker::name)). Every
    /// replica of a fleet must use the same secret (a secret from the application's secret
    /// store: with a secret an attacker knows, a scope's hash can be checked against guesses).
    /// With hashing a scope may hold any bytes (1 to 1024 of them), braces included. Turning
    /// hashing on or changing the secret moves every breaker to new keys: it starts Closed.
    ///
    /// ```
    /// use tripline_redis::SharedConfig;
    /// let c = SharedConfig::builder().hash_scopes("a secret from the vault").build().unwrap();
    /// assert!(c.hashes_scopes());
    /// let err = SharedConfig::builder().hash_scopes("").build().unwrap_err();
    /// assert_eq!(err.field(), "hash_scopes");
    /// ```
    pub fn hash_scopes(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.config.scope_secret = Some(ScopeSecret(secret.as_ref().into()));
        self
    }

    /// The breaker guarding Redis itself (default: open for 1 s after 3 consecutive failures
    /// or timeouts, one probe).
    pub fn redis_breaker(mut self, c: BreakerConfig) -> Self {
        self.config.redis_breaker = Some(c);
        self
    }

    /// Validates and returns the configuration.
    pub fn build(self) -> Result<SharedConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_toml_with_durations() {
        let c: SharedConfig = toml::from_str(
            r#"
key_prefix = "shop"
redis_timeout = "20ms"
view_ttl = "50ms"
fallback = "reject"
time_source = "redis"
batching = { flush_every = "5ms", max_batch = 64 }
quorum = { replicas = 3, within = "30s" }
"#,
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.redis_timeout(), Duration::from_millis(20));
        assert_eq!(c.fallback(), Fallback::Reject);
        assert_eq!(
            c.batching(),
            Some(Batching {
                flush_every: Duration::from_millis(5),
                max_batch: 64,
                success_wait: None,
            })
        );
        assert_eq!(c.quorum().map(|q| q.replicas), Some(3));
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let err = toml::from_str::<SharedConfig>("redis_timeut = \"20ms\"").unwrap_err();
        assert!(err.to_string().contains("redis_timeut"), "{err}");
    }

    #[test]
    fn bad_values_name_field_value_and_range() {
        let cases = [
            (
                SharedConfig::builder().key_prefix("a{b}"),
                "key_prefix must be 1 to 64 bytes without '{' or '}', got \"a{b}\"",
            ),
            (
                SharedConfig::builder().view_ttl(Duration::from_secs(7200)),
                "view_ttl must be in [0s, 1h], got 2h",
            ),
            (
                SharedConfig::builder().quorum(Quorum {
                    replicas: 1,
                    within: Duration::from_secs(1),
                }),
                "quorum.replicas must be in [2, 10000], got 1",
            ),
            (
                SharedConfig::builder().batching(Batching {
                    flush_every: Duration::from_millis(5),
                    max_batch: 0,
                    success_wait: None,
                }),
                "batching.max_batch must be in [1, 10000], got 0",
            ),
            (
                SharedConfig::builder().replica_id(""),
                "replica_id must be 1 to 128 bytes, got \"\"",
            ),
        ];
        for (builder, message) in cases {
            assert_eq!(builder.build().unwrap_err().to_string(), message);
        }
    }
}
