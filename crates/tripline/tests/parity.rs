//! The cases of the peer libraries' circuit-breaker suites (resilience4j's state machine, Polly's
//! advanced breaker, gobreaker), on tripline: each asserts what tripline's docs and
//! docs/porting.md say, tripline's own behaviour where porting.md names a deliberate
//! difference. Each name is a running number and the case it checks (the peer's, where it
//! names one: `gobreaker`, `polly`).

use std::time::Duration;

use tripline::{
    AfterMaxWait, BreakerConfig, BreakerConfigBuilder, CircuitBreaker, HalfOpenPolicy, ManualClock,
    Outcome, Recorded, RejectReason, State, TransitionError,
};

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn mk(builder: BreakerConfigBuilder) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = builder
        .count_in_flight_as_slow(false)
        .seed(1)
        .build()
        .unwrap();
    (
        CircuitBreaker::with_clock("dep", config, clock.clone()),
        clock,
    )
}

fn rec(b: &CircuitBreaker<ManualClock>, o: Outcome) -> Recorded {
    b.try_acquire().unwrap().record(o)
}

fn rec_d(b: &CircuitBreaker<ManualClock>, o: Outcome, d: Duration) -> Recorded {
    b.try_acquire().unwrap().record_with_duration(o, d)
}

fn r4j() -> BreakerConfigBuilder {
    BreakerConfig::builder()
        .count_window(5)
        .minimum_calls(5)
        .failure_rate_threshold(50.0)
        .open_duration(5 * S)
        .half_open_calls(4)
}

#[test]
fn c01_minimum_calls_then_trip_and_metrics() {
    let (b, _) = mk(r4j());
    for _ in 0..4 {
        rec(&b, Outcome::Failure);
    }
    assert_eq!(b.state(), State::Closed);
    let m = b.metrics();
    assert_eq!((m.window.calls, m.window.failures), (4, 4));
    assert_eq!(m.failure_rate, None);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.metrics().failed_calls, 4);
    assert_eq!(b.metrics().successful_calls, 1);
    // not permitted
    let e = b.try_acquire().unwrap_err();
    assert_eq!(e.reason(), RejectReason::Open);
    assert_eq!(e.retry_after(), Some(5 * S));
    let _ = b.try_acquire().unwrap_err();
    let m = b.metrics();
    assert_eq!(m.rejected_calls, 2);
    assert_eq!(m.rejections.open, 2);
}

#[test]
fn c02_threshold_exactly_trips() {
    let (b, _) = mk(r4j().count_window(4).minimum_calls(4));
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Success);
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c03_count_window_slides() {
    let (b, _) = mk(r4j().count_window(5).minimum_calls(5));
    // 2 failures, then 3 successes: 40 %. Slide: successes push failures out.
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Failure);
    for _ in 0..3 {
        rec(&b, Outcome::Success);
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().failure_rate, Some(40.0));
    rec(&b, Outcome::Success);
    rec(&b, Outcome::Success);
    let m = b.metrics();
    assert_eq!((m.window.calls, m.window.failures), (5, 0));
    assert_eq!(m.failure_rate, Some(0.0));
}

