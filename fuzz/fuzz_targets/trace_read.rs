//! The trace reader, both formats and the format guess (the first byte chooses the options):
//! whatever it reads, the writer writes again and the reader reads back equal; memory stays
//! proportional to the input.
#![no_main]
#![allow(dead_code, unfulfilled_lint_expectations)]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/tripline/tests/hostile/checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::trace_read(data));
