//! What every call reads and writes, in atomics: the thresholds (so that a reconfiguration
//! changes them without a lock), the run of consecutive failures, and the per-lane counters
//! and calls in flight.

use crate::clock::nanos;
use crate::config::BreakerConfig;
use crate::inflight::InFlight;
use crate::outcome::{FailureKind, Outcome};
use crate::rules::Thresholds;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering, tag};

/// The thresholds the lock-free paths read, and the flags and runs the closed path keeps
/// beside them.
#[derive(Debug)]
pub(super) struct Hot {
    pub(super) slow_nanos: AtomicU64,
    failure_ppm: AtomicU32,
    slow_ppm: AtomicU32,
    pub(super) minimum_calls: AtomicU32,
    /// The consecutive-failures limit (0: rule off).
    pub(super) consecutive_limit: AtomicU32,
    /// The failure-count rule's time, in nanoseconds (its failures are the ring's size).
    pub(super) count_within: AtomicU64,
    /// `generation tag << 20 | consecutive failures so far` (see [`Run`]).
    consecutive: AtomicU64,
    /// The successes counted (all lanes) when the last failure was, or the state last changed:
    /// the current run of successes is the count since then. Written by failures and
    /// transitions, never by successes.
    pub(super) success_mark: AtomicU64,
    /// What failures read: the failure-kind weights, a nibble per kind
    /// ([`crate::FailureKindWeights`]), and [`LUMPING`] when lumping is on (its interval is in
    /// the cold part).
    pub(super) failure_rules: AtomicU32,
    pub(super) in_flight: AtomicBool,
    /// What a closed acquire checks against `Inner::next_closed_check`: [`CHECK_IN_FLIGHT`]
    /// (calls in flight are counted) and [`CHECK_INTERVAL`] (an `interval` is set). 0: the
    /// acquire reads no deadline.
    pub(super) closed_checks: AtomicU32,
    /// Whether closed calls are timed: [`TIMED_BY_RULES`] when the configuration needs a
    /// clock reading per call ([`BreakerConfig::needs_time`]), [`TIMED_FOR_LISTENERS`] once a
    /// listener asked for outcome events (which carry durations). 0: the closed path reads no
    /// clock.
    pub(super) timed: AtomicU32,
    /// Whether the breaker reads its clock's precise readings ([`crate::Clock::precise_now`]):
    /// set once a configuration needs finer time than the clock's readings resolve, and never
    /// cleared (so readings never go back).
    pub(super) precise: AtomicBool,
    /// Closed and ramping traffic back up after recovery (the ramp's state is in the cold
    /// part); false whenever no ramp runs, so a breaker without one pays one load.
    pub(super) ramping: AtomicBool,
}

/// [`Hot::timed`]: the configuration's rules need a clock reading per closed call.
pub(super) const TIMED_BY_RULES: u32 = 1;
/// [`Hot::timed`]: a listener wants outcome events, which carry each call's duration.
pub(super) const TIMED_FOR_LISTENERS: u32 = 2;

/// [`Hot::closed_checks`]: calls in flight are counted (and re-checked once per cohort width).
pub(super) const CHECK_IN_FLIGHT: u32 = 1;
/// [`Hot::closed_checks`]: the Closed generation ends at its `interval` boundary.
pub(super) const CHECK_INTERVAL: u32 = 2;

/// The bit of `Hot::failure_rules` that says lumping is on.
pub(super) const LUMPING: u32 = 1 << 31;

/// The run of consecutive failures in one word: a 44-bit generation tag and a 20-bit count.
/// The tag keeps a failure recorded by a thread that read the state word before a transition
/// out of the next generation's run; two generations alias only 2^43 transitions apart
/// (278 years at one per millisecond). The count saturates at [`Run::MAX`], above every limit
/// the configuration allows (1,000,000).
struct Run;

impl Run {
    const COUNT_BITS: u32 = 20;
    const TAG_BITS: u32 = 44;
    const MAX: u64 = (1 << Self::COUNT_BITS) - 1;

    fn tag(generation: u64) -> u64 {
        generation & ((1 << Self::TAG_BITS) - 1)
    }

    fn pack(generation: u64, count: u64) -> u64 {
        Self::tag(generation) << Self::COUNT_BITS | count.min(Self::MAX)
    }

