//! The figures against hand-computed scenarios: one-second bins across idle gaps, the queue
//! timeout's "longer than", latencies past an hour, and the bounds that keep a run's memory
//! finite (refused with a clear error, never a run that grows without limit).

use tripline_sim::{Scenario, ScenarioError, simulate_variant};

fn scenario(src: &str) -> Scenario {
    Scenario::from_toml(src).unwrap_or_else(|e| panic!("{e}"))
}

fn refused(src: &str) -> String {
    match Scenario::from_toml(src) {
        Ok(_) => panic!("should be refused:\n{src}"),
        Err(e @ ScenarioError::Invalid(_)) => e.to_string(),
        Err(e) => panic!("refused for another reason: {e}"),
    }
}

/// One worker; a request every 5 s (at 0, 5, 10 and 15 s) holding it 500 ms.
const IDLE_GAPS: &str = r#"
name = "idle-gaps"
duration = "20s"
arrivals = { rate = 0.2 }
service = { workers = 1 }
[[endpoints]]
name = "/a"
work = "500ms"
[dependency]
latency = "0ms"
"#;

#[test]
fn a_second_with_no_events_keeps_the_state_before_it() {
    let without = simulate_variant(&scenario(IDLE_GAPS), None, None).unwrap();
    assert_eq!(without.requests, 4);
    // The pool is full during [0, 0.5), [5, 5.5), [10, 10.5) and [15, 15.5): four seconds,
    // not every second up to the next request.
    assert_eq!(without.pool_full_s, 4);
    let bins = &without.series.bins;
    assert_eq!(bins.len(), 16, "the last answer is at 15.5 s");
    let full: Vec<usize> = (0..bins.len()).filter(|&i| bins[i].pool_full).collect();
    assert_eq!(full, [0, 5, 10, 15]);
    let busy: Vec<u32> = bins.iter().map(|b| b.busy_peak).collect();
    assert_eq!(busy, [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
    assert_eq!(without.pool_peak, 1);
}

/// One worker; a request every 2.5 s calling a dependency that answers in 100 ms, except
/// the calls made in [0, 0.1 s) and [10, 10.1 s), which take 3 s: the request of 2.5 s and
/// the one of 12.5 s wait for the worker, until 3 s and 13 s.
const QUEUE_GAPS: &str = r#"
name = "queue-gaps"
duration = "20s"
arrivals = { rate = 0.4 }
service = { workers = 1 }
[[endpoints]]
name = "/a"
uses_dependency = true
[dependency]
latency = "100ms"
[[dependency.faults]]
from = "0s"
until = "100ms"
latency = "3s"
[[dependency.faults]]
from = "10s"
until = "10100ms"
latency = "3s"
"#;

#[test]
fn the_queue_peak_of_a_second_counts_only_what_waited_in_it() {
    let without = simulate_variant(&scenario(QUEUE_GAPS), None, None).unwrap();
    assert_eq!((without.requests, without.succeeded), (8, 8));
    let bins = &without.series.bins;
    let queued: Vec<usize> = (0..bins.len())
        .filter(|&i| bins[i].queued_peak > 0)
        .collect();
    assert_eq!(
        queued,
        [2, 12],
        "queued during [2.5, 3) and [12.5, 13) only"
    );
    assert!(bins.iter().all(|b| b.queued_peak <= 1));
    assert_eq!(without.queue_peak, 1);
    // The pool is full from 0 to 3.1 s and from 10 to 13.1 s, and for 100 ms after each
    // other arrival: bins 0-3, 5, 7, 10-13, 15, 17.
    let full: Vec<usize> = (0..bins.len()).filter(|&i| bins[i].pool_full).collect();
    assert_eq!(full, [0, 1, 2, 3, 5, 7, 10, 11, 12, 13, 15, 17]);
    assert_eq!(without.pool_full_s, 12);
}

#[test]
fn a_request_that_waited_exactly_the_queue_timeout_is_not_shed() {
    // One worker; requests at 0 and 0.5 s; the first holds the worker 1.5 s, so the second
    // has waited exactly the 1 s queue timeout when the worker frees: it is served, not shed
    // ("a request waiting longer than this is shed").
    let s = scenario(
        r#"
        name = "exact-timeout"
        duration = "1s"
        arrivals = { rate = 2.0 }
        service = { workers = 1, queue_timeout = "1s" }
        [[endpoints]]
        name = "/a"
        work = "1500ms"
        [dependency]
        latency = "0ms"
        "#,
    );
    let without = simulate_variant(&s, None, None).unwrap();
    assert_eq!(
        (without.requests, without.succeeded, without.shed),
        (2, 2, 0)
    );
    assert_eq!(without.latency.other.max_ms, Some(2500.0));

    // One nanosecond less of patience, and it is shed: its wait passed the timeout a
    // nanosecond before the worker freed.
    let mut s = s;
    s.service.queue_timeout = Some(std::time::Duration::from_nanos(999_999_999));
    let without = simulate_variant(&s, None, None).unwrap();
    assert_eq!((without.succeeded, without.shed), (1, 1));
}

#[test]
fn a_second_that_begins_with_a_shed_keeps_the_levels_after_it() {
    // One worker, held from 0 to 5 s; a request queued at 1 s is shed when its 1 s queue
    // timeout passes, at 2 s exactly, while the worker stays busy: the pool is full from 0 to
    // 5 s, five seconds, the one that begins with the shed included.
    let s = scenario(
        r#"
        name = "shed-at-a-second"
        duration = "2s"
        arrivals = { rate = 1.0 }
        service = { workers = 1, queue_timeout = "1s" }
        [[endpoints]]
        name = "/a"
        work = "5s"
        [dependency]
        latency = "0ms"
        "#,
    );
    let without = simulate_variant(&s, None, None).unwrap();
    assert_eq!((without.succeeded, without.shed), (1, 1));
    let bins = &without.series.bins;
    let full: Vec<usize> = (0..bins.len()).filter(|&i| bins[i].pool_full).collect();
    assert_eq!(full, [0, 1, 2, 3, 4]);
    let queued: Vec<u32> = bins.iter().map(|b| b.queued_peak).collect();
    assert_eq!(queued, [0, 1, 0, 0, 0, 0], "queued from 1 s to 2 s");
}

#[test]
fn latencies_past_an_hour_are_reported_in_full() {
    // Two attempts of one hour each: 2 h, not the 71.6 minutes a u32 of microseconds holds.
    let s = scenario(
        r#"
        name = "two-hours"
        duration = "1s"
        arrivals = { rate = 1.0 }
        client = { attempts = 2 }
        [[endpoints]]
        name = "/slow"
        uses_dependency = true
        [dependency]
        latency = "1h"
        error_rate = 1.0
        "#,
    );
    let without = simulate_variant(&s, None, None).unwrap();
    assert_eq!((without.requests, without.failed), (1, 1));
    let l = without.latency.using_dependency;
    assert_eq!(l.max_ms, Some(7_200_000.0));
    assert_eq!(l.p50_ms, Some(7_200_000.0));
    assert_eq!(without.endpoints[0].p99_ms, Some(7_200_000.0));
}

#[test]
fn a_scenario_whose_drain_could_outlast_the_limit_is_refused() {
    // 10 000 requests queued behind one worker, each holding it up to an hour: the last could
    // be answered 10 000 hours after the arrivals stop.
    let msg = refused(
        r#"
        name = "endless-drain"
        duration = "1s"
        arrivals = { rate = 10000.0 }
        service = { workers = 1 }
        [[endpoints]]
        name = "/slow"
        uses_dependency = true
        [dependency]
        latency = "1h"
        "#,
    );
    assert!(msg.contains("service.queue_limit"), "{msg}");
    assert!(msg.contains("14 days"), "{msg}");
    assert!(msg.contains("queue_timeout"), "{msg}");
    // With a queue timeout, or a client timeout, the same service is bounded.
    for bound in [
        "service = { workers = 1, queue_timeout = \"10s\" }",
        "service = { workers = 1 }\nclient = { timeout = \"1s\" }",
    ] {
        let src = format!(
            r#"
            name = "bounded-drain"
            duration = "1s"
            arrivals = {{ rate = 10000.0 }}
            {bound}
            [[endpoints]]
            name = "/slow"
            uses_dependency = true
            [dependency]
            latency = "1h"
            "#
        );
        scenario(&src);
    }
}

/// Shards keyed breakers shared by 1000 replicas over 100 000 shards, with `view_ttl`.
fn many_views(view_ttl: &str) -> String {
    format!(
        r#"
        name = "many-views"
        duration = "1s"
        arrivals = {{ rate = 10.0 }}
        service = {{ replicas = 1000, workers = 1, queue_limit = 0 }}
        shards = {{ count = 100000 }}
        [[endpoints]]
        name = "/a"
        uses_dependency = true
        [dependency]
        latency = "1ms"
        [[protection]]
        scope = "shard"
        sharing = "shared"
        view_ttl = "{view_ttl}"
        breaker = {{ window = {{ kind = "count", size = 10 }}, minimum_calls = 10 }}
        "#
    )
}

#[test]
fn shared_breakers_keep_no_views_without_a_view_ttl() {
    // 1000 replicas × 100 000 shared breakers: a view per pair would be 2.4 GB for 10
    // requests. Without a view ttl there is nothing to remember.
    let s = scenario(&many_views("0s"));
    let info = allocation_counter::measure(|| {
        let with = simulate_variant(&s, Some(0), None).unwrap();
        assert_eq!(with.requests, 10);
    });
    assert!(
        info.bytes_max < 500_000_000,
        "peak {} bytes",
        info.bytes_max
    );
}

#[test]
fn too_many_shared_views_are_refused() {
    let msg = refused(&many_views("100ms"));
    assert!(msg.contains("protection[0].view_ttl"), "{msg}");
    assert!(msg.contains("100000000 views"), "{msg}");
}

#[test]
fn a_retry_refused_by_the_breaker_is_told_apart() {
    // Requests at 0 and 1 s to a dependency that always fails; the breaker opens on the first
    // failure. The first request's retry, after its 500 ms backoff, is refused; the second
    // request is refused on its first attempt. Both are "rejected fast"; one on a retry.
    let s = scenario(
        r#"
        name = "refused-retry"
        duration = "2s"
        arrivals = { rate = 1.0 }
        client = { attempts = 2, backoff = "500ms" }
        [[endpoints]]
        name = "/a"
        uses_dependency = true
        [dependency]
        latency = "0ms"
        error_rate = 1.0
        [[protection]]
        breaker = { consecutive_failures = 1 }
        "#,
    );
    let with = simulate_variant(&s, Some(0), None).unwrap();
    assert_eq!(
        (
            with.requests,
            with.dependency_calls,
            with.rejected_fast,
            with.rejected_on_retry
        ),
        (2, 1, 2, 1)
    );
    // The refused retry was answered after its backoff, not fast.
    assert_eq!(with.latency.using_dependency.max_ms, Some(500.0));
    let without = simulate_variant(&s, None, None).unwrap();
    assert_eq!((without.rejected_fast, without.rejected_on_retry), (0, 0));
}

#[test]
fn an_incident_that_outlasts_the_run_is_not_cut_at_its_end() {
    // The fault lasts past the arrivals: the incident ends when the fault does, and no breaker
    // can have closed "after recovery".
    let s = scenario(
        r#"
        name = "long-fault"
        duration = "10s"
        arrivals = { rate = 10.0 }
        [[endpoints]]
        name = "/a"
        uses_dependency = true
        [dependency]
        latency = "1ms"
        [[dependency.faults]]
        from = "5s"
        until = "20s"
        error_rate = 1.0
        [[protection]]
        breaker = { consecutive_failures = 3 }
        "#,
    );
    let end = std::time::Duration::from_secs(20);
    assert_eq!(s.incident(), Some((std::time::Duration::from_secs(5), end)));
    let report = tripline_sim::simulate(&s, None);
    assert_eq!(report.incident.unwrap().end_s, 20.0);
    let with = report.run("with").unwrap();
    assert!(with.time_to_trip_s.is_some());
    assert_eq!(with.all_closed_s, None);
    assert_eq!(with.time_to_close_after_recovery_s, None);
}

/// A dependency that fails every call, one request a second, 2 attempts 100 ms apart, a
/// breaker that opens on 2 consecutive failures; `inside` puts the retry inside the breaker.
fn placement(inside: bool) -> String {
    format!(
        r#"
        name = "placement"
        duration = "3s"
        arrivals = {{ rate = 1.0 }}
        client = {{ attempts = 2, backoff = "100ms" }}
        [[endpoints]]
        name = "/a"
        uses_dependency = true
        [dependency]
        latency = "0ms"
        error_rate = 1.0
        [[protection]]
        retry_inside_breaker = {inside}
        breaker = {{ consecutive_failures = 2, open = {{ duration = "1h" }} }}
        "#
    )
}

#[test]
fn the_retry_goes_outside_the_breaker_or_inside_where_asked() {
    // Outside (the pipeline's order): every attempt asks the breaker. Request 0's two failed
    // attempts trip it at 0.1 s; requests 1 and 2 are refused.
    let outside = simulate_variant(&scenario(&placement(false)), Some(0), None).unwrap();
    assert_eq!((outside.dependency_calls, outside.rejected_fast), (2, 2));
    assert_eq!(outside.transitions[0].at_s, 0.1);
    // Inside: the breaker admits each request once and records its final result. Request 0
    // records one failure (after both attempts), request 1 the second, which trips it at
    // 1.1 s; request 2 is refused, and its retry never asked.
    let inside = simulate_variant(&scenario(&placement(true)), Some(0), None).unwrap();
    assert_eq!((inside.dependency_calls, inside.rejected_fast), (4, 1));
    assert_eq!(inside.transitions[0].at_s, 1.1);
    assert_eq!(inside.rejected_on_retry, 0);
    let retry = inside.policies.retry.as_ref().unwrap();
    assert_eq!(retry.retries, 2);
}

/// One worker slot in the bulkhead, one place in its queue; a call takes 100 ms; requests at
/// 0, 10 and 20 ms.
fn bulkhead(max_wait: &str) -> String {
    format!(
        r#"
        name = "bulkhead"
        duration = "30ms"
        arrivals = {{ rate = 100.0 }}
        [[endpoints]]
        name = "/a"
        uses_dependency = true
        [dependency]
        latency = "100ms"
        [[protection]]
        breakers = false
        bulkhead = {{ max_concurrent = 1, max_waiting = 1, max_wait = "{max_wait}" }}
        "#
    )
}

#[test]
fn the_bulkhead_queues_first_come_first_served_and_gives_up_at_max_wait() {
    // 50 ms of patience: the request of 10 ms gives up at 60 ms; the one of 20 ms finds the
    // queue full and is refused at once.
    let short = simulate_variant(&scenario(&bulkhead("50ms")), Some(0), None).unwrap();
    assert_eq!(
        (short.requests, short.succeeded, short.dependency_calls),
        (3, 1, 1)
    );
    assert_eq!(short.rejected_by.bulkhead, 2);
    let b = short.policies.bulkhead.as_ref().unwrap();
    assert_eq!((b.waited, b.queue_full, b.timed_out), (0, 1, 1));
    assert_eq!(short.latency.using_dependency.max_ms, Some(100.0));
    // 200 ms of patience: the request of 10 ms gets the slot when the first call ends, at
    // 100 ms, and is answered at 200 ms (190 ms after it arrived).
    let long = simulate_variant(&scenario(&bulkhead("200ms")), Some(0), None).unwrap();
    assert_eq!((long.succeeded, long.dependency_calls), (2, 2));
    let b = long.policies.bulkhead.as_ref().unwrap();
    assert_eq!((b.waited, b.queue_full, b.timed_out), (1, 1, 0));
    assert_eq!(long.latency.using_dependency.max_ms, Some(190.0));
}

#[test]
fn the_gate_refuses_requests_and_retries_past_its_limits() {
    // Requests at 0 and 10 ms to a dependency failing every call in 50 ms, 3 attempts: a
    // gate of one request in flight refuses the second request; with no retry allowed in
    // flight, the first request's retry is refused by the gate and never made.
    let s = scenario(
        r#"
        name = "gate"
        duration = "20ms"
        arrivals = { rate = 100.0 }
        client = { attempts = 3, backoff = "1ms" }
        [[endpoints]]
        name = "/a"
        uses_dependency = true
        [dependency]
        latency = "50ms"
        error_rate = 1.0
        [[protection]]
        breakers = false
        gate = { max_requests = 1, max_retries = 0 }
        "#,
    );
    let with = simulate_variant(&s, Some(0), None).unwrap();
    assert_eq!((with.requests, with.dependency_calls), (2, 1));
    assert_eq!(with.rejected_by.gate, 1);
    assert_eq!(with.failed, 1);
    let g = with.policies.gate.as_ref().unwrap();
    assert_eq!(
        (g.upstream_rq_overflow, g.upstream_rq_retry_overflow),
        (1, 1)
    );
    let r = with.policies.retry.as_ref().unwrap();
    assert_eq!((r.retries, r.gate_refused), (0, 1));
}

#[test]
fn a_call_to_the_tier_below_times_out_and_keeps_running_there() {
    // One request at 0 to a gateway that gives the service 100 ms, twice (1 ms apart); the
    // service takes 300 ms. Both of the gateway's attempts time out (at 100 and 201 ms) and
    // it answers an error at 201 ms; below, both requests run to their end and answer
    // nobody.
    let s = scenario(
        r#"
        name = "tiers"
        duration = "1s"
        arrivals = { rate = 1.0 }
        [[tiers]]
        name = "gateway"
        [tiers.client]
        timeout = "100ms"
        attempts = 2
        backoff = "1ms"
        [service]
        name = "api"
        [[endpoints]]
        name = "/a"
        uses_dependency = true
        [dependency]
        latency = "300ms"
        "#,
    );
    let r = simulate_variant(&s, None, None).unwrap();
    assert_eq!((r.requests, r.failed, r.succeeded), (1, 1, 0));
    assert_eq!(r.latency.using_dependency.max_ms, Some(201.0));
    let (gw, api) = (&r.tiers[0], &r.tiers[1]);
    assert_eq!(
        (gw.name.as_str(), gw.calls_below, gw.failed),
        ("gateway", 2, 1)
    );
    assert_eq!(
        (api.name.as_str(), api.requests, api.succeeded),
        ("api", 2, 2)
    );
    assert_eq!(api.calls_below, 2);
    assert_eq!(r.dependency_calls, 2);
    // The service's worker was held to the end of its call, 100 ms after the gateway gave up
    // on the second attempt.
    assert_eq!(r.completion_s, Some(0.201));
    assert_eq!(gw.policies.retry.as_ref().unwrap().retries, 1);
}
