//! The shared breaker: the rules run in Redis, decisions are made by each replica.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use tokio::sync::broadcast;
use tripline::inflight::{Cohort, InFlight};
use tripline::{
    BreakerConfig, CallError, CircuitBreaker, Classification, Classify, Clock, ConfigError,
    MonotonicClock, Outcome, OwnedPermit, Recorded, Rejected, ResultClassifier, State,
    WindowConfig, WindowSnapshot,
};

use crate::backend::{Backend, FUNCTION_PREFIX, is_redirection};
use crate::config::{Batching, Fallback, SharedConfig, TimeSource};
use crate::health::{CheckError, Health};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The keys of one shared breaker. They share the hash tag `{prefix:scope}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// The record (a string, a MessagePack map): state, epoch, origin, open deadline, window
    /// totals, probe leases. No TTL unless Closed.
    pub record: String,
    /// The window (a string: a ring of one byte per outcome for a count window, three 32-bit
    /// counters per bucket for a time window).
    pub window: String,
    /// Calls in flight past the slow-call duration, per replica (a hash).
    pub in_flight: String,
    /// Each replica's last failure or slow call (a sorted set by time: the quorum rule).
    pub voters: String,
    /// The stream of transitions (capped at about 1000 entries).
    pub events: String,
    /// The configurations in use, by version (a hash).
    pub config: String,
}

impl Keys {
    fn new(prefix: &str, scope: &str) -> Self {
        let tag = format!("{{{prefix}:{scope}}}");
        Self {
            record: format!("{tag}:s"),
            window: format!("{tag}:b"),
            in_flight: format!("{tag}:i"),
            voters: format!("{tag}:v"),
            events: format!("{tag}:e"),
            config: format!("{tag}:c"),
        }
    }

    /// Every key, in the order the functions take them.
    pub fn all(&self) -> [&str; 6] {
        [
            &self.record,
            &self.window,
            &self.in_flight,
            &self.voters,
            &self.events,
            &self.config,
        ]
    }
}

/// A transition this replica performed in Redis. Exactly one replica performs each
/// transition, so each appears once across the fleet (and once in the events stream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// The state left.
    pub from: State,
    /// The state entered.
    pub to: State,
    /// The epoch after the transition.
    pub epoch: u64,
    /// Why, in kebab case: `failure-rate`, `slow-call-rate`, `consecutive-failures`,
    /// `open-elapsed`, `probes-failed`, `probes-succeeded`, `half-open-timeout`, `operator`,
    /// `restored` (a replica brought back an Open breaker that Redis had lost).
    pub reason: String,
}

/// An entry of the fleet's events stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetEvent {
    /// The stream entry id.
    pub id: String,
    /// The state left.
    pub from: State,
    /// The state entered.
    pub to: State,
    /// The epoch after the transition.
    pub epoch: u64,
    /// Why (see [`Transition::reason`]).
    pub reason: String,
    /// The script's clock at the transition, in microseconds.
    pub at_micros: u64,
    /// The replica that performed it.
    pub replica: String,
}

/// Where decisions come from right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// From Redis (or a fresh view of it).
    Shared,
    /// Redis is unreachable or its breaker is open: the fallback decides.
    Fallback,
}

/// What Redis holds, read with [`SharedBreaker::refresh`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The state.
    pub state: State,
    /// The epoch.
    pub epoch: u64,
    /// The window, with the fleet's calls in flight past the slow-call duration.
    pub window: WindowSnapshot,
    /// Live probe leases.
    pub probes_in_flight: u32,
    /// Transitions since the record was created.
    pub transitions: u64,
    /// When an Open breaker admits a probe, in the functions' clock (microseconds).
    pub open_until_micros: u64,
    /// The script's clock when read (microseconds).
    pub now_micros: u64,
    /// When the record was created, in the functions' clock: a record that was lost and started
    /// over has a new origin.
    pub origin: u64,
}

/// A replica's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SharedMetrics {
    /// Function calls sent to Redis.
    pub redis_calls: u64,
    /// Function calls that failed (connection, protocol or function errors, and redirections
    /// past [`REDIRECTIONS_FORGIVEN`]).
    pub redis_errors: u64,
    /// Function calls abandoned after the Redis timeout.
    pub redis_timeouts: u64,
    /// Calls Redis was not asked about because the breaker on Redis was open.
    pub redis_skipped: u64,
    /// Acquires decided from the last state Redis returned, without a round trip.
    pub view_decisions: u64,
    /// Acquires decided by the fallback (Redis unreachable).
    pub fallback_decisions: u64,
    /// Acquires rejected (by the shared state, a view of it, or the fallback).
    pub rejected: u64,
    /// Results discarded as stale (older epoch, or a lease that is no longer theirs).
    pub stale_results: u64,
    /// Outcomes whose delivery Redis did not confirm: it was unreachable, the breaker on it
    /// was open, the call timed out (a timed-out call may still have been applied), or a
    /// replica produced outcomes faster than Redis applied its batches. The shadow breaker
    /// has them all.
    pub lost_records: u64,
    /// Batches sent.
    pub batches: u64,
    /// Outcomes sent in batches.
    pub batched_outcomes: u64,
    /// Permits dropped without a result.
    pub abandoned: u64,
    /// Expired probe leases this replica reclaimed.
    pub expired_probes: u64,
    /// Transitions this replica performed.
    pub transitions: u64,
    /// Redis calls refused or failed because of a Redis Cluster redirection or a slot
    /// migration in progress (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`); they do not count
    /// against the breaker on Redis (up to [`REDIRECTIONS_FORGIVEN`] in a row).
    pub redis_redirections: u64,
    /// Replies that contradicted this replica's last view: Redis answered Closed for a breaker
    /// this replica had seen Open or HalfOpen (or ForcedOpen), from a record that started over
    /// or whose epoch went back (eviction, restart without persistence, a failover that lost
    /// writes). The replica kept its view and brought the state back ([`Self::restores`]).
    pub lost_state: u64,
    /// Breakers this replica restored in Redis after [`Self::lost_state`].
    pub restores: u64,
    /// Windows Redis had lost (evicted or expired) while their record said they held calls.
    pub lost_windows: u64,
    /// Acquires rejected while Redis was unreachable, because this replica's last view was
    /// Open and unexpired, or ForcedOpen.
    pub held_rejections: u64,
    /// The most outcomes one batch carried.
    pub largest_batch: u64,
    /// Probe claims that Redis refused because the caller had given up on its answer.
    pub late_admissions: u64,
}

/// Redirections in a row that do not count against the breaker on Redis; past them, they do.
pub const REDIRECTIONS_FORGIVEN: u32 = 64;

#[derive(Debug, Default)]
struct Counters {
    redis_calls: AtomicU64,
    redis_errors: AtomicU64,
    redis_timeouts: AtomicU64,
    redis_skipped: AtomicU64,
    view_decisions: AtomicU64,
    fallback_decisions: AtomicU64,
    rejected: AtomicU64,
    stale_results: AtomicU64,
    lost_records: AtomicU64,
    batches: AtomicU64,
    batched_outcomes: AtomicU64,
    abandoned: AtomicU64,
    expired_probes: AtomicU64,
    transitions: AtomicU64,
    redis_redirections: AtomicU64,
    lost_state: AtomicU64,
    restores: AtomicU64,
    lost_windows: AtomicU64,
    held_rejections: AtomicU64,
    largest_batch: AtomicU64,
    late_admissions: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The state Redis last returned, and when (local clock).
#[derive(Clone, Copy, Debug)]
struct View {
    valid: bool,
    state: State,
    epoch: u64,
    origin: u64,
    open_until: u64,
    redis_now: u64,
    at: u64,
    /// A HalfOpen rejection may be repeated locally until then (local clock).
    reject_until: u64,
    /// When the earliest probe lease of that rejection expires (local clock).
    lease_deadline: Option<u64>,
    /// The last read found no record (a read creates none): the next call asks Redis.
    missing: bool,
}

/// This replica's calls in flight, by start cohort, with the in-process breaker's rule. Each
/// call joins with the epoch that admitted it, and only the current epoch's calls count: calls
/// started before the breaker last entered Closed never do.
#[derive(Debug)]
struct Flight {
    calls: InFlight,
    /// The next acquire-time check (every cohort width, as in-process).
    next_check: u64,
    /// The count last reported to Redis (a zero need not be repeated).
    reported: u64,
}

#[derive(Debug, Default)]
struct Batch {
    epoch: u64,
    /// The origin of the record the buffered outcomes' permits came from.
    origin: u64,
    outcomes: String,
    first_at: u64,
    /// When the first failure or slow call in the buffer was recorded (local clock).
    bad_since: Option<u64>,
    /// Flusher periods the buffer has waited.
    ticks: u32,
    /// A flusher task is running.
    flusher: bool,
    /// A batch is in flight.
    sending: bool,
}

/// While a batch is in flight, at most this many batches' worth of outcomes wait.
const MAX_BUFFERED_BATCHES: usize = 16;

struct Inner<C: Clock> {
    name: String,
    keys: Keys,
    config: BreakerConfig,
    shared: SharedConfig,
    replica: String,
    /// The configuration as the functions read it, and its version.
    cfg: String,
    version: String,
    jitter_micros: u64,
    slow_nanos: u64,
    cohort_width: u64,
    backend: Backend,
    clock: C,
    shadow: CircuitBreaker<C>,
    redis_breaker: CircuitBreaker<C>,
    view: Mutex<View>,
    flight: Mutex<Flight>,
    batch: Mutex<Batch>,
    /// Woken when the batch in flight returns.
    batch_idle: tokio::sync::Notify,
    rng: Mutex<Pcg64Mcg>,
    counters: Counters,
    fallback_now: AtomicBool,
    /// A call timed out and may still have run: a transition it performed reached no reply.
    unconfirmed: AtomicBool,
    /// Redirections in a row (see [`REDIRECTIONS_FORGIVEN`]).
    redirections: AtomicU32,
    /// The last error from Redis, in its own words.
    last_error: Mutex<Option<String>>,
    events: broadcast::Sender<Transition>,
}

/// One circuit breaker whose window and state live in Redis, shared by every replica that
/// uses the same key prefix and scope.
///
/// Each acquire and record runs the breaker's rules in one atomic Redis function, so the fleet
/// trips, probes and recovers as one breaker. No lock is held across the protected call. A
/// replica decides from the state Redis last returned while that view is younger than
/// [`SharedConfig::view_ttl`], so a Closed breaker costs one round trip per call (the
/// record) and an Open one none until its deadline. When Redis is slow or down (each call is
/// bounded by [`SharedConfig::redis_timeout`], and a breaker on Redis itself stops trying),
/// a replica that saw the breaker Open keeps rejecting until the deadline it saw; otherwise it
/// falls back to its local shadow breaker, or rejects, as configured.
///
/// Use it on a Tokio runtime with the time driver enabled (as `#[tokio::main]` and
/// `#[tokio::test]` provide): every Redis call is bounded by a Tokio timeout.
///
/// ```no_run
/// use std::time::Duration;
/// use tripline::{BreakerConfig, Outcome};
/// use tripline_redis::{Backend, SharedBreaker, SharedConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = Backend::single("redis://127.0.0.1:6379/")?;
/// let breaker = SharedBreaker::new(
///     "dep:exercise-catalog",
///     BreakerConfig::default(),
///     SharedConfig::default(),
///     backend,
/// )?;
/// match breaker.acquire().await {
///     Ok(permit) => {
///         // call the dependency, then:
///         permit.record(Outcome::Success).await;
///     }
///     Err(rejected) => println!("fail fast: {rejected}"),
/// }
/// # Ok(())
/// # }
/// ```
pub struct SharedBreaker<C: Clock + Clone = MonotonicClock> {
    inner: Arc<Inner<C>>,
}

impl<C: Clock + Clone> Clone for SharedBreaker<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<C: Clock + Clone> std::fmt::Debug for SharedBreaker<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBreaker")
            .field("name", &self.inner.name)
            .field("replica", &self.inner.replica)
            .field("view", &*lock(&self.inner.view))
            .finish_non_exhaustive()
    }
}

