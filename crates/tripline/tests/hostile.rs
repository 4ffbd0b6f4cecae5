//! Hostile input for every parser of the core, on stable in every CI run: arbitrary bytes and
//! arbitrary structured values (10,000 cases each), checked for what must hold (see
//! `hostile/checks.rs`, which the fuzz targets in `fuzz/` share), and the inputs the fuzzer
//! found, each as a named test.
#![cfg(all(feature = "trace", feature = "serde"))]

#[path = "hostile/checks.rs"]
mod checks;
#[path = "hostile/doc.rs"]
mod doc;

use arbitrary::Unstructured;
use proptest::prelude::*;

static BREAKER_SEEDS: std::sync::LazyLock<Vec<toml::Table>> =
    std::sync::LazyLock::new(|| doc::tables(&checks::breaker_seeds()));
static REGISTRY_SEEDS: std::sync::LazyLock<Vec<toml::Table>> =
    std::sync::LazyLock::new(|| doc::tables(&checks::registry_seeds()));

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, ..ProptestConfig::default() })]

    #[test]
    fn the_trace_reader_reads_what_it_writes_from_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        checks::trace_read(&data);
    }

    #[test]
    fn the_trace_reader_reads_what_it_writes_from_mutated_traces(
        o in any::<u8>(),
        seed in 0usize..4,
        edits in proptest::collection::vec((any::<u16>(), any::<u8>(), 0u8..3), 1..4),
    ) {
        let seeds = [
            "{\"tripline_trace\": 1, \"clock\": \"unix\", \"source\": \"s\"}\n\
             {\"start\": \"2026-12-01T19:00:00.250+07:00\", \"duration_ms\": 10, \"outcome\": \"success\", \"key\": \"a\"}\n\
             {\"start\": 1796126400300, \"duration_ms\": 10.5, \"status\": 503, \"error\": \"timeout\"}\n",
            "# {\"tripline_trace\": 1}\nstart,duration_ms,outcome,status,error,key\n0,1,success,200,,k\n\
             0.5,2.25,,503,reset,\"a,b\"\n",
            "{\"start\": 0, \"duration_ms\": 300, \"outcome\": \"success\"}\n\
             {\"start\": 100, \"duration_ms\": 250, \"status\": 503}\n",
            "start,duration_ms,status\r\n1e3,5,429\r\n1001,0.000001,200\r\n",
        ];
        let mut b = vec![o];
        b.extend_from_slice(seeds[seed].as_bytes());
        for (pos, byte, op) in edits {
            let i = 1 + usize::from(pos) % (b.len() - 1).max(1);
            match op {
                0 if i < b.len() => b[i] = byte,
                1 if i < b.len() => { b.remove(i); }
                _ => b.insert(i.min(b.len()), byte),
            }
        }
        checks::trace_read(&b);
    }

    /// Whatever the writer accepts reads back equal (control characters, extremes, cut
    /// durations, out-of-order and far-away calls).
    #[test]
    fn whatever_the_trace_writer_accepts_reads_back_equal(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = checks::trace_round_trip(&mut Unstructured::new(&data));
    }

    #[test]
    fn an_accepted_breaker_configuration_validates_and_round_trips(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let seeds = &*BREAKER_SEEDS;
        doc::text_or_document(&data, seeds, checks::CONFIG_WORDS, checks::breaker_config);
    }

    #[test]
    fn an_accepted_registry_configuration_validates_and_round_trips(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let seeds = &*REGISTRY_SEEDS;
        doc::text_or_document(&data, seeds, checks::CONFIG_WORDS, checks::registry_config);
    }
}

