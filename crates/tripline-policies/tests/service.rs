//! What a new project gets from the README and the porting guide alone, end to end on
//! loopback: `examples/service.toml` read into a registry (one breaker per tenant) and a
//! pipeline (retry within a budget, bulkhead, timeout) around reqwest calls to a real HTTP
//! vendor; the vendor's 503s answered by a fallback, one tenant's breaker opening while the
//! other's stays closed; a Prometheus scrape with every policy's series; and the operator's
//! page serving the tenants' breakers.
#![cfg(all(
    feature = "reqwest",
    feature = "pipeline",
    feature = "serde",
    feature = "metrics"
))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use tokio::net::TcpListener;
use tripline::registry::{Key, ScopeKind};
use tripline_dashboard::{Dashboard, Permissions};
use tripline_policies::config::ResilienceConfig;
use tripline_policies::metrics::{CALL_DURATION_BUCKETS, Metrics};
use tripline_policies::pipeline::{PipelineError, Stage};

const VIEWER: &str = "a-test-viewer-token-0123456789abcdef";

/// Serves `app` on a free loopback port; returns its base URL.
async fn serve(app: Router) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test]
async fn a_service_from_its_toml_file_gets_every_policy_metrics_and_the_operators_page() {
    // The vendor: acme's calls fail with a 503, globex's succeed; every call counted.
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let vendor = serve(Router::new().route(
        "/price/{tenant}",
        get(move |Path(tenant): Path<String>| {
            h.fetch_add(1, Ordering::SeqCst);
            async move {
                if tenant == "acme" {
                    Err((
                        StatusCode::SERVICE_UNAVAILABLE,
                        [("retry-after", "30")],
                        "down",
                    ))
                } else {
                    Ok("42.00")
                }
            }
        }),
    ))
    .await;

    // The README's steps: the recorder, the file, the metrics, the page.
    let scrape = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("tripline_breaker_call_duration_seconds".into()),
            &CALL_DURATION_BUCKETS,
        )
        .unwrap()
        .install_recorder()
        .unwrap();
    let config: ResilienceConfig =
        toml::from_str(include_str!("../examples/service.toml")).unwrap();
    let registry = Arc::new(config.registry().unwrap());
    let pipeline = config
        .pipeline_builder("vendor")
        .unwrap()
        .reqwest()
        .build()
        .unwrap();
    assert_eq!(
        pipeline.order(),
        [Stage::Retry, Stage::Bulkhead, Stage::Timeout]
    );
    let metrics = Metrics::new()
        .registry(registry.clone())
        .pipeline("vendor", &pipeline);
    let dashboard = Dashboard::builder()
        .registry(registry.clone())
        .bearer_token(VIEWER, "viewer", Permissions::READ)
        .build()
        .unwrap();
    let ops = serve(dashboard.mount(Router::new(), "/ops")).await;

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let call = |tenant: &'static str| {
        let breaker = registry
            .get(&Key::scoped("vendor", ScopeKind::Tenant, tenant).unwrap())
            .unwrap();
        let url = format!("{vendor}/price/{tenant}");
        let (client, pipeline) = (client.clone(), pipeline.with_breaker(breaker));
        async move {
            pipeline
                .call(|| client.get(&url).send())
                .await
                .map(|_| "42.00")
        }
    };

    // globex is served. acme's first call fails after its three attempts (the caller's
    // fallback's turn, with the 503); the breaker counts every attempt, so the first attempt
    // of the second call is the fourth failure of four: the breaker opens and refuses that
    // call's retry; from then on acme's calls are refused without reaching the vendor.
    assert_eq!(call("globex").await.unwrap(), "42.00");
    match call("acme").await {
        Err(PipelineError::Failed(e)) => assert_eq!(e.status().map(|s| s.as_u16()), Some(503)),
        other => panic!("{other:?}"),
    }
    assert_eq!(hits.load(Ordering::SeqCst), 4);
    assert!(matches!(
        call("acme").await,
        Err(PipelineError::Rejected(_))
    ));
    assert_eq!(hits.load(Ordering::SeqCst), 5);
    assert!(matches!(
        call("acme").await,
        Err(PipelineError::Rejected(_))
    ));
    assert_eq!(
        hits.load(Ordering::SeqCst),
        5,
        "the open breaker sent nothing"
    );
    assert_eq!(
        call("globex").await.unwrap(),
        "42.00",
        "globex's breaker is closed"
    );
    let acme = registry
        .peek(&Key::scoped("vendor", ScopeKind::Tenant, "acme").unwrap())
        .unwrap();
    assert_eq!(acme.state(), tripline::State::Open);
    // Two retries made; the one the open breaker refused was never made.
    let retry = pipeline.retry().unwrap().stats();
    assert_eq!((retry.retries, retry.local_rejections), (2, 2), "{retry:?}");

    // The scrape: a series for every policy, with HELP text.
    metrics.update();
    let text = scrape.render();
    for want in [
        "tripline_breaker_state{breaker=\"vendor/tenant=acme\",dependency=\"vendor\",scope_kind=\"tenant\",scope=\"acme\",state=\"open\"} 1",
        "tripline_breaker_state{breaker=\"vendor/tenant=globex\",dependency=\"vendor\",scope_kind=\"tenant\",scope=\"globex\",state=\"closed\"} 1",
        "tripline_registry_breakers{dependency=\"vendor\",state=\"open\"} 1",
        "tripline_breaker_call_duration_seconds_bucket{breaker=\"vendor/tenant=acme\"",
        "tripline_pipeline_calls_total{pipeline=\"vendor\",result=\"failure\"} 1",
        "tripline_pipeline_calls_total{pipeline=\"vendor\",result=\"success\"} 2",
        "tripline_pipeline_refused_total{pipeline=\"vendor\",stage=\"breaker\"} 2",
        "tripline_retry_calls_total{retry=\"vendor\",outcome=\"failure_with_retry\"}",
        "tripline_retry_budget_remaining{retry=\"vendor\"}",
        "tripline_bulkhead_in_flight{bulkhead=\"vendor\"} 0",
        "# HELP tripline_pipeline_calls_total ",
        "# HELP tripline_breaker_call_duration_seconds ",
    ] {
        assert!(text.contains(want), "no {want} in:\n{text}");
    }

    // The operator's page: the page itself, and both tenants' breakers in its API.
    let page = client
        .get(format!("{ops}/ops/index.html"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let body = client
        .get(format!("{ops}/ops/api/breakers"))
        .bearer_auth(VIEWER)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let text = serde_json::from_str::<serde_json::Value>(&body)
        .unwrap()
        .to_string();
    assert!(text.contains("vendor/tenant=acme"), "{text}");
    assert!(text.contains("vendor/tenant=globex"), "{text}");
    assert!(text.contains("\"open\""), "{text}");
}