fn parse_state(s: &str) -> Option<State> {
    State::ALL.into_iter().find(|state| state.as_str() == s)
}

/// A parsed reply of the breaker's functions.
#[derive(Debug)]
pub(crate) struct Reply {
    verdict: String,
    fields: [String; 6],
    state: State,
    epoch: u64,
    open_until: u64,
    now: u64,
    expired: u64,
    origin: u64,
    /// 1: the window was lost; 2: the record was missing and started over; 4
    /// ([`NOTE_OPERATOR`]): the record started over at an operator's action.
    notes: u64,
    transitions: Vec<Transition>,
}

/// A reply note: the record was missing (a read answers Closed and creates nothing; any other
/// call starts it over).
const NOTE_MISSING: u64 = 2;

/// A reply note: the record was missing and started over at an operator's action (a reset,
/// a forced state), so a replica that remembers the lost record takes it as it is.
const NOTE_OPERATOR: u64 = 4;

/// Redis did not answer in time, failed, or was not asked (its breaker is open); the counters
/// and [`SharedBreaker::last_redis_error`] say which.
#[derive(Debug)]
struct Unavailable {
    /// The call was sent and not answered in time: Redis may still run it.
    timed_out: bool,
}

/// Replies of the functions hold bulk strings and integers.
fn text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Int(i) => Some(i.to_string()),
        redis::Value::Nil => Some(String::new()),
        _ => None,
    }
}

fn bad_reply(v: &[redis::Value]) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "tripline: malformed reply",
        format!("{v:?}"),
    ))
}

/// The first entries of every reply: verdict, state, epoch, open deadline, now, expired leases,
/// origin, notes, and the number of the verdict's fields that follow.
const HEADER: usize = 9;

impl Reply {
    pub(crate) fn parse(raw: Vec<redis::Value>) -> Result<Self, redis::RedisError> {
        let Some(v) = raw.iter().map(text).collect::<Option<Vec<String>>>() else {
            return Err(bad_reply(&raw));
        };
        if v.len() < HEADER {
            return Err(bad_reply(&raw));
        }
        let num = |i: usize| v[i].parse::<u64>().map_err(|_| bad_reply(&raw));
        let state = parse_state(&v[1]).ok_or_else(|| bad_reply(&raw))?;
        let epoch = num(2)?;
        let open_until = num(3)?;
        let now = num(4)?;
        let expired = num(5)?;
        let origin = num(6)?;
        let notes = num(7)?;
        let n = usize::try_from(num(8)?).map_err(|_| bad_reply(&raw))?;
        if n > 6 || v.len() < HEADER + n {
            return Err(bad_reply(&raw));
        }
        let mut fields: [String; 6] = Default::default();
        for (i, f) in v[HEADER..HEADER + n].iter().enumerate() {
            fields[i] = f.clone();
        }
        let mut transitions = Vec::new();
        for t in &v[HEADER + n..] {
            let mut parts = t.splitn(3, '>');
            let (Some(from), Some(to), Some(reason)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad_reply(&raw));
            };
            let (Some(from), Some(to)) = (parse_state(from), parse_state(to)) else {
                return Err(bad_reply(&raw));
            };
            transitions.push(Transition {
                from,
                to,
                epoch: 0,
                reason: reason.to_string(),
            });
        }
        // Epochs after each transition: counted back from the final one.
        let mut e = epoch;
        for t in transitions.iter_mut().rev() {
            t.epoch = e;
            if !(t.from == State::Open && t.to == State::HalfOpen) {
                e = e.saturating_sub(1);
            }
        }
        Ok(Self {
            verdict: v[0].clone(),
            fields,
            state,
            epoch,
            open_until,
            now,
            expired,
            origin,
            notes,
            transitions,
        })
    }

    fn field(&self, i: usize) -> i64 {
        self.fields[i].parse().unwrap_or(-1)
    }

    /// The reply in its wire order, all six fields given, each transition `from>to>reason`
    /// followed by its epoch (`@epoch`).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn summary(&self) -> Vec<String> {
        let mut v = vec![
            self.verdict.clone(),
            self.state.as_str().to_string(),
            self.epoch.to_string(),
            self.open_until.to_string(),
            self.now.to_string(),
            self.expired.to_string(),
            self.origin.to_string(),
            self.notes.to_string(),
            "6".to_string(),
        ];
        v.extend(self.fields.iter().cloned());
        v.extend(self.transitions.iter().map(|t| {
            format!(
                "{}>{}>{}@{}",
                t.from.as_str(),
                t.to.as_str(),
                t.reason,
                t.epoch
            )
        }));
        v
    }
}

fn default_redis_breaker() -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 10 })
        .minimum_calls(10)
        .consecutive_failures(3)
        .open_duration(Duration::from_secs(1))
        .half_open_calls(1)
        .probe_lease(Duration::from_secs(10))
        .count_in_flight_as_slow(false)
        .build()
        .unwrap_or_default()
}

/// Refuses the settings the functions do not host yet, rather than ignore them.
fn hosted(config: &BreakerConfig) -> Result<(), ConfigError> {
    let not_yet = |field: &str, value: &str, allowed: &str| {
        Err(ConfigError::new(
            field,
            value,
            format!("{allowed}: the shared breaker does not host it yet"),
        ))
    };
    if config.after_max_wait() != tripline::AfterMaxWait::Open {
        return not_yet("half_open.after_max_wait", "closed", "\"open\"");
    }
    if !config.failure_kinds().is_default() {
        return not_yet(
            "failure_kinds",
            &format!("{:?}", config.failure_kinds()),
            "every kind weighing 1",
        );
    }
    if let Some(l) = config.lumping_interval() {
        return not_yet(
            "lumping_interval",
            &humantime::format_duration(l).to_string(),
            "unset",
        );
    }
    if config.call_durations() {
        return not_yet("call_durations", "true", "false");
    }
    if config.ramp_up().is_some() {
        return not_yet("ramp_up", "set", "unset");
    }
    if !config.slow_call_rule() {
        return not_yet("slow_call_rule", "false", "true");
    }
    Ok(())
}

fn validate_scope(scope: &str) -> Result<(), ConfigError> {
    if scope.is_empty() || scope.len() > 200 || scope.contains(['{', '}']) {
        return Err(ConfigError::new(
            "scope",
            crate::config::excerpt(scope),
            "1 to 200 bytes without '{' or '}' (and nothing sensitive: scopes are Redis keys)",
        ));
    }
    Ok(())
}

