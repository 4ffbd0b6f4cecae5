//! Scenario files: bad input gets a clear error (line, field, value, what is allowed), and no
//! input makes the parser panic.

use proptest::prelude::*;
use tripline_sim::{Scenario, ScenarioError, builtin, scenario::BUILTIN};

const MINIMAL: &str = r#"name = "mini"
duration = "30s"

[arrivals]
rate = 10.0

[[endpoints]]
name = "/a"
uses_dependency = true

[dependency]
latency = "10ms"
"#;

fn err(src: &str) -> ScenarioError {
    Scenario::from_toml(src).expect_err("should be rejected")
}

#[test]
fn minimal_scenario_parses_with_defaults() {
    let s = Scenario::from_toml(MINIMAL).unwrap();
    assert_eq!(s.service.replicas, 1);
    assert_eq!(s.service.workers, 200);
    assert_eq!(s.client.attempts, 1);
    assert!(s.protection.is_empty());
    let r = tripline_sim::simulate(&s, None);
    assert_eq!(r.runs.len(), 1);
    assert_eq!(r.runs[0].requests, 300);
}

#[test]
fn unknown_field_names_the_field_line_and_the_allowed_ones() {
    let src = MINIMAL.replace("rate = 10.0", "rate = 10.0\nburst = 3");
    let e = err(&src);
    let msg = e.to_string();
    assert_eq!(e.line(), Some(6), "{msg}");
    assert!(msg.contains("unknown field `burst`"), "{msg}");
    assert!(msg.contains("`process`") && msg.contains("`rate`"), "{msg}");
    assert!(msg.contains("line 6"), "{msg}");
}

#[test]
fn unknown_breaker_field_is_reported_by_the_core_config() {
    let src = format!("{MINIMAL}\n[[protection]]\n[protection.breaker]\nminimum_callz = 3\n");
    let msg = err(&src).to_string();
    assert!(msg.contains("unknown field `minimum_callz`"), "{msg}");
    assert!(msg.contains("minimum_calls"), "{msg}");
}

#[test]
fn a_view_ttl_needs_a_shared_breaker() {
    let src = format!("{MINIMAL}\n[[protection]]\nview_ttl = \"100ms\"\n");
    let msg = err(&src).to_string();
    assert!(msg.contains("protection[0].view_ttl"), "{msg}");
    assert!(msg.contains("100ms"), "{msg}");
    assert!(msg.contains("shared breakers only"), "{msg}");
    let ok = format!("{MINIMAL}\n[[protection]]\nsharing = \"shared\"\nview_ttl = \"100ms\"\n");
    assert!(Scenario::from_toml(&ok).is_ok());
}

#[test]
fn negative_error_rate_is_rejected_with_what_is_allowed() {
    let src = MINIMAL.replace(
        "latency = \"10ms\"",
        "latency = \"10ms\"\nerror_rate = -0.2",
    );
    let e = err(&src);
    let msg = e.to_string();
    assert_eq!(e.line(), Some(13), "{msg}");
    assert!(msg.contains("-0.2"), "{msg}");
    assert!(
        msg.contains("fraction in [0, 1]") && msg.contains("\"40%\""),
        "{msg}"
    );
    assert!(msg.contains("error_rate"), "{msg}");
}

#[test]
fn percent_rates_are_accepted() {
    let src = MINIMAL.replace(
        "latency = \"10ms\"",
        "latency = \"10ms\"\nerror_rate = \"2.5%\"",
    );
    let s = Scenario::from_toml(&src).unwrap();
    assert_eq!(s.dependency.error_rate.fraction(), 0.025);
}

#[test]
fn out_of_range_values_name_field_value_and_range() {
    let cases: &[(&str, &str, &str, &str)] = &[
        ("rate = 10.0", "rate = -5", "arrivals.rate", "-5"),
        ("rate = 10.0", "rate = 0", "arrivals.rate", "0"),
        ("duration = \"30s\"", "duration = \"0s\"", "duration", "0s"),
        (
            "uses_dependency = true",
            "uses_dependency = true\nweight = -1",
            "endpoints[0].weight",
            "-1",
        ),
        ("name = \"/a\"", "name = \"\"", "endpoints[0].name", "\"\""),
    ];
    for (from, to, field, value) in cases {
        let e = err(&MINIMAL.replace(from, to));
        assert_eq!(e.field(), Some(*field), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("got {value}")), "{msg}");
        assert!(msg.contains(" must "), "{msg}");
        assert!(e.line().is_some(), "{msg}");
    }
}

