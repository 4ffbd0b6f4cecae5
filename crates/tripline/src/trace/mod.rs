//! Traces of real outcomes (feature `trace`): record every call's outcome and duration, read
//! the trace back, and replay it against candidate configurations (`tripline replay`,
//! `tripline tune`) to choose thresholds from data rather than guesses.
//!
//! A breaker's tuning surface is its cost: window kind and size, minimum calls, two
//! thresholds, the slow-call duration, the open wait and the probes are all coupled, and the
//! defaults suit a slow internal RPC, not a checkout path. MetricsOnly (shadow mode) exists to
//! tune them before trusting them; a trace is what shadow mode leaves behind. Record one in
//! production ([`TraceRecorder`], with the breaker in MetricsOnly so every call is made and
//! the trace says what would have happened), then let `tripline tune` replay it against
//! thousands of configurations on virtual time and write the chosen one as TOML that
//! [`BreakerConfig`](crate::BreakerConfig) and the registry read as is.
//!
//! # The format, version 1
//!
//! One line per call, in JSON Lines or CSV.
//!
//! | field | required | what |
//! |---|---|---|
//! | `start` | yes | when the call started: an RFC 3339 time (`"2026-12-01T19:00:00.250+07:00"`), or a number of milliseconds (fractions allowed), since the UNIX epoch when the header says `"clock": "unix"`, else since any origin (relative) |
//! | `duration_ms` | yes | how long it took, in milliseconds (fractions allowed), in [0, 7 days] |
//! | `outcome` | unless `status` | `success`, `failure`, `ignored` (says nothing about the dependency: a 4xx), or `rejected` (the breaker in force when the trace was recorded refused the call, so its outcome is unknown) |
//! | `status` | no | the HTTP status, in [100, 599]; without an `outcome` it decides one: 5xx and 429 fail, other 4xx are ignored, the rest succeed |
//! | `error` | no | the kind of error (`timeout`, `connect`, `503`), at most 256 bytes |
//! | `key` | no | what the call was to, at most 512 bytes: a breaker key such as `payments/tenant=acme` or `catalog/shard=17`; a replay keeps one breaker per key |
//!
//! An optional first line, the header, names the version and says how to read the rest:
//!
//! ```text
//! {"tripline_trace": 1, "clock": "unix", "sample_rate": 1.0, "source": "workout-service"}
//! {"start": "2026-12-01T12:00:00.120Z", "duration_ms": 312.5, "outcome": "success", "key": "exercise-catalog"}
//! {"start": "2026-12-01T12:00:00.180Z", "duration_ms": 2500, "outcome": "failure", "error": "timeout"}
//! {"start": 1796126400300, "duration_ms": 41, "status": 503}
//! ```
//!
//! `tripline_trace` is the version (a reader refuses a version it does not know), `clock` is
//! `unix` or `relative` (the default) and applies to numeric starts, `sample_rate` (default 1)
//! is the share of calls the recorder kept, and `source` is free text. In CSV the header is
//! the same JSON object after `# ` on the first line, then a row of column names (any order,
//! any subset of the fields above that includes `start` and `duration_ms`), then one row per
//! call; an empty cell is an absent field:
//!
//! ```text
//! # {"tripline_trace": 1, "clock": "relative"}
//! start,duration_ms,outcome,status,error,key
//! 0,312.5,success,200,,exercise-catalog
//! 60.25,2500,failure,,timeout,exercise-catalog
//! ```
//!
//! Lines come in the order the calls **ended** (`start + duration_ms`): the order a recorder
//! learns outcomes in and an access log writes lines in. Concurrent writers may be a little
//! out of order, so a line may end up to the reorder window (1 s by default,
//! [`ReadOptions::reorder_window`]) before the latest end read so far; one further back is an
//! error, as is a trace whose starts mix relative numbers with absolute times. Unknown fields
//! are errors (a misspelt `duraton_ms` would otherwise read as a missing one). Relative
//! times keep their zero: a replay's times are the trace's own. Empty lines are
//! skipped, and so is a UTF-8 byte-order mark before the first line (in either format).
//! Milliseconds are read exactly, to the nanosecond, however many digits they have. A version-1 reader reads every version-1 trace; a new field or a field's new
//! meaning comes with a new version.
//!
//! # Reading
//!
//! [`read`] parses a whole trace and checks every line; an error names the line, the field,
//! the value and what is allowed. With [`ReadOptions::skip_bad_lines`] bad lines are counted
//! and skipped instead (the first few are kept for the report). Nothing the reader is given
//! makes it panic (a property test feeds it arbitrary and mutated input).
//!
//! ```
//! use tripline::trace::{read, ReadOptions, TraceOutcome};
//!
//! let text = r#"{"tripline_trace": 1}
//! {"start": 0, "duration_ms": 300, "outcome": "success"}
//! {"start": 100, "duration_ms": 250, "status": 503}
//! "#;
//! let trace = read(text.as_bytes(), &ReadOptions::default())?;
//! assert_eq!(trace.calls.len(), 2);
//! assert_eq!(trace.calls[1].outcome, TraceOutcome::Failure);
//!
//! let bad = read(r#"{"start": 0, "duration_ms": -3, "outcome": "success"}"#.as_bytes(), &ReadOptions::default());
//! assert_eq!(
//!     bad.unwrap_err().to_string(),
//!     "line 1: duration_ms must be a number of milliseconds in [0, 604800000], got -3"
//! );
//! # Ok::<(), tripline::trace::TraceError>(())
//! ```
//!
//! # Recording
//!
//! [`TraceRecorder`] is a listener: subscribe [`TraceRecorder::listener`] to a breaker (or to
//! a [`Registry`](crate::registry::Registry), which names each breaker by its key) and every
//! recorded result becomes a line ([`EventKind::CallOutcome`](crate::EventKind::CallOutcome)),
//! and, unless turned off, every rejection a `rejected` line. The calling thread only puts a
//! small fixed-size entry in a bounded queue: it never blocks, never allocates, and an entry
//! that does not fit is dropped and counted ([`RecorderStats::dropped`]). A background thread
//! formats and writes the lines. [`RecorderConfig::sample_rate`] keeps a share of the calls.
//!
//! ```
//! use tripline::trace::{RecorderConfig, TraceRecorder};
//! use tripline::{BreakerConfig, CircuitBreaker, MonotonicClock};
//!
//! let breaker = CircuitBreaker::new("exercise-catalog", BreakerConfig::default());
//! breaker.metrics_only(); // shadow mode: every call is made, the trace says what would have happened
//! let config = RecorderConfig::default().wall_clock(&MonotonicClock::new());
//! let recorder = TraceRecorder::new(Vec::new(), config)?;
//! breaker.subscribe(recorder.listener());
//! for i in 0..10 {
//!     let _ = breaker.call(|| if i % 3 == 0 { Err("503") } else { Ok(()) });
//! }
//! let (stats, bytes) = recorder.finish()?;
//! assert_eq!((stats.written, stats.dropped), (10, 0));
//! let text = String::from_utf8(bytes).unwrap();
//! assert!(text.starts_with(r#"{"tripline_trace":1,"clock":"unix""#));
//! # Ok::<(), std::io::Error>(())
//! ```

