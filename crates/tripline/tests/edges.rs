//! The breaker at its edges: long quiet periods, large clock readings, operator actions and
//! reconfiguration during traffic, the registry's lifecycle under races. Each test names the
//! guarantee it pins; the races run real threads for a bounded number of rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tripline::registry::{Key, OperatorState, Registry, RegistryConfig, ScopeKind, Selector};
use tripline::{
    Backoff, BreakerConfig, CircuitBreaker, Classification, Clock, EventKind, EventLog,
    ManualClock, Outcome, Reason, State,
};

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn breaker(config: BreakerConfig) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (
        CircuitBreaker::with_clock("dep", config, clock.clone()),
        clock,
    )
}

fn record(b: &CircuitBreaker<ManualClock>, outcome: Outcome) {
    if let Ok(p) = b.try_acquire() {
        let _ = p.record(outcome);
    }
}

fn time_window(min: u32, threshold: f64) -> BreakerConfig {
    BreakerConfig::builder()
        .time_window(10 * S, S)
        .minimum_calls(min)
        .failure_rate_threshold(threshold)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

#[test]
fn a_quiet_dependency_is_seen_after_any_idle_period() {
    // 10 s window of 1 s buckets, minimum 5, 50 %: successes, then hours of quiet, then
    // failures. With 16-bit bucket stamps the failures were dropped for 9 to 18 hours.
    for quiet in [40_000u64, 65_536, 100_000, 200_000, 10 * 365 * 86_400] {
        let (b, clock) = breaker(time_window(5, 50.0));
        for _ in 0..10 {
            record(&b, Outcome::Success);
            clock.advance(S);
        }
        clock.set(Duration::from_secs(quiet));
        for _ in 0..10 {
            record(&b, Outcome::Failure);
        }
        assert_eq!(b.state(), State::Open, "after {quiet} s of quiet");
    }
}

#[test]
fn old_buckets_never_count_as_current() {
    // At multiples of lcm(buckets, 65,536) the 16-bit stamps read stale buckets as current.
    let (b, clock) = breaker(time_window(20, 50.0));
    for _ in 0..10 {
        record(&b, Outcome::Failure);
        clock.advance(S);
    }
    clock.set(Duration::from_secs(327_689));
    let w = b.metrics().window;
    assert_eq!((w.calls, w.failures), (0, 0));
}

#[test]
fn a_result_that_brings_a_time_window_to_the_minimum_is_evaluated() {
    // 10 s / 1 s, minimum 3, 25 %: success, failure, success at t = 0 is 33 % of 3 calls.
    let (b, _clock) = breaker(time_window(3, 25.0));
    record(&b, Outcome::Success);
    record(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Closed);
    record(&b, Outcome::Success);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn the_first_good_result_past_a_bucket_boundary_is_evaluated() {
    // A success can trip a time window only when old buckets expire, so successes are
    // evaluated once per bucket: by the first result past each bucket boundary.
    let (b, clock) = breaker(time_window(2, 50.0));
    for _ in 0..3 {
        record(&b, Outcome::Success); // bucket 0
    }
    clock.set(Duration::from_millis(9_500));
    record(&b, Outcome::Failure);
    record(&b, Outcome::Failure); // 2 of 5: 40 %
    clock.set(Duration::from_millis(9_900));
    record(&b, Outcome::Success); // evaluated (2 of 6); the next is due at 10 s
    assert_eq!(b.state(), State::Closed);
    clock.set(Duration::from_millis(10_200));
    // Bucket 0 has expired: 2 of 4 = 50 %. A gate due "one bucket after the last
    // evaluation" (10.9 s) would not look.
    record(&b, Outcome::Success);
    assert_eq!(b.state(), State::Open);
}

#[test]
fn ending_shadow_mode_under_traffic_never_tears_the_window() {
    // One writer records failures and successes while an operator toggles MetricsOnly and
    // Closed. A count window's total used to drift from its bits for good when a writer sat
    // between its bit and its total during a reset.
    for round in 0..20 {
        let (b, _clock) = breaker(
            BreakerConfig::builder()
                .count_window(64)
                .minimum_calls(64)
                .failure_rate_threshold(100.0)
                .count_in_flight_as_slow(false)
                .build()
                .unwrap(),
        );
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (b, stop) = (b.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let o = if i % 3 == 0 {
                        Outcome::Failure
                    } else {
                        Outcome::Success
                    };
                    if let Ok(p) = b.try_acquire() {
                        let _ = p.record(o);
                    }
                    i += 1;
                }
            })
        };
        for i in 0..2_000 {
            if i % 2 == 0 {
                b.metrics_only();
            } else {
                b.reset();
            }
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        b.reset();
        for _ in 0..64 {
            record(&b, Outcome::Success);
        }
        let w = b.metrics().window;
        assert_eq!((w.calls, w.failures), (64, 0), "round {round}");
        // And a 100 % threshold still trips on 64 failures.
        for _ in 0..64 {
            record(&b, Outcome::Failure);
        }
        assert_eq!(b.state(), State::Open, "round {round}");
    }
}

