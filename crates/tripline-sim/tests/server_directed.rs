//! The `hot-shard` scenario's server-directed column: one breaker for the dependency plus a
//! mini breaker for each shard the server blames (the real `tripline::registry::ServerDirected`)
//! refuses about as few healthy shards' calls as a breaker per shard, where the dependency-wide
//! breaker alone refuses most of them, and makes breakers only for the blamed shards.

use tripline_sim::{Report, RunReport, Scenario, simulate};

fn get<'a>(r: &'a Report, label: &str) -> &'a RunReport {
    r.run(label).unwrap_or_else(|| panic!("no run {label:?}"))
}

#[test]
fn server_directed_breakers_refuse_healthy_shards_as_little_as_per_shard_ones() {
    let r = simulate(&Scenario::load("hot-shard").unwrap(), None);
    let one = get(&r, "one breaker");
    let per_shard = get(&r, "per shard");
    let directed = get(&r, "server-directed");
    // The figures of BENCHMARKS.md and the README (seed 3).
    assert_eq!(one.rejected_while_healthy, 269_919);
    assert_eq!(per_shard.rejected_while_healthy, 131);
    assert_eq!(directed.rejected_while_healthy, 146);
    assert_eq!((per_shard.failed, directed.failed), (138, 160));
    // Near the per-shard figure, three orders of magnitude under the dependency-wide one.
    assert!(directed.rejected_while_healthy < 2 * per_shard.rejected_while_healthy);
    assert!(one.rejected_while_healthy > 1000 * directed.rejected_while_healthy);
    assert!(directed.succeeded as f64 > 0.99 * get(&r, "without").succeeded as f64);
    // What it costs: the dependency's breaker and one per blamed shard (3 and 11), where a
    // breaker per shard holds 20.
    let count = |run: &RunReport| run.policies.breaker.as_ref().map(|b| b.count);
    assert_eq!(count(directed), Some(3));
    assert_eq!(count(per_shard), Some(20));
    // The dependency-wide breaker never heard of the blamed failures: it never opened.
    assert_eq!(directed.breakers_tripped, 0);
}
