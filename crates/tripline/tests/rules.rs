//! Rules that the conformance vectors do not express: open-wait growth, jitter, Retry-After,
//! events, metrics, reconfiguration, and concurrency.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tripline::{
    Backoff, BreakerConfig, CircuitBreaker, Classification, Event, EventKind, EventLog,
    HalfOpenPolicy, ManualClock, Outcome, Reason, Recorded, State,
};

const S: Duration = Duration::from_secs(1);

fn quick(builder: tripline::BreakerConfigBuilder) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = builder
        .count_window(2)
        .minimum_calls(2)
        .count_in_flight_as_slow(false)
        .seed(7)
        .build()
        .unwrap();
    (
        CircuitBreaker::with_clock("dep", config, clock.clone()),
        clock,
    )
}

fn fail(b: &CircuitBreaker<ManualClock>, n: usize) {
    for _ in 0..n {
        let _ = b.call(|| Err::<(), _>("boom"));
    }
}

fn open_for(log: &EventLog) -> Vec<Duration> {
    log.events()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Transition {
                to: State::Open,
                open_for,
                ..
            } => open_for,
            _ => None,
        })
        .collect()
}

#[test]
fn open_wait_grows_on_reopen_and_decays_only_after_sustained_health() {
    let (b, clock) = quick(
        BreakerConfig::builder()
            .open_duration(10 * S)
            .half_open_calls(1)
            .open_backoff(Backoff {
                multiplier: 2.0,
                max: 35 * S,
                healthy_after: 60 * S,
            }),
    );
    let log = EventLog::new();
    b.subscribe(log.clone());
    fail(&b, 2); // trip: 10 s
    for _ in 0..3 {
        clock.advance(Duration::from_secs(40));
        fail(&b, 1); // failed probe: reopen, longer each time
    }
    assert_eq!(open_for(&log), vec![10 * S, 20 * S, 35 * S, 35 * S]);
    // Recover, then flap back within healthy_after: the wait stays grown.
    clock.advance(Duration::from_secs(40));
    b.call(|| Ok::<_, ()>(())).unwrap();
    assert_eq!(b.state(), State::Closed);
    clock.advance(Duration::from_secs(5));
    fail(&b, 2);
    assert_eq!(open_for(&log).last(), Some(&(35 * S)));
    // Recover and stay healthy for longer than healthy_after: back to the base wait.
    clock.advance(Duration::from_secs(40));
    b.call(|| Ok::<_, ()>(())).unwrap();
    clock.advance(Duration::from_secs(61));
    fail(&b, 2);
    assert_eq!(open_for(&log).last(), Some(&(10 * S)));
}

#[test]
fn jitter_stays_in_bounds_and_is_reproducible_with_a_seed() {
    let run = || {
        let (b, clock) = quick(
            BreakerConfig::builder()
                .open_duration(15 * S)
                .open_jitter(5 * S)
                .half_open_calls(1),
        );
        let log = EventLog::new();
        b.subscribe(log.clone());
        fail(&b, 2);
        for _ in 0..50 {
            clock.advance(Duration::from_secs(30));
            fail(&b, 1);
        }
        open_for(&log)
    };
    let a = run();
    assert_eq!(a.len(), 51);
    assert!(a.iter().all(|d| *d >= 15 * S && *d <= 20 * S), "{a:?}");
    assert!(a.iter().any(|d| *d != a[0]), "jitter should vary: {a:?}");
    assert_eq!(a, run(), "same seed, same waits");
}

#[test]
fn retry_after_extends_the_open_wait_up_to_its_cap() {
    let (b, _clock) = quick(
        BreakerConfig::builder()
            .open_duration(10 * S)
            .max_retry_after(60 * S),
    );
    let _ = b.try_acquire().unwrap().record(Outcome::Failure);
    let p = b.try_acquire().unwrap();
    let _ = p.record_classified(Classification::http(503, Some("120")));
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(60 * S));

    let (b, _clock) = quick(BreakerConfig::builder().open_duration(10 * S));
    let _ = b.try_acquire().unwrap().record(Outcome::Failure);
    let _ = b
        .try_acquire()
        .unwrap()
        .record_classified(Classification::http(429, Some("30")));
    assert_eq!(b.try_acquire().unwrap_err().retry_after(), Some(30 * S));
}

