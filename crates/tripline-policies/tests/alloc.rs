//! Allocations per call of each tower layer, beyond the inner service's own (a `service_fn`
//! returning a ready future allocates nothing).
#![cfg(all(feature = "tower", feature = "pipeline"))]

use std::time::Duration;

use tower::{Layer, Service, ServiceExt, service_fn};
use tripline::{BreakerConfig, CircuitBreaker, MonotonicClock};
use tripline_policies::BoxError;
use tripline_policies::breaker::BreakerLayer;
use tripline_policies::bulkhead::{Bulkhead, BulkheadLayer};
use tripline_policies::gate::{Gate, GateLayer};
use tripline_policies::retry::{RetryLayer, RetryPolicy};
use tripline_policies::throttle::{Throttle, ThrottleLayer};
use tripline_policies::timeout::TimeoutLayer;

const CALLS: u64 = 1000;

/// Average allocations per call of `svc`, after a warm-up.
fn per_call<S>(mut svc: S) -> f64
where
    S: Service<u64, Response = u64>,
    S::Error: std::fmt::Debug,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut run = |n: u64| {
        rt.block_on(async {
            for i in 0..n {
                let r = svc.ready().await.unwrap().call(i).await.unwrap();
                assert_eq!(r, i);
            }
        })
    };
    run(10);
    let info = allocation_counter::measure(|| run(CALLS));
    info.count_total as f64 / CALLS as f64
}

fn inner() -> impl Service<
    u64,
    Response = u64,
    Error = BoxError,
    Future = std::future::Ready<Result<u64, BoxError>>,
> + Clone
+ Send
+ 'static {
    service_fn(|x: u64| std::future::ready(Ok::<_, BoxError>(x)))
}

#[test]
fn allocations_per_call() {
    let bare = per_call(inner());
    let timeout = per_call(
        TimeoutLayer::new(Duration::from_secs(1))
            .unwrap()
            .layer(inner()),
    );
    let gate = per_call(GateLayer::new(Gate::default()).layer(inner()));
    let bulkhead = per_call(BulkheadLayer::new(Bulkhead::default()).layer(inner()));
    let throttle = per_call(ThrottleLayer::new(Throttle::default()).layer(inner()));
    let retry = per_call(RetryLayer::new(RetryPolicy::default()).layer(inner()));
    let breaker = per_call(
        BreakerLayer::new(CircuitBreaker::<MonotonicClock>::new(
            "dep",
            BreakerConfig::default(),
        ))
        .layer(inner()),
    );
    println!(
        "allocations per call: bare {bare}, timeout {timeout}, gate {gate}, bulkhead {bulkhead}, \
         throttle {throttle}, retry {retry}, breaker {breaker}"
    );
    assert_eq!(bare, 0.0);
    assert_eq!(timeout, 0.0);
    assert_eq!(gate, 0.0);
    assert_eq!(bulkhead, 0.0);
    assert_eq!(throttle, 0.0);
    assert_eq!(retry, 0.0);
    assert_eq!(breaker, 0.0);
}

#[test]
fn allocations_per_call_of_the_adaptive_policies() {
    use tripline_policies::chaos::{Chaos, ChaosConfig, ChaosLayer};
    use tripline_policies::limiter::{Limiter, LimiterLayer};
    use tripline_policies::partial::{PartialBreaker, PartialLayer};
    use tripline_policies::shed::{ShedLayer, Shedder};

    let limiter = per_call(LimiterLayer::new(Limiter::default()).layer(inner()));
    let shed = per_call(ShedLayer::new(Shedder::default()).layer(inner()));
    let partial = per_call(PartialLayer::new(PartialBreaker::default()).layer(inner()));
    let chaos_off = per_call(ChaosLayer::new(Chaos::default()).layer(inner()));
    // On, with a rule that never fires: the decision is made (a draw) on every call.
    let on = ChaosConfig::builder()
        .error(0.0)
        .enabled(true)
        .build()
        .unwrap();
    let chaos_on = per_call(ChaosLayer::new(Chaos::new(on)).layer(inner()));
    println!(
        "allocations per call: limiter {limiter}, shed {shed}, partial {partial}, \
         chaos off {chaos_off}, chaos on {chaos_on}"
    );
    assert_eq!(limiter, 0.0);
    assert_eq!(shed, 0.0);
    assert_eq!(partial, 0.0);
    assert_eq!(chaos_off, 0.0);
    assert_eq!(chaos_on, 0.0);
}
