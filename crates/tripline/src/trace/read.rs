//! Reading a trace: every line checked, every error naming the line, the field, the value and
//! what is allowed.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::{Format, Header, TRACE_VERSION, TraceClock, TraceOutcome};
use crate::Outcome;

/// The longest call duration a trace may hold, in milliseconds (7 days).
pub const MAX_DURATION_MS: f64 = 604_800_000.0;
/// How far from the origin a numeric start may be, in nanoseconds (1e15 ms, about 31 700
/// years).
const MAX_START_NS: i128 = 1_000_000_000_000_000_000_000;
/// [`MAX_DURATION_MS`] in nanoseconds.
pub(crate) const MAX_DURATION_NS: u64 = 604_800_000_000_000;
/// How far a trace may reach from its origin to its last end, in nanoseconds (292 years).
pub(crate) const MAX_SPAN_NS: i128 = (u64::MAX / 2) as i128;
/// The default reorder window, in nanoseconds.
pub(crate) const DEFAULT_REORDER_NS: i128 = 1_000_000_000;
pub(crate) const MAX_KEY: usize = 512;
pub(crate) const MAX_ERROR: usize = 256;
/// Bad lines kept in [`Trace::bad_lines`] when they are skipped.
const KEEP_BAD: usize = 10;

/// How to read a trace.
///
/// ```
/// use tripline::trace::ReadOptions;
/// use std::time::Duration;
/// let o = ReadOptions::default();
/// assert_eq!((o.skip_bad_lines, o.reorder_window), (false, Duration::from_secs(1)));
/// ```
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// JSON Lines or CSV; `None` guesses from the first line (`{` or `# {` before a column
    /// row).
    pub format: Option<super::Format>,
    /// Count and skip lines that do not parse (or go back in time), instead of failing.
    pub skip_bad_lines: bool,
    /// How far before the latest end read so far a line's end (`start + duration_ms`) may be.
    pub reorder_window: Duration,
    /// The most calls to read; a longer trace is an error (it bounds memory: 32 bytes a call).
    pub max_calls: usize,
    /// The most distinct keys.
    pub max_keys: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            format: None,
            skip_bad_lines: false,
            reorder_window: Duration::from_nanos(DEFAULT_REORDER_NS as u64),
            max_calls: 20_000_000,
            max_keys: 100_000,
        }
    }
}

/// One call of a trace, in the units a replay uses.
///
/// ```
/// use tripline::trace::{read, ReadOptions};
/// let t = read("start,duration_ms,outcome,key\n5,2.5,success,a\n".as_bytes(), &ReadOptions::default())?;
/// let c = t.calls[0];
/// assert_eq!((c.start, c.duration, t.key(c)), (5_000_000, 2_500_000, "a"));
/// # Ok::<(), tripline::trace::TraceError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceCall {
    /// Nanoseconds from the trace's origin to the call's start. The origin is the earliest
    /// start for absolute times, and for relative ones their own zero (or the earliest start,
    /// if some are negative).
    pub start: u64,
    /// Nanoseconds the call took.
    pub duration: u64,
    /// What it ended as.
    pub outcome: TraceOutcome,
    /// Index of its key in [`Trace::keys`] (0 is the empty key: no key given).
    pub key: u32,
    /// The HTTP status, or 0.
    pub status: u16,
    /// Index of its error kind in [`Trace::error_kinds`], or `u32::MAX`.
    pub error: u32,
}

impl TraceCall {
    /// When the call ended, in nanoseconds from the origin.
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.duration)
    }
}

/// A parsed trace.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    /// The header (the defaults when the trace has none).
    pub header: Header,
    /// The calls, in line order (the order they ended in, within the reorder window).
    pub calls: Vec<TraceCall>,
    /// The keys, by index; index 0 is `""`, calls without a key.
    pub keys: Vec<String>,
    /// The error kinds, by index.
    pub error_kinds: Vec<String>,
    /// The origin as nanoseconds since the UNIX epoch, when the starts were absolute.
    pub origin_unix_nanos: Option<i128>,
    /// Lines read (the header and empty lines included).
    pub lines: u64,
    /// Bad lines skipped ([`ReadOptions::skip_bad_lines`]).
    pub skipped: u64,
    /// The first few of them.
    pub bad_lines: Vec<TraceError>,
}

impl Trace {
    /// The key of a call (`""` when it has none).
    pub fn key(&self, call: TraceCall) -> &str {
        self.keys.get(call.key as usize).map_or("", String::as_str)
    }

