//! The failure-count-in-time rule (Shopify Semian's classic breaker: `error_threshold` errors
//! within `error_timeout`, then `success_threshold` successes in half-open) in the in-process
//! breaker, on a manual clock.

use std::time::Duration;

use tripline::{
    BreakerConfig, CircuitBreaker, Classification, EventKind, EventLog, FailureCount, FailureKind,
    HalfOpenPolicy, ManualClock, Outcome, Reason, Recorded, State,
};

const S: Duration = Duration::from_secs(1);

/// Semian's experiment settings for its classic breaker: 12 errors in 20 s, 15 s open, 2
/// successes to close. A window no rate can trip, so only the new rule decides.
fn classic() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(1000)
        .minimum_calls(1000)
        .slow_call_rule(false)
        .failure_count(12, 20 * S)
        .open_duration(15 * S)
        .half_open_calls(2)
        .half_open_policy(HalfOpenPolicy::Consecutive)
        .build()
        .unwrap()
}

fn breaker(config: BreakerConfig) -> (CircuitBreaker<ManualClock>, ManualClock, EventLog) {
    let clock = ManualClock::new();
    let b = CircuitBreaker::with_clock("classic", config, clock.clone());
    let log = EventLog::new();
    b.subscribe(log.clone());
    (b, clock, log)
}

fn fail(b: &CircuitBreaker<ManualClock>) -> Recorded {
    b.try_acquire().expect("admitted").record(Outcome::Failure)
}

fn succeed(b: &CircuitBreaker<ManualClock>) {
    b.try_acquire().expect("admitted").record(Outcome::Success);
}

fn trips(log: &EventLog) -> Vec<Reason> {
    log.events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Transition {
                to: State::Open,
                reason,
                ..
            } => Some(reason),
            _ => None,
        })
        .collect()
}

