//! Keyed breakers: isolation, configuration resolution, bounded memory that never drops a
//! breaker that is not Closed, operator control, reload, metrics and tracing.

use std::time::Duration;

use proptest::prelude::*;
use tripline::registry::{
    Key, OperatorState, Registry, RegistryConfig, RegistryError, ScopeKind, Selector,
};
use tripline::{BreakerConfig, EventKind, EventLog, ManualClock, Reason, State};

fn small() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(2)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

fn registry(config: RegistryConfig) -> (Registry<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (Registry::with_clock(config, clock.clone()).unwrap(), clock)
}

fn shard(i: u32) -> Key {
    Key::scoped("catalog", ScopeKind::Shard, &i.to_string()).unwrap()
}

fn fail(r: &Registry<ManualClock>, k: &Key, n: usize) {
    for _ in 0..n {
        let _ = r.get(k).unwrap().call(|| Err::<(), _>(()));
    }
}

#[test]
fn a_hot_shard_opens_only_its_own_breaker() {
    let (r, _clock) = registry(RegistryConfig::default().with_config("default", small()));
    for i in 0..10 {
        fail(&r, &shard(i), if i == 3 { 4 } else { 0 });
        r.get(&shard(i)).unwrap().call(|| Ok::<_, ()>(())).ok();
    }
    assert_eq!(r.get(&shard(3)).unwrap().state(), State::Open);
    assert_eq!(r.open_count("catalog"), 1);
    let s = r.summary()["catalog"];
    assert_eq!((s.breakers, s.in_state(State::Closed)), (10, 9));
}

#[test]
fn configuration_resolves_key_then_dependency_then_default() {
    let strict = BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(5)
        .build()
        .unwrap();
    let lax = BreakerConfig::builder()
        .count_window(50)
        .minimum_calls(40)
        .build()
        .unwrap();
    let config = RegistryConfig::default()
        .with_config("strict", strict.clone())
        .with_config("lax", lax.clone())
        .with_dependency("payments", "lax")
        .with_key("payments/tenant=acme", "strict");
    let (r, _) = registry(config);
    let acme = r.get(&"payments/tenant=acme".parse().unwrap()).unwrap();
    let other = r.get(&"payments/tenant=globex".parse().unwrap()).unwrap();
    let unrelated = r.get(&Key::new("search").unwrap()).unwrap();
    assert_eq!(acme.config(), strict);
    assert_eq!(other.config(), lax);
    assert_eq!(unrelated.config(), BreakerConfig::default());
    assert_eq!(acme.name(), "payments/tenant=acme");
}

#[test]
fn bad_keys_and_configs_are_refused_clearly() {
    assert_eq!(
        Key::new("").unwrap_err().to_string(),
        "key.dependency must be 1 to 128 bytes without whitespace, control characters, '/', '=', '{' or '}', got \"\""
    );
    assert_eq!(
        Key::scoped("db", ScopeKind::Tenant, "a b")
            .unwrap_err()
            .field(),
        "key.scope"
    );
    assert_eq!(
        "db/planet=mars".parse::<Key>().unwrap_err().to_string(),
        "key.scope kind must be one of endpoint, host, tenant, shard, region, got \"planet\""
    );
    let e = RegistryConfig::default()
        .with_config("vendor", small())
        .with_key("db/tenant=x", "strict")
        .validate()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "keys.db/tenant=x must be a configuration name (one of: default, vendor), got \"strict\""
    );
    assert_eq!(
        RegistryConfig::default()
            .with_max_breakers(0)
            .validate()
            .unwrap_err()
            .field(),
        "max_breakers"
    );
}

#[cfg(feature = "serde")]
#[test]
fn registry_config_from_toml() {
    let text = r#"
max_breakers = 500
idle_after = "5m"

[configs.vendor]
window = { kind = "count", size = 20 }
minimum_calls = 10

[dependencies]
exercise-catalog = "vendor"

[operator]
recommendations = "forced-open"
"#;
    let config = RegistryConfig::from_toml(text).unwrap();
    let (r, _) = registry(config);
    assert_eq!(
        r.get(&Key::new("exercise-catalog").unwrap())
            .unwrap()
            .config()
            .minimum_calls(),
        10
    );
    assert_eq!(
        r.get(&Key::new("recommendations").unwrap())
            .unwrap()
            .state(),
        State::ForcedOpen
    );

    let e = RegistryConfig::from_toml("[dependencies]\nx = \"vendor\"\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("dependencies.x must be a configuration name (one of: default)"),
        "{e}"
    );
    let e = RegistryConfig::from_toml("[configs.v]\nminimum_calls = 0\n").unwrap_err();
    assert!(
        e.to_string()
            .contains("minimum_calls must be in [1, 1000000], got 0"),
        "{e}"
    );
    let e = RegistryConfig::from_toml("max_breakers = 5\nmax_breaker = 6\n").unwrap_err();
    assert!(e.to_string().contains("unknown field `max_breaker`"), "{e}");
}

