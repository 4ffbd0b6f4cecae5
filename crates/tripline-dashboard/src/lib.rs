//! # tripline-dashboard
//!
//! An operator's page for tripline's circuit breakers, served by the application itself:
//! the breakers of a [`Registry`] (and any registered by hand) as a live grid, each one's
//! transitions as a timeline, and the operator controls (force open, disable, metrics-only,
//! reset, clear an override) per key and per dependency, guarded so that only someone the
//! application says may control can press them. Every transition is visible as it happens,
//! and so is who pressed which button.
//!
//! The page is static HTML, CSS and JavaScript compiled into the binary: no build step, no
//! CDN, nothing fetched from anywhere but the application. It reads a JSON API and follows a
//! Server-Sent Events stream, both under the same router:
//!
//! | method and path (under the mount point) | what | permission |
//! |---|---|---|
//! | `GET /index.html` (and `GET /`, which redirects there when mounted) | the page | none |
//! | `GET /api/session` | who the caller is, what they may do, a CSRF token | none |
//! | `GET /api/breakers` | the breakers, filtered and paged, with a summary per dependency | read |
//! | `GET /api/breakers/{id}` | one breaker: figures, configuration, recent events | read |
//! | `GET /api/audit` | recent operator actions | read |
//! | `GET /api/events` | the event stream (`transition`, `would-trip`, `reconfigured`, `audit`, `lagged`) | read |
//! | `POST /api/control` | an operator action | control |
//!
//! ```
//! use std::sync::Arc;
//! use axum::Router;
//! use tripline::registry::{Registry, RegistryConfig};
//! use tripline_dashboard::{Dashboard, Permissions};
//!
//! let registry = Arc::new(Registry::new(RegistryConfig::default())?);
//! let dashboard = Dashboard::builder()
//!     .registry(registry.clone())
//!     .bearer_token("a-long-random-operator-token", "on-call", Permissions::ALL)
//!     .bearer_token("a-long-random-readonly-token", "viewer", Permissions::READ)
//!     .build()?;
//! let app: Router = Router::new().nest("/ops", dashboard.router());
//! # drop(app);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Security
//! * **Reading and controlling are separate permissions** ([`Permissions`]): `READ`,
//!   `SENSITIVE` (see scopes the application marks sensitive) and `CONTROL`. Callers without
//!   credentials get the anonymous permissions ([`DashboardBuilder::anonymous`], `READ` unless
//!   set), which can never include `CONTROL`: the controls are off until the application
//!   configures a check, bearer tokens ([`DashboardBuilder::bearer_token`], compared in
//!   constant time) or its own hook ([`DashboardBuilder::authenticate`]).
//! * **Refusals**: no or wrong credentials where they are needed is 401 (with
//!   `WWW-Authenticate: Bearer`), credentials without the permission is 403.
//! * **Cross-site requests**: controls are POSTs with a JSON body (a form cannot send one).
//!   A request that a browser marks as coming from another site (`Sec-Fetch-Site` other than
//!   `same-origin`, or an `Origin` that is not the request's host nor one the application
//!   allowed with [`DashboardBuilder::allowed_origin`]) is refused with 403, and a request
//!   from a browser must also carry the double-submit token: the `x-tripline-csrf` header
//!   equal to the `tripline_csrf` cookie (`SameSite=Strict`, `HttpOnly`), which
//!   `GET api/session` issues. Callers that are not browsers (no `Origin`, no
//!   `Sec-Fetch-Site`, no cookie) need only their credentials.
//! * **Sensitive scopes**: for a key the application marks sensitive
//!   ([`DashboardBuilder::sensitive`]), a reader without `SENSITIVE` sees the dependency and
//!   the figures but nothing of the scope: not its kind, not its value, not its place in the
//!   sort order (such rows are ordered by their opaque id), and a search or a control by key
//!   does not find it. Ids are keyed hashes that reveal nothing of the key.
//! * **No state from requests**: reads never create a breaker (an unknown id or key is a
//!   404; lookups use [`Registry::peek`], never [`Registry::get`]); a control needs an
//!   existing key or dependency; parameters and bodies are checked (sizes, names, values)
//!   and a refusal names the field, the value and what is allowed; event streams are capped
//!   ([`DashboardBuilder::max_streams`]).
//! * The page is served with a strict Content-Security-Policy (scripts, styles and requests
//!   only from the application), `X-Frame-Options: DENY` (no clickjacking of the kill
//!   switch), `nosniff` and `no-referrer`; it writes every value with `textContent`.
//!
//! # Recent events
//! A listener on the registry keeps each breaker's recent transitions, would-trip reports
//! and reconfigurations, and the dashboard adds an audit record for each operator action
//! (naming the principal). At most [`DashboardBuilder::recent_events`]' `per_key` records
//! are kept for one key and `total` in all, oldest first out; records of a key the registry
//! dropped go at the next sweep (at most once a second, on a request, or
//! [`Dashboard::sweep`]). Subscribing the listener gives each breaker the part transitions
//! need (about 380 bytes, see the registry's docs) if it did not have it yet.
//!
//! Times: event times are readings of the breakers' clock, and the dashboard's clock
//! ([`DashboardBuilder::new`]) must be the same clock, so that "how long ago" is right;
//! records also carry the wall-clock time they were made, for people.

