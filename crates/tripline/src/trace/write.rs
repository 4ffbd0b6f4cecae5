//! Writing a trace: the header, then one line per call.

use std::io::{self, Write};
use std::time::Duration;

use super::read::{MAX_DURATION_NS, MAX_ERROR, MAX_KEY, MAX_SPAN_NS};
use super::{Format, Header, TRACE_VERSION, TraceClock, TraceOutcome};

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

/// Nanoseconds as milliseconds, exactly: `312.5`, `0.000001`, `5.0`.
fn ms(nanos: u128) -> String {
    let (whole, frac) = (nanos / 1_000_000, nanos % 1_000_000);
    let frac = format!("{frac:06}");
    let frac = frac.trim_end_matches('0');
    format!("{whole}.{}", if frac.is_empty() { "0" } else { frac })
}

/// A start as written: milliseconds (relative), or an RFC 3339 time to the nanosecond.
fn start_text(start: i128, absolute: bool) -> io::Result<String> {
    if !absolute {
        return Ok(ms(start as u128));
    }
    time::OffsetDateTime::from_unix_timestamp_nanos(start)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .ok_or_else(|| {
            invalid(format!(
                "start must be a time from year 0 to 9999 (RFC 3339), got {start} ns from the UNIX epoch"
            ))
        })
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
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
    /// The earliest start and the latest end written, in nanoseconds (since the epoch when
    /// absolute).
    span: Option<(i128, i128)>,
}

impl<W: Write> std::fmt::Debug for TraceWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceWriter")
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl<W: Write> TraceWriter<W> {
    /// A writer in `format`; writes `header` at once. A header its reader would refuse (a
    /// version other than [`TRACE_VERSION`], a `sample_rate` outside (0, 1]) is refused
    /// (`InvalidInput`).
    pub fn new(mut out: W, format: Format, header: &Header) -> io::Result<Self> {
        if header.tripline_trace != TRACE_VERSION {
            return Err(invalid(format!(
                "tripline_trace must be {TRACE_VERSION} (the version this tripline writes), got {}",
                header.tripline_trace
            )));
        }
        let rate = header.sample_rate;
        if !(rate.is_finite() && rate > 0.0 && rate <= 1.0) {
            return Err(invalid(format!(
                "sample_rate must be a share of the calls in (0, 1], got {rate}"
            )));
        }
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
            span: None,
        })
    }

    /// Writes one call, so that whatever it accepts reads back equal:
    ///
    /// * a duration over [`MAX_DURATION_MS`](super::MAX_DURATION_MS) (7 days) is written as
    ///   that, the start moved on so that the call still ends when it ended;
    /// * times are written exactly, to the nanosecond (milliseconds with up to six decimals,
    ///   or an RFC 3339 time);
    /// * a key's or an error kind's control characters are written escaped (`\u{9}` for a
    ///   tab) and the text cut (at a character boundary) to 512 bytes for a key, 256 for an
    ///   error kind; an empty one is written as none.
    ///
    /// What a reader would refuse is refused (`InvalidInput`) and nothing is written: a
    /// status outside [100, 599]; a start of the other kind than the first (a trace's starts
    /// are all absolute or all relative), or a relative one under a header that says
    /// `clock = unix`; an absolute start outside the years 0 to 9999; a call that ends more
    /// than a second (the reader's default reorder window) before the latest end written;
    /// and one that would stretch the trace over more than 2⁶³ ns (292 years) from its first
    /// start to its last end (for relative starts, from zero).
    pub fn write(&mut self, r: &Record<'_>) -> io::Result<()> {
        let absolute = matches!(r.start, Start::UnixNanos(_));
        if !absolute && self.clock == TraceClock::Unix
            || self.absolute.is_some_and(|a| a != absolute)
        {
            return Err(invalid(
                "a trace's starts are all absolute or all relative".into(),
            ));
        }
        if let Some(s) = r.status.filter(|s| !(100..=599).contains(s)) {
            return Err(invalid(format!(
                "status must be an HTTP status in [100, 599], got {s}"
            )));
        }
        let start = match r.start {
            Start::Relative(d) => d.as_nanos() as i128,
            Start::UnixNanos(n) => n,
        };
        // Longer calls are written as the longest a reader takes, ending when they ended.
        let duration = r.duration.as_nanos() as i128;
        let kept = duration.min(i128::from(MAX_DURATION_NS));
        let start = start.saturating_add(duration - kept);
        let end = start.saturating_add(kept);
        let (first, last) = self
            .span
            .map_or((start, end), |(f, l)| (f.min(start), l.max(end)));
        let origin = if absolute { first } else { 0 };
        if last.saturating_sub(origin) > MAX_SPAN_NS {
            return Err(invalid(format!(
                "a trace spans at most 2^63 ns (292 years) from {} to its last end; a call from \
                 {start} to {end} ns would stretch it from {first} to {last}",
                if absolute { "its first start" } else { "zero" }
            )));
        }
        if let Some((_, latest)) = self.span {
            let window = super::read::DEFAULT_REORDER_NS;
            if end + window < latest {
                return Err(invalid(format!(
                    "the call ends {} ms before the latest call written ends; calls are written \
                     in the order they ended, at most {} ms out of order",
                    ms((latest - end) as u128),
                    ms(window as u128)
                )));
            }
        }
        let start = start_text(start, absolute)?;
        let duration = ms(kept as u128);
        let status = r.status.map(|s| s.to_string());
        let error = r.error.and_then(|e| text_out(e, MAX_ERROR));
        let key = r.key.and_then(|k| text_out(k, MAX_KEY));
        match &mut self.sink {
            Sink::Json(w) => {
                let mut line = String::with_capacity(96);
                line.push_str("{\"start\":");
                if absolute {
                    line.push_str(&serde_json::to_string(&start)?);
                } else {
                    line.push_str(&start);
                }
                line.push_str(",\"duration_ms\":");
                line.push_str(&duration);
                line.push_str(",\"outcome\":\"");
                line.push_str(r.outcome.as_str());
                line.push('"');
                if let Some(s) = &status {
                    line.push_str(",\"status\":");
                    line.push_str(s);
                }
                for (name, v) in [("error", &error), ("key", &key)] {
                    if let Some(v) = v {
                        line.push_str(",\"");
                        line.push_str(name);
                        line.push_str("\":");
                        line.push_str(&serde_json::to_string(v.as_ref())?);
                    }
                }
                line.push_str("}\n");
                w.write_all(line.as_bytes())?;
            }
            Sink::Csv(w) => {
                w.write_record([
                    start.as_str(),
                    &duration,
                    r.outcome.as_str(),
                    status.as_deref().unwrap_or(""),
                    error.as_deref().unwrap_or(""),
                    key.as_deref().unwrap_or(""),
                ])?;
            }
        }
        self.absolute = Some(absolute);
        self.span = Some((first, last));
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

/// A key or an error kind as a reader takes it: control characters escaped, at most `max`
/// bytes (cut at a character boundary); `None` when empty.
fn text_out(text: &str, max: usize) -> Option<std::borrow::Cow<'_, str>> {
    use std::fmt::Write as _;
    if text.is_empty() {
        return None;
    }
    if text.len() <= max && !text.chars().any(char::is_control) {
        return Some(std::borrow::Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len().min(max));
    for c in text.chars() {
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
    (!out.is_empty()).then_some(std::borrow::Cow::Owned(out))
}
