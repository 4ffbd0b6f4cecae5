//! Documented promises of the dashboard, checked over real HTTP on a loopback port.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use serde_json::Value;
use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
use tripline::{BreakerConfig, CircuitBreaker, ManualClock, State};
use tripline_dashboard::{AuditRecord, DashboardBuilder, Permissions};

const OPERATOR: &str = "operator-token-0123456789";
const READER: &str = "reader-token-0123456789";

fn small() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(10))
        .half_open_calls(2)
        .build()
        .unwrap()
}

fn key(s: &str) -> Key {
    s.parse().unwrap()
}

struct Served {
    base: String,
    http: reqwest::Client,
    registry: Arc<Registry<ManualClock>>,
    manual: CircuitBreaker<ManualClock>,
    audits: Arc<Mutex<Vec<AuditRecord>>>,
}

/// A dashboard over a registry (two catalog shards, a tenant, `prices`) and a breaker
/// registered by hand (`legacy-api`), served on a loopback port under `/ops`.
async fn serve() -> Served {
    let clock = ManualClock::new();
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_config("default", small()),
            clock.clone(),
        )
        .unwrap(),
    );
    for k in [
        "catalog/shard=1",
        "catalog/shard=2",
        "payments/tenant=acme",
        "prices",
    ] {
        registry.get(&key(k)).unwrap();
    }
    let manual = CircuitBreaker::with_clock("legacy", small(), clock.clone());
    let audits = Arc::new(Mutex::new(Vec::new()));
    let seen = audits.clone();
    let dashboard = DashboardBuilder::new(clock)
        .registry(registry.clone())
        .bearer_token(OPERATOR, "on-call", Permissions::ALL)
        .bearer_token(READER, "viewer", Permissions::READ)
        .sensitive(|k| matches!(k.scope(), Some((ScopeKind::Tenant, _))))
        .breaker(key("legacy-api"), manual.clone())
        .on_audit(move |a| seen.lock().unwrap().push(a.clone()))
        .build()
        .unwrap();
    let app: Router = Router::new().nest("/ops", dashboard.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Served {
        base: format!("http://{addr}/ops"),
        http: reqwest::Client::builder().no_proxy().build().unwrap(),
        registry,
        manual,
        audits,
    }
}

/// Status, content type and body (JSON where it parses, else the text).
async fn answer(r: reqwest::RequestBuilder) -> (u16, String, Value) {
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = resp.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, content_type, body)
}

async fn control(s: &Served, body: &str) -> (u16, String, Value) {
    answer(
        s.http
            .post(format!("{}/api/control", s.base))
            .header("authorization", format!("Bearer {OPERATOR}"))
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
    .await
}

/// Steps: `GET /ops/api/breakers/%FF` (an id that is not UTF-8 once percent-decoded) with a
/// reader's token over HTTP.
///
/// Promised (crate docs, Security): "parameters and bodies are checked (sizes, names, values)
/// and a refusal names the field, the value and what is allowed"; the same for a malformed id
/// that is valid UTF-8 (`ZZZ`) is a JSON 400 with `field: "id"` and the allowed shape.
///
/// Observed: 400 with a `text/plain` body `Invalid URL: Invalid UTF-8 in `id``: axum's own
/// path rejection, not the dashboard's JSON refusal (no `field`, `value` or `allowed`). The
/// same for `GET /ops/assets/%FF`. The `Path<String>` extractors in `api::detail` and
/// `api::asset` are used without mapping their rejection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_id_is_refused_naming_the_field_value_and_allowed_even_when_not_utf8() {
    let s = serve().await;
    let (status, content_type, body) = answer(
        s.http
            .get(format!("{}/api/breakers/%FF", s.base))
            .header("authorization", format!("Bearer {READER}")),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        content_type.starts_with("application/json"),
        "a {content_type:?} refusal: {body}"
    );
    assert_eq!(body["field"], "id", "{body}");
    assert_eq!(
        body["allowed"], "16 lowercase hexadecimal digits, as the listing gives",
        "{body}"
    );
}

/// Steps: with every breaker Closed and no override anywhere, `POST /ops/api/control`
/// `{"action": "reset", "key": "legacy-api"}` (a breaker registered by hand), then
/// `{"action": "reset", "dependency": "catalog"}` (two registry breakers).
///
/// Promised: `AuditRecord::changed` is "How many breakers changed state" (the answer's
/// `changed` is the same figure); a Closed breaker reset to Closed did not change state, as
/// `clear` with nothing to clear answers `changed: 0`.
///
/// Observed: `changed: 1` for the hand-registered breaker and `changed: 2` for the
/// dependency, in the answer and in the audit record, although no breaker changed state.
/// `apply`'s `Action::Reset` branch adds 1 per hand-registered breaker unconditionally and
/// adds `Registry::reset`'s count, which is how many were reset, not how many changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_counts_only_the_breakers_that_changed_state() {
    let s = serve().await;
    assert_eq!(s.manual.state(), State::Closed);
    for k in ["catalog/shard=1", "catalog/shard=2"] {
        assert_eq!(s.registry.peek(&key(k)).unwrap().state(), State::Closed);
    }
    let (status, _, by_key) = control(&s, r#"{"action": "reset", "key": "legacy-api"}"#).await;
    assert_eq!(status, 200, "{by_key}");
    let (status, _, by_dependency) =
        control(&s, r#"{"action": "reset", "dependency": "catalog"}"#).await;
    assert_eq!(status, 200, "{by_dependency}");
    let recorded: Vec<usize> = s.audits.lock().unwrap().iter().map(|a| a.changed).collect();
    assert_eq!(
        (&by_key["changed"], &by_dependency["changed"], recorded),
        (&Value::from(0), &Value::from(0), vec![0, 0]),
        "no breaker changed state"
    );
}

/// Steps: `POST /ops/api/control` with `{"action": "clear", "action": "force-open", "key":
/// "prices"}` (the field `action` given twice, with two different actions).
///
/// Promised (crate docs, Security): "parameters and bodies are checked (sizes, names, values)
/// and a refusal names the field, the value and what is allowed"; the listing refuses a
/// parameter given twice (`field: "limit"`, allowed "one value (the parameter was given
/// twice)").
///
/// Observed: 200, the later value wins silently and the kill switch is thrown on `prices`
/// (ForcedOpen, audited as force-open), although the body also says `clear`.
/// `parse_control` parses into a `serde_json::Value`, whose map keeps the last duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_body_giving_a_field_twice_is_refused_naming_it() {
    let s = serve().await;
    let (status, _, body) = control(
        &s,
        r#"{"action": "clear", "action": "force-open", "key": "prices"}"#,
    )
    .await;
    let state = s.registry.peek(&key("prices")).unwrap().state();
    assert_eq!(
        (status, body["field"].as_str(), state),
        (400, Some("action"), State::Closed),
        "{body}"
    );
    assert!(s.audits.lock().unwrap().is_empty(), "an action was audited");
}