    /// The error kind of a call, if it has one.
    pub fn error_kind(&self, call: TraceCall) -> Option<&str> {
        self.error_kinds
            .get(call.error as usize)
            .map(String::as_str)
    }

    /// From the origin to the last end.
    pub fn span(&self) -> Duration {
        Duration::from_nanos(self.calls.iter().map(TraceCall::end).max().unwrap_or(0))
    }
}

/// Why a trace could not be read.
///
/// ```
/// use tripline::trace::{read, ReadOptions, TraceError};
/// let e = read(r#"{"start": 0, "duration_ms": 1, "outcome": "ok"}"#.as_bytes(), &ReadOptions::default()).unwrap_err();
/// assert_eq!((e.line(), e.field()), (Some(1), Some("outcome")));
/// assert_eq!(e.to_string(), r#"line 1: outcome must be one of success, failure, ignored, rejected, got "ok""#);
/// ```
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// A field held a value that is not allowed.
    #[error("line {line}: {field} must be {allowed}, got {value}")]
    Field {
        /// The line (1-based).
        line: u64,
        /// The field.
        field: String,
        /// The value, as written (shortened past 60 characters).
        value: String,
        /// What is allowed.
        allowed: String,
    },
    /// A line that is not a record at all (not JSON, the wrong number of CSV cells).
    #[error("line {line}: {message}")]
    Line {
        /// The line (1-based).
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A line's call ended further before an earlier line's than the reorder window allows.
    #[error(
        "line {line}: the call ends at {end_ms} ms (start + duration_ms), {back_ms} ms before \
         the call of line {latest_line} ends; lines must come in the order calls ended, at most \
         {window_ms} ms out of order (the reorder window): sort the trace by end time or widen \
         the window"
    )]
    Backwards {
        /// The line (1-based).
        line: u64,
        /// Its end in milliseconds: as written for relative times, from the first line's
        /// start for absolute ones.
        end_ms: f64,
        /// How far before the latest end it is.
        back_ms: f64,
        /// The line of the latest end.
        latest_line: u64,
        /// The reorder window.
        window_ms: f64,
    },
    /// The header names a version this reader does not know.
    #[error(
        "line 1: tripline_trace must be {TRACE_VERSION} (the version this tripline reads), got {found}"
    )]
    Version {
        /// The version found.
        found: u32,
    },
    /// No call could be read.
    #[error("the trace has no calls ({lines} lines read, {skipped} bad lines skipped)")]
    Empty {
        /// Lines read.
        lines: u64,
        /// Bad lines skipped.
        skipped: u64,
    },
    /// The trace is larger than the reader's bounds.
    #[error("{0}")]
    TooLarge(String),
    /// Reading failed.
    #[error("cannot read the trace: {0}")]
    Io(String),
}

impl TraceError {
    /// The line the error is about, if it is about one.
    pub fn line(&self) -> Option<u64> {
        match self {
            TraceError::Field { line, .. }
            | TraceError::Line { line, .. }
            | TraceError::Backwards { line, .. } => Some(*line),
            TraceError::Version { .. } => Some(1),
            _ => None,
        }
    }

    /// The field the error is about, if it is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            TraceError::Field { field, .. } => Some(field),
            TraceError::Backwards { .. } => Some("start"),
            TraceError::Version { .. } => Some("tripline_trace"),
            _ => None,
        }
    }

    /// Whether skipping the line could get past it (the others stop the reading).
    fn skippable(&self) -> bool {
        matches!(
            self,
            TraceError::Field { .. } | TraceError::Line { .. } | TraceError::Backwards { .. }
        )
    }
}

/// Reads a whole trace from `input`.
pub fn read(mut input: impl std::io::Read, opts: &ReadOptions) -> Result<Trace, TraceError> {
    let mut bytes = Vec::new();
    input
        .read_to_end(&mut bytes)
        .map_err(|e| TraceError::Io(e.to_string()))?;
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() as u64 + 1;
            return Err(TraceError::Line {
                line,
                message: "is not valid UTF-8".into(),
            });
        }
    };
    read_str(&text, opts)
}

/// Reads the trace in a file; the format comes from [`ReadOptions::format`], else the
/// file's extension, else the first line.
pub fn read_path(path: &std::path::Path, opts: &ReadOptions) -> Result<Trace, TraceError> {
    let file = std::fs::File::open(path)
        .map_err(|e| TraceError::Io(format!("{}: {e}", path.display())))?;
    let mut opts = opts.clone();
    if opts.format.is_none() {
        opts.format = Format::from_path(path);
    }
    read(std::io::BufReader::new(file), &opts)
}

