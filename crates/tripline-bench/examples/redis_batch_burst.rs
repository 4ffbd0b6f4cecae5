//! Reproduces the batching overload seen in `benches/redis.rs`: many tasks of one replica
//! filling 256-outcome batches faster than Redis applies them. Each full batch is sent at
//! once by the caller that filled it, so several batches are pipelined on the one
//! multiplexed connection; Redis answers a pipeline only after running all of it, and each
//! batch script takes milliseconds, so with enough tasks every reply arrives after the Redis
//! timeout (25 ms by default): the batches count as timeouts and lost records (although Redis
//! applied them), and the breaker on Redis opens for a second.
//!
//! `cargo run --release -p tripline-bench --example redis_batch_burst -- TASKS TIMEOUT_MS`
//! (default 16 tasks, 25 ms; try `-- 16 1000` and `-- 4 25`).

use std::time::{Duration, Instant};

use tripline::{BreakerConfig, Outcome};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, Batching, SharedBreaker, SharedConfig};

fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let tasks = arg(1, 16) as usize;
    let timeout = Duration::from_millis(arg(2, 25));
    let calls = 20_000 / tasks;
    let server = RedisServer::start().expect("redis-server");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let shared = SharedConfig::builder()
        .batching(Batching {
            flush_every: Duration::from_millis(10),
            max_batch: 256,
            success_wait: None,
        })
        .redis_timeout(timeout)
        .build()
        .expect("shared config");
    let backend = {
        let _g = rt.enter();
        Backend::single(&server.url()).expect("backend")
    };
    let b =
        SharedBreaker::new("burst", BreakerConfig::default(), shared, backend).expect("breaker");
    rt.block_on(async {
        for _ in 0..2_000 {
            let p = b.acquire().await.expect("closed");
            p.record(Outcome::Success).await;
        }
        b.flush().await;
        let before = b.metrics();
        let start = Instant::now();
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let b = b.clone();
                tokio::spawn(async move {
                    let mut slowest = Duration::ZERO;
                    for _ in 0..calls {
                        let t = Instant::now();
                        let p = b.acquire().await.expect("closed");
                        p.record(Outcome::Success).await;
                        slowest = slowest.max(t.elapsed());
                    }
                    slowest
                })
            })
            .collect();
        let mut slowest = Duration::ZERO;
        for h in handles {
            slowest = slowest.max(h.await.expect("task"));
        }
        b.flush().await;
        let after = b.metrics();
        println!(
            "{tasks} tasks × {calls} calls, redis_timeout {timeout:?}: {:.0} calls/s, slowest call {slowest:?}",
            (tasks * calls) as f64 / start.elapsed().as_secs_f64()
        );
        println!(
            "batches sent {}, timeouts {}, skipped (breaker on Redis open) {}, lost records {}",
            after.batches - before.batches,
            after.redis_timeouts - before.redis_timeouts,
            after.redis_skipped - before.redis_skipped,
            after.lost_records - before.lost_records
        );
    });
    let stats = server.cli(&["INFO", "commandstats"]).unwrap_or_default();
    if let Some(line) = stats.lines().find(|l| l.starts_with("cmdstat_evalsha:")) {
        println!("server: {}", line.trim());
    }
}