#![forbid(unsafe_code)]

mod api;
mod assets;
mod auth;
mod error;
mod store;
mod view;

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use tripline::registry::{Key, OperatorState, Registry};
use tripline::{CircuitBreaker, Clock, ConfigError, MonotonicClock};

pub use auth::{Authenticate, Permissions, Principal, Unauthenticated};
pub use store::{Action, AuditRecord, Source, Target};

use auth::BearerTokens;
use store::{ManualListener, RegistryListener, Store};

/// Largest control body accepted, in bytes.
const MAX_BODY: usize = 16 * 1024;

/// The dashboard: build it once, then mount [`router`](Self::router) (axum) or
/// [`service`](Self::service) (any tower-based server). Cloning is cheap and clones share
/// everything.
pub struct Dashboard<C: Clock + Clone = MonotonicClock> {
    shared: Arc<Shared<C>>,
}

impl<C: Clock + Clone> Clone for Dashboard<C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<C: Clock + Clone> std::fmt::Debug for Dashboard<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("registry", &self.shared.registry.is_some())
            .field("manual", &self.shared.manual.len())
            .field("controls", &self.shared.controls_enabled())
            .finish_non_exhaustive()
    }
}

/// A breaker registered by hand.
pub(crate) struct Manual<C: Clock> {
    pub(crate) key: Key,
    pub(crate) breaker: CircuitBreaker<C>,
    /// The override an operator set through the dashboard.
    pub(crate) operator: Mutex<OperatorState>,
}

type SensitiveFn = Box<dyn Fn(&Key) -> bool + Send + Sync>;
type AuditFn = Box<dyn Fn(&AuditRecord) + Send + Sync>;

/// What the handlers share.
pub(crate) struct Shared<C: Clock + Clone> {
    pub(crate) registry: Option<Arc<Registry<C>>>,
    pub(crate) manual: Vec<Manual<C>>,
    pub(crate) auth: Vec<Box<dyn Authenticate>>,
    pub(crate) anonymous: Permissions,
    pub(crate) sensitive: Option<SensitiveFn>,
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) store: Arc<Store>,
    pub(crate) clock: C,
    ids: RandomState,
    pub(crate) on_audit: Option<AuditFn>,
    pub(crate) streams: AtomicUsize,
    pub(crate) max_streams: usize,
    last_sweep: AtomicU64,
}

/// How often requests trigger a sweep of the records of keys the registry dropped.
const SWEEP_EVERY: u64 = 1_000_000_000;

impl<C: Clock + Clone> Shared<C> {
    pub(crate) fn controls_enabled(&self) -> bool {
        !self.auth.is_empty()
    }

    /// The opaque id of a breaker: a keyed hash of its source and key.
    pub(crate) fn id(&self, source: Source, key: &Key) -> String {
        format!("{:016x}", self.ids.hash_one((source, key)))
    }

    /// Whether `key`'s scope is hidden from `principal`.
    pub(crate) fn redacted(&self, principal: &Principal, key: &Key) -> bool {
        key.scope().is_some()
            && !principal.may(Permissions::SENSITIVE)
            && self.sensitive.as_ref().is_some_and(|f| f(key))
    }

    pub(crate) fn maybe_sweep(&self) {
        let now = self.clock.now();
        let last = self.last_sweep.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= SWEEP_EVERY
            && self
                .last_sweep
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.sweep();
        }
    }

    fn sweep(&self) -> usize {
        let Some(registry) = &self.registry else {
            return 0;
        };
        self.store
            .registry_keys()
            .into_iter()
            .filter(|k| registry.peek(k).is_none())
            .filter(|k| self.store.forget(&(Source::Registry, k.clone())) > 0)
            .count()
    }
}

impl Dashboard<MonotonicClock> {
    /// A builder on the production clock (the clock a [`Registry::new`] reads).
    pub fn builder() -> DashboardBuilder<MonotonicClock> {
        DashboardBuilder::new(MonotonicClock::new())
    }
}