/// A field's value as written: a number (its text), a string, or something else.
#[derive(Debug)]
enum Scalar<'a> {
    Num(Cow<'a, str>),
    Str(Cow<'a, str>),
    Other(&'static str),
}

impl fmt::Display for Scalar<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Num(n) => f.write_str(&short(n)),
            Scalar::Str(s) => write!(f, "{:?}", short(s)),
            Scalar::Other(o) => f.write_str(o),
        }
    }
}

fn short(s: &str) -> Cow<'_, str> {
    if s.chars().count() <= 60 {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(format!("{}...", s.chars().take(57).collect::<String>()))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalar<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Scalar::Other("a boolean"))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Scalar::Num(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Scalar::Num(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(Scalar::Num(Cow::Owned(v.to_string())))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Scalar::Str(Cow::Owned(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other("an array"))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other("an object"))
            }
        }
        d.deserialize_any(V)
    }
}

/// A JSON line; `null` reads as absent. Values are kept as written (a number's digits, not
/// a float's approximation of them) until they are checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonLine<'a> {
    #[serde(borrow, default)]
    start: Option<&'a RawValue>,
    #[serde(borrow, default)]
    duration_ms: Option<&'a RawValue>,
    #[serde(borrow, default)]
    outcome: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default)]
    key: Option<&'a RawValue>,
}

impl<'a> JsonLine<'a> {
    fn fields(&self) -> Result<Fields<'a>, serde_json::Error> {
        let f = |v: Option<&'a RawValue>| v.map(scalar).transpose();
        Ok(Fields {
            start: f(self.start)?,
            duration_ms: f(self.duration_ms)?,
            outcome: f(self.outcome)?,
            status: f(self.status)?,
            error: f(self.error)?,
            key: f(self.key)?,
        })
    }
}

/// A JSON value as a field's value: a number as its text, anything else parsed.
fn scalar(v: &RawValue) -> Result<Scalar<'_>, serde_json::Error> {
    let text = v.get();
    match text.as_bytes().first() {
        Some(b'-' | b'0'..=b'9') => Ok(Scalar::Num(Cow::Borrowed(text))),
        _ => serde_json::from_str(text),
    }
}

/// A line's fields, before they are checked.
#[derive(Default)]
struct Fields<'a> {
    start: Option<Scalar<'a>>,
    duration_ms: Option<Scalar<'a>>,
    outcome: Option<Scalar<'a>>,
    status: Option<Scalar<'a>>,
    error: Option<Scalar<'a>>,
    key: Option<Scalar<'a>>,
}

const COLUMNS: [&str; 6] = ["start", "duration_ms", "outcome", "status", "error", "key"];

/// A checked line.
struct Raw<'a> {
    /// Nanoseconds: since the epoch when `absolute`, else since the trace's own origin.
    start: i128,
    absolute: bool,
    duration: u64,
    outcome: TraceOutcome,
    status: u16,
    error: Option<&'a str>,
    key: Option<&'a str>,
}

fn field_err(line: u64, field: &str, value: impl fmt::Display, allowed: &str) -> TraceError {
    TraceError::Field {
        line,
        field: field.to_string(),
        value: value.to_string(),
        allowed: allowed.to_string(),
    }
}

const START_ALLOWED: &str =
    "an RFC 3339 time (\"2026-12-01T19:00:00.250+07:00\") or a number of milliseconds";

/// A number, written in a JSON number or a CSV cell.
fn number(v: &Scalar<'_>) -> Option<f64> {
    match v {
        Scalar::Num(n) | Scalar::Str(n) => n.trim().parse::<f64>().ok(),
        Scalar::Other(_) => None,
    }
}

/// A number of milliseconds, exactly, as nanoseconds.
fn millis(v: &Scalar<'_>) -> Millis {
    match v {
        Scalar::Num(n) | Scalar::Str(n) => Millis::parse(n.trim()),
        Scalar::Other(_) => Millis::NotANumber,
    }
}

/// Milliseconds written in decimal, read exactly: a float would lose nanoseconds past about
/// 104 days, and what the writer wrote must read back equal.
#[derive(Debug, PartialEq)]
enum Millis {
    /// The value in nanoseconds, rounded half away from zero.
    Nanos(i128),
    /// A number, but not a finite one of at most 22 digits of nanoseconds (infinite, NaN,
    /// 1e30).
    OutOfRange,
    NotANumber,
}

