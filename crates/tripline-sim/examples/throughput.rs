//! Measures the simulator's speed on every built-in scenario.
//!
//! ```text
//! cargo run --release -p tripline-sim --example throughput
//! ```
//!
//! For each scenario: the wall time of a full simulation (all variants, in parallel, as the
//! `tripline` command runs them), the requests and the dependency calls simulated (summed over
//! the runs), and the rates: calls (requests plus dependency calls) and requests per second of
//! wall time, in parallel and with one variant at a time on one thread. A scenario's sweep is
//! left out: these are the runs of its main table.

use std::time::Instant;

use tripline_sim::{Scenario, scenario::BUILTIN, simulate, simulate_variant};

fn main() {
    println!(
        "{:<19} {:>8} {:>10} {:>10} | {:>13} {:>13} | {:>13} {:>13}",
        "scenario",
        "wall",
        "requests",
        "dep calls",
        "calls/s",
        "requests/s",
        "1-thr calls/s",
        "1-thr req/s"
    );
    for (name, _) in BUILTIN {
        let mut scenario = Scenario::load(name).expect("built-in scenarios parse");
        scenario.sweep = None;
        let t = Instant::now();
        let report = simulate(&scenario, None);
        let wall = t.elapsed().as_secs_f64();
        let requests: u64 = report.runs.iter().map(|r| r.requests).sum();
        let dep: u64 = report.runs.iter().map(|r| r.dependency_calls).sum();

        let t = Instant::now();
        let variants = std::iter::once(None).chain((0..scenario.protection.len()).map(Some));
        let runs: Vec<_> = variants
            .filter_map(|v| simulate_variant(&scenario, v, None))
            .collect();
        let single = t.elapsed().as_secs_f64();
        assert_eq!(runs.iter().map(|r| r.requests).sum::<u64>(), requests);

        let calls = (requests + dep) as f64;
        println!(
            "{:<19} {:>7.3}s {:>10} {:>10} | {:>13.0} {:>13.0} | {:>13.0} {:>13.0}",
            name,
            wall,
            requests,
            dep,
            calls / wall,
            requests as f64 / wall,
            calls / single,
            requests as f64 / single,
        );
    }
}
