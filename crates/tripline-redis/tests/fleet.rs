//! Many replicas, one breaker: probes, transitions, epochs, leases, clocks and the quorum
//! across clients and processes, against a real redis-server.

use std::process::Command;
use std::time::Duration;

use tripline::{BreakerConfig, Clock, ManualClock, Outcome, Recorded, State, WindowConfig};
use tripline_redis::server::{RedisCluster, RedisServer};
use tripline_redis::{
    Backend, Quorum, SharedBreaker, SharedConfig, SharedConfigBuilder, TimeSource,
};

const SECOND: Duration = Duration::from_secs(1);

fn config(k: u32) -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 4 })
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(10 * SECOND)
        .half_open_calls(k)
        .probe_lease(5 * SECOND)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// The script on the manual clock, asking Redis on every acquire, with a generous timeout.
fn shared(replica: &str) -> SharedConfigBuilder {
    SharedConfig::builder()
        .time_source(TimeSource::Local)
        .view_ttl(Duration::ZERO)
        .redis_timeout(2 * SECOND)
        .replica_id(replica)
}

/// Where the fleet's Redis is: one server, or a cluster (given by its nodes' urls).
#[derive(Clone, Copy)]
enum Target<'a> {
    Single(&'a str),
    Cluster(&'a [String]),
}

fn backend(target: Target<'_>) -> Backend {
    match target {
        Target::Single(url) => Backend::single(url).unwrap(),
        Target::Cluster(urls) => Backend::cluster(urls).unwrap(),
    }
}

fn replica(
    url: &str,
    scope: &str,
    id: &str,
    config: BreakerConfig,
    clock: &ManualClock,
) -> SharedBreaker<ManualClock> {
    replica_on(Target::Single(url), scope, id, config, clock)
}

fn replica_on(
    target: Target<'_>,
    scope: &str,
    id: &str,
    config: BreakerConfig,
    clock: &ManualClock,
) -> SharedBreaker<ManualClock> {
    replica_with(target, scope, config, clock, shared(id))
}

fn replica_with(
    target: Target<'_>,
    scope: &str,
    config: BreakerConfig,
    clock: &ManualClock,
    shared: SharedConfigBuilder,
) -> SharedBreaker<ManualClock> {
    SharedBreaker::with_clock(
        scope,
        config,
        shared.build().unwrap(),
        backend(target),
        clock.clone(),
    )
    .unwrap()
}

async fn trip(b: &SharedBreaker<ManualClock>) {
    for _ in 0..4 {
        let p = b.acquire().await.unwrap();
        assert_eq!(p.record(Outcome::Failure).await, Recorded::Counted);
    }
    assert_eq!(b.refresh().await.unwrap().state, State::Open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_k_probes_and_one_transition_fleet_wide() {
    let server = RedisServer::start().unwrap();
    k_probes_and_one_transition(Target::Single(&server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_k_probes_and_one_transition_on_a_cluster() {
    let cluster = RedisCluster::start(3).unwrap();
    let urls = cluster.urls();
    k_probes_and_one_transition(Target::Cluster(&urls)).await;
    stale_results_tokens_and_crashed_probers_on(Target::Cluster(&urls)).await;
}

async fn k_probes_and_one_transition(target: Target<'_>) {
    let clock = ManualClock::new();
    let fleet: Vec<_> = (0..24)
        .map(|i| replica_on(target, "dep:k", &format!("r{i}"), config(3), &clock))
        .collect();
    let mut subscriptions: Vec<_> = fleet.iter().map(|b| b.subscribe()).collect();
    trip(&fleet[0]).await;
    let open_epoch = fleet[0].refresh().await.unwrap().epoch;

    clock.advance(10 * SECOND);
    let mut tasks = Vec::new();
    for b in &fleet {
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let mut held = Vec::new();
            for _ in 0..5 {
                if let Ok(p) = b.acquire().await {
                    assert!(p.is_probe());
                    held.push(p);
                }
            }
            held
        }));
    }
    let mut probes = Vec::new();
    for t in tasks {
        probes.extend(t.await.unwrap());
    }
    assert_eq!(
        probes.len(),
        3,
        "24 replicas x 5 acquires admit exactly K probes"
    );

    let snap = fleet[5].refresh().await.unwrap();
    assert_eq!(snap.state, State::HalfOpen);
    assert_eq!(snap.probes_in_flight, 3);
    assert_eq!(snap.epoch, open_epoch, "Open -> HalfOpen keeps the epoch");

    // One replica performed Open -> HalfOpen; the stream has it once.
    let mut half_opens = 0;
    for rx in &mut subscriptions {
        while let Ok(t) = rx.try_recv() {
            if t.to == State::HalfOpen {
                half_opens += 1;
                assert_eq!(t.epoch, open_epoch);
            }
        }
    }
    assert_eq!(half_opens, 1);
    let events = fleet[0].fleet_events(100).await.unwrap();
    let in_stream: Vec<_> = events
        .iter()
        .rev()
        .map(|e| (e.from, e.to, e.epoch))
        .collect();
    assert_eq!(
        in_stream,
        vec![
            (State::Closed, State::Open, open_epoch),
            (State::Open, State::HalfOpen, open_epoch),
        ]
    );

    // The probes succeed: Closed, the epoch moves on (past the last, and never below the
    // functions' clock).
    for p in probes {
        assert_eq!(p.record(Outcome::Success).await, Recorded::Counted);
    }
    let snap = fleet[9].refresh().await.unwrap();
    assert_eq!(snap.state, State::Closed);
    assert_eq!(snap.epoch, (open_epoch + 1).max(clock.now() / 1000));
}

/// Not run by itself: `exactly_k_probes_across_processes` starts it in child processes.
#[tokio::test]
#[ignore = "a child process of exactly_k_probes_across_processes"]
async fn child_claims_probes() {
    let Ok(url) = std::env::var("TRIPLINE_FLEET_URL") else {
        return;
    };
    let id = std::env::var("TRIPLINE_FLEET_ID").unwrap();
    let clock = ManualClock::new();
    clock.advance(10 * SECOND);
    let b = replica(&url, "dep:processes", &id, config(2), &clock);
    let mut held = Vec::new();
    for _ in 0..20 {
        if let Ok(p) = b.acquire().await {
            held.push(p);
        }
    }
    println!("PROBES={}", held.len());
    // Held until exit: no release.
    std::mem::forget(held);
}

#[tokio::test]
async fn exactly_k_probes_across_processes() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let b = replica(&server.url(), "dep:processes", "parent", config(2), &clock);
    trip(&b).await;

    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|i| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "child_claims_probes",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("TRIPLINE_FLEET_URL", server.url())
                .env("TRIPLINE_FLEET_ID", format!("child{i}"))
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut total = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let n: usize = text
            .lines()
            .find_map(|l| l.split("PROBES=").nth(1))
            .unwrap_or_else(|| panic!("no PROBES line in {text}"))
            .parse()
            .unwrap();
        total += n;
    }
    assert_eq!(
        total, 2,
        "4 processes x 20 acquires admit exactly K = 2 probes"
    );
    let events = b.fleet_events(10).await.unwrap();
    let half_opens = events.iter().filter(|e| e.to == State::HalfOpen).count();
    assert_eq!(half_opens, 1);
}

#[tokio::test]
async fn stale_results_tokens_and_crashed_probers() {
    let server = RedisServer::start().unwrap();
    stale_results_tokens_and_crashed_probers_on(Target::Single(&server.url())).await;
}

async fn stale_results_tokens_and_crashed_probers_on(target: Target<'_>) {
    let clock = ManualClock::new();
    let a = replica_on(target, "dep:leases", "a", config(1), &clock);
    let b = replica_on(target, "dep:leases", "b", config(1), &clock);

    // A's call is in flight when B's failures trip the breaker: A's result is stale.
    let late = a.acquire().await.unwrap();
    trip(&b).await;
    assert_eq!(late.record(Outcome::Success).await, Recorded::Stale);
    assert_eq!(a.metrics().stale_results, 1);

    // A claims the only probe and then goes silent (a crashed prober).
    clock.advance(10 * SECOND);
    let crashed = a.acquire().await.unwrap();
    assert!(crashed.is_probe());
    clock.advance(4999 * Duration::from_millis(1));
    let r = b.acquire().await.unwrap_err();
    assert_eq!(r.state(), State::HalfOpen);
    assert_eq!(r.retry_after(), Some(Duration::from_millis(1)));
    // At its deadline, and not before, the lease is reclaimed.
    clock.advance(Duration::from_millis(1));
    let p = b.acquire().await.unwrap();
    assert!(p.is_probe());
    assert_eq!(b.metrics().expired_probes, 1);
    // The crashed prober's token is no longer the lease's.
    assert_eq!(crashed.record(Outcome::Success).await, Recorded::Stale);
    assert_eq!(b.refresh().await.unwrap().state, State::HalfOpen);
    assert_eq!(p.record(Outcome::Success).await, Recorded::Counted);
    assert_eq!(a.refresh().await.unwrap().state, State::Closed);
}

#[tokio::test]
async fn an_abandoned_probe_releases_its_lease() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let a = replica(&server.url(), "dep:release", "a", config(1), &clock);
    let b = replica(&server.url(), "dep:release", "b", config(1), &clock);
    trip(&a).await;
    clock.advance(10 * SECOND);
    let p = a.acquire().await.unwrap();
    assert!(b.acquire().await.is_err());
    p.abandon().await;
    assert!(b.acquire().await.unwrap().is_probe());
}

