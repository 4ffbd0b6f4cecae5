//! The adaptive limiter on a manual clock: RTTs measured per permit, each algorithm's response
//! to latency and drops, the queue and a growing limit, shares, the tower layer, the pipeline,
//! the gauges, bad input, and a bounded real-thread stress test.
#![cfg(feature = "limiter")]

mod support;

use std::time::Duration;

use tripline::{ManualClock, Outcome};
use tripline_policies::limiter::{
    AimdConfig, FixedLimit, Gradient2Config, LimitAlgorithm, Limiter, LimiterAdmission,
    LimiterConfig, VegasConfig,
};
use tripline_policies::shed::{Priority, Refusal};

const MS: Duration = Duration::from_millis(1);

fn limiter(algorithm: LimitAlgorithm, clock: &ManualClock) -> Limiter {
    let config = LimiterConfig::builder()
        .algorithm(algorithm)
        .seed(3)
        .build()
        .unwrap();
    Limiter::with_clock(config, clock.clone())
}

fn fixed(n: u32) -> LimitAlgorithm {
    LimitAlgorithm::Fixed(FixedLimit::new(n).unwrap())
}

/// `n` calls at once, each taking `rtt`, all reported with `outcome`.
fn wave(l: &Limiter, clock: &ManualClock, n: u32, rtt: Duration, outcome: Outcome) -> u32 {
    let permits: Vec<_> = (0..n)
        .map_while(|_| l.try_acquire(Priority::DEFAULT).ok())
        .collect();
    let admitted = permits.len() as u32;
    clock.advance(rtt);
    for p in permits {
        p.record(outcome);
    }
    admitted
}

#[test]
fn the_defaults_are_concurrency_limits_defaults() {
    let v = VegasConfig::default();
    assert_eq!(
        (
            v.initial_limit(),
            v.min_limit(),
            v.max_limit(),
            v.alpha(),
            v.beta()
        ),
        (20, 1, 1000, 3, 6)
    );
    assert_eq!((v.smoothing(), v.probe_multiplier()), (1.0, 30));
    let g = Gradient2Config::default();
    assert_eq!(
        (
            g.initial_limit(),
            g.min_limit(),
            g.max_limit(),
            g.queue_size()
        ),
        (20, 20, 200, 4)
    );
    assert_eq!(
        (g.smoothing(), g.long_window(), g.rtt_tolerance()),
        (0.2, 600, 1.5)
    );
    let a = AimdConfig::default();
    assert_eq!(
        (a.initial_limit(), a.min_limit(), a.max_limit()),
        (20, 20, 200)
    );
    assert_eq!(
        (a.backoff_ratio(), a.timeout()),
        (0.9, Duration::from_secs(5))
    );
    assert_eq!(LimiterConfig::default().algorithm().name(), "vegas");
}

#[test]
fn each_permit_measures_its_rtt_on_the_injected_clock() {
    let clock = ManualClock::new();
    let l = limiter(LimitAlgorithm::Vegas(VegasConfig::default()), &clock);
    let p = l.try_acquire(Priority::DEFAULT).unwrap();
    assert_eq!(p.in_flight_at_start(), 1);
    clock.advance(Duration::from_millis(42));
    p.success();
    let s = l.snapshot();
    assert_eq!(s.last_rtt, Duration::from_millis(42));
    assert_eq!(
        s.baseline_rtt,
        Duration::from_millis(42),
        "the first no-load RTT"
    );
    assert_eq!((s.successes, s.drops, s.ignored, s.in_flight), (1, 0, 0, 0));
}