impl<C: Clock + Clone> Dashboard<C> {
    /// The router, to mount under a path of the application's choosing
    /// (`Router::new().nest("/ops", dashboard.router())`). It serves the page at
    /// `/index.html`, and at `/` when that path ends with a slash; a request for the mount
    /// point itself (`/ops`) is redirected to `/ops/index.html`, so the page's relative links
    /// resolve under the mount point.
    ///
    /// ```
    /// use axum::Router;
    /// use axum::routing::get;
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder().build()?;
    /// let app: Router = Router::new()
    ///     .route("/health", get(|| async { "ok" }))
    ///     .nest("/ops", dashboard.router());
    /// # drop(app);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn router<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        Router::new()
            .route("/", get(api::index))
            .route("/index.html", get(api::page))
            .route("/assets/{file}", get(api::asset))
            .route("/api/session", get(api::session::<C>))
            .route("/api/breakers", get(api::list::<C>))
            .route("/api/breakers/{id}", get(api::detail::<C>))
            .route("/api/audit", get(api::audit::<C>))
            .route("/api/events", get(api::events::<C>))
            .route("/api/control", post(api::control::<C>))
            .fallback(api::not_found)
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .with_state(self.shared.clone())
    }

    /// The router as a tower `Service` for servers other than axum's (hyper, or a tower
    /// stack): requests with any body type axum accepts.
    ///
    /// ```
    /// use axum::http::Request;
    /// use tower::ServiceExt;
    /// use tripline_dashboard::Dashboard;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dashboard = Dashboard::builder().build()?;
    /// let request = Request::get("/api/session").body(String::new())?;
    /// let response = dashboard.service::<String>().oneshot(request).await?;
    /// assert_eq!(response.status(), 200);
    /// # Ok(())
    /// # }
    /// ```
    pub fn service<B>(&self) -> axum::routing::RouterIntoService<B>
    where
        B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        self.router::<()>().into_service()
    }

    /// Drops the recent events of keys the registry no longer holds; returns how many keys'
    /// records went. Requests do this at most once a second of the dashboard's clock.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tripline::registry::{Registry, RegistryConfig};
    /// use tripline_dashboard::Dashboard;
    ///
    /// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
    /// let dashboard = Dashboard::builder().registry(registry.clone()).build()?;
    /// registry.get(&"catalog/shard=1".parse()?)?.force_open();
    /// assert_eq!(dashboard.sweep(), 0, "the registry still holds the key");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sweep(&self) -> usize {
        self.shared.sweep()
    }
}

/// Builds a [`Dashboard`].
pub struct DashboardBuilder<C: Clock + Clone = MonotonicClock> {
    clock: C,
    registry: Option<Arc<Registry<C>>>,
    manual: Vec<(Key, CircuitBreaker<C>)>,
    tokens: Vec<(String, String, Permissions)>,
    hooks: Vec<Box<dyn Authenticate>>,
    anonymous: Permissions,
    sensitive: Option<SensitiveFn>,
    allowed_origins: Vec<String>,
    per_key: usize,
    total: usize,
    max_streams: usize,
    on_audit: Option<AuditFn>,
}

impl<C: Clock + Clone> std::fmt::Debug for DashboardBuilder<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DashboardBuilder")
            .field("registry", &self.registry.is_some())
            .field("manual", &self.manual.len())
            .field("tokens", &self.tokens.len())
            .field("hooks", &self.hooks.len())
            .field("anonymous", &self.anonymous)
            .finish_non_exhaustive()
    }
}

