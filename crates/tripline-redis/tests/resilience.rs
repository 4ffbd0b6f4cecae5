//! Redis as a dependency that misbehaves: slow, down, restarted empty, flushed of its
//! scripts, evicting under memory pressure, and sharded as a cluster. Every test drives a
//! real throwaway `redis-server` and a manual clock; nothing waits on wall-clock time for a
//! state change of the breaker.

mod common;
use common::RedisSubject;

use std::collections::BTreeSet;
use std::time::Duration;

use tripline::conformance;
use tripline::{
    BreakerConfig, Clock, ManualClock, Outcome, Recorded, Rejected, State, WindowConfig,
    WindowSnapshot,
};
use tripline_redis::server::{RedisCluster, RedisServer};
use tripline_redis::{
    Backend, Batching, Fallback, Mode, Quorum, SharedBreaker, SharedConfig, SharedConfigBuilder,
    TimeSource,
};

type Breaker = SharedBreaker<ManualClock>;

/// Count window of 10, trips at 50 % failures once 4 calls are in, Open for `open`, one probe.
fn trip_config(open: Duration) -> BreakerConfig {
    trip_config_of(10, open)
}

/// A ring of more than 512 outcomes has a window key of its own (a smaller one lives in the
/// record).
fn trip_config_keyed_window(open: Duration) -> BreakerConfig {
    trip_config_of(1000, open)
}

fn trip_config_of(size: u32, open: Duration) -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size })
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(open)
        .half_open_calls(1)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// The script on the manual clock, asking Redis on every acquire, with a generous timeout.
fn shared_builder(replica: &str) -> SharedConfigBuilder {
    SharedConfig::builder()
        .time_source(TimeSource::Local)
        .view_ttl(Duration::ZERO)
        .redis_timeout(Duration::from_secs(2))
        .replica_id(replica)
}

fn breaker(
    backend: &Backend,
    scope: &str,
    config: BreakerConfig,
    shared: SharedConfig,
    clock: &ManualClock,
) -> Breaker {
    SharedBreaker::with_clock(scope, config, shared, backend.clone(), clock.clone()).unwrap()
}

/// `PTTL key` as a number (-1: no TTL, -2: no key).
fn pttl(server: &RedisServer, key: &str) -> i64 {
    let out = server.cli(&["PTTL", key]).unwrap();
    out.parse()
        .unwrap_or_else(|_| panic!("PTTL {key}: unexpected reply {out:?}"))
}

fn exists(server: &RedisServer, key: &str) -> bool {
    server.cli(&["EXISTS", key]).unwrap() == "1"
}

/// A field of `INFO <section>`.
fn info_field(server: &RedisServer, section: &str, field: &str) -> u64 {
    let info = server.cli(&["INFO", section]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}:\n{info}"))
        .trim()
        .parse()
        .unwrap()
}

/// Acquires (the shared state must admit) and records `outcome`, `n` times.
async fn shared_calls(b: &Breaker, outcome: Outcome, n: usize) {
    for i in 0..n {
        let p = b
            .acquire()
            .await
            .unwrap_or_else(|r| panic!("call {i} of {n} ({outcome:?}) rejected: {r}"));
        assert!(!p.is_local(), "call {i}: decided locally, expected Redis");
        assert_eq!(p.record(outcome).await, Recorded::Counted, "call {i}");
    }
}

/// The manual clock in the script's unit (microseconds).
fn clock_micros(clock: &ManualClock) -> u64 {
    clock.now() / 1000
}

/// A ring of at most 512 outcomes lives in the record: one key, which carries the idle TTL
/// while Closed and none once Open, with the window that tripped it.
#[tokio::test]
async fn a_small_ring_lives_in_the_record() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let b = breaker(
        &backend,
        "resilience:inline",
        trip_config(Duration::from_secs(10)),
        shared_builder("a").build().unwrap(),
        &clock,
    );
    let keys = b.keys().clone();
    shared_calls(&b, Outcome::Success, 2).await;
    assert!(pttl(&server, &keys.record) > 0);
    assert_eq!(
        pttl(&server, &keys.window),
        -2,
        "no window key for a small ring"
    );
    shared_calls(&b, Outcome::Failure, 2).await;
    let snap = b.refresh().await.unwrap();
    assert_eq!(
        (snap.state, snap.window.calls, snap.window.failures),
        (State::Open, 4, 2)
    );
    assert_eq!(pttl(&server, &keys.record), -1);
    b.reset().await.unwrap();
    let snap = b.refresh().await.unwrap();
    assert_eq!((snap.state, snap.window.calls), (State::Closed, 0));
    shared_calls(&b, Outcome::Success, 12).await;
    let snap = b.refresh().await.unwrap();
    assert_eq!((snap.window.calls, snap.window.failures), (10, 0));
}

#[tokio::test]
async fn open_record_never_expires() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let idle = Duration::from_secs(3600);
    let idle_ms = idle.as_millis() as i64;
    let b = breaker(
        &backend,
        "resilience:pttl",
        trip_config_keyed_window(Duration::from_secs(10)),
        shared_builder("a").idle_ttl(idle).build().unwrap(),
        &clock,
    );
    let keys = b.keys().clone();

    // Closed with traffic: the record and the window carry the idle TTL.
    shared_calls(&b, Outcome::Success, 2).await;
    let r = pttl(&server, &keys.record);
    assert!(r > 0 && r <= idle_ms, "Closed record PTTL {r}");
    let w = pttl(&server, &keys.window);
    assert!(w > 0 && w <= idle_ms, "Closed window PTTL {w}");

    // Two failures: 4 calls, 50 % -> Open.
    shared_calls(&b, Outcome::Failure, 2).await;
    let snap = b.refresh().await.unwrap();
    assert_eq!(snap.state, State::Open);
    assert_eq!(
        pttl(&server, &keys.record),
        -1,
        "an Open record must not expire"
    );
    // The window keeps the TTL it had: it expires with its data.
    let w = pttl(&server, &keys.window);
    assert!(w > 0 && w <= idle_ms, "Open breaker's window PTTL {w}");
    let r = b.acquire().await.unwrap_err();
    assert_eq!(r.state(), State::Open);

    // HalfOpen (a probe holds the lease): no TTL either.
    clock.advance(Duration::from_secs(10));
    let probe = b.acquire().await.expect("a probe after the open wait");
    assert!(probe.is_probe());
    assert_eq!(b.refresh().await.unwrap().state, State::HalfOpen);
    assert_eq!(
        pttl(&server, &keys.record),
        -1,
        "a HalfOpen record must not expire"
    );
    // The probe succeeds: Closed again, the idle TTL is back.
    assert_eq!(probe.record(Outcome::Success).await, Recorded::Counted);
    assert_eq!(b.refresh().await.unwrap().state, State::Closed);
    let r = pttl(&server, &keys.record);
    assert!(r > 0 && r <= idle_ms, "re-closed record PTTL {r}");

    // Operator states other than Closed never expire either.
    for state in [State::ForcedOpen, State::MetricsOnly, State::Disabled] {
        match state {
            State::ForcedOpen => b.force_open().await.unwrap(),
            State::MetricsOnly => b.metrics_only().await.unwrap(),
            _ => b.disable().await.unwrap(),
        }
        assert_eq!(b.refresh().await.unwrap().state, state);
        assert_eq!(
            pttl(&server, &keys.record),
            -1,
            "{state:?} record must not expire"
        );
    }

    // Reset: Closed with an empty window, the idle TTL again; the window key is gone.
    b.reset().await.unwrap();
    let snap = b.refresh().await.unwrap();
    assert_eq!(snap.state, State::Closed);
    assert_eq!(snap.window.calls, 0);
    let r = pttl(&server, &keys.record);
    assert!(r > 0 && r <= idle_ms, "reset record PTTL {r}");
    assert_eq!(pttl(&server, &keys.window), -2, "reset deletes the window");

    // And ForcedOpen once more straight from Closed.
    b.force_open().await.unwrap();
    assert_eq!(pttl(&server, &keys.record), -1);
    assert_eq!(
        b.acquire().await.unwrap_err().state(),
        State::ForcedOpen,
        "ForcedOpen rejects"
    );
    let m = b.metrics();
    assert_eq!((m.redis_errors, m.redis_timeouts), (0, 0), "{m:?}");
}

