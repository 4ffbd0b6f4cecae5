//! Faults a careful operator finds, each against real redis-server processes: a time window
//! of many buckets after an idle gap, Redis losing a trip (killed, failed over to a replica
//! that lagged, restarted empty), eviction of a Closed record, the library-reload herd, an ACL
//! user, a record rolled back by a failover, a missing library at the memory limit, a TLS URL
//! to a plain port, a rolling upgrade from the previous library, `allkeys-*` without a limit,
//! and a wrong URL. Where a fault lets calls through, the test prints the count
//! (`MEASURED ...`, with `--nocapture`) and pins the bound the design gives.

mod common;
use common::RedisSubject;

use std::time::Duration;

use tripline::conformance::{LocalSubject, Subject, Vector};
use tripline::{BreakerConfig, Clock, ManualClock, Outcome, Recorded, State, WindowConfig};
use tripline_redis::server::{Proxy, RedisServer};
use tripline_redis::{
    Backend, Fallback, Mode, SharedBreaker, SharedConfig, SharedConfigBuilder, TimeSource,
};

type Breaker = SharedBreaker<ManualClock>;

const SECOND: Duration = Duration::from_secs(1);

/// The script on the manual clock, deciding from views for 100 ms, a generous timeout.
fn shared(replica: &str) -> SharedConfigBuilder {
    SharedConfig::builder()
        .time_source(TimeSource::Local)
        .redis_timeout(Duration::from_millis(500))
        .replica_id(replica)
}

/// Count window of 20, trips at 50 % once 20 calls are in, Open for a minute, one probe: a
/// replica's own shadow (a fifth of the calls) never trips on the fleet's failures.
fn fleet_config() -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 20 })
        .minimum_calls(20)
        .failure_rate_threshold(50.0)
        .open_duration(60 * SECOND)
        .half_open_calls(1)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

fn replica(url: &str, scope: &str, id: &str, clock: &ManualClock) -> Breaker {
    replica_with(url, scope, fleet_config(), shared(id), clock)
}

fn replica_with(
    url: &str,
    scope: &str,
    config: BreakerConfig,
    shared: SharedConfigBuilder,
    clock: &ManualClock,
) -> Breaker {
    SharedBreaker::with_clock(
        scope,
        config,
        shared.build().unwrap(),
        Backend::single(url).unwrap(),
        clock.clone(),
    )
    .unwrap()
}

/// Trips the fleet with failures from the replicas `by` (in turn); then only those replicas
/// have seen Open (every other replica's last view is Closed).
async fn trip_by(by: &[&Breaker]) {
    for i in 0.. {
        assert!(i < 40, "no trip after 40 failures");
        let Ok(p) = by[i % by.len()].acquire().await else {
            break;
        };
        // Counted, or stale once another replica's failure tripped the breaker.
        assert_ne!(p.record(Outcome::Failure).await, Recorded::Ignored);
    }
    for b in by {
        assert_eq!(b.acquire().await.unwrap_err().state(), State::Open);
        assert_eq!(b.last_known_state(), Some(State::Open));
    }
}

/// Calls `n` times on each replica, abandoning what is admitted; the number admitted.
async fn admitted(fleet: &[&Breaker], n: usize) -> usize {
    let mut admitted = 0;
    for b in fleet {
        for _ in 0..n {
            if let Ok(p) = b.acquire().await {
                admitted += 1;
                p.abandon().await;
            }
        }
    }
    admitted
}

