//! The shared breaker: the rules run in Redis, decisions are made by each replica.

use std::future::Future;
use std::pin::Pin;
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
    TransitionError, WindowConfig, WindowSnapshot,
};

use crate::backend::{Backend, FUNCTION_PREFIX, Reconnected, is_redirection};
use crate::config::{Batching, Fallback, SharedConfig, TimeSource};
use crate::health::{CheckError, Health};

mod host;

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
    /// `failure-count`, `open-elapsed`, `probes-failed`, `probes-succeeded`, `half-open-timeout`, `operator`,
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
    /// Calls in which Redis held a Closed record that could not follow from this replica's
    /// last view (Open, HalfOpen or ForcedOpen): a record that started over or whose epoch went
    /// back (eviction, restart without persistence, a failover that lost writes). The replica
    /// brought its view back ([`Self::restores`]), in the same call.
    pub lost_state: u64,
    /// Breakers this replica restored in Redis after [`Self::lost_state`].
    pub restores: u64,
    /// Windows Redis had lost (evicted or expired) while their record said they held calls,
    /// and Closed records lost between calls (evicted under a `volatile-*` policy, or a restart
    /// without persistence) while this replica had seen them within their idle TTL: each loss
    /// is also logged. A breaker whose failures are lost this way does not trip on them.
    pub lost_windows: u64,
    /// Acquires rejected while Redis was unreachable, because this replica's last view was
    /// Open and unexpired, or ForcedOpen.
    pub held_rejections: u64,
    /// The most outcomes one batch carried.
    pub largest_batch: u64,
    /// Probe claims that Redis refused because the caller had given up on its answer.
    pub late_admissions: u64,
    /// Calls this replica refused while ramping traffic back up after recovery (`ramp_up`).
    pub ramp_rejections: u64,
    /// Failures this replica lumped into an earlier one (`lumping_interval`): counted here, not
    /// sent.
    pub lumped_failures: u64,
    /// With `call_durations`: the total duration of this replica's calls in its window (a
    /// window of the breaker's shape over the calls of this replica that the fleet counted,
    /// which starts afresh whenever the fleet enters Closed). Durations are measured by each
    /// replica on its own clock, so they are this replica's figures; a fleet's are the sum of
    /// its replicas'.
    pub total_duration: Option<Duration>,
    /// With `call_durations`: the mean duration of this replica's calls in its window.
    pub mean_duration: Option<Duration>,
    /// Calls this replica rejected while holding a breaker after Redis may have lost it
    /// ([`SharedConfigBuilder::loss_hold`](crate::SharedConfigBuilder::loss_hold)).
    pub loss_holds: u64,
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
    ramp_rejections: AtomicU64,
    lumped: AtomicU64,
    loss_holds: AtomicU64,
    /// Refusals by the state that refused them: Open, HalfOpen, ForcedOpen, Closed (ramping
    /// up), as `tripline::Rejections` counts them.
    rejected_in: [AtomicU64; 4],
    /// This replica's recorded results, as the in-process breaker counts them: successes,
    /// failures (lumped ones included), ignored; slow successes and slow failures; failures
    /// by kind.
    outcomes: [AtomicU64; 3],
    slow_outcomes: [AtomicU64; 2],
    kinds: [AtomicU64; 7],
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
    /// The connection the reply came on: a view from before a reconnection is not decided
    /// from (Redis may have lost what it said).
    conn: u64,
    /// `loss_hold`: until then (local clock) calls are held, Redis having perhaps lost a trip
    /// this replica could not know of.
    hold_until: u64,
}

/// This replica's calls in flight, by start cohort, with the in-process breaker's rule. Each
/// call joins with the epoch that admitted it, and only the current epoch's calls count: calls
/// started before the breaker last entered Closed never do. The cohorts are tagged with a
/// local generation, one per epoch this replica has seen in order (epochs themselves are
/// clock readings, far apart, which the cohorts' 32-bit tags could not order).
#[derive(Debug)]
struct Flight {
    calls: InFlight,
    /// The next acquire-time check (every cohort width, as in-process).
    next_check: u64,
    /// The count last reported to Redis (a zero need not be repeated).
    reported: u64,
    /// The latest epoch (and origin) seen, and its local generation.
    stamp: (u64, u64),
    generation: u64,
}