/// Writes `n` keys `junk:<from..from+n>` of about 1 KB, each with a one-hour TTL.
fn write_junk(con: &mut redis::Connection, from: usize, n: usize) {
    let value = "x".repeat(1024);
    let mut pipe = redis::pipe();
    for i in from..from + n {
        pipe.cmd("SET")
            .arg(format!("junk:{i}"))
            .arg(&value)
            .arg("EX")
            .arg(3600)
            .ignore();
    }
    pipe.exec(con).unwrap();
}

#[tokio::test]
async fn volatile_lru_evicts_only_window_data() {
    let server =
        RedisServer::start_with(&[("maxmemory", "4mb"), ("maxmemory-policy", "volatile-lru")])
            .expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let config = trip_config_keyed_window(Duration::from_secs(60));

    // Breaker A: tripped, so its record has no TTL and is not a candidate for eviction.
    let open = breaker(
        &backend,
        "evict:open",
        config.clone(),
        shared_builder("a").build().unwrap(),
        &clock,
    );
    shared_calls(&open, Outcome::Failure, 4).await;
    let open_snap = open.refresh().await.unwrap();
    assert_eq!(open_snap.state, State::Open);
    assert_eq!(pttl(&server, &open.keys().record), -1);

    // Closed breakers with a window of 4 calls, 1 failure: record and window carry a TTL.
    let mut closed = Vec::new();
    for i in 0..8 {
        let b = breaker(
            &backend,
            &format!("evict:closed:{i}"),
            config.clone(),
            shared_builder("a").build().unwrap(),
            &clock,
        );
        shared_calls(&b, Outcome::Success, 3).await;
        shared_calls(&b, Outcome::Failure, 1).await;
        let snap = b.refresh().await.unwrap();
        assert_eq!(
            (snap.state, snap.window.calls, snap.window.failures),
            (State::Closed, 4, 1)
        );
        assert!(pttl(&server, &b.keys().record) > 0);
        assert!(pttl(&server, &b.keys().window) > 0);
        closed.push(b);
    }
    // Time passes (within A's open wait): a record created from now on has a new epoch.
    clock.advance(Duration::from_secs(5));
    // A key without a TTL that is not ours: it must survive too.
    assert_eq!(
        server.cli(&["SET", "marker:persistent", "keep"]).unwrap(),
        "OK"
    );

    // Fill memory with TTL'd junk until Redis evicts, and until eviction (random among
    // volatile keys written in the same LRU clock tick) has taken at least one Closed
    // breaker's record. Bounded: 64k keys of 1 KB is 16 times maxmemory.
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let chunk = 500;
    let mut written = 0;
    // The breakers' own keys and the marker, before any junk.
    let ours: usize = server.cli(&["DBSIZE"]).unwrap().parse().unwrap();
    let evicted_records = loop {
        write_junk(&mut con, written, chunk);
        written += chunk;
        let evicted = info_field(&server, "stats", "evicted_keys");
        let gone: Vec<usize> = (0..closed.len())
            .filter(|&i| !exists(&server, &closed[i].keys().record))
            .collect();
        if evicted > 0 && !gone.is_empty() {
            break gone;
        }
        assert!(
            written < 64_000,
            "after {written} junk keys: evicted_keys {evicted}, no Closed breaker record evicted"
        );
    };
    let evicted = info_field(&server, "stats", "evicted_keys");
    assert!(evicted > 0);
    let dbsize: usize = server.cli(&["DBSIZE"]).unwrap().parse().unwrap();
    assert!(
        dbsize < ours + written,
        "something was evicted: {dbsize} keys left of {ours} + {written} junk written"
    );

    // What has no TTL survived: the Open record (still Open, still no TTL) and the marker.
    assert!(exists(&server, "marker:persistent"));
    assert!(
        exists(&server, &open.keys().record),
        "the Open record was evicted"
    );
    assert_eq!(pttl(&server, &open.keys().record), -1);
    let snap = open.refresh().await.expect("refresh of the Open breaker");
    assert_eq!(snap.state, State::Open);
    assert_eq!(snap.epoch, open_snap.epoch);
    assert_eq!(snap.open_until_micros, open_snap.open_until_micros);
    assert_eq!(pttl(&server, &open.keys().record), -1);
    assert_eq!(open.acquire().await.unwrap_err().state(), State::Open);

    // Closed breakers: an evicted one reads as a fresh Closed record with an empty window,
    // without an error; a survivor keeps its window unless the window alone was evicted.
    for (i, b) in closed.iter().enumerate() {
        let had_record = exists(&server, &b.keys().record);
        let had_window = exists(&server, &b.keys().window);
        if evicted_records.contains(&i) {
            assert!(!had_record, "breaker {i}'s record came back");
        }
        let snap = b
            .refresh()
            .await
            .unwrap_or_else(|e| panic!("refresh of Closed breaker {i}: {e}"));
        assert_eq!(snap.state, State::Closed, "breaker {i}");
        if !had_record {
            assert_eq!(
                snap.window,
                WindowSnapshot::default(),
                "evicted breaker {i}"
            );
            assert_eq!(snap.transitions, 0, "evicted breaker {i} starts over");
            assert_eq!(
                snap.epoch,
                clock_micros(&clock),
                "a fresh epoch from the clock"
            );
            assert_ne!(snap.epoch, 0, "the lost record's epoch");
        } else if !had_window {
            assert_eq!(
                (snap.window.calls, snap.window.failures),
                (0, 0),
                "breaker {i}"
            );
        } else {
            assert_eq!(
                (snap.window.calls, snap.window.failures),
                (4, 1),
                "breaker {i}"
            );
        }
        // It keeps deciding from Redis.
        shared_calls(b, Outcome::Success, 1).await;
        let after = b.refresh().await.unwrap();
        assert_eq!(after.state, State::Closed);
        assert_eq!(after.window.calls, snap.window.calls + 1, "breaker {i}");
    }
    for b in closed.iter().chain([&open]) {
        let m = b.metrics();
        assert_eq!(
            (m.redis_errors, m.redis_timeouts),
            (0, 0),
            "{}: {m:?}",
            b.name()
        );
        assert_eq!(b.mode(), Mode::Shared);
    }
}

#[tokio::test]
async fn function_flush_mid_run() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 20 })
        .minimum_calls(10)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(10))
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let b = breaker(
        &backend,
        "resilience:script-flush",
        config,
        shared_builder("a").build().unwrap(),
        &clock,
    );
    let mut events = b.subscribe();
    let loaded = |server: &RedisServer| {
        server
            .cli(&["FUNCTION", "LIST", "LIBRARYNAME", "tripline_6"])
            .unwrap()
            .contains("tripline_6_admit")
    };

    // 5 successes and 5 failures: the 10th call reaches minimum_calls at 50 % and trips.
    // The script cache is flushed before every third call.
    let outcomes = [
        Outcome::Success,
        Outcome::Success,
        Outcome::Failure,
        Outcome::Success,
        Outcome::Failure,
        Outcome::Success,
        Outcome::Failure,
        Outcome::Success,
        Outcome::Failure,
        Outcome::Failure,
    ];
    let mut failures = 0;
    for (i, &o) in outcomes.iter().enumerate() {
        if i % 3 == 0 {
            assert_eq!(server.cli(&["FUNCTION", "FLUSH"]).unwrap(), "OK");
            assert!(!loaded(&server));
        }
        let p = b
            .acquire()
            .await
            .unwrap_or_else(|r| panic!("call {}: rejected {r}", i + 1));
        assert!(!p.is_local(), "call {}", i + 1);
        assert_eq!(p.record(o).await, Recorded::Counted, "call {}", i + 1);
        failures += u64::from(o == Outcome::Failure);
        let snap = b.refresh().await.unwrap();
        assert_eq!(snap.window.calls, i as u64 + 1, "call {}", i + 1);
        assert_eq!(snap.window.failures, failures, "call {}", i + 1);
        if i + 1 < outcomes.len() {
            assert_eq!(snap.state, State::Closed, "tripped early at call {}", i + 1);
            assert!(events.try_recv().is_err(), "a transition at call {}", i + 1);
        } else {
            assert_eq!(snap.state, State::Open, "no trip at the 10th call");
        }
    }
    let t = events.try_recv().expect("the trip's transition");
    assert_eq!(
        (t.from, t.to, t.reason.as_str()),
        (State::Closed, State::Open, "failure-rate")
    );
    assert!(events.try_recv().is_err());
    assert!(loaded(&server));

    // Flushed again while Open: the reloaded library still rejects from the shared state.
    assert_eq!(server.cli(&["FUNCTION", "FLUSH"]).unwrap(), "OK");
    assert_eq!(b.acquire().await.unwrap_err().state(), State::Open);

    let m = b.metrics();
    assert_eq!(
        (m.redis_errors, m.redis_timeouts, m.redis_skipped),
        (0, 0, 0),
        "{m:?}"
    );
    // One script call per acquire and per record: a reload is not a second call.
    assert_eq!(m.redis_calls, 2 * outcomes.len() as u64 + 1, "{m:?}");
    assert_eq!(m.fallback_decisions, 0);
    assert_eq!(m.transitions, 1);
    assert_eq!(b.mode(), Mode::Shared);
}

