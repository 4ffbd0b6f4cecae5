//! Instructions per call under `valgrind --tool=callgrind`, every subject.
//!
//! For each case the binary runs itself twice under callgrind, with collection toggled on only
//! inside `callgrind_measured` (a loop of N calls after a warm-up of 1,000), once with
//! N = 1,000 and once with N = 101,000; instructions per call are the difference divided by
//! 100,000, so the loop's entry and any one-time work cancel out.
//!
//! Instruction counts do not depend on the machine's load. Caveat: valgrind executes clock
//! reads its own way (no vDSO, a synthetic CPUID), so the clock's share differs from a native
//! run; the `tripline_count_manual_clock` case (a clock that is one atomic load) and the clock
//! baselines show how much of each figure is the clock. The `_coarse` cases set quanta's
//! coarse clock once (`quanta::set_recent`), which is what a running `quanta::Upkeep` thread
//! provides, so `Instant::recent` is one load instead of a precise reading.
//!
//! `cargo bench -p tripline-bench --bench instructions` (needs `valgrind` on the `PATH`; under
//! `cargo test --benches` it only runs each case natively, briefly).

use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use tripline_bench::{ops, subjects};

const SHORT: u64 = 1_000;
const LONG: u64 = 101_000;

/// The case names, in report order.
const CASES: &[&str] = &[
    "closed/tripline_count_in_flight_on",
    "closed/tripline_count_in_flight_off",
    "closed/tripline_count_call",
    "closed/tripline_count_owned_permit",
    "closed/tripline_count_manual_clock",
    "closed/tripline_count_manual_clock_in_flight_off",
    "closed/tripline_count_precise",
    "closed/tripline_count_failure_rate_only",
    "closed/tripline_count_coarse_clock",
    "closed/tripline_count_held_quanta_clock",
    "closed/tripline_count_call_durations",
    "closed/tripline_count_call_durations_tuned",
    "closed/tripline_count_explicit_duration",
    "closed/tripline_count_stripes_4",
    "closed/tripline_count_stripes_4_in_flight_off",
    "closed/tripline_time_in_flight_on",
    "closed/tripline_time_in_flight_off",
    "closed/tripline_time_stripes_4",
    "closed/recloser",
    "closed/failsafe",
    "open/tripline_tripped",
    "open/tripline_tripped_owned_name",
    "open/tripline_forced_open",
    "open/tripline_tripped_coarse",
    "open/tripline_forced_open_coarse",
    "open/recloser",
    "open/failsafe",
    "baseline/std_instant_now",
    "baseline/quanta_instant_now",
    "baseline/quanta_clock_now",
    "baseline/atomic_fetch_add",
];

/// Callgrind collects only while this function runs; it runs the measured loop once.
#[inline(never)]
fn callgrind_measured(measured: &mut dyn FnMut()) {
    measured();
}

