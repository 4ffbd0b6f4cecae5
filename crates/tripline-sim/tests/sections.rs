//! The policy sections (the breaker's ramp-up, the partial breaker, the shedder, the limiter
//! and the fault injector among them), endpoint priorities, tiers, sweeps and new dependency
//! fields of a scenario file: each bad
//! value gets an error naming its line, its field, the value and what is allowed, whether the
//! serde layer refuses it (a wrong type, an unknown name) or the policy's own builder does
//! (a value out of range), and no mutation of those fields makes the parser panic.

use proptest::prelude::*;
use tripline_sim::{Scenario, ScenarioError, builtin};

/// A scenario with a gateway tier, a protected variant with every policy section, and a
/// sweep; `{X}` marks where a test puts a line of its own.
const BASE: &str = r#"name = "sections"
duration = "30s"
arrivals = { rate = 10.0 }

[[tiers]]
name = "gateway"
replicas = 2
workers = 50

[tiers.client]
timeout = "5s"
attempts = 2

[service]
name = "api"

[[endpoints]]
name = "/a"
uses_dependency = true
priority = "critical"

[[endpoints]]
name = "/b"
uses_dependency = true
priority = 40

[client]
timeout = "1s"
attempts = 3
backoff = "10ms"

[dependency]
latency = "10ms"
capacity = 100

[[dependency.faults]]
from = "5s"
until = "10s"
capacity = 50

[[protection]]
label = "all"

[protection.retry]
backoff = "10ms"
max_backoff = "1s"
jitter = "full"
budget = [
  { kind = "tps", ratio = "10%" },
  { kind = "error-rate", threshold = "10%" },
]

[protection.bulkhead]
max_concurrent = 20
max_waiting = 5
max_wait = "50ms"

[protection.gate]
max_requests = 100
max_pending = 10
retry_budget = { budget_percent = 20, min_retry_concurrency = 3 }

[protection.throttle]
k = 2
window = "60s"
bucket = "1s"

[protection.breaker]
ramp_up = { from = 10, over = "30s", steps = 10, curve = "exponential" }

[protection.partial]
kp = 1.0
window = "10s"
interval = "1s"

[protection.shed]
capacity = 30
shares = { critical = 100, default = 80, sheddable = 40 }
max_waiting = 4
max_wait = "20ms"

[protection.limiter]
algorithm = { kind = "gradient2", min_limit = 5, max_limit = 50, rtt_tolerance = 2.0 }
shares = { sheddable = 50 }
max_waiting = 8
max_wait = "30ms"

[protection.chaos]
from = "5s"
until = "8s"
rules = [
  { fault = "latency", rate = 0.5, delay = "20ms" },
  { fault = "error", rate = 0.1 },
  { fault = "hang", rate = 0.01 },
]

[protection.tiers.gateway]
attempts = 2

[protection.tiers.gateway.bulkhead]
max_concurrent = 40

[protection.tiers.gateway.shed]
at = "workers"
shares = { sheddable = 60 }

[sweep]
field = "dependency.faults[0].until"
values = ["8s", "12s"]
metrics = ["recovery_s"]
"#;

fn line_of(src: &str, needle: &str) -> usize {
    src.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in the source"))
        + 1
}

#[test]
fn the_base_scenario_is_valid_and_runs() {
    let s = Scenario::from_toml(BASE).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.tiers.len(), 1);
    let r = tripline_sim::simulate(&s, None);
    assert_eq!(r.tiers, ["gateway", "api"]);
    let all = r.run("all").unwrap();
    let p = &all.policies;
    assert_eq!(p.retry.as_ref().unwrap().budget, ["tps", "error-rate"]);
    assert!(p.bulkhead.is_some() && p.gate.is_some() && p.throttle.is_some());
    assert!(p.partial.is_some() && p.shed.is_some() && p.limiter.is_some());
    assert_eq!(p.shed.as_ref().unwrap().at, "client");
    assert_eq!(p.limiter.as_ref().unwrap().algorithm, "gradient2");
    let chaos = p.chaos.as_ref().unwrap();
    assert!(chaos.calls > 0 && chaos.latency > 0, "{chaos:?}");
    assert!(all.tiers[0].policies.bulkhead.is_some());
    assert_eq!(all.tiers[0].policies.shed.as_ref().unwrap().at, "workers");
    assert_eq!(s.endpoints[1].priority.0.get(), 40);
    assert_eq!(r.sweep.as_ref().unwrap().points.len(), 2);
}

