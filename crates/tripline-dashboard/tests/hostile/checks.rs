//! What must hold for every request the dashboard's router is sent (its query, path and JSON
//! body parsing), beyond "it does not panic". Driven by proptest in `tests/hostile.rs`
//! (stable, every CI run) and by libFuzzer in `fuzz/` (which includes this file).

use std::sync::{Arc, LazyLock};

use arbitrary::{Result, Unstructured};
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt;
use tripline::registry::{Key, Registry, RegistryConfig};
use tripline::{CircuitBreaker, ManualClock, State};
use tripline_dashboard::{Dashboard, Permissions};

const KEYS: [&str; 5] = [
    "catalog/shard=1",
    "catalog/shard=10",
    "payments/tenant=acme",
    "prices",
    "eu-west/region=é",
];

/// One request: method, path, query, headers, body.
#[derive(Debug)]
pub(crate) struct Hostile {
    method: Method,
    uri: String,
    json: bool,
    origin: Option<String>,
    body: Vec<u8>,
}

/// Text for a path segment or a query value: names the dashboard knows, keys, ids, and
/// arbitrary bytes, percent-encoded or not.
fn piece(u: &mut Unstructured<'_>) -> Result<String> {
    const WORDS: [&str; 22] = [
        "catalog",
        "catalog/shard=1",
        "catalog%2Fshard%3D1",
        "payments/tenant=acme",
        "prices",
        "legacy-api",
        "open",
        "closed",
        "half-open",
        "forced-open",
        "disabled",
        "metrics-only",
        "registry",
        "manual",
        "0",
        "-1",
        "18446744073709551616",
        "%FF%FE",
        "%00",
        "..",
        "%2e%2e",
        "eu-west/region=é",
    ];
    Ok(match u.int_in_range(0..=3)? {
        0 | 1 => u.choose(&WORDS)?.to_string(),
        2 => u
            .arbitrary::<Vec<u8>>()?
            .iter()
            .map(|b| format!("%{b:02X}"))
            .collect(),
        _ => u.arbitrary::<String>()?,
    })
}

fn json_value(u: &mut Unstructured<'_>, depth: u32) -> Result<serde_json::Value> {
    use serde_json::Value;
    Ok(match u.int_in_range(0..=7)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => Value::from(u.arbitrary::<f64>()?),
        4 | 5 => Value::String(piece(u)?),
        6 if depth < 3 => Value::Array(vec![json_value(u, depth + 1)?]),
        _ if depth < 3 => {
            let mut m = serde_json::Map::new();
            m.insert(piece(u)?, json_value(u, depth + 1)?);
            Value::Object(m)
        }
        _ => Value::Null,
    })
}

/// A control body: the fields the API knows (action, key, id, dependency) with hostile
/// values, sometimes an unknown or repeated field, sometimes not JSON at all.
fn body(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    const ACTIONS: [&str; 7] = [
        "force-open",
        "disable",
        "metrics-only",
        "reset",
        "clear",
        "open",
        "",
    ];
    match u.int_in_range(0..=5)? {
        0 => return u.arbitrary(),
        1 => return Ok(json_value(u, 0)?.to_string().into_bytes()),
        _ => {}
    }
    let mut fields = Vec::new();
    if u.ratio(7, 8)? {
        let action = if u.ratio(3, 4)? {
            serde_json::Value::from(*u.choose(&ACTIONS)?)
        } else {
            json_value(u, 1)?
        };
        fields.push(format!("\"action\":{action}"));
    }
    for _ in 0..u.int_in_range(0..=2)? {
        let name = u.choose(&["key", "id", "dependency", "key", "target", "action"])?;
        let value = if u.ratio(3, 4)? {
            serde_json::Value::String(piece(u)?)
        } else {
            json_value(u, 1)?
        };
        fields.push(format!("{:?}:{value}", name));
    }
    Ok(format!("{{{}}}", fields.join(",")).into_bytes())
}

impl Hostile {
    pub(crate) fn arbitrary(u: &mut Unstructured<'_>) -> Result<Self> {
        const PATHS: [&str; 10] = [
            "/",
            "/index.html",
            "/assets/",
            "/api/session",
            "/api/breakers",
            "/api/breakers/",
            "/api/audit",
            "/api/events",
            "/api/control",
            "/api/",
        ];
        let method = match u.int_in_range(0..=9)? {
            0..=4 => Method::GET,
            5..=8 => Method::POST,
            _ => u
                .choose(&[Method::HEAD, Method::PUT, Method::DELETE, Method::OPTIONS])?
                .clone(),
        };
        let mut uri = u.choose(&PATHS)?.to_string();
        if uri.ends_with('/') && uri.len() > 1 {
            uri.push_str(&piece(u)?);
        }
        if u.arbitrary()? {
            let mut pairs = Vec::new();
            for _ in 0..u.int_in_range(0..=4)? {
                let name = if u.ratio(4, 5)? {
                    u.choose(&[
                        "state",
                        "source",
                        "dependency",
                        "q",
                        "sort",
                        "limit",
                        "offset",
                        "key",
                        "x",
                    ])?
                    .to_string()
                } else {
                    piece(u)?
                };
                pairs.push(format!("{name}={}", piece(u)?));
            }
            uri.push('?');
            uri.push_str(&pairs.join("&"));
        }
        Ok(Self {
            method,
            uri,
            json: u.ratio(7, 8)?,
            origin: if u.ratio(1, 4)? {
                Some(
                    u.choose(&["http://localhost", "https://evil.example", "null"])?
                        .to_string(),
                )
            } else {
                None
            },
            body: body(u)?,
        })
    }
}

