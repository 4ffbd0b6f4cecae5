//! The headline figures of every built-in scenario, each run once in full (in every build:
//! `cargo test` and CI run them all), and determinism. `fowler` has its own exact test
//! (`tests/fowler.rs`), `mercari` its own (`tests/mercari.rs`).

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
    let r = run("gymfolks");
    check_gymfolks(&r);
    check_second_attempt(&r);
    check_gymfolks_beside_the_breaker(&r);
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
    let r = run("fraud-checkout");
    assert_eq!(
        r.incident.map(|i| (i.start_s, i.end_s)),
        Some((60.0, 780.0))
    );
    check_fraud_checkout(&r);
}

fn check_retry_storm(r: &Report) {
    let without = get(r, "without");
    let with = get(r, "breaker");
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
    let r = run("retry-storm");
    check_retry_storm(&r);
    check_retry_storm_cures(&r);
    check_retry_storm_limits(&r);
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
    let r = run("hot-shard");
    check_hot_shard(&r);
    check_hot_shard_throttle(&r);
    check_hot_shard_partial(&r);
}

/// GymFolks' second attempt: the shared breaker plus a 10 % retry budget and no retries
/// above 10 % errors, all real policies; and the table the README's command prints shows it.
fn check_second_attempt(r: &Report) {
    let shared = get(r, "shared");
    let second = get(r, "breaker + budget");
    let retry = second.policies.retry.as_ref().expect("a retry policy");
    assert_eq!(retry.budget, ["tps", "error-rate"]);
    assert_eq!(second.pool_full_s, 0);
    assert_eq!(second.shed, 0);
    assert!(second.pool_peak < second.pool_size / 2);
    assert!(second.dependency_calls <= shared.dependency_calls);
    // The breaker already stops nearly every retry; the budget has almost nothing left.
    assert!(retry.retries <= shared.policies.retry.as_ref().unwrap().retries);
    assert_eq!(second.recovery_s, Some(0.0));
    let without = get(r, "without");
    assert!(without.policies.retry.as_ref().unwrap().retries > 50_000);
    let table = r.table();
    for row in [
        "breaker + budget",
        "retries made",
        "refused by the retry budget",
        "tps + error-rate",
    ] {
        assert!(table.contains(row), "{row} missing from\n{table}");
    }
}

/// The cures of the retry storm, each the real policy.
fn check_retry_storm_cures(r: &Report) {
    let without = get(r, "without");
    assert_eq!(without.recovery_s, None, "the storm outlives the slowdown");
    for label in ["TPS 10%", "token bucket", "error-rate gate"] {
        let run = get(r, label);
        let retry = run.policies.retry.as_ref().unwrap();
        // The budget caps the retries: far fewer calls than without, nearly one per request.
        assert!(
            run.load_amplification < 1.15,
            "{label}: {}",
            run.load_amplification
        );
        assert!(retry.budget_refused > 100_000, "{label}: {retry:?}");
        assert!(retry.retries < without.policies.retry.as_ref().unwrap().retries / 10);
        // But a budget alone leaves the first attempts: the backlog the slowdown built keeps
        // the dependency past its capacity to the end (calls keep running after their
        // caller gave up).
        assert_eq!(run.recovery_s, None, "{label}");
    }
    // The ratio budget's promise: retries at most 10 % of requests plus 10 a second, per
    // replica.
    let tps = get(r, "TPS 10%").policies.retry.clone().unwrap();
    assert!(tps.retries as f64 <= 0.1 * tps.requests as f64 + 10.0 * 4.0 * r.duration_s + 4.0);
    // The SRE throttle sheds the excess locally and the service recovers.
    let throttle = get(r, "SRE throttle");
    assert!(
        throttle.rejected_by.throttle > 100_000,
        "{:?}",
        throttle.rejected_by
    );
    assert_eq!(throttle.rejected_by.breaker, 0);
    assert!(
        throttle.recovery_s.is_some_and(|s| s < 120.0),
        "{:?}",
        throttle.recovery_s
    );
    assert!(throttle.dependency_calls < without.dependency_calls / 2);
    // The breaker, alone or with the budget and the throttle, recovers with the slowdown.
    for label in ["breaker", "all three"] {
        let run = get(r, label);
        assert!(
            run.recovery_s.is_some_and(|s| s <= 5.0),
            "{label}: {:?}",
            run.recovery_s
        );
        assert!(run.load_amplification < 1.0);
    }
}

