//! Operator transitions on the manual clock: every edge of the table in the `operator` module
//! docs, the refused ones and their errors, explicit open waits, and where a half-open breaker
//! goes after its maximum wait.

use std::time::Duration;

use tripline::{
    AfterMaxWait, Backoff, BreakerConfig, CircuitBreaker, EventKind, EventLog, ManualClock,
    Outcome, Reason, Recorded, State, TransitionError,
};

const S: Duration = Duration::from_secs(1);

fn breaker(builder: tripline::BreakerConfigBuilder) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = builder
        .count_window(4)
        .minimum_calls(2)
        .count_in_flight_as_slow(false)
        .open_duration(10 * S)
        .half_open_calls(2)
        .seed(3)
        .build()
        .unwrap();
    (
        CircuitBreaker::with_clock("dep", config, clock.clone()),
        clock,
    )
}

fn plain() -> (CircuitBreaker<ManualClock>, ManualClock) {
    breaker(BreakerConfig::builder())
}

/// Puts a fresh breaker in `state` (through edges the rules and operators have).
fn in_state(state: State) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let (b, clock) = plain();
    match state {
        State::Closed => {}
        State::Open => b.trip(),
        State::HalfOpen => {
            b.trip();
            clock.advance(10 * S);
            drop(b.try_acquire().unwrap());
        }
        State::Disabled => b.disable(),
        State::MetricsOnly => b.metrics_only(),
        State::ForcedOpen => b.force_open(),
    }
    assert_eq!(b.state(), state);
    (b, clock)
}

fn transitions(log: &EventLog) -> Vec<(State, State, Reason)> {
    log.events()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Transition {
                from, to, reason, ..
            } => Some((from, to, reason)),
            _ => None,
        })
        .collect()
}

/// The table: for every state and every target, either the edge exists (the breaker ends in
/// the target, and unless it asked for its own state, with one transition event naming the
/// operator and a new generation), or it is refused and nothing changes.
#[test]
fn every_operator_edge_is_a_transition_and_every_missing_one_is_refused() {
    for from in State::ALL {
        for to in State::ALL {
            let (b, _clock) = in_state(from);
            let log = EventLog::new();
            b.subscribe(log.clone());
            let generation = b.generation();
            let result = b.transition_to(to);
            let exists = from.operator_targets().contains(&to);
            let refused = matches!(
                (from, to),
                (
                    State::Closed | State::Disabled | State::MetricsOnly,
                    State::HalfOpen
                )
            );
            assert_eq!(exists, !refused, "{from} -> {to}");
            if refused {
                assert_eq!(result, Err(TransitionError::NoSuchEdge { from, to }));
                assert_eq!((b.state(), b.generation()), (from, generation));
                assert!(transitions(&log).is_empty());
                continue;
            }
            result.unwrap();
            assert_eq!(b.state(), to, "{from} -> {to}");
            let moved = from != to || matches!(to, State::Closed | State::Open);
            let seen = transitions(&log);
            if moved {
                assert_eq!(seen, vec![(from, to, Reason::Operator)], "{from} -> {to}");
                assert_eq!(b.generation(), generation + 1);
            } else {
                assert!(seen.is_empty(), "{from} -> {to}: {seen:?}");
                assert_eq!(b.generation(), generation);
            }
        }
    }
}

#[test]
fn half_open_from_disabled_is_refused_with_the_edges_that_exist() {
    let (b, _clock) = in_state(State::Disabled);
    let err = b.transition_to_half_open().unwrap_err();
    assert_eq!(
        err.to_string(),
        "no operator transition from disabled to half-open; from disabled an operator may go \
         to closed, open, disabled, metrics-only, forced-open"
    );
    let (b, _clock) = in_state(State::Closed);
    assert!(matches!(
        b.transition_to_half_open(),
        Err(TransitionError::NoSuchEdge {
            from: State::Closed,
            to: State::HalfOpen
        })
    ));
    let (b, _clock) = in_state(State::MetricsOnly);
    assert!(b.transition_to_half_open().is_err());
}

#[test]
fn open_for_waits_exactly_that_long_without_jitter_then_probes() {
    let (b, clock) = breaker(BreakerConfig::builder().open_jitter(5 * S));
    let log = EventLog::new();
    b.subscribe(log.clone());
    b.transition_to_open_for(42 * S).unwrap();
    let r = b.try_acquire().unwrap_err();
    assert_eq!((r.state(), r.retry_after()), (State::Open, Some(42 * S)));
    let open_for = log.events().iter().find_map(|e| match e.kind {
        EventKind::Transition { open_for, .. } => open_for,
        _ => None,
    });
    assert_eq!(open_for, Some(42 * S));
    clock.advance(42 * S - Duration::from_nanos(1));
    assert!(b.try_acquire().is_err());
    clock.advance(Duration::from_nanos(1));
    assert!(b.try_acquire().unwrap().is_probe());
    assert_eq!(b.state(), State::HalfOpen);
}