#[tokio::test]
async fn replicas_with_skewed_clocks_agree_on_timing() {
    let server = RedisServer::start().unwrap();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 4 })
        .minimum_calls(4)
        .open_duration(60 * SECOND)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let behind = ManualClock::new();
    let ahead = ManualClock::new();
    ahead.advance(3600 * SECOND);
    let url = server.url();
    let make = |id: &str, clock: &ManualClock, view_ttl: Duration| {
        let shared = shared(id).time_source(TimeSource::Redis).view_ttl(view_ttl);
        replica_with(
            Target::Single(&url),
            "dep:skew",
            config.clone(),
            clock,
            shared,
        )
    };
    let a = make("behind", &behind, Duration::ZERO);
    let b = make("ahead", &ahead, Duration::from_secs(1));
    for _ in 0..4 {
        a.acquire().await.unwrap().record(Outcome::Failure).await;
    }
    // Both see the same deadline, from Redis's clock: a full minute (less the few
    // milliseconds this test takes), whatever their own clocks say.
    let near_a_minute = |d: Option<Duration>| {
        let d = d.unwrap();
        d <= 60 * SECOND && d > 50 * SECOND
    };
    assert!(near_a_minute(a.acquire().await.unwrap_err().retry_after()));
    assert!(near_a_minute(b.acquire().await.unwrap_err().retry_after()));
    // The replica whose clock runs an hour ahead jumps another two hours: its view is old, it
    // asks Redis, and Redis says the breaker is still open.
    ahead.advance(7200 * SECOND);
    let r = b.acquire().await.unwrap_err();
    assert_eq!(r.state(), State::Open);
    assert!(near_a_minute(r.retry_after()));
}