    /// `(tag, count)`.
    fn unpack(v: u64) -> (u64, u64) {
        (v >> Self::COUNT_BITS, v & Self::MAX)
    }
}

impl Hot {
    pub(super) fn new(c: &BreakerConfig, resolution: std::time::Duration) -> Self {
        let h = Self {
            slow_nanos: AtomicU64::new(0),
            failure_ppm: AtomicU32::new(0),
            slow_ppm: AtomicU32::new(0),
            minimum_calls: AtomicU32::new(0),
            consecutive_limit: AtomicU32::new(0),
            count_within: AtomicU64::new(0),
            consecutive: AtomicU64::new(0),
            success_mark: AtomicU64::new(0),
            failure_rules: AtomicU32::new(0),
            in_flight: AtomicBool::new(false),
            closed_checks: AtomicU32::new(0),
            timed: AtomicU32::new(0),
            precise: AtomicBool::new(false),
            ramping: AtomicBool::new(false),
        };
        h.set(c, resolution);
        h
    }

    /// Follows `c`, on a clock of `resolution`.
    pub(super) fn set(&self, c: &BreakerConfig, resolution: std::time::Duration) {
        let r = Ordering::Relaxed;
        // Validated: both rates are at most 1,000,000 ppm.
        self.failure_ppm
            .store(u32::try_from(c.failure_ppm()).unwrap_or(u32::MAX), r);
        self.slow_ppm
            .store(u32::try_from(c.slow_ppm()).unwrap_or(u32::MAX), r);
        // With the slow-call rule off no call is slow.
        self.slow_nanos.store(
            if c.slow_call_rule {
                nanos(c.slow_call_duration)
            } else {
                u64::MAX
            },
            r,
        );
        self.minimum_calls.store(c.minimum_calls, r);
        self.consecutive_limit
            .store(c.consecutive_failures.unwrap_or(0), r);
        self.count_within
            .store(c.failure_count.map_or(0, |f| nanos(f.within)), r);
        self.in_flight.store(c.counts_in_flight(), r);
        self.closed_checks.store(
            if c.counts_in_flight() {
                CHECK_IN_FLIGHT
            } else {
                0
            } | if c.interval.is_some() {
                CHECK_INTERVAL
            } else {
                0
            },
            r,
        );
        if c.needs_time() {
            self.timed.fetch_or(TIMED_BY_RULES, r);
        } else {
            self.timed.fetch_and(!TIMED_BY_RULES, r);
        }
        if !crate::rules::clock_serves(resolution, c) {
            self.precise.store(true, r);
        }
        let lumping = if c.lumping_interval.is_some() {
            LUMPING
        } else {
            0
        };
        self.failure_rules
            .store(c.failure_kinds.packed() | lumping, r);
    }

    /// The thresholds in force.
    #[inline]
    pub(super) fn thresholds(&self) -> Thresholds {
        let r = Ordering::Relaxed;
        Thresholds {
            failure_ppm: u64::from(self.failure_ppm.load(r)),
            slow_ppm: u64::from(self.slow_ppm.load(r)),
            minimum_calls: u64::from(self.minimum_calls.load(r)),
        }
    }

