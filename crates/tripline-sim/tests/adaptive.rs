//! The policies beside the breaker in the simulator, beyond the built-in scenarios' columns
//! (`tests/scenarios.rs` checks those): each of the limiter's algorithms in place of the
//! "adaptive limit" column, request priorities carried to the shedder and the limiter in the
//! client, their queues, and a game day with injected faults.

use tripline::State;
use tripline_policies::shed::Priority;
use tripline_sim::adaptive::{AlgorithmKind, AlgorithmSection, LimiterSection};
use tripline_sim::{RunReport, Scenario, simulate, simulate_variant};

/// `name`'s "adaptive limit" column with `kind` (its defaults), and its "bulkhead 25".
fn limit_and_bulkhead(name: &str, kind: AlgorithmKind) -> (RunReport, RunReport) {
    with_algorithm(name, kind, None)
}

/// The same with a `min_limit` of its own.
fn with_algorithm(
    name: &str,
    kind: AlgorithmKind,
    min_limit: Option<u32>,
) -> (RunReport, RunReport) {
    let mut s = Scenario::load(name).unwrap();
    let at = |s: &Scenario, label: &str| s.protection.iter().position(|p| p.label == label);
    let limit = at(&s, "adaptive limit").unwrap();
    s.protection[limit].limiter = Some(LimiterSection {
        algorithm: Some(AlgorithmSection {
            kind,
            min_limit,
            ..AlgorithmSection::default()
        }),
        ..LimiterSection::default()
    });
    let bulkhead = at(&s, "bulkhead 25").unwrap();
    (
        simulate_variant(&s, Some(limit), None).unwrap(),
        simulate_variant(&s, Some(bulkhead), None).unwrap(),
    )
}

/// On GymFolks, Gradient2 and AIMD with their defaults never go below a limit of 20 per
/// replica: when the vendor slows down they act as a bulkhead of 20 to 55, close to the
/// fixed bulkhead of 25, and refuse about as few healthy calls. (Vegas, the default, goes down
/// to 1: `tests/scenarios.rs`.)
#[test]
fn gradient2_and_aimd_act_as_a_bulkhead_on_gymfolks() {
    for kind in [AlgorithmKind::Gradient2, AlgorithmKind::Aimd] {
        let (limit, bulkhead) = limit_and_bulkhead("gymfolks", kind);
        let l = limit.policies.limiter.as_ref().unwrap();
        assert_eq!(l.algorithm, kind.name());
        assert_eq!(l.lowest_limit, 20, "{kind:?}: the default min_limit");
        assert!(l.highest_limit <= 200, "{kind:?}: {l:?}");
        let ratio = limit.dependency_calls as f64 / bulkhead.dependency_calls as f64;
        assert!((0.85..1.0).contains(&ratio), "{kind:?}: {ratio}");
        assert!(limit.rejected_while_healthy < 1000, "{kind:?}");
        assert_eq!(limit.pool_full_s, 0, "{kind:?}");
        assert_eq!(limit.recovery_s, Some(0.0), "{kind:?}");
    }
}

/// On the retry storm, AIMD ends the storm (every timeout is a drop that cuts the limit by a
/// tenth), a little better than the fixed bulkhead with its default floor of 20 per replica
/// (80 for a dependency that serves 60 at once), and as well as the breaker with a floor of
/// one. Gradient2 does not: a timed-out call's round trip is the 250 ms timeout, its
/// long-term average follows the round trips up, so the gradient stays at its ceiling and the
/// limit grows to its maximum (200, the whole pool) while the storm runs on.
#[test]
fn aimd_ends_the_retry_storm_and_gradient2_does_not() {
    let (aimd, bulkhead) = limit_and_bulkhead("retry-storm", AlgorithmKind::Aimd);
    assert_eq!(aimd.recovery_s, Some(0.0));
    assert!(aimd.load_amplification < 1.0);
    assert!(aimd.succeeded > bulkhead.succeeded);
    assert!(aimd.rejected_while_healthy < bulkhead.rejected_while_healthy);
    let a = aimd.policies.limiter.as_ref().unwrap();
    assert!(a.drops > 0 && a.lowest_limit == 20, "{a:?}");
    let (floor_1, _) = with_algorithm("retry-storm", AlgorithmKind::Aimd, Some(1));
    let breaker = simulate_variant(&Scenario::load("retry-storm").unwrap(), Some(0), None).unwrap();
    assert_eq!(breaker.label, "breaker");
    assert!(floor_1.succeeded as f64 > 0.99 * breaker.succeeded as f64);
    assert!(floor_1.rejected_while_healthy * 10 < aimd.rejected_while_healthy);

    let (gradient2, _) = limit_and_bulkhead("retry-storm", AlgorithmKind::Gradient2);
    assert_eq!(
        gradient2.recovery_s, None,
        "the storm outlives the slowdown"
    );
    assert!(gradient2.load_amplification > 2.0);
    let g = gradient2.policies.limiter.as_ref().unwrap();
    assert_eq!(g.highest_limit, 200, "{g:?}");
}

