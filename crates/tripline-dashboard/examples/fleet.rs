//! The fault-switch service as a fleet: twelve replicas, each calling the price server
//! through the same pipeline as the single-replica service (a breaker with a 250 ms timeout
//! inside it), sharing one breaker whose window and state live in one `redis-server`. The
//! operator's page of replica 1 is under `/ops`, and its kill switch holds on all twelve.
//!
//! The only line that differs from the single-replica service is the breaker's construction:
//!
//! ```text
//! let breaker = CircuitBreaker::new("prices", config);                              // one replica
//! let breaker = SharedBreaker::new("prices", config, shared, Backend::single(url)?)?; // the fleet
//! ```
//!
//! The story: healthy calls on every replica; the server fails, and the failures the replicas
//! see together trip the one breaker (so every replica fails fast, the ones that saw no failure
//! too); the server recovers and the fleet's probes close it; an operator throws the kill
//! switch on the page of replica 1 and all twelve refuse; the reset reopens the flow. Each
//! replica learns of a transition made elsewhere at its next round trip to Redis, or within
//! `view_ttl` (100 ms by default) while its view of a Closed breaker is fresh: the story waits
//! that long after each one.
//!
//! ```text
//! cargo run -p tripline-dashboard --example fleet            # the story, then exit
//! cargo run -p tripline-dashboard --example fleet -- --serve # and keep the page up
//! ```
//!
//! It starts its own `redis-server` (from `PATH`) on a free loopback port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State as AxumState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rand::TryRngCore;
use serde_json::json;
use tripline::registry::Key;
use tripline::{Breaker, BreakerConfig, MonotonicClock, State};
use tripline_dashboard::{DashboardBuilder, Permissions};
use tripline_policies::pipeline::{KeepFailures, Pipeline, PipelineError};
use tripline_policies::reqwest::ReqwestClassifier;
use tripline_policies::retry::RetryOnError;
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig};

const REPLICAS: usize = 12;

/// A little over the replicas' `view_ttl` (100 ms by default): the longest a replica whose
/// view is fresh takes to learn of a transition another replica (or the page) made.
const VIEW_TTL: Duration = Duration::from_millis(150);

// ---------------------------------------------------------------------------------------------
// The price server and its switch.

/// Whether the server fails, and how many price requests reached it.
#[derive(Clone, Default)]
struct Switch {
    failing: Arc<AtomicBool>,
    hits: Arc<AtomicUsize>,
}

async fn price(AxumState(s): AxumState<Switch>) -> Response {
    s.hits.fetch_add(1, Ordering::SeqCst);
    if s.failing.load(Ordering::SeqCst) {
        (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response()
    } else {
        "42".into_response()
    }
}

async fn flip(AxumState(s): AxumState<Switch>, Path(mode): Path<String>) -> StatusCode {
    match mode.as_str() {
        "healthy" => s.failing.store(false, Ordering::SeqCst),
        "failing" => s.failing.store(true, Ordering::SeqCst),
        _ => return StatusCode::BAD_REQUEST,
    }
    StatusCode::NO_CONTENT
}

async fn serve(app: Router, addr: &str) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("server stopped: {e}");
        }
    });
    Ok(addr)
}

// ---------------------------------------------------------------------------------------------
// The replicas.

type Prices =
    Pipeline<MonotonicClock, RetryOnError, ReqwestClassifier, KeepFailures, SharedBreaker>;

/// One replica of the service: its handle on the fleet's breaker and its pipeline.
struct Replica {
    breaker: SharedBreaker,
    pipeline: Prices,
}

/// What one call of a replica gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Priced {
    Fresh,
    Failed,
    Refused(State),
}

impl Replica {
    async fn price(&self, http: &reqwest::Client, url: &str) -> Priced {
        match self.pipeline.call(|| http.get(url).send()).await {
            Ok(resp) if resp.status().is_success() => Priced::Fresh,
            Err(PipelineError::Rejected(r)) => Priced::Refused(r.state()),
            _ => Priced::Failed,
        }
    }
}

/// One call on every replica; what they gave, in a line.
async fn round(replicas: &[Replica], http: &reqwest::Client, url: &str) -> Vec<Priced> {
    let mut out = Vec::new();
    for r in replicas {
        out.push(r.price(http, url).await);
    }
    out
}

fn show(label: &str, priced: &[Priced], switch: &Switch) {
    let mark = |p: &Priced| match p {
        Priced::Fresh => "fresh".to_string(),
        Priced::Failed => "FAIL".to_string(),
        Priced::Refused(s) => format!("refused({s})"),
    };
    let line: Vec<String> = priced.iter().map(mark).collect();
    println!(
        "{label:<28} {} | server hits {}",
        line.join(" "),
        switch.hits.load(Ordering::SeqCst)
    );
}