#[test]
fn c04_time_window_failures_expire() {
    let (b, clock) = mk(r4j().time_window(5 * S, S).minimum_calls(3));
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Failure);
    clock.advance(6 * S);
    assert_eq!(b.metrics().window.calls, 0);
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Success);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c05_time_window_min_calls_over_time() {
    let (b, clock) = mk(r4j().time_window(10 * S, S).minimum_calls(4));
    for _ in 0..3 {
        rec(&b, Outcome::Failure);
        clock.advance(2 * S);
    }
    assert_eq!(b.state(), State::Closed);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c06_slow_call_rate_trips() {
    let (b, _) = mk(r4j()
        .failure_rate_threshold(100.0)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(S));
    rec_d(&b, Outcome::Success, 2 * S);
    rec_d(&b, Outcome::Success, 2 * S);
    rec_d(&b, Outcome::Failure, 10 * MS);
    rec_d(&b, Outcome::Success, 10 * MS);
    assert_eq!(b.state(), State::Closed);
    let m = b.metrics();
    assert_eq!(m.window.slow_calls, 2);
    assert_eq!(m.slow_successful_calls, 2);
    rec_d(&b, Outcome::Failure, 3 * S);
    assert_eq!(b.state(), State::Open);
    let m = b.metrics();
    assert_eq!(m.slow_failed_calls, 1);
    assert_eq!(m.slow_calls, 3);
}

#[test]
fn c07_half_open_permitted_calls_and_close() {
    let (b, clock) = mk(r4j().half_open_calls(3));
    b.trip();
    clock.advance(5 * S);
    let p: Vec<_> = (0..3).map(|_| b.try_acquire().unwrap()).collect();
    assert_eq!(b.state(), State::HalfOpen);
    let e = b.try_acquire().unwrap_err();
    assert_eq!(e.reason(), RejectReason::ProbesBusy);
    assert_eq!(b.metrics().rejections.half_open, 1);
    let mut it = p.into_iter();
    it.next().unwrap().record(Outcome::Failure);
    it.next().unwrap().record(Outcome::Success);
    assert_eq!(b.state(), State::HalfOpen);
    it.next().unwrap().record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    let m = b.metrics();
    assert_eq!((m.window.calls, m.window.failures), (0, 0));
    assert_eq!(m.consecutive_successes, 0);
    assert_eq!(m.consecutive_failures, 0);
}

#[test]
fn c08_half_open_reopens() {
    let (b, clock) = mk(r4j().half_open_calls(4));
    b.trip();
    clock.advance(5 * S);
    for _ in 0..2 {
        rec(&b, Outcome::Success);
    }
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::HalfOpen);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(5 * S));
}

#[test]
fn c09_half_open_slow_probes_reopen() {
    let (b, clock) = mk(r4j()
        .half_open_calls(2)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(S));
    b.trip();
    clock.advance(5 * S);
    rec_d(&b, Outcome::Success, 10 * MS);
    rec_d(&b, Outcome::Success, 2 * S);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c10_max_wait_in_half_open_tick() {
    let (b, clock) = mk(r4j().half_open_max_wait(3 * S));
    b.trip();
    clock.advance(5 * S);
    let p = b.try_acquire().unwrap();
    assert_eq!(b.tick(), Some(3 * S));
    clock.advance(3 * S);
    b.tick();
    assert_eq!(b.state(), State::Open);
    assert_eq!(p.record(Outcome::Success), Recorded::Stale);
}

#[test]
fn c11_max_wait_in_half_open_without_tick() {
    let (b, clock) = mk(r4j().half_open_max_wait(3 * S));
    b.trip();
    clock.advance(5 * S);
    let _p = b.try_acquire().unwrap();
    clock.advance(3 * S);
    // No tick: the next acquire sees the wait passed.
    let r = b.try_acquire();
    assert!(r.is_err(), "admitted past the maximum wait");
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c12_max_wait_closed() {
    let (b, clock) = mk(r4j()
        .half_open_max_wait(3 * S)
        .half_open_after_max_wait(AfterMaxWait::Closed));
    b.trip();
    clock.advance(5 * S);
    let _p = b.try_acquire().unwrap();
    clock.advance(3 * S);
    b.tick();
    assert_eq!(b.state(), State::Closed);
    assert!(b.try_acquire().is_ok());
}

#[test]
fn c13_automatic_transition() {
    let (b, clock) = mk(r4j().automatic_transition(true));
    b.trip();
    clock.advance(5 * S);
    b.tick();
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.metrics().probes_in_flight, 0);
}

#[test]
fn c14_no_automatic_transition() {
    let (b, clock) = mk(r4j());
    b.trip();
    clock.advance(5 * S);
    assert_eq!(b.tick(), None);
    assert_eq!(b.state(), State::Open);
    assert!(b.try_acquire().unwrap().is_probe());
    assert_eq!(b.state(), State::HalfOpen);
}

#[test]
fn c15_ignored() {
    let (b, clock) = mk(r4j().half_open_calls(1));
    for _ in 0..10 {
        assert_eq!(rec(&b, Outcome::Ignored), Recorded::Ignored);
    }
    let m = b.metrics();
    assert_eq!((m.window.calls, m.ignored_calls), (0, 10));
    assert_eq!(m.consecutive_failures, 0);
    b.trip();
    clock.advance(5 * S);
    rec(&b, Outcome::Ignored);
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.metrics().probes_in_flight, 0);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn c16_transition_to_closed_from_open_fresh_window() {
    let (b, _) = mk(r4j());
    for _ in 0..5 {
        rec(&b, Outcome::Failure);
    }
    assert_eq!(b.state(), State::Open);
    let g = b.generation();
    b.transition_to_closed().unwrap();
    assert_eq!(b.state(), State::Closed);
    assert!(b.generation() > g);
    let m = b.metrics();
    assert_eq!((m.window.calls, m.window.failures), (0, 0));
    assert_eq!(m.failure_rate, None);
    assert_eq!(m.failed_calls, 5);
}

#[test]
fn c17_transition_to_open_metrics() {
    let (b, _) = mk(r4j());
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Success);
    b.transition_to_open().unwrap();
    assert_eq!(b.state(), State::Open);
    let _ = b.try_acquire().unwrap_err();
    assert_eq!(b.metrics().rejections.open, 1);
}