#[test]
fn idle_eviction_spares_breakers_that_are_not_closed_failing_or_in_use() {
    let config = RegistryConfig::default()
        .with_config("default", small())
        .with_idle_after(Duration::from_secs(60));
    let (r, clock) = registry(config);
    let clean = Key::new("clean").unwrap();
    let failing = Key::new("failing").unwrap();
    let open = Key::new("open").unwrap();
    let held = Key::new("held").unwrap();
    r.get(&clean).unwrap().call(|| Ok::<_, ()>(())).unwrap();
    fail(&r, &failing, 1);
    fail(&r, &open, 2);
    let handle = r.get(&held).unwrap();
    clock.advance(Duration::from_secs(61));
    assert_eq!(r.evict_idle(), 1);
    assert!(r.peek(&clean).is_none());
    assert!(r.peek(&failing).is_some() && r.peek(&open).is_some() && r.peek(&held).is_some());
    assert_eq!(r.peek(&open).unwrap().state(), State::Open);
    drop(handle);
    assert_eq!(r.evict_idle(), 1);
    // Recently used breakers stay.
    r.get(&clean).unwrap();
    assert_eq!(r.evict_idle(), 0);
}

#[test]
fn a_full_registry_makes_room_or_refuses() {
    let config = RegistryConfig::default()
        .with_config("default", small())
        .with_max_breakers(8);
    let (r, clock) = registry(config);
    for i in 0..8 {
        fail(&r, &shard(i), 2); // all Open: none evictable
    }
    assert_eq!(
        r.get(&shard(100)).unwrap_err(),
        RegistryError::Full { max: 8 }
    );
    assert_eq!(
        r.get(&shard(100)).unwrap_err().to_string(),
        "breaker registry is full: 8 breakers, none evictable"
    );
    for i in 0..8 {
        r.reset(&Selector::Key(shard(i)));
        clock.advance(Duration::from_millis(1));
        r.get(&shard(i)).unwrap();
    }
    // Room is made by dropping the least recently used clean breakers.
    let b = r.get(&shard(100)).unwrap();
    assert_eq!(b.state(), State::Closed);
    assert!(r.len() <= 8);
    assert!(r.peek(&shard(0)).is_none(), "the oldest went first");
}

#[test]
fn operators_steer_keys_and_whole_dependencies() {
    let (r, _) = registry(RegistryConfig::default());
    let log = EventLog::new();
    r.subscribe(log.clone());
    let a = shard(1);
    r.get(&a).unwrap();
    assert_eq!(
        r.set_operator(
            &Selector::Dependency("catalog".into()),
            OperatorState::ForcedOpen
        ),
        1
    );
    assert_eq!(r.get(&a).unwrap().state(), State::ForcedOpen);
    // Breakers created later for the dependency follow the override.
    assert_eq!(r.get(&shard(2)).unwrap().state(), State::ForcedOpen);
    // A key-level override wins over the dependency's.
    r.set_operator(&Selector::Key(shard(2)), OperatorState::MetricsOnly);
    assert_eq!(r.get(&shard(2)).unwrap().state(), State::MetricsOnly);
    assert_eq!(
        r.set_operator(&Selector::Dependency("catalog".into()), OperatorState::Auto),
        1
    );
    assert_eq!(r.get(&a).unwrap().state(), State::Closed);
    let operator_events = log
        .events()
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::Transition {
                    reason: Reason::Operator,
                    ..
                }
            )
        })
        .count();
    assert!(operator_events >= 4, "{operator_events}");
}

