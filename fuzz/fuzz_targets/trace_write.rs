//! The trace writer on arbitrary records (control characters, extremes, out of order):
//! whatever it accepts reads back equal.
#![no_main]
#![allow(dead_code, unfulfilled_lint_expectations)]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/tripline/tests/hostile/checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| {
    let _ = checks::trace_round_trip(&mut arbitrary::Unstructured::new(data));
});
