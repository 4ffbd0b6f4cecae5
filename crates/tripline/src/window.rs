//! Sliding windows with O(1) (count) or O(buckets) (time) snapshots and no lock.
//!
//! # A window belongs to a generation
//! Every transition into Closed or MetricsOnly starts a fresh window for the new generation,
//! and a result lands in the window of the generation that admitted it or nowhere: a writer
//! that read the state word before a transition can never add to the next generation's
//! counts, and a reset can never tear a running total. The two windows get there differently.
//!
//! * The **count window** is reset in place, under the transition lock: the reset marks the
//!   window *resetting* in its head word (which carries the generation's tag), waits for the
//!   writers that are between changing a bit and its running total (each registers in the head
//!   word for those few instructions), clears bits and totals, and publishes the new tag. A
//!   writer claims its slot and registers with compare-and-swaps that check the tag, so a
//!   writer of another generation, or one that arrives while the reset runs, records nothing.
//! * The **time window** is never cleared: each bucket carries the generation's tag and its
//!   full bucket number, and a snapshot counts only the buckets of its own generation and of
//!   the last `length`. A new generation starts empty by construction, and a writer of an
//!   older generation either finds its own generation's (dead) bucket or leaves a newer one
//!   alone.
//!
//! # Count window
//! The last N outcomes, as two bit rings (failed, slow) with running totals kept as each slot
//! is overwritten. N = 100 costs 32 bytes of bits. A writer claims a slot with one
//! compare-and-swap on the head word and flips its bits only when they change, so a run of
//! successes over a clean ring writes nothing but the head.
//!
//! # Time window
//! A ring of buckets covering the last `length`; bucket `e` (time since the window's creation
//! / bucket width) lives in slot `e mod B`. Each bucket is one 128-bit atomic: the generation
//! tag (19 bits) and the bucket number (45 bits: every reading of a 64-bit nanosecond clock at
//! 1 ms buckets, the smallest allowed, so it cannot wrap), and 21-bit counts of calls, failures
//! and slow calls, updated by compare-and-swap. A stale bucket (an older bucket number or generation) is
//! reset by the first writer that reuses it, in the same swap, so no count is lost to a reset,
//! and no quiet period of any length can make an old bucket look current. When a bucket's call
//! count would overflow 21 bits, its counts are halved keeping the rates on the right side of
//! every threshold: the calls are rounded up and the good ones (not failed, not slow) are
//! rounded up, so a bucket that held one success still holds one and an all-failing bucket
//! stays all-failing. Writers may be spread over `stripes` cache-line-separated rings (per
//! thread) so concurrent writers do not contend; a snapshot sums all stripes.
//!
//! # Call durations
//! With `call_durations` on, the window also keeps what its calls took, for the metrics' total
//! and mean (nothing decides on them). A count window keeps each slot's duration in
//! microseconds beside its bits (8 bytes a slot) with a running total, changed by the same
//! registered writer that changes the slot, so a reset never tears it. A time window keeps, per
//! bucket, a second 128-bit cell with the same generation tag and bucket number as the counts'
//! cell and a 21-bit count beside a 43-bit sum of microseconds (101 days per bucket); when
//! either would overflow, both are halved, which keeps the mean. Each duration counts at most a
//! week.
//!
//! A result lands in the bucket of the time it is **recorded** (when the call ended), not when
//! the call started: the window describes what was learned in the last `length`, and a call
//! that hung for longer than the window would otherwise land in an expired bucket and never be
//! seen, which is exactly the case (a hung dependency) the breaker exists for.

use crate::sync::{AtomicI32, AtomicU64, AtomicU128, Ordering, spin, tag};
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
        self.calls + self.in_flight_slow
    }

    /// Failure rate in percent of recorded calls (0 when empty). In-flight calls have no
    /// outcome yet, so they do not dilute it.
    pub fn failure_rate(&self) -> f64 {
        pct(self.failures, self.calls)
    }

    /// Slow-call rate in percent of [`total`](Self::total), in-flight overdue calls included.
    pub fn slow_rate(&self) -> f64 {
        pct(self.slow_calls + self.in_flight_slow, self.total())
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
            Window::Count(w) => {
                w.bits.len() * 8
                    + w.durations.as_ref().map_or(0, |d| {
                        std::mem::size_of::<SlotDurations>() + d.slots.len() * 8
                    })
            }
            Window::Time(w) => {
                std::mem::size_of::<TimeWindow>()
                    + w.cells.len() * 16
                    + w.duration_cells
                        .as_ref()
                        .map_or(0, |d| std::mem::size_of::<DurationCells>() + d.0.len() * 16)
            }
        }
    }
}