/// The configuration as the functions read it: the fields of `FIELDS` in `breaker.lua`,
/// comma-separated.
fn function_config(config: &BreakerConfig, shared: &SharedConfig) -> String {
    let (kind, size, bucket) = match config.window() {
        WindowConfig::Count { size } => (0, u64::from(size), 0),
        WindowConfig::Time { length, bucket } => (
            1,
            (length.as_nanos() / bucket.as_nanos()) as u64,
            micros(bucket),
        ),
    };
    let backoff = config.open_backoff();
    let mult = backoff.map_or(0.0, |b| b.multiplier);
    let fields: [String; 22] = [
        kind.to_string(),
        size.to_string(),
        bucket.to_string(),
        config.minimum_calls().to_string(),
        config.failure_ppm().to_string(),
        config.slow_ppm().to_string(),
        micros(config.slow_call_duration()).to_string(),
        config.consecutive_failures().unwrap_or(0).to_string(),
        micros(config.open_duration()).to_string(),
        format!("{mult}"),
        backoff.map_or(0, |b| micros(b.max)).to_string(),
        backoff.map_or(0, |b| micros(b.healthy_after)).to_string(),
        micros(config.max_retry_after()).to_string(),
        config.half_open_calls().to_string(),
        match config.half_open_policy() {
            tripline::HalfOpenPolicy::AllProbes => "0",
            tripline::HalfOpenPolicy::Consecutive => "1",
        }
        .to_string(),
        config.half_open_max_wait().map_or(0, micros).to_string(),
        micros(config.probe_lease()).to_string(),
        u8::from(config.automatic_transition()).to_string(),
        shared.idle_ttl.as_millis().to_string(),
        shared.quorum.map_or(0, |q| q.replicas).to_string(),
        shared.quorum.map_or(0, |q| micros(q.within)).to_string(),
        micros(config.open_jitter()).to_string(),
    ];
    fields.join(",")
}

impl SharedBreaker<MonotonicClock> {
    /// A shared breaker for `scope` (e.g. `dep:exercise-catalog`, `region:eu-west`,
    /// `tenant:acme`). Every replica using the same prefix and scope shares it; use the same
    /// breaker configuration on every replica. Scopes become Redis keys: never put
    /// credentials or personal data in them.
    pub fn new(
        scope: &str,
        config: BreakerConfig,
        shared: SharedConfig,
        backend: Backend,
    ) -> Result<Self, ConfigError> {
        Self::with_clock(scope, config, shared, backend, MonotonicClock::new())
    }
}

impl<C: Clock + Clone> SharedBreaker<C> {
    /// [`SharedBreaker::new`] with a clock of your choice (it measures call durations, view
    /// age and the shadow breaker's time; with [`TimeSource::Local`] it is the functions' clock
    /// too).
    pub fn with_clock(
        scope: &str,
        config: BreakerConfig,
        shared: SharedConfig,
        backend: Backend,
        clock: C,
    ) -> Result<Self, ConfigError> {
        validate_scope(scope)?;
        hosted(&config)?;
        shared.validate()?;
        let replica = shared.replica_id.clone().unwrap_or_else(|| {
            let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "replica".into());
            format!(
                "{host}-{}-{:08x}",
                std::process::id(),
                Pcg64Mcg::from_os_rng().random::<u32>()
            )
        });
        if shared.redis_timeout >= config.probe_lease() {
            return Err(ConfigError::new(
                "redis_timeout",
                humantime::format_duration(shared.redis_timeout).to_string(),
                format!(
                    "shorter than half_open.probe_lease ({}): a probe's lease must outlast the call that claims it",
                    humantime::format_duration(config.probe_lease())
                ),
            ));
        }
        let cfg = function_config(&config, &shared);
        // The version names the configuration in the scope's config hash: the same rules give
        // the same version on every replica, whatever its build.
        let version = sha1_smol::Sha1::from(cfg.as_bytes()).digest().to_string()[..16].to_string();
        let rng = match config.seed() {
            Some(s) => Pcg64Mcg::seed_from_u64(s),
            None => Pcg64Mcg::from_os_rng(),
        };
        let slow_nanos = nanos(config.slow_call_duration());
        let shadow =
            CircuitBreaker::with_clock(format!("{scope} (local)"), config.clone(), clock.clone());
        let redis_breaker = CircuitBreaker::with_clock(
            format!("redis for {scope}"),
            shared
                .redis_breaker
                .clone()
                .unwrap_or_else(default_redis_breaker),
            clock.clone(),
        );
        let (events, _) = broadcast::channel(64);
        let inner = Inner {
            name: scope.to_string(),
            keys: Keys::new(&shared.key_prefix, scope),
            jitter_micros: micros(config.open_jitter()),
            cohort_width: (slow_nanos / 2).max(1),
            slow_nanos,
            config,
            shared,
            replica,
            cfg,
            version,
            backend,
            shadow,
            redis_breaker,
            view: Mutex::new(View {
                valid: false,
                state: State::Closed,
                epoch: 0,
                origin: 0,
                open_until: 0,
                redis_now: 0,
                at: 0,
                reject_until: 0,
                lease_deadline: None,
                missing: false,
            }),
            flight: Mutex::new(Flight {
                calls: InFlight::new(slow_nanos),
                next_check: clock.now().saturating_add((slow_nanos / 2).max(1)),
                reported: 0,
            }),
            batch: Mutex::new(Batch::default()),
            batch_idle: tokio::sync::Notify::new(),
            rng: Mutex::new(rng),
            counters: Counters::default(),
            fallback_now: AtomicBool::new(false),
            unconfirmed: AtomicBool::new(false),
            redirections: AtomicU32::new(0),
            last_error: Mutex::new(None),
            events,
            clock,
        };
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The scope.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// This replica's id.
    pub fn replica(&self) -> &str {
        &self.inner.replica
    }

    /// The keys in Redis.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// The breaker configuration.
    pub fn config(&self) -> &BreakerConfig {
        &self.inner.config
    }

    /// The local shadow breaker: it sees this replica's outcomes all along and decides while
    /// Redis is unreachable (with [`Fallback::Local`]).
    pub fn shadow(&self) -> &CircuitBreaker<C> {
        &self.inner.shadow
    }

    /// The breaker guarding Redis itself.
    pub fn redis_breaker(&self) -> &CircuitBreaker<C> {
        &self.inner.redis_breaker
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.inner.clock
    }

    /// Transitions this replica performs, as they happen.
    pub fn subscribe(&self) -> broadcast::Receiver<Transition> {
        self.inner.events.subscribe()
    }

    /// Where decisions come from right now.
    pub fn mode(&self) -> Mode {
        if self.inner.fallback_now.load(Ordering::Relaxed) {
            Mode::Fallback
        } else {
            Mode::Shared
        }
    }

    /// The state as this replica last saw it (no round trip); `None` before the first answer
    /// from Redis.
    pub fn last_known_state(&self) -> Option<State> {
        let v = lock(&self.inner.view);
        v.valid.then_some(v.state)
    }

    /// The last error Redis (or the connection to it) gave this replica, in its own words:
    /// `WRONGPASS invalid username-password pair`, `Connection refused`, `NOPERM ...`, or
    /// "did not answer within the Redis timeout". `None` until something failed.
    pub fn last_redis_error(&self) -> Option<String> {
        lock(&self.inner.last_error).clone()
    }

