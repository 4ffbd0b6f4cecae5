//! Per-shard mini breakers the server directs, through the tower layer (an `http` service),
//! the reqwest middleware (a real HTTP server in this process) and the gRPC metadata
//! classifier: the shard the server blames in `x-overloaded-shard` trips alone, a call naming
//! it is refused by its breaker without being sent, healthy shards pass, and hostile header
//! values create no keys past the registry's bound. Time is a `ManualClock`; nothing sleeps.
#![cfg(all(feature = "tower", feature = "reqwest", feature = "grpc"))]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tower::{Layer, ServiceExt, service_fn};
use tripline::registry::{Blame, Key, Registry, RegistryConfig, ScopeKind, ServerDirected};
use tripline::{BreakerConfig, Classify, ManualClock, Rejected, State};
use tripline_policies::BoxError;
use tripline_policies::breaker::ServerDirectedLayer;
use tripline_policies::grpc::{BlameMetadata, GrpcClassifier};
use tripline_policies::http::{BlameHeader, HttpClassifier};
use tripline_policies::reqwest::{ReqwestClassifier, ServerDirectedMiddleware, rejection};

const HOT: &str = "3";

fn small() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(2)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

fn catalog(max: usize) -> (ServerDirected<ManualClock>, Arc<Registry<ManualClock>>) {
    let config = RegistryConfig::default()
        .with_config("default", small())
        .with_max_breakers(max);
    let registry = Arc::new(Registry::with_clock(config, ManualClock::new()).unwrap());
    let directed = ServerDirected::new(registry.clone(), Key::new("catalog").unwrap()).unwrap();
    (directed, registry)
}

fn shard_key(s: &str) -> Key {
    Key::scoped("catalog", ScopeKind::Shard, s).unwrap()
}

fn shard_of(headers: &http::HeaderMap) -> Option<String> {
    headers.get("x-shard")?.to_str().ok().map(str::to_owned)
}

/// A sharded server: the hot shard answers 503 naming itself in `x-overloaded-shard` (or the
/// value given in `blame`, for hostile values), the others 200. Counts requests per shard.
#[derive(Clone, Default)]
struct Shards {
    hits: Arc<Mutex<HashMap<String, usize>>>,
    blame: Arc<Mutex<Option<Vec<u8>>>>,
}

impl Shards {
    fn answer(&self, shard: &str) -> http::Response<()> {
        *self
            .hits
            .lock()
            .unwrap()
            .entry(shard.to_owned())
            .or_default() += 1;
        let blamed = self.blame.lock().unwrap().clone();
        let mut resp = http::Response::builder();
        if shard == HOT || blamed.is_some() {
            let value = blamed.unwrap_or_else(|| shard.as_bytes().to_vec());
            resp = resp.status(503).header(
                "x-overloaded-shard",
                http::HeaderValue::from_bytes(&value).unwrap(),
            );
        }
        resp.body(()).unwrap()
    }

    fn hits(&self, shard: &str) -> usize {
        self.hits.lock().unwrap().get(shard).copied().unwrap_or(0)
    }
}

fn request(shard: &str) -> http::Request<()> {
    http::Request::builder()
        .header("x-shard", shard)
        .body(())
        .unwrap()
}

type Svc = tower::util::BoxCloneService<http::Request<()>, http::Response<()>, BoxError>;

fn tower_service(directed: ServerDirected<ManualClock>, shards: Shards) -> Svc {
    let classifier = BlameHeader::new(HttpClassifier, "x-overloaded-shard").unwrap();
    let svc = ServerDirectedLayer::new(directed)
        .classifier(classifier)
        .names_shard(|req: &http::Request<()>| shard_of(req.headers()))
        .layer(service_fn(move |req: http::Request<()>| {
            let shards = shards.clone();
            async move {
                let shard = shard_of(req.headers()).unwrap_or_default();
                Ok::<_, std::io::Error>(shards.answer(&shard))
            }
        }));
    tower::util::BoxCloneService::new(svc)
}

