//! Hostile scenario and tuning-space files, on stable in every CI run: arbitrary bytes and
//! mutated real files (10,000 cases each), checked for what must hold (`hostile/checks.rs`,
//! which the fuzz targets in `fuzz/` share), and the inputs the fuzzer found, each as a
//! named test.

#[path = "hostile/checks.rs"]
mod checks;
#[path = "../../tripline/tests/hostile/doc.rs"]
mod doc;

use doc::text_or_document;
use proptest::prelude::*;

static SCENARIO_SEEDS: std::sync::LazyLock<Vec<toml::Table>> =
    std::sync::LazyLock::new(|| doc::tables(&checks::scenario_seeds()));
static SPACE_SEEDS: std::sync::LazyLock<Vec<toml::Table>> =
    std::sync::LazyLock::new(|| doc::tables(&checks::space_seeds()));

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn an_accepted_scenario_keeps_the_simulators_bounds(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let seeds = &*SCENARIO_SEEDS;
        text_or_document(&data, seeds, checks::SCENARIO_WORDS, checks::scenario);
    }

    #[test]
    fn an_accepted_tuning_space_round_trips_through_its_toml(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let seeds = &*SPACE_SEEDS;
        text_or_document(&data, seeds, &["all-probes", "consecutive", "10s", "1h"], checks::space);
    }
}

/// A duration whose nanoseconds carry into a sum of `u64::MAX` seconds made humantime panic
/// in every scenario duration; it is refused as too large instead.
#[test]
fn a_duration_that_overflows_by_a_carry_is_refused_in_a_scenario() {
    const BAD: &str = "18446744073709551615s 1000000000ns";
    let scenario = |run: &str, latency: &str| {
        format!(
            "name = \"mini\"\nduration = \"{run}\"\n[arrivals]\nrate = 10.0\n[[endpoints]]\n\
             name = \"/a\"\nuses_dependency = true\n[dependency]\nlatency = \"{latency}\"\n"
        )
    };
    assert!(tripline_sim::Scenario::from_toml(&scenario("30s", "10ms")).is_ok());
    for text in [scenario(BAD, "10ms"), scenario("30s", BAD)] {
        let e = tripline_sim::Scenario::from_toml(&text).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
    }
}
