//! Fault injection: the draw against each rate, the order of the rules, the switch at run
//! time, the tower layer (latency, error, hang, a predicate) on paused time, the pipeline
//! (inside the timeout, a failure for the breaker), bad input.
#![cfg(feature = "chaos")]

mod support;

use std::time::Duration;

use rand::SeedableRng;
use support::FixedRng;
use tripline_policies::chaos::{Chaos, ChaosConfig, Fault, FaultRule};

const FIVE_S: Duration = Duration::from_secs(5);

#[test]
fn off_by_default_and_nothing_is_drawn_while_off() {
    let rng = FixedRng::new(0);
    let chaos = Chaos::with_rng(ChaosConfig::builder().error(1.0).build().unwrap(), rng);
    assert!(!chaos.is_enabled());
    for _ in 0..100 {
        assert_eq!(chaos.decide(), None);
    }
    assert_eq!(chaos.stats().calls, 0);
}

#[test]
fn a_rule_fires_when_the_draw_falls_below_its_rate() {
    let rng = FixedRng::new(0);
    let chaos = Chaos::with_rng(
        ChaosConfig::builder()
            .error(0.25)
            .enabled(true)
            .build()
            .unwrap(),
        rng.clone(),
    );
    // 0.25 × 2³² = 1073741824: below fires, at it does not.
    rng.set(1_073_741_823);
    assert_eq!(chaos.decide(), Some(Fault::Error));
    rng.set(1_073_741_824);
    assert_eq!(chaos.decide(), None);
    let s = chaos.stats();
    assert_eq!((s.calls, s.errors), (2, 1));
}

#[test]
fn rules_are_tried_in_order_and_a_call_gets_at_most_one_fault() {
    let rng = FixedRng::new(0); // every draw is 0: every rule with a positive rate fires
    let chaos = Chaos::with_rng(
        ChaosConfig::builder()
            .hang(0.0)
            .latency(0.5, FIVE_S)
            .error(1.0)
            .enabled(true)
            .build()
            .unwrap(),
        rng,
    );
    assert_eq!(chaos.decide(), Some(Fault::Latency(FIVE_S)));
    let s = chaos.stats();
    assert_eq!((s.hangs, s.latency, s.errors), (0, 1, 0));
}

#[test]
fn the_share_of_calls_hit_follows_the_rate() {
    let chaos = Chaos::with_rng(
        ChaosConfig::builder()
            .error(0.2)
            .enabled(true)
            .build()
            .unwrap(),
        rand_pcg::Pcg64Mcg::seed_from_u64(1),
    );
    let hit = (0..100_000).filter(|_| chaos.decide().is_some()).count();
    assert!((19_000..21_000).contains(&hit), "{hit}");
}

#[test]
fn rules_and_the_switch_change_at_run_time() {
    let chaos = Chaos::with_rng(ChaosConfig::default(), FixedRng::new(0));
    chaos.enable();
    assert_eq!(chaos.decide(), None, "no rule");
    chaos.reconfigure(
        ChaosConfig::builder()
            .hang(1.0)
            .enabled(true)
            .build()
            .unwrap(),
    );
    assert_eq!(chaos.decide(), Some(Fault::Hang));
    chaos.disable();
    assert_eq!(chaos.decide(), None);
    assert_eq!(chaos.config().rules(), [FaultRule::hang(1.0).unwrap()]);
}

#[tokio::test(start_paused = true)]
async fn inject_waits_out_a_latency_fails_an_error_and_never_ends_a_hang() {
    let rng = FixedRng::new(0);
    let latency = Chaos::with_rng(
        ChaosConfig::builder()
            .latency(1.0, FIVE_S)
            .enabled(true)
            .build()
            .unwrap(),
        rng.clone(),
    );
    let start = tokio::time::Instant::now();
    latency.inject().await.unwrap();
    assert_eq!(start.elapsed(), FIVE_S);

    let error = Chaos::with_rng(
        ChaosConfig::builder()
            .error(1.0)
            .enabled(true)
            .build()
            .unwrap(),
        rng.clone(),
    );
    assert!(error.inject().await.is_err());

    let hang = Chaos::with_rng(
        ChaosConfig::builder()
            .hang(1.0)
            .enabled(true)
            .build()
            .unwrap(),
        rng,
    );
    let r = tokio::time::timeout(Duration::from_secs(3600), hang.inject()).await;
    assert!(r.is_err(), "still hung after an hour");
}

