//! The count window: the last N outcomes, as two bit rings (failed, slow) with running totals
//! kept as each slot is overwritten. N = 100 costs 32 bytes of bits. A writer claims a slot
//! with one compare-and-swap on the head and flips its bits only when they change, so a run
//! of successes over a clean ring writes nothing but the head.
//!
//! The head is one 64-bit word: the position (20 bits: sizes up to 1,000,000), whether the
//! ring has wrapped, and a 42-bit generation tag, so that a writer that read the state word
//! before a transition can claim a slot only in its own generation's window (two generations
//! alias only 2^42 transitions apart: 139 years at one transition per millisecond, and only
//! for a writer stalled that long between two instructions, since the reset clears the ring).
//! Beside it, the guard word holds the resetting mark and the writers registered to change a
//! bit and its total. See the module docs of [`super`] for how a reset and its writers meet.
//!
//! With `call_durations` on, each slot's duration in microseconds is kept beside its bits
//! (8 bytes a slot) with a running total, changed by the same registered writer that changes
//! the slot, so a reset never tears it.

use super::{Durations, Sample, WindowSnapshot, micros};
use crate::sync::{AtomicI32, AtomicU64, Ordering, spin};

const POS_MASK: u64 = (1 << 20) - 1;
const FULL: u64 = 1 << 20;
const TAG_SHIFT: u32 = 22;
/// The guard word: the resetting mark, and the registered writers below it.
const RESETTING: u64 = 1 << 63;
const WRITERS_MASK: u64 = RESETTING - 1;

#[inline]
fn head_tag(generation: u64) -> u64 {
    generation << TAG_SHIFT
}

/// Whether head `h` is `generation`'s.
#[inline]
fn owns(h: u64, generation: u64) -> bool {
    (h ^ head_tag(generation)) >> TAG_SHIFT == 0
}