#[tokio::test]
async fn slow_redis_costs_at_most_the_timeout_then_nothing() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let b = breaker(
        &backend,
        "resilience:slow",
        trip_config(Duration::from_secs(10)),
        shared_builder("a")
            .redis_timeout(Duration::from_millis(200))
            .fallback(Fallback::Local)
            .build()
            .unwrap(),
        &clock,
    );
    // Warm the connection (an acquire and a record).
    shared_calls(&b, Outcome::Success, 1).await;
    let before = b.metrics();
    assert_eq!(before.redis_calls, 2);

    // Redis stops running scripts. (`CLIENT PAUSE .. ALL` would also hold back the
    // `CLIENT UNPAUSE` of any other client until the pause ends on Redis 7.0; WRITE pauses
    // every EVALSHA of a script without the no-writes flag, which is ours, and lets
    // UNPAUSE through.)
    assert_eq!(
        server.cli(&["CLIENT", "PAUSE", "20000", "WRITE"]).unwrap(),
        "OK"
    );
    for i in 0..10 {
        let p = b
            .acquire()
            .await
            .unwrap_or_else(|r| panic!("acquire {i}: the healthy shadow should admit: {r}"));
        assert!(p.is_local(), "acquire {i} was not decided locally");
        assert_eq!(b.mode(), Mode::Fallback, "acquire {i}");
        // A local permit's outcome goes to the shadow only.
        assert_eq!(p.record(Outcome::Success).await, Recorded::Counted);
    }
    let m = b.metrics();
    assert_eq!(m.redis_timeouts, 3, "{m:?}");
    assert_eq!(m.redis_skipped, 7, "{m:?}");
    assert_eq!(m.redis_calls, before.redis_calls + 3, "{m:?}");
    assert_eq!(m.redis_errors, 0, "{m:?}");
    assert_eq!(m.fallback_decisions, 10, "{m:?}");
    assert_eq!((m.rejected, m.lost_records), (0, 0), "{m:?}");
    assert_eq!(b.redis_breaker().state(), State::Open);
    assert_eq!(b.shadow().state(), State::Closed);

    // Redis recovers; the breaker on Redis stays open until its (manual) second is over.
    assert_eq!(server.cli(&["CLIENT", "UNPAUSE"]).unwrap(), "OK");
    let p = b.acquire().await.unwrap();
    assert!(p.is_local());
    p.abandon().await;
    let m = b.metrics();
    assert_eq!(
        (m.redis_calls, m.redis_skipped),
        (before.redis_calls + 3, 8),
        "{m:?}"
    );

    clock.advance(Duration::from_secs(1));
    let p = b.acquire().await.expect("Redis admits again");
    assert!(!p.is_local(), "the probe call to Redis should decide");
    assert_eq!(b.mode(), Mode::Shared);
    assert_eq!(p.record(Outcome::Success).await, Recorded::Counted);
    assert_eq!(b.redis_breaker().state(), State::Closed);
    let m = b.metrics();
    assert_eq!(m.redis_calls, before.redis_calls + 5, "{m:?}");
    assert_eq!((m.redis_timeouts, m.redis_errors), (3, 0), "{m:?}");
    // Only the calls decided by Redis are in the shared window.
    let snap = b.refresh().await.unwrap();
    assert_eq!((snap.state, snap.window.calls), (State::Closed, 2));
}

/// Waits (outside any call's bound, at most 10 s of real time) for the backend to reconnect,
/// then advances the manual clock a second at a time, making one call each time, until a call
/// goes to Redis and is answered. Returns the number of tries.
async fn until_shared(b: &Breaker, clock: &ManualClock) -> usize {
    clock.advance(Duration::from_secs(1));
    b.check(Duration::from_secs(10))
        .await
        .expect("Redis is back and can host the breaker");
    for attempt in 1..=50 {
        clock.advance(Duration::from_secs(1));
        if let Ok(p) = b.acquire().await {
            p.abandon().await;
        }
        if b.mode() == Mode::Shared {
            return attempt;
        }
    }
    panic!(
        "still in fallback after 50 tries (50 s of manual time): {:?}",
        b.metrics()
    );
}

#[tokio::test]
async fn redis_killed_and_restarted() {
    let mut server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    // Open for 60 s (manual), so a tripped shadow stays Open through the reconnect loop.
    let b = breaker(
        &backend,
        "resilience:restart",
        trip_config(Duration::from_secs(60)),
        shared_builder("a")
            .fallback(Fallback::Local)
            .build()
            .unwrap(),
        &clock,
    );
    let old = b.acquire().await.unwrap();
    let old_epoch = old.epoch();
    shared_calls(&b, Outcome::Success, 3).await;
    shared_calls(&b, Outcome::Failure, 1).await;
    let snap = b.refresh().await.unwrap();
    assert_eq!(
        (snap.state, snap.window.calls, snap.window.failures),
        (State::Closed, 4, 1)
    );
    // The shadow has seen the same outcomes.
    let shadow = b.shadow().metrics().window;
    assert_eq!((shadow.calls, shadow.failures), (4, 1));
    let in_flight = b.acquire().await.unwrap();

    server.kill();

    // The result of a call admitted by Redis before it died: lost, but the shadow has it.
    assert_eq!(in_flight.record(Outcome::Failure).await, Recorded::Counted);
    let m = b.metrics();
    assert_eq!(m.lost_records, 1, "{m:?}");
    assert_eq!(b.mode(), Mode::Fallback);
    assert_eq!(b.shadow().metrics().window.failures, 2);

    // The shadow decides: it admits while healthy.
    for i in 0..3 {
        let p = b.acquire().await.expect("the healthy shadow admits");
        assert!(p.is_local(), "call {i}");
        assert_eq!(p.record(Outcome::Success).await, Recorded::Counted);
    }
    let m = b.metrics();
    assert_eq!(m.redis_errors + m.redis_timeouts, 3, "{m:?}");
    assert!(m.redis_skipped >= 1, "{m:?}");
    assert_eq!(b.redis_breaker().state(), State::Open);
    // Failures trip the shadow, locally, and then it rejects locally.
    let mut fed = 0;
    let rejection: Rejected = loop {
        match b.acquire().await {
            Ok(p) => {
                assert!(p.is_local());
                p.record(Outcome::Failure).await;
                fed += 1;
                assert!(
                    fed <= 10,
                    "the shadow never tripped: {:?}",
                    b.shadow().metrics()
                );
            }
            Err(r) => break r,
        }
    };
    assert!(fed >= 1);
    assert_eq!(rejection.state(), State::Open);
    assert_eq!(b.shadow().state(), State::Open);
    let m = b.metrics();
    assert_eq!(m.rejected, 1, "{m:?}");
    assert_eq!(m.fallback_decisions, 3 + fed + 1, "{m:?}");
    assert_eq!(m.redis_errors + m.redis_timeouts, 3, "{m:?}");
    assert_eq!(b.mode(), Mode::Fallback);

    // Redis comes back empty; the replica finds it again by itself.
    server.restart().expect("restart");
    let tries = until_shared(&b, &clock).await;
    assert!(tries >= 1);
    // Redis lost everything: a fresh Closed record, its epoch taken from the clock.
    let snap = b.refresh().await.unwrap();
    assert_eq!(snap.state, State::Closed);
    assert_eq!(snap.transitions, 0);
    assert_eq!(snap.window, WindowSnapshot::default());
    assert_eq!(snap.epoch, snap.origin, "a fresh epoch, from the clock");
    assert!(snap.origin > old_epoch && snap.origin <= clock_micros(&clock));
    // A permit of the lost record cannot count against the new one.
    assert_eq!(old.record(Outcome::Failure).await, Recorded::Stale);
    assert_eq!(b.metrics().stale_results, 1);
    // Decisions are shared again: Redis admits while the local shadow is still Open.
    assert_eq!(b.shadow().state(), State::Open);
    shared_calls(&b, Outcome::Success, 2).await;
    assert_eq!(b.mode(), Mode::Shared);
    let snap = b.refresh().await.unwrap();
    assert_eq!((snap.state, snap.window.calls), (State::Closed, 2));
    assert_eq!(b.redis_breaker().state(), State::Closed);
}

