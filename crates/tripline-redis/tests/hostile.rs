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

// ---- records the property above found, each a named case ----

fn packed(fields: &[(&str, rmpv::Value)]) -> Vec<u8> {
    let map = rmpv::Value::Map(
        fields
            .iter()
            .map(|(k, v)| (rmpv::Value::from(*k), v.clone()))
            .collect(),
    );
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &map).unwrap();
    out
}

#[test]
fn a_record_that_is_not_messagepack_or_not_a_map_starts_over() {
    checks::stored_record(&[0xc1]); // a byte MessagePack never uses
    checks::stored_record(b"closed");
    checks::stored_record(&[0x2a]); // the number 42
}

#[test]
fn a_record_with_a_field_of_the_wrong_type_starts_over() {
    // Found: "attempt to get length of local 'r' (a number value)" on every record call.
    checks::stored_record(&packed(&[("st", "closed".into()), ("wr", 7.into())]));
    // Found: "table index is nil" on every read.
    checks::stored_record(&packed(&[("st", rmpv::Value::Nil), ("tf", "".into())]));
    checks::stored_record(&packed(&[("st", "ajar".into()), ("ep", 3.into())]));
    checks::stored_record(&packed(&[("st", "open".into()), ("ep", "three".into())]));
}

#[test]
fn a_record_claiming_more_probe_slots_than_a_round_has_does_not_stall_redis() {
    // Found: 'lk' = 2.4e16 made every loop over the probe slots run past the Redis timeout.
    checks::stored_record(&packed(&[
        ("lk", 24_460_000_000_000_000u64.into()),
        ("ab", 0.into()),
    ]));
}

#[test]
fn a_record_whose_open_deadline_is_past_two_to_the_64_starts_over() {
    // Found: 'ou' = 1.8e19 came back in the reply as a negative integer, a malformed reply.
    checks::stored_record(&packed(&[("ou", 18_022_000_000_000_000_000u64.into())]));
    checks::stored_record(&packed(&[("st", "open".into()), ("ou", (-5).into())]));
    checks::stored_record(&packed(&[("st", "open".into()), ("ou", f64::NAN.into())]));
}

/// A duration whose nanoseconds carry into a sum of `u64::MAX` seconds made humantime panic;
/// the shared breaker's batching settings refuse it as too large instead.
#[test]
fn a_duration_that_overflows_by_a_carry_is_refused_in_the_shared_settings() {
    let e = toml::from_str::<tripline_redis::Batching>(
        "flush_every = \"18446744073709551615s 1000000000ns\"",
    )
    .unwrap_err();
    assert!(e.to_string().contains("too large"), "{e}");
}