/// The SRE throttle on a partial failure: with K = 2 it refuses only once fewer than half of
/// the requests are accepted, so 10 % failing shards are refused nothing (a few refusals
/// while its window fills at the start), unlike the single breaker's 100 %.
fn check_hot_shard_throttle(r: &Report) {
    let without = get(r, "without");
    let throttle = get(r, "SRE throttle");
    let one = get(r, "one breaker");
    assert!(
        (throttle.rejected_fast as f64) < 0.001 * throttle.requests as f64,
        "{}",
        throttle.rejected_fast
    );
    assert!(throttle.rejected_fast * 1000 < one.rejected_fast);
    assert!(throttle.succeeded as f64 > 0.999 * without.succeeded as f64);
    assert_eq!(
        throttle.failed, without.failed,
        "the failing shards' errors reach callers"
    );
    // Its few refusals all came while its window was filling, before the faults.
    let refused_late: u32 = throttle.series.bins[1..].iter().map(|b| b.rejected).sum();
    assert_eq!(refused_late, 0);
}

fn endpoint<'a>(run: &'a RunReport, name: &str) -> &'a tripline_sim::report::EndpointReport {
    run.endpoints
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no endpoint {name}"))
}

/// The policies beside the breaker on GymFolks, each without one: a fixed bulkhead, the
/// adaptive limit (Vegas, concurrency-limits' default algorithm), and priority shedding at
/// the worker pool.
fn check_gymfolks_beside_the_breaker(r: &Report) {
    let without = get(r, "without");
    let bulkhead = get(r, "bulkhead 25");
    let limit = get(r, "adaptive limit");
    // Both cap what the vendor can hold: the pool never fills, the other endpoints keep
    // their p99, refused cards get the cached catalog.
    for run in [bulkhead, limit] {
        assert_eq!(run.pool_full_s, 0, "{}", run.label);
        assert_eq!(run.shed, 0, "{}", run.label);
        let o = run.latency.other;
        assert!(ms(o.p99_ms) <= 1.5 * ms(o.baseline_p99_ms), "{}", run.label);
        assert_eq!(run.fallback_served, run.rejected_fast, "{}", run.label);
        assert_eq!(run.recovery_s, Some(0.0), "{}", run.label);
    }
    assert_eq!(bulkhead.rejected_by.bulkhead, bulkhead.rejected_fast);
    assert_eq!(limit.rejected_by.limiter, limit.rejected_fast);
    // The limit follows the vendor's round-trip times down: far fewer calls reach the sick
    // vendor than through the fixed bulkhead, and the card's p99 is the fallback's...
    assert!(
        limit.dependency_calls * 2 < bulkhead.dependency_calls,
        "{} vs {}",
        limit.dependency_calls,
        bulkhead.dependency_calls
    );
    assert!(ms(limit.latency.using_dependency.p99_ms) < 1500.0);
    assert!(ms(bulkhead.latency.using_dependency.p99_ms) > 2500.0);
    // ...at a price the bulkhead does not pay: Vegas reads the spread of a healthy vendor's
    // latency (300 ms median, 900 ms p99) as a queue, and refuses healthy calls.
    assert!(
        limit.rejected_while_healthy > 20 * bulkhead.rejected_while_healthy.max(1),
        "{} vs {}",
        limit.rejected_while_healthy,
        bulkhead.rejected_while_healthy
    );
    let l = limit
        .policies
        .limiter
        .as_ref()
        .expect("the limiter's figures");
    assert_eq!((l.algorithm, l.initial_limit), ("vegas", 20));
    assert!(l.lowest_limit >= 1 && l.highest_limit <= 1000, "{l:?}");
    assert_eq!(l.slots.refused(), limit.rejected_fast);

    // Priority shedding at the pool: POST /log-set (critical) always finds a worker; the
    // workout card (sheddable) may hold half of them and is shed first.
    let shed = get(r, "shed by priority");
    let log = endpoint(shed, "/log-set");
    assert_eq!(log.priority.0, tripline_policies::shed::Priority::CRITICAL);
    assert_eq!((log.succeeded, log.failed, log.shed), (log.requests, 0, 0));
    assert!(endpoint(without, "/log-set").shed as f64 > 0.2 * log.requests as f64);
    let card = endpoint(shed, "/workout-card");
    assert!(card.shed as f64 > 0.3 * card.requests as f64, "{card:?}");
    assert_eq!(shed.shed, card.shed, "only cards are shed");
    assert_eq!(shed.shed_by_priority, shed.shed);
    let stats = shed.policies.shed.as_ref().expect("the shedder's figures");
    assert_eq!(stats.at, "workers");
    assert_eq!(stats.refused(), shed.shed_by_priority);
    assert_eq!(shed.pool_full_s, 0);
    assert!(
        shed.pool_peak <= shed.pool_size * 3 / 5,
        "{}",
        shed.pool_peak
    );
    for e in shed.endpoints.iter().filter(|e| !e.uses_dependency) {
        assert_eq!(e.succeeded, e.requests, "{}", e.name);
    }
}

