//! Measures how fast a trace is read, replayed and tuned.
//!
//! ```text
//! cargo run --release -p tripline-sim --example replay_speed -- TRACE [BUDGET]
//! ```
//!
//! Reads the trace (timed), prepares it (sorting per key, incidents), replays the GymFolks
//! team's configuration and resilience4j's defaults on one thread five times each (the best
//! run counts), and runs `tune` with the budget given (default 256) on every core rayon
//! finds. Prints calls per second of one thread's replay and the tune's wall time.

use std::time::{Duration, Instant};

use tripline::BreakerConfig;
use tripline::trace::{ReadOptions, read_path};
use tripline_sim::replay::{Candidate, ReplayOptions, prepare, replay};
use tripline_sim::tune::{Space, TuneOptions, resilience4j_defaults, tune};

fn team() -> BreakerConfig {
    toml::from_str(
        r#"window = { kind = "count", size = 20 }
minimum_calls = 10
failure_rate_threshold = 50
slow_call_rate_threshold = 30
slow_call_duration = "2s"
open = { duration = "15s", jitter = "5s" }
half_open = { permitted_calls = 3, policy = "consecutive", probe_lease = "3s" }"#,
    )
    .expect("the team's configuration parses")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: replay_speed TRACE [BUDGET]");
        std::process::exit(2);
    };
    let budget: usize = args.next().and_then(|b| b.parse().ok()).unwrap_or(256);
    let t = Instant::now();
    let trace = match read_path(path.as_ref(), &ReadOptions::default()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let read = t.elapsed();
    let opts = ReplayOptions::default();
    let t = Instant::now();
    let prepared = prepare(&trace, &opts).expect("default detection options are valid");
    let prep = t.elapsed();
    let n = prepared.calls as f64;
    println!(
        "{} calls, {} key(s): read {:.2} s ({:.1} M lines/s), prepared {:.2} s",
        prepared.calls,
        prepared.keys().count(),
        read.as_secs_f64(),
        n / read.as_secs_f64() / 1e6,
        prep.as_secs_f64()
    );
    for c in [
        Candidate::new("team", team()),
        Candidate::new("resilience4j", resilience4j_defaults()),
    ] {
        let best = (0..5)
            .map(|_| {
                let t = Instant::now();
                let r = replay(&prepared, &c, &opts);
                std::hint::black_box(r);
                t.elapsed()
            })
            .min()
            .unwrap_or(Duration::MAX);
        println!(
            "replay {:<13} {:.3} s, {:.1} M calls/s on one thread",
            c.label,
            best.as_secs_f64(),
            n / best.as_secs_f64() / 1e6
        );
    }
    let t = Instant::now();
    let r = tune(
        &prepared,
        &Space::default(),
        &TuneOptions {
            budget,
            ..TuneOptions::default()
        },
        &opts,
        &|_| {},
    )
    .expect("the default space is valid");
    let wall = t.elapsed();
    println!(
        "tune: {} candidates in {:.2} s on {} thread(s) ({:.1} M calls/s in all); chosen #{}",
        r.evaluated,
        wall.as_secs_f64(),
        rayon::current_num_threads(),
        n * r.evaluated as f64 / wall.as_secs_f64() / 1e6,
        r.chosen.index
    );
}
