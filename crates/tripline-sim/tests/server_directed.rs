//! The `hot-shard` scenario's server-directed column: one breaker for the dependency plus a
//! mini breaker for each shard the server blames (the real `tripline::registry::ServerDirected`)
//! refuses about as few healthy shards' calls as a breaker per shard, where the dependency-wide
//! breaker alone refuses most of them, and makes breakers only for the blamed shards.

use std::sync::OnceLock;

use tripline::State;
use tripline_sim::{Report, RunReport, Scenario, simulate};

/// The `hot-shard` run, simulated once for every test of this file.
fn hot_shard() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| simulate(&Scenario::load("hot-shard").unwrap(), None))
}

fn get<'a>(r: &'a Report, label: &str) -> &'a RunReport {
    r.run(label).unwrap_or_else(|| panic!("no run {label:?}"))
}

#[test]
fn server_directed_breakers_refuse_healthy_shards_as_little_as_per_shard_ones() {
    let r = hot_shard();
    let one = get(r, "one breaker");
    let per_shard = get(r, "per shard");
    let directed = get(r, "server-directed");
    // The figures of BENCHMARKS.md and the README (seed 3).
    assert_eq!(one.rejected_while_healthy, 269_919);
    assert_eq!(per_shard.rejected_while_healthy, 131);
    assert_eq!(directed.rejected_while_healthy, 146);
    assert_eq!((per_shard.failed, directed.failed), (138, 160));
    // Near the per-shard figure, three orders of magnitude under the dependency-wide one.
    assert!(directed.rejected_while_healthy < 2 * per_shard.rejected_while_healthy);
    assert!(one.rejected_while_healthy > 1000 * directed.rejected_while_healthy);
    assert!(directed.succeeded as f64 > 0.99 * get(r, "without").succeeded as f64);
    // What it costs: the dependency's breaker and one per blamed shard (3 and 11), where a
    // breaker per shard holds 20.
    let count = |run: &RunReport| run.policies.breaker.as_ref().map(|b| b.count);
    assert_eq!(count(directed), Some(3));
    assert_eq!(count(per_shard), Some(20));
    // The dependency-wide breaker never heard of the blamed failures: it never opened.
    assert_eq!(directed.breakers_tripped, 0);
}

#[test]
fn the_report_shows_which_shard_breakers_opened_when_and_how_many_were_made() {
    let r = hot_shard();
    let directed = get(r, "server-directed");
    // The faults of the scenario: shards 3 and 11 fail every call from t = 60 s to 360 s.
    let shard_moves: Vec<_> = directed
        .transitions
        .iter()
        .filter(|t| t.shard.is_some())
        .collect();
    assert_eq!(shard_moves.len(), directed.transitions.len());
    assert_eq!(directed.transitions.len(), 122);
    let mut shards: Vec<u32> = shard_moves.iter().filter_map(|t| t.shard).collect();
    shards.sort_unstable();
    shards.dedup();
    assert_eq!(shards, [3, 11]);
    for shard in [3, 11] {
        let first = shard_moves.iter().find(|t| t.shard == Some(shard)).unwrap();
        assert_eq!((first.from, first.to), (State::Closed, State::Open));
        assert!(
            (60.0..61.0).contains(&first.at_s),
            "shard {shard} opened at {} s",
            first.at_s
        );
        assert_eq!(first.reason, "failure-rate");
    }
    assert!(
        directed
            .transitions
            .windows(2)
            .all(|w| w[0].at_s <= w[1].at_s),
        "in time order"
    );
    // The dependency and the two blamed shards' breakers; both shards' opened.
    assert_eq!(directed.shard_breakers(), Some((2, 2)));
    assert_eq!(get(r, "per shard").shard_breakers(), None);
    // The service tier's report shows them too.
    let service = directed.tiers.last().unwrap();
    assert_eq!(service.transitions, directed.transitions);

    let table = r.table();
    assert!(table.contains("shard breakers made (opened)"), "{table}");
    let row = table
        .lines()
        .find(|l| l.contains("shard breakers made (opened)"))
        .unwrap();
    assert!(row.trim_end().ends_with("2 (2)"), "{row}");
    let listing = table
        .split("server-directed: breaker transitions")
        .nth(1)
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        listing.contains("shard 11: closed → open (failure-rate)")
            && listing.contains("shard 3: closed → open (failure-rate)"),
        "{listing}"
    );

    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    let run = json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["label"] == "server-directed")
        .unwrap();
    let first = &run["transitions"][0];
    assert_eq!(first["to"], "open");
    assert!(
        [3, 11].contains(&first["shard"].as_u64().unwrap()),
        "{first}"
    );
}
