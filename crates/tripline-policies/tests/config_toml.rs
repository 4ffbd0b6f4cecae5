//! The new policies' settings from TOML: every field, the defaults for what is left out, human
//! durations, and errors that name the field, the value and what is allowed.
#![cfg(all(
    feature = "serde",
    feature = "shed",
    feature = "limiter",
    feature = "partial",
    feature = "chaos"
))]

use std::time::Duration;

use tripline_policies::chaos::{ChaosConfig, Fault, FaultRule};
use tripline_policies::limiter::{
    AimdConfig, FixedLimit, Gradient2Config, LimitAlgorithm, LimiterConfig, VegasConfig,
};
use tripline_policies::partial::PartialConfig;
use tripline_policies::shed::{Priority, Shares, ShedConfig};

fn err<T: serde::de::DeserializeOwned + std::fmt::Debug>(text: &str) -> String {
    toml::from_str::<T>(text).unwrap_err().message().to_string()
}

#[test]
fn a_shedder_from_toml() {
    let c: ShedConfig = toml::from_str(
        r#"
        capacity = 200
        max_waiting = 50
        max_wait = "100ms"
        [shares]
        sheddable = 40
        "#,
    )
    .unwrap();
    let want = ShedConfig::builder()
        .capacity(200)
        .max_waiting(50)
        .max_wait(Duration::from_millis(100))
        .shares(Shares::new(100.0, 90.0, 40.0).unwrap())
        .build()
        .unwrap();
    assert_eq!(c, want);
    assert_eq!(
        toml::from_str::<ShedConfig>("").unwrap(),
        ShedConfig::default()
    );
    assert_eq!(
        err::<ShedConfig>("capacity = 0"),
        "capacity must be in [1, 1000000], got 0"
    );
    assert_eq!(
        err::<ShedConfig>("[shares]\ndefault = 30"),
        "shares.sheddable must be in (0, 100] and at most shares.default (30), got 50"
    );
    assert!(err::<ShedConfig>("capacty = 3").contains("unknown field `capacty`"));
}

#[test]
fn priorities_by_name_or_number() {
    #[derive(serde::Deserialize)]
    struct Route {
        priority: Priority,
    }
    let p = |t: &str| toml::from_str::<Route>(t).map(|r| r.priority);
    assert_eq!(p("priority = \"critical\"").unwrap(), Priority::CRITICAL);
    assert_eq!(p("priority = \"sheddable\"").unwrap(), Priority::SHEDDABLE);
    assert_eq!(p("priority = 200").unwrap(), Priority::new(200));
    assert!(
        p("priority = \"urgent\"")
            .unwrap_err()
            .message()
            .starts_with("priority must be \"critical\", \"default\", \"sheddable\"")
    );
    assert!(p("priority = 300").is_err());
}

#[test]
fn a_limiter_from_toml_with_each_algorithm() {
    let c: LimiterConfig = toml::from_str(
        r#"
        max_waiting = 100
        max_wait = "50ms"
        seed = 7
        [algorithm]
        kind = "gradient2"
        min_limit = 10
        max_limit = 400
        rtt_tolerance = 2.0
        [shares]
        sheddable = 40
        "#,
    )
    .unwrap();
    let g = Gradient2Config::builder()
        .min_limit(10)
        .max_limit(400)
        .rtt_tolerance(2.0)
        .build()
        .unwrap();
    assert_eq!(c.algorithm(), LimitAlgorithm::Gradient2(g));
    assert_eq!(c.shares(), Some(Shares::new(100.0, 90.0, 40.0).unwrap()));
    assert_eq!(
        (c.max_waiting(), c.max_wait(), c.seed()),
        (100, Duration::from_millis(50), Some(7))
    );

    let v: LimiterConfig =
        toml::from_str("[algorithm]\nkind = \"vegas\"\nmax_limit = 10\nalpha = 2\nbeta = 4")
            .unwrap();
    let want = VegasConfig::builder()
        .max_limit(10)
        .initial_limit(10)
        .alpha(2)
        .beta(4)
        .build()
        .unwrap();
    assert_eq!(
        v.algorithm(),
        LimitAlgorithm::Vegas(want),
        "the initial limit follows a lower max"
    );
    let a: LimiterConfig =
        toml::from_str("[algorithm]\nkind = \"aimd\"\ntimeout = \"2s\"\nbackoff_ratio = 0.5")
            .unwrap();
    let want = AimdConfig::builder()
        .timeout(Duration::from_secs(2))
        .backoff_ratio(0.5)
        .build()
        .unwrap();
    assert_eq!(a.algorithm(), LimitAlgorithm::Aimd(want));
    let f: LimiterConfig = toml::from_str("[algorithm]\nkind = \"fixed\"\nlimit = 25").unwrap();
    assert_eq!(
        f.algorithm(),
        LimitAlgorithm::Fixed(FixedLimit::new(25).unwrap())
    );
    assert_eq!(
        toml::from_str::<LimiterConfig>("").unwrap(),
        LimiterConfig::default()
    );

    assert_eq!(
        err::<LimiterConfig>("[algorithm]\nkind = \"aimd\"\nbackoff_ratio = 1.5"),
        "backoff_ratio must be in [0.5, 1), got 1.5"
    );
    assert_eq!(
        err::<LimiterConfig>("[algorithm]\nkind = \"vegas\"\nmin_limit = 50\nmax_limit = 20"),
        "min_limit must be in [1, max_limit = 20], got 50"
    );
    assert!(err::<LimiterConfig>("[algorithm]\nkind = \"bbr\"").contains("unknown variant `bbr`"));
    assert_eq!(
        err::<LimiterConfig>("max_waiting = 5"),
        "max_wait must be in (0ns, 3600s] when max_waiting > 0, got 0ns"
    );
}

