//! Randomized schedules (shuttle) of whole lifecycles racing each other: the registry's
//! lookup, creation, eviction, rebuild, reload and override paths, and the breaker's
//! lock-free paths against its transitions, with listeners that call back in. Every
//! synchronisation point of the library is a point where shuttle may switch threads, so each
//! test explores thousands of interleavings; a deadlock fails the test.
//!
//! Run with `RUSTFLAGS="--cfg shuttle" cargo test -p tripline --release --test shuttle`.
#![cfg(shuttle)]

use std::sync::Arc;
use std::time::Duration;

use shuttle::thread;
use tripline::registry::{Key, OperatorState, Registry, RegistryConfig, Selector};
use tripline::{
    BreakerConfig, CircuitBreaker, Event, EventKind, EventLog, ManualClock, Outcome, State,
};

/// Schedules per test: thousands, as the design asks; a few seconds each in release.
const SCHEDULES: usize = 2_000;

fn registry(config: RegistryConfig) -> Arc<Registry<ManualClock>> {
    Arc::new(Registry::with_clock(config, ManualClock::new()).unwrap())
}

fn small() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(2)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// A registry listener that, on every transition away from Closed, looks its key up and
/// resets it through the registry: re-entrant calls from inside events.
fn call_back_on_transitions(r: &Arc<Registry<ManualClock>>) {
    let weak = Arc::downgrade(r);
    r.subscribe(move |e: &Event| {
        if let EventKind::Transition { to, .. } = e.kind
            && to != State::Closed
        {
            if let Some(r) = weak.upgrade() {
                let key: Key = e.breaker.as_str().parse().unwrap();
                let _ = r.get(&key).map(|b| b.state());
                r.reset(&Selector::Key(key));
            }
        }
    });
}

#[test]
fn a_reset_racing_a_kill_switch_leaves_the_breaker_held() {
    shuttle::check_random(
        || {
            let r = registry(RegistryConfig::default());
            call_back_on_transitions(&r);
            let key = Key::new("payments").unwrap();
            let held = r.get(&key).unwrap();
            let resetter = {
                let (r, key) = (r.clone(), key.clone());
                thread::spawn(move || {
                    r.reset(&Selector::Key(key));
                })
            };
            r.set_operator(&Selector::Key(key.clone()), OperatorState::ForcedOpen);
            resetter.join().unwrap();
            assert_eq!(held.state(), State::ForcedOpen);
            assert_eq!(held.operator_hold(), Some(State::ForcedOpen));
        },
        SCHEDULES,
    );
}

#[test]
fn a_key_created_while_an_override_changes_follows_the_last_change() {
    shuttle::check_random(
        || {
            let r = registry(RegistryConfig::default());
            call_back_on_transitions(&r);
            let dep = Selector::Dependency("payments".into());
            let key: Key = "payments/tenant=acme".parse().unwrap();
            let creator = {
                let (r, key) = (r.clone(), key.clone());
                thread::spawn(move || r.get(&key).unwrap())
            };
            r.set_operator(&dep, OperatorState::ForcedOpen);
            let toggler = {
                let (r, dep) = (r.clone(), dep.clone());
                thread::spawn(move || {
                    r.set_operator(&dep, OperatorState::Disabled);
                })
            };
            let b = creator.join().unwrap();
            toggler.join().unwrap();
            let want = r.operator_for(&key);
            let state = b.state();
            match want {
                OperatorState::ForcedOpen => assert_eq!(state, State::ForcedOpen),
                OperatorState::Disabled => assert_eq!(state, State::Disabled),
                other => panic!("unexpected override {other:?}"),
            }
            assert!(r.peek(&key).unwrap().ptr_eq(&b));
        },
        SCHEDULES,
    );
}

#[test]
fn a_key_created_while_a_reload_runs_follows_the_reload() {
    shuttle::check_random(
        || {
            let r = registry(RegistryConfig::default().with_config("default", small()));
            call_back_on_transitions(&r);
            let key = Key::new("catalog").unwrap();
            let creator = {
                let (r, key) = (r.clone(), key.clone());
                thread::spawn(move || r.get(&key).unwrap())
            };
            let newer = small().to_builder().minimum_calls(3).build().unwrap();
            let wider = BreakerConfig::builder()
                .count_window(8)
                .minimum_calls(3)
                .build()
                .unwrap();
            // A reload in place, then one of another window shape (a rebuild).
            r.reload(RegistryConfig::default().with_config("default", newer))
                .unwrap();
            r.reload(RegistryConfig::default().with_config("default", wider.clone()))
                .unwrap();
            let b = creator.join().unwrap();
            // The creator's handle may be the old breaker (it held it while the rebuild ran);
            // once it is dropped, the registry's breaker runs on the last configuration.
            drop(b);
            r.reload(RegistryConfig::default().with_config("default", wider.clone()))
                .unwrap();
            assert_eq!(r.get(&key).unwrap().config(), wider);
        },
        SCHEDULES,
    );
}