/// `(the line to replace, its replacement, the field named, the value shown)`.
const CASES: &[(&str, &str, &str, &str)] = &[
    // The retry section.
    (
        "jitter = \"full\"",
        "attempts = 0",
        "protection[0].retry.attempts",
        "0",
    ),
    (
        "jitter = \"full\"",
        "attempts = 101",
        "protection[0].retry.attempts",
        "101",
    ),
    (
        "backoff = \"10ms\"\nmax_backoff",
        "backoff = \"2h\"\nmax_backoff",
        "protection[0].retry.backoff",
        "2h",
    ),
    (
        "max_backoff = \"1s\"",
        "max_backoff = \"1ms\"",
        "protection[0].retry.max_backoff",
        "1ms",
    ),
    (
        "max_backoff = \"1s\"",
        "max_backoff = \"3d\"",
        "protection[0].retry.max_backoff",
        "3days",
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ kind = \"tps\", ratio = 2000 }",
        "protection[0].retry.budget[0].ratio",
        "2000",
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ kind = \"tps\", ttl = \"500ms\" }",
        "protection[0].retry.budget[0].ttl",
        "500ms",
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ kind = \"tps\", min_per_sec = 2000000 }",
        "protection[0].retry.budget[0].min_per_sec",
        "2000000",
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ kind = \"token-bucket\", capacity = 0 }",
        "protection[0].retry.budget[0].capacity",
        "0",
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ kind = \"token-bucket\", retry_cost = 0 }",
        "protection[0].retry.budget[0].retry_cost",
        "0",
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ kind = \"token-bucket\", capacity = 10, timeout_retry_cost = 11 }",
        "protection[0].retry.budget[0].timeout_retry_cost",
        "11",
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ kind = \"token-bucket\", capacity = 10, success_reward = 11 }",
        "protection[0].retry.budget[0].success_reward",
        "11",
    ),
    (
        "{ kind = \"error-rate\", threshold = \"10%\" }",
        "{ kind = \"error-rate\", minimum_calls = 0 }",
        "protection[0].retry.budget[1].minimum_calls",
        "0",
    ),
    (
        "{ kind = \"error-rate\", threshold = \"10%\" }",
        "{ kind = \"error-rate\", capacity = 5 }",
        "protection[0].retry.budget[1].capacity",
        "5",
    ),
    (
        "{ kind = \"error-rate\", threshold = \"10%\" }",
        "{ kind = \"error-rate\", window = \"10s\", bucket = \"3s\" }",
        "protection[0].retry.budget[1].window",
        "10s",
    ),
    (
        "{ kind = \"error-rate\", threshold = \"10%\" }",
        "{ kind = \"error-rate\", window = \"10s\", bucket = \"0ms\" }",
        "protection[0].retry.budget[1].bucket",
        "0ns",
    ),
    // The bulkhead, the gate, the throttle.
    (
        "max_concurrent = 20",
        "max_concurrent = 0",
        "protection[0].bulkhead.max_concurrent",
        "0",
    ),
    (
        "max_waiting = 5",
        "max_waiting = 2000000",
        "protection[0].bulkhead.max_waiting",
        "2000000",
    ),
    (
        "max_wait = \"50ms\"",
        "max_wait = \"0s\"",
        "protection[0].bulkhead.max_wait",
        "0ns",
    ),
    (
        "max_wait = \"50ms\"",
        "max_wait = \"2h\"",
        "protection[0].bulkhead.max_wait",
        "7200s",
    ),
    (
        "max_requests = 100",
        "max_requests = 0",
        "protection[0].gate.max_requests",
        "0",
    ),
    (
        "max_pending = 10",
        "max_pending = 2000000000",
        "protection[0].gate.max_pending",
        "2000000000",
    ),
    (
        "max_pending = 10",
        "max_retries = 2000000000",
        "protection[0].gate.max_retries",
        "2000000000",
    ),
    (
        "budget_percent = 20",
        "budget_percent = 120",
        "protection[0].gate.retry_budget.budget_percent",
        "120",
    ),
    (
        "min_retry_concurrency = 3",
        "min_retry_concurrency = 2000000000",
        "protection[0].gate.retry_budget.min_retry_concurrency",
        "2000000000",
    ),
    ("k = 2", "k = 0.5", "protection[0].throttle.k", "0.5"),
    (
        "bucket = \"1s\"",
        "bucket = \"7s\"",
        "protection[0].throttle.window",
        "60s",
    ),
    (
        "bucket = \"1s\"",
        "bucket = \"0s\"",
        "protection[0].throttle.bucket",
        "0ns",
    ),
    // The breaker's ramp-up (checked by tripline's own configuration).
    (
        "ramp_up = { from = 10,",
        "ramp_up = { from = 0,",
        "protection[0].breaker.ramp_up.from",
        "0",
    ),
    (
        "steps = 10, curve",
        "steps = 0, curve",
        "protection[0].breaker.ramp_up.steps",
        "0",
    ),
    (
        "over = \"30s\", steps",
        "over = \"2h\", steps",
        "protection[0].breaker.ramp_up.over",
        "2h",
    ),
    // The partial breaker.
    ("kp = 1.0", "kp = -1", "protection[0].partial.kp", "-1"),
    (
        "kp = 1.0",
        "kp = 0\nki = 0",
        "protection[0].partial.kp",
        "0",
    ),
    (
        "window = \"10s\"\ninterval",
        "window = \"10500ms\"\ninterval",
        "protection[0].partial.window",
        "10.5s",
    ),
    (
        "interval = \"1s\"",
        "interval = \"0s\"",
        "protection[0].partial.interval",
        "0ns",
    ),
    // The shedder.
    (
        "capacity = 30",
        "capacity = 0",
        "protection[0].shed.capacity",
        "0",
    ),
    (
        "capacity = 30",
        "at = \"workers\"\ncapacity = 30",
        "protection[0].shed.capacity",
        "30",
    ),
    (
        "default = 80, sheddable = 40",
        "default = 120, sheddable = 40",
        "protection[0].shed.shares.default",
        "120",
    ),
    (
        "default = 80, sheddable = 40",
        "default = 80, sheddable = 90",
        "protection[0].shed.shares.sheddable",
        "90",
    ),
    (
        "max_wait = \"20ms\"",
        "max_wait = \"0s\"",
        "protection[0].shed.max_wait",
        "0ns",
    ),
    // The limiter.
    (
        "min_limit = 5,",
        "min_limit = 0,",
        "protection[0].limiter.algorithm.min_limit",
        "0",
    ),
    (
        "max_limit = 50,",
        "max_limit = 2000000,",
        "protection[0].limiter.algorithm.max_limit",
        "2000000",
    ),
    (
        "rtt_tolerance = 2.0",
        "rtt_tolerance = 0.5",
        "protection[0].limiter.algorithm.rtt_tolerance",
        "0.5",
    ),
    (
        "kind = \"gradient2\", min_limit",
        "kind = \"vegas\", min_limit",
        "protection[0].limiter.algorithm.rtt_tolerance",
        "2",
    ),
    (
        "algorithm = { kind = \"gradient2\", min_limit = 5, max_limit = 50, rtt_tolerance = 2.0 }",
        "algorithm = { kind = \"fixed\" }",
        "protection[0].limiter.algorithm.limit",
        "nothing",
    ),
    (
        "algorithm = { kind = \"gradient2\", min_limit = 5, max_limit = 50, rtt_tolerance = 2.0 }",
        "algorithm = { kind = \"vegas\", alpha = 9, beta = 6 }",
        "protection[0].limiter.algorithm.beta",
        "6",
    ),
    (
        "algorithm = { kind = \"gradient2\", min_limit = 5, max_limit = 50, rtt_tolerance = 2.0 }",
        "algorithm = { kind = \"aimd\", backoff_ratio = 1.0 }",
        "protection[0].limiter.algorithm.backoff_ratio",
        "1",
    ),
    (
        "shares = { sheddable = 50 }",
        "shares = { critical = 0 }",
        "protection[0].limiter.shares.critical",
        "0",
    ),
    (
        "max_waiting = 8",
        "max_waiting = 2000000",
        "protection[0].limiter.max_waiting",
        "2000000",
    ),
    // The fault injector.
    (
        "{ fault = \"latency\", rate = 0.5,",
        "{ fault = \"latency\", rate = 1.5,",
        "protection[0].chaos.rules[0].rate",
        "1.5",
    ),
    (
        "delay = \"20ms\" }",
        "delay = \"0s\" }",
        "protection[0].chaos.rules[0].delay",
        "0ns",
    ),
    (
        "{ fault = \"latency\", rate = 0.5, delay = \"20ms\" }",
        "{ fault = \"latency\", rate = 0.5 }",
        "protection[0].chaos.rules[0].delay",
        "nothing",
    ),
    (
        "{ fault = \"error\", rate = 0.1 }",
        "{ fault = \"error\", rate = 0.1, delay = \"1s\" }",
        "protection[0].chaos.rules[1].delay",
        "1s",
    ),
    (
        "until = \"8s\"\nrules",
        "until = \"4s\"\nrules",
        "protection[0].chaos.until",
        "4s",
    ),
    (
        "[client]\ntimeout = \"1s\"\n",
        "[client]\n",
        "protection[0].chaos.rules[2].fault",
        "\"hang\"",
    ),
    // Tiers, and a variant's policies at a tier.
    ("name = \"gateway\"", "name = \"\"", "tiers[0].name", "\"\""),
    (
        "name = \"gateway\"",
        "name = \"api\"",
        "tiers[0].name",
        "\"api\"",
    ),
    ("replicas = 2", "replicas = 0", "tiers[0].replicas", "0"),
    ("workers = 50", "workers = 0", "tiers[0].workers", "0"),
    (
        "timeout = \"5s\"",
        "timeout = \"2h\"",
        "tiers[0].client.timeout",
        "2h",
    ),
    (
        "attempts = 2\n\n[service]",
        "attempts = 0\n\n[service]",
        "tiers[0].client.attempts",
        "0",
    ),
    (
        "[protection.tiers.gateway]\nattempts = 2",
        "[protection.tiers.gateway]\nattempts = 200",
        "protection[0].tiers.gateway.attempts",
        "200",
    ),
    (
        "max_concurrent = 40",
        "max_concurrent = 0",
        "protection[0].tiers.gateway.bulkhead.max_concurrent",
        "0",
    ),
    // The dependency's new fields.
    (
        "capacity = 50",
        "capacity = 0",
        "dependency.faults[0].capacity",
        "0",
    ),
    // The sweep.
    (
        "field = \"dependency.faults[0].until\"",
        "field = \"service.replicas\"",
        "sweep.field",
        "\"service.replicas\"",
    ),
    (
        "values = [\"8s\", \"12s\"]",
        "values = []",
        "sweep.values",
        "0",
    ),
    (
        "values = [\"8s\", \"12s\"]",
        "values = [\"8s\", \"soon\"]",
        "sweep.values[1]",
        "soon",
    ),
    (
        "values = [\"8s\", \"12s\"]",
        "values = [\"8s\", \"4s\"]",
        "sweep.values[1]",
        "4s",
    ),
    (
        "metrics = [\"recovery_s\"]",
        "metrics = [\"speed\"]",
        "sweep.metrics[0]",
        "\"speed\"",
    ),
    (
        "metrics = [\"recovery_s\"]",
        "metrics = [\"recovery_s\"]\nrepeat = 0",
        "sweep.repeat",
        "0",
    ),
];

