//! Hostile inputs to the `tripline` command, tried the way a careful user would.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs the binary with `args` in `dir`, its address space limited to `mem_kib` (through the
/// shell's `ulimit -v`), so that an unbounded allocation fails at once instead of taking the
/// machine. Returns (exit code, stdout, stderr); a code of `None` is a signal (an abort).
fn tripline_limited(dir: &Path, args: &[&str], mem_kib: u64) -> (Option<i32>, String, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {mem_kib}; exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_tripline"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("the binary runs");
    (
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
    let (code, out, err) = tripline_limited(
        &dir,
        &["replay", "far.jsonl", "--config", "tripline-default"],
        1 << 20,
    );
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
/// Promised: bad input gets a clear error naming the field, the value and what is allowed;
/// never a panic. Observed before: `tune` computed `want * 50` for its tries (want = budget /
/// 2), which overflowed: "attempt to multiply with overflow" (exit 101).
#[test]
fn tune_with_the_largest_budget_is_refused_by_name() {
    let dir = scratch("budget-max");
    small_trace(&dir);
    let (code, _out, err) = tripline_limited(
        &dir,
        &["tune", "small.jsonl", "--budget", "18446744073709551615"],
        1 << 21,
    );
    assert!(!err.contains("panicked"), "{code:?}: {err}");
    assert_ne!(code, Some(0));
    assert!(
        err.contains("budget") && err.contains("18446744073709551615") && err.contains("1000000"),
        "{err}"
    );
}

/// Steps: a space with one value per dimension (one candidate), searched with a budget of a
/// million.
///
/// Promised (README): "`--budget N`: candidates replayed", and a space with no more candidates
/// than the budget is replayed whole, each candidate once. Observed before: once every
/// candidate was seen, each batch still drew up to 50 × the batch's want (`budget / 2`)
/// genomes before giving up, so the run was linear in the budget, not in the space (2 s for a
/// budget of 10⁵, 22 s for 10⁶, minutes for 10⁷, for the same single candidate).
#[test]
fn tune_replays_a_small_space_whole_and_once_whatever_the_budget() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tripline::trace::{ReadOptions, read};
    use tripline_sim::replay::{ReplayOptions, prepare};
    use tripline_sim::tune::{Space, TuneOptions, tune};

    let dir = scratch("exhausted");
    small_trace(&dir);
    let trace = read(
        std::fs::File::open(dir.join("small.jsonl")).unwrap(),
        &ReadOptions::default(),
    )
    .unwrap();
    let prepared = prepare(&trace, &ReplayOptions::default()).unwrap();
    let one = Space::from_toml(
        "count_windows = [10]\ntime_windows = []\nminimum_calls = [5, 5]\n\
         failure_rate = [50.0, 50.0]\nslow_call_rate = [100.0, 100.0]\n\
         slow_call_duration = [\"1s\", \"1s\"]\nopen_duration = [\"1s\", \"1s\"]\n\
         half_open_calls = [1, 1]\npolicies = [\"consecutive\"]\n",
    )
    .unwrap();
    let replayed = AtomicU64::new(0);
    let opts = TuneOptions {
        budget: 1_000_000,
        ..TuneOptions::default()
    };
    let r = tune(&prepared, &one, &opts, &ReplayOptions::default(), &|n| {
        replayed.fetch_add(n, Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(
        replayed.load(Ordering::Relaxed),
        1,
        "one candidate, replayed once"
    );
    assert_eq!(r.evaluated, 1);

    // A space of a few candidates, a budget larger than it: each replayed exactly once.
    let few = Space::from_toml(
        "count_windows = [10, 20]\ntime_windows = []\nminimum_calls = [5, 10]\n\
         failure_rate = [50.0, 50.0]\nslow_call_rate = [100.0, 100.0]\n\
         slow_call_duration = [\"1s\", \"1s\"]\nopen_duration = [\"1s\", \"1s\"]\n\
         half_open_calls = [1, 1]\npolicies = [\"consecutive\"]\n",
    )
    .unwrap();
    replayed.store(0, Ordering::Relaxed);
    let r = tune(&prepared, &few, &opts, &ReplayOptions::default(), &|n| {
        replayed.fetch_add(n, Ordering::Relaxed);
    })
    .unwrap();
    let n = replayed.load(Ordering::Relaxed);
    assert!(
        (2..=8).contains(&n),
        "{n} replays of a space of 2 to 8 candidates"
    );
    assert_eq!(r.evaluated as u64, n, "each candidate once");
}
