//! Retry: jitter bounds over many seeded draws, no overflow at large n, the loop on paused
//! time, the predicate, budgets and the gate in the tower layer, and a breaker's rejection
//! never retried.
#![cfg(feature = "retry")]

mod support;

use std::time::Duration;

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use tripline_policies::retry::{Backoff, Jitter, RetryPolicy};

const BASE: Duration = Duration::from_millis(100);
const CAP: Duration = Duration::from_secs(20);

fn rng() -> Pcg64Mcg {
    Pcg64Mcg::seed_from_u64(0x5eed)
}

#[test]
fn exponential_ceiling_doubles_to_the_cap() {
    let b = Backoff::new(BASE, CAP, Jitter::None).unwrap();
    let expected = [100, 200, 400, 800, 1600, 3200, 6400, 12800, 20000, 20000];
    for (n, ms) in expected.iter().enumerate() {
        assert_eq!(b.ceiling(n as u32), Duration::from_millis(*ms), "n = {n}");
        assert_eq!(
            b.delay(n as u32, BASE, &mut rng()),
            Duration::from_millis(*ms)
        );
    }
}

#[test]
fn no_overflow_at_large_n() {
    for jitter in [
        Jitter::None,
        Jitter::Full,
        Jitter::Equal,
        Jitter::Decorrelated,
    ] {
        // The largest durations allowed, too.
        for (base, cap) in [
            (BASE, CAP),
            (Duration::from_secs(3600), Duration::from_secs(86_400)),
        ] {
            let b = Backoff::new(base, cap, jitter).unwrap();
            let mut r = rng();
            for n in [63, 64, 127, 128, 1000, u32::MAX] {
                assert_eq!(b.ceiling(n), cap);
                let d = b.delay(n, cap, &mut r);
                assert!(d <= cap, "{jitter:?} n = {n}: {d:?}");
            }
        }
    }
}

#[test]
fn full_jitter_is_uniform_in_zero_to_ceiling() {
    let b = Backoff::new(BASE, CAP, Jitter::Full).unwrap();
    let mut r = rng();
    for n in 0..12 {
        let t = b.ceiling(n);
        let draws: Vec<_> = (0..2000).map(|_| b.delay(n, BASE, &mut r)).collect();
        assert!(draws.iter().all(|d| *d <= t), "n = {n}");
        // Spread over the whole range, not bunched at one end.
        assert!(draws.iter().any(|d| *d < t / 10), "n = {n}");
        assert!(draws.iter().any(|d| *d > t * 9 / 10), "n = {n}");
        let mean = draws.iter().sum::<Duration>() / draws.len() as u32;
        assert!(
            mean > t * 2 / 5 && mean < t * 3 / 5,
            "n = {n}: mean {mean:?} of {t:?}"
        );
    }
}

#[test]
fn equal_jitter_is_between_half_and_all_of_the_ceiling() {
    let b = Backoff::new(BASE, CAP, Jitter::Equal).unwrap();
    let mut r = rng();
    for n in 0..12 {
        let t = b.ceiling(n);
        let draws: Vec<_> = (0..2000).map(|_| b.delay(n, BASE, &mut r)).collect();
        assert!(draws.iter().all(|d| *d >= t / 2 && *d <= t), "n = {n}");
        assert!(draws.iter().any(|d| *d < t * 6 / 10), "n = {n}");
        assert!(draws.iter().any(|d| *d > t * 9 / 10), "n = {n}");
    }
}

#[test]
fn decorrelated_jitter_is_between_base_and_three_times_the_previous() {
    let b = Backoff::new(BASE, CAP, Jitter::Decorrelated).unwrap();
    let mut r = rng();
    for _ in 0..200 {
        let mut prev = BASE;
        for n in 0..30 {
            let d = b.delay(n, prev, &mut r);
            assert!(d >= BASE, "{d:?} below base");
            assert!(
                d <= (prev * 3).min(CAP),
                "{d:?} above min(cap, 3 × {prev:?})"
            );
            prev = d;
        }
    }
    // It reaches the cap eventually and stays bounded by it.
    let mut prev = BASE;
    let mut hit_cap = false;
    for n in 0..200 {
        prev = b.delay(n, prev, &mut r);
        hit_cap |= prev == CAP;
    }
    assert!(hit_cap);
}

