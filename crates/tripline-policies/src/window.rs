//! A sliding window of time buckets, each holding two counters, with running totals.
//!
//! The window is the current bucket plus the `n - 1` before it, so an entry counts for between
//! `(n - 1) × bucket` and `n × bucket` after it was added. Totals are kept incrementally: moving
//! to a new bucket subtracts the bucket it reuses, so reading the totals is O(1) amortised and
//! never scans the ring.

use std::time::Duration;

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    epoch: u64,
    counts: [i64; 2],
}

#[derive(Debug)]
pub(crate) struct Buckets {
    bucket_nanos: u64,
    slots: Box<[Slot]>,
    head: u64,
    totals: [i64; 2],
}

impl Buckets {
    /// A window of `buckets` buckets of `bucket` each (`bucket` at least a nanosecond).
    pub(crate) fn new(bucket: Duration, buckets: u32) -> Self {
        let bucket_nanos = u64::try_from(bucket.as_nanos()).unwrap_or(u64::MAX).max(1);
        Self {
            bucket_nanos,
            slots: vec![Slot::default(); buckets.max(1) as usize].into_boxed_slice(),
            head: 0,
            totals: [0; 2],
        }
    }

    fn len(&self) -> u64 {
        self.slots.len() as u64
    }

    fn advance(&mut self, now: u64) {
        let epoch = now / self.bucket_nanos;
        if epoch <= self.head {
            return;
        }
        let n = self.len();
        let steps = (epoch - self.head).min(n);
        for e in epoch - steps + 1..=epoch {
            let slot = &mut self.slots[(e % n) as usize];
            self.totals[0] -= slot.counts[0];
            self.totals[1] -= slot.counts[1];
            *slot = Slot {
                epoch: e,
                counts: [0; 2],
            };
        }
        self.head = epoch;
    }

    /// Adds `v` to counter `i` at time `now`; returns the bucket's epoch.
    pub(crate) fn add(&mut self, now: u64, i: usize, v: i64) -> u64 {
        self.advance(now);
        let n = self.len();
        let head = self.head;
        self.slots[(head % n) as usize].counts[i] += v;
        self.totals[i] += v;
        head
    }

    /// Adds `v` to counter `i` in the bucket of `epoch`, if that bucket is still in the window
    /// at `now`. Returns whether it was.
    #[cfg_attr(
        not(any(feature = "throttle", test)),
        expect(dead_code, reason = "used by the throttle")
    )]
    pub(crate) fn add_at(&mut self, now: u64, epoch: u64, i: usize, v: i64) -> bool {
        self.advance(now);
        let n = self.len();
        if epoch > self.head || epoch + n <= self.head {
            return false;
        }
        let slot = &mut self.slots[(epoch % n) as usize];
        if slot.epoch != epoch {
            return false;
        }
        slot.counts[i] += v;
        self.totals[i] += v;
        true
    }

    /// The totals of both counters over the window at `now`.
    pub(crate) fn totals(&mut self, now: u64) -> [i64; 2] {
        self.advance(now);
        self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn entries_expire_after_the_window() {
        let mut w = Buckets::new(Duration::from_secs(1), 10);
        w.add(0, 0, 5);
        w.add(3 * S, 1, 2);
        assert_eq!(w.totals(9 * S + S / 2), [5, 2]);
        assert_eq!(w.totals(10 * S), [0, 2]);
        assert_eq!(w.totals(13 * S), [0, 0]);
        w.add(100 * S, 0, 1);
        assert_eq!(w.totals(100 * S), [1, 0]);
    }

    #[test]
    fn add_at_reaches_live_buckets_only() {
        let mut w = Buckets::new(Duration::from_secs(1), 4);
        let e = w.add(S, 0, 3);
        assert!(w.add_at(2 * S, e, 0, -1));
        assert_eq!(w.totals(2 * S), [2, 0]);
        assert!(!w.add_at(5 * S, e, 0, -1));
        assert_eq!(w.totals(5 * S), [0, 0]);
    }
}
