//! Fleet reaction: N replica processes (`fleet_replica`) call a dependency that starts failing
//! at one wall-clock instant T0; how many failed calls reach it, and how long until every
//! replica rejects, with one shared breaker in Redis against a local breaker per replica.
//!
//! Two traffic patterns, each for N = 4 and 12 and each mode (`shared`, `batched`, `lean`,
//! `local`):
//! *steady*, every replica calls every 2 ms (500 calls/s each); *sparse*, every replica calls
//! every 200 ms, so in the 1 s observed after T0 each replica sends exactly 5 calls (the
//! load balancer's share in the issue). Replicas' call instants are staggered evenly
//! (`PHASE = id × INTERVAL / N`), so the fleet calls every `INTERVAL / N`. Rules everywhere:
//! count window 20, minimum 10 calls, failure rate 50 %, open 30 s.
//!
//! `cargo bench -p tripline-bench --bench fleet` (about 30 s); `cargo test -p tripline-bench
//! --bench fleet` runs a short N = 4 smoke test.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig};

const REPLICA: &str = env!("CARGO_BIN_EXE_fleet_replica");

/// Time given to N processes to start and connect before T0 (they call, and succeed, meanwhile).
const WARMUP: Duration = Duration::from_millis(700);

struct Pattern {
    name: &'static str,
    interval: Duration,
    observe: Duration,
}

struct Run {
    pattern: &'static str,
    n: usize,
    mode: &'static str,
    lines: Vec<Value>,
    /// The fleet's first trip, ms after T0, from the events stream (shared modes).
    trip_ms: Option<f64>,
    wall: Duration,
}

fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn run(url: &str, p: &Pattern, n: usize, mode: &'static str, tag: &str) -> Run {
    let scope = format!("fleet:{tag}:{}:{n}:{mode}", p.name);
    let started = Instant::now();
    let t0 = unix_ms() + WARMUP.as_millis() as i64;
    let interval_us = p.interval.as_micros() as i64;
    let children: Vec<_> = (0..n)
        .map(|i| {
            let phase = interval_us * i as i64 / n as i64;
            Command::new(REPLICA)
                .args([
                    url,
                    &scope,
                    mode,
                    &format!("r{i}"),
                    &t0.to_string(),
                    &interval_us.to_string(),
                    &phase.to_string(),
                    &p.observe.as_millis().to_string(),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn fleet_replica")
        })
        .collect();
    let lines = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().expect("fleet_replica");
            assert!(out.status.success(), "fleet_replica failed: {}", out.status);
            let text = String::from_utf8_lossy(&out.stdout);
            serde_json::from_str(text.trim()).expect("one JSON line")
        })
        .collect();
    let wall = started.elapsed();
    let trip_ms = (mode != "local")
        .then(|| first_trip(url, &scope, t0))
        .flatten();
    Run {
        pattern: p.name,
        n,
        mode,
        lines,
        trip_ms,
        wall,
    }
}

/// When the fleet's breaker first opened, in ms after T0, from its events stream (Redis time).
fn first_trip(url: &str, scope: &str, t0_ms: i64) -> Option<f64> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let backend = Backend::single(url).ok()?;
        let reader = SharedBreaker::new(
            scope,
            tripline::BreakerConfig::default(),
            SharedConfig::default(),
            backend,
        )
        .ok()?;
        let events = reader.fleet_events(100).await.ok()?;
        events
            .iter()
            .filter(|e| e.to == tripline::State::Open)
            .map(|e| e.at_micros as f64 / 1000.0 - t0_ms as f64)
            .reduce(f64::min)
    })
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v[k].as_f64()
}

fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    Some(if xs.len() % 2 == 0 {
        (xs[m - 1] + xs[m]) / 2.0
    } else {
        xs[m]
    })
}

fn fmt_ms(x: Option<f64>) -> String {
    x.map_or("–".into(), |x| format!("{x:.1}"))
}

