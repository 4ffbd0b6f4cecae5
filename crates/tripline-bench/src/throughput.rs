//! Aggregate throughput of several threads calling one shared breaker.
//!
//! Every thread runs the same operation in batches between looks at a stop flag; the figure is
//! all threads' calls divided by the wall time from the common start to the last thread's
//! stop. A run is repeated and the median kept.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Calls between two looks at the stop flag.
const BATCH: u64 = 256;

/// How long one measured run lasts, how long the warm-up, and how many runs.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Duration of one measured run.
    pub run: Duration,
    /// Duration of the unmeasured warm-up run before the first measured one.
    pub warm_up: Duration,
    /// Measured runs; the median is reported.
    pub runs: usize,
}

impl Plan {
    /// The plan for `cargo bench`: 5 runs of 1 s after a 300 ms warm-up.
    pub const BENCH: Plan = Plan {
        run: Duration::from_secs(1),
        warm_up: Duration::from_millis(300),
        runs: 5,
    };

    /// A smoke run for `cargo test --benches`: one run of 10 ms.
    pub const SMOKE: Plan = Plan {
        run: Duration::from_millis(10),
        warm_up: Duration::from_millis(1),
        runs: 1,
    };
}

/// One thread count's result.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Threads calling at once.
    pub threads: usize,
    /// Median aggregate calls per second over the runs.
    pub ops_per_sec: f64,
    /// Lowest and highest aggregate calls per second over the runs.
    pub range: (f64, f64),
}

/// Runs `op` on `threads` threads at once for `duration` and returns the aggregate calls per
/// second.
pub fn run_once<F: Fn() + Sync>(threads: usize, duration: Duration, op: &F) -> f64 {
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let mut n = 0u64;
                    loop {
                        for _ in 0..BATCH {
                            op();
                        }
                        n += BATCH;
                        if stop.load(Ordering::Relaxed) {
                            return (n, Instant::now());
                        }
                    }
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let mut total = 0u64;
        let mut last = start;
        for w in workers {
            let (n, end) = w.join().expect("benchmark thread panicked");
            total += n;
            last = last.max(end);
        }
        total as f64 / last.duration_since(start).as_secs_f64()
    })
}

/// Runs `op` on `threads` threads by `plan` and returns the median (and range) of the runs.
pub fn measure<F: Fn() + Sync>(threads: usize, plan: Plan, op: &F) -> Sample {
    run_once(threads, plan.warm_up, op);
    let mut runs: Vec<f64> = (0..plan.runs.max(1))
        .map(|_| run_once(threads, plan.run, op))
        .collect();
    runs.sort_by(f64::total_cmp);
    Sample {
        threads,
        ops_per_sec: runs[runs.len() / 2],
        range: (runs[0], runs[runs.len() - 1]),
    }
}

/// Thread counts asked for on the command line (`-- 1 2 4`), else in `TRIPLINE_BENCH_THREADS`
/// (`1,2,4`), else `default`.
pub fn thread_counts(default: &[usize]) -> Vec<usize> {
    let from_args: Vec<usize> = crate::positional_args()
        .iter()
        .filter_map(|a| a.parse().ok())
        .filter(|&n| n > 0)
        .collect();
    if !from_args.is_empty() {
        return from_args;
    }
    if let Ok(v) = std::env::var("TRIPLINE_BENCH_THREADS") {
        let from_env: Vec<usize> = v
            .split(',')
            .filter_map(|s| s.trim().parse().ok())
            .filter(|&n| n > 0)
            .collect();
        if !from_env.is_empty() {
            return from_env;
        }
    }
    default.to_vec()
}

/// Formats calls per second in millions.
pub fn mops(ops_per_sec: f64) -> String {
    format!("{:.1}", ops_per_sec / 1e6)
}

/// Measures one case at one thread count.
pub type Runner<'a> = dyn Fn(usize, Plan) -> Sample + Sync + 'a;

/// A named case of a throughput table.
pub struct Case<'a> {
    /// The row's name.
    pub name: String,
    /// Measures the case at a thread count.
    pub run: Box<Runner<'a>>,
}

impl std::fmt::Debug for Case<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<'a> Case<'a> {
    /// A case calling `op` on every thread.
    pub fn new<F: Fn() + Sync + 'a>(name: impl Into<String>, op: F) -> Self {
        Self {
            name: name.into(),
            run: Box::new(move |threads, plan| measure(threads, plan, &op)),
        }
    }
}

