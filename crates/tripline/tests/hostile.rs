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