//!
//! # Worked example: record, tune, deploy
//!
//! 1. **Record.** Put the dependency's breaker in MetricsOnly (every call is made, nothing is
//!    refused) and subscribe a recorder; a registry names each line by its key.
//!
//! ```no_run
//! use tripline::registry::{Key, OperatorState, Registry, RegistryConfig, Selector};
//! use tripline::trace::{RecorderConfig, TraceRecorder};
//! use tripline::MonotonicClock;
//!
//! let registry = Registry::new(RegistryConfig::default())?;
//! registry.set_operator(&Selector::Dependency("exercise-catalog".into()), OperatorState::MetricsOnly);
//! let config = RecorderConfig::default().wall_clock(&MonotonicClock::new()).source("workout-service");
//! let recorder = TraceRecorder::create("catalog.jsonl", config)?;
//! registry.subscribe(recorder.listener());
//! // ... serve traffic through registry.get(&Key::new("exercise-catalog")?)? for a day ...
//! let (stats, _) = recorder.finish()?;
//! eprintln!("{} calls recorded, {} dropped", stats.written, stats.dropped);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! 2. **Tune.** Replay the trace against the configuration space and write the choice:
//!
//! ```text
//! tripline tune catalog.jsonl --config current.toml --max-time-to-trip 1s --out tuned.toml
//! tripline replay catalog.jsonl --config current.toml --config tuned.toml --report replay.html
//! ```
//!
//! 3. **Trial, then deploy.** Run the tuned configuration beside the live breaker for a while
//!    ([`ShadowCandidate`](crate::shadow::ShadowCandidate)), then load it: the file is a
//!    [`BreakerConfig`](crate::BreakerConfig), and its lines, under a `[configs.NAME]` header,
//!    one of a registry's configurations.
//!
//! ```
//! # let tuned_toml = "window = { kind = \"count\", size = 20 }\nminimum_calls = 5\nopen = { duration = \"10s\" }\n";
//! use tripline::BreakerConfig;
//! use tripline::registry::RegistryConfig;
//!
//! let config: BreakerConfig = toml::from_str(tuned_toml)?;
//! let registry = RegistryConfig::from_toml(&format!(
//!     "[configs.catalog]\n{tuned_toml}\n[dependencies]\nexercise-catalog = \"catalog\"\n"
//! ))?;
//! # let _ = (config, registry);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod read;
mod recorder;
mod write;