#[test]
fn bad_values_in_every_new_field_name_the_line_field_value_and_range() {
    for (from, to, field, value) in CASES {
        assert!(BASE.contains(from), "{from:?}");
        let src = BASE.replacen(from, to, 1);
        let e = match Scenario::from_toml(&src) {
            Ok(_) => panic!("{to:?} should be refused"),
            Err(e) => e,
        };
        let msg = e.to_string();
        assert!(matches!(e, ScenarioError::Invalid(_)), "{to:?}: {msg}");
        assert_eq!(e.field(), Some(*field), "{to:?}: {msg}");
        assert!(msg.contains(&format!("got {value}")), "{to:?}: {msg}");
        assert!(msg.contains(" must "), "{to:?}: {msg}");
        let first = to.lines().next().unwrap();
        let key = first.split('=').next().unwrap().trim();
        let want = line_of(&src, first);
        let line = e
            .line()
            .unwrap_or_else(|| panic!("{to:?}: no line in {msg}"));
        // The value's own line, or the line of the field it makes wrong (a bucket that does
        // not divide its window names the window).
        let named = field.rsplit('.').next().unwrap();
        assert!(
            line == want || src.lines().nth(line - 1).is_some_and(|l| l.contains(named)),
            "{to:?} ({key}): line {line}, expected {want}: {msg}"
        );
        assert!(msg.contains(&format!("line {line}")), "{msg}");
    }
}

