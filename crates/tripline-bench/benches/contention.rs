//! Aggregate throughput of 1 and 2 threads calling one shared breaker (closed: permit +
//! success; open: rejection), tripline's windows and stripes against the peers.
//!
//! `cargo bench -p tripline-bench --bench contention`; other thread counts with
//! `-- 1 2 4` or `TRIPLINE_BENCH_THREADS=1,2,4` (see also the `scaling` bench).

use tripline_bench::throughput::{Plan, standard_table, thread_counts};

fn main() {
    let plan = if tripline_bench::bench_mode() {
        Plan::BENCH
    } else {
        Plan::SMOKE
    };
    standard_table(&thread_counts(&[1, 2]), plan);
}
