//! The fault-switch application with the operator's page mounted under `/ops/`: an axum
//! server whose `/price` is healthy, slow or failing as a switch says, a client that calls it
//! through a pipeline (a breaker from the registry with the timeout inside it), and keyed
//! breakers for a sharded catalog and a few tenants (whose names the page shows only to a
//! reader allowed to see sensitive scopes). The example's `main` drives traffic and flips the
//! switch; the browser test drives the same application step by step.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State as AxumState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
use tripline::{BreakerConfig, Clock};
use tripline_dashboard::{Dashboard, DashboardBuilder, Permissions};
use tripline_policies::pipeline::{Pipeline, PipelineError};
use tripline_policies::reqwest::ReqwestClassifier;
use tripline_policies::retry::RetryOnError;

const HEALTHY: u8 = 0;
const SLOW: u8 = 1;
const FAILING: u8 = 2;

/// The switch, and how many price requests reached the server.
#[derive(Clone, Default)]
pub(crate) struct Switch {
    mode: Arc<AtomicU8>,
    pub(crate) hits: Arc<AtomicUsize>,
}

async fn price(AxumState(s): AxumState<Switch>) -> Response {
    s.hits.fetch_add(1, Ordering::SeqCst);
    match s.mode.load(Ordering::SeqCst) {
        HEALTHY => "42".into_response(),
        SLOW => {
            tokio::time::sleep(Duration::from_secs(10)).await;
            "42".into_response()
        }
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

/// What to build.
pub(crate) struct Options<C> {
    /// The clock every breaker and the dashboard read.
    pub(crate) clock: C,
    /// Bearer token with every permission (principal `on-call`).
    pub(crate) operator_token: String,
    /// Bearer token that may only read (principal `viewer`).
    pub(crate) reader_token: String,
    /// How many catalog shards get a breaker.
    pub(crate) shards: usize,
    /// Tenants of the payments dependency (sensitive scopes).
    pub(crate) tenants: Vec<String>,
    /// Where to listen (port 0 for any free one).
    pub(crate) addr: SocketAddr,
}

/// The running application.
pub(crate) struct App<C: Clock + Clone> {
    /// Where it listens.
    pub(crate) addr: SocketAddr,
    pub(crate) registry: Arc<Registry<C>>,
    /// The operator's page (its history is closed by `run_history`, or by requests).
    pub(crate) dashboard: Dashboard<C>,
    pub(crate) switch: Switch,
    http: reqwest::Client,
    pipeline: Pipeline<C, RetryOnError, ReqwestClassifier>,
}

/// How a price call went.
pub(crate) enum Priced {
    Fresh,
    Failed(String),
    Rejected,
}

impl<C: Clock + Clone> App<C> {
    /// The page's address.
    pub(crate) fn page(&self) -> String {
        format!("http://{}/ops", self.addr)
    }

    /// One price through the pipeline.
    pub(crate) async fn price(&self) -> Priced {
        let url = format!("http://{}/price", self.addr);
        match self.pipeline.call(|| self.http.get(&url).send()).await {
            Ok(resp) if resp.status().is_success() => Priced::Fresh,
            Ok(resp) => Priced::Failed(resp.status().to_string()),
            Err(PipelineError::Rejected(_)) => Priced::Rejected,
            Err(e) => Priced::Failed(e.to_string()),
        }
    }

    /// Flips the server's switch (`healthy`, `slow` or `failing`) through its own endpoint.
    pub(crate) async fn flip(&self, mode: &str) -> Result<(), reqwest::Error> {
        self.http
            .post(format!("http://{}/switch/{mode}", self.addr))
            .send()
            .await?
            .error_for_status()?;
        Ok(())
    }
}

/// The registry's configurations: `prices` opens on 50 % failures over the last 4 calls and
/// waits 1 s (or the server's Retry-After) before 2 probes, and keeps its calls' durations; the catalog's shards and the
/// tenants use a 20-call window.
fn registry_config() -> Result<RegistryConfig, tripline::ConfigError> {
    Ok(RegistryConfig::default()
        .with_config(
            "prices",
            BreakerConfig::builder()
                .count_window(4)
                .minimum_calls(4)
                .failure_rate_threshold(50.0)
                .open_duration(Duration::from_secs(1))
                .half_open_calls(2)
                // The page shows the calls' median and 99th percentile.
                .call_durations(true)
                .build()?,
        )
        .with_config(
            "keyed",
            BreakerConfig::builder()
                .count_window(20)
                .minimum_calls(10)
                .failure_rate_threshold(50.0)
                .slow_call_rate_threshold(60.0)
                .slow_call_duration(Duration::from_millis(500))
                .open_duration(Duration::from_secs(5))
                .half_open_calls(3)
                .build()?,
        )
        .with_dependency("prices", "prices")
        .with_dependency("catalog", "keyed")
        .with_dependency("payments", "keyed"))
}

/// Builds the application and starts serving.
pub(crate) async fn start<C: Clock + Clone>(
    options: Options<C>,
) -> Result<App<C>, Box<dyn std::error::Error>> {
    let registry = Arc::new(Registry::with_clock(
        registry_config()?,
        options.clock.clone(),
    )?);
    let prices = registry.get(&Key::new("prices")?)?;
    for shard in 0..options.shards {
        registry.get(&Key::scoped(
            "catalog",
            ScopeKind::Shard,
            &shard.to_string(),
        )?)?;
    }
    for tenant in &options.tenants {
        registry.get(&Key::scoped("payments", ScopeKind::Tenant, tenant)?)?;
    }

    let listener = tokio::net::TcpListener::bind(options.addr).await?;
    let addr = listener.local_addr()?;
    // Tokens set: nobody reads without one. Only this address answers (a hostile page that
    // rebinds its own name to it reads nothing), and `localhost` on the same port.
    let mut builder = DashboardBuilder::new(options.clock.clone())
        .registry(registry.clone())
        .bearer_token(options.operator_token.as_str(), "on-call", Permissions::ALL)
        .bearer_token(options.reader_token.as_str(), "viewer", Permissions::READ)
        .sensitive(|key| matches!(key.scope(), Some((ScopeKind::Tenant, _))))
        .allowed_host(&addr.to_string())
        .allowed_host(&format!("localhost:{}", addr.port()));
    if addr.ip().is_unspecified() {
        // Listening on every interface: the operator reaches it by some name of this host.
        builder = builder.allowed_host("127.0.0.1").allowed_host("localhost");
    }
    let dashboard: Dashboard<C> = builder.build()?;

    let switch = Switch::default();
    let app = Router::new()
        .route("/price", get(price))
        .route("/switch/{mode}", post(flip))
        .with_state(switch.clone());
    let app = dashboard.mount(app, "/ops");
    tokio::spawn(async move {
        // With the peer's address, so the dashboard can cap streams per client.
        let service = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, service).await {
            eprintln!("server stopped: {e}");
        }
    });

    let pipeline = Pipeline::builder()
        .breaker(prices)
        .timeout(Duration::from_millis(250))
        .classifier(ReqwestClassifier)
        .build()?;
    Ok(App {
        addr,
        registry,
        dashboard,
        switch,
        http: reqwest::Client::builder().no_proxy().build()?,
        pipeline,
    })
}