#[test]
fn a_seed_reproduces_the_delays() {
    let b = Backoff::new(BASE, CAP, Jitter::Full).unwrap();
    let run = || {
        let mut r = Pcg64Mcg::seed_from_u64(42);
        (0..20)
            .map(|n| b.delay(n, BASE, &mut r))
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn bad_configuration_is_rejected_with_the_field() {
    let cases = [
        (
            RetryPolicy::builder().max_attempts(0).build().unwrap_err(),
            "max_attempts must be in [1, 100], got 0",
        ),
        (
            RetryPolicy::builder()
                .max_attempts(101)
                .build()
                .unwrap_err(),
            "max_attempts must be in [1, 100], got 101",
        ),
        (
            RetryPolicy::builder()
                .base_delay(Duration::ZERO)
                .build()
                .unwrap_err(),
            "base_delay must be in (0ns, 3600s], got 0ns",
        ),
        (
            RetryPolicy::builder()
                .base_delay(Duration::from_secs(2))
                .max_delay(Duration::from_secs(1))
                .build()
                .unwrap_err(),
            "max_delay must be in [base_delay = 2s, 86400s], got 1s",
        ),
    ];
    for (err, msg) in cases {
        assert_eq!(err.to_string(), msg);
    }
}

#[tokio::test(start_paused = true)]
async fn the_loop_waits_the_backoff_between_attempts() {
    let policy = RetryPolicy::builder()
        .max_attempts(4)
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let calls = support::Calls::default();
    let start = tokio::time::Instant::now();
    let r: Result<(), &str> = policy
        .call(|| {
            calls.bump();
            async { Err("reset") }
        })
        .await;
    assert_eq!(r, Err("reset"));
    assert_eq!(calls.get(), 4);
    // 100 + 200 + 400 ms, no jitter.
    assert_eq!(start.elapsed(), Duration::from_millis(700));
    let s = policy.stats();
    assert_eq!((s.requests, s.retries, s.attempts_exhausted), (1, 3, 1));
}

#[tokio::test(start_paused = true)]
async fn the_predicate_decides_what_is_retried() {
    let policy = RetryPolicy::builder()
        .retry_if(|r: &Result<u16, support::Boom>| matches!(r, Ok(503) | Err(_)))
        .seed(1)
        .build()
        .unwrap();
    let calls = support::Calls::default();
    // A 404 is final.
    let r = policy
        .call(|| {
            calls.bump();
            async { Ok(404) }
        })
        .await;
    assert_eq!((r, calls.get()), (Ok(404), 1));
    // A 503 is retried, as a response.
    let r = policy
        .call(|| {
            let n = calls.bump();
            async move { if n < 3 { Ok(503) } else { Ok(200) } }
        })
        .await;
    assert_eq!((r, calls.get()), (Ok(200), 3));
}

#[cfg(feature = "tower")]
mod tower_layer {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use tower::{Layer, ServiceBuilder, ServiceExt, service_fn};
    use tripline::{Rejected, State};
    use tripline_policies::BoxError;
    use tripline_policies::breaker::BreakerLayer;
    use tripline_policies::retry::RetryLayer;
    use tripline_policies::retry::budget::TokenBucketBudget;

    fn failing(
        calls: support::Calls,
    ) -> impl tower::Service<u32, Response = u32, Error = BoxError, Future = impl Send> + Clone
    {
        service_fn(move |_: u32| {
            calls.bump();
            async { Err::<u32, BoxError>(Box::new(support::Boom("503"))) }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_breaker_rejection_is_never_retried() {
        let breaker = support::small_breaker("vendor");
        breaker.force_open();
        let calls = support::Calls::default();
        let policy = RetryPolicy::builder()
            .max_attempts(5)
            .retry_if(|_: &Result<u32, BoxError>| true) // "retry everything": still not a rejection
            .build()
            .unwrap();
        let svc = ServiceBuilder::new()
            .layer(RetryLayer::new(policy.clone()))
            .layer(BreakerLayer::new(breaker.clone()))
            .service(failing(calls.clone()));
        let err = svc.oneshot(1).await.unwrap_err();
        let rejected = err
            .downcast_ref::<Rejected>()
            .expect("the breaker's rejection");
        assert_eq!(rejected.state(), State::ForcedOpen);
        assert_eq!(calls.get(), 0);
        let s = policy.stats();
        assert_eq!((s.retries, s.local_rejections), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_breaker_that_opens_mid_request_ends_its_retries() {
        let breaker = support::small_breaker("vendor");
        let calls = support::Calls::default();
        let policy = RetryPolicy::builder()
            .max_attempts(10)
            .seed(3)
            .build()
            .unwrap();
        let svc = ServiceBuilder::new()
            .layer(RetryLayer::new(policy.clone()))
            .layer(BreakerLayer::new(breaker.clone()))
            .service(failing(calls.clone()));
        // 4 failing attempts trip the breaker; the 5th attempt is refused and not retried.
        let err = svc.oneshot(1).await.unwrap_err();
        assert!(err.downcast_ref::<Rejected>().is_some());
        assert_eq!(calls.get(), 4);
        assert_eq!(breaker.state(), State::Open);
        // Three retries were made; the fourth was refused by the breaker, so it is not
        // counted (and its budget withdrawal would be given back).
        let s = policy.stats();
        assert_eq!((s.retries, s.local_rejections), (3, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_bucket_refuses_retries_but_first_attempts_still_go_out() {
        // 10 tokens: two retries of cost 5.
        let bucket = Arc::new(TokenBucketBudget::builder().capacity(10).build().unwrap());
        let policy = RetryPolicy::builder()
            .max_attempts(3)
            .budget(bucket.clone())
            .seed(4)
            .build()
            .unwrap();
        let calls = support::Calls::default();
        let svc = RetryLayer::new(policy.clone()).layer(failing(calls.clone()));
        svc.clone().oneshot(1).await.unwrap_err();
        assert_eq!((calls.get(), bucket.tokens()), (3, 0));
        for _ in 0..5 {
            svc.clone().oneshot(1).await.unwrap_err();
        }
        // Five more requests, one attempt each.
        assert_eq!(calls.get(), 8);
        assert_eq!(policy.stats().budget_exhausted, 5);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retried_success_refunds_the_bucket_and_a_first_success_adds_one() {
        let bucket = Arc::new(TokenBucketBudget::default());
        let policy = RetryPolicy::builder()
            .budget(bucket.clone())
            .seed(5)
            .build()
            .unwrap();
        let calls = support::Calls::default();
        let flaky = service_fn({
            let calls = calls.clone();
            move |_: u32| {
                let n = calls.bump();
                async move {
                    if n == 1 {
                        Err::<u32, BoxError>("reset".into())
                    } else {
                        Ok(n)
                    }
                }
            }
        });
        let svc = RetryLayer::new(policy).layer(flaky);
        // Full bucket: the retry takes 5, its success refunds 5.
        assert_eq!(svc.clone().oneshot(0).await.unwrap(), 2);
        assert_eq!(bucket.tokens(), 500);
        // Drain a little, then a first-try success puts back exactly 1.
        assert!(tripline_policies::retry::budget::RetryBudget::withdraw(
            &*bucket,
            tripline_policies::retry::budget::RetryCause::Error
        ));
        svc.oneshot(0).await.unwrap();
        assert_eq!(bucket.tokens(), 496);
    }

    #[cfg(feature = "timeout")]
    #[tokio::test(start_paused = true)]
    async fn timeouts_are_retried_at_the_timeout_price() {
        use tripline_policies::timeout::{Elapsed, TimeoutLayer};
        let bucket = Arc::new(TokenBucketBudget::default());
        let policy = RetryPolicy::builder()
            .max_attempts(3)
            .budget(bucket.clone())
            .seed(6)
            .build()
            .unwrap();
        let calls = support::Calls::default();
        let hung = service_fn({
            let calls = calls.clone();
            move |_: u32| {
                calls.bump();
                async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok::<u32, BoxError>(0)
                }
            }
        });
        let svc = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .layer(TimeoutLayer::new(Duration::from_secs(1)).unwrap())
            .service(hung);
        let err = svc.oneshot(0).await.unwrap_err();
        assert!(err.downcast_ref::<Elapsed>().is_some());
        assert_eq!(calls.get(), 3);
        assert_eq!(bucket.tokens(), 480); // two retries at 10
    }

    /// A service that never answers, counting its calls.
    fn hung(
        calls: support::Calls,
    ) -> impl tower::Service<u32, Response = u32, Error = BoxError, Future = impl Send> + Clone
    {
        service_fn(move |_: u32| {
            calls.bump();
            async {
                tokio::time::sleep(Duration::from_secs(60)).await;
                Ok::<u32, BoxError>(0)
            }
        })
    }

    /// Calls a tower stack `timed_out` (a retry layer around a timeout around a service that
    /// never answers) with a predicate that retries nothing, and returns (calls, tokens left).
    async fn timeouts_retried<S>(
        retry_timeouts: bool,
        stack: impl Fn(support::Calls) -> S,
    ) -> (u32, u32)
    where
        S: tower::Service<u32, Response = u32> + Clone,
        S::Error: Into<BoxError>,
    {
        let bucket = Arc::new(TokenBucketBudget::default());
        let policy = RetryPolicy::builder()
            .max_attempts(3)
            .budget(bucket.clone())
            .retry_timeouts(retry_timeouts)
            .retry_if(|_: &Result<u32, BoxError>| false)
            .seed(6)
            .build()
            .unwrap();
        let calls = support::Calls::default();
        let svc = RetryLayer::new(policy).layer(stack(calls.clone()));
        svc.oneshot(0).await.unwrap_err();
        (calls.get(), bucket.tokens())
    }

    #[cfg(feature = "timeout")]
    #[tokio::test(start_paused = true)]
    async fn a_timeout_is_retried_by_retry_timeouts_alone_as_in_the_pipeline() {
        use tripline_policies::pipeline::Pipeline;
        use tripline_policies::timeout::TimeoutLayer;
        let ours = |calls| {
            TimeoutLayer::new(Duration::from_secs(1))
                .unwrap()
                .layer(hung(calls))
        };
        // The predicate retries nothing; timeouts are retried all the same (two retries at
        // the timeout price of 10 tokens), unless `retry_timeouts(false)`.
        assert_eq!(timeouts_retried(true, ours).await, (3, 480));
        assert_eq!(timeouts_retried(false, ours).await, (1, 500));
        // The pipeline, whose timeout is not a result the predicate could see, agrees.
        for (retry_timeouts, expected) in [(true, 3), (false, 1)] {
            let policy = RetryPolicy::builder()
                .max_attempts(3)
                .retry_timeouts(retry_timeouts)
                .retry_if(|_: &Result<u32, support::Boom>| false)
                .build()
                .unwrap();
            let pipeline = Pipeline::builder()
                .retry(policy)
                .timeout(Duration::from_secs(1))
                .build()
                .unwrap();
            let calls = support::Calls::default();
            let _ = pipeline
                .call(|| {
                    calls.bump();
                    async {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        Ok::<u32, support::Boom>(0)
                    }
                })
                .await;
            assert_eq!(calls.get(), expected, "retry_timeouts({retry_timeouts})");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn towers_and_tokios_timeout_errors_are_timeouts() {
        let towers =
            |calls| tower::timeout::TimeoutLayer::new(Duration::from_secs(1)).layer(hung(calls));
        assert_eq!(timeouts_retried(true, towers).await, (3, 480));
        assert_eq!(timeouts_retried(false, towers).await, (1, 500));
        let tokios = |calls: support::Calls| {
            service_fn(move |_: u32| {
                calls.bump();
                async {
                    tokio::time::timeout(
                        Duration::from_secs(1),
                        tokio::time::sleep(Duration::from_secs(60)),
                    )
                    .await
                    .map(|()| 0u32)
                    .map_err(BoxError::from)
                }
            })
        };
        assert_eq!(timeouts_retried(true, tokios).await, (3, 480));
        assert_eq!(timeouts_retried(false, tokios).await, (1, 500));
    }

    #[cfg(feature = "gate")]
    #[tokio::test(start_paused = true)]
    async fn the_gate_caps_retries_in_flight_and_refunds_the_budget() {
        use tripline_policies::gate::{Gate, GateConfig};
        let gate = Gate::new(GateConfig::builder().max_retries(0).build().unwrap());
        let bucket = Arc::new(TokenBucketBudget::default());
        let policy = RetryPolicy::builder()
            .budget(bucket.clone())
            .build()
            .unwrap();
        let calls = support::Calls::default();
        let svc = RetryLayer::new(policy.clone())
            .gate(gate.clone())
            .layer(failing(calls.clone()));
        svc.oneshot(0).await.unwrap_err();
        assert_eq!(calls.get(), 1);
        assert_eq!(gate.overflows().upstream_rq_retry_overflow, 1);
        assert_eq!(bucket.tokens(), 500);
        let s = policy.stats();
        assert_eq!((s.retries, s.gate_overflows), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_cannot_be_copied_is_sent_once() {
        let calls = support::Calls::default();
        let policy = RetryPolicy::builder().max_attempts(5).build().unwrap();
        let svc = RetryLayer::new(policy)
            .clone_requests_with(|_: &u32| None)
            .layer(failing(calls.clone()));
        svc.oneshot(0).await.unwrap_err();
        assert_eq!(calls.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retries_wait_the_backoff_then_for_readiness() {
        let calls = support::Calls::default();
        let policy = RetryPolicy::builder()
            .max_attempts(3)
            .jitter(Jitter::None)
            .build()
            .unwrap();
        let svc = RetryLayer::new(policy.clone()).layer(failing(calls.clone()));
        let start = tokio::time::Instant::now();
        svc.oneshot(0).await.unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        assert_eq!(calls.0.load(Ordering::SeqCst), 3);
        let s = policy.stats();
        assert_eq!((s.requests, s.retries, s.attempts_exhausted), (1, 2, 1));
    }
}

/// The retry loop driven step by step ([`RetryPolicy::begin_request`]), as an event loop or a
/// simulator on virtual time drives it: the same delays as the async loop for the same seed,
/// and the same budget charges, refunds and counters as the pipeline.
mod own_time {
    use std::sync::Arc;
    use std::time::Duration;

    use tripline::ManualClock;
    use tripline_policies::retry::budget::{RetryCause, TokenBucketBudget, TpsBudget};
    use tripline_policies::retry::{AttemptResult, Jitter, RetryPolicy};

    fn policy(jitter: Jitter, seed: u64) -> RetryPolicy {
        RetryPolicy::builder()
            .max_attempts(6)
            .base_delay(Duration::from_millis(10))
            .max_delay(Duration::from_secs(1))
            .jitter(jitter)
            .seed(seed)
            .build()
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn the_delays_are_those_of_the_async_loop() {
        for jitter in [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
        ] {
            // The async loop, on paused time: the gaps between its attempts.
            let looped = policy(jitter, 11);
            let starts = std::sync::Mutex::new(Vec::new());
            let _ = looped
                .call(|| {
                    starts.lock().unwrap().push(tokio::time::Instant::now());
                    async { Err::<(), _>("busy") }
                })
                .await;
            let starts = starts.into_inner().unwrap();
            let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1] - w[0]).collect();
            // The same policy driven by hand.
            let driven = policy(jitter, 11);
            let mut state = driven.begin_request();
            let mut delays = Vec::new();
            while let Some(d) = state.next(AttemptResult::Failure(RetryCause::Error)) {
                delays.push(d);
                state.send();
            }
            // tokio's timer wakes on whole milliseconds: each gap is its delay rounded up.
            let rounded: Vec<Duration> = delays
                .iter()
                .map(|d| Duration::from_millis(d.as_nanos().div_ceil(1_000_000) as u64))
                .collect();
            assert_eq!(rounded, gaps, "{jitter:?}");
            assert_eq!(delays.len(), 5);
            assert_eq!(state.attempts(), 6);
            assert_eq!(looped.stats(), driven.stats());
        }
    }

    #[test]
    fn a_refused_retry_was_never_made() {
        let bucket = Arc::new(TokenBucketBudget::builder().capacity(10).build().unwrap());
        let policy = RetryPolicy::builder()
            .budget(bucket.clone())
            .seed(1)
            .build()
            .unwrap();
        let mut s = policy.begin_request();
        assert!(s.next(AttemptResult::Failure(RetryCause::Error)).is_some());
        assert_eq!(bucket.tokens(), 5);
        s.send();
        // An open breaker refuses the retry's attempt: the withdrawal comes back.
        assert_eq!(s.next(AttemptResult::Refused), None);
        assert_eq!(bucket.tokens(), 10);
        let stats = policy.stats();
        assert_eq!((stats.retries, stats.local_rejections), (0, 1));
        // A gate's retry limit refuses a granted retry before it is sent.
        let mut s = policy.begin_request();
        assert!(
            s.next(AttemptResult::Failure(RetryCause::Timeout))
                .is_some()
        );
        assert_eq!(bucket.tokens(), 0);
        s.cancel();
        assert_eq!(bucket.tokens(), 10);
        assert_eq!(policy.stats().gate_overflows, 1);
        // A request dropped during its backoff gives its retry back too.
        let mut s = policy.begin_request();
        assert!(s.next(AttemptResult::Failure(RetryCause::Error)).is_some());
        drop(s);
        assert_eq!(bucket.tokens(), 10);
        assert_eq!(policy.stats().retries, 0);
    }

    #[test]
    fn successes_and_final_results_end_the_request() {
        let policy = policy(Jitter::Full, 3);
        let mut s = policy.begin_request();
        assert_eq!(s.next(AttemptResult::Success), None);
        let mut s = policy.begin_request();
        assert_eq!(s.next(AttemptResult::Final), None);
        assert_eq!(policy.stats().retries, 0);
    }

    #[test]
    fn timeouts_are_retried_only_when_the_policy_says_so() {
        let no = RetryPolicy::builder()
            .retry_timeouts(false)
            .seed(2)
            .build()
            .unwrap();
        let mut s = no.begin_request();
        assert_eq!(s.next(AttemptResult::Failure(RetryCause::Timeout)), None);
        let mut s = no.begin_request();
        assert!(s.next(AttemptResult::Failure(RetryCause::Error)).is_some());
    }

    #[test]
    fn a_ratio_budget_on_virtual_time_caps_retries_as_a_share_of_requests() {
        let clock = ManualClock::new();
        let budget = Arc::new(
            TpsBudget::builder()
                .min_per_sec(0)
                .retry_ratio(0.1)
                .build_with_clock(clock.clone())
                .unwrap(),
        );
        let policy = RetryPolicy::builder()
            .budget(budget)
            .max_attempts(3)
            .seed(4)
            .build()
            .unwrap();
        // 100 requests, all failing: 10 % of them may be retried, once each.
        let mut states: Vec<_> = (0..100).map(|_| policy.begin_request()).collect();
        let granted = states
            .iter_mut()
            .map(|s| s.next(AttemptResult::Failure(RetryCause::Error)))
            .filter(Option::is_some)
            .count();
        assert_eq!(granted, 10);
        assert_eq!(policy.stats().budget_exhausted, 90);
        // The deposits expire with the ttl: 11 s later the budget is empty.
        clock.advance(Duration::from_secs(11));
        let mut late = policy.begin_request();
        clock.advance(Duration::from_secs(11));
        assert_eq!(late.next(AttemptResult::Failure(RetryCause::Error)), None);
    }
}

#[test]
fn each_request_is_counted_once_by_how_it_ended() {
    use tripline_policies::retry::AttemptResult;
    use tripline_policies::retry::budget::RetryCause;
    let policy = RetryPolicy::builder()
        .max_attempts(3)
        .jitter(tripline_policies::retry::Jitter::None)
        .build()
        .unwrap();
    let fail = AttemptResult::Failure(RetryCause::Error);
    // Succeeded at once; after a retry.
    assert!(
        policy
            .begin_request()
            .next(AttemptResult::Success)
            .is_none()
    );
    let mut r = policy.begin_request();
    assert!(r.next(fail).is_some());
    r.send();
    assert!(r.next(AttemptResult::Success).is_none());
    // Failed with a final error at once; after every attempt.
    assert!(policy.begin_request().next(AttemptResult::Final).is_none());
    let mut r = policy.begin_request();
    for _ in 0..2 {
        assert!(r.next(fail).is_some());
        r.send();
    }
    assert!(r.next(fail).is_none());
    // A retry another limit took back: the request failed without one.
    let mut r = policy.begin_request();
    assert!(r.next(fail).is_some());
    r.cancel();
    // A local refusal is neither.
    assert!(
        policy
            .begin_request()
            .next(AttemptResult::Refused)
            .is_none()
    );
    let s = policy.stats();
    assert_eq!(
        (
            s.succeeded_without_retry,
            s.succeeded_with_retry,
            s.failed_without_retry,
            s.failed_with_retry
        ),
        (1, 1, 2, 1)
    );
    assert_eq!(
        (s.requests, s.local_rejections, s.gate_overflows),
        (6, 1, 1)
    );
}