/// `(the text to replace, its replacement, words the message must hold)`: values the serde
/// layer refuses, with the line and the field.
const PARSE_CASES: &[(&str, &str, &[&str])] = &[
    (
        "jitter = \"full\"",
        "jitter = \"sometimes\"",
        &["unknown variant `sometimes`", "`decorrelated`", "jitter"],
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ kind = \"leaky\" }",
        &["unknown variant `leaky`", "`token-bucket`"],
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ ratio = \"10%\" }",
        &["missing field `kind`"],
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ kind = \"tps\", ratio = -1 }",
        &["a number at least 0", "got -1"],
    ),
    (
        "{ kind = \"tps\", ratio = \"10%\" }",
        "{ kind = \"tps\", rate = 1 }",
        &["unknown field `rate`", "`ratio`"],
    ),
    (
        "{ kind = \"error-rate\", threshold = \"10%\" }",
        "{ kind = \"error-rate\", threshold = \"150%\" }",
        &["fraction in [0, 1]", "150%"],
    ),
    (
        "max_concurrent = 20",
        "max_concurent = 20",
        &["unknown field `max_concurent`", "`max_concurrent`"],
    ),
    ("k = 2", "k = \"two\"", &["invalid type", "k"]),
    (
        "max_wait = \"50ms\"",
        "max_wait = \"soon\"",
        &["expected a duration", "max_wait"],
    ),
    (
        "[protection.tiers.gateway]\nattempts = 2",
        "[protection.tiers.gateway]\nattempts = 2\nspeed = 1",
        &["unknown field `speed`"],
    ),
    (
        "label = \"all\"",
        "label = \"all\"\nretry_inside_breaker = \"yes\"",
        &["invalid type", "retry_inside_breaker"],
    ),
    (
        "capacity = 100",
        "capacity = 100\noverload = \"explode\"",
        &["unknown variant `explode`", "`fail`"],
    ),
    // Priorities, and the new sections' names.
    (
        "priority = \"critical\"",
        "priority = \"urgent\"",
        &["got \"urgent\"", "\"sheddable\"", "[0, 255]"],
    ),
    (
        "priority = 40",
        "priority = 256",
        &["got 256", "\"critical\""],
    ),
    (
        "kind = \"gradient2\", min_limit",
        "kind = \"bbr\", min_limit",
        &["unknown variant `bbr`", "`vegas`", "`aimd`"],
    ),
    (
        "{ fault = \"error\", rate = 0.1 }",
        "{ fault = \"abort\", rate = 0.1 }",
        &["unknown variant `abort`", "`hang`"],
    ),
    (
        "capacity = 30",
        "capacity = 30\nat = \"server\"",
        &["unknown variant `server`", "`workers`"],
    ),
    (
        "kp = 1.0",
        "kp = 1.0\ngain = 2",
        &["unknown field `gain`", "`ki`"],
    ),
    (
        "ramp_up = { from = 10,",
        "ramp_up = { start = 10,",
        &["unknown field `start`", "`from`"],
    ),
    // The sweep's summary and the normal latency.
    (
        "metrics = [\"recovery_s\"]",
        "metrics = [\"recovery_s\"]\nsummary = \"average\"",
        &["unknown variant `average`", "`median`", "summary"],
    ),
    (
        "latency = \"10ms\"",
        "latency = { kind = \"normal\", mean = \"2h\", sd = \"1ms\" }",
        &["a normal latency needs", "got mean = 2h"],
    ),
    (
        "latency = \"10ms\"",
        "latency = { kind = \"normal\", mean = \"10ms\", sigma = \"1ms\" }",
        &["unknown field `sigma`", "`sd`"],
    ),
];