#[tokio::test]
async fn a_blamed_shard_trips_alone_and_healthy_shards_pass() {
    let (directed, registry) = catalog(100);
    let shards = Shards::default();
    let svc = tower_service(directed.clone(), shards.clone());
    let mut refused = HashMap::<String, usize>::new();
    for _ in 0..20 {
        for shard in 0..8 {
            let shard = shard.to_string();
            match svc.clone().oneshot(request(&shard)).await {
                Ok(resp) => assert_eq!(resp.status() == 503, shard == HOT),
                Err(e) => {
                    let rejected = e.downcast_ref::<Rejected>().expect("a refusal");
                    assert_eq!(rejected.breaker(), "catalog/shard=3");
                    *refused.entry(shard).or_default() += 1;
                }
            }
        }
    }
    assert_eq!(refused.keys().collect::<Vec<_>>(), [&HOT.to_string()]);
    assert_eq!(shards.hits(HOT), 2, "refused calls are never sent");
    for shard in ["0", "7"] {
        assert_eq!(shards.hits(shard), 20);
    }
    assert_eq!(registry.peek(&shard_key(HOT)).unwrap().state(), State::Open);
    assert_eq!(directed.dependency_breaker().state(), State::Closed);
    assert_eq!(directed.dependency_breaker().metrics().failed_calls, 0);
    assert_eq!(registry.len(), 2, "the dependency and the one blamed shard");
}

