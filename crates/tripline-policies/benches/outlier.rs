//! The cost of one host selection and one outcome record by the outlier detector, and of one
//! request through its tower layer next to tower's own p2c balancer over the same ten hosts
//! (divan, single-threaded). The inner services answer at once, so the figures are the
//! balancers' own cost. Futures are polled once with a no-op waker.
//!
//! `cargo bench -p tripline-policies --all-features --bench outlier`

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use divan::Bencher;
use tower::balance::p2c::Balance as TowerBalance;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PendingRequests};
use tower::{Layer, Service, service_fn};
use tripline_policies::outlier::{
    Balance, HostOutcome, OutlierConfig, OutlierDetector, OutlierLayer,
};

fn main() {
    divan::Divan::default()
        .sample_count(300)
        .sample_size(2000)
        .config_with_args()
        .main();
}

const HOSTS: u32 = 10;

fn detector(balance: Balance) -> OutlierDetector<u32> {
    OutlierDetector::builder(OutlierConfig::default())
        .balance(balance)
        .seed(1)
        .build(0..HOSTS)
        .unwrap()
}

fn now<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the bench's services answer at once"),
    }
}

/// One pick, dropped (a selection that records nothing).
#[divan::bench(args = [Balance::RoundRobin, Balance::PowerOfTwoChoices])]
fn pick(bencher: Bencher, balance: Balance) {
    let d = detector(balance);
    bencher.bench_local(|| black_box(d.pick()));
}

/// One pick and its success recorded.
#[divan::bench(args = [Balance::RoundRobin, Balance::PowerOfTwoChoices])]
fn pick_and_record(bencher: Bencher, balance: Balance) {
    let d = detector(balance);
    bencher.bench_local(|| {
        let p = d.pick();
        d.record(p, black_box(HostOutcome::Success));
    });
}

/// One outcome recorded by host key (a host chosen elsewhere).
#[divan::bench]
fn record_host(bencher: Bencher) {
    let d = detector(Balance::RoundRobin);
    bencher.bench_local(|| d.record_host(black_box(&3), HostOutcome::Success));
}

fn poll_ready<S: Service<R>, R>(svc: &mut S) {
    let mut cx = Context::from_waker(Waker::noop());
    match svc.poll_ready(&mut cx) {
        Poll::Ready(Ok(())) => {}
        _ => panic!("the bench's services are always ready"),
    }
}

/// One request (poll_ready, call, poll) through tower's `p2c::Balance` over ten
/// `PendingRequests` services: tower's own power-of-two-choices balancer, no ejection.
#[divan::bench]
fn tower_p2c_request(bencher: Bencher) {
    let services: Vec<_> = (0..HOSTS)
        .map(|h| {
            PendingRequests::new(
                service_fn(move |x: u32| std::future::ready(Ok::<_, Infallible>(x + h))),
                CompleteOnResponse::default(),
            )
        })
        .collect();
    let mut svc = TowerBalance::new(ServiceList::new(services));
    bencher.bench_local(|| {
        poll_ready(&mut svc);
        black_box(now(svc.call(black_box(1))).unwrap())
    });
}

/// One request (poll_ready, call, poll) through `OutlierLayer`: a p2c pick among ten hosts,
/// the call with `(host, request)`, the outcome recorded.
#[divan::bench]
fn outlier_p2c_request(bencher: Bencher) {
    let inner = service_fn(|(h, x): (u32, u32)| std::future::ready(Ok::<_, Infallible>(x + h)));
    let mut svc = OutlierLayer::new(detector(Balance::PowerOfTwoChoices)).layer(inner);
    bencher.bench_local(|| {
        poll_ready(&mut svc);
        black_box(now(svc.call(black_box(1))).unwrap())
    });
}

/// The same, round robin.
#[divan::bench]
fn outlier_round_robin_request(bencher: Bencher) {
    let inner = service_fn(|(h, x): (u32, u32)| std::future::ready(Ok::<_, Infallible>(x + h)));
    let mut svc = OutlierLayer::new(detector(Balance::RoundRobin)).layer(inner);
    bencher.bench_local(|| {
        poll_ready(&mut svc);
        black_box(now(svc.call(black_box(1))).unwrap())
    });
}
