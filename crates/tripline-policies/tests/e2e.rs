//! End to end on loopback: an axum server with a fault switch, called through the reqwest
//! middleware and through the pipeline. The HTTP traffic is real; the breakers read a
//! `ManualClock`, so every state change happens when the test says, never after a sleep.
#![cfg(all(feature = "reqwest", feature = "pipeline"))]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State as AxumState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
use tripline::{BreakerConfig, CircuitBreaker, ManualClock, Rejected, State};
use tripline_policies::pipeline::{Pipeline, PipelineError};
use tripline_policies::reqwest::{
    BreakerMiddleware, HostBreakerMiddleware, ReqwestClassifier, rejection,
};

// ---------------------------------------------------------------------------------------------
// The server: GET /price answers as the switch says; GET /missing is a 404; POST
// /switch/{healthy|slow|failing} flips the switch. Every GET is counted.

const HEALTHY: u8 = 0;
const SLOW: u8 = 1;
const FAILING: u8 = 2;

#[derive(Clone, Default)]
struct Switch {
    mode: Arc<AtomicU8>,
    hits: Arc<AtomicUsize>,
}

async fn price(AxumState(s): AxumState<Switch>) -> Response {
    s.hits.fetch_add(1, Ordering::SeqCst);
    match s.mode.load(Ordering::SeqCst) {
        HEALTHY => "42".into_response(),
        SLOW => {
            // Far longer than any client waits: the client's timeout fires first, and the
            // handler is cancelled with its connection or when the test's runtime stops.
            tokio::time::sleep(Duration::from_secs(10)).await;
            "42 (late)".into_response()
        }
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "30")],
            "down",
        )
            .into_response(),
    }
}

async fn missing(AxumState(s): AxumState<Switch>) -> StatusCode {
    s.hits.fetch_add(1, Ordering::SeqCst);
    StatusCode::NOT_FOUND
}

async fn flip(AxumState(s): AxumState<Switch>, Path(mode): Path<String>) -> StatusCode {
    let mode = match mode.as_str() {
        "healthy" => HEALTHY,
        "slow" => SLOW,
        "failing" => FAILING,
        _ => return StatusCode::BAD_REQUEST,
    };
    s.mode.store(mode, Ordering::SeqCst);
    StatusCode::NO_CONTENT
}

struct Server {
    addr: SocketAddr,
    switch: Switch,
    task: JoinHandle<()>,
}

