//! # tripline-dashboard
//!
//! An operator's page for tripline's circuit breakers, served by the application itself:
//! the breakers of a [`Registry`] (and any registered by hand, fleet-wide ones in Redis too:
//! [`DashboardBuilder::shared_breaker`], whose kill switch holds on every replica) as a live grid, each one's
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
//! | `GET /api/breakers` | the breakers, filtered and paged, with a summary per dependency (rates and percentiles of the last 10 s) | read |
//! | `GET /api/breakers/{id}` | one breaker: figures, configuration, recent events | read |
//! | `GET /api/breakers/{id}/history` | its last hour: 360 slots of 10 s (state, calls, failures, slow calls, rejections, p50 / p99) | read |
//! | `GET /api/incidents` | the breakers that left Closed in the last hour, in order, with the rule that fired | read |
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
//!     .allowed_host("ops.example.com")
//!     .build()?;
//! // The page at /ops, /ops/ and /ops/index.html, the API under /ops/api.
//! let app: Router = dashboard.mount(Router::new(), "/ops");
//! # drop(app);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Security
//! * **Reading and controlling are separate permissions** ([`Permissions`]): `READ`,
//!   `SENSITIVE` (see scopes the application marks sensitive) and `CONTROL`. Callers without
//!   credentials get the anonymous permissions ([`DashboardBuilder::anonymous`]): none once an
//!   authentication check is configured (bearer tokens or a hook), unless the application
//!   says otherwise, and `READ` while there is none; never `CONTROL`, so the controls are off
//!   until the application configures a check, bearer tokens
//!   ([`DashboardBuilder::bearer_token`], compared in constant time) or its own hook
//!   ([`DashboardBuilder::authenticate`]).
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
//! * **DNS rebinding**: with [`DashboardBuilder::allowed_host`], a request whose `Host` is
//!   not one of the allowed hosts (or that names two hosts: two `Host` headers, or a request
//!   line naming another) is refused (400, `field: "host"`) before anything is read,
//!   so a hostile page that points its own name at the application's address reads nothing,
//!   not even what anonymous callers may read.
//! * **Sensitive scopes**: for a key the application marks sensitive
//!   ([`DashboardBuilder::sensitive`]), a reader without `SENSITIVE` sees the dependency and
//!   the figures but nothing of the scope: not its kind, not its value, not its place in the
//!   sort order (such rows are ordered by their opaque id), and a search or a control by key
//!   does not find it; no answer, refusal, header, count, history or incident names it. Ids
//!   are keyed hashes that reveal nothing of the key.
//! * **Keys look like what they are**: the registry refuses keys with invisible or
//!   bidirectional-control characters (`tripline::registry::Key`), and the page shows any such
//!   character in a principal's name as `\u{...}`. Keys may hold combining marks (scripts
//!   need them), so two keys can differ only in how an accent is written (`café` precomposed,
//!   `cafe\u{301}` combining): in a name that is not in Unicode's NFC, the page shows the
//!   combining marks (and the characters NFC would replace) as `\u{...}`, and a mark that
//!   follows no letter or digit in any name, so such keys never look the same.
//! * **No state from requests**: reads never create a breaker (an unknown id or key is a
//!   404; lookups use [`Registry::peek`], never [`Registry::get`]); a control needs an
//!   existing key or dependency; parameters and bodies are checked (sizes, names, values)
//!   and a refusal names the field, the value and what is allowed.
//! * **Nobody can take the live view away**: event streams are capped in all
//!   ([`DashboardBuilder::max_streams`], 64), the last eighth of them is kept for principals
//!   that may control (and one of them takes at most half of it), one principal holds at
//!   most 8 ([`DashboardBuilder::max_streams_per_principal`]), and callers without
//!   credentials at most a quarter in all ([`DashboardBuilder::max_anonymous_streams`]) and 4
//!   from one client ([`DashboardBuilder::max_streams_per_client`]: one IPv4 address, or one
//!   IPv6 /64; the address is the connection's when the server runs with
//!   `into_make_service_with_connect_info::<SocketAddr>()`, or what
//!   [`DashboardBuilder::client_address`] says behind a proxy; `X-Forwarded-For` and its
//!   kin count for nothing unless that hook reads them).
//! * The page is served with a strict Content-Security-Policy (scripts, styles and requests
//!   only from the application), `X-Frame-Options: DENY` (no clickjacking of the kill
//!   switch), `nosniff` and `no-referrer`; it writes every value with `textContent`.
//!
//! # Overrides and their layers
//! A registry's breakers are steered through its run-time overrides (a key's, or a whole
//! dependency's), which hold over the configuration's `[operator]` section. Each row says
//! which layer holds it (`override_by`: `run-time-key`, `run-time-dependency`,
//! `configuration`). A reset under an override is refused (409) naming the layer and what
//! lifts it: `clear` for a run-time one; for one from the configuration, which `clear` does
//! not touch, a reload without that entry, or the action `auto`, a run-time override that
//! lets the rules decide until cleared. Breakers registered by hand have the same two
//! run-time layers, so "force open all" on their dependency holds and shows as a registry's
//! does; a control by id (the page's buttons) reaches exactly that row, where a
//! hand-registered breaker and a registry's share a key.
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
//! # The last hour
//! The page opened in the middle of an incident shows what came before: the server keeps,
//! per breaker, 360 slots of 10 s (an hour) with every state it was in, the calls, failures,
//! slow calls and rejections, and, for a breaker whose window keeps call durations
//! (`call_durations`), the median and 99th percentile of its calls; the listing gives each
//! breaker's and each dependency's calls per second, rejections per second, failure, slow and
//! rejection rates and percentiles of the last slot, and `api/incidents` the breakers that
//! left Closed in the hour, in order, with the rule and the window behind it.
//! * **Cost per call**: none for the counts (a sample reads each breaker's metrics once per
//!   slot); for durations, the core's outcome events, asked for only on breakers that keep
//!   durations, and one atomic increment in a histogram.
//! * **Who closes the slots**: [`Dashboard::run_history`] (spawn it once), else any request
//!   once a slot is due, else [`Dashboard::sample_history`] from your own timer; a slot
//!   nobody closed in time is merged with the next (its figures spread over them).
//! * **Memory**: a slot is 20 bytes, and one in which a Closed breaker saw no call is not
//!   stored at all. Per breaker: at most 360 slots (7,200 bytes) and a record of about 400
//!   bytes with its index entry, plus 832 bytes of histograms for a breaker that keeps
//!   durations. In all: at most [`DashboardBuilder::history_slots`] slots (default 1,000,000,
//!   20 MB; past it the oldest slot of all goes first) with at most 11 slots of slack per
//!   breaker, the records, at most 1,000 incidents, and per dependency at most 360 percentile
//!   pairs of 8 bytes. Measured with 10,000 keys forced open for 120 slots (the test
//!   `the_history_memory_bound_holds_with_10000_keys`): 24.8 MB. A breaker the registry let
//!   go (evicted, and no handle left) takes its record and slots with it at once, whether or
//!   not anyone samples: 20,000 keys through a registry of 100 leave 63 kB (the test
//!   `keys_that_come_and_go_leave_no_history_behind_even_when_nobody_samples`); a breaker
//!   dropped from the registry but still held by the application goes at the second sample
//!   that does not find it. Each registry breaker carries a small listener of the history's
//!   (about 100 bytes) that does this. Counts are kept to three
//!   significant digits (exact below 2,048, else within 0.1 %), percentiles within 12 %.
//!   [`Dashboard::history_memory`] says what it holds now.
//!
//! # Locks
//! No listener, callback or clock of the application runs under a lock of the dashboard.
//! The recent events, the history, the stream counts and the desired overrides of the
//! hand-registered breakers each sit under a mutex that guards only that data; forcing a
//! breaker open, resetting it and every registry call run with none held (the listeners
//! they run may read the page or send a control), and a hand-registered breaker's override
//! is written first and applied after, applied again if another action wrote it meanwhile.
//! The `sensitive`, `on_audit`, `authenticate` and `client_address` callbacks, and the
//! breakers' metrics (which read their clock), run with no lock held either.
//!
//! Times: event times are readings of the breakers' clock, and the dashboard's clock
//! ([`DashboardBuilder::new`]) must be the same clock, so that "how long ago" is right;
//! records also carry the wall-clock time they were made, for people.