/// The fixed bulkhead and the adaptive limit on the retry storm, each without a breaker.
fn check_retry_storm_limits(r: &Report) {
    let without = get(r, "without");
    let bulkhead = get(r, "bulkhead 25");
    let limit = get(r, "adaptive limit");
    // Both end the storm with the slowdown: the calls in flight are capped, so is the load.
    for run in [bulkhead, limit] {
        assert_eq!(run.recovery_s, Some(0.0), "{}", run.label);
        assert_eq!(run.pool_full_s, 0, "{}", run.label);
        assert!(run.load_amplification < 1.0, "{}", run.label);
        assert!(run.succeeded > 2 * without.succeeded, "{}", run.label);
    }
    // The limit sends fewer calls than the bulkhead, and refuses more healthy ones (Vegas
    // reads the latency's spread as a queue): fewer requests get real data.
    assert!(limit.dependency_calls * 4 < bulkhead.dependency_calls * 3);
    assert!(limit.rejected_while_healthy > 2 * bulkhead.rejected_while_healthy);
    assert!(limit.succeeded < bulkhead.succeeded);
    // The breaker does better than either here.
    assert!(get(r, "breaker").succeeded > bulkhead.succeeded);
}

/// Partial opening on a hot shard: a share of the calls refused, not all of them.
fn check_hot_shard_partial(r: &Report) {
    let without = get(r, "without");
    let one = get(r, "one breaker");
    let partial = get(r, "partial");
    let i = r.incident.unwrap();
    let during = without.requests as f64 * (i.end_s - i.start_s) / r.duration_s;
    // About 0.1 / 0.9 of the calls during the incident, Semian's steady state for a 10 %
    // excess, where the single breaker refuses nearly all of them.
    let share = partial.rejected_fast as f64 / during;
    assert!((0.05..0.2).contains(&share), "{share}");
    assert_eq!(partial.rejected_by.partial, partial.rejected_fast);
    assert!(
        partial.rejected_while_healthy * 8 < one.rejected_while_healthy,
        "{} vs {}",
        partial.rejected_while_healthy,
        one.rejected_while_healthy
    );
    assert_eq!(
        partial.rejected_would_succeed,
        Some(partial.rejected_while_healthy),
        "a healthy shard's call succeeds, a failing shard's fails"
    );
    assert!(partial.succeeded as f64 > 0.9 * without.succeeded as f64);
    let p = partial.policies.partial.as_ref().unwrap();
    assert!(
        (0.05..0.3).contains(&p.highest_rejection_rate),
        "{}",
        p.highest_rejection_rate
    );
    assert_eq!(p.rejected, partial.rejected_fast);
}