#[test]
fn wrong_types_and_names_are_parse_errors_with_the_line() {
    for (from, to, words) in PARSE_CASES {
        assert!(BASE.contains(from), "{from:?}");
        let src = BASE.replacen(from, to, 1);
        let e = Scenario::from_toml(&src).expect_err(to);
        let msg = e.to_string();
        assert!(matches!(e, ScenarioError::Parse { .. }), "{to:?}: {msg}");
        for w in *words {
            assert!(msg.contains(w), "{to:?}: {w:?} not in {msg}");
        }
        let last = to.lines().last().unwrap();
        assert_eq!(e.line(), Some(line_of(&src, last)), "{to:?}: {msg}");
    }
}

#[test]
fn cross_field_rules_of_the_new_fields() {
    let refused = |src: &str| Scenario::from_toml(src).expect_err(src);
    // A variant's policies at a tier that does not exist.
    let e = refused(&BASE.replacen(
        "[protection.tiers.gateway]\nattempts",
        "[protection.tiers.edge]\nattempts",
        1,
    ));
    assert_eq!(e.field(), Some("protection[0].tiers.edge"));
    assert!(
        e.to_string()
            .contains("must name a tier in front of the service (the [[tiers]]: gateway)")
    );
    // Attempts in two places.
    let e = refused(
        &BASE
            .replacen("label = \"all\"", "label = \"all\"\nattempts = 2", 1)
            .replacen("jitter = \"full\"", "jitter = \"full\"\nattempts = 3", 1),
    );
    assert_eq!(e.field(), Some("protection[0].retry.attempts"));
    assert!(e.to_string().contains("set it in one place"), "{e}");
    // A burst needs a count, and no rate.
    let e = refused(&BASE.replacen(
        "arrivals = { rate = 10.0 }",
        "arrivals = { process = \"burst\" }",
        1,
    ));
    assert_eq!(e.field(), Some("arrivals.count"));
    let e = refused(&BASE.replacen(
        "arrivals = { rate = 10.0 }",
        "arrivals = { process = \"burst\", count = 5, rate = 3.0 }",
        1,
    ));
    assert_eq!(e.field(), Some("arrivals.rate"));
    let e = refused(&BASE.replacen(
        "arrivals = { rate = 10.0 }",
        "arrivals = { process = \"burst\", count = 0 }",
        1,
    ));
    assert_eq!((e.field(), e.line()), (Some("arrivals.count"), Some(3)));
    let e = refused(&BASE.replacen(
        "arrivals = { rate = 10.0 }",
        "arrivals = { count = 4, rate = 1.0 }",
        1,
    ));
    assert_eq!(e.field(), Some("arrivals.count"));
    // Refusing calls past a capacity needs one; optimistic writes refuse one.
    let no_capacity = BASE
        .replacen("capacity = 100\n", "overload = \"fail\"\n", 1)
        .replacen("capacity = 50\n", "", 1)
        .replacen(
            "[sweep]\nfield = \"dependency.faults[0].until\"",
            "[sweep]\nfield = \"dependency.faults[0].from\"",
            1,
        )
        .replacen("values = [\"8s\", \"12s\"]", "values = [\"6s\"]", 1);
    let e = refused(&no_capacity);
    assert_eq!(e.field(), Some("dependency.overload"));
    assert!(e.to_string().contains("needs a dependency.capacity"), "{e}");
    let e = refused(&BASE.replacen(
        "capacity = 100\n",
        "capacity = 100\noptimistic_writes = true\n",
        1,
    ));
    assert_eq!(e.field(), Some("dependency.optimistic_writes"));
    // The requests of every run and sweep value together are bounded.
    let e = refused(
        &BASE
            .replacen(
                "arrivals = { rate = 10.0 }",
                "arrivals = { rate = 600000.0 }",
                1,
            )
            .replacen(
                "values = [\"8s\", \"12s\"]",
                "values = [\"8s\", \"12s\"]\nrepeat = 4",
                1,
            ),
    );
    assert_eq!(e.field(), Some("arrivals"));
    assert!(e.to_string().contains("all runs together"), "{e}");
}