    /// Checks, before traffic arrives, that this Redis can host the breaker: it connects
    /// (waiting up to `within` for the connection, outside any call's bound), reads the
    /// settings that matter (`INFO`), and runs the breaker's functions on this scope (loading
    /// them if needed). An error names the real cause: a refused connection or a wrong
    /// password ([`CheckError::Connect`]), an ACL or a version that cannot run the functions
    /// ([`CheckError::Functions`]), or an `allkeys-*` eviction policy that could evict an Open
    /// breaker ([`CheckError::UnsafeEviction`]). Settings that weaken a guarantee without
    /// breaking it come back as [`Health::warnings`].
    ///
    /// ```no_run
    /// # use tripline_redis::{Backend, SharedBreaker, SharedConfig};
    /// # async fn run(breaker: SharedBreaker) -> Result<(), Box<dyn std::error::Error>> {
    /// let health = breaker.check(std::time::Duration::from_secs(5)).await?;
    /// for w in &health.warnings {
    ///     eprintln!("redis: {w}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check(&self, within: Duration) -> Result<Health, CheckError> {
        let inner = &self.inner;
        let mut info = redis::cmd("INFO");
        info.arg("server")
            .arg("memory")
            .arg("persistence")
            .arg("replication");
        // A connection found dead by the first command (Redis restarted) is made again once.
        let mut health = None;
        for _ in 0..2 {
            inner
                .backend
                .connected(within)
                .await
                .map_err(CheckError::Connect)?;
            match inner.backend.query::<String>(&info).await {
                Ok(text) => health = Some(Health::from_info(&text)),
                Err(e) if e.is_io_error() || e.is_connection_dropped() => continue,
                // INFO may be refused by an ACL: then the settings are unknown, not wrong.
                Err(e) => {
                    health = Some(Health {
                        warnings: vec![format!("INFO refused ({e}): settings unknown")],
                        ..Health::default()
                    })
                }
            }
            break;
        }
        let health = match health {
            Some(h) => h,
            None => {
                inner
                    .backend
                    .connected(within)
                    .await
                    .map_err(CheckError::Connect)?;
                Health::default()
            }
        };
        if health.unsafe_eviction() {
            return Err(CheckError::UnsafeEviction {
                policy: health.maxmemory_policy.clone(),
            });
        }
        let now = inner.clock.now();
        let reply = tokio::time::timeout(within, inner.call("read", now, &[]))
            .await
            .map_err(|_| {
                CheckError::Functions(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "tripline: the breaker's read function did not answer",
                    format!("within {within:?}"),
                )))
            })?
            .map_err(CheckError::Functions)?;
        inner.absorb(&reply, now);
        Ok(health)
    }

    /// This replica's counters.
    pub fn metrics(&self) -> SharedMetrics {
        let c = &self.inner.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SharedMetrics {
            redis_calls: r(&c.redis_calls),
            redis_errors: r(&c.redis_errors),
            redis_timeouts: r(&c.redis_timeouts),
            redis_skipped: r(&c.redis_skipped),
            view_decisions: r(&c.view_decisions),
            fallback_decisions: r(&c.fallback_decisions),
            rejected: r(&c.rejected),
            stale_results: r(&c.stale_results),
            lost_records: r(&c.lost_records),
            batches: r(&c.batches),
            batched_outcomes: r(&c.batched_outcomes),
            abandoned: r(&c.abandoned),
            expired_probes: r(&c.expired_probes),
            transitions: r(&c.transitions),
            redis_redirections: r(&c.redis_redirections),
            lost_state: r(&c.lost_state),
            restores: r(&c.restores),
            lost_windows: r(&c.lost_windows),
            held_rejections: r(&c.held_rejections),
            largest_batch: r(&c.largest_batch),
            late_admissions: r(&c.late_admissions),
        }
    }

    /// Asks for a permit.
    pub async fn acquire(&self) -> Result<SharedPermit<C>, Rejected> {
        let ticket = self.inner.acquire(self.inner.clock.now()).await?;
        let shadow = match ticket.kind {
            Kind::Local(_) => None,
            _ => self.inner.shadow.try_acquire_owned().ok(),
        };
        let (kind, shadow) = match ticket.kind {
            Kind::Local(p) => (Kind::Local(()), Some(p)),
            Kind::Window => (Kind::Window, shadow),
            Kind::Probe { slot, token } => (Kind::Probe { slot, token }, shadow),
            Kind::Pass => (Kind::Pass, shadow),
        };
        let runtime = matches!(kind, Kind::Probe { .. })
            .then(tokio::runtime::Handle::try_current)
            .and_then(Result::ok);
        Ok(SharedPermit {
            breaker: self.clone(),
            kind,
            epoch: ticket.epoch,
            origin: ticket.origin,
            started: ticket.started,
            cohort: ticket.cohort,
            shadow,
            runtime,
            done: false,
        })
    }

    /// Acquires, runs `f` under `timeout` (the timeout inside the breaker: an expiry is a
    /// failure), records the outcome and returns the result.
    pub async fn call<T, E, F, Fut>(
        &self,
        timeout: Option<Duration>,
        f: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call_classified(timeout, ResultClassifier, f).await
    }

    /// [`SharedBreaker::call`] with a classifier.
    pub async fn call_classified<T, E, K, F, Fut>(
        &self,
        timeout: Option<Duration>,
        classify: K,
        f: F,
    ) -> Result<T, CallError<E>>
    where
        K: Classify<T, E>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let permit = self.acquire().await.map_err(CallError::Rejected)?;
        let result = match timeout {
            Some(t) => match tokio::time::timeout(t, f()).await {
                Ok(r) => r,
                Err(_) => {
                    permit.record(Outcome::Failure).await;
                    return Err(CallError::Timeout(t));
                }
            },
            None => f().await,
        };
        permit.record_classified(classify.classify(&result)).await;
        result.map_err(CallError::Failed)
    }

    /// [`SharedBreaker::call`], with `fallback` answering rejections, timeouts and failures.
    pub async fn call_or_else<T, E, F, Fut, G, GFut>(
        &self,
        timeout: Option<Duration>,
        f: F,
        fallback: G,
    ) -> T
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        G: FnOnce(CallError<E>) -> GFut,
        GFut: Future<Output = T>,
    {
        match self.call(timeout, f).await {
            Ok(v) => v,
            Err(e) => fallback(e).await,
        }
    }

    /// Reads the shared state (one round trip).
    pub async fn refresh(&self) -> Result<Snapshot, redis::RedisError> {
        let now = self.inner.clock.now();
        let reply = self.inner.invoke_raw("read", now, &[]).await?;
        let n = |i: usize| u64::try_from(reply.field(i)).unwrap_or(0);
        Ok(Snapshot {
            state: reply.state,
            epoch: reply.epoch,
            window: WindowSnapshot {
                calls: n(0),
                failures: n(1),
                slow_calls: n(2),
                in_flight_slow: n(3),
            },
            probes_in_flight: n(4) as u32,
            transitions: n(5),
            open_until_micros: reply.open_until,
            now_micros: reply.now,
            origin: reply.origin,
        })
    }

    /// Runs the timers: an Open breaker with `automatic_transition` moves to HalfOpen once its
    /// wait is over, a HalfOpen one past `half_open.max_wait` back to Open.
    pub async fn tick(&self) -> Result<(), redis::RedisError> {
        let now = self.inner.clock.now();
        self.inner.invoke_raw("tick", now, &[]).await?;
        Ok(())
    }

    /// Operator: reject every call, fleet-wide, until another operator action.
    pub async fn force_open(&self) -> Result<(), redis::RedisError> {
        self.operator(State::ForcedOpen).await
    }

    /// Operator: permit every call and record nothing, fleet-wide.
    pub async fn disable(&self) -> Result<(), redis::RedisError> {
        self.operator(State::Disabled).await
    }

    /// Operator: record but never trip, fleet-wide.
    pub async fn metrics_only(&self) -> Result<(), redis::RedisError> {
        self.operator(State::MetricsOnly).await
    }

    /// Operator: back to Closed with an empty window, fleet-wide.
    pub async fn reset(&self) -> Result<(), redis::RedisError> {
        self.operator(State::Closed).await
    }

    async fn operator(&self, to: State) -> Result<(), redis::RedisError> {
        let now = self.inner.clock.now();
        self.inner
            .invoke_raw("operator", now, &[to.as_str().to_string()])
            .await?;
        Ok(())
    }

    /// Sends buffered outcomes now (batching mode).
    pub async fn flush(&self) {
        self.inner.flush().await;
    }

    /// The fleet's latest transitions, newest first (at most `count`).
    pub async fn fleet_events(&self, count: usize) -> Result<Vec<FleetEvent>, redis::RedisError> {
        self.inner.fleet_events(count).await
    }
}

/// What an acquire decided.
enum Kind<L> {
    Window,
    Probe { slot: u32, token: u64 },
    Pass,
    Local(L),
}

/// What the view says about an acquire.
enum FromView<C: Clock> {
    /// Decided without Redis.
    Decided(Result<Ticket<C>, Rejected>),
    /// Ask Redis, sending this in-flight report (`"-1"`: none).
    Ask(String),
}

struct Ticket<C: Clock> {
    kind: Kind<OwnedPermit<C>>,
    epoch: u64,
    origin: u64,
    started: u64,
    cohort: Option<Cohort>,
}

impl<C: Clock + Clone> Inner<C> {
    fn ticket(
        &self,
        kind: Kind<OwnedPermit<C>>,
        (epoch, origin): (u64, u64),
        now: u64,
    ) -> Ticket<C> {
        let cohort = match kind {
            Kind::Window if self.config.count_in_flight_as_slow() => {
                Some(lock(&self.flight).calls.enter(now, epoch))
            }
            _ => None,
        };
        Ticket {
            kind,
            epoch,
            origin,
            started: now,
            cohort,
        }
    }

    fn rejected(&self, state: State, retry_micros: Option<u64>) -> Rejected {
        bump(&self.counters.rejected, 1);
        Rejected::new(
            self.name.clone(),
            state,
            retry_micros.map(Duration::from_micros),
        )
    }

    /// This replica's calls in flight past the slow-call duration (the in-process breaker's
    /// cohort rule), sent with outcomes so that an evaluation in Redis sees the count of the
    /// moment: `"epoch:count"`, the epoch being the one the count belongs to (the function
    /// keeps it only if that is still the current epoch), or `"-1"` when there is nothing to
    /// say (the rule is off, or the count is zero and was zero when last sent).
    fn in_flight_report(&self, now: u64) -> String {
        if !self.config.count_in_flight_as_slow() {
            return "-1".into();
        }
        let epoch = lock(&self.view).epoch;
        let mut f = lock(&self.flight);
        let n = f.calls.overdue(now, self.slow_nanos, epoch);
        if n == 0 && f.reported == 0 {
            return "-1".into();
        }
        f.reported = n;
        format!("{epoch}:{n}")
    }

    /// At an acquire in Closed, once per cohort width (as in-process): the report, sent so
    /// that Redis evaluates every rule with it (a zero too: the evaluation is the point);
    /// `None` when the check is not due.
    fn in_flight_check(&self, now: u64) -> Option<String> {
        if !self.config.count_in_flight_as_slow() {
            return None;
        }
        let epoch = lock(&self.view).epoch;
        let mut f = lock(&self.flight);
        if now < f.next_check {
            return None;
        }
        f.next_check = now.saturating_add(self.cohort_width);
        let n = f.calls.overdue(now, self.slow_nanos, epoch);
        f.reported = n;
        Some(format!("{epoch}:{n}"))
    }

    fn exit_flight(&self, cohort: Option<Cohort>, epoch: u64) {
        if let Some(c) = cohort {
            lock(&self.flight).calls.exit(c, epoch);
        }
    }

    /// The functions' clock now, estimated from the last reply (microseconds): at least what it
    /// really is, since the reply was computed after its request left.
    fn redis_now_estimate(v: &View, now: u64) -> u64 {
        v.redis_now.saturating_add(now.saturating_sub(v.at) / 1000)
    }

