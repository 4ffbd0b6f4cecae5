//! The shared breaker in Redis (`tripline-redis`): round trips and added latency per call
//! against a throwaway loopback `redis-server`, with a bare `PING`, a one-line `EVALSHA` and
//! the in-process breaker as baselines.
//!
//! Every case runs `acquire().await` + `record(Outcome::Success).await` (or, for the Open
//! rows, `acquire().await` alone, which is rejected) on a current-thread tokio runtime, from
//! 1 and from 16 concurrent tasks, timing each call with `std::time::Instant`. Round trips
//! per call are the breaker's own `metrics().redis_calls` ÷ calls; "Redis µs/script" is the
//! server's `usec_per_call` for `EVALSHA` (`INFO commandstats`, reset before each case).
//!
//! `cargo bench -p tripline-bench --bench redis` (20,000 calls per case; `-- 50000` for
//! another count). `cargo test -p tripline-bench --bench redis` runs 500 per case.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::runtime::Runtime;
use tripline::{BreakerConfig, CircuitBreaker, Outcome};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, Batching, SharedBreaker, SharedConfig, TimeSource};

/// One measured case.
struct Row {
    case: String,
    tasks: usize,
    calls: usize,
    round_trips: Option<f64>,
    /// Per-call latencies in nanoseconds, sorted.
    lat: Vec<u64>,
    wall: Duration,
    /// Server µs per `EVALSHA`, and of it µs in the commands the script called.
    server_us: Option<(f64, f64)>,
    note: String,
}

impl Row {
    fn pct(&self, p: f64) -> f64 {
        if self.lat.is_empty() {
            return f64::NAN;
        }
        let i = ((self.lat.len() as f64 * p).ceil() as usize).clamp(1, self.lat.len()) - 1;
        self.lat[i] as f64 / 1000.0
    }

    fn mean(&self) -> f64 {
        self.lat.iter().sum::<u64>() as f64 / self.lat.len().max(1) as f64 / 1000.0
    }
}

fn us(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.1}")
    }
}

fn print_table(rows: &[Row]) {
    println!(
        "| case | tasks | calls | round trips/call | p50 µs | p99 µs | p99.9 µs | mean µs | calls/s | Redis µs/script (in commands) | notes |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let rt = r.round_trips.map_or("–".to_string(), |x| format!("{x:.4}"));
        let srv = r
            .server_us
            .map_or("–".to_string(), |(x, y)| format!("{x:.1} ({y:.1})"));
        let rate = r.calls as f64 / r.wall.as_secs_f64();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} |",
            r.case,
            r.tasks,
            r.calls,
            rt,
            us(r.pct(0.50)),
            us(r.pct(0.99)),
            us(r.pct(0.999)),
            us(r.mean()),
            rate,
            srv,
            r.note
        );
    }
}

/// Runs `calls` calls of `op` split over `tasks` tasks on the runtime; per-call latencies
/// (sorted, ns) and the wall time of the whole batch.
fn run_tasks<F, Fut>(rt: &Runtime, calls: usize, tasks: usize, op: F) -> (Vec<u64>, Duration)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let op = Arc::new(op);
    let per = calls / tasks;
    let start = Instant::now();
    let mut lat: Vec<u64> = rt.block_on(async {
        let mut handles = Vec::with_capacity(tasks);
        for _ in 0..tasks {
            let op = op.clone();
            handles.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per);
                for _ in 0..per {
                    let t = Instant::now();
                    op().await;
                    lat.push(t.elapsed().as_nanos() as u64);
                }
                lat
            }));
        }
        let mut all = Vec::with_capacity(calls);
        for h in handles {
            all.extend(h.await.expect("task"));
        }
        all
    });
    let wall = start.elapsed();
    lat.sort_unstable();
    (lat, wall)
}

