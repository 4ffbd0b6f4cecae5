//! An open wait computed by a function (`BreakerConfigBuilder::open_duration_fn`, Polly's
//! `BreakDurationGenerator`): its result sets the wait, clamped; it sees the opens in a row;
//! a panic falls back to the configured wait.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tripline::{
    BreakerConfig, CircuitBreaker, EventKind, ManualClock, OpenWaitArgs, Outcome, Reason, State,
};

const S: Duration = Duration::from_secs(1);

fn breaker(
    f: impl Fn(&OpenWaitArgs) -> Duration + Send + Sync + 'static,
) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let config = BreakerConfig::builder()
        .consecutive_failures(2)
        .half_open_calls(1)
        .open_duration(10 * S)
        .open_duration_fn(f)
        .build()
        .unwrap();
    let clock = ManualClock::new();
    (
        CircuitBreaker::with_clock("computed", config, clock.clone()),
        clock,
    )
}

fn fail(b: &CircuitBreaker<ManualClock>) {
    let _ = b.try_acquire().unwrap().record(Outcome::Failure);
}

fn retry_after(b: &CircuitBreaker<ManualClock>) -> Option<Duration> {
    b.try_acquire().unwrap_err().retry_after()
}

#[test]
fn the_functions_result_sets_the_open_wait() {
    let (b, clock) = breaker(|_| 42 * S);
    let open_for = Arc::new(Mutex::new(Vec::new()));
    let log = open_for.clone();
    b.subscribe(move |e: &tripline::Event| {
        if let EventKind::Transition { open_for, .. } = e.kind {
            log.lock().unwrap().extend(open_for);
        }
    });
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), State::Open);
    assert_eq!(retry_after(&b), Some(42 * S));
    assert_eq!(
        *open_for.lock().unwrap(),
        [42 * S],
        "the event carries it too"
    );
    clock.advance(41 * S);
    assert!(b.try_acquire().is_err());
    clock.advance(S);
    assert!(b.try_acquire().unwrap().is_probe());
}

#[test]
fn the_function_sees_attempt_1_2_3_across_repeated_opens() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let (b, clock) = breaker(move |a| {
        log.lock()
            .unwrap()
            .push((a.attempt, a.reason, a.failures, a.calls));
        S * a.attempt
    });
    fail(&b);
    fail(&b); // attempt 1: the trip from Closed
    clock.advance(S);
    fail(&b); // the probe fails: attempt 2
    assert_eq!(retry_after(&b), Some(2 * S));
    clock.advance(2 * S);
    fail(&b); // attempt 3
    assert_eq!(retry_after(&b), Some(3 * S));
    clock.advance(3 * S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success); // closes
    fail(&b);
    fail(&b); // from Closed again: attempt 1
    assert_eq!(retry_after(&b), Some(S));
    let probes = |failures| Reason::ProbesFailed {
        probes: 1,
        failures,
        slow: 0,
    };
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (1, Reason::ConsecutiveFailures { count: 2 }, 2, 2),
            (2, probes(1), 2, 2),
            (3, probes(1), 2, 2),
            (1, Reason::ConsecutiveFailures { count: 2 }, 2, 2),
        ]
    );
}

#[test]
fn the_function_gets_the_windows_rates_and_the_configured_wait() {
    let seen = Arc::new(Mutex::new(None));
    let log = seen.clone();
    let config = BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(10 * S)
        .open_duration_fn(move |a| {
            *log.lock().unwrap() = Some(a.clone());
            a.configured * 3
        })
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("rates", config, ManualClock::new());
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    fail(&b);
    let retry = tripline::Classification::new(Outcome::Failure).with_retry_after(5 * S);
    let _ = b.try_acquire().unwrap().record_classified(retry);
    assert_eq!(b.state(), State::Open);
    let a = seen.lock().unwrap().clone().unwrap();
    assert_eq!((a.failures, a.calls, a.failure_rate), (2, 4, 50.0));
    assert_eq!(
        (a.reason, a.retry_after),
        (Reason::FailureRate, Some(5 * S))
    );
    assert_eq!(a.configured, 10 * S);
    assert_eq!(retry_after(&b), Some(30 * S));
}

#[test]
fn the_functions_result_is_clamped_to_the_open_durations_bounds() {
    let (b, clock) = breaker(|a| {
        if a.attempt == 1 {
            Duration::ZERO
        } else {
            Duration::MAX
        }
    });
    fail(&b);
    fail(&b);
    assert_eq!(retry_after(&b), Some(Duration::from_millis(1)));
    clock.advance(Duration::from_millis(1));
    fail(&b); // attempt 2: as long as it may be
    assert_eq!(retry_after(&b), Some(7 * 24 * 3600 * S));
}

#[test]
fn a_panicking_function_falls_back_to_the_configured_wait_and_is_counted() {
    let (b, clock) = breaker(|a| {
        if a.attempt == 1 {
            panic!("a bug in the open-wait function");
        }
        3 * S
    });
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), State::Open);
    assert_eq!(retry_after(&b), Some(10 * S), "the configured wait");
    assert_eq!(b.metrics().open_wait_panics, 1);
    // The breaker goes on working, and so does the function.
    clock.advance(10 * S);
    fail(&b);
    assert_eq!(retry_after(&b), Some(3 * S));
    clock.advance(3 * S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn an_operators_explicit_wait_is_not_the_functions() {
    let (b, _clock) = breaker(|_| 42 * S);
    b.transition_to_open_for(5 * S).unwrap();
    assert_eq!(retry_after(&b), Some(5 * S));
    b.reset();
    b.trip(); // as if the rules had fired: the function decides
    assert_eq!(retry_after(&b), Some(42 * S));
}

#[test]
fn a_configuration_with_a_function_compares_and_prints() {
    let a = BreakerConfig::builder()
        .open_duration_fn(|_| S)
        .build()
        .unwrap();
    assert_eq!(a, a.clone());
    assert_eq!(a.to_builder().build().unwrap(), a);
    assert_ne!(a, BreakerConfig::default());
    assert!(format!("{a:?}").contains("OpenDurationFn(..)"));
    #[cfg(feature = "serde")]
    {
        // No serialized form: written out, it reads back without the function.
        let back: BreakerConfig = toml::from_str(&toml::to_string(&a).unwrap()).unwrap();
        assert!(back.open_duration_fn().is_none());
        assert_eq!(back, BreakerConfig::default());
    }
}