#[test]
fn sustained_errors_partial_opening_refuses_a_share_and_still_closes_on_an_outage() {
    let r = &run("sustained-errors");
    let without = get(r, "without");
    let classic = get(r, "classic 10%");
    let default = get(r, "classic 50%");
    let partial = get(r, "partial");
    let throttle = get(r, "SRE throttle");
    let would = |run: &RunReport| run.rejected_would_succeed.expect("known at one tier");
    // 20 % errors: the breaker tuned to see it opens and refuses the four calls in five that
    // would have succeeded too; at resilience4j's 50 % it never trips.
    assert!(would(classic) as f64 > 0.7 * classic.rejected_fast as f64);
    assert_eq!((default.rejected_fast, default.transitions.len()), (0, 0));
    // Partial opening refuses a share, about Δ / (1 − Δ) of the calls during the incident...
    let i = r.incident.unwrap();
    let during = without.requests as f64 * (i.end_s - i.start_s) / r.duration_s;
    let share = partial.rejected_fast as f64 / during;
    assert!((0.12..0.3).contains(&share), "{share}");
    // ...so far fewer healthy calls than the classic breaker.
    assert!(
        would(partial) * 3 < would(classic),
        "{} vs {}",
        would(partial),
        would(classic)
    );
    // The SRE throttle refuses nothing at 20 % (K = 2: only below half the requests accepted).
    assert!(throttle.rejected_fast * 1000 < throttle.requests);
    // The sweep: at 100 % errors, a total outage, partial opening keeps the calls away
    // nearly as the breakers do; at 10 % it refuses a tenth of what the classic breaker does.
    let sw = r.sweep.as_ref().unwrap();
    assert_eq!(
        sw.metrics,
        [
            "rejected_would_succeed",
            "dependency_calls",
            "failed",
            "refused_in_faults"
        ]
    );
    let at = |value: &str, label: &str, m: usize| {
        let p = sw.points.iter().find(|p| p.value == value).unwrap();
        p.runs.iter().find(|x| x.label == label).unwrap().figures[m].unwrap()
    };
    let healthy_share = 1.0 - (i.end_s - i.start_s) / r.duration_s;
    assert!(at("100%", "partial", 2) < 0.05 * at("100%", "without", 2));
    assert!(at("100%", "partial", 1) < 1.05 * healthy_share * at("100%", "without", 1));
    assert!(at("100%", "classic 10%", 2) < 0.05 * at("100%", "without", 2));
    assert!(at("100%", "SRE throttle", 2) > 5.0 * at("100%", "partial", 2));
    assert!(at("10%", "partial", 0) * 5.0 < at("10%", "classic 10%", 0));
    assert_eq!(at("10%", "classic 50%", 0), 0.0);
    // The throttle refuses nothing while more than half is accepted (10 %, 50 %), and more
    // and more once less is (75 %, 100 %: see the next test).
    assert_eq!(at("10%", "SRE throttle", 3), 0.0);
    assert!(at("50%", "SRE throttle", 3) < 0.5);
    assert!(at("75%", "SRE throttle", 3) > 25.0);
}

/// The percentage refused of the requests answered in each `step` seconds from `from` to
/// `until`.
fn refused_per(run: &RunReport, from: f64, until: f64, step: f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut a = from;
    while a + step <= until {
        out.push(tripline_sim::sweep::refused_share(run, a, a + step).unwrap_or(0.0));
        a += step;
    }
    out
}

fn fmt_shares(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.1}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The SRE throttle against a dependency that accepts a fixed quarter of what reaches it
/// (`sustained-errors` at 75 % errors, the incident held for 12 minutes). Read with
/// `requests` as what reached the dependency, the formula `(requests − K × accepts) /
/// (requests + 1)` gives 1 − 2 × 0.25 = 50 % refused; but `requests` counts the throttle's own
/// refusals, which earn no accepts. With a share `x(t)` sent, the odds of sending are
/// `K × 0.25 × ` the mean of `x` over the window: `x = ½ × mean(x)`, whose only steady state
/// is zero. Over a sliding window of length W it decays as `e^(−u t / W)` with `(e^u − 1) / u
/// = 2`, u ≈ 1.26: the share sent falls to about 0.28 of itself every 2 minutes.
/// `cargo test -p tripline-sim --test scenarios throttle -- --nocapture` prints the shares
/// per 2 minutes.
#[test]
fn the_throttle_refuses_nearly_everything_from_a_dependency_that_accepts_a_fixed_quarter() {
    let mut s = Scenario::load("sustained-errors").unwrap();
    s.sweep = None;
    s.dependency.faults[0].error_rate = tripline_sim::Rate::new(0.75);
    s.dependency.faults[0].until = Duration::from_secs(780);
    s.duration = Duration::from_secs(840);
    let i = s
        .protection
        .iter()
        .position(|p| p.label == "SRE throttle")
        .unwrap();
    let throttle = &tripline_sim::simulate_variant(&s, Some(i), None).unwrap();
    let per_2m = refused_per(throttle, 60.0, 780.0, 120.0);
    eprintln!(
        "SRE throttle at 75 % errors, refused per 2 minutes from 60 s: {}",
        fmt_shares(&per_2m)
    );
    // Climbing every window, past the formula's naive 50 % in the second and near all of it
    // by the last: once the window holds only the incident, the share sent falls to about
    // e^−1.26 = 0.28 of itself per window.
    assert!(per_2m.windows(2).all(|w| w[1] > w[0]), "{per_2m:?}");
    assert!(per_2m[1] > 50.0 && per_2m[5] > 99.0, "{per_2m:?}");
    let sent = |i: usize| 100.0 - per_2m[i];
    for i in 2..per_2m.len() {
        let ratio = sent(i) / sent(i - 1);
        assert!(
            (0.2..0.4).contains(&ratio),
            "window {i}: {ratio} {per_2m:?}"
        );
    }
}