    /// A decision from the last answer if it is fresh enough, or the in-flight count (-1: none)
    /// to send to Redis with the question.
    fn decide_from_view(&self, now: u64) -> FromView<C> {
        let ttl = nanos(self.shared.view_ttl);
        let v = *lock(&self.view);
        if ttl == 0 || !v.valid || v.missing || now.saturating_sub(v.at) >= ttl {
            // Ask Redis, with the in-flight count when a Closed breaker's check is due.
            let closed = !v.valid || v.state == State::Closed;
            let report = closed.then(|| self.in_flight_check(now)).flatten();
            return FromView::Ask(report.unwrap_or_else(|| "-1".into()));
        }
        let decided = match v.state {
            State::Closed | State::MetricsOnly => {
                if v.state == State::Closed {
                    if let Some(report) = self.in_flight_check(now) {
                        return FromView::Ask(report);
                    }
                }
                Ok(self.ticket(Kind::Window, (v.epoch, v.origin), now))
            }
            State::Disabled => Ok(self.ticket(Kind::Pass, (v.epoch, v.origin), now)),
            State::Open => {
                let est = Self::redis_now_estimate(&v, now);
                if est >= v.open_until {
                    return FromView::Ask("-1".into());
                }
                Err(self.rejected(State::Open, Some(v.open_until - est)))
            }
            State::ForcedOpen => Err(self.rejected(State::ForcedOpen, None)),
            State::HalfOpen => {
                if now >= v.reject_until {
                    return FromView::Ask("-1".into());
                }
                let retry = v.lease_deadline.map(|d| d.saturating_sub(now) / 1000);
                Err(self.rejected(State::HalfOpen, retry))
            }
        };
        bump(&self.counters.view_decisions, 1);
        FromView::Decided(decided)
    }

    /// While Redis is unreachable: a rejection this replica owes the fleet, whatever its
    /// fallback says. A replica that saw the breaker Open keeps rejecting until the deadline it
    /// saw; one that saw it ForcedOpen keeps the kill switch.
    fn held_rejection(&self, now: u64) -> Option<Rejected> {
        let v = *lock(&self.view);
        if !v.valid {
            return None;
        }
        let r = match v.state {
            State::ForcedOpen => self.rejected(State::ForcedOpen, None),
            State::Open => {
                let est = Self::redis_now_estimate(&v, now);
                if est >= v.open_until {
                    return None;
                }
                self.rejected(State::Open, Some(v.open_until - est))
            }
            _ => return None,
        };
        bump(&self.counters.held_rejections, 1);
        Some(r)
    }

    /// A probe token, unique fleet-wide with overwhelming probability (52 random bits, exact in
    /// Lua's numbers), and the caller's deadline in the functions' clock (0: unknown).
    fn claim_args(&self, now: u64) -> (u64, u64) {
        let token = (lock(&self.rng).random::<u64>() >> 12) | 1;
        let v = *lock(&self.view);
        let deadline = if v.valid {
            Self::redis_now_estimate(&v, now.saturating_add(nanos(self.shared.redis_timeout)))
        } else {
            0
        };
        (token, deadline)
    }

    async fn acquire(self: &Arc<Self>, now: u64) -> Result<Ticket<C>, Rejected> {
        let report = match self.decide_from_view(now) {
            FromView::Decided(decided) => return decided,
            FromView::Ask(in_flight) => in_flight,
        };
        let could_claim = {
            let v = lock(&self.view);
            !v.valid
                || !matches!(
                    v.state,
                    State::Closed | State::MetricsOnly | State::Disabled
                )
        };
        // A claim Redis refuses because it reached Redis after the estimated deadline (the
        // estimate was short) is asked again once, with the estimate its reply corrects.
        for attempt in 0..2 {
            let (token, deadline) = self.claim_args(now);
            let args = [report.clone(), token.to_string(), deadline.to_string()];
            match self.invoke("admit", now, &args).await {
                Ok(reply) => {
                    match reply.verdict.as_str() {
                        "permit" => {
                            return Ok(self.ticket(Kind::Window, (reply.epoch, reply.origin), now));
                        }
                        "probe" => {
                            let slot = u32::try_from(reply.field(0)).unwrap_or(0);
                            let token = u64::try_from(reply.field(1)).unwrap_or(0);
                            return Ok(self.ticket(
                                Kind::Probe { slot, token },
                                (reply.epoch, reply.origin),
                                now,
                            ));
                        }
                        "pass" => {
                            return Ok(self.ticket(Kind::Pass, (reply.epoch, reply.origin), now));
                        }
                        "late" => {
                            bump(&self.counters.late_admissions, 1);
                            if attempt == 0 {
                                continue;
                            }
                            return Err(self.rejected(State::HalfOpen, None));
                        }
                        "reject" => {
                            let retry = u64::try_from(reply.field(0)).ok();
                            if reply.state == State::HalfOpen {
                                let hold = retry
                                    .map_or(nanos(self.shared.view_ttl), |r| r.saturating_mul(1000))
                                    .min(nanos(self.shared.view_ttl));
                                let mut v = lock(&self.view);
                                v.reject_until = now.saturating_add(hold);
                                v.lease_deadline =
                                    retry.map(|r| now.saturating_add(r.saturating_mul(1000)));
                            }
                            return Err(self.rejected(reply.state, retry));
                        }
                        // "restored" / "current": this replica's view was brought back into
                        // Redis; decide from it.
                        _ => {
                            let retry = reply.open_until.checked_sub(reply.now).filter(|r| *r > 0);
                            return Err(self.rejected(reply.state, retry));
                        }
                    }
                }
                Err(u) => {
                    if u.timed_out && could_claim {
                        // The admission may still run (a paused or overloaded Redis): release
                        // whatever it claims for this token. Sent on the same connection, it
                        // runs right after it.
                        self.spawn_release(0, -1, token);
                    }
                    return self.fallback(now);
                }
            }
        }
        Err(self.rejected(State::HalfOpen, None))
    }

    /// The decision while Redis is unreachable.
    fn fallback(&self, now: u64) -> Result<Ticket<C>, Rejected> {
        bump(&self.counters.fallback_decisions, 1);
        if let Some(r) = self.held_rejection(now) {
            return Err(r);
        }
        match self.shared.fallback {
            Fallback::Local => match self.shadow.try_acquire_owned() {
                Ok(p) => Ok(Ticket {
                    kind: Kind::Local(p),
                    epoch: 0,
                    origin: 0,
                    started: now,
                    cohort: None,
                }),
                Err(r) => {
                    bump(&self.counters.rejected, 1);
                    Err(r)
                }
            },
            Fallback::Reject => Err(self.rejected(State::Open, None)),
        }
    }

    /// Whether `reply` contradicts this replica's view: Redis says Closed for a breaker this
    /// replica saw Open, HalfOpen or ForcedOpen, from a record that started over (another
    /// origin) or went back (an older epoch). A Closed record that follows from the view (same
    /// origin, a later epoch) does not; neither does a record that started over at an
    /// operator's action (reply note 4: a reset after the loss is the operator's word, from any
    /// replica), nor anything once the view is older than the idle TTL (the record may then
    /// have closed and expired as it should).
    fn contradicts(&self, v: &View, reply: &Reply, now: u64) -> bool {
        let started_over = reply.origin != v.origin && reply.notes & NOTE_OPERATOR == 0;
        let went_back = reply.origin == v.origin && reply.epoch < v.epoch;
        v.valid
            && matches!(v.state, State::Open | State::HalfOpen | State::ForcedOpen)
            && reply.state == State::Closed
            && (started_over || went_back)
            && now.saturating_sub(v.at) < nanos(self.shared.idle_ttl)
    }

