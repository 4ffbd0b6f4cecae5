//! Per-generation counts (`CircuitBreaker::counts`, gobreaker's `Counts`): cleared at every
//! generation change, every admitted call accounted for, stale results left out; gobreaker's
//! own scenarios ported.

use std::time::Duration;

use tripline::{
    BreakerConfig, CircuitBreaker, Counts, FailureKind, ManualClock, Outcome, Recorded, State,
};

fn breaker(config: BreakerConfig) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (
        CircuitBreaker::with_clock("counted", config, clock.clone()),
        clock,
    )
}

/// gobreaker's `Counts{Requests, TotalSuccesses, TotalFailures, ConsecutiveSuccesses,
/// ConsecutiveFailures}`.
fn gobreaker(c: Counts) -> [u64; 5] {
    [
        c.requests,
        c.successes,
        c.failures,
        c.consecutive_successes,
        c.consecutive_failures,
    ]
}

fn succeed(b: &CircuitBreaker<ManualClock>) -> bool {
    b.call(|| Ok::<_, ()>(())).is_ok()
}

/// Whether the call was admitted (it fails).
fn fail(b: &CircuitBreaker<ManualClock>) -> bool {
    !matches!(
        b.call(|| Err::<(), _>("fail")),
        Err(tripline::CallError::Rejected(_))
    )
}

/// Every admitted call is in exactly one column.
fn balanced(c: &Counts) -> bool {
    c.requests
        == c.successes + c.failures + c.ignored + c.abandoned + c.expired_probes + c.in_flight
}

fn zero(c: &Counts) -> bool {
    gobreaker(*c) == [0; 5]
        && c.ignored == 0
        && c.abandoned == 0
        && c.in_flight == 0
        && c.rejected == 0
        && c.expired_probes == 0
}

#[test]
fn counts_clear_at_every_transition() {
    let config = BreakerConfig::builder()
        .consecutive_failures(2)
        .half_open_calls(1)
        .open_duration(Duration::from_secs(10))
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    assert!(succeed(&b));
    assert!(fail(&b));
    assert_eq!(gobreaker(b.counts()), [2, 1, 1, 0, 1]);
    assert!(fail(&b)); // trips
    let c = b.counts();
    assert_eq!((c.state, c.generation), (State::Open, 1));
    assert!(zero(&c), "{c:?}");
    assert!(!succeed(&b));
    assert_eq!(b.counts().rejected, 1);

    clock.advance(Duration::from_secs(10));
    let probe = b.try_acquire().unwrap();
    let c = b.counts();
    assert_eq!((c.state, c.generation), (State::HalfOpen, 2));
    assert_eq!((c.requests, c.in_flight, c.rejected), (1, 1, 0));
    probe.record(Outcome::Success);
    let c = b.counts();
    assert_eq!((c.state, c.generation), (State::Closed, 3));
    assert!(zero(&c), "{c:?}");

    assert!(succeed(&b));
    b.reset(); // Closed to Closed: a new generation all the same
    let c = b.counts();
    assert_eq!(c.generation, 4);
    assert!(zero(&c), "{c:?}");

    b.force_open();
    assert!(!succeed(&b));
    let c = b.counts();
    assert_eq!((c.state, c.requests, c.rejected), (State::ForcedOpen, 0, 1));
    b.reset();
    assert!(zero(&b.counts()));
}

#[test]
fn requests_equal_every_result_plus_in_flight_plus_abandoned_within_a_generation() {
    let config = BreakerConfig::builder()
        .failure_kind_weight(FailureKind::RateLimited, 0)
        .build()
        .unwrap();
    let (b, _clock) = breaker(config);
    let mut pending = Vec::new();
    for i in 0..40 {
        let p = b.try_acquire().unwrap();
        match i % 5 {
            0 => {
                p.record(Outcome::Success);
            }
            1 => {
                p.record(Outcome::Failure);
            }
            2 => {
                p.record(Outcome::Ignored);
            }
            3 => drop(p),
            _ => pending.push(p),
        }
        assert!(balanced(&b.counts()), "{:?}", b.counts());
    }
    // A failure of a kind weighing 0 is ignored.
    let p = b.try_acquire().unwrap();
    p.record_classified(tripline::Classification::failure(FailureKind::RateLimited));
    let c = b.counts();
    assert_eq!(
        (
            c.requests,
            c.successes,
            c.failures,
            c.ignored,
            c.abandoned,
            c.in_flight
        ),
        (41, 8, 8, 9, 8, 8)
    );
    assert!(balanced(&c));
    for p in pending.drain(..) {
        p.record(Outcome::Success);
    }
    let c = b.counts();
    assert_eq!((c.successes, c.in_flight), (16, 0));
    assert!(balanced(&c));
    // The lifetime metrics hold the same totals.
    let m = b.metrics();
    assert_eq!(
        (
            m.successful_calls,
            m.failed_calls,
            m.ignored_calls,
            m.abandoned_permits
        ),
        (16, 8, 9, 8)
    );
}