/// The scenarios that use the new sections, and the lines of their new fields: `key =
/// value` pairs, also inside inline tables.
fn targets() -> Vec<(&'static str, usize, String, std::ops::Range<usize>)> {
    let mut out = Vec::new();
    for name in [
        "backoff-contention",
        "metastable",
        "gymfolks-cascade",
        "retry-storm",
        "gymfolks",
        "hot-shard",
        "sustained-errors",
        "slow-recovery",
    ] {
        let src = builtin(name).unwrap();
        let mut offset = 0;
        let mut section = String::new();
        for (n, line) in src.split_inclusive('\n').enumerate() {
            let t = line.trim();
            if t.starts_with('[') {
                section = t.to_string();
            }
            let new_section = [
                "retry", "bulkhead", "gate", "throttle", "tiers", "sweep", "budget", "limiter",
                "shed", "partial", "chaos",
            ]
            .iter()
            .any(|k| section.contains(k));
            let new_key = [
                "retry",
                "throttle",
                "budget",
                "jitter",
                "max_backoff",
                "count",
                "optimistic_writes",
                "capacity",
                "overload",
                "repeat",
                "values",
                "priority",
                "bulkhead",
                "error_rate",
                "ramp_up",
                "limiter",
                "shed",
                "partial",
                "chaos",
            ]
            .iter()
            .any(|k| t.starts_with(k) || t.contains(&format!("{k} =")));
            if !t.starts_with('#') && (new_section || new_key) {
                // Each `key = value` (a value ends at a comma, a brace or the line's end).
                let bytes = line.as_bytes();
                let mut i = 0;
                while let Some(eq) = line[i..].find(" = ") {
                    let at = i + eq;
                    let key_start = line[..at].rfind([' ', '{']).map_or(0, |k| k + 1);
                    let key = line[key_start..at].trim().to_string();
                    let vstart = at + 3;
                    let mut vend = vstart;
                    let mut depth = 0;
                    let mut quoted = false;
                    while vend < bytes.len() {
                        match bytes[vend] {
                            b'"' => quoted = !quoted,
                            b'[' | b'{' if !quoted => depth += 1,
                            b']' | b'}' if !quoted && depth > 0 => depth -= 1,
                            b',' | b'}' | b'\n' | b'#' if !quoted && depth == 0 => break,
                            _ => {}
                        }
                        vend += 1;
                    }
                    let value = line[vstart..vend].trim_end();
                    if !key.is_empty() && !value.starts_with('{') && !value.starts_with('[') {
                        out.push((
                            name,
                            n + 1,
                            key,
                            offset + vstart..offset + vstart + value.len(),
                        ));
                    }
                    // An inline table's own pairs are fields too.
                    i = if value.starts_with('{') {
                        vstart + 1
                    } else {
                        vend.max(vstart)
                    };
                }
            }
            offset += line.len();
        }
    }
    out
}