/// Waits (real time, at most 10 s: a bound, not a pace) until Redis holds the scope's breaker
/// in `state`, read through `observer` (a replica with no view of its own to bring back);
/// whether it did.
async fn redis_holds(observer: &Breaker, state: State) -> bool {
    for _ in 0..1000 {
        if observer.refresh().await.is_ok_and(|s| s.state == state) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// A time window of 4096 buckets (1 h of 1 s, and 4.096 s of 1 ms) idle for every gap up to
/// past the window: every record, read and check works and the window matches the in-process
/// breaker's. Clearing the buckets skipped during the gap once built one `BITFIELD` argument
/// list per gap, which Lua's `unpack` refused past about 700 buckets ("too many results to
/// unpack"), and every call failed until the gap exceeded the whole window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_window_of_many_buckets_survives_any_idle_gap() {
    let server = RedisServer::start().expect("redis-server");
    let url = server.url();
    for (length, bucket, gaps_ms) in [
        (
            3600 * SECOND,
            SECOND,
            &[
                1_000u64, 700_000, 720_000, 1_500_000, 1_799_000, 1_800_000, 1_801_000, 3_599_000,
                3_600_000, 5_000_000,
            ][..],
        ),
        (
            Duration::from_millis(4096),
            Duration::from_millis(1),
            &[
                1, 700, 1_000, 1_500, 2_047, 2_048, 2_049, 4_095, 4_096, 9_000,
            ][..],
        ),
    ] {
        let config = BreakerConfig::builder()
            .window(WindowConfig::Time { length, bucket })
            .minimum_calls(1_000_000)
            .count_in_flight_as_slow(false)
            .build()
            .unwrap();
        let vector = Vector {
            name: "gap".into(),
            description: String::new(),
            config: config.clone(),
            steps: Vec::new(),
        };
        let scope = format!("faults:gap:{}", length.as_millis());
        tokio::task::spawn_blocking({
            let url = url.clone();
            move || {
                let local = LocalSubject::new(&vector);
                let redis = RedisSubject::single(&url, config, &scope, Duration::ZERO);
                let record = |o: Outcome| {
                    let (l, r) = (local.acquire().unwrap(), redis.acquire().unwrap());
                    assert_eq!(local.record(l, o), redis.record(r, o));
                };
                // Outcomes spread over many buckets, then the gaps.
                for i in 0..64u64 {
                    let o = if i % 3 == 0 {
                        Outcome::Failure
                    } else {
                        Outcome::Success
                    };
                    record(o);
                    local.advance(bucket * 7);
                    redis.advance(bucket * 7);
                }
                for &gap in gaps_ms {
                    local.advance(Duration::from_millis(gap));
                    redis.advance(Duration::from_millis(gap));
                    record(Outcome::Failure);
                    record(Outcome::Success);
                    let (wl, wr) = (local.window(), redis.window());
                    assert_eq!(
                        (wl.calls, wl.failures),
                        (wr.calls, wr.failures),
                        "window after an idle gap of {gap} ms ({length:?} / {bucket:?})"
                    );
                }
                redis
                    .run(redis.breaker.check(10 * SECOND))
                    .expect("the check reads the window");
                let m = redis.breaker.metrics();
                assert_eq!(
                    (m.redis_errors, m.redis_timeouts, m.fallback_decisions),
                    (0, 0, 0),
                    "{m:?}"
                );
            }
        })
        .await
        .unwrap();
    }
}

/// Redis restarted empty; the only replica that saw the trip makes no call. It used to bring
/// the trip back only at its next call after `view_ttl`: meanwhile replicas that never saw Open
/// admitted every call. It reaches Redis as soon as it reconnects, and its view comes back in
/// that one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_remembering_open_restores_it_as_soon_as_it_reconnects() {
    let mut server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let url = server.url();
    let scope = "faults:reconnect";
    let remembers = replica(&url, scope, "remembers", &clock);
    let others: Vec<_> = (0..4)
        .map(|i| replica(&url, scope, &format!("r{i}"), &clock))
        .collect();
    for b in &others {
        let p = b.acquire().await.unwrap();
        p.record(Outcome::Success).await;
    }
    trip_by(&[&remembers]).await;
    let mut events = remembers.subscribe();
    server.restart().expect("restart empty");
    // The remembering replica, without a call, restores the trip when its connection is made
    // again (a bound, not a pace: the supervisor reconnects within its backoff).
    let restored = tokio::time::timeout(10 * SECOND, async {
        loop {
            match events.recv().await {
                Ok(t) if t.reason == "restored" => return t,
                Ok(_) => continue,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    let restored = restored.is_ok();
    clock.advance(SECOND);
    for b in &others {
        let _ = b.check(10 * SECOND).await;
    }
    let others: Vec<&Breaker> = others.iter().collect();
    let n = admitted(&others, 10).await;
    println!("MEASURED empty restart, remembering replica silent: {n} of 40 admitted");
    assert!(restored, "no restore after the reconnection");
    assert_eq!(n, 0, "replicas that never saw Open admitted calls");
    assert_eq!(remembers.metrics().restores, 1);
    let snap = others[0].refresh().await.unwrap();
    assert_eq!(snap.state, State::Open);
}

/// An empty restart where a replica that never saw Open reaches Redis first: it cannot know of
/// the trip, and admits until a remembering replica reaches Redis (that replica's connection
/// is held back here by a partitioned proxy). From the remembering replica's first call the
/// fleet holds Open: Redis brings the view back in that call, and the forgetful replica is
/// rejected from its next call on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_restart_where_a_forgetful_replica_calls_first() {
    let mut server = RedisServer::start().expect("redis-server");
    let proxy = Proxy::start(server.port()).unwrap();
    let clock = ManualClock::new();
    let scope = "faults:forgetful-first";
    let remembers = replica(&proxy.url(), scope, "remembers", &clock);
    let forgetful = replica(&server.url(), scope, "forgetful", &clock);
    let p = forgetful.acquire().await.unwrap();
    p.record(Outcome::Success).await;
    trip_by(&[&remembers]).await;
    proxy.partition();
    server.restart().expect("restart empty");
    clock.advance(SECOND);
    forgetful.check(10 * SECOND).await.unwrap();
    let before = admitted(&[&forgetful], 10).await;
    println!(
        "MEASURED empty restart, forgetful replica first: {before} of 10 admitted before a remembering replica reached Redis"
    );
    // The remembering replica reaches Redis (its connection made again): the trip is back.
    let observer = replica(&server.url(), scope, "observer", &clock);
    proxy.heal();
    proxy.drop_connections();
    let back = redis_holds(&observer, State::Open).await;
    clock.advance(SECOND);
    let after = admitted(&[&forgetful], 10).await;
    println!(
        "MEASURED empty restart, forgetful replica first: {after} of 10 admitted after it reconnected"
    );
    assert!(back, "the remembering replica did not bring the trip back");
    assert_eq!(after, 0);
    assert_eq!(remembers.metrics().restores, 1);
}

/// Redis killed right after a trip that only some replicas saw, then restarted empty. The
/// replicas that saw it reject throughout; the others cannot know of it while Redis is down
/// (their local breakers decide: with `Fallback::Reject` they reject too), and reject as soon
/// as Redis holds the trip again, which the remembering replicas bring back when they
/// reconnect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_right_after_a_trip() {
    for fallback in [Fallback::Local, Fallback::Reject] {
        let mut server = RedisServer::start().expect("redis-server");
        let clock = ManualClock::new();
        let url = server.url();
        let scope = "faults:killed";
        let fleet: Vec<_> = (0..8)
            .map(|i| {
                replica_with(
                    &url,
                    scope,
                    fleet_config(),
                    shared(&format!("r{i}")).fallback(fallback),
                    &clock,
                )
            })
            .collect();
        for b in &fleet {
            let p = b.acquire().await.unwrap();
            p.record(Outcome::Success).await;
        }
        let (saw, never) = fleet.split_at(4);
        let saw: Vec<&Breaker> = saw.iter().collect();
        let never: Vec<&Breaker> = never.iter().collect();
        trip_by(&saw).await;
        server.kill();
        clock.advance(Duration::from_millis(150));
        let down_saw = admitted(&saw, 10).await;
        let down_never = admitted(&never, 10).await;
        server.restart().expect("restart empty");
        // No call from the replicas that saw the trip: they bring it back on reconnecting.
        let observer = replica(&url, scope, "observer", &clock);
        let restored = redis_holds(&observer, State::Open).await;
        for b in &never {
            b.check(10 * SECOND).await.unwrap();
        }
        clock.advance(SECOND);
        let back = admitted(&fleet.iter().collect::<Vec<_>>(), 10).await;
        println!(
            "MEASURED killed after a trip ({fallback:?}): while down {down_saw} of 40 by replicas that saw it, {down_never} of 40 by the others; {back} of 80 after the restart"
        );
        assert!(restored, "no replica brought the trip back");
        assert_eq!(down_saw, 0);
        assert_eq!(back, 0);
        if fallback == Fallback::Reject {
            assert_eq!(down_never, 0);
        }
    }
}

/// A failover to a replica of Redis that lagged the trip: the promoted node holds the record
/// as it was before (the same origin, an older epoch). Every replica of the fleet reconnects
/// (through the address that follows the primary); those that saw the trip bring it back at
/// once, so the others are rejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_replica_that_lagged_the_trip() {
    let mut primary = RedisServer::start().expect("redis-server");
    let standby = RedisServer::start().expect("redis-server");
    let proxy = Proxy::start(primary.port()).unwrap();
    let clock = ManualClock::new();
    let scope = "faults:failover";
    let fleet: Vec<_> = (0..8)
        .map(|i| replica(&proxy.url(), scope, &format!("r{i}"), &clock))
        .collect();
    for b in &fleet {
        let p = b.acquire().await.unwrap();
        p.record(Outcome::Success).await;
    }
    // The standby follows the primary until just before the trip.
    let port = primary.port().to_string();
    standby.cli(&["REPLICAOF", "127.0.0.1", &port]).unwrap();
    let key = fleet[0].keys().record.clone();
    for _ in 0..1000 {
        if standby.cli(&["EXISTS", &key]).unwrap() == "1" {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    standby.cli(&["REPLICAOF", "NO", "ONE"]).unwrap();
    let (saw, never) = fleet.split_at(4);
    let saw: Vec<&Breaker> = saw.iter().collect();
    let never: Vec<&Breaker> = never.iter().collect();
    trip_by(&saw).await;
    // The failover: the address now leads to the standby, the old primary is gone.
    proxy.retarget(standby.port());
    proxy.drop_connections();
    primary.kill();
    // No call from the replicas that saw the trip: they bring it back on reconnecting.
    let observer = replica(&proxy.url(), scope, "observer", &clock);
    let restored = redis_holds(&observer, State::Open).await;
    for b in &never {
        let _ = b.check(10 * SECOND).await;
    }
    clock.advance(SECOND);
    let n = admitted(&never, 10).await;
    println!(
        "MEASURED failover to a lagging replica: {n} of 40 admitted by replicas that never saw the trip"
    );
    assert!(restored, "no replica brought the trip back");
    assert_eq!(n, 0);
    assert_eq!(fleet.iter().map(|b| b.metrics().restores).sum::<u64>(), 1);
}

/// Under `volatile-lru` a Closed breaker's record (it carries the idle TTL) can be evicted
/// between calls, and a breaker whose failures are evicted does not trip. It used to go
/// unnoticed; each loss is counted in `lost_windows`, and the check warns.
#[tokio::test]
async fn a_closed_record_evicted_under_volatile_lru_is_counted() {
    let server =
        RedisServer::start_with(&[("maxmemory", "4mb"), ("maxmemory-policy", "volatile-lru")])
            .expect("redis-server");
    let clock = ManualClock::new();
    let b = replica_with(
        &server.url(),
        "faults:evicted",
        BreakerConfig::builder()
            .window(WindowConfig::Count { size: 40 })
            .minimum_calls(40)
            .failure_rate_threshold(50.0)
            .count_in_flight_as_slow(false)
            .build()
            .unwrap(),
        shared("a").view_ttl(Duration::ZERO),
        &clock,
    );
    let health = b.check(5 * SECOND).await.unwrap();
    assert!(
        health
            .warnings
            .iter()
            .any(|w| w.contains("record or window")),
        "{health:?}"
    );
    let key = b.keys().record.clone();
    let mut admitted = 0;
    let mut evictions = 0;
    for _ in 0..40 {
        if let Ok(p) = b.acquire().await {
            admitted += 1;
            p.record(Outcome::Failure).await;
        }
        // Memory pressure evicts the record before the next call.
        if server.cli(&["DEL", &key]).unwrap() == "1" {
            evictions += 1;
        }
        clock.advance(Duration::from_millis(10));
    }
    let m = b.metrics();
    println!(
        "MEASURED volatile eviction between calls: {admitted} of 40 failing calls admitted, {evictions} records lost, lost_windows {}",
        m.lost_windows
    );
    assert!(evictions > 30);
    assert!(m.lost_windows >= evictions - 1, "{m:?}");
}

/// Every replica reloaded the library at once when a node lost it (`FUNCTION LOAD REPLACE`,
/// about a millisecond of Redis each). One replica's load wins; the others are told it exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_is_loaded_once_per_loss_whatever_the_fleet() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    // Six replicas, each with three breakers on its own connection.
    let fleet: Vec<Vec<Breaker>> = (0..6)
        .map(|i| {
            let backend = Backend::single(&server.url()).unwrap();
            (0..3)
                .map(|j| {
                    SharedBreaker::with_clock(
                        &format!("faults:herd:{j}"),
                        fleet_config(),
                        shared(&format!("r{i}")).build().unwrap(),
                        backend.clone(),
                        clock.clone(),
                    )
                    .unwrap()
                })
                .collect()
        })
        .collect();
    for b in fleet.iter().flatten() {
        b.check(5 * SECOND).await.unwrap();
    }
    server.cli(&["CONFIG", "RESETSTAT"]).unwrap();
    let flushes = 10;
    for _ in 0..flushes {
        assert_eq!(server.cli(&["FUNCTION", "FLUSH"]).unwrap(), "OK");
        clock.advance(SECOND);
        let tasks: Vec<_> = fleet
            .iter()
            .flatten()
            .cloned()
            .map(|b| {
                tokio::spawn(async move {
                    let p = b.acquire().await.unwrap();
                    assert!(!p.is_local());
                    p.record(Outcome::Success).await;
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    }
    let stats = server.cli(&["INFO", "commandstats"]).unwrap();
    let field = |name: &str| -> u64 {
        stats
            .lines()
            .find(|l| l.starts_with("cmdstat_function|load:"))
            .and_then(|l| l.split(&format!("{name}=")).nth(1))
            .and_then(|r| r.split(',').next()?.parse().ok())
            .unwrap_or(0)
    };
    let (calls, failed) = (field("calls"), field("failed_calls"));
    println!(
        "MEASURED reload herd: {} successful loads and {} refused ({} sent) for {flushes} flushes, 6 replicas x 3 breakers",
        calls - failed,
        failed,
        calls
    );
    assert_eq!(calls - failed, flushes, "{stats}");
    assert!(
        calls <= 6 * flushes,
        "one load per replica and loss at most: {calls}"
    );
    for b in fleet.iter().flatten() {
        assert_eq!(b.metrics().redis_errors, 0);
    }
}

/// The documented ACL user connects, runs every function (trip, probe, recovery, a reload of
/// the library), reads the fleet's events and passes the check.
#[tokio::test]
async fn the_documented_acl_works_for_a_real_acl_user() {
    let server = RedisServer::start().expect("redis-server");
    let rule = tripline_redis::acl_rules("tripline");
    let mut args = vec![
        "ACL",
        "SETUSER",
        "app",
        "on",
        ">pw",
        "resetkeys",
        "resetchannels",
        "-@all",
    ];
    args.extend(rule.split_whitespace());
    assert_eq!(server.cli(&args).unwrap(), "OK");
    let url = format!("redis://app:pw@127.0.0.1:{}/", server.port());
    let clock = ManualClock::new();
    let b = replica_with(
        &url,
        "faults:acl",
        BreakerConfig::builder()
            .window(WindowConfig::Count { size: 4 })
            .minimum_calls(4)
            .open_duration(10 * SECOND)
            .half_open_calls(1)
            .build()
            .unwrap(),
        shared("a").view_ttl(Duration::ZERO),
        &clock,
    );
    b.check(5 * SECOND).await.expect("the check passes");
    for _ in 0..4 {
        let p = b.acquire().await.unwrap();
        assert!(!p.is_local(), "{:?}", b.last_redis_error());
        p.record(Outcome::Failure).await;
    }
    assert_eq!(b.refresh().await.unwrap().state, State::Open);
    server.cli(&["FUNCTION", "FLUSH"]).unwrap();
    clock.advance(10 * SECOND);
    let p = b.acquire().await.unwrap();
    assert!(p.is_probe());
    p.record(Outcome::Success).await;
    assert_eq!(b.refresh().await.unwrap().state, State::Closed);
    assert_eq!(b.fleet_events(10).await.unwrap().len(), 3);
    let m = b.metrics();
    assert_eq!(
        (m.redis_errors, m.redis_timeouts, m.fallback_decisions),
        (0, 0, 0),
        "{m:?}"
    );
    assert_eq!(b.mode(), Mode::Shared);
}

/// A failover rolled the record back (the same origin, an older epoch) while a permit of the
/// lost history was out. Epochs moved by one per transition, so the rolled-back record could
/// reach that permit's epoch again and count its result. Epochs never fall below the clock.
#[tokio::test]
async fn a_rolled_back_record_never_reaches_an_epoch_of_the_history_it_lost() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let b = replica_with(
        &server.url(),
        "faults:rollback",
        fleet_config(),
        shared("a").view_ttl(Duration::ZERO),
        &clock,
    );
    let p = b.acquire().await.unwrap();
    p.record(Outcome::Success).await;
    let key = b.keys().record.clone();
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut con).unwrap();
    // The lost history: two resets, and a permit of the second one.
    clock.advance(SECOND);
    b.reset().await.unwrap();
    clock.advance(SECOND);
    b.reset().await.unwrap();
    let lost = b.acquire().await.unwrap();
    // The failover rolls the record back; the new history makes two transitions too.
    let _: () = redis::cmd("RESTORE")
        .arg(&key)
        .arg(0)
        .arg(dump)
        .arg("REPLACE")
        .query(&mut con)
        .unwrap();
    let other = replica_with(
        &server.url(),
        "faults:rollback",
        fleet_config(),
        shared("b").view_ttl(Duration::ZERO),
        &clock,
    );
    clock.advance(SECOND);
    other.reset().await.unwrap();
    clock.advance(SECOND);
    other.reset().await.unwrap();
    assert_eq!(lost.record(Outcome::Failure).await, Recorded::Stale);
    assert_eq!(other.refresh().await.unwrap().window.failures, 0);
}

/// A node at its memory limit under `noeviction` refuses `FUNCTION LOAD`: replicas that found
/// the library missing decided locally (and admitted) although Redis held the breaker Open.
/// They run the same library as a script (flagged `allow-oom`) meanwhile.
#[tokio::test]
async fn a_missing_library_at_the_memory_limit_still_decides_in_redis() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let url = server.url();
    let saw = replica_with(
        &url,
        "faults:oom",
        fleet_config(),
        shared("saw").view_ttl(Duration::ZERO),
        &clock,
    );
    let never = replica_with(
        &url,
        "faults:oom",
        fleet_config(),
        shared("never").view_ttl(Duration::ZERO),
        &clock,
    );
    let p = never.acquire().await.unwrap();
    p.record(Outcome::Success).await;
    trip_by(&[&saw]).await;
    let used: u64 = server
        .cli(&["INFO", "memory"])
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    server
        .cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"])
        .unwrap();
    server
        .cli(&["CONFIG", "SET", "maxmemory", &(used + 100_000).to_string()])
        .unwrap();
    let mut con = redis::Client::open(url.clone())
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(fill(&mut con, 0), "memory never filled up");
    // The library goes missing; what it freed is filled again.
    server.cli(&["FUNCTION", "FLUSH"]).unwrap();
    fill(&mut con, 4000);
    let loaded = server
        .cli(&[
            "FUNCTION",
            "LOAD",
            "#!lua name=probe\nredis.register_function('f', function() return 1 end)",
        ])
        .unwrap();
    assert!(
        loaded.contains("OOM"),
        "FUNCTION LOAD is refused at the limit: {loaded}"
    );
    clock.advance(SECOND);
    let n = admitted(&[&never], 10).await;
    let m = never.metrics();
    println!(
        "MEASURED library missing at the memory limit: {n} of 10 admitted by a replica that never saw the trip ({} decided locally)",
        m.fallback_decisions
    );
    assert_eq!(n, 0, "{m:?} {:?}", never.last_redis_error());
    assert_eq!(m.fallback_decisions, 0);
    assert_eq!(never.mode(), Mode::Shared);
}

/// Writes keys of 1 KB (`junk:<from..>`, at most 4000) until Redis refuses one for memory;
/// whether it did.
fn fill(con: &mut redis::Connection, from: usize) -> bool {
    let value = "x".repeat(1024);
    (from..from + 4000).any(|i| {
        redis::cmd("SET")
            .arg(format!("junk:{i}"))
            .arg(&value)
            .query::<()>(con)
            .is_err()
    })
}

/// `rediss://` to a plain port: the TLS handshake waits (the server reads the greeting as an
/// unfinished command) and calls timed out while the check said only "still connecting". Both
/// say what it most likely is.
#[tokio::test]
async fn a_tls_url_to_a_plain_port_says_what_is_wrong() {
    let server = RedisServer::start().expect("redis-server");
    let url = format!("rediss://127.0.0.1:{}/", server.port());
    let b = SharedBreaker::with_clock(
        "faults:tls-plain",
        fleet_config(),
        shared("a").build().unwrap(),
        Backend::single(&url).unwrap(),
        ManualClock::new(),
    )
    .unwrap();
    let err = b.check(Duration::from_millis(300)).await.unwrap_err();
    let text = err.to_string();
    println!("MEASURED rediss to a plain port, check after 300ms: {text}");
    assert!(text.contains("TLS"), "{text}");
    let p = b.acquire().await.expect("the local breaker decides");
    assert!(p.is_local());
    p.abandon().await;
    let last = b.last_redis_error().unwrap();
    assert!(
        last.contains("TLS") || last.contains("tls") || last.contains("certificate"),
        "{last}"
    );
    // Once the attempt gives up, calls fail at once with its reason.
    let err = b.check(5 * SECOND).await.unwrap_err().to_string();
    assert!(err.contains("TLS") || err.contains("tls"), "{err}");
}

/// A rolling upgrade from the previous library (`tripline_5`): replicas of the old release
/// call their library, replicas of this one theirs, over the same keys; the fleet is one
/// breaker (a trip by the old replicas holds for the new, and K probes fleet-wide).
#[tokio::test]
async fn a_rolling_upgrade_from_the_previous_library_keeps_one_breaker() {
    let server = RedisServer::start().expect("redis-server");
    let old = include_str!("fixtures/tripline_5.lua");
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(old)
        .query(&mut con)
        .unwrap();
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 4 })
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(10 * SECOND)
        .half_open_calls(2)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let new = replica_with(
        &server.url(),
        "faults:upgrade",
        config.clone(),
        shared("new").view_ttl(Duration::ZERO),
        &clock,
    );
    new.check(5 * SECOND).await.unwrap();
    let keys = new.keys().clone();
    // The old release's configuration: the same fields, without the two this release added.
    let cfg_new = server.cli(&["HGETALL", &keys.config]).unwrap();
    let cfg_new = cfg_new.lines().nth(1).unwrap().to_string();
    let cfg_old = cfg_new.rsplitn(3, ',').nth(2).unwrap().to_string();
    let old_version = "old-release";
    let _: redis::Value = redis::cmd("FCALL")
        .arg("tripline_5_config")
        .arg(6)
        .arg(&keys.all()[..])
        .arg(old_version)
        .arg(&cfg_old)
        .arg(3_600_000)
        .query(&mut con)
        .unwrap();
    let mut call = |f: &str, args: &[String]| -> Vec<String> {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(format!("tripline_5_{f}"))
            .arg(6)
            .arg(&keys.all()[..]);
        let now = (clock.now() / 1000).to_string();
        // No view: the old replica holds none (ARGV 5 of tripline_5).
        cmd.arg(&now)
            .arg("old")
            .arg(old_version)
            .arg("0")
            .arg("")
            .arg(args);
        let v: Vec<redis::Value> = cmd.query(&mut con).unwrap();
        v.iter()
            .map(|x| match x {
                redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                redis::Value::Int(i) => i.to_string(),
                other => format!("{other:?}"),
            })
            .collect()
    };
    // The old replica trips the breaker with four failures.
    for _ in 0..4 {
        let r = call("admit", &["-1".into(), "0".into(), "0".into()]);
        assert_eq!(r[0], "permit");
        let stamp = format!("{}/{}", r[2], r[6]);
        call(
            "record",
            &[stamp, "f".into(), "0".into(), "-1".into(), "0".into()],
        );
    }
    assert_eq!(new.acquire().await.unwrap_err().state(), State::Open);
    // At the deadline: two probes fleet-wide, old and new replicas together.
    clock.advance(10 * SECOND);
    let mut probes = 0;
    for _ in 0..3 {
        if call("admit", &["-1".into(), "7".into(), "0".into()])[0] == "probe" {
            probes += 1;
        }
        if new.acquire().await.is_ok_and(|p| {
            let probe = p.is_probe();
            std::mem::forget(p);
            probe
        }) {
            probes += 1;
        }
    }
    assert_eq!(probes, 2, "K = 2 probes across both libraries");
}

/// `allkeys-*` without a memory limit evicts nothing: the check warns instead of refusing.
#[tokio::test]
async fn the_check_takes_allkeys_without_a_memory_limit() {
    let server =
        RedisServer::start_with(&[("maxmemory-policy", "allkeys-lru")]).expect("redis-server");
    let b = replica(
        &server.url(),
        "faults:allkeys-nolimit",
        "a",
        &ManualClock::new(),
    );
    let health = b.check(5 * SECOND).await.expect("no limit, no eviction");
    assert!(
        health.warnings.iter().any(|w| w.contains("allkeys-lru")),
        "{health:?}"
    );
    server.cli(&["CONFIG", "SET", "maxmemory", "64mb"]).unwrap();
    assert!(matches!(
        b.check(5 * SECOND).await,
        Err(tripline_redis::CheckError::UnsafeEviction { .. })
    ));
}

/// With `loss_hold`, a replica that never saw the trip and reaches Redis first admits nothing
/// the fleet held Open: after an empty restart (the record started over) and after a failover
/// to a replica of Redis that lagged the trip (another server process), it holds its calls
/// until a remembering replica has brought the trip back. Where no replica remembers a trip
/// (a healthy breaker), calls flow again once the hold is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_after_a_loss_admits_nothing_a_remembering_replica_could_bring_back() {
    for failover in [false, true] {
        let mut primary = RedisServer::start().expect("redis-server");
        let standby = RedisServer::start().expect("redis-server");
        // The forgetful replica's address follows the primary; the remembering replica's is
        // held back (partitioned) until the forgetful one has called.
        let address = Proxy::start(primary.port()).unwrap();
        let held_back = Proxy::start(primary.port()).unwrap();
        let clock = ManualClock::new();
        let scope = "faults:hold";
        let hold = SECOND;
        let remembers = replica(&held_back.url(), scope, "remembers", &clock);
        let forgetful = replica_with(
            &address.url(),
            scope,
            fleet_config(),
            shared("forgetful").loss_hold(hold),
            &clock,
        );
        let p = forgetful.acquire().await.unwrap();
        p.record(Outcome::Success).await;
        if failover {
            let port = primary.port().to_string();
            standby.cli(&["REPLICAOF", "127.0.0.1", &port]).unwrap();
            let key = forgetful.keys().record.clone();
            while standby.cli(&["EXISTS", &key]).unwrap() != "1" {
                std::thread::sleep(Duration::from_millis(10));
            }
            standby.cli(&["REPLICAOF", "NO", "ONE"]).unwrap();
        }
        trip_by(&[&remembers]).await;
        held_back.partition();
        if failover {
            address.retarget(standby.port());
            held_back.retarget(standby.port());
            address.drop_connections();
            primary.kill();
        } else {
            primary.restart().expect("restart empty");
        }
        forgetful.check(10 * SECOND).await.unwrap();
        clock.advance(Duration::from_millis(200));
        let before = admitted(&[&forgetful], 10).await;
        let what = if failover {
            "failover to a lagging replica"
        } else {
            "empty restart"
        };
        println!(
            "MEASURED {what}, forgetful replica first, loss_hold {hold:?}: {before} of 10 admitted before a remembering replica reached Redis"
        );
        assert_eq!(before, 0, "{:?}", forgetful.metrics());
        assert!(forgetful.metrics().loss_holds > 0);
        held_back.heal();
        held_back.drop_connections();
        let observer = replica(&address.url(), scope, "observer", &clock);
        assert!(redis_holds(&observer, State::Open).await);
        clock.advance(hold);
        assert_eq!(admitted(&[&forgetful], 10).await, 0, "the trip holds");

        // A healthy breaker that Redis loses: held, then admitted again after the hold.
        let healthy = replica_with(
            &address.url(),
            "faults:hold:healthy",
            fleet_config(),
            shared("forgetful").loss_hold(hold),
            &clock,
        );
        let p = healthy.acquire().await.unwrap();
        p.record(Outcome::Success).await;
        if !failover {
            primary.restart().expect("restart empty");
            healthy.check(10 * SECOND).await.unwrap();
            assert_eq!(admitted(&[&healthy], 5).await, 0, "held after the loss");
            clock.advance(hold);
            assert_eq!(admitted(&[&healthy], 5).await, 5, "admitted after the hold");
        }
    }
}

