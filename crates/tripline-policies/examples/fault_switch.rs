//! A fault switch on loopback: an axum server whose `/price` is healthy, slow or failing as a
//! switch says, and a client that calls it through a pipeline (a breaker with the timeout
//! inside it, and a fault injector inside that) and shows a cached price whenever the call
//! does not give a fresh one.
//!
//! The client flips the switch through the server's `POST /switch/{mode}` and prints what
//! happens: the timeouts that trip the breaker, the fast rejections answered by the fallback
//! without touching the server, the probes after the open wait (stretched by the server's
//! `Retry-After`), and the breaker closing once the server is healthy again.
//!
//! Then a game day: the server stays healthy, and the fault injector stalls every call for
//! 5 s (the stall the 250 ms timeout cuts). The breaker opens, the client answers from its
//! cache without touching the server, and once the stall is lifted the breaker probes and
//! closes on its own. `tests/fault_switch.rs` runs this game day end to end.
//!
//! ```text
//! cargo run -p tripline-policies --example fault_switch --all-features
//! ```

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State as AxumState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tripline::{BreakerConfig, CircuitBreaker, Event, EventKind, MonotonicClock, Rejected, State};
use tripline_policies::chaos::{Chaos, ChaosConfig};
use tripline_policies::pipeline::{Pipeline, PipelineError};
use tripline_policies::reqwest::ReqwestClassifier;
use tripline_policies::retry::RetryOnError;

// ---------------------------------------------------------------------------------------------
// The server.

const HEALTHY: u8 = 0;
const SLOW: u8 = 1;
const FAILING: u8 = 2;

/// The switch, and how many price requests reached the server.
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
            tokio::time::sleep(Duration::from_secs(10)).await;
            "42".into_response()
        }
        // Overloaded, and it says for how long: the breaker will stay open that long.
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "2")],
            "busy",
        )
            .into_response(),
    }
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

async fn serve(switch: Switch) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/price", get(price))
        .route("/switch/{mode}", post(flip))
        .with_state(switch);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("server stopped: {e}");
        }
    });
    Ok(addr)
}

// ---------------------------------------------------------------------------------------------
// The client.

const CACHED: &str = "41 (cached)";

/// The stall a game day injects.
const STALL: Duration = Duration::from_secs(5);

pub(crate) struct Client {
    http: reqwest::Client,
    pipeline: Pipeline<MonotonicClock, RetryOnError, ReqwestClassifier>,
    /// The fault injector inside the pipeline, off until a game day.
    pub(crate) chaos: Chaos,
    base: String,
    hits: Arc<AtomicUsize>,
    started: Instant,
    /// Every transition the breaker made, in order.
    pub(crate) transitions: Arc<Mutex<Vec<(State, State)>>>,
}

impl Client {
    /// One price: fresh from the server, or the cached one and why. Returns the breaker's
    /// rejection, if that is why.
    async fn price(&self) -> Option<Rejected> {
        let t = Instant::now();
        let url = format!("{}/price", self.base);
        let result = self.pipeline.call(|| self.http.get(&url).send()).await;
        let took = t.elapsed();
        let (shown, why, rejected) = match result {
            Ok(resp) if resp.status().is_success() => {
                let body = resp.text().await.unwrap_or_default();
                (body, "fresh".to_string(), None)
            }
            Ok(resp) => (CACHED.to_string(), resp.status().to_string(), None),
            Err(PipelineError::Rejected(r)) => {
                let next = r.retry_after().unwrap_or_default();
                let why = format!("rejected: breaker {}, probe in {next:.2?}", r.state());
                (CACHED.to_string(), why, Some(r))
            }
            Err(e) => (CACHED.to_string(), e.to_string(), None),
        };
        println!(
            "[{:>5.2}s] {shown:<12} {why:<40} {:>9} | breaker {:<9} | server hits {}",
            self.started.elapsed().as_secs_f64(),
            format!("{took:.1?}"),
            self.state().to_string(),
            self.hits.load(Ordering::SeqCst),
        );
        rejected
    }

    async fn flip(&self, mode: &str) -> Result<(), reqwest::Error> {
        println!("\n--- switch: {mode}");
        self.http
            .post(format!("{}/switch/{mode}", self.base))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }

    pub(crate) fn state(&self) -> State {
        self.pipeline
            .breaker()
            .map_or(State::Closed, CircuitBreaker::state)
    }