#[test]
fn cross_field_rules_are_checked() {
    let no_endpoints = "duration = \"30s\"\narrivals = { rate = 1.0 }\nendpoints = []\n[dependency]\nlatency = \"1ms\"\n";
    assert_eq!(err(no_endpoints).field(), Some("endpoints"));

    let backwards = format!("{MINIMAL}[[dependency.faults]]\nfrom = \"20s\"\nuntil = \"10s\"\n");
    let e = err(&backwards);
    assert_eq!(e.field(), Some("dependency.faults[0].until"));
    assert_eq!(e.line(), Some(15), "{e}");
    assert!(e.to_string().contains("must be after `from` (20s)"), "{e}");

    let shard_without_shards = format!("{MINIMAL}[[protection]]\nscope = \"shard\"\n");
    let e = err(&shard_without_shards);
    assert_eq!(e.field(), Some("protection[0].scope"));
    assert!(e.to_string().contains("[shards]"), "{e}");

    let shard_out_of_range = format!(
        "{MINIMAL}[shards]\ncount = 4\n[[dependency.faults]]\nfrom = \"1s\"\nuntil = \"2s\"\nshards = [1, 9]\n"
    );
    let e = err(&shard_out_of_range);
    assert!(e.to_string().contains("below shards.count (4)"), "{e}");

    let huge = MINIMAL
        .replace("rate = 10.0", "rate = 9000000.0")
        .replace("30s", "1h");
    assert!(err(&huge).to_string().contains("requests per run"));

    let bad_breaker = format!(
        "{MINIMAL}[[protection]]\n[protection.breaker]\nwindow = {{ kind = \"count\", size = 10 }}\nminimum_calls = 20\n"
    );
    let msg = err(&bad_breaker).to_string();
    assert!(
        msg.contains("minimum_calls must be at most window.size (10)"),
        "{msg}"
    );
}

#[test]
fn bad_latencies_are_explained() {
    for (lat, needle) in [
        ("\"fast\"", "invalid duration \"fast\""),
        (
            "{ kind = \"uniform\", min = \"2s\", max = \"1s\" }",
            "min <= max",
        ),
        (
            "{ kind = \"lognormal\", median = \"1s\", p99 = \"10ms\" }",
            "median <= p99",
        ),
        ("{ kind = \"gamma\", shape = 2 }", "unknown variant `gamma`"),
        (
            "{ kind = \"fixed\", valu = \"1s\" }",
            "unknown field `valu`",
        ),
        ("42", "a duration such as \"300ms\""),
    ] {
        let src = MINIMAL.replace("latency = \"10ms\"", &format!("latency = {lat}"));
        let msg = err(&src).to_string();
        assert!(msg.contains(needle), "{lat}: {msg}");
        assert!(msg.contains("line 12"), "{lat}: {msg}");
    }
}

#[test]
fn unknown_scenario_lists_the_available_ones() {
    let e = Scenario::load("gymfolk").unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ScenarioError::Unknown { .. }));
    for (name, _) in BUILTIN {
        assert!(msg.contains(name), "{msg}");
    }
}

#[test]
fn files_are_loaded_and_named_after_their_stem() {
    let dir = std::env::temp_dir().join(format!("tripline-sim-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("my-service.toml");
    std::fs::write(&path, MINIMAL.replace("name = \"mini\"\n", "")).unwrap();
    let s = Scenario::load(path.to_str().unwrap()).unwrap();
    assert_eq!(s.name, "my-service");
    std::fs::write(&path, "duration = 5").unwrap();
    let msg = Scenario::load(path.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("my-service.toml"), "{msg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Applies one edit to a scenario's text: replace a span with some text.
fn mutate(src: &str, at: usize, len: usize, with: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let at = at % (chars.len() + 1);
    let end = (at + len).min(chars.len());
    let mut out: String = chars[..at].iter().collect();
    out.push_str(with);
    out.extend(&chars[end..]);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,200}") {
        let _ = Scenario::from_toml(&src);
    }

    #[test]
    fn toml_like_text_never_panics(
        src in "([a-z_\\[\\]\\.\"= 0-9{},%-]|\n){0,300}"
    ) {
        let _ = Scenario::from_toml(&src);
    }

    #[test]
    fn mutated_scenarios_parse_or_fail_cleanly(
        which in 0..BUILTIN.len(),
        edits in proptest::collection::vec(
            (any::<usize>(), 0usize..12, prop_oneof![
                Just(String::new()),
                Just("-1".to_string()),
                Just("0".to_string()),
                Just("1e308".to_string()),
                Just("\"".to_string()),
                Just("]".to_string()),
                Just("\n[[endpoints]]\n".to_string()),
                Just("\"999999h\"".to_string()),
                Just("nan".to_string()),
                Just("\"150%\"".to_string()),
                "[a-z0-9 =\\.\"]{0,8}",
            ]),
            1..4,
        ),
    ) {
        let mut src = builtin(BUILTIN[which].0).unwrap().to_string();
        for (at, len, with) in &edits {
            src = mutate(&src, *at, *len, with);
        }
        match Scenario::from_toml(&src) {
            Ok(s) => {
                // Whatever parsed is within the documented limits.
                prop_assert!(!s.endpoints.is_empty());
                prop_assert!(s.arrivals.expected(s.duration) > 0.0);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with("invalid scenario"), "{}", msg);
                prop_assert!(msg.len() > 20);
            }
        }
    }
}