/// Count window head word: position (20 bits: sizes up to 1,000,000), whether the ring has
/// wrapped, the resetting mark, registered writers (18 bits), the generation tag (24 bits).
const POS_MASK: u64 = (1 << 20) - 1;
const FULL: u64 = 1 << 20;
const RESETTING: u64 = 1 << 21;
const WRITER: u64 = 1 << 22;
const WRITERS_MASK: u64 = ((1 << 18) - 1) << 22;
const HEAD_TAG_SHIFT: u32 = 40;
const HEAD_TAG_BITS: u32 = 24;

#[inline]
fn head_tag(generation: u64) -> u64 {
    (generation & ((1 << HEAD_TAG_BITS) - 1)) << HEAD_TAG_SHIFT
}

#[derive(Debug)]
pub(crate) struct CountWindow {
    head: AtomicU64,
    /// `size.div_ceil(64)` failure words followed by as many slow words.
    bits: Box<[AtomicU64]>,
    /// At most 1,000,000 (validated), so positions fit 20 bits and totals 32.
    size: u32,
    failures: AtomicI32,
    slow: AtomicI32,
    /// With `call_durations`: each slot's duration in microseconds, and their running sum.
    durations: Option<Box<SlotDurations>>,
}

/// A time window's duration cells (behind one thin pointer, so a window without them costs
/// 8 bytes).
#[derive(Debug)]
struct DurationCells(Box<[AtomicU128]>);

/// A count window's call durations.
#[derive(Debug)]
struct SlotDurations {
    total_micros: AtomicU64,
    slots: Box<[AtomicU64]>,
}

impl CountWindow {
    /// An empty window of generation 0.
    pub(crate) fn new(size: u32, durations: bool) -> Self {
        let words = (size as usize).div_ceil(64);
        Self {
            head: AtomicU64::new(head_tag(0)),
            bits: (0..words * 2).map(|_| AtomicU64::new(0)).collect(),
            size: size.max(1),
            failures: AtomicI32::new(0),
            slow: AtomicI32::new(0),
            durations: durations.then(|| {
                Box::new(SlotDurations {
                    total_micros: AtomicU64::new(0),
                    slots: (0..size.max(1)).map(|_| AtomicU64::new(0)).collect(),
                })
            }),
        }
    }