#[test]
fn events_are_sequenced_and_carry_the_decision() {
    let (b, clock) = quick(
        BreakerConfig::builder()
            .open_duration(10 * S)
            .half_open_calls(1),
    );
    let log = EventLog::new();
    b.subscribe(log.clone());
    fail(&b, 2);
    let _ = b.try_acquire().unwrap_err();
    clock.advance(10 * S);
    b.call(|| Ok::<_, ()>(())).unwrap();
    let events = log.events();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(matches!(
        events[0].kind,
        EventKind::Initial {
            state: State::Closed,
            generation: 0
        }
    ));
    let trip = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Transition {
                to: State::Open,
                reason,
                window,
                generation,
                ..
            } => Some((*reason, *window, *generation)),
            _ => None,
        })
        .unwrap();
    assert_eq!(trip.0, Reason::FailureRate);
    assert_eq!((trip.1.calls, trip.1.failures), (2, 2));
    assert_eq!(trip.2, 1);
    assert!(events.iter().any(|e| matches!(
        e.kind,
        EventKind::Rejected {
            state: State::Open,
            ..
        }
    )));
    let close = events.last().unwrap();
    assert!(matches!(
        close.kind,
        EventKind::Transition {
            from: State::HalfOpen,
            to: State::Closed,
            reason: Reason::ProbesSucceeded { probes: 1, .. },
            generation: 3,
            ..
        }
    ));
    assert_eq!(close.at, 10 * S);
}

#[test]
fn a_listener_may_call_back_into_the_breaker_and_a_panicking_one_is_isolated() {
    let (b, _clock) = quick(BreakerConfig::builder());
    let inner = b.clone();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    b.subscribe(move |e: &Event| {
        // Re-entrant: acquire from inside a listener, and trigger a nested transition.
        if let EventKind::Transition {
            to: State::Open, ..
        } = e.kind
        {
            let _ = inner.try_acquire();
            inner.reset();
        }
        seen.fetch_add(1, Ordering::SeqCst);
    });
    b.subscribe(|_: &Event| panic!("listener bug"));
    fail(&b, 2);
    // The nested reset ran, and its event was delivered after the trip's.
    assert_eq!(b.state(), State::Closed);
    assert_eq!(calls.load(Ordering::SeqCst), 3); // initial, trip, reset
    assert!(b.metrics().listener_panics >= 2);
}

#[test]
fn metrics_only_reports_would_trip_once_and_never_trips() {
    let (b, _clock) = quick(BreakerConfig::builder());
    let log = EventLog::new();
    b.metrics_only();
    b.subscribe(log.clone());
    fail(&b, 10);
    assert_eq!(b.state(), State::MetricsOnly);
    let would = log
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::WouldTrip { .. }))
        .count();
    assert_eq!(would, 1);
    // Healthy again, then sick again: reported again.
    for _ in 0..2 {
        b.call(|| Ok::<_, ()>(())).unwrap();
    }
    fail(&b, 2);
    let would = log
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::WouldTrip { .. }))
        .count();
    assert_eq!(would, 2);
}

#[test]
fn metrics_count_outcomes_rejections_and_time_open() {
    let (b, clock) = quick(BreakerConfig::builder().open_duration(10 * S));
    let _ = b.try_acquire().unwrap().record(Outcome::Ignored);
    fail(&b, 2);
    for _ in 0..5 {
        assert!(b.try_acquire().is_err());
    }
    clock.advance(4 * S);
    let stale = b.try_acquire();
    assert!(stale.is_err());
    let m = b.metrics();
    assert_eq!(m.state, State::Open);
    assert_eq!(
        (m.failed_calls, m.ignored_calls, m.rejected_calls),
        (2, 1, 6)
    );
    assert_eq!(m.time_open, 4 * S);
    assert_eq!(m.transitions, 1);
    clock.advance(6 * S);
    let probes: Vec<_> = (0..3).map(|_| b.try_acquire()).collect();
    assert_eq!(b.metrics().probes_in_flight, 3);
    assert_eq!(b.metrics().time_open, 10 * S);
    drop(probes);
    let m = b.metrics();
    assert_eq!((m.probes_in_flight, m.abandoned_permits), (0, 3));
}

#[test]
fn reconfiguration_keeps_state_and_window() {
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(4)
        .failure_rate_threshold(75.0)
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("dep", config.clone(), clock);
    fail(&b, 2);
    b.call(|| Ok::<_, ()>(())).unwrap();
    b.call(|| Ok::<_, ()>(())).unwrap();
    assert_eq!(b.state(), State::Closed); // 50% < 75%
    let generation = b.generation();
    let at = |t: f64| {
        config
            .to_builder()
            .failure_rate_threshold(t)
            .build()
            .unwrap()
    };
    b.reconfigure(at(60.0)).unwrap();
    assert_eq!(b.state(), State::Closed); // 50% < 60%
    assert_eq!(b.generation(), generation);
    assert_eq!(b.metrics().window.calls, 4);
    fail(&b, 1); // 3 of 5 = 60% >= 60%
    assert_eq!(b.state(), State::Open);

    // A lower threshold that condemns the window as it stands trips at once.
    b.reset();
    fail(&b, 2);
    b.call(|| Ok::<_, ()>(())).unwrap();
    b.call(|| Ok::<_, ()>(())).unwrap();
    assert_eq!(b.state(), State::Closed); // 50% < 60%
    b.reconfigure(at(50.0)).unwrap();
    assert_eq!(b.state(), State::Open);
}

