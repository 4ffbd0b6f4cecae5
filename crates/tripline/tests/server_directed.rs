//! Server-directed scoping: results the server blames on a shard are recorded on that shard's
//! breaker, made on demand under the registry's bound and key rules, and a call naming the
//! shard is admitted or refused by it; the dependency-wide breaker and healthy shards never
//! see the blamed failures.

use std::sync::Arc;
use std::time::Duration;

use tripline::registry::{
    Attribution, Blame, BlameRefused, Key, Registry, RegistryConfig, ScopeKind, ServerDirected,
};
use tripline::{
    BreakerConfig, Classification, ConfigError, FailureKind, ManualClock, Outcome, Recorded, State,
};

fn small() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(2)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

fn catalog(
    max: usize,
) -> (
    ServerDirected<ManualClock>,
    Arc<Registry<ManualClock>>,
    ManualClock,
) {
    let clock = ManualClock::new();
    let config = RegistryConfig::default()
        .with_config("default", small())
        .with_max_breakers(max);
    let registry = Arc::new(Registry::with_clock(config, clock.clone()).unwrap());
    let directed = ServerDirected::new(registry.clone(), Key::new("catalog").unwrap()).unwrap();
    (directed, registry, clock)
}

fn unavailable() -> Classification {
    Classification::failure(FailureKind::Unavailable)
}

fn shard_key(s: &str) -> Key {
    Key::scoped("catalog", ScopeKind::Shard, s).unwrap()
}

#[test]
fn a_blamed_shard_trips_alone_and_healthy_shards_pass() {
    let (catalog, registry, _clock) = catalog(100);
    for round in 0..10 {
        for shard in 0..10 {
            let name = shard.to_string();
            let Ok(permit) = catalog.admit(Some(&name)) else {
                assert_eq!(shard, 3, "only the hot shard is ever refused");
                continue;
            };
            if shard == 3 {
                let at = permit.record(unavailable(), Some(&Blame::shard("3")));
                if round == 0 {
                    assert_eq!(
                        at,
                        Attribution::Scope(shard_key("3"), Some(Recorded::Counted))
                    );
                }
            } else {
                assert_eq!(
                    permit.record(Classification::new(Outcome::Success), None),
                    Attribution::Dependency
                );
            }
        }
    }
    assert_eq!(registry.peek(&shard_key("3")).unwrap().state(), State::Open);
    assert_eq!(catalog.dependency_breaker().state(), State::Closed);
    assert_eq!(catalog.dependency_breaker().metrics().failed_calls, 0);
    // Only the blamed shard has a key: naming a shard costs none.
    assert_eq!(registry.len(), 2);
    assert!(registry.peek(&shard_key("4")).is_none());
    for shard in ["0", "4", "9", "new"] {
        assert!(catalog.admit(Some(shard)).is_ok(), "shard {shard}");
    }
}

#[test]
fn a_call_naming_a_tripped_shard_is_refused_by_its_breaker() {
    let (catalog, registry, clock) = catalog(100);
    for _ in 0..2 {
        // The call did not name its shard; the server's blame still finds the breaker.
        catalog
            .admit(None)
            .unwrap()
            .record(unavailable(), Some(&Blame::shard("7")));
    }
    let rejected = catalog.admit(Some("7")).unwrap_err();
    assert_eq!(rejected.breaker(), "catalog/shard=7");
    assert_eq!(rejected.state(), State::Open);
    assert!(catalog.admit(None).is_ok());
    assert!(catalog.admit(Some("8")).is_ok());

    // After the open wait, calls naming the shard are its probes (10 by default), and their
    // successes close
    // it.
    clock.advance(Duration::from_secs(120));
    let breaker = registry.peek(&shard_key("7")).unwrap();
    for _ in 0..10 {
        let probe = catalog.admit(Some("7")).unwrap();
        assert_eq!(probe.scope(), Some(&shard_key("7")));
        assert_eq!(
            probe.record(Classification::new(Outcome::Success), None),
            Attribution::Dependency
        );
    }
    assert_eq!(breaker.state(), State::Closed);
}

