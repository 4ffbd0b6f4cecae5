//! The handlers.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{OriginalUri, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tripline::registry::{Key, OperatorState, Selector};
use tripline::{CircuitBreaker, Clock, State as BreakerState};

use crate::auth::{self, CSRF_COOKIE};
use crate::error::ApiError;
use crate::history::{self, Point, severity};
use crate::manual::{self, Held, Layer};
use crate::store::{Action, AuditRecord, Source, Target};
use crate::{MAX_BODY, Permissions, Principal, Shared, assets, view};

type Sh<C> = State<Arc<Shared<C>>>;

// ---------------------------------------------------------------------------------------------
// Who is asking.

fn who<C: Clock + Clone>(sh: &Shared<C>, parts: &Parts) -> Result<Principal, ApiError> {
    for check in &sh.auth {
        match check.authenticate(parts) {
            Ok(Some(p)) => return Ok(p),
            Ok(None) => {}
            Err(e) => return Err(ApiError::unauthorized(e.to_string())),
        }
    }
    Ok(Principal::anonymous(sh.anonymous))
}

fn require<C: Clock + Clone>(
    sh: &Shared<C>,
    parts: &Parts,
    permission: Permissions,
) -> Result<Principal, ApiError> {
    let p = who(sh, parts)?;
    if p.may(permission) {
        return Ok(p);
    }
    let what = if permission == Permissions::CONTROL {
        "control breakers"
    } else {
        "read the breakers"
    };
    Err(
        if permission == Permissions::CONTROL && !sh.controls_enabled() {
            ApiError::forbidden(
                "controls are off: the application configured no authentication check",
            )
        } else if p.is_anonymous() {
            ApiError::unauthorized(format!("credentials are needed to {what}"))
        } else {
            ApiError::forbidden(format!("{} may not {what}", p.name()))
        },
    )
}

fn json_response(status: StatusCode, body: Value) -> Response {
    let mut r = (status, Json(body)).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

// ---------------------------------------------------------------------------------------------
// The page.

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

fn static_response(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

pub(crate) async fn index(OriginalUri(uri): OriginalUri) -> Response {
    let path = uri.path();
    if !path.ends_with('/') {
        // Mounted with `nest("/ops", ..)`, the mount point is `/ops` (axum does not route
        // `/ops/` to the nested router), and relative links on a page at `/ops` would resolve
        // beside it: send the browser to `/ops/index.html`. The target is relative to the last
        // segment (`./ops/index.html`), so it can never leave the site.
        let segment = path.rsplit('/').next().unwrap_or("");
        let query = uri.query().map_or(String::new(), |q| format!("?{q}"));
        let location = format!("./{segment}/index.html{query}");
        if let Ok(value) = HeaderValue::from_str(&location) {
            return (StatusCode::FOUND, [(header::LOCATION, value)]).into_response();
        }
    }
    page().await
}

pub(crate) async fn page() -> Response {
    static_response(assets::INDEX_HTML, "text/html; charset=utf-8")
}

/// The last segment of a request's path as it came (still percent-encoded), to name a path
/// parameter that did not decode.
fn raw_segment(uri: &axum::http::Uri) -> String {
    let last = uri.path().rsplit('/').next().unwrap_or_default();
    format!("{:?}", truncate(last, 64))
}

pub(crate) async fn asset(
    uri: axum::http::Uri,
    file: Result<Path<String>, PathRejection>,
) -> Response {
    let Ok(Path(file)) = file else {
        return ApiError::field(
            "file",
            raw_segment(&uri),
            "the name of one of the page's assets, in UTF-8",
        )
        .into_response();
    };
    match assets::get(&file) {
        Some((body, content_type)) => static_response(body, content_type),
        None => ApiError::not_found(format!("no asset named {file:?}")).into_response(),
    }
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("no such page or endpoint")
}

/// Refuses a request for a host the application did not allow (DNS rebinding), before
/// anything else reads it.
pub(crate) async fn allowed_host<C: Clock + Clone>(
    State(sh): Sh<C>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    if !sh.allowed_hosts.is_empty() {
        let (parts, body) = request.into_parts();
        if let Err(host) = auth::hosts_allowed(&parts, &sh.allowed_hosts) {
            return ApiError::field(
                "host",
                format!("{:?}", truncate(&host, 64)),
                "one host this dashboard is configured to answer \
                 (DashboardBuilder::allowed_host), named once",
            )
            .into_response();
        }
        return next.run(Request::from_parts(parts, body)).await;
    }
    next.run(request).await
}

// ---------------------------------------------------------------------------------------------
// The session: who the caller is, and a CSRF token.

/// The mount point, from the path of a request for `suffix` under it; `/` when it is not a
/// plain path.
fn mount_point<'a>(path: &'a str, suffix: &str) -> &'a str {
    let prefix = path.strip_suffix(suffix).unwrap_or("/");
    let plain = prefix.starts_with('/')
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~/%".contains(&b));
    if plain { prefix } else { "/" }
}

