//! Keyed fleet-wide breakers (`SharedRegistry`): the in-process registry's keys, configuration
//! rules and bounds, over a real `redis-server`.

use std::time::Duration;

use tripline::registry::{Key, RegistryConfig, RegistryError, ScopeKind};
use tripline::{Breaker, BreakerConfig, ManualClock, Outcome, State, WindowConfig};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedConfig, SharedRegistry, SharedRegistryError, TimeSource};

fn strict() -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 2 })
        .minimum_calls(2)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(60))
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

fn shared(replica: &str) -> SharedConfig {
    SharedConfig::builder()
        .time_source(TimeSource::Local)
        .view_ttl(Duration::ZERO)
        .redis_timeout(Duration::from_secs(1))
        .replica_id(replica)
        .build()
        .unwrap()
}

fn registry(
    server: &RedisServer,
    config: RegistryConfig,
    replica: &str,
    clock: &ManualClock,
) -> SharedRegistry<ManualClock> {
    SharedRegistry::with_clock(
        config,
        shared(replica),
        Backend::single(&server.url()).unwrap(),
        clock.clone(),
    )
    .unwrap()
}

fn tenant(t: &str) -> Key {
    Key::scoped("payments", ScopeKind::Tenant, t).unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn keys_take_their_configuration_as_the_in_process_registry_resolves_it() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let config = RegistryConfig::default()
        .with_config("strict", strict())
        .with_dependency("payments", "strict");
    let r = registry(&server, config, "a", &clock);
    let acme = r.get(&tenant("acme")).unwrap();
    assert_eq!(acme.name(), "payments/tenant=acme");
    assert_eq!(acme.config(), &strict());
    assert_eq!(
        r.get(&Key::new("search").unwrap()).unwrap().config(),
        &BreakerConfig::default()
    );
    assert!(
        r.get(&tenant("acme")).unwrap().same_breaker(&acme),
        "one handle per key"
    );
    assert_eq!(r.keys(), vec![tenant("acme"), Key::new("search").unwrap()]);
}

#[tokio::test(flavor = "current_thread")]
async fn one_tenant_tripping_leaves_the_others_closed_fleet_wide() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let config = || RegistryConfig::default().with_config("default", strict());
    let here = registry(&server, config(), "a", &clock);
    let there = registry(&server, config(), "b", &clock);
    for _ in 0..2 {
        let p = here.get(&tenant("acme")).unwrap().acquire().await.unwrap();
        p.record(Outcome::Failure).await;
    }
    let acme_there = there.get(&tenant("acme")).unwrap();
    assert_eq!(acme_there.acquire().await.unwrap_err().state(), State::Open);
    let globex_there = there.get(&tenant("globex")).unwrap();
    assert!(globex_there.acquire().await.is_ok());
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_holder_makes_room_from_unused_closed_handles_and_refuses_when_none_may_go() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let config = RegistryConfig::default()
        .with_config("default", strict())
        .with_max_breakers(2);
    let r = registry(&server, config, "a", &clock);
    // acme has seen its breaker Open: its handle remembers it and stays.
    for _ in 0..2 {
        let p = r.get(&tenant("acme")).unwrap().acquire().await.unwrap();
        p.record(Outcome::Failure).await;
    }
    clock.advance(Duration::from_secs(1));
    drop(r.get(&tenant("globex")).unwrap());
    clock.advance(Duration::from_secs(1));
    // Full: globex (Closed, unused) makes room for initech; acme stays.
    let initech = r.get(&tenant("initech")).unwrap();
    assert_eq!(r.keys(), vec![tenant("acme"), tenant("initech")]);
    // Full again, and initech is held outside: nothing may go.
    match r.get(&tenant("hooli")) {
        Err(SharedRegistryError::Full(RegistryError::Full { max: 2 })) => {}
        other => panic!("expected a full holder, got {other:?}"),
    }
    drop(initech);
    assert!(r.get(&tenant("hooli")).is_ok());
    assert_eq!(r.len(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn an_evicted_handle_leaves_the_fleet_state_in_redis() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let config = || {
        RegistryConfig::default()
            .with_config("default", strict())
            .with_idle_after(Duration::from_secs(60))
    };
    let here = registry(&server, config(), "a", &clock);
    let there = registry(&server, config(), "b", &clock);
    drop(here.get(&tenant("acme")).unwrap());
    Breaker::force_open(&there.get(&tenant("acme")).unwrap())
        .await
        .unwrap();
    assert_eq!(here.evict_idle(), 0, "not idle yet");
    clock.advance(Duration::from_secs(60));
    assert_eq!(here.evict_idle(), 1);
    assert!(here.is_empty());
    let again = here.get(&tenant("acme")).unwrap();
    assert_eq!(
        again.acquire().await.unwrap_err().state(),
        State::ForcedOpen
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_key_whose_configuration_cannot_be_shared_is_refused_with_the_field() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let short_lease = BreakerConfig::builder()
        .probe_lease(Duration::from_millis(500))
        .build()
        .unwrap();
    let config = RegistryConfig::default()
        .with_config("short", short_lease)
        .with_key("payments/tenant=acme", "short");
    let r = registry(&server, config, "a", &clock);
    match r.get(&tenant("acme")) {
        Err(SharedRegistryError::Config(e)) => assert_eq!(e.field(), "redis_timeout"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    assert!(r.is_empty());
    assert!(r.get(&tenant("globex")).is_ok());
}

/// A keyed fleet breaker's series carry the labels the in-process registry gives its keys.
#[tokio::test(flavor = "current_thread")]
async fn a_keyed_fleet_breaker_exports_the_registry_labels() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let r = registry(&server, RegistryConfig::default(), "a", &clock);
    let key = tenant("acme");
    let acme = r.get(&key).unwrap();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let m = metrics::with_local_recorder(&recorder, || {
        tripline::observe::BreakerMetrics::for_keyed_breaker(&acme, &key)
    });
    acme.acquire().await.unwrap().record(Outcome::Success).await;
    m.update_from(&acme);
    let found = recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .find(|(k, _, _, _)| {
            let k = k.key();
            k.name() == "tripline_breaker_calls_total"
                && k.labels()
                    .any(|l| l.key() == "outcome" && l.value() == "success")
        })
        .expect("the calls series");
    let labels: Vec<(String, String)> = found
        .0
        .key()
        .labels()
        .map(|l| (l.key().to_string(), l.value().to_string()))
        .collect();
    for want in [
        ("breaker", "payments/tenant=acme"),
        ("dependency", "payments"),
        ("scope_kind", "tenant"),
        ("scope", "acme"),
    ] {
        assert!(
            labels.iter().any(|(k, v)| k == want.0 && v == want.1),
            "{want:?} in {labels:?}"
        );
    }
    assert_eq!(found.3, metrics_util::debugging::DebugValue::Counter(1));
}