struct Server {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn item(AxumState(shards): AxumState<Shards>, headers: HeaderMap) -> Response {
    let shard = shard_of(&headers).unwrap_or_default();
    let answer = shards.answer(&shard);
    let mut resp = StatusCode::from_u16(answer.status().as_u16())
        .unwrap()
        .into_response();
    resp.headers_mut().extend(answer.headers().clone());
    resp
}

async fn serve(shards: Shards) -> Server {
    let app = Router::new().route("/item", get(item)).with_state(shards);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server { addr, task }
}

fn client(directed: ServerDirected<ManualClock>) -> reqwest_middleware::ClientWithMiddleware {
    let middleware = ServerDirectedMiddleware::new(directed)
        .classifier(BlameHeader::new(ReqwestClassifier, "x-overloaded-shard").unwrap())
        .names_shard(|req: &reqwest::Request| shard_of(req.headers()));
    let reqwest = reqwest::Client::builder().no_proxy().build().unwrap();
    reqwest_middleware::ClientBuilder::new(reqwest)
        .with(middleware)
        .build()
}

#[tokio::test]
async fn a_call_naming_a_tripped_shard_is_refused_by_its_breaker() {
    let (directed, registry) = catalog(100);
    let shards = Shards::default();
    let server = serve(shards.clone()).await;
    let client = client(directed.clone());
    let url = format!("http://{}/item", server.addr);
    for _ in 0..2 {
        let resp = client
            .get(&url)
            .header("x-shard", HOT)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 503);
    }
    let err = client
        .get(&url)
        .header("x-shard", HOT)
        .send()
        .await
        .unwrap_err();
    let rejected = rejection(&err).expect("refused by the shard's breaker, never sent");
    assert_eq!(rejected.breaker(), "catalog/shard=3");
    assert_eq!(rejected.state(), State::Open);
    assert_eq!(shards.hits(HOT), 2);
    // Healthy shards, and calls that name no shard, pass.
    for shard in ["0", "1"] {
        let resp = client
            .get(&url)
            .header("x-shard", shard)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    assert_eq!(directed.dependency_breaker().state(), State::Closed);
    assert_eq!(registry.peek(&shard_key(HOT)).unwrap().state(), State::Open);
}

#[tokio::test]
async fn a_hostile_blamed_scope_is_refused_without_creating_keys_past_the_bound() {
    let (directed, registry) = catalog(3);
    let shards = Shards::default();
    let svc = tower_service(directed.clone(), shards.clone());
    let long = "9".repeat(300);
    let hostile: [&[u8]; 7] = [
        b"a/b",
        b"shard=1",
        b"two words",
        b"\xe2\x80\xae71", // U+202E, right-to-left override: not visible ASCII
        b"\xff\xfe",
        b"{x}",
        long.as_bytes(),
    ];
    for value in hostile {
        *shards.blame.lock().unwrap() = Some(value.to_vec());
        // Refused blames are recorded dependency-wide (nothing is lost), so two of them
        // open it: close it again for the next value.
        directed.dependency_breaker().reset();
        let failed = directed.dependency_breaker().metrics().failed_calls;
        let resp = svc.clone().oneshot(request("0")).await.unwrap();
        assert_eq!(resp.status(), 503);
        assert_eq!(
            registry.len(),
            1,
            "no key for {:?}",
            String::from_utf8_lossy(value)
        );
        assert_eq!(
            directed.dependency_breaker().metrics().failed_calls,
            failed + 1
        );
    }

    // A server blaming ever new valid shards cannot take the registry past its bound.
    let (directed, registry) = catalog(3);
    let svc = tower_service(directed.clone(), shards.clone());
    for i in 0..20 {
        *shards.blame.lock().unwrap() = Some(format!("s{i}").into_bytes());
        let _ = svc.clone().oneshot(request(&format!("s{i}"))).await;
    }
    assert_eq!(registry.len(), 3);
}

#[test]
fn grpc_status_metadata_blames_a_shard() {
    let k = BlameMetadata::new(GrpcClassifier::default(), "x-overloaded-shard").unwrap();
    let mut status = tonic::Status::resource_exhausted("hot");
    status
        .metadata_mut()
        .insert("x-overloaded-shard", "17".parse().unwrap());
    let failed: Result<(), _> = Err(status);
    assert_eq!(k.blame(&failed), Some(Blame::shard("17")));
    let plain: Result<(), _> = Err(tonic::Status::unavailable("down"));
    assert_eq!(k.blame(&plain), None);
    assert_eq!(k.blame(&Ok(())), None);
}

/// Server answers whose `x-overloaded-shard` cannot name a shard: empty, blank, too long,
/// not ASCII (a bidirectional override), not text, with a `/`.
fn unusable() -> Vec<Vec<u8>> {
    vec![
        b"".to_vec(),
        b"   ".to_vec(),
        "9".repeat(300).into_bytes(),
        b"\xe2\x80\xae71".to_vec(),
        b"\xff\xfe".to_vec(),
        b"a/b".to_vec(),
    ]
}

#[tokio::test]
async fn an_unusable_shard_header_counts_dependency_wide_and_is_counted_through_the_layer() {
    let (directed, registry) = catalog(100);
    let shards = Shards::default();
    let svc = tower_service(directed.clone(), shards.clone());
    let values = unusable();
    for (i, value) in values.iter().enumerate() {
        *shards.blame.lock().unwrap() = Some(value.clone());
        directed.dependency_breaker().reset();
        let failed = directed.dependency_breaker().metrics().failed_calls;
        let resp = svc.clone().oneshot(request("0")).await.unwrap();
        assert_eq!(resp.status(), 503);
        assert_eq!(
            directed.dependency_breaker().metrics().failed_calls,
            failed + 1,
            "{:?}: the failure still counts",
            String::from_utf8_lossy(value)
        );
        assert_eq!(directed.refused_blames().invalid, i as u64 + 1);
    }
    assert_eq!(registry.len(), 1, "no key for an unusable value");
}

#[tokio::test]
async fn an_unusable_shard_header_counts_dependency_wide_and_is_counted_through_the_middleware() {
    let (directed, registry) = catalog(100);
    let shards = Shards::default();
    let server = serve(shards.clone()).await;
    let client = client(directed.clone());
    let url = format!("http://{}/item", server.addr);
    let values = unusable();
    for (i, value) in values.iter().enumerate() {
        *shards.blame.lock().unwrap() = Some(value.clone());
        directed.dependency_breaker().reset();
        let failed = directed.dependency_breaker().metrics().failed_calls;
        let resp = client
            .get(&url)
            .header("x-shard", "0")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 503);
        assert_eq!(
            directed.dependency_breaker().metrics().failed_calls,
            failed + 1,
            "{:?}: the failure still counts",
            String::from_utf8_lossy(value)
        );
        assert_eq!(directed.refused_blames().invalid, i as u64 + 1);
    }
    assert_eq!(registry.len(), 1, "no key for an unusable value");
}