#[test]
fn lookups_racing_eviction_never_hand_out_a_breaker_the_registry_dropped() {
    shuttle::check_random(
        || {
            let clock = ManualClock::new();
            let r = Arc::new(
                Registry::with_clock(
                    RegistryConfig::default()
                        .with_max_breakers(2)
                        .with_idle_after(Duration::from_millis(1)),
                    clock.clone(),
                )
                .unwrap(),
            );
            call_back_on_transitions(&r);
            let keys: Vec<Key> = ["a", "b", "c"]
                .iter()
                .map(|k| Key::new(k).unwrap())
                .collect();
            r.get(&keys[0]).unwrap();
            clock.advance(Duration::from_millis(10));
            let lookers: Vec<_> = (0..2)
                .map(|t| {
                    let (r, keys) = (r.clone(), keys.clone());
                    thread::spawn(move || {
                        for i in 0..2 {
                            let k = &keys[(t + i) % 3];
                            if let Ok(b) = r.get(k) {
                                // Held: never evicted, so it is what the registry holds.
                                assert!(r.peek(k).unwrap().ptr_eq(&b), "{k} was replaced");
                                let _ = b.call(|| Ok::<_, ()>(()));
                            }
                        }
                    })
                })
                .collect();
            r.evict_idle();
            for l in lookers {
                l.join().unwrap();
            }
            assert!(r.len() <= 2);
        },
        SCHEDULES,
    );
}

#[test]
fn a_full_registry_serves_lookups_while_breakers_can_go() {
    shuttle::check_random(
        || {
            let r = registry(RegistryConfig::default().with_max_breakers(2));
            let lookers: Vec<_> = (0..3)
                .map(|t| {
                    let r = r.clone();
                    thread::spawn(move || {
                        for i in 0..2 {
                            let k = Key::new(&format!("k{t}{i}")).unwrap();
                            // At most three are in use at once, one per thread, and only one
                            // breaker at a time per thread: two fit when the third is dropped.
                            let b = r.get(&k);
                            drop(b);
                        }
                    })
                })
                .collect();
            for l in lookers {
                l.join().unwrap();
            }
            assert!(r.len() <= 2);
        },
        SCHEDULES,
    );
}

/// The lock-free closed path racing resets, a kill switch and subscriptions, on both window
/// kinds: each result lands in the generation that admitted it or nowhere, the window's
/// totals follow its outcomes, and a listener that calls back in sees every event once, in
/// sequence order, its Initial first.
#[test]
fn results_racing_transitions_land_in_their_generation_and_events_stay_in_order() {
    for time_window in [false, true] {
        shuttle::check_random(
            move || {
                let b = BreakerConfig::builder()
                    .minimum_calls(2)
                    .failure_rate_threshold(100.0)
                    .count_in_flight_as_slow(false);
                let b = if time_window {
                    b.time_window(Duration::from_secs(1), Duration::from_secs(1))
                } else {
                    b.count_window(4)
                };
                let breaker =
                    CircuitBreaker::with_clock("race", b.build().unwrap(), ManualClock::new());
                let log = EventLog::new();
                breaker.subscribe(log.clone());
                {
                    let inner = breaker.clone();
                    breaker.subscribe(move |e: &Event| {
                        if matches!(e.kind, EventKind::Transition { .. }) {
                            let _ = inner.metrics();
                            let _ = inner.state();
                        }
                    });
                }
                let writer = {
                    let b = breaker.clone();
                    thread::spawn(move || {
                        for _ in 0..2 {
                            if let Ok(p) = b.try_acquire() {
                                let _ = p.record(Outcome::Failure);
                            }
                        }
                    })
                };
                let operator = {
                    let b = breaker.clone();
                    thread::spawn(move || {
                        b.reset();
                        b.force_open();
                        b.reset();
                    })
                };
                writer.join().unwrap();
                operator.join().unwrap();
                // The last reset started a fresh window: at most the failures recorded after
                // it, which a clean write would count exactly.
                let m = breaker.metrics();
                assert!(m.window.failures <= 2 && m.window.failures == m.window.calls);
                let events = log.events();
                assert!(matches!(events[0].kind, EventKind::Initial { .. }));
                for w in events.windows(2) {
                    assert!(w[0].seq < w[1].seq, "out of order: {:?}", events);
                }
                let mut generation = 0;
                for e in &events {
                    if let EventKind::Transition { generation: g, .. } = e.kind {
                        assert_eq!(g, generation + 1, "{events:?}");
                        generation = g;
                    }
                }
                assert_eq!(generation, breaker.generation());
            },
            SCHEDULES,
        );
    }
}

