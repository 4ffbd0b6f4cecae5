//! Promises of the shared breaker's docs, tried the way a careful user would.

use std::time::Duration;

use tripline::{BreakerConfig, ManualClock, Outcome, Recorded, State, WindowConfig};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig, SharedConfigBuilder, TimeSource};

type Breaker = SharedBreaker<ManualClock>;

/// Count window of 4, trips at 50 % once 4 calls are in, Open for `open`, one probe.
fn trip_config(open: Duration) -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 4 })
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(open)
        .half_open_calls(1)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// The functions on the manual clock, asking Redis on every acquire, with a generous timeout.
fn shared_builder(replica: &str) -> SharedConfigBuilder {
    SharedConfig::builder()
        .time_source(TimeSource::Local)
        .view_ttl(Duration::ZERO)
        .redis_timeout(Duration::from_secs(2))
        .replica_id(replica)
}

fn breaker(server: &RedisServer, scope: &str, replica: &str, clock: &ManualClock) -> Breaker {
    SharedBreaker::with_clock(
        scope,
        trip_config(Duration::from_secs(60)),
        shared_builder(replica).build().unwrap(),
        Backend::single(&server.url()).unwrap(),
        clock.clone(),
    )
    .unwrap()
}

async fn trip(b: &Breaker) {
    for _ in 0..4 {
        let p = b.acquire().await.unwrap();
        assert_eq!(p.record(Outcome::Failure).await, Recorded::Counted);
    }
    assert_eq!(b.acquire().await.unwrap_err().state(), State::Open);
    assert_eq!(b.last_known_state(), Some(State::Open));
}

/// Steps: a replica trips the breaker (it last saw it Open); Redis loses the record
/// (`FLUSHALL`, as a restart without persistence would); an operator then resets the breaker
/// from that replica, and `reset()` returns `Ok`.
///
/// Promised (crate docs, "Lost state"): "deleting a breaker's keys does not reset it while
/// replicas remember it: use [`SharedBreaker::reset`]", and `reset` is "Operator: back to
/// Closed with an empty window, fleet-wide". Observed: the reset's own reply (Closed, a new
/// origin) is taken for lost state, and the replica restores the Open breaker over the
/// operator's reset: the fleet stays Open for the full minute.
#[tokio::test]
async fn reset_after_redis_lost_the_record_resets_the_breaker() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let b = breaker(&server, "review:reset-after-loss", "r0", &clock);
    trip(&b).await;
    assert_eq!(server.cli(&["FLUSHALL"]).unwrap(), "OK");
    clock.advance(Duration::from_secs(1));

    b.reset().await.expect("reset");

    let other = breaker(&server, "review:reset-after-loss", "r1", &clock);
    let snap = other.refresh().await.unwrap();
    assert_eq!(
        snap.state,
        State::Closed,
        "the operator's reset was undone: {snap:?}"
    );
    assert!(b.acquire().await.is_ok(), "a reset breaker admits");
}

/// Steps (functions on the replica's manual clock): the record is created at 0 µs (epoch 0);
/// an operator forces it open and resets it (epoch 2); a call is admitted (its permit carries
/// epoch 2); Redis loses the record (`FLUSHALL`); 2 µs later another call recreates it; the
/// first call then fails.
///
/// Promised (crate docs, "Epochs and origins"): "A missing record reads as Closed and starts
/// over with an epoch taken from the clock (so permits of a lost record cannot match it)".
/// Observed: the new record's epoch is the clock's 2 µs, equal to the lost record's epoch 2
/// (an epoch from the clock plus one per transition), and the lost record's permit is counted
/// in the new window instead of being stale.
#[tokio::test]
async fn a_permit_of_a_lost_record_never_counts_in_its_successor() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let b = breaker(&server, "review:lost-epoch", "r0", &clock);
    b.acquire().await.unwrap().abandon().await;
    b.force_open().await.unwrap();
    b.reset().await.unwrap();
    let old = b.acquire().await.unwrap();
    assert_eq!(server.cli(&["FLUSHALL"]).unwrap(), "OK");
    clock.advance(Duration::from_micros(2));
    b.acquire().await.unwrap().abandon().await;
    let new_epoch = b.refresh().await.unwrap().epoch;

    assert_eq!(
        old.record(Outcome::Failure).await,
        Recorded::Stale,
        "a permit of epoch 2 counted in the new record (epoch {new_epoch})"
    );
    assert_eq!(b.refresh().await.unwrap().window.failures, 0);
}