/// `backoff-contention-aws` keeps the article's ordering too, and with the AWS simulator's
/// own network delay lands within 5 % of that simulator's means at 100 clients (run 30
/// times: 2425 calls / 2.0 s without backoff, 1867 / 63.6 s exponential, 797 / 4.95 s full
/// jitter, 812 / 6.7 s equal jitter, 1008 / 4.7 s decorrelated).
#[test]
fn backoff_contention_with_the_aws_latency_matches_the_aws_simulator() {
    let r = &run("backoff-contention-aws");
    let sw = r.sweep.as_ref().unwrap();
    let p = sw.points.iter().find(|p| p.value == "100").unwrap();
    for (label, calls, time) in [
        ("without", 2425.0, 2.0),
        ("exponential", 1867.0, 63.6),
        ("full jitter", 797.0, 4.95),
        ("equal jitter", 812.0, 6.7),
        ("decorrelated jitter", 1008.0, 4.7),
    ] {
        let f = &p.runs.iter().find(|x| x.label == label).unwrap().figures;
        let (c, t) = (f[0].unwrap(), f[1].unwrap());
        assert!((c / calls - 1.0).abs() < 0.05, "{label}: {c} vs {calls}");
        assert!((t / time - 1.0).abs() < 0.05, "{label}: {t} vs {time}");
    }
    for run in &r.runs {
        assert_eq!((run.succeeded, run.failed), (100, 0), "{}", run.label);
    }
}