impl Server {
    async fn start() -> Server {
        let switch = Switch::default();
        let app = Router::new()
            .route("/price", get(price))
            .route("/missing", get(missing))
            .route("/switch/{mode}", post(flip))
            .with_state(switch.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Server { addr, switch, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn hits(&self) -> usize {
        self.switch.hits.load(Ordering::SeqCst)
    }

    fn set(&self, mode: u8) {
        self.switch.mode.store(mode, Ordering::SeqCst);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------------
// The client side.

/// Opens on 50% failures over the last 4 calls (at least 4), stays open 10 s (or as long as a
/// `Retry-After` asks), closes after 2 successful probes.
fn config() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(10))
        .half_open_calls(2)
        .build()
        .unwrap()
}

fn plain_client(timeout: Option<Duration>) -> reqwest::Client {
    let mut b = reqwest::Client::builder().no_proxy();
    if let Some(t) = timeout {
        b = b.timeout(t);
    }
    b.build().unwrap()
}

fn client_with(middleware: impl Middleware, timeout: Option<Duration>) -> ClientWithMiddleware {
    ClientBuilder::new(plain_client(timeout))
        .with(middleware)
        .build()
}

const CACHED: &str = "41 (cached)";

/// What the caller got: the server's price, or the cached one and why.
#[derive(Debug)]
enum Got {
    Fresh(String),
    Cached(Why),
}

#[derive(Debug)]
enum Why {
    Status(u16),
    Rejected(Rejected),
    Timeout,
    Unreachable,
    /// Shown in failure messages.
    Other(#[expect(dead_code, reason = "kept for the Debug output of a failed assertion")] String),
}

impl Got {
    fn shown(&self) -> &str {
        match self {
            Got::Fresh(p) => p,
            Got::Cached(_) => CACHED,
        }
    }

    fn rejected(self) -> Rejected {
        match self {
            Got::Cached(Why::Rejected(r)) => r,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
}

async fn answer(resp: reqwest::Response) -> Got {
    if resp.status().is_success() {
        Got::Fresh(resp.text().await.unwrap())
    } else {
        Got::Cached(Why::Status(resp.status().as_u16()))
    }
}

fn why(e: &reqwest::Error) -> Why {
    if e.is_timeout() {
        Why::Timeout
    } else if e.is_connect() {
        Why::Unreachable
    } else {
        Why::Other(e.to_string())
    }
}

/// A price through the middleware client, with the fallback.
async fn fetch(client: &ClientWithMiddleware, url: &str) -> Got {
    match client.get(url).send().await {
        Ok(resp) => answer(resp).await,
        Err(e) => match (rejection(&e), &e) {
            (Some(r), _) => Got::Cached(Why::Rejected(r.clone())),
            (None, reqwest_middleware::Error::Reqwest(e)) => Got::Cached(why(e)),
            (None, e) => Got::Cached(Why::Other(e.to_string())),
        },
    }
}

/// A price through the pipeline (a plain client inside it), with the fallback.
async fn price_through<P>(
    pipeline: &Pipeline<ManualClock, P, ReqwestClassifier>,
    client: &reqwest::Client,
    url: &str,
) -> Got
where
    P: tripline_policies::retry::Retryable<reqwest::Response, reqwest::Error>,
{
    match pipeline.call(|| client.get(url).send()).await {
        Ok(resp) => answer(resp).await,
        Err(PipelineError::Rejected(r)) => Got::Cached(Why::Rejected(r)),
        Err(PipelineError::Timeout(_)) => Got::Cached(Why::Timeout),
        Err(PipelineError::Failed(e)) => Got::Cached(why(&e)),
        Err(e) => Got::Cached(Why::Other(e.to_string())),
    }
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn middleware_opens_on_failures_serves_the_fallback_without_calls_and_closes_after_probes() {
    let server = Server::start().await;
    let clock = ManualClock::new();
    let breaker = CircuitBreaker::with_clock("prices", config(), clock.clone());
    let client = client_with(BreakerMiddleware::new(breaker.clone()), None);
    let url = server.url("/price");

    for _ in 0..2 {
        assert_eq!(fetch(&client, &url).await.shown(), "42");
    }
    assert_eq!(server.hits(), 2);

    // Flip the switch through its endpoint (not through the breaker).
    let flipped = plain_client(None)
        .post(server.url("/switch/failing"))
        .send()
        .await
        .unwrap();
    assert_eq!(flipped.status(), 204);

    // [S, S, F]: below the minimum; [S, S, F, F]: 50%, open.
    let got = fetch(&client, &url).await;
    assert!(matches!(got, Got::Cached(Why::Status(503))), "{got:?}");
    assert_eq!(got.shown(), CACHED);
    assert_eq!(breaker.state(), State::Closed);
    assert!(matches!(
        fetch(&client, &url).await,
        Got::Cached(Why::Status(503))
    ));
    assert_eq!(breaker.state(), State::Open);
    assert_eq!(server.hits(), 4);

    // Open: the fallback at once, the server untouched. The open wait is the server's
    // Retry-After (30 s), longer than the configured 10 s.
    for _ in 0..5 {
        let got = fetch(&client, &url).await;
        assert_eq!(got.shown(), CACHED);
        let r = got.rejected();
        assert_eq!((r.breaker(), r.state()), ("prices", State::Open));
        assert_eq!(r.retry_after(), Some(Duration::from_secs(30)));
    }
    assert_eq!(server.hits(), 4);
    assert_eq!(breaker.metrics().rejected_calls, 5);

    clock.advance(Duration::from_secs(10));
    let r = fetch(&client, &url).await.rejected();
    assert_eq!(r.retry_after(), Some(Duration::from_secs(20)));
    assert_eq!(server.hits(), 4);

    // The server recovers; once the wait is over, two probes go through and close the breaker.
    server.set(HEALTHY);
    clock.advance(Duration::from_secs(20));
    assert_eq!(fetch(&client, &url).await.shown(), "42");
    assert_eq!(breaker.state(), State::HalfOpen);
    assert_eq!(fetch(&client, &url).await.shown(), "42");
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(server.hits(), 6);

    assert_eq!(fetch(&client, &url).await.shown(), "42");
    assert_eq!(server.hits(), 7);
    let m = breaker.metrics();
    assert_eq!(
        (m.successful_calls, m.failed_calls, m.rejected_calls),
        (5, 2, 6)
    );
}

#[tokio::test]
async fn pipeline_times_out_a_slow_server_trips_and_serves_the_fallback_until_probes_close() {
    let server = Server::start().await;
    server.set(SLOW);
    let clock = ManualClock::new();
    let breaker = CircuitBreaker::with_clock("prices", config(), clock.clone());
    // The timeout is the pipeline's, innermost; the breaker's clock is the manual one. 200 ms:
    // the slow handler takes 10 s, and the healthy probes at the end must answer within it.
    let pipeline = Pipeline::builder()
        .breaker(breaker.clone())
        .timeout(Duration::from_millis(200))
        .classifier(ReqwestClassifier)
        .build()
        .unwrap();
    let client = plain_client(None);
    let url = server.url("/price");
    let price = || price_through(&pipeline, &client, &url);

    // Four timeouts: failures, and the breaker opens on the fourth.
    for i in 1..=4 {
        let got = price().await;
        assert!(matches!(got, Got::Cached(Why::Timeout)), "{got:?}");
        assert_eq!(got.shown(), CACHED);
        let expected = if i < 4 { State::Closed } else { State::Open };
        assert_eq!(breaker.state(), expected, "after timeout {i}");
    }
    assert_eq!(server.hits(), 4);
    assert_eq!(breaker.metrics().failed_calls, 4);

    for _ in 0..3 {
        let r = price().await.rejected();
        assert_eq!(r.retry_after(), Some(Duration::from_secs(10)));
    }
    assert_eq!(server.hits(), 4, "no call reached the server while open");

    server.set(HEALTHY);
    clock.advance(Duration::from_secs(10));
    assert_eq!(price().await.shown(), "42");
    assert_eq!(price().await.shown(), "42");
    assert_eq!(breaker.state(), State::Closed);
    assert_eq!(server.hits(), 6);
}

#[tokio::test]
async fn timeouts_and_refused_connections_fail_4xx_is_ignored_and_a_dropped_request_abandons() {
    let server = Server::start().await;
    let clock = ManualClock::new();
    let breaker = CircuitBreaker::with_clock("prices", config(), clock);
    let timed = client_with(
        BreakerMiddleware::new(breaker.clone()),
        Some(Duration::from_millis(50)),
    );
    let untimed = client_with(BreakerMiddleware::new(breaker.clone()), None);

    // Other 4xx: the request was wrong, not the server.
    for _ in 0..5 {
        let got = fetch(&untimed, &server.url("/missing")).await;
        assert!(matches!(got, Got::Cached(Why::Status(404))), "{got:?}");
    }
    let m = breaker.metrics();
    assert_eq!((m.ignored_calls, m.failed_calls), (5, 0));
    assert_eq!(breaker.state(), State::Closed);

    // The client's timeout, inside the middleware: a failure.
    server.set(SLOW);
    let got = fetch(&timed, &server.url("/price")).await;
    assert!(matches!(got, Got::Cached(Why::Timeout)), "{got:?}");
    assert_eq!(breaker.metrics().failed_calls, 1);

    // Nobody listening: a failure.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let got = fetch(&untimed, &format!("http://127.0.0.1:{port}/price")).await;
    assert!(matches!(got, Got::Cached(Why::Unreachable)), "{got:?}");
    assert_eq!(breaker.metrics().failed_calls, 2);

    // The caller gives up (its future is dropped): the permit is abandoned, not a failure.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        untimed.get(server.url("/price")).send(),
    )
    .await;
    assert!(gave_up.is_err());
    let m = breaker.metrics();
    assert_eq!((m.abandoned_permits, m.failed_calls), (1, 2));
    assert_eq!((m.window.calls, m.window.failures), (2, 2));
}

#[tokio::test]
async fn a_breaker_per_host_keeps_the_healthy_host_in_use() {
    let (sick, well) = (Server::start().await, Server::start().await);
    sick.set(FAILING);
    let clock = ManualClock::new();
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_config("default", config()),
            clock,
        )
        .unwrap(),
    );
    let client = client_with(
        HostBreakerMiddleware::new("prices", registry.clone()).unwrap(),
        None,
    );
    let key = |s: &Server| Key::scoped("prices", ScopeKind::Host, &s.addr.to_string()).unwrap();

    for _ in 0..4 {
        assert!(matches!(
            fetch(&client, &sick.url("/price")).await,
            Got::Cached(Why::Status(503))
        ));
        assert_eq!(fetch(&client, &well.url("/price")).await.shown(), "42");
    }
    assert_eq!(registry.peek(&key(&sick)).unwrap().state(), State::Open);
    assert_eq!(registry.peek(&key(&well)).unwrap().state(), State::Closed);

    let r = fetch(&client, &sick.url("/price")).await.rejected();
    assert_eq!(r.breaker(), format!("prices/host={}", sick.addr));
    assert_eq!(fetch(&client, &well.url("/price")).await.shown(), "42");
    assert_eq!((sick.hits(), well.hits()), (4, 5));
}

#[tokio::test]
async fn bad_input_is_a_clear_error() {
    let registry = Arc::new(Registry::new(RegistryConfig::default()).unwrap());
    for bad in ["", "prices api", "prices/eu"] {
        let err = HostBreakerMiddleware::new(bad, registry.clone()).unwrap_err();
        assert_eq!(err.field(), "key.dependency", "{bad:?}");
    }

    // A URL without a host has no per-host breaker: an error, nothing sent, no breaker made.
    let client = client_with(
        HostBreakerMiddleware::new("prices", registry.clone()).unwrap(),
        None,
    );
    // (reqwest's request builder refuses such a URL already; a hand-made request does not.)
    let url = reqwest::Url::parse("file:///etc/hosts").unwrap();
    let err = client
        .execute(reqwest::Request::new(reqwest::Method::GET, url))
        .await
        .unwrap_err();
    let reqwest_middleware::Error::Middleware(e) = &err else {
        panic!("{err:?}");
    };
    let config = e.downcast_ref::<tripline::ConfigError>().unwrap();
    assert_eq!(config.field(), "request.url.host");
    assert!(rejection(&err).is_none());
    assert!(registry.is_empty());

    // The switch refuses a mode it does not know.
    let server = Server::start().await;
    let resp = plain_client(None)
        .post(server.url("/switch/sideways"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

/// A middleware further down the chain that fails before sending: it could not get a token.
struct NoToken;

#[async_trait::async_trait]
impl Middleware for NoToken {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        Err(reqwest_middleware::Error::Middleware(anyhow::anyhow!(
            "token service unavailable"
        )))
    }
}

#[tokio::test]
async fn an_error_of_a_middleware_further_down_is_not_a_failure_of_the_dependency() {
    let server = Server::start().await;
    let breaker = CircuitBreaker::with_clock("prices", config(), ManualClock::new());
    let client = ClientBuilder::new(plain_client(None))
        .with(BreakerMiddleware::new(breaker.clone()))
        .with(NoToken)
        .build();
    for _ in 0..10 {
        let err = client.get(server.url("/price")).send().await.unwrap_err();
        assert!(
            err.to_string().contains("token service unavailable"),
            "{err}"
        );
    }
    let m = breaker.metrics();
    assert_eq!((m.failed_calls, m.ignored_calls), (0, 10));
    assert_eq!(
        breaker.state(),
        State::Closed,
        "the price server was never asked"
    );
    assert_eq!(server.hits(), 0);
}