    /// Takes in what a reply says about the shared state. Returns false (and keeps the view)
    /// when the reply contradicts the view.
    fn absorb(&self, reply: &Reply, now: u64) -> bool {
        let changed = 'view: {
            let mut v = lock(&self.view);
            if self.contradicts(&v, reply, now) {
                return false;
            }
            if reply.verdict == "read" && reply.notes & NOTE_MISSING != 0 {
                // A read of a missing record creates none: there is nothing to decide from,
                // and the next call asks (and creates it).
                v.missing = true;
                return true;
            }
            // Replies can be taken in out of order (several calls in flight): one computed
            // before the view's must not roll the view back. (The functions' clock never goes
            // back on a record; across a lost record, a reply computed later is the news.)
            let older =
                reply.now < v.redis_now || (reply.now == v.redis_now && reply.epoch < v.epoch);
            if v.valid && older {
                break 'view None;
            }
            if v.valid && v.epoch != reply.epoch {
                let mut f = lock(&self.flight);
                if matches!(reply.state, State::Closed | State::MetricsOnly) {
                    f.next_check = now.saturating_add(self.cohort_width);
                    f.reported = 0;
                }
            }
            let before = v.valid.then_some(v.state);
            v.valid = true;
            v.missing = false;
            v.state = reply.state;
            v.epoch = reply.epoch;
            v.origin = reply.origin;
            v.open_until = reply.open_until;
            v.redis_now = reply.now;
            v.at = now;
            v.reject_until = 0;
            v.lease_deadline = None;
            (before != Some(reply.state)).then_some(reply.state)
        };
        if let Some(to) = changed {
            self.mirror(to);
        }
        if reply.expired > 0 {
            bump(&self.counters.expired_probes, reply.expired);
        }
        if reply.notes & 1 != 0 {
            bump(&self.counters.lost_windows, 1);
            warn(&format!(
                "tripline-redis: the window of {} was lost in Redis (evicted or expired while it held calls)",
                self.name
            ));
        }
        for t in &reply.transitions {
            bump(&self.counters.transitions, 1);
            let _ = self.events.send(t.clone());
        }
        true
    }

    /// The shadow breaker follows the fleet's state category, so that while Redis is
    /// unreachable it decides from where the fleet was: tripped with the fleet (it then probes
    /// locally before closing), closed (with a fresh window) when the fleet closes, and in the
    /// operator's state when the fleet is.
    fn mirror(&self, to: State) {
        let shadow = &self.shadow;
        let now = shadow.state();
        match to {
            State::Open | State::HalfOpen => {
                if matches!(now, State::ForcedOpen | State::Disabled) {
                    shadow.reset();
                }
                if matches!(shadow.state(), State::Closed | State::MetricsOnly) {
                    shadow.trip();
                }
            }
            State::Closed if now != State::Closed => shadow.reset(),
            State::ForcedOpen if now != State::ForcedOpen => shadow.force_open(),
            State::Disabled if now != State::Disabled => shadow.disable(),
            State::MetricsOnly if now != State::MetricsOnly => shadow.metrics_only(),
            _ => {}
        }
    }

    fn note_error(&self, e: &str) {
        *lock(&self.last_error) = Some(e.to_string());
    }

    /// Runs a function through the breaker on Redis, bounded by the Redis timeout.
    async fn invoke(&self, op: &str, now: u64, args: &[String]) -> Result<Reply, Unavailable> {
        let Ok(guard) = self.redis_breaker.try_acquire_owned() else {
            bump(&self.counters.redis_skipped, 1);
            self.fallback_now.store(true, Ordering::Relaxed);
            return Err(Unavailable { timed_out: false });
        };
        bump(&self.counters.redis_calls, 1);
        let outcome =
            tokio::time::timeout(self.shared.redis_timeout, self.settled(op, now, args)).await;
        match outcome {
            Ok(Ok(r)) => {
                guard.record(Outcome::Success);
                self.redirections.store(0, Ordering::Relaxed);
                self.fallback_now.store(false, Ordering::Relaxed);
                Ok(r)
            }
            Ok(Err(e)) => {
                self.note_error(&e.to_string());
                if is_redirection(&e)
                    && self.redirections.fetch_add(1, Ordering::Relaxed) < REDIRECTIONS_FORGIVEN
                {
                    // A slot on the move: Redis is there. This call falls back; the breaker on
                    // Redis does not count it.
                    bump(&self.counters.redis_redirections, 1);
                    guard.record(Outcome::Ignored);
                } else {
                    // A connection lost after the call was sent may still have run it.
                    self.unconfirmed.store(true, Ordering::Release);
                    bump(&self.counters.redis_errors, 1);
                    guard.record(Outcome::Failure);
                }
                self.fallback_now.store(true, Ordering::Relaxed);
                Err(Unavailable { timed_out: false })
            }
            Err(_) => {
                self.note_error("tripline: Redis did not answer within the Redis timeout");
                self.unconfirmed.store(true, Ordering::Release);
                bump(&self.counters.redis_timeouts, 1);
                guard.record(Outcome::Failure);
                self.fallback_now.store(true, Ordering::Relaxed);
                Err(Unavailable { timed_out: true })
            }
        }
    }

    /// [`Inner::invoke`] for operations whose caller wants the error (it does not go through the
    /// breaker on Redis).
    async fn invoke_raw(
        &self,
        op: &str,
        now: u64,
        args: &[String],
    ) -> Result<Reply, redis::RedisError> {
        match tokio::time::timeout(self.shared.redis_timeout, self.settled(op, now, args)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                self.note_error(&e.to_string());
                Err(e)
            }
            Err(_) => {
                let e = "tripline: Redis did not answer within the Redis timeout";
                self.unconfirmed.store(true, Ordering::Release);
                self.note_error(e);
                Err(redis::RedisError::from((redis::ErrorKind::Io, e)))
            }
        }
    }

    /// The fleet's latest transitions, newest first (at most `count`).
    async fn fleet_events(&self, count: usize) -> Result<Vec<FleetEvent>, redis::RedisError> {
        let mut cmd = redis::cmd("XREVRANGE");
        cmd.arg(&self.keys.events)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count);
        let reply: redis::streams::StreamRangeReply = self.backend.query(&cmd).await?;
        let mut out = Vec::new();
        for entry in reply.ids {
            let get = |k: &str| -> String { entry.get::<String>(k).unwrap_or_default() };
            let (Some(from), Some(to)) = (parse_state(&get("from")), parse_state(&get("to")))
            else {
                continue;
            };
            out.push(FleetEvent {
                id: entry.id.clone(),
                from,
                to,
                epoch: get("epoch").parse().unwrap_or(0),
                reason: get("reason"),
                at_micros: get("at").parse().unwrap_or(0),
                replica: get("replica"),
            });
        }
        Ok(out)
    }

    /// After a call that timed out and may still have run: the transitions this replica
    /// performed between `before` and the reply's epoch that no reply carried (the timed-out
    /// call's), read from the events stream and published as if that reply had come.
    async fn publish_missed(&self, before: u64, reply: &Reply) {
        if !self.unconfirmed.swap(false, Ordering::AcqRel) {
            return;
        }
        let Ok(mut events) = self.fleet_events(32).await else {
            return;
        };
        events.reverse();
        for e in events {
            let carried = reply
                .transitions
                .iter()
                .any(|t| (t.epoch, t.to) == (e.epoch, e.to));
            if e.replica == self.replica && e.epoch > before && e.epoch <= reply.epoch && !carried {
                bump(&self.counters.transitions, 1);
                let _ = self.events.send(Transition {
                    from: e.from,
                    to: e.to,
                    epoch: e.epoch,
                    reason: e.reason,
                });
            }
        }
    }

    /// Calls `op` and takes its reply in. A reply that contradicts this replica's view (Redis
    /// lost a breaker this replica saw Open) is not taken: the replica brings its view back
    /// into Redis and returns the answer to that instead.
    async fn settled(&self, op: &str, now: u64, args: &[String]) -> redis::RedisResult<Reply> {
        // Only after a call that may have run unanswered: the epoch its transitions follow.
        let before = self
            .unconfirmed
            .load(Ordering::Acquire)
            .then(|| lock(&self.view).epoch);
        let reply = self.call(op, now, args).await?;
        if self.absorb(&reply, now) || op == "restore" {
            if let Some(before) = before.filter(|&b| reply.epoch > b) {
                self.publish_missed(before, &reply).await;
            }
            return Ok(reply);
        }
        bump(&self.counters.lost_state, 1);
        let held = *lock(&self.view);
        warn(&format!(
            "tripline-redis: Redis answered Closed for {}, which this replica saw {} (epoch {}): the record was lost; restoring it",
            self.name, held.state, held.epoch
        ));
        let (to, left) = match held.state {
            State::ForcedOpen => ("forced-open", 0),
            // HalfOpen, or Open past its deadline: back to Open with no wait left, so that the
            // fleet probes again before it closes.
            _ => (
                "open",
                held.open_until
                    .saturating_sub(Self::redis_now_estimate(&held, now)),
            ),
        };
        let args = [
            held.origin.to_string(),
            held.epoch.to_string(),
            to.to_string(),
            left.to_string(),
        ];
        let restored = self.call("restore", now, &args).await?;
        if restored.verdict == "restored" {
            bump(&self.counters.restores, 1);
        }
        self.absorb(&restored, now);
        Ok(restored)
    }

    /// One function call: the configuration is stored once per scope (in its config hash)
    /// and named by its version in every call; a node that does not know the version yet is
    /// given it, once.
    async fn call(&self, op: &str, now: u64, args: &[String]) -> redis::RedisResult<Reply> {
        let raw = self.fcall(op, now, args).await?;
        let raw = if raw.len() == 1 && text(&raw[0]).as_deref() == Some("config") {
            self.store_config().await?;
            self.fcall(op, now, args).await?
        } else {
            raw
        };
        Reply::parse(raw)
    }

    async fn store_config(&self) -> redis::RedisResult<()> {
        let keys = self.keys.all();
        let idle = self.shared.idle_ttl.as_millis().to_string();
        let args = [self.version.as_str(), self.cfg.as_str(), idle.as_str()];
        self.backend
            .fcall(&format!("{FUNCTION_PREFIX}config"), &keys, &args)
            .await?;
        Ok(())
    }

    async fn fcall(
        &self,
        op: &str,
        now: u64,
        args: &[String],
    ) -> redis::RedisResult<Vec<redis::Value>> {
        let clock = match self.shared.time_source {
            TimeSource::Redis => String::new(),
            TimeSource::Local => (now / 1000).to_string(),
        };
        let jitter = if self.jitter_micros > 0 {
            lock(&self.rng).random_range(0..=self.jitter_micros)
        } else {
            0
        }
        .to_string();
        let mut all: Vec<&str> = Vec::with_capacity(4 + args.len());
        all.extend([
            clock.as_str(),
            self.replica.as_str(),
            self.version.as_str(),
            jitter.as_str(),
        ]);
        all.extend(args.iter().map(String::as_str));
        self.backend
            .fcall(&format!("{FUNCTION_PREFIX}{op}"), &self.keys.all(), &all)
            .await
    }

    async fn record_window(
        self: &Arc<Self>,
        (epoch, origin): (u64, u64),
        elapsed: u64,
        now: u64,
        c: Classification,
    ) -> Recorded {
        let slow = elapsed > self.slow_nanos;
        let code = match c.outcome {
            Outcome::Success => 's',
            Outcome::Failure => 'f',
            Outcome::Ignored => {
                // Nothing to record, so no round trip: stale or not, by the last answer.
                let v = *lock(&self.view);
                if (v.epoch, v.origin) != (epoch, origin) {
                    bump(&self.counters.stale_results, 1);
                    return Recorded::Stale;
                }
                return Recorded::Ignored;
            }
        };
        if let Some(b) = self.shared.batching {
            let closed = {
                let v = lock(&self.view);
                v.valid && v.state == State::Closed && (v.epoch, v.origin) == (epoch, origin)
            };
            if closed && c.retry_after.is_none() {
                let bad = slow || code == 'f';
                let ch = if slow {
                    code.to_ascii_uppercase()
                } else {
                    code
                };
                let (first, spawn) = {
                    let mut batch = lock(&self.batch);
                    if !batch.outcomes.is_empty() && (batch.epoch, batch.origin) != (epoch, origin)
                    {
                        // Epochs only grow: the older side is stale, no need to send it.
                        if epoch < batch.epoch {
                            bump(&self.counters.stale_results, 1);
                            return Recorded::Stale;
                        }
                        let n = batch.outcomes.len() as u64;
                        batch.outcomes.clear();
                        batch.bad_since = None;
                        bump(&self.counters.stale_results, n);
                    }
                    if batch.outcomes.len() >= MAX_BUFFERED_BATCHES * b.max_batch as usize {
                        // Redis is not keeping up: this outcome reaches only the shadow.
                        bump(&self.counters.lost_records, 1);
                        return Recorded::Counted;
                    }
                    if batch.outcomes.is_empty() {
                        batch.first_at = now;
                        batch.epoch = epoch;
                        batch.origin = origin;
                        batch.ticks = 0;
                    }
                    if bad && batch.bad_since.is_none() {
                        batch.bad_since = Some(now);
                    }
                    batch.outcomes.push(ch);
                    let due = batch.outcomes.len() >= b.max_batch as usize
                        || now.saturating_sub(batch.first_at) >= nanos(b.success_wait())
                        || batch
                            .bad_since
                            .is_some_and(|t| now.saturating_sub(t) >= nanos(b.flush_every));
                    // One batch in flight per replica: while one is out, outcomes wait.
                    let first = (due && !batch.sending).then(|| {
                        batch.sending = true;
                        batch.take(b.max_batch as usize)
                    });
                    let spawn = !batch.flusher && !batch.outcomes.is_empty();
                    if spawn {
                        batch.flusher = true;
                    }
                    (first, spawn)
                };
                if let Some(first) = first {
                    self.drain(first).await;
                }
                if spawn {
                    self.spawn_flusher(b);
                }
                return Recorded::Counted;
            }
        }
        if self.shared.batching.is_some() {
            // Outcomes buffered before this one go first, so that the functions see them in
            // order (a trip happens at the outcome that causes it, with that outcome's hint).
            self.flush().await;
        }
        let report = self.in_flight_report(now);
        let hint = c.retry_after.map_or(0, micros);
        let args = [
            stamp(epoch, origin),
            code.to_string(),
            u8::from(slow).to_string(),
            report,
            hint.to_string(),
        ];
        self.send_outcome("record", now, &args).await
    }

    /// Sends one outcome (`record` or `probe`) and settles by the reply. An outcome Redis did
    /// not confirm counts as lost (it may still have applied; a probe's lease expires by
    /// itself).
    async fn send_outcome(&self, op: &str, now: u64, args: &[String]) -> Recorded {
        match self.invoke(op, now, args).await {
            Ok(reply) => self.verdict(&reply.verdict),
            Err(_) => {
                bump(&self.counters.lost_records, 1);
                Recorded::Counted
            }
        }
    }

    fn verdict(&self, v: &str) -> Recorded {
        match v {
            "counted" => Recorded::Counted,
            "ignored" => Recorded::Ignored,
            _ => {
                bump(&self.counters.stale_results, 1);
                Recorded::Stale
            }
        }
    }

    async fn record_probe(
        &self,
        epoch: u64,
        slot: u32,
        token: u64,
        elapsed: u64,
        now: u64,
        c: Classification,
    ) -> Recorded {
        let code = match c.outcome {
            Outcome::Success => "s",
            Outcome::Failure => "f",
            Outcome::Ignored => "i",
        };
        let slow = elapsed > self.slow_nanos;
        let args = [
            epoch.to_string(),
            slot.to_string(),
            token.to_string(),
            code.to_string(),
            u8::from(slow).to_string(),
            c.retry_after.map_or(0, micros).to_string(),
        ];
        self.send_outcome("probe", now, &args).await
    }

    async fn release(&self, epoch: u64, slot: i64, token: u64) {
        let now = self.clock.now();
        let args = [epoch.to_string(), slot.to_string(), token.to_string()];
        let _ = self.invoke_raw("release", now, &args).await;
    }

    /// Releases a lease in the background (the runtime of the caller, if any).
    fn spawn_release(self: &Arc<Self>, epoch: u64, slot: i64, token: u64) {
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let inner = self.clone();
            rt.spawn(async move { inner.release(epoch, slot, token).await });
        }
    }

    async fn send_batch(&self, (epoch, origin): (u64, u64), outcomes: String, now: u64) {
        if outcomes.is_empty() {
            return;
        }
        let n = outcomes.len() as u64;
        self.counters.largest_batch.fetch_max(n, Ordering::Relaxed);
        let report = self.in_flight_report(now);
        let args = [stamp(epoch, origin), outcomes, report];
        match self.invoke("batch", now, &args).await {
            Ok(reply) => {
                bump(&self.counters.batches, 1);
                bump(&self.counters.batched_outcomes, n);
                let stale = u64::try_from(reply.field(1)).unwrap_or(0);
                bump(&self.counters.stale_results, stale);
            }
            Err(_) => bump(&self.counters.lost_records, n),
        }
    }

    /// Sends everything buffered, a batch of at most `max_batch` at a time, after the batch in
    /// flight (if any) has returned.
    async fn flush(&self) {
        let max = self
            .shared
            .batching
            .map_or(usize::MAX, |b| b.max_batch as usize);
        loop {
            let idle = self.batch_idle.notified();
            let taken = {
                let mut batch = lock(&self.batch);
                if batch.sending {
                    None
                } else if batch.outcomes.is_empty() {
                    return;
                } else {
                    batch.sending = true;
                    Some(batch.take(max))
                }
            };
            match taken {
                Some(first) => self.drain(first).await,
                None => idle.await,
            }
        }
    }

    /// Sends one batch as this replica's one sender, then lets the next one go. If the
    /// caller's future is dropped mid-send, the guard gives the sender's role back and counts
    /// the batch as unconfirmed.
    async fn drain(&self, (stamp, outcomes): ((u64, u64), String)) {
        struct Sending<'a> {
            batch: &'a Mutex<Batch>,
            idle: &'a tokio::sync::Notify,
            lost: &'a AtomicU64,
            outcomes: u64,
        }
        impl Drop for Sending<'_> {
            fn drop(&mut self) {
                lock(self.batch).sending = false;
                self.idle.notify_waiters();
                bump(self.lost, self.outcomes);
            }
        }
        let mut guard = Sending {
            batch: &self.batch,
            idle: &self.batch_idle,
            lost: &self.counters.lost_records,
            outcomes: outcomes.len() as u64,
        };
        self.send_batch(stamp, outcomes, self.clock.now()).await;
        // Sent (send_batch counted it either way): nothing is lost on the way out.
        guard.outcomes = 0;
    }

    /// Wakes every `flush_every` while outcomes are buffered and sends a batch (at most
    /// `max_batch`) when one is due: at once if the buffer holds a failure or a slow call or a
    /// full batch, else once the buffer has waited `success_wait`.
    fn spawn_flusher(self: &Arc<Self>, b: Batching) {
        // A strong handle: outcomes already answered `Counted` are sent even if every other
        // handle is dropped meanwhile (a replica shutting down); the task ends, and lets the
        // breaker go, once the buffer is empty.
        let inner = self.clone();
        let periods = (b.success_wait().as_nanos() / b.flush_every.as_nanos().max(1)).max(1) as u32;
        tokio::spawn(async move {
            let mut wait = b.flush_every;
            loop {
                tokio::time::sleep(wait).await;
                wait = b.flush_every;
                let first = {
                    let mut batch = lock(&inner.batch);
                    if batch.outcomes.is_empty() {
                        batch.flusher = false;
                        return;
                    }
                    batch.ticks = batch.ticks.saturating_add(1);
                    let due = batch.bad_since.is_some()
                        || batch.ticks >= periods
                        || batch.outcomes.len() >= b.max_batch as usize;
                    if !due {
                        continue;
                    }
                    if batch.sending {
                        // Look again soon rather than a whole period later: what is buffered
                        // now becomes due while that batch is out.
                        wait = (b.flush_every / 4).max(Duration::from_millis(1));
                        continue;
                    }
                    batch.sending = true;
                    batch.take(b.max_batch as usize)
                };
                inner.drain(first).await;
            }
        });
    }
}