pub(crate) async fn session<C: Clock + Clone>(
    State(sh): Sh<C>,
    OriginalUri(uri): OriginalUri,
    parts: Parts,
) -> Result<Response, ApiError> {
    let p = who(&sh, &parts)?;
    let token = auth::csrf_cookie(&parts)
        .map(str::to_string)
        .unwrap_or_else(auth::new_csrf_token);
    let body = json!({
        "principal": (!p.is_anonymous()).then(|| p.name().to_string()),
        "anonymous": p.is_anonymous(),
        "permissions": p.permissions().names(),
        "controls": sh.controls_enabled(),
        "csrf": token,
        "actions": Action::ALL.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
    });
    let mut r = json_response(StatusCode::OK, body);
    let cookie = format!(
        "{CSRF_COOKIE}={token}; Path={}; SameSite=Strict; HttpOnly",
        mount_point(uri.path(), "api/session")
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// Listing.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    State,
    Key,
}

struct ListQuery {
    offset: usize,
    limit: usize,
    dependency: Option<String>,
    states: Option<Vec<BreakerState>>,
    q: Option<String>,
    key: Option<Key>,
    source: Option<Source>,
    sort: Sort,
}

const LIST_PARAMS: &str = "one of offset, limit, dependency, state, q, key, source, sort";
const MAX_LIMIT: usize = 1000;

fn parse_state(s: &str) -> Result<BreakerState, ApiError> {
    BreakerState::ALL
        .into_iter()
        .find(|st| st.as_str() == s)
        .ok_or_else(|| {
            ApiError::field(
                "state",
                format!("{s:?}"),
                "a comma-separated list of closed, open, half-open, disabled, metrics-only, forced-open",
            )
        })
}

fn parse_source(s: &str) -> Result<Source, ApiError> {
    match s {
        "registry" => Ok(Source::Registry),
        "manual" => Ok(Source::Manual),
        _ => Err(ApiError::field(
            "source",
            format!("{s:?}"),
            "registry or manual",
        )),
    }
}

fn parse_dependency(field: &str, d: &str) -> Result<String, ApiError> {
    Key::new(d)
        .map(|k| k.dependency().to_string())
        .map_err(|e| ApiError::field(field, e.value(), e.allowed()))
}

impl ListQuery {
    fn parse(pairs: &[(String, String)]) -> Result<Self, ApiError> {
        let mut q = ListQuery {
            offset: 0,
            limit: 100,
            dependency: None,
            states: None,
            q: None,
            key: None,
            source: None,
            sort: Sort::State,
        };
        let mut seen: Vec<&str> = Vec::new();
        for (name, value) in pairs {
            if seen.contains(&name.as_str()) {
                return Err(ApiError::field(
                    name.as_str(),
                    format!("{value:?}"),
                    "one value (the parameter was given twice)",
                ));
            }
            seen.push(name);
            match name.as_str() {
                "offset" => {
                    q.offset = value
                        .parse()
                        .ok()
                        .filter(|n| *n <= 100_000_000)
                        .ok_or_else(|| {
                            ApiError::field("offset", format!("{value:?}"), "in [0, 100000000]")
                        })?;
                }
                "limit" => {
                    q.limit = value
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| {
                            ApiError::field(
                                "limit",
                                format!("{value:?}"),
                                format!("in [1, {MAX_LIMIT}]"),
                            )
                        })?;
                }
                "dependency" => q.dependency = Some(parse_dependency("dependency", value)?),
                "state" => {
                    q.states = Some(
                        value
                            .split(',')
                            .map(parse_state)
                            .collect::<Result<Vec<_>, _>>()?,
                    );
                }
                "q" => {
                    if value.len() > 256 || value.chars().any(char::is_control) {
                        return Err(ApiError::field(
                            "q",
                            format!("a text of {} bytes", value.len()),
                            "at most 256 bytes without control characters",
                        ));
                    }
                    q.q = (!value.is_empty()).then(|| value.to_lowercase());
                }
                "key" => q.key = Some(value.parse::<Key>()?),
                "source" => q.source = Some(parse_source(value)?),
                "sort" => {
                    q.sort = match value.as_str() {
                        "state" => Sort::State,
                        "key" => Sort::Key,
                        _ => {
                            return Err(ApiError::field(
                                "sort",
                                format!("{value:?}"),
                                "state or key",
                            ));
                        }
                    }
                }
                other => {
                    return Err(ApiError::field(
                        "parameter",
                        format!("{other:?}"),
                        LIST_PARAMS,
                    ));
                }
            }
        }
        Ok(q)
    }
}

/// A breaker as the listing sees it before paging: cheap to collect for every key.
struct Row {
    source: Source,
    key: Key,
    state: BreakerState,
    redacted: bool,
    /// For redacted rows, the id they sort by (the key would leak the scope's order).
    id: Option<String>,
}

/// The breaker of any host registered by hand under `key` (a row of source `manual` that no
/// hand-registered in-process breaker has), by its index.
fn fleet_of<C: Clock + Clone>(sh: &Shared<C>, source: Source, key: &Key) -> Option<usize> {
    if source != Source::Manual || sh.manual.iter().any(|m| &m.key == key) {
        return None;
    }
    sh.fleet.iter().position(|f| &f.key == key)
}

/// Keys of one dependency by scope, numbers in numeric order (`shard=2` before `shard=10`).
fn by_scope(a: &Key, b: &Key) -> std::cmp::Ordering {
    match (a.scope(), b.scope()) {
        (Some((ka, va)), Some((kb, vb))) => ka.cmp(&kb).then_with(|| {
            let digits = |v: &str| !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit());
            if digits(va) && digits(vb) {
                let (ta, tb) = (va.trim_start_matches('0'), vb.trim_start_matches('0'));
                ta.len()
                    .cmp(&tb.len())
                    .then_with(|| ta.cmp(tb))
                    .then_with(|| va.cmp(vb))
            } else {
                va.cmp(vb)
            }
        }),
        _ => a.cmp(b),
    }
}

fn rows<C: Clock + Clone>(sh: &Shared<C>, p: &Principal, source: Option<Source>) -> Vec<Row> {
    let mut out = Vec::new();
    let mut push = |source: Source, key: &Key, state: BreakerState| {
        let redacted = sh.redacted(p, key);
        out.push(Row {
            source,
            key: key.clone(),
            state,
            redacted,
            id: redacted.then(|| sh.id(source, key)),
        });
    };
    if source != Some(Source::Registry) {
        for m in &sh.manual {
            push(Source::Manual, &m.key, m.breaker.state());
        }
        for f in &sh.fleet {
            push(Source::Manual, &f.key, f.breaker.state());
        }
    }
    if source != Some(Source::Manual) {
        if let Some(r) = &sh.registry {
            r.for_each(|k, b| push(Source::Registry, k, b.state()));
        }
    }
    out
}