#[test]
fn all_probes_policy_judges_slow_probes_too() {
    let (b, clock) = quick(
        BreakerConfig::builder()
            .open_duration(10 * S)
            .half_open_calls(2)
            .slow_call_rate_threshold(50.0)
            .slow_call_duration(2 * S)
            .half_open_policy(HalfOpenPolicy::AllProbes),
    );
    fail(&b, 2);
    clock.advance(10 * S);
    let p1 = b.try_acquire().unwrap();
    clock.advance(3 * S);
    assert_eq!(p1.record(Outcome::Success), Recorded::Counted);
    assert_eq!(
        b.state(),
        State::Open,
        "one slow probe of two is 50%: reopen"
    );
}

#[test]
fn consecutive_rule_resets_on_success() {
    let (b, _clock) = quick(
        BreakerConfig::builder()
            .consecutive_failures(3)
            .failure_rate_threshold(100.0),
    );
    // Failure rate 100% needs both calls of the 2-window to fail; interleave successes.
    for _ in 0..5 {
        let _ = b.call(|| Err::<(), _>(()));
        b.call(|| Ok::<_, ()>(())).unwrap();
    }
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn exactly_k_probes_are_admitted_under_contention() {
    for _ in 0..50 {
        let (b, clock) = quick(
            BreakerConfig::builder()
                .open_duration(10 * S)
                .half_open_calls(3)
                .probe_lease(3600 * S),
        );
        fail(&b, 2);
        clock.advance(10 * S);
        let admitted = AtomicUsize::new(0);
        let transitions = AtomicUsize::new(0);
        let log = EventLog::new();
        b.subscribe(log.clone());
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..20 {
                        if let Ok(p) = b.try_acquire() {
                            admitted.fetch_add(1, Ordering::SeqCst);
                            std::mem::forget(p);
                        }
                    }
                });
            }
        });
        for e in log.events() {
            if matches!(
                e.kind,
                EventKind::Transition {
                    to: State::HalfOpen,
                    ..
                }
            ) {
                transitions.fetch_add(1, Ordering::SeqCst);
            }
        }
        assert_eq!(admitted.load(Ordering::SeqCst), 3);
        assert_eq!(transitions.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn a_trip_under_contention_happens_once() {
    for _ in 0..20 {
        let clock = ManualClock::new();
        let config = BreakerConfig::builder()
            .count_window(50)
            .minimum_calls(10)
            .build()
            .unwrap();
        let b = CircuitBreaker::with_clock("dep", config, clock);
        let log = EventLog::new();
        b.subscribe(log.clone());
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..100 {
                        let _ = b.call(|| Err::<(), _>(()));
                    }
                });
            }
        });
        let trips = log
            .events()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Transition { .. }))
            .count();
        assert_eq!(trips, 1);
        assert_eq!(b.generation(), 1);
    }
}

#[test]
fn no_permit_leaks_when_the_call_panics() {
    let (b, clock) = quick(
        BreakerConfig::builder()
            .open_duration(10 * S)
            .half_open_calls(1),
    );
    fail(&b, 2);
    clock.advance(10 * S);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = b.call(|| -> Result<(), ()> { panic!("dependency client bug") });
    }));
    assert!(r.is_err());
    assert_eq!(b.metrics().abandoned_permits, 1);
    // The probe slot came back.
    assert!(b.try_acquire().unwrap().is_probe());
}

#[test]
fn the_slow_rule_trips_on_slow_successes() {
    let (b, clock) = quick(
        BreakerConfig::builder()
            .slow_call_rate_threshold(50.0)
            .slow_call_duration(2 * S),
    );
    for _ in 0..2 {
        let p = b.try_acquire().unwrap();
        clock.advance(3 * S);
        p.record(Outcome::Success);
    }
    assert_eq!(b.state(), State::Open);
    let m = b.metrics();
    assert_eq!(
        (m.successful_calls, m.slow_calls, m.failed_calls),
        (2, 2, 0)
    );
}

#[test]
fn owned_permits_follow_the_same_rules() {
    let (b, clock) = quick(
        BreakerConfig::builder()
            .open_duration(10 * S)
            .half_open_calls(1),
    );
    let stale = b.try_acquire_owned().unwrap();
    fail(&b, 2);
    assert_eq!(stale.record(Outcome::Success), Recorded::Stale);
    clock.advance(10 * S);
    let probe = b.try_acquire_owned().unwrap();
    assert!(probe.is_probe());
    assert!(b.try_acquire_owned().is_err());
    drop(probe); // abandoned: the slot comes back
    assert_eq!(b.metrics().abandoned_permits, 1);
    let probe = b.try_acquire_owned().unwrap();
    let handle = std::thread::spawn(move || probe.record(Outcome::Success));
    assert_eq!(handle.join().unwrap(), Recorded::Counted);
    assert_eq!(b.state(), State::Closed);
}

