//! The pipeline: the order whatever the builder's, the timeout innermost, a rejection never
//! retried, a re-opened breaker with zero retries, the other placement, local refusals not
//! counted against the dependency.
#![cfg(feature = "pipeline")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tripline::{BreakerConfig, CircuitBreaker, State, TokioClock};
use tripline_policies::bulkhead::{Bulkhead, BulkheadConfig};
use tripline_policies::gate::{Gate, GateConfig};
use tripline_policies::pipeline::{Pipeline, PipelineError, RetryPlacement, Stage};
use tripline_policies::retry::budget::TokenBucketBudget;
use tripline_policies::retry::{Jitter, RetryPolicy};
use tripline_policies::throttle::Throttle;

use support::{Boom, Calls};

fn retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(max_attempts)
        .jitter(Jitter::None)
        .build()
        .unwrap()
}

fn bulkhead(max_concurrent: u32, max_waiting: u32, max_wait: Duration) -> Bulkhead {
    Bulkhead::new(
        BulkheadConfig::builder()
            .max_concurrent(max_concurrent)
            .max_waiting(max_waiting)
            .max_wait(max_wait)
            .build()
            .unwrap(),
    )
}

async fn dependency(calls: &Calls, latency: Duration, fail: bool) -> Result<&'static str, Boom> {
    calls.bump();
    tokio::time::sleep(latency).await;
    if fail { Err(Boom("503")) } else { Ok("ok") }
}

#[tokio::test(start_paused = true)]
async fn the_order_does_not_depend_on_the_builder_calls() {
    let all = [
        Stage::Retry,
        Stage::Breaker,
        Stage::Gate,
        Stage::Bulkhead,
        Stage::Throttle,
        Stage::Timeout,
    ];
    let t = Duration::from_secs(1);
    let a = Pipeline::builder()
        .timeout(t)
        .throttle(Throttle::default())
        .bulkhead(Bulkhead::default())
        .gate(Gate::default())
        .breaker(support::small_breaker("a"))
        .retry(retry(3))
        .build()
        .unwrap();
    let b = Pipeline::builder()
        .retry(retry(3))
        .breaker(support::small_breaker("b"))
        .gate(Gate::default())
        .bulkhead(Bulkhead::default())
        .throttle(Throttle::default())
        .timeout(t)
        .build()
        .unwrap();
    let c = Pipeline::builder()
        .gate(Gate::default())
        .timeout(t)
        .retry(retry(3))
        .throttle(Throttle::default())
        .breaker(support::small_breaker("c"))
        .bulkhead(Bulkhead::default())
        .build()
        .unwrap();
    assert_eq!(a.order(), all);
    assert_eq!(b.order(), all);
    assert_eq!(c.order(), all);
    assert_eq!(*a.order().last().unwrap(), Stage::Timeout);

    let inside = Pipeline::builder()
        .timeout(t)
        .retry(retry(3))
        .breaker(support::small_breaker("d"))
        .retry_inside_breaker()
        .build()
        .unwrap();
    assert_eq!(
        inside.order(),
        [Stage::Breaker, Stage::Retry, Stage::Timeout]
    );
    assert_eq!(inside.placement(), RetryPlacement::InsideBreaker);
}

