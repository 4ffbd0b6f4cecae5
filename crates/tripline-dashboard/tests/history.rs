//! The last hour, kept on the server: each breaker's slots of 10 s (state, calls, failures,
//! slow calls, rejections, percentiles of durations), the rates per breaker and per
//! dependency, and the incidents. Time is a `ManualClock`; each slot is closed by
//! `Dashboard::sample_history` after the clock moves.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
use tripline::{BreakerConfig, ManualClock, Outcome, State};
use tripline_dashboard::{Dashboard, DashboardBuilder, Permissions};

const OPERATOR: &str = "operator-token-0123456789";
const READER: &str = "reader-token-0123456789";
const SLOT: Duration = Duration::from_secs(10);

fn small(durations: bool) -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(10))
        .half_open_calls(2)
        .call_durations(durations)
        .build()
        .unwrap()
}

fn key(s: &str) -> Key {
    s.parse().unwrap()
}

struct Fixture {
    clock: ManualClock,
    registry: Arc<Registry<ManualClock>>,
    dashboard: Dashboard<ManualClock>,
    router: Router,
}

fn fixture() -> Fixture {
    let clock = ManualClock::new();
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default()
                .with_config("default", small(false))
                .with_config("timed", small(true))
                .with_dependency("prices", "timed")
                .with_dependency("search", "timed"),
            clock.clone(),
        )
        .unwrap(),
    );
    for k in [
        "catalog/shard=1",
        "catalog/shard=2",
        "prices",
        "payments/tenant=acme",
    ] {
        registry.get(&key(k)).unwrap();
    }
    let dashboard = DashboardBuilder::new(clock.clone())
        .registry(registry.clone())
        .bearer_token(OPERATOR, "on-call", Permissions::ALL)
        .bearer_token(READER, "viewer", Permissions::READ)
        .sensitive(|k| matches!(k.scope(), Some((ScopeKind::Tenant, _))))
        .build()
        .unwrap();
    let router = Router::new().nest("/ops", dashboard.router());
    Fixture {
        clock,
        registry,
        dashboard,
        router,
    }
}

impl Fixture {
    /// Moves to the next slot and closes the one that ended.
    fn next_slot(&self) {
        self.clock.advance(SLOT);
        assert!(self.dashboard.sample_history(), "a slot closed");
    }