/// What a row shows of its breaker and the override holding it, if it still exists.
fn resolve_row<C: Clock + Clone>(
    sh: &Shared<C>,
    source: Source,
    key: &Key,
) -> Option<view::Resolved> {
    let of = |b: &CircuitBreaker<C>, held| view::Resolved {
        metrics: b.metrics(),
        config: b.config(),
        held,
        reach: tripline::Reach::Process,
    };
    if let Some(i) = fleet_of(sh, source, key) {
        let b = &sh.fleet[i].breaker;
        return Some(view::Resolved {
            metrics: b.metrics(),
            config: b.config(),
            held: Held {
                state: OperatorState::Auto,
                layer: None,
            },
            reach: b.reach(),
        });
    }
    match source {
        Source::Manual => {
            let i = sh.manual.iter().position(|m| &m.key == key)?;
            Some(of(&sh.manual[i].breaker, manual_held(sh, i)))
        }
        Source::Registry => {
            let r = sh.registry.as_ref()?;
            r.peek(key).map(|b| of(&b, registry_held(r, key)))
        }
    }
}

/// The override holding a registry key, and which layer it comes from.
fn registry_held<C: Clock + Clone>(r: &tripline::registry::Registry<C>, key: &Key) -> Held {
    let state = r.operator_for(key);
    let layer = if r.operator_override(&Selector::Key(key.clone())).is_some() {
        Some(Layer::Key)
    } else if r
        .operator_override(&Selector::Dependency(key.dependency().to_string()))
        .is_some()
    {
        Some(Layer::Dependency)
    } else if state != OperatorState::Auto {
        Some(Layer::Configuration)
    } else {
        None
    };
    Held { state, layer }
}

fn manual_held<C: Clock + Clone>(sh: &Shared<C>, i: usize) -> Held {
    let (state, layer) =
        manual::lock(&sh.manual_control).in_force(i, sh.manual[i].key.dependency());
    Held { state, layer }
}

/// The parameters of a query string (`a=1&b=x+y`), decoded; a name or value that does not
/// decode to UTF-8 is refused naming it, with the bytes as sent (a decoder that put U+FFFD in
/// their place would search for, filter by or name something the caller never sent).
fn query_pairs(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    const ALLOWED: &str = "percent-encoded UTF-8 (`+` for a space)";
    let decode = |raw: &str| -> Option<String> {
        let plus = raw.replace('+', " ");
        percent_encoding::percent_decode_str(&plus)
            .decode_utf8()
            .ok()
            .map(std::borrow::Cow::into_owned)
    };
    let mut pairs = Vec::new();
    for piece in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (raw_name, raw_value) = piece.split_once('=').unwrap_or((piece, ""));
        let shown = |raw: &str| format!("{:?}", truncate(raw, 64));
        let Some(name) = decode(raw_name) else {
            return Err(ApiError::field("parameter", shown(raw_name), ALLOWED));
        };
        let Some(value) = decode(raw_value) else {
            return Err(ApiError::field(name, shown(raw_value), ALLOWED));
        };
        pairs.push((name, value));
    }
    Ok(pairs)
}

fn states_json(counts: &[usize; 6]) -> Value {
    let mut m = serde_json::Map::new();
    for s in BreakerState::ALL {
        m.insert(s.as_str().into(), counts[s as usize].into());
    }
    Value::Object(m)
}