impl Millis {
    /// Reads `[+-]digits[.digits][(e|E)[+-]digits]` (a JSON number, or what `f64`'s
    /// `FromStr` takes but for `inf` and `NaN`, which are out of range).
    fn parse(s: &str) -> Millis {
        let b = s.as_bytes();
        // Steps over a sign at `i`; whether it is a minus.
        let sign = |i: &mut usize| match b.get(*i) {
            Some(b'-') => {
                *i += 1;
                true
            }
            Some(b'+') => {
                *i += 1;
                false
            }
            _ => false,
        };
        let mut i = 0;
        let negative = sign(&mut i);
        let mantissa = i;
        let (mut int_digits, mut frac_digits) = (0i64, 0usize);
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
            int_digits += 1;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
                frac_digits += 1;
            }
        }
        if int_digits == 0 && frac_digits == 0 {
            return if s.parse::<f64>().is_ok() {
                Millis::OutOfRange // inf, infinity, NaN
            } else {
                Millis::NotANumber
            };
        }
        let digits_end = i;
        let mut exp: i64 = 0;
        if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
            i += 1;
            let neg_exp = sign(&mut i);
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                exp = exp
                    .saturating_mul(10)
                    .saturating_add(i64::from(b[i] - b'0'));
                i += 1;
            }
            if i == start {
                return Millis::NotANumber;
            }
            if neg_exp {
                exp = -exp;
            }
        }
        if i != b.len() {
            return Millis::NotANumber;
        }
        // The digits without the point, from the first that is not zero: the value is
        // 0.D1D2... x 10^k nanoseconds, k digits before the point.
        let mut digits = b[mantissa..digits_end]
            .iter()
            .filter(|c| **c != b'.')
            .map(|c| c - b'0')
            .peekable();
        let mut leading = 0i64;
        while digits.next_if_eq(&0).is_some() {
            leading += 1;
        }
        if digits.peek().is_none() {
            return Millis::Nanos(0);
        }
        let k = (int_digits - leading).saturating_add(exp).saturating_add(6);
        if k > 22 {
            return Millis::OutOfRange;
        }
        let mut n: i128 = 0;
        for _ in 0..k.max(0) {
            n = n * 10 + i128::from(digits.next().unwrap_or(0));
        }
        if k >= 0 && digits.next().is_some_and(|d| d >= 5) {
            n += 1;
        }
        Millis::Nanos(if negative { -n } else { n })
    }
}

fn check<'a>(line: u64, f: &'a Fields<'a>, clock: TraceClock) -> Result<Raw<'a>, TraceError> {
    let Some(start) = &f.start else {
        return Err(field_err(line, "start", "nothing", START_ALLOWED));
    };
    let (start, absolute) = match (start, millis(start)) {
        (_, Millis::Nanos(ns)) if ns.abs() <= MAX_START_NS => (ns, clock == TraceClock::Unix),
        (_, Millis::Nanos(_) | Millis::OutOfRange) => {
            return Err(field_err(
                line,
                "start",
                start,
                "a finite number of milliseconds of at most 1e15",
            ));
        }
        (Scalar::Str(s), Millis::NotANumber) => {
            let t = time::OffsetDateTime::parse(
                s.trim(),
                &time::format_description::well_known::Rfc3339,
            )
            .map_err(|_| field_err(line, "start", start, START_ALLOWED))?;
            (t.unix_timestamp_nanos(), true)
        }
        (other, Millis::NotANumber) => {
            return Err(field_err(line, "start", other, START_ALLOWED));
        }
    };
    const DUR: &str = "a number of milliseconds in [0, 604800000]";
    let duration = match &f.duration_ms {
        None => return Err(field_err(line, "duration_ms", "nothing", DUR)),
        Some(v) => match millis(v) {
            Millis::Nanos(ns) if (0..=i128::from(MAX_DURATION_NS)).contains(&ns) => ns as u64,
            _ => return Err(field_err(line, "duration_ms", v, DUR)),
        },
    };
    const STATUS: &str = "an HTTP status, an integer in [100, 599]";
    let status = match &f.status {
        None => 0,
        Some(v) => match number(v) {
            Some(n) if n.fract() == 0.0 && (100.0..=599.0).contains(&n) => n as u16,
            _ => return Err(field_err(line, "status", v, STATUS)),
        },
    };
    const OUTCOME: &str = "one of success, failure, ignored, rejected";
    let outcome = match &f.outcome {
        Some(Scalar::Str(s)) => s
            .parse::<TraceOutcome>()
            .map_err(|_| field_err(line, "outcome", Scalar::Str(Cow::Borrowed(s)), OUTCOME))?,
        Some(other) => return Err(field_err(line, "outcome", other, OUTCOME)),
        None if status != 0 => Outcome::from_http_status(status).into(),
        None => {
            return Err(field_err(
                line,
                "outcome",
                "nothing",
                "one of success, failure, ignored, rejected (or a status to classify)",
            ));
        }
    };
    let text = |name: &str, v: &'a Option<Scalar<'a>>, max: usize| match v {
        None => Ok(None),
        Some(Scalar::Str(s)) if s.is_empty() => Ok(None),
        Some(Scalar::Str(s)) if s.len() <= max && !s.chars().any(char::is_control) => {
            Ok(Some(&**s))
        }
        Some(other) => Err(field_err(
            line,
            name,
            other,
            &format!("a string of at most {max} bytes without control characters"),
        )),
    };
    Ok(Raw {
        start,
        absolute,
        duration,
        outcome,
        status,
        error: text("error", &f.error, MAX_ERROR)?,
        key: text("key", &f.key, MAX_KEY)?,
    })
}

