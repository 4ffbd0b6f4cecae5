//! The access-log converter (Envoy's and nginx's formats; the first byte chooses): it never
//! fails on a line, and the trace it writes reads back with every call it counted.
#![no_main]
#![allow(dead_code, unfulfilled_lint_expectations)]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/tripline/examples/access_log.rs"]
mod access_log;

fuzz_target!(|data: &[u8]| access_log::check(data));
