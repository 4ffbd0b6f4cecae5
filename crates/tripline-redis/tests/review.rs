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
