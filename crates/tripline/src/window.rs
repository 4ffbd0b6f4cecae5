//! Sliding windows with O(1) (count) or O(buckets) (time) snapshots and no lock.
//!
//! # Count window
//! The last N outcomes, as two bit rings (failed, slow) with running totals kept as each slot
//! is overwritten. N = 100 costs 32 bytes of bits. A writer claims a slot with one
//! `fetch_add` and flips its bits only when they change, so a run of successes over a clean
//! ring writes nothing but the sequence counter.
//!
//! # Time window
//! A ring of buckets covering the last `length`; bucket `e` (time / bucket width) lives in slot
//! `e mod B`. Each bucket is one `AtomicU64`: a 16-bit bucket stamp and 16-bit counts of calls,
//! failures and slow calls, updated by compare-and-swap. A stale bucket (its stamp is an older
//! epoch) is reset by the first writer that reuses it, in the same swap, so no count is lost to
//! a reset. When a bucket's call count would overflow 16 bits, all three counts are halved:
//! the rates are kept and the window keeps far more than any minimum-calls threshold.
//! Writers may be spread over `stripes` cache-line-separated rings (per thread) so concurrent
//! writers do not contend; a snapshot sums all stripes.
//!
//! A result lands in the bucket of the time it is **recorded** (when the call ended), not when
//! the call started: the window describes what was learned in the last `length`, and a call
//! that hung for longer than the window would otherwise land in an expired bucket and never be
//! seen, which is exactly the case (a hung dependency) the breaker exists for.

use crate::sync::{AtomicI32, AtomicU64, Ordering};

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
}

#[derive(Debug)]
pub(crate) enum Window {
    Count(CountWindow),
    Time(TimeWindow),
}

impl Window {
    #[inline]
    pub(crate) fn record(&self, now: u64, s: Sample) {
        match self {
            Window::Count(w) => w.record(s),
            Window::Time(w) => w.record(now, s),
        }
    }

    pub(crate) fn snapshot(&self, now: u64) -> WindowSnapshot {
        match self {
            Window::Count(w) => w.snapshot(),
            Window::Time(w) => w.snapshot(now),
        }
    }

    pub(crate) fn reset(&self) {
        match self {
            Window::Count(w) => w.reset(),
            Window::Time(w) => w.reset(),
        }
    }

    /// Heap bytes held (for the memory figures).
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Window::Count(w) => w.bits.len() * 8,
            Window::Time(w) => w.cells.len() * 8,
        }
    }
}

#[derive(Debug)]
pub(crate) struct CountWindow {
    /// `u64::MAX / size + 1`: the multiplier of Lemire's fastmod, so the slot of a record is
    /// two multiplications instead of a 64-bit division.
    fastmod: u64,
    seq: AtomicU64,
    /// `size.div_ceil(64)` failure words followed by as many slow words.
    bits: Box<[AtomicU64]>,
    /// At most 1,000,000 (validated), so the running totals fit 32 bits.
    size: u32,
    failures: AtomicI32,
    slow: AtomicI32,
}

impl CountWindow {
    pub(crate) fn new(size: u32) -> Self {
        let words = (size as usize).div_ceil(64);
        Self {
            // Wraps to 0 for size 1, which yields the right remainder, 0.
            fastmod: (u64::MAX / u64::from(size.max(1))).wrapping_add(1),
            seq: AtomicU64::new(0),
            bits: (0..words * 2).map(|_| AtomicU64::new(0)).collect(),
            size,
            failures: AtomicI32::new(0),
            slow: AtomicI32::new(0),
        }
    }

    /// `seq mod size` on the low 32 bits of `seq` (Lemire, Kaser and Kurz, "Faster remainder by
    /// direct computation", 2019). Where the low bits wrap, once every 2^32 records, one slot
    /// index repeats; the running totals stay exact, as they follow the bits.
    #[inline]
    fn slot(&self, seq: u64) -> u64 {
        let low = self.fastmod.wrapping_mul(u64::from(seq as u32));
        ((u128::from(low) * u128::from(self.size)) >> 64) as u64
    }

    #[inline]
    fn record(&self, s: Sample) {
        let idx = self.slot(self.seq.fetch_add(1, Ordering::Relaxed));
        let word = (idx / 64) as usize;
        let mask = 1u64 << (idx % 64);
        let (failed, slow) = self.bits.split_at(self.bits.len() / 2);
        set_bit(&failed[word], mask, s.failure, &self.failures);
        set_bit(&slow[word], mask, s.slow, &self.slow);
    }

