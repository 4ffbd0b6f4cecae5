//! One replica of the fleet-reaction benchmark (`benches/fleet.rs` starts N of them).
//!
//! ```text
//! fleet_replica REDIS_URL SCOPE MODE REPLICA_ID T0_UNIX_MS INTERVAL_US PHASE_US OBSERVE_MS
//! ```
//!
//! MODE is `shared` (a `tripline_redis::SharedBreaker`, exact mode, default `view_ttl`,
//! `TimeSource::Redis`), `batched` (the same with `Batching { flush_every: 10ms,
//! max_batch: 256 }`), `lean` (the same with `Batching::lean()`) or `local` (an in-process `tripline::CircuitBreaker`). Every mode uses the
//! same rules: count window 20, minimum 10 calls, failure rate 50 %, open 30 s.
//!
//! The replica makes one call at each instant `T0 + PHASE + k * INTERVAL` (wall clock, UNIX
//! time, so every replica agrees on T0) from its start until `T0 + OBSERVE`. The simulated
//! dependency answers at once: success before T0, failure from T0 on. At the end it prints one
//! JSON line: calls, failed calls that reached the dependency after T0, when (ms after T0) its
//! breaker first rejected a call, when it started rejecting every call until the end, and its
//! Redis counters.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tripline::{BreakerConfig, CircuitBreaker, Outcome, State};
use tripline_redis::{Backend, Batching, SharedBreaker, SharedConfig, TimeSource};

/// Wall-clock time in microseconds since the UNIX epoch.
fn unix_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn config() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(20)
        .minimum_calls(10)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(30))
        .build()
        .expect("breaker config")
}

enum Breaker {
    Shared(SharedBreaker),
    Local(CircuitBreaker),
}

impl Breaker {
    /// Makes one call to the dependency through the breaker; `None` when rejected, else
    /// whether the dependency failed.
    async fn call(&self, failing: bool) -> Option<bool> {
        let outcome = if failing {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        match self {
            Self::Shared(b) => {
                let permit = b.acquire().await.ok()?;
                permit.record(outcome).await;
            }
            Self::Local(b) => {
                let permit = b.try_acquire().ok()?;
                permit.record(outcome);
            }
        }
        Some(failing)
    }

    /// Script calls sent to Redis so far (0 for a local breaker).
    fn redis_calls(&self) -> u64 {
        match self {
            Self::Shared(b) => b.metrics().redis_calls,
            Self::Local(_) => 0,
        }
    }

    /// Whether this replica believes the breaker is open now (no round trip).
    fn open(&self) -> bool {
        match self {
            Self::Shared(b) => b.last_known_state() == Some(State::Open),
            Self::Local(b) => b.state() == State::Open,
        }
    }
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str) -> T {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("argument {i} ({name}) missing or invalid; see the docs"))
}

fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