pub(crate) async fn list<C: Clock + Clone>(
    State(sh): Sh<C>,
    parts: Parts,
) -> Result<Response, ApiError> {
    let p = require(&sh, &parts, Permissions::READ)?;
    let q = ListQuery::parse(&query_pairs(parts.uri.query())?)?;
    sh.maybe_sweep();
    sh.sample();
    let all = rows(&sh, &p, q.source);

    // The summary covers every breaker (of the source asked for), whatever the filters.
    let mut deps: BTreeMap<&str, [usize; 6]> = BTreeMap::new();
    let mut totals = [0usize; 6];
    for r in &all {
        deps.entry(r.key.dependency()).or_default()[r.state as usize] += 1;
        totals[r.state as usize] += 1;
    }
    let mut overrides = sh
        .registry
        .as_ref()
        .map(|r| {
            r.operator_overrides()
                .into_iter()
                .filter_map(|(sel, state)| match sel {
                    Selector::Dependency(d) => Some((d, state)),
                    Selector::Key(_) => None,
                })
                .collect::<std::collections::BTreeMap<_, _>>()
        })
        .unwrap_or_default();
    {
        // A dependency-wide override of hand-registered breakers shows as the registry's does.
        let control = manual::lock(&sh.manual_control);
        for m in &sh.manual {
            let d = m.key.dependency();
            if let Some(state) = control.dependency(d) {
                overrides.entry(d.to_string()).or_insert(state);
            }
        }
    }
    let (latest, by_dependency) = sh.history.latest();
    let dependencies: Vec<Value> = deps
        .iter()
        .map(|(name, counts)| {
            let figures = by_dependency.get(*name);
            json!({
                "name": name,
                "breakers": counts.iter().sum::<usize>(),
                "states": states_json(counts),
                "override": overrides.get(*name).and_then(|o| view::operator_str(*o)),
                "rates": figures.map(view::rates),
            })
        })
        .collect();

    let mut shown: Vec<&Row> = all
        .iter()
        .filter(|r| {
            q.dependency
                .as_deref()
                .is_none_or(|d| r.key.dependency() == d)
        })
        .filter(|r| q.states.as_ref().is_none_or(|s| s.contains(&r.state)))
        .filter(|r| q.key.as_ref().is_none_or(|k| !r.redacted && &r.key == k))
        .filter(|r| {
            q.q.as_deref().is_none_or(|needle| {
                let hay = if r.redacted {
                    r.key.dependency().to_lowercase()
                } else {
                    r.key.to_string().to_lowercase()
                };
                hay.contains(needle)
            })
        })
        .collect();
    shown.sort_by(|a, b| {
        let rank = |r: &Row| {
            if q.sort == Sort::State {
                severity(r.state)
            } else {
                0
            }
        };
        rank(a)
            .cmp(&rank(b))
            .then_with(|| a.key.dependency().cmp(b.key.dependency()))
            .then_with(|| a.redacted.cmp(&b.redacted))
            .then_with(|| match (&a.id, &b.id) {
                (Some(x), Some(y)) => x.cmp(y),
                _ => by_scope(&a.key, &b.key),
            })
            .then_with(|| a.source.cmp(&b.source))
    });
    let total = shown.len();
    let now = sh.clock.now();
    let breakers: Vec<Value> = shown
        .iter()
        .skip(q.offset)
        .take(q.limit)
        .filter_map(|r| {
            let resolved = resolve_row(&sh, r.source, &r.key)?;
            let id = (r.source, r.key.clone());
            let mut e = view::entry(&sh, &p, r.source, &r.key, &resolved, now);
            e["rates"] = latest.get(&id).map_or(Value::Null, view::rates);
            e["spark"] = view::spark(&sh.history.recent_rates(&id, view::SPARK));
            Some(e)
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        json!({
            "total": total,
            "offset": q.offset,
            "limit": q.limit,
            "breakers": breakers,
            "dependencies": dependencies,
            "states": states_json(&totals),
            "all": all.len(),
        }),
    ))
}

// ---------------------------------------------------------------------------------------------
// One breaker.

fn parse_id(id: &str) -> Result<&str, ApiError> {
    if id.len() == 16 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(id)
    } else {
        Err(ApiError::field(
            "id",
            format!("{:?}", truncate(id, 64)),
            "16 lowercase hexadecimal digits, as the listing gives",
        ))
    }
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// The breaker whose id is `id`: (source, key). One keyed hash per breaker until found, and
/// no text made for any.
fn find_id<C: Clock + Clone>(sh: &Shared<C>, id: &str) -> Option<(Source, Key)> {
    let want = u64::from_str_radix(id, 16).ok()?;
    if let Some(m) = sh
        .manual
        .iter()
        .find(|m| sh.id_number(Source::Manual, &m.key) == want)
    {
        return Some((Source::Manual, m.key.clone()));
    }
    if let Some(f) = sh
        .fleet
        .iter()
        .find(|f| sh.id_number(Source::Manual, &f.key) == want)
    {
        return Some((Source::Manual, f.key.clone()));
    }
    let mut found = None;
    if let Some(r) = &sh.registry {
        r.for_each(|k, _| {
            if found.is_none() && sh.id_number(Source::Registry, k) == want {
                found = Some(k.clone());
            }
        });
    }
    found.map(|k| (Source::Registry, k))
}

/// The reader and the breaker a path's `{id}` names (after a sweep and a due sample).
fn reader_and_breaker<C: Clock + Clone>(
    sh: &Shared<C>,
    parts: &Parts,
    id: Result<Path<String>, PathRejection>,
) -> Result<(Principal, Source, Key), ApiError> {
    let p = require(sh, parts, Permissions::READ)?;
    let Ok(Path(id)) = id else {
        return Err(ApiError::field(
            "id",
            raw_segment(&parts.uri),
            "16 lowercase hexadecimal digits, as the listing gives",
        ));
    };
    let id = parse_id(&id)?;
    sh.maybe_sweep();
    sh.sample();
    let (source, key) = find_id(sh, id).ok_or_else(|| unknown_id(id))?;
    Ok((p, source, key))
}

fn unknown_id(id: &str) -> ApiError {
    ApiError::not_found(format!("no breaker has the id {id}"))
}

pub(crate) async fn detail<C: Clock + Clone>(
    State(sh): Sh<C>,
    parts: Parts,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let (p, source, key) = reader_and_breaker(&sh, &parts, id)?;
    let resolved =
        resolve_row(&sh, source, &key).ok_or_else(|| unknown_id(&sh.id(source, &key)))?;
    let now = sh.clock.now();
    let mut out = view::entry(&sh, &p, source, &key, &resolved, now);
    let (latest, _) = sh.history.latest();
    out["rates"] = latest
        .get(&(source, key.clone()))
        .map_or(Value::Null, view::rates);
    // Its own records and the dependency-wide actions on its dependency, in order.
    let mut records = sh.store.recent(&(source, key.clone()));
    records.extend(sh.store.audits().into_iter().filter(|r| {
        r.breaker.is_none()
            && matches!(&r.kind, crate::store::Kind::Audit(a)
                if matches!(&a.target, Target::Dependency(d) if d == key.dependency()))
    }));
    records.sort_by_key(|r| r.seq);
    out["events"] = records
        .iter()
        .map(|r| view::record(&sh, &p, r, now))
        .collect();
    out["config"] = serde_json::to_value(&resolved.config).unwrap_or(Value::Null);
    Ok(json_response(StatusCode::OK, out))
}