impl Batch {
    /// Takes the oldest `max` outcomes (all, if fewer) to send.
    fn take(&mut self, max: usize) -> ((u64, u64), String) {
        let rest = if self.outcomes.len() > max {
            self.outcomes.split_off(max)
        } else {
            String::new()
        };
        let sent = std::mem::replace(&mut self.outcomes, rest);
        // What is left keeps the buffer's first failure time if it holds a failure or slow
        // call (at worst a little early), and the clock starts again for it.
        if !self.outcomes.contains(['f', 'F', 'S']) {
            self.bad_since = None;
        }
        self.ticks = 0;
        ((self.epoch, self.origin), sent)
    }
}

/// A result's epoch argument, `epoch/origin`: the functions count it only in the record it was
/// admitted by (a record that replaced a lost one may reach the same epoch, never the same
/// origin and epoch).
fn stamp(epoch: u64, origin: u64) -> String {
    format!("{epoch}/{origin}")
}

/// A warning about lost state, under the `tracing` feature; otherwise the metrics say it.
fn warn(message: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!("{message}");
    #[cfg(not(feature = "tracing"))]
    let _ = message;
}

/// Permission to make one call. Record its outcome with [`SharedPermit::record`]; dropping it
/// unrecorded abandons it (a probe's lease is released, nothing is counted).
#[must_use = "record the call's outcome, or the permit counts as abandoned"]
pub struct SharedPermit<C: Clock + Clone = MonotonicClock> {
    breaker: SharedBreaker<C>,
    kind: Kind<()>,
    epoch: u64,
    /// The origin of the record that admitted it: with the epoch, what a result must match.
    origin: u64,
    started: u64,
    cohort: Option<Cohort>,
    shadow: Option<OwnedPermit<C>>,
    /// For a probe: the runtime to release its lease on if the permit is dropped.
    runtime: Option<tokio::runtime::Handle>,
    done: bool,
}