#[test]
fn open_for_zero_opens_with_nothing_left_to_wait() {
    let (b, _clock) = plain();
    b.transition_to_open_for(Duration::ZERO).unwrap();
    assert_eq!(b.state(), State::Open);
    assert!(b.try_acquire().unwrap().is_probe());
}

#[test]
fn open_until_reads_the_breakers_clock_and_a_past_time_leaves_no_wait() {
    let (b, clock) = plain();
    clock.advance(100 * S);
    b.transition_to_open_until(130 * S).unwrap();
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(30 * S));
    b.transition_to_open_until(50 * S).unwrap();
    assert!(b.try_acquire().unwrap().is_probe());
}

#[test]
fn explicit_waits_beyond_a_week_are_refused_and_change_nothing() {
    let (b, clock) = plain();
    let week = Duration::from_secs(7 * 86_400);
    let err = b.transition_to_open_for(week + S).unwrap_err();
    let TransitionError::Wait(e) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(e.field(), "open_for");
    assert_eq!(e.value(), "7days 1s");
    assert_eq!((b.state(), b.generation()), (State::Closed, 0));
    let err = b
        .transition_to_open_until(Duration::from_nanos(tripline::Clock::now(&clock)) + week + S)
        .unwrap_err();
    assert!(err.to_string().starts_with("open_until must be"), "{err}");
    b.transition_to_open_for(week).unwrap();
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(week));
}

#[test]
fn open_from_open_starts_a_new_wait() {
    let (b, clock) = plain();
    b.trip();
    clock.advance(8 * S);
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(2 * S));
    let log = EventLog::new();
    b.subscribe(log.clone());
    b.transition_to_open().unwrap();
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(10 * S));
    assert_eq!(
        transitions(&log),
        vec![(State::Open, State::Open, Reason::Operator)]
    );
}

/// An operator's explicit wait is not a trip of the rules: it neither grows the backoff nor
/// resets it.
#[test]
fn an_explicit_wait_leaves_the_backoff_level_alone() {
    let (b, clock) = breaker(BreakerConfig::builder().open_backoff(Backoff {
        multiplier: 2.0,
        max: 100 * S,
        healthy_after: 1000 * S,
    }));
    let log = EventLog::new();
    b.subscribe(log.clone());
    b.trip(); // 10 s
    clock.advance(10 * S);
    let p = b.try_acquire().unwrap();
    let _ = p.record(Outcome::Failure); // failed probe: 20 s
    b.transition_to_open_for(3 * S).unwrap(); // exactly 3 s, level kept
    clock.advance(3 * S);
    let p = b.try_acquire().unwrap();
    let _ = p.record(Outcome::Failure); // failed probe again: 40 s
    let waits: Vec<Duration> = log
        .events()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Transition { open_for, .. } => open_for,
            _ => None,
        })
        .collect();
    assert_eq!(waits, vec![10 * S, 20 * S, 3 * S, 40 * S]);
}