    async fn get(&self, path: &str, token: &str) -> Value {
        let req = Request::get(format!("/ops{path}"))
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    async fn control(&self, body: Value) {
        let req = Request::post("/ops/api/control")
            .header(header::AUTHORIZATION, format!("Bearer {OPERATOR}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
    }

    async fn row(&self, k: &str) -> Value {
        let l = self.get(&format!("/api/breakers?key={k}"), OPERATOR).await;
        l["breakers"][0].clone()
    }

    async fn history(&self, k: &str, token: &str) -> Value {
        let id = self.row(k).await["id"].as_str().unwrap().to_string();
        self.get(&format!("/api/breakers/{id}/history"), token)
            .await
    }
}

fn calls(f: &Fixture, k: &str, ok: usize, failed: usize) {
    let b = f.registry.peek(&key(k)).unwrap();
    for _ in 0..ok {
        let _ = b.call(|| Ok::<_, ()>(()));
    }
    for _ in 0..failed {
        let _ = b.call(|| Err::<(), _>("boom"));
    }
}

fn column<'a>(h: &'a Value, name: &str) -> &'a [Value] {
    h[name]
        .as_array()
        .unwrap_or_else(|| panic!("no column {name}: {h}"))
}

#[tokio::test]
async fn the_last_hour_is_kept_on_the_server_and_reads_back_after_a_reload() {
    let f = fixture();
    // Ten quiet slots, then traffic, a trip, rejections while open, recovery.
    for _ in 0..10 {
        f.next_slot();
    }
    calls(&f, "catalog/shard=1", 30, 0);
    f.next_slot();
    calls(&f, "catalog/shard=1", 2, 2);
    assert_eq!(
        f.registry.peek(&key("catalog/shard=1")).unwrap().state(),
        State::Open
    );
    calls(&f, "catalog/shard=1", 5, 0); // rejected
    f.next_slot();
    f.next_slot(); // open all along
    calls(&f, "catalog/shard=1", 2, 0); // the probes: Closed again
    assert_eq!(
        f.registry.peek(&key("catalog/shard=1")).unwrap().state(),
        State::Closed
    );
    f.next_slot();

    let first = f.history("catalog/shard=1", READER).await;
    assert_eq!(
        (first["slots"].as_u64(), first["slot_s"].as_u64()),
        (Some(360), Some(10))
    );
    let state = column(&first, "state");
    let n = state.len();
    // The newest slot is the last: closed again after the probes (half-open during it).
    assert_eq!(
        state[n - 4..]
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect::<Vec<_>>(),
        ["closed", "open", "open", "open"],
        "worst state per slot"
    );
    assert_eq!(column(&first, "end_state")[n - 1], "closed");
    assert_eq!(column(&first, "calls")[n - 4], 30);
    assert_eq!(column(&first, "calls_per_s")[n - 4], 3.0);
    assert_eq!(column(&first, "failure_rate")[n - 3], 50.0, "2 of 4 failed");
    assert_eq!(column(&first, "rejected")[n - 3], 5);
    assert_eq!(column(&first, "rejected_per_s")[n - 3], 0.5);
    assert_eq!(column(&first, "rejection_rate")[n - 3], 55.56, "5 of 9");
    assert_eq!(column(&first, "calls")[n - 2], 0, "open, no call");
    assert_eq!(column(&first, "calls")[n - 1], 2, "the probes");
    // Quiet slots read as idle Closed; slots before the dashboard began have no data.
    assert_eq!(state[n - 5], "closed");
    assert_eq!(column(&first, "calls")[n - 5], 0);
    assert_eq!(state[n - 16], Value::Null);
    // The page reloaded: the same hour from the server.
    let again = f.history("catalog/shard=1", READER).await;
    assert_eq!(first, again);
    // An hour later the trip has gone from the breaker's slots.
    for _ in 0..360 {
        f.next_slot();
    }
    let later = f.history("catalog/shard=1", READER).await;
    assert!(
        column(&later, "state").iter().all(|s| s == "closed"),
        "{later}"
    );
}

#[tokio::test]
async fn rates_and_percentiles_per_breaker_and_per_dependency() {
    let f = fixture();
    let prices = f.registry.peek(&key("prices")).unwrap();
    let search = f.registry.get(&key("search/shard=1")).unwrap();
    // 100 calls of 1 to 10 ms on prices, 50 calls of 100 ms on search.
    for i in 0..100u64 {
        let permit = prices.try_acquire().unwrap();
        f.clock.advance(Duration::from_millis(i % 10 + 1));
        permit.record(Outcome::Success);
    }
    for _ in 0..50 {
        let permit = search.try_acquire().unwrap();
        permit.record_with_duration(Outcome::Success, Duration::from_millis(100));
    }
    calls(&f, "catalog/shard=2", 40, 0);
    f.next_slot();
    let row = f.row("prices").await;
    let r = &row["rates"];
    assert_eq!(
        (r["window_s"].as_f64(), r["calls_per_s"].as_f64()),
        (Some(10.0), Some(10.0)),
        "{row}"
    );
    let p50 = r["p50_ms"].as_f64().unwrap();
    let p99 = r["p99_ms"].as_f64().unwrap();
    assert!((4.4..=6.6).contains(&p50), "p50 {p50}");
    assert!((8.8..=11.2).contains(&p99), "p99 {p99}");
    // A breaker that keeps no durations has rates and no percentiles.
    let r = &f.row("catalog/shard=2").await["rates"];
    assert_eq!(
        (r["calls_per_s"].as_f64(), r["p50_ms"].clone()),
        (Some(4.0), Value::Null)
    );
    // Per dependency.
    let l = f.get("/api/breakers", OPERATOR).await;
    let dep = |name: &str| {
        l["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == name)
            .unwrap()["rates"]
            .clone()
    };
    assert_eq!(dep("catalog")["calls_per_s"], 4.0);
    let search = dep("search");
    assert_eq!(search["calls_per_s"], 5.0);
    let p = search["p99_ms"].as_f64().unwrap();
    assert!((88.0..=112.0).contains(&p), "{search}");
    // The history carries the percentiles per slot.
    let h = f.history("prices", READER).await;
    let p99s = column(&h, "p99_ms");
    assert_eq!(p99s[p99s.len() - 1].as_f64(), Some(p99));
}

#[tokio::test]
async fn incidents_list_the_breakers_that_left_closed_in_order_with_the_rule() {
    let f = fixture();
    calls(&f, "catalog/shard=2", 0, 4);
    f.clock.advance(Duration::from_secs(3));
    f.control(json!({"action": "force-open", "key": "prices"}))
        .await;
    f.clock.advance(Duration::from_secs(1));
    calls(&f, "payments/tenant=acme", 0, 4);
    f.clock.advance(Duration::from_secs(10));
    calls(&f, "catalog/shard=2", 0, 2); // the probes fail: open again
    f.clock.advance(Duration::from_secs(10));
    calls(&f, "catalog/shard=2", 2, 0); // closed
    let list = f.get("/api/incidents", OPERATOR).await;
    let seen: Vec<(String, String, String, u64, bool)> = list["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["key"].as_str().unwrap().to_string(),
                i["reason"]["rule"].as_str().unwrap().to_string(),
                i["state"].as_str().unwrap().to_string(),
                i["trips"].as_u64().unwrap(),
                i["ended_age_ms"].is_null(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "catalog/shard=2".into(),
                "failure-rate".into(),
                "closed".into(),
                2,
                false
            ),
            (
                "prices".into(),
                "operator".into(),
                "forced-open".into(),
                0,
                true
            ),
            (
                "payments/tenant=acme".into(),
                "failure-rate".into(),
                "open".into(),
                1,
                true
            ),
        ]
    );
    let first = &list["incidents"][0];
    assert_eq!(
        (first["started_age_ms"].as_u64(), first["to"].as_str()),
        (Some(24_000), Some("open"))
    );
    assert_eq!(first["window"]["failures"], 4);
    // A reader sees the tenant's incident without its name.
    let shown = f.get("/api/incidents", READER).await;
    assert_eq!(shown["incidents"][2]["key"], Value::Null);
    assert!(!shown.to_string().contains("acme"));
    // An hour after it closed, an incident goes; those still open stay.
    for _ in 0..362 {
        f.next_slot();
    }
    let later = f.get("/api/incidents", OPERATOR).await;
    let keys: Vec<&str> = later["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["prices", "payments/tenant=acme"]);
}

#[tokio::test]
async fn requests_close_a_due_slot_and_a_late_one_spreads_its_figures() {
    let f = fixture();
    calls(&f, "catalog/shard=1", 60, 0);
    // Nobody sampled for three slots: the next request does, over the three.
    f.clock.advance(SLOT * 3);
    let h = f.history("catalog/shard=1", READER).await;
    let per_s = column(&h, "calls_per_s");
    let n = per_s.len();
    assert_eq!(&per_s[n - 3..], [json!(2.0), json!(2.0), json!(2.0)]);
    assert!(
        !f.dashboard.sample_history(),
        "the request closed it already"
    );
}

#[tokio::test]
async fn a_key_the_registry_evicts_takes_its_history_with_it() {
    let f = fixture();
    calls(&f, "catalog/shard=1", 10, 0);
    f.next_slot();
    let before = f.dashboard.history_memory();
    assert!(before > 0);
    f.clock.advance(Duration::from_secs(3600));
    for k in ["catalog/shard=2", "prices", "payments/tenant=acme"] {
        f.registry.get(&key(k)).unwrap();
    }
    assert_eq!(f.registry.evict_idle(), 1);
    f.dashboard.sample_history();
    f.next_slot();
    assert!(
        f.dashboard.history_memory() < before,
        "its record and slots went"
    );
}

/// 10,000 keys, every one of them forced open all along (so no slot of theirs is idle and
/// every one is stored), sampled for 20 minutes of slots, on the default bound of 1,000,000
/// slots in all; then 100 keys for more than an hour each, with no total bound in the way.
/// Prints the figures (run with `--nocapture` to see them).
#[test]
fn the_history_memory_bound_holds_with_10000_keys() {
    let clock = ManualClock::new();
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default().with_max_breakers(20_000),
            clock.clone(),
        )
        .unwrap(),
    );
    for shard in 0..10_000 {
        registry
            .get(&Key::scoped("bulk", ScopeKind::Shard, &shard.to_string()).unwrap())
            .unwrap();
    }
    registry.set_operator(
        &tripline::registry::Selector::Dependency("bulk".into()),
        tripline::registry::OperatorState::ForcedOpen,
    );
    let mut kept = None;
    let built = allocation_counter::measure(|| {
        kept = Some(
            DashboardBuilder::new(clock.clone())
                .registry(registry.clone())
                .build()
                .unwrap(),
        );
    });
    let dashboard = kept.unwrap();
    let at_start = dashboard.history_memory();
    let sampled = allocation_counter::measure(|| {
        for _ in 0..120 {
            clock.advance(SLOT);
            assert!(dashboard.sample_history());
        }
    });
    let history = dashboard.history_memory();
    // Slots, their slack (at most 11 a breaker), a record of at most 400 bytes per breaker
    // (with its index entry), the incidents.
    let bound = 1_000_000 * 20 + 10_000 * (11 * 20 + 400) + 1_000 * 200;
    eprintln!(
        "10,000 keys forced open, 120 slots of 10 s, default bound of 1,000,000 slots: \
         the history counts {history} bytes ({at_start} after the build); the allocator saw \
         {} bytes kept by the build (the history's records, the listener on each breaker and \
         its event queue) and {} bytes kept by the 120 samples; documented bound {bound}",
        built.bytes_current, sampled.bytes_current
    );
    assert!(history <= bound, "{history} > {bound}");
    assert!(
        (sampled.bytes_current as usize) + at_start <= bound,
        "{} bytes kept by the samples",
        sampled.bytes_current
    );

