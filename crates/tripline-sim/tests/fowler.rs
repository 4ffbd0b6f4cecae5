//! The trace of Martin Fowler's CircuitBreaker example (open after 3 consecutive failures, 10 s
//! cooldown), reproduced exactly.

use tripline::State;
use tripline_sim::{Scenario, simulate};

#[test]
fn fowler_trace_matches_the_text() {
    let report = simulate(&Scenario::load("fowler").unwrap(), None);
    let with = report.run("with").unwrap();
    assert_eq!(with.requests, 60);
    assert_eq!(with.dependency_calls, 33);
    assert_eq!(with.rejected_fast, 27);
    // 5 healthy calls + 23 after the successful probe; 3 failures that tripped + 2 failed probes.
    assert_eq!(with.succeeded, 28);
    assert_eq!(with.failed, 5);
    assert_eq!(with.fallback_served, 0);
    // t = 30..36: the dependency had recovered, the breaker had not.
    assert_eq!(with.rejected_while_healthy, 7);

    let t: Vec<(f64, State, State)> = with
        .transitions
        .iter()
        .map(|t| (t.at_s, t.from, t.to))
        .collect();
    assert_eq!(
        t,
        [
            (7.0, State::Closed, State::Open),
            (17.0, State::Open, State::HalfOpen),
            (17.0, State::HalfOpen, State::Open),
            (27.0, State::Open, State::HalfOpen),
            (27.0, State::HalfOpen, State::Open),
            (37.0, State::Open, State::HalfOpen),
            (37.0, State::HalfOpen, State::Closed),
        ]
    );
    let reasons: Vec<&str> = with.transitions.iter().map(|t| t.reason).collect();
    assert_eq!(reasons[0], "consecutive-failures");
    assert_eq!(reasons[2], "probes-failed");
    assert_eq!(reasons[6], "probes-succeeded");
    assert_eq!(with.time_to_trip_s, Some(2.0));
    assert_eq!(with.all_closed_s, Some(37.0));
    assert_eq!(with.time_to_close_after_recovery_s, Some(7.0));
}

#[test]
fn fowler_without_a_breaker_every_request_reaches_the_dependency() {
    let report = simulate(&Scenario::load("fowler").unwrap(), None);
    let without = report.run("without").unwrap();
    assert_eq!(without.requests, 60);
    assert_eq!(without.dependency_calls, 60);
    // The 25 requests made during the outage (t = 5 to 29) each waited for a failure.
    assert_eq!(without.failed, 25);
    assert_eq!(without.succeeded, 35);
    assert_eq!(without.rejected_fast, 0);
    assert!(without.transitions.is_empty());
    assert_eq!(without.time_to_trip_s, None);
}

#[test]
fn fowler_table_shows_the_figures() {
    let table = simulate(&Scenario::load("fowler").unwrap(), None).table();
    assert!(
        table.contains("t=    7.000 s: closed → open (consecutive-failures)"),
        "{table}"
    );
    assert!(
        table.contains("t=   37.000 s: half-open → closed (probes-succeeded)"),
        "{table}"
    );
    let line = |label: &str| {
        table
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label:?} in\n{table}"))
            .split_whitespace()
            .rev()
            .take(2)
            .collect::<Vec<_>>()
    };
    assert_eq!(line("calls that reached"), ["33", "60"]);
    assert_eq!(line("rejected fast"), ["27", "0"]);
}