pub(crate) async fn audit<C: Clock + Clone>(
    State(sh): Sh<C>,
    parts: Parts,
) -> Result<Response, ApiError> {
    let p = require(&sh, &parts, Permissions::READ)?;
    let now = sh.clock.now();
    let records: Vec<Value> = sh
        .store
        .audits()
        .iter()
        .map(|r| view::record(&sh, &p, r, now))
        .collect();
    Ok(json_response(StatusCode::OK, json!({ "audit": records })))
}

/// A breaker's last hour: 360 slots of 10 s, oldest first, in columns.
pub(crate) async fn history<C: Clock + Clone>(
    State(sh): Sh<C>,
    parts: Parts,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let (p, source, key) = reader_and_breaker(&sh, &parts, id)?;
    let now = sh.clock.now();
    let (open, points) = sh.history.series(&(source, key.clone())).unwrap_or((
        now / history::SLOT_NANOS,
        vec![Point::NoData; history::SLOTS],
    ));
    let mut out = view::series(&points);
    out["id"] = sh.id(source, &key).into();
    // How long ago the newest slot ended.
    out["newest_age_ms"] = crate::millis(std::time::Duration::from_nanos(
        now.saturating_sub(open.saturating_mul(history::SLOT_NANOS)),
    ))
    .into();
    let mut fields = serde_json::Map::new();
    view::key_fields(&sh, &p, &key, &mut fields);
    for (k, v) in fields {
        out[k] = v;
    }
    Ok(json_response(StatusCode::OK, out))
}

/// The breakers that left Closed in the last hour (and those still out of it), in the order
/// they left.
pub(crate) async fn incidents<C: Clock + Clone>(
    State(sh): Sh<C>,
    parts: Parts,
) -> Result<Response, ApiError> {
    let p = require(&sh, &parts, Permissions::READ)?;
    sh.sample();
    let now = sh.clock.now();
    let list: Vec<Value> = sh
        .history
        .incidents(now)
        .iter()
        .map(|i| view::incident(&sh, &p, i, now))
        .collect();
    Ok(json_response(StatusCode::OK, json!({ "incidents": list })))
}

// ---------------------------------------------------------------------------------------------
// The event stream.

pub(crate) async fn events<C: Clock + Clone>(
    State(sh): Sh<C>,
    parts: Parts,
) -> Result<Response, ApiError> {
    let p = require(&sh, &parts, Permissions::READ)?;
    let address = sh.client_address(&parts);
    let ticket = sh
        .streams
        .admit(&sh.stream_limits, &p, address)
        .map_err(|why| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, why))?;
    let slot = (sh.clone(), ticket);
    let rx = sh.store.subscribe();
    let ready = SseEvent::default()
        .event("ready")
        .data(json!({ "principal": p.name() }).to_string());
    let rest = futures_util::stream::unfold((rx, slot, p), |(mut rx, slot, p)| async move {
        let event = match rx.recv().await {
            Ok(r) => {
                let sh = &slot.0;
                let v = view::record(sh, &p, &r, sh.clock.now());
                let kind = v["kind"].as_str().unwrap_or("event").to_string();
                SseEvent::default()
                    .event(kind)
                    .id(r.seq.to_string())
                    .data(v.to_string())
            }
            Err(RecvError::Lagged(n)) => SseEvent::default().event("lagged").data(n.to_string()),
            Err(RecvError::Closed) => return None,
        };
        Some((Ok::<_, Infallible>(event), (rx, slot, p)))
    });
    let stream = futures_util::stream::once(async move { Ok::<_, Infallible>(ready) }).chain(rest);
    let mut r = Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(r)
}

// ---------------------------------------------------------------------------------------------
// Controls.

enum Aim {
    Key(Key),
    Id(String),
    Dependency(String),
}

const CONTROL_FIELDS: &str = "action, and one of key, id, dependency";

/// Checks that the top-level object of `body` (valid JSON) names each field once; the name
/// given twice otherwise.
fn unique_names(body: &[u8]) -> Result<(), String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Names;
    impl<'de> Visitor<'de> for Names {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Option<String>, A::Error> {
            // Every entry is read (the parser wants the whole object), the first repeat kept.
            let (mut seen, mut twice) = (std::collections::HashSet::new(), None);
            while let Some(name) = m.next_key::<String>()? {
                m.next_value::<IgnoredAny>()?;
                if !seen.insert(name.clone()) && twice.is_none() {
                    twice = Some(name);
                }
            }
            Ok(twice)
        }
    }
    let mut d = serde_json::Deserializer::from_slice(body);
    match d.deserialize_map(Names) {
        Ok(Some(name)) => Err(name),
        Ok(None) => Ok(()),
        // Not an object, or malformed: the caller's own checks name what is wrong.
        Err(_) => Ok(()),
    }
}

fn parse_control(body: &[u8]) -> Result<(Action, Aim), ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::field(
            "body",
            format!("invalid JSON ({e})"),
            format!("a JSON object with {CONTROL_FIELDS}"),
        )
    })?;
    let Some(obj) = v.as_object() else {
        return Err(ApiError::field(
            "body",
            truncate(&v.to_string(), 64),
            format!("a JSON object with {CONTROL_FIELDS}"),
        ));
    };
    // A JSON object keeps the last of two equal names: a field given twice is refused, as a
    // query parameter given twice is, rather than letting the last one act.
    if let Err(name) = unique_names(body) {
        return Err(ApiError::field(
            truncate(&name, 64),
            "given twice",
            "one value (the field was given twice)",
        ));
    }
    for name in obj.keys() {
        if !["action", "key", "id", "dependency"].contains(&name.as_str()) {
            return Err(ApiError::field(
                "field",
                format!("{:?}", truncate(name, 64)),
                format!("one of {CONTROL_FIELDS}"),
            ));
        }
    }
    let text = |name: &str| -> Result<Option<&str>, ApiError> {
        match obj.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(ApiError::field(
                name,
                truncate(&other.to_string(), 64),
                "a string",
            )),
        }
    };
    let action = text("action")?
        .ok_or_else(|| {
            ApiError::field(
                "action",
                "nothing",
                "one of force-open, disable, metrics-only, reset, clear, auto",
            )
        })?
        .parse::<Action>()?;
    let aims: Vec<Aim> = [
        text("key")?
            .map(|k| k.parse::<Key>().map(Aim::Key))
            .transpose()?,
        text("id")?
            .map(|id| parse_id(id).map(|id| Aim::Id(id.to_string())))
            .transpose()?,
        text("dependency")?
            .map(|d| parse_dependency("dependency", d).map(Aim::Dependency))
            .transpose()?,
    ]
    .into_iter()
    .flatten()
    .collect();
    if aims.len() != 1 {
        return Err(ApiError::field(
            "target",
            format!("{} targets", aims.len()),
            "exactly one of key, id, dependency",
        ));
    }
    Ok((action, aims.into_iter().next().expect("one aim")))
}