/// Steps: two replicas see the breaker Open; Redis loses the record; an operator resets it
/// from a third replica that never saw it; the replicas that remember it Open call again.
///
/// Promised (crate docs, "Lost state"): a record that starts over at an operator's action is
/// the operator's word, from any replica: the replicas that remember the lost record Open
/// take it as it is and restore nothing. And a replica that did not see the reset still
/// restores a record that was simply lost (the protection the reset overrides stays on).
#[tokio::test]
async fn a_reset_after_the_loss_holds_for_replicas_that_remember_it_open() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let a = breaker(&server, "review:reset-any-replica", "a", &clock);
    let b = breaker(&server, "review:reset-any-replica", "b", &clock);
    trip(&a).await;
    assert_eq!(b.acquire().await.unwrap_err().state(), State::Open);
    assert_eq!(server.cli(&["FLUSHALL"]).unwrap(), "OK");
    clock.advance(Duration::from_secs(1));

    let operator = breaker(&server, "review:reset-any-replica", "ops", &clock);
    operator.reset().await.expect("reset");
    for r in [&a, &b] {
        r.acquire()
            .await
            .expect("the reset breaker admits")
            .abandon()
            .await;
    }
    assert_eq!(a.metrics().lost_state, 0);
    assert_eq!(b.metrics().lost_state, 0);
    assert_eq!(operator.refresh().await.unwrap().state, State::Closed);

    // Trip again, lose it again, and let an ordinary call recreate it: restored.
    trip(&a).await;
    assert_eq!(server.cli(&["FLUSHALL"]).unwrap(), "OK");
    clock.advance(Duration::from_secs(1));
    assert_eq!(a.acquire().await.unwrap_err().state(), State::Open);
    assert_eq!(a.metrics().lost_state, 1);
    assert_eq!(operator.refresh().await.unwrap().state, State::Open);
}

fn probes_config(k: u32) -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 4 })
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(60))
        .half_open_calls(k)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// Steps: a rolling reconfiguration lowers `half_open.permitted_calls` from 3 to 1. A replica
/// of the old configuration takes the three probes of a half-open round and abandons the
/// first (its lease is released, two stay held); a replica of the new configuration then
/// asks for a probe.
///
/// Promised (crate docs, "Probes"): "HalfOpen admits at most `half_open.permitted_calls`
/// probes across all replicas". Leases held above the new limit still count: the new replica
/// is refused while two probes are out, and the round ends cleanly (no lease left behind).
#[tokio::test]
async fn lowering_the_probe_count_mid_round_never_admits_more_probes() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let make = |k: u32, replica: &str| {
        SharedBreaker::with_clock(
            "review:probes-reconfigured",
            probes_config(k),
            shared_builder(replica).build().unwrap(),
            Backend::single(&server.url()).unwrap(),
            clock.clone(),
        )
        .unwrap()
    };
    let old = make(3, "old");
    trip(&old).await;
    clock.advance(Duration::from_secs(61));
    let mut probes = Vec::new();
    for _ in 0..3 {
        let p = old.acquire().await.expect("a probe of the old round");
        assert!(p.is_probe());
        probes.push(p);
    }
    probes.remove(0).abandon().await;

    let new = make(1, "new");
    let got = new.acquire().await;
    assert!(
        got.is_err(),
        "a fourth probe while two are out: {:?}",
        got.map(|p| p.is_probe())
    );
    // The two probes succeed; the old configuration wants a third result, the new one has
    // its one: the new replica's next call decides the round and is admitted, Closed.
    for p in probes {
        assert_eq!(p.record(Outcome::Success).await, Recorded::Counted);
    }
    assert_eq!(new.refresh().await.unwrap().state, State::HalfOpen);
    let p = new.acquire().await.expect("the round is decided: Closed");
    assert!(!p.is_probe());
    p.abandon().await;
    let snap = new.refresh().await.unwrap();
    assert_eq!(snap.state, State::Closed, "{snap:?}");
    assert_eq!(snap.probes_in_flight, 0);
}

/// Promised (crate docs, "Expiry"): "Starting a replica writes nothing." A replica that only
/// looks (a `refresh`, a `check`) at a breaker no call has used yet creates no key in Redis.
#[tokio::test]
async fn looking_at_an_unused_breaker_writes_nothing() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let b = breaker(&server, "review:read-only", "r0", &clock);
    let snap = b.refresh().await.unwrap();
    assert_eq!((snap.state, snap.window.calls), (State::Closed, 0));
    let _ = b.check(Duration::from_secs(2)).await.unwrap();
    // The configuration hash is written (a replica stores its configuration once); the
    // breaker's record, window and streams are not.
    let keys = server.cli(&["KEYS", "*review:read-only*"]).unwrap();
    assert!(
        keys.lines()
            .all(|k| k.trim().is_empty() || k.trim().ends_with(":c")),
        "keys after a look: {keys:?}"
    );
    // The first real call creates it.
    b.acquire().await.unwrap().record(Outcome::Success).await;
    assert!(
        server
            .cli(&["KEYS", "*review:read-only*"])
            .unwrap()
            .lines()
            .count()
            > 1
    );
}

