//! Fleet-wide breakers (`tripline_redis::SharedBreaker`) on the operator's page: shown as cards
//! with the fleet's state, and their controls going to Redis, so a kill switch thrown on the
//! page of one replica holds on every replica. A real `redis-server` on a free loopback port.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use tripline::{BreakerConfig, ManualClock, Outcome, State, WindowConfig};
use tripline_dashboard::{DashboardBuilder, Permissions};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig, TimeSource};

const OPERATOR: &str = "operator-token-0123456789";

fn config() -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 4 })
        .minimum_calls(4)
        .open_duration(Duration::from_secs(60))
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// One replica's handle on the fleet's breaker `scope`, asking Redis at every acquire.
fn replica(url: &str, scope: &str, id: &str, clock: &ManualClock) -> SharedBreaker<ManualClock> {
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
        Backend::single(url).unwrap(),
        clock.clone(),
    )
    .unwrap()
}

fn page(clock: &ManualClock, breakers: &[(&str, &SharedBreaker<ManualClock>)]) -> Router {
    let mut b =
        DashboardBuilder::new(clock.clone()).bearer_token(OPERATOR, "on-call", Permissions::ALL);
    for (key, breaker) in breakers {
        b = b.shared_breaker(key.parse().unwrap(), (*breaker).clone());
    }
    Router::new().nest("/ops", b.build().unwrap().router())
}

async fn send(router: &Router, req: Request<Body>) -> (StatusCode, Value) {
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn get(path: &str) -> Request<Body> {
    Request::get(format!("/ops{path}"))
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .body(Body::empty())
        .unwrap()
}

fn control(body: Value) -> Request<Body> {
    Request::post("/ops/api/control")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .body(Body::from(body.to_string()))
        .unwrap()
}

async fn card(router: &Router, key: &str) -> Value {
    let (status, body) = send(router, get("/api/breakers")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["key"] == key)
        .unwrap_or_else(|| panic!("no card for {key}: {body}"))
        .clone()
}

#[tokio::test(flavor = "current_thread")]
async fn a_kill_switch_thrown_on_the_page_holds_fleet_wide() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let here = replica(&server.url(), "payments", "replica-a", &clock);
    let there = replica(&server.url(), "payments", "replica-b", &clock);
    here.acquire().await.unwrap().record(Outcome::Success).await;
    let router = page(&clock, &[("payments", &here)]);

    let c = card(&router, "payments").await;
    assert_eq!(
        (c["reach"].as_str(), c["state"].as_str()),
        (Some("fleet"), Some("closed"))
    );
    assert_eq!(c["source"], "manual");
    assert_eq!(c["calls"]["successful"], 1);

    // The page's button: a control by the card's id.
    let (status, body) = send(
        &router,
        control(json!({"action": "force-open", "id": c["id"]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["changed"].as_u64(), body["in_force"].as_str()),
        (Some(1), Some("forced-open"))
    );

    // The other replica, which has no page and was never told: refused by the fleet's state.
    let refused = there.acquire().await.unwrap_err();
    assert_eq!(refused.state(), State::ForcedOpen);
    assert_eq!(card(&router, "payments").await["state"], "forced-open");

    // The audit names who threw it.
    let (_, audit) = send(&router, get("/api/audit")).await;
    assert!(audit.to_string().contains("on-call"), "{audit}");

    // Reset by key from the page: the fleet admits again.
    let (status, body) = send(
        &router,
        control(json!({"action": "reset", "key": "payments"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(there.acquire().await.is_ok());
    assert_eq!(card(&router, "payments").await["state"], "closed");
}

#[tokio::test(flavor = "current_thread")]
async fn a_dependency_wide_kill_switch_reaches_every_fleet_breaker_of_it() {
    let server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let acme = replica(&server.url(), "payments/tenant=acme", "replica-a", &clock);
    let globex = replica(&server.url(), "payments/tenant=globex", "replica-a", &clock);
    let search = replica(&server.url(), "search", "replica-a", &clock);
    let router = page(
        &clock,
        &[
            ("payments/tenant=acme", &acme),
            ("payments/tenant=globex", &globex),
            ("search", &search),
        ],
    );
    let (status, body) = send(
        &router,
        control(json!({"action": "force-open", "dependency": "payments"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["changed"], 2);
    let elsewhere = replica(&server.url(), "payments/tenant=globex", "replica-b", &clock);
    assert_eq!(
        elsewhere.acquire().await.unwrap_err().state(),
        State::ForcedOpen
    );
    assert!(
        search.acquire().await.is_ok(),
        "another dependency is untouched"
    );

    // The detail view: the fleet state, the configuration in force.
    let id = card(&router, "payments/tenant=acme").await["id"].clone();
    let (status, detail) = send(
        &router,
        get(&format!("/api/breakers/{}", id.as_str().unwrap())),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(
        (detail["state"].as_str(), detail["reach"].as_str()),
        (Some("forced-open"), Some("fleet"))
    );
    assert_eq!(detail["config"]["minimum_calls"], 4);
}

#[tokio::test(flavor = "current_thread")]
async fn a_control_that_cannot_reach_redis_is_unavailable_and_says_why() {
    let mut server = RedisServer::start().unwrap();
    let clock = ManualClock::new();
    let b = replica(&server.url(), "payments", "replica-a", &clock);
    let router = page(&clock, &[("payments", &b)]);
    server.kill();
    let (status, body) = send(
        &router,
        control(json!({"action": "force-open", "key": "payments"})),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.to_string().contains("did not reach"), "{body}");
}

#[test]
fn a_key_given_twice_is_refused() {
    let clock = ManualClock::new();
    let b = tripline::CircuitBreaker::with_clock("payments", config(), clock.clone());
    let err = DashboardBuilder::new(clock.clone())
        .breaker("payments".parse().unwrap(), b.clone())
        .shared_breaker("payments".parse().unwrap(), b)
        .build()
        .unwrap_err();
    assert_eq!(err.field(), "shared_breaker");
}