/// How a message to `p` names `key`: never by a scope `p` may not see.
fn shown_key<C: Clock + Clone>(sh: &Shared<C>, p: &Principal, key: &Key) -> String {
    if sh.redacted(p, key) {
        format!("a breaker of {} (sensitive scope)", key.dependency())
    } else {
        key.to_string()
    }
}

/// A reset refused because overrides hold `held` of `what`'s breakers: which layer holds
/// them, and what lifts each.
fn conflict(held: &[Held], what: &str) -> ApiError {
    let configured = held
        .iter()
        .filter(|h| h.layer == Some(Layer::Configuration))
        .count();
    let run_time = held.len() - configured;
    let mut lift = Vec::new();
    if run_time > 0 {
        lift.push(if configured > 0 {
            format!("{run_time} set at run time: clear it first")
        } else {
            "clear it first".to_string()
        });
    }
    if configured > 0 {
        lift.push(format!(
            "{}{CONFIGURED}",
            if run_time > 0 {
                format!("{configured} from the registry's configuration: ")
            } else {
                String::new()
            }
        ));
    }
    ApiError::new(
        StatusCode::CONFLICT,
        format!(
            "an override is in force for {} breaker(s) of {what}: {} (a reset would leave the \
             breaker Closed while the override says otherwise)",
            held.len(),
            lift.join("; ")
        ),
    )
}

/// What lifts an override from the registry's configuration.
const CONFIGURED: &str = "it comes from the registry's configuration (its [operator] section \
    names the key or its dependency), which clear does not change: a reload without that \
    entry lifts it, or the action auto lets the rules decide at run time until cleared";

pub(crate) async fn control<C: Clock + Clone>(
    State(sh): Sh<C>,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    auth::same_origin(&parts, &sh.allowed_origins).map_err(ApiError::forbidden)?;
    let p = require(&sh, &parts, Permissions::CONTROL)?;
    if auth::from_browser(&parts) {
        auth::double_submit(&parts).map_err(ApiError::forbidden)?;
    }
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let is_json = content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Type must be application/json, got {:?}",
                truncate(content_type, 64)
            ),
        ));
    }
    let body = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a control's body must be at most {MAX_BODY} bytes"),
        )
    })?;
    let (action, aim) = parse_control(&body)?;

    // An id names one row: the registry's breaker or the hand-registered one of its key.
    let (target, only) = match aim {
        Aim::Key(k) => {
            // A sensitive key the caller may not see is not found, rather than confirmed.
            if sh.redacted(&p, &k) {
                return Err(ApiError::not_found("no breaker has this key"));
            }
            (Target::Key(k), None)
        }
        Aim::Id(id) => {
            let (source, k) = find_id(&sh, &id)
                .ok_or_else(|| ApiError::not_found(format!("no breaker has the id {id}")))?;
            (Target::Key(k), Some(source))
        }
        Aim::Dependency(d) => (Target::Dependency(d), None),
    };
    // Breakers of other hosts registered by hand (fleet-wide ones): their own operator moves.
    let fleet: Vec<usize> = sh
        .fleet
        .iter()
        .enumerate()
        .filter(|(_, f)| match &target {
            Target::Key(k) => {
                &f.key == k
                    && only != Some(Source::Registry)
                    && fleet_of(&sh, Source::Manual, k).is_some()
            }
            Target::Dependency(d) => f.key.dependency() == d,
        })
        .map(|(i, _)| i)
        .collect();
    let local = match &target {
        // The id named the row of a breaker of another host.
        Target::Key(_) if !fleet.is_empty() && only == Some(Source::Manual) => None,
        Target::Key(k) => Some(act_on_key(&sh, &p, action, k, only)),
        Target::Dependency(d) => Some(act_on_dependency(&sh, action, d)),
    };
    let (changed, in_force, slots) = match local {
        // Nothing but fleet breakers there: they alone answer.
        Some(Err(e)) if e.status == StatusCode::NOT_FOUND && !fleet.is_empty() => {
            act_on_fleet(&sh, action, &fleet).await?
        }
        Some(Err(e)) => return Err(e),
        Some(Ok((changed, in_force, mut slots))) => {
            let (more, _, fleet_slots) = act_on_fleet(&sh, action, &fleet).await?;
            slots.extend(fleet_slots);
            (changed + more, in_force, slots)
        }
        None => act_on_fleet(&sh, action, &fleet).await?,
    };
    let record = AuditRecord {
        principal: p.name().to_string(),
        action,
        target: target.clone(),
        changed,
        in_force,
        source: only,
        at: std::time::Duration::from_nanos(sh.clock.now()),
    };
    sh.store.audit(&slots, record.clone());
    if let Some(hook) = &sh.on_audit {
        hook(&record);
    }
    let shown = match &target {
        Target::Key(k) if sh.redacted(&p, k) => {
            json!({ "dependency": k.dependency(), "key": null })
        }
        Target::Key(k) => json!({ "dependency": k.dependency(), "key": k.to_string() }),
        Target::Dependency(d) => json!({ "dependency": d }),
    };
    Ok(json_response(
        StatusCode::OK,
        json!({
            "action": action.as_str(),
            "target": shown,
            "changed": changed,
            "in_force": view::operator_str(in_force),
            "principal": p.name(),
        }),
    ))
}