    /// The consecutive-failures limit, if the rule is on.
    #[inline]
    pub(super) fn consecutive_limit(&self) -> Option<u32> {
        match self.consecutive_limit.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n),
        }
    }

    /// How much a failure of `kind` counts.
    #[inline]
    pub(super) fn weight(&self, kind: FailureKind) -> u32 {
        (self.failure_rules.load(Ordering::Relaxed) >> (4 * kind.index())) & 0xF
    }

    /// The run of failures `generation` has now (0 when another generation's run is in place).
    #[inline]
    pub(super) fn failure_run(&self, generation: u64) -> u64 {
        let (t, n) = Run::unpack(self.consecutive.load(Ordering::Relaxed));
        if t == Run::tag(generation) { n } else { 0 }
    }

    /// Counts a failure of `weight` in `generation`'s run; returns the run's length (0 when a
    /// newer generation's run is in place: this failure is stale).
    #[inline]
    pub(super) fn consecutive_failure(&self, generation: u64, weight: u32) -> u64 {
        let t = Run::tag(generation);
        let r = Ordering::Relaxed;
        let next = |v: u64| {
            let (vt, n) = Run::unpack(v);
            if vt == t {
                // Saturating: in MetricsOnly nothing resets a run of failures.
                Some(Run::pack(generation, n + u64::from(weight)))
            } else if tag::newer(vt, t, Run::TAG_BITS) {
                None
            } else {
                Some(Run::pack(generation, u64::from(weight)))
            }
        };
        match self.consecutive.fetch_update(r, r, next) {
            Ok(before) => next(before).map_or(0, |v| Run::unpack(v).1),
            Err(_) => 0,
        }
    }

    /// A good result ends `generation`'s run of failures.
    #[inline]
    pub(super) fn consecutive_success(&self, generation: u64) {
        let v = self.consecutive.load(Ordering::Relaxed);
        let (vt, n) = Run::unpack(v);
        if n != 0 && !tag::newer(vt, Run::tag(generation), Run::TAG_BITS) {
            let _ = self.consecutive.compare_exchange(
                v,
                Run::pack(generation, 0),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Starts `generation`'s empty run (a transition, before the word announcing it).
    pub(super) fn start_run(&self, generation: u64) {
        self.consecutive
            .store(Run::pack(generation, 0), Ordering::Relaxed);
    }
}

/// What each call writes: outcome and rejection counters and the calls in flight. A
/// breaker with one stripe has one lane; a striped breaker gives each writer stripe (thread)
/// its own, so concurrent callers write different cache lines.
#[derive(Debug)]
pub(super) struct Lane {
    /// Calls admitted in Closed, MetricsOnly and HalfOpen (the per-generation counts are
    /// differences of these totals, see [`super::counts`]). On the line the call's result
    /// writes anyway.
    pub(super) admitted: AtomicU64,
    pub(super) successes: AtomicU64,
    pub(super) failures: AtomicU64,
    pub(super) slow_successes: AtomicU64,
    pub(super) slow_failures: AtomicU64,
    pub(super) ignored: AtomicU64,
    pub(super) abandoned: AtomicU64,
    /// Refusals while Open and ForcedOpen (the lock-free refusals; HalfOpen's are counted in
    /// the cold part, under the lock that refused them).
    pub(super) rejected: [AtomicU64; 2],
    pub(super) inflight: InFlight,
}

/// A lane's fast successes (neither failed nor slow) that a striped count window has not yet
/// put in its ring, in one word: whether the ring was seen full, a 43-bit generation tag and
/// a 20-bit count. Successes of a full ring are kept here and put in the ring in batches, so
/// that a closed call writes only its lane; every other result and every snapshot first puts
/// every lane's batch in (see `Inner::flush_lanes`), so the ring holds what it would hold
/// had each success gone in at once: successes look alike, and none is put after a result
/// that came after it. Two generations' tags alias only 2^43 transitions apart (278 years at
/// one per millisecond), and the count never reaches 2^20 (a batch is at most 64).
pub(super) struct Pending;

impl Pending {
    const COUNT_BITS: u32 = 20;
    const TAG_BITS: u32 = 43;
    const COUNT: u64 = (1 << Self::COUNT_BITS) - 1;
    const FULL: u64 = 1 << 63;

    /// `generation`'s tag, in place.
    #[inline]
    pub(super) fn tag(generation: u64) -> u64 {
        (generation & ((1 << Self::TAG_BITS) - 1)) << Self::COUNT_BITS
    }

    /// Whether `v` is `generation`'s word (tag `tag`) with its ring seen full.
    #[inline]
    pub(super) fn batching(v: u64, tag: u64) -> bool {
        v & !Self::COUNT == (tag | Self::FULL)
    }

    /// `generation`'s (tag `tag`) word with the ring seen full and nothing kept.
    #[inline]
    pub(super) fn full(tag: u64) -> u64 {
        tag | Self::FULL
    }

    /// The successes `v` keeps.
    #[inline]
    pub(super) fn count(v: u64) -> u64 {
        v & Self::COUNT
    }

    /// `v` with nothing kept.
    #[inline]
    pub(super) fn emptied(v: u64) -> u64 {
        v & !Self::COUNT
    }

    /// Whether `v` is of a newer generation than tag `tag`'s.
    #[inline]
    pub(super) fn newer(v: u64, tag: u64) -> bool {
        let mask = (1 << Self::TAG_BITS) - 1;
        tag::newer(
            (v >> Self::COUNT_BITS) & mask,
            (tag >> Self::COUNT_BITS) & mask,
            Self::TAG_BITS,
        )
    }
}

impl Lane {
    pub(super) fn new(slow_nanos: u64) -> Self {
        Self {
            admitted: AtomicU64::new(0),
            successes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            slow_successes: AtomicU64::new(0),
            slow_failures: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
            abandoned: AtomicU64::new(0),
            rejected: std::array::from_fn(|_| AtomicU64::new(0)),
            inflight: InFlight::new(slow_nanos),
        }
    }

    /// Counts one result; `None` for an ignored outcome, else whether it failed.
    #[inline]
    pub(super) fn count(&self, outcome: Outcome, slow: bool) -> Option<bool> {
        let r = Ordering::Relaxed;
        let failure = match outcome {
            Outcome::Ignored => {
                self.ignored.fetch_add(1, r);
                return None;
            }
            Outcome::Failure => {
                self.failures.fetch_add(1, r);
                true
            }
            Outcome::Success => {
                self.successes.fetch_add(1, r);
                false
            }
        };
        if slow {
            if failure {
                self.slow_failures.fetch_add(1, r);
            } else {
                self.slow_successes.fetch_add(1, r);
            }
        }
        Some(failure)
    }
}

/// A striped breaker's lanes, behind one thin pointer (an unstriped breaker holds none).
#[derive(Debug)]
pub(super) struct Lanes(
    pub(super) Box<[PaddedLane]>,
    /// How many fast successes a lane keeps before it puts them in a count window's ring
    /// (see [`Pending`]); 0 when they are not kept (a time window, a ring below two slots, or
    /// one that keeps call durations).
    pub(super) u64,
);

/// A lane on its own pair of cache lines (adjacent-line prefetchers fetch lines in pairs).
#[derive(Debug)]
#[repr(align(128))]
pub(super) struct PaddedLane(
    pub(super) Lane,
    /// A striped count window's fast successes not yet in its ring ([`Pending`]); on the
    /// lane's own lines, in the padding.
    pub(super) AtomicU64,
);

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_belongs_to_its_generation_for_centuries() {
        let h = Hot::new(&BreakerConfig::default(), std::time::Duration::ZERO);
        assert_eq!(h.consecutive_failure(0, 1), 1);
        // A generation 2^32 (or 2^40) later starts its own run; generation 0's failures never
        // extend it.
        for later in [1u64 << 32, 1 << 40, (1 << 43) - 1] {
            h.start_run(later);
            assert_eq!(h.failure_run(later), 0);
            assert_eq!(h.consecutive_failure(0, 1), 0, "generation {later}");
            assert_eq!(h.failure_run(later), 0);
            assert_eq!(h.consecutive_failure(later, 2), 2);
            h.start_run(0);
        }
    }

    /// A lane's kept successes carry a 43-bit tag: a word of generation 0 is never taken for
    /// one 2^24, 2^40 or 2^43 - 1 generations later, and a newer word is never overwritten by
    /// an older generation's.
    #[test]
    fn kept_successes_belong_to_their_generation_for_centuries() {
        let old = Pending::full(Pending::tag(0)) + 3;
        for later in [1u64 << 24, 1 << 40, (1 << 43) - 1] {
            let tag = Pending::tag(later);
            assert!(!Pending::batching(old, tag), "generation {later}");
            assert!(Pending::batching(Pending::full(tag) + 1, tag));
        }
        assert!(Pending::newer(
            Pending::full(Pending::tag(5)),
            Pending::tag(4)
        ));
        assert!(!Pending::newer(
            Pending::full(Pending::tag(4)),
            Pending::tag(5)
        ));
        assert_eq!(Pending::count(old), 3);
        assert_eq!(Pending::count(Pending::emptied(old)), 0);
        assert!(Pending::batching(Pending::emptied(old), Pending::tag(0)));
    }

    #[test]
    fn a_run_saturates_above_every_limit() {
        let h = Hot::new(&BreakerConfig::default(), std::time::Duration::ZERO);
        for _ in 0..200_000 {
            h.consecutive_failure(7, 10);
        }
        assert_eq!(h.failure_run(7), Run::MAX);
        const { assert!(Run::MAX >= 1_000_000) };
    }
}
