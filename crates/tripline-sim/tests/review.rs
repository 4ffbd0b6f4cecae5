//! Hostile inputs to the `tripline` command, tried the way a careful user would.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs the binary with `args` in `dir`, its address space limited to `mem_kib` (through the
/// shell's `ulimit -v`), and kills it if it is still running after `bound`: a correct run of
/// these inputs ends in well under a second, so the bound only turns a hang into a failure.
/// Returns (exited by itself, exit code, stdout, stderr).
fn tripline_bounded(
    dir: &Path,
    args: &[&str],
    mem_kib: u64,
    bound: Duration,
) -> (bool, Option<i32>, String, String) {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {mem_kib}; exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_tripline"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("the binary runs");
    let start = std::time::Instant::now();
    let finished = loop {
        if child.try_wait().expect("wait").is_some() {
            break true;
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    (
        finished,
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, text: &str) {
    let mut f = std::fs::File::create(dir.join(name)).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tripline-review-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Steps: a two-line JSON Lines trace, one key, relative starts 0 ms and 10¹² ms (about 32
/// years later; the reader accepts spans up to 290 years), then `tripline replay far.jsonl
/// --config tripline-default` with its address space limited to 1 GiB.
///
/// Promised (crates/tripline/src/trace/mod.rs): "Nothing the reader is given makes it panic",
/// and a replay of what the reader accepts is bounded (bad input gets a clear error naming the
/// field, the value and what is allowed; never unbounded memory).
/// Observed: incident detection (`replay::detect`) allocates two one-second bins per second of
/// the key's span, uncapped (10⁹ bins of 4 bytes, twice: 8 GB), so the process aborts with "memory
/// allocation ... failed" (SIGABRT) instead of replaying two calls or naming the span as too
/// long. The per-second series beside it is capped at 14 days; the bins are not.
#[test]
fn replay_of_a_trace_with_a_long_gap_is_bounded_in_memory() {
    let dir = scratch("far");
    write(
        &dir,
        "far.jsonl",
        "{\"start\": 0, \"duration_ms\": 10, \"outcome\": \"success\"}\n\
         {\"start\": 1000000000000, \"duration_ms\": 10, \"outcome\": \"success\"}\n",
    );
    let (finished, code, out, err) = tripline_bounded(
        &dir,
        &["replay", "far.jsonl", "--config", "tripline-default"],
        1 << 20,
        Duration::from_secs(60),
    );
    assert!(finished, "still running after 60 s: {err}");
    assert!(
        code.is_some(),
        "killed by a signal (out of memory): {}",
        err.lines().take(3).collect::<Vec<_>>().join(" | ")
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        code == Some(0) || err.contains("start") || err.contains("span"),
        "{code:?} {out} {err}"
    );
}

/// A 200-call trace, 50 ms apart, failing from call 100 to call 139.
fn small_trace(dir: &Path) {
    let text: String = (0..200)
        .map(|i| {
            let outcome = if (100..140).contains(&i) {
                "failure"
            } else {
                "success"
            };
            format!(
                "{{\"start\": {}, \"duration_ms\": 10, \"outcome\": \"{outcome}\"}}\n",
                i * 50
            )
        })
        .collect();
    write(dir, "small.jsonl", &text);
}

/// Steps: `tripline tune small.jsonl --budget 18446744073709551615` (a user asking for "as
/// many candidates as there are").
///
/// Promised: bad input gets a clear error naming the field, the value and what is allowed, or
/// the search stops when "the space is exhausted" (tune.rs); never a panic.
/// Observed: `tune` computes `want * 50` for its tries (want = budget / 2), which overflows:
/// "panicked at crates/tripline-sim/src/tune.rs: attempt to multiply with overflow" (exit 101).
#[test]
fn tune_with_the_largest_budget_does_not_panic() {
    let dir = scratch("budget-max");
    small_trace(&dir);
    let (finished, code, _out, err) = tripline_bounded(
        &dir,
        &["tune", "small.jsonl", "--budget", "18446744073709551615"],
        1 << 21,
        Duration::from_secs(60),
    );
    assert!(finished, "still running after 60 s");
    assert!(!err.contains("panicked"), "{code:?}: {err}");
}

/// Steps: a space file with one value per dimension (one candidate), then `tripline tune
/// small.jsonl --space one.toml --budget 10000000`.
///
/// Promised (README): "`--budget N`: candidates replayed", and tune.rs stops "the space is
/// exhausted"; a one-candidate space is searched in one replay.
/// Observed: once every candidate was seen, each batch still draws up to 50 × the batch's
/// want (`budget / 2`) genomes before giving up, so the run is linear in the budget, not in
/// the space: 2 s for a budget of 10⁵, 22 s for 10⁶ (debug build), minutes for 10⁷, for the
/// same single candidate.
#[test]
fn tune_stops_when_the_space_is_exhausted_whatever_the_budget() {
    let dir = scratch("exhausted");
    small_trace(&dir);
    write(
        &dir,
        "one.toml",
        "count_windows = [10]\ntime_windows = []\nminimum_calls = [5, 5]\n\
         failure_rate = [50.0, 50.0]\nslow_call_rate = [100.0, 100.0]\n\
         slow_call_duration = [\"1s\", \"1s\"]\nopen_duration = [\"1s\", \"1s\"]\n\
         half_open_calls = [1, 1]\npolicies = [\"consecutive\"]\n",
    );
    let (finished, code, _out, err) = tripline_bounded(
        &dir,
        &[
            "tune",
            "small.jsonl",
            "--space",
            "one.toml",
            "--budget",
            "10000000",
        ],
        1 << 21,
        Duration::from_secs(60),
    );
    assert!(
        finished,
        "a one-candidate space still being searched after 60 s"
    );
    assert_eq!(code, Some(0), "{err}");
}