#[test]
fn a_partial_breaker_from_toml() {
    let c: PartialConfig = toml::from_str(
        r#"
        ki = 0.1
        window = "30s"
        interval = "500ms"
        initial_error_rate = 0.02
        seed = 3
        "#,
    )
    .unwrap();
    let want = PartialConfig::builder()
        .ki(0.1)
        .window(Duration::from_secs(30))
        .interval(Duration::from_millis(500))
        .initial_error_rate(0.02)
        .seed(3)
        .build()
        .unwrap();
    assert_eq!(c, want);
    assert_eq!(
        toml::from_str::<PartialConfig>("").unwrap(),
        PartialConfig::default()
    );
    assert_eq!(
        err::<PartialConfig>("window = \"15s\"\ninterval = \"10s\""),
        "window must be a whole number (1 to 3600) of intervals of 10s, got 15s"
    );
    assert_eq!(
        err::<PartialConfig>("kp = -2.0"),
        "kp must be in [0, 100], got -2"
    );
}

#[test]
fn a_fault_injector_from_toml() {
    let c: ChaosConfig = toml::from_str(
        r#"
        enabled = true
        rules = [
            { fault = "latency", rate = 0.2, delay = "5s" },
            { fault = "error", rate = 0.05 },
            { fault = "hang", rate = 0.01 },
        ]
        "#,
    )
    .unwrap();
    assert!(c.enabled());
    assert_eq!(
        c.rules(),
        [
            FaultRule::latency(0.2, Duration::from_secs(5)).unwrap(),
            FaultRule::error(0.05).unwrap(),
            FaultRule::hang(0.01).unwrap(),
        ]
    );
    assert_eq!(c.rules()[0].fault(), Fault::Latency(Duration::from_secs(5)));
    assert_eq!(
        toml::from_str::<ChaosConfig>("").unwrap(),
        ChaosConfig::default()
    );
    assert_eq!(
        err::<ChaosConfig>(
            "rules = [{ fault = \"error\", rate = 0.1 }, { fault = \"latency\", rate = 1.2, delay = \"1s\" }]"
        ),
        "rules[1].rate must be in [0, 1], got 1.2"
    );
    assert!(
        err::<ChaosConfig>("rules = [{ fault = \"latency\", rate = 0.1 }]")
            .contains("missing field `delay`")
    );
}

/// The message and the line of a TOML error.
fn error_line<T: serde::de::DeserializeOwned + std::fmt::Debug>(text: &str) -> (String, usize) {
    let e = toml::from_str::<T>(text).unwrap_err();
    let start = e.span().map_or(0, |s| s.start);
    (
        e.message().to_string(),
        text[..start].matches('\n').count() + 1,
    )
}

#[test]
fn an_out_of_range_value_points_at_its_fields_line() {
    assert_eq!(
        error_line::<ShedConfig>("max_waiting = 2\nmax_wait = \"1s\"\ncapacity = 0\n"),
        ("capacity must be in [1, 1000000], got 0".to_string(), 3)
    );
    assert_eq!(
        error_line::<ShedConfig>("capacity = 3\nmax_wait = \"2h\"\n"),
        ("max_wait must be in [0ns, 3600s], got 7200s".to_string(), 2)
    );
    assert_eq!(
        error_line::<PartialConfig>("ki = 0.1\nkp = -2.0\n"),
        ("kp must be in [0, 100], got -2".to_string(), 2)
    );
    assert_eq!(
        error_line::<PartialConfig>("seed = 1\n\nideal_error_rate_cap = 1.0\n"),
        (
            "ideal_error_rate_cap must be in [0, 1), got 1".to_string(),
            3
        )
    );
    // A rule that relates two fields keeps the builder's message, at the table.
    assert_eq!(
        error_line::<PartialConfig>("kp = 0\nki = 0\n").0,
        "kp must be positive when ki is 0 (with both 0 the breaker never rejects), got 0"
    );
}

/// A duration whose nanoseconds carry into a sum of `u64::MAX` seconds made humantime panic
/// in every duration field; each policy's duration fields refuse it as too large instead.
#[test]
fn a_duration_that_overflows_by_a_carry_is_refused_in_every_policy() {
    const BAD: &str = "\"18446744073709551615s 1000000000ns\"";
    let texts = [
        err::<ShedConfig>(&format!("max_wait = {BAD}")),
        err::<PartialConfig>(&format!("interval = {BAD}")),
        err::<tripline_policies::retry::RetryConfig>(&format!("base_delay = {BAD}")),
    ];
    for e in texts {
        assert!(e.contains("too large"), "{e}");
    }
}
