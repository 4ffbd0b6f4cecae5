//! Adaptive throttling: the probability formula checked exactly with a fixed draw, requests
//! counted at attempt time (refused ones included), the window ageing out, and the tower
//! service.
#![cfg(feature = "throttle")]

mod support;

use std::time::Duration;

use support::FixedRng;
use tripline::{ManualClock, Outcome};
use tripline_policies::throttle::{Throttle, ThrottleConfig};

/// A throttle whose draw the test sets; starts at `u32::MAX`, which never refuses (the
/// probability is always below `requests / (requests + 1)`).
fn throttle(k: f64) -> (Throttle, ManualClock, FixedRng) {
    let clock = ManualClock::new();
    let rng = FixedRng::new(u32::MAX);
    let t = Throttle::with_clock_and_rng(
        ThrottleConfig::builder().k(k).build().unwrap(),
        clock.clone(),
        rng.clone(),
    );
    (t, clock, rng)
}

/// Drives the window to `requests` requests of which `accepts` were accepted.
fn history(t: &Throttle, requests: u32, accepts: u32) {
    for i in 0..requests {
        let ticket = t.try_acquire().expect("the draw is set to never refuse");
        ticket.record(if i < accepts {
            Outcome::Success
        } else {
            Outcome::Failure
        });
    }
    assert_eq!(t.counts(), (u64::from(requests), u64::from(accepts)));
}

#[test]
fn the_probability_is_the_sre_formula() {
    for (requests, accepts) in [
        (0, 0),
        (1, 0),
        (10, 0),
        (10, 3),
        (10, 5),
        (10, 10),
        (100, 40),
        (1000, 1),
    ] {
        let (t, _, _) = throttle(2.0);
        history(&t, requests, accepts);
        let r = f64::from(requests);
        let a = f64::from(accepts);
        let expected = ((r - 2.0 * a) / (r + 1.0)).max(0.0);
        assert!(
            (t.probability() - expected).abs() < 1e-12,
            "{requests} requests, {accepts} accepts: {} vs {expected}",
            t.probability()
        );
    }
}

#[test]
fn the_draw_is_compared_exactly_with_the_probability() {
    // 10 requests, 3 accepts: p = (10 − 6) / 11 = 4/11. A draw u/2³² refuses iff u/2³² < 4/11,
    // that is u < 4 × 2³² / 11 = 1561806289.45...
    let (t, _, rng) = throttle(2.0);
    history(&t, 10, 3);
    rng.set(1_561_806_289);
    let refused = t.try_acquire().unwrap_err();
    assert!((refused.probability() - 4.0 / 11.0).abs() < 1e-12);
    // The refused request was counted: now 11 requests, 3 accepts, p = 5/12.
    assert_eq!(t.counts(), (11, 3));
    // 5 × 2³² / 12 = 1789569706.67: 1789569706 refuses, 1789569707 does not.
    rng.set(1_789_569_707);
    let ticket = t.try_acquire().expect("just above the probability");
    ticket.record(Outcome::Failure);
    // Now 12 requests, 3 accepts: p = 6/13; 6 × 2³² / 13 = 1982292598.15.
    rng.set(1_982_292_598);
    assert!(t.try_acquire().is_err());
}

#[test]
fn nothing_is_refused_while_requests_are_at_most_k_times_accepts() {
    let (t, _, rng) = throttle(2.0);
    history(&t, 100, 50);
    rng.set(0); // the lowest draw refuses whenever p > 0
    for _ in 0..10 {
        // Each request adds to `requests` only if the backend does not accept it.
        t.try_acquire().unwrap().record(Outcome::Success);
    }
    assert_eq!(t.rejected(), 0);
    // A K closer to 1 is more aggressive: 100 requests, 50 accepts, K = 1.1 -> p = 45/101.
    let (t, _, _) = throttle(1.1);
    history(&t, 100, 50);
    assert!((t.probability() - 45.0 / 101.0).abs() < 1e-12);
}

#[test]
fn requests_count_when_attempted_not_when_answered() {
    let (t, _, _) = throttle(2.0);
    // Ten calls in flight, no answers yet: the probability already rises.
    let tickets: Vec<_> = (0..10).map(|_| t.try_acquire().unwrap()).collect();
    assert_eq!(t.counts(), (10, 0));
    assert!((t.probability() - 10.0 / 11.0).abs() < 1e-12);
    for ticket in tickets {
        ticket.record(Outcome::Ignored); // a 404 was accepted by the backend
    }
    assert_eq!(t.counts(), (10, 10));
    assert_eq!(t.probability(), 0.0);
}