#[tokio::test]
async fn quorum_needs_failures_from_distinct_replicas() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let url = server.url();
    let quorum = |id: &str| {
        let shared = shared(id).quorum(Quorum {
            replicas: 2,
            within: 30 * SECOND,
        });
        replica_with(
            Target::Single(&url),
            "dep:quorum",
            config(1),
            &clock,
            shared,
        )
    };
    let broken = quorum("broken-network");
    let healthy = quorum("healthy");
    for _ in 0..20 {
        let p = broken.acquire().await.unwrap();
        p.record(Outcome::Failure).await;
    }
    assert_eq!(healthy.refresh().await.unwrap().state, State::Closed);
    // A failure from a second replica, within the quorum window, makes the quorum.
    let p = healthy.acquire().await.unwrap();
    p.record(Outcome::Failure).await;
    assert_eq!(healthy.refresh().await.unwrap().state, State::Open);

    // Votes expire: after a reset, a failure 31 s after the other replica's does not count.
    healthy.reset().await.unwrap();
    for _ in 0..4 {
        broken
            .acquire()
            .await
            .unwrap()
            .record(Outcome::Failure)
            .await;
    }
    clock.advance(31 * SECOND);
    healthy
        .acquire()
        .await
        .unwrap()
        .record(Outcome::Failure)
        .await;
    assert_eq!(healthy.refresh().await.unwrap().state, State::Closed);
}