#[test]
fn c18_half_open_from_closed_refused() {
    let (b, _) = mk(r4j());
    let e = b.transition_to_half_open().unwrap_err();
    assert!(matches!(e, TransitionError::NoSuchEdge { .. }));
    assert_eq!(b.state(), State::Closed);
    b.disable();
    assert!(b.transition_to_half_open().is_err());
    b.metrics_only();
    assert!(b.transition_to_half_open().is_err());
}

#[test]
fn c19_half_open_from_forced_open() {
    let (b, _) = mk(r4j().half_open_calls(1));
    b.force_open();
    b.transition_to_half_open().unwrap();
    assert_eq!(b.state(), State::HalfOpen);
    assert!(b.try_acquire().unwrap().is_probe());
}

#[test]
fn c20_forced_open() {
    let (b, clock) = mk(r4j().automatic_transition(true));
    b.transition_to_forced_open().unwrap();
    for _ in 0..3 {
        let e = b.try_acquire().unwrap_err();
        assert_eq!(e.reason(), RejectReason::ForcedOpen);
        assert_eq!(e.state(), State::ForcedOpen);
    }
    clock.advance(3600 * S);
    b.tick();
    assert_eq!(b.state(), State::ForcedOpen);
    let m = b.metrics();
    assert_eq!((m.rejected_calls, m.rejections.forced_open), (3, 3));
}

#[test]
fn c21_disabled() {
    let (b, _) = mk(r4j());
    b.transition_to_disabled().unwrap();
    for _ in 0..20 {
        assert_eq!(rec(&b, Outcome::Failure), Recorded::Disabled);
    }
    assert_eq!(b.state(), State::Disabled);
    let m = b.metrics();
    assert_eq!(
        (m.window.calls, m.failed_calls, m.rejected_calls),
        (0, 0, 0)
    );
    assert_eq!(m.failure_rate, None);
}

#[test]
fn c22_metrics_only() {
    let (b, _) = mk(r4j());
    b.transition_to_metrics_only().unwrap();
    for _ in 0..20 {
        assert_eq!(rec(&b, Outcome::Failure), Recorded::Counted);
    }
    assert_eq!(b.state(), State::MetricsOnly);
    let m = b.metrics();
    assert_eq!(
        (m.window.calls, m.window.failures, m.failed_calls),
        (5, 5, 20)
    );
    assert_eq!(m.failure_rate, Some(100.0));
}

#[test]
fn c23_metrics_only_fresh_window() {
    let (b, _) = mk(r4j());
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Failure);
    b.metrics_only();
    assert_eq!(b.metrics().window.calls, 0);
    rec(&b, Outcome::Failure);
    b.metrics_only();
    assert_eq!(b.metrics().window.calls, 1);
}

#[test]
fn c24_reset() {
    let (b, _) = mk(r4j());
    for _ in 0..3 {
        rec(&b, Outcome::Failure);
    }
    let p = b.try_acquire().unwrap();
    let g = b.generation();
    b.reset();
    assert_eq!(b.state(), State::Closed);
    assert!(b.generation() > g);
    assert_eq!(p.record(Outcome::Failure), Recorded::Stale);
    let m = b.metrics();
    assert_eq!(m.window.calls, 0);
    assert_eq!(m.consecutive_failures, 0);
    assert_eq!(m.stale_results, 1);
    b.trip();
    b.reset();
    assert_eq!(b.state(), State::Closed);
    b.force_open();
    b.reset();
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn c25_gobreaker_consecutive() {
    let (b, clock) = mk(BreakerConfig::builder()
        .count_window(100)
        .minimum_calls(100)
        .failure_rate_threshold(100.0)
        .consecutive_failures(6)
        .open_duration(60 * S)
        .half_open_calls(1)
        .half_open_policy(HalfOpenPolicy::Consecutive));
    for _ in 0..5 {
        rec(&b, Outcome::Failure);
    }
    assert_eq!(b.metrics().consecutive_failures, 5);
    rec(&b, Outcome::Success);
    assert_eq!(b.metrics().consecutive_failures, 0);
    assert_eq!(b.metrics().consecutive_successes, 1);
    for _ in 0..5 {
        rec(&b, Outcome::Failure);
    }
    assert_eq!(b.state(), State::Closed);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Open);
    let m = b.metrics();
    assert_eq!((m.consecutive_failures, m.consecutive_successes), (0, 0));
    clock.advance(59 * S);
    assert!(b.try_acquire().is_err());
    clock.advance(S);
    let p = b.try_acquire().unwrap();
    assert_eq!(
        b.try_acquire().unwrap_err().reason(),
        RejectReason::ProbesBusy
    );
    p.record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    let m = b.metrics();
    assert_eq!((m.consecutive_failures, m.consecutive_successes), (0, 0));
}