#[test]
fn a_failure_nobody_blamed_still_counts_dependency_wide() {
    let (catalog, registry, _clock) = catalog(100);
    for _ in 0..2 {
        catalog
            .admit(Some("1"))
            .unwrap()
            .record(unavailable(), None);
    }
    assert_eq!(catalog.dependency_breaker().state(), State::Open);
    assert_eq!(catalog.admit(Some("2")).unwrap_err().breaker(), "catalog");
    assert_eq!(registry.len(), 1);
}

#[test]
fn a_hostile_blamed_scope_is_refused_without_creating_keys_past_the_bound() {
    let (catalog, registry, _clock) = catalog(4);
    let long = "9".repeat(257);
    let hostile = [
        "",
        "a/b",
        "shard=1",
        "a b",
        "tab\t",
        "nl\n",
        "\u{202E}71",
        "zero\u{200B}width",
        "{x}",
        long.as_str(),
    ];
    for value in hostile {
        // Refused blames' failures are recorded dependency-wide, so two of them open it:
        // close it again for the next value.
        catalog.dependency_breaker().reset();
        let at = catalog
            .admit(None)
            .unwrap()
            .record(unavailable(), Some(&Blame::shard(value)));
        match at {
            Attribution::Refused(BlameRefused::Key(e)) => assert_eq!(e.field(), "key.scope"),
            other => panic!("{value:?}: {other:?}"),
        }
    }
    let unreadable = Blame::invalid(
        ScopeKind::Shard,
        ConfigError::new(
            "header x-overloaded-shard",
            "\"\\xff\"",
            "visible ASCII text",
        ),
    );
    catalog.dependency_breaker().reset();
    let at = catalog
        .admit(None)
        .unwrap()
        .record(unavailable(), Some(&unreadable));
    assert!(
        matches!(at, Attribution::Refused(BlameRefused::Key(ref e)) if e.field() == "header x-overloaded-shard")
    );
    assert_eq!(registry.len(), 1, "no key for a refused value");

    // A server naming a shard on a success creates no key.
    catalog.dependency_breaker().reset();
    let at = catalog.admit(None).unwrap().record(
        Classification::new(Outcome::Success),
        Some(&Blame::shard("fine")),
    );
    assert_eq!(at, Attribution::Dependency);
    assert_eq!(registry.len(), 1);

    // A server blaming ever new shards: the registry's bound holds, the breakers holding
    // failures are kept, and the refused blames' failures land dependency-wide, not lost.
    let (catalog, registry, _clock) = self::catalog(4);
    let mut refused = 0;
    for i in 0..50 {
        let at = catalog
            .admit(None)
            .unwrap()
            .record(unavailable(), Some(&Blame::shard(&format!("s{i}"))));
        match at {
            Attribution::Scope(..) => {}
            Attribution::Refused(BlameRefused::Full(_)) => {
                refused += 1;
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(refused, 1);
    assert_eq!(registry.len(), 4);
    assert_eq!(catalog.dependency_breaker().metrics().failed_calls, 1);
}

#[test]
fn a_blamed_shard_costs_one_breaker_of_memory() {
    let clock = ManualClock::new();
    let config = BreakerConfig::builder().count_window(100).build().unwrap();
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_config("default", config),
            clock,
        )
        .unwrap(),
    );
    let catalog = ServerDirected::new(registry.clone(), Key::new("catalog").unwrap()).unwrap();
    let closed = catalog.dependency_breaker().memory_bytes();
    while let Ok(p) = catalog.admit(Some("3")) {
        p.record(unavailable(), Some(&Blame::shard("3")));
    }
    let shard = registry.peek(&shard_key("3")).unwrap();
    assert_eq!(shard.state(), State::Open);
    let open = shard.memory_bytes();
    println!(
        "dependency-wide breaker (closed): {closed} bytes; blamed shard's (open): {open} bytes"
    );
    assert!(open < 2048, "{open}");
    assert_eq!(registry.len(), 2);
}

fn catalog_capped(
    max_breakers: usize,
    max_scopes: usize,
    config: BreakerConfig,
) -> (
    ServerDirected<ManualClock>,
    Arc<Registry<ManualClock>>,
    ManualClock,
) {
    let clock = ManualClock::new();
    let config = RegistryConfig::default()
        .with_config("default", config)
        .with_max_breakers(max_breakers)
        .with_idle_after(Duration::from_secs(60));
    let registry = Arc::new(Registry::with_clock(config, clock.clone()).unwrap());
    let directed = ServerDirected::new(registry.clone(), Key::new("catalog").unwrap())
        .unwrap()
        .with_max_scopes(max_scopes);
    (directed, registry, clock)
}

/// A blamed failure, the dependency-wide breaker closed again first if the refused blames'
/// failures opened it.
fn blame(catalog: &ServerDirected<ManualClock>, shard: &str) -> Attribution {
    let permit = match catalog.admit(None) {
        Ok(p) => p,
        Err(_) => {
            catalog.dependency_breaker().reset();
            catalog.admit(None).unwrap()
        }
    };
    permit.record(unavailable(), Some(&Blame::shard(shard)))
}

fn scoped_keys(registry: &Registry<ManualClock>, dependency: &str) -> usize {
    registry
        .keys()
        .iter()
        .filter(|k| k.dependency() == dependency && k.scope().is_some())
        .count()
}

#[test]
fn a_server_naming_ten_thousand_shards_makes_at_most_max_scopes_breakers() {
    let (catalog, registry, _clock) = catalog_capped(200, 64, small());
    assert_eq!(
        ServerDirected::new(registry.clone(), Key::new("other").unwrap())
            .unwrap()
            .max_scopes(),
        64,
        "the default cap"
    );
    // Other dependencies' breakers, Closed and clean: the registry would evict them first to
    // make room.
    let others: Vec<Key> = (0..50)
        .map(|i| Key::new(&format!("dep{i}")).unwrap())
        .collect();
    for k in &others {
        registry.get(k).unwrap().call(|| Ok::<_, ()>(())).unwrap();
    }
    // A real hot shard, blamed before the flood: its breaker opens.
    for _ in 0..2 {
        blame(&catalog, "hot");
    }
    assert_eq!(
        registry.peek(&shard_key("hot")).unwrap().state(),
        State::Open
    );
    let mut followed = 0;
    let mut capped = 0;
    for i in 0..10_000 {
        match blame(&catalog, &format!("s{i}")) {
            Attribution::Scope(..) => followed += 1,
            Attribution::Refused(BlameRefused::TooManyScopes { max: 64 }) => capped += 1,
            other => panic!("s{i}: {other:?}"),
        }
    }
    assert_eq!((followed, capped), (63, 9_937));
    assert_eq!(scoped_keys(&registry, "catalog"), 64);
    assert_eq!(catalog.scopes(), 64);
    assert_eq!(catalog.refused_blames().too_many_scopes, 9_937);
    assert_eq!(catalog.refused_blames().total(), 9_937);
    for k in &others {
        assert!(registry.peek(k).is_some(), "{k} was crowded out");
    }
    // Existing shards are still judged by their breakers: the hot one refuses, a blame on
    // one made before the cap was reached goes to it.
    assert_eq!(
        catalog.admit(Some("hot")).unwrap_err().breaker(),
        "catalog/shard=hot"
    );
    assert_eq!(
        blame(&catalog, "s5"),
        Attribution::Scope(shard_key("s5"), Some(Recorded::Counted))
    );
    assert_eq!(
        registry.peek(&shard_key("s5")).unwrap().state(),
        State::Open
    );
    assert_eq!(
        catalog.admit(Some("s5")).unwrap_err().breaker(),
        "catalog/shard=s5"
    );
    // A shard over the cap is admitted by the dependency-wide breaker alone.
    assert!(registry.peek(&shard_key("s9999")).is_none());
    catalog.dependency_breaker().reset();
    assert!(catalog.admit(Some("s9999")).unwrap().scope().is_none());
}

#[test]
fn a_blame_over_the_cap_counts_on_the_dependency_wide_breaker() {
    let (catalog, _registry, _clock) = catalog_capped(100, 1, small());
    assert_eq!(
        blame(&catalog, "1"),
        Attribution::Scope(shard_key("1"), Some(Recorded::Counted))
    );
    assert_eq!(catalog.dependency_breaker().metrics().failed_calls, 0);
    let at = blame(&catalog, "2");
    assert_eq!(
        at,
        Attribution::Refused(BlameRefused::TooManyScopes { max: 1 })
    );
    assert_eq!(catalog.dependency_breaker().metrics().failed_calls, 1);
    let Attribution::Refused(refused) = at else {
        unreachable!()
    };
    assert_eq!(refused.reason(), "too_many_scopes");
    assert!(refused.to_string().contains("max_scopes"), "{refused}");
}

#[test]
fn a_cap_of_zero_follows_blames_only_to_existing_scopes() {
    let (catalog, registry, _clock) = catalog_capped(100, 0, small());
    assert_eq!(
        blame(&catalog, "1"),
        Attribution::Refused(BlameRefused::TooManyScopes { max: 0 })
    );
    registry.get(&shard_key("2")).unwrap();
    assert_eq!(
        blame(&catalog, "2"),
        Attribution::Scope(shard_key("2"), Some(Recorded::Counted))
    );
    assert_eq!(
        catalog.scopes(),
        0,
        "a breaker made by a lookup is not counted"
    );
}

#[test]
fn scopes_the_registry_evicts_free_their_place_under_the_cap() {
    // A time window forgets a blamed shard's failure: the breaker is then clean and, once
    // idle, evictable.
    let config = BreakerConfig::builder()
        .time_window(Duration::from_secs(10), Duration::from_secs(1))
        .minimum_calls(2)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let (catalog, registry, clock) = catalog_capped(100, 2, config);
    for shard in ["1", "2"] {
        assert!(matches!(blame(&catalog, shard), Attribution::Scope(..)));
    }
    assert_eq!(
        blame(&catalog, "3"),
        Attribution::Refused(BlameRefused::TooManyScopes { max: 2 })
    );
    clock.advance(Duration::from_secs(120));
    // The dependency-wide breaker is held by the handle; the two shards go.
    assert_eq!(registry.evict_idle(), 2);
    assert_eq!(catalog.scopes(), 0);
    assert_eq!(
        blame(&catalog, "3"),
        Attribution::Scope(shard_key("3"), Some(Recorded::Counted))
    );
    assert_eq!(catalog.scopes(), 1);
}

#[test]
fn every_handle_of_a_dependency_shares_one_count_of_scopes() {
    let (a, registry, _clock) = catalog_capped(100, 2, small());
    let b = ServerDirected::new(registry.clone(), Key::new("catalog").unwrap())
        .unwrap()
        .with_max_scopes(2);
    let c = a.clone();
    assert!(matches!(blame(&a, "1"), Attribution::Scope(..)));
    assert!(matches!(blame(&b, "2"), Attribution::Scope(..)));
    for h in [&a, &b, &c] {
        assert_eq!(
            blame(h, "3"),
            Attribution::Refused(BlameRefused::TooManyScopes { max: 2 })
        );
    }
    assert_eq!(a.refused_blames().too_many_scopes, 3);
    assert_eq!(b.refused_blames(), a.refused_blames());
    // Another dependency has its own count.
    let other = ServerDirected::new(registry.clone(), Key::new("other").unwrap())
        .unwrap()
        .with_max_scopes(2);
    assert!(matches!(
        other
            .admit(None)
            .unwrap()
            .record(unavailable(), Some(&Blame::shard("3"))),
        Attribution::Scope(..)
    ));
    assert_eq!(other.refused_blames().total(), 0);
}

#[test]
fn an_unusable_shard_name_counts_dependency_wide_and_is_reported_escaped() {
    let (catalog, registry, _clock) = catalog_capped(100, 64, small());
    let long = "9".repeat(10_000);
    let hostile = [
        "",
        "a/b",
        "two words",
        "nl\n",
        "\u{202E}71",
        "zero\u{200B}width",
        long.as_str(),
    ];
    for (i, value) in hostile.iter().enumerate() {
        catalog.dependency_breaker().reset();
        let failed = catalog.dependency_breaker().metrics().failed_calls;
        let at = catalog
            .admit(None)
            .unwrap()
            .record(unavailable(), Some(&Blame::shard(value)));
        let Attribution::Refused(BlameRefused::Key(e)) = at else {
            panic!("{value:?}: {at:?}")
        };
        assert_eq!(e.field(), "key.scope");
        assert!(
            e.value().len() <= 160 && e.value().bytes().all(|b| b.is_ascii_graphic() || b == b' '),
            "{value:?} shown as {:?}",
            e.value()
        );
        assert_eq!(
            catalog.dependency_breaker().metrics().failed_calls,
            failed + 1,
            "the failure still counts"
        );
        assert_eq!(catalog.refused_blames().invalid, i as u64 + 1);
    }
    let long_shown = match catalog
        .admit(None)
        .map(|p| p.record(unavailable(), Some(&Blame::shard(&long))))
    {
        Ok(Attribution::Refused(BlameRefused::Key(e))) => e.value().to_owned(),
        other => panic!("{other:?}"),
    };
    assert!(long_shown.ends_with("... (10000 bytes)"), "{long_shown}");
    assert_eq!(registry.len(), 1, "no key for an unusable name");
}

#[cfg(feature = "metrics")]
#[test]
fn refused_blames_are_counted_in_metrics_by_reason() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let (catalog, _registry, _clock) = catalog_capped(100, 1, small());
        blame(&catalog, "1");
        blame(&catalog, "2");
        blame(&catalog, "3");
        blame(&catalog, "a/b");
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let count = |reason: &str| {
        snapshot
            .iter()
            .find(|(ck, _, _, _)| {
                ck.key().name() == "tripline_directed_blames_refused_total"
                    && ck
                        .key()
                        .labels()
                        .any(|l| l.key() == "dependency" && l.value() == "catalog")
                    && ck
                        .key()
                        .labels()
                        .any(|l| l.key() == "reason" && l.value() == reason)
            })
            .map(|(_, _, _, v)| v)
    };
    assert_eq!(count("too_many_scopes"), Some(&DebugValue::Counter(2)));
    assert_eq!(count("invalid_scope"), Some(&DebugValue::Counter(1)));
    assert_eq!(count("registry_full"), Some(&DebugValue::Counter(0)));
}

