//! A tuning space (TOML), as text or as a mutated default: an accepted one round-trips
//! through the TOML `tripline tune --show-space` prints.
#![no_main]
#![allow(dead_code, unfulfilled_lint_expectations)]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/tripline/tests/hostile/doc.rs"]
mod doc;
#[path = "../../crates/tripline-sim/tests/hostile/checks.rs"]
mod sim;
use std::sync::LazyLock;

static SEEDS: LazyLock<Vec<toml::Table>> = LazyLock::new(|| doc::tables(&sim::space_seeds()));

fuzz_target!(|data: &[u8]| {
    doc::text_or_document(data, &SEEDS, &["all-probes", "consecutive", "10s", "1h"], sim::space)
});