#[test]
fn reload_keeps_state_and_window() {
    let base = small();
    let (r, _) = registry(RegistryConfig::default().with_config("default", base.clone()));
    let open = Key::new("open").unwrap();
    let warm = Key::new("warm").unwrap();
    fail(&r, &open, 2);
    r.get(&warm).unwrap().call(|| Ok::<_, ()>(())).unwrap();
    r.get(&warm).unwrap().call(|| Ok::<_, ()>(())).unwrap();
    fail(&r, &warm, 1); // 1 of 3: stays Closed
    assert_eq!(r.get(&warm).unwrap().state(), State::Closed);
    let gen_open = r.get(&open).unwrap().generation();

    // Same shape, new threshold: reconfigured in place.
    let looser = base
        .to_builder()
        .failure_rate_threshold(90.0)
        .build()
        .unwrap();
    let report = r
        .reload(RegistryConfig::default().with_config("default", looser.clone()))
        .unwrap();
    assert_eq!(report.reconfigured.len(), 2);
    assert_eq!(r.get(&open).unwrap().state(), State::Open);
    assert_eq!(r.get(&open).unwrap().generation(), gen_open);
    assert_eq!(r.get(&warm).unwrap().metrics().window.calls, 3);
    assert_eq!(r.get(&warm).unwrap().config(), looser);

    // New shape: Closed breakers are rebuilt, others deferred (an Open breaker must not
    // silently become a fresh Closed one).
    let wider = looser.to_builder().count_window(8).build().unwrap();
    let report = r
        .reload(RegistryConfig::default().with_config("default", wider.clone()))
        .unwrap();
    assert_eq!(report.rebuilt, vec![warm.clone()]);
    assert_eq!(report.deferred, vec![open.clone()]);
    assert_eq!(r.get(&open).unwrap().state(), State::Open);
    assert_eq!(r.get(&warm).unwrap().config(), wider);
    // Operator overrides come and go with the configuration.
    r.reload(
        RegistryConfig::default()
            .with_config("default", wider.clone())
            .with_operator("warm", OperatorState::Disabled),
    )
    .unwrap();
    assert_eq!(r.get(&warm).unwrap().state(), State::Disabled);
    r.reload(RegistryConfig::default().with_config("default", wider))
        .unwrap();
    assert_eq!(r.get(&warm).unwrap().state(), State::Closed);
}

#[derive(Clone, Debug)]
enum Op {
    Call(u8, bool),
    Advance(u16),
    EvictIdle,
    Reset(u8),
}

proptest! {
    /// Whatever the key stream, eviction never drops a breaker that is not Closed or whose
    /// window holds failures: the same breaker (same generation) is still there afterwards.
    #[test]
    fn eviction_never_drops_a_breaker_that_matters(
        max in 2usize..12,
        ops in proptest::collection::vec(prop_oneof![
            8 => (0u8..24, any::<bool>()).prop_map(|(k, f)| Op::Call(k, f)),
            2 => (0u16..120).prop_map(Op::Advance),
            1 => Just(Op::EvictIdle),
            1 => (0u8..24).prop_map(Op::Reset),
        ], 1..200),
    ) {
        let config = RegistryConfig::default()
            .with_config("default", small())
            .with_max_breakers(max)
            .with_idle_after(Duration::from_secs(30));
        let (r, clock) = registry(config);
        let key = |i: u8| shard(u32::from(i));
        for op in ops {
            let must_keep: Vec<(Key, u64, State)> = (0u8..24)
                .filter_map(|i| {
                    let b = r.peek(&key(i))?;
                    let m = b.metrics();
                    (m.state != State::Closed || m.window.failures > 0)
                        .then(|| (key(i), m.generation, m.state))
                })
                .collect();
            match op {
                Op::Call(i, fail) => {
                    if let Ok(b) = r.get(&key(i)) {
                        let _ = b.call(|| if fail { Err(()) } else { Ok(()) });
                    }
                }
                Op::Advance(s) => clock.advance(Duration::from_secs(u64::from(s))),
                Op::EvictIdle => { r.evict_idle(); }
                Op::Reset(i) => { r.reset(&Selector::Key(key(i))); }
            }
            prop_assert!(r.len() <= max);
            for (k, generation, state) in must_keep {
                let b = r.peek(&k);
                prop_assert!(b.is_some(), "{} was evicted while {}", k, state);
                prop_assert!(b.unwrap().generation() >= generation);
            }
        }
    }
}

#[cfg(feature = "metrics")]
#[test]
fn metrics_reach_the_recorder_with_prometheus_names() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let (r, _) = registry(RegistryConfig::default().with_config("default", small()));
        let k = Key::scoped("catalog", ScopeKind::Tenant, "acme").unwrap();
        fail(&r, &k, 2);
        for _ in 0..3 {
            let _ = r.get(&k).unwrap().try_acquire();
        }
        r.export_metrics();
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let find = |name: &str, label: Option<(&str, &str)>| {
        snapshot
            .iter()
            .find(|(ck, _, _, _)| {
                ck.key().name() == name
                    && ck
                        .key()
                        .labels()
                        .any(|l| l.key() == "scope" && l.value() == "acme")
                    && label.is_none_or(|(k, v)| {
                        ck.key().labels().any(|l| l.key() == k && l.value() == v)
                    })
            })
            .map(|(_, _, _, v)| v)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(
        find("tripline_breaker_calls_total", Some(("outcome", "failure"))),
        &DebugValue::Counter(2)
    );
    assert_eq!(
        find(
            "tripline_breaker_rejected_calls_total",
            Some(("state", "open"))
        ),
        &DebugValue::Counter(3)
    );
    assert_eq!(
        find("tripline_breaker_transitions_total", None),
        &DebugValue::Counter(1)
    );
    assert_eq!(
        find("tripline_breaker_state", Some(("state", "open"))),
        &DebugValue::Gauge(1.0.into())
    );
    assert_eq!(
        find("tripline_breaker_state", Some(("state", "closed"))),
        &DebugValue::Gauge(0.0.into())
    );
    assert_eq!(
        find("tripline_breaker_failure_rate", None),
        &DebugValue::Gauge(1.0.into())
    );
}

