//! A fleet-wide `tripline_redis::SharedBreaker` in every position an in-process breaker takes:
//! the tower layer, the reqwest middleware, the gRPC layer around a tonic `Channel`, and the
//! pipeline. The change from one replica to a fleet is the breaker's construction; the call
//! path is the same. Each test runs two replicas of one scope on a real `redis-server`: the
//! failures one replica's host records trip the breaker for the other too.

#[path = "../examples/grpc/vendor.rs"]
#[expect(
    dead_code,
    reason = "the vendor's hanging answer is for the other gRPC tests"
)]
mod vendor;

use std::error::Error as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};
use tripline::{BreakerConfig, ManualClock, Rejected, State, WindowConfig};
use tripline_policies::breaker::{BreakerLayer, NotReady};
use tripline_policies::grpc::GrpcClassifier;
use tripline_policies::pipeline::{Pipeline, PipelineError};
use tripline_policies::reqwest::{BreakerMiddleware, KeyedBreakerMiddleware, rejection};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig, SharedRegistry, TimeSource};

fn config() -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 4 })
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(60))
        .half_open_calls(1)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// One replica's handle on the fleet's breaker `scope`, asking Redis at every acquire.
fn replica(server: &RedisServer, scope: &str, id: &str) -> SharedBreaker<ManualClock> {
    let shared = SharedConfig::builder()
        .time_source(TimeSource::Local)
        .view_ttl(Duration::ZERO)
        .redis_timeout(Duration::from_secs(1))
        .replica_id(id)
        .build()
        .unwrap();
    SharedBreaker::with_clock(
        scope,
        config(),
        shared,
        Backend::single(&server.url()).unwrap(),
        ManualClock::new(),
    )
    .unwrap()
}

/// The other replica, asked directly: refused by the fleet's trip.
async fn refused_elsewhere(other: &SharedBreaker<ManualClock>) -> State {
    other.acquire().await.unwrap_err().state()
}

#[tokio::test(flavor = "current_thread")]
async fn a_shared_breaker_sits_in_the_tower_layer() {
    let server = RedisServer::start().unwrap();
    let here = replica(&server, "dep:tower", "a");
    let there = replica(&server, "dep:tower", "b");
    let failing = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = {
        let (failing, calls) = (failing.clone(), calls.clone());
        BreakerLayer::new(here.clone()).layer(service_fn(move |id: u32| {
            calls.fetch_add(1, Ordering::SeqCst);
            let fail = failing.load(Ordering::SeqCst);
            async move {
                if fail {
                    Err(std::io::Error::other("503"))
                } else {
                    Ok(id)
                }
            }
        }))
    };
    assert_eq!(svc.breaker().name(), "dep:tower");
    assert_eq!(svc.clone().oneshot(7).await.unwrap(), 7);
    assert_eq!(tripline::Breaker::metrics(&here).successful_calls, 1);

    failing.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        assert!(svc.clone().oneshot(7).await.is_err());
    }
    assert_eq!(tripline::Breaker::state(&here), State::Open);
    assert_eq!(refused_elsewhere(&there).await, State::Open);
    let before = calls.load(Ordering::SeqCst);
    let err = svc.clone().oneshot(7).await.unwrap_err();
    assert_eq!(err.downcast_ref::<Rejected>().unwrap().state(), State::Open);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        before,
        "a refusal never calls the service"
    );

    // A service made ready and dropped before its call abandons the permit it was given.
    there.reset().await.unwrap();
    let abandoned = tripline::Breaker::metrics(&here).abandoned_permits;
    let mut ready = svc.clone();
    ready.ready().await.unwrap();
    drop(ready);
    assert_eq!(
        tripline::Breaker::metrics(&here).abandoned_permits,
        abandoned + 1
    );

    // Called without poll_ready, a breaker that must ask Redis has not decided: a clear error.
    let err = svc.clone().call(7).await.unwrap_err();
    assert!(err.downcast_ref::<NotReady>().is_some(), "{err}");
}

