//! A record of any content (MessagePack of the record's fields with hostile values, another
//! value, or not MessagePack) under a breaker's key in a real redis-server (started once):
//! every call of the breaker's functions still answers, and leaves a record that reads.
#![no_main]
#![allow(dead_code, unfulfilled_lint_expectations)]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/tripline-redis/tests/hostile/checks.rs"]
mod redis_store;

fuzz_target!(|data: &[u8]| {
    if let Ok(bytes) = redis_store::record(&mut arbitrary::Unstructured::new(data)) {
        redis_store::stored_record(&bytes);
    }
});