#[cfg(feature = "tracing")]
#[test]
fn refused_blames_are_traced_at_most_once_per_ten_seconds_with_an_escaped_prefix() {
    use std::io::Write;
    use std::sync::Mutex;

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
    let hostile = format!("\u{202E}71{}", "x".repeat(5_000));
    tracing::subscriber::with_default(subscriber, || {
        let (catalog, _registry, clock) = catalog_capped(100, 64, small());
        for _ in 0..100 {
            blame(&catalog, &hostile);
        }
        clock.advance(Duration::from_secs(10));
        blame(&catalog, "a/b");
    });
    let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("a blamed scope was refused"))
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].contains("dependency=catalog")
            && lines[0].contains("reason=\"invalid_scope\"")
            && lines[0].contains("suppressed=0"),
        "{}",
        lines[0]
    );
    assert!(lines[1].contains("suppressed=99"), "{}", lines[1]);
    assert!(!out.contains('\u{202E}'), "a bidi override reached the log");
    assert!(
        !out.contains(&"x".repeat(64)),
        "the whole value reached the log"
    );
    assert!(lines[0].contains("\\u{202e}71"), "{}", lines[0]);
}

/// Four threads blame 500 distinct shards each while a registry listener, on every shard
/// breaker's events, reads the count of scopes and blames another new shard from inside the
/// event: the cap is never exceeded, nothing deadlocks, and every refused blame's failure is
/// on the dependency-wide breaker.
#[test]
fn the_cap_on_scopes_holds_under_concurrent_blames_and_reentrant_listeners() {
    use std::sync::atomic::{AtomicU64, Ordering};

    let config = BreakerConfig::builder()
        .count_window(10_000)
        .minimum_calls(10_000)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let (catalog, registry, _clock) = catalog_capped(1_000, 16, config);
    let reentered = Arc::new(AtomicU64::new(0));
    let over = Arc::new(AtomicU64::new(0));
    {
        let catalog = catalog.clone();
        let registry_in = Arc::downgrade(&registry);
        let reentered = reentered.clone();
        let over = over.clone();
        registry.subscribe(move |e: &tripline::Event| {
            let Some(registry) = registry_in.upgrade() else {
                return;
            };
            if !e.breaker.as_str().contains("/shard=") || e.breaker.as_str().contains("re-") {
                return;
            }
            if scoped_keys(&registry, "catalog") > 16 || catalog.scopes() > 16 {
                over.fetch_add(1, Ordering::Relaxed);
            }
            let n = reentered.fetch_add(1, Ordering::Relaxed);
            if let Ok(p) = catalog.admit(None) {
                p.record(unavailable(), Some(&Blame::shard(&format!("re-{n}"))));
            }
        });
    }
    std::thread::scope(|s| {
        for t in 0..4 {
            let catalog = catalog.clone();
            s.spawn(move || {
                for i in 0..500 {
                    let _ = blame(&catalog, &format!("t{t}-{i}"));
                }
            });
        }
    });
    assert_eq!(over.load(Ordering::Relaxed), 0);
    assert!(reentered.load(Ordering::Relaxed) > 0);
    assert!(scoped_keys(&registry, "catalog") <= 16);
    assert_eq!(catalog.scopes(), scoped_keys(&registry, "catalog"));
    let refused = catalog.refused_blames();
    let followed = catalog
        .registry()
        .keys()
        .iter()
        .filter(|k| k.scope().is_some())
        .count() as u64;
    assert_eq!(
        refused.too_many_scopes + followed,
        2_000 + reentered.load(Ordering::Relaxed)
    );
    assert_eq!(
        catalog.dependency_breaker().metrics().failed_calls,
        refused.too_many_scopes
    );
}

