//! User code never runs under a lock of the library's: a listener, a clock or a metrics
//! recorder that calls back into the breaker or the registry, from inside its callback, never
//! deadlocks, and a slow one never stalls other callers.
//!
//! Each re-entrant call runs on a thread of its own; the test fails if it does not finish
//! within ten seconds (a liveness bound on a deadlock, measured with `recv_timeout`; nothing
//! here depends on how fast the machine is).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tripline::registry::{Key, OperatorState, Registry, RegistryConfig, Selector};
use tripline::{
    BreakerConfig, CircuitBreaker, Clock, Event, EventKind, ManualClock, Outcome, State,
};

/// Runs `f` on a thread of its own and returns its result, or fails the test when it has not
/// returned within ten seconds (it is then blocked for good: a deadlock).
fn finishes<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} did not return within 10 s: a deadlock"))
}

type Reg = Registry<ManualClock>;

/// A registry and a handle to it that its own listeners can use.
fn registry(config: RegistryConfig) -> (Arc<Reg>, Arc<OnceLock<Weak<Reg>>>) {
    let r = Arc::new(Registry::with_clock(config, ManualClock::new()).unwrap());
    let handle: Arc<OnceLock<Weak<Reg>>> = Arc::default();
    handle.set(Arc::downgrade(&r)).unwrap();
    (r, handle)
}

/// Subscribes `f` to `r`'s transitions; `f` gets the registry and the event.
fn on_transition(
    r: &Reg,
    handle: &Arc<OnceLock<Weak<Reg>>>,
    f: impl Fn(&Reg, &Event) + Send + Sync + 'static,
) {
    let h = handle.clone();
    r.subscribe(move |e: &Event| {
        if matches!(e.kind, EventKind::Transition { .. }) {
            if let Some(r) = h.get().and_then(Weak::upgrade) {
                f(&r, e);
            }
        }
    });
}

fn key_of(e: &Event) -> Key {
    e.breaker.as_str().parse().unwrap()
}

#[test]
fn a_listener_that_looks_its_breaker_up_does_not_deadlock_a_kill_switch() {
    let (r, h) = registry(RegistryConfig::default());
    let key = Key::new("payments").unwrap();
    r.get(&key).unwrap();
    on_transition(&r, &h, |r, e| {
        let _ = r.get(&key_of(e)).unwrap().state();
    });
    let (r2, k2) = (r.clone(), key.clone());
    let changed = finishes("set_operator", move || {
        r2.set_operator(&Selector::Key(k2), OperatorState::ForcedOpen)
    });
    assert_eq!(changed, 1);
    let (r2, k2) = (r.clone(), key.clone());
    let state = finishes("a later lookup", move || r2.get(&k2).unwrap().state());
    assert_eq!(state, State::ForcedOpen);
}

#[test]
fn the_first_lookup_of_a_key_under_a_dependency_kill_switch_does_not_deadlock() {
    let (r, h) = registry(RegistryConfig::default());
    r.set_operator(
        &Selector::Dependency("payments".into()),
        OperatorState::ForcedOpen,
    );
    on_transition(&r, &h, |r, e| {
        let _ = r.get(&key_of(e)).unwrap().state();
    });
    let r2 = r.clone();
    let state = finishes("the first lookup", move || {
        r2.get(&"payments/tenant=acme".parse().unwrap())
            .unwrap()
            .state()
    });
    assert_eq!(state, State::ForcedOpen);
}

/// What a listener saw of a new key's breaker when it looked at it from the breaker's Initial
/// event, through `peek` and `for_each` (the entry is in the map, its set-up under way).
fn seen_from_initial(look: fn(&Reg, &Key) -> Option<(State, bool)>) -> Vec<(State, bool)> {
    let (r, h) = registry(RegistryConfig::default());
    r.set_operator(
        &Selector::Dependency("payments".into()),
        OperatorState::ForcedOpen,
    );
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    r.subscribe(move |e: &Event| {
        if matches!(e.kind, EventKind::Initial { .. }) {
            if let Some(r) = h.get().and_then(Weak::upgrade) {
                s.lock().unwrap().extend(look(&r, &key_of(e)));
            }
        }
    });
    let r2 = r.clone();
    finishes("the first lookup", move || {
        r2.get(&"payments/tenant=acme".parse().unwrap())
            .unwrap()
            .state()
    });
    seen.lock().unwrap().clone()
}