#[test]
fn twelve_errors_in_twenty_seconds_open_the_breaker() {
    let (b, clock, log) = breaker(classic());
    for i in 0..12 {
        assert_eq!(b.state(), State::Closed, "after {i} errors");
        assert_eq!(fail(&b), Recorded::Counted);
        clock.advance(S);
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(trips(&log), [Reason::FailureCount { count: 12 }]);
}

#[test]
fn errors_older_than_the_timeout_do_not_count() {
    let (b, clock, log) = breaker(classic());
    // One error every 2 s: by the twelfth, the first is 22 s old. Errors keep coming at that
    // pace for a minute and the breaker never trips.
    for _ in 0..30 {
        fail(&b);
        assert_eq!(b.state(), State::Closed);
        clock.advance(2 * S);
    }
    assert!(trips(&log).is_empty());
    // Eleven quick ones after a pause of 21 s: the old ones do not help them.
    clock.advance(21 * S);
    for _ in 0..11 {
        fail(&b);
    }
    assert_eq!(b.state(), State::Closed);
    fail(&b);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn an_error_exactly_the_timeout_old_still_counts() {
    let config = classic()
        .to_builder()
        .failure_count(2, 20 * S)
        .build()
        .unwrap();
    let (b, clock, _) = breaker(config.clone());
    fail(&b);
    clock.advance(20 * S);
    fail(&b);
    assert_eq!(b.state(), State::Open, "20 s apart: within 20 s");
    let (b, clock, _) = breaker(config);
    fail(&b);
    clock.advance(20 * S + Duration::from_nanos(1));
    fail(&b);
    assert_eq!(b.state(), State::Closed, "1 ns too far apart");
}

#[test]
fn successes_do_not_dilute_the_failure_count() {
    let (b, clock, _) = breaker(classic());
    // 12 errors among 825 successes (1.4 %): far below any rate, but 12 within 17 s.
    for i in 0..=836 {
        assert_eq!(b.state(), State::Closed);
        if i % 76 == 0 {
            fail(&b);
        } else {
            succeed(&b);
        }
        clock.advance(Duration::from_millis(20));
    }
    assert_eq!(b.state(), State::Open);
}

#[test]
fn two_successes_in_half_open_close_a_classic_breaker() {
    let (b, clock, log) = breaker(classic());
    for _ in 0..12 {
        fail(&b);
    }
    assert_eq!(b.state(), State::Open);
    clock.advance(15 * S);
    let p1 = b.try_acquire().unwrap();
    let p2 = b.try_acquire().unwrap();
    assert!(p1.is_probe() && p2.is_probe());
    assert!(b.try_acquire().is_err(), "two probes at most");
    p1.record(Outcome::Success);
    assert_eq!(b.state(), State::HalfOpen);
    p2.record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    // A failed probe reopens at once, as Semian's half-open does.
    for _ in 0..12 {
        fail(&b);
    }
    clock.advance(15 * S);
    b.try_acquire().unwrap().record(Outcome::Failure);
    assert_eq!(b.state(), State::Open);
    assert_eq!(trips(&log).len(), 3);
}

#[test]
fn failures_before_a_trip_do_not_count_after_recovery() {
    let config = classic()
        .to_builder()
        .failure_count(3, 20 * S)
        .half_open_calls(1)
        .build()
        .unwrap();
    let (b, clock, _) = breaker(config);
    for _ in 0..3 {
        fail(&b);
    }
    clock.advance(15 * S);
    b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    // The three failures of the last Closed period are within 20 s, but they are not this
    // period's: two new ones do not trip.
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), State::Closed);
    fail(&b);
    assert_eq!(b.state(), State::Open);
    // An operator's reset also starts the count over.
    b.reset();
    fail(&b);
    fail(&b);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn a_failure_of_a_kind_counts_its_weight_and_a_lumped_one_not_at_all() {
    let config = classic()
        .to_builder()
        .failure_count(4, 20 * S)
        .failure_kind_weight(FailureKind::Timeout, 3)
        .failure_kind_weight(FailureKind::RateLimited, 0)
        .build()
        .unwrap();
    let (b, _, _) = breaker(config.clone());
    let p = b.try_acquire().unwrap();
    assert_eq!(
        p.record_classified(Classification::failure(FailureKind::RateLimited)),
        Recorded::Ignored
    );
    b.try_acquire()
        .unwrap()
        .record_classified(Classification::failure(FailureKind::Timeout));
    assert_eq!(b.state(), State::Closed, "3 of 4");
    fail(&b);
    assert_eq!(b.state(), State::Open);

    let lumping = config.to_builder().lumping_interval(S).build().unwrap();
    let (b, clock, _) = breaker(lumping);
    for _ in 0..10 {
        fail(&b);
    }
    assert_eq!(
        b.state(),
        State::Closed,
        "ten failures in one lump count once"
    );
    for _ in 0..3 {
        clock.advance(S);
        fail(&b);
    }
    assert_eq!(b.state(), State::Open);
}

#[test]
fn the_failure_count_rule_trips_beside_the_rate_rules() {
    // Both rules on: a burst trips by count before the window has its minimum, and a steady
    // failure rate trips by rate with the count rule far from firing.
    let config = BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(10)
        .failure_rate_threshold(50.0)
        .slow_call_rule(false)
        .failure_count(3, S)
        .build()
        .unwrap();
    let (b, clock, log) = breaker(config.clone());
    for _ in 0..3 {
        fail(&b);
    }
    assert_eq!(trips(&log), [Reason::FailureCount { count: 3 }]);
    let (b, clock2, log) = breaker(config);
    drop(clock);
    for i in 0..10 {
        if i % 2 == 0 {
            fail(&b);
        } else {
            succeed(&b);
        }
        clock2.advance(S);
    }
    assert_eq!(trips(&log), [Reason::FailureRate]);
}

#[test]
fn shadow_mode_reports_the_failure_count_rule_once_while_it_fires() {
    let config = classic()
        .to_builder()
        .failure_count(3, 10 * S)
        .build()
        .unwrap();
    let (b, clock, log) = breaker(config);
    b.metrics_only();
    for _ in 0..5 {
        fail(&b);
    }
    assert_eq!(b.state(), State::MetricsOnly);
    let would = |log: &EventLog| {
        log.events()
            .into_iter()
            .filter(|e| {
                matches!(
                    e.kind,
                    EventKind::WouldTrip {
                        reason: Reason::FailureCount { .. },
                        ..
                    }
                )
            })
            .count()
    };
    assert_eq!(would(&log), 1, "reported when it starts firing, once");
    // Its failures age out: it stops firing, and the next burst is reported again.
    clock.advance(11 * S);
    succeed(&b);
    for _ in 0..3 {
        fail(&b);
    }
    assert_eq!(would(&log), 2);
}

#[test]
fn the_timeout_is_reconfigured_live_and_the_count_is_part_of_the_shape() {
    let (b, clock, log) = breaker(classic());
    for _ in 0..12 {
        fail(&b);
        clock.advance(2 * S);
    }
    assert_eq!(b.state(), State::Closed, "12 errors over 24 s");
    // A longer timeout takes the same errors in: the window is judged at once.
    let longer = classic()
        .to_builder()
        .failure_count(12, 30 * S)
        .build()
        .unwrap();
    b.reconfigure(longer).unwrap();
    assert_eq!(trips(&log), [Reason::FailureCount { count: 12 }]);
    let other_count = classic()
        .to_builder()
        .failure_count(5, 20 * S)
        .build()
        .unwrap();
    let err = b.reconfigure(other_count).unwrap_err();
    assert_eq!(err.field(), "failure_count.failures");
    let off = classic().to_builder().build().unwrap();
    assert!(b.reconfigure(off).is_ok(), "the same rule: accepted");
    let rule_off = BreakerConfig::builder()
        .count_window(1000)
        .minimum_calls(1000)
        .build()
        .unwrap();
    assert_eq!(
        b.reconfigure(rule_off).unwrap_err().field(),
        "failure_count.failures"
    );
}

#[test]
fn a_breaker_without_the_rule_needs_no_clock_and_with_it_needs_one() {
    let off = BreakerConfig::builder()
        .slow_call_rule(false)
        .build()
        .unwrap();
    assert!(!off.needs_time());
    assert_eq!(off.failure_count(), None);
    let on = off.to_builder().failure_count(3, S).build().unwrap();
    assert!(on.needs_time());
    assert_eq!(on.finest_duration(), Some(S));
}

#[test]
fn the_rule_holds_on_clocks_far_from_zero() {
    for origin in [1_700_000_000u64 * 1_000_000_000, u64::MAX - 100_000_000_000] {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(origin));
        let b = CircuitBreaker::with_clock("far", classic(), clock.clone());
        for _ in 0..11 {
            fail(&b);
            clock.advance(S);
        }
        assert_eq!(b.state(), State::Closed, "origin {origin}");
        fail(&b);
        assert_eq!(b.state(), State::Open, "origin {origin}: 12 within 20 s");
    }
}

