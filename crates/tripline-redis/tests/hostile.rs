//! Hostile replies and records, on stable in every CI run: the functions' replies as
//! arbitrary Redis values, `INFO` as arbitrary text (10,000 cases each), and records of any
//! content found in a real redis-server (fewer cases: each is a few round trips), checked for
//! what must hold (`hostile/checks.rs`, which the fuzz targets in `fuzz/` share), and the
//! inputs the fuzzer found, each as a named test.

#[path = "hostile/checks.rs"]
mod checks;

use arbitrary::Unstructured;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn a_reply_decodes_as_what_its_entries_say_or_is_refused(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(raw) = checks::reply(&mut Unstructured::new(&data)) {
            checks::parse_reply(raw);
        }
    }

    #[test]
    fn info_text_of_any_shape_is_read(text in any::<String>()) {
        checks::parse_info(&text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn a_record_of_any_content_in_redis_is_started_over_not_failed_on(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(bytes) = checks::record(&mut Unstructured::new(&data)) {
            checks::stored_record(&bytes);
        }
    }
}
