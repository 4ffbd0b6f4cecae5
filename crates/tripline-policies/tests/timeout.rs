//! The timeout layer on paused time, and its expiry counted as a failure by a breaker outside
//! it.
#![cfg(all(feature = "timeout", feature = "tower"))]

mod support;

use std::time::Duration;

use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt, service_fn};
use tripline::State;
use tripline_policies::breaker::BreakerLayer;
use tripline_policies::timeout::{Elapsed, TimeoutLayer};

async fn sleepy(ms: u64) -> Result<u64, support::Boom> {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    Ok(ms)
}

#[tokio::test(start_paused = true)]
async fn expires_exactly_at_the_timeout() {
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(Duration::from_millis(2500)).unwrap())
        .service(service_fn(sleepy));
    let start = Instant::now();
    let err = svc.clone().oneshot(10_000).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<Elapsed>().unwrap().after(),
        Duration::from_millis(2500)
    );
    assert_eq!(start.elapsed(), Duration::from_millis(2500));
    // A call that finishes in time is untouched.
    assert_eq!(svc.oneshot(2499).await.unwrap(), 2499);
}

#[tokio::test(start_paused = true)]
async fn inside_a_breaker_an_expiry_is_a_failure() {
    let breaker = support::small_breaker("vendor");
    let svc = ServiceBuilder::new()
        .layer(BreakerLayer::new(breaker.clone()))
        .layer(TimeoutLayer::new(Duration::from_secs(1)).unwrap())
        .service(service_fn(sleepy));
    for _ in 0..4 {
        let err = svc.clone().oneshot(60_000).await.unwrap_err();
        assert!(err.downcast_ref::<Elapsed>().is_some());
    }
    let m = breaker.metrics();
    assert_eq!((m.failed_calls, m.abandoned_permits), (4, 0));
    assert_eq!(breaker.state(), State::Open);
}

#[test]
fn a_zero_or_huge_timeout_is_rejected() {
    assert_eq!(
        TimeoutLayer::new(Duration::ZERO).unwrap_err().to_string(),
        "timeout must be in (0ns, 86400s], got 0ns"
    );
    assert_eq!(
        TimeoutLayer::new(Duration::from_secs(90_000))
            .unwrap_err()
            .to_string(),
        "timeout must be in (0ns, 86400s], got 90000s"
    );
}