#[tokio::test]
async fn calls_in_flight_count_across_replicas() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 10 })
        .minimum_calls(4)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(2 * SECOND)
        .count_in_flight_as_slow(true)
        .build()
        .unwrap();
    let a = replica(&server.url(), "dep:hung", "a", config.clone(), &clock);
    let b = replica(&server.url(), "dep:hung", "b", config, &clock);
    // Each replica has two calls hanging: neither alone reaches minimum_calls = 4.
    let hung: Vec<_> = vec![
        a.acquire().await.unwrap(),
        a.acquire().await.unwrap(),
        b.acquire().await.unwrap(),
        b.acquire().await.unwrap(),
    ];
    clock.advance(3 * SECOND);
    let p = a.acquire().await.unwrap();
    assert_eq!(a.refresh().await.unwrap().window.in_flight_slow, 2);
    p.abandon().await;
    // B's report completes the picture: four overdue calls, all slow, the breaker trips.
    let r = b.acquire().await.unwrap_err();
    assert_eq!(r.state(), State::Open);
    drop(hung);
}

#[tokio::test]
async fn a_lost_record_reads_closed_and_a_new_replica_resets_nothing() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let a = replica(&server.url(), "dep:lost", "a", config(1), &clock);
    trip(&a).await;
    // A replica starting now joins the open breaker: starting writes nothing.
    let late_joiner = replica(&server.url(), "dep:lost", "new", config(1), &clock);
    assert_eq!(
        late_joiner.acquire().await.unwrap_err().state(),
        State::Open
    );
    assert_eq!(a.refresh().await.unwrap().state, State::Open);

    // The record is lost (flushed, failed over without it): it reads as Closed and starts
    // over; a permit of the lost record's epoch cannot count in the new one.
    clock.advance(SECOND);
    let old = {
        a.reset().await.unwrap();
        a.acquire().await.unwrap()
    };
    // Every replica has seen the reset (a replica that last saw the breaker Open would bring
    // the Open state back: see the resilience tests).
    assert_eq!(late_joiner.refresh().await.unwrap().state, State::Closed);
    server.cli(&["DEL", &a.keys().record]).unwrap();
    clock.advance(SECOND);
    let p = late_joiner.acquire().await.unwrap();
    assert_eq!(late_joiner.refresh().await.unwrap().state, State::Closed);
    assert_eq!(old.record(Outcome::Failure).await, Recorded::Stale);
    assert_eq!(p.record(Outcome::Failure).await, Recorded::Counted);
}

#[tokio::test]
async fn the_script_clock_never_goes_backwards() {
    let server = RedisServer::start().unwrap();
    let ahead = ManualClock::new();
    ahead.advance(10 * SECOND);
    let behind = ManualClock::new();
    let a = replica(&server.url(), "dep:clamp", "ahead", config(1), &ahead);
    let b = replica(&server.url(), "dep:clamp", "behind", config(1), &behind);
    // Tripped at 10 s by the clock that runs ahead: open until 20 s.
    trip(&a).await;
    // A caller whose clock says 0 s is told 10 s, not 20: the script's clock stays at 10 s.
    let r = b.acquire().await.unwrap_err();
    assert_eq!(r.retry_after(), Some(10 * SECOND));
    assert_eq!(b.refresh().await.unwrap().now_micros, 10_000_000);
}

#[tokio::test]
async fn calls_from_an_ended_epoch_do_not_retrip_a_closed_breaker() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 10 })
        .minimum_calls(1)
        .failure_rate_threshold(50.0)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(2 * SECOND)
        .count_in_flight_as_slow(true)
        .open_duration(10 * SECOND)
        .half_open_calls(1)
        .build()
        .unwrap();
    // A decides from its view for an hour and hears nothing while B trips and recovers.
    let a = replica_with(
        Target::Single(&server.url()),
        "dep:ended-epoch",
        config.clone(),
        &clock,
        shared("a").view_ttl(Duration::from_secs(3600)),
    );
    let b = replica(&server.url(), "dep:ended-epoch", "b", config, &clock);
    let hung = a.acquire().await.unwrap();
    let p = b.acquire().await.unwrap();
    p.record(Outcome::Failure).await;
    clock.advance(10 * SECOND);
    let probe = b.acquire().await.unwrap();
    assert!(probe.is_probe());
    probe.record(Outcome::Success).await;
    assert_eq!(b.refresh().await.unwrap().state, State::Closed);

    // A's hung call belongs to the first Closed epoch: its periodic check reports it, and the
    // new epoch does not count it.
    let p = a.acquire().await.unwrap();
    let snap = b.refresh().await.unwrap();
    assert_eq!(snap.state, State::Closed);
    assert_eq!(snap.window.in_flight_slow, 0);
    drop((p, hung));
}

