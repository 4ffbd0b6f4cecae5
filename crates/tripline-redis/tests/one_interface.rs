//! The in-process breaker and the shared one behave the same through the one breaker
//! interface (`tripline::Breaker`): the same generic function drives both, the shared one on a
//! real `redis-server`.

use std::collections::BTreeMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tripline::observe::BreakerMetrics;

use tripline::{
    Breaker, BreakerConfig, BreakerPermit, CircuitBreaker, ManualClock, OperatorError, Outcome,
    Reach, Recorded, State, WindowConfig,
};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig, TimeSource};

fn config() -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 4 })
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(60))
        .half_open_calls(2)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// A shared breaker on a manual clock that asks Redis at every acquire (`view_ttl = 0`), so
/// each decision is the fleet's.
fn shared(url: &str, scope: &str, replica: &str) -> SharedBreaker<ManualClock> {
    let shared = SharedConfig::builder()
        .time_source(TimeSource::Local)
        .view_ttl(Duration::ZERO)
        // Generous: a loaded test machine must not push a call into the fallback.
        .redis_timeout(Duration::from_secs(1))
        .replica_id(replica)
        .build()
        .unwrap();
    SharedBreaker::with_clock(
        scope,
        config(),
        shared,
        Backend::single(url).unwrap(),
        ManualClock::new(),
    )
    .unwrap()
}

/// Everything a caller, a policy or an operator does with a breaker, through the interface
/// alone.
async fn behaves_as_a_breaker<B: Breaker>(b: &B) {
    assert_eq!(b.state(), State::Closed);

    // Admit and record a success.
    let p = b.acquire().await.expect("a closed breaker admits");
    assert!(!p.is_probe());
    assert_eq!(p.record(Outcome::Success).await, Recorded::Counted);
    let m = b.metrics();
    assert_eq!(
        (m.state, m.successful_calls, m.failed_calls),
        (State::Closed, 1, 0)
    );

    // A permit dropped without a result is abandoned: neither a success nor a failure.
    drop(b.acquire().await.unwrap());
    let m = b.metrics();
    assert_eq!(m.abandoned_permits, 1);
    assert_eq!((m.successful_calls, m.failed_calls), (1, 0));
    assert_eq!(b.state(), State::Closed);

    // Failures trip it: S F F F is 75 % of the minimum four calls.
    for i in 0..3 {
        let p = b.acquire().await.expect("closed until the fourth call");
        assert_eq!(p.record(Outcome::Failure).await, Recorded::Counted);
        let expected = if i < 2 { State::Closed } else { State::Open };
        assert_eq!(b.state(), expected, "after failure {}", i + 1);
    }
    let refused = b.acquire().await.unwrap_err();
    assert_eq!(refused.state(), State::Open);
    assert!(refused.retry_after().is_some());
    let m = b.metrics();
    assert_eq!((m.state, m.failed_calls), (State::Open, 3));
    assert_eq!(m.rejections.open, 1);
    assert!(m.generation > 0, "a transition moved the generation");

    // The operator skips the rest of the wait; the probes' results close it.
    b.transition_to(State::HalfOpen).await.unwrap();
    assert_eq!(b.state(), State::HalfOpen);
    let first = b.acquire().await.unwrap();
    let second = b.acquire().await.unwrap();
    assert!(first.is_probe() && second.is_probe());
    assert_eq!(b.acquire().await.unwrap_err().state(), State::HalfOpen);
    assert_eq!(first.record(Outcome::Success).await, Recorded::Counted);
    assert_eq!(second.record(Outcome::Success).await, Recorded::Counted);
    assert_eq!(b.state(), State::Closed);
    let m = b.metrics();
    assert_eq!(
        (m.successful_calls, m.failed_calls),
        (3, 3),
        "the probes' results count"
    );
    assert_eq!(m.rejections.half_open, 1);

    // A missing edge is refused, and says so.
    match b.transition_to(State::HalfOpen).await {
        Err(OperatorError::Refused(e)) => {
            assert!(e.to_string().contains("from closed to half-open"), "{e}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }

    // The kill switch holds until a reset.
    b.force_open().await.unwrap();
    assert_eq!(b.state(), State::ForcedOpen);
    assert_eq!(b.acquire().await.unwrap_err().state(), State::ForcedOpen);
    assert_eq!(b.metrics().rejections.forced_open, 1);
    b.reset().await.unwrap();
    assert_eq!(b.state(), State::Closed);
    let m = b.metrics();
    assert_eq!(
        (m.state, m.window.calls),
        (State::Closed, 0),
        "a reset empties the window"
    );

    // A permit admitted before a transition records nothing.
    let p = b.acquire().await.unwrap();
    b.reset().await.unwrap();
    assert_eq!(p.record(Outcome::Failure).await, Recorded::Stale);
    assert_eq!(b.metrics().stale_results, 1);

    // A clone is the same breaker.
    assert!(b.same_breaker(&b.clone()));
}

#[tokio::test(flavor = "current_thread")]
async fn the_in_process_breaker_behaves_as_a_breaker() {
    let b = CircuitBreaker::with_clock("catalog", config(), ManualClock::new());
    assert_eq!(b.reach(), Reach::Process);
    const { assert!(<CircuitBreaker<ManualClock> as Breaker>::ADMITS_AT_ONCE) };
    behaves_as_a_breaker(&b).await;
}

#[tokio::test(flavor = "current_thread")]
async fn the_shared_breaker_behaves_as_a_breaker() {
    let server = RedisServer::start().unwrap();
    let b = shared(&server.url(), "dep:catalog", "replica-a");
    assert_eq!(b.reach(), Reach::Fleet);
    const { assert!(!<SharedBreaker<ManualClock> as Breaker>::ADMITS_AT_ONCE) };
    assert!(b.try_acquire_now().is_none());
    behaves_as_a_breaker(&b).await;
}

/// The interface's operator moves on one replica are the fleet's: another replica of the same
/// scope refuses at once.
#[tokio::test(flavor = "current_thread")]
async fn a_kill_switch_thrown_through_the_interface_holds_fleet_wide() {
    let server = RedisServer::start().unwrap();
    let a = shared(&server.url(), "dep:payments", "replica-a");
    let b = shared(&server.url(), "dep:payments", "replica-b");
    b.acquire().await.unwrap().record(Outcome::Success).await;
    Breaker::force_open(&a).await.unwrap();
    let refused = Breaker::acquire(&b).await.unwrap_err();
    assert_eq!(refused.state(), State::ForcedOpen);
    assert_eq!(Breaker::state(&b), State::ForcedOpen);
    Breaker::reset(&b).await.unwrap();
    assert!(Breaker::acquire(&a).await.is_ok());
}

/// An operator's move that cannot reach Redis changes nothing and says why.
#[tokio::test(flavor = "current_thread")]
async fn an_operator_move_that_cannot_reach_redis_is_unreachable() {
    let mut server = RedisServer::start().unwrap();
    let url = server.url();
    server.kill();
    let b = shared(&url, "dep:gone", "replica-a");
    match Breaker::force_open(&b).await {
        Err(OperatorError::Unreachable(why)) => assert!(!why.is_empty()),
        other => panic!("expected unreachable, got {other:?}"),
    }
}

/// Every series a recorder holds, by name and labels, with its value.
fn series(recorder: &DebuggingRecorder) -> BTreeMap<String, String> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let k = key.key();
            let mut labels: Vec<String> = k
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            let v = match value {
                DebugValue::Counter(n) => n.to_string(),
                DebugValue::Gauge(g) => g.to_string(),
                DebugValue::Histogram(h) => format!("{} samples", h.len()),
            };
            (format!("{}{{{}}}", k.name(), labels.join(",")), v)
        })
        .collect()
}

