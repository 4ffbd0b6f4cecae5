//! Scaling of aggregate throughput with the thread count, for machines with more cores:
//! `cargo bench -p tripline-bench --bench scaling -- 1 2 4 8 16`, or
//! `TRIPLINE_BENCH_THREADS=1,2,4,8,16 cargo bench -p tripline-bench --bench scaling`.
//! Without either it runs 1, 2, 4, ... up to the available CPUs (more threads than cores would
//! only measure the scheduler).

use tripline_bench::throughput::{Plan, standard_table, thread_counts};

fn main() {
    let plan = if tripline_bench::bench_mode() {
        Plan::BENCH
    } else {
        Plan::SMOKE
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut default: Vec<usize> = std::iter::successors(Some(1usize), |n| Some(n * 2))
        .take_while(|&n| n <= cpus)
        .collect();
    if default.last() != Some(&cpus) {
        default.push(cpus);
    }
    standard_table(&thread_counts(&default), plan);
}
