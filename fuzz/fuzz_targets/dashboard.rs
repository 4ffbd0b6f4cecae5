//! Requests through the dashboard's router (paths, query strings, headers and JSON control
//! bodies): never a server error, errors as JSON naming what was wrong, no read that changes
//! a breaker, no request that creates one.
#![no_main]
#![allow(dead_code, unfulfilled_lint_expectations)]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/tripline-dashboard/tests/hostile/checks.rs"]
mod dashboard;
use dashboard::{Hostile, request};

fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    let authorized = u.arbitrary().unwrap_or(false);
    if let Ok(h) = Hostile::arbitrary(&mut u) {
        request(&h, authorized);
    }
});