#[test]
fn c26_gobreaker_half_open_failure_reopens() {
    let (b, clock) = mk(BreakerConfig::builder()
        .consecutive_failures(6)
        .open_duration(60 * S)
        .half_open_calls(3)
        .half_open_policy(HalfOpenPolicy::Consecutive));
    b.trip();
    clock.advance(60 * S);
    rec(&b, Outcome::Success);
    assert_eq!(b.metrics().consecutive_successes, 1);
    rec(&b, Outcome::Success);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c27_gobreaker_consecutive_half_open_counts() {
    let (b, clock) = mk(BreakerConfig::builder()
        .consecutive_failures(3)
        .open_duration(10 * S)
        .half_open_calls(2)
        .half_open_policy(HalfOpenPolicy::Consecutive));
    b.trip();
    clock.advance(10 * S);
    rec(&b, Outcome::Success);
    let m = b.metrics();
    assert_eq!(m.probes.succeeded, 1);
    assert_eq!(m.probes.admitted, 1);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    // consecutive rule active in new closed state
    for _ in 0..3 {
        rec(&b, Outcome::Failure);
    }
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c28_gobreaker_interval_as_time_window() {
    let (b, clock) = mk(BreakerConfig::builder()
        .time_window(10 * S, S)
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(10 * S));
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Failure);
    clock.advance(11 * S);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Closed);
    let m = b.metrics();
    assert_eq!((m.window.calls, m.window.failures), (1, 1));
}

#[test]
fn c29_consecutive_failures_across_reset_and_time() {
    let (b, _) = mk(BreakerConfig::builder().consecutive_failures(3));
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Failure);
    b.reset();
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Closed);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c30_open_until() {
    let (b, clock) = mk(r4j());
    clock.advance(100 * S);
    b.transition_to_open_until(130 * S).unwrap();
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(30 * S));
    clock.advance(30 * S);
    assert!(b.try_acquire().unwrap().is_probe());
}