#[cfg(feature = "tracing")]
#[test]
fn transitions_are_traced_and_calls_are_not() {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let (r, _) = registry(RegistryConfig::default().with_config("default", small()));
        let k = Key::new("catalog").unwrap();
        for _ in 0..20 {
            r.get(&k).unwrap().call(|| Ok::<_, ()>(())).unwrap();
        }
        fail(&r, &k, 4);
    });
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(
        out.contains("circuit breaker opened")
            && out.contains("breaker=catalog")
            && out.contains("reason=FailureRate"),
        "{out}"
    );
}

/// Every breaker, made before or after a registry listener, gets it exactly once, and a
/// listener may call back into the registry (peek at a key, add another listener) from its
/// own events without deadlocking.
#[test]
fn registry_listeners_reach_every_breaker_once_and_may_call_back() {
    use std::sync::{Arc, OnceLock};

    let registry = Arc::new(registry(RegistryConfig::default()).0);
    for i in 0..3 {
        registry.get(&shard(i)).unwrap();
    }
    let log = EventLog::new();
    registry.subscribe(log.clone());

    // A listener that, on each Initial, peeks at its key and, once, adds another listener.
    let second = EventLog::new();
    let handle: Arc<OnceLock<std::sync::Weak<Registry<ManualClock>>>> = Arc::default();
    handle.set(Arc::downgrade(&registry)).unwrap();
    let (h, s) = (handle.clone(), second.clone());
    let added = std::sync::atomic::AtomicBool::new(false);
    registry.subscribe(move |e: &tripline::Event| {
        if let EventKind::Initial { .. } = e.kind {
            let r = h
                .get()
                .and_then(std::sync::Weak::upgrade)
                .expect("registry alive");
            // A breaker being created is not in the map yet during its Initial event.
            let key: Key = e.breaker.as_str().parse().unwrap();
            let _ = r.peek(&key);
            if !added.swap(true, std::sync::atomic::Ordering::Relaxed) {
                r.subscribe(s.clone());
            }
        }
    });
    for i in 3..6 {
        registry.get(&shard(i)).unwrap();
    }
    for i in 0..6 {
        registry.get(&shard(i)).unwrap();
    }
    let initials = |log: &EventLog| {
        let mut keys: Vec<String> = log
            .events()
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Initial { .. }))
            .map(|e| e.breaker.as_str().to_string())
            .collect();
        keys.sort();
        keys
    };
    let all: Vec<String> = (0..6).map(|i| shard(i).to_string()).collect();
    assert_eq!(initials(&log), all, "one Initial per breaker");
    assert_eq!(
        initials(&second),
        all,
        "the listener added from a callback, once each"
    );
    for i in 0..6 {
        let m = registry.peek(&shard(i)).unwrap().metrics();
        assert_eq!(m.listener_panics, 0);
    }
}

/// A listener added while a breaker is being created (after the creation read the
/// registry's listeners, before the breaker is in the map) still reaches that breaker, once.
#[test]
fn a_listener_added_during_a_creation_reaches_the_new_breaker() {
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};

    let registry = Arc::new(registry(RegistryConfig::default()).0);
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let entered = Mutex::new(Some(entered_tx));
    let release = Mutex::new(release_rx);
    // Holds the creating thread inside the new breaker's first subscription.
    registry.subscribe(move |e: &tripline::Event| {
        if let EventKind::Initial { .. } = e.kind {
            if let Some(tx) = entered.lock().unwrap().take() {
                tx.send(()).unwrap();
                release.lock().unwrap().recv().unwrap();
            }
        }
    });
    let late = EventLog::new();
    std::thread::scope(|s| {
        let r = registry.clone();
        let creating = s.spawn(move || r.get(&shard(7)).unwrap());
        entered_rx.recv().unwrap();
        // The breaker exists but is not in the map yet: this walk cannot see it.
        registry.subscribe(late.clone());
        release_tx.send(()).unwrap();
        creating.join().unwrap();
    });
    registry.get(&shard(7)).unwrap();
    let initials = late
        .events()
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Initial { .. }))
        .count();
    assert_eq!(initials, 1, "{:?}", late.events());
}