    /// Whether the ring has not yet been filled (every record so far is still in it).
    #[inline]
    pub(crate) fn filling(&self) -> bool {
        self.seq.load(Ordering::Relaxed) <= u64::from(self.size)
    }

    fn snapshot(&self) -> WindowSnapshot {
        let calls = self.seq.load(Ordering::Relaxed).min(u64::from(self.size));
        WindowSnapshot {
            calls,
            failures: clamp(self.failures.load(Ordering::Relaxed), calls),
            slow_calls: clamp(self.slow.load(Ordering::Relaxed), calls),
            in_flight_slow: 0,
        }
    }

    fn reset(&self) {
        self.seq.store(0, Ordering::Relaxed);
        for w in self.bits.iter() {
            w.store(0, Ordering::Relaxed);
        }
        self.failures.store(0, Ordering::Relaxed);
        self.slow.store(0, Ordering::Relaxed);
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

const FIELD: u64 = 0xFFFF;

#[derive(Debug)]
pub(crate) struct TimeWindow {
    bucket_nanos: u64,
    /// When a good result next evaluates the rules (see [`TimeWindow::success_evaluation_due`]).
    next_success_eval: AtomicU64,
    cells: Box<[AtomicU64]>,
    /// At most 4,096 (validated).
    buckets: u32,
    stripes: u32,
    /// Cells from one stripe's first bucket to the next stripe's.
    stride: u32,
}

#[inline]
fn pack(stamp: u64, calls: u64, failures: u64, slow: u64) -> u64 {
    (stamp & FIELD) << 48 | calls << 32 | failures << 16 | slow
}

#[inline]
fn unpack(w: u64) -> (u64, u64, u64, u64) {
    (w >> 48, (w >> 32) & FIELD, (w >> 16) & FIELD, w & FIELD)
}

impl TimeWindow {
    pub(crate) fn new(bucket_nanos: u64, buckets: u32, stripes: u32) -> Self {
        let stripes = stripes.max(1);
        // One stripe: packed. Several: each stripe starts on its own pair of cache lines.
        let stride = if stripes == 1 {
            buckets
        } else {
            buckets.div_ceil(16) * 16
        };
        Self {
            bucket_nanos,
            next_success_eval: AtomicU64::new(0),
            cells: (0..stride as usize * stripes as usize)
                .map(|_| AtomicU64::new(0))
                .collect(),
            buckets,
            stripes,
            stride,
        }
    }

    /// Whether a good result recorded at `now` should evaluate the rules: it can trip only
    /// after old buckets expired, so at most once per bucket (the first caller past the due
    /// time wins).
    #[inline]
    pub(crate) fn success_evaluation_due(&self, now: u64) -> bool {
        let due = self.next_success_eval.load(Ordering::Relaxed);
        now >= due
            && self
                .next_success_eval
                .compare_exchange(
                    due,
                    now.saturating_add(self.bucket_nanos),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    #[inline]
    fn record(&self, now: u64, s: Sample) {
        let epoch = now / self.bucket_nanos;
        let stamp = epoch & FIELD;
        let stripe = if self.stripes == 1 {
            0
        } else {
            crate::sync::stripe_index() % self.stripes as usize
        };
        let slot = (epoch % u64::from(self.buckets)) as usize;
        let cell = &self.cells[stripe * self.stride as usize + slot];
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            let (cstamp, mut calls, mut failures, mut slow) = unpack(cur);
            if calls == 0 || cstamp != stamp {
                // A bucket stamped with a *newer* epoch means this writer's clock reading is
                // more than a whole window old: the sample is outside the window; drop it.
                let ahead = cstamp.wrapping_sub(stamp) & FIELD;
                if calls != 0 && ahead != 0 && ahead < 0x8000 {
                    return;
                }
                (calls, failures, slow) = (0, 0, 0);
            }
            if calls == FIELD {
                (calls, failures, slow) = (calls / 2, failures / 2, slow / 2);
            }
            let new = pack(
                stamp,
                calls + 1,
                failures + u64::from(s.failure),
                slow + u64::from(s.slow),
            );
            match cell.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    fn snapshot(&self, now: u64) -> WindowSnapshot {
        let epoch = now / self.bucket_nanos;
        let buckets = u64::from(self.buckets);
        let mut snap = WindowSnapshot::default();
        for stripe in 0..self.stripes as usize {
            for i in 0..buckets {
                // The epoch slot `i` would hold if it is inside the window.
                let back = (epoch % buckets + buckets - i) % buckets;
                let Some(expected) = epoch.checked_sub(back) else {
                    continue;
                };
                let w =
                    self.cells[stripe * self.stride as usize + i as usize].load(Ordering::Relaxed);
                let (stamp, calls, failures, slow) = unpack(w);
                if calls != 0 && stamp == expected & FIELD {
                    snap.calls += calls;
                    snap.failures += failures;
                    snap.slow_calls += slow;
                }
            }
        }
        snap
    }

    fn reset(&self) {
        for c in self.cells.iter() {
            c.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const F: Sample = Sample {
        failure: true,
        slow: false,
    };
    const S: Sample = Sample {
        failure: false,
        slow: false,
    };
    const SLOW: Sample = Sample {
        failure: false,
        slow: true,
    };

    #[test]
    fn count_window_slides() {
        let w = CountWindow::new(3);
        w.record(F);
        w.record(F);
        w.record(S);
        assert_eq!((w.snapshot().calls, w.snapshot().failures), (3, 2));
        w.record(S); // evicts the first F
        assert_eq!((w.snapshot().calls, w.snapshot().failures), (3, 1));
        w.record(SLOW);
        w.record(S);
        let s = w.snapshot();
        assert_eq!((s.calls, s.failures, s.slow_calls), (3, 0, 1));
        w.reset();
        assert_eq!(w.snapshot(), WindowSnapshot::default());
    }

    #[test]
    fn fastmod_matches_the_remainder() {
        for size in [1u32, 2, 3, 7, 64, 100, 130, 1000, 999_983, 1_000_000] {
            let w = CountWindow::new(size);
            for seq in (0..5000u64).chain([u64::from(u32::MAX) - 3, 1 << 31, 123_456_789]) {
                assert_eq!(
                    w.slot(seq),
                    u64::from(seq as u32) % u64::from(size),
                    "{seq} % {size}"
                );
            }
        }
    }

    #[test]
    fn count_window_crosses_word_boundaries() {
        let w = CountWindow::new(130);
        for i in 0..400u32 {
            w.record(if i % 4 == 0 { F } else { S });
        }
        // The last 130 of 400: indices 270..400, every fourth failed (272, 276, ... 396).
        let s = w.snapshot();
        assert_eq!(s.calls, 130);
        assert_eq!(s.failures, (270..400).filter(|i| i % 4 == 0).count() as u64);
    }

    #[test]
    fn time_window_expires_old_buckets() {
        let sec = 1_000_000_000;
        let w = TimeWindow::new(sec, 10, 1);
        w.record(0, F);
        w.record(5 * sec, S);
        assert_eq!(w.snapshot(9 * sec).calls, 2);
        // At t = 10 s the bucket of t = 0 has left the 10-bucket window.
        let s = w.snapshot(10 * sec);
        assert_eq!((s.calls, s.failures), (1, 0));
        // Reusing slot 0 at t = 20 s resets it instead of adding to stale counts.
        w.record(20 * sec, F);
        let s = w.snapshot(20 * sec);
        assert_eq!((s.calls, s.failures), (1, 1));
    }

    #[test]
    fn time_window_halves_on_overflow_keeping_rates() {
        let w = TimeWindow::new(1_000_000_000, 1, 1);
        for i in 0..200_000u32 {
            w.record(0, if i % 2 == 0 { F } else { S });
        }
        let s = w.snapshot(0);
        assert!(s.calls > 30_000, "{s:?}");
        let rate = s.failure_rate();
        assert!((rate - 50.0).abs() < 1.0, "{rate}");
    }

    #[test]
    fn time_window_drops_samples_older_than_the_window() {
        let sec = 1_000_000_000;
        let w = TimeWindow::new(sec, 2, 1);
        w.record(4 * sec, S); // slot 0, epoch 4
        w.record(2 * sec, F); // epoch 2 also maps to slot 0 but is older: dropped
        let s = w.snapshot(4 * sec);
        assert_eq!((s.calls, s.failures), (1, 0));
    }

    #[test]
    fn striped_time_window_sums_stripes() {
        let w = std::sync::Arc::new(TimeWindow::new(1_000_000_000, 4, 4));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let w = w.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        w.record(0, F);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(w.snapshot(0).failures, 4000);
    }
}