/// Shopify Semian's experiment against Semian's published figures
/// (experiments/results/csv/*_time_analysis.csv at Semian v0.28.2): at a sustained 20 %, the
/// classic breaker refused 79.3 to 88.2 % of each 30 s and the adaptive one 21.9 to 26.9 %
/// (about 26 % once settled); over a 20 s spike at 20 %, 78.9 % and 17.5 %. The classic column
/// is Semian's own rule, 12 errors within 20 s (the core's failure-count-in-time rule).
/// `cargo test -p tripline-sim --test scenarios semian -- --nocapture` prints the shares.
#[test]
fn semian_classic_refuses_most_and_adaptive_a_quarter() {
    let r = &run("semian");
    let classic = get(r, "classic");
    let adaptive = get(r, "adaptive");
    let c = refused_per(classic, 120.0, 420.0, 30.0);
    let a = refused_per(adaptive, 120.0, 420.0, 30.0);
    eprintln!(
        "semian, refused per 30 s from 120 s: classic {}",
        fmt_shares(&c)
    );
    eprintln!(
        "semian, refused per 30 s from 120 s: adaptive {}",
        fmt_shares(&a)
    );
    let answered = |run: &RunReport| -> Vec<u64> {
        run.series.bins[120..420]
            .chunks(30)
            .map(|c| {
                c.iter()
                    .map(|b| u64::from(b.succeeded + b.failed + b.rejected))
                    .sum()
            })
            .collect()
    };
    eprintln!(
        "semian, requests answered per 30 s from 120 s: classic {:?}, adaptive {:?}",
        answered(classic),
        answered(adaptive)
    );
    let sw = r.sweep.as_ref().unwrap();
    let at = |value: &str, label: &str| {
        let p = sw.points.iter().find(|p| p.value == value).unwrap();
        p.runs.iter().find(|x| x.label == label).unwrap().figures[0].unwrap()
    };
    let whole = |run: &RunReport| tripline_sim::sweep::refused_share(run, 120.0, 420.0).unwrap();
    eprintln!(
        "semian, refused over the faults: 20 s spike classic {:.1} % adaptive {:.1} %; 300 s classic {:.1} % adaptive {:.1} %",
        at("140s", "classic"),
        at("140s", "adaptive"),
        whole(classic),
        whole(adaptive)
    );
    // Semian's classic breaker: 79 to 88 % of each 30 s; here within 77 to 90 %.
    assert!(c.iter().all(|x| (77.0..90.0).contains(x)), "{c:?}");
    // While healthy (1 % errors, about 1.2 errors in 20 s per replica), 12 errors in 20 s
    // almost never happen: the classic breaker refuses (next to) nothing before the incident.
    let healthy: u64 = classic.series.bins[..120]
        .iter()
        .map(|b| u64::from(b.rejected))
        .sum();
    eprintln!("semian, refused while healthy (0 to 120 s): classic {healthy}");
    assert!(healthy < 100, "{healthy}");
    // The adaptive one settles near a quarter: 22 to 27 % in Semian's; here 15 to 35 %.
    assert!(a.iter().all(|x| (15.0..35.0).contains(x)), "{a:?}");
    // The spike: 78.9 % and 17.5 % in Semian's.
    assert!((75.0..88.0).contains(&at("140s", "classic")));
    assert!((10.0..30.0).contains(&at("140s", "adaptive")));
    // Nothing is refused without protection; both breakers close again after the faults.
    assert_eq!(get(r, "without").rejected_fast, 0);
    let after = refused_per(classic, 480.0, 540.0, 30.0);
    assert!(after.iter().all(|x| *x < 5.0), "{after:?}");
}

/// The metastable sweep, one seed per value in every build (the scenario's own: 8 seeds per
/// value, `metastable_claims_hold_over_the_seeds` checks them all).
#[test]
fn metastable_recovers_below_the_trigger_size_and_a_budget_or_breaker_restores_it() {
    let mut s = Scenario::load("metastable").unwrap();
    s.sweep.as_mut().unwrap().repeat = 1;
    let r = &simulate(&s, None);
    let without = get(r, "without");
    assert_eq!(without.recovery_s, None, "a 10 s trigger: never");
    assert!(without.load_amplification > 2.0);
    for label in ["no retries", "retry budget", "breaker"] {
        assert!(get(r, label).recovery_s.is_some(), "{label}");
    }
    let sw = r.sweep.as_ref().unwrap();
    let at = |value: &str, label: &str| {
        let p = sw.points.iter().find(|p| p.value == value).unwrap();
        p.runs.iter().find(|x| x.label == label).unwrap().figures[0]
    };
    // On this seed: below the trigger size the service recovers by itself; above it, never.
    for small in ["62s", "64s"] {
        assert!(at(small, "without").is_some_and(|s| s <= 5.0), "{small}");
    }
    for big in ["65s", "70s", "90s", "120s"] {
        assert_eq!(at(big, "without"), None, "{big}");
    }
    // Without retries, or with a budget or a breaker, it recovers from every trigger.
    for v in ["62s", "64s", "65s", "70s", "90s", "120s"] {
        assert!(at(v, "no retries").is_some_and(|s| s <= 15.0), "{v}");
        assert!(at(v, "retry budget").is_some(), "{v}");
        assert!(at(v, "breaker").is_some_and(|s| s <= 15.0), "{v}");
    }
}