/// The failure-count-in-time rule is the fleet's: failures from three replicas make up one
/// count (six within 20 s trip, whoever saw them), a failure older than the rule's time no
/// longer counts, and every replica sees the trip.
#[tokio::test]
async fn failures_from_many_replicas_make_up_one_failure_count() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 100 })
        .minimum_calls(100)
        .slow_call_rule(false)
        .failure_count(6, 20 * SECOND)
        .open_duration(15 * SECOND)
        .build()
        .unwrap();
    let fleet: Vec<Breaker> = ["a", "b", "c"]
        .iter()
        .map(|id| {
            replica_with(
                &server.url(),
                "faults:failure-count",
                config.clone(),
                shared(id).view_ttl(Duration::ZERO),
                &clock,
            )
        })
        .collect();
    let fail = |b: &Breaker| {
        let b = b.clone();
        async move {
            let p = b.acquire().await.expect("closed");
            p.record(Outcome::Failure).await
        }
    };
    // One failure 21 s before the others: it has aged out when they come.
    fail(&fleet[0]).await;
    clock.advance(21 * SECOND);
    for i in 0..5 {
        assert_eq!(fail(&fleet[i % 3]).await, Recorded::Counted);
        clock.advance(SECOND);
    }
    for b in &fleet {
        assert!(b.acquire().await.is_ok(), "five within 20 s: still closed");
    }
    fail(&fleet[2]).await;
    for b in &fleet {
        assert_eq!(b.acquire().await.unwrap_err().state(), State::Open);
    }
    let events = fleet[2].fleet_events(10).await.unwrap();
    assert!(
        events.iter().any(|e| e.reason == "failure-count"),
        "{events:?}"
    );
}