#[test]
fn a_call_that_never_left_is_taken_back() {
    let (t, _, _) = throttle(2.0);
    t.try_acquire().unwrap().not_sent();
    assert_eq!(t.counts(), (0, 0));
}

#[test]
fn a_cancelled_call_is_neither_a_request_nor_an_accept() {
    let (t, _, rng) = throttle(2.0);
    // A client that hedges every call twice and cancels the two losers: the backend answered
    // every call it was asked, so it must not throttle itself.
    for _ in 0..100 {
        let winner = t.try_acquire().unwrap();
        let losers = [t.try_acquire().unwrap(), t.try_acquire().unwrap()];
        winner.record(Outcome::Success);
        drop(losers);
    }
    assert_eq!(t.counts(), (100, 100));
    assert_eq!(t.probability(), 0.0);
    rng.set(0);
    assert!(
        t.try_acquire().is_ok(),
        "a healthy backend is not throttled"
    );
}

#[test]
fn the_window_ages_out() {
    let (t, clock, _) = throttle(2.0);
    history(&t, 50, 0);
    clock.advance(Duration::from_secs(60));
    assert_eq!(t.counts(), (50, 0));
    clock.advance(Duration::from_secs(60));
    assert_eq!(t.counts(), (0, 0));
    assert_eq!(t.probability(), 0.0);
}

#[test]
fn bad_configuration_is_rejected() {
    let cases = [
        (
            ThrottleConfig::builder().k(0.0).build().unwrap_err(),
            "k must be in [1, 100], got 0",
        ),
        (
            ThrottleConfig::builder()
                .k(f64::INFINITY)
                .build()
                .unwrap_err(),
            "k must be in [1, 100], got inf",
        ),
        (
            ThrottleConfig::builder()
                .window(Duration::ZERO, Duration::ZERO)
                .build()
                .unwrap_err(),
            "window.bucket must be in [1ms, window = 0ns], got 0ns",
        ),
        (
            ThrottleConfig::builder()
                .window(Duration::from_secs(7200), Duration::from_secs(1))
                .build()
                .unwrap_err(),
            "window must be a whole number (1 to 3600) of buckets of 1s, got 7200s",
        ),
    ];
    for (err, msg) in cases {
        assert_eq!(err.to_string(), msg);
    }
}

#[cfg(feature = "tower")]
mod tower_service {
    use super::*;
    use tower::{Layer, ServiceExt, service_fn};
    use tripline_policies::BoxError;
    use tripline_policies::throttle::{ThrottleLayer, Throttled};

    #[tokio::test]
    async fn refuses_locally_and_counts_accepts() {
        let (t, _, rng) = throttle(2.0);
        let calls = support::Calls::default();
        let svc = ThrottleLayer::new(t.clone()).layer(service_fn({
            let calls = calls.clone();
            move |fail: bool| {
                calls.bump();
                async move {
                    if fail {
                        Err::<(), BoxError>("503".into())
                    } else {
                        Ok(())
                    }
                }
            }
        }));
        for _ in 0..4 {
            svc.clone().oneshot(true).await.unwrap_err();
        }
        svc.clone().oneshot(false).await.unwrap();
        assert_eq!(t.counts(), (5, 1));
        rng.set(0);
        let err = svc.clone().oneshot(false).await.unwrap_err();
        assert!(err.downcast_ref::<Throttled>().is_some());
        assert_eq!(calls.get(), 5, "a throttled call is not sent");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_dropped_before_its_answer_is_not_counted() {
        let (t, _, _) = throttle(2.0);
        let svc = ThrottleLayer::new(t.clone()).layer(service_fn(|_: ()| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, BoxError>(())
        }));
        let r = tokio::time::timeout(Duration::from_secs(1), svc.oneshot(())).await;
        assert!(r.is_err(), "the caller gave up");
        assert_eq!(t.counts(), (0, 0));
    }

    #[cfg(feature = "gate")]
    #[tokio::test]
    async fn a_local_refusal_further_in_is_not_a_request() {
        use tripline_policies::gate::{Gate, GateConfig, GateLayer};
        let (t, _, _) = throttle(2.0);
        let gate = Gate::new(GateConfig::builder().max_requests(1).build().unwrap());
        let _busy = gate.try_request().unwrap();
        let svc = ThrottleLayer::new(t.clone())
            .layer(GateLayer::new(gate).layer(service_fn(|_: ()| async { Ok::<_, BoxError>(()) })));
        svc.oneshot(()).await.unwrap_err();
        assert_eq!(t.counts(), (0, 0));
    }
}