#[tokio::test(start_paused = true)]
async fn the_timeout_times_the_dependency_only_not_the_bulkhead_wait() {
    let calls = Calls::default();
    let pipeline = Pipeline::builder()
        .timeout(Duration::from_secs(1))
        .bulkhead(bulkhead(1, 1, Duration::from_secs(10)))
        .breaker(support::small_breaker("vendor"))
        .build()
        .unwrap();
    let first = {
        let bulkhead = pipeline.bulkhead().unwrap().clone();
        tokio::spawn(async move {
            // Holds the only slot for 5 s.
            let _slot = bulkhead.acquire().await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
        })
    };
    tokio::task::yield_now().await;
    let start = Instant::now();
    // Waits 5 s in the queue, then the dependency answers in 0.9 s: within the 1 s timeout.
    let r = pipeline
        .call(|| dependency(&calls, Duration::from_millis(900), false))
        .await;
    assert_eq!(r.unwrap(), "ok");
    assert_eq!(start.elapsed(), Duration::from_millis(5900));
    first.await.unwrap();

    // A dependency slower than the timeout is cut at 1 s and the breaker counts a failure.
    let start = Instant::now();
    let r = pipeline
        .call(|| dependency(&calls, Duration::from_secs(30), false))
        .await;
    assert!(matches!(r, Err(PipelineError::Timeout(e)) if e.after() == Duration::from_secs(1)));
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    let m = pipeline.breaker().unwrap().metrics();
    assert_eq!((m.successful_calls, m.failed_calls), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_rejection_is_never_retried() {
    let calls = Calls::default();
    let policy = retry(5);
    let pipeline = Pipeline::builder()
        .retry(policy.clone())
        .breaker(support::small_breaker("vendor"))
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    pipeline.breaker().unwrap().force_open();
    let start = Instant::now();
    let r = pipeline
        .call(|| dependency(&calls, Duration::ZERO, false))
        .await;
    assert!(matches!(r, Err(PipelineError::Rejected(_))));
    assert_eq!(calls.get(), 0);
    assert_eq!(start.elapsed(), Duration::ZERO, "no backoff either");
    let s = policy.stats();
    assert_eq!((s.retries, s.local_rejections), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_reopened_breaker_gets_zero_retries() {
    let calls = Calls::default();
    let breaker = support::small_breaker("vendor");
    let pipeline = Pipeline::builder()
        .retry(retry(5))
        .breaker(breaker.clone())
        .build()
        .unwrap();
    breaker.trip();
    tokio::time::advance(Duration::from_secs(10)).await;
    // Half-open with one probe: the probe fails, the breaker re-opens, the retry is refused.
    let r = pipeline
        .call(|| dependency(&calls, Duration::ZERO, true))
        .await;
    assert!(matches!(r, Err(PipelineError::Rejected(ref e)) if e.state() == State::Open));
    assert_eq!(
        calls.get(),
        1,
        "the dependency saw the probe and nothing else"
    );
    assert_eq!(breaker.state(), State::Open);
}

#[tokio::test(start_paused = true)]
async fn retries_ride_out_a_blip() {
    let calls = Calls::default();
    let pipeline = Pipeline::builder()
        .retry(retry(3))
        .breaker(support::small_breaker("vendor"))
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let r = pipeline
        .call(|| {
            let fail = calls.get() < 2;
            dependency(&calls, Duration::ZERO, fail)
        })
        .await;
    assert_eq!(r.unwrap(), "ok");
    assert_eq!(calls.get(), 3);
    let m = pipeline.breaker().unwrap().metrics();
    assert_eq!(
        (m.failed_calls, m.successful_calls),
        (2, 1),
        "every attempt recorded"
    );
}

#[tokio::test(start_paused = true)]
async fn inside_the_breaker_one_call_is_one_outcome() {
    let calls = Calls::default();
    let pipeline = Pipeline::builder()
        .retry(retry(3))
        .breaker(support::small_breaker("vendor"))
        .retry_inside_breaker()
        .build()
        .unwrap();
    let r = pipeline
        .call(|| dependency(&calls, Duration::ZERO, true))
        .await;
    assert!(matches!(r, Err(PipelineError::Failed(Boom("503")))));
    assert_eq!(calls.get(), 3);
    let m = pipeline.breaker().unwrap().metrics();
    assert_eq!(m.failed_calls, 1);
    // Refused by the breaker: not retried either.
    pipeline.breaker().unwrap().force_open();
    let r = pipeline
        .call(|| dependency(&calls, Duration::ZERO, true))
        .await;
    assert!(matches!(r, Err(PipelineError::Rejected(_))));
    assert_eq!(calls.get(), 3);
}

#[tokio::test(start_paused = true)]
async fn local_refusals_are_not_failures_of_the_dependency_and_not_retried() {
    let calls = Calls::default();
    let gate = Gate::new(GateConfig::builder().max_requests(1).build().unwrap());
    let policy = retry(3);
    let pipeline = Pipeline::builder()
        .retry(policy.clone())
        .breaker(support::small_breaker("vendor"))
        .gate(gate.clone())
        .build()
        .unwrap();
    let _busy = gate.try_request().unwrap();
    for _ in 0..10 {
        let r = pipeline
            .call(|| dependency(&calls, Duration::ZERO, false))
            .await;
        assert!(matches!(r, Err(PipelineError::Overflow(_))));
    }
    assert_eq!(calls.get(), 0);
    let m = pipeline.breaker().unwrap().metrics();
    assert_eq!((m.failed_calls, m.ignored_calls), (0, 10));
    assert_eq!(pipeline.breaker().unwrap().state(), State::Closed);
    assert_eq!(policy.stats().retries, 0);
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_the_bulkhead_holds_a_pending_slot_in_the_gate() {
    let calls = Calls::default();
    let gate = Gate::new(
        GateConfig::builder()
            .max_requests(10)
            .max_pending(1)
            .build()
            .unwrap(),
    );
    let pipeline = Arc::new(
        Pipeline::builder()
            .gate(gate.clone())
            .bulkhead(bulkhead(1, 5, Duration::from_secs(10)))
            .build()
            .unwrap(),
    );
    let _slot = pipeline.bulkhead().unwrap().try_acquire().unwrap();
    let waiting = tokio::spawn({
        let pipeline = pipeline.clone();
        let calls = calls.clone();
        async move {
            pipeline
                .call(|| dependency(&calls, Duration::ZERO, false))
                .await
                .map(drop)
        }
    });
    tokio::task::yield_now().await;
    assert_eq!((gate.pending(), gate.remaining().pending), (1, 0));
    // A second waiter overflows the pending limit at once.
    let r = pipeline
        .call(|| dependency(&calls, Duration::ZERO, false))
        .await;
    assert!(matches!(r, Err(PipelineError::Overflow(o)) if o.max() == 1));
    assert_eq!(gate.overflows().upstream_rq_pending_overflow, 1);
    drop(_slot);
    waiting.await.unwrap().unwrap();
    assert_eq!((gate.pending(), gate.active(), calls.get()), (0, 0, 1));
}

#[tokio::test(start_paused = true)]
async fn an_empty_budget_stops_retries_not_first_attempts() {
    let calls = Calls::default();
    let bucket = Arc::new(
        TokenBucketBudget::builder()
            .capacity(5)
            .timeout_retry_cost(5)
            .build()
            .unwrap(),
    );
    let policy = RetryPolicy::builder()
        .max_attempts(3)
        .budget(bucket.clone())
        .jitter(Jitter::None)
        .build()
        .unwrap();
    let pipeline = Pipeline::builder().retry(policy).build().unwrap();
    let r = pipeline
        .call(|| dependency(&calls, Duration::ZERO, true))
        .await;
    assert!(r.is_err());
    assert_eq!((calls.get(), bucket.tokens()), (2, 0));
    for _ in 0..3 {
        let _ = pipeline
            .call(|| dependency(&calls, Duration::ZERO, true))
            .await;
    }
    assert_eq!(calls.get(), 5);
}

#[tokio::test(start_paused = true)]
async fn the_throttle_sees_each_attempt_and_timeouts_as_not_accepted() {
    let calls = Calls::default();
    let throttle = Throttle::default();
    let pipeline = Pipeline::builder()
        .throttle(throttle.clone())
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    pipeline
        .call(|| dependency(&calls, Duration::ZERO, false))
        .await
        .unwrap();
    let _ = pipeline
        .call(|| dependency(&calls, Duration::from_secs(5), false))
        .await;
    let _ = pipeline
        .call(|| dependency(&calls, Duration::ZERO, true))
        .await;
    assert_eq!(throttle.counts(), (3, 1));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_call_gives_everything_back() {
    let calls = Calls::default();
    let gate = Gate::default();
    let breaker = CircuitBreaker::with_clock("v", BreakerConfig::default(), TokioClock::new());
    let throttle = Throttle::default();
    let pipeline = Pipeline::builder()
        .retry(retry(3))
        .breaker(breaker.clone())
        .gate(gate.clone())
        .bulkhead(bulkhead(1, 0, Duration::ZERO))
        .throttle(throttle.clone())
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let r = tokio::time::timeout(
        Duration::from_millis(10),
        pipeline.call(|| dependency(&calls, Duration::from_secs(30), false)),
    )
    .await;
    assert!(r.is_err());
    assert_eq!(
        (gate.active(), pipeline.bulkhead().unwrap().in_flight()),
        (0, 0)
    );
    assert_eq!(breaker.metrics().abandoned_permits, 1);
    // Cancelled before its answer: neither a request nor an accept for the throttle.
    assert_eq!(throttle.counts(), (0, 0));
}

#[test]
fn a_bad_timeout_is_rejected() {
    let err = Pipeline::builder()
        .timeout(Duration::from_secs(100_000))
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "timeout");
}

#[tokio::test(start_paused = true)]
async fn an_error_report_prints_the_inner_error_once() {
    use std::error::Error;
    #[derive(Debug)]
    struct Upstream(std::io::Error);
    impl std::fmt::Display for Upstream {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("vendor answered 503")
        }
    }
    impl Error for Upstream {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }
    fn chain(e: &dyn Error) -> Vec<String> {
        let mut out = vec![e.to_string()];
        let mut cause = e.source();
        while let Some(c) = cause {
            out.push(c.to_string());
            cause = c.source();
        }
        out
    }
    let pipeline = Pipeline::builder()
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let failed = pipeline
        .call(|| async { Err::<(), _>(Upstream(std::io::Error::other("connection reset"))) })
        .await
        .unwrap_err();
    assert_eq!(chain(&failed), ["vendor answered 503", "connection reset"]);
    let timed_out = pipeline
        .call(|| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, Upstream>(())
        })
        .await
        .unwrap_err();
    assert_eq!(chain(&timed_out), ["call timed out after 1s"]);
}

#[tokio::test(start_paused = true)]
async fn the_counters_say_how_each_call_ended_once_per_call() {
    let calls = Calls::default();
    let breaker = CircuitBreaker::with_clock("stats", BreakerConfig::default(), TokioClock::new());
    let gate = Gate::new(GateConfig::builder().max_requests(1).build().unwrap());
    let pipeline = Pipeline::builder()
        .retry(retry(2))
        .breaker(breaker.clone())
        .gate(gate.clone())
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    // A success, a failure after its retry, a timeout after its retry.
    let _ = pipeline
        .call(|| dependency(&calls, Duration::ZERO, false))
        .await;
    let _ = pipeline
        .call(|| dependency(&calls, Duration::ZERO, true))
        .await;
    let _ = pipeline
        .call(|| dependency(&calls, Duration::from_secs(5), false))
        .await;
    // A gate refusal, answered by a fallback.
    let busy = gate.try_request().unwrap();
    let v = pipeline
        .call_or_else(
            || dependency(&calls, Duration::ZERO, false),
            |_| async { "cached" },
        )
        .await;
    assert_eq!(v, "cached");
    drop(busy);
    let s = pipeline.stats();
    assert_eq!(
        (s.calls, s.succeeded, s.failed, s.timed_out, s.fallbacks),
        (4, 1, 1, 1, 1)
    );
    assert_eq!((s.refused.gate, s.refused.total()), (1, 1));
    let r = pipeline.retry().unwrap().stats();
    assert_eq!(
        (
            r.succeeded_without_retry,
            r.failed_with_retry,
            r.local_rejections
        ),
        (1, 2, 1)
    );
    // A clone shares them.
    assert_eq!(pipeline.clone().stats(), s);
}

#[tokio::test(start_paused = true)]
async fn with_breaker_shares_every_stage_but_the_breaker() {
    let calls = Calls::default();
    let bulkhead = bulkhead(1, 0, Duration::ZERO);
    let pipeline = Pipeline::builder()
        .retry(retry(3))
        .bulkhead(bulkhead.clone())
        .build()
        .unwrap();
    let acme = support::small_breaker("vendor/tenant=acme");
    let globex = support::small_breaker("vendor/tenant=globex");
    for _ in 0..2 {
        let _ = pipeline
            .with_breaker(acme.clone())
            .call(|| dependency(&calls, Duration::ZERO, true))
            .await;
    }
    // The second call's first attempt is the fourth failure: the breaker opens and refuses
    // its retry.
    assert_eq!(acme.state(), State::Open, "4 failed attempts of 4");
    assert_eq!(globex.state(), State::Closed);
    let ok = pipeline
        .with_breaker(globex.clone())
        .call(|| dependency(&calls, Duration::ZERO, false))
        .await;
    assert_eq!(ok.unwrap(), "ok");
    // acme's open breaker refuses; globex's pipeline shares the bulkhead and the counters.
    let refused = pipeline
        .with_breaker(acme.clone())
        .call(|| dependency(&calls, Duration::ZERO, false))
        .await;
    assert!(matches!(refused, Err(PipelineError::Rejected(_))));
    let _slot = bulkhead.try_acquire().unwrap();
    let full = pipeline
        .with_breaker(globex)
        .call(|| dependency(&calls, Duration::ZERO, false))
        .await;
    assert!(matches!(full, Err(PipelineError::BulkheadFull(_))));
    let s = pipeline.stats();
    assert_eq!((s.calls, s.refused.breaker, s.refused.bulkhead), (5, 2, 1));
}