fn print_table(runs: &[Run]) {
    println!(
        "| traffic | N | mode | failed calls after onset (fleet) | per replica min–max | trip at ms | first reject ms, median / max | rejecting for good ms, median / max | replicas never rejecting for good | calls after onset | round trips/call before / after onset | fallbacks, timeouts |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in runs {
        let failed: Vec<u64> = r.lines.iter().map(|l| u(l, "failed_after_t0")).collect();
        let total: u64 = failed.iter().sum();
        let first: Vec<f64> = r
            .lines
            .iter()
            .filter_map(|l| f(l, "first_reject_ms"))
            .collect();
        let good: Vec<f64> = r
            .lines
            .iter()
            .filter_map(|l| f(l, "consistent_reject_ms"))
            .collect();
        let never = r.lines.len() - good.len();
        let max_first = if first.len() == r.lines.len() {
            first.iter().copied().reduce(f64::max)
        } else {
            None
        };
        let max_good = if never == 0 {
            good.iter().copied().reduce(f64::max)
        } else {
            None
        };
        // Local breakers: the trip of the last replica to trip (each trips on its own).
        let trip = match r.trip_ms {
            Some(t) => Some(t),
            None => {
                let opened: Vec<f64> = r.lines.iter().filter_map(|l| f(l, "saw_open_ms")).collect();
                if opened.len() == r.lines.len() {
                    opened.into_iter().reduce(f64::max)
                } else {
                    None
                }
            }
        };
        let calls_after: u64 = r.lines.iter().map(|l| u(l, "calls_after_t0")).sum();
        let calls: u64 = r.lines.iter().map(|l| u(l, "calls")).sum();
        let rts: u64 = r.lines.iter().map(|l| u(l, "redis_calls")).sum();
        let rts_before: u64 = r.lines.iter().map(|l| u(l, "redis_calls_before_t0")).sum();
        let calls_before = calls - calls_after;
        let fallbacks: u64 = r.lines.iter().map(|l| u(l, "fallback_decisions")).sum();
        let timeouts: u64 = r.lines.iter().map(|l| u(l, "redis_timeouts")).sum();
        let rejected_before: u64 = r.lines.iter().map(|l| u(l, "rejected_before_t0")).sum();
        let mut mode = r.mode.to_string();
        if rejected_before > 0 {
            mode.push_str(&format!(" ({rejected_before} rejected before T0!)"));
        }
        let trip_label = if r.mode == "local" {
            format!("{} (last replica)", fmt_ms(trip))
        } else {
            fmt_ms(trip)
        };
        println!(
            "| {} | {} | {} | **{}** | {}–{} | {} | {} / {} | {} / {} | {} | {} | {} | {}, {} |",
            r.pattern,
            r.n,
            mode,
            total,
            failed.iter().min().unwrap_or(&0),
            failed.iter().max().unwrap_or(&0),
            trip_label,
            fmt_ms(median(first.clone())),
            if first.len() == r.lines.len() {
                fmt_ms(max_first)
            } else {
                format!(
                    "never ({} of {})",
                    r.lines.len() - first.len(),
                    r.lines.len()
                )
            },
            fmt_ms(median(good.clone())),
            if never == 0 {
                fmt_ms(max_good)
            } else {
                "never".into()
            },
            never,
            calls_after,
            if r.mode == "local" {
                "0".to_string()
            } else {
                format!(
                    "{:.3} / {:.3}",
                    rts_before as f64 / calls_before.max(1) as f64,
                    (rts - rts_before) as f64 / calls_after.max(1) as f64
                )
            },
            fallbacks,
            timeouts,
        );
    }
}

fn main() {
    let bench = tripline_bench::bench_mode();
    let server = RedisServer::start().expect("redis-server (install redis-server)");
    let url = server.url();
    let tag = format!("{}", std::process::id());
    let patterns = [
        Pattern {
            name: "steady 2 ms",
            interval: Duration::from_millis(2),
            observe: Duration::from_millis(500),
        },
        Pattern {
            name: "sparse 200 ms",
            interval: Duration::from_millis(200),
            observe: Duration::from_millis(1000),
        },
    ];
    let sizes: &[usize] = if bench { &[4, 12] } else { &[4] };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "fleet reaction: replicas {}, load average {}",
        REPLICA,
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let started = Instant::now();
    let mut runs = Vec::new();
    for p in if bench { &patterns[..] } else { &patterns[..1] } {
        for &n in sizes {
            for mode in ["shared", "batched", "lean", "local"] {
                let r = run(&url, p, n, mode, &tag);
                if std::env::var_os("FLEET_VERBOSE").is_some() {
                    for l in &r.lines {
                        println!("{l}");
                    }
                }
                eprintln!(
                    "{} N={} {}: {:.1} s",
                    r.pattern,
                    r.n,
                    r.mode,
                    r.wall.as_secs_f64()
                );
                runs.push(r);
            }
        }
    }
    print_table(&runs);
    println!("total {:.1} s", started.elapsed().as_secs_f64());
    drop(server);
}