#[test]
fn an_unreadable_header_is_shown_as_an_escaped_prefix() {
    let k = BlameHeader::new(HttpClassifier, "x-overloaded-shard").unwrap();
    let mut value = b"\xff".to_vec();
    value.extend_from_slice(&[b'x'; 5_000]);
    let resp = http::Response::builder()
        .status(503)
        .header(
            "x-overloaded-shard",
            http::HeaderValue::from_bytes(&value).unwrap(),
        )
        .body(())
        .unwrap();
    let blame = k.blame(&Ok::<_, std::io::Error>(resp)).unwrap();
    let e = blame.value().unwrap_err();
    assert_eq!(e.field(), "header x-overloaded-shard");
    assert!(e.value().starts_with("\"\\xffxxx"), "{}", e.value());
    assert!(e.value().ends_with("... (5001 bytes)"), "{}", e.value());
    assert!(e.value().len() < 64, "{}", e.value());
}

fn scoped_keys(registry: &Registry<ManualClock>) -> usize {
    registry
        .keys()
        .iter()
        .filter(|k| k.dependency() == "catalog" && k.scope().is_some())
        .count()
}

#[tokio::test]
async fn a_server_naming_ever_new_shards_is_capped_through_the_layer_and_middleware() {
    let (directed, registry) = catalog(100);
    let directed = directed.with_max_scopes(4);
    let other = Key::new("payments").unwrap();
    registry.get(&other).unwrap();
    let shards = Shards::default();
    let svc = tower_service(directed.clone(), shards.clone());
    // The hot shard's breaker opens first.
    for _ in 0..2 {
        let _ = svc.clone().oneshot(request(HOT)).await;
    }
    for i in 0..200 {
        *shards.blame.lock().unwrap() = Some(format!("s{i}").into_bytes());
        directed.dependency_breaker().reset();
        let resp = svc
            .clone()
            .oneshot(request(&format!("s{i}")))
            .await
            .unwrap();
        assert_eq!(resp.status(), 503);
    }
    assert_eq!(scoped_keys(&registry), 4);
    assert_eq!(directed.refused_blames().too_many_scopes, 197);
    assert!(registry.peek(&other).is_some());

    // The reqwest middleware on the same dependency shares the cap.
    let server = serve(shards.clone()).await;
    let client = client(directed.clone());
    let url = format!("http://{}/item", server.addr);
    for i in 200..250 {
        *shards.blame.lock().unwrap() = Some(format!("s{i}").into_bytes());
        directed.dependency_breaker().reset();
        let resp = client
            .get(&url)
            .header("x-shard", format!("s{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 503);
    }
    assert_eq!(scoped_keys(&registry), 4);
    assert_eq!(directed.refused_blames().too_many_scopes, 247);
    // The hot shard is still judged by its own breaker.
    *shards.blame.lock().unwrap() = None;
    let err = client
        .get(&url)
        .header("x-shard", HOT)
        .send()
        .await
        .unwrap_err();
    assert_eq!(rejection(&err).unwrap().breaker(), "catalog/shard=3");
    let err = svc.oneshot(request(HOT)).await.unwrap_err();
    assert_eq!(
        err.downcast_ref::<Rejected>().unwrap().breaker(),
        "catalog/shard=3"
    );
}
