//! The qualitative claims of the seed documents, checked on the built-in scenarios, and
//! determinism.

use std::time::Duration;

use tripline::State;
use tripline_sim::{Report, RunReport, Scenario, simulate};

fn run(name: &str) -> Report {
    simulate(&Scenario::load(name).unwrap(), None)
}

fn get<'a>(r: &'a Report, label: &str) -> &'a RunReport {
    r.run(label).unwrap_or_else(|| panic!("no run {label:?}"))
}

fn ms(v: Option<f64>) -> f64 {
    v.expect("latency present")
}

// Each claim is checked on a shortened copy of the built-in scenario (same service, same
// faults, a shorter incident and run) so that the suite stays fast in debug builds, and on
// the full scenario in the ignored `*_full` tests (`cargo test --release -- --ignored`).

/// Shortens a built-in scenario: the fault ends `incident` after it starts and the run
/// `after` later; `rate` scales the arrivals.
fn shortened(name: &str, incident: u64, after: u64, rate: f64) -> Scenario {
    let mut s = Scenario::load(name).unwrap();
    let start = s.dependency.faults[0].from;
    for f in &mut s.dependency.faults {
        f.until = start + Duration::from_secs(incident);
    }
    s.duration = start + Duration::from_secs(incident + after);
    s.arrivals.rate = s.arrivals.rate.map(|r| r * rate);
    s
}

fn check_gymfolks(r: &Report) {
    let incident = r.incident.unwrap();
    let len = incident.end_s - incident.start_s;
    let without = get(r, "without");
    let with = get(r, "with");
    let shared = get(r, "shared");

    // Without: the pool saturates and the endpoints that never touch the vendor suffer.
    assert_eq!(without.pool_peak, without.pool_size);
    assert!(
        f64::from(without.pool_full_s) > 0.9 * len,
        "{}",
        without.pool_full_s
    );
    let other = without.latency.other;
    assert!(
        ms(other.p99_ms) > 20.0 * ms(other.baseline_p99_ms),
        "{other:?}"
    );
    assert!(without.shed as f64 > 0.3 * without.requests as f64 * len / r.duration_s);
    for e in without.endpoints.iter().filter(|e| !e.uses_dependency) {
        assert!(
            e.shed as f64 > 0.2 * e.requests as f64 * len / r.duration_s,
            "{e:?}"
        );
    }

    // With (local or shared breakers): the pool never fills and the others keep their p99.
    for run in [with, shared] {
        assert!(
            run.pool_peak < run.pool_size / 2,
            "{}: {}",
            run.label,
            run.pool_peak
        );
        assert_eq!(run.pool_full_s, 0);
        assert_eq!(run.shed, 0);
        let o = run.latency.other;
        assert!(
            ms(o.p99_ms) <= 1.5 * ms(o.baseline_p99_ms),
            "{}: {o:?}",
            run.label
        );
        assert!(run.fallback_served > 0);
        assert!(run.dependency_calls < without.dependency_calls);
        // Trips within seconds of 19:00 and closes within a cycle of 19:06.
        assert!(
            run.time_to_trip_s.unwrap() < 3.0,
            "{:?}",
            run.time_to_trip_s
        );
        assert!(run.time_to_close_after_recovery_s.unwrap() < 25.0);
    }
    // Local breakers: every replica learns on its own.
    assert_eq!(with.breakers_tripped, 12);
    assert_eq!(shared.breakers_tripped, 1);
    assert!(with.transitions.iter().any(|t| t.replica == Some(11)));
    assert!(shared.transitions.iter().all(|t| t.replica.is_none()));

    // The same shared breaker seen through the store's 100 ms view: the same decisions,
    // plus a few calls from replicas whose view still said Closed after a trip.
    let view = get(r, "shared, 100ms view");
    assert_eq!(shared.stale_view_calls, 0);
    assert!(view.stale_view_calls > 0);
    assert!(view.stale_view_calls < 12 * view.transitions.len() as u64);
    assert_eq!(
        view.dependency_calls,
        shared.dependency_calls + view.stale_view_calls
    );
    assert_eq!(view.transitions.len(), shared.transitions.len());
}

#[test]
fn gymfolks_breaker_keeps_the_pool_and_unrelated_endpoints_healthy() {
    check_gymfolks(&simulate(&shortened("gymfolks", 120, 30, 1.0), None));
}