type Acted = (usize, OperatorState, Vec<(Source, Key)>);

/// Applies `action` to the breakers of other hosts registered by hand, `fleet` (by index):
/// each one's own operator move, in its store (Redis, for a shared breaker), so a kill switch
/// holds on every replica. `reset`, `clear` and `auto` close it. One the store did not answer
/// is a 503 naming the store's reason (the others already moved stay moved, and say so in the
/// error); a move the breaker refuses is a 409.
async fn act_on_fleet<C: Clock + Clone>(
    sh: &Shared<C>,
    action: Action,
    fleet: &[usize],
) -> Result<Acted, ApiError> {
    let (to, in_force) = match action {
        Action::ForceOpen => (BreakerState::ForcedOpen, OperatorState::ForcedOpen),
        Action::Disable => (BreakerState::Disabled, OperatorState::Disabled),
        Action::MetricsOnly => (BreakerState::MetricsOnly, OperatorState::MetricsOnly),
        Action::Reset | Action::Clear | Action::Auto => (BreakerState::Closed, OperatorState::Auto),
    };
    let mut changed = 0;
    let mut slots = Vec::new();
    for (done, &i) in fleet.iter().enumerate() {
        let f = &sh.fleet[i];
        let before = f.breaker.state();
        match f.breaker.transition_to(to).await {
            Ok(()) => {}
            Err(tripline::OperatorError::Refused(e)) => {
                return Err(ApiError::new(StatusCode::CONFLICT, e.to_string()));
            }
            Err(e) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("{e} (breakers moved before this one: {done})"),
                ));
            }
        }
        if before != to {
            changed += 1;
        }
        slots.push((Source::Manual, f.key.clone()));
    }
    Ok((changed, in_force, slots))
}

/// The hand-registered breakers an action reaches, by index.
type ManualAim = Vec<usize>;

/// Applies `action` to the registry's `selector` and to the hand-registered breakers `manual`
/// (by index); how many breakers changed. `held` are the overrides holding the breakers of
/// the selection (a reset is refused while any holds one). No lock of the dashboard is held
/// while a breaker or the registry runs its listeners.
fn apply<C: Clock + Clone>(
    sh: &Shared<C>,
    action: Action,
    registry: Option<&tripline::registry::Registry<C>>,
    selector: &Selector,
    manual: &ManualAim,
    held: &[Held],
    what: &str,
) -> Result<usize, ApiError> {
    let mut changed = 0;
    match action {
        Action::Reset => {
            if !held.is_empty() {
                return Err(conflict(held, what));
            }
            // `changed` counts the breakers whose state the reset changed (a Closed breaker
            // only starts a fresh window).
            if let Some(r) = registry {
                let mut open = 0;
                r.for_each(|k, b| {
                    if selector.selects(k) && b.state() != tripline::State::Closed {
                        open += 1;
                    }
                });
                r.reset(selector);
                changed += open;
            }
            for &i in manual {
                let m = &sh.manual[i];
                if m.breaker.state() != tripline::State::Closed {
                    changed += 1;
                }
                m.breaker.reset();
                // An override set while this reset ran holds again.
                manual::reconcile(&sh.manual_control, i, m.key.dependency(), &m.breaker);
            }
        }
        Action::Clear => {
            if let Some(r) = registry {
                changed += r.clear_operator(selector);
                // A dependency's clear lifts every run-time override within it: the
                // dependency-wide one and those of its keys.
                if let Selector::Dependency(d) = selector {
                    for (sel, _) in r.operator_overrides() {
                        if let Selector::Key(k) = &sel {
                            if k.dependency() == d {
                                changed += r.clear_operator(&sel);
                            }
                        }
                    }
                }
            }
            set_manual(sh, selector, manual, None);
            for &i in manual {
                let m = &sh.manual[i];
                changed += usize::from(manual::reconcile(
                    &sh.manual_control,
                    i,
                    m.key.dependency(),
                    &m.breaker,
                ));
            }
        }
        _ => {
            let state = action
                .operator_state()
                .expect("the other actions set a state");
            if let Some(r) = registry {
                changed += r.set_operator(selector, state);
            }
            set_manual(sh, selector, manual, Some(state));
            for &i in manual {
                let m = &sh.manual[i];
                changed += usize::from(manual::reconcile(
                    &sh.manual_control,
                    i,
                    m.key.dependency(),
                    &m.breaker,
                ));
            }
        }
    }
    Ok(changed)
}

/// Writes the desired override of the hand-registered breakers `manual` (`None` clears).
/// A dependency with no hand-registered breaker gets no override of its own here: the
/// registry's is the only one, and what it says is in force is what is.
fn set_manual<C: Clock + Clone>(
    sh: &Shared<C>,
    selector: &Selector,
    manual: &ManualAim,
    state: Option<OperatorState>,
) {
    if manual.is_empty() {
        return;
    }
    let mut control = manual::lock(&sh.manual_control);
    match selector {
        Selector::Key(_) => {
            for &i in manual {
                control.set_key(i, state);
            }
        }
        Selector::Dependency(d) => {
            control.set_dependency(d, state);
            if state.is_none() {
                // A dependency's clear lifts its keys' overrides too.
                for &i in manual {
                    control.set_key(i, None);
                }
            }
        }
    }
}