#[tokio::test]
async fn fallback_reject_fails_closed() {
    let mut server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let b = breaker(
        &backend,
        "resilience:reject",
        trip_config(Duration::from_secs(10)),
        shared_builder("a")
            .fallback(Fallback::Reject)
            .build()
            .unwrap(),
        &clock,
    );
    shared_calls(&b, Outcome::Success, 2).await;
    server.kill();

    for i in 0..10 {
        let r = b
            .acquire()
            .await
            .err()
            .unwrap_or_else(|| panic!("acquire {i} admitted while Redis is down"));
        assert_eq!(r.state(), State::Open, "acquire {i}");
        assert_eq!(b.mode(), Mode::Fallback);
    }
    let m = b.metrics();
    assert_eq!(m.fallback_decisions, 10, "{m:?}");
    assert_eq!(m.rejected, 10, "{m:?}");
    assert_eq!(m.redis_errors + m.redis_timeouts, 3, "{m:?}");
    assert_eq!(m.redis_skipped, 7, "{m:?}");
    // The shadow was not asked: it is healthy, yet everything was rejected.
    assert_eq!(b.shadow().state(), State::Closed);

    // Back up: admitted by Redis again.
    server.restart().expect("restart");
    until_shared(&b, &clock).await;
    shared_calls(&b, Outcome::Success, 1).await;
    assert_eq!(b.metrics().rejected, 10);
}

#[tokio::test]
async fn batching_cuts_round_trips() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 100 })
        .minimum_calls(20)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(10))
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    // Only the size triggers a send: the manual clock never moves here, and the real-time
    // flusher (10 s, the largest `flush_every` allowed) does not fire during this test.
    let shared = shared_builder("a")
        .view_ttl(Duration::from_secs(60))
        .batching(Batching {
            flush_every: Duration::from_secs(10),
            max_batch: 50,
            success_wait: None,
        })
        .build()
        .unwrap();
    let b = breaker(&backend, "resilience:batching", config, shared, &clock);
    let mut events = b.subscribe();

    for i in 0..1000 {
        let p = b
            .acquire()
            .await
            .unwrap_or_else(|r| panic!("call {i}: {r}"));
        assert!(!p.is_local());
        assert_eq!(p.record(Outcome::Success).await, Recorded::Counted);
    }
    b.flush().await;
    let m = b.metrics();
    assert_eq!(m.batched_outcomes, 1000, "{m:?}");
    assert_eq!(m.batches, 20, "{m:?}");
    // One admit for the first view, then one call per batch.
    assert!(m.redis_calls <= 1000 / 50 + 3, "{m:?}");
    assert_eq!(m.redis_calls, 21, "{m:?}");
    assert_eq!(
        (m.redis_errors, m.redis_timeouts, m.lost_records),
        (0, 0, 0),
        "{m:?}"
    );
    let snap = b.refresh().await.unwrap();
    assert_eq!(snap.state, State::Closed);
    assert_eq!((snap.window.calls, snap.window.failures), (100, 0));

    // 30 successes and 20 failures: one batch, 100 calls with 20 failures, still Closed.
    let mut seq = vec![Outcome::Success; 30];
    seq.extend([Outcome::Failure; 20]);
    // Then 50 failures in the next batch: the 30th brings the window to 50 % and trips;
    // the 20 after it are stale.
    seq.extend([Outcome::Failure; 50]);
    for (i, &o) in seq.iter().enumerate() {
        let p = b
            .acquire()
            .await
            .unwrap_or_else(|r| panic!("burst call {i}: {r}"));
        assert_eq!(p.record(o).await, Recorded::Counted);
        if i == 49 {
            let snap = b.refresh().await.unwrap();
            assert_eq!((snap.state, snap.window.failures), (State::Closed, 20));
        }
        if i == 98 {
            // 49 failures buffered, not sent: Redis has not seen them.
            let snap = b.refresh().await.unwrap();
            assert_eq!((snap.state, snap.window.failures), (State::Closed, 20));
            assert!(events.try_recv().is_err());
        }
    }
    let t = events
        .try_recv()
        .expect("the batch carrying the trip reports it");
    assert_eq!(
        (t.from, t.to, t.reason.as_str()),
        (State::Closed, State::Open, "failure-rate")
    );
    let m = b.metrics();
    assert_eq!(m.stale_results, 20, "{m:?}");
    assert_eq!(m.batches, 22, "{m:?}");
    assert_eq!(m.batched_outcomes, 1100, "{m:?}");
    assert_eq!(m.transitions, 1, "{m:?}");
    let snap = b.refresh().await.unwrap();
    assert_eq!(snap.state, State::Open);
    assert_eq!((snap.window.calls, snap.window.failures), (100, 50));

    // Later acquires are rejected (from the view: no round trip).
    let calls = b.metrics().redis_calls;
    for _ in 0..5 {
        assert_eq!(b.acquire().await.unwrap_err().state(), State::Open);
    }
    let m = b.metrics();
    assert_eq!(m.redis_calls, calls, "{m:?}");
    assert_eq!(m.rejected, 5, "{m:?}");
}

/// A Closed breaker that goes quiet should leave nothing behind once its idle TTL has passed:
/// its record and window expire, but the events stream and the quorum's voters hash have no
/// TTL at all (and so are never evicted under a `volatile-*` policy either). With scopes per
/// tenant or per region, each scope that ever tripped, or saw a failure under a quorum, keeps
/// its keys forever.
#[tokio::test]
async fn idle_closed_breaker_keeps_no_key_without_a_ttl() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let quorum = Quorum {
        replicas: 2,
        within: Duration::from_secs(60),
    };
    let replica = |id: &str| {
        breaker(
            &backend,
            "resilience:idle",
            trip_config(Duration::from_secs(10)),
            shared_builder(id).quorum(quorum).build().unwrap(),
            &clock,
        )
    };
    let (a, b) = (replica("a"), replica("b"));
    // Both replicas fail: trip (quorum met), then a good probe closes it again.
    shared_calls(&a, Outcome::Failure, 2).await;
    shared_calls(&b, Outcome::Failure, 2).await;
    assert_eq!(a.refresh().await.unwrap().state, State::Open);
    clock.advance(Duration::from_secs(10));
    let probe = a.acquire().await.unwrap();
    assert!(probe.is_probe());
    assert_eq!(probe.record(Outcome::Success).await, Recorded::Counted);
    // Closed, with one failure recorded (the quorum notes its replica).
    shared_calls(&a, Outcome::Failure, 1).await;
    shared_calls(&a, Outcome::Success, 3).await;
    assert_eq!(a.refresh().await.unwrap().state, State::Closed);

    let k = a.keys();
    let mut without_ttl = Vec::new();
    for key in [&k.record, &k.window, &k.in_flight, &k.voters, &k.events] {
        if pttl(&server, key) == -1 {
            without_ttl.push(key.clone());
        }
    }
    assert!(
        without_ttl.is_empty(),
        "keys of an idle Closed breaker that never expire: {without_ttl:?}"
    );
}

// ---- Redis Cluster -------------------------------------------------------------------------

fn keyslot(cluster: &RedisCluster, key: &str) -> u16 {
    let out = cluster.cli(&["CLUSTER", "KEYSLOT", key]).unwrap();
    out.parse()
        .unwrap_or_else(|_| panic!("CLUSTER KEYSLOT {key}: {out:?}"))
}