#[test]
fn bad_failure_count_settings_name_the_field_value_and_range() {
    let e = |b: tripline::BreakerConfigBuilder| b.build().unwrap_err().to_string();
    assert_eq!(
        e(BreakerConfig::builder().failure_count(1001, S)),
        "failure_count.failures must be in [1, 1000], got 1001"
    );
    assert_eq!(
        e(BreakerConfig::builder().failure_count(3, Duration::from_micros(10))),
        "failure_count.within must be between 1ms and 7days, got 10us"
    );
}

#[cfg(feature = "serde")]
#[test]
fn the_failure_count_rule_reads_from_toml_and_writes_back_equal() {
    let c: BreakerConfig =
        toml::from_str("failure_count = { failures = 12, within = \"20s\" }\n").unwrap();
    assert_eq!(
        c.failure_count(),
        Some(FailureCount {
            failures: 12,
            within: 20 * S
        })
    );
    let back: BreakerConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
    let err =
        toml::from_str::<BreakerConfig>("failure_count = { failures = 0, within = \"20s\" }\n")
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("failure_count.failures must be in [1, 1000], got 0"),
        "{err}"
    );
    let err =
        toml::from_str::<BreakerConfig>("failure_count = { failures = 3, within = \"0s\" }\n")
            .unwrap_err()
            .to_string();
    assert!(err.contains("failure_count.within"), "{err}");
    let err = toml::from_str::<BreakerConfig>("failure_count = { failures = 3 }\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("within"), "{err}");
    let err = toml::from_str::<BreakerConfig>(
        "failure_count = { failures = 3, within = \"1s\", x = 1 }\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains('x'), "{err}");
}