#[derive(Debug)]
pub(crate) struct CountWindow {
    head: AtomicU64,
    /// The resetting mark and the registered writers.
    guard: AtomicU64,
    /// `size.div_ceil(64)` failure words followed by as many slow words.
    bits: Box<[AtomicU64]>,
    /// At most 1,000,000 (validated), so positions fit 20 bits and totals 32.
    size: u32,
    failures: AtomicI32,
    slow: AtomicI32,
    /// With `call_durations`: each slot's duration in microseconds, and their running sum.
    durations: Option<Box<SlotDurations>>,
}

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
            guard: AtomicU64::new(0),
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
    pub(crate) fn record(&self, generation: u64, s: Sample) -> Option<bool> {
        // Claim the next slot.
        let mut cur = self.head.load(Ordering::Acquire);
        let (idx, filling) = loop {
            if !owns(cur, generation) {
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
                Ok(_) => break (pos, cur & FULL == 0),
                Err(actual) => cur = actual,
            }
        };
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
        if !self.register(generation) {
            return None;
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
        self.guard.fetch_sub(1, Ordering::Release);
        Some(filling)
    }

    /// How many fast successes a stripe may keep before it puts them in the ring
    /// (`size / 2`, from 2 to 64); `None` when they are not kept (a ring below two slots, or
    /// one that keeps each call's duration).
    pub(crate) fn batch(&self) -> Option<u32> {
        (self.durations.is_none() && self.size >= 2).then(|| (self.size / 2).clamp(2, 64))
    }

    /// Records `k` successes (fast, neither failed nor slow) in `generation`'s window at once:
    /// one claim of `k` consecutive slots, and their bits cleared where set. `k` is at most the
    /// window's size; a window with durations records each success itself (see
    /// [`record`](Self::record)). `None`: not this generation's window.
    pub(crate) fn record_successes(&self, generation: u64, k: u32) -> Option<bool> {
        debug_assert!(self.durations.is_none());
        let size = u64::from(self.size);
        let k = u64::from(k).min(size);
        if k == 0 {
            return Some(false);
        }
        let mut cur = self.head.load(Ordering::Acquire);
        let (start, filling) = loop {
            if !owns(cur, generation) {
                return None;
            }
            let pos = cur & POS_MASK;
            let end = pos + k;
            let next = if end >= size {
                (cur & !POS_MASK) | FULL | (end - size)
            } else {
                cur + k
            };
            match self
                .head
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break (pos, cur & FULL == 0),
                Err(actual) => cur = actual,
            }
        };
        let (failed, slow) = self.bits.split_at(self.bits.len() / 2);
        let set = |words: &[AtomicU64]| {
            spans(start, k, size).any(|(w, m)| words[w].load(Ordering::Relaxed) & m != 0)
        };
        if !set(failed) && !set(slow) {
            return Some(filling);
        }
        // Bits and their totals change together: register, as `record` does.
        if !self.register(generation) {
            return None;
        }
        for (w, m) in spans(start, k, size) {
            clear_bits(&failed[w], m, &self.failures);
            clear_bits(&slow[w], m, &self.slow);
        }
        self.guard.fetch_sub(1, Ordering::Release);
        Some(filling)
    }

    /// Registers a writer about to change bits and their running totals, so that a reset
    /// waits for it; then checks that no reset ran since its claim (the window is still
    /// `generation`'s). False: not registered (a reset runs or ran), the result lands nowhere.
    /// A registered writer ends with `self.guard.fetch_sub(1, Ordering::Release)`.
    #[inline]
    fn register(&self, generation: u64) -> bool {
        let mut round = 0;
        loop {
            let g = self.guard.fetch_add(1, Ordering::AcqRel);
            if g & RESETTING != 0 {
                self.guard.fetch_sub(1, Ordering::Release);
                return false;
            }
            if g & WRITERS_MASK < WRITERS_MASK - 1 {
                break;
            }
            // Every registration slot taken (2^63 writers: never): wait for one.
            self.guard.fetch_sub(1, Ordering::Release);
            spin(round);
            round += 1;
        }
        if !owns(self.head.load(Ordering::Acquire), generation) {
            self.guard.fetch_sub(1, Ordering::Release);
            return false;
        }
        true
    }

    pub(crate) fn durations(&self, generation: u64) -> Option<Durations> {
        let d = self.durations.as_ref()?;
        let calls = self.snapshot(generation).calls;
        // A reader racing two writers of one slot may see the sum briefly below zero.
        let total = (d.total_micros.load(Ordering::Relaxed) as i64).max(0) as u64;
        Some(Durations {
            calls,
            micros: if calls == 0 { 0 } else { total },
        })
    }

    pub(crate) fn snapshot(&self, generation: u64) -> WindowSnapshot {
        let h = self.head.load(Ordering::Acquire);
        if !owns(h, generation) || self.guard.load(Ordering::Acquire) & RESETTING != 0 {
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

    pub(crate) fn begin(&self, generation: u64) {
        // No new registration from here on; wait for the registered writers.
        self.guard.fetch_or(RESETTING, Ordering::AcqRel);
        let mut round = 0;
        while self.guard.load(Ordering::Acquire) & WRITERS_MASK != 0 {
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
        // The new generation's head before the mark goes: a writer that registers after the
        // mark went sees the new head and knows its claim was of another generation. A swap,
        // not a store: a claim racing it is ordered with it as one read-modify-write with
        // another (either the claim lands first and is overwritten, or it sees the new head
        // and fails).
        self.head.swap(head_tag(generation), Ordering::AcqRel);
        self.guard.fetch_and(!RESETTING, Ordering::AcqRel);
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.bits.len() * 8
            + self.durations.as_ref().map_or(0, |d| {
                std::mem::size_of::<SlotDurations>() + d.slots.len() * 8
            })
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

/// Clears the bits of `mask` in `word` and takes the ones that were set off `total`.
#[inline]
fn clear_bits(word: &AtomicU64, mask: u64, total: &AtomicI32) {
    if word.load(Ordering::Relaxed) & mask == 0 {
        return;
    }
    let old = word.fetch_and(!mask, Ordering::Relaxed);
    let cleared = (old & mask).count_ones();
    if cleared != 0 {
        // At most 64: fits.
        total.fetch_sub(cleared as i32, Ordering::Relaxed);
    }
}

/// The slots `start .. start + k` of a ring of `size` (wrapping once), as `(word, mask)`
/// pairs of its bit words.
fn spans(start: u64, k: u64, size: u64) -> impl Iterator<Item = (usize, u64)> {
    let first = (start, (start + k).min(size));
    let wrapped = (0, (start + k).saturating_sub(size));
    [first, wrapped]
        .into_iter()
        .filter(|(a, b)| a < b)
        .flat_map(|(a, b)| words(a, b))
}

/// The slots `a .. b` (in one stretch) as `(word, mask)` pairs.
fn words(a: u64, b: u64) -> impl Iterator<Item = (usize, u64)> {
    let first = a / 64;
    let last = (b - 1) / 64;
    (first..=last).map(move |w| {
        let lo = if w == first { a % 64 } else { 0 };
        let hi = if w == last { (b - 1) % 64 + 1 } else { 64 };
        let mask = if hi - lo == 64 {
            u64::MAX
        } else {
            ((1u64 << (hi - lo)) - 1) << lo
        };
        (w as usize, mask)
    })
}

fn clamp(v: i32, max: u64) -> u64 {
    (v.max(0) as u64).min(max)
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
    const SLOW: Sample = Sample {
        failure: false,
        slow: true,
        nanos: 0,
    };

    /// Recording `k` successes at once leaves the window as `k` records of one success do,
    /// wherever the head is and whatever the bits under the claimed slots.
    #[test]
    fn successes_recorded_at_once_are_successes_recorded_one_by_one() {
        use proptest::prelude::*;
        let ops = proptest::collection::vec((0u8..4, 1u32..70), 0..60);
        proptest!(ProptestConfig::with_cases(2_000), |(size in 1u32..140, ops in ops)| {
            let batched = CountWindow::new(size, false);
            let single = CountWindow::new(size, false);
            for (op, k) in ops {
                match op {
                    0 => {
                        let k = k.min(size);
                        let a = batched.record_successes(0, k);
                        let mut b = None;
                        for i in 0..k {
                            let r = single.record(0, S);
                            if i == 0 {
                                b = r;
                            }
                        }
                        prop_assert_eq!(a, b);
                    }
                    1 => {
                        batched.record(0, F);
                        single.record(0, F);
                    }
                    2 => {
                        batched.record(0, SLOW);
                        single.record(0, SLOW);
                    }
                    _ => {
                        batched.record(0, S);
                        single.record(0, S);
                    }
                }
                prop_assert_eq!(batched.snapshot(0), single.snapshot(0));
            }
        });
        let w = CountWindow::new(4, false);
        w.begin(1);
        assert_eq!(
            w.record_successes(0, 2),
            None,
            "another generation's window"
        );
    }

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

    /// The head carries a 42-bit tag: a writer 2^24 (or 2^40, or 2^42 - 1) generations behind
    /// never lands in the window, where a 24-bit tag read it as current.
    #[test]
    fn no_count_of_generations_lets_an_old_writer_in() {
        for later in [1u64 << 24, 1 << 40, (1 << 42) - 1] {
            let w = CountWindow::new(4, false);
            w.begin(later);
            assert_eq!(w.record(0, F), None, "generation {later}");
            assert_eq!(w.snapshot(0), WindowSnapshot::default());
            assert_eq!(w.record(later, S), Some(true));
            assert_eq!(w.snapshot(later).calls, 1);
        }
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

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A failure of generation 1 racing the reset to generation 2: it lands in generation 1's
    /// window or nowhere, and generation 2's window then counts its own results exactly.
    #[test]
    fn a_record_racing_a_reset_lands_in_its_generation_or_nowhere() {
        loom::model(|| {
            let w = Arc::new(CountWindow::new(2, false));
            w.begin(1);
            let w2 = w.clone();
            let t = thread::spawn(move || w2.begin(2));
            let _ = w.record(
                1,
                Sample {
                    failure: true,
                    slow: false,
                    nanos: 0,
                },
            );
            t.join().unwrap();
            assert_eq!(w.snapshot(2).failures, 0);
            for _ in 0..2 {
                assert!(
                    w.record(
                        2,
                        Sample {
                            failure: false,
                            slow: false,
                            nanos: 0,
                        },
                    )
                    .is_some(),
                    "head {:x} guard {:x}",
                    w.head.load(Ordering::Relaxed),
                    w.guard.load(Ordering::Relaxed)
                );
            }
            let s = w.snapshot(2);
            assert_eq!(
                (s.calls, s.failures),
                (2, 0),
                "head {:x} guard {:x}",
                w.head.load(Ordering::Relaxed),
                w.guard.load(Ordering::Relaxed)
            );
        });
    }
}
