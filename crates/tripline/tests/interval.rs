//! A fixed Closed interval (`BreakerConfigBuilder::interval`, gobreaker's `Interval`): each
//! Closed generation ends at its boundary, every count cleared, and results of calls admitted
//! before it are stale.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tripline::{
    BreakerConfig, CircuitBreaker, EventKind, ManualClock, Outcome, RampCurve, RampUp, Reason,
    Recorded, State,
};

const S: Duration = Duration::from_secs(1);

fn breaker(config: BreakerConfig) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (
        CircuitBreaker::with_clock("interval", config, clock.clone()),
        clock,
    )
}

fn fail(b: &CircuitBreaker<ManualClock>) {
    let _ = b.try_acquire().unwrap().record(Outcome::Failure);
}

#[test]
fn a_failure_before_the_boundary_and_n_minus_1_after_never_trip_the_consecutive_rule() {
    let config = BreakerConfig::builder()
        .consecutive_failures(3)
        .interval(30 * S)
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    fail(&b);
    clock.advance(29 * S);
    fail(&b);
    clock.advance(S); // the boundary itself begins the next generation
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().consecutive_failures, 2);
    fail(&b);
    assert_eq!(b.state(), State::Open, "three within one interval trip");
}

#[test]
fn a_failure_before_the_boundary_and_n_minus_1_after_never_trip_the_failure_count_rule() {
    // Five failures within a minute, but the interval is 10 s: the rule counts within it.
    let config = BreakerConfig::builder()
        .failure_count(5, 60 * S)
        .interval(10 * S)
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    for _ in 0..4 {
        fail(&b);
    }
    clock.advance(10 * S);
    for _ in 0..4 {
        fail(&b);
    }
    assert_eq!(b.state(), State::Closed);
    fail(&b);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn the_window_and_the_counts_clear_at_the_boundary() {
    for time_window in [false, true] {
        let builder = BreakerConfig::builder().minimum_calls(4).interval(30 * S);
        let builder = if time_window {
            builder.time_window(60 * S, S)
        } else {
            builder.count_window(10)
        };
        let (b, clock) = breaker(builder.build().unwrap());
        fail(&b);
        fail(&b);
        let _ = b.try_acquire().unwrap().record(Outcome::Success);
        assert_eq!(b.metrics().window.calls, 3);
        clock.advance(30 * S);
        let _ = b.try_acquire().unwrap().record(Outcome::Success);
        let m = b.metrics();
        assert_eq!(
            (m.window.calls, m.window.failures),
            (1, 0),
            "time window: {time_window}"
        );
        let c = b.counts();
        assert_eq!((c.generation, c.requests, c.successes), (1, 1, 1));
        // Two failures more: 2 of 3 in this interval, below the minimum of 4.
        fail(&b);
        fail(&b);
        assert_eq!(b.state(), State::Closed);
        // The lifetime metrics keep everything.
        assert_eq!((m.successful_calls, m.failed_calls), (2, 2));
    }
}

#[test]
fn a_result_from_before_the_boundary_is_stale() {
    let config = BreakerConfig::builder()
        .consecutive_failures(2)
        .interval(30 * S)
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    fail(&b);
    let before = b.try_acquire().unwrap();
    clock.advance(30 * S);
    // No call has begun the next generation yet: the result itself finds the interval over.
    assert_eq!(before.record(Outcome::Failure), Recorded::Stale);
    assert_eq!(b.state(), State::Closed, "the stale failure does not trip");
    assert_eq!(b.generation(), 1);
    let m = b.metrics();
    assert_eq!((m.stale_results, m.consecutive_failures), (1, 0));

    // And after another call began it.
    let before = b.try_acquire().unwrap();
    clock.advance(30 * S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(before.record(Outcome::Success), Recorded::Stale);
    assert_eq!(b.generation(), 2);
}

#[test]
fn the_boundary_is_a_transition_from_closed_to_closed_with_its_reason() {
    let config = BreakerConfig::builder().interval(30 * S).build().unwrap();
    let (b, clock) = breaker(config);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    b.subscribe(move |e: &tripline::Event| {
        if let EventKind::Transition {
            from, to, reason, ..
        } = e.kind
        {
            log.lock().unwrap().push((from, to, reason));
        }
    });
    clock.advance(29 * S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    assert!(seen.lock().unwrap().is_empty());
    clock.advance(S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(
        *seen.lock().unwrap(),
        [(State::Closed, State::Closed, Reason::IntervalElapsed)]
    );
    let m = b.metrics();
    assert_eq!(m.transitions, 1);
    // The time in Closed goes on through the boundary.
    assert_eq!(m.time_in_state, 30 * S);
}

#[test]
fn the_interval_runs_from_the_generations_start() {
    let config = BreakerConfig::builder()
        .interval(30 * S)
        .consecutive_failures(1)
        .open_duration(10 * S)
        .half_open_calls(1)
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    assert_eq!(b.next_deadline(), Some(30 * S));
    clock.advance(20 * S);
    fail(&b); // Open at 20 s
    clock.advance(10 * S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success); // Closed at 30 s
    assert_eq!(b.state(), State::Closed);
    let g = b.generation();
    assert_eq!(b.next_deadline(), Some(30 * S));
    clock.advance(29 * S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(b.generation(), g, "59 s: 29 s into the generation");
    clock.advance(S);
    assert_eq!(b.tick(), Some(30 * S));
    assert_eq!(b.generation(), g + 1);
    // Long silence: the next generation begins at the next call, its interval from then.
    clock.advance(1000 * S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(b.generation(), g + 2);
    assert_eq!(b.next_deadline(), Some(30 * S));
}

#[test]
fn a_ramp_goes_on_through_the_boundary() {
    let ramp = RampUp {
        from: 50.0,
        over: 100 * S,
        steps: 2,
        curve: RampCurve::Linear,
    };
    let config = BreakerConfig::builder()
        .interval(10 * S)
        .consecutive_failures(1)
        .open_duration(S)
        .half_open_calls(1)
        .ramp_up(ramp)
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    fail(&b);
    clock.advance(S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success); // Closed, ramping at 50 %
    clock.advance(10 * S);
    let admitted = (0..10).filter(|_| b.try_acquire().is_ok()).count();
    assert_eq!(
        admitted, 5,
        "still at the ramp's first step after the boundary"
    );
    assert_eq!(b.counts().rejected, 5);
}

#[test]
fn metrics_only_starts_over_at_each_interval_too() {
    let config = BreakerConfig::builder()
        .interval(30 * S)
        .consecutive_failures(2)
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    b.metrics_only();
    fail(&b);
    clock.advance(30 * S);
    fail(&b);
    assert_eq!(b.state(), State::MetricsOnly);
    assert_eq!(b.metrics().consecutive_failures, 1);
}

#[test]
fn a_reconfigured_interval_counts_from_the_change() {
    let (b, clock) = breaker(BreakerConfig::default());
    clock.advance(100 * S);
    b.reconfigure(BreakerConfig::builder().interval(30 * S).build().unwrap())
        .unwrap();
    assert_eq!(b.next_deadline(), Some(30 * S));
    clock.advance(30 * S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(b.generation(), 1);
    b.reconfigure(BreakerConfig::default()).unwrap();
    clock.advance(1000 * S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(b.generation(), 1, "no interval: no new generation");
}

#[test]
fn the_builder_refuses_an_interval_out_of_range() {
    for bad in [
        Duration::ZERO,
        Duration::from_micros(999),
        8 * 24 * 3600 * S,
    ] {
        let e = BreakerConfig::builder().interval(bad).build().unwrap_err();
        assert_eq!(e.field(), "interval");
        assert!(e.to_string().contains("between 1ms and 7days"), "{e}");
    }
}

#[cfg(feature = "serde")]
#[test]
fn toml_reads_an_interval_and_refuses_one_out_of_range() {
    let c: BreakerConfig = toml::from_str(r#"interval = "60s""#).unwrap();
    assert_eq!(c.interval(), Some(60 * S));
    // And writes it back.
    let back: BreakerConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
    assert_eq!(c.to_builder().build().unwrap(), c);
    for bad in [r#"interval = "0s""#, r#"interval = "8days""#] {
        let e = toml::from_str::<BreakerConfig>(bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("interval must be between 1ms and 7days"), "{e}");
    }
}