/// Measures every case at every thread count and prints one markdown table: median Mops/s
/// per thread count (with the spread over the runs), and each count's ratio to the first.
pub fn table(cases: &[Case<'_>], threads: &[usize], plan: Plan) {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "aggregate throughput, median of {} run(s) of {:?}, Mops/s [min-max] (×: ratio to the first column); {} CPU(s) available",
        plan.runs, plan.run, cpus
    );
    let mut header = String::from("| case |");
    let mut rule = String::from("|---|");
    for t in threads {
        header.push_str(&format!(" {t} thr |"));
        rule.push_str("---|");
    }
    println!("{header}\n{rule}");
    // TRIPLINE_BENCH_CASES=a,b measures only the cases whose names contain `a` or `b`.
    let only = std::env::var("TRIPLINE_BENCH_CASES").unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || only.split(',').any(|p| name.contains(p.trim()));
    for case in cases.iter().filter(|c| wanted(&c.name)) {
        let mut row = format!("| {} |", case.name);
        let mut first = None;
        for &t in threads {
            let s = (case.run)(t, plan);
            let base = *first.get_or_insert(s.ops_per_sec);
            row.push_str(&format!(
                " {} [{}-{}] ×{:.2} |",
                mops(s.ops_per_sec),
                mops(s.range.0),
                mops(s.range.1),
                s.ops_per_sec / base
            ));
        }
        println!("{row}");
    }
}

/// Measures the standard cases (two baselines that bound scaling: a clock read that shares
/// nothing and an increment of one shared counter; tripline's windows with and without
/// in-flight counting, its stripes, the open path; and the peers) at each thread count and
/// prints the table.
pub fn standard_table(threads: &[usize], plan: Plan) {
    use crate::{ops, subjects};

    let count_on = subjects::tripline_count(true);
    let count_off = subjects::tripline_count(false);
    // One stripe per thread at the largest count measured (16 on a 16-core machine).
    let most = threads.iter().copied().max().unwrap_or(1);
    let mut stripe_counts = vec![1, 2, 4];
    if most > 4 {
        stripe_counts.push(u32::try_from(most.min(64)).unwrap_or(64));
    }
    let counted: Vec<_> = stripe_counts
        .iter()
        .filter(|&&s| s > 1)
        .flat_map(|&s| [(s, true), (s, false)])
        .map(|(s, f)| (s, f, subjects::tripline_count_striped(s, f)))
        .collect();
    let time: Vec<_> = stripe_counts
        .into_iter()
        .flat_map(|s| [(s, true), (s, false)])
        .map(|(s, f)| (s, f, subjects::tripline_time(s, f)))
        .collect();
    let open = subjects::tripline_open();
    let open_striped = subjects::tripline_time(4, true);
    open_striped.trip();
    let open_owned = subjects::tripline_open_owned_name();
    let rec_closed = subjects::recloser_closed();
    let rec_open = subjects::recloser_open();
    let fs_closed = subjects::failsafe_closed();
    let fs_open = subjects::failsafe_open();

    let shared = std::sync::atomic::AtomicU64::new(0);
    let mut cases = vec![
        Case::new("baseline: quanta::Instant::now (nothing shared)", || {
            std::hint::black_box(quanta::Instant::now());
        }),
        Case::new("baseline: fetch_add on one shared AtomicU64", || {
            std::hint::black_box(shared.fetch_add(1, Ordering::Relaxed));
        }),
        Case::new("tripline count 100, in-flight on", || {
            ops::tripline_permit_success(&count_on)
        }),
        Case::new("tripline count 100, in-flight off", || {
            ops::tripline_permit_success(&count_off)
        }),
    ];
    for (stripes, in_flight, b) in &counted {
        let on = if *in_flight { "on" } else { "off" };
        cases.push(Case::new(
            format!("tripline count 100, stripes {stripes}, in-flight {on}"),
            move || ops::tripline_permit_success(b),
        ));
    }
    for (stripes, in_flight, b) in &time {
        let on = if *in_flight { "on" } else { "off" };
        cases.push(Case::new(
            format!("tripline time 10×1 s, stripes {stripes}, in-flight {on}"),
            move || ops::tripline_permit_success(b),
        ));
    }
    let (_, _, time4_off) = time
        .iter()
        .find(|(s, f, _)| *s == 4 && !*f)
        .expect("the 4-stripe time window without in-flight counting");
    cases.push(Case::new(
        "tripline time 10×1 s, stripes 4, in-flight off, owned permit",
        move || ops::tripline_owned_permit_success(time4_off),
    ));
    cases.extend([
        Case::new("recloser closed (ring 100)", || {
            ops::recloser_success(&rec_closed)
        }),
        Case::new("failsafe closed (default policy)", || {
            ops::failsafe_success(&fs_closed)
        }),
        Case::new("tripline open: rejection", || ops::tripline_reject(&open)),
        Case::new("tripline open: rejection, stripes 4", || {
            ops::tripline_reject(&open_striped)
        }),
        Case::new("tripline open: rejection, String name", || {
            ops::tripline_reject(&open_owned)
        }),
        Case::new("recloser open: rejection", || {
            ops::recloser_reject(&rec_open)
        }),
        Case::new("failsafe open: rejection", || {
            ops::failsafe_reject(&fs_open)
        }),
    ]);
    table(&cases, threads, plan);
}