#[test]
fn cluster_keeps_a_breaker_in_one_slot_and_behaves_the_same() {
    let cluster = RedisCluster::start(3).expect("redis cluster");
    let urls = cluster.urls();

    // Every vector, asking Redis on every acquire and deciding from the last answer.
    let mut failures = Vec::new();
    let mut scope_slots = BTreeSet::new();
    for (mode, view_ttl) in [
        ("exact", Duration::ZERO),
        ("view", Duration::from_secs(3600)),
    ] {
        for v in conformance::builtin() {
            let scope = format!("cluster:{mode}:{}", v.name);
            let subject = RedisSubject::cluster(&urls, v.config.clone(), &scope, view_ttl);
            if let Err(e) = conformance::run(&v, &subject) {
                failures.push(e.to_string());
            }
            let m = subject.breaker.metrics();
            assert_eq!((m.redis_errors, m.redis_timeouts), (0, 0), "{scope}: {m:?}");
            // The five keys of one breaker share a slot.
            let k = subject.breaker.keys();
            let slot = keyslot(&cluster, &k.record);
            for key in [&k.window, &k.in_flight, &k.voters, &k.events] {
                assert_eq!(keyslot(&cluster, key), slot, "{key} vs {}", k.record);
            }
            scope_slots.insert(slot);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        scope_slots.len() >= 2,
        "all vectors' scopes in one slot: {scope_slots:?}"
    );

    // Ten plain scopes: each breaker in one slot, the scopes over several slots.
    let backend = Backend::cluster(&urls).unwrap();
    let mut slots = BTreeSet::new();
    for i in 0..10 {
        let b = breaker(
            &backend,
            &format!("dep:service-{i}"),
            trip_config(Duration::from_secs(10)),
            shared_builder("a").build().unwrap(),
            &ManualClock::new(),
        );
        let k = b.keys();
        let slot = keyslot(&cluster, &k.record);
        for key in [&k.window, &k.in_flight, &k.voters, &k.events] {
            assert_eq!(keyslot(&cluster, key), slot, "{key} vs {}", k.record);
        }
        slots.insert(slot);
    }
    assert!(slots.len() >= 2, "ten scopes, one slot: {slots:?}");

    // A tripped breaker on a cluster: its record lives on the node owning its slot, never
    // expires, and the fleet's events stream is read through the cluster client too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let backend = Backend::cluster(&urls).unwrap();
        let clock = ManualClock::new();
        let b = breaker(
            &backend,
            "cluster:trip",
            trip_config(Duration::from_secs(10)),
            shared_builder("a").build().unwrap(),
            &clock,
        );
        shared_calls(&b, Outcome::Failure, 4).await;
        assert_eq!(b.refresh().await.unwrap().state, State::Open);
        assert_eq!(b.acquire().await.unwrap_err().state(), State::Open);
        assert_eq!(cluster.cli(&["PTTL", &b.keys().record]).unwrap(), "-1");
        let events = b.fleet_events(10).await.unwrap();
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!((events[0].from, events[0].to), (State::Closed, State::Open));
        assert_eq!(events[0].replica, "a");
        let m = b.metrics();
        assert_eq!((m.redis_errors, m.redis_timeouts), (0, 0), "{m:?}");
    });
}

/// A caller whose `record` sends a batch can be cancelled mid-send (a dropped request, an
/// outer timeout): the batch counts as unconfirmed and the replica keeps sending afterwards.
#[tokio::test]
async fn a_cancelled_batch_send_does_not_stop_batching() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let shared = shared_builder("a")
        .view_ttl(Duration::from_secs(60))
        .batching(Batching {
            flush_every: Duration::from_secs(10),
            max_batch: 1,
            success_wait: None,
        })
        .build()
        .unwrap();
    let b = breaker(
        &backend,
        "resilience:cancelled",
        trip_config(Duration::from_secs(10)),
        shared,
        &clock,
    );
    shared_calls(&b, Outcome::Success, 2).await;
    assert_eq!(b.metrics().batches, 2);

    // Redis holds our scripts; the caller gives up on its record (its batch is in flight).
    assert_eq!(
        server.cli(&["CLIENT", "PAUSE", "20000", "WRITE"]).unwrap(),
        "OK"
    );
    let p = b.acquire().await.unwrap();
    let gave_up = tokio::time::timeout(Duration::from_millis(100), p.record(Outcome::Success));
    assert!(
        gave_up.await.is_err(),
        "the record should still be waiting on Redis"
    );
    assert_eq!(b.metrics().lost_records, 1);
    assert_eq!(server.cli(&["CLIENT", "UNPAUSE"]).unwrap(), "OK");

    // The next outcome goes out as a batch of its own: the sender's role was given back.
    shared_calls(&b, Outcome::Success, 1).await;
    let m = b.metrics();
    assert_eq!(m.batches, 3, "{m:?}");
    assert_eq!(m.redis_timeouts + m.redis_errors, 0, "{m:?}");
}

// ---- The store under faults: never admit what the fleet holds Open -------------------------

/// Count window of 20, trips at 50 % once 20 calls are in, Open for `open`, one probe: a
/// replica's own shadow, which sees only its share of the calls, never trips on 5 failures.
fn fleet_config(open: Duration) -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 20 })
        .minimum_calls(20)
        .failure_rate_threshold(50.0)
        .open_duration(open)
        .half_open_calls(1)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// `n` replicas of one scope, each on its own connection.
fn replicas(server: &RedisServer, scope: &str, n: usize, clock: &ManualClock) -> Vec<Breaker> {
    (0..n)
        .map(|i| {
            let backend = Backend::single(&server.url()).unwrap();
            breaker(
                &backend,
                scope,
                fleet_config(Duration::from_secs(60)),
                shared_builder(&format!("r{i}"))
                    .redis_timeout(Duration::from_millis(200))
                    .build()
                    .unwrap(),
                clock,
            )
        })
        .collect()
}

/// 20 failures spread over the fleet trip it; then every replica asks once (and is told
/// Open), so each one's last view is Open until `deadline`.
async fn trip_the_fleet(fleet: &[Breaker]) {
    for i in 0..20 {
        let b = &fleet[i % fleet.len()];
        let Ok(p) = b.acquire().await else { break };
        assert_eq!(p.record(Outcome::Failure).await, Recorded::Counted);
    }
    for b in fleet {
        assert_eq!(b.acquire().await.unwrap_err().state(), State::Open);
        assert_eq!(b.last_known_state(), Some(State::Open));
    }
}

/// The local fallback admitted calls to a dependency the fleet held Open: after `view_ttl` a
/// Redis error went straight to the local shadow, which had seen only this replica's share.
/// A replica that saw the fleet Open keeps rejecting until the deadline it saw, whatever
/// Redis does.
#[tokio::test]
async fn redis_down_never_admits_what_the_fleet_holds_open() {
    let mut server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let fleet = replicas(&server, "faults:down", 4, &clock);
    trip_the_fleet(&fleet).await;
    server.kill();
    clock.advance(Duration::from_millis(150));
    let mut admitted = 0;
    for b in &fleet {
        for _ in 0..20 {
            match b.acquire().await {
                Ok(p) => {
                    admitted += 1;
                    p.abandon().await;
                }
                Err(r) => {
                    assert_eq!(r.state(), State::Open);
                    let left = r.retry_after().unwrap();
                    assert!(left <= Duration::from_secs(60) - Duration::from_millis(150));
                    assert!(left > Duration::from_secs(59));
                }
            }
        }
        let m = b.metrics();
        assert_eq!(m.held_rejections, 20, "{m:?}");
        assert_eq!(b.mode(), Mode::Fallback);
    }
    assert_eq!(
        admitted, 0,
        "admitted while the fleet held the breaker Open"
    );

    // Past the deadline, with Redis still down: each replica's shadow tripped with the fleet,
    // so it probes (one call) before it closes, instead of admitting everything.
    clock.advance(Duration::from_secs(60));
    for b in &fleet {
        let mut local = 0;
        for _ in 0..20 {
            if let Ok(p) = b.acquire().await {
                assert!(p.is_local());
                local += 1;
                std::mem::forget(p);
            }
        }
        assert_eq!(local, 1, "{}: one local probe, no more", b.replica());
    }
}

