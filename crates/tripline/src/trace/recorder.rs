//! The recorder: a listener that puts every call's outcome in a bounded queue, and a
//! background thread that writes the queue to a trace.
//!
//! # Why a queue that drops
//! A recorder runs on every call of a production service, on the calling thread. Formatting a
//! line and writing it there would put a syscall (and a lock on the output) on the hot path;
//! blocking when the writer falls behind would turn a slow disk into a slow service, the very
//! thing a breaker exists to prevent. So the calling thread only moves a fixed-size entry into
//! a bounded queue (no allocation, no blocking); when the queue is full the entry is dropped
//! and counted, and the trace's consumers can tell from [`RecorderStats::dropped`] how
//! complete it is. Sampling ([`RecorderConfig::sample_rate`]) keeps the writer's load bounded
//! on busy services.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Format, Header, Record, Start, TraceClock, TraceOutcome, TraceWriter};
use crate::{BreakerName, Clock, Event, EventKind, Listener};

/// How a [`TraceRecorder`] records.
///
/// ```
/// use tripline::trace::{Format, RecorderConfig};
/// let c = RecorderConfig::default().sample_rate(0.1).format(Format::Csv).capacity(1 << 20);
/// assert_eq!(c.get_sample_rate(), 0.1);
/// ```
#[derive(Clone, Debug)]
pub struct RecorderConfig {
    capacity: usize,
    sample_rate: f64,
    rejections: bool,
    format: Format,
    source: Option<String>,
    anchor: Option<i128>,
    seed: u64,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        Self {
            capacity: 65_536,
            sample_rate: 1.0,
            rejections: true,
            format: Format::JsonLines,
            source: None,
            anchor: None,
            seed: 0,
        }
    }
}

impl RecorderConfig {
    /// Entries the queue holds before new ones are dropped (default 65 536, at most 2²⁴; an
    /// entry is 48 bytes).
    pub fn capacity(mut self, entries: usize) -> Self {
        self.capacity = entries;
        self
    }

    /// The share of calls kept, in (0, 1] (default 1). The choice is a hash of the event's
    /// sequence number, so it does not follow the outcomes. A sampled trace suits time windows
    /// and rates; a count window or a minimum number of calls sees `1 / rate` times fewer
    /// calls in a replay than it would live.
    pub fn sample_rate(mut self, rate: f64) -> Self {
        self.sample_rate = rate;
        self
    }

    /// The sample rate set.
    pub fn get_sample_rate(&self) -> f64 {
        self.sample_rate
    }

    /// Whether rejections become `rejected` lines (default on): a replay then sees every call
    /// the service asked for, knowing the outcome of those that were made.
    pub fn rejections(mut self, on: bool) -> Self {
        self.rejections = on;
        self
    }

    /// JSON Lines (default) or CSV.
    pub fn format(mut self, format: Format) -> Self {
        self.format = format;
        self
    }

    /// Free text for the header's `source`.
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Writes absolute times: `clock`'s readings (the breakers' clock) are mapped to wall time
    /// by reading both clocks now. Without it the trace's times are the breakers' clock
    /// readings, relative.
    pub fn wall_clock<C: Clock>(mut self, clock: &C) -> Self {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        self.anchor = Some(wall - i128::from(clock.now()));
        self
    }

    /// Seeds the sampling hash (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// What a recorder did so far.
///
/// ```
/// use tripline::trace::RecorderStats;
/// assert_eq!(RecorderStats::default().dropped, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecorderStats {
    /// Outcomes and rejections the listeners received.
    pub seen: u64,
    /// Left out by sampling.
    pub sampled_out: u64,
    /// Dropped because the queue was full (or the recorder had finished), or left out because
    /// the writer refused them (a call that ended more than a second before one already
    /// written: see [`TraceWriter::write`]).
    pub dropped: u64,
    /// Lines written.
    pub written: u64,
}

struct Entry {
    /// When the result was recorded (or the call refused), on the breaker's clock.
    at: u64,
    duration: u64,
    outcome: TraceOutcome,
    key: BreakerName,
}

enum Msg {
    Entry(Entry),
    Flush(SyncSender<()>),
    Stop,
}

struct Shared {
    tx: SyncSender<Msg>,
    /// Keep an event when `mix(seq) <= threshold` (`u64::MAX`: keep all).
    threshold: u64,
    seed: u64,
    rejections: bool,
    seen: AtomicU64,
    sampled_out: AtomicU64,
    dropped: AtomicU64,
    written: AtomicU64,
    error: Mutex<Option<String>>,
}

fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Records the outcome of every call of the breakers its listeners are subscribed to, as a
/// trace (see the [module docs](super) for the format), from a background thread.
///
/// ```
/// use tripline::trace::{read, ReadOptions, RecorderConfig, TraceRecorder, TraceOutcome};
/// use tripline::{BreakerConfig, CircuitBreaker, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let breaker = CircuitBreaker::with_clock("catalog", BreakerConfig::default(), clock.clone());
/// let recorder = TraceRecorder::new(Vec::new(), RecorderConfig::default())?;
/// breaker.subscribe(recorder.listener());
///
/// let permit = breaker.try_acquire().unwrap();
/// clock.advance(Duration::from_millis(250));
/// permit.record(tripline::Outcome::Failure);
/// breaker.force_open();
/// assert!(breaker.try_acquire().is_err()); // a `rejected` line
///
/// let (stats, bytes) = recorder.finish()?;
/// assert_eq!(stats.written, 2);
/// let trace = read(&bytes[..], &ReadOptions::default()).unwrap();
/// assert_eq!(trace.calls[0].duration, 250_000_000);
/// assert_eq!(trace.calls[1].outcome, TraceOutcome::Rejected);
/// assert_eq!(trace.key(trace.calls[0]), "catalog");
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct TraceRecorder<W: Write + Send + 'static = Box<dyn Write + Send>> {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<io::Result<W>>>,
}

impl<W: Write + Send + 'static> std::fmt::Debug for TraceRecorder<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceRecorder")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl TraceRecorder<io::BufWriter<std::fs::File>> {
    /// A recorder writing to a new file at `path` (in the configured format; a `.csv` name
    /// writes CSV).
    pub fn create(path: impl AsRef<std::path::Path>, config: RecorderConfig) -> io::Result<Self> {
        let path = path.as_ref();
        let config = match Format::from_path(path) {
            Some(f) => config.format(f),
            None => config,
        };
        Self::new(io::BufWriter::new(std::fs::File::create(path)?), config)
    }
}

impl<W: Write + Send + 'static> TraceRecorder<W> {
    /// A recorder writing to `out`; writes the header at once.
    pub fn new(out: W, config: RecorderConfig) -> io::Result<Self> {
        let invalid = |m: String| io::Error::new(io::ErrorKind::InvalidInput, m);
        let rate = config.sample_rate;
        if !(rate.is_finite() && rate > 0.0 && rate <= 1.0) {
            return Err(invalid(format!(
                "sample_rate must be in (0, 1], got {rate}"
            )));
        }
        if config.capacity == 0 || config.capacity > 1 << 24 {
            return Err(invalid(format!(
                "capacity must be in [1, 16777216], got {}",
                config.capacity
            )));
        }
        let header = Header {
            clock: if config.anchor.is_some() {
                TraceClock::Unix
            } else {
                TraceClock::Relative
            },
            sample_rate: rate,
            source: config.source.clone(),
            ..Header::default()
        };
        let writer = TraceWriter::new(out, config.format, &header)?;
        let (tx, rx) = sync_channel(config.capacity);
        let shared = Arc::new(Shared {
            tx,
            threshold: if rate >= 1.0 {
                u64::MAX
            } else {
                (rate * u64::MAX as f64) as u64
            },
            seed: config.seed,
            rejections: config.rejections,
            seen: AtomicU64::new(0),
            sampled_out: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            error: Mutex::new(None),
        });
        let anchor = config.anchor;
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("tripline-trace".into())
            .spawn(move || write_loop(rx, writer, &s, anchor))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// A listener for [`CircuitBreaker::subscribe`](crate::CircuitBreaker::subscribe) or
    /// [`Registry::subscribe`](crate::registry::Registry::subscribe); each line's key is the
    /// breaker's name (a registry names breakers by their keys).
    pub fn listener(&self) -> RecorderListener {
        RecorderListener {
            shared: self.shared.clone(),
            key: None,
        }
    }

    /// A listener whose lines all carry `key`, whatever the breaker's name.
    pub fn listener_with_key(&self, key: impl Into<String>) -> RecorderListener {
        RecorderListener {
            shared: self.shared.clone(),
            key: Some(BreakerName::from(key.into())),
        }
    }

    /// The figures so far.
    pub fn stats(&self) -> RecorderStats {
        stats(&self.shared)
    }

    /// Waits until everything queued before this call is written and flushed.
    pub fn flush(&self) -> io::Result<()> {
        let (ack, done) = sync_channel(1);
        self.shared
            .tx
            .send(Msg::Flush(ack))
            .map_err(|_| self.failure())?;
        done.recv().map_err(|_| self.failure())?;
        match self.error() {
            Some(e) => Err(io::Error::other(e)),
            None => Ok(()),
        }
    }

    /// Writes everything queued, stops the writer and returns the figures and the output.
    /// Listeners still subscribed count what they receive afterwards as dropped.
    pub fn finish(mut self) -> io::Result<(RecorderStats, W)> {
        let out = self.stop()?;
        Ok((stats(&self.shared), out))
    }

    fn stop(&mut self) -> io::Result<W> {
        let Some(thread) = self.thread.take() else {
            return Err(io::Error::other("the recorder has finished"));
        };
        let _ = self.shared.tx.send(Msg::Stop);
        match thread.join() {
            Ok(r) => r,
            Err(_) => Err(io::Error::other("the trace writer panicked")),
        }
    }

    fn error(&self) -> Option<String> {
        self.shared
            .error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn failure(&self) -> io::Error {
        io::Error::other(
            self.error()
                .unwrap_or_else(|| "the trace writer stopped".into()),
        )
    }
}

impl<W: Write + Send + 'static> Drop for TraceRecorder<W> {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.stop();
        }
    }
}