/// Builds the subject of `case`, warms it up, and runs `n` measured calls.
fn run_case(case: &str, n: u64) {
    fn go<F: FnMut()>(n: u64, mut op: F) {
        for _ in 0..1000 {
            op();
        }
        // A monomorphic inner loop, so the call is inlined as in the other benchmarks; the
        // toggled function only wraps it.
        let mut measured = move || {
            for _ in 0..black_box(n) {
                op();
            }
        };
        callgrind_measured(&mut measured);
    }
    match case {
        "closed/tripline_count_in_flight_on" => {
            let b = subjects::tripline_count(true);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_in_flight_off" => {
            let b = subjects::tripline_count(false);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_call" => {
            let b = subjects::tripline_count(true);
            go(n, || ops::tripline_call(&b));
        }
        "closed/tripline_count_owned_permit" => {
            let b = subjects::tripline_count(true);
            go(n, || ops::tripline_owned_permit_success(&b));
        }
        "closed/tripline_count_manual_clock" => {
            let b = subjects::tripline_count_manual(true);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_manual_clock_in_flight_off" => {
            let b = subjects::tripline_count_manual(false);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_precise" => {
            let b = subjects::tripline_count_precise(true);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_failure_rate_only" => {
            let b = subjects::tripline_count_failure_rate_only();
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_coarse_clock" => {
            // After the breaker's clock exists: a coarse reading older than its origin
            // falls back to a precise one.
            let b = subjects::tripline_count_coarse(true);
            quanta::set_recent(quanta::Instant::now());
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_held_quanta_clock" => {
            let b = subjects::tripline_count_held(true);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_call_durations" => {
            let b = subjects::tripline_count_durations(false);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_call_durations_tuned" => {
            let b = subjects::tripline_count_durations(true);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_explicit_duration" => {
            let b = subjects::tripline_count(true);
            go(n, || ops::tripline_permit_success_timed(&b));
        }
        "closed/tripline_count_stripes_4" => {
            let b = subjects::tripline_count_striped(4, true);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_count_stripes_4_in_flight_off" => {
            let b = subjects::tripline_count_striped(4, false);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_time_in_flight_on" => {
            let b = subjects::tripline_time(1, true);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_time_in_flight_off" => {
            let b = subjects::tripline_time(1, false);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/tripline_time_stripes_4" => {
            let b = subjects::tripline_time(4, true);
            go(n, || ops::tripline_permit_success(&b));
        }
        "closed/recloser" => {
            let r = subjects::recloser_closed();
            go(n, || ops::recloser_success(&r));
        }
        "closed/failsafe" => {
            let cb = subjects::failsafe_closed();
            go(n, || ops::failsafe_success(&cb));
        }
        "open/tripline_tripped" => {
            let b = subjects::tripline_open();
            go(n, || ops::tripline_reject(&b));
        }
        "open/tripline_tripped_owned_name" => {
            let b = subjects::tripline_open_owned_name();
            go(n, || ops::tripline_reject(&b));
        }
        "open/tripline_forced_open" => {
            let b = subjects::tripline_forced_open();
            go(n, || ops::tripline_reject(&b));
        }
        "open/tripline_tripped_coarse" => {
            // After the breaker's clock exists: a coarse reading older than its origin
            // falls back to a precise one.
            let b = subjects::tripline_open();
            quanta::set_recent(quanta::Instant::now());
            go(n, || ops::tripline_reject(&b));
        }
        "open/tripline_forced_open_coarse" => {
            // After the breaker's clock exists: a coarse reading older than its origin
            // falls back to a precise one.
            let b = subjects::tripline_forced_open();
            quanta::set_recent(quanta::Instant::now());
            go(n, || ops::tripline_reject(&b));
        }
        "open/recloser" => {
            let r = subjects::recloser_open();
            go(n, || ops::recloser_reject(&r));
        }
        "open/failsafe" => {
            let cb = subjects::failsafe_open();
            go(n, || ops::failsafe_reject(&cb));
        }
        "baseline/std_instant_now" => go(n, || {
            black_box(std::time::Instant::now());
        }),
        "baseline/quanta_instant_now" => go(n, || {
            black_box(quanta::Instant::now());
        }),
        "baseline/quanta_clock_now" => {
            let clock = quanta::Clock::new();
            go(n, || {
                black_box(clock.now());
            });
        }
        "baseline/atomic_fetch_add" => {
            let a = AtomicU64::new(0);
            go(n, || {
                black_box(a.fetch_add(1, Ordering::Relaxed));
            });
        }
        other => panic!("unknown case {other}"),
    }
}

/// Total instructions collected by one callgrind run of `case` with `n` calls.
fn callgrind_total(case: &str, n: u64) -> Result<u64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out_file = std::env::temp_dir().join(format!(
        "tripline-callgrind-{}-{}-{n}.out",
        std::process::id(),
        case.replace('/', "-")
    ));
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg("--toggle-collect=*callgrind_measured*")
        .arg(format!("--callgrind-out-file={}", out_file.display()))
        .arg(exe)
        .args(["callgrind-child", case, &n.to_string()])
        .output()
        .map_err(|e| format!("cannot run valgrind: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let text = std::fs::read_to_string(&out_file).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&out_file);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| "no totals in the callgrind output".to_string())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("callgrind-child") {
        let n = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(SHORT);
        run_case(&args[2], n);
        return;
    }
    if !tripline_bench::bench_mode() {
        for case in CASES {
            run_case(case, 10);
        }
        println!("instructions: smoke run of {} cases done", CASES.len());
        return;
    }
    if Command::new("valgrind").arg("--version").output().is_err() {
        println!("instructions: valgrind not found on the PATH; skipped");
        return;
    }
    println!(
        "instructions per call (callgrind Ir, ({LONG} − {SHORT} calls) / {})\n",
        LONG - SHORT
    );
    println!("| case | Ir/call |\n|---|---|");
    for case in CASES {
        match (callgrind_total(case, SHORT), callgrind_total(case, LONG)) {
            (Ok(a), Ok(b)) => {
                let per = (b as f64 - a as f64) / (LONG - SHORT) as f64;
                println!("| {case} | {per:.1} |");
            }
            (Err(e), _) | (_, Err(e)) => println!("| {case} | failed: {} |", e.trim()),
        }
    }
}