/// The server's mean `EVALSHA` or `FCALL` time since the last reset, in µs, the part of it
/// spent in the Redis commands the script called (`INFO commandstats` counts those
/// separately), and the total µs.
fn server_script_us(rt: &Runtime, admin: &ConnectionManager) -> Option<(f64, f64, f64)> {
    let info: String = rt
        .block_on(
            redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut admin.clone()),
        )
        .ok()?;
    let field = |line: &str, name: &str| -> Option<f64> {
        line.split([':', ','])
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    let mut script = None;
    let mut inner_usec = 0.0;
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let name = rest.split(':').next().unwrap_or("");
        if name == "evalsha" || name == "fcall" {
            script = Some((
                field(line, "usec_per_call=")?,
                field(line, "calls=")?,
                field(line, "usec=")?,
            ));
        } else if ![
            "info", "config", "script", "client", "hello", "ping", "function",
        ]
        .iter()
        .any(|p| name.starts_with(p))
        {
            inner_usec += field(line, "usec=").unwrap_or(0.0);
        }
    }
    let (per_call, calls, total) = script?;
    Some((per_call, inner_usec / calls.max(1.0), total))
}

fn reset_stats(rt: &Runtime, admin: &ConnectionManager) {
    let _: () = rt
        .block_on(
            redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut admin.clone()),
        )
        .expect("CONFIG RESETSTAT");
}

fn connect(rt: &Runtime, url: &str) -> ConnectionManager {
    // The same settings as `tripline_redis::Backend::single`.
    let client = redis::Client::open(url).expect("url");
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_millis(200));
    rt.block_on(ConnectionManager::new_with_config(client, config))
        .expect("connect")
}

/// The breaker rules of every shared case: the default, except that the Open case needs a
/// long open wait (it must stay Open while measured) and a small window to trip quickly.
fn breaker_config(open: bool) -> BreakerConfig {
    if open {
        BreakerConfig::builder()
            .count_window(20)
            .minimum_calls(10)
            .failure_rate_threshold(50.0)
            .open_duration(Duration::from_secs(3600))
            .build()
            .expect("config")
    } else {
        BreakerConfig::default()
    }
}

struct Env {
    rt: Runtime,
    url: String,
    admin: ConnectionManager,
    calls: usize,
    warmup: usize,
}

impl Env {
    /// A shared breaker on a fresh scope and a fresh backend (connection).
    fn breaker(&self, scope: &str, shared: SharedConfig, open: bool) -> SharedBreaker {
        let backend = {
            let _g = self.rt.enter();
            Backend::single(&self.url).expect("backend")
        };
        SharedBreaker::new(scope, breaker_config(open), shared, backend).expect("breaker")
    }

    fn closed_case(&self, name: &str, shared: SharedConfig, tasks: usize) -> Row {
        let scope = format!("bench:{name}:{tasks}");
        let b = self.breaker(&scope, shared, false);
        let call = {
            let b = b.clone();
            move || {
                let b = b.clone();
                async move {
                    let p = b.acquire().await.expect("closed breaker admits");
                    p.record(Outcome::Success).await;
                }
            }
        };
        self.measure(name, tasks, &b, call)
    }