/// Redis restarted without persistence (or failed over without the record) forgot an Open
/// breaker: its record read Closed with a new epoch and calls were admitted until it re-tripped.
/// Replicas refuse a Closed record that cannot follow from the Open they saw, and bring the
/// Open state back, once, fleet-wide.
#[tokio::test]
async fn an_empty_redis_does_not_forget_an_open_breaker() {
    let mut server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let fleet = replicas(&server, "faults:empty", 12, &clock);
    trip_the_fleet(&fleet).await;
    let before = fleet[0].refresh().await.unwrap();
    server.restart().expect("restart empty");
    clock.advance(Duration::from_secs(1));
    for b in &fleet {
        b.check(Duration::from_secs(10)).await.expect("reconnected");
    }
    let mut admitted = 0;
    for b in &fleet {
        for _ in 0..20 {
            if let Ok(p) = b.acquire().await {
                admitted += 1;
                p.abandon().await;
            }
        }
    }
    assert_eq!(
        admitted, 0,
        "an empty Redis admitted calls to an Open dependency"
    );
    let restores: u64 = fleet.iter().map(|b| b.metrics().restores).sum();
    let lost: u64 = fleet.iter().map(|b| b.metrics().lost_state).sum();
    assert_eq!(restores, 1, "restored once, fleet-wide");
    assert!(lost >= 1);
    let snap = fleet[3].refresh().await.unwrap();
    assert_eq!(snap.state, State::Open);
    assert_eq!(
        snap.origin, before.origin,
        "the restored record continues the old one"
    );
    assert!(snap.epoch > before.epoch);
    assert_eq!(snap.open_until_micros, before.open_until_micros);
    assert_eq!(pttl(&server, &fleet[0].keys().record), -1);
    let events = fleet[0].fleet_events(10).await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].from, events[0].to, events[0].reason.as_str()),
        (State::Closed, State::Open, "restored")
    );
    // At the deadline the fleet probes as usual: one probe, fleet-wide.
    clock.advance(Duration::from_secs(59));
    let mut probes = Vec::new();
    for b in &fleet {
        if let Ok(p) = b.acquire().await {
            assert!(p.is_probe());
            probes.push(p);
        }
    }
    assert_eq!(probes.len(), 1);
    assert_eq!(
        probes.pop().unwrap().record(Outcome::Success).await,
        Recorded::Counted
    );
    assert_eq!(fleet[5].refresh().await.unwrap().state, State::Closed);
}

/// A failover with replication lag: the promoted node holds the record as it was before the
/// trip (same origin, an older epoch). Replicas that saw the trip bring it back.
#[tokio::test]
async fn a_record_whose_epoch_went_back_is_not_trusted() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let fleet = replicas(&server, "faults:lag", 3, &clock);
    let p = fleet[0].acquire().await.unwrap();
    p.record(Outcome::Success).await;
    // What a lagging replica of Redis would hold: the record before the trip.
    let key = fleet[0].keys().record.clone();
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut con).unwrap();
    trip_the_fleet(&fleet).await;
    let open = fleet[0].refresh().await.unwrap();
    let _: () = redis::cmd("RESTORE")
        .arg(&key)
        .arg(0)
        .arg(dump)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
    for b in &fleet {
        for _ in 0..5 {
            assert!(b.acquire().await.is_err(), "{} admitted", b.replica());
        }
    }
    let snap = fleet[1].refresh().await.unwrap();
    assert_eq!(snap.state, State::Open);
    assert!(snap.epoch > open.epoch);
    assert_eq!(fleet.iter().map(|b| b.metrics().restores).sum::<u64>(), 1);
}

/// Under memory pressure, an Open breaker must still reject: rejecting writes nothing (the
/// server's count of changes stays put), and the breaker's functions run (and may record a
/// trip) even when Redis refuses other clients' writes (`allow-oom`).
#[tokio::test]
async fn rejecting_needs_no_write_and_works_out_of_memory() {
    for policy in ["noeviction", "volatile-lru"] {
        let server = RedisServer::start().expect("redis-server");
        let backend = Backend::single(&server.url()).unwrap();
        let clock = ManualClock::new();
        let open = breaker(
            &backend,
            "oom:open",
            trip_config(Duration::from_secs(60)),
            shared_builder("a").build().unwrap(),
            &clock,
        );
        let closed = breaker(
            &backend,
            "oom:closed",
            trip_config(Duration::from_secs(60)),
            shared_builder("a").build().unwrap(),
            &clock,
        );
        shared_calls(&open, Outcome::Failure, 4).await;
        shared_calls(&closed, Outcome::Success, 2).await;
        let changes = || info_field(&server, "persistence", "rdb_changes_since_last_save");
        let before = changes();
        for _ in 0..10 {
            assert_eq!(open.acquire().await.unwrap_err().state(), State::Open);
        }
        assert_eq!(changes(), before, "{policy}: a rejection wrote to Redis");

        // Memory full, set at run time: other clients' writes are refused.
        let used = info_field(&server, "memory", "used_memory");
        server
            .cli(&["CONFIG", "SET", "maxmemory-policy", policy])
            .unwrap();
        server
            .cli(&["CONFIG", "SET", "maxmemory", &(used + 200_000).to_string()])
            .unwrap();
        let mut con = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let value = "x".repeat(1024);
        let refused = (0..2000).any(|i| {
            redis::cmd("SET")
                .arg(format!("junk:{i}"))
                .arg(&value)
                .query::<()>(&mut con)
                .is_err_and(|e| e.to_string().contains("OOM"))
        });
        assert!(refused, "{policy}: memory never filled up");
        for _ in 0..10 {
            assert_eq!(open.acquire().await.unwrap_err().state(), State::Open);
        }
        // The Closed breaker still records, and trips. (Under volatile-lru Redis may evict a
        // Closed breaker's keys, which carry a TTL, to make room: that is the policy's price.)
        shared_calls(&closed, Outcome::Failure, 2).await;
        if policy == "noeviction" {
            assert_eq!(closed.refresh().await.unwrap().state, State::Open);
        }
        for b in [&open, &closed] {
            let m = b.metrics();
            assert_eq!(
                (m.redis_errors, m.redis_timeouts),
                (0, 0),
                "{policy}: {m:?}"
            );
            assert_eq!(b.mode(), Mode::Shared);
        }
        assert_eq!(pttl(&server, &open.keys().record), -1, "{policy}");
    }
}

/// `allkeys-*` can evict an Open record. The health check refuses such a Redis; a fleet that
/// runs on one anyway notices the eviction and brings the Open state back.
#[tokio::test]
async fn allkeys_eviction_is_refused_by_the_check_and_survived_by_the_fleet() {
    let server =
        RedisServer::start_with(&[("maxmemory", "4mb"), ("maxmemory-policy", "allkeys-lru")])
            .expect("redis-server");
    let clock = ManualClock::new();
    let fleet = replicas(&server, "faults:allkeys", 2, &clock);
    match fleet[0].check(Duration::from_secs(5)).await {
        Err(tripline_redis::CheckError::UnsafeEviction { policy }) => {
            assert_eq!(policy, "allkeys-lru")
        }
        other => panic!("expected UnsafeEviction, got {other:?}"),
    }
    trip_the_fleet(&fleet).await;
    let key = fleet[0].keys().record.clone();
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut written = 0;
    while exists(&server, &key) {
        write_junk(&mut con, written, 500);
        written += 500;
        assert!(written < 64_000, "the Open record was never evicted");
    }
    for b in &fleet {
        for _ in 0..5 {
            assert!(b.acquire().await.is_err(), "{} admitted", b.replica());
        }
    }
    assert_eq!(fleet.iter().map(|b| b.metrics().restores).sum::<u64>(), 1);
    assert!(exists(&server, &key));
}