/// Accumulates checked lines into a trace.
struct Builder<'o> {
    opts: &'o ReadOptions,
    header: Header,
    lines: u64,
    skipped: u64,
    bad: Vec<TraceError>,
    /// Starts in nanoseconds (relative or absolute), before the origin is subtracted.
    starts: Vec<i128>,
    calls: Vec<TraceCall>,
    absolute: Option<bool>,
    keys: HashMap<String, u32>,
    key_names: Vec<String>,
    errors: HashMap<String, u32>,
    error_names: Vec<String>,
    latest_end: Option<(i128, u64)>,
    /// The earliest start kept so far.
    earliest: Option<i128>,
    /// The first line's start: the fixed origin an error names absolute times from.
    first_start: Option<i128>,
}

impl<'o> Builder<'o> {
    fn new(opts: &'o ReadOptions) -> Self {
        Self {
            opts,
            header: Header::default(),
            lines: 0,
            skipped: 0,
            bad: Vec::new(),
            starts: Vec::new(),
            calls: Vec::new(),
            absolute: None,
            keys: HashMap::from([(String::new(), 0)]),
            key_names: vec![String::new()],
            errors: HashMap::new(),
            error_names: Vec::new(),
            latest_end: None,
            earliest: None,
            first_start: None,
        }
    }

