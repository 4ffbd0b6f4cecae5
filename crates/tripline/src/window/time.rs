//! The time window: a ring of buckets covering the last `length`; a bucket lives in slot
//! `number mod B`. Each bucket is one 128-bit atomic: its number on the generations' line
//! (see the module docs of [`super`]) in the high half, and 21-bit counts of calls, failures
//! and slow calls in the low half, updated by compare-and-swap. A bucket with a lower number
//! than the writer's (an older bucket, or an older generation's) is reset by the first writer
//! that reuses it, in the same swap, so no count is lost to a reset, and no quiet period of any
//! length can make an old bucket look current. When a bucket's call count would overflow 21
//! bits, its counts are halved keeping the rates on the right side of every threshold: the
//! calls are rounded up and the good ones (not failed, not slow) are rounded up, so a bucket
//! that held one success still holds one and an all-failing bucket stays all-failing. Writers
//! may be spread over `stripes` cache-line-separated rings (per thread) so concurrent writers
//! do not contend; a snapshot sums all stripes.
//!
//! With `call_durations` on, each bucket has a second 128-bit cell with the same number and a
//! 21-bit count beside a 43-bit sum of microseconds (101 days per bucket); when either would
//! overflow, both are halved, which keeps the mean.

use super::{Durations, Sample, WindowSnapshot, micros};
use crate::sync::{AtomicU64, AtomicU128, Ordering};

/// Bucket numbers since the window's creation are capped here (2^45 buckets of the smallest
/// width, 1 ms, are 1,100 years), so that a number on the line never overflows.
const EPOCH_MAX: u64 = (1 << 45) - 1;
/// How far apart two generations' stretches of the line are: more buckets than any window
/// holds (4,096), with room for writers whose clock reading is up to 61,440 buckets ahead of a
/// reader's.
const STRETCH: u64 = 1 << 16;
const COUNT_BITS: u32 = 21;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;

/// Bucket `epoch` of `generation`, on the line: `epoch + generation × 2^16`, saturating (after
/// 2^48 generations, which a breaker does not live to make).
#[inline]
fn number(generation: u64, epoch: u64) -> u64 {
    epoch.saturating_add(generation.saturating_mul(STRETCH))
}

#[inline]
fn cell(number: u64, calls: u64, failures: u64, slow: u64) -> u128 {
    u128::from(number) << 64 | u128::from(calls | failures << COUNT_BITS | slow << (2 * COUNT_BITS))
}

/// `(number, calls, failures, slow)`.
#[inline]
fn uncell(c: u128) -> (u64, u64, u64, u64) {
    let lo = c as u64;
    (
        (c >> 64) as u64,
        lo & COUNT_MAX,
        (lo >> COUNT_BITS) & COUNT_MAX,
        (lo >> (2 * COUNT_BITS)) & COUNT_MAX,
    )
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
    /// from zero (a UNIX-epoch reading) does not use up the line.
    origin: u64,
    /// The next bucket boundary; the first good result past it evaluates the rules.
    next_success_eval: AtomicU64,
    /// The latest bucket number computed (see [`TimeWindow::epoch`]).
    epoch_hint: AtomicU64,
    /// `generation << 1 | below`: whether the last evaluation in that generation saw fewer
    /// than the minimum calls (then every good result evaluates, so the one that brings the
    /// window to the minimum is not missed).
    below_minimum: AtomicU64,
    cells: Box<[AtomicU128]>,
    /// With `call_durations`: per cell, the same number beside a count and a sum of
    /// microseconds.
    duration_cells: Option<Box<DurationCells>>,
    /// At most 4,096 (validated).
    buckets: u32,
    stripes: u32,
    /// Cells from one stripe's first bucket to the next stripe's.
    stride: u32,
}