fn random_token() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the operating system's random generator");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let keep_serving = std::env::args().any(|a| a == "--serve");
    let redis = RedisServer::start()?;
    println!("redis-server on {}", redis.url());

    let switch = Switch::default();
    let prices = Router::new()
        .route("/price", get(price))
        .route("/switch/{mode}", post(flip))
        .with_state(switch.clone());
    let price_url = format!("http://{}/price", serve(prices, "127.0.0.1:0").await?);

    // The fault-switch service's breaker: opens on 50 % failures over the last 8 calls, waits
    // 1 s, then 2 probes.
    let config = BreakerConfig::builder()
        .count_window(8)
        .minimum_calls(8)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(1))
        .half_open_calls(2)
        .build()?;
    let mut replicas = Vec::new();
    for i in 1..=REPLICAS {
        let shared = SharedConfig::builder()
            .replica_id(format!("replica-{i:02}"))
            .build()?;
        // The one line that differs from the single-replica service.
        let breaker = SharedBreaker::new(
            "prices",
            config.clone(),
            shared,
            Backend::single(&redis.url())?,
        )?;
        let pipeline = Pipeline::builder()
            .breaker(breaker.clone())
            .timeout(Duration::from_millis(250))
            .classifier(ReqwestClassifier)
            .build()?;
        replicas.push(Replica { breaker, pipeline });
    }

    // Replica 1's own routes, with the operator's page under /ops.
    let token = random_token();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let dashboard = DashboardBuilder::new(MonotonicClock::new())
        .bearer_token(token.as_str(), "on-call", Permissions::ALL)
        .allowed_host(&addr.to_string())
        .allowed_host(&format!("localhost:{}", addr.port()))
        .shared_breaker(Key::new("prices")?, replicas[0].breaker.clone())
        .build()?;
    let app = dashboard.mount(
        Router::new().route("/health", get(|| async { "ok" })),
        "/ops",
    );
    tokio::spawn(async move {
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, service).await {
            eprintln!("page stopped: {e}");
        }
    });
    println!("the page of replica 1: http://{addr}/ops/ (operator token {token})\n");

    let http = reqwest::Client::builder().no_proxy().build()?;
    show(
        "healthy",
        &round(&replicas, &http, &price_url).await,
        &switch,
    );

    // Failing: the replicas' failures land in one window; the first refusal (on whichever
    // replica) says the fleet's breaker opened.
    switch.failing.store(true, Ordering::SeqCst);
    let (mut failures, mut next) = (0, 0);
    loop {
        match replicas[next % REPLICAS].price(&http, &price_url).await {
            Priced::Failed => failures += 1,
            Priced::Refused(_) => break,
            Priced::Fresh => {}
        }
        next += 1;
        if failures > 64 {
            return Err("the fleet's breaker did not open".into());
        }
    }
    // The window trips at its fourth failure (4 of the last 8 calls); replicas whose view of
    // the Closed breaker was still fresh admitted a call each before they learned of it.
    println!(
        "failing: {failures} failures before the first refusal (the window tripped at 4 of 8; \
         the rest were admitted by replicas that had not seen the trip yet)"
    );
    // Each replica learns of a transition at its next round trip, or within `view_ttl`
    // (100 ms) when its view of a Closed breaker is fresh.
    tokio::time::sleep(VIEW_TTL).await;
    let hits = switch.hits.load(Ordering::SeqCst);
    show(
        "open, fleet-wide",
        &round(&replicas, &http, &price_url).await,
        &switch,
    );
    println!(
        "{:<28} {} of them reached the server\n",
        "",
        switch.hits.load(Ordering::SeqCst) - hits
    );

    // Healthy again: after the open wait the fleet's probes (2 in all) close it.
    switch.failing.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..3 {
        show(
            "recovering",
            &round(&replicas, &http, &price_url).await,
            &switch,
        );
    }

    // The kill switch, thrown on replica 1's page (as its button does).
    let ops = format!("http://{addr}/ops/api/control");
    let throw = |action: &'static str| {
        http.post(&ops)
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(json!({"action": action, "key": "prices"}).to_string())
            .send()
    };
    let answer = throw("force-open").await?.error_for_status()?;
    println!("\nkill switch on the page: {}", answer.text().await?);
    tokio::time::sleep(VIEW_TTL).await;
    show(
        "forced open, fleet-wide",
        &round(&replicas, &http, &price_url).await,
        &switch,
    );
    throw("reset").await?.error_for_status()?;
    tokio::time::sleep(VIEW_TTL).await;
    show(
        "reset on the page",
        &round(&replicas, &http, &price_url).await,
        &switch,
    );

    let m = Breaker::metrics(&replicas[0].breaker);
    println!(
        "\nreplica 1: {} successes, {} failures, {} refused; state {}",
        m.successful_calls, m.failed_calls, m.rejected_calls, m.state
    );
    if keep_serving {
        println!("serving the page until stopped (Ctrl-C)");
        std::future::pending::<()>().await;
    }
    Ok(())
}
