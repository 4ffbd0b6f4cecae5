//! The API against the router in-process: every endpoint, every refusal, the bounds, the
//! redaction of sensitive scopes, and that no request creates state.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use tripline::registry::{Key, OperatorState, Registry, RegistryConfig, ScopeKind, Selector};
use tripline::{BreakerConfig, CircuitBreaker, ManualClock, State};
use tripline_dashboard::{
    Action, AuditRecord, Dashboard, DashboardBuilder, Permissions, Principal, Target,
    Unauthenticated,
};

const OPERATOR: &str = "operator-token-0123456789";
const READER: &str = "reader-token-0123456789";
const AUDITOR: &str = "auditor-token-0123456789";
const CONTROLLER: &str = "controller-token-0123456789";

struct Fixture {
    clock: ManualClock,
    registry: Arc<Registry<ManualClock>>,
    manual: CircuitBreaker<ManualClock>,
    dashboard: Dashboard<ManualClock>,
    router: Router,
    audits: Arc<Mutex<Vec<AuditRecord>>>,
}

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

const KEYS: [&str; 6] = [
    "catalog/shard=1",
    "catalog/shard=2",
    "catalog/shard=10",
    "payments/tenant=acme",
    "payments/tenant=globex",
    "prices",
];

fn builder(
    clock: &ManualClock,
    registry: &Arc<Registry<ManualClock>>,
) -> DashboardBuilder<ManualClock> {
    DashboardBuilder::new(clock.clone())
        .registry(registry.clone())
        // These tests read without a token too (with tokens set, that takes saying so).
        .anonymous(Permissions::READ)
        .bearer_token(OPERATOR, "on-call", Permissions::ALL)
        .bearer_token(READER, "viewer", Permissions::READ)
        .bearer_token(
            AUDITOR,
            "auditor",
            Permissions::READ | Permissions::SENSITIVE,
        )
        .bearer_token(
            CONTROLLER,
            "robot",
            Permissions::READ | Permissions::CONTROL,
        )
        .sensitive(|k| matches!(k.scope(), Some((ScopeKind::Tenant, _))))
}

fn fixture_with(
    f: impl FnOnce(DashboardBuilder<ManualClock>) -> DashboardBuilder<ManualClock>,
) -> Fixture {
    let clock = ManualClock::new();
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_config("default", small()),
            clock.clone(),
        )
        .unwrap(),
    );
    for k in KEYS {
        registry.get(&key(k)).unwrap();
    }
    let manual = CircuitBreaker::with_clock("legacy", small(), clock.clone());
    let audits = Arc::new(Mutex::new(Vec::new()));
    let seen = audits.clone();
    let dashboard = f(builder(&clock, &registry)
        .breaker(key("legacy-api"), manual.clone())
        .on_audit(move |a| seen.lock().unwrap().push(a.clone())))
    .build()
    .unwrap();
    let router = Router::new().nest("/ops", dashboard.router());
    Fixture {
        clock,
        registry,
        manual,
        dashboard,
        router,
        audits,
    }
}

fn fixture() -> Fixture {
    fixture_with(|b| b)
}

fn trip(registry: &Registry<ManualClock>, k: &str) {
    let b = registry.peek(&key(k)).expect("the key exists");
    for _ in 0..4 {
        let _ = b.call(|| Err::<(), _>("boom"));
    }
    assert_eq!(b.state(), State::Open);
}