    /// Handles a line's result: keeps the call, or skips or returns the error.
    fn line(&mut self, line: u64, r: Result<Fields<'_>, TraceError>) -> Result<(), TraceError> {
        let res = r.and_then(|f| {
            let raw = check(line, &f, self.header.clock)?;
            self.push(line, &raw)
        });
        match res {
            Ok(()) => Ok(()),
            Err(e) if self.opts.skip_bad_lines && e.skippable() => {
                self.skipped += 1;
                if self.bad.len() < KEEP_BAD {
                    self.bad.push(e);
                }
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn push(&mut self, line: u64, raw: &Raw<'_>) -> Result<(), TraceError> {
        match self.absolute {
            None => self.absolute = Some(raw.absolute),
            Some(a) if a != raw.absolute => {
                let (this, first) = if raw.absolute {
                    ("an absolute time", "relative milliseconds")
                } else {
                    ("relative milliseconds", "absolute times")
                };
                return Err(TraceError::Line {
                    line,
                    message: format!(
                        "start is {this}, but the trace's first call has {first}; a trace's \
                         starts are all absolute (RFC 3339, or UNIX milliseconds with \
                         \"clock\": \"unix\" in the header) or all relative"
                    ),
                });
            }
            Some(_) => {}
        }
        let end = raw.start + i128::from(raw.duration);
        if let Some((latest, latest_line)) = self.latest_end {
            let window = self.opts.reorder_window.as_nanos() as i128;
            if end + window < latest {
                steps(1);
                // Relative times are named as written; absolute ones from the first line's
                // start, an origin that does not move as lines are read.
                let first = if raw.absolute {
                    self.first_start.unwrap_or(raw.start)
                } else {
                    0
                };
                return Err(TraceError::Backwards {
                    line,
                    end_ms: (end - first) as f64 / 1e6,
                    back_ms: (latest - end) as f64 / 1e6,
                    latest_line,
                    window_ms: window as f64 / 1e6,
                });
            }
        }
        if self.calls.len() >= self.opts.max_calls {
            return Err(TraceError::TooLarge(format!(
                "the trace has more than {} calls (line {line}); split it, or sample it",
                self.opts.max_calls
            )));
        }
        let key = match raw.key {
            None => 0,
            Some(k) => match self.keys.get(k) {
                Some(&i) => i,
                None => {
                    if self.key_names.len() > self.opts.max_keys {
                        return Err(TraceError::TooLarge(format!(
                            "line {line}: the trace has more than {} distinct keys",
                            self.opts.max_keys
                        )));
                    }
                    let i = self.key_names.len() as u32;
                    self.keys.insert(k.to_string(), i);
                    self.key_names.push(k.to_string());
                    i
                }
            },
        };
        let error = match raw.error {
            None => u32::MAX,
            Some(k) => match self.errors.get(k) {
                Some(&i) => i,
                None if self.error_names.len() < self.opts.max_keys => {
                    let i = self.error_names.len() as u32;
                    self.errors.insert(k.to_string(), i);
                    self.error_names.push(k.to_string());
                    i
                }
                // Past the bound, further error kinds are not told apart.
                None => u32::MAX,
            },
        };
        if self.latest_end.is_none_or(|(l, _)| end > l) {
            self.latest_end = Some((end, line));
        }
        self.earliest = Some(self.earliest.map_or(raw.start, |e| e.min(raw.start)));
        self.first_start.get_or_insert(raw.start);
        self.starts.push(raw.start);
        self.calls.push(TraceCall {
            start: 0,
            duration: raw.duration,
            outcome: raw.outcome,
            key,
            status: raw.status,
            error,
        });
        Ok(())
    }

    fn finish(mut self) -> Result<Trace, TraceError> {
        if self.calls.is_empty() {
            return Err(TraceError::Empty {
                lines: self.lines,
                skipped: self.skipped,
            });
        }
        // Relative times keep their own zero (unless some start before it); absolute ones
        // count from the earliest start.
        let earliest = self.earliest.unwrap_or(0);
        let origin = if self.absolute == Some(true) {
            earliest
        } else {
            earliest.min(0)
        };
        let last = self
            .starts
            .iter()
            .zip(&self.calls)
            .map(|(s, c)| s + i128::from(c.duration))
            .max()
            .unwrap_or(origin);
        if last - origin > MAX_SPAN_NS {
            return Err(TraceError::TooLarge(
                "the trace spans more than 290 years from its first start to its last end".into(),
            ));
        }
        for (c, s) in self.calls.iter_mut().zip(&self.starts) {
            c.start = (s - origin) as u64;
        }
        Ok(Trace {
            header: self.header,
            calls: self.calls,
            keys: self.key_names,
            error_kinds: self.error_names,
            origin_unix_nanos: (self.absolute == Some(true)).then_some(origin),
            lines: self.lines,
            skipped: self.skipped,
            bad_lines: self.bad,
        })
    }
}

fn parse_header(line: u64, text: &str) -> Result<Header, TraceError> {
    let h: Header = serde_json::from_str(text).map_err(|e| TraceError::Line {
        line,
        message: format!("bad header: {}", strip_position(&e.to_string())),
    })?;
    if h.tripline_trace != TRACE_VERSION {
        return Err(TraceError::Version {
            found: h.tripline_trace,
        });
    }
    if !(h.sample_rate.is_finite() && h.sample_rate > 0.0 && h.sample_rate <= 1.0) {
        return Err(field_err(
            line,
            "sample_rate",
            h.sample_rate,
            "a share of the calls in (0, 1]",
        ));
    }
    Ok(h)
}

/// serde_json's messages end with " at line 1 column 7": the column is worth keeping, the line
/// (always 1 of a one-line document) is not.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line 1 column ") {
        Some(i) => format!("{} (column {})", &msg[..i], &msg[i + 18..]),
        None => msg.to_string(),
    }
}

/// Whether a JSON Lines trace's first line is its header: an object with a top-level
/// `tripline_trace` field (a record whose key or error merely contains the word is not).
fn is_header(text: &str) -> bool {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
        .is_ok_and(|m| m.contains_key("tripline_trace"))
}

fn read_str(text: &str, opts: &ReadOptions) -> Result<Trace, TraceError> {
    // A byte-order mark (as Windows editors write) says nothing about the format.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let format = opts
        .format
        .unwrap_or(if first.trim_start().starts_with('{') {
            Format::JsonLines
        } else {
            Format::Csv
        });
    match format {
        Format::JsonLines => read_jsonl(text, opts),
        Format::Csv => read_csv(text, opts),
    }
}

fn read_jsonl(text: &str, opts: &ReadOptions) -> Result<Trace, TraceError> {
    let mut b = Builder::new(opts);
    let mut seen_line = false;
    for (i, l) in text.lines().enumerate() {
        let line = i as u64 + 1;
        b.lines = line;
        let l = l.trim();
        if l.is_empty() {
            continue;
        }
        if !seen_line {
            seen_line = true;
            if is_header(l) {
                b.header = parse_header(line, l)?;
                continue;
            }
        }
        let fields = match serde_json::from_str::<JsonLine<'_>>(l).and_then(|j| j.fields()) {
            Ok(f) => Ok(f),
            Err(e) => Err(TraceError::Line {
                line,
                message: format!(
                    "not a trace record: {} (a JSON object with the fields {})",
                    strip_position(&e.to_string()),
                    COLUMNS.join(", ")
                ),
            }),
        };
        b.line(line, fields)?;
    }
    b.finish()
}