#[test]
fn a_result_admitted_before_a_reset_lands_nowhere() {
    for config in [
        BreakerConfig::builder()
            .count_window(4)
            .minimum_calls(1)
            .build()
            .unwrap(),
        time_window(1, 50.0),
    ] {
        let (b, _clock) = breaker(config);
        let p = b.try_acquire().unwrap();
        b.reset();
        assert_eq!(p.record(Outcome::Failure), tripline::Recorded::Stale);
        let w = b.metrics().window;
        assert_eq!((w.calls, w.failures), (0, 0));
        assert_eq!(b.state(), State::Closed);
    }
}

fn in_flight_config(slow: Duration) -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(5)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(slow)
        .count_in_flight_as_slow(true)
        .open_duration(10 * S)
        .half_open_calls(1)
        .half_open_policy(tripline::HalfOpenPolicy::Consecutive)
        .build()
        .unwrap()
}

#[test]
fn in_flight_calls_count_only_since_the_breaker_last_entered_closed() {
    let (b, clock) = breaker(in_flight_config(100 * MS));
    // Five calls hang from before a trip.
    let hung: Vec<_> = (0..5).map(|_| b.try_acquire_owned().unwrap()).collect();
    b.trip();
    clock.advance(10 * S);
    record(&b, Outcome::Success); // the probe closes the breaker
    assert_eq!(b.state(), State::Closed);
    // Hours later they are still hanging: they belong to an ended generation.
    for _ in 0..100 {
        clock.advance(S);
        record(&b, Outcome::Success);
    }
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().window.in_flight_slow, 0);
    drop(hung);
    assert_eq!(b.state(), State::Closed);
}

#[test]
fn in_flight_cohorts_follow_a_new_slow_call_duration() {
    // 100 ms -> 60 s: a 450 ms call must not trip a breaker whose slow threshold is 60 s.
    let (b, clock) = breaker(in_flight_config(100 * MS));
    b.reconfigure(in_flight_config(60 * S)).unwrap();
    let calls: Vec<_> = (0..6).map(|_| b.try_acquire_owned().unwrap()).collect();
    clock.advance(450 * MS);
    record(&b, Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    assert_eq!(b.metrics().window.in_flight_slow, 0);
    drop(calls);

    // 60 s -> 100 ms: hung calls count within 150 ms of the new duration.
    let (b, clock) = breaker(in_flight_config(60 * S));
    b.reconfigure(in_flight_config(100 * MS)).unwrap();
    let _calls: Vec<_> = (0..6).map(|_| b.try_acquire_owned().unwrap()).collect();
    clock.advance(150 * MS);
    let _ = b.try_acquire(); // the acquire-time check
    assert_eq!(b.state(), State::Open);
}

#[test]
fn shadow_mode_reports_a_hung_dependency_and_every_rule() {
    let (b, clock) = breaker(in_flight_config(100 * MS));
    let log = EventLog::new();
    b.subscribe(log.clone());
    b.metrics_only();
    // Every call hangs: nothing completes, MetricsOnly must still say it would trip.
    let _hung: Vec<_> = (0..6).map(|_| b.try_acquire_owned().unwrap()).collect();
    clock.advance(150 * MS);
    let _ = b.try_acquire();
    let would: Vec<Reason> = log
        .events()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::WouldTrip { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(would, vec![Reason::SlowCallRate]);
    assert_eq!(b.state(), State::MetricsOnly);

    // Both rate rules at once: each is reported.
    let (b, clock) = breaker(
        BreakerConfig::builder()
            .count_window(4)
            .minimum_calls(4)
            .failure_rate_threshold(50.0)
            .slow_call_rate_threshold(50.0)
            .slow_call_duration(100 * MS)
            .consecutive_failures(4)
            .count_in_flight_as_slow(false)
            .build()
            .unwrap(),
    );
    let log = EventLog::new();
    b.subscribe(log.clone());
    b.metrics_only();
    for _ in 0..4 {
        let p = b.try_acquire().unwrap();
        clock.advance(200 * MS);
        let _ = p.record(Outcome::Failure);
    }
    let mut would: Vec<String> = log
        .events()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::WouldTrip { reason, .. } => Some(format!("{reason:?}")),
            _ => None,
        })
        .collect();
    would.sort();
    assert_eq!(
        would,
        vec![
            "ConsecutiveFailures { count: 4 }",
            "FailureRate",
            "SlowCallRate"
        ]
    );
}