#[test]
fn c31_polly_min_throughput_time_window() {
    // Polly: failures below minimum throughput within the sampling duration do not open.
    let (b, clock) = mk(BreakerConfig::builder()
        .time_window(10 * S, S)
        .minimum_calls(4)
        .failure_rate_threshold(50.0));
    for _ in 0..3 {
        rec(&b, Outcome::Failure);
    }
    clock.advance(11 * S);
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Success);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c32_success_at_min_trips() {
    let (b, _) = mk(r4j()
        .count_window(4)
        .minimum_calls(4)
        .failure_rate_threshold(75.0));
    for _ in 0..3 {
        rec(&b, Outcome::Failure);
    }
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c33_half_open_metrics_after_transition() {
    let (b, clock) = mk(r4j().half_open_calls(3));
    for _ in 0..5 {
        rec(&b, Outcome::Failure);
    }
    clock.advance(5 * S);
    let p = b.try_acquire().unwrap();
    let m = b.metrics();
    assert_eq!(m.state, State::HalfOpen);
    assert_eq!(m.probes.admitted, 1);
    assert_eq!(m.probes.in_flight, 1);
    assert_eq!(m.probes_in_flight, 1);
    p.record(Outcome::Failure);
    let m = b.metrics();
    assert_eq!(m.probes.failed, 1);
    assert_eq!(m.probes.in_flight, 0);
}

#[test]
fn c34_abandoned_probe_frees_slot() {
    let (b, clock) = mk(r4j().half_open_calls(1));
    b.trip();
    clock.advance(5 * S);
    drop(b.try_acquire().unwrap());
    assert_eq!(b.metrics().abandoned_permits, 1);
    assert!(b.try_acquire().unwrap().is_probe());
}

#[test]
fn c35_transitions_count_and_time_in_state() {
    let (b, clock) = mk(r4j());
    clock.advance(2 * S);
    b.trip();
    clock.advance(5 * S);
    let _ = b.try_acquire().unwrap();
    clock.advance(S);
    let m = b.metrics();
    assert_eq!(m.transitions, 2);
    assert_eq!(m.time_open, 5 * S);
    assert_eq!(m.time_half_open, S);
    assert_eq!(m.time_in_state, S);
}

#[test]
fn c36_slow_rate_time_window() {
    let (b, clock) = mk(BreakerConfig::builder()
        .time_window(5 * S, S)
        .minimum_calls(2)
        .failure_rate_threshold(100.0)
        .slow_call_rate_threshold(100.0)
        .slow_call_duration(S));
    rec_d(&b, Outcome::Success, 2 * S);
    clock.advance(6 * S);
    rec_d(&b, Outcome::Success, 2 * S);
    assert_eq!(b.state(), State::Closed);
    rec_d(&b, Outcome::Success, 2 * S);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn c37_rejected_in_metrics_only_none() {
    let (b, _) = mk(r4j());
    b.metrics_only();
    for _ in 0..10 {
        rec(&b, Outcome::Failure);
    }
    b.reset();
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().window.calls, 0);
    assert_eq!(b.metrics().rejected_calls, 0);
}

use tripline::{Backoff, Classification, EventKind, EventLog, FailureKind, Reason};

fn transitions(log: &EventLog) -> Vec<(State, State, Reason, tripline::WindowSnapshot)> {
    log.events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Transition {
                from,
                to,
                reason,
                window,
                ..
            } => Some((from, to, reason, window)),
            _ => None,
        })
        .collect()
}

#[test]
fn d01_trip_event_window_and_reason() {
    let (b, _) = mk(r4j());
    let log = EventLog::new();
    b.subscribe(log.clone());
    for _ in 0..5 {
        rec(&b, Outcome::Failure);
    }
    let t = transitions(&log);
    assert_eq!(t.len(), 1);
    assert_eq!(
        (t[0].0, t[0].1, t[0].2),
        (State::Closed, State::Open, Reason::FailureRate)
    );
    assert_eq!((t[0].3.calls, t[0].3.failures), (5, 5));
}

#[test]
fn d02_slow_reason() {
    let (b, _) = mk(r4j()
        .failure_rate_threshold(100.0)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(S));
    let log = EventLog::new();
    b.subscribe(log.clone());
    for _ in 0..5 {
        rec_d(&b, Outcome::Success, 2 * S);
    }
    let t = transitions(&log);
    assert_eq!(t[0].2, Reason::SlowCallRate);
    assert_eq!(t[0].3.slow_calls, 5);
}

#[test]
fn d03_reset_event() {
    let (b, _) = mk(r4j());
    let log = EventLog::new();
    b.subscribe(log.clone());
    b.reset();
    let t = transitions(&log);
    assert_eq!(
        (t[0].0, t[0].1, t[0].2),
        (State::Closed, State::Closed, Reason::Operator)
    );
}

#[test]
fn d04_half_open_verdict_events() {
    let (b, clock) = mk(r4j().half_open_calls(2));
    let log = EventLog::new();
    b.subscribe(log.clone());
    b.trip();
    clock.advance(5 * S);
    rec(&b, Outcome::Success);
    rec(&b, Outcome::Failure);
    let t = transitions(&log);
    let last = t.last().unwrap();
    assert_eq!(last.1, State::Open);
    assert_eq!(
        last.2,
        Reason::ProbesFailed {
            probes: 2,
            failures: 1,
            slow: 0
        }
    );
    assert_eq!(t[1].2, Reason::OpenElapsed);
}

#[test]
fn d05_would_trip_once() {
    let (b, _) = mk(r4j());
    let log = EventLog::new();
    b.subscribe(log.clone());
    b.metrics_only();
    for _ in 0..8 {
        rec(&b, Outcome::Failure);
    }
    let n = log
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::WouldTrip { .. }))
        .count();
    assert_eq!(n, 1);
    assert_eq!(b.state(), State::MetricsOnly);
}