fn read_csv(text: &str, opts: &ReadOptions) -> Result<Trace, TraceError> {
    let mut b = Builder::new(opts);
    // The optional header comment, then the column row.
    let mut rest = text;
    let mut offset = 0u64;
    loop {
        let (l, tail) = match rest.split_once('\n') {
            Some((l, t)) => (l, t),
            None => (rest, ""),
        };
        if l.trim().is_empty() && !tail.is_empty() {
            rest = tail;
            offset += 1;
            continue;
        }
        if let Some(h) = l.trim().strip_prefix('#') {
            b.header = parse_header(offset + 1, h.trim())?;
            rest = tail;
            offset += 1;
        }
        break;
    }
    if rest.trim().is_empty() {
        b.lines = text.lines().count() as u64;
        return b.finish();
    }
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        // Column names and cells are trimmed, but for the key and the error kind, which are
        // kept as written (quoted, they may begin or end with spaces, and " a" is not "a").
        .trim(csv::Trim::Headers)
        .from_reader(rest.as_bytes());
    let columns: Vec<Option<usize>> = {
        let headers = rdr.headers().map_err(|e| TraceError::Line {
            line: offset + 1,
            message: format!("bad column row: {e}"),
        })?;
        let mut seen = [false; 6];
        let mut cols = Vec::new();
        for h in headers.iter() {
            match COLUMNS.iter().position(|c| *c == h) {
                Some(i) if !seen[i] => {
                    seen[i] = true;
                    cols.push(Some(i));
                }
                Some(_) => {
                    return Err(field_err(
                        offset + 1,
                        "column",
                        format!("{h:?}"),
                        "each column named once",
                    ));
                }
                None => {
                    return Err(field_err(
                        offset + 1,
                        "column",
                        format!("{:?}", short(h)),
                        &format!("one of {}", COLUMNS.join(", ")),
                    ));
                }
            }
        }
        for need in ["start", "duration_ms"] {
            let i = COLUMNS.iter().position(|c| *c == need).unwrap_or(0);
            if !seen[i] {
                return Err(field_err(
                    offset + 1,
                    "column row",
                    format!("{:?}", short(&headers.iter().collect::<Vec<_>>().join(","))),
                    "a row of column names with at least start and duration_ms (and outcome or status)",
                ));
            }
        }
        cols
    };
    b.lines = offset + 1;
    let mut record = csv::StringRecord::new();
    // Lines are counted from the records' byte offsets (the reader's own line count is off
    // under CRLF line ends).
    let bytes = rest.as_bytes();
    let (mut counted_to, mut newlines) = (0usize, 0u64);
    let mut line_at = |byte: u64| -> u64 {
        let mut byte = (byte as usize).min(bytes.len());
        // Under CRLF a record's position can point at the end of the line before it.
        while byte < bytes.len() && matches!(bytes[byte], b'\r' | b'\n') {
            byte += 1;
        }
        if byte >= counted_to {
            newlines += bytes[counted_to..byte]
                .iter()
                .filter(|&&c| c == b'\n')
                .count() as u64;
            counted_to = byte;
        }
        offset + newlines + 1
    };
    loop {
        let more = rdr.read_record(&mut record);
        let line = record.position().map_or(b.lines + 1, |p| line_at(p.byte()));
        match more {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let line = e.position().map_or(line, |p| line_at(p.byte()));
                b.lines = line;
                let r = Err(TraceError::Line {
                    line,
                    message: format!("not a CSV row: {e}"),
                });
                b.line(line, r)?;
                continue;
            }
        }
        b.lines = line;
        if record.len() == 1 && record.get(0).is_some_and(|c| c.trim().is_empty()) {
            continue; // an empty line
        }
        if record.len() != columns.len() {
            let r = Err(TraceError::Line {
                line,
                message: format!(
                    "has {} cells, the column row has {}",
                    record.len(),
                    columns.len()
                ),
            });
            b.line(line, r)?;
            continue;
        }
        let mut f = Fields::default();
        for (cell, col) in record.iter().zip(&columns) {
            let cell = if matches!(col, Some(4 | 5)) {
                cell
            } else {
                cell.trim()
            };
            if cell.is_empty() {
                continue;
            }
            let v = Some(Scalar::Str(Cow::Borrowed(cell)));
            match col {
                Some(0) => f.start = v,
                Some(1) => f.duration_ms = v,
                Some(2) => f.outcome = v,
                Some(3) => f.status = v,
                Some(4) => f.error = v,
                _ => f.key = v,
            }
        }
        b.line(line, Ok(f))?;
    }
    b.finish()
}

