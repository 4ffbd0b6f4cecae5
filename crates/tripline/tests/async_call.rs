//! The async call path on paused tokio time: the timeout sits inside the breaker and counts as
//! a failure, a cancelled call abandons its permit, the fallback sees the rejection.
#![cfg(feature = "tokio")]

use std::time::Duration;

use tripline::{BreakerConfig, CallError, CircuitBreaker, State, TokioClock};

fn vendor_breaker() -> CircuitBreaker<TokioClock> {
    // The GymFolks team's tuned breaker.
    let config = BreakerConfig::builder()
        .count_window(20)
        .minimum_calls(10)
        .failure_rate_threshold(50.0)
        .slow_call_rate_threshold(30.0)
        .slow_call_duration(Duration::from_secs(2))
        .open_duration(Duration::from_secs(15))
        .half_open_calls(3)
        .build()
        .unwrap();
    CircuitBreaker::with_clock("exercise-catalog", config, TokioClock::new())
}

async fn vendor(latency: Duration, fail: bool) -> Result<&'static str, &'static str> {
    tokio::time::sleep(latency).await;
    if fail { Err("503") } else { Ok("catalog") }
}

#[tokio::test(start_paused = true)]
async fn timeouts_inside_the_breaker_trip_it() {
    let b = vendor_breaker();
    for _ in 0..10 {
        let r = b
            .call_async(Some(Duration::from_millis(2500)), || {
                vendor(Duration::from_secs(10), false)
            })
            .await;
        assert!(matches!(r, Err(CallError::Timeout(_))));
    }
    assert_eq!(b.state(), State::Open);
    let m = b.metrics();
    assert_eq!((m.failed_calls, m.slow_calls), (10, 10));
    // Open: no call is made, the fallback serves the cached card at once.
    let before = tokio::time::Instant::now();
    let card = b
        .call_async_or_else(
            Some(Duration::from_millis(2500)),
            || async { panic!("the vendor must not be called while open") },
            |e: CallError<&str>| async move {
                assert!(e.is_rejected());
                "cached card"
            },
        )
        .await;
    assert_eq!(card, "cached card");
    assert_eq!(before.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn the_slow_rule_fires_before_the_error_rule() {
    // 9 slow successes (3 s) of 10: the slow-call rate trips although nothing failed.
    let b = vendor_breaker();
    for i in 0..10 {
        let latency = if i == 0 {
            Duration::from_millis(300)
        } else {
            Duration::from_secs(3)
        };
        let _ = b
            .call_async(Some(Duration::from_secs(10)), || vendor(latency, false))
            .await;
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.metrics().failed_calls, 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_probe_gives_its_slot_back() {
    let b = vendor_breaker();
    b.trip();
    tokio::time::advance(Duration::from_secs(15)).await;
    for _ in 0..3 {
        // Cancelled by an outer timeout before the vendor answers.
        let r = tokio::time::timeout(
            Duration::from_millis(10),
            b.call_async(None, || vendor(Duration::from_secs(5), false)),
        )
        .await;
        assert!(r.is_err());
    }
    let m = b.metrics();
    assert_eq!((m.abandoned_permits, m.probes_in_flight), (3, 0));
    assert_eq!(b.state(), State::HalfOpen);
    for _ in 0..3 {
        b.call_async(None, || vendor(Duration::from_millis(280), false))
            .await
            .unwrap();
    }
    assert_eq!(b.state(), State::Closed);
}

#[tokio::test(start_paused = true)]
async fn the_timer_moves_open_to_half_open_without_traffic() {
    let config = BreakerConfig::builder()
        .automatic_transition(true)
        .open_duration(Duration::from_secs(15))
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("db", config, TokioClock::new());
    let timer = tokio::spawn({
        let b = b.clone();
        async move { b.run_timer().await }
    });
    tokio::time::sleep(Duration::from_secs(100)).await;
    assert_eq!(b.state(), State::Closed);
    b.trip();
    tokio::time::sleep(Duration::from_millis(14_999)).await;
    assert_eq!(b.state(), State::Open);
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert_eq!(b.state(), State::HalfOpen);
    timer.abort();
}