impl Flight {
    /// The local generation of `stamp`'s calls: the current one, a new one for a newer
    /// epoch, `None` for an older epoch (its calls no longer count).
    fn generation(&mut self, stamp: (u64, u64)) -> Option<u64> {
        if stamp == self.stamp {
            return Some(self.generation);
        }
        if stamp.0 > self.stamp.0 || (stamp.0 == self.stamp.0 && stamp.1 > self.stamp.1) {
            self.stamp = stamp;
            self.generation += 1;
            return Some(self.generation);
        }
        None
    }
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

/// This replica's share of a ramp after recovery (`ramp_up`): the in-process breaker's rule
/// over the calls this replica sees, from the moment the fleet's probes closed the breaker.
#[derive(Clone, Copy, Debug)]
struct RampState {
    /// The epoch and origin of the Closed record the ramp belongs to.
    stamp: (u64, u64),
    /// When the probes closed the breaker, on this replica's clock.
    start: u64,
    /// The step the counts are for, its share (ppm) and the calls it has seen.
    step: u64,
    share: u64,
    seen: u64,
}

struct Inner<C: Clock> {
    /// The scope as the application gave it (kept in this process only).
    name: String,
    /// The scope as it leaves the process: keys, the shadow's name, rejections, log lines
    /// (a keyed hash of the scope with [`SharedConfigBuilder::hash_scopes`]).
    label: String,
    keys: Keys,
    config: BreakerConfig,
    shared: SharedConfig,
    replica: String,
    /// The configuration as the functions read it, and its version.
    cfg: String,
    version: String,
    jitter_micros: u64,
    slow_nanos: u64,
    /// `slow_call_rule`: whether any call is slow.
    slow_rule: bool,
    /// Calls in flight past the slow-call duration count as slow (`counts_in_flight`).
    in_flight: bool,
    /// `lumping_interval` in nanoseconds (0: off).
    lump_nanos: u64,
    /// The last failure this replica counted: its permit's epoch and origin, and when.
    lump: Mutex<Option<((u64, u64), u64)>>,
    ramp: Mutex<Option<RampState>>,
    cohort_width: u64,
    backend: Backend,
    clock: C,
    shadow: CircuitBreaker<C>,
    /// With `call_durations`: this replica's counted calls and their durations, in a window of
    /// the breaker's shape that starts afresh whenever the fleet enters Closed (a breaker in
    /// MetricsOnly, which never trips: only its window's durations are read).
    durations: Option<CircuitBreaker<C>>,
    redis_breaker: CircuitBreaker<C>,
    view: Mutex<View>,
    flight: Mutex<Flight>,
    batch: Mutex<Batch>,
    /// Woken when the batch in flight returns.
    batch_idle: tokio::sync::Notify,
    rng: Mutex<Pcg64Mcg>,
    counters: Counters,
    fallback_now: AtomicBool,
    /// Whether the current fallback episode (or last) was logged already.
    fallback_logged: AtomicBool,
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
        // The label, not the scope: a debug print may reach a log.
        f.debug_struct("SharedBreaker")
            .field("label", &self.inner.label)
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
    /// ([`NOTE_OPERATOR`]): the record started over at an operator's action; 8
    /// ([`NOTE_RESTORED`]): this call brought the caller's view back.
    notes: u64,
    /// When the breaker closed, if its probes closed it (functions' clock, microseconds): where
    /// a ramp starts.
    ramp_from: Option<u64>,
    transitions: Vec<Transition>,
}

/// A reply note: the record was missing (a read answers Closed and creates nothing; any other
/// call starts it over).
const NOTE_MISSING: u64 = 2;

/// A reply note: the record was missing and started over at an operator's action (a reset,
/// a forced state), so a replica that remembers the lost record takes it as it is.
const NOTE_OPERATOR: u64 = 4;

/// A reply note: the call brought the view it carried back into Redis (Redis had lost it).
const NOTE_RESTORED: u64 = 8;

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
/// origin, notes, where a ramp starts, and the number of the verdict's fields that follow.
const HEADER: usize = 10;

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
        // 1 + the time, 0 for none (a time may be 0).
        let ramp_from = num(8)?.checked_sub(1);
        let n = usize::try_from(num(9)?).map_err(|_| bad_reply(&raw))?;
        if n > 6 || v.len() < HEADER + n {
            return Err(bad_reply(&raw));
        }
        let mut fields: [String; 6] = Default::default();
        for (i, f) in v[HEADER..HEADER + n].iter().enumerate() {
            fields[i] = f.clone();
        }
        let mut transitions = Vec::new();
        for t in &v[HEADER + n..] {
            let mut parts = t.splitn(4, '>');
            let (Some(from), Some(to), Some(reason), Some(epoch)) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad_reply(&raw));
            };
            let (Some(from), Some(to), Ok(epoch)) =
                (parse_state(from), parse_state(to), epoch.parse::<u64>())
            else {
                return Err(bad_reply(&raw));
            };
            transitions.push(Transition {
                from,
                to,
                epoch,
                reason: reason.to_string(),
            });
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
            ramp_from,
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
            self.ramp_from
                .map_or(0, |t| t.saturating_add(1))
                .to_string(),
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

/// A scope becomes part of the Redis keys, unless it is hashed
/// ([`SharedConfigBuilder::hash_scopes`](crate::SharedConfigBuilder::hash_scopes)).
/// The settings of the in-process breaker that the fleet's functions do not run, refused, so
/// that a configuration never runs here without a rule it asks for: the fixed Closed
/// `interval` and the open-wait function.
fn refuse_unhosted(config: &BreakerConfig) -> Result<(), ConfigError> {
    if let Some(i) = config.interval() {
        return Err(ConfigError::new(
            "interval",
            humantime::format_duration(i).to_string(),
            "unset for a shared breaker: the fleet's Closed generation lasts until its state \
             changes (the fixed Closed interval runs in process only)",
        ));
    }
    if config.open_duration_fn().is_some() {
        return Err(ConfigError::new(
            "open_duration_fn",
            "a function",
            "unset for a shared breaker: the fleet opens for open.duration with its jitter and \
             backoff (the open-wait function runs in process only)",
        ));
    }
    Ok(())
}

