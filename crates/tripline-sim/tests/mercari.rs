//! The Mercari cascade ("When your circuit breaker backfires: outlier detection in Istio and
//! Envoy"): a bad deploy on 2 of 10 pods; outlier ejection without a cap
//! concentrates the traffic on the survivors until no pod serves, and Envoy's defaults (the
//! 10 % cap, the panic threshold) keep it bounded. The simulator drives the real detector and
//! balancer of `tripline_policies::outlier`.

use tripline_sim::hosts::HostsReport;
use tripline_sim::{Report, RunReport, Scenario, simulate};

fn get<'a>(r: &'a Report, label: &str) -> (&'a RunReport, &'a HostsReport) {
    let run = r.run(label).unwrap_or_else(|| panic!("no run {label:?}"));
    (run, run.hosts.as_ref().expect("a run with hosts"))
}

fn success(r: &RunReport) -> f64 {
    r.succeeded as f64 / r.requests as f64
}

#[test]
fn uncapped_ejection_loses_every_host_and_the_cap_keeps_90_percent() {
    let r = simulate(&Scenario::load("mercari").unwrap(), None);

    // Without outlier detection: the bad pods' errors reach users (half of 2 pods' share).
    let (without, h) = get(&r, "without");
    assert_eq!((h.max_ejected, h.ejections_enforced), (0, 0));
    assert_eq!(h.min_serving, 10);
    assert!(
        (0.9..0.96).contains(&success(without)),
        "{}",
        success(without)
    );

    // Ejection with no cap and no panic: the survivors saturate, time out, are ejected in turn,
    // until the last pods left take everything and no pod serves.
    let (uncapped, h) = get(&r, "eject, no cap");
    assert_eq!(h.max_ejected, 9, "all but the last host ejected");
    assert_eq!(h.min_serving, 0, "no host serving");
    assert!(h.no_host_serving_s >= 120, "{}", h.no_host_serving_s);
    assert!(h.ejections_overflow > 0, "only the last-host rule refused");
    assert!(success(uncapped) < 0.5, "{}", success(uncapped));
    let incident = r.incident.unwrap();
    let first_lost = h.series.iter().position(|b| b.serving == 0).unwrap() as f64;
    assert!(first_lost >= incident.start_s && first_lost < incident.start_s + 60.0);

    // The 10 % cap and the panic threshold: at most one pod out, the survivors keep serving.
    let (capped, h) = get(&r, "cap 10% + panic");
    assert!(success(capped) >= 0.90, "{}", success(capped));
    assert!(success(capped) > success(without));
    assert_eq!(h.max_ejected, 1);
    assert!(h.ejections_overflow > 0, "the cap refused ejections");
    assert!(h.min_serving >= 9, "{}", h.min_serving);
    assert_eq!(h.no_host_serving_s, 0);
    assert_eq!(capped.failed, capped.requests - capped.succeeded);

    // The panic threshold alone: ejections run away, then the balancer uses every pod again.
    let (panic, h) = get(&r, "no cap + panic");
    assert!(h.panic_s > 0);
    assert_eq!(h.max_ejected, 9);
    assert_eq!(
        h.no_host_serving_s, 0,
        "in panic the ejected hosts serve again"
    );
    assert!(success(panic) >= 0.90, "{}", success(panic));
    assert!(success(panic) < success(capped));
}

#[test]
fn the_table_and_the_charts_show_hosts_ejections_and_errors() {
    let mut s = Scenario::load("mercari").unwrap();
    s.duration = std::time::Duration::from_secs(90);
    let r = simulate(&s, None);
    let table = r.table();
    for row in [
        "most hosts ejected at once",
        "seconds with no host serving",
        "busiest host's peak load",
        "requests succeeded",
        "eject, no cap: ejections",
        "ejected (consecutive_5xx, 30 s)",
    ] {
        assert!(table.contains(row), "{row} missing from\n{table}");
    }
    let svg = tripline_sim::chart::svg(&r).unwrap();
    for panel in ["hosts ejected", "busiest host", "errors reaching users"] {
        assert!(svg.contains(panel), "{panel}");
    }
    let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    let h = &v["runs"][1]["hosts"];
    assert_eq!(h["count"], 10);
    assert_eq!(h["max_ejection_percent"], 100);
    assert!(h["events"][0]["rule"].is_string());
    assert!(h["calls_per_host"].as_array().unwrap().len() == 10);
    assert!(v["runs"][1]["breaker"].is_null());
    // Same seed, same figures.
    assert_eq!(r.to_json(), simulate(&s, None).to_json());
    for run in &r.runs {
        assert_eq!(
            run.requests,
            run.succeeded + run.failed + run.rejected_fast + run.shed
        );
        let calls: u64 = run.hosts.as_ref().unwrap().calls_per_host.iter().sum();
        assert_eq!(calls, run.dependency_calls);
    }
}

#[test]
fn host_fields_are_checked() {
    let base = Scenario::load("mercari")
        .map(|_| tripline_sim::builtin("mercari").unwrap())
        .unwrap();
    let bad = |from: &str, to: &str| {
        let src = base.replacen(from, to, 1);
        assert_ne!(src, base, "{from}");
        Scenario::from_toml(&src).unwrap_err()
    };
    let e = bad("hosts = [2, 7]", "hosts = [2, 10]");
    assert_eq!(e.field(), Some("dependency.faults[0].hosts"));
    assert!(
        e.to_string()
            .contains("below dependency.hosts.count (10), got 10"),
        "{e}"
    );
    let e = bad("max_ejection_percent = 100,", "max_ejection_percent = 150,");
    assert_eq!(
        e.field(),
        Some("protection[0].outlier.max_ejection_percent")
    );
    assert!(
        e.to_string().contains("must be in [0, 100], got 150"),
        "{e}"
    );
    let e = bad("count = 10", "count = 0");
    assert_eq!(e.field(), Some("dependency.hosts.count"));
    let e = bad("capacity = 8\n", "capacity = 8\nnope = 1\n");
    assert!(e.to_string().contains("unknown field `nope`"), "{e}");
    let e = bad("[dependency.hosts]", "capacity = 50\n[dependency.hosts]");
    assert_eq!(e.field(), Some("dependency.capacity"));
    // Outlier detection needs hosts.
    let no_hosts = base
        .replacen(
            "[dependency.hosts]\ncount = 10\ncapacity = 8\nbalance = \"round-robin\"\n",
            "",
            1,
        )
        .replacen("hosts = [2, 7]\n", "", 1);
    let e = Scenario::from_toml(&no_hosts).unwrap_err();
    assert_eq!(e.field(), Some("protection[0].outlier"));
}