#[test]
fn vegas_grows_while_latency_stays_at_its_no_load_value_and_shrinks_when_a_queue_builds() {
    let clock = ManualClock::new();
    let l = limiter(LimitAlgorithm::Vegas(VegasConfig::default()), &clock);
    for _ in 0..6 {
        wave(&l, &clock, l.limit(), 10 * MS, Outcome::Success);
    }
    assert_eq!(
        l.limit(),
        1000,
        "no queue: + beta per busy sample, up to max_limit"
    );
    // The dependency slows down fivefold: the queue estimate is 80 % of the limit, above
    // beta, so each sample takes log10(limit) off: 3 at 1000, then 2 below it.
    for _ in 0..10 {
        l.sample(50 * MS, 1000, false);
    }
    assert_eq!(l.limit(), 1000 - 3 - 9 * 2);
    assert_eq!(l.snapshot().baseline_rtt, 10 * MS);
}

#[test]
fn gradient2_follows_the_ratio_of_long_term_to_current_latency() {
    let clock = ManualClock::new();
    let l = limiter(
        LimitAlgorithm::Gradient2(Gradient2Config::default()),
        &clock,
    );
    for _ in 0..20 {
        wave(&l, &clock, l.limit(), 10 * MS, Outcome::Success);
    }
    let grown = l.limit();
    assert!(grown > 100, "{grown}");
    for _ in 0..5 {
        wave(&l, &clock, l.limit(), 100 * MS, Outcome::Success);
    }
    assert!(l.limit() < grown / 2, "{}", l.limit());
    assert!(l.limit() >= 20, "never below min_limit");
}

#[test]
fn aimd_backs_off_on_drops_and_on_samples_slower_than_its_timeout() {
    let clock = ManualClock::new();
    let aimd = AimdConfig::builder()
        .min_limit(1)
        .initial_limit(40)
        .build()
        .unwrap();
    let l = limiter(LimitAlgorithm::Aimd(aimd), &clock);
    l.try_acquire(Priority::DEFAULT).unwrap().dropped();
    assert_eq!(l.limit(), 36);
    l.sample(Duration::from_secs(6), 40, false);
    assert_eq!(l.limit(), 32);
    l.sample(10 * MS, 20, false);
    assert_eq!(l.limit(), 33);
    // An ignored call, or a permit dropped unreported, feeds nothing.
    l.try_acquire(Priority::DEFAULT).unwrap().ignore();
    drop(l.try_acquire(Priority::DEFAULT).unwrap());
    assert_eq!(l.limit(), 33);
    assert_eq!(l.snapshot().ignored, 2);
}

#[test]
fn a_fixed_limit_never_moves() {
    let clock = ManualClock::new();
    let l = limiter(fixed(5), &clock);
    for _ in 0..20 {
        wave(&l, &clock, 10, MS, Outcome::Failure);
    }
    assert_eq!(l.limit(), 5);
    assert_eq!(wave(&l, &clock, 10, MS, Outcome::Success), 5);
}

/// The module docs' promise: a limit that shrinks below the calls in flight refuses new calls
/// until enough of them end, and never cuts off a call already admitted.
#[test]
fn a_limit_that_shrinks_below_the_calls_in_flight_refuses_until_enough_end() {
    let clock = ManualClock::new();
    let aimd = AimdConfig::builder()
        .min_limit(1)
        .initial_limit(10)
        .backoff_ratio(0.5)
        .build()
        .unwrap();
    let l = limiter(LimitAlgorithm::Aimd(aimd), &clock);
    let mut held: Vec<_> = (0..9)
        .map(|_| l.try_acquire(Priority::DEFAULT).unwrap())
        .collect();
    l.try_acquire(Priority::DEFAULT).unwrap().dropped(); // 10 × 0.5
    assert_eq!((l.limit(), l.in_flight()), (5, 9));
    assert_eq!(
        l.try_acquire(Priority::CRITICAL).unwrap_err().reason(),
        Refusal::Full
    );
    held.truncate(5);
    assert!(
        l.try_acquire(Priority::DEFAULT).is_err(),
        "5 in flight, limit 5"
    );
    held.pop();
    let p = l.try_acquire(Priority::DEFAULT).unwrap();
    held.into_iter().for_each(|p| p.success()); // the calls admitted under the old limit end well
    p.success();
    assert_eq!(l.in_flight(), 0);
}