/// The breaker's state, and whether it admitted a call.
fn admits<C: Clock>(b: &CircuitBreaker<C>) -> (State, bool) {
    let admitted = b.try_acquire().map(|p| p.record(Outcome::Success)).is_ok();
    (b.state(), admitted)
}

#[test]
fn a_peek_at_a_new_key_under_a_kill_switch_never_admits_a_call() {
    let seen = seen_from_initial(|r, k| r.peek(k).map(|b| admits(&b)));
    assert_eq!(seen, [(State::ForcedOpen, false)]);
}

#[test]
fn a_lookup_of_a_new_key_from_its_initial_event_gets_it_held() {
    let seen = seen_from_initial(|r, k| r.get(k).ok().map(|b| admits(&b)));
    assert_eq!(seen, [(State::ForcedOpen, false)]);
}

#[test]
fn a_for_each_over_a_new_key_under_a_kill_switch_never_admits_a_call() {
    let seen = seen_from_initial(|r, k| {
        let mut out = None;
        r.for_each(|key, b| {
            if key == k {
                out = Some(admits(b));
            }
        });
        out
    });
    assert_eq!(seen, [(State::ForcedOpen, false)]);
}

#[test]
fn a_reload_that_forces_a_key_open_on_a_full_registry_lets_listeners_look_up_new_keys() {
    let (r, h) = registry(RegistryConfig::default().with_max_breakers(4));
    for i in 0..4 {
        r.get(&Key::new(&format!("dep{i}")).unwrap()).unwrap();
    }
    let n = AtomicUsize::new(0);
    on_transition(&r, &h, move |r, _| {
        let i = n.fetch_add(1, Ordering::Relaxed);
        // A new key on a full registry: the lookup must make room.
        let _ = r.get(&Key::new(&format!("new{i}")).unwrap()).unwrap();
    });
    let r2 = r.clone();
    finishes("reload", move || {
        r2.reload(
            RegistryConfig::default()
                .with_max_breakers(4)
                .with_operator("dep0", OperatorState::ForcedOpen),
        )
        .unwrap()
    });
    assert!(r.len() <= 4);
}

fn changed_config() -> RegistryConfig {
    RegistryConfig::default().with_config(
        "default",
        BreakerConfig::builder().minimum_calls(7).build().unwrap(),
    )
}

/// Subscribes `f` to `r`'s `Reconfigured` events, once each at most `times`.
fn on_reconfigured(
    r: &Reg,
    handle: &Arc<OnceLock<Weak<Reg>>>,
    f: impl Fn(&Reg) + Send + Sync + 'static,
) {
    let h = handle.clone();
    let once = AtomicBool::new(false);
    r.subscribe(move |e: &Event| {
        if matches!(e.kind, EventKind::Reconfigured { .. }) && !once.swap(true, Ordering::SeqCst) {
            if let Some(r) = h.get().and_then(Weak::upgrade) {
                f(&r);
            }
        }
    });
}

#[test]
fn a_listener_of_a_reload_may_evict_idle_breakers() {
    let (r, h) = registry(RegistryConfig::default());
    r.get(&Key::new("a").unwrap()).unwrap();
    on_reconfigured(&r, &h, |r| {
        r.evict_idle();
    });
    let r2 = r.clone();
    let report = finishes("reload", move || r2.reload(changed_config()).unwrap());
    assert_eq!(report.reconfigured.len(), 1);
}

#[test]
fn a_listener_of_a_reload_may_reload_again() {
    let (r, h) = registry(RegistryConfig::default());
    r.get(&Key::new("a").unwrap()).unwrap();
    on_reconfigured(&r, &h, |r| {
        r.reload(RegistryConfig::default()).unwrap();
    });
    let r2 = r.clone();
    finishes("reload", move || r2.reload(changed_config()).unwrap());
    // The listener's reload ran last: the default configuration is back.
    let b = r.get(&Key::new("a").unwrap()).unwrap();
    assert_eq!(
        b.config().minimum_calls(),
        BreakerConfig::default().minimum_calls()
    );
}

