//! Calls in flight, by start time, so calls still running past the slow-call duration count as
//! slow before they finish.
//!
//! # The rule
//! Calls are grouped in cohorts by start time, `W = slow_call_duration / 2` wide. When the
//! rules are evaluated at time `now`, every call of a cohort `c` (started in
//! `[c·W, (c+1)·W)`) still in flight with `(c+1)·W + slow_call_duration <= now` counts as one
//! extra slow call, in both the slow count and the total. So a call counts as slow while in
//! flight once it has run for at least `slow_call_duration` and at most 1.5 times that. When
//! it finishes it leaves the in-flight count and is recorded in the window as usual (slow, as it
//! took longer than the slow-call duration), so it is never counted twice. Only calls started
//! since the breaker last entered Closed count. The closed breaker evaluates the in-flight rule
//! on every recorded failure or slow call, and on an acquire once per `W`, so a dependency that
//! hangs every call trips the slow-call rule even though nothing completes.
//!
//! Eight cohort slots cover `4 × slow_call_duration`; older cohorts are folded into one
//! "aged" counter, which always counts as overdue.
//!
//! [`InFlight`] is public so that other hosts of the rules (the Redis store tracks each
//! replica's own calls with it) apply exactly the same rule.

use crate::sync::{AtomicI64, AtomicU64, Ordering};

const SLOTS: usize = 8;
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

/// Calls in flight grouped in start-time cohorts (see the module docs for the rule).
///
/// ```
/// use tripline::inflight::InFlight;
///
/// let ms = 1_000_000;
/// let slow = 100 * ms;
/// let f = InFlight::new(slow); // cohorts of 50 ms
/// let call = f.enter(10 * ms);
/// assert_eq!(f.overdue(149 * ms, slow, 0), 0);
/// assert_eq!(f.overdue(150 * ms, slow, 0), 1); // cohort [0, 50 ms) + 100 ms
/// f.exit(call);
/// assert_eq!(f.overdue(150 * ms, slow, 0), 0);
/// ```
#[derive(Debug)]
pub struct InFlight {
    width: u64,
    /// Each slot: `(cohort + 1) << 24 | count`; 0 is empty.
    slots: [AtomicU64; SLOTS],
    aged: AtomicI64,
}

impl InFlight {
    /// A tracker for a slow-call duration of `slow_nanos`.
    pub fn new(slow_nanos: u64) -> Self {
        Self {
            width: (slow_nanos / 2).max(1),
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            aged: AtomicI64::new(0),
        }
    }

    /// Registers a call starting at `now`; returns its cohort.
    #[inline]
    pub fn enter(&self, now: u64) -> u64 {
        let cohort = now / self.width;
        let tag = cohort + 1;
        let slot = &self.slots[(cohort % SLOTS as u64) as usize];
        let mut cur = slot.load(Ordering::Relaxed);
        loop {
            let (stag, n) = (cur >> COUNT_BITS, cur & COUNT_MASK);
            let (new, moved) = if stag == tag && n < COUNT_MASK {
                (cur + 1, 0)
            } else if stag < tag {
                (tag << COUNT_BITS | 1, n)
            } else {
                // A newer cohort holds the slot (this reading is old) or the slot is full:
                // account the call with the aged ones.
                self.aged.fetch_add(1, Ordering::Relaxed);
                return u64::MAX;
            };
            match slot.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    if moved > 0 {
                        self.aged.fetch_add(moved as i64, Ordering::Relaxed);
                    }
                    return cohort;
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Unregisters a call of `cohort`.
    #[inline]
    pub fn exit(&self, cohort: u64) {
        if cohort != u64::MAX {
            let tag = cohort + 1;
            let slot = &self.slots[(cohort % SLOTS as u64) as usize];
            let mut cur = slot.load(Ordering::Relaxed);
            loop {
                let (stag, n) = (cur >> COUNT_BITS, cur & COUNT_MASK);
                if stag != tag || n == 0 {
                    break;
                }
                match slot.compare_exchange_weak(cur, cur - 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => return,
                    Err(actual) => cur = actual,
                }
            }
        }
        // The cohort was folded into the aged counter.
        self.aged.fetch_sub(1, Ordering::Relaxed);
    }

    /// Calls in flight past `slow` at `now` that started at or after `since`.
    pub fn overdue(&self, now: u64, slow: u64, since: u64) -> u64 {
        let mut n = 0;
        for slot in &self.slots {
            let w = slot.load(Ordering::Relaxed);
            let (tag, count) = (w >> COUNT_BITS, w & COUNT_MASK);
            if tag == 0 || count == 0 {
                continue;
            }
            let cohort = tag - 1;
            let start = cohort.saturating_mul(self.width);
            let end = start.saturating_add(self.width);
            if start >= since && end.saturating_add(slow) <= now {
                n += count;
            }
        }
        // Aged calls started before the oldest slot; they count only if that is after `since`.
        let horizon = now.saturating_sub(self.width * SLOTS as u64);
        if horizon >= since {
            n += self.aged.load(Ordering::Relaxed).max(0) as u64;
        }
        n
    }

    /// How often the closed breaker re-checks in-flight calls on acquire.
    pub fn width(&self) -> u64 {
        self.width
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_only_overdue_calls() {
        let ms = 1_000_000;
        let f = InFlight::new(100 * ms); // cohorts of 50 ms
        let a = f.enter(0);
        let _b = f.enter(10 * ms);
        let c = f.enter(120 * ms);
        // Cohort 0 (0..50 ms) is overdue once 50 + 100 ms have passed.
        assert_eq!(f.overdue(149 * ms, 100 * ms, 0), 0);
        assert_eq!(f.overdue(150 * ms, 100 * ms, 0), 2);
        f.exit(a);
        assert_eq!(f.overdue(150 * ms, 100 * ms, 0), 1);
        // Calls started before `since` do not count.
        assert_eq!(f.overdue(150 * ms, 100 * ms, 60 * ms), 0);
        f.exit(c);
        assert_eq!(f.overdue(1000 * ms, 100 * ms, 0), 1);
    }

    #[test]
    fn recycled_slots_fold_into_aged() {
        let ms = 1_000_000;
        let f = InFlight::new(100 * ms);
        let old = f.enter(0); // cohort 0, slot 0
        let newer = f.enter(8 * 50 * ms); // cohort 8, slot 0 again: cohort 0 moves to aged
        assert_eq!(f.overdue(10_000 * ms, 100 * ms, 0), 2);
        f.exit(old);
        assert_eq!(f.overdue(10_000 * ms, 100 * ms, 0), 1);
        f.exit(newer);
        assert_eq!(f.overdue(10_000 * ms, 100 * ms, 0), 0);
    }
}