fn stats(s: &Shared) -> RecorderStats {
    let r = Ordering::Relaxed;
    RecorderStats {
        seen: s.seen.load(r),
        sampled_out: s.sampled_out.load(r),
        dropped: s.dropped.load(r),
        written: s.written.load(r),
    }
}

fn write_loop<W: Write>(
    rx: Receiver<Msg>,
    mut writer: TraceWriter<W>,
    shared: &Shared,
    anchor: Option<i128>,
) -> io::Result<W> {
    let mut batch: Vec<Entry> = Vec::with_capacity(4096);
    let mut failed = false;
    let write = |batch: &mut Vec<Entry>, writer: &mut TraceWriter<W>, failed: &mut bool| {
        // Concurrent callers may queue slightly out of order: a batch goes out by end time.
        batch.sort_by_key(|e| e.at);
        for e in batch.drain(..) {
            if *failed {
                shared.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            // A call ends when its result was recorded. Without a wall clock, times are the
            // breaker's clock readings, which start at its zero: a call said to be longer
            // than the reading (`record_with_duration`) starts there.
            let (start, duration) = match anchor {
                Some(a) => (
                    Start::UnixNanos(a + i128::from(e.at) - i128::from(e.duration)),
                    e.duration,
                ),
                None => {
                    let duration = e.duration.min(e.at);
                    (
                        Start::Relative(Duration::from_nanos(e.at - duration)),
                        duration,
                    )
                }
            };
            let mut r = Record::new(start, Duration::from_nanos(duration), e.outcome);
            r.key = Some(&e.key);
            match writer.write(&r) {
                Ok(()) => {
                    shared.written.fetch_add(1, Ordering::Relaxed);
                }
                // A record the writer refuses (a call that ended over a second before one
                // already written) is left out; the trace goes on.
                Err(err) if err.kind() == io::ErrorKind::InvalidInput => {
                    shared.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(err) => {
                    *failed = true;
                    shared.dropped.fetch_add(1, Ordering::Relaxed);
                    *shared
                        .error
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some(format!("writing the trace failed: {err}"));
                }
            }
        }
    };
    'outer: while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Entry(e) => batch.push(e),
                Msg::Flush(ack) => {
                    write(&mut batch, &mut writer, &mut failed);
                    if let Err(err) = writer.flush() {
                        failed = true;
                        *shared
                            .error
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(format!("flushing the trace failed: {err}"));
                    }
                    let _ = ack.send(());
                }
                Msg::Stop => break 'outer,
            }
            if batch.len() < 4096 {
                next = rx.try_recv().ok();
            }
        }
        write(&mut batch, &mut writer, &mut failed);
    }
    write(&mut batch, &mut writer, &mut failed);
    // Whatever arrived after the stop is not written.
    drop(rx);
    writer.into_inner()
}

/// The listener side of a [`TraceRecorder`]: subscribe it to breakers. It wants outcome events
/// (and rejections, unless the recorder was told not to record them) and does nothing else.
#[derive(Clone)]
pub struct RecorderListener {
    shared: Arc<Shared>,
    key: Option<BreakerName>,
}

impl std::fmt::Debug for RecorderListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecorderListener")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl RecorderListener {
    fn offer(&self, e: &Event, outcome: TraceOutcome, duration: Duration) {
        let s = &*self.shared;
        let r = Ordering::Relaxed;
        s.seen.fetch_add(1, r);
        let key = self.key.as_ref().unwrap_or(&e.breaker);
        if s.threshold != u64::MAX && mix(e.seq, s.seed ^ key.as_ptr() as u64) > s.threshold {
            s.sampled_out.fetch_add(1, r);
            return;
        }
        let entry = Entry {
            at: u64::try_from(e.at.as_nanos()).unwrap_or(u64::MAX),
            duration: u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX),
            outcome,
            key: key.clone(),
        };
        match s.tx.try_send(Msg::Entry(entry)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                s.dropped.fetch_add(1, r);
            }
        }
    }
}

impl Listener for RecorderListener {
    fn on_event(&self, e: &Event) {
        match &e.kind {
            EventKind::CallOutcome {
                outcome, duration, ..
            } => self.offer(e, (*outcome).into(), *duration),
            EventKind::Rejected { .. } if self.shared.rejections => {
                self.offer(e, TraceOutcome::Rejected, Duration::ZERO)
            }
            _ => {}
        }
    }

    fn wants_call_events(&self) -> bool {
        self.shared.rejections
    }

    fn wants_outcome_events(&self) -> bool {
        true
    }
}