#[test]
fn calls_over_the_limit_are_refused_at_once_without_a_queue() {
    let clock = ManualClock::new();
    let l = limiter(fixed(2), &clock);
    let _a = l.try_acquire(Priority::CRITICAL).unwrap();
    let _b = l.try_acquire(Priority::DEFAULT).unwrap();
    let e = l.try_acquire(Priority::CRITICAL).unwrap_err();
    assert_eq!(
        (e.reason(), e.limit(), e.in_flight()),
        (Refusal::Full, 2, 2)
    );
    assert!(matches!(
        l.admit(Priority::CRITICAL),
        Err(e) if e.reason() == Refusal::Full
    ));
}

#[test]
fn a_limit_that_grows_hands_its_new_slots_to_the_waiters() {
    let clock = ManualClock::new();
    let aimd = AimdConfig::builder()
        .min_limit(1)
        .initial_limit(1)
        .max_limit(10)
        .build()
        .unwrap();
    let config = LimiterConfig::builder()
        .algorithm(LimitAlgorithm::Aimd(aimd))
        .max_waiting(4)
        .max_wait(Duration::from_secs(1))
        .build()
        .unwrap();
    let l = Limiter::with_clock(config, clock.clone());
    let held = l.try_acquire(Priority::DEFAULT).unwrap();
    let LimiterAdmission::Queued(mut t) = l.admit(Priority::DEFAULT).unwrap() else {
        panic!("queued")
    };
    assert_eq!(l.waiting(), 1);
    l.sample(MS, 1, false); // the limit grows to 2
    let p = t.try_take().unwrap().unwrap();
    assert_eq!((l.limit(), l.in_flight(), l.waiting()), (2, 2, 0));
    drop((held, p));
}

#[tokio::test(start_paused = true)]
async fn a_queued_call_waits_at_most_max_wait() {
    let config = LimiterConfig::builder()
        .algorithm(fixed(1))
        .max_waiting(4)
        .max_wait(Duration::from_millis(200))
        .build()
        .unwrap();
    let l = Limiter::with_clock(config, tripline::TokioClock::new());
    let _held = l.try_acquire(Priority::DEFAULT).unwrap();
    let start = tokio::time::Instant::now();
    let e = l.acquire(Priority::DEFAULT).await.unwrap_err();
    assert_eq!(e.reason(), Refusal::TimedOut);
    assert_eq!(start.elapsed(), Duration::from_millis(200));
    assert_eq!(l.snapshot().slots.timed_out, 1);
}