#![forbid(unsafe_code)]

mod api;
mod assets;
mod auth;
mod error;
mod fleet;
mod history;
mod manual;
mod store;
mod streams;
mod view;

use std::hash::{BuildHasher, RandomState};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::request::Parts;
use axum::routing::{get, post};
use tripline::registry::{Key, Registry};
use tripline::{CircuitBreaker, Clock, ConfigError, MonotonicClock};

pub use auth::{Authenticate, Permissions, Principal, Unauthenticated};
pub use store::{Action, AuditRecord, Source, Target};

use auth::BearerTokens;
use history::{Counts, History};
use manual::ManualControl;
use store::{ManualListener, RegistryListener, Store};
use streams::{StreamLimits, Streams};

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
}

type SensitiveFn = Box<dyn Fn(&Key) -> bool + Send + Sync>;
type AuditFn = Box<dyn Fn(&AuditRecord) + Send + Sync>;
type AddressFn = Box<dyn Fn(&Parts) -> Option<IpAddr> + Send + Sync>;

/// What the handlers share.
pub(crate) struct Shared<C: Clock + Clone> {
    pub(crate) registry: Option<Arc<Registry<C>>>,
    pub(crate) manual: Vec<Manual<C>>,
    /// Breakers of any host registered by hand (fleet-wide ones), in the order given.
    pub(crate) fleet: Vec<fleet::Fleet>,
    pub(crate) auth: Vec<Box<dyn Authenticate>>,
    pub(crate) anonymous: Permissions,
    pub(crate) sensitive: Option<SensitiveFn>,
    pub(crate) allowed_origins: Vec<String>,
    pub(crate) allowed_hosts: Vec<auth::Authority>,
    pub(crate) store: Arc<Store>,
    pub(crate) history: Arc<History>,
    /// The overrides set on hand-registered breakers (see `manual`).
    pub(crate) manual_control: Mutex<ManualControl>,
    pub(crate) clock: C,
    ids: RandomState,
    pub(crate) on_audit: Option<AuditFn>,
    pub(crate) client_address: Option<AddressFn>,
    pub(crate) streams: Streams,
    pub(crate) stream_limits: StreamLimits,
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
        format!("{:016x}", self.id_number(source, key))
    }

    /// The id as a number (what a lookup by id compares, with no text made per breaker).
    pub(crate) fn id_number(&self, source: Source, key: &Key) -> u64 {
        self.ids.hash_one((source, key))
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

    /// Closes the history's slot if one is due: reads every breaker's counters (no lock of
    /// the dashboard held: the reads run the breakers' clock), then records them.
    pub(crate) fn sample(&self) -> bool {
        self.history.sample(
            || self.clock.now(),
            || {
                let mut seen = Vec::new();
                for m in &self.manual {
                    let metrics = m.breaker.metrics();
                    seen.push((
                        (Source::Manual, m.key.clone()),
                        Counts::of(&metrics),
                        metrics.state,
                    ));
                }
                for f in &self.fleet {
                    let metrics = f.breaker.metrics();
                    seen.push((
                        (Source::Manual, f.key.clone()),
                        Counts::of(&metrics),
                        metrics.state,
                    ));
                }
                if let Some(r) = &self.registry {
                    r.for_each(|k, b| {
                        let metrics = b.metrics();
                        seen.push((
                            (Source::Registry, k.clone()),
                            Counts::of(&metrics),
                            metrics.state,
                        ));
                    });
                }
                seen
            },
        )
    }

    /// The client's address: the application's hook, else the connection's (when the server
    /// was started with `into_make_service_with_connect_info::<SocketAddr>()`).
    pub(crate) fn client_address(&self, parts: &Parts) -> Option<IpAddr> {
        match &self.client_address {
            Some(f) => f(parts),
            None => parts
                .extensions
                .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                .map(|c| c.0.ip()),
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
    /// resolve under the mount point. axum's `nest` never routes the mount point with a
    /// trailing slash (`/ops/`) to the nested router: [`mount`](Self::mount) adds that route
    /// too.
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
            .route("/api/breakers/{id}/history", get(api::history::<C>))
            .route("/api/incidents", get(api::incidents::<C>))
            .route("/api/audit", get(api::audit::<C>))
            .route("/api/events", get(api::events::<C>))
            .route("/api/control", post(api::control::<C>))
            .fallback(api::not_found)
            .layer(DefaultBodyLimit::max(MAX_BODY))
            .layer(axum::middleware::from_fn_with_state(
                self.shared.clone(),
                api::allowed_host::<C>,
            ))
            .with_state(self.shared.clone())
    }

    /// `app` with the dashboard mounted at `path` (`/ops`): the router nested there, and the
    /// page also at `path/` (a nested axum router never sees the mount point with a
    /// trailing slash, so `nest` alone answers `/ops/` with the application's 404).
    ///
    /// ```
    /// use axum::Router;
    /// use axum::routing::get;
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder().build()?;
    /// let app: Router = Router::new().route("/health", get(|| async { "ok" }));
    /// let app = dashboard.mount(app, "/ops"); // /ops, /ops/ and /ops/index.html: the page
    /// # drop(app);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn mount<S: Clone + Send + Sync + 'static>(&self, app: Router<S>, path: &str) -> Router<S> {
        let path = path.trim_end_matches('/');
        let slash: Router<S> = Router::new()
            .route(&format!("{path}/"), get(api::page))
            .layer(axum::middleware::from_fn_with_state(
                self.shared.clone(),
                api::allowed_host::<C>,
            ));
        app.nest(path, self.router()).merge(slash)
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

    /// Closes the history's current 10 s slot if its time has come, reading every breaker's
    /// counters once; returns whether a slot closed. [`run_history`](Self::run_history) calls
    /// it on schedule, and so does any request to the API once a slot is due; call it from
    /// your own timer instead if you run no tokio task. With a [`ManualClock`](tripline::ManualClock),
    /// tests advance the clock and call it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tripline::ManualClock;
    /// use tripline::registry::{Registry, RegistryConfig};
    /// use tripline_dashboard::DashboardBuilder;
    ///
    /// let clock = ManualClock::new();
    /// let registry = Arc::new(Registry::with_clock(RegistryConfig::default(), clock.clone())?);
    /// let dashboard = DashboardBuilder::new(clock.clone()).registry(registry.clone()).build()?;
    /// let breaker = registry.get(&"catalog/shard=1".parse()?)?;
    /// let _ = breaker.call(|| Err::<(), _>("boom"));
    /// assert!(!dashboard.sample_history(), "the first slot is still open");
    /// clock.advance(Duration::from_secs(10));
    /// assert!(dashboard.sample_history());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sample_history(&self) -> bool {
        self.shared.sample()
    }

    /// Keeps the history while nobody looks at the page: closes each 10 s slot on time,
    /// forever. Spawn it once (`tokio::spawn(async move { dashboard.run_history().await })`);
    /// without it, slots close when a request comes, and a slot nobody asked about in time
    /// is merged with the next ones (its figures spread over them).
    ///
    /// ```no_run
    /// use tripline_dashboard::Dashboard;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tripline::ConfigError> {
    /// let dashboard = Dashboard::builder().build()?;
    /// let history = dashboard.clone();
    /// tokio::spawn(async move { history.run_history().await });
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_history(&self) {
        loop {
            self.shared.sample();
            // Wake a little after the next boundary of the dashboard's clock.
            let now = self.shared.clock.now();
            let slot = history::SLOT_NANOS;
            let wait = slot - now % slot + slot / 100;
            tokio::time::sleep(Duration::from_nanos(wait)).await;
        }
    }

    /// Bytes the history holds now (slots, per-breaker records, duration histograms, indexes
    /// and incidents; see the crate docs for the bound).
    ///
    /// ```
    /// use tripline_dashboard::Dashboard;
    /// let dashboard = Dashboard::builder().build()?;
    /// assert!(dashboard.history_memory() < 1024);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn history_memory(&self) -> usize {
        self.shared.history.memory_bytes()
    }
}