/// Calls in flight and a ramp after recovery, racing a reconfiguration (a new slow-call
/// duration folds the cohorts), shadow mode and a reset: once every permit is settled no call
/// is left counted in flight, every result is accounted once, and nothing deadlocks.
#[test]
fn calls_in_flight_and_a_ramp_racing_lifecycle_operations_balance() {
    shuttle::check_random(
        || {
            let config = BreakerConfig::builder()
                .count_window(4)
                .minimum_calls(4)
                .slow_call_duration(Duration::from_secs(1))
                .open_duration(Duration::from_secs(1))
                .half_open_calls(1)
                .ramp_up(tripline::RampUp {
                    from: 50.0,
                    over: Duration::from_secs(2),
                    steps: 2,
                    curve: tripline::RampCurve::Linear,
                })
                .build()
                .unwrap();
            let clock = ManualClock::new();
            let b = CircuitBreaker::with_clock("ramp", config.clone(), clock.clone());
            b.trip();
            clock.advance(Duration::from_secs(1));
            let _ = b.try_acquire().unwrap().record(Outcome::Success);
            assert_eq!(b.state(), State::Closed);
            let caller = {
                let b = b.clone();
                thread::spawn(move || {
                    let mut settled = 0;
                    for i in 0..3 {
                        if let Ok(p) = b.try_acquire() {
                            if i == 1 {
                                drop(p);
                            } else {
                                let _ = p.record(Outcome::Success);
                            }
                            settled += 1;
                        }
                    }
                    settled
                })
            };
            let operator = {
                let (b, config) = (b.clone(), config.clone());
                thread::spawn(move || {
                    let slower = config
                        .to_builder()
                        .slow_call_duration(Duration::from_secs(3))
                        .build()
                        .unwrap();
                    b.reconfigure(slower).unwrap();
                    b.metrics_only();
                    b.reset();
                })
            };
            let settled: u64 = caller.join().unwrap();
            operator.join().unwrap();
            clock.advance(Duration::from_secs(3600));
            let m = b.metrics();
            assert_eq!(m.window.in_flight_slow, 0, "{m:?}");
            let accounted = m.successful_calls
                + m.failed_calls
                + m.ignored_calls
                + m.stale_results
                + m.abandoned_permits;
            // The probe's success and each permit the caller settled, each counted once: as a
            // success, as stale, or as abandoned.
            assert_eq!(accounted, settled + 1, "{m:?}");
        },
        SCHEDULES,
    );
}

/// The failure-count rule's ring racing transitions (reset, shadow mode, a trip) with a
/// listener that reads the breaker from inside each event: every trip by the rule names at
/// least the rule's failures, all of them in the window of the generation it ends (a failure
/// lands in its generation or nowhere), shadow mode reports the rule only with as many, and a
/// rejection carries only such a trip's cause.
#[test]
fn failure_count_trips_racing_lifecycle_operations_count_only_their_generation() {
    use tripline::Reason;
    shuttle::check_random(
        || {
            let config = BreakerConfig::builder()
                .count_window(100)
                .minimum_calls(100)
                .slow_call_rule(false)
                .failure_count(3, Duration::from_secs(10))
                .open_duration(Duration::from_millis(1))
                .half_open_calls(1)
                .build()
                .unwrap();
            let clock = ManualClock::new();
            let breaker = CircuitBreaker::with_clock("count-race", config, clock.clone());
            let log = EventLog::new();
            breaker.subscribe(log.clone());
            {
                let inner = breaker.clone();
                breaker.subscribe(move |e: &Event| {
                    if matches!(e.kind, EventKind::Transition { .. }) {
                        let _ = inner.metrics();
                        let _ = inner.state();
                    }
                });
            }
            let writers: Vec<_> = (0..2)
                .map(|_| {
                    let b = breaker.clone();
                    thread::spawn(move || {
                        for _ in 0..3 {
                            if let Ok(p) = b.try_acquire() {
                                let _ = p.record(Outcome::Failure);
                            }
                        }
                    })
                })
                .collect();
            let operator = {
                let b = breaker.clone();
                let clock = clock.clone();
                thread::spawn(move || {
                    b.reset();
                    b.metrics_only();
                    clock.advance(Duration::from_millis(1));
                    b.reset();
                })
            };
            // Rejections racing the trips and the operator carry their own period's cause.
            let reader = {
                let b = breaker.clone();
                thread::spawn(move || {
                    for _ in 0..3 {
                        if let Err(r) = b.try_acquire() {
                            if let Some(c) = r.cause() {
                                assert!(
                                    matches!(c.reason, Reason::FailureCount { count } if count >= 3),
                                    "{c:?}"
                                );
                                assert!(c.window.failures >= 3 && c.generation <= b.generation());
                            }
                        }
                    }
                })
            };
            for w in writers {
                w.join().unwrap();
            }
            operator.join().unwrap();
            reader.join().unwrap();
            for e in log.events() {
                match e.kind {
                    EventKind::Transition {
                        reason: Reason::FailureCount { count },
                        window,
                        ..
                    }
                    | EventKind::WouldTrip {
                        reason: Reason::FailureCount { count },
                        window,
                    } => {
                        assert!(count >= 3, "{e:?}");
                        assert!(window.failures >= 3, "{e:?}");
                    }
                    _ => {}
                }
            }
        },
        SCHEDULES,
    );
}

