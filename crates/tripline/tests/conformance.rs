//! The built-in conformance vectors against the in-process breaker.
#![cfg(feature = "serde")]

use tripline::conformance::{self, LocalSubject};

#[test]
fn every_builtin_vector_passes_in_process() {
    let vectors = conformance::builtin();
    assert!(vectors.len() >= 18);
    let mut failures = Vec::new();
    for v in &vectors {
        let subject = LocalSubject::new(v);
        if let Err(e) = conformance::run(v, &subject) {
            failures.push(e.to_string());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn fowler_trace_counts_match_seed_004() {
    let v = conformance::builtin()
        .into_iter()
        .find(|v| v.name == "fowler-trace")
        .unwrap();
    let subject = LocalSubject::new(&v);
    conformance::run(&v, &subject).unwrap();
    let m = subject.breaker().metrics();
    // 33 calls reached the dependency (5 healthy, 3 failures, 2 failed probes, 23 successes),
    // 27 were rejected locally.
    assert_eq!(m.successful_calls + m.failed_calls, 33);
    assert_eq!(m.failed_calls, 5);
    assert_eq!(m.rejected_calls, 27);
}

#[test]
fn a_wrong_expectation_is_reported_with_its_step() {
    let text = r#"
name = "broken"
[config]
window = { kind = "count", size = 2 }
minimum_calls = 2
[[step]]
op = "acquire"
id = "a"
expect = "reject"
"#;
    let v = conformance::parse(text).unwrap();
    let err = conformance::run(&v, &LocalSubject::new(&v)).unwrap_err();
    assert_eq!(err.step, 1);
    assert_eq!(
        err.to_string(),
        "vector 'broken', step 1 (acquire): expected Reject, got Permit"
    );
}

#[test]
fn vector_files_reject_unknown_fields() {
    let err = conformance::parse("name = 'x'\nbogus = 1\n[config]\n").unwrap_err();
    assert!(err.to_string().contains("bogus"), "{err}");
}

/// The pure rules, as a sequential host over plain values, decide every vector as the
/// in-process breaker (and the Redis store) do.
#[test]
fn every_builtin_vector_passes_on_the_pure_rules() {
    use tripline::conformance::RulesSubject;
    let mut failures = Vec::new();
    for v in &conformance::builtin() {
        if let Err(e) = conformance::run(v, &RulesSubject::new(v)) {
            failures.push(e.to_string());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