fn opt_ms(us: Option<i64>) -> serde_json::Value {
    us.map_or(serde_json::Value::Null, |u| serde_json::json!(ms(u)))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url: String = arg(&args, 0, "redis url");
    let scope: String = arg(&args, 1, "scope");
    let mode: String = arg(&args, 2, "mode");
    let id: String = arg(&args, 3, "replica id");
    let t0_ms: i64 = arg(&args, 4, "T0 (UNIX ms)");
    let interval_us: i64 = arg(&args, 5, "interval (us)");
    let phase_us: i64 = arg(&args, 6, "phase (us)");
    let observe_ms: i64 = arg(&args, 7, "observe (ms)");
    assert!(interval_us > 0, "interval must be positive");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let t0 = t0_ms * 1000;
    let end = t0 + observe_ms * 1000;

    let breaker = {
        let _g = rt.enter();
        let shared = |batching: Option<Batching>| {
            let mut b = SharedConfig::builder()
                .time_source(TimeSource::Redis)
                .replica_id(id.clone());
            if let Some(batching) = batching {
                b = b.batching(batching);
            }
            let backend = Backend::single(&url).expect("backend");
            Breaker::Shared(
                SharedBreaker::new(&scope, config(), b.build().expect("shared config"), backend)
                    .expect("shared breaker"),
            )
        };
        match mode.as_str() {
            "shared" => shared(None),
            "batched" => shared(Some(Batching {
                flush_every: Duration::from_millis(10),
                max_batch: 256,
                success_wait: None,
            })),
            "lean" => shared(Some(Batching::lean())),
            "local" => Breaker::Local(CircuitBreaker::new(scope.clone(), config())),
            other => panic!("mode must be shared, batched, lean or local, not {other:?}"),
        }
    };

    let report = rt.block_on(async {
        // The first slot at or after now on this replica's grid.
        let start = unix_us();
        let mut k = (start - t0 - phase_us).div_euclid(interval_us) + 1;
        let (mut calls, mut before, mut rejected_before) = (0u64, 0u64, 0u64);
        let (mut after, mut failed_after, mut rejected_after) = (0u64, 0u64, 0u64);
        let mut first_reject: Option<i64> = None;
        let mut consistent_from: Option<i64> = None;
        let mut saw_open: Option<i64> = None;
        let mut max_late_us = 0i64;
        let mut call_us: Vec<i64> = Vec::new();
        let mut redis_calls_at_t0: Option<u64> = None;
        loop {
            let at = t0 + phase_us + k * interval_us;
            if at >= end {
                break;
            }
            let wait = at - unix_us();
            if wait > 0 {
                tokio::time::sleep(Duration::from_micros(wait as u64)).await;
            }
            let now = unix_us();
            max_late_us = max_late_us.max(now - at);
            let failing = now >= t0;
            if failing && redis_calls_at_t0.is_none() {
                redis_calls_at_t0 = Some(breaker.redis_calls());
            }
            let began = Instant::now();
            let result = breaker.call(failing).await;
            call_us.push(began.elapsed().as_micros() as i64);
            calls += 1;
            if failing {
                after += 1;
                match result {
                    Some(_) => {
                        failed_after += 1;
                        consistent_from = None;
                    }
                    None => {
                        rejected_after += 1;
                        first_reject.get_or_insert(now - t0);
                        consistent_from.get_or_insert(now - t0);
                    }
                }
                if saw_open.is_none() && breaker.open() {
                    saw_open = Some(unix_us() - t0);
                }
            } else {
                before += 1;
                if result.is_none() {
                    rejected_before += 1;
                }
            }
            k += 1;
        }
        let mut out = serde_json::json!({
            "replica": id,
            "mode": mode,
            "calls": calls,
            "calls_before_t0": before,
            "rejected_before_t0": rejected_before,
            "calls_after_t0": after,
            "failed_after_t0": failed_after,
            "rejected_after_t0": rejected_after,
            "first_reject_ms": opt_ms(first_reject),
            "consistent_reject_ms": opt_ms(consistent_from),
            "saw_open_ms": opt_ms(saw_open),
            "max_late_ms": ms(max_late_us),
            "redis_calls_before_t0": redis_calls_at_t0.unwrap_or_else(|| breaker.redis_calls()),
        });
        call_us.sort_unstable();
        if let Some(&p50) = call_us.get(call_us.len() / 2) {
            out["call_p50_us"] = serde_json::json!(p50);
        }
        if let Breaker::Shared(b) = &breaker {
            b.flush().await;
            let m = b.metrics();
            out["redis_calls"] = serde_json::json!(m.redis_calls);
            out["redis_timeouts"] = serde_json::json!(m.redis_timeouts);
            out["redis_errors"] = serde_json::json!(m.redis_errors);
            out["fallback_decisions"] = serde_json::json!(m.fallback_decisions);
            out["lost_records"] = serde_json::json!(m.lost_records);
            out["stale_results"] = serde_json::json!(m.stale_results);
            out["transitions"] = serde_json::json!(m.transitions);
        }
        out
    });
    println!("{report}");
}