#[test]
fn stale_results_of_an_old_generation_are_not_counted_in_the_new_one() {
    let (b, _clock) = breaker(BreakerConfig::default());
    let old: Vec<_> = (0..6).map(|_| b.try_acquire().unwrap()).collect();
    assert_eq!(b.counts().in_flight, 6);
    b.reset();
    let fresh = b.try_acquire().unwrap();
    let mut old = old.into_iter();
    for outcome in [Outcome::Success, Outcome::Failure, Outcome::Ignored] {
        assert_eq!(old.next().unwrap().record(outcome), Recorded::Stale);
    }
    // Abandoned after its generation ended: not this generation's either.
    drop(old.next());
    drop(old);
    let c = b.counts();
    assert_eq!(c.generation, 1);
    assert_eq!(
        (
            c.requests,
            c.successes,
            c.failures,
            c.ignored,
            c.abandoned,
            c.in_flight
        ),
        (1, 0, 0, 0, 0, 1),
        "{c:?}"
    );
    fresh.record(Outcome::Success);
    assert_eq!(gobreaker(b.counts()), [1, 1, 0, 1, 0]);
    let m = b.metrics();
    assert_eq!((m.stale_results, m.abandoned_permits), (3, 3));
}

#[test]
fn half_open_counts_its_probes_and_reclaimed_leases() {
    let config = BreakerConfig::builder()
        .consecutive_failures(1)
        .half_open_calls(2)
        .probe_lease(Duration::from_secs(5))
        .open_duration(Duration::from_secs(10))
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    assert!(fail(&b));
    clock.advance(Duration::from_secs(10));
    let a = b.try_acquire().unwrap();
    let late = b.try_acquire().unwrap();
    assert!(b.try_acquire().is_err(), "both probe slots are taken");
    let c = b.counts();
    assert_eq!((c.requests, c.in_flight, c.rejected), (2, 2, 1));
    a.record(Outcome::Success);
    clock.advance(Duration::from_secs(5));
    // The next acquire reclaims the expired lease, and takes its slot.
    let again = b.try_acquire().unwrap();
    let c = b.counts();
    assert_eq!(
        (c.requests, c.successes, c.expired_probes, c.in_flight),
        (3, 1, 1, 1),
        "{c:?}"
    );
    assert!(balanced(&c));
    // The reclaimed probe's late result is stale, and dropping it after that costs nothing.
    assert_eq!(late.record(Outcome::Failure), Recorded::Stale);
    assert_eq!(b.counts(), c);
    drop(again);
    let c = b.counts();
    assert_eq!((c.abandoned, c.in_flight), (1, 0));
    assert!(balanced(&c));
}

#[test]
fn a_striped_breaker_counts_every_stripe() {
    let config = BreakerConfig::builder().stripes(4).build().unwrap();
    let b = CircuitBreaker::new("striped", config);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..1000 {
                    b.call(|| Ok::<_, ()>(())).unwrap();
                }
            });
        }
    });
    // gobreaker's `TestCircuitBreakerInParallel`: every success of every thread is counted.
    let c = b.counts();
    assert_eq!(
        [
            c.requests,
            c.successes,
            c.failures,
            c.consecutive_successes,
            c.consecutive_failures
        ],
        [4000, 4000, 0, 4000, 0]
    );
}

