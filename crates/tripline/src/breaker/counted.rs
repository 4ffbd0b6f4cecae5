//! The failure-count-in-time rule's host ([`FailureCount`](crate::FailureCount)): the times
//! of the last `failures` failures of the Closed period, in a ring of 128-bit cells, each
//! `generation + 1` beside the time. A failure takes the next cell (one `fetch_add`) and
//! writes it unless a newer generation already did; the rule then counts the cells of its own
//! generation that are within the rule's time of now ([`rules::failure_count_fires`]).
//!
//! What holds under concurrency:
//! * A failure lands in the generation that admitted it or nowhere: a cell carries its
//!   generation, and a writer of an older generation never overwrites a newer one's cell
//!   (a compare-and-swap), so a transition needs no clearing (the new generation's cells are
//!   simply the ones that carry it). A 64-bit generation never wraps.
//! * The count never exceeds the failures the generation recorded: each failure writes one
//!   cell (a weighted one, one per unit of weight), and the ring has `failures` cells, so the
//!   rule fires only when that many distinct failures (units) are within the rule's time.
//! * Two failures racing for the last cells both see the ring as the last writer left it; the
//!   one that reads it full trips (a trip is made once, under the core lock).
//!
//! A breaker without the rule holds no ring and pays one pointer test per failure.

use crate::rules;
use crate::sync::{AtomicU64, AtomicU128, Ordering};

/// The ring of failure times.
#[derive(Debug)]
pub(super) struct FailureTimes {
    cells: Box<[AtomicU128]>,
    next: AtomicU64,
}

impl FailureTimes {
    /// A ring for the last `failures` failures (at least one cell).
    pub(super) fn new(failures: u32) -> Self {
        Self {
            cells: (0..failures.max(1)).map(|_| AtomicU128::new(0)).collect(),
            next: AtomicU64::new(0),
        }
    }

    fn pack(generation: u64, now: u64) -> u128 {
        u128::from(generation.saturating_add(1)) << 64 | u128::from(now)
    }

    /// Records `weight` failures of `generation` at `now`.
    pub(super) fn record(&self, generation: u64, now: u64, weight: u32) {
        let n = self.cells.len() as u64;
        let tag = generation.saturating_add(1);
        let new = Self::pack(generation, now);
        let first = self
            .next
            .fetch_add(u64::from(weight.max(1)), Ordering::Relaxed);
        for i in 0..u64::from(weight.max(1)).min(n) {
            let cell = &self.cells[((first + i) % n) as usize];
            let mut cur = cell.load(Ordering::Relaxed);
            // A newer generation's cell is not this failure's to take.
            while (cur >> 64) as u64 <= tag {
                match cell.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(actual) => cur = actual,
                }
            }
        }
    }

    /// Whether `generation`'s failures fire the rule of `within` nanoseconds at `now`: the
    /// count, when they do.
    pub(super) fn fires(&self, generation: u64, within: u64, now: u64) -> Option<u64> {
        let tag = generation.saturating_add(1);
        let mut times = [0u64; 64];
        let mut count = 0u64;
        // Counted in chunks through the pure rule, without allocating.
        for chunk in self.cells.chunks(times.len()) {
            let mut k = 0;
            for cell in chunk {
                let v = cell.load(Ordering::Relaxed);
                if (v >> 64) as u64 == tag {
                    times[k] = v as u64;
                    k += 1;
                }
            }
            count += rules::failure_count_fires(&times[..k], Some((1, within)), now).unwrap_or(0);
        }
        let failures = self.cells.len() as u64;
        (count >= failures).then_some(count)
    }
}

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_ring_counts_only_its_generation() {
        let f = FailureTimes::new(3);
        for i in 0..3 {
            f.record(4, i * S, 1);
        }
        assert_eq!(f.fires(4, 20 * S, 3 * S), Some(3));
        assert_eq!(f.fires(5, 20 * S, 3 * S), None);
        // A failure of an older generation does not take a newer one's cell.
        f.record(5, 3 * S, 1);
        f.record(4, 4 * S, 3);
        f.record(5, 3 * S, 2);
        assert_eq!(f.fires(5, 20 * S, 3 * S), Some(3));
    }

    #[test]
    fn a_ring_holds_times_from_every_epoch_of_the_clock() {
        for origin in [0, 1_700_000_000 * S, u64::MAX - 30 * S] {
            let f = FailureTimes::new(2);
            f.record(0, origin, 1);
            f.record(0, origin + 20 * S, 1);
            assert_eq!(f.fires(0, 20 * S, origin + 20 * S), Some(2), "{origin}");
            assert_eq!(f.fires(0, 20 * S, origin + 20 * S + 1), None, "{origin}");
        }
    }

    #[test]
    fn a_weighted_failure_fills_at_most_the_ring() {
        let f = FailureTimes::new(2);
        f.record(u64::MAX, 7, 10);
        assert_eq!(f.fires(u64::MAX, 1, 7), Some(2));
    }

    #[test]
    fn a_ring_of_many_cells_is_counted_across_chunks() {
        let f = FailureTimes::new(1000);
        for i in 0..999 {
            f.record(1, i, 1);
        }
        assert_eq!(f.fires(1, 1000, 999), None);
        f.record(1, 999, 1);
        assert_eq!(f.fires(1, 1000, 999), Some(1000));
        // The oldest ages out.
        assert_eq!(f.fires(1, 1000, 1001), None);
    }
}