#[tokio::test(start_paused = true)]
async fn a_granted_waiters_rtt_is_timed_from_its_grant() {
    let config = LimiterConfig::builder()
        .algorithm(LimitAlgorithm::Vegas(VegasConfig::default()))
        .max_waiting(4)
        .max_wait(Duration::from_secs(5))
        .seed(1)
        .build()
        .unwrap();
    let clock = tripline::TokioClock::new();
    let l = Limiter::with_clock(config, clock);
    let held: Vec<_> = (0..20)
        .map(|_| l.try_acquire(Priority::DEFAULT).unwrap())
        .collect();
    let waiter = tokio::spawn({
        let l = l.clone();
        async move {
            let p = l.acquire(Priority::DEFAULT).await.unwrap();
            tokio::time::sleep(Duration::from_millis(7)).await;
            p.success();
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(held);
    waiter.await.unwrap();
    assert_eq!(l.snapshot().last_rtt, Duration::from_millis(7));
}

#[test]
fn shares_apply_to_the_adaptive_limit() {
    let clock = ManualClock::new();
    let config = LimiterConfig::builder()
        .algorithm(fixed(10))
        .shares(tripline_policies::shed::Shares::default())
        .build()
        .unwrap();
    let l = Limiter::with_clock(config, clock);
    let held: Vec<_> = (0..5)
        .map(|_| l.try_acquire(Priority::SHEDDABLE).unwrap())
        .collect();
    let e = l.try_acquire(Priority::SHEDDABLE).unwrap_err();
    assert_eq!(e.reason(), Refusal::Shed);
    assert_eq!(
        e.to_string(),
        "limiter refused a sheddable call (limit 10, 5 in flight): the free slots are kept for higher priorities"
    );
    assert!(l.try_acquire(Priority::CRITICAL).is_ok());
    drop(held);
}

#[test]
fn a_long_gap_or_a_clock_near_its_end_never_breaks_the_rtt() {
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(u64::MAX - 1_000));
    let l = limiter(LimitAlgorithm::Vegas(VegasConfig::default()), &clock);
    let p = l.try_acquire(Priority::DEFAULT).unwrap();
    clock.advance(Duration::from_secs(10 * 365 * 86_400)); // saturates at u64::MAX
    p.success();
    assert_eq!(l.snapshot().last_rtt, Duration::from_nanos(1_000));
    assert!((1..=1000).contains(&l.limit()));
}

#[test]
fn bad_settings_are_refused_with_the_field_the_value_and_what_is_allowed() {
    let cases = [
        (
            VegasConfig::builder().min_limit(0).build().unwrap_err(),
            "min_limit must be in [1, max_limit = 1000], got 0",
        ),
        (
            VegasConfig::builder()
                .initial_limit(2000)
                .build()
                .unwrap_err(),
            "initial_limit must be in [min_limit = 1, max_limit = 1000], got 2000",
        ),
        (
            Gradient2Config::builder().max_limit(0).build().unwrap_err(),
            "max_limit must be in [1, 1000000], got 0",
        ),
        (
            Gradient2Config::builder()
                .initial_limit(10)
                .build()
                .unwrap_err(),
            "initial_limit must be in [min_limit = 20, max_limit = 200], got 10",
        ),
        (
            Gradient2Config::builder()
                .smoothing(0.0)
                .build()
                .unwrap_err(),
            "smoothing must be in (0, 1], got 0",
        ),
        (
            Gradient2Config::builder()
                .long_window(0)
                .build()
                .unwrap_err(),
            "long_window must be in [1, 1000000], got 0",
        ),
        (
            VegasConfig::builder()
                .smoothing(f64::NAN)
                .build()
                .unwrap_err(),
            "smoothing must be in (0, 1], got NaN",
        ),
        (
            VegasConfig::builder()
                .probe_multiplier(0)
                .build()
                .unwrap_err(),
            "probe_multiplier must be in [1, 1000000], got 0",
        ),
        (
            AimdConfig::builder()
                .backoff_ratio(0.4)
                .build()
                .unwrap_err(),
            "backoff_ratio must be in [0.5, 1), got 0.4",
        ),
        (
            AimdConfig::builder()
                .timeout(Duration::ZERO)
                .build()
                .unwrap_err(),
            "timeout must be in (0ns, 86400s], got 0ns",
        ),
        (
            FixedLimit::new(2_000_000).unwrap_err(),
            "limit must be in [1, 1000000], got 2000000",
        ),
        (
            LimiterConfig::builder()
                .max_waiting(2_000_000)
                .build()
                .unwrap_err(),
            "max_waiting must be in [0, 1000000], got 2000000",
        ),
    ];
    for (e, want) in cases {
        assert_eq!(e.to_string(), want);
    }
}

#[cfg(feature = "metrics")]
#[test]
fn the_gauges_show_the_limit_the_load_and_the_rtt_estimates() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tripline_policies::limiter::LimiterMetrics;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let l = limiter(LimitAlgorithm::Vegas(VegasConfig::default()), &clock);
    metrics::with_local_recorder(&recorder, || {
        let m = LimiterMetrics::new("catalog", Vec::new());
        wave(&l, &clock, 5, 10 * MS, Outcome::Success);
        let _held = l.try_acquire(Priority::DEFAULT).unwrap();
        let dropped = l.try_acquire(Priority::DEFAULT).unwrap();
        clock.advance(10 * MS);
        dropped.dropped(); // a drop: the limit loses log10(20) = 1
        m.update(&l);
    });
    let mut seen = std::collections::HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let k = key.key();
        let labels: Vec<String> = k
            .labels()
            .filter(|l| l.key() != "limiter")
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        let v = match value {
            DebugValue::Gauge(g) => g.into_inner(),
            DebugValue::Counter(c) => c as f64,
            DebugValue::Histogram(_) => continue,
        };
        seen.insert(format!("{}{:?}", k.name(), labels), v);
    }
    assert_eq!(seen["tripline_limiter_limit[]"], 19.0);
    assert_eq!(seen["tripline_limiter_in_flight[]"], 1.0);
    assert_eq!(seen["tripline_limiter_waiting[]"], 0.0);
    assert_eq!(
        seen["tripline_limiter_rtt_seconds[\"estimate=baseline\"]"],
        0.01
    );
    assert_eq!(
        seen["tripline_limiter_rtt_seconds[\"estimate=last\"]"],
        0.01
    );
    assert_eq!(
        seen["tripline_limiter_samples_total[\"outcome=success\"]"],
        5.0
    );
    assert_eq!(
        seen["tripline_limiter_samples_total[\"outcome=dropped\"]"],
        1.0
    );
}