/// A time window's duration cells (behind one thin pointer, so a window without them costs
/// 8 bytes).
#[derive(Debug)]
struct DurationCells(Box<[AtomicU128]>);

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
        let cells = || {
            (0..stride as usize * stripes as usize)
                .map(|_| AtomicU128::new(0))
                .collect()
        };
        Self {
            bucket_nanos: bucket_nanos.max(1),
            origin,
            next_success_eval: AtomicU64::new(0),
            epoch_hint: AtomicU64::new(0),
            below_minimum: AtomicU64::new(1),
            cells: cells(),
            duration_cells: durations.then(|| Box::new(DurationCells(cells()))),
            buckets,
            stripes,
            stride,
        }
    }

    /// The bucket number of `now` since the window's creation, saturating (it never wraps).
    /// The latest one computed is kept as a hint, checked with two multiplications, so most
    /// records do not divide.
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

    /// Whether a good result recorded at `now` in `generation` should evaluate the rules (see
    /// [`rules::time_success_gate`](crate::rules::time_success_gate)); the first caller past a
    /// boundary wins it, so a bucket is judged once.
    #[inline]
    pub(crate) fn success_evaluation_due(&self, generation: u64, now: u64) -> bool {
        let hint = self.below_minimum.load(Ordering::Relaxed);
        // No evaluation yet in this generation counts as "below the minimum".
        let below = hint >> 1 != generation || hint & 1 == 1;
        let due = self.next_success_eval.load(Ordering::Relaxed);
        if !crate::rules::time_success_gate(below, now, due) {
            return false;
        }
        if below {
            return true;
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
            generation << 1 | u64::from(below_minimum),
            Ordering::Relaxed,
        );
    }

    /// Records `s` at `now` in `generation`'s bucket. A sample older than its slot's bucket
    /// (a reading more than a window old, or one of an older generation) lands nowhere.
    #[inline]
    pub(crate) fn record(&self, generation: u64, now: u64, s: Sample) -> bool {
        let n = number(generation, self.epoch(now));
        let stripe = if self.stripes == 1 {
            0
        } else {
            crate::sync::stripe_index() % self.stripes as usize
        };
        let at = stripe * self.stride as usize + (n % u64::from(self.buckets)) as usize;
        let c = &self.cells[at];
        let mut cur = c.load(Ordering::Relaxed);
        loop {
            let (cn, mut calls, mut failures, mut slow) = uncell(cur);
            if calls != 0 && cn > n {
                // A newer bucket: of this generation (this writer's clock reading is more than
                // a whole window old) or of a newer one. Not this writer's to touch.
                return true;
            }
            if calls == 0 || cn < n {
                (calls, failures, slow) = (0, 0, 0);
            }
            if calls == COUNT_MAX {
                (calls, failures, slow) = halve(calls, failures, slow);
            }
            let new = cell(
                n,
                calls + 1,
                failures + u64::from(s.failure),
                slow + u64::from(s.slow),
            );
            match c.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    if let Some(d) = &self.duration_cells {
                        record_duration(&d.0[at], n, micros(s.nanos));
                    }
                    return true;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// The numbers a snapshot of `generation` at `now` counts, slot by slot: `(slot, number)`
    /// for each bucket of the last `length`.
    fn live(&self, generation: u64, now: u64) -> impl Iterator<Item = (usize, u64)> + use<> {
        let top = number(generation, self.epoch(now));
        let buckets = u64::from(self.buckets);
        (0..buckets).filter_map(move |i| {
            let back = (top % buckets + buckets - i) % buckets;
            top.checked_sub(back).map(|n| (i as usize, n))
        })
    }

    pub(crate) fn durations(&self, generation: u64, now: u64) -> Option<Durations> {
        let cells = self.duration_cells.as_ref()?;
        let mut out = Durations::default();
        for stripe in 0..self.stripes as usize {
            for (i, expected) in self.live(generation, now) {
                let (cn, calls, sum) =
                    unduration(cells.0[stripe * self.stride as usize + i].load(Ordering::Relaxed));
                if calls != 0 && cn == expected {
                    out.calls += calls;
                    out.micros += sum;
                }
            }
        }
        Some(out)
    }

    pub(crate) fn snapshot(&self, generation: u64, now: u64) -> WindowSnapshot {
        let mut snap = WindowSnapshot::default();
        for stripe in 0..self.stripes as usize {
            for (i, expected) in self.live(generation, now) {
                let c = self.cells[stripe * self.stride as usize + i].load(Ordering::Relaxed);
                let (cn, calls, failures, slow) = uncell(c);
                if calls != 0 && cn == expected {
                    snap.calls += calls;
                    snap.failures += failures;
                    snap.slow_calls += slow;
                }
            }
        }
        snap
    }

    /// A new generation's window is empty by construction (no bucket is on its stretch of the
    /// line); only the evaluation gate starts over.
    pub(crate) fn begin(&self) {
        self.next_success_eval.store(0, Ordering::Relaxed);
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<TimeWindow>()
            + self.cells.len() * 16
            + self
                .duration_cells
                .as_ref()
                .map_or(0, |d| std::mem::size_of::<DurationCells>() + d.0.len() * 16)
    }
}

/// Duration cell: high word the bucket's number, low word a 21-bit count and a 43-bit sum of
/// microseconds.
const DURATION_SUM_BITS: u32 = 43;
const DURATION_SUM_MAX: u64 = (1 << DURATION_SUM_BITS) - 1;

#[inline]
fn duration_cell(number: u64, calls: u64, sum: u64) -> u128 {
    u128::from(number) << 64 | u128::from(calls << DURATION_SUM_BITS | sum)
}

/// `(number, calls, sum)`.
#[inline]
fn unduration(c: u128) -> (u64, u64, u64) {
    let lo = c as u64;
    (
        (c >> 64) as u64,
        lo >> DURATION_SUM_BITS,
        lo & DURATION_SUM_MAX,
    )
}

/// Adds one call of `micros` to a duration cell, with the counts' cell's rules for older and
/// newer cells; halves count and sum together when either would overflow, keeping the mean.
#[cold]
fn record_duration(c: &AtomicU128, n: u64, micros: u64) {
    let mut cur = c.load(Ordering::Relaxed);
    loop {
        let (cn, mut calls, mut sum) = unduration(cur);
        if calls != 0 && cn > n {
            return;
        }
        if calls == 0 || cn < n {
            (calls, sum) = (0, 0);
        }
        if calls >= COUNT_MAX || sum + micros > DURATION_SUM_MAX {
            // A duration is at most a week (under 2^40 microseconds), so one halving of a sum
            // below 2^43 leaves room for it.
            (calls, sum) = (calls.div_ceil(2), sum / 2);
        }
        let new = duration_cell(n, calls + 1, sum + micros);
        match c.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(actual) => cur = actual,
        }
    }
}

