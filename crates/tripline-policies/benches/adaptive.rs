//! The cost per call of the adaptive policies, beside their nearest peers in the same run
//! (divan, single-threaded): the limiter and the shedder beside tower's `ConcurrencyLimit`,
//! the partial breaker beside the classic breaker, the fault injector beside a bare service.
//! The inner service answers at once, so the figures are the layers' own cost; futures are
//! polled once with a no-op waker inside a tokio runtime context.
//!
//! `cargo bench -p tripline-policies --all-features --bench adaptive`

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use divan::Bencher;
use rand::SeedableRng;
use tower::limit::ConcurrencyLimitLayer;
use tower::{Layer, Service, service_fn};
use tripline::{BreakerConfig, CircuitBreaker, ManualClock, Outcome};
use tripline_policies::BoxError;
use tripline_policies::breaker::BreakerLayer;
use tripline_policies::chaos::{Chaos, ChaosConfig, ChaosLayer};
use tripline_policies::limiter::{
    FixedLimit, LimitAlgorithm, Limiter, LimiterConfig, LimiterLayer,
};
use tripline_policies::partial::{PartialBreaker, PartialConfig, PartialLayer};
use tripline_policies::shed::{Priority, Shares, ShedConfig, ShedLayer, Shedder};

fn main() {
    divan::Divan::default()
        .sample_count(300)
        .sample_size(2000)
        .config_with_args()
        .main();
}

const SLOTS: u32 = 1000;

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

fn fixed(n: u32) -> LimiterConfig {
    LimiterConfig::builder()
        .algorithm(LimitAlgorithm::Fixed(FixedLimit::new(n).unwrap()))
        .build()
        .unwrap()
}

#[divan::bench]
fn bare(bencher: Bencher) {
    bench_service(bencher, inner());
}

mod limit {
    use super::*;

    /// tower's `ConcurrencyLimit`: a semaphore permit taken in `poll_ready`.
    #[divan::bench]
    fn tower_concurrency_limit(bencher: Bencher) {
        bench_service(
            bencher,
            ConcurrencyLimitLayer::new(SLOTS as usize).layer(inner()),
        );
    }

    #[divan::bench]
    fn limiter_fixed(bencher: Bencher) {
        bench_service(
            bencher,
            LimiterLayer::new(Limiter::new(fixed(SLOTS))).layer(inner()),
        );
    }

    /// Vegas with concurrency-limits' defaults, on the production clock.
    #[divan::bench]
    fn limiter_vegas(bencher: Bencher) {
        bench_service(
            bencher,
            LimiterLayer::new(Limiter::default()).layer(inner()),
        );
    }

    /// The same on a `ManualClock` (one atomic load per reading): the clock's share.
    #[divan::bench]
    fn limiter_vegas_manual_clock(bencher: Bencher) {
        let l = Limiter::with_clock(LimiterConfig::default(), ManualClock::new());
        bench_service(bencher, LimiterLayer::new(l).layer(inner()));
    }

    #[divan::bench]
    fn limiter_gradient2(bencher: Bencher) {
        let c = LimiterConfig::builder()
            .algorithm(LimitAlgorithm::Gradient2(Default::default()))
            .build()
            .unwrap();
        bench_service(bencher, LimiterLayer::new(Limiter::new(c)).layer(inner()));
    }

    #[divan::bench]
    fn limiter_vegas_with_shares(bencher: Bencher) {
        let c = LimiterConfig::builder()
            .shares(Shares::default())
            .build()
            .unwrap();
        bench_service(bencher, LimiterLayer::new(Limiter::new(c)).layer(inner()));
    }

    #[divan::bench]
    fn shedder(bencher: Bencher) {
        let s = Shedder::new(ShedConfig::builder().capacity(SLOTS).build().unwrap());
        bench_service(
            bencher,
            ShedLayer::new(s)
                .priority(|_: &u64| Priority::DEFAULT)
                .layer(inner()),
        );
    }

    /// The limiter's own API, without tower: acquire, then report a success.
    #[divan::bench]
    fn limiter_vegas_permit(bencher: Bencher) {
        let l = Limiter::default();
        bencher.bench_local(|| {
            l.try_acquire(black_box(Priority::DEFAULT))
                .unwrap()
                .success()
        });
    }

    /// A refusal over a fixed limit.
    #[divan::bench]
    fn limiter_refusal(bencher: Bencher) {
        let l = Limiter::new(fixed(1));
        let _held = l.try_acquire(Priority::DEFAULT).unwrap();
        bencher.bench_local(|| l.try_acquire(black_box(Priority::DEFAULT)).is_err());
    }
}

mod partial {
    use super::*;

    /// The classic breaker, closed.
    #[divan::bench]
    fn breaker_closed(bencher: Bencher) {
        let b = CircuitBreaker::new("dep", BreakerConfig::default());
        bench_service(bencher, BreakerLayer::new(b).layer(inner()));
    }

    /// The partial breaker at a rejection rate of 0 (no lock on the acquire).
    #[divan::bench]
    fn partial_closed(bencher: Bencher) {
        bench_service(
            bencher,
            PartialLayer::new(PartialBreaker::default()).layer(inner()),
        );
    }

    /// `try_acquire` then `record(Success)`, without tower.
    #[divan::bench]
    fn partial_permit(bencher: Bencher) {
        let b = PartialBreaker::default();
        bencher.bench_local(|| {
            if let Ok(p) = b.try_acquire() {
                p.record(black_box(Outcome::Success));
            }
        });
    }

    /// Partly open (a rate near 0.6): every acquire takes the lock and draws.
    #[divan::bench]
    fn partial_partly_open(bencher: Bencher) {
        let clock = ManualClock::new();
        let b = PartialBreaker::with_clock_and_rng(
            PartialConfig::default(),
            clock.clone(),
            rand_pcg::Pcg64Mcg::seed_from_u64(1),
        );
        for i in 0..3000 {
            if let Ok(p) = b.try_acquire() {
                p.record(if i % 2 == 0 {
                    Outcome::Failure
                } else {
                    Outcome::Success
                });
            }
            clock.advance(Duration::from_millis(10));
        }
        assert!(b.rejection_rate() > 0.3, "{}", b.rejection_rate());
        bencher.bench_local(|| {
            if let Ok(p) = b.try_acquire() {
                p.record(black_box(Outcome::Success));
            }
        });
    }
}

mod chaos {
    use super::*;

    #[divan::bench]
    fn chaos_off(bencher: Bencher) {
        bench_service(bencher, ChaosLayer::new(Chaos::default()).layer(inner()));
    }

    /// On, with a rule that never fires: one lock and one draw per call.
    #[divan::bench]
    fn chaos_on_no_fault(bencher: Bencher) {
        let c = ChaosConfig::builder()
            .error(0.0)
            .enabled(true)
            .build()
            .unwrap();
        bench_service(bencher, ChaosLayer::new(Chaos::new(c)).layer(inner()));
    }
}