async fn flaky(axum::extract::State(failing): axum::extract::State<Arc<AtomicBool>>) -> StatusCode {
    if failing.load(Ordering::SeqCst) {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_shared_breaker_sits_in_the_reqwest_middleware() {
    let server = RedisServer::start().unwrap();
    let here = replica(&server, "dep:prices", "a");
    let there = replica(&server, "dep:prices", "b");
    let failing = Arc::new(AtomicBool::new(false));
    let app = Router::new()
        .route("/price", get(flaky))
        .with_state(failing.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/price", listener.local_addr().unwrap());
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let client = reqwest_middleware::ClientBuilder::new(
        reqwest::Client::builder().no_proxy().build().unwrap(),
    )
    .with(BreakerMiddleware::new(here.clone()))
    .build();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    failing.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        assert_eq!(client.get(&url).send().await.unwrap().status(), 503);
    }
    assert_eq!(refused_elsewhere(&there).await, State::Open);
    let err = client.get(&url).send().await.unwrap_err();
    assert_eq!(rejection(&err).unwrap().state(), State::Open);
    assert_eq!(tripline::Breaker::metrics(&here).failed_calls, 3);
    task.abort();
}

#[tokio::test(flavor = "current_thread")]
async fn a_shared_breaker_sits_in_the_grpc_layer() {
    let server = RedisServer::start().unwrap();
    let here = replica(&server, "dep:vendor", "a");
    let there = replica(&server, "dep:vendor", "b");
    let vendor = vendor::Vendor::new();
    let addr = vendor::serve(vendor.clone()).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(BreakerLayer::new(here.clone()).classifier(GrpcClassifier::default()))
        .service(channel);
    assert_eq!(
        vendor::card(client.clone(), "1")
            .await
            .unwrap()
            .into_inner(),
        "card 1"
    );
    vendor.set(vendor::Answer::Fail(tonic::Code::Unavailable, None));
    for _ in 0..3 {
        let status = vendor::card(client.clone(), "1").await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
    }
    assert_eq!(refused_elsewhere(&there).await, State::Open);
    let calls = vendor.calls();
    let status = vendor::card(client.clone(), "1").await.unwrap_err();
    let rejected = status
        .source()
        .and_then(|e| e.downcast_ref::<Rejected>())
        .expect("the refusal inside the status");
    assert_eq!(rejected.state(), State::Open);
    assert_eq!(vendor.calls(), calls, "a refused call never leaves");
}

#[tokio::test(flavor = "current_thread")]
async fn a_shared_breaker_sits_in_the_pipeline() {
    let server = RedisServer::start().unwrap();
    let here = replica(&server, "dep:catalog", "a");
    let there = replica(&server, "dep:catalog", "b");
    let pipeline = Pipeline::builder()
        .breaker(here.clone())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert_eq!(pipeline.breaker().unwrap().name(), "dep:catalog");
    let card = pipeline
        .call(|| async { Ok::<_, std::io::Error>("card") })
        .await
        .unwrap();
    assert_eq!(card, "card");
    for _ in 0..3 {
        let r = pipeline
            .call(|| async { Err::<&str, _>(std::io::Error::other("503")) })
            .await;
        assert!(matches!(r, Err(PipelineError::Failed(_))));
    }
    assert_eq!(refused_elsewhere(&there).await, State::Open);
    let r = pipeline
        .call(|| async { Ok::<_, std::io::Error>("never called") })
        .await;
    match r {
        Err(PipelineError::Rejected(r)) => assert_eq!(r.state(), State::Open),
        other => panic!("expected a refusal, got {other:?}"),
    }

    // The same pipeline around another replica's handle: one per tenant, shard or replica.
    there.reset().await.unwrap();
    let elsewhere = pipeline.with_breaker(there.clone());
    assert_eq!(
        elsewhere
            .call(|| async { Ok::<_, std::io::Error>("fresh") })
            .await
            .unwrap(),
        "fresh"
    );
    assert_eq!(pipeline.stats().calls, 6);
}

/// One replica's fleet-wide registry: a shared breaker per key, asking Redis at every acquire.
fn replica_registry(server: &RedisServer, id: &str) -> Arc<SharedRegistry<ManualClock>> {
    let shared = SharedConfig::builder()
        .time_source(TimeSource::Local)
        .view_ttl(Duration::ZERO)
        .redis_timeout(Duration::from_secs(1))
        .replica_id(id)
        .build()
        .unwrap();
    let registry = tripline::registry::RegistryConfig::default().with_config("default", config());
    Arc::new(
        SharedRegistry::with_clock(
            registry,
            shared,
            Backend::single(&server.url()).unwrap(),
            ManualClock::new(),
        )
        .unwrap(),
    )
}

/// A host that answers 503 while `failing`, counting the requests it was sent.
async fn host(
    failing: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
) -> (String, tokio::task::JoinHandle<()>) {
    let app = Router::new()
        .route(
            "/price",
            get(move |s: axum::extract::State<Arc<AtomicBool>>| {
                sent.fetch_add(1, Ordering::SeqCst);
                flaky(s)
            }),
        )
        .with_state(failing);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/price", listener.local_addr().unwrap());
    (
        url,
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() }),
    )
}

/// A breaker per host from the fleet's registry, in the reqwest middleware: one replica's
/// failures on a host refuse that host on the other replica, unsent, while the other host
/// goes on.
#[tokio::test(flavor = "current_thread")]
async fn a_fleet_wide_breaker_per_host_sits_in_the_reqwest_middleware() {
    let server = RedisServer::start().unwrap();
    let client = |registry: Arc<SharedRegistry<ManualClock>>| {
        reqwest_middleware::ClientBuilder::new(
            reqwest::Client::builder().no_proxy().build().unwrap(),
        )
        .with(KeyedBreakerMiddleware::new("prices", registry).unwrap())
        .build()
    };
    let (here, there) = (
        client(replica_registry(&server, "a")),
        client(replica_registry(&server, "b")),
    );
    let (sick_sent, well_sent) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (sick, sick_task) = host(Arc::new(AtomicBool::new(true)), sick_sent.clone()).await;
    let (well, well_task) = host(Arc::new(AtomicBool::new(false)), well_sent.clone()).await;
    for _ in 0..4 {
        assert_eq!(here.get(&sick).send().await.unwrap().status(), 503);
    }
    assert_eq!(sick_sent.load(Ordering::SeqCst), 4);
    // The other replica: the sick host is refused unsent, by its own key's fleet breaker.
    let err = there.get(&sick).send().await.unwrap_err();
    let refused = rejection(&err).expect("a rejection");
    assert_eq!(refused.state(), State::Open);
    assert!(
        refused.breaker().starts_with("prices/host=127.0.0.1:"),
        "{}",
        refused.breaker()
    );
    assert_eq!(sick_sent.load(Ordering::SeqCst), 4);
    // The well host is another key: it goes on, from either replica.
    assert_eq!(there.get(&well).send().await.unwrap().status(), 200);
    assert_eq!(here.get(&well).send().await.unwrap().status(), 200);
    assert_eq!(well_sent.load(Ordering::SeqCst), 2);
    sick_task.abort();
    well_task.abort();
}