/// A server-directed dependency at its cap of 2 blamed scopes, both idle and clean: blames
/// of two new shards race the eviction that frees the places, with a listener that calls
/// back in. The shard breakers the blames made never exceed the cap, and the count of scopes
/// matches what the registry holds.
#[test]
fn blames_racing_eviction_never_take_a_dependency_past_its_cap_of_scopes() {
    use tripline::registry::{Attribution, Blame, BlameRefused, ServerDirected};
    use tripline::{Classification, FailureKind};

    shuttle::check_random(
        || {
            let clock = ManualClock::new();
            let config = BreakerConfig::builder()
                .time_window(Duration::from_secs(10), Duration::from_secs(1))
                .minimum_calls(100)
                .build()
                .unwrap();
            let r = Arc::new(
                Registry::with_clock(
                    RegistryConfig::default()
                        .with_config("default", config)
                        .with_idle_after(Duration::from_secs(1)),
                    clock.clone(),
                )
                .unwrap(),
            );
            call_back_on_transitions(&r);
            let catalog = ServerDirected::new(r.clone(), Key::new("catalog").unwrap())
                .unwrap()
                .with_max_scopes(2);
            let fail = Classification::failure(FailureKind::Unavailable);
            for s in ["0", "1"] {
                let at = catalog
                    .admit(None)
                    .unwrap()
                    .record(fail, Some(&Blame::shard(s)));
                assert!(matches!(at, Attribution::Scope(..)), "{at:?}");
            }
            clock.advance(Duration::from_secs(60));
            let blamers: Vec<_> = ["2", "3"]
                .into_iter()
                .map(|s| {
                    let catalog = catalog.clone();
                    thread::spawn(move || {
                        let at = catalog
                            .admit(None)
                            .unwrap()
                            .record(fail, Some(&Blame::shard(s)));
                        assert!(
                            matches!(
                                at,
                                Attribution::Scope(..)
                                    | Attribution::Refused(BlameRefused::TooManyScopes { max: 2 })
                            ),
                            "{at:?}"
                        );
                    })
                })
                .collect();
            r.evict_idle();
            for b in blamers {
                b.join().unwrap();
            }
            let scoped = r.keys().iter().filter(|k| k.scope().is_some()).count();
            assert!(scoped <= 2, "{:?}", r.keys());
            assert_eq!(catalog.scopes(), scoped);
        },
        SCHEDULES,
    );
}

/// An open decided with an open-wait function (decided under the lock, the function called
/// with no lock held, the open made under the lock if nothing moved) racing a reset and an
/// operator's trip: whatever the schedule, the open that happens has the function's wait,
/// an operator's move is never undone by it, and nothing is left underway (a later trip
/// opens at once).
#[test]
fn an_open_waiting_for_its_function_races_a_reset_and_a_trip() {
    shuttle::check_random(
        || {
            let config = BreakerConfig::builder()
                .consecutive_failures(1)
                .count_in_flight_as_slow(false)
                .open_duration(Duration::from_secs(60))
                .open_duration_fn(|_| Duration::from_secs(7))
                .build()
                .unwrap();
            let b = CircuitBreaker::with_clock("computed", config, ManualClock::new());
            let failing = {
                let b = b.clone();
                thread::spawn(move || {
                    if let Ok(p) = b.try_acquire() {
                        let _ = p.record(Outcome::Failure);
                    }
                })
            };
            let resetting = {
                let b = b.clone();
                thread::spawn(move || b.reset())
            };
            b.trip();
            failing.join().unwrap();
            resetting.join().unwrap();
            let open_wait = |b: &CircuitBreaker<ManualClock>| {
                b.try_acquire().err().and_then(|r| r.retry_after())
            };
            match b.state() {
                State::Open => assert_eq!(open_wait(&b), Some(Duration::from_secs(7))),
                State::Closed => {}
                other => panic!("unexpected state {other:?}"),
            }
            b.reset();
            b.trip();
            assert_eq!(
                b.state(),
                State::Open,
                "an open left underway blocks the next"
            );
            assert_eq!(open_wait(&b), Some(Duration::from_secs(7)));
        },
        SCHEDULES,
    );
}