    /// `None`: not this generation's window. Else whether the ring had not wrapped yet.
    #[inline]
    fn record(&self, generation: u64, s: Sample) -> Option<bool> {
        let tag = head_tag(generation);
        let own = |h: u64| h & (!0 << HEAD_TAG_SHIFT | RESETTING) == tag;
        // Claim the next slot.
        let mut cur = self.head.load(Ordering::Acquire);
        let idx = loop {
            if !own(cur) {
                return None;
            }
            let pos = cur & POS_MASK;
            let next = if pos + 1 >= u64::from(self.size) {
                (cur & !POS_MASK) | FULL
            } else {
                cur + 1
            };
            match self
                .head
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break pos,
                Err(actual) => cur = actual,
            }
        };
        let filling = cur & FULL == 0;
        let word = (idx / 64) as usize;
        let mask = 1u64 << (idx % 64);
        let (failed, slow) = self.bits.split_at(self.bits.len() / 2);
        let differs = |w: &AtomicU64, v: bool| (w.load(Ordering::Relaxed) & mask != 0) != v;
        if !differs(&failed[word], s.failure)
            && !differs(&slow[word], s.slow)
            && self.durations.is_none()
        {
            return Some(filling);
        }
        // A bit and its running total change together: register, so a reset waits for this
        // writer instead of clearing between the two.
        let mut cur = self.head.load(Ordering::Acquire);
        let mut round = 0;
        loop {
            if !own(cur) {
                return None;
            }
            if cur & WRITERS_MASK == WRITERS_MASK {
                spin(round);
                round += 1;
                cur = self.head.load(Ordering::Acquire);
                continue;
            }
            match self
                .head
                .compare_exchange(cur, cur + WRITER, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        set_bit(&failed[word], mask, s.failure, &self.failures);
        set_bit(&slow[word], mask, s.slow, &self.slow);
        if let Some(d) = &self.durations {
            let new = micros(s.nanos);
            let old = d.slots[idx as usize].swap(new, Ordering::Relaxed);
            // Wrapping: the sum is exact once every writer is done (a week per slot and at
            // most 2^20 slots stay far below 2^63).
            d.total_micros
                .fetch_add(new.wrapping_sub(old), Ordering::Relaxed);
        }
        self.head.fetch_sub(WRITER, Ordering::Release);
        Some(filling)
    }

    fn durations(&self, generation: u64) -> Option<Durations> {
        let d = self.durations.as_ref()?;
        let calls = self.snapshot(generation).calls;
        // A reader racing two writers of one slot may see the sum briefly below zero.
        let total = (d.total_micros.load(Ordering::Relaxed) as i64).max(0) as u64;
        Some(Durations {
            calls,
            micros: if calls == 0 { 0 } else { total },
        })
    }

    fn snapshot(&self, generation: u64) -> WindowSnapshot {
        let h = self.head.load(Ordering::Acquire);
        if h & (!0 << HEAD_TAG_SHIFT | RESETTING) != head_tag(generation) {
            return WindowSnapshot::default();
        }
        let calls = if h & FULL != 0 {
            u64::from(self.size)
        } else {
            h & POS_MASK
        };
        WindowSnapshot {
            calls,
            failures: clamp(self.failures.load(Ordering::Relaxed), calls),
            slow_calls: clamp(self.slow.load(Ordering::Relaxed), calls),
            in_flight_slow: 0,
        }
    }

    fn begin(&self, generation: u64) {
        // No new claim or registration from here on; wait for the registered writers.
        self.head.fetch_or(RESETTING, Ordering::AcqRel);
        let mut round = 0;
        while self.head.load(Ordering::Acquire) & WRITERS_MASK != 0 {
            spin(round);
            round += 1;
        }
        for w in self.bits.iter() {
            w.store(0, Ordering::Relaxed);
        }
        self.failures.store(0, Ordering::Relaxed);
        self.slow.store(0, Ordering::Relaxed);
        if let Some(d) = &self.durations {
            for slot in d.slots.iter() {
                slot.store(0, Ordering::Relaxed);
            }
            d.total_micros.store(0, Ordering::Relaxed);
        }
        self.head.store(head_tag(generation), Ordering::Release);
    }
}

/// Sets one bit of a ring to `value` and keeps the running total in step. The total moves only
/// by what the atomic read-modify-write saw, so it always equals the number of set bits once
/// concurrent writers are done (a reader may see a transient off-by-one, clamped).
#[inline]
fn set_bit(word: &AtomicU64, mask: u64, value: bool, total: &AtomicI32) {
    if (word.load(Ordering::Relaxed) & mask != 0) == value {
        return;
    }
    let old = if value {
        word.fetch_or(mask, Ordering::Relaxed)
    } else {
        word.fetch_and(!mask, Ordering::Relaxed)
    };
    if (old & mask != 0) != value {
        total.fetch_add(if value { 1 } else { -1 }, Ordering::Relaxed);
    }
}

fn clamp(v: i32, max: u64) -> u64 {
    (v.max(0) as u64).min(max)
}

/// Time window cell: high word `tag << 45 | bucket number`, low word three 21-bit counts. 45 bits
/// hold the bucket number of any reading of a 64-bit nanosecond clock at the smallest bucket
/// allowed (1 ms: 2^45 ms is over 1,100 years), so it never saturates in practice.
const CELL_TAG_BITS: u32 = 19;
const EPOCH_BITS: u32 = 45;
const EPOCH_MAX: u64 = (1 << EPOCH_BITS) - 1;
const COUNT_BITS: u32 = 21;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;

#[inline]
fn cell(tag: u64, epoch: u64, calls: u64, failures: u64, slow: u64) -> u128 {
    u128::from(tag << EPOCH_BITS | epoch) << 64
        | u128::from(calls | failures << COUNT_BITS | slow << (2 * COUNT_BITS))
}

/// `(tag, epoch, calls, failures, slow)`.
#[inline]
fn uncell(c: u128) -> (u64, u64, u64, u64, u64) {
    let hi = (c >> 64) as u64;
    let lo = c as u64;
    (
        hi >> EPOCH_BITS,
        hi & EPOCH_MAX,
        lo & COUNT_MAX,
        (lo >> COUNT_BITS) & COUNT_MAX,
        (lo >> (2 * COUNT_BITS)) & COUNT_MAX,
    )
}

#[inline]
fn cell_tag(generation: u64) -> u64 {
    generation & ((1 << CELL_TAG_BITS) - 1)
}

/// Halves a full bucket's counts. Calls are rounded up, and so are the calls that did not
/// fail and those that were not slow: both rates stay on the same side of every threshold
/// (a bucket with one success among 2^21 - 1 calls still has a success; an all-failing one
/// stays all-failing).
#[inline]
fn halve(calls: u64, failures: u64, slow: u64) -> (u64, u64, u64) {
    let c = calls.div_ceil(2);
    (
        c,
        c - (calls - failures).div_ceil(2),
        c - (calls - slow).div_ceil(2),
    )
}

#[derive(Debug)]
pub(crate) struct TimeWindow {
    bucket_nanos: u64,
    /// Bucket numbers count from here (the window's creation), so a clock whose origin is far
    /// from zero (a UNIX-epoch reading) does not use up the 45 bits.
    origin: u64,
    /// The next bucket boundary; the first good result past it evaluates the rules.
    next_success_eval: AtomicU64,
    /// The latest bucket number computed (see [`TimeWindow::epoch`]).
    epoch_hint: AtomicU64,
    /// `generation tag << 1 | below`: whether the last evaluation in that generation saw fewer
    /// than the minimum calls (then every good result evaluates, so the one that brings the
    /// window to the minimum is not missed).
    below_minimum: AtomicU64,
    cells: Box<[AtomicU128]>,
    /// With `call_durations`: per cell, the same tag and bucket number beside a count and a sum
    /// of microseconds (see the module docs).
    duration_cells: Option<Box<DurationCells>>,
    /// At most 4,096 (validated).
    buckets: u32,
    stripes: u32,
    /// Cells from one stripe's first bucket to the next stripe's.
    stride: u32,
}

impl TimeWindow {
    pub(crate) fn new(
        bucket_nanos: u64,
        buckets: u32,
        stripes: u32,
        origin: u64,
        durations: bool,
    ) -> Self {
        let stripes = stripes.max(1);
        let buckets = buckets.max(1);
        // One stripe: packed. Several: each stripe starts on its own pair of cache lines.
        let stride = if stripes == 1 {
            buckets
        } else {
            buckets.div_ceil(8) * 8
        };
        Self {
            bucket_nanos: bucket_nanos.max(1),
            origin,
            next_success_eval: AtomicU64::new(0),
            epoch_hint: AtomicU64::new(0),
            below_minimum: AtomicU64::new(1),
            cells: (0..stride as usize * stripes as usize)
                .map(|_| AtomicU128::new(0))
                .collect(),
            duration_cells: durations.then(|| {
                Box::new(DurationCells(
                    (0..stride as usize * stripes as usize)
                        .map(|_| AtomicU128::new(0))
                        .collect(),
                ))
            }),
            buckets,
            stripes,
            stride,
        }
    }