#[test]
#[ignore = "the full scenario; run with --release -- --ignored"]
fn gymfolks_full() {
    check_gymfolks(&run("gymfolks"));
}

fn check_fraud_checkout(r: &Report) {
    let without = get(r, "without");
    let with = get(r, "with");
    let incident = r.incident.unwrap();
    let len = incident.end_s - incident.start_s;

    // Without: the pool is exhausted for the whole incident; checkout's p99 is queueing plus
    // the timeout, about 10 s.
    assert_eq!(without.pool_peak, 200);
    assert!(f64::from(without.pool_full_s) >= len - 5.0);
    assert!(ms(without.latency.using_dependency.p99_ms) >= 10_000.0);
    assert!(ms(without.latency.other.p99_ms) >= 10_000.0);

    // With: the first timeouts land one second in, the window fills ~60 ms later.
    let trip = with.time_to_trip_s.unwrap();
    assert!((1.0..2.0).contains(&trip), "{trip}");
    assert_eq!(with.transitions[0].reason, "failure-rate");
    assert!(with.pool_full_s <= 2, "{}", with.pool_full_s);
    assert!(with.fallback_served as f64 > 0.95 * 800.0 * len);
    assert_eq!(with.shed, 0);
    assert!(ms(with.latency.other.p99_ms) < 50.0);
    // Probes every 30 s fail until the recovery, then the breaker closes.
    let reopen = with
        .transitions
        .iter()
        .filter(|t| t.from == State::HalfOpen && t.to == State::Open)
        .count() as f64;
    assert!(reopen >= (len / 31.0).floor(), "{reopen}");
    let close = with.time_to_close_after_recovery_s.unwrap();
    assert!(close <= 32.0, "{close}");
    assert_eq!(with.transitions.last().unwrap().to, State::Closed);
}

#[test]
fn fraud_checkout_trips_within_two_seconds_and_keeps_checkout_up() {
    check_fraud_checkout(&simulate(&shortened("fraud-checkout", 150, 40, 1.0), None));
}

#[test]
#[ignore = "the full scenario; run with --release -- --ignored"]
fn fraud_checkout_full() {
    let r = run("fraud-checkout");
    assert_eq!(
        r.incident.map(|i| (i.start_s, i.end_s)),
        Some((60.0, 780.0))
    );
    check_fraud_checkout(&r);
}

fn check_retry_storm(r: &Report) {
    let without = get(r, "without");
    let with = get(r, "with");
    let after = r.duration_s - r.incident.unwrap().end_s;
    assert!(
        without.load_amplification > 2.0,
        "{}",
        without.load_amplification
    );
    assert!(with.load_amplification < 1.1, "{}", with.load_amplification);
    assert!(without.load_amplification > 2.0 * with.load_amplification);
    // Without: the overload outlives the 30 s slowdown (a metastable failure) and the pool
    // stays full to the end; with: the pool recovers with the dependency.
    assert!(
        without.pool_full_after_recovery_s.unwrap() >= after,
        "{without:?}"
    );
    assert_eq!(with.pool_full_s, 0);
    assert!(with.succeeded as f64 > 1.5 * without.succeeded as f64);
    assert!(with.time_to_close_after_recovery_s.unwrap() < 10.0);
}

#[test]
fn retry_storm_amplification_is_higher_without_a_breaker() {
    check_retry_storm(&simulate(&shortened("retry-storm", 30, 60, 1.0), None));
}

#[test]
#[ignore = "the full scenario; run with --release -- --ignored"]
fn retry_storm_full() {
    check_retry_storm(&run("retry-storm"));
}

fn check_hot_shard(r: &Report) {
    let without = get(r, "without");
    let one = get(r, "one breaker");
    let per_shard = get(r, "per shard");
    let share = (r.incident.unwrap().end_s - r.incident.unwrap().start_s) / r.duration_s;
    // 10 % of the requests during the incident fail without protection.
    let failed = without.failed as f64 / without.requests as f64 / share;
    assert!((0.08..0.12).contains(&failed), "{failed}");
    // One breaker for the dependency trips on that 10 % and rejects healthy shards' calls.
    assert!(
        one.rejected_while_healthy as f64 > 0.5 * without.requests as f64 * share,
        "{}",
        one.rejected_while_healthy
    );
    assert!(one.rejected_while_healthy > 100 * per_shard.rejected_while_healthy.max(1));
    // Per-shard breakers trip only for the two failing shards and keep almost every success.
    assert_eq!(per_shard.breakers_tripped, 2);
    let mut shards: Vec<u32> = per_shard
        .transitions
        .iter()
        .filter_map(|t| t.shard)
        .collect();
    shards.sort_unstable();
    shards.dedup();
    assert_eq!(shards, [3, 11]);
    assert!(per_shard.succeeded as f64 > 0.99 * without.succeeded as f64);
    assert!((one.succeeded as f64) < (1.0 - 0.5 * share) * without.succeeded as f64);
}

