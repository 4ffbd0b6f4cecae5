//! `BreakerConfig` from TOML, as text or as a mutated real configuration: an accepted one
//! validates and round-trips through TOML and JSON.
#![no_main]
#![allow(dead_code, unfulfilled_lint_expectations)]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/tripline/tests/hostile/doc.rs"]
mod doc;
#[path = "../../crates/tripline/tests/hostile/checks.rs"]
mod checks;
use std::sync::LazyLock;

static SEEDS: LazyLock<Vec<toml::Table>> = LazyLock::new(|| doc::tables(&checks::breaker_seeds()));

fuzz_target!(|data: &[u8]| {
    doc::text_or_document(data, &SEEDS, checks::CONFIG_WORDS, checks::breaker_config)
});