/// One busy replica sent batches of thousands of outcomes (up to 16 × `max_batch`), each
/// holding Redis for milliseconds. One function call never applies more than `max_batch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_never_holds_more_than_max_batch() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 100 })
        .minimum_calls(100)
        .failure_rate_threshold(50.0)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let shared = shared_builder("a")
        .view_ttl(Duration::from_secs(60))
        .batching(Batching {
            flush_every: Duration::from_secs(10),
            max_batch: 50,
            success_wait: None,
        })
        .build()
        .unwrap();
    let b = breaker(&backend, "faults:batch", config, shared, &clock);
    shared_calls(&b, Outcome::Success, 1).await;
    server.cli(&["CONFIG", "RESETSTAT"]).unwrap();
    // Redis holds the first batch while 16 tasks pile up outcomes behind it.
    server.cli(&["CLIENT", "PAUSE", "300", "WRITE"]).unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let b = b.clone();
            tokio::spawn(async move {
                for _ in 0..100 {
                    let p = b.acquire().await.unwrap();
                    p.record(Outcome::Success).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    b.flush().await;
    let m = b.metrics();
    assert!(m.largest_batch <= 50, "{m:?}");
    assert_eq!(m.batched_outcomes + m.lost_records, 1 + 1600, "{m:?}");
    // Redis saw as many calls as batches of at most 50 need.
    let info = server.cli(&["INFO", "commandstats"]).unwrap();
    let calls: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|r| r.split(',').next()?.parse().ok())
        .unwrap();
    assert!(
        calls >= (m.batched_outcomes - 1).div_ceil(50),
        "{calls} calls, {m:?}"
    );
}

/// An admission queued during a `CLIENT PAUSE` ran after its caller had given up and claimed
/// the only probe lease, holding the fleet in HalfOpen until the lease expired. The caller
/// that gives up releases whatever its admission claims (queued right behind it), and a claim
/// that reaches Redis after the caller's deadline is refused.
#[tokio::test]
async fn a_claim_nobody_waits_for_holds_no_lease() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let make = |id: &str, timeout: Duration| {
        let backend = Backend::single(&server.url()).unwrap();
        breaker(
            &backend,
            "faults:orphan",
            trip_config(Duration::from_secs(10)),
            shared_builder(id).redis_timeout(timeout).build().unwrap(),
            &clock,
        )
    };
    let a = make("a", Duration::from_millis(50));
    let b = make("b", Duration::from_secs(2));
    shared_calls(&a, Outcome::Failure, 4).await;
    assert!(b.acquire().await.is_err());
    clock.advance(Duration::from_secs(10));
    // The pause begins at the open deadline: A's admission waits in Redis, A gives up.
    server.cli(&["CLIENT", "PAUSE", "400", "WRITE"]).unwrap();
    let r = a.acquire().await;
    assert!(r.as_ref().is_ok_and(|p| p.is_local()) || r.is_err());
    assert_eq!(a.metrics().redis_timeouts, 1);
    drop(r);
    server.cli(&["CLIENT", "UNPAUSE"]).unwrap();
    // Once Redis has run A's admission and the release behind it, the lease is free.
    let mut free = false;
    for _ in 0..200 {
        let snap = b.refresh().await.unwrap();
        if snap.state == State::HalfOpen && snap.probes_in_flight == 0 {
            free = true;
            break;
        }
    }
    assert!(free, "the lease claimed for A stayed taken");
    let p = b.acquire().await.expect("B gets the probe at once");
    assert!(p.is_probe());
    assert_eq!(p.record(Outcome::Success).await, Recorded::Counted);

    // The claim itself carries the caller's deadline: one arriving later claims nothing.
    b.force_open().await.unwrap();
    b.reset().await.unwrap();
    shared_calls(&b, Outcome::Failure, 4).await;
    clock.advance(Duration::from_secs(10));
    let keys = b.keys();
    let now = clock_micros(&clock).to_string();
    let version = server
        .cli(&["HKEYS", &keys.config])
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_string();
    let mut args = vec!["FCALL", "tripline_6_admit", "6"];
    args.extend(keys.all());
    let past = (clock_micros(&clock) - 1).to_string();
    args.extend([
        now.as_str(),
        "late",
        &version,
        "0",
        "",
        "-1",
        "77",
        past.as_str(),
    ]);
    let out = server.cli(&args).unwrap();
    assert!(out.starts_with("late"), "{out}");
    let snap = b.refresh().await.unwrap();
    assert_eq!((snap.state, snap.probes_in_flight), (State::HalfOpen, 0));
}

/// Misconfiguration read "did not answer within the Redis timeout", because connecting ran
/// inside the per-call bound. Connecting runs outside it now; calls fail at once with Redis's
/// own words, and the health check says what is wrong before traffic arrives.
#[tokio::test]
async fn misconfiguration_is_reported_as_itself() {
    let server = RedisServer::start().expect("redis-server");
    server
        .cli(&["CONFIG", "SET", "requirepass", "s3cret"])
        .unwrap();
    let port = server.port();
    let cases = [
        (
            format!("redis://:wrong@127.0.0.1:{port}/"),
            "Password authentication failed",
        ),
        (
            format!("redis://127.0.0.1:{port}/"),
            "Authentication required",
        ),
        (
            format!("redis://:s3cret@127.0.0.1:{port}/99"),
            "DB index is out of range",
        ),
        ("redis://127.0.0.1:1/".to_string(), "refused"),
        ("unix:///nonexistent/redis.sock".to_string(), "No such file"),
    ];
    for (url, cause) in cases {
        let backend = Backend::single(&url).unwrap();
        let b = SharedBreaker::with_clock(
            "faults:misconfigured",
            trip_config(Duration::from_secs(10)),
            SharedConfig::default(),
            backend,
            ManualClock::new(),
        )
        .unwrap();
        // A wrong password answers at once; a refused connection is retried for `within`.
        match b.check(Duration::from_millis(300)).await {
            Err(tripline_redis::CheckError::Connect(e)) => {
                assert!(e.to_string().contains(cause), "{url}: {e}")
            }
            other => panic!("{url}: expected a connection error, got {other:?}"),
        }
        for _ in 0..3 {
            let p = b.acquire().await.expect("the shadow decides");
            assert!(p.is_local());
            p.abandon().await;
        }
        let m = b.metrics();
        assert_eq!(m.redis_timeouts, 0, "{url}: {m:?}");
        let last = b.last_redis_error().unwrap();
        assert!(last.contains(cause), "{url}: {last}");
    }
    // Right password: fine.
    let backend = Backend::single(&format!("redis://:s3cret@127.0.0.1:{port}/")).unwrap();
    let ok = breaker(
        &backend,
        "faults:configured",
        trip_config(Duration::from_secs(10)),
        SharedConfig::default(),
        &ManualClock::new(),
    );
    let health = ok.check(Duration::from_secs(5)).await.unwrap();
    assert!(health.redis_version.starts_with('7'), "{health:?}");
}

/// An ACL user without `+@scripting`, or a Redis whose `FCALL` is renamed, cannot run the
/// breaker: the check says so, with Redis's reason.
#[tokio::test]
async fn the_check_says_when_functions_cannot_run() {
    let server = RedisServer::start().expect("redis-server");
    server
        .cli(&[
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-@scripting",
        ])
        .unwrap();
    let backend = Backend::single(&format!("redis://app:pw@127.0.0.1:{}/", server.port())).unwrap();
    let b = breaker(
        &backend,
        "faults:acl",
        trip_config(Duration::from_secs(10)),
        shared_builder("a").build().unwrap(),
        &ManualClock::new(),
    );
    match b.check(Duration::from_secs(5)).await {
        Err(tripline_redis::CheckError::Functions(e)) => {
            assert!(
                e.to_string().contains("no permissions to run the 'fcall'"),
                "{e}"
            )
        }
        other => panic!("expected a functions error, got {other:?}"),
    }
    let renamed = RedisServer::start_with(&[("rename-command", "FCALL \"\"")]).expect("redis");
    let backend = Backend::single(&renamed.url()).unwrap();
    let b = breaker(
        &backend,
        "faults:renamed",
        trip_config(Duration::from_secs(10)),
        shared_builder("a").build().unwrap(),
        &ManualClock::new(),
    );
    match b.check(Duration::from_secs(5)).await {
        Err(tripline_redis::CheckError::Functions(e)) => {
            assert!(e.to_string().contains("unknown command"), "{e}")
        }
        other => panic!("expected a functions error, got {other:?}"),
    }
}

/// A probe's result counts while its lease is held, also after the lease's deadline if no
/// acquire has reclaimed it; once reclaimed it is stale. (The in-process breaker's rule.)
#[tokio::test]
async fn a_late_probe_result_counts_until_its_lease_is_reclaimed() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let config = trip_config(Duration::from_secs(10))
        .to_builder()
        .probe_lease(Duration::from_secs(5))
        .build()
        .unwrap();
    let b = breaker(
        &backend,
        "faults:late",
        config,
        shared_builder("a").build().unwrap(),
        &clock,
    );
    shared_calls(&b, Outcome::Failure, 4).await;
    clock.advance(Duration::from_secs(10));
    let p = b.acquire().await.unwrap();
    assert!(p.is_probe());
    clock.advance(Duration::from_millis(5200));
    assert_eq!(p.record(Outcome::Success).await, Recorded::Counted);
    assert_eq!(b.refresh().await.unwrap().state, State::Closed);
}

