//! A simulator scenario (TOML), as text or as a mutated built-in scenario: an accepted one
//! keeps the simulator's bounds and its breaker configurations round-trip through the
//! tuner's TOML.
#![no_main]
#![allow(dead_code, unfulfilled_lint_expectations)]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/tripline/tests/hostile/doc.rs"]
mod doc;
#[path = "../../crates/tripline-sim/tests/hostile/checks.rs"]
mod sim;
use std::sync::LazyLock;

static SEEDS: LazyLock<Vec<toml::Table>> = LazyLock::new(|| doc::tables(&sim::scenario_seeds()));

fuzz_target!(|data: &[u8]| doc::text_or_document(data, &SEEDS, sim::SCENARIO_WORDS, sim::scenario));