/// Found by `breaker_config`: a duration whose nanoseconds carry into a sum of `u64::MAX`
/// seconds (`"18446744073709551615s 1000000000ns"`) made humantime panic in every duration
/// field; it is now refused as too large, naming the field.
#[test]
fn found_a_duration_that_overflows_by_a_carry_is_refused_not_a_panic() {
    doc::text_or_document(
        include_bytes!("hostile/found/breaker_config-humantime-overflow"),
        &BREAKER_SEEDS,
        checks::CONFIG_WORDS,
        checks::breaker_config,
    );
    const BAD: &str = "\"18446744073709551615s 1000000000ns\"";
    for text in [
        format!("slow_call_duration = {BAD}"),
        format!("[open]\nduration = {BAD}"),
        format!("[window]\nkind = \"time\"\nlength = {BAD}"),
        format!("[window]\nkind = \"time\"\nlength = \"10s\"\nbucket = {BAD}"),
        format!("failure_count = {{ failures = 3, within = {BAD} }}"),
    ] {
        let err = toml::from_str::<tripline::BreakerConfig>(&text).expect_err(&text);
        assert!(err.to_string().contains("too large"), "{text}: {err}");
    }
    let err = tripline::registry::RegistryConfig::from_toml(
        "idle_after = \"18446744073709551615s 1000000000ns\"\n",
    )
    .expect_err("refused");
    assert!(err.to_string().contains("too large"), "{err}");
}

/// Found by `registry_config`: a 2,449-byte configuration held more heap at its peak than
/// the check's bound proportional to the input.
#[test]
fn found_a_registry_configuration_within_its_memory_bound() {
    doc::text_or_document(
        include_bytes!("hostile/found/registry_config-memory-bound"),
        &REGISTRY_SEEDS,
        checks::CONFIG_WORDS,
        checks::registry_config,
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10_000))]

    /// `tripline::duration::parse` answers what humantime answers wherever humantime does not
    /// panic, and an overflow error where it does.
    #[test]
    fn durations_read_as_humantime_reads_them_or_refused_where_it_panics(
        terms in proptest::collection::vec(
            (
                prop_oneof![
                    Just(u64::MAX),
                    Just(u64::MAX - 1),
                    Just(1_000_000_000u64),
                    Just(999_999_999u64),
                    any::<u64>(),
                    0u64..100_000,
                ],
                proptest::option::of(0u64..1_000_000),
                prop_oneof![
                    Just("ns"), Just("us"), Just("µs"), Just("ms"), Just("s"), Just("sec"),
                    Just("m"), Just("min"), Just("h"), Just("d"), Just("w"), Just("M"),
                    Just("y"), Just(""), Just("parsec"),
                ],
                prop_oneof![Just(""), Just(" "), Just("  "), Just("\t"), Just("."), Just(",")],
            ),
            1..5,
        ),
    ) {
        let mut text = String::new();
        for (n, frac, unit, sep) in &terms {
            text.push_str(&n.to_string());
            if let Some(f) = frac {
                text.push('.');
                text.push_str(&f.to_string());
            }
            text.push_str(unit);
            text.push_str(sep);
        }
        check_duration_text(&text);
    }

    #[test]
    fn durations_from_arbitrary_text_read_as_humantime_reads_them(text in "[0-9 .a-zA-Zµ]{0,40}") {
        check_duration_text(&text);
    }
}

fn check_duration_text(text: &str) {
    let ours = tripline::duration::parse(text);
    let theirs = std::panic::catch_unwind(|| humantime::parse_duration(text));
    match (theirs, ours) {
        (Err(_), Err(e)) => assert!(e.to_string().contains("too large"), "{text:?}: {e}"),
        (Err(_), Ok(d)) => panic!("{text:?}: humantime panics, we read {d:?}"),
        (Ok(Ok(a)), Ok(b)) => assert_eq!(a, b, "{text:?}"),
        (Ok(Err(a)), Err(b)) => {
            // Refused where humantime refuses: the same error, or an overflow refused
            // before humantime reached the term it refuses.
            if b.to_string() != a.to_string() {
                assert!(b.to_string().contains("too large"), "{text:?}: {a} / {b}");
            }
        }
        (Ok(Ok(a)), Err(b)) => {
            // Only a sum within a second per term of the largest duration is refused early.
            assert!(
                a.as_secs() > u64::MAX - 2 * text.len() as u64,
                "{text:?}: humantime reads {a:?}, we refuse: {b}"
            );
        }
        (Ok(Err(a)), Ok(b)) => panic!("{text:?}: humantime refuses ({a}), we read {b:?}"),
    }
}