#[cfg(feature = "tower")]
mod tower_layer {
    use std::time::Duration;

    use tower::{Layer, Service, ServiceExt, service_fn};
    use tripline::ManualClock;
    use tripline_policies::BoxError;
    use tripline_policies::limiter::{AimdConfig, LimitAlgorithm, LimitExceeded, LimiterLayer};
    use tripline_policies::shed::{Priority, Refusal};

    use super::{fixed, limiter};

    #[tokio::test(start_paused = true)]
    async fn errors_are_drops_and_local_refusals_feed_nothing() {
        let clock = ManualClock::new();
        let aimd = AimdConfig::builder()
            .min_limit(1)
            .initial_limit(10)
            .build()
            .unwrap();
        let l = limiter(LimitAlgorithm::Aimd(aimd), &clock);
        let svc = LimiterLayer::new(l.clone()).layer(service_fn(|x: u32| async move {
            match x {
                0 => Ok::<u32, BoxError>(0),
                1 => Err(Box::new(support_boom()) as BoxError),
                _ => Err(Box::new(overflow()) as BoxError),
            }
        }));
        svc.clone().oneshot(1).await.unwrap_err();
        assert_eq!(l.limit(), 9);
        let _ = svc.clone().oneshot(2).await;
        assert_eq!(l.snapshot().ignored, 1);
        svc.oneshot(0).await.unwrap();
        assert_eq!(l.snapshot().successes, 1);
    }

    fn support_boom() -> std::io::Error {
        std::io::Error::other("boom")
    }

    fn overflow() -> tripline_policies::gate::GateOverflow {
        let g = tripline_policies::gate::Gate::new(
            tripline_policies::gate::GateConfig::builder()
                .max_requests(1)
                .build()
                .unwrap(),
        );
        let _held = g.try_request().unwrap();
        g.try_request().unwrap_err()
    }