/// Builds a [`Dashboard`].
pub struct DashboardBuilder<C: Clock + Clone = MonotonicClock> {
    clock: C,
    registry: Option<Arc<Registry<C>>>,
    manual: Vec<(Key, CircuitBreaker<C>)>,
    fleet: Vec<fleet::Fleet>,
    tokens: Vec<(String, String, Permissions)>,
    hooks: Vec<Box<dyn Authenticate>>,
    anonymous: Option<Permissions>,
    sensitive: Option<SensitiveFn>,
    allowed_origins: Vec<String>,
    allowed_hosts: Vec<String>,
    per_key: usize,
    total: usize,
    max_streams: usize,
    per_principal: Option<usize>,
    anonymous_streams: Option<usize>,
    per_client: Option<usize>,
    client_address: Option<AddressFn>,
    history_slots: usize,
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
            .field("allowed_hosts", &self.allowed_hosts)
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
            fleet: Vec::new(),
            tokens: Vec::new(),
            hooks: Vec::new(),
            anonymous: None,
            sensitive: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            per_key: 50,
            total: 20_000,
            max_streams: 64,
            per_principal: None,
            anonymous_streams: None,
            per_client: None,
            client_address: None,
            history_slots: 1_000_000,
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

    /// Shows `breaker`, of any host of the [`tripline::Breaker`] interface, under `key`: a
    /// fleet-wide `tripline_redis::SharedBreaker` above all. Its card shows the fleet's state
    /// (as this replica last saw it) with this replica's figures, marked fleet-wide; its
    /// controls are the breaker's own operator moves, so a force open (the kill switch) is
    /// thrown in Redis and holds on every replica, and `reset`, `clear` and `auto` close it
    /// fleet-wide. It has no override layers of the dashboard's (the store's state is the
    /// operator's word), and a control that cannot reach the store is answered 503 with the
    /// store's reason, changing nothing. Its id, history and audit records are those of a
    /// breaker registered by hand ([`Source::Manual`]); a key given here may not also be given
    /// to [`breaker`](Self::breaker) or here twice ([`build`](Self::build) refuses it).
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker};
    /// use tripline_dashboard::Dashboard;
    ///
    /// // Here an in-process breaker; a `tripline_redis::SharedBreaker` goes the same way.
    /// let breaker = CircuitBreaker::new("payments", BreakerConfig::default());
    /// let dashboard = Dashboard::builder()
    ///     .shared_breaker("payments".parse()?, breaker)
    ///     .build()?;
    /// # drop(dashboard);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shared_breaker<B: tripline::Breaker>(mut self, key: Key, breaker: B) -> Self {
        self.fleet.push(fleet::Fleet {
            key,
            breaker: Box::new(breaker),
        });
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

    /// What a caller without credentials may do. By default: nothing once an authentication
    /// check is configured (bearer tokens or a hook: the page then asks for a token), `READ`
    /// while there is none (a page with no controls, readable by whoever reaches it). Never
    /// `CONTROL`.
    ///
    /// ```
    /// use tripline_dashboard::{Dashboard, Permissions};
    ///
    /// // Tokens for the team, and a read-only page for anyone who can reach it.
    /// let dashboard = Dashboard::builder()
    ///     .bearer_token("a-long-random-operator-token", "on-call", Permissions::ALL)
    ///     .anonymous(Permissions::READ)
    ///     .build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn anonymous(mut self, permissions: Permissions) -> Self {
        self.anonymous = Some(permissions);
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
    /// The last eighth of them (rounded down) is kept for principals that may control (once
    /// only those are left, a principal that holds half of them, rounded up, gets no more), and
    /// callers without credentials get at most [`max_anonymous_streams`](Self::max_anonymous_streams),
    /// so that nobody can take the live view from the operator by holding streams open.
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

    /// At most this many event streams open at once for one principal (by name; default 8,
    /// or `max_streams` if fewer).
    ///
    /// ```
    /// use tripline_dashboard::{Dashboard, Permissions};
    ///
    /// let dashboard = Dashboard::builder()
    ///     .bearer_token("a-long-random-wallboard-token", "wallboard", Permissions::READ)
    ///     .max_streams_per_principal(2)
    ///     .build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn max_streams_per_principal(mut self, n: usize) -> Self {
        self.per_principal = Some(n);
        self
    }

    /// At most this many event streams open at once without credentials, in all (default: a
    /// quarter of [`max_streams`](Self::max_streams), at least 1), and at most
    /// [`max_streams_per_client`](Self::max_streams_per_client) from one address.
    ///
    /// ```
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder().max_anonymous_streams(4).build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn max_anonymous_streams(mut self, n: usize) -> Self {
        self.anonymous_streams = Some(n);
        self
    }

    /// At most this many event streams open at once without credentials from one client
    /// (default 4, or `max_streams` if fewer): one IPv4 address (also spelled
    /// `::ffff:a.b.c.d`), or one IPv6 /64, so a client cannot rotate through the addresses of
    /// its own network. The address is the connection's when the server runs with
    /// `into_make_service_with_connect_info::<SocketAddr>()`, or what
    /// [`client_address`](Self::client_address) says; without either this cap cannot apply
    /// (the total one for anonymous callers still does).
    ///
    /// ```
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder().max_streams_per_client(1).build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn max_streams_per_client(mut self, n: usize) -> Self {
        self.per_client = Some(n);
        self
    }

    /// How to tell a request's client address, for a dashboard behind a proxy that names the
    /// client in a header it sets itself (only trust a header your own proxy overwrites).
    ///
    /// ```
    /// use axum::http::request::Parts;
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder()
    ///     .client_address(|parts: &Parts| {
    ///         parts.headers.get("x-real-ip")?.to_str().ok()?.parse().ok()
    ///     })
    ///     .build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn client_address(
        mut self,
        f: impl Fn(&Parts) -> Option<IpAddr> + Send + Sync + 'static,
    ) -> Self {
        self.client_address = Some(Box::new(f));
        self
    }

    /// A `Host` the dashboard answers (`ops.example.com`, `127.0.0.1:8080`, `[::1]:8080`);
    /// repeat for each. Once one is given, a request naming any other host is refused (400)
    /// before anything is read, so a hostile page that rebinds its own name to the
    /// application's address (DNS rebinding) reads nothing. A host without a port matches it
    /// on any port; case and a trailing dot do not matter, nor how an IPv6 address is spelled.
    /// Every host a request names must be allowed: its `Host` header (only one) and the
    /// authority of its request line (HTTP/2's `:authority`), each a host and a port of 1 to
    /// 65535 (`ops.example.com:8080@evil.test` is refused). Off (every host answered) until
    /// one is given; a host that no request could name (`::1` without brackets, `host:`) is
    /// refused by [`build`](Self::build).
    ///
    /// ```
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder()
    ///     .allowed_host("127.0.0.1:8080")
    ///     .allowed_host("localhost:8080")
    ///     .build()?;
    /// # drop(dashboard);
    /// assert!(Dashboard::builder().allowed_host("http://x").build().is_err());
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn allowed_host(mut self, host: &str) -> Self {
        self.allowed_hosts.push(host.to_string());
        self
    }

    /// Keeps at most `n` slots of 10 s of history in all breakers together (default
    /// 1,000,000, 20 bytes each: 20 MB); past it, the oldest slot of all goes first. Each
    /// breaker keeps at most an hour (360 slots), and a slot in which a Closed breaker saw no
    /// call takes no room. 0 keeps no slot (incidents are still followed).
    ///
    /// ```
    /// use tripline_dashboard::Dashboard;
    ///
    /// let dashboard = Dashboard::builder().history_slots(100_000).build()?;
    /// # drop(dashboard);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn history_slots(mut self, n: usize) -> Self {
        self.history_slots = n;
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
        let checks = !self.tokens.is_empty() || !self.hooks.is_empty();
        let anonymous = self.anonymous.unwrap_or(if checks {
            Permissions::NONE
        } else {
            Permissions::READ
        });
        if anonymous.contains(Permissions::CONTROL) {
            return Err(ConfigError::new(
                "anonymous",
                format!("{anonymous:?}"),
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
        let per_principal = self.per_principal.unwrap_or(self.max_streams.min(8));
        if !(1..=self.max_streams).contains(&per_principal) {
            return Err(ConfigError::new(
                "max_streams_per_principal",
                per_principal,
                format!("in [1, max_streams = {}]", self.max_streams),
            ));
        }
        let anonymous_streams = self
            .anonymous_streams
            .unwrap_or((self.max_streams / 4).max(1));
        if anonymous_streams > self.max_streams {
            return Err(ConfigError::new(
                "max_anonymous_streams",
                anonymous_streams,
                format!("in [0, max_streams = {}]", self.max_streams),
            ));
        }
        let per_client = self.per_client.unwrap_or(self.max_streams.min(4));
        if !(1..=self.max_streams).contains(&per_client) {
            return Err(ConfigError::new(
                "max_streams_per_client",
                per_client,
                format!("in [1, max_streams = {}]", self.max_streams),
            ));
        }
        if self.history_slots > 100_000_000 {
            return Err(ConfigError::new(
                "history_slots",
                self.history_slots,
                "in [0, 100000000]",
            ));
        }
        for origin in &self.allowed_origins {
            let rest = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            if !rest.is_some_and(auth::is_authority) {
                return Err(ConfigError::new(
                    "allowed_origin",
                    format!("{origin:?}"),
                    "an origin: http:// or https://, a host (a DNS name, an IPv4 address or an \
                     IPv6 address in brackets) and an optional port in [1, 65535], no path",
                ));
            }
        }
        let mut allowed_hosts = Vec::new();
        for host in &self.allowed_hosts {
            let Some(authority) = auth::Authority::parse(host) else {
                return Err(ConfigError::new(
                    "allowed_host",
                    format!("{host:?}"),
                    "a host (a DNS name, an IPv4 address or an IPv6 address in brackets) and an \
                     optional port in [1, 65535] (`ops.example.com`, `127.0.0.1:8080`, \
                     `[::1]:8080`), no scheme, no path",
                ));
            };
            allowed_hosts.push(authority);
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
        let history = Arc::new(History::new(self.history_slots));
        let manual: Vec<Manual<C>> = self
            .manual
            .into_iter()
            .map(|(key, breaker)| Manual { key, breaker })
            .collect();
        for m in &manual {
            m.breaker.subscribe(ManualListener {
                store: store.clone(),
                history: history.clone(),
                key: m.key.clone(),
            });
            if m.breaker.config().call_durations() {
                // The dashboard holds these breakers: only the timing is wanted.
                m.breaker.subscribe(history.follow(
                    (Source::Manual, m.key.clone()),
                    m.breaker.state(),
                    true,
                ));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for key in manual
            .iter()
            .map(|m| &m.key)
            .chain(self.fleet.iter().map(|f| &f.key))
        {
            if !seen.insert(key) && self.fleet.iter().any(|f| &f.key == key) {
                return Err(ConfigError::new(
                    "shared_breaker",
                    key,
                    "a key no other breaker registered by hand has",
                ));
            }
        }
        if let Some(registry) = &self.registry {
            registry.subscribe(RegistryListener {
                store: store.clone(),
                history: history.clone(),
                registry: Arc::downgrade(registry),
            });
        }
        let now = self.clock.now();
        let manual_control = ManualControl::new(manual.len());
        let shared = Arc::new(Shared {
            registry: self.registry,
            manual,
            fleet: self.fleet,
            auth,
            anonymous,
            sensitive: self.sensitive,
            allowed_origins: self.allowed_origins,
            allowed_hosts,
            store,
            history,
            manual_control: Mutex::new(manual_control),
            clock: self.clock,
            ids: RandomState::new(),
            on_audit: self.on_audit,
            client_address: self.client_address,
            streams: Streams::default(),
            stream_limits: StreamLimits {
                total: self.max_streams,
                control_reserve: self.max_streams / 8,
                per_principal,
                anonymous: anonymous_streams,
                per_client,
            },
            last_sweep: AtomicU64::new(now),
        });
        // The first sample: every breaker's counters from here on.
        shared.sample();
        Ok(Dashboard { shared })
    }
}

/// Milliseconds in `d`, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