/// Counts the lines a line's checks look at (unit tests bound the reader's work with it).
#[cfg(test)]
fn steps(n: u64) {
    tests::STEPS.with(|s| s.set(s.get() + n));
}

#[cfg(not(test))]
fn steps(_: u64) {}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        pub(super) static STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Reads `text` with bad lines skipped; returns the trace and the steps it took.
    fn counted(text: &str) -> (Trace, u64) {
        STEPS.with(|s| s.set(0));
        let opts = ReadOptions {
            skip_bad_lines: true,
            ..ReadOptions::default()
        };
        let t = read(text.as_bytes(), &opts).unwrap();
        (t, STEPS.with(std::cell::Cell::get))
    }

    #[test]
    fn milliseconds_are_read_exactly_to_the_nanosecond() {
        use Millis::*;
        let cases = [
            ("312.5", Nanos(312_500_000)),
            ("0.000001", Nanos(1)),
            ("5e-7", Nanos(1)), // half a nanosecond rounds away from zero, as f64::round does
            ("4.9e-7", Nanos(0)),
            ("-3", Nanos(-3_000_000)),
            ("-0.0000005", Nanos(-1)),
            ("+2", Nanos(2_000_000)),
            (".5", Nanos(500_000)),
            ("5.", Nanos(5_000_000)),
            ("00001.5", Nanos(1_500_000)),
            ("1E3", Nanos(1_000_000_000)),
            ("1700000000000.000123", Nanos(1_700_000_000_000_000_123)),
            ("1e15", Nanos(1_000_000_000_000_000_000_000)),
            ("0e999999999999999999999", Nanos(0)),
            ("1e-999999999999999999999", Nanos(0)),
            ("1e16", OutOfRange),
            ("1e999999999999999999999", OutOfRange),
            ("inf", OutOfRange),
            ("NaN", OutOfRange),
            ("", NotANumber),
            ("-", NotANumber),
            ("1e", NotANumber),
            ("1.2.3", NotANumber),
            ("0x10", NotANumber),
            ("2026-12-01T19:00:00Z", NotANumber),
        ];
        for (text, want) in cases {
            assert_eq!(Millis::parse(text), want, "{text:?}");
        }
    }

    #[test]
    fn skipping_lines_out_of_order_takes_a_bounded_number_of_steps_per_line() {
        // n calls in order, each ending a second after the last, then n that end an hour
        // before the latest: every one of those is skipped.
        let trace = |n: u64| {
            let mut text = String::new();
            for i in 0..n {
                text.push_str(&format!(
                    "{{\"start\": {}, \"duration_ms\": 1, \"outcome\": \"success\"}}\n",
                    i * 1000
                ));
            }
            for _ in 0..n {
                text.push_str("{\"start\": 0, \"duration_ms\": 1, \"outcome\": \"failure\"}\n");
            }
            text
        };
        for n in [100, 1000, 4000] {
            let (t, steps) = counted(&trace(n));
            assert_eq!((t.calls.len() as u64, t.skipped), (n, n));
            assert!(
                steps <= 4 * 2 * n,
                "{steps} steps for {} lines: the skip path is not linear",
                2 * n
            );
        }
    }
}
