//! The breaker functions' replies as arbitrary Redis values, and `INFO` as arbitrary text:
//! a reply decodes as what its entries say (and again the same from its wire form) or is
//! refused.
#![no_main]
#![allow(dead_code, unfulfilled_lint_expectations)]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/tripline-redis/tests/hostile/checks.rs"]
mod redis_store;

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((0, info)) => redis_store::parse_info(&String::from_utf8_lossy(info)),
        Some((_, rest)) => {
            if let Ok(raw) = redis_store::reply(&mut arbitrary::Unstructured::new(rest)) {
                redis_store::parse_reply(raw);
            }
        }
        None => {}
    }
});
