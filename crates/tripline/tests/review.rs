//! Defects of the core breaker, each pinned by a test that fails until it is fixed. Each test
//! states the guarantee it checks, the scenario that breaks it, and why.

use std::time::Duration;

use tripline::inflight::InFlight;
use tripline::registry::{Key, OperatorState, Registry, RegistryConfig, Selector};
use tripline::{
    BreakerConfig, CircuitBreaker, HalfOpenPolicy, ManualClock, Outcome, Recorded, State,
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

/// Time window cells carry a 19-bit generation tag, and a writer leaves a cell alone when its
/// tag looks *newer* than the writer's (`tag::newer`, half the tag space). Open and HalfOpen
/// never write the window, so a breaker that flaps Open -> HalfOpen -> Open during a long
/// outage moves its generation by 2 per probe while its window cells keep the tag of the last
/// Closed generation. After 2^18 generations (131,072 failed probes: 36 hours at a 1 s open
/// wait, 3.6 hours at 100 ms) the old tag reads as newer than the current one, and once the
/// dependency recovers and the breaker closes, every result that lands in such a cell is
/// refused as `Recorded::Stale` (`TimeWindow::record` returns `false` without looking at the
/// bucket number). The window stays empty, so the breaker can never trip again; it stays
/// blind until 2^18 more transitions pass. The cell's bucket number (which never wraps) shows
/// it is years older than the writer's, but is not consulted when the tags differ.
///
/// Expected: after the breaker closes, failures count and trip it as on any other day.
#[test]
fn a_time_window_still_counts_after_a_long_outage_of_failed_probes() {
    let config = BreakerConfig::builder()
        .time_window(10 * S, S)
        .minimum_calls(5)
        .failure_rate_threshold(50.0)
        .count_in_flight_as_slow(false)
        .open_duration(S)
        .half_open_calls(1)
        .half_open_policy(HalfOpenPolicy::Consecutive)
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    // A healthy day: one success in each of the ten buckets, then a burst of failures trips.
    for _ in 0..10 {
        b.try_acquire().unwrap().record(Outcome::Success);
        clock.advance(S);
    }
    while b.state() == State::Closed {
        b.try_acquire().unwrap().record(Outcome::Failure);
    }
    assert_eq!(b.state(), State::Open);
    // The outage: every probe fails, 131,072 times (two transitions each).
    for _ in 0..131_072u32 {
        clock.advance(S);
        let probe = b.try_acquire().expect("the open wait elapsed: a probe");
        assert!(probe.is_probe());
        probe.record(Outcome::Failure);
        assert_eq!(b.state(), State::Open);
    }
    // The dependency recovers: the probe closes the breaker.
    clock.advance(S);
    b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    // It fails again: these failures must count and trip the breaker.
    let mut recorded = Vec::new();
    for _ in 0..10 {
        if let Ok(p) = b.try_acquire() {
            recorded.push(p.record(Outcome::Failure));
        }
        clock.advance(S);
    }
    assert_eq!(
        b.state(),
        State::Open,
        "the failures after recovery were recorded as {recorded:?}; window {:?}",
        b.metrics().window
    );
}

/// The same wrap reached by an operator's runbook: `transition_to_open` from Open starts a new
/// wait and is a transition (a new generation). A control plane that re-asserts "open" every
/// second for three days leaves a time-window breaker that never trips once it is reset.
#[test]
fn a_time_window_still_counts_after_many_operator_transitions() {
    let config = BreakerConfig::builder()
        .time_window(10 * S, S)
        .minimum_calls(5)
        .failure_rate_threshold(50.0)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    for _ in 0..10 {
        b.try_acquire().unwrap().record(Outcome::Success);
        clock.advance(S);
    }
    for _ in 0..262_145u32 {
        b.transition_to_open().unwrap();
    }
    b.transition_to_closed().unwrap();
    let mut recorded = Vec::new();
    for _ in 0..10 {
        if let Ok(p) = b.try_acquire() {
            recorded.push(p.record(Outcome::Failure));
        }
        clock.advance(S);
    }
    assert!(
        recorded.iter().all(|r| *r == Recorded::Counted),
        "results of the current generation refused: {recorded:?}"
    );
    assert_eq!(b.state(), State::Open);
}

/// The in-flight tracker's aged slot keeps one end for all the calls folded into it: the
/// latest. `set_slow_call_duration` folds the live cohorts of the *old* width, whose ends lie
/// up to one old cohort width in the future (30 s for the default 60 s slow-call duration).
/// From then on every cohort of the *new* width that is folded (a few new cohorts later, the
/// normal recycling of its slot) joins an aged slot whose end is still in the future, so calls
/// that had started counting as slow stop counting until that old end passes. The module docs
/// promise that only the calls in flight at the change may count late ("calls already in
/// flight keep the end of the cohort they joined"), and the rule says a call counts once it
/// has run at most 1.5 times the slow-call duration; here a call that started after the change
/// counts at 150 ms, then no longer once ordinary traffic has recycled its slot, and not again
/// until about 30 s.
#[test]
fn in_flight_calls_started_after_a_width_change_keep_counting() {
    let ms = 1_000_000u64;
    let f = InFlight::new(60_000 * ms); // cohorts of 30 s
    let _before = f.enter(ms, 0); // a call in flight at the change: its cohort ends at 30 s
    f.set_slow_call_duration(100 * ms, 2 * ms); // at 2 ms: cohorts of 50 ms from now
    let slow = 100 * ms;
    // A call that starts after the change, at 1 s, and hangs.
    let _hung = f.enter(1_000 * ms, 0);
    // Both count at 1.15 s: the call in flight at the change (running since 1 ms, its cohort
    // folded as if it ended at the change, 2 ms) and the one hung since 1 s.
    assert_eq!(
        f.overdue(1_150 * ms, slow, 0),
        2,
        "the hung calls count at 1.15 s"
    );
    // Ordinary traffic: a short call every 10 ms, recycling every cohort slot.
    for t in (1_010..=1_400).step_by(10) {
        let c = f.enter(t * ms, 0);
        f.exit(c, 0);
    }
    assert_eq!(
        f.overdue(1_400 * ms, slow, 0),
        2,
        "the call hung since 1 s (running 400 ms, slow-call duration 100 ms) stopped counting"
    );
}

/// The same through the breaker: lowering the slow-call duration at run time (a reload) while
/// calls are in flight blinds the in-flight rule for up to half the old duration. With 50
/// calls a second that all hang, minimum 10 and a 50 % slow-call threshold, the breaker must
/// trip well within a second of the change (each call counts as slow after at most 150 ms, so
/// by 0.5 s the 17 calls started before 0.35 s all count); it stays Closed for about 30 s
/// instead (only the two youngest overdue cohorts, about 5 calls, ever count), while the calls
/// pile up.
#[test]
fn a_hung_dependency_trips_soon_after_the_slow_call_duration_is_lowered() {
    let config = |slow: Duration| {
        BreakerConfig::builder()
            .count_window(100)
            .minimum_calls(10)
            .slow_call_rate_threshold(50.0)
            .slow_call_duration(slow)
            .count_in_flight_as_slow(true)
            .build()
            .unwrap()
    };
    let (b, clock) = breaker(config(60 * S));
    let mut hung = vec![b.try_acquire_owned().unwrap()]; // in flight at the reload
    b.reconfigure(config(100 * MS)).unwrap();
    let mut elapsed = Duration::ZERO;
    while elapsed < 5 * S && b.state() == State::Closed {
        clock.advance(20 * MS);
        elapsed += 20 * MS;
        if let Ok(p) = b.try_acquire_owned() {
            hung.push(p);
        }
    }
    assert_eq!(
        b.state(),
        State::Open,
        "{} calls hung for up to {elapsed:?} and the slow-call rule (100 ms) never fired; \
         window {:?}",
        hung.len(),
        b.metrics().window
    );
    assert!(elapsed <= S, "tripped only after {elapsed:?}");
}

fn registry() -> Registry<ManualClock> {
    Registry::with_clock(RegistryConfig::default(), ManualClock::new()).unwrap()
}

/// A kill switch thrown at run time "survives every reload until `clear_operator`" (README,
/// registry docs). `Registry::reset` (and a `reset`/`transition_to_closed` on a handle the
/// registry gave out) puts the breaker back in Closed while the override stays in force; the
/// entry still remembers ForcedOpen as applied and its version is current, so neither a
/// reload nor any later lookup re-applies it: the dependency is called again, while
/// `operator_for` keeps saying ForcedOpen. (The dashboard refuses such a reset with 409, the
/// registry's own API does not.) Expected: either the reset is refused, or the next resync (a
/// reload, a lookup) puts the breaker back under its override.
#[test]
fn a_kill_switch_is_not_lifted_by_a_reset_and_a_reload() {
    let r = registry();
    let key = Key::new("poisoned").unwrap();
    let sel = Selector::Dependency("poisoned".into());
    r.set_operator(&sel, OperatorState::ForcedOpen);
    assert_eq!(r.get(&key).unwrap().state(), State::ForcedOpen);
    r.reset(&sel);
    r.reload(RegistryConfig::default()).unwrap();
    assert_eq!(r.operator_for(&key), OperatorState::ForcedOpen);
    assert_eq!(
        r.get(&key).unwrap().state(),
        State::ForcedOpen,
        "the kill switch is in force but the breaker admits calls"
    );
}

/// Gradual recovery ramps "after the probes close the breaker" (README, `RampUp` docs; the
/// transition code says "only when probes closed the breaker"), and `tests/ramp.rs` pins that
/// an operator's close admits everything. But the ramp starts on every HalfOpen -> Closed
/// edge: an operator who closes a half-open breaker by hand (`transition_to_closed`, `reset`,
/// a registry's `reset`) gets a breaker that refuses 90 % of the calls as `RampingUp`, while
/// the same action from Open admits everything.
#[test]
fn an_operator_close_from_half_open_does_not_ramp() {
    use tripline::{RampCurve, RampUp};
    let config = BreakerConfig::builder()
        .count_window(20)
        .minimum_calls(10)
        .count_in_flight_as_slow(false)
        .open_duration(10 * S)
        .half_open_calls(3)
        .ramp_up(RampUp {
            from: 10.0,
            over: 10 * S,
            steps: 10,
            curve: RampCurve::Linear,
        })
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    b.trip();
    clock.advance(10 * S);
    let probe = b.try_acquire().unwrap(); // HalfOpen, one probe out
    assert_eq!(b.state(), State::HalfOpen);
    b.transition_to_closed().unwrap();
    drop(probe);
    let admitted = (0..50).filter(|_| b.try_acquire().is_ok()).count();
    assert_eq!(
        admitted,
        50,
        "an operator's close ramped: {:?}",
        b.metrics().rejections
    );
}

/// Two lookups of a new key that race both build a breaker (`papaya`'s `get_or_insert_with`
/// may run the closure and then lose the insert), and `Registry::create` subscribes the
/// registry's listeners and applies the operator override to the loser before it is
/// dropped. The listeners get a second `Initial` event for the key, and, under a
/// dependency-wide kill switch, a second Closed -> ForcedOpen transition, for a breaker that
/// never served a call (a dashboard's timeline and audit, a `tracing` log show both).
/// Expected: one breaker per key, so one `Initial` event per key.
#[test]
fn racing_lookups_of_a_new_key_make_one_breaker() {
    use std::collections::HashMap;
    use std::sync::{Arc, Barrier, Mutex};
    let r = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_max_breakers(100_000),
            ManualClock::new(),
        )
        .unwrap(),
    );
    let initial: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    {
        let initial = initial.clone();
        r.subscribe(move |e: &tripline::Event| {
            if matches!(e.kind, tripline::EventKind::Initial { .. }) {
                *initial
                    .lock()
                    .unwrap()
                    .entry(e.breaker.to_string())
                    .or_default() += 1;
            }
        });
    }
    r.set_operator(
        &Selector::Dependency("tenants".into()),
        OperatorState::ForcedOpen,
    );
    let keys: Vec<Key> = (0..20_000)
        .map(|i| {
            Key::scoped(
                "tenants",
                tripline::registry::ScopeKind::Tenant,
                &i.to_string(),
            )
            .unwrap()
        })
        .collect();
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (r, keys, barrier) = (r.clone(), keys.clone(), barrier.clone());
            std::thread::spawn(move || {
                for k in &keys {
                    barrier.wait();
                    assert_eq!(r.get(k).unwrap().state(), State::ForcedOpen);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let initial = initial.lock().unwrap();
    let doubled: Vec<_> = initial.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        doubled.is_empty(),
        "{} of {} keys had more than one breaker built, e.g. {:?}",
        doubled.len(),
        keys.len(),
        doubled.first()
    );
}

/// MetricsOnly reports "each rule once each time it starts firing" (`Hot::would_trip`,
/// README: "a would-trip report for each rule that starts firing in shadow mode"). The
/// acquire-time in-flight check (`check_in_flight`, once per cohort width) evaluates the rules
/// with no consecutive run (`shadow_evaluate(word, now, None)`), which clears the
/// consecutive-failure bit although the run of failures goes on; the next failure then
/// reports `ConsecutiveFailures` again. One unbroken run of 20 failures, 60 ms apart, gives
/// one report per failure past the limit instead of one.
#[test]
fn shadow_mode_reports_one_unbroken_run_of_failures_once() {
    let config = BreakerConfig::builder()
        .count_window(100)
        .minimum_calls(100) // the rate rules stay quiet
        .consecutive_failures(3)
        .slow_call_duration(100 * MS) // cohorts of 50 ms: the acquire-time check runs often
        .count_in_flight_as_slow(true)
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    let log = tripline::EventLog::new();
    b.subscribe(log.clone());
    b.metrics_only();
    for _ in 0..20 {
        b.try_acquire().unwrap().record(Outcome::Failure);
        clock.advance(60 * MS);
    }
    assert_eq!(b.metrics().consecutive_failures, 20, "one unbroken run");
    let reports: Vec<_> = log
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            tripline::EventKind::WouldTrip { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(
        reports.len(),
        1,
        "one run of failures reported {} times: {reports:?}",
        reports.len()
    );
}

/// `Registry::reload` "applies a new configuration to the live registry". A breaker created
/// while a reload runs can miss it: `create` reads the configuration in force, builds the
/// breaker, and only then inserts it; a reload that swaps the configuration and walks the map
/// in between neither sees the new entry nor is seen by it (overrides have a version that a
/// lookup checks; configurations do not). The breaker keeps the previous configuration (here
/// its minimum calls; it could be its window shape or thresholds) until some later reload.
/// Expected: after the reload returns and the creator is done, every breaker runs on the new
/// configuration.
#[test]
fn a_breaker_created_during_a_reload_gets_the_new_configuration() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let old = BreakerConfig::builder().minimum_calls(5).build().unwrap();
    let new = old.to_builder().minimum_calls(7).build().unwrap();
    let mut stale = 0;
    for round in 0..20 {
        let r = Arc::new(
            Registry::with_clock(
                RegistryConfig::default()
                    .with_max_breakers(100_000)
                    .with_config("default", old.clone()),
                ManualClock::new(),
            )
            .unwrap(),
        );
        let created = Arc::new(AtomicU64::new(0));
        let creator = {
            let (r, created) = (r.clone(), created.clone());
            std::thread::spawn(move || {
                for i in 0..4_000 {
                    let k =
                        Key::scoped("dep", tripline::registry::ScopeKind::Tenant, &i.to_string())
                            .unwrap();
                    r.get(&k).unwrap();
                    created.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        while created.load(Ordering::Relaxed) < 1_000 {
            std::hint::spin_loop();
        }
        r.reload(
            RegistryConfig::default()
                .with_max_breakers(100_000)
                .with_config("default", new.clone()),
        )
        .unwrap();
        creator.join().unwrap();
        r.for_each(|k, b| {
            if b.config().minimum_calls() != 7 {
                stale += 1;
                if stale == 1 {
                    eprintln!("round {round}: {k} kept the old configuration");
                }
            }
        });
    }
    assert_eq!(
        stale, 0,
        "{stale} breakers kept the configuration a reload replaced"
    );
}

/// "At most `max_breakers`" (`RegistryConfig::with_max_breakers`, registry docs: "memory is
/// bounded"). `Registry::get` checks the length and inserts in two steps, so lookups of new
/// keys that race at the bound each pass the check and each insert: the registry ends up
/// above its bound (by up to the number of racing creators), with breakers none of which may
/// be evicted.
#[test]
fn racing_lookups_never_take_the_registry_past_max_breakers() {
    use std::sync::{Arc, Barrier};
    let max = 64;
    let mut worst = 0;
    for round in 0..200 {
        let r = Arc::new(
            Registry::with_clock(
                RegistryConfig::default().with_max_breakers(max),
                ManualClock::new(),
            )
            .unwrap(),
        );
        let barrier = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|t| {
                let (r, barrier) = (r.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut held = Vec::new(); // in use: never evictable
                    barrier.wait();
                    for i in 0..max {
                        let k = Key::scoped(
                            "dep",
                            tripline::registry::ScopeKind::Host,
                            &format!("{round}-{t}-{i}"),
                        )
                        .unwrap();
                        match r.get(&k) {
                            Ok(b) => held.push(b),
                            Err(_) => break,
                        }
                    }
                    held
                })
            })
            .collect();
        let held: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        worst = worst.max(r.len());
        drop(held);
    }
    assert!(
        worst <= max,
        "the registry held {worst} breakers, max_breakers is {max}"
    );
}

/// Entering MetricsOnly starts a fresh window; calling `metrics_only()` while already
/// MetricsOnly changes nothing (the operator table's "same state: nothing"), as its docs now
/// say.
#[test]
fn metrics_only_again_keeps_the_window_as_documented() {
    let (b, _clock) = breaker(BreakerConfig::default());
    b.metrics_only();
    for _ in 0..5 {
        b.try_acquire().unwrap().record(Outcome::Failure);
    }
    b.metrics_only();
    assert_eq!(
        b.metrics().window.calls,
        5,
        "a second metrics_only() keeps the window"
    );
    b.reset();
    b.metrics_only();
    assert_eq!(
        b.metrics().window.calls,
        0,
        "entering MetricsOnly starts a fresh window"
    );
}

/// A count-window breaker with the slow-call rule off reads no clock on its closed path: its
/// permits carry the stand-in time `NO_TIME` (`u64::MAX`), and `record_window` evaluates the
/// rules at that "time" (`trip_reason(generation, now, ..)` with `now == NO_TIME`, on the
/// assumption that such a call's rules need no time). After a live reconfiguration turns the
/// slow-call rule (and in-flight counting) on, a permit granted before it still records at
/// `u64::MAX`: the snapshot it evaluates counts every call in flight as overdue
/// (`end + slow <= u64::MAX`), however young, and the breaker trips on the slow-call rule with
/// calls that have run for no time at all. Expected: no call that has not run for the
/// slow-call duration counts as slow, so the breaker stays Closed.
#[test]
fn a_permit_from_before_the_slow_call_rule_was_turned_on_does_not_condemn_young_calls() {
    let base = BreakerConfig::builder()
        .count_window(20)
        .minimum_calls(2)
        .failure_rate_threshold(100.0)
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(60 * S);
    let (b, _clock) = breaker(base.clone().slow_call_rule(false).build().unwrap());
    let untimed = b.try_acquire_owned().unwrap(); // admitted reading no clock
    b.reconfigure(
        base.slow_call_rule(true)
            .count_in_flight_as_slow(true)
            .build()
            .unwrap(),
    )
    .unwrap();
    // Five calls start now; none has run for any time.
    let _young: Vec<_> = (0..5).map(|_| b.try_acquire_owned().unwrap()).collect();
    assert_eq!(b.metrics().window.in_flight_slow, 0);
    let log = tripline::EventLog::new();
    b.subscribe(log.clone());
    let _ = untimed.record(Outcome::Failure);
    let trip: Vec<_> = log
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            tripline::EventKind::Transition { reason, window, .. } => Some((reason, window)),
            _ => None,
        })
        .collect();
    assert_eq!(
        b.state(),
        State::Closed,
        "tripped on calls in flight for 0 ns: {trip:?}"
    );
}

/// Count window of 4, trips at 50 % once 4 calls are in, Open for 1 s, `k` probes.
fn probes_config(k: u32) -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(S)
        .half_open_calls(k)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// A reconfiguration that lowers `half_open_calls` while the breaker is HalfOpen (a rolling
/// change of the probe count): the round already holds as many results as the new count asks
/// for, or more. Without a decision the breaker would wait for a probe it can never admit
/// (`in flight + settled < k` stays false) until `max_wait_in_half_open`, or for ever.
///
/// Expected: the next acquire decides the round by the new configuration's rule (here: two
/// successes, one asked for: Closed) and no probe beyond the new count is admitted meanwhile.
#[test]
fn lowering_the_probe_count_mid_round_decides_the_round() {
    let (b, clock) = breaker(probes_config(3));
    for _ in 0..4 {
        let _ = b.try_acquire().unwrap().record(Outcome::Failure);
    }
    assert_eq!(b.state(), State::Open);
    clock.advance(2 * S);
    let probes: Vec<_> = (0..3).map(|_| b.try_acquire().unwrap()).collect();
    assert_eq!(b.state(), State::HalfOpen);
    let mut probes = probes.into_iter();
    for p in probes.by_ref().take(2) {
        assert_eq!(p.record(Outcome::Success), Recorded::Counted);
    }
    let third = probes.next().unwrap();
    b.reconfigure(probes_config(1)).unwrap();
    let p = b.try_acquire().expect("the round is decided: Closed");
    assert_eq!(b.state(), State::Closed);
    let _ = p.record(Outcome::Success);
    assert_eq!(third.record(Outcome::Success), Recorded::Stale);
}

/// The other half of a lowered `half_open_calls`: probes already out keep their leases and
/// count against the new number, so no probe beyond it is admitted while they are out.
#[test]
fn lowering_the_probe_count_mid_round_admits_no_extra_probe() {
    let (b, clock) = breaker(probes_config(3));
    for _ in 0..4 {
        let _ = b.try_acquire().unwrap().record(Outcome::Failure);
    }
    clock.advance(2 * S);
    let mut probes: Vec<_> = (0..3).map(|_| b.try_acquire().unwrap()).collect();
    drop(probes.remove(0)); // abandoned: slot 0 is free, slots 1 and 2 are held
    b.reconfigure(probes_config(1)).unwrap();
    assert!(b.try_acquire().is_err(), "a probe beyond the new count");
    let last = probes.pop().unwrap();
    assert_eq!(
        probes.pop().unwrap().record(Outcome::Success),
        Recorded::Counted
    );
    assert_eq!(b.state(), State::Closed);
    assert_eq!(last.record(Outcome::Success), Recorded::Stale);
}