/// Steps: the quorum rule is on (2 distinct replicas within a minute) and calls in flight count
/// as slow. The dependency hangs: replicas `a` and `b` each have two calls in flight that never
/// return. Three seconds later (past the 2 s slow-call duration) each replica makes one more
/// acquire, which reports its overdue calls: four calls in flight, all slow, from two distinct
/// replicas.
///
/// Promised (crate docs, "Calls in flight past the slow-call duration count as slow before they
/// finish, as in the in-process breaker") and ("Quorum"): "the breaker trips on the rules only
/// when failures or slow calls come from at least `quorum.replicas` distinct replicas within
/// `quorum.within`". Two replicas have slow calls: the quorum is met and the slow-call rule
/// trips. Observed: in-flight reports cast no vote, so the quorum never counts a hung
/// dependency seen fleet-wide: the breaker stays Closed (the same fleet without the quorum trips
/// at `b`'s acquire).
#[tokio::test]
async fn a_hung_dependency_seen_by_a_quorum_of_replicas_trips() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .window(WindowConfig::Count { size: 10 })
        .minimum_calls(4)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(Duration::from_secs(2))
        .count_in_flight_as_slow(true)
        .open_duration(Duration::from_secs(60))
        .build()
        .unwrap();
    let make = |replica: &str| {
        SharedBreaker::with_clock(
            "review:hung-quorum",
            config.clone(),
            shared_builder(replica)
                .quorum(tripline_redis::Quorum {
                    replicas: 2,
                    within: Duration::from_secs(60),
                })
                .build()
                .unwrap(),
            Backend::single(&server.url()).unwrap(),
            clock.clone(),
        )
        .unwrap()
    };
    let a = make("a");
    let b = make("b");
    let hung = vec![
        a.acquire().await.unwrap(),
        a.acquire().await.unwrap(),
        b.acquire().await.unwrap(),
        b.acquire().await.unwrap(),
    ];
    clock.advance(Duration::from_secs(3));
    let p = a
        .acquire()
        .await
        .expect("a's report alone is below minimum_calls");
    assert_eq!(a.refresh().await.unwrap().window.in_flight_slow, 2);
    p.abandon().await;
    let got = b.acquire().await;
    let snap = a.refresh().await.unwrap();
    assert!(
        got.is_err(),
        "four slow calls in flight on two replicas, quorum 2: still admitted, {snap:?}"
    );
    assert_eq!(snap.state, State::Open, "{snap:?}");
    drop(hung);
}

/// Steps (batching, the manual clock still, so nothing is due before `flush()`): count window
/// of 4, trips at 50 % once 4 calls are in, Open for 60 s, `open.max_retry_after` 5 min. A
/// replica records three failures (buffered), then a fourth failure carrying a `Retry-After`
/// of 120 s (sent at once), then flushes.
///
/// Promised (crate docs, "Batching"): "the functions apply them in order, so a trip happens at
/// the outcome that causes it", and [`SharedPermit::record_classified`]: "a `Retry-After` hint
/// lengthens the next open wait". In-process, the fourth failure trips the breaker and its
/// hint makes the wait 120 s. Observed: the hinted failure overtakes the three buffered ones
/// (it reaches Redis first, a window of one call); the trip then happens at the last buffered
/// failure, which carries no hint: Open for 60 s, the hint is lost.
#[tokio::test]
async fn a_retry_after_hint_behind_buffered_outcomes_lengthens_the_trip() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let b: Breaker = SharedBreaker::with_clock(
        "review:hint-overtakes",
        trip_config(Duration::from_secs(60)),
        shared_builder("r0")
            .batching(tripline_redis::Batching {
                flush_every: Duration::from_secs(10),
                max_batch: 256,
                success_wait: None,
            })
            .build()
            .unwrap(),
        Backend::single(&server.url()).unwrap(),
        clock.clone(),
    )
    .unwrap();
    for _ in 0..3 {
        let p = b.acquire().await.unwrap();
        assert_eq!(p.record(Outcome::Failure).await, Recorded::Counted);
    }
    let p = b.acquire().await.unwrap();
    let hinted =
        tripline::Classification::new(Outcome::Failure).with_retry_after(Duration::from_secs(120));
    p.record_classified(hinted).await;
    b.flush().await;

    let snap = b.refresh().await.unwrap();
    assert_eq!(snap.state, State::Open, "{snap:?}");
    let wait = Duration::from_micros(snap.open_until_micros - snap.now_micros);
    assert!(
        wait >= Duration::from_secs(120),
        "the trip's open wait ignores the Retry-After of the failure that caused it: {wait:?}"
    );
}