    /// The bucket number of `now`, saturating (it never wraps). The latest one computed is kept
    /// as a hint, checked with two multiplications, so most records do not divide.
    #[inline]
    fn epoch(&self, now: u64) -> u64 {
        let t = now.saturating_sub(self.origin);
        let hint = self.epoch_hint.load(Ordering::Relaxed);
        let start = hint.saturating_mul(self.bucket_nanos);
        if t >= start && t - start < self.bucket_nanos {
            return hint;
        }
        let e = (t / self.bucket_nanos).min(EPOCH_MAX);
        self.epoch_hint.store(e, Ordering::Relaxed);
        e
    }

    /// Whether a good result recorded at `now` in `generation` should evaluate the rules: when
    /// the last evaluation saw fewer than the minimum calls (or none has run in this
    /// generation), and otherwise once per bucket, as the window can only lose calls when a
    /// bucket boundary passes (the first caller past the boundary wins).
    #[inline]
    pub(crate) fn success_evaluation_due(&self, generation: u64, now: u64) -> bool {
        let hint = self.below_minimum.load(Ordering::Relaxed);
        if hint >> 1 != cell_tag(generation) || hint & 1 == 1 {
            return true;
        }
        let due = self.next_success_eval.load(Ordering::Relaxed);
        if now < due {
            return false;
        }
        let next = self.origin.saturating_add(
            self.epoch(now)
                .saturating_add(1)
                .saturating_mul(self.bucket_nanos),
        );
        self.next_success_eval
            .compare_exchange(due, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Notes what an evaluation in `generation` saw.
    #[inline]
    pub(crate) fn evaluated(&self, generation: u64, below_minimum: bool) {
        self.below_minimum.store(
            cell_tag(generation) << 1 | u64::from(below_minimum),
            Ordering::Relaxed,
        );
    }

    #[inline]
    fn record(&self, generation: u64, now: u64, s: Sample) -> bool {
        let tag = cell_tag(generation);
        let epoch = self.epoch(now);
        let stripe = if self.stripes == 1 {
            0
        } else {
            crate::sync::stripe_index() % self.stripes as usize
        };
        let slot = (epoch % u64::from(self.buckets)) as usize;
        let at = stripe * self.stride as usize + slot;
        let c = &self.cells[at];
        let mut cur = c.load(Ordering::Relaxed);
        loop {
            let (ctag, cepoch, mut calls, mut failures, mut slow) = uncell(cur);
            if calls == 0 || ctag != tag || cepoch != epoch {
                // A bucket of a newer generation, or a newer bucket of this one (this writer's
                // clock reading is more than a whole window old): not this writer's to touch.
                if calls != 0
                    && (tag::newer(ctag, tag, CELL_TAG_BITS) || (ctag == tag && cepoch > epoch))
                {
                    return ctag == tag;
                }
                (calls, failures, slow) = (0, 0, 0);
            }
            if calls == COUNT_MAX {
                (calls, failures, slow) = halve(calls, failures, slow);
            }
            let new = cell(
                tag,
                epoch,
                calls + 1,
                failures + u64::from(s.failure),
                slow + u64::from(s.slow),
            );
            match c.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    if let Some(d) = &self.duration_cells {
                        record_duration(&d.0[at], tag, epoch, micros(s.nanos));
                    }
                    return true;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    fn durations(&self, generation: u64, now: u64) -> Option<Durations> {
        let cells = self.duration_cells.as_ref()?;
        let tag = cell_tag(generation);
        let epoch = self.epoch(now);
        let buckets = u64::from(self.buckets);
        let mut out = Durations::default();
        for stripe in 0..self.stripes as usize {
            for i in 0..buckets {
                let back = (epoch % buckets + buckets - i) % buckets;
                let Some(expected) = epoch.checked_sub(back) else {
                    continue;
                };
                let (ctag, cepoch, calls, sum) = unduration(
                    cells.0[stripe * self.stride as usize + i as usize].load(Ordering::Relaxed),
                );
                if calls != 0 && ctag == tag && cepoch == expected {
                    out.calls += calls;
                    out.micros += sum;
                }
            }
        }
        Some(out)
    }

    fn snapshot(&self, generation: u64, now: u64) -> WindowSnapshot {
        let tag = cell_tag(generation);
        let epoch = self.epoch(now);
        let buckets = u64::from(self.buckets);
        let mut snap = WindowSnapshot::default();
        for stripe in 0..self.stripes as usize {
            for i in 0..buckets {
                // The bucket slot `i` would hold if it is inside the window.
                let back = (epoch % buckets + buckets - i) % buckets;
                let Some(expected) = epoch.checked_sub(back) else {
                    continue;
                };
                let c =
                    self.cells[stripe * self.stride as usize + i as usize].load(Ordering::Relaxed);
                let (ctag, cepoch, calls, failures, slow) = uncell(c);
                if calls != 0 && ctag == tag && cepoch == expected {
                    snap.calls += calls;
                    snap.failures += failures;
                    snap.slow_calls += slow;
                }
            }
        }
        snap
    }

    /// A new generation's window is empty by construction (its tag is on no bucket); only the
    /// evaluation gate starts over.
    fn begin(&self) {
        self.next_success_eval.store(0, Ordering::Relaxed);
    }
}

/// Duration cell: high word as the counts' cell, low word a 21-bit count and a 43-bit sum of
/// microseconds.
const DURATION_SUM_BITS: u32 = 43;
const DURATION_SUM_MAX: u64 = (1 << DURATION_SUM_BITS) - 1;

#[inline]
fn duration_cell(tag: u64, epoch: u64, calls: u64, sum: u64) -> u128 {
    u128::from(tag << EPOCH_BITS | epoch) << 64 | u128::from(calls << DURATION_SUM_BITS | sum)
}

/// `(tag, epoch, calls, sum)`.
#[inline]
fn unduration(c: u128) -> (u64, u64, u64, u64) {
    let hi = (c >> 64) as u64;
    let lo = c as u64;
    (
        hi >> EPOCH_BITS,
        hi & EPOCH_MAX,
        lo >> DURATION_SUM_BITS,
        lo & DURATION_SUM_MAX,
    )
}

/// Adds one call of `micros` to a duration cell, with the counts' cell's rules for stale and
/// newer cells; halves count and sum together when either would overflow, keeping the mean.
#[cold]
fn record_duration(c: &AtomicU128, tag: u64, epoch: u64, micros: u64) {
    let mut cur = c.load(Ordering::Relaxed);
    loop {
        let (ctag, cepoch, mut calls, mut sum) = unduration(cur);
        if calls == 0 || ctag != tag || cepoch != epoch {
            if calls != 0
                && (tag::newer(ctag, tag, CELL_TAG_BITS) || (ctag == tag && cepoch > epoch))
            {
                return;
            }
            (calls, sum) = (0, 0);
        }
        if calls >= COUNT_MAX || sum + micros > DURATION_SUM_MAX {
            // A duration is at most a week (under 2^40 microseconds), so one halving of a sum
            // below 2^43 leaves room for it.
            (calls, sum) = (calls.div_ceil(2), sum / 2);
        }
        let new = duration_cell(tag, epoch, calls + 1, sum + micros);
        match c.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(actual) => cur = actual,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const F: Sample = Sample {
        failure: true,
        slow: false,
        nanos: 0,
    };
    const S: Sample = Sample {
        failure: false,
        slow: false,
        nanos: 0,
    };
    const SLOW: Sample = Sample {
        failure: false,
        slow: true,
        nanos: 0,
    };
    const SEC: u64 = 1_000_000_000;

    #[test]
    fn count_window_slides() {
        let w = CountWindow::new(3, false);
        assert_eq!(w.record(0, F), Some(true));
        w.record(0, F);
        w.record(0, S);
        assert_eq!((w.snapshot(0).calls, w.snapshot(0).failures), (3, 2));
        w.record(0, S); // evicts the first F
        assert_eq!((w.snapshot(0).calls, w.snapshot(0).failures), (3, 1));
        w.record(0, SLOW);
        w.record(0, S);
        let s = w.snapshot(0);
        assert_eq!((s.calls, s.failures, s.slow_calls), (3, 0, 1));
        w.begin(1);
        assert_eq!(w.snapshot(1), WindowSnapshot::default());
    }

    #[test]
    fn a_count_window_belongs_to_one_generation() {
        let w = CountWindow::new(4, false);
        w.record(0, F);
        w.begin(1);
        // A writer of generation 0 (it read the state word before the reset) lands nowhere.
        assert_eq!(w.record(0, F), None);
        assert_eq!(w.snapshot(1), WindowSnapshot::default());
        assert_eq!(w.record(1, S), Some(true));
        assert_eq!(w.snapshot(1).calls, 1);
        // Other generations read as empty.
        assert_eq!(w.snapshot(0), WindowSnapshot::default());
        assert_eq!(w.snapshot(2), WindowSnapshot::default());
    }

    #[test]
    fn count_window_positions_wrap_at_the_size() {
        for size in [1u32, 2, 3, 7, 64, 100, 130, 1000] {
            let w = CountWindow::new(size, false);
            for i in 0..(3 * size + 5) {
                w.record(0, if i % 3 == 0 { F } else { S });
            }
            let n = 3 * size + 5;
            let s = w.snapshot(0);
            assert_eq!(s.calls, u64::from(size));
            let kept = (n - size..n).filter(|i| i % 3 == 0).count() as u64;
            assert_eq!(s.failures, kept, "size {size}");
        }
    }

    #[test]
    fn count_window_crosses_word_boundaries() {
        let w = CountWindow::new(130, false);
        for i in 0..400u32 {
            w.record(0, if i % 4 == 0 { F } else { S });
        }
        // The last 130 of 400: indices 270..400, every fourth failed (272, 276, ... 396).
        let s = w.snapshot(0);
        assert_eq!(s.calls, 130);
        assert_eq!(s.failures, (270..400).filter(|i| i % 4 == 0).count() as u64);
    }

    #[test]
    fn time_window_expires_old_buckets() {
        let w = TimeWindow::new(SEC, 10, 1, 0, false);
        w.record(0, 0, F);
        w.record(0, 5 * SEC, S);
        assert_eq!(w.snapshot(0, 9 * SEC).calls, 2);
        // At t = 10 s the bucket of t = 0 has left the 10-bucket window.
        let s = w.snapshot(0, 10 * SEC);
        assert_eq!((s.calls, s.failures), (1, 0));
        // Reusing slot 0 at t = 20 s resets it instead of adding to stale counts.
        w.record(0, 20 * SEC, F);
        let s = w.snapshot(0, 20 * SEC);
        assert_eq!((s.calls, s.failures), (1, 1));
    }

    /// The long-horizon defects of 16-bit bucket stamps: a slot more than 2^15 buckets old
    /// looked "ahead" (records dropped for hours), and at multiples of lcm(buckets, 65,536)
    /// stale buckets read as current.
    #[test]
    fn no_quiet_period_blinds_the_time_window_or_revives_old_buckets() {
        let w = TimeWindow::new(SEC, 10, 1, 0, false);
        for t in 0..10 {
            w.record(0, t * SEC, S);
        }
        for t in 40_000..40_010 {
            assert!(w.record(0, t * SEC, F));
        }
        let s = w.snapshot(0, 40_009 * SEC);
        assert_eq!((s.calls, s.failures), (10, 10));

        let w = TimeWindow::new(SEC, 10, 1, 0, false);
        for t in 0..10 {
            w.record(0, t * SEC, F);
        }
        assert_eq!(w.snapshot(0, 327_689 * SEC), WindowSnapshot::default());
        // And at every gap from a second to ten years.
        for gap in [1u64, 11, 32_768, 65_536, 327_680, 1 << 20, 315_360_000] {
            let w = TimeWindow::new(SEC, 10, 1, 0, false);
            w.record(0, 0, F);
            let later = (gap + 9) * SEC;
            assert_eq!(w.snapshot(0, later).calls, 0, "gap {gap}");
            assert!(w.record(0, later, S));
            assert_eq!(w.snapshot(0, later).calls, 1, "gap {gap}");
        }
    }

    #[test]
    fn time_window_counts_from_its_own_origin() {
        // Clocks whose origin is a UNIX-epoch reading or close to u64::MAX.
        for origin in [1_700_000_000 * SEC, u64::MAX - 100 * SEC] {
            let w = TimeWindow::new(1_000_000, 10, 1, origin, false);
            w.record(0, origin, F);
            w.record(0, origin + 5_000_000, S);
            let s = w.snapshot(0, origin + 9_000_000);
            assert_eq!((s.calls, s.failures), (2, 1), "origin {origin}");
            assert_eq!(w.snapshot(0, u64::MAX).calls, 0);
        }
    }

    #[test]
    fn a_time_window_belongs_to_one_generation() {
        let w = TimeWindow::new(SEC, 10, 1, 0, false);
        w.record(0, 0, F);
        w.begin();
        assert_eq!(w.snapshot(1, 0), WindowSnapshot::default());
        assert!(w.record(1, 0, S));
        // A late writer of generation 0 does not add to generation 1's bucket.
        assert!(!w.record(0, 0, F));
        let s = w.snapshot(1, 0);
        assert_eq!((s.calls, s.failures), (1, 0));
        assert_eq!(w.snapshot(0, 0), WindowSnapshot::default());
    }

    #[test]
    fn time_window_halves_on_overflow_keeping_rates() {
        let w = TimeWindow::new(SEC, 1, 1, 0, false);
        for i in 0..5_000_000u32 {
            w.record(0, 0, if i % 2 == 0 { F } else { S });
        }
        let s = w.snapshot(0, 0);
        assert!(s.calls > 1_000_000, "{s:?}");
        let rate = s.failure_rate();
        assert!((rate - 50.0).abs() < 1.0, "{rate}");
    }

    /// Halving keeps the 100 % edge: one success among a full bucket's calls is still there
    /// after halving (so a 100 % threshold does not trip), and an all-failing bucket stays
    /// all-failing (so it still does).
    #[test]
    fn halving_keeps_the_full_threshold_edge() {
        for (calls, failures) in [
            (COUNT_MAX, COUNT_MAX - 1),
            (COUNT_MAX, COUNT_MAX),
            (COUNT_MAX - 1, COUNT_MAX - 1),
            (COUNT_MAX - 1, COUNT_MAX - 2),
            (COUNT_MAX, 0),
            (COUNT_MAX, 1),
        ] {
            let (c, f, s) = halve(calls, failures, failures);
            assert_eq!(f == c, failures == calls, "{calls}/{failures} -> {c}/{f}");
            assert_eq!(f == 0, failures == 0, "{calls}/{failures} -> {c}/{f}");
            assert_eq!(s, f);
            assert!((f as f64 / c as f64 - failures as f64 / calls as f64).abs() < 1e-5);
        }
        // Through the window: one success, then failures until the bucket halves.
        let w = TimeWindow::new(SEC, 1, 1, 0, false);
        w.record(0, 0, S);
        for _ in 0..COUNT_MAX + 10 {
            w.record(0, 0, F);
        }
        let s = w.snapshot(0, 0);
        assert!(s.failures < s.calls, "{s:?}");
    }

    #[test]
    fn time_window_drops_samples_older_than_the_window() {
        let w = TimeWindow::new(SEC, 2, 1, 0, false);
        w.record(0, 4 * SEC, S); // slot 0, bucket 4
        w.record(0, 2 * SEC, F); // bucket 2 also maps to slot 0 but is older: dropped
        let s = w.snapshot(0, 4 * SEC);
        assert_eq!((s.calls, s.failures), (1, 0));
    }

    #[test]
    fn the_success_gate_opens_below_the_minimum_and_at_each_boundary() {
        let w = TimeWindow::new(SEC, 10, 1, 0, false);
        // No evaluation yet in this generation: due.
        assert!(w.success_evaluation_due(0, 0));
        w.evaluated(0, true);
        assert!(w.success_evaluation_due(0, SEC / 10));
        w.evaluated(0, false);
        // Above the minimum: once per bucket, at the first result past each boundary.
        assert!(w.success_evaluation_due(0, SEC / 5));
        assert!(!w.success_evaluation_due(0, SEC / 2));
        assert!(!w.success_evaluation_due(0, SEC - 1));
        assert!(w.success_evaluation_due(0, SEC));
        assert!(!w.success_evaluation_due(0, SEC + 1));
        // A hint of another generation counts as "not evaluated yet".
        assert!(w.success_evaluation_due(1, SEC + 2));
    }

    #[test]
    fn striped_time_window_sums_stripes() {
        let w = std::sync::Arc::new(TimeWindow::new(SEC, 4, 4, 0, false));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        w.record(0, 0, F);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(w.snapshot(0, 0).failures, 4000);
    }

    /// Writers racing resets with real threads: after every reset, the running totals match
    /// the bits, and no generation-0 result is counted in a later generation.
    #[test]
    fn count_window_resets_racing_writers_never_tear_the_totals() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicU64};
        let w = Arc::new(CountWindow::new(64, false));
        let generation = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (w, g, stop) = (w.clone(), generation.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let gen_ = g.load(Ordering::Relaxed);
                        // Odd generations see only successes; even ones only failures.
                        let s = if gen_ % 2 == 0 { F } else { S };
                        w.record(gen_, s);
                        i += 1;
                    }
                    i
                })
            })
            .collect();
        for round in 1..=2_000u64 {
            w.begin(round);
            generation.store(round, Ordering::Relaxed);
            let s = w.snapshot(round);
            if round % 2 == 1 {
                // Only successes may be in an odd generation's window.
                assert_eq!(s.failures, 0, "round {round}: {s:?}");
            }
        }
        stop.store(true, Ordering::Relaxed);
        for h in writers {
            h.join().unwrap();
        }
        // Quiesced: the totals equal the bits.
        let (failed, _) = w.bits.split_at(w.bits.len() / 2);
        let bits: u32 = failed
            .iter()
            .map(|b| b.load(Ordering::Relaxed).count_ones())
            .sum();
        assert_eq!(w.failures.load(Ordering::Relaxed), bits as i32);
    }
}
