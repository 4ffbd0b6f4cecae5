//! A service built from a TOML file, as a new project would: an axum application whose
//! `/price/{tenant}` calls a vendor's HTTP API with reqwest through a retry with a budget,
//! a bulkhead, a timeout and one breaker per tenant, all read from `examples/service.toml`;
//! `/metrics` is the Prometheus scrape of every policy's series, and `/ops/` the operator's
//! page. The vendor (in this process too) fails every call for the tenant `acme`.
//!
//! ```text
//! cargo run -p tripline-policies --example service --all-features            # runs a story, exits
//! cargo run -p tripline-policies --example service --all-features -- serve   # and keeps serving
//! ```

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tripline::registry::{Key, Registry, ScopeKind};
use tripline_dashboard::{Dashboard, Permissions};
use tripline_policies::config::ResilienceConfig;
use tripline_policies::http::HttpRetryable;
use tripline_policies::metrics::{CALL_DURATION_BUCKETS, Metrics};
use tripline_policies::pipeline::Pipeline;
use tripline_policies::reqwest::{ReqwestClassifier, StatusError};

/// What the application shares with its handlers.
#[derive(Clone)]
struct App {
    registry: Arc<Registry>,
    vendor: Pipeline<tripline::MonotonicClock, HttpRetryable, ReqwestClassifier, StatusError>,
    client: reqwest::Client,
    vendor_url: String,
    metrics: Arc<Metrics>,
    scrape: PrometheusHandle,
}

/// `GET /price/{tenant}`: the vendor's price through the tenant's breaker, or the cached one.
async fn price(State(app): State<App>, Path(tenant): Path<String>) -> Result<String, StatusCode> {
    let key =
        Key::scoped("vendor", ScopeKind::Tenant, &tenant).map_err(|_| StatusCode::BAD_REQUEST)?;
    let breaker = app
        .registry
        .get(&key)
        .map_err(|_| StatusCode::SERVICE_UNAVAILABLE)?;
    let url = format!("{}/price/{tenant}", app.vendor_url);
    match app
        .vendor
        .with_breaker(breaker)
        .call(|| app.client.get(&url).send())
        .await
    {
        Ok(resp) => resp.text().await.map_err(|_| StatusCode::BAD_GATEWAY),
        // A 503 after the last retry, a timeout, an open breaker, a full bulkhead...
        Err(e) => Ok(format!("9.99 (cached: {e})")),
    }
}

/// `GET /metrics`: every series, fresh.
async fn scrape(State(app): State<App>) -> String {
    app.metrics.update();
    app.scrape.render()
}

/// The vendor: fails everything for `acme`.
async fn vendor() -> String {
    let app: Router = Router::new().route(
        "/price/{tenant}",
        get(|Path(tenant): Path<String>| async move {
            if tenant == "acme" {
                Err((
                    StatusCode::SERVICE_UNAVAILABLE,
                    [("retry-after", "30")],
                    "down",
                ))
            } else {
                Ok("42.00")
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. The recorder first, so every handle made below reaches it.
    let scrape_handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("tripline_breaker_call_duration_seconds".into()),
            &CALL_DURATION_BUCKETS,
        )?
        .install_recorder()?;

    // 2. Every policy from the file.
    let config: ResilienceConfig = toml::from_str(include_str!("service.toml"))?;
    let registry = Arc::new(config.registry()?);
    let vendor_pipeline = config.pipeline_builder("vendor")?.reqwest().build()?;

    // 3. One call exports the registry's breakers and the pipeline's stages.
    let metrics = Metrics::new()
        .registry(registry.clone())
        .pipeline("vendor", &vendor_pipeline);

    // 4. The operator's page, with a read-only token.
    let dashboard = Dashboard::builder()
        .registry(registry.clone())
        .bearer_token(
            "an-example-viewer-token-0123456789",
            "viewer",
            Permissions::READ,
        )
        .build()?;

    let app = App {
        registry,
        vendor: vendor_pipeline,
        client: reqwest::Client::builder().no_proxy().build()?,
        vendor_url: vendor().await,
        metrics: Arc::new(metrics),
        scrape: scrape_handle,
    };
    let router: Router = Router::new()
        .route("/price/{tenant}", get(price))
        .route("/metrics", get(scrape))
        .with_state(app);
    let router = dashboard.mount(router, "/ops");
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, router).await });

    // The story: globex is served, acme's vendor calls fail until its breaker opens.
    let client = reqwest::Client::builder().no_proxy().build()?;
    for tenant in ["globex", "acme", "acme", "acme", "acme", "acme", "globex"] {
        let body = client
            .get(format!("{base}/price/{tenant}"))
            .send()
            .await?
            .text()
            .await?;
        println!("{tenant:>7}: {body}");
    }
    let scrape = client
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    for line in scrape.lines().filter(|l| {
        (l.starts_with("tripline_breaker_state{") && l.ends_with(" 1"))
            || l.starts_with("tripline_pipeline_calls_total")
            || l.starts_with("tripline_retry_calls_total")
    }) {
        println!("{line}");
    }
    println!("the operator's page: {base}/ops/ (token: an-example-viewer-token-0123456789)");
    if std::env::args().any(|a| a == "serve") {
        println!("serving until interrupted");
        std::future::pending::<()>().await;
    }
    Ok(())
}