fn validate_scope(scope: &str, hashed: bool) -> Result<(), ConfigError> {
    if hashed {
        if scope.is_empty() || scope.len() > 1024 {
            return Err(ConfigError::new(
                "scope",
                format!("{} bytes", scope.len()),
                "1 to 1024 bytes",
            ));
        }
        return Ok(());
    }
    if scope.is_empty() || scope.len() > 200 || scope.contains(['{', '}']) {
        return Err(ConfigError::new(
            "scope",
            crate::config::excerpt(scope),
            "1 to 200 bytes without '{' or '}' (and nothing sensitive: scopes are Redis keys; \
             SharedConfigBuilder::hash_scopes keeps them out of Redis)",
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
    let counted = config.failure_count();
    let fields: [String; 25] = [
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
        u8::from(config.after_max_wait() == tripline::AfterMaxWait::Closed).to_string(),
        counted.map_or(0, |f| f.failures).to_string(),
        counted.map_or(0, |f| micros(f.within)).to_string(),
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
        shared.validate()?;
        refuse_unhosted(&config)?;
        validate_scope(scope, shared.scope_secret.is_some())?;
        let label = match &shared.scope_secret {
            Some(secret) => secret.label(scope),
            None => scope.to_string(),
        };
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
            CircuitBreaker::with_clock(format!("{label} (local)"), config.clone(), clock.clone());
        let durations = config.call_durations().then(|| {
            let d = CircuitBreaker::with_clock(
                format!("{label} (durations)"),
                config.clone(),
                clock.clone(),
            );
            let _ = d.transition_to_metrics_only();
            d
        });
        let redis_breaker = CircuitBreaker::with_clock(
            format!("redis for {label}"),
            shared
                .redis_breaker
                .clone()
                .unwrap_or_else(default_redis_breaker),
            clock.clone(),
        );
        let (events, _) = broadcast::channel(64);
        let inner = Inner {
            name: scope.to_string(),
            keys: Keys::new(&shared.key_prefix, &label),
            label,
            jitter_micros: micros(config.open_jitter()),
            cohort_width: (slow_nanos / 2).max(1),
            slow_nanos,
            slow_rule: config.slow_call_rule(),
            in_flight: config.counts_in_flight(),
            lump_nanos: config.lumping_interval().map_or(0, nanos),
            lump: Mutex::new(None),
            ramp: Mutex::new(None),
            config,
            shared,
            replica,
            cfg,
            version,
            backend,
            shadow,
            durations,
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
                conn: 0,
                hold_until: 0,
            }),
            flight: Mutex::new(Flight {
                calls: InFlight::new(slow_nanos),
                next_check: clock.now().saturating_add((slow_nanos / 2).max(1)),
                reported: 0,
                stamp: (0, 0),
                generation: 0,
            }),
            batch: Mutex::new(Batch::default()),
            batch_idle: tokio::sync::Notify::new(),
            rng: Mutex::new(rng),
            counters: Counters::default(),
            fallback_now: AtomicBool::new(false),
            fallback_logged: AtomicBool::new(false),
            unconfirmed: AtomicBool::new(false),
            redirections: AtomicU32::new(0),
            last_error: Mutex::new(None),
            events,
            clock,
        };
        let inner = Arc::new(inner);
        // After a reconnection, a replica that remembers a state Redis may have lost tells it
        // at once, whether or not calls come.
        let weak: std::sync::Weak<dyn Reconnected> = Arc::downgrade(&inner) as _;
        inner.backend.on_reconnect(weak);
        Ok(Self { inner })
    }

    /// Whether handles other than the caller's `holders` exist (a call in flight, a caller
    /// keeping one, a flusher with outcomes to send).
    pub(crate) fn in_use(&self, holders: usize) -> bool {
        Arc::strong_count(&self.inner) > holders
    }

    /// The scope, as given (it stays in this process: with [`SharedConfigBuilder::hash_scopes`]
    /// nothing that leaves it carries the scope, see [`SharedBreaker::label`]).
    ///
    /// [`SharedConfigBuilder::hash_scopes`]: crate::SharedConfigBuilder::hash_scopes
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The scope as it is known outside this process: in Redis keys, the shadow breaker's name
    /// (its metrics labels and trace lines), rejections and log lines. The scope itself, or with
    /// [`SharedConfigBuilder::hash_scopes`] its keyed hash (`h:` and 32 hex digits).
    ///
    /// [`SharedConfigBuilder::hash_scopes`]: crate::SharedConfigBuilder::hash_scopes
    pub fn label(&self) -> &str {
        &self.inner.label
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
        let mut m = SharedMetrics {
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
            ramp_rejections: r(&c.ramp_rejections),
            lumped_failures: r(&c.lumped),
            total_duration: None,
            mean_duration: None,
            loss_holds: r(&c.loss_holds),
        };
        if let Some(d) = &self.inner.durations {
            let d = d.metrics();
            m.total_duration = d.total_duration;
            m.mean_duration = d.mean_duration;
        }
        m
    }

    /// Asks for a permit.
    pub async fn acquire(&self) -> Result<SharedPermit<C>, Rejected> {
        let ticket = match self.inner.acquire(self.inner.clock.now()).await {
            Ok(t) => t,
            Err(rejected) => {
                let i = match rejected.state() {
                    State::Open => 0,
                    State::HalfOpen => 1,
                    State::ForcedOpen => 2,
                    _ => 3,
                };
                bump(&self.inner.counters.rejected_in[i], 1);
                return Err(rejected);
            }
        };
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
        match self.operator_to(to, None).await {
            Ok(()) => Ok(()),
            Err(SharedTransitionError::Redis(e)) => Err(e),
            // Closed, ForcedOpen, Disabled and MetricsOnly are reached from every state.
            Err(SharedTransitionError::Refused(e)) => Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "tripline: refused",
                e.to_string(),
            ))),
        }
    }

    /// Operator, fleet-wide: moves the breaker to `to` along an edge of
    /// [`State::operator_targets`] (the in-process breaker's edges, as
    /// [`CircuitBreaker::transition_to`] takes them), judged by the state Redis holds. Open waits the configured open
    /// wait (jitter and backoff included). Asking for the state the breaker is in does nothing,
    /// except that Closed starts a fresh window and Open a new wait. Like every operator action
    /// it is the operator's word: replicas remembering another state take it as it is.
    ///
    /// ```no_run
    /// # use tripline::State;
    /// # use tripline_redis::SharedBreaker;
    /// # async fn run(breaker: SharedBreaker) -> Result<(), Box<dyn std::error::Error>> {
    /// breaker.transition_to(State::MetricsOnly).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn transition_to(&self, to: State) -> Result<(), SharedTransitionError> {
        self.operator_to(to, None).await
    }

    /// Operator: to Closed with a fresh window, from any state (a reset), fleet-wide.
    pub async fn transition_to_closed(&self) -> Result<(), SharedTransitionError> {
        self.transition_to(State::Closed).await
    }

    /// Operator: to Open for the configured open wait, from any state; from Open, the wait
    /// starts again. Fleet-wide.
    pub async fn transition_to_open(&self) -> Result<(), SharedTransitionError> {
        self.transition_to(State::Open).await
    }

    /// Operator: to Open for exactly `wait` (no jitter; the backoff level is left alone), at
    /// most 7 days, fleet-wide; then the fleet probes as after any open wait. The wait runs on
    /// the functions' clock from when Redis performs the transition.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use tripline_redis::SharedBreaker;
    /// # async fn run(breaker: SharedBreaker) -> Result<(), Box<dyn std::error::Error>> {
    /// // The vendor said it is down for five minutes: hold every replica's calls.
    /// breaker.transition_to_open_for(Duration::from_secs(300)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn transition_to_open_for(
        &self,
        wait: Duration,
    ) -> Result<(), SharedTransitionError> {
        self.operator_to(State::Open, Some(explicit_wait("open_for", wait)?))
            .await
    }

    /// Operator: to Open until this replica's clock reads `at` (a reading like
    /// [`Clock::now`], as a duration since the clock's origin), at most 7 days from now: the
    /// wait `at - now` runs on the functions' clock from when Redis performs it. A time already
    /// past opens with no wait left: the next acquire probes.
    pub async fn transition_to_open_until(
        &self,
        at: Duration,
    ) -> Result<(), SharedTransitionError> {
        let now = self.inner.clock.now();
        let wait = Duration::from_nanos(nanos(at).saturating_sub(now));
        self.operator_to(State::Open, Some(explicit_wait("open_until", wait)?))
            .await
    }

    /// Operator: to HalfOpen (a fresh probe round, K probes fleet-wide) from Open or
    /// ForcedOpen; refused from Closed, Disabled and MetricsOnly
    /// ([`tripline::TransitionError::NoSuchEdge`]).
    pub async fn transition_to_half_open(&self) -> Result<(), SharedTransitionError> {
        self.transition_to(State::HalfOpen).await
    }

    /// Operator: to Disabled (permit everything, record nothing), fleet-wide.
    pub async fn transition_to_disabled(&self) -> Result<(), SharedTransitionError> {
        self.transition_to(State::Disabled).await
    }

    /// Operator: to MetricsOnly (record but never trip), fleet-wide.
    pub async fn transition_to_metrics_only(&self) -> Result<(), SharedTransitionError> {
        self.transition_to(State::MetricsOnly).await
    }

    /// Operator: to ForcedOpen (the kill switch), fleet-wide.
    pub async fn transition_to_forced_open(&self) -> Result<(), SharedTransitionError> {
        self.transition_to(State::ForcedOpen).await
    }

    async fn operator_to(
        &self,
        to: State,
        wait: Option<Duration>,
    ) -> Result<(), SharedTransitionError> {
        let now = self.inner.clock.now();
        let wait = wait.map_or_else(|| "-1".to_string(), |w| micros(w).to_string());
        let reply = self
            .inner
            .invoke_raw("operator", now, &[to.as_str().to_string(), wait])
            .await?;
        if reply.verdict == "refused" {
            return Err(TransitionError::NoSuchEdge {
                from: reply.state,
                to,
            }
            .into());
        }
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

/// Why an operator's transition of a shared breaker was not made.
///
/// ```
/// use tripline::{State, TransitionError};
/// use tripline_redis::SharedTransitionError;
/// let e = SharedTransitionError::from(TransitionError::NoSuchEdge { from: State::Closed, to: State::HalfOpen });
/// assert!(e.to_string().starts_with("no operator transition from closed to half-open"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SharedTransitionError {
    /// There is no such operator edge from the state Redis holds, or the open wait asked for
    /// is out of range.
    #[error(transparent)]
    Refused(#[from] TransitionError),
    /// Redis did not perform it: unreachable, too slow, or an error (its own words).
    #[error("the transition did not reach Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// The longest explicit open wait (as in-process).
const MAX_OPEN_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

fn explicit_wait(field: &str, wait: Duration) -> Result<Duration, TransitionError> {
    if wait > MAX_OPEN_WAIT {
        return Err(ConfigError::new(
            field,
            humantime::format_duration(wait).to_string(),
            "between 0 and 7days (use transition_to_forced_open to hold calls until told otherwise)",
        )
        .into());
    }
    Ok(wait)
}

impl<C: Clock + Clone> Reconnected for Inner<C> {
    /// Another server process (a restart, a failover) may have lost a trip that a replica
    /// whose view is Closed cannot know of: with `loss_hold`, hold the breaker's calls (before
    /// any call can use the new connection) until one that saw the trip can bring it back.
    fn reconnecting(&self, new_server: bool) {
        if new_server && !self.shared.loss_hold.is_zero() {
            let now = self.clock.now();
            let mut v = lock(&self.view);
            if v.valid && v.state == State::Closed {
                v.hold_until = now.saturating_add(nanos(self.shared.loss_hold));
            }
        }
    }

    /// A replica that remembers a state Redis may have lost (Open, HalfOpen, ForcedOpen) tells
    /// Redis at once after a reconnection: a read carrying its view, which Redis brings back
    /// if it lost it, without waiting for a call or for `view_ttl`.
    fn reconnected(self: Arc<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            // The new connection answered its PING: Redis is back, and the breaker on Redis
            // (open since the outage) lets calls through again at once.
            if self.redis_breaker.state() != State::Closed {
                self.redis_breaker.reset();
            }
            let now = self.clock.now();
            if self.view_arg(now).is_empty() {
                return;
            }
            let _ = self.invoke("read", now, &[]).await;
        })
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
    /// The in-flight cohort the call joined, and its local generation.
    cohort: Option<(Cohort, u64)>,
}

impl<C: Clock + Clone> Inner<C> {
    /// Counts a result this replica recorded, as the in-process breaker counts its own: a
    /// counted success or failure (slow when it took the slow-call duration or longer, under
    /// the slow-call rule), a lumped failure, an ignored outcome; stale and Disabled results
    /// count nowhere here.
    fn count_result(&self, c: Classification, elapsed: u64, recorded: Recorded) {
        let c_ = &self.counters;
        let slow = self.slow_rule && elapsed >= self.slow_nanos;
        match (recorded, c.outcome) {
            (Recorded::Ignored, _) | (Recorded::Counted, Outcome::Ignored) => {
                bump(&c_.outcomes[2], 1)
            }
            (Recorded::Counted, Outcome::Success) => {
                bump(&c_.outcomes[0], 1);
                if slow {
                    bump(&c_.slow_outcomes[0], 1);
                }
            }
            (Recorded::Counted | Recorded::Lumped, Outcome::Failure) => {
                bump(&c_.outcomes[1], 1);
                if slow && recorded == Recorded::Counted {
                    bump(&c_.slow_outcomes[1], 1);
                }
                if let Some(kind) = c.kind {
                    bump(&c_.kinds[kind.index()], 1);
                }
            }
            _ => {}
        }
    }

    fn ticket(
        &self,
        kind: Kind<OwnedPermit<C>>,
        (epoch, origin): (u64, u64),
        now: u64,
    ) -> Ticket<C> {
        let cohort = match kind {
            Kind::Window if self.in_flight => {
                let mut f = lock(&self.flight);
                f.generation((epoch, origin))
                    .map(|g| (f.calls.enter(now, g), g))
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

    /// A permit for the window, unless a hold after a loss (`loss_hold`) or a ramp after
    /// recovery refuses this call.
    fn window_ticket(&self, stamp: (u64, u64), now: u64) -> Result<Ticket<C>, Rejected> {
        let hold = lock(&self.view).hold_until;
        if now < hold {
            bump(&self.counters.rejected, 1);
            bump(&self.counters.loss_holds, 1);
            return Err(Rejected::new(
                self.label.clone(),
                State::Open,
                Some(Duration::from_nanos(hold - now)),
            ));
        }
        if !self.ramp_admits(stamp, now) {
            bump(&self.counters.rejected, 1);
            bump(&self.counters.ramp_rejections, 1);
            return Err(Rejected::with_reason(
                self.label.clone(),
                State::Closed,
                tripline::RejectReason::RampingUp,
                None,
            ));
        }
        Ok(self.ticket(Kind::Window, stamp, now))
    }

    /// Whether the ramp after recovery (if one runs for `stamp`'s record) admits a call at
    /// `now`: the in-process rule over this replica's calls. Of the first `n` calls of a step,
    /// `floor(n × share)` are admitted, so a fleet's replicas together never admit more than
    /// one breaker seeing all their calls would.
    fn ramp_admits(&self, stamp: (u64, u64), now: u64) -> bool {
        let Some(cfg) = self.config.ramp_up() else {
            return true;
        };
        let mut guard = lock(&self.ramp);
        let Some(r) = guard.as_mut().filter(|r| r.stamp == stamp) else {
            return true;
        };
        let steps = u64::from(cfg.steps.max(1));
        let step_nanos = (nanos(cfg.over) / steps).max(1);
        let i = now.saturating_sub(r.start) / step_nanos;
        if i >= steps {
            *guard = None;
            return true;
        }
        if i > r.step {
            r.step = i;
            r.share = cfg.share_ppm(i as u32);
            r.seen = 0;
        }
        let n = r.seen;
        r.seen = n.saturating_add(1);
        (n + 1) * r.share / 1_000_000 > n * r.share / 1_000_000
    }

    /// A ramp starts (for this replica) when a reply shows a Closed record whose probes closed
    /// it; any other record ends it.
    fn follow_ramp(&self, reply: &Reply, now: u64) {
        let Some(cfg) = self.config.ramp_up() else {
            return;
        };
        let stamp = (reply.epoch, reply.origin);
        let mut guard = lock(&self.ramp);
        let from = match reply.ramp_from {
            Some(from) if reply.state == State::Closed => from,
            _ => {
                if guard.is_some_and(|r| r.stamp.1 != stamp.1 || r.stamp.0 < stamp.0) {
                    *guard = None;
                }
                return;
            }
        };
        if guard.is_some_and(|r| r.stamp == stamp) {
            return;
        }
        // When the probes closed it, on this replica's clock.
        let ago = reply.now.saturating_sub(from).saturating_mul(1000);
        *guard = Some(RampState {
            stamp,
            start: now.saturating_sub(ago),
            step: 0,
            share: cfg.share_ppm(0),
            seen: 0,
        });
    }

    fn rejected(&self, state: State, retry_micros: Option<u64>) -> Rejected {
        bump(&self.counters.rejected, 1);
        Rejected::new(
            self.label.clone(),
            state,
            retry_micros.map(Duration::from_micros),
        )
    }

    /// Whether a call that took `elapsed` was slow (never, with the slow-call rule off).
    fn slow(&self, elapsed: u64) -> bool {
        self.slow_rule && elapsed > self.slow_nanos
    }

    /// The failure of `stamp`'s permit at `now` falls within the lumping interval of the last
    /// failure this replica counted (so it counts only here); if not, it becomes the last one.
    /// Lumping is per replica: it folds one client's burst of errors into one, as Semian's
    /// lumping does; each replica is a witness of its own.
    fn lumped(&self, stamp: (u64, u64), now: u64) -> bool {
        if self.lump_nanos == 0 {
            return false;
        }
        let mut last = lock(&self.lump);
        if let Some((s, at)) = *last {
            if s == stamp && now >= at && now - at < self.lump_nanos {
                return true;
            }
            // A newer epoch's interval is not this (stale) failure's to move.
            if s.1 == stamp.1 && s.0 > stamp.0 {
                return false;
            }
        }
        *last = Some((stamp, now));
        false
    }

    /// What a failure of this classification weighs (`failure_kinds`): 0 makes it ignored.
    fn weight(&self, c: &Classification) -> u8 {
        match (c.outcome, c.kind) {
            (Outcome::Failure, Some(kind)) => self.config.failure_kinds().get(kind),
            _ => 1,
        }
    }

    /// This replica's calls in flight past the slow-call duration (the in-process breaker's
    /// cohort rule), sent with outcomes so that an evaluation in Redis sees the count of the
    /// moment: `"epoch:count"`, the epoch being the one the count belongs to (the function
    /// keeps it only if that is still the current epoch), or `"-1"` when there is nothing to
    /// say (the rule is off, or the count is zero and was zero when last sent).
    fn in_flight_report(&self, now: u64) -> String {
        if !self.in_flight {
            return "-1".into();
        }
        let (epoch, origin) = {
            let v = lock(&self.view);
            (v.epoch, v.origin)
        };
        let mut f = lock(&self.flight);
        let n = f
            .generation((epoch, origin))
            .map_or(0, |g| f.calls.overdue(now, self.slow_nanos, g));
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
        if !self.in_flight {
            return None;
        }
        let (epoch, origin) = {
            let v = lock(&self.view);
            (v.epoch, v.origin)
        };
        let mut f = lock(&self.flight);
        if now < f.next_check {
            return None;
        }
        f.next_check = now.saturating_add(self.cohort_width);
        let n = f
            .generation((epoch, origin))
            .map_or(0, |g| f.calls.overdue(now, self.slow_nanos, g));
        f.reported = n;
        Some(format!("{epoch}:{n}"))
    }

    fn exit_flight(&self, cohort: Option<(Cohort, u64)>) {
        if let Some((c, generation)) = cohort {
            lock(&self.flight).calls.exit(c, generation);
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
        // A view from before a reconnection may be of a Redis that has since lost its state
        // (a restart, a failover): ask.
        let stale_conn = v.conn != self.backend.connection();
        let held = now < v.hold_until;
        if ttl == 0
            || !v.valid
            || v.missing
            || stale_conn
            || held
            || now.saturating_sub(v.at) >= ttl
        {
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
                self.window_ticket((v.epoch, v.origin), now)
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
        // estimate was short) is asked again once, with the estimate its reply corrects, within
        // the same Redis timeout: the whole acquire is bounded by it.
        let bound = tokio::time::Instant::now() + self.shared.redis_timeout;
        for attempt in 0..2 {
            let (token, deadline) = self.claim_args(now);
            let args = [report.clone(), token.to_string(), deadline.to_string()];
            match self.invoke_until("admit", now, &args, bound).await {
                Ok(reply) => {
                    match reply.verdict.as_str() {
                        "permit" => {
                            return self.window_ticket((reply.epoch, reply.origin), now);
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
                            if attempt == 0 && tokio::time::Instant::now() < bound {
                                continue;
                            }
                            return Err(self.rejected(State::HalfOpen, None));
                        }
                        "reject" => {
                            let retry = u64::try_from(reply.field(0)).ok();
                            if reply.state == State::HalfOpen {
                                // Held until a lease expires, the maximum half-open wait ends
                                // the round, or the view is too old, whichever comes first.
                                let change = u64::try_from(reply.field(1))
                                    .map_or(u64::MAX, |c| c.saturating_mul(1000));
                                let hold = retry
                                    .map_or(nanos(self.shared.view_ttl), |r| r.saturating_mul(1000))
                                    .min(nanos(self.shared.view_ttl))
                                    .min(change);
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
        self.log_fallback();
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

    /// What every call tells Redis of this replica's view when it is not Closed (and younger
    /// than the idle TTL): `origin:epoch:state:left`, so that a Redis that lost the state
    /// brings it back in the same call (`""`: nothing to tell).
    fn view_arg(&self, now: u64) -> String {
        let v = *lock(&self.view);
        let remembered = v.valid
            && matches!(v.state, State::Open | State::HalfOpen | State::ForcedOpen)
            && now.saturating_sub(v.at) < nanos(self.shared.idle_ttl);
        if !remembered {
            return String::new();
        }
        let (to, left) = match v.state {
            State::ForcedOpen => ("forced-open", 0),
            // HalfOpen, or Open past its deadline: Open with no wait left, so that the fleet
            // probes again before it closes.
            _ => (
                "open",
                v.open_until
                    .saturating_sub(Self::redis_now_estimate(&v, now)),
            ),
        };
        format!("{}:{}:{to}:{left}", v.origin, v.epoch)
    }

    /// Takes in what a reply says about the shared state. Returns false (and keeps the view)
    /// when the reply contradicts the view.
    fn absorb(&self, reply: &Reply, now: u64) -> bool {
        if reply.notes & NOTE_RESTORED != 0 {
            // Redis had lost what this replica saw; the call brought it back first.
            bump(&self.counters.lost_state, 1);
            bump(&self.counters.restores, 1);
            warn(&format!(
                "tripline-redis: Redis had lost the state of {} (a restart, an eviction or a failover); this replica brought back what it saw",
                self.label
            ));
        }
        let changed = 'view: {
            let mut v = lock(&self.view);
            if self.contradicts(&v, reply, now) {
                return false;
            }
            let recent = now.saturating_sub(v.at) < nanos(self.shared.idle_ttl) / 8 * 7;
            let lost_closed = v.valid
                && v.state == State::Closed
                && reply.state == State::Closed
                && reply.notes & NOTE_OPERATOR == 0
                && recent
                && ((reply.notes & NOTE_MISSING != 0 && reply.origin != v.origin)
                    || (reply.origin == v.origin
                        && reply.epoch < v.epoch
                        && reply.now >= v.redis_now));
            if lost_closed && !self.shared.loss_hold.is_zero() && v.hold_until <= now {
                // Redis lost this record, which this replica saw Closed: it may have tripped
                // since. Held, so that a replica remembering the trip can bring it back.
                v.hold_until = now.saturating_add(nanos(self.shared.loss_hold));
            }
            if !matches!(
                reply.state,
                State::Closed | State::MetricsOnly | State::Disabled
            ) {
                // Redis knows the breaker is not Closed: nothing to hold for.
                v.hold_until = 0;
            }
            if reply.notes & NOTE_MISSING != 0
                && reply.verdict != "read"
                && v.valid
                && reply.origin != v.origin
                && reply.notes & NOTE_OPERATOR == 0
                && recent
            {
                // A record this replica saw within its idle TTL is gone, and not by expiry: an
                // eviction (volatile-* under memory pressure), a restart without persistence.
                // Its window went with it.
                bump(&self.counters.lost_windows, 1);
                warn(&format!(
                    "tripline-redis: the record of {} ({} when this replica last saw it) was lost in Redis, and its window with it: evicted (a volatile-* policy under memory pressure) or a restart without persistence",
                    self.label, v.state
                ));
            }
            if reply.verdict == "read"
                && reply.notes & NOTE_MISSING != 0
                && reply.notes & NOTE_RESTORED == 0
            {
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
            let before = v.valid.then_some((v.state, v.epoch, v.origin));
            v.valid = true;
            v.missing = false;
            v.conn = self.backend.connection();
            v.state = reply.state;
            v.epoch = reply.epoch;
            v.origin = reply.origin;
            v.open_until = reply.open_until;
            v.redis_now = reply.now;
            v.at = now;
            v.reject_until = 0;
            v.lease_deadline = None;
            drop(v);
            self.follow_ramp(reply, now);
            // A new state, or the fleet entering Closed again (a reset, a recovery): a Closed
            // record of another epoch holds a fresh window, and so must the shadow.
            let entered = match before {
                None => true,
                Some((state, epoch, origin)) => {
                    state != reply.state
                        || (reply.state == State::Closed
                            && (epoch, origin) != (reply.epoch, reply.origin))
                }
            };
            // Entered from another state, or by an operator's reset (the same record); not a
            // record that started over (Redis lost it): the shadow keeps what it saw then.
            let from = before
                .filter(|b| b.0 != State::Closed || b.2 == reply.origin)
                .map(|b| b.0);
            entered.then_some((reply.state, from, before.is_some()))
        };
        if let Some((to, from, seen)) = changed {
            self.mirror(to, from, seen);
        }
        if reply.expired > 0 {
            bump(&self.counters.expired_probes, reply.expired);
        }
        if reply.notes & 1 != 0 {
            bump(&self.counters.lost_windows, 1);
            warn(&format!(
                "tripline-redis: the window of {} was lost in Redis (evicted or expired while it held calls)",
                self.label
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
    /// `from`: the state the fleet left, when it entered `to` from another state or by an
    /// operator's reset (`None` for a record that started over, or the first view); `seen`:
    /// whether there was a view before.
    fn mirror(&self, to: State, from: Option<State>, seen: bool) {
        if let Some(d) = &self.durations {
            if matches!(to, State::Closed | State::MetricsOnly) && seen {
                // A fresh window, as the fleet's.
                let _ = d.transition_to_closed();
                let _ = d.transition_to_metrics_only();
            }
        }
        let shadow = &self.shadow;
        let now = shadow.state();
        if to == State::Closed && from.is_some() {
            // The fleet entered Closed (from another state, or by an operator's reset): so does
            // the shadow, with a fresh window of its own. (A shadow that closed by its own
            // probe would ramp, and refuse the observations its ramp does not admit; the
            // fleet's ramp is this replica's to keep.) A record that started over leaves the
            // shadow as it is: what it saw while Redis was gone still holds.
            shadow.reset();
            return;
        }
        if to == State::Closed && seen && from.is_none() {
            return;
        }
        match to {
            State::Open | State::HalfOpen => {
                if matches!(now, State::ForcedOpen | State::Disabled) {
                    // Open, keeping the window the breaker last tripped with (as the fleet's).
                    let _ = shadow.transition_to_open();
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

    /// The first decision of a fallback episode is logged (a wrong URL, a wrong password,
    /// Redis down: the replica goes on deciding alone, which nothing else would show).
    fn log_fallback(&self) {
        if self.fallback_logged.swap(true, Ordering::Relaxed) {
            return;
        }
        let why = self
            .last_redis_error()
            .unwrap_or_else(|| "the breaker on Redis is open".into());
        let how = match self.shared.fallback {
            Fallback::Local => "this replica's local breaker decides",
            Fallback::Reject => "every call is rejected",
        };
        warn(&format!(
            "tripline-redis: {}: Redis cannot be reached ({why}): {how} until it answers \
             (a breaker this replica saw Open keeps rejecting until the deadline it saw)",
            self.label
        ));
    }

    fn last_redis_error(&self) -> Option<String> {
        lock(&self.last_error).clone()
    }

    /// Redis answers again: the next fallback is logged again.
    fn shared_again(&self) {
        if self.fallback_now.swap(false, Ordering::Relaxed)
            && self.fallback_logged.swap(false, Ordering::Relaxed)
        {
            info(&format!(
                "tripline-redis: {}: Redis answers again; decisions are shared",
                self.label
            ));
        }
    }

    /// Runs a function through the breaker on Redis, bounded by the Redis timeout.
    async fn invoke(&self, op: &str, now: u64, args: &[String]) -> Result<Reply, Unavailable> {
        let bound = tokio::time::Instant::now() + self.shared.redis_timeout;
        self.invoke_until(op, now, args, bound).await
    }

    /// [`Inner::invoke`], bounded by `bound` (at most the Redis timeout from now).
    async fn invoke_until(
        &self,
        op: &str,
        now: u64,
        args: &[String],
        bound: tokio::time::Instant,
    ) -> Result<Reply, Unavailable> {
        let Ok(guard) = self.redis_breaker.try_acquire_owned() else {
            bump(&self.counters.redis_skipped, 1);
            self.fallback_now.store(true, Ordering::Relaxed);
            return Err(Unavailable { timed_out: false });
        };
        bump(&self.counters.redis_calls, 1);
        let outcome = tokio::time::timeout_at(bound, self.settled(op, now, args)).await;
        match outcome {
            Ok(Ok(r)) => {
                guard.record(Outcome::Success);
                self.redirections.store(0, Ordering::Relaxed);
                self.shared_again();
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
                // Waiting for a connection that is still being made is not Redis being slow:
                // say what is happening (a TLS handshake that hangs, say).
                match self.backend.connecting() {
                    Some(why) => self.note_error(&why),
                    None => {
                        self.note_error("tripline: Redis did not answer within the Redis timeout")
                    }
                }
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
            self.label, held.state, held.epoch
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
        // An operator's action is the operator's word, and a restore says what it restores.
        let view = if matches!(op, "operator" | "restore") {
            String::new()
        } else {
            self.view_arg(now)
        };
        let mut all: Vec<&str> = Vec::with_capacity(5 + args.len());
        all.extend([
            clock.as_str(),
            self.replica.as_str(),
            self.version.as_str(),
            jitter.as_str(),
            view.as_str(),
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
        let slow = self.slow(elapsed);
        // A failure of a kind weighing 0 is an ignored outcome (as in-process).
        let weight = self.weight(&c);
        let outcome = if weight == 0 {
            Outcome::Ignored
        } else {
            c.outcome
        };
        // Stale or not, by the last answer (a view never goes back to an older epoch).
        let ended = || {
            let v = *lock(&self.view);
            (v.epoch, v.origin) != (epoch, origin)
        };
        let code = match outcome {
            Outcome::Success => 's',
            Outcome::Failure => 'f',
            Outcome::Ignored => {
                // Nothing to record, so no round trip.
                if ended() {
                    bump(&self.counters.stale_results, 1);
                    return Recorded::Stale;
                }
                return Recorded::Ignored;
            }
        };
        if code == 'f' && self.lump_nanos > 0 {
            if ended() {
                bump(&self.counters.stale_results, 1);
                return Recorded::Stale;
            }
            if self.lumped((epoch, origin), now) {
                bump(&self.counters.lumped, 1);
                return Recorded::Lumped;
            }
        }
        if let Some(b) = self.shared.batching {
            let closed = {
                let v = lock(&self.view);
                v.valid && v.state == State::Closed && (v.epoch, v.origin) == (epoch, origin)
            };
            if closed && c.retry_after.is_none() {
                let bad = slow || code == 'f';
                let ch = match (code, weight, slow) {
                    ('f', w @ 2..=10, false) => char::from(48 + w),
                    ('f', w @ 2..=10, true) => char::from(58 + w),
                    (code, _, true) => code.to_ascii_uppercase(),
                    (code, _, false) => code,
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
                self.note_duration(c, elapsed);
                if let Some(first) = first {
                    self.drain(first).await;
                }
                if spawn {
                    self.spawn_flusher(b);
                }
                return Recorded::Counted;
            }
        }
        // The whole record, buffered outcomes before it included, within one Redis timeout.
        let bound = tokio::time::Instant::now() + self.shared.redis_timeout;
        if self.shared.batching.is_some() {
            // Outcomes buffered before this one go first, so that the functions see them in
            // order (a trip happens at the outcome that causes it, with that outcome's hint).
            // A flush that outlasts the bound goes on in the background (its batch keeps its
            // sender), and this outcome goes out behind what was sent.
            let _ = tokio::time::timeout_at(bound, self.flush()).await;
        }
        let report = self.in_flight_report(now);
        let hint = c.retry_after.map_or(0, micros);
        let args = [
            stamp(epoch, origin),
            code.to_string(),
            u8::from(slow).to_string(),
            report,
            hint.to_string(),
            weight.to_string(),
        ];
        let r = self.send_outcome("record", now, &args, bound).await;
        if r == Recorded::Counted {
            self.note_duration(c, elapsed);
        }
        r
    }

    /// With `call_durations`: a counted outcome's duration, into this replica's window of them.
    fn note_duration(&self, c: Classification, elapsed: u64) {
        if let Some(d) = &self.durations {
            if let Ok(p) = d.try_acquire_owned() {
                let _ = p.record_with_duration(c, Duration::from_nanos(elapsed));
            }
        }
    }

    /// Sends one outcome (`record` or `probe`) and settles by the reply. An outcome Redis did
    /// not confirm counts as lost (it may still have applied; a probe's lease expires by
    /// itself).
    async fn send_outcome(
        &self,
        op: &str,
        now: u64,
        args: &[String],
        bound: tokio::time::Instant,
    ) -> Recorded {
        match self.invoke_until(op, now, args, bound).await {
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
        // A probe is one sample of the round whatever its kind weighs; a kind weighing 0 makes
        // it an ignored one (as in-process).
        let code = match c.outcome {
            Outcome::Success => "s",
            Outcome::Failure if self.weight(&c) == 0 => "i",
            Outcome::Failure => "f",
            Outcome::Ignored => "i",
        };
        let slow = self.slow(elapsed);
        let args = [
            epoch.to_string(),
            slot.to_string(),
            token.to_string(),
            code.to_string(),
            u8::from(slow).to_string(),
            c.retry_after.map_or(0, micros).to_string(),
        ];
        let bound = tokio::time::Instant::now() + self.shared.redis_timeout;
        self.send_outcome("probe", now, &args, bound).await
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
        if !self
            .outcomes
            .contains(|c| matches!(c, 'f' | 'F' | 'S' | '2'..='D'))
        {
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

/// A warning (a fallback, lost state), under the `tracing` feature (on by default); otherwise
/// the metrics say it.
fn warn(message: &str) {
    #[cfg(feature = "tracing")]
    tracing::warn!("{message}");
    #[cfg(not(feature = "tracing"))]
    let _ = message;
}

/// News that ends a warning (Redis answers again), under the `tracing` feature.
fn info(message: &str) {
    #[cfg(feature = "tracing")]
    tracing::info!("{message}");
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
    /// The in-flight cohort the call joined, and its local generation.
    cohort: Option<(Cohort, u64)>,
    shadow: Option<OwnedPermit<C>>,
    /// For a probe: the runtime to release its lease on if the permit is dropped.
    runtime: Option<tokio::runtime::Handle>,
    done: bool,
}

impl<C: Clock + Clone> std::fmt::Debug for SharedPermit<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedPermit")
            .field("breaker", &self.breaker.inner.label)
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
        inner.exit_flight(self.cohort);
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
        inner.exit_flight(self.cohort);
        let shadow = self.shadow.take().map(|p| p.record_classified(c));
        let recorded = match self.kind {
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
        };
        inner.count_result(c, elapsed, recorded);
        recorded
    }
}

impl<C: Clock + Clone> Drop for SharedPermit<C> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let inner = self.breaker.inner.clone();
        bump(&inner.counters.abandoned, 1);
        inner.exit_flight(self.cohort);
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
            "0",
            "1",
            "5000000",
            "half-open>open>probes-failed>7",
        ])
        .unwrap();
        assert_eq!(r.state, State::Open);
        assert_eq!(r.field(0), 5_000_000);
        assert_eq!(r.transitions.len(), 1);
        assert_eq!(r.transitions[0].epoch, 7);

        let r = reply(&[
            "probe",
            "half-open",
            "15000000",
            "15000000",
            "15000000",
            "1",
            "5",
            "0",
            "0",
            "2",
            "0",
            "3",
            "half-open>open>half-open-timeout>15000000",
            "open>half-open>open-elapsed>15000000",
        ])
        .unwrap();
        assert_eq!(
            r.transitions.iter().map(|t| t.epoch).collect::<Vec<_>>(),
            [15_000_000, 15_000_000],
            "Open -> HalfOpen keeps the epoch"
        );
        assert_eq!(r.expired, 1);
        let r = reply(&[
            "permit", "closed", "9", "0", "2000", "0", "5", "0", "1501", "0",
        ])
        .unwrap();
        assert_eq!(r.ramp_from, Some(1500));
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for bad in [
            &[][..],
            &["permit"][..],
            &["permit", "sideways", "1", "0", "0", "0", "0", "0", "0", "0"][..],
            &["permit", "closed", "x", "0", "0", "0", "0", "0", "0", "0"][..],
            &["permit", "closed", "1", "0", "0", "0", "0", "0", "0"][..],
            &[
                "permit", "closed", "1", "0", "0", "0", "0", "0", "0", "2", "1",
            ][..],
            &[
                "permit", "closed", "1", "0", "0", "0", "0", "0", "0", "0", "closed",
            ][..],
            &[
                "permit", "closed", "1", "0", "0", "0", "0", "0", "0", "0", "a>b>c>1",
            ][..],
            &[
                "permit",
                "closed",
                "1",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "open>closed>operator",
            ][..],
            &[
                "permit",
                "closed",
                "1",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "0",
                "open>closed>operator>x",
            ][..],
        ] {
            assert!(reply(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scopes_with_braces_or_nothing_are_refused() {
        assert!(validate_scope("dep:payments", false).is_ok());
        for bad in ["", "a{b", "a}b"] {
            assert_eq!(validate_scope(bad, false).unwrap_err().field(), "scope");
        }
        // A hashed scope never reaches a key: any bytes, braces included.
        assert!(validate_scope("tenant:{acme}", true).is_ok());
        assert_eq!(validate_scope("", true).unwrap_err().field(), "scope");
        assert_eq!(
            validate_scope(&"x".repeat(1025), true).unwrap_err().field(),
            "scope"
        );
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

    /// Every rule of the in-process breaker is hosted: none is refused.
    #[tokio::test]
    async fn every_rule_of_the_in_process_breaker_is_accepted() {
        use tripline::{AfterMaxWait, FailureKind};
        let backend = Backend::single("redis://127.0.0.1:1/").unwrap();
        let b = || BreakerConfig::builder();
        for config in [
            b().half_open_max_wait(Duration::from_secs(5))
                .half_open_after_max_wait(AfterMaxWait::Closed),
            b().failure_kind_weight(FailureKind::RateLimited, 0),
            b().failure_kind_weight(FailureKind::Timeout, 3),
            b().lumping_interval(Duration::from_secs(1)),
            b().call_durations(true),
            b().ramp_up(tripline::RampUp {
                from: 10.0,
                over: Duration::from_secs(10),
                steps: 10,
                curve: tripline::RampCurve::Linear,
            }),
            b().slow_call_rule(false),
            b().failure_count(12, Duration::from_secs(20)),
        ] {
            let config = config.build().unwrap();
            SharedBreaker::new("dep:x", config, SharedConfig::default(), backend.clone()).unwrap();
        }
    }

    #[test]
    fn keys_share_one_hash_tag() {
        let k = Keys::new("tripline", "dep:x");
        for key in k.all() {
            assert!(key.starts_with("{tripline:dep:x}:"), "{key}");
        }
    }
}