    #[tokio::test(start_paused = true)]
    async fn the_layer_refuses_over_the_limit_and_queues_by_priority() {
        let config = tripline_policies::limiter::LimiterConfig::builder()
            .algorithm(fixed(1))
            .max_waiting(4)
            .max_wait(Duration::from_secs(1))
            .build()
            .unwrap();
        let l = tripline_policies::limiter::Limiter::new(config);
        let mut svc = LimiterLayer::new(l.clone())
            .priority(|p: &Priority| *p)
            .layer(service_fn(
                |p: Priority| async move { Ok::<_, BoxError>(p) },
            ));
        let held = l.try_acquire(Priority::DEFAULT).unwrap();
        let low = svc.ready().await.unwrap().call(Priority::SHEDDABLE);
        let high = svc.ready().await.unwrap().call(Priority::CRITICAL);
        assert_eq!(l.queue(), [Priority::CRITICAL, Priority::SHEDDABLE]);
        let low = tokio::spawn(low);
        let high = tokio::spawn(high);
        drop(held);
        assert_eq!(high.await.unwrap().unwrap(), Priority::CRITICAL);
        assert_eq!(low.await.unwrap().unwrap(), Priority::SHEDDABLE);
        let _held = l.try_acquire(Priority::DEFAULT).unwrap();
        let full = tripline_policies::limiter::Limiter::new(
            tripline_policies::limiter::LimiterConfig::builder()
                .algorithm(fixed(1))
                .build()
                .unwrap(),
        );
        let _busy = full.try_acquire(Priority::DEFAULT).unwrap();
        let err = LimiterLayer::new(full)
            .layer(service_fn(|x: u32| async move { Ok::<_, BoxError>(x) }))
            .oneshot(1)
            .await
            .unwrap_err();
        assert_eq!(
            err.downcast_ref::<LimitExceeded>().unwrap().reason(),
            Refusal::Full
        );
    }
}

#[cfg(feature = "pipeline")]
#[tokio::test(start_paused = true)]
async fn in_the_pipeline_a_timeout_is_a_drop_and_the_rtt_is_the_calls_own() {
    use tripline_policies::pipeline::{Pipeline, PipelineError};
    let aimd = AimdConfig::builder()
        .min_limit(1)
        .initial_limit(10)
        .build()
        .unwrap();
    let config = LimiterConfig::builder()
        .algorithm(LimitAlgorithm::Aimd(aimd))
        .build()
        .unwrap();
    let l = Limiter::with_clock(config, tripline::TokioClock::new());
    let pipeline = Pipeline::builder()
        .limiter(l.clone())
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let r = pipeline
        .call(|| async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, support::Boom>(())
        })
        .await;
    assert!(matches!(r, Err(PipelineError::Timeout(_))));
    assert_eq!(l.limit(), 9);
    let s = l.snapshot();
    assert_eq!((s.drops, s.last_rtt), (1, Duration::from_millis(100)));
    pipeline
        .call(|| async {
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok::<_, support::Boom>(())
        })
        .await
        .unwrap();
    assert_eq!(l.snapshot().last_rtt, Duration::from_millis(30));
}

/// Real threads acquiring, waiting and reporting at random for a bounded number of rounds: the
/// limit stays within its bounds, and every slot and place comes back.
#[test]
fn under_real_threads_no_slot_leaks_and_the_limit_stays_in_bounds() {
    use std::sync::Arc;
    let aimd = AimdConfig::builder()
        .min_limit(2)
        .initial_limit(8)
        .max_limit(16)
        .build()
        .unwrap();
    let config = LimiterConfig::builder()
        .algorithm(LimitAlgorithm::Aimd(aimd))
        .shares(tripline_policies::shed::Shares::default())
        .max_waiting(8)
        .max_wait(Duration::from_secs(1))
        .build()
        .unwrap();
    let l = Arc::new(Limiter::new(config));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let l = Arc::clone(&l);
            std::thread::spawn(move || {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                for _ in 0..5_000 {
                    let p = Priority::new((next() % 256) as u8);
                    let r = next() % 4;
                    let permit = match l.admit(p) {
                        Ok(LimiterAdmission::Now(permit)) => Some(permit),
                        Ok(LimiterAdmission::Queued(mut t)) => {
                            let mut got = None;
                            for _ in 0..3 {
                                if let Some(g) = t.try_take() {
                                    got = g.ok();
                                    break;
                                }
                                std::thread::yield_now();
                            }
                            got
                        }
                        Err(_) => None,
                    };
                    if let Some(permit) = permit {
                        assert!((2..=16).contains(&l.limit()));
                        match r {
                            0 => permit.dropped(),
                            1 => permit.ignore(),
                            _ => permit.success(),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!((l.in_flight(), l.waiting()), (0, 0));
    assert!((2..=16).contains(&l.limit()));
}