#[test]
fn a_listener_of_an_override_may_reset_through_the_registry() {
    let (r, h) = registry(RegistryConfig::default());
    let key = Key::new("payments").unwrap();
    r.get(&key).unwrap();
    on_transition(&r, &h, |r, e| {
        r.reset(&Selector::Key(key_of(e)));
    });
    let (r2, k2) = (r.clone(), key.clone());
    finishes("set_operator", move || {
        r2.set_operator(&Selector::Key(k2), OperatorState::ForcedOpen)
    });
    // The reset does not lift the override.
    assert_eq!(r.get(&key).unwrap().state(), State::ForcedOpen);
}

#[test]
fn a_listener_of_an_override_may_clear_it() {
    let (r, h) = registry(RegistryConfig::default());
    let key = Key::new("payments").unwrap();
    r.get(&key).unwrap();
    on_transition(&r, &h, |r, e| {
        if let EventKind::Transition {
            to: State::ForcedOpen,
            ..
        } = e.kind
        {
            r.clear_operator(&Selector::Key(key_of(e)));
        }
    });
    let (r2, k2) = (r.clone(), key.clone());
    finishes("set_operator", move || {
        r2.set_operator(&Selector::Key(k2), OperatorState::ForcedOpen)
    });
    assert_eq!(r.operator_for(&key), OperatorState::Auto);
    assert_eq!(r.get(&key).unwrap().state(), State::Closed);
}

#[test]
fn a_for_each_callback_may_call_back_into_the_registry() {
    let (r, _) = registry(RegistryConfig::default().with_max_breakers(4));
    for i in 0..4 {
        r.get(&Key::new(&format!("dep{i}")).unwrap()).unwrap();
    }
    let r2 = r.clone();
    finishes("for_each", move || {
        let inner = r2.clone();
        r2.for_each(move |k, b| {
            let _ = inner.get(k).unwrap();
            let _ = inner.get(&Key::new("another").unwrap());
            inner.set_operator(&Selector::Key(k.clone()), OperatorState::ForcedOpen);
            inner.reset(&Selector::Key(k.clone()));
            inner.evict_idle();
            let _ = b.metrics();
        });
    });
}

/// A clock that reads its breaker's metrics on every reading (not when called from inside
/// that reading).
#[derive(Clone)]
struct ReadingClock {
    time: ManualClock,
    breaker: Arc<OnceLock<CircuitBreaker<ReadingClock>>>,
}

