//! Every policy, a pipeline and a service's whole file from TOML: each field with its
//! builder's name and default, and every bad value refused with the builder's own message at
//! the line of the field.
#![cfg(all(feature = "serde", feature = "pipeline"))]

use std::time::Duration;

use tripline::registry::{Key, ScopeKind};
use tripline::{BreakerConfig, ManualClock};
use tripline_policies::bulkhead::BulkheadConfig;
use tripline_policies::config::ResilienceConfig;
use tripline_policies::gate::GateConfig;
use tripline_policies::pipeline::{PipelineConfig, Stage};
use tripline_policies::retry::budget::{
    ErrorRateBudget, RetryBudget, RetryCause, TokenBucketBudget, TpsBudget,
};
use tripline_policies::retry::{BudgetConfig, Jitter, RetryConfig, RetryPolicy};
use tripline_policies::throttle::ThrottleConfig;

/// The message and the line of a TOML error.
fn error_at<T: serde::de::DeserializeOwned + std::fmt::Debug>(text: &str) -> (String, usize) {
    let e = toml::from_str::<T>(text).unwrap_err();
    let start = e.span().map_or(0, |s| s.start);
    (
        e.message().to_string(),
        text[..start].matches('\n').count() + 1,
    )
}

#[test]
fn a_retry_policy_and_its_budget_from_toml() {
    let c: RetryConfig = toml::from_str(
        r#"
        max_attempts = 4
        base_delay = "50ms"
        max_delay = "2s"
        jitter = "equal"
        retry_timeouts = false
        seed = 9
        [budget]
        kind = "tps"
        retry_ratio = 0.5
        min_per_sec = 0
        ttl = "5s"
        "#,
    )
    .unwrap();
    assert_eq!(
        (c.max_attempts(), c.base_delay(), c.max_delay(), c.jitter()),
        (
            4,
            Duration::from_millis(50),
            Duration::from_secs(2),
            Jitter::Equal
        )
    );
    assert!(!c.retry_timeouts());
    assert_eq!(c.seed(), Some(9));
    let want = TpsBudget::builder()
        .retry_ratio(0.5)
        .min_per_sec(0)
        .ttl(Duration::from_secs(5));
    assert_eq!(c.budget(), Some(&BudgetConfig::Tps(want)));

    // The policy built from it behaves as the builder's: half a retry per request.
    let policy = c.policy_with_clock(ManualClock::new()).unwrap();
    assert_eq!(policy.max_attempts(), 4);
    assert!(!policy.retries_timeouts());
    let budget = policy.budget().unwrap();
    assert_eq!(budget.remaining(), Some(0));
    budget.on_request();
    budget.on_request();
    assert_eq!(budget.remaining(), Some(1));

    // Left out: the defaults, as RetryPolicy::default has them.
    let d: RetryConfig = toml::from_str("").unwrap();
    assert_eq!(d, RetryConfig::default());
    let p = d.policy().unwrap();
    let default = RetryPolicy::default();
    assert_eq!(p.max_attempts(), default.max_attempts());
    assert_eq!(p.backoff(), default.backoff());
    assert!(p.budget().is_none());
}