#[test]
fn half_open_from_forced_open_probes_now_and_the_probes_decide() {
    let (b, _clock) = in_state(State::ForcedOpen);
    b.transition_to_half_open().unwrap();
    let p1 = b.try_acquire().unwrap();
    let p2 = b.try_acquire().unwrap();
    assert!(p1.is_probe() && p2.is_probe());
    assert!(b.try_acquire().is_err());
    let _ = p1.record(Outcome::Success);
    let _ = p2.record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn half_open_from_half_open_does_nothing() {
    let (b, _clock) = in_state(State::HalfOpen);
    let p = b.try_acquire().unwrap();
    let generation = b.generation();
    b.transition_to_half_open().unwrap();
    assert_eq!(b.generation(), generation);
    assert_eq!(p.record(Outcome::Success), Recorded::Counted);
}

/// Results of calls admitted before an operator's transition belong to the old generation
/// and are discarded, whichever edge it took.
#[test]
fn results_admitted_before_an_operator_transition_are_stale() {
    for to in [
        State::Closed,
        State::Open,
        State::MetricsOnly,
        State::ForcedOpen,
    ] {
        let (b, _clock) = plain();
        let p = b.try_acquire().unwrap();
        b.transition_to(to).unwrap();
        assert_eq!(p.record(Outcome::Failure), Recorded::Stale, "{to}");
        assert_eq!(b.metrics().window.failures, 0);
    }
}

#[test]
fn the_old_operator_calls_are_the_same_edges() {
    let (b, _clock) = plain();
    b.force_open();
    assert_eq!(b.state(), State::ForcedOpen);
    b.disable();
    b.metrics_only();
    b.reset();
    assert_eq!((b.state(), b.generation()), (State::Closed, 4));
    b.transition_to_forced_open().unwrap();
    b.transition_to_disabled().unwrap();
    b.transition_to_metrics_only().unwrap();
    b.transition_to_closed().unwrap();
    assert_eq!((b.state(), b.generation()), (State::Closed, 8));
}

fn max_wait(to: AfterMaxWait) -> (CircuitBreaker<ManualClock>, ManualClock) {
    breaker(
        BreakerConfig::builder()
            .half_open_max_wait(20 * S)
            .half_open_after_max_wait(to),
    )
}

/// resilience4j 2.4's `transitionToStateAfterWaitDuration = CLOSED`: probes that neither
/// failed nor finished within the maximum wait let the breaker close, with a fresh window;
/// their late results are stale.
#[test]
fn after_the_maximum_half_open_wait_the_breaker_may_close() {
    // Lazily, on the next acquire.
    let (b, clock) = max_wait(AfterMaxWait::Closed);
    let log = EventLog::new();
    b.subscribe(log.clone());
    b.trip();
    clock.advance(10 * S);
    let probe = b.try_acquire().unwrap();
    let _second = b.try_acquire().unwrap();
    clock.advance(19 * S);
    assert_eq!(b.next_deadline(), Some(S));
    assert!(b.try_acquire().is_err());
    clock.advance(S);
    let p = b.try_acquire().unwrap();
    assert!(!p.is_probe());
    assert_eq!(b.state(), State::Closed);
    assert_eq!(
        transitions(&log).last(),
        Some(&(State::HalfOpen, State::Closed, Reason::HalfOpenTimeout))
    );
    assert_eq!(probe.record(Outcome::Failure), Recorded::Stale);
    assert_eq!(p.record(Outcome::Success), Recorded::Counted);
    assert_eq!(b.metrics().window.calls, 1);

    // By the timer.
    let (b, clock) = max_wait(AfterMaxWait::Closed);
    b.trip();
    clock.advance(10 * S);
    drop(b.try_acquire().unwrap());
    clock.advance(20 * S);
    assert_eq!(b.tick(), None);
    assert_eq!(b.state(), State::Closed);

    // The default still goes back to Open, with a fresh wait.
    let (b, clock) = max_wait(AfterMaxWait::Open);
    b.trip();
    clock.advance(10 * S);
    drop(b.try_acquire().unwrap());
    clock.advance(20 * S);
    b.tick();
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(10 * S));
}

#[cfg(feature = "serde")]
#[test]
fn the_new_settings_read_from_toml_and_round_trip() {
    let c: BreakerConfig = toml::from_str(
        r#"
        lumping_interval = "1s"
        call_durations = true
        [failure_kinds]
        rate-limited = 0
        timeout = 2
        [half_open]
        max_wait = "30s"
        after_max_wait = "closed"
        "#,
    )
    .unwrap();
    assert_eq!(c.after_max_wait(), AfterMaxWait::Closed);
    assert_eq!(c.lumping_interval(), Some(S));
    assert!(c.call_durations());
    assert_eq!(c.failure_kinds().get(tripline::FailureKind::RateLimited), 0);
    assert_eq!(c.failure_kinds().get(tripline::FailureKind::Timeout), 2);
    assert_eq!(c.failure_kinds().get(tripline::FailureKind::Connection), 1);
    let back: BreakerConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);

    let err = toml::from_str::<BreakerConfig>("[half_open]\nafter_max_wait = \"closed\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("half_open.after_max_wait"), "{err}");
    let err = toml::from_str::<BreakerConfig>("[failure_kinds]\nteapot = 1\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("teapot"), "{err}");
    let err = toml::from_str::<BreakerConfig>("[failure_kinds]\ntimeout = 11\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("failure_kinds.timeout must be in [0, 10], got 11"),
        "{err}"
    );
    let err = toml::from_str::<BreakerConfig>("lumping_interval = \"2h\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("lumping_interval must be between 1ms and 1h"),
        "{err}"
    );
}