thread_local! {
    static IN_CLOCK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Clock for ReadingClock {
    fn now(&self) -> u64 {
        if !IN_CLOCK.with(|c| c.replace(true)) {
            if let Some(b) = self.breaker.get() {
                let _ = b.metrics();
            }
            IN_CLOCK.with(|c| c.set(false));
        }
        self.time.now()
    }
}

fn reading_breaker(config: BreakerConfig) -> CircuitBreaker<ReadingClock> {
    let clock = ReadingClock {
        time: ManualClock::new(),
        breaker: Arc::default(),
    };
    let b = CircuitBreaker::with_clock("reading", config, clock.clone());
    let _ = clock.breaker.set(b.clone());
    b
}

#[test]
fn a_clock_that_reads_its_breaker_never_deadlocks_it() {
    let config = BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(2)
        .automatic_transition(true)
        .half_open_max_wait(Duration::from_secs(30))
        .build()
        .unwrap();
    let b = reading_breaker(config.clone());
    finishes("every call of a breaker whose clock reads it", move || {
        let _ = b.metrics();
        b.subscribe(|_: &Event| {});
        let _ = b.next_deadline();
        b.reconfigure(config.to_builder().minimum_calls(3).build().unwrap())
            .unwrap();
        for _ in 0..3 {
            let _ = b.try_acquire().unwrap().record(Outcome::Failure);
        }
        assert_eq!(b.state(), State::Open);
        let _ = b.next_deadline();
        let _ = b.tick();
        b.clock().time.advance(Duration::from_secs(60));
        let _ = b.tick();
        assert_eq!(b.state(), State::HalfOpen);
        let _ = b.try_acquire().unwrap().record(Outcome::Success);
        b.transition_to_open_for(Duration::from_secs(1)).unwrap();
        b.trip();
        b.force_open();
        b.reset();
        let _ = b.metrics();
    });
}

/// A clock whose every method, `resolution` included, runs `read` (not when called from
/// inside it).
#[derive(Clone)]
struct CallingClock {
    time: ManualClock,
    resolution: Duration,
    read: Arc<OnceLock<Box<dyn Fn() + Send + Sync>>>,
}

impl CallingClock {
    fn new(resolution: Duration) -> Self {
        Self {
            time: ManualClock::new(),
            resolution,
            read: Arc::default(),
        }
    }

    fn call(&self) {
        if !IN_CLOCK.with(|c| c.replace(true)) {
            if let Some(read) = self.read.get() {
                read();
            }
            IN_CLOCK.with(|c| c.set(false));
        }
    }
}

impl Clock for CallingClock {
    fn now(&self) -> u64 {
        self.call();
        self.time.now()
    }
    fn recent(&self) -> u64 {
        self.call();
        self.time.now()
    }
    fn precise_now(&self) -> u64 {
        self.call();
        self.time.now()
    }
    fn resolution(&self) -> Duration {
        self.call();
        self.resolution
    }
}

#[test]
fn a_clock_whose_resolution_reads_its_breaker_never_deadlocks_a_reconfiguration() {
    let clock = CallingClock::new(Duration::from_millis(1));
    let config = BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(2)
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("resolution", config.clone(), clock.clone());
    let target = b.clone();
    let _ = clock.read.set(Box::new(move || {
        let _ = target.metrics();
        let _ = target.config();
    }));
    // A slow-call rule finer than the clock resolves: the breaker asks the clock again.
    let finer = config
        .to_builder()
        .slow_call_duration(Duration::from_millis(5))
        .build()
        .unwrap();
    finishes(
        "a reconfiguration on a clock that reads its breaker",
        move || {
            b.reconfigure(finer).unwrap();
            b.trip();
            b.reset();
            b.metrics().state
        },
    );
}

#[test]
fn a_registry_clock_that_calls_back_into_the_registry_never_deadlocks_maintenance() {
    let clock = CallingClock::new(Duration::from_millis(1));
    let r = Arc::new(
        Registry::with_clock(
            RegistryConfig::default()
                .with_max_breakers(2)
                .with_idle_after(Duration::from_secs(1)),
            clock.clone(),
        )
        .unwrap(),
    );
    let weak = Arc::downgrade(&r);
    let _ = clock.read.set(Box::new(move || {
        if let Some(r) = weak.upgrade() {
            r.evict_idle();
            let _ = r.len();
        }
    }));
    let r2 = r.clone();
    let t = clock.time.clone();
    let evicted = finishes("maintenance on a clock that calls back in", move || {
        r2.get(&Key::new("a").unwrap()).unwrap();
        r2.get(&Key::new("b").unwrap()).unwrap();
        t.advance(Duration::from_secs(5));
        // Full: the lookup makes room, then an explicit sweep.
        r2.get(&Key::new("c").unwrap()).unwrap();
        r2.evict_idle()
    });
    assert!(evicted <= 1, "{evicted}");
    assert!(r.len() <= 2);
}

#[test]
fn a_registry_clock_that_looks_a_key_up_never_deadlocks_its_rebuild() {
    let clock = CallingClock::new(Duration::ZERO);
    let r = Arc::new(Registry::with_clock(RegistryConfig::default(), clock.clone()).unwrap());
    let key = Key::new("catalog").unwrap();
    r.get(&key).unwrap();
    let weak = Arc::downgrade(&r);
    let k = key.clone();
    let _ = clock.read.set(Box::new(move || {
        if let Some(r) = weak.upgrade() {
            let _ = r.get(&k);
        }
    }));
    // Another window shape: the Closed, unused breaker is rebuilt, and building its
    // replacement reads the clock.
    let shape = RegistryConfig::default().with_config(
        "default",
        BreakerConfig::builder()
            .count_window(50)
            .minimum_calls(10)
            .build()
            .unwrap(),
    );
    let r2 = r.clone();
    let report = finishes("a rebuild on a clock that looks the key up", move || {
        r2.reload(shape).unwrap()
    });
    assert_eq!(report.rebuilt, vec![key.clone()]);
    let b = r.get(&key).unwrap();
    assert_eq!(
        b.config().window(),
        tripline::WindowConfig::Count { size: 50 }
    );
}

#[cfg(feature = "metrics")]
mod recorder {
    use super::*;
    use metrics::{
        Counter, CounterFn, Gauge, GaugeFn, Histogram, Key as MKey, KeyName, Metadata, Recorder,
        SharedString, Unit,
    };
    use std::sync::Mutex;
    use std::sync::mpsc::{Receiver, Sender};
    use tripline::observe::BreakerMetrics;

    /// What a gauge does when it is set.
    type OnSet = Arc<dyn Fn() + Send + Sync>;

    struct CallingGauge(OnSet);

    impl GaugeFn for CallingGauge {
        fn increment(&self, _: f64) {
            (self.0)();
        }
        fn decrement(&self, _: f64) {
            (self.0)();
        }
        fn set(&self, _: f64) {
            (self.0)();
        }
    }

    struct NoCounter;
    impl CounterFn for NoCounter {
        fn increment(&self, _: u64) {}
        fn absolute(&self, _: u64) {}
    }

    /// A recorder whose state gauges run `on_set` on every change.
    struct CallingRecorder(OnSet);

    impl Recorder for CallingRecorder {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &MKey, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(Arc::new(NoCounter))
        }
        fn register_gauge(&self, key: &MKey, _: &Metadata<'_>) -> Gauge {
            if key.name() == "tripline_breaker_state" {
                Gauge::from_arc(Arc::new(CallingGauge(self.0.clone())))
            } else {
                Gauge::noop()
            }
        }
        fn register_histogram(&self, _: &MKey, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    fn with_gauges(on_set: OnSet) -> (CircuitBreaker<ManualClock>, BreakerMetrics) {
        let b = CircuitBreaker::with_clock("gauged", BreakerConfig::default(), ManualClock::new());
        let recorder = CallingRecorder(on_set);
        let m = metrics::with_local_recorder(&recorder, || BreakerMetrics::new(&b, Vec::new()));
        (b, m)
    }

    #[test]
    fn a_state_gauge_that_reads_its_breaker_never_deadlocks_it() {
        let target: Arc<OnceLock<CircuitBreaker<ManualClock>>> = Arc::default();
        let t = target.clone();
        let (b, _m) = with_gauges(Arc::new(move || {
            if let Some(b) = t.get() {
                let _ = b.metrics();
                let _ = b.next_deadline();
            }
        }));
        let _ = target.set(b.clone());
        finishes(
            "a transition with a gauge that reads the breaker",
            move || {
                b.trip();
                b.reset();
                b.force_open();
                b.state()
            },
        );
    }

    #[test]
    fn a_slow_recorder_never_stalls_other_callers() {
        let armed = Arc::new(AtomicBool::new(false));
        let (entered_tx, entered_rx): (Sender<()>, Receiver<()>) = std::sync::mpsc::channel();
        let (release_tx, release_rx): (Sender<()>, Receiver<()>) = std::sync::mpsc::channel();
        let entered = Arc::new(Mutex::new(entered_tx));
        let release = Arc::new(Mutex::new(release_rx));
        let a = armed.clone();
        let (b, _m) = with_gauges(Arc::new(move || {
            if a.swap(false, Ordering::SeqCst) {
                entered.lock().unwrap().send(()).unwrap();
                release.lock().unwrap().recv().unwrap();
            }
        }));
        armed.store(true, Ordering::SeqCst);
        let slow = {
            let b = b.clone();
            std::thread::spawn(move || b.trip())
        };
        entered_rx.recv().unwrap();
        // The tripping thread is inside the recorder: every other caller goes on.
        let b2 = b.clone();
        finishes("calls while a recorder is slow", move || {
            let _ = b2.metrics();
            assert!(b2.try_acquire().is_err());
            b2.reset();
            let _ = b2.try_acquire().unwrap().record(Outcome::Success);
            b2.subscribe(|_: &Event| {});
        });
        release_tx.send(()).unwrap();
        slow.join().unwrap();
    }

    /// A recorder that runs `on_register` whenever a gauge is registered.
    struct RegisteringRecorder(OnSet);

    impl Recorder for RegisteringRecorder {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &MKey, _: &Metadata<'_>) -> Counter {
            Counter::noop()
        }
        fn register_gauge(&self, _: &MKey, _: &Metadata<'_>) -> Gauge {
            (self.0)();
            Gauge::noop()
        }
        fn register_histogram(&self, _: &MKey, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn a_recorder_that_exports_while_registering_a_gauge_never_deadlocks_the_registry() {
        let (r, handle) = registry(RegistryConfig::default());
        r.get(&Key::new("payments").unwrap()).unwrap();
        let r2 = r.clone();
        finishes("an export whose recorder exports again", move || {
            let inside = Arc::new(AtomicBool::new(false));
            let recorder = RegisteringRecorder(Arc::new(move || {
                if !inside.swap(true, Ordering::SeqCst) {
                    if let Some(r) = handle.get().and_then(Weak::upgrade) {
                        r.export_metrics();
                    }
                    inside.store(false, Ordering::SeqCst);
                }
            }));
            metrics::with_local_recorder(&recorder, || r2.export_metrics());
        });
    }
}

/// A breaker whose open-wait function calls `back` on the breaker itself (reached through a
/// handle set after it is built), from inside the function.
fn calling_back(
    back: impl Fn(&CircuitBreaker<ManualClock>) + Send + Sync + 'static,
) -> (CircuitBreaker<ManualClock>, Arc<AtomicUsize>) {
    let me: Arc<OnceLock<CircuitBreaker<ManualClock>>> = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let (handle, counter) = (me.clone(), calls.clone());
    let config = BreakerConfig::builder()
        .consecutive_failures(1)
        .half_open_calls(1)
        .open_duration_fn(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
            if let Some(b) = handle.get() {
                back(b);
            }
            Duration::from_secs(7)
        })
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("calls-back", config, ManualClock::new());
    me.set(b.clone()).unwrap();
    (b, calls)
}

#[test]
fn an_open_wait_function_that_reads_its_breaker_never_deadlocks_it() {
    let (b, calls) = calling_back(|b| {
        // The open is decided, not yet made: the breaker is where the decision found it.
        assert_eq!(b.state(), State::Closed);
        let _ = b.metrics();
        let _ = b.counts();
        let _ = b.next_deadline();
        let _ = b.try_acquire();
    });
    let trip = b.clone();
    finishes(
        "a trip whose open-wait function reads the breaker",
        move || {
            let _ = trip.try_acquire().unwrap().record(Outcome::Failure);
        },
    );
    assert_eq!((b.state(), calls.load(Ordering::SeqCst)), (State::Open, 1));
    assert_eq!(
        b.try_acquire().unwrap_err().retry_after(),
        Some(Duration::from_secs(7))
    );
}

#[test]
fn an_open_wait_function_that_trips_or_forces_its_breaker_never_deadlocks_it() {
    // A trip from inside: the open is already underway, so nothing more happens.
    let (b, calls) = calling_back(|b| b.trip());
    let trip = b.clone();
    finishes("an open-wait function that trips", move || {
        let _ = trip.try_acquire().unwrap().record(Outcome::Failure);
    });
    assert_eq!((b.state(), calls.load(Ordering::SeqCst)), (State::Open, 1));
    assert_eq!(b.metrics().transitions, 1);

    // An operator's move from inside wins: the breaker stays where the operator put it.
    let (b, _) = calling_back(|b| b.force_open());
    let trip = b.clone();
    finishes("an open-wait function that forces open", move || {
        let _ = trip.try_acquire().unwrap().record(Outcome::Failure);
    });
    assert_eq!(b.state(), State::ForcedOpen);
}

#[test]
fn an_open_wait_function_that_resets_its_breaker_never_deadlocks_it() {
    let (b, calls) = calling_back(|b| b.reset());
    let trip = b.clone();
    finishes("an open-wait function that resets", move || {
        let _ = trip.try_acquire().unwrap().record(Outcome::Failure);
    });
    assert_eq!(
        (b.state(), calls.load(Ordering::SeqCst)),
        (State::Closed, 1)
    );
    // The reset was a transition; the open it overtook never happened.
    assert_eq!(b.generation(), 1);
}
