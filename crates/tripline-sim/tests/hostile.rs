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
