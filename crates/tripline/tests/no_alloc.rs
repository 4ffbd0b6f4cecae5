//! The hot path allocates nothing: acquire and record in Closed, rejection in Open.

use std::time::Duration;

use tripline::{
    BreakerConfig, CircuitBreaker, Classification, FailureKind, MonotonicClock, Outcome,
};

fn allocations(f: impl FnOnce()) -> u64 {
    allocation_counter::measure(f).count_total
}

#[test]
fn hot_paths_do_not_allocate() {
    for config in [
        BreakerConfig::builder().count_window(100).build().unwrap(),
        BreakerConfig::builder()
            .time_window(Duration::from_secs(10), Duration::from_secs(1))
            .stripes(4)
            .build()
            .unwrap(),
    ] {
        let breaker = CircuitBreaker::with_clock("dep", config, MonotonicClock::new());
        // Warm up (the thread-local stripe index, quanta's calibration).
        for _ in 0..10 {
            let _ = breaker.try_acquire().unwrap().record(Outcome::Success);
        }
        let n = allocations(|| {
            for i in 0..10_000 {
                let p = breaker.try_acquire().unwrap();
                let _ = p.record(if i % 10 == 0 {
                    Outcome::Failure
                } else {
                    Outcome::Success
                });
            }
        });
        assert_eq!(n, 0, "closed acquire + record allocated");
        let n = allocations(|| {
            for _ in 0..10_000 {
                let _ = breaker
                    .try_acquire_owned()
                    .unwrap()
                    .record(Outcome::Success);
            }
        });
        assert_eq!(n, 0, "owned acquire + record allocated");
        breaker.force_open();
        let _ = breaker.try_acquire();
        let n = allocations(|| {
            for _ in 0..10_000 {
                assert!(breaker.try_acquire().is_err());
            }
        });
        assert_eq!(n, 0, "open rejection allocated");
    }
}

/// The new ways to record allocate nothing either: an explicit duration, a failure kind with a
/// weight, lumping, and windows that keep call durations. (The first kinded or lumped failure
/// allocates the part transitions need, once, like the first transition; the warm-up makes it.)
#[test]
fn recording_with_durations_kinds_and_lumping_does_not_allocate() {
    for config in [
        BreakerConfig::builder()
            .count_window(100)
            .call_durations(true)
            .lumping_interval(Duration::from_millis(1))
            .failure_kind_weight(FailureKind::Timeout, 2)
            .failure_kind_weight(FailureKind::RateLimited, 0)
            .build()
            .unwrap(),
        BreakerConfig::builder()
            .time_window(Duration::from_secs(10), Duration::from_secs(1))
            .stripes(4)
            .call_durations(true)
            .build()
            .unwrap(),
    ] {
        let breaker = CircuitBreaker::with_clock("dep", config, MonotonicClock::new());
        let kinds = [
            Classification::failure(FailureKind::Timeout),
            Classification::failure(FailureKind::RateLimited),
            Classification::new(Outcome::Failure),
        ];
        for c in kinds {
            let _ = breaker.try_acquire().unwrap().record_classified(c);
        }
        for _ in 0..10 {
            let _ = breaker.try_acquire().unwrap().record(Outcome::Success);
        }
        let n = allocations(|| {
            for i in 0..10_000u64 {
                let p = breaker.try_acquire().unwrap();
                let d = Duration::from_micros(i % 1000);
                let _ = if i % 50 == 0 {
                    p.record_with_duration(kinds[(i / 50 % 3) as usize], d)
                } else {
                    p.record_with_duration(Outcome::Success, d)
                };
            }
            let _ = breaker.metrics();
        });
        assert_eq!(
            n, 0,
            "recording with durations, kinds and lumping allocated"
        );
    }
}