pub use read::{ReadOptions, Trace, TraceCall, TraceError, read, read_path};
pub use recorder::{RecorderConfig, RecorderListener, RecorderStats, TraceRecorder};
pub use write::{Record, Start, TraceWriter};

use serde::{Deserialize, Serialize};

/// The version of the format this crate writes and reads.
pub const TRACE_VERSION: u32 = 1;

/// What a traced call ended as.
///
/// ```
/// use tripline::trace::TraceOutcome;
/// assert_eq!("rejected".parse::<TraceOutcome>(), Ok(TraceOutcome::Rejected));
/// assert!("ok".parse::<TraceOutcome>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceOutcome {
    /// The dependency answered well.
    Success,
    /// The dependency failed (an error, a timeout, a 5xx).
    Failure,
    /// The result says nothing about the dependency (a 4xx).
    Ignored,
    /// The breaker in force when the trace was recorded refused the call: its outcome is
    /// unknown.
    Rejected,
}

impl TraceOutcome {
    /// The name used in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceOutcome::Success => "success",
            TraceOutcome::Failure => "failure",
            TraceOutcome::Ignored => "ignored",
            TraceOutcome::Rejected => "rejected",
        }
    }

    /// The breaker's outcome for a call that was made (`None` for a rejected one).
    pub fn outcome(self) -> Option<crate::Outcome> {
        match self {
            TraceOutcome::Success => Some(crate::Outcome::Success),
            TraceOutcome::Failure => Some(crate::Outcome::Failure),
            TraceOutcome::Ignored => Some(crate::Outcome::Ignored),
            TraceOutcome::Rejected => None,
        }
    }
}

impl From<crate::Outcome> for TraceOutcome {
    fn from(o: crate::Outcome) -> Self {
        match o {
            crate::Outcome::Success => TraceOutcome::Success,
            crate::Outcome::Failure => TraceOutcome::Failure,
            crate::Outcome::Ignored => TraceOutcome::Ignored,
        }
    }
}

impl std::str::FromStr for TraceOutcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "success" => Ok(TraceOutcome::Success),
            "failure" => Ok(TraceOutcome::Failure),
            "ignored" => Ok(TraceOutcome::Ignored),
            "rejected" => Ok(TraceOutcome::Rejected),
            _ => Err("one of success, failure, ignored, rejected".into()),
        }
    }
}

impl std::fmt::Display for TraceOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// JSON Lines or CSV.
///
/// ```
/// use tripline::trace::Format;
/// assert_eq!(Format::from_path("calls.csv".as_ref()), Some(Format::Csv));
/// assert_eq!(Format::from_path("calls.jsonl".as_ref()), Some(Format::JsonLines));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// One JSON object per line.
    #[default]
    JsonLines,
    /// A header row, then one row per call.
    Csv,
}

impl Format {
    /// The format a file name suggests: `.csv`, or `.jsonl`, `.ndjson` and `.json`.
    pub fn from_path(path: &std::path::Path) -> Option<Self> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "csv" => Some(Format::Csv),
            "jsonl" | "ndjson" | "json" => Some(Format::JsonLines),
            _ => None,
        }
    }
}

/// How numeric starts are read.
///
/// ```
/// use tripline::trace::TraceClock;
/// assert_eq!(TraceClock::default(), TraceClock::Relative);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceClock {
    /// Milliseconds since any origin.
    #[default]
    Relative,
    /// Milliseconds since the UNIX epoch.
    Unix,
}

/// The first line of a trace.
///
/// ```
/// use tripline::trace::Header;
/// let h = Header::default();
/// assert_eq!((h.tripline_trace, h.sample_rate), (1, 1.0));
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// The format's version.
    pub tripline_trace: u32,
    /// How numeric starts are read.
    #[serde(default)]
    pub clock: TraceClock,
    /// The share of calls the recorder kept, in (0, 1].
    #[serde(default = "one")]
    pub sample_rate: f64,
    /// Free text: what recorded the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

fn one() -> f64 {
    1.0
}

impl Default for Header {
    fn default() -> Self {
        Self {
            tripline_trace: TRACE_VERSION,
            clock: TraceClock::Relative,
            sample_rate: 1.0,
            source: None,
        }
    }
}

pub use read::MAX_DURATION_MS;
