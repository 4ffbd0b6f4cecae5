//! Promises of the trace reader and recorder and of the metrics export that the code breaks:
//! each test fails until its defect is fixed.
#![cfg(all(feature = "trace", feature = "metrics"))]

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tripline::registry::{Key, Registry, RegistryConfig};
use tripline::trace::{
    Format, Header, ReadOptions, Record, RecorderConfig, Start, TraceOutcome, TraceRecorder,
    TraceWriter, read,
};
use tripline::{BreakerConfig, CircuitBreaker, ManualClock, Outcome};

/// Steps: write four calls with a `TraceWriter` in CSV, keys `" padded "`, `"a,b"`,
/// `"q\"uote"`, `"ünï/cødé"`, and read the output back.
///
/// Promised (trace module docs): "`key` ... what the call was to ...: a breaker key ...; a
/// replay keeps one breaker per key", and the writer's doc example reads its output back.
///
/// Observed: the key `" padded "` reads back as `"padded"` (the CSV reader trims every cell,
/// quoted ones too), so two breakers `"a"` and `" a"` merge in a replay. JSON Lines keeps it.
#[test]
fn a_csv_trace_read_back_keeps_every_key_as_written() {
    let keys = [" padded ", "a,b", "q\"uote", "ünï/cødé"];
    let mut w = TraceWriter::new(Vec::new(), Format::Csv, &Header::default()).unwrap();
    for k in keys {
        let r = Record::new(
            Start::Relative(Duration::ZERO),
            Duration::from_millis(1),
            TraceOutcome::Success,
        )
        .with_key(k);
        w.write(&r).unwrap();
    }
    let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
    let t = read(text.as_bytes(), &ReadOptions::default()).unwrap();
    let back: Vec<&str> = t.calls.iter().map(|c| t.key(*c)).collect();
    assert_eq!(back, keys, "{text}");
}

/// Steps: read a trace without a header whose first call has the key `tripline_trace`.
///
/// Promised (trace module docs): "An optional first line, the header, names the version";
/// `key` is any string "at most 512 bytes".
///
/// Observed: `line 1: bad header: unknown field `start`...`: the reader takes any first line
/// containing the text `"tripline_trace"` for the header (`is_header` in read.rs), so a
/// headerless trace whose first record has that key (or error kind) cannot be read.
#[test]
fn a_headerless_trace_is_read_whatever_its_first_key() {
    let text = "{\"start\": 0, \"duration_ms\": 1, \"outcome\": \"success\", \"key\": \"tripline_trace\"}\n";
    let t = read(text.as_bytes(), &ReadOptions::default());
    assert!(t.is_ok(), "{t:?}");
}
