//! Sliding windows with O(1) (count) or O(buckets) (time) snapshots and no lock.
//!
//! # A window belongs to a generation
//! Every transition into Closed or MetricsOnly starts a fresh window for the new generation,
//! and a result lands in the window of the generation that admitted it or nowhere: a writer
//! that read the state word before a transition can never add to the next generation's
//! counts, and a reset can never tear a running total. Neither window keeps a narrow
//! generation tag that a long-lived breaker could wrap:
//!
//! * The **count window** ([`count`]) is reset in place, under the transition lock. Its head
//!   word carries the position beside a 42-bit generation tag, and a guard word beside it the
//!   *resetting* mark and the writers registered. The reset marks the window resetting, waits
//!   for the writers that are between changing a bit and its running total (each registers in
//!   the guard for those few instructions), clears bits and totals, publishes the new
//!   generation's head and lifts the mark. A writer claims its slot with a compare-and-swap
//!   that checks the tag, and one that must change a bit registers and then checks the tag
//!   again, so a writer of another generation, or one that arrives while the reset runs,
//!   records nothing. The ring is cleared at every reset, so a tag only guards a writer that
//!   read the state word before a transition: two generations alias only for a writer stalled
//!   across 2^42 transitions (139 years at one per millisecond) between two instructions.
//! * The **time window** ([`time`]) is never cleared. Each bucket is numbered on a line that
//!   gives every generation a stretch of its own: bucket `e` (time since the window's creation
//!   / bucket width) of generation `g` is number `e + g × 2^16`, and a snapshot of generation
//!   `g` counts only the numbers of the last `length` on its own stretch. A generation's
//!   numbers are at least 2^16 buckets (more than any window holds) past every number an older
//!   generation's writer can make at the same time, so a new generation starts empty by
//!   construction, a writer of an older one can only write where no snapshot of the new one
//!   looks, and no count of transitions can bring an old bucket back: the line is 64 bits
//!   long, enough for 2^48 generations (8,900 years at one transition per millisecond).
//!
//! # A striped count window batches its fast successes
//! With stripes, a count window's fast successes (neither failed nor slow) of a full ring
//! are kept in the caller's stripe, a word of its own (a 43-bit generation tag, whether the
//! stripe saw the ring full, a count), and go into the ring (`CountWindow::record_successes`)
//! by batches: one claim of consecutive slots per batch instead of one per call, so a closed
//! call writes only its stripe's lines. Before any other result is recorded and before any
//! snapshot, every stripe's kept successes of the generation go in. Successes look alike in
//! the ring, so what it holds depends only on where the failures and slow calls sit among
//! them, and no success goes in after a result that came after it: the ring holds what one
//! ring fed each result at once holds. A kept success of an older generation goes with that
//! generation's window (its tag no longer matches and it is dropped, as the reset dropped
//! the ring). While the ring fills, and for a window that keeps call durations, each result
//! goes in on its own.
//!
//! A result lands in the bucket of the time it is **recorded** (when the call ended), not when
//! the call started: the window describes what was learned in the last `length`, and a call
//! that hung for longer than the window would otherwise land in an expired bucket and never be
//! seen, which is exactly the case (a hung dependency) the breaker exists for.
//!
//! # Call durations
//! With `call_durations` on, the window also keeps what its calls took, for the metrics' total
//! and mean (nothing decides on them); see each window's docs. Each duration counts at most a
//! week.

pub(crate) mod count;
pub(crate) mod time;

pub(crate) use count::CountWindow;
pub(crate) use time::TimeWindow;

/// What the window holds, or what a decision was based on.
///
/// ```
/// use tripline::WindowSnapshot;
/// let s = WindowSnapshot { calls: 13, failures: 8, slow_calls: 9, in_flight_slow: 0 };
/// assert!((s.failure_rate() - 61.5).abs() < 0.1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WindowSnapshot {
    /// Recorded calls (successes and failures; ignored outcomes are not recorded).
    pub calls: u64,
    /// Failed calls among them.
    pub failures: u64,
    /// Slow calls among them (failed or not).
    pub slow_calls: u64,
    /// Calls still in flight past the slow-call duration, counted as extra slow calls when
    /// the rules are evaluated (0 unless `count_in_flight_as_slow`).
    pub in_flight_slow: u64,
}

impl WindowSnapshot {
    /// Calls the slow-call rule counts: recorded plus overdue in-flight ones.
    pub fn total(&self) -> u64 {
        self.calls.saturating_add(self.in_flight_slow)
    }

    /// Failure rate in percent of recorded calls (0 when empty). In-flight calls have no
    /// outcome yet, so they do not dilute it.
    pub fn failure_rate(&self) -> f64 {
        pct(self.failures, self.calls)
    }

    /// Slow-call rate in percent of [`total`](Self::total), in-flight overdue calls included.
    pub fn slow_rate(&self) -> f64 {
        pct(
            self.slow_calls.saturating_add(self.in_flight_slow),
            self.total(),
        )
    }
}

fn pct(n: u64, d: u64) -> f64 {
    if d == 0 {
        0.0
    } else {
        n as f64 * 100.0 / d as f64
    }
}

/// One outcome as the window sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    pub(crate) failure: bool,
    pub(crate) slow: bool,
    /// What the call took, in nanoseconds (kept only with `call_durations`).
    pub(crate) nanos: u64,
}

/// The most a call's duration counts in a window's totals: a week, in microseconds.
const MAX_MICROS: u64 = 7 * 24 * 3600 * 1_000_000;

#[inline]
fn micros(nanos: u64) -> u64 {
    (nanos / 1000).min(MAX_MICROS)
}

/// The durations a window holds: how many calls they cover and their sum in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Durations {
    pub(crate) calls: u64,
    pub(crate) micros: u64,
}

#[derive(Debug)]
pub(crate) enum Window {
    Count(CountWindow),
    /// Boxed: a count window's breaker (the default) does not carry a time window's size.
    Time(Box<TimeWindow>),
}

impl Window {
    /// Records `s` in `generation`'s window: `None` when the window belongs to another
    /// generation (the result is stale and lands nowhere), else whether the window was still
    /// filling (a count window that had not yet wrapped; never for a time window).
    #[inline]
    pub(crate) fn record(&self, generation: u64, now: u64, s: Sample) -> Option<bool> {
        match self {
            Window::Count(w) => w.record(generation, s),
            Window::Time(w) => w.record(generation, now, s).then_some(false),
        }
    }

    /// `generation`'s window at `now` (empty for any other generation).
    pub(crate) fn snapshot(&self, generation: u64, now: u64) -> WindowSnapshot {
        match self {
            Window::Count(w) => w.snapshot(generation),
            Window::Time(w) => w.snapshot(generation, now),
        }
    }

    /// `generation`'s call durations at `now`; `None` when the window does not keep them.
    pub(crate) fn durations(&self, generation: u64, now: u64) -> Option<Durations> {
        match self {
            Window::Count(w) => w.durations(generation),
            Window::Time(w) => w.durations(generation, now),
        }
    }

    /// Starts `generation`'s empty window. Called under the transition lock, before the state
    /// word announcing `generation` is published.
    pub(crate) fn begin(&self, generation: u64) {
        match self {
            Window::Count(w) => w.begin(generation),
            Window::Time(w) => w.begin(),
        }
    }

    /// Heap bytes held (for the memory figures).
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Window::Count(w) => w.heap_bytes(),
            Window::Time(w) => w.heap_bytes(),
        }
    }
}
