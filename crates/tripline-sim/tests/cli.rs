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
