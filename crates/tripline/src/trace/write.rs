//! Writing a trace: the header, then one line per call.

use std::io::{self, Write};
use std::time::Duration;

use serde::Serialize;

use super::{Format, Header, TraceClock, TraceOutcome};

/// When a call started.
///
/// ```
/// use tripline::trace::Start;
/// use std::time::Duration;
/// assert_ne!(Start::Relative(Duration::ZERO), Start::UnixNanos(0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Since the trace's own origin (written as milliseconds).
    Relative(Duration),
    /// Nanoseconds since the UNIX epoch (written as an RFC 3339 time, to the nanosecond).
    UnixNanos(i128),
}

/// One call, to be written.
///
/// ```
/// use tripline::trace::{Record, Start, TraceOutcome};
/// use std::time::Duration;
/// let r = Record::new(Start::Relative(Duration::ZERO), Duration::from_millis(300), TraceOutcome::Success);
/// assert_eq!(r.key, None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// When it started.
    pub start: Start,
    /// How long it took.
    pub duration: Duration,
    /// What it ended as.
    pub outcome: TraceOutcome,
    /// Its HTTP status, if it had one.
    pub status: Option<u16>,
    /// Its kind of error, if it had one.
    pub error: Option<&'a str>,
    /// What it was to (a breaker key).
    pub key: Option<&'a str>,
}

impl<'a> Record<'a> {
    /// A record without status, error kind or key.
    pub fn new(start: Start, duration: Duration, outcome: TraceOutcome) -> Self {
        Self {
            start,
            duration,
            outcome,
            status: None,
            error: None,
            key: None,
        }
    }

    /// The same record with a key.
    pub fn with_key(mut self, key: &'a str) -> Self {
        self.key = Some(key);
        self
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum StartOut {
    Ms(f64),
    Text(String),
}

#[derive(Serialize)]
struct Line<'a> {
    start: StartOut,
    duration_ms: f64,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

fn start_out(s: Start) -> io::Result<StartOut> {
    Ok(match s {
        Start::Relative(d) => StartOut::Ms(ms(d)),
        Start::UnixNanos(n) => {
            let t = time::OffsetDateTime::from_unix_timestamp_nanos(n)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
            StartOut::Text(
                t.format(&time::format_description::well_known::Rfc3339)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            )
        }
    })
}

enum Sink<W: Write> {
    Json(W),
    Csv(Box<csv::Writer<W>>),
}

/// Writes a trace, synchronously: the header first, then [`write`](Self::write) per call.
/// [`TraceRecorder`](super::TraceRecorder) uses one on its background thread; tools that
/// produce a trace offline (the simulator, a log converter) use one directly.
///
/// ```
/// use tripline::trace::{read, Format, Header, ReadOptions, Record, Start, TraceOutcome, TraceWriter};
/// use std::time::Duration;
///
/// let mut w = TraceWriter::new(Vec::new(), Format::Csv, &Header::default())?;
/// let r = Record::new(Start::Relative(Duration::from_millis(5)), Duration::from_millis(40), TraceOutcome::Failure)
///     .with_key("catalog/shard=3");
/// w.write(&r)?;
/// let bytes = w.into_inner()?;
/// let text = String::from_utf8(bytes).unwrap();
/// assert_eq!(text, "# {\"tripline_trace\":1,\"clock\":\"relative\",\"sample_rate\":1.0}\n\
///                   start,duration_ms,outcome,status,error,key\n5.0,40.0,failure,,,catalog/shard=3\n");
/// let back = read(text.as_bytes(), &ReadOptions::default()).unwrap();
/// assert_eq!(back.calls[0].duration, 40_000_000);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TraceWriter<W: Write> {
    sink: Sink<W>,
    clock: TraceClock,
    absolute: Option<bool>,
    written: u64,
}

impl<W: Write> std::fmt::Debug for TraceWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceWriter")
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl<W: Write> TraceWriter<W> {
    /// A writer in `format`; writes `header` at once.
    pub fn new(mut out: W, format: Format, header: &Header) -> io::Result<Self> {
        let head = serde_json::to_string(header)?;
        let sink = match format {
            Format::JsonLines => {
                out.write_all(head.as_bytes())?;
                out.write_all(b"\n")?;
                Sink::Json(out)
            }
            Format::Csv => {
                out.write_all(b"# ")?;
                out.write_all(head.as_bytes())?;
                out.write_all(b"\n")?;
                let mut w = csv::WriterBuilder::new().from_writer(out);
                w.write_record(["start", "duration_ms", "outcome", "status", "error", "key"])?;
                Sink::Csv(Box::new(w))
            }
        };
        Ok(Self {
            sink,
            clock: header.clock,
            absolute: None,
            written: 0,
        })
    }

    /// Writes one call, so that the line reads back: a duration over
    /// [`MAX_DURATION_MS`](super::MAX_DURATION_MS) is written as that, and a key's control
    /// characters are written escaped (`\u{9}` for a tab) and the key cut to 512 bytes. A
    /// trace's starts are all absolute or all relative: a record of the
    /// other kind than the first is refused (`InvalidInput`), and so is a relative start under
    /// a header that says `clock = unix`.
    pub fn write(&mut self, r: &Record<'_>) -> io::Result<()> {
        let absolute = matches!(r.start, Start::UnixNanos(_));
        if !absolute && self.clock == TraceClock::Unix
            || self.absolute.is_some_and(|a| a != absolute)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a trace's starts are all absolute or all relative",
            ));
        }
        self.absolute = Some(absolute);
        let key = r.key.map(key_out);
        let line = Line {
            start: start_out(r.start)?,
            // Longer calls are written as the longest a reader takes: every line written
            // reads back.
            duration_ms: ms(r.duration).min(super::read::MAX_DURATION_MS),
            outcome: r.outcome.as_str(),
            status: r.status,
            error: r.error,
            key: key.as_deref(),
        };
        match &mut self.sink {
            Sink::Json(w) => {
                serde_json::to_writer(&mut *w, &line)?;
                w.write_all(b"\n")?;
            }
            Sink::Csv(w) => {
                let start = match &line.start {
                    StartOut::Ms(m) => format!("{m:?}"),
                    StartOut::Text(t) => t.clone(),
                };
                let status = line.status.map(|s| s.to_string()).unwrap_or_default();
                w.write_record([
                    start.as_str(),
                    &format!("{:?}", line.duration_ms),
                    line.outcome,
                    &status,
                    line.error.unwrap_or(""),
                    line.key.unwrap_or(""),
                ])?;
            }
        }
        self.written += 1;
        Ok(())
    }

    /// Records written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Flushes the output.
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Json(w) => w.flush(),
            Sink::Csv(w) => w.flush(),
        }
    }

    /// Flushes and returns the output.
    pub fn into_inner(self) -> io::Result<W> {
        match self.sink {
            Sink::Json(mut w) => {
                w.flush()?;
                Ok(w)
            }
            Sink::Csv(w) => w.into_inner().map_err(|e| e.into_error()),
        }
    }
}

/// A key as a reader takes it: control characters escaped, at most 512 bytes (cut at a
/// character boundary).
fn key_out(key: &str) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write as _;
    let max = super::read::MAX_KEY;
    if key.len() <= max && !key.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(key);
    }
    let mut out = String::with_capacity(key.len().min(max));
    for c in key.chars() {
        let before = out.len();
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(before);
            break;
        }
    }
    std::borrow::Cow::Owned(out)
}