    // Per key: at most an hour.
    let clock = ManualClock::new();
    let registry =
        Arc::new(Registry::with_clock(RegistryConfig::default(), clock.clone()).unwrap());
    for shard in 0..100 {
        registry
            .get(&Key::scoped("few", ScopeKind::Shard, &shard.to_string()).unwrap())
            .unwrap();
    }
    registry.set_operator(
        &tripline::registry::Selector::Dependency("few".into()),
        tripline::registry::OperatorState::ForcedOpen,
    );
    let dashboard = DashboardBuilder::new(clock.clone())
        .registry(registry.clone())
        .build()
        .unwrap();
    let mut after_an_hour = 0;
    for n in 0..400 {
        clock.advance(SLOT);
        dashboard.sample_history();
        if n == 360 {
            after_an_hour = dashboard.history_memory();
        }
    }
    let per_key = dashboard.history_memory() / 100;
    eprintln!("100 keys, 400 slots each: {per_key} bytes per key");
    assert_eq!(
        dashboard.history_memory(),
        after_an_hour,
        "nothing grows past an hour"
    );
    // An hour of slots, the record and its index entry, a share of the incidents.
    assert!(per_key <= 360 * 20 + 600, "{per_key} bytes per key");
}

/// A clock that counts its readings.
#[derive(Clone, Default)]
struct CountingClock {
    inner: ManualClock,
    reads: Arc<std::sync::atomic::AtomicU64>,
}