#[test]
fn halving_a_full_bucket_keeps_the_full_threshold_edge() {
    // A 100 % threshold over one bucket that holds one success among millions of failures:
    // halving the counts must keep the success, so the breaker never trips.
    let (b, _clock) = breaker(
        BreakerConfig::builder()
            .time_window(S, S)
            .minimum_calls(1)
            .failure_rate_threshold(100.0)
            .count_in_flight_as_slow(false)
            .build()
            .unwrap(),
    );
    record(&b, Outcome::Success);
    for _ in 0..(1u32 << 21) + 100 {
        record(&b, Outcome::Failure);
    }
    assert_eq!(b.state(), State::Closed);
    let w = b.metrics().window;
    assert!(w.failures < w.calls, "{w:?}");
}

#[test]
fn the_open_wait_never_exceeds_the_backoff_max() {
    // "The wait never exceeds this": neither jitter nor a Retry-After hint may push it past.
    for seed in 0..50 {
        let (b, clock) = breaker(
            BreakerConfig::builder()
                .count_window(1)
                .minimum_calls(1)
                .count_in_flight_as_slow(false)
                .open_duration(4 * S)
                .open_jitter(5 * S)
                .open_backoff(Backoff {
                    multiplier: 2.0,
                    max: 10 * S,
                    healthy_after: 60 * S,
                })
                .half_open_calls(1)
                .seed(seed)
                .build()
                .unwrap(),
        );
        let log = EventLog::new();
        b.subscribe(log.clone());
        let p = b.try_acquire().unwrap();
        let _ = p.record_classified(Classification::http(503, Some("13")));
        for _ in 0..6 {
            clock.advance(20 * S);
            let p = b.try_acquire().unwrap();
            let _ = p.record(Outcome::Failure);
        }
        for e in log.events() {
            if let EventKind::Transition {
                open_for: Some(d), ..
            } = e.kind
            {
                assert!(d <= 10 * S, "seed {seed}: open for {d:?}");
            }
        }
    }
}

#[test]
fn large_clock_readings_never_overflow() {
    // A clock with a UNIX-epoch origin, and one near u64::MAX.
    for start in [1_700_000_000_000_000_000u64, u64::MAX - 3_600_000_000_000] {
        let (b, clock) = breaker(in_flight_config(2 * MS));
        clock.set(Duration::from_nanos(start));
        let b2 = CircuitBreaker::with_clock("late", in_flight_config(2 * MS), clock.clone());
        // Hung calls are counted (the 40-bit cohort tags overflowed with a 2 ms duration).
        let _hung: Vec<_> = (0..6).map(|_| b2.try_acquire_owned().unwrap()).collect();
        clock.advance(3 * MS);
        let _ = b2.try_acquire();
        assert_eq!(b2.state(), State::Open, "start {start}");
        // Time saturates instead of wrapping.
        clock.advance(Duration::from_nanos(u64::MAX));
        assert_eq!(clock.now(), u64::MAX);
        let _ = b2.try_acquire();
        record(&b, Outcome::Failure);
        let _ = b.metrics();
        let _ = b2.tick();
    }
}

fn registry(config: RegistryConfig) -> (Arc<Registry<ManualClock>>, ManualClock) {
    let clock = ManualClock::new();
    (
        Arc::new(Registry::with_clock(config, clock.clone()).unwrap()),
        clock,
    )
}