/// A striped breaker: each thread counts on its own lane, permits may finish on another
/// thread, and every figure (counters, calls in flight, the window) sums all lanes.
#[test]
fn striped_breakers_sum_every_lane() {
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .time_window(10 * S, S)
        .stripes(4)
        .minimum_calls(100)
        .slow_call_duration(S)
        .count_in_flight_as_slow(true)
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("dep", config, clock.clone());
    // Eight threads, so several stripes are in use; each leaves one call in flight and records
    // one success and one failure.
    let permits: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    let _ = b.call(|| Ok::<_, ()>(()));
                    let _ = b.call(|| Err::<(), _>(()));
                    b.try_acquire_owned().unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let m = b.metrics();
    assert_eq!((m.successful_calls, m.failed_calls), (8, 8));
    assert_eq!(
        (m.window.calls, m.window.failures, m.window.in_flight_slow),
        (16, 8, 0)
    );
    // Past the slow-call duration plus a cohort, all eight count as slow while in flight.
    clock.advance(2 * S);
    assert_eq!(b.metrics().window.in_flight_slow, 8);
    // Finishing them here, on another thread than the one that acquired them, takes them out
    // of their own lanes' cohorts.
    for p in permits {
        assert_eq!(p.record(Outcome::Success), Recorded::Counted);
    }
    let m = b.metrics();
    assert_eq!((m.successful_calls, m.slow_calls), (16, 8));
    assert_eq!(
        (m.window.calls, m.window.slow_calls, m.window.in_flight_slow),
        (24, 8, 0)
    );
    assert_eq!(m.state, State::Closed);
}

/// A listener's Initial event comes first even when another listener holds up the dispatch:
/// per-call events (delivered on the calling thread) wait for it.
#[test]
fn initial_comes_before_call_events_while_another_listener_dispatches() {
    use std::sync::Mutex;
    use std::sync::mpsc;

    struct Blocking {
        entered: Mutex<Option<mpsc::Sender<()>>>,
        release: Mutex<mpsc::Receiver<()>>,
    }
    impl tripline::Listener for Blocking {
        fn on_event(&self, _: &Event) {
            // Holds the dispatcher inside its own Initial event until released.
            if let Some(tx) = self.entered.lock().unwrap().take() {
                tx.send(()).unwrap();
                self.release.lock().unwrap().recv().unwrap();
            }
        }
    }

    let (b, _clock) = quick(BreakerConfig::builder());
    b.force_open();
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let blocking = Blocking {
        entered: Mutex::new(Some(entered_tx)),
        release: Mutex::new(release_rx),
    };
    let log = EventLog::new();
    std::thread::scope(|s| {
        let b1 = b.clone();
        let dispatcher = s.spawn(move || b1.subscribe(blocking));
        entered_rx.recv().unwrap();
        // The dispatcher is busy: this Initial waits in the queue.
        b.subscribe(log.clone());
        // A rejection now is a call event on this thread, before the log's Initial.
        assert!(b.try_acquire().is_err());
        release_tx.send(()).unwrap();
        dispatcher.join().unwrap();
    });
    let events = log.events();
    assert!(
        matches!(
            events[0].kind,
            EventKind::Initial {
                state: State::ForcedOpen,
                ..
            }
        ),
        "{events:?}"
    );
    // Later rejections reach it.
    assert!(b.try_acquire().is_err());
    let events = log.events();
    assert!(
        matches!(events.last().unwrap().kind, EventKind::Rejected { .. }),
        "{events:?}"
    );
}

#[test]
fn metrics_time_in_state_counts_from_creation_then_from_each_transition() {
    let clock = ManualClock::new();
    clock.advance(5 * S);
    let b = CircuitBreaker::with_clock("dep", BreakerConfig::default(), clock.clone());
    clock.advance(3 * S);
    // Never left Closed, and no cold part yet: since creation.
    assert_eq!(b.metrics().time_in_state, 3 * S);
    // A listener allocates the cold part without a transition: still since creation.
    b.subscribe(EventLog::new());
    clock.advance(S);
    assert_eq!(b.metrics().time_in_state, 4 * S);
    b.force_open();
    assert_eq!(b.metrics().time_in_state, Duration::ZERO);
    clock.advance(7 * S);
    let m = b.metrics();
    assert_eq!((m.state, m.time_in_state), (State::ForcedOpen, 7 * S));
    b.reset();
    clock.advance(2 * S);
    assert_eq!(b.metrics().time_in_state, 2 * S);
}