/// A shared breaker exports the series an in-process one does: the same names and labels, and
/// for the same calls the same counts of calls, refusals, stale results and abandoned permits,
/// and the same state.
#[tokio::test(flavor = "current_thread")]
async fn a_shared_breaker_exports_the_series_an_in_process_one_does() {
    let server = RedisServer::start().unwrap();
    let local = CircuitBreaker::with_clock("catalog", config(), ManualClock::new());
    let fleet = shared(&server.url(), "catalog", "replica-a");
    let (local_rec, fleet_rec) = (DebuggingRecorder::new(), DebuggingRecorder::new());
    let local_metrics =
        metrics::with_local_recorder(&local_rec, || BreakerMetrics::new(&local, Vec::new()));
    let fleet_metrics = metrics::with_local_recorder(&fleet_rec, || {
        BreakerMetrics::for_breaker(&fleet, Vec::new())
    });
    behaves_as_a_breaker(&local).await;
    behaves_as_a_breaker(&fleet).await;
    local_metrics.update(&local);
    fleet_metrics.update_from(&fleet);
    let (local_series, fleet_series) = (series(&local_rec), series(&fleet_rec));
    assert_eq!(
        local_series.keys().collect::<Vec<_>>(),
        fleet_series.keys().collect::<Vec<_>>(),
        "the same names and labels"
    );
    assert!(
        local_series.contains_key("tripline_breaker_calls_total{breaker=catalog,outcome=failure}")
    );
    for (name, value) in &local_series {
        let compared = [
            "calls_total",
            "rejected_calls_total",
            "stale_results_total",
            "abandoned_permits_total",
            "breaker_state{",
        ];
        if compared.iter().any(|c| name.contains(c)) {
            assert_eq!(&fleet_series[name], value, "{name}");
        }
    }
    assert_eq!(
        fleet_series["tripline_breaker_rejected_calls_total{breaker=catalog,state=forced-open}"],
        "1"
    );
    assert_eq!(
        fleet_series["tripline_breaker_state{breaker=catalog,state=closed}"],
        "1"
    );
}

/// With hashed scopes the shared breaker's series carry the hash, never the scope.
#[tokio::test(flavor = "current_thread")]
async fn a_hashed_scope_stays_out_of_the_series() {
    let server = RedisServer::start().unwrap();
    let shared_config = SharedConfig::builder()
        .time_source(TimeSource::Local)
        .redis_timeout(Duration::from_secs(1))
        .hash_scopes(b"a secret of at least sixteen bytes")
        .build()
        .unwrap();
    let b = SharedBreaker::with_clock(
        "tenant:alice@example.com",
        config(),
        shared_config,
        Backend::single(&server.url()).unwrap(),
        ManualClock::new(),
    )
    .unwrap();
    let recorder = DebuggingRecorder::new();
    let m = metrics::with_local_recorder(&recorder, || BreakerMetrics::for_breaker(&b, Vec::new()));
    b.acquire().await.unwrap().record(Outcome::Success).await;
    m.update_from(&b);
    let names = series(&recorder);
    assert!(!names.is_empty());
    for name in names.keys() {
        assert!(!name.contains("alice"), "{name}");
        assert!(name.contains(&format!("breaker={}", b.label())), "{name}");
    }
}