/// Steps (no batching): a replica records three failures (counted); Redis is paused for writes
/// (`CLIENT PAUSE ... WRITE`, a stall) while it records the fourth, which gives up after the
/// 100 ms Redis timeout; Redis resumes and runs the queued call: the breaker trips, and the
/// events stream names this replica as the one that performed the trip. The replica's next
/// acquire is rejected (it sees Open).
///
/// Promised (crate docs, "Events"): "Exactly one replica performs each transition; it
/// publishes it to its subscribers ([`SharedBreaker::subscribe`])", and the docs on Redis
/// stalls say only that "an outcome counted as lost can still land". Observed: the trip landed,
/// performed by this replica (`fleet_events` says so), but no replica ever publishes it: this
/// replica's subscribers receive nothing and its `transitions` counter stays 0.
#[tokio::test]
async fn a_trip_that_lands_after_the_timeout_is_still_published() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let b: Breaker = SharedBreaker::with_clock(
        "review:late-trip",
        trip_config(Duration::from_secs(60)),
        shared_builder("r0")
            .redis_timeout(Duration::from_millis(100))
            .build()
            .unwrap(),
        Backend::single(&server.url()).unwrap(),
        clock.clone(),
    )
    .unwrap();
    let mut events = b.subscribe();
    for _ in 0..3 {
        let p = b.acquire().await.unwrap();
        assert_eq!(p.record(Outcome::Failure).await, Recorded::Counted);
    }
    let p = b.acquire().await.unwrap();
    assert_eq!(
        server.cli(&["CLIENT", "PAUSE", "20000", "WRITE"]).unwrap(),
        "OK"
    );
    p.record(Outcome::Failure).await;
    assert_eq!(b.metrics().lost_records, 1, "{:?}", b.metrics());
    assert_eq!(server.cli(&["CLIENT", "UNPAUSE"]).unwrap(), "OK");
    assert_eq!(b.acquire().await.unwrap_err().state(), State::Open);

    let fleet = b.fleet_events(10).await.unwrap();
    assert_eq!(fleet.len(), 1, "{fleet:?}");
    assert_eq!(
        (fleet[0].to, fleet[0].replica.as_str()),
        (State::Open, "r0")
    );
    let published = events.try_recv();
    assert!(
        published.is_ok(),
        "the trip r0 performed was never published to its subscribers: {published:?}, {:?}",
        b.metrics()
    );
}

/// Steps (batching, `flush_every` 1 ms): replica `a` records a failure (buffered) and is then
/// dropped, as a replica shutting down drops its breaker; replica `b` reads the shared window,
/// up to 100 times, 10 ms of real time apart (a second in all: a thousand `flush_every`s).
///
/// Promised (crate docs, "Batching"): "A batch goes out ... when a failure or slow call in it
/// has waited `flush_every`", and the failure's `record` returned `Counted`; nothing in the
/// docs says outcomes are dropped with the breaker (nor counts them in `lost_records`).
/// Observed: the flusher task holds only a weak reference and quits when the breaker is
/// dropped: the buffered failure never reaches Redis.
#[tokio::test]
async fn a_dropped_breaker_still_sends_its_buffered_failures() {
    let server = RedisServer::start().expect("redis-server");
    let clock = ManualClock::new();
    let batching = |replica: &str| {
        SharedBreaker::with_clock(
            "review:dropped-batch",
            trip_config(Duration::from_secs(60)),
            shared_builder(replica)
                .batching(tripline_redis::Batching {
                    flush_every: Duration::from_millis(1),
                    max_batch: 256,
                    success_wait: None,
                })
                .build()
                .unwrap(),
            Backend::single(&server.url()).unwrap(),
            clock.clone(),
        )
        .unwrap()
    };
    let a: Breaker = batching("a");
    let b: Breaker = batching("b");
    let p = a.acquire().await.unwrap();
    assert_eq!(p.record(Outcome::Failure).await, Recorded::Counted);
    drop(a);

    let mut failures = 0;
    for _ in 0..100 {
        failures = b.refresh().await.unwrap().window.failures;
        if failures == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        failures, 1,
        "the dropped replica's buffered failure never reached Redis"
    );
}
