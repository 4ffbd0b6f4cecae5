//! Shard mini breakers a server directs (created by its blames) show on the page's API, and
//! in the registry's per-dependency summary the metrics export, grouped under their
//! dependency.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use tripline::registry::{Blame, Key, Registry, RegistryConfig, ServerDirected};
use tripline::{BreakerConfig, Classification, FailureKind, ManualClock, State};
use tripline_dashboard::{DashboardBuilder, Permissions};

#[tokio::test]
async fn shard_breakers_a_server_blamed_are_grouped_under_their_dependency() {
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(2)
        .open_duration(Duration::from_secs(10))
        .build()
        .unwrap();
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_config("default", config),
            clock.clone(),
        )
        .unwrap(),
    );
    let catalog = ServerDirected::new(registry.clone(), Key::new("catalog").unwrap()).unwrap();
    registry.get(&Key::new("prices").unwrap()).unwrap();
    for shard in ["3", "12"] {
        for _ in 0..2 {
            catalog.admit(Some(shard)).unwrap().record(
                Classification::failure(FailureKind::Unavailable),
                Some(&Blame::shard(shard)),
            );
        }
    }
    let summary = registry.summary();
    assert_eq!(
        (
            summary["catalog"].breakers,
            summary["catalog"].in_state(State::Open)
        ),
        (3, 2)
    );
    assert_eq!(catalog.dependency_breaker().state(), State::Closed);

    let dashboard = DashboardBuilder::new(clock.clone())
        .registry(registry.clone())
        .anonymous(Permissions::READ)
        .build()
        .unwrap();
    let router = Router::new().nest("/ops", dashboard.router());
    let req = Request::get("/ops/api/breakers")
        .body(Body::empty())
        .unwrap();
    let resp = router.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let l: Value = serde_json::from_slice(&bytes).unwrap();
    let deps: Vec<(&str, u64, u64)> = l["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap(),
                d["breakers"].as_u64().unwrap(),
                d["states"]["open"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(deps, [("catalog", 3, 2), ("prices", 1, 0)]);
    let shards: Vec<(&Value, &Value)> = l["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["dependency"] == "catalog" && b["state"] == "open")
        .map(|b| (&b["key"], &b["scope"]))
        .collect();
    // Numbers in numeric order, each with its scope.
    assert_eq!(
        shards,
        [
            (
                &json!("catalog/shard=3"),
                &json!({"kind": "shard", "value": "3"})
            ),
            (
                &json!("catalog/shard=12"),
                &json!({"kind": "shard", "value": "12"})
            ),
        ]
    );
}