#[cfg(feature = "tower")]
mod tower_layer {
    use std::time::Duration;

    use tower::{Layer, ServiceBuilder, ServiceExt, service_fn};
    use tripline_policies::BoxError;
    use tripline_policies::chaos::{Chaos, ChaosConfig, ChaosLayer, InjectedFault};
    use tripline_policies::timeout::{Elapsed, TimeoutLayer};

    use super::FIVE_S;
    use super::support::{Calls, FixedRng};

    fn chaos(config: ChaosConfig) -> Chaos {
        Chaos::with_rng(config, FixedRng::new(0))
    }

    #[tokio::test(start_paused = true)]
    async fn a_latency_delays_the_response_and_the_call_still_happens() {
        let calls = Calls::default();
        let c = chaos(
            ChaosConfig::builder()
                .latency(1.0, FIVE_S)
                .enabled(true)
                .build()
                .unwrap(),
        );
        let svc = ChaosLayer::new(c).layer(service_fn({
            let calls = calls.clone();
            move |x: u32| {
                calls.bump();
                async move { Ok::<_, BoxError>(x) }
            }
        }));
        let start = tokio::time::Instant::now();
        assert_eq!(svc.oneshot(3).await.unwrap(), 3);
        assert_eq!(start.elapsed(), FIVE_S);
        assert_eq!(calls.get(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_or_a_hang_never_calls_the_service_and_a_timeout_outside_ends_the_hang() {
        let calls = Calls::default();
        let inner = service_fn({
            let calls = calls.clone();
            move |x: u32| {
                calls.bump();
                async move { Ok::<_, BoxError>(x) }
            }
        });
        let error = chaos(
            ChaosConfig::builder()
                .error(1.0)
                .enabled(true)
                .build()
                .unwrap(),
        );
        let err = ChaosLayer::new(error)
            .layer(inner.clone())
            .oneshot(1)
            .await
            .unwrap_err();
        assert!(err.downcast_ref::<InjectedFault>().is_some());

        let hang = chaos(
            ChaosConfig::builder()
                .hang(1.0)
                .enabled(true)
                .build()
                .unwrap(),
        );
        let svc = ServiceBuilder::new()
            .layer(TimeoutLayer::new(Duration::from_secs(2)).unwrap())
            .layer(ChaosLayer::new(hang))
            .service(inner);
        let err = svc.oneshot(1).await.unwrap_err();
        assert!(err.downcast_ref::<Elapsed>().is_some());
        assert_eq!(calls.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_predicate_picks_the_requests_that_take_faults() {
        let c = chaos(
            ChaosConfig::builder()
                .error(1.0)
                .enabled(true)
                .build()
                .unwrap(),
        );
        let svc = ChaosLayer::new(c.clone())
            .when(|path: &&'static str| path.starts_with("/cards"))
            .layer(service_fn(|p: &'static str| async move {
                Ok::<_, BoxError>(p.len())
            }));
        assert_eq!(svc.clone().oneshot("/log-set").await.unwrap(), 8);
        assert!(svc.oneshot("/cards/1").await.is_err());
        assert_eq!(c.stats().calls, 1, "only the targeted request was decided");
    }
}

#[cfg(feature = "pipeline")]
#[tokio::test(start_paused = true)]
async fn in_the_pipeline_an_injected_stall_is_cut_by_the_timeout_and_opens_the_breaker() {
    use tripline::State;
    use tripline_policies::pipeline::{Pipeline, PipelineError, Stage};

    let chaos = Chaos::with_rng(
        ChaosConfig::builder().latency(1.0, FIVE_S).build().unwrap(),
        FixedRng::new(0),
    );
    let breaker = support::small_breaker("chaos");
    let pipeline = Pipeline::builder()
        .chaos(chaos.clone())
        .breaker(breaker.clone())
        .timeout(Duration::from_millis(250))
        .build()
        .unwrap();
    assert_eq!(
        pipeline.order(),
        [Stage::Breaker, Stage::Timeout, Stage::Chaos]
    );
    let call = || async { Ok::<_, support::Boom>("price") };
    assert_eq!(pipeline.call(call).await.unwrap(), "price");
    chaos.enable(); // game day
    for _ in 0..3 {
        let r = pipeline.call(call).await;
        assert!(matches!(r, Err(PipelineError::Timeout(_))));
    }
    assert_eq!(breaker.state(), State::Open, "3 timeouts of 4 calls");
    let r = pipeline.call(call).await;
    assert!(matches!(r, Err(PipelineError::Rejected(_))));
    chaos.disable();
    tokio::time::sleep(Duration::from_secs(10)).await; // the open wait
    assert_eq!(pipeline.call(call).await.unwrap(), "price");
    assert_eq!(breaker.state(), State::Closed);
}

#[cfg(feature = "pipeline")]
#[tokio::test(start_paused = true)]
async fn in_the_pipeline_an_injected_error_is_a_failure_and_is_retried() {
    use std::sync::Arc;
    use tripline_policies::pipeline::{Pipeline, PipelineError};
    use tripline_policies::retry::RetryPolicy;
    use tripline_policies::retry::budget::TpsBudget;

    let rng = FixedRng::new(0);
    let chaos = Chaos::with_rng(
        ChaosConfig::builder()
            .error(0.5)
            .enabled(true)
            .build()
            .unwrap(),
        rng.clone(),
    );
    let breaker = support::small_breaker("retried");
    let pipeline = Pipeline::builder()
        .retry(
            RetryPolicy::builder()
                .max_attempts(3)
                .budget(Arc::new(TpsBudget::default()))
                .build()
                .unwrap(),
        )
        .breaker(breaker.clone())
        .chaos(chaos.clone())
        .build()
        .unwrap();
    let r = pipeline.call(|| async { Ok::<_, support::Boom>(()) }).await;
    assert!(matches!(r, Err(PipelineError::Injected(_))));
    assert!(!r.unwrap_err().is_local_rejection());
    assert_eq!(
        chaos.stats().errors,
        3,
        "every attempt was retried and failed"
    );
    assert_eq!(breaker.metrics().failed_calls, 3);
    rng.set(u32::MAX); // the draws now miss
    assert!(
        pipeline
            .call(|| async { Ok::<_, support::Boom>(()) })
            .await
            .is_ok()
    );
}

#[test]
fn bad_settings_are_refused_with_the_field_the_value_and_what_is_allowed() {
    let cases = [
        (
            FaultRule::error(-0.1).unwrap_err(),
            "rate must be in [0, 1], got -0.1",
        ),
        (
            FaultRule::hang(f64::NAN).unwrap_err(),
            "rate must be in [0, 1], got NaN",
        ),
        (
            FaultRule::latency(0.1, Duration::from_secs(100_000)).unwrap_err(),
            "delay must be in (0ns, 86400s], got 100000s",
        ),
        (
            ChaosConfig::builder()
                .error(0.1)
                .hang(2.0)
                .build()
                .unwrap_err(),
            "rules[1].rate must be in [0, 1], got 2",
        ),
    ];
    for (e, want) in cases {
        assert_eq!(e.to_string(), want);
    }
    let mut b = ChaosConfig::builder();
    for _ in 0..65 {
        b = b.error(0.1);
    }
    assert_eq!(
        b.build().unwrap_err().to_string(),
        "rules must be at most 64 rules, got 65 rules"
    );
}
