//! The breaker as a tower layer: tripline's `BreakerLayer` against
//! `tower-resilience-circuitbreaker` and a bare `service_fn`, one request at a time (divan).
//! Each request is `ready()` then `call()`, polled once with a no-op waker inside a tokio
//! runtime's context (the inner service answers at once, so nothing waits).
//!
//! `cargo bench -p tripline-bench --bench tower`

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use divan::Bencher;
use tower::{Layer, Service, ServiceExt, service_fn};
use tower_resilience_circuitbreaker::CircuitBreakerLayer;
use tripline::{BreakerConfig, CircuitBreaker};
use tripline_policies::breaker::BreakerLayer;

fn main() {
    divan::Divan::default()
        .sample_count(1000)
        .sample_size(2000)
        .config_with_args()
        .main();
}

/// Runs a future that is expected to be ready at once; falls back to the runtime if not.
fn drive<F: Future>(rt: &tokio::runtime::Runtime, f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => rt.block_on(f),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

fn request<S, E>(rt: &tokio::runtime::Runtime, svc: &mut S) -> bool
where
    S: Service<u32, Error = E>,
{
    drive(rt, async {
        match svc.ready().await {
            Ok(s) => s.call(black_box(7)).await.is_ok(),
            Err(_) => false,
        }
    })
}

fn ok_service() -> impl Service<u32, Response = u32, Error = std::io::Error, Future: Send> + Clone {
    service_fn(|x: u32| async move { Ok::<_, std::io::Error>(x) })
}

fn failing_service()
-> impl Service<u32, Response = u32, Error = std::io::Error, Future: Send> + Clone {
    service_fn(|_: u32| async move { Err::<u32, _>(std::io::Error::other("503")) })
}

fn tripline_config() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(100)
        .minimum_calls(2)
        .open_duration(Duration::from_secs(3600))
        .build()
        .unwrap()
}

fn resilience_layer() -> CircuitBreakerLayer {
    CircuitBreakerLayer::builder()
        .failure_rate_threshold(0.5)
        .sliding_window_size(100)
        .minimum_number_of_calls(2)
        .wait_duration_in_open(Duration::from_secs(3600))
        .build()
        .unwrap()
}

#[divan::bench_group]
mod closed {
    use super::*;

    #[divan::bench]
    fn bare_service_fn(bencher: Bencher) {
        let rt = runtime();
        let _g = rt.enter();
        let mut svc = service_fn(|x: u32| async move { Ok::<_, Infallible>(x) });
        bencher.bench_local(|| request(&rt, &mut svc));
    }

    #[divan::bench]
    fn tripline_breaker_layer(bencher: Bencher) {
        let rt = runtime();
        let _g = rt.enter();
        let breaker = CircuitBreaker::new("bench", tripline_config());
        let mut svc = BreakerLayer::new(breaker).layer(ok_service());
        bencher.bench_local(|| request(&rt, &mut svc));
    }

    #[divan::bench]
    fn tower_resilience(bencher: Bencher) {
        let rt = runtime();
        let _g = rt.enter();
        let mut svc = resilience_layer().layer(ok_service());
        bencher.bench_local(|| request(&rt, &mut svc));
    }
}

#[divan::bench_group]
mod open {
    use super::*;

    #[divan::bench]
    fn tripline_breaker_layer(bencher: Bencher) {
        let rt = runtime();
        let _g = rt.enter();
        let breaker = CircuitBreaker::new("bench", tripline_config());
        let mut svc = BreakerLayer::new(breaker.clone()).layer(failing_service());
        while breaker.state() == tripline::State::Closed {
            request(&rt, &mut svc);
        }
        bencher.bench_local(|| request(&rt, &mut svc));
    }

    #[divan::bench]
    fn tower_resilience(bencher: Bencher) {
        let rt = runtime();
        let _g = rt.enter();
        let mut svc = resilience_layer().layer(failing_service());
        for _ in 0..10 {
            request(&rt, &mut svc);
        }
        bencher.bench_local(|| request(&rt, &mut svc));
    }
}
