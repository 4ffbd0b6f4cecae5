//! One call through each tower layer, and through the pipeline, next to a bare `service_fn`
//! (divan, single-threaded). The inner service answers at once, so the figures are the
//! layers' own cost. Futures are polled once with a no-op waker inside a tokio runtime
//! context (the timeout needs its timer).
//!
//! `cargo bench -p tripline-policies --all-features --bench layers`

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use divan::Bencher;
use tower::{Layer, Service, ServiceBuilder, service_fn};
use tripline::{BreakerConfig, CircuitBreaker};
use tripline_policies::BoxError;
use tripline_policies::breaker::BreakerLayer;
use tripline_policies::bulkhead::{Bulkhead, BulkheadLayer};
use tripline_policies::gate::{Gate, GateLayer};
use tripline_policies::pipeline::Pipeline;
use tripline_policies::retry::{RetryLayer, RetryPolicy};
use tripline_policies::throttle::{Throttle, ThrottleLayer};
use tripline_policies::timeout::TimeoutLayer;

fn main() {
    divan::Divan::default()
        .sample_count(500)
        .sample_size(2000)
        .config_with_args()
        .main();
}

fn now<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the bench's inner service answers at once"),
    }
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

fn bench_service<S>(bencher: Bencher, mut svc: S)
where
    S: Service<u64, Response = u64>,
    S::Error: std::fmt::Debug,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let mut cx = Context::from_waker(Waker::noop());
    bencher.bench_local(|| {
        assert!(svc.poll_ready(&mut cx).is_ready());
        now(svc.call(black_box(7))).unwrap()
    });
}

#[divan::bench]
fn bare(bencher: Bencher) {
    bench_service(bencher, inner());
}

#[divan::bench]
fn timeout(bencher: Bencher) {
    bench_service(
        bencher,
        TimeoutLayer::new(Duration::from_secs(1))
            .unwrap()
            .layer(inner()),
    );
}

#[divan::bench]
fn gate(bencher: Bencher) {
    bench_service(bencher, GateLayer::new(Gate::default()).layer(inner()));
}

#[divan::bench]
fn bulkhead(bencher: Bencher) {
    bench_service(
        bencher,
        BulkheadLayer::new(Bulkhead::default()).layer(inner()),
    );
}

#[divan::bench]
fn throttle(bencher: Bencher) {
    bench_service(
        bencher,
        ThrottleLayer::new(Throttle::default()).layer(inner()),
    );
}

#[divan::bench]
fn retry(bencher: Bencher) {
    bench_service(
        bencher,
        RetryLayer::new(RetryPolicy::default()).layer(inner()),
    );
}

#[divan::bench]
fn breaker(bencher: Bencher) {
    let breaker = CircuitBreaker::new("dep", BreakerConfig::default());
    bench_service(bencher, BreakerLayer::new(breaker).layer(inner()));
}

#[divan::bench]
fn stack(bencher: Bencher) {
    let gate = Gate::default();
    let svc = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::default()).gate(gate.clone()))
        .layer(BreakerLayer::new(CircuitBreaker::new(
            "dep",
            BreakerConfig::default(),
        )))
        .layer(GateLayer::new(gate))
        .layer(ThrottleLayer::new(Throttle::default()))
        .layer(TimeoutLayer::new(Duration::from_secs(1)).unwrap())
        .service(inner());
    bench_service(bencher, svc);
}

#[divan::bench]
fn pipeline(bencher: Bencher) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let p = Pipeline::builder()
        .retry(RetryPolicy::default())
        .breaker(CircuitBreaker::new("dep", BreakerConfig::default()))
        .gate(Gate::default())
        .throttle(Throttle::default())
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    bencher.bench_local(|| {
        now(p.call(|| std::future::ready(Ok::<_, BoxError>(black_box(7u64))))).unwrap()
    });
}