fn get(path: &str, token: Option<&str>) -> Request<Body> {
    let mut b = Request::get(format!("/ops{path}"));
    if let Some(t) = token {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    b.body(Body::empty()).unwrap()
}

/// A control as a script sends it: credentials, JSON, no browser headers.
fn control(body: Value, token: Option<&str>) -> Request<Body> {
    control_raw(body.to_string(), token, &[])
}

fn control_raw(body: String, token: Option<&str>, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::post("/ops/api/control").header(header::CONTENT_TYPE, "application/json");
    if let Some(t) = token {
        b = b.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::from(body)).unwrap()
}

async fn send(router: &Router, req: Request<Body>) -> (StatusCode, HeaderMap, Value) {
    let resp = router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    (status, headers, body)
}

async fn list(f: &Fixture, query: &str, token: Option<&str>) -> Value {
    let (status, _, body) = send(&f.router, get(&format!("/api/breakers{query}"), token)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

fn keys_of(list: &Value) -> Vec<String> {
    list["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap_or("(redacted)").to_string())
        .collect()
}

async fn id_of(f: &Fixture, k: &str) -> String {
    let l = list(f, &format!("?key={k}"), Some(OPERATOR)).await;
    l["breakers"][0]["id"].as_str().expect("listed").to_string()
}

/// What the registry holds: keys and run-time overrides.
fn registry_state(f: &Fixture) -> (Vec<Key>, Vec<(Selector, OperatorState)>) {
    (f.registry.keys(), f.registry.operator_overrides())
}

// ---------------------------------------------------------------------------------------------
// Reading.

#[tokio::test]
async fn list_shows_every_breaker_with_its_figures() {
    let f = fixture();
    trip(&f.registry, "catalog/shard=2");
    f.clock.advance(Duration::from_secs(3));
    let l = list(&f, "", Some(AUDITOR)).await;
    assert_eq!(l["total"], 7);
    assert_eq!(l["all"], 7);
    // Most urgent first, then by dependency and scope, numbers in numeric order.
    assert_eq!(
        keys_of(&l),
        [
            "catalog/shard=2",
            "catalog/shard=1",
            "catalog/shard=10",
            "legacy-api",
            "payments/tenant=acme",
            "payments/tenant=globex",
            "prices"
        ]
    );
    let open = &l["breakers"][0];
    assert_eq!(open["state"], "open");
    assert_eq!(open["source"], "registry");
    assert_eq!(open["dependency"], "catalog");
    assert_eq!(open["scope"], json!({"kind": "shard", "value": "2"}));
    assert_eq!(open["generation"], 1);
    assert_eq!(open["window"]["calls"], 4);
    assert_eq!(open["window"]["failures"], 4);
    assert_eq!(open["window"]["failure_rate"], 100.0);
    assert_eq!(open["calls"]["failed"], 4);
    assert_eq!(open["time_open_ms"], 3000);
    assert_eq!(open["time_in_state_ms"], 3000);
    assert_eq!(open["thresholds"]["failure_rate"], 50.0);
    let last = &open["last_transition"];
    assert_eq!(last["kind"], "transition");
    assert_eq!(
        (last["from"].as_str(), last["to"].as_str()),
        (Some("closed"), Some("open"))
    );
    assert_eq!(last["reason"]["rule"], "failure-rate");
    assert_eq!(last["window"]["failures"], 4);
    assert_eq!(last["open_for_ms"], 10_000);
    assert_eq!(last["age_ms"], 3000);
    let legacy = l["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["key"] == "legacy-api")
        .unwrap();
    assert_eq!(legacy["source"], "manual");
    assert_eq!(l["states"]["open"], 1);
    assert_eq!(l["states"]["closed"], 6);
    let deps: Vec<(&str, u64)> = l["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["name"].as_str().unwrap(), d["breakers"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        deps,
        [
            ("catalog", 3),
            ("legacy-api", 1),
            ("payments", 2),
            ("prices", 1)
        ]
    );
    assert_eq!(l["dependencies"][0]["states"]["open"], 1);
}

#[tokio::test]
async fn list_filters_and_pages() {
    let f = fixture();
    trip(&f.registry, "prices");
    let l = list(&f, "?dependency=catalog", Some(READER)).await;
    assert_eq!(
        keys_of(&l),
        ["catalog/shard=1", "catalog/shard=2", "catalog/shard=10"]
    );
    // The summary covers everything whatever the filter.
    assert_eq!(l["all"], 7);
    let l = list(&f, "?state=open,forced-open", Some(READER)).await;
    assert_eq!(keys_of(&l), ["prices"]);
    let l = list(&f, "?q=SHARD%3D1", Some(READER)).await;
    assert_eq!(keys_of(&l), ["catalog/shard=1", "catalog/shard=10"]);
    let l = list(&f, "?source=manual", Some(READER)).await;
    assert_eq!(keys_of(&l), ["legacy-api"]);
    let l = list(&f, "?key=catalog/shard%3D10", Some(READER)).await;
    assert_eq!(keys_of(&l), ["catalog/shard=10"]);
    let l = list(&f, "?sort=key&limit=2&offset=1", Some(READER)).await;
    assert_eq!(keys_of(&l), ["catalog/shard=2", "catalog/shard=10"]);
    assert_eq!(
        (
            l["total"].as_u64(),
            l["offset"].as_u64(),
            l["limit"].as_u64()
        ),
        (Some(7), Some(1), Some(2))
    );
    let l = list(&f, "?offset=100", Some(READER)).await;
    assert_eq!(l["total"], 7);
    assert!(l["breakers"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn thousands_of_keys_are_paged() {
    let f = fixture();
    for shard in 0..5000 {
        f.registry
            .get(&Key::scoped("bulk", ScopeKind::Shard, &shard.to_string()).unwrap())
            .unwrap();
    }
    trip(&f.registry, "catalog/shard=1");
    let l = list(&f, "?limit=100", Some(READER)).await;
    assert_eq!(l["total"], 5007);
    assert_eq!(l["breakers"].as_array().unwrap().len(), 100);
    assert_eq!(
        l["breakers"][0]["key"], "catalog/shard=1",
        "the open one first"
    );
    let l = list(&f, "?dependency=bulk&offset=4990&limit=100", Some(READER)).await;
    assert_eq!(l["total"], 5000);
    let keys = keys_of(&l);
    assert_eq!(keys.len(), 10);
    assert_eq!(keys.last().unwrap(), "bulk/shard=4999");
    let bulk = l["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "bulk")
        .unwrap();
    assert_eq!(bulk["breakers"], 5000);
    assert_eq!(bulk["states"]["closed"], 5000);
}

#[tokio::test]
async fn list_parameters_are_checked() {
    let f = fixture();
    let before = registry_state(&f);
    for (query, field, allowed) in [
        ("?limit=0", "limit", "in [1, 1000]"),
        ("?limit=1001", "limit", "in [1, 1000]"),
        ("?limit=ten", "limit", "in [1, 1000]"),
        ("?offset=-1", "offset", "in [0, 100000000]"),
        (
            "?state=opened",
            "state",
            "a comma-separated list of closed, open, half-open, disabled, metrics-only, forced-open",
        ),
        (
            "?state=open,",
            "state",
            "a comma-separated list of closed, open, half-open, disabled, metrics-only, forced-open",
        ),
        ("?source=elsewhere", "source", "registry or manual"),
        ("?sort=age", "sort", "state or key"),
        (
            "?colour=red",
            "parameter",
            "one of offset, limit, dependency, state, q, key, source, sort",
        ),
        (
            "?limit=1&limit=2",
            "limit",
            "one value (the parameter was given twice)",
        ),
        (
            "?dependency=a/b",
            "dependency",
            "1 to 128 bytes without whitespace, control characters, '/', '=', '{' or '}'",
        ),
        (
            "?key=catalog/planet=1",
            "key.scope kind",
            "one of endpoint, host, tenant, shard, region",
        ),
    ] {
        let (status, _, body) = send(
            &f.router,
            get(&format!("/api/breakers{query}"), Some(READER)),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(body["field"], field, "{query}: {body}");
        assert_eq!(body["allowed"], allowed, "{query}: {body}");
        assert!(body["error"].as_str().unwrap().contains(field), "{body}");
    }
    let long = format!("?q={}", "x".repeat(257));
    let (status, _, body) = send(
        &f.router,
        get(&format!("/api/breakers{long}"), Some(READER)),
    )
    .await;
    assert_eq!(
        (status, body["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("q"))
    );
    assert_eq!(registry_state(&f), before);
}

#[tokio::test]
async fn detail_gives_figures_configuration_and_recent_events() {
    let f = fixture();
    trip(&f.registry, "prices");
    f.clock.advance(Duration::from_secs(2));
    let id = id_of(&f, "prices").await;
    let (status, headers, d) =
        send(&f.router, get(&format!("/api/breakers/{id}"), Some(READER))).await;
    assert_eq!(status, StatusCode::OK, "{d}");
    assert_eq!(headers[header::CACHE_CONTROL], "no-store");
    assert_eq!(d["id"], id);
    assert_eq!(d["key"], "prices");
    assert_eq!(d["state"], "open");
    assert_eq!(d["config"]["minimum_calls"], 4);
    let events = d["events"].as_array().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["kind"], "transition");
    assert_eq!(events[0]["reason"]["rule"], "failure-rate");
    assert_eq!(events[0]["age_ms"], 2000);
    // The probes' verdict after the wait.
    f.clock.advance(Duration::from_secs(10));
    let b = f.registry.peek(&key("prices")).unwrap();
    let _ = b.call(|| Err::<(), _>("still down"));
    let (_, _, d) = send(&f.router, get(&format!("/api/breakers/{id}"), Some(READER))).await;
    let kinds: Vec<(&str, &str)> = d["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["to"].as_str().unwrap(),
                e["reason"]["rule"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("open", "failure-rate"),
            ("half-open", "open-elapsed"),
            ("open", "probes-failed")
        ]
    );
}

#[tokio::test]
async fn unknown_and_malformed_ids() {
    let f = fixture();
    let before = registry_state(&f);
    let (status, _, body) = send(
        &f.router,
        get("/api/breakers/0123456789abcdef", Some(READER)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    for bad in ["xyz", "0123456789ABCDEF", "0123456789abcdef0", "prices"] {
        let (status, _, body) = send(
            &f.router,
            get(&format!("/api/breakers/{bad}"), Some(READER)),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(body["field"], "id");
    }
    let (status, _, _) = send(&f.router, get("/api/nothing-here", Some(READER))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(registry_state(&f), before);
}

#[tokio::test]
async fn session_says_who_and_issues_a_csrf_cookie() {
    let f = fixture();
    let (status, headers, s) = send(&f.router, get("/api/session", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(s["anonymous"], true);
    assert_eq!(s["permissions"], json!(["read"]));
    assert_eq!(s["controls"], true);
    let token = s["csrf"].as_str().unwrap().to_string();
    assert_eq!(token.len(), 64);
    let cookie = headers[header::SET_COOKIE].to_str().unwrap();
    assert_eq!(
        cookie,
        format!("tripline_csrf={token}; Path=/ops/; SameSite=Strict; HttpOnly")
    );
    // A page that already has a token keeps it.
    let req = Request::get("/ops/api/session")
        .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
        .header(header::COOKIE, format!("tripline_csrf={token}"))
        .body(Body::empty())
        .unwrap();
    let (_, _, s) = send(&f.router, req).await;
    assert_eq!(s["csrf"], token.as_str());
    assert_eq!(s["principal"], "on-call");
    assert_eq!(s["permissions"], json!(["read", "sensitive", "control"]));
    let (status, headers, body) = send(
        &f.router,
        get("/api/session", Some("not-a-configured-token")),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(
        headers[header::WWW_AUTHENTICATE],
        "Bearer realm=\"tripline\""
    );
}

#[tokio::test]
async fn audit_lists_operator_actions() {
    let f = fixture();
    let (status, _, _) = send(
        &f.router,
        control(
            json!({"action": "force-open", "key": "prices"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(
        &f.router,
        control(
            json!({"action": "disable", "dependency": "catalog"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, a) = send(&f.router, get("/api/audit", Some(READER))).await;
    assert_eq!(status, StatusCode::OK);
    let a = a["audit"].as_array().unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["principal"], "on-call");
    assert_eq!(a[0]["action"], "force-open");
    assert_eq!(a[0]["target"]["key"], "prices");
    assert_eq!(a[0]["in_force"], "forced-open");
    assert_eq!(a[1]["action"], "disable");
    assert_eq!(a[1]["target"], json!({"dependency": "catalog"}));
    assert_eq!(a[1]["changed"], 3);
}

// ---------------------------------------------------------------------------------------------
// Reading permissions.

#[tokio::test]
async fn reads_need_credentials_when_anonymous_may_not_read() {
    let f = fixture_with(|b| b.anonymous(Permissions::NONE));
    for path in [
        "/api/breakers",
        "/api/audit",
        "/api/events",
        "/api/breakers/0123456789abcdef",
    ] {
        let (status, headers, body) = send(&f.router, get(path, None)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body}");
        assert_eq!(
            headers[header::WWW_AUTHENTICATE],
            "Bearer realm=\"tripline\""
        );
        assert_eq!(body["error"], "credentials are needed to read the breakers");
        let (status, _, _) = send(&f.router, get(path, Some("wrong-token-0123456789"))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
    // The session endpoint answers anyone, so the page can ask for a token.
    let (status, _, s) = send(&f.router, get("/api/session", None)).await;
    assert_eq!(
        (status, s["permissions"].clone()),
        (StatusCode::OK, json!([]))
    );
    assert_eq!(list(&f, "", Some(READER)).await["total"], 7);
}

#[tokio::test]
async fn a_wrong_token_is_refused_even_where_anonymous_may_read() {
    let f = fixture();
    let (status, _, body) = send(
        &f.router,
        get("/api/breakers", Some("wrong-token-0123456789")),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "the bearer token is not recognised");
    let req = Request::get("/ops/api/breakers")
        .header(header::AUTHORIZATION, "Basic b3A6b3A=")
        .body(Body::empty())
        .unwrap();
    let (status, _, _) = send(&f.router, req).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_principal_without_read_is_forbidden() {
    let f =
        fixture_with(|b| b.bearer_token("control-only-token-0123", "button", Permissions::CONTROL));
    let (status, _, body) = send(
        &f.router,
        get("/api/breakers", Some("control-only-token-0123")),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["error"], "button may not read the breakers");
}

#[tokio::test]
async fn an_application_hook_names_the_principal() {
    let f = fixture_with(|b| {
        b.authenticate(
            |parts: &axum::http::request::Parts| -> Result<Option<Principal>, Unauthenticated> {
                match parts
                    .headers
                    .get("x-user")
                    .map(|v| v.to_str().unwrap_or(""))
                {
                    None => Ok(None),
                    Some("mallory") => Err(Unauthenticated::new("mallory's session was revoked")),
                    Some(user) => Ok(Some(Principal::new(user, Permissions::ALL))),
                }
            },
        )
    });
    let req = control_raw(
        json!({"action": "force-open", "key": "prices"}).to_string(),
        None,
        &[("x-user", "grace")],
    );
    let (status, _, body) = send(&f.router, req).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["principal"], "grace");
    assert_eq!(f.audits.lock().unwrap()[0].principal, "grace");
    let req = control_raw(
        json!({"action": "clear", "key": "prices"}).to_string(),
        None,
        &[("x-user", "mallory")],
    );
    let (status, _, body) = send(&f.router, req).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"], "mallory's session was revoked");
    // Bearer tokens still work beside the hook.
    let (status, _, _) = send(
        &f.router,
        control(json!({"action": "clear", "key": "prices"}), Some(OPERATOR)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

// ---------------------------------------------------------------------------------------------
// Control refusals.

#[tokio::test]
async fn control_refusals() {
    let f = fixture();
    let before = registry_state(&f);
    let force = json!({"action": "force-open", "key": "prices"});
    let cases: Vec<(&str, Request<Body>, StatusCode, &str)> = vec![
        (
            "missing token",
            control(force.clone(), None),
            StatusCode::UNAUTHORIZED,
            "credentials are needed to control breakers",
        ),
        (
            "wrong token",
            control(force.clone(), Some("wrong-token-0123456789")),
            StatusCode::UNAUTHORIZED,
            "the bearer token is not recognised",
        ),
        (
            "read-only token",
            control(force.clone(), Some(READER)),
            StatusCode::FORBIDDEN,
            "viewer may not control breakers",
        ),
        (
            "sensitive reader",
            control(force.clone(), Some(AUDITOR)),
            StatusCode::FORBIDDEN,
            "auditor may not control breakers",
        ),
        (
            "cross-site",
            control_raw(
                force.to_string(),
                Some(OPERATOR),
                &[("sec-fetch-site", "cross-site")],
            ),
            StatusCode::FORBIDDEN,
            "a control must come from the dashboard's own page (Sec-Fetch-Site is \"cross-site\")",
        ),
        (
            "foreign origin",
            control_raw(
                force.to_string(),
                Some(OPERATOR),
                &[
                    ("host", "ops.internal:8080"),
                    ("origin", "http://evil.test"),
                ],
            ),
            StatusCode::FORBIDDEN,
            "a control must come from the dashboard's own page (Origin \"http://evil.test\" is not this host)",
        ),
        (
            "browser without csrf header",
            control_raw(
                force.to_string(),
                Some(OPERATOR),
                &[
                    ("host", "ops.internal:8080"),
                    ("origin", "http://ops.internal:8080"),
                    ("sec-fetch-site", "same-origin"),
                ],
            ),
            StatusCode::FORBIDDEN,
            "the x-tripline-csrf header is missing: fetch a token from api/session and send it back",
        ),
        (
            "csrf header without cookie",
            control_raw(
                force.to_string(),
                Some(OPERATOR),
                &[
                    ("sec-fetch-site", "same-origin"),
                    ("x-tripline-csrf", &"a".repeat(64)),
                ],
            ),
            StatusCode::FORBIDDEN,
            "the x-tripline-csrf header does not match the tripline_csrf cookie: reload the page",
        ),
        (
            "csrf mismatch",
            control_raw(
                force.to_string(),
                Some(OPERATOR),
                &[
                    ("cookie", &format!("tripline_csrf={}", "b".repeat(64))),
                    ("x-tripline-csrf", &"a".repeat(64)),
                ],
            ),
            StatusCode::FORBIDDEN,
            "the x-tripline-csrf header does not match the tripline_csrf cookie: reload the page",
        ),
        (
            "form post",
            Request::post("/ops/api/control")
                .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from("action=force-open&key=prices"))
                .unwrap(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json, got \"application/x-www-form-urlencoded\"",
        ),
        (
            "too large",
            control_raw(
                format!(
                    "{{\"action\": \"reset\", \"key\": \"{}\"}}",
                    "x".repeat(20_000)
                ),
                Some(OPERATOR),
                &[],
            ),
            StatusCode::PAYLOAD_TOO_LARGE,
            "a control's body must be at most 16384 bytes",
        ),
        (
            "unknown key",
            control(
                json!({"action": "force-open", "key": "nowhere"}),
                Some(OPERATOR),
            ),
            StatusCode::NOT_FOUND,
            "no breaker has the key nowhere",
        ),
        (
            "unknown scoped key",
            control(
                json!({"action": "reset", "key": "catalog/shard=99"}),
                Some(OPERATOR),
            ),
            StatusCode::NOT_FOUND,
            "no breaker has the key catalog/shard=99",
        ),
        (
            "unknown dependency",
            control(
                json!({"action": "force-open", "dependency": "nowhere"}),
                Some(OPERATOR),
            ),
            StatusCode::NOT_FOUND,
            "no breaker belongs to the dependency nowhere",
        ),
        (
            "unknown id",
            control(
                json!({"action": "force-open", "id": "0123456789abcdef"}),
                Some(OPERATOR),
            ),
            StatusCode::NOT_FOUND,
            "no breaker has the id 0123456789abcdef",
        ),
    ];
    for (name, req, status, error) in cases {
        let (got, _, body) = send(&f.router, req).await;
        assert_eq!(got, status, "{name}: {body}");
        assert_eq!(body["error"], error, "{name}");
    }
    let (status, _, _) = send(&f.router, get("/api/control", Some(OPERATOR))).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    // Nothing changed, nothing was created, nothing was audited.
    assert_eq!(registry_state(&f), before);
    assert_eq!(
        f.registry.peek(&key("prices")).unwrap().state(),
        State::Closed
    );
    assert!(f.audits.lock().unwrap().is_empty());
}

#[tokio::test]
async fn bad_bodies_name_the_field() {
    let f = fixture();
    let before = registry_state(&f);
    for (body, field, allowed) in [
        (
            "{",
            "body",
            "a JSON object with action, and one of key, id, dependency",
        ),
        (
            "[1, 2]",
            "body",
            "a JSON object with action, and one of key, id, dependency",
        ),
        (
            "{\"key\": \"prices\"}",
            "action",
            "one of force-open, disable, metrics-only, reset, clear, auto",
        ),
        (
            "{\"action\": \"open\", \"key\": \"prices\"}",
            "action",
            "one of force-open, disable, metrics-only, reset, clear, auto",
        ),
        ("{\"action\": 3, \"key\": \"prices\"}", "action", "a string"),
        (
            "{\"action\": \"reset\"}",
            "target",
            "exactly one of key, id, dependency",
        ),
        (
            "{\"action\": \"reset\", \"key\": \"prices\", \"dependency\": \"prices\"}",
            "target",
            "exactly one of key, id, dependency",
        ),
        (
            "{\"action\": \"reset\", \"key\": \"prices\", \"why\": \"because\"}",
            "field",
            "one of action, and one of key, id, dependency",
        ),
        (
            "{\"action\": \"reset\", \"key\": \"a b\"}",
            "key.dependency",
            "1 to 128 bytes without whitespace, control characters, '/', '=', '{' or '}'",
        ),
        ("{\"action\": \"reset\", \"key\": 17}", "key", "a string"),
        (
            "{\"action\": \"reset\", \"id\": \"ZZZ\"}",
            "id",
            "16 lowercase hexadecimal digits, as the listing gives",
        ),
        (
            "{\"action\": \"reset\", \"dependency\": \"a/b\"}",
            "dependency",
            "1 to 128 bytes without whitespace, control characters, '/', '=', '{' or '}'",
        ),
    ] {
        let (status, _, resp) =
            send(&f.router, control_raw(body.into(), Some(OPERATOR), &[])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {resp}");
        assert_eq!(resp["field"], field, "{body}: {resp}");
        assert_eq!(resp["allowed"], allowed, "{body}: {resp}");
    }
    assert_eq!(registry_state(&f), before);
}

#[tokio::test]
async fn controls_are_off_without_an_authentication_check() {
    let clock = ManualClock::new();
    let registry =
        Arc::new(Registry::with_clock(RegistryConfig::default(), clock.clone()).unwrap());
    registry.get(&key("prices")).unwrap();
    let dashboard = DashboardBuilder::new(clock)
        .registry(registry.clone())
        .build()
        .unwrap();
    let router = Router::new().nest("/ops", dashboard.router());
    let (_, _, s) = send(&router, get("/api/session", None)).await;
    assert_eq!(s["controls"], false);
    let (status, _, body) = send(
        &router,
        control(json!({"action": "force-open", "key": "prices"}), None),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body["error"],
        "controls are off: the application configured no authentication check"
    );
    // A token that no check knows is still a wrong token.
    let (status, _, _) = send(&router, get("/api/breakers", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        registry.peek(&key("prices")).unwrap().state(),
        State::Closed
    );
}

#[tokio::test]
async fn a_browser_control_with_the_double_submit_token_passes() {
    let f = fixture();
    let (_, _, s) = send(&f.router, get("/api/session", None)).await;
    let csrf = s["csrf"].as_str().unwrap();
    let cookie = format!("other=1; tripline_csrf={csrf}");
    let headers = [
        ("host", "127.0.0.1:8080"),
        ("origin", "http://127.0.0.1:8080"),
        ("sec-fetch-site", "same-origin"),
        ("cookie", cookie.as_str()),
        ("x-tripline-csrf", csrf),
    ];
    let body = json!({"action": "force-open", "key": "prices"}).to_string();
    let (status, _, resp) = send(
        &f.router,
        control_raw(body.clone(), Some(OPERATOR), &headers),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{resp}");
    // Behind a proxy that rewrites the host, the public origin must be allowed explicitly.
    let proxied = [
        ("host", "10.0.0.5:8080"),
        ("origin", "https://ops.example.com"),
        ("cookie", cookie.as_str()),
        ("x-tripline-csrf", csrf),
    ];
    let (status, _, _) = send(
        &f.router,
        control_raw(body.clone(), Some(OPERATOR), &proxied),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let f = fixture_with(|b| b.allowed_origin("https://ops.example.com"));
    let (status, _, resp) = send(&f.router, control_raw(body, Some(OPERATOR), &proxied)).await;
    assert_eq!(status, StatusCode::OK, "{resp}");
}

// ---------------------------------------------------------------------------------------------
// Control effects.

#[tokio::test]
async fn force_open_reset_refused_then_clear() {
    let f = fixture();
    let prices = f.registry.peek(&key("prices")).unwrap();
    let (status, _, r) = send(
        &f.router,
        control(
            json!({"action": "force-open", "key": "prices"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        r,
        json!({"action": "force-open", "target": {"dependency": "prices", "key": "prices"}, "changed": 1, "in_force": "forced-open", "principal": "on-call"})
    );
    assert_eq!(prices.state(), State::ForcedOpen);
    let l = list(&f, "?key=prices", Some(READER)).await;
    assert_eq!(l["breakers"][0]["override"], "forced-open");
    // A reset would leave the breaker Closed under a kill switch: refused.
    let (status, _, r) = send(
        &f.router,
        control(json!({"action": "reset", "key": "prices"}), Some(OPERATOR)),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{r}");
    assert_eq!(prices.state(), State::ForcedOpen);
    let (status, _, r) = send(
        &f.router,
        control(
            json!({"action": "clear", "key": "prices"}),
            Some(CONTROLLER),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        (r["changed"].as_u64(), r["in_force"].clone()),
        (Some(1), Value::Null)
    );
    assert_eq!(prices.state(), State::Closed);
    // Detail: the operator's transitions and who made them.
    let id = id_of(&f, "prices").await;
    let (_, _, d) = send(&f.router, get(&format!("/api/breakers/{id}"), Some(READER))).await;
    let seen: Vec<String> = d["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| match e["kind"].as_str().unwrap() {
            "audit" => format!(
                "{} by {}",
                e["action"].as_str().unwrap(),
                e["principal"].as_str().unwrap()
            ),
            _ => format!(
                "{} -> {} ({})",
                e["from"].as_str().unwrap(),
                e["to"].as_str().unwrap(),
                e["reason"]["rule"].as_str().unwrap()
            ),
        })
        .collect();
    assert_eq!(
        seen,
        [
            "closed -> forced-open (operator)",
            "force-open by on-call",
            "forced-open -> closed (operator)",
            "clear by robot",
        ]
    );
    let audits = f.audits.lock().unwrap();
    assert_eq!(audits.len(), 2, "the refused reset is not an action");
    assert_eq!(
        (audits[0].action, audits[1].action),
        (Action::ForceOpen, Action::Clear)
    );
    assert_eq!(audits[1].target, Target::Key(key("prices")));
}

#[tokio::test]
async fn every_action_per_key_and_per_dependency() {
    let f = fixture();
    let state = |k: &str| f.registry.peek(&key(k)).unwrap().state();
    for (action, expected) in [
        ("disable", State::Disabled),
        ("metrics-only", State::MetricsOnly),
        ("force-open", State::ForcedOpen),
    ] {
        let (status, _, r) = send(
            &f.router,
            control(
                json!({"action": action, "key": "catalog/shard=1"}),
                Some(OPERATOR),
            ),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{r}");
        assert_eq!(state("catalog/shard=1"), expected);
        assert_eq!(state("catalog/shard=2"), State::Closed);
    }
    let (status, _, r) = send(
        &f.router,
        control(
            json!({"action": "clear", "key": "catalog/shard=1"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(state("catalog/shard=1"), State::Closed);

    // A dependency: every key, and keys made later.
    let (status, _, r) = send(
        &f.router,
        control(
            json!({"action": "force-open", "dependency": "catalog"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(
        (r["changed"].as_u64(), r["in_force"].as_str()),
        (Some(3), Some("forced-open"))
    );
    assert_eq!(state("catalog/shard=10"), State::ForcedOpen);
    assert_eq!(
        f.registry.get(&key("catalog/shard=77")).unwrap().state(),
        State::ForcedOpen
    );
    let l = list(&f, "?dependency=catalog", Some(READER)).await;
    assert_eq!(l["dependencies"][0]["override"], "forced-open");
    let (status, _, _) = send(
        &f.router,
        control(
            json!({"action": "reset", "dependency": "catalog"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _, r) = send(
        &f.router,
        control(
            json!({"action": "clear", "dependency": "catalog"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["changed"], 4);
    assert_eq!(state("catalog/shard=77"), State::Closed);
    // Reset a tripped dependency.
    trip(&f.registry, "catalog/shard=2");
    let (status, _, r) = send(
        &f.router,
        control(
            json!({"action": "reset", "dependency": "catalog"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(state("catalog/shard=2"), State::Closed);
    // By id.
    trip(&f.registry, "catalog/shard=2");
    let id = id_of(&f, "catalog/shard=2").await;
    let (status, _, r) = send(
        &f.router,
        control(json!({"action": "reset", "id": id}), Some(OPERATOR)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(state("catalog/shard=2"), State::Closed);
    assert_eq!(f.registry.operator_overrides().len(), 0);
    // An override the application set from code for a dependency with no breaker yet can be
    // cleared (that removes state), though nothing else can aim at that dependency.
    let ghost = tripline::registry::Selector::Dependency("ghost".into());
    f.registry.set_operator(&ghost, OperatorState::ForcedOpen);
    let (status, _, _) = send(
        &f.router,
        control(
            json!({"action": "disable", "dependency": "ghost"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, r) = send(
        &f.router,
        control(
            json!({"action": "clear", "dependency": "ghost"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert!(f.registry.operator_overrides().is_empty());
}

#[tokio::test]
async fn a_breaker_registered_by_hand_is_controlled_directly() {
    let f = fixture();
    let (status, _, r) = send(
        &f.router,
        control(
            json!({"action": "force-open", "key": "legacy-api"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(f.manual.state(), State::ForcedOpen);
    let l = list(&f, "?source=manual", Some(READER)).await;
    assert_eq!(l["breakers"][0]["override"], "forced-open");
    let (status, _, _) = send(
        &f.router,
        control(
            json!({"action": "reset", "key": "legacy-api"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _, _) = send(
        &f.router,
        control(
            json!({"action": "clear", "dependency": "legacy-api"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(f.manual.state(), State::Closed);
    for _ in 0..4 {
        let _ = f.manual.call(|| Err::<(), _>("boom"));
    }
    let (status, _, _) = send(
        &f.router,
        control(
            json!({"action": "reset", "key": "legacy-api"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(f.manual.state(), State::Closed);
    let id = list(&f, "?source=manual", Some(READER)).await["breakers"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, _, d) = send(&f.router, get(&format!("/api/breakers/{id}"), Some(READER))).await;
    let kinds: Vec<&str> = d["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "transition",
            "audit",
            "transition",
            "audit",
            "transition",
            "transition",
            "audit"
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Sensitive scopes.

#[tokio::test]
async fn sensitive_scopes_are_hidden_from_readers_without_permission() {
    let f = fixture();
    trip(&f.registry, "payments/tenant=acme");
    for token in [None, Some(READER), Some(CONTROLLER)] {
        let l = list(&f, "?dependency=payments", token).await;
        let rows = l["breakers"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        for row in rows {
            assert_eq!(row["key"], Value::Null);
            assert_eq!(row["scope"], Value::Null);
            assert_eq!(row["redacted"], true);
            assert_eq!(row["dependency"], "payments");
            assert_eq!(row["last_transition"]["key"], Value::Null);
            assert!(
                !row.to_string().contains("acme") && !row.to_string().contains("globex"),
                "{row}"
            );
        }
        // Redacted rows sort by their opaque id, not by the hidden names.
        assert!(rows[0]["state"] == "open");
        // A search or a lookup by the hidden name finds nothing.
        assert_eq!(list(&f, "?q=acme", token).await["total"], 0);
        assert_eq!(list(&f, "?q=tenant", token).await["total"], 0);
        assert_eq!(
            list(&f, "?key=payments/tenant%3Dacme", token).await["total"],
            0
        );
        assert_eq!(list(&f, "?q=payments", token).await["total"], 2);
        let id = rows[0]["id"].as_str().unwrap();
        let (status, _, d) = send(&f.router, get(&format!("/api/breakers/{id}"), token)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!d.to_string().contains("acme"), "{d}");
        assert_eq!(d["events"][0]["key"], Value::Null);
    }
    let l = list(&f, "?dependency=payments", Some(AUDITOR)).await;
    assert_eq!(
        keys_of(&l),
        ["payments/tenant=acme", "payments/tenant=globex"]
    );
    // A controller who may not see the scope cannot aim at it by name...
    let (status, _, _) = send(
        &f.router,
        control(
            json!({"action": "reset", "key": "payments/tenant=acme"}),
            Some(CONTROLLER),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // ...but can by id, and the answer and the audit trail do not name it.
    let l = list(&f, "?dependency=payments&state=open", Some(CONTROLLER)).await;
    let id = l["breakers"][0]["id"].as_str().unwrap();
    let (status, _, r) = send(
        &f.router,
        control(json!({"action": "reset", "id": id}), Some(CONTROLLER)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["target"], json!({"dependency": "payments", "key": null}));
    assert_eq!(
        f.registry
            .peek(&key("payments/tenant=acme"))
            .unwrap()
            .state(),
        State::Closed
    );
    let (_, _, a) = send(&f.router, get("/api/audit", Some(READER))).await;
    assert!(!a.to_string().contains("acme"), "{a}");
    let (_, _, a) = send(&f.router, get("/api/audit", Some(AUDITOR))).await;
    assert_eq!(a["audit"][0]["target"]["key"], "payments/tenant=acme");
    // The application's own audit hook gets the whole key.
    assert_eq!(
        f.audits.lock().unwrap()[0].target,
        Target::Key(key("payments/tenant=acme"))
    );
}

#[tokio::test]
async fn redacted_rows_sort_by_id() {
    let f = fixture();
    for t in ["zeta", "alpha", "mid", "beta"] {
        f.registry
            .get(&Key::scoped("payments", ScopeKind::Tenant, t).unwrap())
            .unwrap();
    }
    let l = list(&f, "?dependency=payments", Some(READER)).await;
    let ids: Vec<&str> = l["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted);
}

// ---------------------------------------------------------------------------------------------
// The event stream.

async fn next_event(body: &mut Body) -> (String, Value) {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("an event within the deadline")
            .expect("the stream is open")
            .unwrap();
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let text = String::from_utf8(data.to_vec()).unwrap();
        let mut kind = String::new();
        let mut payload = String::new();
        for line in text.lines() {
            if let Some(k) = line.strip_prefix("event: ") {
                kind = k.to_string();
            } else if let Some(d) = line.strip_prefix("data: ") {
                payload.push_str(d);
            }
        }
        if kind.is_empty() {
            continue; // a keep-alive comment
        }
        let value = serde_json::from_str(&payload).unwrap_or(Value::String(payload));
        return (kind, value);
    }
}

async fn open_stream(f: &Fixture, token: Option<&str>) -> Body {
    let resp = f
        .router
        .clone()
        .oneshot(get("/api/events", token))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/event-stream");
    let mut body = resp.into_body();
    let (kind, _) = next_event(&mut body).await;
    assert_eq!(kind, "ready");
    body
}

#[tokio::test]
async fn the_stream_carries_transitions_and_actions_redacted_per_reader() {
    let f = fixture();
    let mut reader = open_stream(&f, Some(READER)).await;
    let mut auditor = open_stream(&f, Some(AUDITOR)).await;
    trip(&f.registry, "prices");
    let (kind, ev) = next_event(&mut reader).await;
    assert_eq!(kind, "transition");
    assert_eq!(
        (ev["key"].as_str(), ev["from"].as_str(), ev["to"].as_str()),
        (Some("prices"), Some("closed"), Some("open"))
    );
    assert_eq!(ev["reason"]["rule"], "failure-rate");
    assert_eq!(ev["window"]["failures"], 4);
    let (_, ev) = next_event(&mut auditor).await;
    assert_eq!(ev["key"], "prices");
    trip(&f.registry, "payments/tenant=globex");
    let (_, ev) = next_event(&mut reader).await;
    assert_eq!(
        (ev["key"].clone(), ev["dependency"].as_str()),
        (Value::Null, Some("payments"))
    );
    let (_, ev) = next_event(&mut auditor).await;
    assert_eq!(ev["key"], "payments/tenant=globex");
    let (status, _, _) = send(
        &f.router,
        control(
            json!({"action": "force-open", "key": "prices"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (kind, ev) = next_event(&mut reader).await;
    assert_eq!(
        (kind.as_str(), ev["to"].as_str()),
        ("transition", Some("forced-open"))
    );
    let (kind, ev) = next_event(&mut reader).await;
    assert_eq!(kind, "audit");
    assert_eq!(
        (ev["principal"].as_str(), ev["action"].as_str()),
        (Some("on-call"), Some("force-open"))
    );
}

#[tokio::test]
async fn streams_are_capped_and_give_their_slot_back() {
    let f = fixture_with(|b| b.max_streams(2));
    let a = open_stream(&f, Some(READER)).await;
    let b = open_stream(&f, Some(AUDITOR)).await;
    let (status, _, body) = send(&f.router, get("/api/events", Some(OPERATOR))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"], "2 event streams are open, the most allowed");
    drop(a);
    let c = open_stream(&f, Some(READER)).await;
    drop((b, c));
}

// ---------------------------------------------------------------------------------------------
// Bounds and lifecycle of recent events.

#[tokio::test]
async fn recent_events_are_bounded_per_key_and_in_total() {
    let f = fixture_with(|b| b.recent_events(3, 5));
    let flip = |k: &str, n: usize| {
        let b = f.registry.peek(&key(k)).unwrap();
        for _ in 0..n {
            b.force_open();
            b.reset();
        }
    };
    flip("prices", 10);
    let events = |id: String| {
        let router = f.router.clone();
        async move {
            let (status, _, d) =
                send(&router, get(&format!("/api/breakers/{id}"), Some(READER))).await;
            assert_eq!(status, StatusCode::OK);
            d["events"].as_array().unwrap().len()
        }
    };
    let prices = id_of(&f, "prices").await;
    assert_eq!(events(prices.clone()).await, 3, "at most 3 for one key");
    flip("catalog/shard=1", 1);
    let shard = id_of(&f, "catalog/shard=1").await;
    assert_eq!(events(shard.clone()).await, 2);
    assert_eq!(events(prices.clone()).await, 3);
    flip("catalog/shard=2", 1);
    // 3 + 2 + 2 = 7 > 5: the two oldest of all (the prices ones) went.
    assert_eq!(events(prices).await, 1);
    assert_eq!(events(shard).await, 2);
}

#[tokio::test]
async fn events_of_a_key_the_registry_dropped_go_at_the_next_sweep() {
    let f = fixture();
    let b = f.registry.peek(&key("catalog/shard=10")).unwrap();
    b.force_open();
    b.reset();
    drop(b);
    let id = id_of(&f, "catalog/shard=10").await;
    // Idle long enough, Closed and clean: the registry evicts it.
    f.clock.advance(Duration::from_secs(3600));
    for k in KEYS.iter().filter(|k| **k != "catalog/shard=10") {
        f.registry.get(&key(k)).unwrap();
    }
    assert_eq!(f.registry.evict_idle(), 1);
    assert!(f.registry.peek(&key("catalog/shard=10")).is_none());
    assert_eq!(f.dashboard.sweep(), 1, "its records went");
    assert_eq!(f.dashboard.sweep(), 0);
    let (status, _, _) = send(&f.router, get(&format!("/api/breakers/{id}"), Some(READER))).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Requests sweep too, at most once a second of the dashboard's clock.
    let other = f.registry.peek(&key("catalog/shard=2")).unwrap();
    other.force_open();
    other.reset();
    drop(other);
    f.clock.advance(Duration::from_secs(3600));
    for k in KEYS.iter().filter(|k| !k.starts_with("catalog")) {
        f.registry.get(&key(k)).unwrap();
    }
    assert_eq!(f.registry.evict_idle(), 2);
    list(&f, "", Some(READER)).await;
    assert_eq!(f.dashboard.sweep(), 0, "the list request swept already");
    // Reads did not bring the evicted keys back.
    assert!(f.registry.peek(&key("catalog/shard=2")).is_none());
}

#[tokio::test]
async fn no_read_creates_state() {
    let f = fixture();
    let before = registry_state(&f);
    let len = f.registry.len();
    for path in [
        "/api/breakers?key=ghost/shard%3D1",
        "/api/breakers?dependency=ghost",
        "/api/breakers?q=ghost",
        "/api/breakers/0000000000000000",
        "/api/session",
        "/api/audit",
        "/index.html",
    ] {
        send(&f.router, get(path, Some(OPERATOR))).await;
    }
    for body in [
        json!({"action": "force-open", "key": "ghost"}),
        json!({"action": "force-open", "key": "ghost/tenant=x"}),
        json!({"action": "disable", "dependency": "ghost"}),
        json!({"action": "clear", "dependency": "ghost"}),
        json!({"action": "metrics-only", "id": "0000000000000000"}),
    ] {
        let (status, _, _) = send(&f.router, control(body, Some(OPERATOR))).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    assert_eq!(registry_state(&f), before);
    assert_eq!(f.registry.len(), len);
}

// ---------------------------------------------------------------------------------------------
// The page and the mount point.

#[tokio::test]
async fn the_page_is_served_under_the_mount_point_with_strict_headers() {
    let f = fixture();
    let (status, headers, _) =
        send(&f.router, Request::get("/ops").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(headers[header::LOCATION], "./ops/index.html");
    let (status, headers, _) = send(
        &f.router,
        Request::get("/ops?x=1").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(headers[header::LOCATION], "./ops/index.html?x=1");
    let (status, headers, body) = send(&f.router, get("/index.html", None)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_TYPE], "text/html; charset=utf-8");
    assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    let csp = headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    let html = body.as_str().unwrap();
    assert!(
        html.contains("src=\"assets/app.js\"") && !html.contains("http"),
        "relative, local links only"
    );
    for (asset, ty) in [
        ("app.js", "text/javascript; charset=utf-8"),
        ("boot.js", "text/javascript; charset=utf-8"),
        ("app.css", "text/css; charset=utf-8"),
    ] {
        let (status, headers, body) = send(&f.router, get(&format!("/assets/{asset}"), None)).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], ty);
        let text = body.as_str().unwrap();
        assert!(
            !text.contains("https://") && !text.contains("innerHTML"),
            "{asset} loads nothing remote and writes no markup"
        );
    }
    let (status, _, _) = send(&f.router, get("/assets/secret.txt", None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_service_serves_at_the_root() {
    let f = fixture();
    let svc = f.dashboard.service::<String>();
    let resp = svc
        .clone()
        .oneshot(Request::get("/").body(String::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "at the root, / is the page");
    let req = Request::get("/api/breakers?limit=1")
        .header(header::AUTHORIZATION, format!("Bearer {READER}"))
        .body(String::new())
        .unwrap();
    let resp = svc.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = svc
        .oneshot(Request::get("/api/session").body(String::new()).unwrap())
        .await
        .unwrap();
    let cookie = resp.headers()[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.contains("; Path=/; "), "{cookie}");
}

// ---------------------------------------------------------------------------------------------
// Settings.

#[test]
fn settings_are_checked() {
    let b = || Dashboard::builder();
    let field = |r: Result<Dashboard, tripline::ConfigError>| r.unwrap_err().field().to_string();
    assert_eq!(
        field(
            b().anonymous(Permissions::READ | Permissions::CONTROL)
                .build()
        ),
        "anonymous"
    );
    assert_eq!(
        field(b().recent_events(0, 10).build()),
        "recent_events.per_key"
    );
    assert_eq!(
        field(b().recent_events(10, 5).build()),
        "recent_events.total"
    );
    assert_eq!(field(b().max_streams(0).build()), "max_streams");
    assert_eq!(
        field(b().allowed_origin("ops.example.com").build()),
        "allowed_origin"
    );
    assert_eq!(
        field(b().allowed_origin("https://ops.example.com/path").build()),
        "allowed_origin"
    );
    assert_eq!(
        field(b().bearer_token("short", "op", Permissions::ALL).build()),
        "bearer_token"
    );
    assert_eq!(
        field(
            b().bearer_token(OPERATOR, "a", Permissions::ALL)
                .bearer_token(OPERATOR, "b", Permissions::READ)
                .build()
        ),
        "bearer_token"
    );
    assert_eq!(
        field(b().bearer_token(OPERATOR, "", Permissions::ALL).build()),
        "principal"
    );
    let breaker = CircuitBreaker::new("x", BreakerConfig::default());
    assert_eq!(
        field(
            b().breaker(key("x"), breaker.clone())
                .breaker(key("x"), breaker)
                .build()
        ),
        "breaker"
    );
    assert!(
        b().allowed_origin("https://ops.example.com:8443")
            .build()
            .is_ok()
    );
}

// ---------------------------------------------------------------------------------------------
// Nobody can take the live view away, and nothing leaks.

/// A stream request from `address` (as a server started with connect info sees it).
fn stream_from(token: Option<&str>, address: [u8; 4]) -> Request<Body> {
    let mut req = get("/api/events", token);
    req.extensions_mut()
        .insert(axum::extract::ConnectInfo(std::net::SocketAddr::from((
            address, 40000,
        ))));
    req
}

#[tokio::test]
async fn anonymous_streams_cannot_lock_the_operator_out_of_live_events() {
    let f = fixture();
    // Callers without credentials open streams from many addresses until refused.
    let mut held = Vec::new();
    let mut refused = None;
    for i in 0..64u8 {
        let resp = f
            .router
            .clone()
            .oneshot(stream_from(None, [10, 0, 0, i]))
            .await
            .unwrap();
        if resp.status() == StatusCode::OK {
            held.push(resp.into_body());
        } else {
            refused = Some(resp.status());
            break;
        }
    }
    assert_eq!(refused, Some(StatusCode::SERVICE_UNAVAILABLE));
    assert!(
        held.len() <= 16,
        "{} anonymous streams admitted",
        held.len()
    );
    // The operator, and a reader, still follow the events.
    let operator = open_stream(&f, Some(OPERATOR)).await;
    let reader = open_stream(&f, Some(READER)).await;
    drop((operator, reader, held));
}

#[tokio::test]
async fn streams_are_capped_per_address_and_per_principal_and_the_last_are_for_control() {
    let f = fixture();
    let mut same_address = Vec::new();
    loop {
        let resp = f
            .router
            .clone()
            .oneshot(stream_from(None, [10, 9, 9, 9]))
            .await
            .unwrap();
        if resp.status() != StatusCode::OK {
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&body).unwrap();
            assert!(
                body["error"].as_str().unwrap().contains("for this address"),
                "{body}"
            );
            break;
        }
        same_address.push(resp.into_body());
        assert!(
            same_address.len() <= 4,
            "more than 4 streams from one address"
        );
    }
    let mut readers = Vec::new();
    loop {
        let resp = f
            .router
            .clone()
            .oneshot(get("/api/events", Some(READER)))
            .await
            .unwrap();
        if resp.status() != StatusCode::OK {
            assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
            break;
        }
        readers.push(resp.into_body());
        assert!(readers.len() <= 8, "more than 8 streams for one principal");
    }
    // Fill the rest with principals that may not control: the last eighth stays free for
    // those that may.
    let f = fixture_with(|b| b.max_streams(16).max_streams_per_principal(16));
    let mut readers = Vec::new();
    loop {
        let resp = f
            .router
            .clone()
            .oneshot(get("/api/events", Some(AUDITOR)))
            .await
            .unwrap();
        if resp.status() != StatusCode::OK {
            break;
        }
        readers.push(resp.into_body());
    }
    assert_eq!(readers.len(), 14, "16 less the 2 kept for control");
    let operator = open_stream(&f, Some(OPERATOR)).await;
    let robot = open_stream(&f, Some(CONTROLLER)).await;
    let (status, _, _) = send(&f.router, get("/api/events", Some(OPERATOR))).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "16 in all");
    drop((operator, robot, readers, same_address));
}

/// Every text a principal gets from the API, for `walk`'s requests.
async fn everything_seen(f: &Fixture, token: &str) -> String {
    let mut seen = String::new();
    let l = list(f, "?limit=1000", Some(token)).await;
    seen.push_str(&l.to_string());
    for b in l["breakers"].as_array().unwrap() {
        let id = b["id"].as_str().unwrap();
        for path in [
            format!("/api/breakers/{id}"),
            format!("/api/breakers/{id}/history"),
        ] {
            let (_, headers, body) = send(&f.router, get(&path, Some(token))).await;
            seen.push_str(&format!("{headers:?}{body}"));
        }
    }
    for path in ["/api/audit", "/api/incidents", "/api/session"] {
        let (_, headers, body) = send(&f.router, get(path, Some(token))).await;
        seen.push_str(&format!("{headers:?}{body}"));
    }
    seen
}

#[tokio::test]
async fn a_refusal_never_names_a_key_the_principal_may_not_see() {
    let f = fixture();
    let (status, _, _) = send(
        &f.router,
        control(
            json!({"action": "force-open", "key": "payments/tenant=acme"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    trip(&f.registry, "payments/tenant=globex");
    // The robot may control but not see tenants: it presses the row's button (by id).
    let l = list(&f, "?dependency=payments", Some(CONTROLLER)).await;
    let held = l["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["override"] == "forced-open")
        .expect("the forced row");
    let id = held["id"].as_str().unwrap().to_string();
    let mut answers = String::new();
    for action in ["reset", "force-open", "clear", "reset", "disable"] {
        let (status, headers, body) = send(
            &f.router,
            control(json!({"action": action, "id": id}), Some(CONTROLLER)),
        )
        .await;
        answers.push_str(&format!("{status} {headers:?} {body}\n"));
    }
    assert!(answers.starts_with("409"), "{answers}");
    for (status, headers, body) in [
        send(
            &f.router,
            control(
                json!({"action": "reset", "dependency": "payments"}),
                Some(CONTROLLER),
            ),
        )
        .await,
        send(
            &f.router,
            control(
                json!({"action": "clear", "key": "payments/tenant=acme"}),
                Some(CONTROLLER),
            ),
        )
        .await,
    ] {
        answers.push_str(&format!("{status} {headers:?} {body}\n"));
    }
    answers.push_str(&everything_seen(&f, CONTROLLER).await);
    answers.push_str(&everything_seen(&f, READER).await);
    for secret in ["acme", "globex"] {
        assert!(!answers.contains(secret), "{secret} leaked: {answers}");
    }
    // The auditor may see them: the same walk names them.
    assert!(everything_seen(&f, AUDITOR).await.contains("acme"));
}

/// The audit records an `on_audit` hook saw.
type Audits = Arc<Mutex<Vec<AuditRecord>>>;

/// A dashboard of hand-registered breakers only, no registry.
fn manual_only(clock: &ManualClock) -> (Vec<CircuitBreaker<ManualClock>>, Router, Audits) {
    let breakers: Vec<CircuitBreaker<ManualClock>> = (1..=2)
        .map(|i| CircuitBreaker::with_clock(format!("legacy-{i}"), small(), clock.clone()))
        .collect();
    let audits = Arc::new(Mutex::new(Vec::new()));
    let seen = audits.clone();
    let dashboard = DashboardBuilder::new(clock.clone())
        .bearer_token(OPERATOR, "on-call", Permissions::ALL)
        .breaker(key("legacy/shard=1"), breakers[0].clone())
        .breaker(key("legacy/shard=2"), breakers[1].clone())
        .on_audit(move |a| seen.lock().unwrap().push(a.clone()))
        .build()
        .unwrap();
    (
        breakers,
        Router::new().nest("/ops", dashboard.router()),
        audits,
    )
}

#[tokio::test]
async fn force_open_all_on_hand_registered_breakers_says_the_override_is_in_force() {
    let clock = ManualClock::new();
    let (breakers, router, audits) = manual_only(&clock);
    let (status, _, r) = send(
        &router,
        control(
            json!({"action": "force-open", "dependency": "legacy"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert!(breakers.iter().all(|b| b.state() == State::ForcedOpen));
    assert_eq!(
        (r["changed"].as_u64(), r["in_force"].as_str()),
        (Some(2), Some("forced-open"))
    );
    assert_eq!(
        audits.lock().unwrap()[0].in_force,
        OperatorState::ForcedOpen
    );
    let (_, _, l) = send(&router, get("/api/breakers", Some(OPERATOR))).await;
    assert_eq!(l["dependencies"][0]["override"], "forced-open", "{l}");
    for b in l["breakers"].as_array().unwrap() {
        assert_eq!(b["override"], "forced-open");
    }
    // A key's own override decides for it; clearing the dependency lifts both.
    let (status, _, r) = send(
        &router,
        control(
            json!({"action": "disable", "key": "legacy/shard=1"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(
        (status, r["in_force"].as_str()),
        (StatusCode::OK, Some("disabled"))
    );
    assert_eq!(
        (breakers[0].state(), breakers[1].state()),
        (State::Disabled, State::ForcedOpen)
    );
    let (status, _, r) = send(
        &router,
        control(
            json!({"action": "clear", "dependency": "legacy"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(
        (status, r["in_force"].clone()),
        (StatusCode::OK, Value::Null),
        "{r}"
    );
    assert!(breakers.iter().all(|b| b.state() == State::Closed));
}

#[tokio::test]
async fn an_override_from_the_configuration_says_which_layer_holds_it_and_what_lifts_it() {
    let f = fixture();
    let config = RegistryConfig::default()
        .with_config("default", small())
        .with_operator("prices", OperatorState::ForcedOpen);
    f.registry.reload(config).unwrap();
    let prices = f.registry.get(&key("prices")).unwrap();
    assert_eq!(prices.state(), State::ForcedOpen);
    let row = &list(&f, "?key=prices", Some(OPERATOR)).await["breakers"][0];
    assert_eq!(
        (row["override"].as_str(), row["override_by"].as_str()),
        (Some("forced-open"), Some("configuration"))
    );
    for action in ["reset", "clear"] {
        let (status, _, r) = send(
            &f.router,
            control(json!({"action": action, "key": "prices"}), Some(OPERATOR)),
        )
        .await;
        assert_eq!(status, StatusCode::CONFLICT, "{action}: {r}");
        let why = r["error"].as_str().unwrap();
        assert!(
            why.contains("registry's configuration")
                && why.contains("reload")
                && why.contains("auto"),
            "{action}: {why}"
        );
        assert_eq!(prices.state(), State::ForcedOpen);
    }
    // The way out: let the rules decide at run time, over the configuration.
    let (status, _, r) = send(
        &f.router,
        control(json!({"action": "auto", "key": "prices"}), Some(OPERATOR)),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(prices.state(), State::Closed);
    let row = &list(&f, "?key=prices", Some(OPERATOR)).await["breakers"][0];
    assert_eq!(
        (row["override"].as_str(), row["override_by"].as_str()),
        (Some("auto"), Some("run-time-key"))
    );
    // Clearing it gives the configuration its say again.
    let (status, _, _) = send(
        &f.router,
        control(json!({"action": "clear", "key": "prices"}), Some(OPERATOR)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        f.registry.get(&key("prices")).unwrap().state(),
        State::ForcedOpen
    );
}

#[tokio::test]
async fn a_control_by_id_reaches_only_that_row_where_two_share_a_key() {
    let clock = ManualClock::new();
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_config("default", small()),
            clock.clone(),
        )
        .unwrap(),
    );
    let in_registry = registry.get(&key("legacy-api")).unwrap();
    let by_hand = CircuitBreaker::with_clock("legacy", small(), clock.clone());
    let audits = Arc::new(Mutex::new(Vec::new()));
    let seen = audits.clone();
    let dashboard = DashboardBuilder::new(clock.clone())
        .registry(registry.clone())
        .bearer_token(OPERATOR, "on-call", Permissions::ALL)
        .breaker(key("legacy-api"), by_hand.clone())
        .on_audit(move |a| seen.lock().unwrap().push(a.clone()))
        .build()
        .unwrap();
    let router = Router::new().nest("/ops", dashboard.router());
    let (_, _, l) = send(&router, get("/api/breakers?key=legacy-api", Some(OPERATOR))).await;
    let id_of = |source: &str| {
        l["breakers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["source"] == source)
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (status, _, r) = send(
        &router,
        control(
            json!({"action": "force-open", "id": id_of("manual")}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(
        (status, r["changed"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{r}"
    );
    assert_eq!(
        (by_hand.state(), in_registry.state()),
        (State::ForcedOpen, State::Closed)
    );
    let (status, _, _) = send(
        &router,
        control(
            json!({"action": "disable", "id": id_of("registry")}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (by_hand.state(), in_registry.state()),
        (State::ForcedOpen, State::Disabled)
    );
    // By key, both.
    let (status, _, r) = send(
        &router,
        control(
            json!({"action": "clear", "key": "legacy-api"}),
            Some(OPERATOR),
        ),
    )
    .await;
    assert_eq!(
        (status, r["changed"].as_u64()),
        (StatusCode::OK, Some(2)),
        "{r}"
    );
    assert_eq!(
        (by_hand.state(), in_registry.state()),
        (State::Closed, State::Closed)
    );
    let audits = audits.lock().unwrap();
    assert_eq!(
        audits.iter().map(|a| a.source).collect::<Vec<_>>(),
        [
            Some(tripline_dashboard::Source::Manual),
            Some(tripline_dashboard::Source::Registry),
            None
        ]
    );
}

#[tokio::test]
async fn with_tokens_anonymous_may_not_read_unless_allowed() {
    let clock = ManualClock::new();
    let registry =
        Arc::new(Registry::with_clock(RegistryConfig::default(), clock.clone()).unwrap());
    registry.get(&key("payments/tenant=acme")).unwrap();
    let tokens = |b: DashboardBuilder<ManualClock>| {
        b.registry(registry.clone())
            .bearer_token(READER, "viewer", Permissions::READ)
    };
    let router = Router::new().nest(
        "/ops",
        tokens(DashboardBuilder::new(clock.clone()))
            .build()
            .unwrap()
            .router(),
    );
    for path in [
        "/api/breakers",
        "/api/audit",
        "/api/events",
        "/api/incidents",
    ] {
        let (status, _, body) = send(&router, get(path, None)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}: {body}");
    }
    let (status, _, _) = send(&router, get("/api/breakers", Some(READER))).await;
    assert_eq!(status, StatusCode::OK);
    // Said explicitly, anonymous callers read.
    let open = tokens(DashboardBuilder::new(clock.clone()))
        .anonymous(Permissions::READ)
        .build()
        .unwrap();
    let router = Router::new().nest("/ops", open.router());
    let (status, _, _) = send(&router, get("/api/breakers", None)).await;
    assert_eq!(status, StatusCode::OK);
    // Without any check configured, the page is readable (and has no controls).
    let bare = DashboardBuilder::new(clock)
        .registry(registry.clone())
        .build()
        .unwrap();
    let (status, _, _) = send(
        &Router::new().nest("/ops", bare.router()),
        get("/api/breakers", None),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn the_mount_point_with_a_slash_is_the_page() {
    let f = fixture();
    let router = f.dashboard.mount(Router::new(), "/ops");
    for path in ["/ops/", "/ops/index.html"] {
        let (status, headers, body) =
            send(&router, Request::get(path).body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{path}: {body}");
        assert_eq!(
            headers[header::CONTENT_TYPE],
            "text/html; charset=utf-8",
            "{path}"
        );
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
    }
    let (status, headers, _) =
        send(&router, Request::get("/ops").body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::FOUND);
    assert_eq!(headers[header::LOCATION], "./ops/index.html");
    let (status, _, _) = send(
        &router,
        Request::get("/ops/nothing/").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, _, l) = send(&router, get("/api/breakers", Some(READER))).await;
    assert_eq!(l["total"], 7, "the API under the same mount point");
}

// ---------------------------------------------------------------------------------------------
// User code never runs under a lock of the dashboard.

/// A request answered on a thread of its own (its own runtime), as another client would
/// send it while the caller waits: `None` if no answer comes within a generous bound.
fn from_another_thread(router: &Router, req: Request<Body>) -> Option<StatusCode> {
    let router = router.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let status = rt.block_on(async move { router.oneshot(req).await.unwrap().status() });
        let _ = tx.send(status);
    });
    rx.recv_timeout(Duration::from_secs(20)).ok()
}

/// Runs `f` on a thread; fails if it does not return within a generous bound (a deadlock).
fn within_bound<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: no answer within 60 s (deadlock)"))
}

type Slot = Arc<std::sync::OnceLock<Router>>;

/// What a re-entering callback saw: the status of each request it sent.
type Answers = Arc<Mutex<Vec<Option<StatusCode>>>>;

/// A callback body: reads the page and sends a control of its own, from another thread,
/// waiting for the answers; once per `armed`.
fn reenter(
    router: &Slot,
    armed: &std::sync::atomic::AtomicBool,
    answers: &Answers,
    id: &str,
    dependency: &str,
) {
    if !armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let Some(router) = router.get() else { return };
    let mut seen = Vec::new();
    for req in [
        get("/api/breakers", Some(OPERATOR)),
        get(&format!("/api/breakers/{id}"), Some(OPERATOR)),
        get(&format!("/api/breakers/{id}/history"), Some(OPERATOR)),
        get("/api/incidents", Some(OPERATOR)),
        control(
            json!({"action": "metrics-only", "dependency": dependency}),
            Some(OPERATOR),
        ),
    ] {
        seen.push(from_another_thread(router, req));
    }
    answers.lock().unwrap().extend(seen);
}

#[test]
fn a_listener_of_a_hand_registered_breaker_may_use_the_dashboard_during_a_control() {
    let clock = ManualClock::new();
    let manual = CircuitBreaker::with_clock("legacy", small(), clock.clone());
    let slot: Slot = Arc::default();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answers: Answers = Arc::default();
    let id = Arc::new(Mutex::new(String::new()));
    {
        let (slot, armed, answers, id) = (slot.clone(), armed.clone(), answers.clone(), id.clone());
        manual.subscribe(move |e: &tripline::Event| {
            if matches!(e.kind, tripline::EventKind::Transition { .. }) {
                let id = id.lock().unwrap().clone();
                // The control reaches the very breaker whose listener runs.
                reenter(&slot, &armed, &answers, &id, "legacy-api");
            }
        });
    }
    let dashboard = DashboardBuilder::new(clock)
        .bearer_token(OPERATOR, "on-call", Permissions::ALL)
        .breaker(key("legacy-api"), manual.clone())
        .build()
        .unwrap();
    let router = Router::new().nest("/ops", dashboard.router());
    slot.set(router.clone()).ok();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let l = rt.block_on(list_with(&router, OPERATOR));
    *id.lock().unwrap() = l["breakers"][0]["id"].as_str().unwrap().to_string();
    for action in [
        "force-open",
        "disable",
        "reset",
        "clear",
        "metrics-only",
        "clear",
    ] {
        armed.store(true, std::sync::atomic::Ordering::SeqCst);
        let router = router.clone();
        let status = within_bound(action, move || {
            from_another_thread(
                &router,
                control(
                    json!({"action": action, "key": "legacy-api"}),
                    Some(OPERATOR),
                ),
            )
        });
        assert!(status.is_some(), "{action}: the control never answered");
    }
    let answers = answers.lock().unwrap();
    assert!(!answers.is_empty(), "the listener ran");
    assert!(
        answers.iter().all(Option::is_some),
        "a request from the listener hung: {answers:?}"
    );
}

async fn list_with(router: &Router, token: &str) -> Value {
    send(router, get("/api/breakers", Some(token))).await.2
}

#[test]
fn a_registry_listener_and_the_application_callbacks_may_use_the_dashboard() {
    let clock = ManualClock::new();
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_config("default", small()),
            clock.clone(),
        )
        .unwrap(),
    );
    registry.get(&key("legacy-api/shard=1")).unwrap();
    registry.get(&key("elsewhere")).unwrap();
    let slot: Slot = Arc::default();
    let answers: Answers = Arc::default();
    let arm = || Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (on_event, on_audit, on_sensitive, on_auth) = (arm(), arm(), arm(), arm());
    let id = Arc::new(Mutex::new(String::new()));
    let callback = |armed: &Arc<std::sync::atomic::AtomicBool>| {
        let (slot, armed, answers, id) = (slot.clone(), armed.clone(), answers.clone(), id.clone());
        move || {
            let id = id.lock().unwrap().clone();
            // The control reaches another dependency of the registry (one whose override
            // re-sync is not the one running this callback).
            reenter(&slot, &armed, &answers, &id, "elsewhere");
        }
    };
    let event = callback(&on_event);
    registry.subscribe(move |e: &tripline::Event| {
        if matches!(e.kind, tripline::EventKind::Transition { .. }) {
            event();
        }
    });
    let audit = callback(&on_audit);
    let sensitive = callback(&on_sensitive);
    let auth = callback(&on_auth);
    let dashboard = DashboardBuilder::new(clock)
        .registry(registry.clone())
        .bearer_token(OPERATOR, "on-call", Permissions::ALL)
        .on_audit(move |_| audit())
        .sensitive(move |_| {
            sensitive();
            false
        })
        .authenticate(
            move |_: &axum::http::request::Parts| -> Result<Option<Principal>, Unauthenticated> {
                auth();
                Ok(None)
            },
        )
        .build()
        .unwrap();
    let router = Router::new().nest("/ops", dashboard.router());
    slot.set(router.clone()).ok();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let l = rt.block_on(list_with(&router, OPERATOR));
    *id.lock().unwrap() = l["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["key"] == "legacy-api/shard=1")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    for (armed, what) in [
        (&on_event, "listener"),
        (&on_audit, "on_audit"),
        (&on_sensitive, "sensitive"),
        (&on_auth, "authenticate"),
    ] {
        for action in ["force-open", "clear"] {
            armed.store(true, std::sync::atomic::Ordering::SeqCst);
            let router = router.clone();
            let status = within_bound(what, move || {
                from_another_thread(
                    &router,
                    control(
                        json!({"action": action, "key": "legacy-api/shard=1"}),
                        Some(OPERATOR),
                    ),
                )
            });
            assert!(
                status.is_some(),
                "{what}, {action}: the control never answered"
            );
        }
    }
    let answers = answers.lock().unwrap();
    assert!(answers.len() >= 4 * 5, "every callback ran: {answers:?}");
    assert!(
        answers.iter().all(Option::is_some),
        "a request from a callback hung: {answers:?}"
    );
}

#[tokio::test]
async fn a_request_naming_another_host_is_refused_once_hosts_are_allowed() {
    let f = fixture_with(|b| {
        b.allowed_host("127.0.0.1:8080")
            .allowed_host("ops.example.com")
    });
    for (host, allowed) in [
        (Some("127.0.0.1:8080"), true),
        (Some("OPS.example.com:443"), true),
        (Some("evil.test"), false),
        (Some("127.0.0.1:8081"), false),
        (Some("rebound.attacker.test:8080"), false),
        (None, false),
    ] {
        for path in [
            "/index.html",
            "/assets/app.js",
            "/api/session",
            "/api/breakers",
            "/api/events",
        ] {
            let mut req = Request::get(format!("/ops{path}"))
                .header(header::AUTHORIZATION, format!("Bearer {READER}"));
            if let Some(h) = host {
                req = req.header(header::HOST, h);
            }
            let resp = f
                .router
                .clone()
                .oneshot(req.body(Body::empty()).unwrap())
                .await
                .unwrap();
            if allowed {
                assert_eq!(resp.status(), StatusCode::OK, "{host:?} {path}");
            } else {
                assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{host:?} {path}");
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                let body: Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(body["field"], "host", "{body}");
            }
        }
    }
    // A control from a rebinding page: refused before anything is read or done.
    let (status, _, _) = send(
        &f.router,
        control_raw(
            json!({"action": "force-open", "key": "prices"}).to_string(),
            Some(OPERATOR),
            &[("host", "rebound.attacker.test:8080")],
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        f.registry.peek(&key("prices")).unwrap().state(),
        State::Closed
    );
}

#[test]
fn the_new_settings_are_checked() {
    let b = || Dashboard::builder();
    let field = |r: Result<Dashboard, tripline::ConfigError>| r.unwrap_err().field().to_string();
    assert_eq!(
        field(b().allowed_host("http://ops.example.com").build()),
        "allowed_host"
    );
    assert_eq!(
        field(b().allowed_host("ops.example.com/ops").build()),
        "allowed_host"
    );
    assert_eq!(
        field(b().max_streams_per_principal(0).build()),
        "max_streams_per_principal"
    );
    assert_eq!(
        field(b().max_streams(4).max_streams_per_principal(5).build()),
        "max_streams_per_principal"
    );
    assert_eq!(
        field(b().max_streams(4).max_anonymous_streams(5).build()),
        "max_anonymous_streams"
    );
    assert_eq!(
        field(b().max_streams_per_client(0).build()),
        "max_streams_per_client"
    );
    assert_eq!(
        field(b().history_slots(100_000_001).build()),
        "history_slots"
    );
    assert!(
        b().allowed_host("[::1]:8080")
            .max_anonymous_streams(0)
            .history_slots(0)
            .build()
            .is_ok()
    );
}

/// A clock that, once armed, uses the dashboard from another thread inside a reading, as a
/// clock that reads a shared time source through a service might.
#[derive(Clone)]
struct ReenteringClock {
    inner: ManualClock,
    hook: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl tripline::Clock for ReenteringClock {
    fn now(&self) -> u64 {
        if let Some(hook) = &self.hook {
            hook();
        }
        self.inner.now()
    }
}

#[test]
fn the_dashboards_clock_may_use_the_dashboard() {
    let manual = ManualClock::new();
    let plain = ReenteringClock {
        inner: manual.clone(),
        hook: None,
    };
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_config("default", small()),
            plain.clone(),
        )
        .unwrap(),
    );
    registry.get(&key("legacy-api")).unwrap();
    registry.get(&key("elsewhere")).unwrap();
    let by_hand = CircuitBreaker::with_clock("by-hand", small(), plain);
    let slot: Slot = Arc::default();
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answers: Answers = Arc::default();
    let hook = {
        let (slot, armed, answers) = (slot.clone(), armed.clone(), answers.clone());
        move || reenter(&slot, &armed, &answers, "0000000000000000", "elsewhere")
    };
    let clock = ReenteringClock {
        inner: manual.clone(),
        hook: Some(Arc::new(hook)),
    };
    let dashboard = DashboardBuilder::new(clock)
        .registry(registry.clone())
        .breaker(key("by-hand"), by_hand)
        .bearer_token(OPERATOR, "on-call", Permissions::ALL)
        .build()
        .unwrap();
    let router = Router::new().nest("/ops", dashboard.router());
    slot.set(router.clone()).ok();
    for (what, req) in [
        ("a listing due a history sample", None),
        (
            "a control",
            Some(json!({"action": "force-open", "key": "legacy-api"})),
        ),
        (
            "a control of a hand-registered breaker",
            Some(json!({"action": "disable", "key": "by-hand"})),
        ),
    ] {
        manual.advance(Duration::from_secs(10));
        armed.store(true, std::sync::atomic::Ordering::SeqCst);
        let router = router.clone();
        let status = within_bound(what, move || match req {
            None => from_another_thread(&router, get("/api/breakers", Some(OPERATOR))),
            Some(body) => from_another_thread(&router, control(body, Some(OPERATOR))),
        });
        assert!(status.is_some(), "{what}: never answered");
        assert!(
            !armed.load(std::sync::atomic::Ordering::SeqCst),
            "{what}: the clock was read"
        );
    }
    let answers = answers.lock().unwrap();
    assert!(
        answers.iter().all(Option::is_some),
        "a request from the clock hung: {answers:?}"
    );
}