/// Two endpoints call the same dependency, one critical (100 requests a second) and one
/// sheddable (300), 150 and 450 calls at once while it slows down from 20 s to 40 s; a
/// variant puts `section` (a TOML line) in the client.
fn two_priorities(section: &str) -> Scenario {
    Scenario::from_toml(&format!(
        r#"name = "priorities"
duration = "60s"
seed = 9
arrivals = {{ process = "poisson", rate = 400.0 }}

[service]
workers = 1000

[[endpoints]]
name = "/pay"
weight = 1
uses_dependency = true
priority = "critical"

[[endpoints]]
name = "/recommend"
weight = 3
uses_dependency = true
priority = "sheddable"

[client]
timeout = "2s"

[dependency]
latency = {{ kind = "lognormal", median = "100ms", p99 = "300ms" }}

[[dependency.faults]]
from = "20s"
until = "40s"
latency = "1500ms"

[[protection]]
label = "with"
breakers = false
fallback = true
{section}
"#
    ))
    .unwrap_or_else(|e| panic!("{e}"))
}

fn endpoint<'a>(run: &'a RunReport, name: &str) -> &'a tripline_sim::report::EndpointReport {
    run.endpoints.iter().find(|e| e.name == name).unwrap()
}

/// The shedder in the client: each request's priority goes with its call, and when the
/// dependency slows down the sheddable calls are refused first: the critical ones keep every
/// slot they need.
#[test]
fn the_client_shedder_refuses_the_sheddable_calls_first() {
    let s = two_priorities("shed = { capacity = 500 }");
    let r = simulate(&s, None);
    let with = r.run("with").unwrap();
    let (pay, rec) = (endpoint(with, "/pay"), endpoint(with, "/recommend"));
    assert_eq!(pay.priority.0, Priority::CRITICAL);
    assert_eq!(pay.rejected, 0, "{pay:?}");
    assert!(rec.rejected as f64 > 0.2 * rec.requests as f64, "{rec:?}");
    assert_eq!(with.rejected_by.shed, rec.rejected);
    let stats = with.policies.shed.as_ref().unwrap();
    assert_eq!(stats.at, "client");
    // Refused with slots free, kept for higher priorities: the sheddable calls may hold 250.
    assert_eq!(stats.shed, rec.rejected);
    assert_eq!(stats.full, 0);
}

/// The limiter with shares: the same rule on its adaptive limit.
#[test]
fn the_limiter_shares_its_limit_by_priority() {
    let s = two_priorities(
        "limiter = { algorithm = { kind = \"aimd\", min_limit = 10, initial_limit = 200, max_limit = 300 }, shares = {} }",
    );
    let with = simulate_variant(&s, Some(0), None).unwrap();
    let (pay, rec) = (endpoint(&with, "/pay"), endpoint(&with, "/recommend"));
    assert!(rec.rejected > 4 * pay.rejected.max(1), "{pay:?} {rec:?}");
    assert_eq!(with.rejected_by.limiter, pay.rejected + rec.rejected);
    let l = with.policies.limiter.as_ref().unwrap();
    assert!(l.lowest_limit >= 10 && l.highest_limit <= 300, "{l:?}");
    assert_eq!(l.slots.refused(), with.rejected_fast);
}

/// The limiter's queue is served highest priority first: with a fixed limit and a queue, the
/// critical calls wait and get in, the sheddable ones time out in the queue (or are pushed
/// out of it) instead.
#[test]
fn the_limiters_queue_serves_the_critical_calls_first() {
    let s = two_priorities(
        "limiter = { algorithm = { kind = \"fixed\", limit = 300 }, max_waiting = 200, max_wait = \"500ms\" }",
    );
    let with = simulate_variant(&s, Some(0), None).unwrap();
    let (pay, rec) = (endpoint(&with, "/pay"), endpoint(&with, "/recommend"));
    let l = with.policies.limiter.as_ref().unwrap();
    assert_eq!((l.lowest_limit, l.highest_limit), (300, 300));
    assert!(l.slots.admitted_after_wait > 0, "{l:?}");
    assert!(
        l.slots.timed_out + l.slots.evicted + l.slots.queue_full > 0,
        "{l:?}"
    );
    assert!(rec.rejected > 10 * pay.rejected.max(1), "{pay:?} {rec:?}");
    // Every refusal is a fast answer from the cache (queued calls wait at most 500 ms).
    assert_eq!(with.fallback_served, with.rejected_fast);
    let mut s = s;
    s.duration = std::time::Duration::from_secs(45);
    assert_eq!(
        simulate(&s, Some(3)).to_json(),
        simulate(&s, Some(3)).to_json(),
        "a queue of tickets is deterministic"
    );
}

