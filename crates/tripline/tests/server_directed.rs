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