#[test]
fn d06_weighted_failure() {
    let (b, _) = mk(r4j()
        .count_window(10)
        .minimum_calls(4)
        .failure_kind_weight(FailureKind::Timeout, 3)
        .failure_kind_weight(FailureKind::RateLimited, 0));
    let r = b
        .try_acquire()
        .unwrap()
        .record_classified(Classification::failure(FailureKind::RateLimited));
    assert_eq!(r, Recorded::Ignored);
    assert_eq!(b.metrics().ignored_calls, 1);
    assert_eq!(b.metrics().window.calls, 0);
    b.try_acquire()
        .unwrap()
        .record_classified(Classification::failure(FailureKind::Timeout));
    let m = b.metrics();
    assert_eq!(
        (m.window.calls, m.window.failures, m.consecutive_failures),
        (3, 3, 3)
    );
    assert_eq!(b.state(), State::Closed);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn d07_weighted_probe_is_one() {
    let (b, clock) = mk(r4j()
        .half_open_calls(4)
        .failure_kind_weight(FailureKind::Timeout, 3));
    b.trip();
    clock.advance(5 * S);
    b.try_acquire()
        .unwrap()
        .record_classified(Classification::failure(FailureKind::Timeout));
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(b.metrics().probes.failed, 1);
}

#[test]
fn d08_lumping() {
    let (b, clock) = mk(r4j().count_window(10).minimum_calls(3).lumping_interval(S));
    rec(&b, Outcome::Success);
    rec(&b, Outcome::Success);
    assert_eq!(rec(&b, Outcome::Failure), Recorded::Counted);
    clock.advance(100 * MS);
    assert_eq!(rec(&b, Outcome::Failure), Recorded::Lumped);
    let m = b.metrics();
    assert_eq!((m.window.calls, m.window.failures), (3, 1));
    assert_eq!((m.failed_calls, m.lumped_failures), (2, 1));
    assert_eq!(m.consecutive_failures, 1);
    assert_eq!(m.consecutive_successes, 0);
    rec(&b, Outcome::Success);
    assert_eq!(b.metrics().consecutive_successes, 1);
    assert_eq!(rec(&b, Outcome::Failure), Recorded::Lumped);
    assert_eq!(b.metrics().consecutive_successes, 0);
}

#[test]
fn d09_in_flight_slow() {
    let clock = ManualClock::new();
    let config = r4j()
        .failure_rate_threshold(100.0)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(S)
        .count_in_flight_as_slow(true)
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("dep", config, clock.clone());
    let held: Vec<_> = (0..3).map(|_| b.try_acquire().unwrap()).collect();
    clock.advance(2 * S);
    assert_eq!(b.metrics().window.in_flight_slow, 3);
    rec(&b, Outcome::Success);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    drop(held);
    assert_eq!(b.metrics().window.in_flight_slow, 0);
}

#[test]
fn d10_ignored_probe_all_probes() {
    let (b, clock) = mk(r4j().half_open_calls(2));
    b.trip();
    clock.advance(5 * S);
    rec(&b, Outcome::Ignored);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::HalfOpen);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn d11_backoff() {
    let (b, clock) = mk(r4j().half_open_calls(1).open_backoff(Backoff {
        multiplier: 2.0,
        max: 60 * S,
        healthy_after: 100 * S,
    }));
    b.trip();
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(5 * S));
    clock.advance(5 * S);
    rec(&b, Outcome::Failure);
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(10 * S));
    clock.advance(10 * S);
    rec(&b, Outcome::Failure);
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(20 * S));
    clock.advance(20 * S);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    clock.advance(100 * S);
    b.trip();
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(5 * S));
}

#[test]
fn d12_backoff_flap_keeps_wait() {
    let (b, clock) = mk(r4j().half_open_calls(1).open_backoff(Backoff {
        multiplier: 2.0,
        max: 60 * S,
        healthy_after: 100 * S,
    }));
    b.trip();
    clock.advance(5 * S);
    rec(&b, Outcome::Failure);
    clock.advance(10 * S);
    rec(&b, Outcome::Success);
    clock.advance(10 * S);
    b.trip();
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(20 * S));
}

#[test]
fn d13_retry_after_hint() {
    let (b, clock) = mk(r4j().half_open_calls(1));
    for _ in 0..4 {
        rec(&b, Outcome::Failure);
    }
    b.try_acquire()
        .unwrap()
        .record_classified(Classification::new(Outcome::Failure).with_retry_after(30 * S));
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(30 * S));
    clock.advance(30 * S);
    assert!(b.try_acquire().unwrap().is_probe());
}