impl<C: Clock + Clone> std::fmt::Debug for SharedPermit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPermit")
            .field("breaker", &self.breaker.inner.name)
            .field("epoch", &self.epoch)
            .field("probe", &self.is_probe())
            .field("local", &self.is_local())
            .finish()
    }
}

impl<C: Clock + Clone> SharedPermit<C> {
    /// Whether this permit is a half-open probe holding a fleet-wide lease.
    pub fn is_probe(&self) -> bool {
        matches!(self.kind, Kind::Probe { .. })
    }

    /// Whether the local fallback decided (Redis was unreachable).
    pub fn is_local(&self) -> bool {
        matches!(self.kind, Kind::Local(()))
    }

    /// The epoch the permit belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Gives the permit back without a result, and waits until a probe's lease is released
    /// (dropping the permit does the same in the background).
    pub async fn abandon(mut self) {
        self.done = true;
        let inner = self.breaker.inner.clone();
        bump(&inner.counters.abandoned, 1);
        inner.exit_flight(self.cohort, self.epoch);
        drop(self.shadow.take());
        if let Kind::Probe { slot, token } = self.kind {
            inner.release(self.epoch, i64::from(slot), token).await;
        }
    }

    /// Records the outcome. In batching mode an outcome buffered while Closed returns
    /// [`Recorded::Counted`] at once; if its batch turns out to belong to an older epoch, it
    /// is counted in [`SharedMetrics::stale_results`]. While Redis is unreachable the outcome
    /// reaches only the shadow breaker ([`SharedMetrics::lost_records`]).
    pub async fn record(self, outcome: Outcome) -> Recorded {
        self.record_classified(Classification::new(outcome)).await
    }

    /// Records a classified outcome (a `Retry-After` hint lengthens the next open wait).
    pub async fn record_classified(mut self, c: Classification) -> Recorded {
        self.done = true;
        let inner = self.breaker.inner.clone();
        let now = inner.clock.now();
        let elapsed = now.saturating_sub(self.started);
        inner.exit_flight(self.cohort, self.epoch);
        let shadow = self.shadow.take().map(|p| p.record_classified(c));
        match self.kind {
            Kind::Local(()) => shadow.unwrap_or(Recorded::Counted),
            Kind::Pass => Recorded::Disabled,
            Kind::Window => {
                inner
                    .record_window((self.epoch, self.origin), elapsed, now, c)
                    .await
            }
            Kind::Probe { slot, token } => {
                inner
                    .record_probe(self.epoch, slot, token, elapsed, now, c)
                    .await
            }
        }
    }
}

impl<C: Clock + Clone> Drop for SharedPermit<C> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let inner = self.breaker.inner.clone();
        bump(&inner.counters.abandoned, 1);
        inner.exit_flight(self.cohort, self.epoch);
        if let Kind::Probe { slot, token } = self.kind {
            let epoch = self.epoch;
            // The runtime the permit was acquired on, so that a permit dropped on another
            // thread still releases its lease.
            if let Some(rt) = self.runtime.take() {
                rt.spawn(async move { inner.release(epoch, i64::from(slot), token).await });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(v: &[&str]) -> Result<Reply, redis::RedisError> {
        Reply::parse(
            v.iter()
                .map(|s| redis::Value::BulkString(s.as_bytes().to_vec()))
                .collect(),
        )
    }

    #[test]
    fn parses_a_reply_with_transitions_and_their_epochs() {
        let r = reply(&[
            "reject",
            "open",
            "7",
            "15000000",
            "10000000",
            "0",
            "5",
            "0",
            "1",
            "5000000",
            "half-open>open>probes-failed",
        ])
        .unwrap();
        assert_eq!(r.state, State::Open);
        assert_eq!(r.field(0), 5_000_000);
        assert_eq!(r.transitions.len(), 1);
        assert_eq!(r.transitions[0].epoch, 7);

        let r = reply(&[
            "probe",
            "half-open",
            "7",
            "15000000",
            "15000000",
            "1",
            "5",
            "0",
            "2",
            "0",
            "3",
            "open>half-open>open-elapsed",
        ])
        .unwrap();
        assert_eq!(
            r.transitions[0].epoch, 7,
            "Open -> HalfOpen keeps the epoch"
        );
        assert_eq!(r.expired, 1);
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for bad in [
            &[][..],
            &["permit"][..],
            &["permit", "sideways", "1", "0", "0", "0", "0", "0", "0"][..],
            &["permit", "closed", "x", "0", "0", "0", "0", "0", "0"][..],
            &["permit", "closed", "1", "0", "0", "0", "0", "0"][..],
            &["permit", "closed", "1", "0", "0", "0", "0", "0", "2", "1"][..],
            &[
                "permit", "closed", "1", "0", "0", "0", "0", "0", "0", "closed",
            ][..],
            &[
                "permit", "closed", "1", "0", "0", "0", "0", "0", "0", "a>b>c",
            ][..],
        ] {
            assert!(reply(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scopes_with_braces_or_nothing_are_refused() {
        assert!(validate_scope("dep:payments").is_ok());
        for bad in ["", "a{b", "a}b"] {
            assert_eq!(validate_scope(bad).unwrap_err().field(), "scope");
        }
    }

    #[tokio::test]
    async fn bad_input_to_new_is_an_error_naming_the_field() {
        // Connecting is lazy: nothing listens on port 1 and nothing needs to.
        let backend = Backend::single("redis://127.0.0.1:1/").unwrap();
        let err = SharedBreaker::new(
            "tenant:{acme}",
            BreakerConfig::default(),
            SharedConfig::default(),
            backend.clone(),
        )
        .unwrap_err();
        assert_eq!(err.field(), "scope");
        let bad = SharedConfig {
            redis_timeout: Duration::ZERO,
            ..SharedConfig::default()
        };
        let err = SharedBreaker::new("dep:x", BreakerConfig::default(), bad, backend).unwrap_err();
        assert_eq!(
            err.to_string(),
            "redis_timeout must be in [1ms, 10s], got 0s"
        );
        assert!(Backend::single("not a url").is_err());
    }

    #[test]
    fn a_backend_outside_a_runtime_is_an_error_not_a_panic() {
        let err = Backend::single("redis://127.0.0.1:1/").unwrap_err();
        assert!(err.to_string().contains("within a Tokio runtime"), "{err}");
    }

    /// Settings the functions do not host are refused by name, not silently ignored.
    #[test]
    fn settings_the_functions_do_not_host_are_refused() {
        use tripline::{AfterMaxWait, FailureKind};
        let b = || BreakerConfig::builder();
        for (config, field) in [
            (
                b().half_open_max_wait(Duration::from_secs(5))
                    .half_open_after_max_wait(AfterMaxWait::Closed),
                "half_open.after_max_wait",
            ),
            (
                b().failure_kind_weight(FailureKind::RateLimited, 0),
                "failure_kinds",
            ),
            (
                b().lumping_interval(Duration::from_secs(1)),
                "lumping_interval",
            ),
            (b().call_durations(true), "call_durations"),
            (
                b().ramp_up(tripline::RampUp {
                    from: 10.0,
                    over: Duration::from_secs(10),
                    steps: 10,
                    curve: tripline::RampCurve::Linear,
                }),
                "ramp_up",
            ),
            (b().slow_call_rule(false), "slow_call_rule"),
        ] {
            let err = hosted(&config.build().unwrap()).unwrap_err();
            assert_eq!(err.field(), field);
            assert!(err.allowed().contains("does not host it yet"), "{err}");
        }
        assert!(hosted(&BreakerConfig::default()).is_ok());
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let k = Keys::new("tripline", "dep:x");
        for key in k.all() {
            assert!(key.starts_with("{tripline:dep:x}:"), "{key}");
        }
    }
}