/// gobreaker's `TestDefaultCircuitBreaker`: trip after more than five consecutive failures,
/// 60 s open, one probe.
#[test]
fn gobreakers_default_scenario_counts_alike() {
    let config = BreakerConfig::builder()
        .consecutive_failures(6)
        .half_open_calls(1)
        .open_duration(Duration::from_secs(60))
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    for _ in 0..5 {
        assert!(fail(&b));
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(gobreaker(b.counts()), [5, 0, 5, 0, 5]);

    assert!(succeed(&b));
    assert_eq!(gobreaker(b.counts()), [6, 1, 5, 1, 0]);

    assert!(fail(&b));
    assert_eq!(gobreaker(b.counts()), [7, 1, 6, 0, 1]);

    // Closed to Open.
    for _ in 0..5 {
        assert!(fail(&b));
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(gobreaker(b.counts()), [0; 5]);

    assert!(!succeed(&b));
    assert!(!fail(&b));
    assert_eq!(gobreaker(b.counts()), [0; 5]);
    assert_eq!(b.counts().rejected, 2);

    clock.advance(Duration::from_secs(59));
    assert!(!succeed(&b));
    assert_eq!(b.state(), State::Open);

    // Open to HalfOpen, and back to Open.
    clock.advance(Duration::from_secs(1));
    assert!(fail(&b));
    assert_eq!(b.state(), State::Open);
    assert_eq!(gobreaker(b.counts()), [0; 5]);

    // Open to HalfOpen to Closed.
    clock.advance(Duration::from_secs(60));
    assert!(succeed(&b));
    assert_eq!(b.state(), State::Closed);
    assert_eq!(gobreaker(b.counts()), [0; 5]);
}

/// gobreaker's `TestCustomCircuitBreaker`: `Interval` 30 s, `Timeout` 90 s, `MaxRequests` 3,
/// trip at 3 requests or more with a failure ratio of at least 0.6.
#[test]
fn gobreakers_custom_scenario_counts_alike() {
    let config = BreakerConfig::builder()
        .count_window(100)
        .minimum_calls(3)
        .failure_rate_threshold(60.0)
        .interval(Duration::from_secs(30))
        .open_duration(Duration::from_secs(90))
        .half_open_calls(3)
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    for _ in 0..5 {
        assert!(succeed(&b));
        assert!(fail(&b));
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(gobreaker(b.counts()), [10, 5, 5, 0, 1]);

    clock.advance(Duration::from_secs(29));
    assert!(succeed(&b));
    assert_eq!(b.state(), State::Closed);
    assert_eq!(gobreaker(b.counts()), [11, 6, 5, 1, 0]);

    clock.advance(Duration::from_secs(1)); // over the interval
    assert!(fail(&b));
    assert_eq!(b.state(), State::Closed);
    assert_eq!(gobreaker(b.counts()), [1, 0, 1, 0, 1]);

    // Closed to Open: 2 failures of 3.
    assert!(succeed(&b));
    assert!(fail(&b));
    assert_eq!(b.state(), State::Open);
    assert_eq!(gobreaker(b.counts()), [0; 5]);

    // Open to HalfOpen.
    clock.advance(Duration::from_secs(90));
    assert!(succeed(&b));
    assert!(succeed(&b));
    assert_eq!(b.state(), State::HalfOpen);
    assert_eq!(gobreaker(b.counts()), [2, 2, 0, 2, 0]);

    // HalfOpen to Closed: the third probe is in flight, a fourth call is refused.
    let third = b.try_acquire().unwrap();
    assert_eq!(gobreaker(b.counts()), [3, 2, 0, 2, 0]);
    assert!(!succeed(&b), "over MaxRequests");
    third.record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(gobreaker(b.counts()), [0; 5]);
}

/// gobreaker's `TestGeneration`: a request of the previous generation has no effect on the
/// counts of the next.
#[test]
fn gobreakers_generation_scenario_discards_the_previous_intervals_request() {
    let config = BreakerConfig::builder()
        .interval(Duration::from_secs(30))
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    clock.advance(Duration::from_secs(29));
    assert!(succeed(&b));
    let slow = b.try_acquire().unwrap();
    assert_eq!(gobreaker(b.counts()), [2, 1, 0, 1, 0]);

    clock.advance(Duration::from_secs(1)); // over the interval
    b.tick();
    assert_eq!(b.state(), State::Closed);
    assert_eq!(gobreaker(b.counts()), [0; 5]);

    assert_eq!(slow.record(Outcome::Success), Recorded::Stale);
    assert_eq!(gobreaker(b.counts()), [0; 5]);
}