#[test]
fn a_lookup_never_returns_a_breaker_the_registry_no_longer_holds() {
    let (r, clock) = registry(RegistryConfig::default().with_idle_after(S));
    let key = Key::new("catalog").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let evictor = {
        let (r, clock, stop) = (r.clone(), clock.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                clock.advance(2 * S);
                r.evict_idle();
            }
        })
    };
    for i in 0..60_000 {
        let b = r.get(&key).unwrap();
        let held = r.peek(&key).expect("a handle in use keeps its breaker");
        assert!(b.ptr_eq(&held), "lookup {i} returned an orphan");
        drop(held);
    }
    stop.store(true, Ordering::Relaxed);
    evictor.join().unwrap();
    // The kill switch reaches the breaker a caller holds.
    let b = r.get(&key).unwrap();
    r.set_operator(&Selector::Key(key.clone()), OperatorState::ForcedOpen);
    assert_eq!(b.state(), State::ForcedOpen);
}

#[test]
fn reload_never_replaces_an_open_breaker_or_one_in_use() {
    let small = BreakerConfig::builder()
        .count_window(2)
        .minimum_calls(2)
        .build()
        .unwrap();
    let wider = small.to_builder().count_window(8).build().unwrap();
    let (r, _clock) = registry(RegistryConfig::default().with_config("default", small.clone()));
    let held = Key::new("held").unwrap();
    let handle = r.get(&held).unwrap();
    let report = r
        .reload(RegistryConfig::default().with_config("default", wider.clone()))
        .unwrap();
    assert_eq!(report.deferred, vec![held.clone()]);
    assert!(r.peek(&held).unwrap().ptr_eq(&handle));
    drop(handle);

    // Racing: one thread trips breakers while reloads change the shape back and forth; no
    // Open breaker ever becomes a fresh Closed one.
    let (r, _clock) = registry(RegistryConfig::default().with_config("default", small.clone()));
    let keys: Vec<Key> = (0..32)
        .map(|i| Key::scoped("dep", ScopeKind::Shard, &i.to_string()).unwrap())
        .collect();
    let tripper = {
        let (r, keys) = (r.clone(), keys.clone());
        std::thread::spawn(move || {
            for k in &keys {
                let b = r.get(k).unwrap();
                for _ in 0..2 {
                    let _ = b.call(|| Err::<(), _>("boom"));
                }
            }
        })
    };
    for i in 0..50 {
        let c = if i % 2 == 0 { &wider } else { &small };
        r.reload(RegistryConfig::default().with_config("default", c.clone()))
            .unwrap();
    }
    tripper.join().unwrap();
    for k in &keys {
        assert_eq!(r.peek(k).unwrap().state(), State::Open, "{k}");
    }
}

#[test]
fn a_reload_keeps_a_kill_switch_thrown_at_run_time() {
    let (r, _clock) = registry(RegistryConfig::default());
    let key = Key::new("poisoned").unwrap();
    let b = r.get(&key).unwrap();
    r.set_operator(
        &Selector::Dependency("poisoned".into()),
        OperatorState::ForcedOpen,
    );
    for _ in 0..3 {
        r.reload(RegistryConfig::default()).unwrap();
        assert_eq!(b.state(), State::ForcedOpen);
        assert_eq!(r.get(&key).unwrap().state(), State::ForcedOpen);
    }
    // The file's layer cannot lift it either; clearing the run-time layer does.
    r.reload(RegistryConfig::default().with_operator("poisoned", OperatorState::Auto))
        .unwrap();
    assert_eq!(b.state(), State::ForcedOpen);
    r.clear_operator(&Selector::Dependency("poisoned".into()));
    assert_eq!(b.state(), State::Closed);
    // A file override applies again once no run-time one is set.
    r.reload(RegistryConfig::default().with_operator("poisoned", OperatorState::Disabled))
        .unwrap();
    assert_eq!(b.state(), State::Disabled);
    assert_eq!(
        r.operator_overrides().len(),
        0,
        "clear_operator removed the run-time override"
    );
}