    /// Warms `call` up (connects, loads the script, fills the view), then runs it over
    /// `tasks` tasks, with the breaker's round trips and the server's script time.
    fn measure<F, Fut>(&self, name: &str, tasks: usize, b: &SharedBreaker, call: F) -> Row
    where
        F: Fn() -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let _ = run_tasks(&self.rt, self.warmup, 1, call.clone());
        self.rt.block_on(b.flush());
        let before = b.metrics();
        reset_stats(&self.rt, &self.admin);
        let (lat, wall) = run_tasks(&self.rt, self.calls, tasks, call);
        self.rt.block_on(b.flush());
        let after = b.metrics();
        let server = server_script_us(&self.rt, &self.admin);
        let server_us = server.map(|(x, y, _)| (x, y));
        let calls = lat.len();
        let mut note = notes(&before, &after);
        let outcomes = after.batched_outcomes - before.batched_outcomes;
        if let (Some((_, _, total)), true) = (server, outcomes > 0) {
            note.push_str(&format!(
                "; Redis {:.2} µs per call, {:.2} µs per batched outcome",
                total / calls as f64,
                total / outcomes as f64
            ));
        }
        Row {
            case: name.to_string(),
            tasks,
            calls,
            round_trips: Some((after.redis_calls - before.redis_calls) as f64 / calls as f64),
            lat,
            wall,
            server_us,
            note,
        }
    }

    fn open_case(&self, name: &str, shared: SharedConfig, tasks: usize) -> Row {
        let scope = format!("bench:{name}:{tasks}");
        let b = self.breaker(&scope, shared, true);
        // Trip it: ten failures on a count window of 20, minimum 10 calls, 50 %.
        self.rt.block_on(async {
            for _ in 0..10 {
                if let Ok(p) = b.acquire().await {
                    p.record(Outcome::Failure).await;
                }
            }
            b.flush().await;
        });
        let state = self.rt.block_on(b.refresh()).expect("refresh").state;
        assert_eq!(state, tripline::State::Open, "the breaker did not trip");
        let call = {
            let b = b.clone();
            move || {
                let b = b.clone();
                async move {
                    assert!(
                        b.acquire().await.is_err(),
                        "an open breaker admitted a call"
                    );
                }
            }
        };
        // (An open breaker buffers nothing: the flushes `measure` makes send nothing.)
        self.measure(name, tasks, &b, call)
    }

    fn redis_baseline(&self, name: &str, tasks: usize, kind: Baseline) -> Row {
        let conn = connect(&self.rt, &self.url);
        let script = Arc::new(redis::Script::new("return 1"));
        if kind == Baseline::Fcall {
            let _: String = self
                .rt
                .block_on(
                    redis::cmd("FUNCTION")
                        .arg("LOAD")
                        .arg("REPLACE")
                        .arg("#!lua name=bench\nredis.register_function('bench_one', function() return 1 end)")
                        .query_async(&mut conn.clone()),
                )
                .expect("FUNCTION LOAD");
        }
        let call = move || {
            let mut c = conn.clone();
            let script = script.clone();
            async move {
                match kind {
                    Baseline::Evalsha => {
                        let v: i64 = script.invoke_async(&mut c).await.expect("EVALSHA");
                        assert_eq!(v, 1);
                    }
                    Baseline::Fcall => {
                        let v: i64 = redis::cmd("FCALL")
                            .arg("bench_one")
                            .arg(0)
                            .query_async(&mut c)
                            .await
                            .expect("FCALL");
                        assert_eq!(v, 1);
                    }
                    Baseline::Ping => {
                        let v: String = redis::cmd("PING").query_async(&mut c).await.expect("PING");
                        assert_eq!(v, "PONG");
                    }
                }
            }
        };
        let _ = run_tasks(&self.rt, self.warmup, 1, call.clone());
        reset_stats(&self.rt, &self.admin);
        let (lat, wall) = run_tasks(&self.rt, self.calls, tasks, call);
        let server_us = if kind == Baseline::Ping {
            None
        } else {
            server_script_us(&self.rt, &self.admin).map(|(x, y, _)| (x, y))
        };
        Row {
            case: name.to_string(),
            tasks,
            calls: lat.len(),
            round_trips: Some(1.0),
            lat,
            wall,
            server_us,
            note: String::new(),
        }
    }

    fn in_process(&self) -> Row {
        let cb = CircuitBreaker::new("in-process", BreakerConfig::default());
        let mut lat = Vec::with_capacity(self.calls);
        for _ in 0..self.warmup {
            cb.try_acquire().expect("closed").record(Outcome::Success);
        }
        let start = Instant::now();
        for _ in 0..self.calls {
            let t = Instant::now();
            let p = cb.try_acquire().expect("closed");
            std::hint::black_box(p.record(Outcome::Success));
            lat.push(t.elapsed().as_nanos() as u64);
        }
        let wall = start.elapsed();
        lat.sort_unstable();
        Row {
            case: "in-process `tripline::CircuitBreaker` (baseline)".into(),
            tasks: 1,
            calls: lat.len(),
            round_trips: Some(0.0),
            lat,
            wall,
            server_us: None,
            note: String::new(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Baseline {
    Ping,
    Evalsha,
    Fcall,
}

/// Anything unusual in a case's counters: fallbacks, timeouts, errors, stale results.
fn notes(b: &tripline_redis::SharedMetrics, a: &tripline_redis::SharedMetrics) -> String {
    let mut out = Vec::new();
    let d = |x: u64, y: u64| y - x;
    let batches = d(b.batches, a.batches);
    if batches > 0 {
        out.push(format!(
            "{batches} batches, {:.0} outcomes each",
            d(b.batched_outcomes, a.batched_outcomes) as f64 / batches as f64
        ));
    }
    for (label, x, y) in [
        ("errors", b.redis_errors, a.redis_errors),
        ("timeouts", b.redis_timeouts, a.redis_timeouts),
        (
            "fallback decisions",
            b.fallback_decisions,
            a.fallback_decisions,
        ),
        ("lost records", b.lost_records, a.lost_records),
        ("stale", b.stale_results, a.stale_results),
    ] {
        if y > x {
            out.push(format!("{} {label}", y - x));
        }
    }
    out.join("; ")
}

fn main() {
    let calls: usize = tripline_bench::positional_args()
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(if tripline_bench::bench_mode() {
            20_000
        } else {
            500
        });
    let server = RedisServer::start().expect("redis-server (install redis-server)");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = server.url();
    let admin = connect(&rt, &url);
    let env = Env {
        rt,
        url,
        admin,
        calls: calls - calls % 16,
        warmup: (calls / 10).clamp(100, 2_000),
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "shared breaker in Redis: {} calls per case, loopback redis-server ({}), load average {}",
        env.calls,
        server
            .cli(&["INFO", "server"])
            .ok()
            .and_then(|s| s
                .lines()
                .find(|l| l.starts_with("redis_version:"))
                .map(|l| l.trim().to_string()))
            .unwrap_or_default(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );

    let exact0 = SharedConfig::builder()
        .time_source(TimeSource::Redis)
        .view_ttl(Duration::ZERO)
        .build()
        .expect("config");
    let exact = SharedConfig::builder()
        .time_source(TimeSource::Redis)
        .build()
        .expect("config");
    let batched = SharedConfig::builder()
        .time_source(TimeSource::Redis)
        .batching(Batching {
            flush_every: Duration::from_millis(10),
            max_batch: 256,
            success_wait: None,
        })
        .build()
        .expect("config");

    let mut rows = vec![env.in_process()];
    for tasks in [1, 16] {
        rows.push(env.redis_baseline("bare `PING` (baseline)", tasks, Baseline::Ping));
    }
    for tasks in [1, 16] {
        rows.push(env.redis_baseline(
            "`EVALSHA` of `return 1` (baseline)",
            tasks,
            Baseline::Evalsha,
        ));
    }
    rows.push(env.redis_baseline(
        "`FCALL` of a function returning 1 (baseline)",
        1,
        Baseline::Fcall,
    ));
    for tasks in [1, 16] {
        rows.push(env.closed_case("(a) exact, view_ttl 0", exact0.clone(), tasks));
    }
    for tasks in [1, 16] {
        rows.push(env.closed_case("(b) exact, view_ttl 100 ms", exact.clone(), tasks));
    }
    for tasks in [1, 16] {
        rows.push(env.closed_case("(c) batching 10 ms / 256", batched.clone(), tasks));
    }
    let lean = SharedConfig::builder()
        .time_source(TimeSource::Redis)
        .batching(Batching::lean())
        .build()
        .expect("config");
    rows.push(env.closed_case("(d) `Batching::lean()` (10 ms / 250 ms / 256)", lean, 1));
    // The same with a Redis timeout long enough that 16 batches pipelined on the one
    // connection (Redis answers them together, after running all of them) do not time out.
    let batched_patient = SharedConfig::builder()
        .time_source(TimeSource::Redis)
        .redis_timeout(Duration::from_secs(1))
        .batching(Batching {
            flush_every: Duration::from_millis(10),
            max_batch: 256,
            success_wait: None,
        })
        .build()
        .expect("config");
    rows.push(env.closed_case(
        "(c') batching 10 ms / 256, redis_timeout 1 s",
        batched_patient,
        16,
    ));
    for tasks in [1, 16] {
        rows.push(env.open_case("Open: rejection, view_ttl 100 ms", exact.clone(), tasks));
    }
    rows.push(env.open_case("Open: rejection, view_ttl 0", exact0, 1));
    print_table(&rows);
    drop(server);
}