impl tripline::Clock for CountingClock {
    fn now(&self) -> u64 {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.now()
    }
}

#[test]
fn breakers_that_keep_no_durations_pay_nothing_per_call_for_the_history() {
    let clock = CountingClock::default();
    let registry = Arc::new(
        Registry::with_clock(
            RegistryConfig::default()
                .with_config("default", small(false))
                .with_config("timed", small(true))
                .with_dependency("prices", "timed"),
            clock.clone(),
        )
        .unwrap(),
    );
    let plain = registry.get(&key("catalog/shard=1")).unwrap();
    let timed = registry.get(&key("prices")).unwrap();
    let reads = |b: &tripline::CircuitBreaker<CountingClock>| {
        let before = clock.reads.load(std::sync::atomic::Ordering::Relaxed);
        for _ in 0..1000 {
            b.call(|| Ok::<_, ()>(())).unwrap();
        }
        clock.reads.load(std::sync::atomic::Ordering::Relaxed) - before
    };
    let (plain_alone, timed_alone) = (reads(&plain), reads(&timed));
    let dashboard = DashboardBuilder::new(clock.clone())
        .registry(registry.clone())
        .build()
        .unwrap();
    let later = registry.get(&key("catalog/shard=2")).unwrap();
    // The dashboard adds no clock reading to a breaker's calls (no outcome listener on the
    // ones that keep no durations; the ones that do were timed anyway).
    assert_eq!(
        reads(&plain),
        plain_alone,
        "a breaker created before the dashboard"
    );
    assert_eq!(reads(&later), plain_alone, "a breaker created after it");
    assert_eq!(reads(&timed), timed_alone);
    drop(dashboard);
}