#[test]
fn every_budget_kind_from_toml_and_several_that_must_all_agree() {
    let tb: BudgetConfig = toml::from_str(
        "kind = \"token-bucket\"\ncapacity = 50\nretry_cost = 10\ntimeout_retry_cost = 25\nsuccess_reward = 2",
    )
    .unwrap();
    let want = TokenBucketBudget::builder()
        .capacity(50)
        .retry_cost(10)
        .timeout_retry_cost(25)
        .success_reward(2);
    assert_eq!(tb, BudgetConfig::TokenBucket(want));
    let b = tb.build().unwrap();
    assert!(b.withdraw(RetryCause::Timeout));
    assert_eq!(b.remaining(), Some(2)); // 25 tokens left, 10 a retry

    let er: BudgetConfig = toml::from_str(
        "kind = \"error-rate\"\nthreshold_percent = 25\nwindow = \"20s\"\nbucket = \"2s\"\nminimum_calls = 5",
    )
    .unwrap();
    let want = ErrorRateBudget::builder()
        .threshold_percent(25.0)
        .window(Duration::from_secs(20), Duration::from_secs(2))
        .minimum_calls(5);
    assert_eq!(er, BudgetConfig::ErrorRate(want));

    #[derive(Debug, serde::Deserialize)]
    struct Holder {
        budget: BudgetConfig,
    }
    let all: Holder = toml::from_str(
        r#"budget = [{ kind = "tps", retry_ratio = 0.1 }, { kind = "token-bucket", capacity = 10 }]"#,
    )
    .unwrap();
    let BudgetConfig::All(parts) = &all.budget else {
        panic!("{:?}", all.budget)
    };
    assert_eq!(parts.len(), 2);
    let both = all.budget.build().unwrap();
    assert_eq!(both.remaining(), Some(2), "the smaller of 100 and 10 / 5");
    for _ in 0..2 {
        assert!(both.withdraw(RetryCause::Error));
    }
    assert!(!both.withdraw(RetryCause::Error), "the bucket is empty");

    let (msg, _) = error_at::<Holder>("budget = []");
    assert_eq!(msg, "budget must be at least one budget, got []");
    let (msg, _) = error_at::<Holder>("budget = { retry_ratio = 0.1 }");
    assert!(msg.contains("missing field `kind`"), "{msg}");
    let (msg, _) = error_at::<Holder>("budget = { kind = \"leaky\" }");
    assert!(msg.contains("unknown variant `leaky`"), "{msg}");
    let (msg, _) = error_at::<BudgetConfig>("kind = \"error-rate\"\nretry_ratio = 0.1");
    assert_eq!(
        msg,
        "retry_ratio must be a field of kind \"tps\" (kind \"error-rate\" has threshold_percent, window, bucket, minimum_calls), got 0.1"
    );
}

#[test]
fn a_bulkhead_a_gate_and_a_throttle_from_toml() {
    let b: BulkheadConfig =
        toml::from_str("max_concurrent = 20\nmax_waiting = 5\nmax_wait = \"50ms\"").unwrap();
    let want = BulkheadConfig::builder()
        .max_concurrent(20)
        .max_waiting(5)
        .max_wait(Duration::from_millis(50))
        .build()
        .unwrap();
    assert_eq!(b, want);
    assert_eq!(
        toml::from_str::<BulkheadConfig>("").unwrap(),
        BulkheadConfig::default()
    );

    let g: GateConfig = toml::from_str(
        "max_requests = 100\nmax_pending = 10\nretry_budget = { budget_percent = 25 }",
    )
    .unwrap();
    let want = GateConfig::builder()
        .max_requests(100)
        .max_pending(10)
        .retry_budget(25.0, 3)
        .build()
        .unwrap();
    assert_eq!(g, want);
    assert_eq!(
        toml::from_str::<GateConfig>("").unwrap(),
        GateConfig::default()
    );

    let t: ThrottleConfig =
        toml::from_str("window = \"30s\"\nbucket = \"500ms\"\nk = 1.5").unwrap();
    let want = ThrottleConfig::builder()
        .window(Duration::from_secs(30), Duration::from_millis(500))
        .k(1.5)
        .build()
        .unwrap();
    assert_eq!(t, want);
    assert_eq!(
        toml::from_str::<ThrottleConfig>("").unwrap(),
        ThrottleConfig::default()
    );
    assert!(
        error_at::<ThrottleConfig>("windw = \"1s\"")
            .0
            .contains("unknown field `windw`")
    );
}