/// A breaker that never leaves Closed holds only its closed-path part: reading its metrics and
/// configuration allocates nothing, and the part transitions need appears with the first one.
#[test]
fn the_transition_part_is_allocated_on_first_use() {
    let clock = tripline::ManualClock::new();
    let config = std::sync::Arc::new(BreakerConfig::builder().count_window(100).build().unwrap());
    let breaker = CircuitBreaker::with_clock("dep", config.clone(), clock.clone());
    let closed_bytes = breaker.memory_bytes();
    let n = allocations(|| {
        for i in 0..100 {
            let _ = breaker.try_acquire().unwrap().record(if i % 5 == 0 {
                Outcome::Failure
            } else {
                Outcome::Success
            });
        }
        drop(breaker.try_acquire().unwrap()); // abandoned
        clock.advance(Duration::from_secs(3));
        let m = breaker.metrics();
        assert_eq!(
            (m.successful_calls, m.failed_calls, m.abandoned_permits),
            (80, 20, 1)
        );
        assert_eq!(
            (m.transitions, m.rejected_calls, m.time_open),
            (0, 0, Duration::ZERO)
        );
        assert_eq!(breaker.next_deadline(), None);
        assert_eq!(breaker.tick(), None);
    });
    assert_eq!(n, 0, "a closed breaker allocated");
    assert_eq!(breaker.memory_bytes(), closed_bytes);
    // The configuration is shared, not copied.
    assert_eq!(std::sync::Arc::strong_count(&config), 2);
    assert_eq!(breaker.config(), *config);

    breaker.trip();
    assert!(breaker.memory_bytes() > closed_bytes);
    clock.advance(Duration::from_secs(2));
    assert!(breaker.try_acquire().is_err());
    let m = breaker.metrics();
    assert_eq!((m.transitions, m.rejected_calls), (1, 1));
    assert_eq!(m.time_open, Duration::from_secs(2));
    assert_eq!(m.successful_calls, 80);
}

/// A breaker whose listeners want no outcome events pays nothing for them: acquire and record
/// still take no lock and allocate nothing once a transition listener is subscribed (the cold
/// part exists, the outcome check is one load). With the trace recorder subscribed, the
/// calling thread only moves an entry into the recorder's preallocated queue: no allocation
/// either.
#[cfg(feature = "trace")]
#[test]
fn outcome_events_cost_nothing_unless_asked_and_the_recorder_does_not_allocate() {
    let breaker = CircuitBreaker::with_clock(
        "dep",
        BreakerConfig::builder().count_window(100).build().unwrap(),
        MonotonicClock::new(),
    );
    breaker.subscribe(|_: &tripline::Event| {});
    for _ in 0..10 {
        let _ = breaker.try_acquire().unwrap().record(Outcome::Success);
    }
    let n = allocations(|| {
        for i in 0..10_000 {
            let _ = breaker.try_acquire().unwrap().record(if i % 10 == 0 {
                Outcome::Failure
            } else {
                Outcome::Success
            });
        }
    });
    assert_eq!(
        n, 0,
        "acquire + record with a transition listener allocated"
    );

    let recorder = tripline::trace::TraceRecorder::new(
        std::io::sink(),
        tripline::trace::RecorderConfig::default().capacity(1 << 16),
    )
    .unwrap();
    breaker.subscribe(recorder.listener());
    for _ in 0..10 {
        let _ = breaker.try_acquire().unwrap().record(Outcome::Success);
    }
    recorder.flush().unwrap();
    let n = allocations(|| {
        for _ in 0..1_000 {
            let _ = breaker.try_acquire().unwrap().record(Outcome::Success);
        }
    });
    assert_eq!(n, 0, "recording an outcome to the trace allocated");
    recorder.flush().unwrap();
    assert_eq!(recorder.stats().written, 1_010);
}

#[test]
fn a_ramp_admits_and_refuses_without_allocating() {
    let clock = tripline::ManualClock::new();
    let config = BreakerConfig::builder()
        .count_window(100)
        .open_duration(Duration::from_secs(1))
        .half_open_calls(1)
        .ramp_up(tripline::RampUp {
            from: 10.0,
            over: Duration::from_secs(10),
            steps: 10,
            curve: tripline::RampCurve::Exponential,
        })
        .build()
        .unwrap();
    let breaker = CircuitBreaker::with_clock("dep", config, clock.clone());
    breaker.trip();
    clock.advance(Duration::from_secs(1));
    let _ = breaker.try_acquire().unwrap().record(Outcome::Success);
    let (mut admitted, mut refused) = (0, 0);
    let n = allocations(|| {
        for i in 0..10_000 {
            if i % 1000 == 999 {
                clock.advance(Duration::from_secs(1));
            }
            match breaker.try_acquire() {
                Ok(p) => {
                    admitted += 1;
                    let _ = p.record(Outcome::Success);
                }
                Err(_) => refused += 1,
            }
        }
    });
    assert_eq!(n, 0, "a ramping breaker allocated");
    assert!(
        admitted > 0 && refused > 0,
        "{admitted} admitted, {refused} refused"
    );
}