#[test]
fn hot_shard_single_breaker_short_circuits_healthy_shards() {
    check_hot_shard(&simulate(&shortened("hot-shard", 60, 20, 1.0), None));
}

#[test]
#[ignore = "the full scenario; run with --release -- --ignored"]
fn hot_shard_full() {
    check_hot_shard(&run("hot-shard"));
}

/// A shorter variant of a scenario, for the determinism checks.
fn short(name: &str, secs: u64) -> Scenario {
    let mut s = Scenario::load(name).unwrap();
    s.duration = Duration::from_secs(secs);
    s
}

#[test]
fn same_seed_gives_identical_json() {
    for (name, secs) in [("fowler", 60), ("retry-storm", 75), ("hot-shard", 65)] {
        let s = short(name, secs);
        let a = simulate(&s, Some(42)).to_json();
        let b = simulate(&s, Some(42)).to_json();
        assert_eq!(a, b, "{name}");
        assert!(a.contains("\"schema_version\": 1"));
    }
}

#[test]
fn different_seeds_may_differ_and_seed_is_reported() {
    let s = short("retry-storm", 65);
    let a = simulate(&s, Some(1));
    let b = simulate(&s, Some(2));
    assert_eq!(a.seed, 1);
    assert_eq!(b.seed, 2);
    assert_ne!(a.to_json(), b.to_json());
    // The arrival sequence is shared by the variants of one run.
    assert_eq!(a.runs[0].requests, a.runs[1].requests);
}

#[test]
fn json_has_the_documented_fields() {
    let r = simulate(&short("hot-shard", 65), None);
    let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["scenario"], "hot-shard");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["label"], "without");
    for key in [
        "requests",
        "succeeded",
        "failed",
        "rejected_fast",
        "fallback_served",
        "rejected_while_healthy",
        "shed",
        "dependency_calls",
        "load_amplification",
        "pool_size",
        "pool_peak",
        "pool_full_s",
        "pool_full_after_recovery_s",
        "queue_peak",
        "latency",
        "endpoints",
        "first_trip_s",
        "time_to_trip_s",
        "all_closed_s",
        "time_to_close_after_recovery_s",
        "breakers_tripped",
        "transitions",
    ] {
        assert!(runs[2].get(key).is_some(), "missing {key}");
    }
    let t = &runs[2]["transitions"][0];
    assert_eq!(t["from"], "closed");
    assert_eq!(t["to"], "open");
    assert_eq!(t["replica"], 0);
    assert!(t["shard"].is_u64());
    assert!(runs[2]["latency"]["using_dependency"]["p99_ms"].is_f64());
    assert!(runs[2]["latency"]["other"]["p99_ms"].is_null());
}

#[test]
fn requests_are_all_accounted_for() {
    for (name, secs) in [("fowler", 60), ("retry-storm", 75), ("hot-shard", 65)] {
        let r = simulate(&short(name, secs), None);
        for run in &r.runs {
            assert_eq!(
                run.requests,
                run.succeeded + run.failed + run.rejected_fast + run.shed,
                "{name} {}",
                run.label
            );
            assert!(run.fallback_served <= run.rejected_fast);
            assert!(run.rejected_while_healthy <= run.rejected_fast);
            let per_endpoint: u64 = run.endpoints.iter().map(|e| e.requests).sum();
            assert_eq!(per_endpoint, run.requests);
        }
    }
}

#[test]
fn charts_render_for_every_scenario() {
    let r = simulate(&short("fowler", 60), None);
    let svg = tripline_sim::chart::svg(&r).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("without") && svg.contains("with"));
    let html = tripline_sim::chart::html(&r).unwrap();
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.contains("<svg") && html.contains("rejected fast by the breaker"));
}
