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