#[test]
fn d14_stale_closed_permit_after_trip() {
    let (b, _) = mk(r4j());
    let p = b.try_acquire().unwrap();
    for _ in 0..5 {
        rec(&b, Outcome::Failure);
    }
    assert_eq!(p.record(Outcome::Success), Recorded::Stale);
    let m = b.metrics();
    assert_eq!(m.stale_results, 1);
    assert_eq!(m.successful_calls, 0);
}

#[test]
fn d15_half_open_retry_after() {
    let (b, clock) = mk(r4j().half_open_calls(1).probe_lease(10 * S));
    b.trip();
    clock.advance(5 * S);
    let _p = b.try_acquire().unwrap();
    clock.advance(3 * S);
    let e = b.try_acquire().unwrap_err();
    assert_eq!(e.reason(), RejectReason::ProbesBusy);
    assert_eq!(e.retry_after(), Some(7 * S));
    clock.advance(7 * S);
    assert!(b.try_acquire().unwrap().is_probe());
    assert_eq!(b.metrics().expired_probes, 1);
}

#[test]
fn d16_next_deadline_half_open() {
    let (b, clock) = mk(r4j().half_open_max_wait(4 * S));
    b.trip();
    clock.advance(5 * S);
    let _p = b.try_acquire().unwrap();
    clock.advance(S);
    assert_eq!(b.next_deadline(), Some(3 * S));
}

#[test]
fn d18_disabled_to_closed_fresh() {
    let (b, _) = mk(r4j());
    rec(&b, Outcome::Failure);
    b.disable();
    rec(&b, Outcome::Failure);
    b.transition_to_closed().unwrap();
    let m = b.metrics();
    assert_eq!((m.window.calls, m.failed_calls), (0, 1));
    assert_eq!(m.consecutive_failures, 0);
}

#[test]
fn d19_open_for_exact() {
    let (b, clock) = mk(r4j().open_jitter(3 * S));
    b.transition_to_open_for(7 * S).unwrap();
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(7 * S));
    clock.advance(7 * S);
    assert!(b.try_acquire().is_ok());
}

#[test]
fn d20_consecutive_plus_rate_reason_order() {
    let (b, _) = mk(r4j().consecutive_failures(5));
    let log = EventLog::new();
    b.subscribe(log.clone());
    for _ in 0..5 {
        rec(&b, Outcome::Failure);
    }
    let t = transitions(&log);
    assert_eq!(t[0].2, Reason::ConsecutiveFailures { count: 5 });
}

#[test]
fn d21_metrics_only_consecutive_no_trip() {
    let (b, _) = mk(r4j().consecutive_failures(2));
    b.metrics_only();
    for _ in 0..5 {
        rec(&b, Outcome::Failure);
    }
    assert_eq!(b.state(), State::MetricsOnly);
    assert_eq!(b.metrics().consecutive_failures, 5);
}