#[tokio::test]
async fn the_quorum_counts_slow_calls_too() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 4 })
        .minimum_calls(4)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(SECOND)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let url = server.url();
    let make = |id: &str| {
        let shared = shared(id).quorum(Quorum {
            replicas: 2,
            within: 60 * SECOND,
        });
        replica_with(
            Target::Single(&url),
            "dep:slow-quorum",
            config.clone(),
            &clock,
            shared,
        )
    };
    let (a, b) = (make("a"), make("b"));
    // Two slow (but successful) calls from each replica: the dependency hangs, nothing fails.
    let calls = vec![
        a.acquire().await.unwrap(),
        a.acquire().await.unwrap(),
        b.acquire().await.unwrap(),
        b.acquire().await.unwrap(),
    ];
    clock.advance(2 * SECOND);
    for p in calls {
        p.record(Outcome::Success).await;
    }
    assert_eq!(a.refresh().await.unwrap().state, State::Open);
}

/// No replica admits a call while any replica's last view of the breaker is Open and
/// unexpired: not while Redis is killed, not when it comes back empty, not while it is paused.
/// At the deadline the fleet probes with K probes, as one breaker.
#[tokio::test]
async fn no_admit_while_any_replicas_view_is_open() {
    let mut server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let url = server.url();
    let fleet: Vec<_> = (0..6)
        .map(|i| {
            replica_with(
                Target::Single(&url),
                "dep:views",
                config(1),
                &clock,
                shared(&format!("r{i}")).redis_timeout(Duration::from_millis(200)),
            )
        })
        .collect();
    trip(&fleet[0]).await;
    let open_until = fleet[0].refresh().await.unwrap().open_until_micros;
    for b in &fleet {
        assert!(b.acquire().await.is_err());
    }
    // Whether some replica's last view is Open with a deadline still ahead (manual clock).
    let any_open_view = |fleet: &[SharedBreaker<ManualClock>]| {
        clock.now() / 1000 < open_until
            && fleet
                .iter()
                .any(|b| b.last_known_state() == Some(State::Open))
    };
    let assert_none_admitted = |phase: &'static str| {
        let fleet = &fleet;
        async move {
            assert!(
                any_open_view(fleet),
                "{phase}: no replica holds an Open view"
            );
            for b in fleet {
                for i in 0..5 {
                    if let Ok(p) = b.acquire().await {
                        panic!(
                            "{phase}: {} admitted call {i} (probe {}, local {}) while a view is Open",
                            b.replica(),
                            p.is_probe(),
                            p.is_local()
                        );
                    }
                }
            }
        }
    };
    assert_none_admitted("Redis up").await;
    clock.advance(SECOND);
    server.kill();
    assert_none_admitted("Redis killed").await;
    clock.advance(SECOND);
    server.restart().unwrap();
    for b in &fleet {
        b.check(10 * SECOND).await.unwrap();
    }
    assert_none_admitted("Redis back, empty").await;
    clock.advance(SECOND);
    server.cli(&["CLIENT", "PAUSE", "300", "WRITE"]).unwrap();
    assert_none_admitted("Redis paused").await;
    clock.advance(6 * SECOND + Duration::from_millis(999));
    assert_none_admitted("just before the deadline").await;
    // The deadline: one probe, fleet-wide, decided by Redis.
    clock.advance(Duration::from_millis(1));
    let mut probes = Vec::new();
    for b in &fleet {
        b.check(10 * SECOND).await.unwrap();
        for _ in 0..5 {
            if let Ok(p) = b.acquire().await {
                assert!(p.is_probe() && !p.is_local());
                probes.push(p);
            }
        }
    }
    assert_eq!(probes.len(), 1);
    let restores: u64 = fleet.iter().map(|b| b.metrics().restores).sum();
    assert_eq!(restores, 1);
}