impl<C: Clock + Clone> DashboardBuilder<C> {
    /// A builder whose dashboard reads `clock`, which must be the clock its breakers read
    /// (ages of events are differences of its readings).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tripline::ManualClock;
    /// use tripline::registry::{Registry, RegistryConfig};
    /// use tripline_dashboard::DashboardBuilder;
    ///
    /// let clock = ManualClock::new();
    /// let registry = Arc::new(Registry::with_clock(RegistryConfig::default(), clock.clone())?);
    /// let dashboard = DashboardBuilder::new(clock).registry(registry).build()?;
    /// # drop(dashboard);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(clock: C) -> Self {
        Self {
            clock,
            registry: None,
            manual: Vec::new(),
            tokens: Vec::new(),
            hooks: Vec::new(),
            anonymous: Permissions::READ,
            sensitive: None,
            allowed_origins: Vec::new(),
            per_key: 50,
            total: 20_000,
            max_streams: 64,
            on_audit: None,
        }
    }

    /// Shows every breaker of `registry` (existing and future) and steers them through its
    /// operator overrides.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tripline::registry::{Registry, RegistryConfig};
    /// use tripline_dashboard::Dashboard;
    ///
    /// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
    /// let dashboard = Dashboard::builder().registry(registry).build()?;
    /// # drop(dashboard);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn registry(mut self, registry: Arc<Registry<C>>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Shows a breaker that lives outside any registry, under `key` (its dependency and
    /// scope for filtering and grouping). Controls act on it directly.
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker};
    /// use tripline_dashboard::Dashboard;
    ///
    /// let prices = CircuitBreaker::new("prices", BreakerConfig::default());
    /// let dashboard = Dashboard::builder().breaker("prices".parse()?, prices).build()?;
    /// # drop(dashboard);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn breaker(mut self, key: Key, breaker: CircuitBreaker<C>) -> Self {
        self.manual.push((key, breaker));
        self
    }

    /// Accepts `Authorization: Bearer <token>` as `principal` with `permissions`. Tokens are
    /// 16 to 256 printable ASCII characters; give each principal its own. Can be repeated
    /// (an operator token and a read-only one, say).
    ///
    /// ```
    /// use tripline_dashboard::{Dashboard, Permissions};
    ///
    /// let dashboard = Dashboard::builder()
    ///     .bearer_token("a-long-random-operator-token", "on-call", Permissions::ALL)
    ///     .bearer_token("a-long-random-readonly-token", "viewer", Permissions::READ)
    ///     .build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn bearer_token(
        mut self,
        token: impl Into<String>,
        principal: &str,
        permissions: Permissions,
    ) -> Self {
        self.tokens
            .push((token.into(), principal.to_string(), permissions));
        self
    }

    /// The application's own check (see [`Authenticate`]). Checks run in the order given,
    /// hooks before bearer tokens; the first that names a principal or refuses decides.
    ///
    /// ```
    /// use axum::http::request::Parts;
    /// use tripline_dashboard::{Dashboard, Permissions, Principal, Unauthenticated};
    ///
    /// // A header set by the application's own single-sign-on proxy.
    /// let dashboard = Dashboard::builder()
    ///     .authenticate(|parts: &Parts| -> Result<Option<Principal>, Unauthenticated> {
    ///         Ok(parts
    ///             .headers
    ///             .get("x-verified-user")
    ///             .and_then(|v| v.to_str().ok())
    ///             .map(|user| Principal::new(user, Permissions::READ | Permissions::CONTROL)))
    ///     })
    ///     .build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn authenticate(mut self, hook: impl Authenticate) -> Self {
        self.hooks.push(Box::new(hook));
        self
    }

    /// What a caller without credentials may do: `READ` by default, [`Permissions::NONE`] to
    /// require credentials for reading too. Never `CONTROL`.
    ///
    /// ```
    /// use tripline_dashboard::{Dashboard, Permissions};
    ///
    /// let dashboard = Dashboard::builder()
    ///     .anonymous(Permissions::NONE)
    ///     .bearer_token("a-long-random-readonly-token", "viewer", Permissions::READ)
    ///     .build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn anonymous(mut self, permissions: Permissions) -> Self {
        self.anonymous = permissions;
        self
    }

    /// Marks keys whose scope is sensitive (a tenant's name, say): readers without
    /// [`Permissions::SENSITIVE`] see nothing of it.
    ///
    /// ```
    /// use tripline::registry::ScopeKind;
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder()
    ///     .sensitive(|key| matches!(key.scope(), Some((ScopeKind::Tenant, _))))
    ///     .build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn sensitive(
        mut self,
        is_sensitive: impl Fn(&Key) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.sensitive = Some(Box::new(is_sensitive));
        self
    }

    /// An origin (`https://ops.example.com`) whose pages may send controls although it is not
    /// the request's `Host`: for a dashboard behind a proxy that rewrites the host.
    ///
    /// ```
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder().allowed_origin("https://ops.example.com").build()?;
    /// # drop(dashboard);
    /// assert!(Dashboard::builder().allowed_origin("ops.example.com").build().is_err());
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn allowed_origin(mut self, origin: &str) -> Self {
        self.allowed_origins.push(origin.to_string());
        self
    }

    /// Keeps at most `per_key` recent records for one key (default 50) and `total` in all
    /// (default 20 000).
    ///
    /// ```
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder().recent_events(20, 5_000).build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn recent_events(mut self, per_key: usize, total: usize) -> Self {
        self.per_key = per_key;
        self.total = total;
        self
    }

    /// At most this many event streams open at once (default 64); more are refused with 503.
    ///
    /// ```
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder().max_streams(8).build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn max_streams(mut self, n: usize) -> Self {
        self.max_streams = n;
        self
    }

    /// Called with every operator action, after it took effect (to log it in the
    /// application's own audit trail, say). Runs on the request's task: keep it quick.
    ///
    /// ```
    /// use tripline_dashboard::{Dashboard, Target};
    ///
    /// let dashboard = Dashboard::builder()
    ///     .on_audit(|a| {
    ///         let target = match &a.target {
    ///             Target::Key(k) => k.to_string(),
    ///             Target::Dependency(d) => format!("every key of {d}"),
    ///             _ => String::from("?"),
    ///         };
    ///         eprintln!("{} did {} on {target}", a.principal, a.action.as_str());
    ///     })
    ///     .build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn on_audit(mut self, f: impl Fn(&AuditRecord) + Send + Sync + 'static) -> Self {
        self.on_audit = Some(Box::new(f));
        self
    }

    /// Checks the settings and subscribes the dashboard's listener to the registry and the
    /// hand-registered breakers.
    ///
    /// ```
    /// use tripline_dashboard::{Dashboard, Permissions};
    ///
    /// let err = Dashboard::builder().anonymous(Permissions::ALL).build().unwrap_err();
    /// assert_eq!(err.field(), "anonymous");
    /// let err = Dashboard::builder().bearer_token("short", "op", Permissions::ALL).build().unwrap_err();
    /// assert_eq!(err.field(), "bearer_token");
    /// ```
    pub fn build(self) -> Result<Dashboard<C>, ConfigError> {
        if self.anonymous.contains(Permissions::CONTROL) {
            return Err(ConfigError::new(
                "anonymous",
                format!("{:?}", self.anonymous),
                "permissions without CONTROL (controls need an authentication check)",
            ));
        }
        if !(1..=10_000).contains(&self.per_key) {
            return Err(ConfigError::new(
                "recent_events.per_key",
                self.per_key,
                "in [1, 10000]",
            ));
        }
        if self.total < self.per_key || self.total > 10_000_000 {
            return Err(ConfigError::new(
                "recent_events.total",
                self.total,
                format!("in [per_key = {}, 10000000]", self.per_key),
            ));
        }
        if !(1..=100_000).contains(&self.max_streams) {
            return Err(ConfigError::new(
                "max_streams",
                self.max_streams,
                "in [1, 100000]",
            ));
        }
        for origin in &self.allowed_origins {
            let rest = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            let ok = rest.is_some_and(|r| {
                !r.is_empty()
                    && r.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c))
            });
            if !ok {
                return Err(ConfigError::new(
                    "allowed_origin",
                    format!("{origin:?}"),
                    "an origin: http:// or https://, a host and an optional port, no path",
                ));
            }
        }
        let mut keys = std::collections::BTreeSet::new();
        for (key, _) in &self.manual {
            if !keys.insert(key.clone()) {
                return Err(ConfigError::new(
                    "breaker",
                    format!("{:?}", key.to_string()),
                    "a key not already registered by hand",
                ));
            }
        }
        let mut tokens = BearerTokens::new();
        for (token, principal, permissions) in &self.tokens {
            tokens.add(token, Principal::new(principal.as_str(), *permissions))?;
        }
        let mut auth = self.hooks;
        if !tokens.is_empty() {
            auth.push(Box::new(tokens));
        }
        let store = Arc::new(Store::new(self.per_key, self.total));
        let manual: Vec<Manual<C>> = self
            .manual
            .into_iter()
            .map(|(key, breaker)| Manual {
                key,
                breaker,
                operator: Mutex::new(OperatorState::Auto),
            })
            .collect();
        for m in &manual {
            m.breaker
                .subscribe(ManualListener(store.clone(), m.key.clone()));
        }
        if let Some(registry) = &self.registry {
            registry.subscribe(RegistryListener(store.clone()));
        }
        let now = self.clock.now();
        Ok(Dashboard {
            shared: Arc::new(Shared {
                registry: self.registry,
                manual,
                auth,
                anonymous: self.anonymous,
                sensitive: self.sensitive,
                allowed_origins: self.allowed_origins,
                store,
                clock: self.clock,
                ids: RandomState::new(),
                on_audit: self.on_audit,
                streams: AtomicUsize::new(0),
                max_streams: self.max_streams,
                last_sweep: AtomicU64::new(now),
            }),
        })
    }
}

/// Milliseconds in `d`, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