/// A game day: a 5 s stall injected into every call from 60 s to 120 s. The 250 ms timeout
/// cuts each stall, the breaker opens within a second, the service answers from its cache,
/// the dependency sees nothing but probes; once the stall is lifted, the breaker closes on its
/// own.
#[test]
fn a_game_day_stall_opens_the_breaker_and_lifting_it_closes_it() {
    let chaos = r#"chaos = { from = "60s", until = "120s", rules = [{ fault = "latency", rate = 1.0, delay = "5s" }] }"#;
    let s = Scenario::from_toml(
        &r#"name = "game-day"
duration = "3m"
arrivals = { process = "poisson", rate = 200.0 }

[[endpoints]]
name = "/price"
uses_dependency = true

[[endpoints]]
name = "/health"

[client]
timeout = "250ms"

[dependency]
latency = { kind = "lognormal", median = "20ms", p99 = "60ms" }

[[protection]]
label = "game day"
fallback = true
breaker = { window = { kind = "count", size = 20 }, minimum_calls = 10, open = { duration = "5s" }, half_open = { permitted_calls = 2, policy = "consecutive" } }
CHAOS

[[protection]]
label = "no breaker"
breakers = false
CHAOS
"#
        .replace("CHAOS", chaos),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let r = simulate(&s, None);
    let day = r.run("game day").unwrap();
    let opened: Vec<f64> = day
        .transitions
        .iter()
        .filter(|t| t.from == State::Closed && t.to == State::Open)
        .map(|t| t.at_s)
        .collect();
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert!((60.25..61.0).contains(&opened[0]), "{opened:?}");
    let last = day.transitions.last().unwrap();
    assert_eq!(last.to, State::Closed);
    assert!((120.0..126.0).contains(&last.at_s), "{last:?}");
    let chaos = day.policies.chaos.as_ref().unwrap();
    assert_eq!(
        chaos.calls, chaos.latency,
        "every call in the window is stalled"
    );
    assert!(chaos.latency > 0 && chaos.errors == 0 && chaos.hangs == 0);
    // No stalled call reached the dependency: each one timed out during its stall.
    let without = r.run("without").unwrap();
    assert_eq!(without.failed, 0, "no game day without protection");
    assert_eq!(
        day.dependency_calls + chaos.latency,
        without.dependency_calls - day.rejected_fast
    );
    // What failed: the calls in flight when the stall began, and one probe per open wait.
    assert!(day.failed > 0 && day.failed < 150, "{}", day.failed);
    let bare = r.run("no breaker").unwrap();
    assert!(bare.failed > 100 * day.failed, "{}", bare.failed);
    assert_eq!(
        bare.dependency_calls + bare.failed,
        without.dependency_calls
    );
    let health = endpoint(day, "/health");
    assert_eq!(health.succeeded, health.requests);
}

/// Injected errors fail at once and are failures to the breaker; a hang lasts until the
/// timeout; a latency shorter than the timeout delays the call, which then reaches the
/// dependency with what is left of its timeout.
#[test]
fn injected_errors_hangs_and_delays_on_virtual_time() {
    let game = |rules: &str| {
        Scenario::from_toml(&format!(
            r#"name = "faults"
duration = "20s"
arrivals = {{ rate = 100.0 }}
[[endpoints]]
name = "/a"
uses_dependency = true
[client]
timeout = "1s"
[dependency]
latency = "100ms"
[[protection]]
breakers = false
chaos = {{ rules = [{rules}] }}
"#
        ))
        .unwrap_or_else(|e| panic!("{e}"))
    };
    // Errors: half the calls fail at once, without reaching the dependency.
    let r = simulate_variant(&game("{ fault = \"error\", rate = 0.5 }"), Some(0), None).unwrap();
    let c = r.policies.chaos.as_ref().unwrap();
    assert_eq!(c.calls, 2000);
    assert!((900..1100).contains(&c.errors), "{c:?}");
    assert_eq!(r.failed, c.errors);
    assert_eq!(r.dependency_calls, 2000 - c.errors);
    // Hangs: each lasts until the 1 s timeout.
    let r = simulate_variant(&game("{ fault = \"hang\", rate = 1.0 }"), Some(0), None).unwrap();
    assert_eq!((r.failed, r.dependency_calls), (2000, 0));
    assert_eq!(r.latency.using_dependency.p50_ms, Some(1000.0));
    // A 300 ms delay: 400 ms in all, every call succeeds; a 950 ms delay: past the timeout.
    let r = simulate_variant(
        &game("{ fault = \"latency\", rate = 1.0, delay = \"300ms\" }"),
        Some(0),
        None,
    )
    .unwrap();
    assert_eq!((r.succeeded, r.dependency_calls), (2000, 2000));
    assert_eq!(r.latency.using_dependency.p99_ms, Some(400.0));
    let r = simulate_variant(
        &game("{ fault = \"latency\", rate = 1.0, delay = \"950ms\" }"),
        Some(0),
        None,
    )
    .unwrap();
    assert_eq!((r.failed, r.dependency_calls), (2000, 2000));
    assert_eq!(r.latency.using_dependency.p99_ms, Some(1000.0));
    // Rules in order, at most one fault a call.
    let r = simulate_variant(
        &game("{ fault = \"error\", rate = 1.0 }, { fault = \"hang\", rate = 1.0 }"),
        Some(0),
        None,
    )
    .unwrap();
    let c = r.policies.chaos.as_ref().unwrap();
    assert_eq!((c.errors, c.hangs), (2000, 0));
}