/// A dashboard over a registry of a few breakers (two of them tripped) and a hand-registered
/// breaker, open to anonymous callers with every permission, so that every control path is
/// reachable.
fn dashboard() -> (
    Dashboard<ManualClock>,
    Arc<Registry<ManualClock>>,
    CircuitBreaker<ManualClock>,
) {
    let clock = ManualClock::new();
    let registry = Arc::new(
        Registry::with_clock(RegistryConfig::default(), clock.clone()).expect("a registry"),
    );
    for k in KEYS {
        let b = registry
            .get(&k.parse::<Key>().expect("a key"))
            .expect("room");
        if k.starts_with("catalog") {
            b.force_open();
        }
    }
    let manual =
        CircuitBreaker::with_clock("legacy", tripline::BreakerConfig::default(), clock.clone());
    let d = tripline_dashboard::DashboardBuilder::new(clock)
        .registry(registry.clone())
        .breaker("legacy-api".parse().expect("a key"), manual.clone())
        .anonymous(Permissions::READ | Permissions::SENSITIVE)
        .bearer_token("operator-token-0123456789", "on-call", Permissions::ALL)
        .build()
        .expect("a dashboard");
    (d, registry, manual)
}

fn states(r: &Registry<ManualClock>, manual: &CircuitBreaker<ManualClock>) -> Vec<(String, State)> {
    let mut v = Vec::new();
    r.for_each(|k, b| v.push((k.to_string(), b.state())));
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v.push(("legacy-api".into(), manual.state()));
    v
}

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
});

/// Sends the request through the router: the answer is never a server error, an error is a
/// JSON object that says what was wrong (with its status), a read changes no breaker, and no
/// request creates or drops a breaker.
pub(crate) fn request(h: &Hostile, authorized: bool) {
    let Ok(uri) = h.uri.parse::<axum::http::Uri>() else {
        return;
    };
    let (d, registry, manual) = dashboard();
    let before = states(&registry, &manual);
    let mut req = Request::builder().method(h.method.clone()).uri(uri);
    if h.json {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    if authorized {
        req = req.header(header::AUTHORIZATION, "Bearer operator-token-0123456789");
    }
    if let Some(o) = &h.origin {
        req = req.header(header::ORIGIN, o);
    }
    let Ok(req) = req.body(Body::from(h.body.clone())) else {
        return;
    };
    let streaming = h.uri.starts_with("/api/events");
    let (status, content_type, bytes) = RUNTIME.block_on(async {
        let res = d
            .service::<Body>()
            .oneshot(req)
            .await
            .expect("the router is infallible");
        let status = res.status();
        let ct = res
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let bytes = if streaming && status.is_success() {
            Vec::new()
        } else {
            res.into_body()
                .collect()
                .await
                .expect("a body")
                .to_bytes()
                .to_vec()
        };
        (status, ct, bytes)
    });
    assert!(
        !status.is_server_error(),
        "{h:?} answered {status}: {}",
        String::from_utf8_lossy(&bytes)
    );
    // A HEAD answer has no body (RFC 9110).
    let has_body = h.method != Method::HEAD;
    if has_body && status.is_client_error() && content_type.starts_with("application/json") {
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{h:?}: an error body that is not JSON ({e})"));
        assert!(
            v["error"].as_str().is_some_and(|m| !m.is_empty()),
            "{h:?}: {v}"
        );
        assert_eq!(
            v["status"].as_u64(),
            Some(u64::from(status.as_u16())),
            "{h:?}: {v}"
        );
    }
    let after = states(&registry, &manual);
    if h.method != Method::POST || !status.is_success() {
        assert_eq!(before, after, "{h:?} ({status}) changed a breaker");
    }
    assert_eq!(
        before.len(),
        after.len(),
        "{h:?} created or dropped a breaker"
    );
    if has_body
        && status == StatusCode::OK
        && !streaming
        && content_type.starts_with("application/json")
    {
        assert!(
            serde_json::from_slice::<serde_json::Value>(&bytes).is_ok(),
            "{h:?}"
        );
    }
}