#[test]
fn an_out_of_range_value_points_at_its_fields_line_with_the_builders_message() {
    let built = |e: Result<(), tripline::ConfigError>| e.unwrap_err().to_string();
    let cases: Vec<(&str, usize, (String, usize), String)> = vec![
        (
            "retry max_attempts",
            2,
            error_at::<RetryConfig>("jitter = \"none\"\nmax_attempts = 101\n"),
            built(RetryPolicy::builder().max_attempts(101).build().map(drop)),
        ),
        (
            "retry base_delay",
            2,
            error_at::<RetryConfig>("max_attempts = 2\nbase_delay = \"0s\"\n"),
            built(
                RetryPolicy::builder()
                    .base_delay(Duration::ZERO)
                    .build()
                    .map(drop),
            ),
        ),
        (
            "tps ttl",
            3,
            error_at::<RetryConfig>("[budget]\nkind = \"tps\"\nttl = \"90s\"\n"),
            built(
                TpsBudget::builder()
                    .ttl(Duration::from_secs(90))
                    .build()
                    .map(drop),
            ),
        ),
        (
            "tps retry_ratio",
            3,
            error_at::<RetryConfig>("[budget]\nkind = \"tps\"\nretry_ratio = -1\n"),
            built(TpsBudget::builder().retry_ratio(-1.0).build().map(drop)),
        ),
        (
            "token bucket capacity",
            3,
            error_at::<BudgetConfig>("kind = \"token-bucket\"\n\ncapacity = 0\n"),
            built(TokenBucketBudget::builder().capacity(0).build().map(drop)),
        ),
        (
            "error rate threshold",
            2,
            error_at::<BudgetConfig>("kind = \"error-rate\"\nthreshold_percent = 150\n"),
            built(
                ErrorRateBudget::builder()
                    .threshold_percent(150.0)
                    .build()
                    .map(drop),
            ),
        ),
        (
            "bulkhead max_concurrent",
            3,
            error_at::<BulkheadConfig>("max_waiting = 1\nmax_wait = \"1s\"\nmax_concurrent = 0\n"),
            built(
                BulkheadConfig::builder()
                    .max_concurrent(0)
                    .build()
                    .map(drop),
            ),
        ),
        (
            "gate max_requests",
            2,
            error_at::<GateConfig>("max_pending = 3\nmax_requests = 0\n"),
            built(GateConfig::builder().max_requests(0).build().map(drop)),
        ),
        (
            "gate budget_percent",
            1,
            error_at::<GateConfig>("retry_budget = { budget_percent = 120 }\n"),
            built(
                GateConfig::builder()
                    .retry_budget(120.0, 3)
                    .build()
                    .map(drop),
            ),
        ),
        (
            "throttle k",
            2,
            error_at::<ThrottleConfig>("window = \"10s\"\nk = 0.5\n"),
            built(ThrottleConfig::builder().k(0.5).build().map(drop)),
        ),
        (
            "pipeline timeout",
            2,
            error_at::<PipelineConfig>("\ntimeout = \"0s\"\n"),
            built(
                tripline_policies::pipeline::Pipeline::builder()
                    .timeout(Duration::ZERO)
                    .build()
                    .map(drop),
            ),
        ),
    ];
    for (what, want_line, (msg, line), want) in cases {
        assert_eq!(msg, want, "{what}");
        assert_eq!(line, want_line, "{what}: {msg}");
    }

    // Deep in a service's file: the line of the field, whatever the nesting.
    let text = "[registry]\nmax_breakers = 100\n\n[pipelines.vendor]\ntimeout = \"2s\"\n\n[pipelines.vendor.retry]\nmax_attempts = 3\n\n[pipelines.vendor.retry.budget]\nkind = \"token-bucket\"\nretry_cost = 0\n\n[pipelines.vendor.breaker]\nminimum_calls = 5\n";
    assert_eq!(
        error_at::<ResilienceConfig>(text),
        ("retry_cost must be in [1, capacity], got 0".to_string(), 12)
    );
    let text = "[pipelines.vendor.breaker]\nminimum_calls = 5\n[pipelines.vendor.breaker.open]\nduration = \"0s\"\n";
    assert_eq!(
        error_at::<ResilienceConfig>(text),
        (
            "open.duration must be between 1ms and 7days, got 0s".to_string(),
            4
        )
    );
    // A rule that relates two fields: the builder's message, at the table.
    let (msg, _) =
        error_at::<BudgetConfig>("kind = \"token-bucket\"\ncapacity = 10\nretry_cost = 20\n");
    assert_eq!(msg, "retry_cost must be in [1, capacity = 10], got 20");
    let (msg, _) = error_at::<BulkheadConfig>("max_waiting = 5\n");
    assert_eq!(
        msg,
        "max_wait must be in (0ns, 3600s] when max_waiting > 0, got 0ns"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pipeline_from_toml_builds_every_stage_in_order() {
    let text = include_str!("../docs/pipeline.toml");
    let config: PipelineConfig = toml::from_str(text).unwrap();
    assert_eq!(config.timeout(), Some(Duration::from_secs(2)));
    assert_eq!(
        config.breaker().unwrap(),
        &BreakerConfig::builder()
            .count_window(50)
            .minimum_calls(10)
            .failure_rate_threshold(50.0)
            .slow_call_duration(Duration::from_secs(1))
            .slow_call_rate_threshold(80.0)
            .open_duration(Duration::from_secs(15))
            .open_jitter(Duration::from_secs(3))
            .half_open_calls(3)
            .build()
            .unwrap()
    );
    let clock = ManualClock::new();
    let pipeline = config
        .builder_with_clock("vendor", clock.clone())
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(
        pipeline.order(),
        [
            Stage::Retry,
            Stage::Breaker,
            Stage::Gate,
            Stage::Bulkhead,
            Stage::Throttle,
            Stage::Timeout
        ]
    );
    assert_eq!(pipeline.bulkhead().unwrap().config().max_concurrent(), 20);
    assert_eq!(pipeline.gate().unwrap().config().max_retries(), 10);
    assert_eq!(pipeline.retry().unwrap().max_attempts(), 3);
    // The breaker is on the clock given: it opens and stays open until the clock moves.
    let breaker = pipeline.breaker().unwrap().clone();
    breaker.trip();
    clock.advance(Duration::from_secs(19));
    assert!(breaker.try_acquire().is_ok(), "15 s + at most 3 s jitter");

    // The retry placement.
    let inside: PipelineConfig =
        toml::from_str("retry_inside_breaker = true\n[retry]\n[breaker]").unwrap();
    assert_eq!(
        inside.build("v").unwrap().order(),
        [Stage::Breaker, Stage::Retry]
    );
    // Nothing set: a pipeline of no stage.
    let empty: PipelineConfig = toml::from_str("").unwrap();
    assert!(empty.build("v").unwrap().order().is_empty());
    assert!(
        error_at::<PipelineConfig>("[bulkheads]\nmax_concurrent = 2")
            .0
            .contains("unknown field `bulkheads`")
    );
}

#[tokio::test]
async fn a_service_file_gives_per_tenant_breakers_and_a_pipeline_per_dependency() {
    let config: ResilienceConfig = toml::from_str(include_str!("../docs/resilience.toml")).unwrap();
    let registry = config.registry().unwrap();
    let pipeline = config.pipeline("vendor").unwrap();
    assert_eq!(
        pipeline.order(),
        [Stage::Retry, Stage::Bulkhead, Stage::Timeout]
    );
    let acme = registry
        .get(&Key::scoped("vendor", ScopeKind::Tenant, "acme").unwrap())
        .unwrap();
    let globex = registry
        .get(&Key::scoped("vendor", ScopeKind::Tenant, "globex").unwrap())
        .unwrap();
    // Each tenant's breaker has the vendor's configuration: 10 calls minimum of 20.
    assert_eq!(acme.config().minimum_calls(), 10);
    assert_eq!(
        acme.config().window(),
        tripline::WindowConfig::Count { size: 20 }
    );
    // acme's calls fail; globex's succeed; only acme's breaker opens.
    for _ in 0..10 {
        let r = pipeline
            .with_breaker(acme.clone())
            .call(|| async { Err::<u32, _>(std::io::Error::other("503")) })
            .await;
        assert!(r.is_err());
        let ok = pipeline
            .with_breaker(globex.clone())
            .call(|| async { Ok::<u32, std::io::Error>(1) })
            .await;
        assert_eq!(ok.unwrap(), 1);
    }
    assert_eq!(acme.state(), tripline::State::Open);
    assert_eq!(globex.state(), tripline::State::Closed);
    assert!(config.pipeline_config("catalog").is_err());
    assert!(config.pipelines().contains_key("vendor"));
}

#[cfg(feature = "outlier")]
#[test]
fn an_outlier_detector_from_toml_with_envoys_names() {
    use tripline_policies::outlier::OutlierConfig;
    let c: OutlierConfig = toml::from_str(
        "interval = \"5s\"\nbase_ejection_time = \"10s\"\nmax_ejection_percent = 20\nconsecutive_5xx = 3\nhealthy_panic_threshold = 30.0",
    )
    .unwrap();
    let want = OutlierConfig::builder()
        .interval(Duration::from_secs(5))
        .base_ejection_time(Duration::from_secs(10))
        .max_ejection_percent(20)
        .consecutive_5xx(3)
        .healthy_panic_threshold(30.0)
        .build()
        .unwrap();
    assert_eq!(c, want);
    assert_eq!(
        toml::from_str::<OutlierConfig>("").unwrap(),
        OutlierConfig::default()
    );
    let built = OutlierConfig::builder()
        .max_ejection_percent(101)
        .build()
        .unwrap_err()
        .to_string();
    assert_eq!(
        error_at::<OutlierConfig>("max_ejection_percent = 101").0,
        built
    );
    assert!(
        error_at::<OutlierConfig>("consecutive5xx = 3")
            .0
            .contains("unknown field `consecutive5xx`")
    );
}

#[test]
fn each_documented_policy_block_is_that_policys_defaults() {
    use tripline_policies::chaos::ChaosConfig;
    use tripline_policies::limiter::LimiterConfig;
    use tripline_policies::partial::PartialConfig;
    use tripline_policies::shed::ShedConfig;
    fn parse<T: serde::de::DeserializeOwned>(name: &str, text: &str) -> T {
        toml::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }
    let d = "docs/policies";
    assert_eq!(
        parse::<RetryConfig>(d, include_str!("../docs/policies/retry.toml")),
        RetryConfig::default()
    );
    assert_eq!(
        parse::<BudgetConfig>(d, include_str!("../docs/policies/budget.toml")),
        BudgetConfig::Tps(TpsBudget::builder())
    );
    assert_eq!(
        parse::<BulkheadConfig>(d, include_str!("../docs/policies/bulkhead.toml")),
        BulkheadConfig::default()
    );
    assert_eq!(
        parse::<GateConfig>(d, include_str!("../docs/policies/gate.toml")),
        GateConfig::default()
    );
    assert_eq!(
        parse::<ThrottleConfig>(d, include_str!("../docs/policies/throttle.toml")),
        ThrottleConfig::default()
    );
    assert_eq!(
        parse::<ShedConfig>(d, include_str!("../docs/policies/shed.toml")),
        ShedConfig::default()
    );
    assert_eq!(
        parse::<LimiterConfig>(d, include_str!("../docs/policies/limiter.toml")),
        LimiterConfig::default()
    );
    assert_eq!(
        parse::<PartialConfig>(d, include_str!("../docs/policies/partial.toml")),
        PartialConfig::default()
    );
    assert_eq!(
        parse::<ChaosConfig>(d, include_str!("../docs/policies/chaos.toml")),
        ChaosConfig::default()
    );
    #[cfg(feature = "outlier")]
    assert_eq!(
        parse::<tripline_policies::outlier::OutlierConfig>(
            d,
            include_str!("../docs/policies/outlier.toml")
        ),
        tripline_policies::outlier::OutlierConfig::default()
    );
    // The commented-out kinds and examples are valid too, uncommented.
    let uncomment = |text: &str, from: &str| -> String {
        text.lines()
            .skip_while(|l| !l.contains(from))
            .take_while(|l| l.starts_with("# ") && l.contains(" = ") || l.contains(from))
            .map(|l| l.trim_start_matches("# ").to_string() + "\n")
            .collect()
    };
    let budget = include_str!("../docs/policies/budget.toml");
    let tb: BudgetConfig = parse(d, &uncomment(budget, "kind = \"token-bucket\""));
    assert_eq!(tb, BudgetConfig::TokenBucket(TokenBucketBudget::builder()));
    let er: BudgetConfig = parse(d, &uncomment(budget, "kind = \"error-rate\""));
    assert_eq!(er, BudgetConfig::ErrorRate(ErrorRateBudget::builder()));
}