#[test]
fn d22_time_window_result_lands_at_record_time() {
    let (b, clock) = mk(r4j().time_window(5 * S, S).minimum_calls(2));
    let p = b.try_acquire().unwrap();
    clock.advance(10 * S);
    p.record(Outcome::Failure);
    assert_eq!(b.metrics().window.failures, 1);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn d23_call_durations_mean() {
    let (b, _) = mk(r4j().count_window(2).minimum_calls(2).call_durations(true));
    rec_d(&b, Outcome::Success, 10 * MS);
    rec_d(&b, Outcome::Success, 30 * MS);
    rec_d(&b, Outcome::Success, 50 * MS);
    let m = b.metrics();
    assert_eq!(m.total_duration, Some(80 * MS));
    assert_eq!(m.mean_duration, Some(40 * MS));
}

#[test]
fn d24_transition_open_from_half_open_stales_probes() {
    let (b, clock) = mk(r4j().half_open_calls(2));
    b.trip();
    clock.advance(5 * S);
    let p = b.try_acquire().unwrap();
    b.transition_to_open().unwrap();
    assert_eq!(p.record(Outcome::Success), Recorded::Stale);
    assert_eq!(b.metrics().probes_in_flight, 0);
    clock.advance(5 * S);
    let _a = b.try_acquire().unwrap();
    let _c = b.try_acquire().unwrap();
}

#[test]
fn e01_time_window_precision() {
    let (b, clock) = mk(r4j()
        .time_window(10 * S, S)
        .minimum_calls(1)
        .failure_rate_threshold(100.0)
        .slow_call_rule(false));
    b.metrics_only();
    clock.advance(500 * MS);
    rec(&b, Outcome::Failure);
    clock.advance(9100 * MS); // 9.6 s: 9.1 s old
    assert_eq!(b.metrics().window.failures, 1, "9.1 s old");
    clock.advance(1300 * MS); // 10.9 s: 10.4 s old
    assert_eq!(b.metrics().window.failures, 0, "10.4 s old");
}

#[test]
fn e02_time_in_state_since_creation() {
    let (b, clock) = mk(r4j());
    clock.advance(7 * S);
    rec(&b, Outcome::Success);
    assert_eq!(b.metrics().time_in_state, 7 * S);
}

#[test]
fn e03_max_wait_closed_without_tick() {
    let (b, clock) = mk(r4j()
        .half_open_max_wait(3 * S)
        .half_open_after_max_wait(AfterMaxWait::Closed)
        .half_open_calls(1));
    b.trip();
    clock.advance(5 * S);
    let _p = b.try_acquire().unwrap();
    clock.advance(3 * S);
    assert!(b.try_acquire().is_ok());
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn e04_half_open_all_probes_consecutive_successes() {
    let (b, clock) = mk(r4j().half_open_calls(3));
    b.trip();
    clock.advance(5 * S);
    rec(&b, Outcome::Success);
    rec(&b, Outcome::Success);
    let m = b.metrics();
    assert_eq!(m.consecutive_successes, 2);
    assert_eq!(m.probes.succeeded, 2);
}

#[test]
fn e05_rejections_by_state_after_reopen() {
    let (b, clock) = mk(r4j().half_open_calls(1));
    b.trip();
    let _ = b.try_acquire().unwrap_err();
    clock.advance(5 * S);
    let p = b.try_acquire().unwrap();
    let _ = b.try_acquire().unwrap_err();
    p.record(Outcome::Failure);
    let _ = b.try_acquire().unwrap_err();
    let m = b.metrics();
    assert_eq!(
        (m.rejections.open, m.rejections.half_open, m.rejected_calls),
        (2, 1, 3)
    );
}

#[test]
fn e06_time_window_slow_success_expire_then_trip() {
    // "the first result past a time bucket boundary once the successes that kept the rate
    // down have expired" trips.
    let (b, clock) = mk(r4j()
        .time_window(5 * S, S)
        .minimum_calls(2)
        .slow_call_rule(false));
    for _ in 0..3 {
        rec(&b, Outcome::Success);
    }
    clock.advance(3 * S);
    rec(&b, Outcome::Failure);
    rec(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Closed);
    clock.advance(3 * S);
    rec(&b, Outcome::Success);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn e07_gobreaker_consecutive_only_slow_rule_off() {
    // gobreaker with slow rule off reads no clock in closed state
    let (b, _) = mk(BreakerConfig::builder()
        .consecutive_failures(6)
        .slow_call_rule(false));
    for _ in 0..6 {
        rec(&b, Outcome::Failure);
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.metrics().failed_calls, 6);
}

#[test]
fn f01_all_probes_half_open_consecutive_failures_start_over() {
    let (b, clock) = mk(r4j().half_open_calls(4));
    for _ in 0..5 {
        rec(&b, Outcome::Failure);
    }
    clock.advance(5 * S);
    rec(&b, Outcome::Failure);
    assert_eq!(b.metrics().consecutive_failures, 1);
}

#[test]
fn f02_half_open_lease_reclaimed_late_result_stale() {
    let (b, clock) = mk(r4j().half_open_calls(1).probe_lease(2 * S));
    b.trip();
    clock.advance(5 * S);
    let p = b.try_acquire().unwrap();
    clock.advance(2 * S);
    let q = b.try_acquire().unwrap();
    assert_eq!(p.record(Outcome::Success), Recorded::Stale);
    assert_eq!(b.state(), State::HalfOpen);
    q.record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn f03_forced_open_to_closed_keeps_counters() {
    let (b, _) = mk(r4j());
    rec(&b, Outcome::Failure);
    b.force_open();
    let _ = b.try_acquire().unwrap_err();
    b.transition_to_closed().unwrap();
    let m = b.metrics();
    assert_eq!(
        (m.failed_calls, m.rejected_calls, m.window.calls),
        (1, 1, 0)
    );
    assert_eq!(m.transitions, 2);
}