    /// Server hits so far.
    pub(crate) fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// What a game day saw.
#[derive(Debug)]
pub(crate) struct GameDay {
    /// Calls made under the stall until the breaker opened.
    pub(crate) calls_to_open: usize,
    /// Calls answered while the breaker was open, and how many of them reached the server.
    pub(crate) answered_while_open: usize,
    pub(crate) hits_while_open: usize,
    /// The slowest of those answers.
    pub(crate) slowest_while_open: Duration,
    /// Whether the last call after the breaker closed was fresh.
    pub(crate) fresh_after: bool,
}

/// The game day: inject a 5 s stall into every call, wait (polling, with a deadline) for the
/// breaker to open, check that the open breaker answers locally, lift the stall, and poll
/// until the breaker has closed on its own.
pub(crate) async fn game_day(
    client: &Client,
    deadline: Duration,
) -> Result<GameDay, Box<dyn std::error::Error>> {
    println!("\n--- game day: every call stalls for {STALL:?}");
    client.chaos.reconfigure(
        ChaosConfig::builder()
            .latency(1.0, STALL)
            .enabled(true)
            .build()?,
    );
    let until = Instant::now() + deadline;
    let mut calls_to_open = 0;
    while client.state() != State::Open {
        if Instant::now() > until {
            return Err("the breaker did not open under the stall".into());
        }
        client.price().await;
        calls_to_open += 1;
    }

    println!("\n--- breaker open: answered locally");
    let hits = client.hits();
    let mut slowest = Duration::ZERO;
    let mut answered = 0;
    for _ in 0..3 {
        let t = Instant::now();
        if client.price().await.is_some() {
            answered += 1;
        }
        slowest = slowest.max(t.elapsed());
    }
    let hits_while_open = client.hits() - hits;

    println!("\n--- game day: stall lifted");
    client.chaos.disable();
    let until = Instant::now() + deadline;
    loop {
        if Instant::now() > until {
            return Err("the breaker did not close after the stall was lifted".into());
        }
        let rejected = client.price().await;
        if client.state() == State::Closed && rejected.is_none() {
            break;
        }
        // The open wait runs on real time: poll again shortly.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fresh_after = client.price().await.is_none() && client.state() == State::Closed;
    Ok(GameDay {
        calls_to_open,
        answered_while_open: answered,
        hits_while_open,
        slowest_while_open: slowest,
        fresh_after,
    })
}

/// The server and the client: a breaker that opens on 50% failures over the last 4 calls,
/// waits 1 s (or the server's Retry-After) before 2 probes and closes when both succeed; a
/// 250 ms timeout inside it; the fault injector inside the timeout.
pub(crate) async fn start() -> Result<Client, Box<dyn std::error::Error>> {
    let switch = Switch::default();
    let addr = serve(switch.clone()).await?;
    println!("server on http://{addr}");

    let config = BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(1))
        .half_open_calls(2)
        .build()?;
    let breaker = CircuitBreaker::new("prices", config);
    let transitions = Arc::new(Mutex::new(Vec::new()));
    breaker.subscribe({
        let transitions = Arc::clone(&transitions);
        move |e: &Event| {
            if let EventKind::Transition {
                from,
                to,
                reason,
                open_for,
                ..
            } = &e.kind
            {
                let wait = open_for.map_or(String::new(), |d| format!(", open for {d:?}"));
                println!("          breaker: {from} -> {to} ({reason:?}{wait})");
                if let Ok(mut t) = transitions.lock() {
                    t.push((*from, *to));
                }
            }
        }
    });
    let chaos = Chaos::default();
    let pipeline = Pipeline::builder()
        .breaker(breaker)
        .timeout(Duration::from_millis(250))
        .chaos(chaos.clone())
        .classifier(ReqwestClassifier)
        .build()?;
    Ok(Client {
        http: reqwest::Client::builder().no_proxy().build()?,
        pipeline,
        chaos,
        base: format!("http://{addr}"),
        hits: switch.hits.clone(),
        started: Instant::now(),
        transitions,
    })
}

#[cfg_attr(
    test,
    expect(dead_code, reason = "the test runs the game day, not the whole story")
)]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = start().await?;

    client.flip("healthy").await?;
    for _ in 0..3 {
        client.price().await;
    }

    // Slow: every call times out (250 ms), a failure; the breaker opens.
    client.flip("slow").await?;
    for _ in 0..8 {
        client.price().await;
        if client.state() == State::Open {
            break;
        }
    }

    // Open: the cached price at once; the server is not called.
    println!("\n--- breaker open: answered locally");
    let mut wait = Duration::ZERO;
    for _ in 0..3 {
        if let Some(r) = client.price().await {
            wait = r.retry_after().unwrap_or(wait);
        }
    }

    // Failing with Retry-After: 2. After the open wait, probes go out, fail, and the breaker
    // reopens for as long as the server asked.
    client.flip("failing").await?;
    println!("          (waiting {wait:.2?} for the open wait to end)");
    tokio::time::sleep(wait).await;
    for _ in 0..4 {
        client.price().await;
        if client.state() == State::Open {
            break;
        }
    }
    for _ in 0..2 {
        if let Some(r) = client.price().await {
            wait = r.retry_after().unwrap_or(wait);
        }
    }

    // Healthy again: after the wait, the probes succeed and the breaker closes.
    client.flip("healthy").await?;
    println!("          (waiting {wait:.2?} for the open wait to end)");
    tokio::time::sleep(wait).await;
    for _ in 0..4 {
        client.price().await;
    }

    // The game day, on the healthy server.
    let day = game_day(&client, Duration::from_secs(30)).await?;
    let transitions = client.transitions.lock().map_or(0, |t| t.len());
    println!(
        "\ngame day: opened after {} stalled calls; {} answers while open (the slowest in {:.1?}), \
         {} reached the server; closed on its own ({}); {transitions} transitions in all",
        day.calls_to_open,
        day.answered_while_open,
        day.slowest_while_open,
        day.hits_while_open,
        if day.fresh_after {
            "fresh prices again"
        } else {
            "still cached"
        },
    );

    if let Some(b) = client.pipeline.breaker() {
        let m = b.metrics();
        println!(
            "\nbreaker: {} successes, {} failures, {} rejected locally; server saw {} price requests",
            m.successful_calls,
            m.failed_calls,
            m.rejected_calls,
            client.hits(),
        );
    }
    Ok(())
}