/// The README's metastable claims, over the scenario's 8 seeds per trigger (the sweep's
/// median and range): a 2 s trigger never latches, a 30 s one always does, and between them
/// it depends on the seed; without retries and with the breaker the service recovers from
/// every trigger on every seed within 10 s; with the retry budget it recovers on every seed,
/// but more slowly the longer the trigger.
#[test]
#[ignore = "8 seeds × 6 triggers × 4 runs: run with --release -- --ignored"]
fn metastable_claims_hold_over_the_seeds() {
    let r = &run("metastable");
    let sw = r.sweep.as_ref().unwrap();
    assert_eq!((sw.repeat, sw.points.len()), (8, 6));
    let at = |value: &str, label: &str| {
        let p = sw.points.iter().find(|p| p.value == value).unwrap();
        p.runs.iter().find(|x| x.label == label).unwrap().spread[0]
    };
    assert_eq!(at("62s", "without").missing, 0);
    for v in ["64s", "65s", "70s"] {
        let s = at(v, "without");
        assert!(s.missing > 0 && s.missing < 8, "{v}: {s:?}");
    }
    for v in ["90s", "120s"] {
        assert_eq!(at(v, "without").missing, 8, "{v}");
    }
    for v in ["62s", "64s", "65s", "70s", "90s", "120s"] {
        for label in ["no retries", "breaker"] {
            let s = at(v, label);
            assert!(
                s.missing == 0 && s.high.unwrap() <= 10.0,
                "{v} {label}: {s:?}"
            );
        }
        assert_eq!(at(v, "retry budget").missing, 0, "{v}");
    }
    let budget = |v: &str| at(v, "retry budget").median.unwrap();
    assert!(budget("70s") < budget("90s") && budget("90s") < budget("120s"));
}

/// Every built-in scenario has its figures checked in this file, `fowler.rs` or
/// `mercari.rs`.
#[test]
fn every_builtin_scenario_is_checked() {
    let checked = [
        "fowler",
        "fraud-checkout",
        "gymfolks",
        "gymfolks-cascade",
        "retry-storm",
        "hot-shard",
        "mercari",
        "backoff-contention",
        "backoff-contention-aws",
        "metastable",
        "sustained-errors",
        "slow-recovery",
        "semian",
    ];
    let builtin: Vec<&str> = tripline_sim::scenario::BUILTIN
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(builtin, checked);
}

/// A shorter variant of a scenario, for the determinism checks.
fn short(name: &str, secs: u64) -> Scenario {
    let mut s = Scenario::load(name).unwrap();
    s.duration = s.duration.min(Duration::from_secs(secs));
    s
}

#[test]
fn same_seed_gives_identical_json() {
    // Every built-in scenario, shortened (a sweep to one value, run once).
    for (name, _) in tripline_sim::scenario::BUILTIN {
        let mut s = short(name, 65);
        if let Some(sw) = s.sweep.as_mut() {
            sw.values.truncate(1);
            sw.repeat = 1;
        }
        if name.starts_with("gymfolks") {
            s.arrivals.rate = Some(400.0);
        }
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
    assert_eq!(runs.len(), 6);
    assert_eq!(runs[0]["label"], "without");
    assert_eq!(v["tiers"][0], "service");
    assert!(v["sweep"].is_null());
    for key in [
        "requests",
        "succeeded",
        "failed",
        "rejected_fast",
        "fallback_served",
        "rejected_while_healthy",
        "rejected_would_succeed",
        "shed",
        "shed_by_priority",
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
        "rejected_by",
        "recovery_s",
        "completion_s",
        "policies",
        "tiers",
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
    // The throttle's own counter, and one tier (the service) with its figures.
    assert_eq!(
        runs[3]["policies"]["throttle"]["rejected"],
        runs[3]["rejected_by"]["throttle"]
    );
    assert!(runs[2]["policies"]["breaker"]["rejected"].is_u64());
    assert!(runs[2]["policies"]["breaker"]["ramping_up"].is_u64());
    // Partial opening's own counters, and the endpoints' priorities.
    assert_eq!(
        runs[4]["policies"]["partial"]["rejected"],
        runs[4]["rejected_by"]["partial"]
    );
    assert!(runs[4]["policies"]["partial"]["highest_rejection_rate"].is_f64());
    assert!(runs[4]["rejected_would_succeed"].is_u64());
    assert_eq!(runs[0]["endpoints"][0]["priority"], "default");
    for key in ["shed", "limiter", "partial"] {
        assert!(runs[0]["rejected_by"][key].is_u64(), "rejected_by.{key}");
    }
    let tier = &runs[2]["tiers"][0];
    assert_eq!(tier["name"], "service");
    assert_eq!(tier["calls_below"], runs[2]["dependency_calls"]);
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
    assert!(html.contains("<table class=\"cmp\">"));
}