#[test]
fn a_breaker_created_while_an_override_changes_gets_it() {
    for round in 0..5 {
        let (r, _clock) = registry(RegistryConfig::default().with_max_breakers(100_000));
        let created = Arc::new(AtomicU64::new(0));
        let creator = {
            let (r, created) = (r.clone(), created.clone());
            std::thread::spawn(move || {
                for i in 0..4_000 {
                    let k = Key::scoped("dep", ScopeKind::Tenant, &i.to_string()).unwrap();
                    r.get(&k).unwrap();
                    created.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        while created.load(Ordering::Relaxed) < 1_000 {
            std::hint::spin_loop();
        }
        r.set_operator(
            &Selector::Dependency("dep".into()),
            OperatorState::ForcedOpen,
        );
        creator.join().unwrap();
        for i in 0..4_000 {
            let k = Key::scoped("dep", ScopeKind::Tenant, &i.to_string()).unwrap();
            assert_eq!(
                r.peek(&k).unwrap().state(),
                State::ForcedOpen,
                "round {round}: {k} missed the override"
            );
        }
    }
}

#[test]
fn an_unscoped_key_and_its_dependency_are_different_selectors() {
    let (r, _clock) = registry(RegistryConfig::default());
    let bare = Key::new("prices").unwrap();
    let shard = Key::scoped("prices", ScopeKind::Shard, "1").unwrap();
    let (b, s) = (r.get(&bare).unwrap(), r.get(&shard).unwrap());
    r.set_operator(&Selector::Key(bare.clone()), OperatorState::ForcedOpen);
    assert_eq!(b.state(), State::ForcedOpen);
    assert_eq!(
        r.get(&shard).unwrap().state(),
        State::Closed,
        "the key is not the dependency"
    );
    r.set_operator(
        &Selector::Dependency("prices".into()),
        OperatorState::Disabled,
    );
    assert_eq!(s.state(), State::Disabled);
    assert_eq!(b.state(), State::ForcedOpen, "the key's own override wins");
    r.clear_operator(&Selector::Key(bare.clone()));
    assert_eq!(b.state(), State::Disabled);
    assert_eq!(r.operator_overrides().len(), 1);
}

#[test]
fn without_the_slow_call_rule_a_count_window_reads_no_clock() {
    use std::sync::atomic::AtomicUsize;
    #[derive(Clone, Default)]
    struct Counting(Arc<AtomicUsize>, ManualClock);
    impl Clock for Counting {
        fn now(&self) -> u64 {
            self.0.fetch_add(1, Ordering::Relaxed);
            self.1.now()
        }
    }
    let clock = Counting::default();
    let config = BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .slow_call_rule(false)
        .open_duration(10 * S)
        .build()
        .unwrap();
    assert!(!config.needs_time());
    let b = CircuitBreaker::with_clock("dep", config, clock.clone());
    let before = clock.0.load(Ordering::Relaxed);
    for _ in 0..1000 {
        let p = b.try_acquire().unwrap();
        clock.1.advance(S); // a slow call: the rule is off, it counts as a plain success
        let _ = p.record(Outcome::Success);
    }
    assert_eq!(
        clock.0.load(Ordering::Relaxed),
        before,
        "no clock read while Closed"
    );
    assert_eq!(b.metrics().slow_calls, 0);
    // The trip reads the clock: the open wait runs from the trip.
    for _ in 0..5 {
        let _ = b.try_acquire().unwrap().record(Outcome::Failure);
    }
    assert_eq!(b.state(), State::Open, "5 of the last 10 failed");
    assert!(clock.0.load(Ordering::Relaxed) > before);
    clock.1.advance(10 * S);
    assert!(b.try_acquire().unwrap().is_probe());

    // A listener that asks for outcome events turns timing on (they carry durations).
    let b = CircuitBreaker::with_clock(
        "dep2",
        BreakerConfig::builder()
            .slow_call_rule(false)
            .build()
            .unwrap(),
        clock.clone(),
    );
    struct Outcomes;
    impl tripline::Listener for Outcomes {
        fn on_event(&self, _: &tripline::Event) {}
        fn wants_outcome_events(&self) -> bool {
            true
        }
    }
    b.subscribe(Outcomes);
    let before = clock.0.load(Ordering::Relaxed);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    assert!(clock.0.load(Ordering::Relaxed) >= before + 2);
}

#[test]
fn the_default_clock_follows_the_configuration() {
    use tripline::MonotonicClock;
    let fine = BreakerConfig::builder()
        .slow_call_duration(Duration::from_millis(20))
        .build()
        .unwrap();
    assert!(!MonotonicClock::for_config(&fine).is_coarse());
    let fine_window = BreakerConfig::builder()
        .time_window(S, Duration::from_millis(10))
        .build()
        .unwrap();
    assert!(!MonotonicClock::for_config(&fine_window).is_coarse());
    let durations = BreakerConfig::builder()
        .call_durations(true)
        .build()
        .unwrap();
    assert!(!MonotonicClock::for_config(&durations).is_coarse());
    // The defaults (60 s slow-call duration) read to the millisecond, where the upkeep thread
    // runs.
    let coarse_available = MonotonicClock::coarse().is_coarse();
    assert_eq!(
        MonotonicClock::for_config(&BreakerConfig::default()).is_coarse(),
        coarse_available
    );
}
