//! Server-directed shard breakers over fleet-wide breakers (`DirectedOn<SharedRegistry>`), on a
//! real `redis-server`: one replica's blamed failures open the shard's breaker in Redis for
//! every replica holding a handle to it, healthy shards and the dependency-wide breakers never
//! see them, and the cap on blamed scopes and the key rules hold as in-process.

use std::sync::Arc;
use std::time::Duration;

use tripline::registry::{
    Attribution, Blame, BlameRefused, DirectedOn, Key, RegistryConfig, ScopeKind,
};
use tripline::{
    Breaker, BreakerConfig, Classification, FailureKind, ManualClock, Outcome, State, WindowConfig,
};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedConfig, SharedRegistry, TimeSource};

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

fn replica(
    server: &RedisServer,
    id: &str,
    clock: &ManualClock,
) -> Arc<SharedRegistry<ManualClock>> {
    let shared = SharedConfig::builder()
        .time_source(TimeSource::Local)
        .view_ttl(Duration::ZERO)
        .redis_timeout(Duration::from_secs(1))
        .replica_id(id)
        .build()
        .unwrap();
    Arc::new(
        SharedRegistry::with_clock(
            RegistryConfig::default().with_config("default", strict()),
            shared,
            Backend::single(&server.url()).unwrap(),
            clock.clone(),
        )
        .unwrap(),
    )
}

fn catalog(r: &Arc<SharedRegistry<ManualClock>>) -> DirectedOn<SharedRegistry<ManualClock>> {
    DirectedOn::new(r.clone(), Key::new("catalog").unwrap()).unwrap()
}

fn unavailable() -> Classification {
    Classification::failure(FailureKind::Unavailable)
}

fn shard(s: &str) -> Key {
    Key::scoped("catalog", ScopeKind::Shard, s).unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn one_replicas_blames_open_the_shard_for_every_replica_holding_it() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let (here, there) = (replica(&server, "a", &clock), replica(&server, "b", &clock));
    let (a, b) = (catalog(&here), catalog(&there));
    assert!(
        b.watch("7"),
        "b holds shard 7's handle before anyone blamed it"
    );
    for _ in 0..2 {
        let at = a
            .admit(Some("7"))
            .await
            .unwrap()
            .record(unavailable(), Some(&Blame::shard("7")))
            .await;
        assert!(
            matches!(at, Attribution::Scope(ref k, Some(_)) if *k == shard("7")),
            "{at:?}"
        );
    }
    for (who, d) in [("a", &a), ("b", &b)] {
        let rejected = d.admit(Some("7")).await.unwrap_err();
        assert_eq!(rejected.breaker(), "catalog/shard=7", "{who}");
        assert_eq!(rejected.state(), State::Open, "{who}");
        // Healthy shards, and calls naming none, pass.
        assert!(d.admit(Some("8")).await.is_ok(), "{who}");
        assert!(d.admit(None).await.is_ok(), "{who}");
    }
    // The dependency-wide breaker (one record in Redis for the fleet) never heard of them.
    assert_eq!(a.dependency_breaker().state(), State::Closed);
    assert_eq!(b.dependency_breaker().state(), State::Closed);
    assert_eq!(here.len(), 2, "the dependency and the blamed shard");
}

#[tokio::test(flavor = "current_thread")]
async fn a_replica_the_server_first_blames_meets_the_fleets_open_shard() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let (here, there) = (replica(&server, "a", &clock), replica(&server, "c", &clock));
    let (a, c) = (catalog(&here), catalog(&there));
    for _ in 0..2 {
        a.admit(None)
            .await
            .unwrap()
            .record(unavailable(), Some(&Blame::shard("7")))
            .await;
    }
    // c holds no handle to shard 7 yet: its first call is admitted, and the server's blame
    // meets the fleet's Open state there (the result is not counted anywhere).
    let permit = c.admit(Some("7")).await.unwrap();
    assert_eq!(permit.scope(), None);
    let at = permit.record(unavailable(), Some(&Blame::shard("7"))).await;
    assert_eq!(at, Attribution::Scope(shard("7"), None));
    assert_eq!(Breaker::metrics(c.dependency_breaker()).failed_calls, 0);
    assert_eq!(
        c.admit(Some("7")).await.unwrap_err().breaker(),
        "catalog/shard=7"
    );
    // A success of a shard is the shard's and the dependency's.
    let at = c
        .admit(Some("8"))
        .await
        .unwrap()
        .record(Classification::new(Outcome::Success), None)
        .await;
    assert_eq!(at, Attribution::Dependency);
}

#[tokio::test(flavor = "current_thread")]
async fn a_server_naming_ever_new_shards_is_capped_on_fleet_wide_breakers() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let here = replica(&server, "a", &clock);
    let a = catalog(&here).with_max_scopes(4);
    let other = Key::new("payments").unwrap();
    here.get(&other).unwrap();
    let mut capped = 0;
    for i in 0..50 {
        if a.admit(None).await.is_err() {
            a.dependency_breaker().reset().await.unwrap();
        }
        let at = a
            .admit(None)
            .await
            .unwrap()
            .record(unavailable(), Some(&Blame::shard(&format!("s{i}"))))
            .await;
        match at {
            Attribution::Scope(..) => {}
            Attribution::Refused(BlameRefused::TooManyScopes { max: 4 }) => capped += 1,
            other => panic!("s{i}: {other:?}"),
        }
    }
    assert_eq!(capped, 46);
    assert_eq!(a.scopes(), 4);
    assert_eq!(a.refused_blames().too_many_scopes, 46);
    let scoped = here
        .keys()
        .into_iter()
        .filter(|k| k.dependency() == "catalog" && k.scope().is_some())
        .count();
    assert_eq!(scoped, 4);
    assert!(here.peek(&other).is_some());

    // A value that cannot be a key: refused, counted, the failure recorded dependency-wide.
    a.dependency_breaker().reset().await.unwrap();
    let failed = Breaker::metrics(a.dependency_breaker()).failed_calls;
    let at = a
        .admit(None)
        .await
        .unwrap()
        .record(unavailable(), Some(&Blame::shard("\u{202E}71")))
        .await;
    assert!(
        matches!(at, Attribution::Refused(BlameRefused::Key(_))),
        "{at:?}"
    );
    assert_eq!(
        Breaker::metrics(a.dependency_breaker()).failed_calls,
        failed + 1
    );
    assert_eq!(a.refused_blames().invalid, 1);
}
