//! The `tripline` command.

use std::process::Command;

fn tripline(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tripline"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn scenarios_lists_names_and_descriptions() {
    let (ok, out, _) = tripline(&["scenarios"]);
    assert!(ok);
    for name in [
        "fowler",
        "fraud-checkout",
        "gymfolks",
        "retry-storm",
        "hot-shard",
        "mercari",
        "gymfolks-cascade",
        "backoff-contention",
        "metastable",
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(name) && l.len() > name.len() + 10),
            "{out}"
        );
    }
}

#[test]
fn simulate_prints_the_table() {
    let (ok, out, err) = tripline(&["simulate", "fowler"]);
    assert!(ok, "{err}");
    assert!(out.contains("without") && out.contains("with"));
    assert!(out.contains("closed → open"));
    // No progress bar when stderr is not a terminal.
    assert!(err.is_empty(), "{err}");
}

#[test]
fn simulate_json_is_valid_and_seeded() {
    let (ok, out, err) = tripline(&["simulate", "fowler", "--json", "--seed", "9"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["seed"], 9);
    assert_eq!(v["runs"][1]["dependency_calls"], 33);
}

#[test]
fn unknown_scenario_lists_the_built_in_ones() {
    let (ok, out, err) = tripline(&["simulate", "fowlr"]);
    assert!(!ok);
    assert!(out.is_empty());
    assert!(err.contains("unknown scenario \"fowlr\""), "{err}");
    assert!(
        err.contains("fowler, fraud-checkout, gymfolks, gymfolks-cascade, retry-storm, hot-shard"),
        "{err}"
    );
    let (ok, _, err) = tripline(&["show", "nope"]);
    assert!(!ok);
    assert!(err.contains("gymfolks"), "{err}");
}

#[test]
fn show_prints_a_scenario_that_parses() {
    let (ok, out, _) = tripline(&["show", "gymfolks"]);
    assert!(ok);
    let s = tripline_sim::Scenario::from_toml(&out).unwrap();
    assert_eq!(s.service.replicas, 12);
}

#[test]
fn report_writes_html_and_svg() {
    let dir = std::env::temp_dir().join(format!("tripline-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("fowler.html");
    let svg = dir.join("fowler.svg");
    let (ok, _, err) = tripline(&["simulate", "fowler", "--report", html.to_str().unwrap()]);
    assert!(ok, "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!doctype html>") && page.contains("<svg"));
    let (ok, _, err) = tripline(&[
        "simulate",
        "fowler",
        "--json",
        "--report",
        svg.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_file_reports_line_and_field() {
    let dir = std::env::temp_dir().join(format!("tripline-cli-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "duration = \"10s\"\n[arrivals]\nrate = 5\n[[endpoints]]\nname = \"/x\"\n[dependency]\nlatency = \"5ms\"\nerror_rate = 7\n",
    )
    .unwrap();
    let (ok, _, err) = tripline(&["simulate", path.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("bad.toml"), "{err}");
    assert!(err.contains("line 8"), "{err}");
    assert!(err.contains("error_rate"), "{err}");
    assert!(err.contains("fraction in [0, 1]"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn scratch(name: &str) -> std::path::PathBuf {
    // A fresh directory of its own, whatever else runs (another run's leftovers, a reused pid).
    tempfile::Builder::new()
        .prefix(&format!("tripline-cli-{name}-"))
        .tempdir()
        .unwrap()
        .keep()
}

/// record → replay → tune → deploy: the trace from `simulate --trace`, a replay of it, and the
/// tuned TOML, which `BreakerConfig` and the registry read as is.
#[test]
fn simulate_trace_replay_and_tune() {
    let dir = scratch("trace");
    let trace = dir.join("fowler.jsonl");
    let (ok, out, err) = tripline(&["simulate", "fowler", "--trace", trace.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("closed → open"));
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.starts_with("{\"tripline_trace\":1"), "{text}");
    assert_eq!(text.lines().count(), 61);

    let team = dir.join("fowler.toml");
    std::fs::write(
        &team,
        "consecutive_failures = 3\nopen = { duration = \"10s\" }\nhalf_open = { permitted_calls = 1, policy = \"consecutive\" }\n",
    )
    .unwrap();
    let (ok, out, err) = tripline(&[
        "replay",
        trace.to_str().unwrap(),
        "--config",
        team.to_str().unwrap(),
        "--config",
        "resilience4j",
        "--seed",
        "4",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("fowler") && out.contains("resilience4j"),
        "{out}"
    );
    assert!(
        out.contains("t=     7.000 s: closed → open (consecutive-failures)"),
        "{out}"
    );
    let html = dir.join("replay.html");
    let (ok, out, err) = tripline(&[
        "replay",
        trace.to_str().unwrap(),
        "--config",
        team.to_str().unwrap(),
        "--json",
        "--report",
        html.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["configs"][0]["totals"]["trips"], 1);
    assert_eq!(v["configs"][0]["totals"]["rejected"], 27);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!doctype html>") && page.contains("<svg"));

    let tuned = dir.join("tuned.toml");
    // One call a second: a second's single outcome is enough for a verdict.
    let (ok, out, err) = tripline(&[
        "tune",
        trace.to_str().unwrap(),
        "--budget",
        "32",
        "--incident-min-calls",
        "1",
        "--out",
        tuned.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("Pareto front") && out.contains("chosen: #"),
        "{out}"
    );
    assert!(
        out.contains("incidents found: 1 (bad: failed, or at least 1 ms): 5.0 s – 37.0 s"),
        "{out}"
    );
    let text = std::fs::read_to_string(&tuned).unwrap();
    let config: tripline::BreakerConfig = toml::from_str(&text).unwrap();
    let registry = format!("[configs.service]\n{text}\n[dependencies]\nservice = \"service\"\n");
    let read = tripline::registry::RegistryConfig::from_toml(&registry).unwrap();
    let built = tripline::registry::RegistryConfig::default()
        .with_config("service", config)
        .with_dependency("service", "service");
    assert_eq!(read, built);
    // The tuned file is a configuration `replay` takes, too.
    let (ok, _, err) = tripline(&[
        "replay",
        trace.to_str().unwrap(),
        "--config",
        tuned.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_trace_names_the_line_and_field_and_skip_bad_lines_skips() {
    let dir = scratch("badtrace");
    let trace = dir.join("bad.csv");
    std::fs::write(
        &trace,
        "start,duration_ms,outcome\n0,5,success\n10,5,sucess\n20,5,failure\n",
    )
    .unwrap();
    let (ok, out, err) = tripline(&[
        "replay",
        trace.to_str().unwrap(),
        "--config",
        "resilience4j",
    ]);
    assert!(!ok);
    assert!(out.is_empty());
    assert!(err.contains("bad.csv"), "{err}");
    assert!(
        err.contains(
            "line 3: outcome must be one of success, failure, ignored, rejected, got \"sucess\""
        ),
        "{err}"
    );
    let (ok, out, err) = tripline(&[
        "replay",
        trace.to_str().unwrap(),
        "--config",
        "resilience4j",
        "--skip-bad-lines",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("1 bad lines skipped") && out.contains("2 calls"),
        "{out}"
    );
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let (ok, _, err) = tripline(&["tune", empty.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("the trace has no calls"), "{err}");
    let (ok, _, err) = tripline(&["replay", trace.to_str().unwrap(), "--config", "nope.toml"]);
    assert!(!ok);
    assert!(
        err.contains("nope.toml") && err.contains("resilience4j, tripline-default"),
        "{err}"
    );
    let (ok, _, err) = tripline(&[
        "simulate",
        "fowler",
        "--trace",
        "/tmp/x.jsonl",
        "--trace-run",
        "shared",
    ]);
    assert!(!ok);
    assert!(err.contains("\"with\""), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tune_shows_its_space_and_reads_one() {
    let (ok, out, err) = tripline(&["tune", "--show-space"]);
    assert!(ok, "{err}");
    let space = tripline_sim::tune::Space::from_toml(&out).unwrap();
    assert_eq!(space, tripline_sim::tune::Space::default());
    let dir = scratch("space");
    let path = dir.join("space.toml");
    std::fs::write(&path, "failure_rate = [50, 20]\n").unwrap();
    let (ok, _, err) = tripline(&["tune", "x.jsonl", "--space", path.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("failure_rate must be two percentages lo <= hi"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A trace of `secs` seconds at 100 calls a second, every call taking 5 ms, three in five
/// failing from `from` to `until` (none if they are equal), lines in end order.
fn generated_trace(path: &std::path::Path, secs: u64, incidents: &[(u64, u64)]) {
    let mut text = String::from("start,duration_ms,outcome\n");
    for i in 0..secs * 100 {
        let t = i * 10;
        let inside = incidents
            .iter()
            .any(|&(a, b)| (a * 1000..b * 1000).contains(&t));
        let outcome = if inside && i % 5 < 3 {
            "failure"
        } else {
            "success"
        };
        text.push_str(&format!("{t},5,{outcome}\n"));
    }
    std::fs::write(path, text).unwrap();
}

/// `tune` prints the incidents it found, chooses on the part before the split, and shows the
/// choice's figures on the held-out part beside the fit.
#[test]
fn tune_prints_the_incidents_and_the_held_out_figures() {
    let dir = scratch("tune-holdout");
    let trace = dir.join("two.csv");
    generated_trace(&trace, 300, &[(60, 90), (240, 270)]);
    let (ok, out, err) = tripline(&["tune", trace.to_str().unwrap(), "--budget", "32"]);
    assert!(ok, "{err}");
    assert!(
        out.contains(
            "incidents found: 2 (bad: failed, or at least 25 ms): 60.0 s – 90.0 s, 240.0 s – 270.0 s (held out)"
        ),
        "{out}"
    );
    assert!(out.contains("on the calls before 210.0 s"), "{out}");
    assert!(out.contains("held-out part (from 210.0 s)"), "{out}");
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("incidents tripped"))
        .unwrap();
    assert!(
        row.contains("1 of 1") && row.matches("1 of 1").count() == 2,
        "{row}"
    );
    let (ok, out, err) = tripline(&["tune", trace.to_str().unwrap(), "--budget", "32", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!((v["held_out_from_s"].as_f64().unwrap() - 210.0).abs() < 0.1);
    assert_eq!(v["held_out"]["totals"]["incidents"], 1);
    assert_eq!(v["incidents"].as_array().unwrap().len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Nothing learned, nothing written: a trace with no incident gets a loud warning and no
/// configuration.
#[test]
fn tune_on_a_trace_with_no_incident_warns_and_writes_nothing() {
    let dir = scratch("tune-quiet");
    let trace = dir.join("quiet.csv");
    generated_trace(&trace, 60, &[]);
    let out_file = dir.join("tuned.toml");
    let (ok, out, err) = tripline(&[
        "tune",
        trace.to_str().unwrap(),
        "--budget",
        "16",
        "--out",
        out_file.to_str().unwrap(),
    ]);
    assert!(!ok, "{out}");
    assert!(out.contains("incidents found: 0"), "{out}");
    assert!(err.contains("warning: NOTHING WAS LEARNED"), "{err}");
    assert!(err.contains("the trace holds no incident"), "{err}");
    assert!(!out_file.exists());
    assert!(!out.contains("cost 0"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--max-time-to-trip` that no candidate meets is an error that names the nearest, and no
/// configuration is written.
#[test]
fn tune_fails_naming_the_nearest_when_no_candidate_trips_in_time() {
    let dir = scratch("tune-unmet");
    let trace = dir.join("one.csv");
    generated_trace(&trace, 120, &[(30, 60)]);
    let out_file = dir.join("tuned.toml");
    let (ok, out, err) = tripline(&[
        "tune",
        trace.to_str().unwrap(),
        "--budget",
        "16",
        "--max-time-to-trip",
        "1ns",
        "--out",
        out_file.to_str().unwrap(),
    ]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("no candidate trips within 1ns in every incident"),
        "{err}"
    );
    assert!(err.contains("the nearest is #"), "{err}");
    assert!(err.contains("no configuration written"), "{err}");
    assert!(!out_file.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `simulate --trace` of a run that cannot be recorded leaves no file, and keeps one that was
/// there.
#[test]
fn a_trace_that_cannot_be_recorded_leaves_no_file() {
    let dir = scratch("notrace");
    let trace = dir.join("none.jsonl");
    let (ok, _, err) = tripline(&[
        "simulate",
        "retry-storm",
        "--trace",
        trace.to_str().unwrap(),
        "--trace-run",
        "TPS 10%",
    ]);
    assert!(!ok);
    assert!(err.contains("breaker"), "{err}");
    assert!(!trace.exists());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::write(&trace, "old").unwrap();
    let (ok, _, _) = tripline(&[
        "simulate",
        "fowler",
        "--trace",
        trace.to_str().unwrap(),
        "--trace-run",
        "nope",
    ]);
    assert!(!ok);
    assert_eq!(std::fs::read_to_string(&trace).unwrap(), "old");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A line out of end order is named by its line and the line it ends before, both quoted as
/// written, with no time counted from an origin that moved.
#[test]
fn an_out_of_order_line_is_named_without_a_moving_origin() {
    let dir = scratch("backwards");
    let trace = dir.join("late.csv");
    std::fs::write(
        &trace,
        "start,duration_ms,outcome\n5000,10,success\n6000,10,success\n3000,10,success\n",
    )
    .unwrap();
    let (ok, _, err) = tripline(&[
        "replay",
        trace.to_str().unwrap(),
        "--config",
        "resilience4j",
    ]);
    assert!(!ok);
    assert!(
        err.contains(
            "line 4 (`3000,10,success`): the call ends (start + duration_ms) 3000 ms before \
             the call of line 3 (`6000,10,success`) ends"
        ),
        "{err}"
    );
    assert!(!err.contains("-1"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A shortened gymfolks (eight runs) as a file, for the screen tests.
fn short_gymfolks(dir: &std::path::Path) -> std::path::PathBuf {
    let (ok, text, _) = tripline(&["show", "gymfolks"]);
    assert!(ok);
    let text = text
        .replace("duration = \"10m\"", "duration = \"150s\"")
        .replace("until = \"420s\"", "until = \"110s\"")
        .replace("rate = 1200.0", "rate = 300.0");
    let path = dir.join("gymfolks-short.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `tripline simulate` opens with the headline and lays the comparison out for the
/// terminal's width (`COLUMNS`): no line wider than it, every run in a group of columns
/// under the row labels; piped without `COLUMNS`, the full table is one.
#[test]
fn the_first_screen_fits_80_and_120_columns() {
    let dir = scratch("screen");
    let file = short_gymfolks(&dir);
    let labels = [
        "without",
        "with",
        "shared",
        "shared, 100ms view",
        "breaker + budget",
        "bulkhead 25",
        "adaptive limit",
        "shed by priority",
    ];
    for width in [80usize, 120] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tripline"))
            .args(["simulate", file.to_str().unwrap()])
            .env("COLUMNS", width.to_string())
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8(out.stdout).unwrap();
        for line in text.lines() {
            assert!(line.chars().count() <= width, "{width}: {line:?}");
        }
        let happened = text.find("What happened").expect("the headline");
        let requests = text.find("\n requests ").expect("the table");
        assert!(happened < requests, "{text}");
        assert!(text.contains("What each protection changed"), "{text}");
        // The comparison in groups of columns, each under the row labels again; every run
        // is in one.
        let groups = text.matches("\n requests ").count();
        assert!(groups >= 2, "{width}: {groups} groups\n{text}");
        let table = &text[requests - 400.min(requests)..];
        for label in labels {
            assert!(table.contains(label), "{width}: {label}");
        }
    }
    // Piped, with no COLUMNS: the full table, every run on the header line.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tripline"))
        .args(["simulate", file.to_str().unwrap()])
        .env_remove("COLUMNS")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("gymfolks — "), "{text}");
    assert!(text.contains("What happened: From 60 s to 110 s"), "{text}");
    let header = text
        .lines()
        .find(|l| l.trim_start().starts_with("without"))
        .unwrap();
    for label in labels {
        assert!(header.contains(label), "{header}");
    }
    assert_eq!(text.matches("\nrequests ").count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}
