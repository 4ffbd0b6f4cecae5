//! The breaker layer: rejection as a downcastable value, cancellation abandons the permit,
//! local refusals further in are ignored, classification of results.
#![cfg(feature = "tower")]

mod support;

use std::time::Duration;

use tower::{Layer, Service, ServiceExt, service_fn};
use tripline::{Classification, Outcome, Rejected, State};
use tripline_policies::BoxError;
use tripline_policies::breaker::BreakerLayer;

#[tokio::test(start_paused = true)]
async fn failures_trip_it_and_then_it_rejects_without_calling() {
    let breaker = support::small_breaker("vendor");
    let calls = support::Calls::default();
    let svc = BreakerLayer::new(breaker.clone()).layer(service_fn({
        let calls = calls.clone();
        move |_: ()| {
            calls.bump();
            async { Err::<(), _>(support::Boom("503")) }
        }
    }));
    for _ in 0..4 {
        let err = svc.clone().oneshot(()).await.unwrap_err();
        assert!(err.downcast_ref::<support::Boom>().is_some());
    }
    assert_eq!(breaker.state(), State::Open);
    let err = svc.clone().oneshot(()).await.unwrap_err();
    let rejected = err.downcast_ref::<Rejected>().unwrap();
    assert_eq!(rejected.breaker(), "vendor");
    assert_eq!(rejected.retry_after(), Some(Duration::from_secs(10)));
    assert_eq!(calls.get(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_call_abandons_its_permit() {
    let breaker = support::small_breaker("vendor");
    let mut svc = BreakerLayer::new(breaker.clone()).layer(service_fn(|_: ()| async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok::<_, support::Boom>(())
    }));
    let fut = svc.ready().await.unwrap().call(());
    let r = tokio::time::timeout(Duration::from_millis(10), fut).await;
    assert!(r.is_err());
    let m = breaker.metrics();
    assert_eq!(
        (m.abandoned_permits, m.failed_calls, m.successful_calls),
        (1, 0, 0)
    );
}

#[tokio::test]
async fn the_classifier_decides_the_outcome() {
    let breaker = support::small_breaker("search");
    let svc = BreakerLayer::new(breaker.clone())
        .classifier(|r: &Result<Option<u32>, BoxError>| match r {
            Ok(None) => Classification::new(Outcome::Ignored),
            Ok(Some(_)) => Classification::new(Outcome::Success),
            Err(_) => Classification::new(Outcome::Failure),
        })
        .layer(service_fn(|id: u32| async move {
            Ok::<_, support::Boom>((id > 0).then_some(id))
        }));
    svc.clone().oneshot(0).await.unwrap();
    svc.oneshot(1).await.unwrap();
    let m = breaker.metrics();
    assert_eq!((m.ignored_calls, m.successful_calls), (1, 1));
}

#[cfg(feature = "gate")]
#[tokio::test]
async fn a_local_refusal_further_in_is_ignored_not_a_failure() {
    use tripline_policies::gate::{Gate, GateConfig, GateLayer, GateOverflow};
    let breaker = support::small_breaker("vendor");
    let gate = Gate::new(GateConfig::builder().max_requests(1).build().unwrap());
    let _busy = gate.try_request().unwrap();
    let svc = BreakerLayer::new(breaker.clone())
        .layer(GateLayer::new(gate).layer(service_fn(|_: ()| async { Ok::<_, BoxError>(()) })));
    for _ in 0..10 {
        let err = svc.clone().oneshot(()).await.unwrap_err();
        assert!(err.downcast_ref::<GateOverflow>().is_some());
    }
    let m = breaker.metrics();
    assert_eq!((m.failed_calls, m.ignored_calls), (0, 10));
    assert_eq!(breaker.state(), State::Closed);
}
