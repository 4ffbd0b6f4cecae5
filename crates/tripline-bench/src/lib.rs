//! Benchmarks for `tripline` against other circuit breakers.
//!
//! This library holds what every benchmark binary shares, so that each measures the same
//! thing: [`subjects`] builds the breakers under test (tripline and its peers, closed or
//! open), [`ops`] holds one call through each of them, and [`throughput`] runs an operation on
//! several threads at once. The binaries under `benches/` are:
//!
//! * `hot_path`: one call, closed (permit + success, call duration included) and open
//!   (rejection), every subject side by side, with clock and atomic baselines (divan).
//! * `hot_path_upkeep`: the open paths again with a `quanta::Upkeep` thread running, so the
//!   coarse clock (`Instant::recent`) is live (divan).
//! * `contention`: aggregate throughput of 1 and 2 threads hammering one breaker.
//! * `scaling`: the same for any thread counts (`-- 1 2 4 8 16`, or
//!   `TRIPLINE_BENCH_THREADS=1,2,4,8,16`).
//! * `memory`: allocations per call, allocator bytes per breaker and the resident-set check
//!   over two million transitions, with a counting global allocator.
//! * `instructions`: instructions per call under `valgrind --tool=callgrind`.
//! * `tower`, `registry`: the breaker as a tower layer, keyed breakers.
//! * `redis`: the shared breaker's round trips and latency per call against a throwaway
//!   `redis-server` (exact and batching modes), with `PING` and in-process baselines.
//! * `fleet`: fleet reaction with N replica processes (`fleet_replica`), shared, batched and
//!   local breakers.
//!
//! `cargo bench -p tripline-bench` runs them all.

use std::hint::black_box;

pub mod ops;
pub mod subjects;
pub mod throughput;

/// Whether the binary was started by `cargo bench` (which passes `--bench`), as opposed to
/// `cargo test --benches`, where the custom harnesses only do a quick smoke run.
pub fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// The positional arguments after the program name, without cargo's `--bench` flag and
/// without other flags.
pub fn positional_args() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect()
}

/// Runs `op` `n` times, keeping the optimiser from dropping the loop.
#[inline]
pub fn repeat(n: u64, mut op: impl FnMut()) {
    for _ in 0..black_box(n) {
        op();
    }
}

/// Calls `op` 10,000 times before a timed benchmark, so one-time work (a clock's
/// calibration, a thread's epoch registration, a lazily built structure) does not land in
/// the first sample, where it would make the harness pick a sample size of one call.
#[inline]
pub fn warm_up<O>(op: impl Fn() -> O) {
    for _ in 0..10_000 {
        black_box(op());
    }
}