/// The same calls through `ServerDirected` and through `DirectedOn` over an in-process
/// registry: every attribution, refusal and state alike (on a spawned task: the futures are
/// `Send`).
#[tokio::test(flavor = "current_thread")]
async fn directed_on_a_registry_attributes_as_server_directed_does() {
    use tripline::registry::DirectedOn;

    let (sync, sync_registry, _c1) = catalog_capped(100, 3, small());
    let (_, async_registry, _c2) = catalog_capped(100, 3, small());
    let on = DirectedOn::new(async_registry.clone(), Key::new("catalog").unwrap())
        .unwrap()
        .with_max_scopes(3);
    let script: Vec<(Option<String>, Outcome, Option<String>)> = (0..60)
        .map(|i: u32| {
            let named = (i % 3 != 0).then(|| (i % 5).to_string());
            let outcome = if i % 4 == 0 {
                Outcome::Success
            } else {
                Outcome::Failure
            };
            let blame = match i % 7 {
                0 => None,
                1 => Some("a/b".to_string()),
                n => Some((n + i % 2).to_string()),
            };
            (named, outcome, blame)
        })
        .collect();
    let task = tokio::spawn(async move {
        let mut out = Vec::new();
        for (named, outcome, blame) in script {
            let blame = blame.map(|b| Blame::shard(&b));
            let c = Classification::new(outcome);
            let expected = match sync.admit(named.as_deref()) {
                Ok(p) => Ok(p.record(c, blame.as_ref())),
                Err(e) => Err(e.breaker().to_string()),
            };
            let got = match on.admit(named.as_deref()).await {
                Ok(p) => Ok(p.record(c, blame.as_ref()).await),
                Err(e) => Err(e.breaker().to_string()),
            };
            if matches!(&expected, Err(b) if b == "catalog") {
                // The same operator action on both, so the script goes on reaching shards.
                sync.dependency_breaker().reset();
                on.dependency_breaker().reset();
            }
            out.push((expected, got));
        }
        (out, sync, on)
    });
    let (out, sync, on) = task.await.unwrap();
    for (i, (expected, got)) in out.iter().enumerate() {
        assert_eq!(expected, got, "call {i}");
    }
    assert!(
        out.iter()
            .any(|(e, _)| matches!(e, Ok(Attribution::Scope(..))))
    );
    assert!(out.iter().any(|(e, _)| e.is_err()));
    assert_eq!(sync.refused_blames(), on.refused_blames());
    assert_eq!(sync_registry.keys(), async_registry.keys());
    for k in sync_registry.keys() {
        assert_eq!(
            sync_registry.peek(&k).unwrap().state(),
            async_registry.peek(&k).unwrap().state(),
            "{k}"
        );
    }
}