fn act_on_key<C: Clock + Clone>(
    sh: &Shared<C>,
    p: &Principal,
    action: Action,
    key: &Key,
    only: Option<Source>,
) -> Result<Acted, ApiError> {
    let registry = sh
        .registry
        .as_ref()
        .filter(|_| only != Some(Source::Manual))
        .filter(|r| r.peek(key).is_some());
    let manual: ManualAim = sh
        .manual
        .iter()
        .enumerate()
        .filter(|(_, m)| only != Some(Source::Registry) && &m.key == key)
        .map(|(i, _)| i)
        .collect();
    let what = shown_key(sh, p, key);
    if registry.is_none() && manual.is_empty() {
        return Err(ApiError::not_found(format!(
            "no breaker has the key {what}"
        )));
    }
    let mut held: Vec<Held> = Vec::new();
    if let Some(r) = registry {
        held.push(registry_held(r, key));
    }
    held.extend(manual.iter().map(|&i| manual_held(sh, i)));
    if action == Action::Clear {
        // Nothing run-time to clear while another layer holds the breaker: say which, and
        // what lifts it, rather than answer that nothing changed.
        let clearable = registry
            .is_some_and(|r| r.operator_override(&Selector::Key(key.clone())).is_some())
            || manual
                .iter()
                .any(|&i| manual::lock(&sh.manual_control).has_key(i));
        if !clearable {
            if let Some(h) = held.iter().find(|h| h.layer == Some(Layer::Configuration)) {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    format!(
                        "no run-time override of {what} to clear; the {} holds it {}: \
                         {CONFIGURED}",
                        Layer::Configuration.as_str(),
                        view::operator_str(h.state).unwrap_or("auto"),
                    ),
                ));
            }
        }
    }
    held.retain(|h| h.state != OperatorState::Auto);
    let changed = apply(
        sh,
        action,
        registry.map(|r| &**r),
        &Selector::Key(key.clone()),
        &manual,
        &held,
        &what,
    )?;
    let in_force = match (registry, manual.first()) {
        (Some(r), _) => r.operator_for(key),
        (None, Some(&i)) => manual_held(sh, i).state,
        (None, None) => OperatorState::Auto,
    };
    let mut slots: Vec<(Source, Key)> = Vec::new();
    if registry.is_some() {
        slots.push((Source::Registry, key.clone()));
    }
    if !manual.is_empty() {
        slots.push((Source::Manual, key.clone()));
    }
    Ok((changed, in_force, slots))
}

fn act_on_dependency<C: Clock + Clone>(
    sh: &Shared<C>,
    action: Action,
    dependency: &str,
) -> Result<Acted, ApiError> {
    let manual: ManualAim = sh
        .manual
        .iter()
        .enumerate()
        .filter(|(_, m)| m.key.dependency() == dependency)
        .map(|(i, _)| i)
        .collect();
    let mut in_registry = 0;
    let mut held = Vec::new();
    if let Some(r) = &sh.registry {
        let mut keys = Vec::new();
        r.for_each(|k, _| {
            if k.dependency() == dependency {
                keys.push(k.clone());
            }
        });
        in_registry = keys.len();
        held.extend(
            keys.iter()
                .map(|k| registry_held(r, k))
                .filter(|h| h.state != OperatorState::Auto),
        );
    }
    held.extend(
        manual
            .iter()
            .map(|&i| manual_held(sh, i))
            .filter(|h| h.state != OperatorState::Auto),
    );
    let selector = Selector::Dependency(dependency.to_string());
    let overridden = sh
        .registry
        .as_ref()
        .is_some_and(|r| r.operator_override(&selector).is_some())
        || manual::lock(&sh.manual_control)
            .dependency(dependency)
            .is_some();
    // Clearing an override whose breakers are all gone is allowed: it removes state.
    let exists = in_registry > 0 || !manual.is_empty() || (action == Action::Clear && overridden);
    if !exists {
        return Err(ApiError::not_found(format!(
            "no breaker belongs to the dependency {dependency}"
        )));
    }
    if action == Action::Clear {
        let run_time = overridden
            || sh.registry.as_ref().is_some_and(|r| {
                r.operator_overrides()
                    .iter()
                    .any(|(s, _)| matches!(s, Selector::Key(k) if k.dependency() == dependency))
            })
            || manual
                .iter()
                .any(|&i| manual::lock(&sh.manual_control).has_key(i));
        let configured = held
            .iter()
            .filter(|h| h.layer == Some(Layer::Configuration))
            .count();
        if !run_time && configured > 0 {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!(
                    "no run-time override in {dependency} to clear; the registry \
                     configuration holds {configured} breaker(s) of it: {CONFIGURED}"
                ),
            ));
        }
    }
    let registry = sh.registry.as_deref();
    let changed = apply(sh, action, registry, &selector, &manual, &held, dependency)?;
    let in_force = registry
        .and_then(|r| r.operator_override(&selector))
        .or_else(|| manual::lock(&sh.manual_control).dependency(dependency))
        .unwrap_or(OperatorState::Auto);
    Ok((changed, in_force, Vec::new()))
}

#[cfg(test)]
mod unique_names_tests {
    #[test]
    fn a_name_given_twice_is_found() {
        assert_eq!(
            super::unique_names(br#"{"action": "clear", "action": "force-open", "key": "p"}"#),
            Err("action".to_string())
        );
        assert_eq!(
            super::unique_names(br#"{"action": "clear", "key": "p"}"#),
            Ok(())
        );
        assert_eq!(super::unique_names(b"[1, 2]"), Ok(()));
    }
}