/// The property test below reaches the new sections of the built-in scenarios: priorities,
/// the ramp-up, the shedder's shares, the limiter's algorithm, partial opening's column and
/// the swept error rates.
#[test]
fn the_mutated_fields_include_the_new_sections() {
    let all = targets();
    let has = |name: &str, key: &str| all.iter().any(|(n, _, k, _)| *n == name && k == key);
    assert!(has("gymfolks", "priority"));
    assert!(has("gymfolks", "kind"), "the limiter's algorithm");
    assert!(has("gymfolks", "sheddable"), "the shedder's shares");
    assert!(has("gymfolks", "at"));
    assert!(has("slow-recovery", "from"), "the ramp-up");
    assert!(has("slow-recovery", "curve"));
    assert!(has("sustained-errors", "field"), "the swept error rate");
    assert!(has("sustained-errors", "error_rate"));
    assert!(has("retry-storm", "max_concurrent"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    /// Any value put in place of a new field's value either parses (and the scenario is
    /// within its limits) or is refused with an error naming a line and the field.
    #[test]
    fn mutated_new_fields_are_refused_by_name_or_accepted(
        pick in any::<prop::sample::Index>(),
        with in prop_oneof![
            Just("-1".to_string()),
            Just("0".to_string()),
            Just("1e308".to_string()),
            Just("nan".to_string()),
            Just("true".to_string()),
            Just("\"-5s\"".to_string()),
            Just("\"0s\"".to_string()),
            Just("\"999999h\"".to_string()),
            Just("\"150%\"".to_string()),
            Just("\"x\"".to_string()),
            Just("2000000000".to_string()),
            Just("[]".to_string()),
            Just("{}".to_string()),
            (0u32..200).prop_map(|n| n.to_string()),
            (0u32..5000).prop_map(|n| format!("\"{n}ms\"")),
        ],
    ) {
        let all = targets();
        prop_assume!(!all.is_empty());
        let (name, line, key, span) = pick.get(&all).clone();
        let src = builtin(name).unwrap();
        let mutated = format!("{}{}{}", &src[..span.start], with, &src[span.end..]);
        match Scenario::from_toml(&mutated) {
            Ok(s) => {
                prop_assert!(!s.endpoints.is_empty());
                prop_assert!(s.arrivals.expected(s.duration) > 0.0);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(msg.starts_with("invalid scenario"), "{}", msg);
                prop_assert!(e.line().is_some(), "{} line {}: {}", name, line, msg);
                // The field is named: the key itself, or (for a value that makes another
                // field wrong, such as a backoff past its cap) the field it breaks.
                let at_line = e
                    .line()
                    .and_then(|l| mutated.lines().nth(l - 1))
                    .unwrap_or_default();
                let named = msg.contains(&key)
                    || e.field().is_some_and(|f| {
                        let last = f.rsplit('.').next().unwrap_or(f);
                        let last = last.split('[').next().unwrap_or(last);
                        at_line.contains(last)
                    });
                prop_assert!(named, "{} line {} {}: {}", name, line, key, msg);
            }
        }
    }
}