/// Scope limits count bytes, and a long scope is not echoed back whole; the Redis timeout must
/// be shorter than the probe lease.
#[tokio::test]
async fn scope_and_timeout_limits_say_what_they_count() {
    let backend = Backend::single("redis://127.0.0.1:1/").unwrap();
    let long = "x".repeat(10_000);
    let err = SharedBreaker::new(
        &long,
        BreakerConfig::default(),
        SharedConfig::default(),
        backend.clone(),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("1 to 200 bytes"), "{text}");
    assert!(text.contains("(10000 bytes)"), "{text}");
    assert!(text.len() < 300, "{text}");
    let config = BreakerConfig::builder()
        .probe_lease(Duration::from_millis(20))
        .build()
        .unwrap();
    let err = SharedBreaker::new("dep:x", config, SharedConfig::default(), backend).unwrap_err();
    assert_eq!(err.field(), "redis_timeout");
    assert!(
        err.to_string()
            .contains("shorter than half_open.probe_lease (20ms)"),
        "{err}"
    );
}

/// The quorum kept one vote per replica id forever and read them all on every evaluation.
/// Votes older than the quorum window are trimmed, so churned ids do not pile up.
#[tokio::test]
async fn quorum_votes_of_churned_replicas_are_trimmed() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 100 })
        .minimum_calls(4)
        .failure_rate_threshold(100.0)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let quorum = Quorum {
        replicas: 2,
        within: Duration::from_secs(30),
    };
    let mut voters = String::new();
    for i in 0..200 {
        // A new replica id every second, each with one failure and one success.
        let b = breaker(
            &backend,
            "faults:churn",
            config.clone(),
            shared_builder(&format!("pod-{i}"))
                .quorum(quorum)
                .build()
                .unwrap(),
            &clock,
        );
        shared_calls(&b, Outcome::Failure, 1).await;
        shared_calls(&b, Outcome::Success, 1).await;
        voters = b.keys().voters.clone();
        clock.advance(Duration::from_secs(1));
    }
    let n: u64 = server.cli(&["ZCARD", &voters]).unwrap().parse().unwrap();
    assert!(n <= 31, "{n} votes kept for a 30 s quorum window");
    assert!(pttl(&server, &voters) > 0);
}

/// A time window's success that brings the window up to `minimum_calls` is evaluated: time
/// window 10 s / 1 s, minimum 3, threshold 25 %: success, failure, success at t = 0 trips.
#[tokio::test]
async fn a_success_reaching_minimum_calls_in_a_time_window_trips() {
    let server = RedisServer::start().expect("redis-server");
    let backend = Backend::single(&server.url()).unwrap();
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Time {
            length: Duration::from_secs(10),
            bucket: Duration::from_secs(1),
        })
        .minimum_calls(3)
        .failure_rate_threshold(25.0)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let b = breaker(
        &backend,
        "faults:gate",
        config,
        shared_builder("a").build().unwrap(),
        &clock,
    );
    for o in [Outcome::Success, Outcome::Failure, Outcome::Success] {
        shared_calls(&b, o, 1).await;
    }
    let snap = b.refresh().await.unwrap();
    assert_eq!(snap.state, State::Open, "{snap:?}");
}

/// During a slot migration a breaker's keys are split between two nodes and Redis answers
/// `TRYAGAIN`: the calls fall back, but the breaker on Redis does not open, so the replica is
/// shared again as soon as the migration ends.
#[test]
fn a_slot_migration_does_not_open_the_breaker_on_redis() {
    let cluster = RedisCluster::start(3).expect("redis cluster");
    let urls = cluster.urls();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let backend = Backend::cluster(&urls).unwrap();
        let clock = ManualClock::new();
        let b = breaker(
            &backend,
            "faults:migrating",
            trip_config(Duration::from_secs(10)),
            shared_builder("a")
                .redis_timeout(Duration::from_millis(500))
                .build()
                .unwrap(),
            &clock,
        );
        shared_calls(&b, Outcome::Success, 2).await;
        let keys = b.keys().clone();
        let slot = keyslot(&cluster, &keys.record).to_string();
        let id = |n: &RedisServer| n.cli(&["CLUSTER", "MYID"]).unwrap();
        let nodes = cluster.nodes();
        let owner = nodes
            .iter()
            .position(|n| n.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot]).unwrap() != "0")
            .unwrap();
        let target = (owner + 1) % nodes.len();
        let (src, dst) = (&nodes[owner], &nodes[target]);
        dst.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id(src)])
            .unwrap();
        src.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id(dst)])
            .unwrap();
        let port = dst.port().to_string();
        // Only the record moves for now: the keys are split.
        let out = src
            .cli(&["MIGRATE", "127.0.0.1", &port, &keys.record, "0", "5000"])
            .unwrap();
        assert_eq!(out, "OK");
        for _ in 0..10 {
            let p = b.acquire().await.expect("the shadow decides");
            assert!(p.is_local());
            p.abandon().await;
        }
        let m = b.metrics();
        assert!(m.redis_redirections >= 10, "{m:?}");
        assert_eq!(b.redis_breaker().state(), State::Closed, "{m:?}");
        // The rest moves, the slot changes hands.
        let mut args = vec![
            "MIGRATE",
            "127.0.0.1",
            port.as_str(),
            "",
            "0",
            "5000",
            "KEYS",
        ];
        let rest: Vec<String> = keys.all()[1..].iter().map(|k| k.to_string()).collect();
        args.extend(rest.iter().map(String::as_str));
        let out = src.cli(&args).unwrap();
        assert!(out == "OK" || out == "NOKEY", "{out}");
        let dst_id = id(dst);
        for n in nodes {
            n.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &dst_id])
                .unwrap();
        }
        shared_calls(&b, Outcome::Success, 1).await;
        assert_eq!(b.mode(), Mode::Shared);
        let snap = b.refresh().await.unwrap();
        assert_eq!((snap.state, snap.window.calls), (State::Closed, 3));
    });
}

/// `rediss://` against a loopback redis-server with a TLS port and a certificate made here.
#[tokio::test]
async fn tls_with_a_throwaway_certificate() {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".into()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    let (cert_file, key_file, ca_file) = (
        write("server.crt", &cert.pem()),
        write("server.key", &key.serialize_pem()),
        write("ca.crt", &ca.pem()),
    );
    let tls_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let server = RedisServer::start_with(&[
        ("tls-port", &tls_port),
        ("tls-cert-file", &cert_file),
        ("tls-key-file", &key_file),
        ("tls-ca-cert-file", &ca_file),
        ("tls-auth-clients", "no"),
    ])
    .expect("redis-server with TLS");
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let backend = Backend::single_tls(&url, ca.pem().as_bytes(), None).unwrap();
    let clock = ManualClock::new();
    let b = breaker(
        &backend,
        "faults:tls",
        trip_config(Duration::from_secs(10)),
        shared_builder("a").build().unwrap(),
        &clock,
    );
    b.check(Duration::from_secs(5)).await.expect("TLS connects");
    shared_calls(&b, Outcome::Failure, 4).await;
    assert_eq!(b.refresh().await.unwrap().state, State::Open);
    // The server's certificate is checked: an unknown CA is refused, with the reason.
    let other = rcgen::CertificateParams::new(Vec::<String>::new())
        .unwrap()
        .self_signed(&rcgen::KeyPair::generate().unwrap())
        .unwrap();
    let backend = Backend::single_tls(&url, other.pem().as_bytes(), None).unwrap();
    let b = breaker(
        &backend,
        "faults:tls",
        trip_config(Duration::from_secs(10)),
        shared_builder("b").build().unwrap(),
        &clock,
    );
    let err = b.check(Duration::from_secs(5)).await.unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
    drop(server);
}

/// The two in-process settings the fleet's functions do not run (the fixed Closed interval,
/// the open-wait function) are refused by name, not run without.
#[tokio::test]
async fn a_configuration_asking_for_what_the_fleet_does_not_run_is_refused() {
    let backend = Backend::single("redis://127.0.0.1:1/").unwrap();
    let interval = BreakerConfig::builder()
        .interval(Duration::from_secs(60))
        .build()
        .unwrap();
    let err = SharedBreaker::new("dep:x", interval, SharedConfig::default(), backend.clone())
        .unwrap_err();
    assert_eq!(err.field(), "interval");
    assert!(err.to_string().contains("1m"), "{err}");
    let function = BreakerConfig::builder()
        .open_duration_fn(|_: &tripline::OpenWaitArgs| Duration::from_secs(5))
        .build()
        .unwrap();
    let err = SharedBreaker::new("dep:x", function, SharedConfig::default(), backend).unwrap_err();
    assert_eq!(err.field(), "open_duration_fn");
}