#[cfg(all(test, not(loom), not(shuttle)))]
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
    const SEC: u64 = 1_000_000_000;

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
        w.record(1, 0, S);
        // A late writer of generation 0 does not add to generation 1's bucket.
        w.record(0, 0, F);
        let s = w.snapshot(1, 0);
        assert_eq!((s.calls, s.failures), (1, 0));
    }

    /// Each generation's buckets are its own however many generations apart: 2^19 (where a
    /// 19-bit tag wrapped and revived old buckets), 2^18 + 1 (where it read as newer and
    /// refused current writes), and the far end of the line.
    #[test]
    fn no_count_of_generations_revives_or_refuses_a_bucket() {
        for later in [1u64 << 18, (1 << 18) + 1, 1 << 19, 1 << 32, (1 << 47) + 3] {
            let w = TimeWindow::new(SEC, 10, 1, 0, false);
            for _ in 0..9 {
                w.record(0, 5 * SEC, F);
            }
            w.begin();
            assert_eq!(
                w.snapshot(later, 5 * SEC),
                WindowSnapshot::default(),
                "{later}"
            );
            w.record(later, 5 * SEC, S);
            let s = w.snapshot(later, 5 * SEC);
            assert_eq!((s.calls, s.failures), (1, 0), "generation {later}");
            // A late writer of generation 0 leaves it alone.
            w.record(0, 5 * SEC, F);
            assert_eq!(w.snapshot(later, 5 * SEC).failures, 0, "generation {later}");
        }
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
}
