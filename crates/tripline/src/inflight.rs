//! Calls in flight, by start time, so calls still running past the slow-call duration count as
//! slow before they finish.
//!
//! # The rule
//! Calls are grouped in cohorts by start time, `W = slow_call_duration / 2` wide. When the
//! rules are evaluated at time `now`, every call of a cohort that ends at `end` (the call
//! started in `[end - W, end)`) still in flight with `end + slow_call_duration <= now` counts
//! as one extra slow call, in both the slow count and the total. So a call counts as slow while
//! in flight once it has run for at least `slow_call_duration` and at most 1.5 times that. When
//! it finishes it leaves the in-flight count and is recorded in the window as usual (slow, as
//! it took longer than the slow-call duration), so it is never counted twice. The closed
//! breaker evaluates the in-flight rule on every recorded failure or slow call, and on an
//! acquire once per `W`, so a dependency that hangs every call trips the slow-call rule even
//! though nothing completes.
//!
//! # Only calls of the current generation
//! A call joins its cohort with the generation that admitted it, and only the current
//! generation's calls count: calls started before the breaker last entered Closed (hung since
//! before a trip, say) never count again, however long they hang. Nothing is cleared at a
//! transition; each cohort carries its generation's tag, and a cohort of an older generation
//! is simply ignored, then recycled.
//!
//! # Representation
//! Three cohort slots, each one 128-bit atomic holding the cohort's end time (in units of
//! 16 ns: 60 bits hold any reading of a 64-bit nanosecond clock), a 44-bit generation tag and
//! a 24-bit signed count. Two generations alias only 2^44 transitions apart, and a tag reads as
//! newer than another only within 2^43 of it (278 years at one transition per millisecond), so
//! a call hung since an old generation never counts again however long the process lives.
//! Older cohorts of the generation are folded into one "aged" slot that keeps the count and the
//! latest end among them, and counts when that end is overdue. A cohort is folded when its
//! slot is needed three cohorts later, at `end + 2W = end + slow_call_duration` at the
//! earliest, when it is due anyway, so folding loses no precision. A cohort whose count would
//! overflow (8 million calls in flight in one cohort of one lane) sends its further calls to
//! the aged slot. After a change of the slow-call duration
//! ([`InFlight::set_slow_call_duration`]) new calls use cohorts of the new width at once; calls
//! already in flight keep the end of the cohort they joined (at worst counting as slow one old
//! cohort width later than the rule says). A call that leaves before its cohort's fold is
//! accounted in the aged slot (whose count may dip below zero for that moment), so no count is
//! lost to a race.
//!
//! [`InFlight`] is public so that other hosts of the rules (the Redis store tracks each
//! replica's own calls with it) apply exactly the same rule.

use crate::sync::{AtomicU64, AtomicU128, Ordering, tag};

const SLOTS: usize = 3;
const TAG_BITS: u32 = 44;
const COUNT_BITS: u32 = 24;
const COUNT_MAX: i64 = (1 << (COUNT_BITS - 1)) - 1;
/// Ends are kept in units of 16 ns.
const END_SHIFT: u32 = 4;
const AGED: u8 = SLOTS as u8;
const UNTRACKED: u8 = u8::MAX;

/// Where a call joined the in-flight cohorts; hand it back to [`InFlight::exit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cohort {
    end: u64,
    slot: u8,
}

impl Cohort {
    /// A call that is not tracked (in-flight counting is off): [`InFlight::exit`] ignores it.
    pub const NONE: Cohort = Cohort {
        end: 0,
        slot: UNTRACKED,
    };

    /// When the cohort ends: the call counts as slow in flight from this time plus the
    /// slow-call duration.
    pub fn end(&self) -> u64 {
        self.end
    }
}

/// An end time in the slots' units, rounded down: a call counts as overdue no later than the
/// rule says (at most 15 ns sooner, and never for a cohort width that is a whole number of
/// 16 ns, as every width of a slow-call duration in microseconds is).
#[inline]
fn end_units(end: u64) -> u64 {
    end >> END_SHIFT
}

#[inline]
fn pack(end_units: u64, tag: u64, count: i64) -> u128 {
    let count = (count.clamp(-COUNT_MAX - 1, COUNT_MAX) as u64) & ((1 << COUNT_BITS) - 1);
    u128::from(end_units) << (TAG_BITS + COUNT_BITS)
        | u128::from(tag) << COUNT_BITS
        | u128::from(count)
}

/// `(end in units, tag, count)`.
#[inline]
fn unpack(v: u128) -> (u64, u64, i64) {
    let count = (v as u64) & ((1 << COUNT_BITS) - 1);
    // Sign-extended from 26 bits.
    let count = ((count << (64 - COUNT_BITS)) as i64) >> (64 - COUNT_BITS);
    let tag = ((v >> COUNT_BITS) as u64) & ((1 << TAG_BITS) - 1);
    ((v >> (TAG_BITS + COUNT_BITS)) as u64, tag, count)
}

#[inline]
fn gen_tag(generation: u64) -> u64 {
    generation & ((1 << TAG_BITS) - 1)
}

/// Calls in flight grouped in start-time cohorts (see the module docs for the rule).
///
/// ```
/// use tripline::inflight::InFlight;
///
/// let ms = 1_000_000;
/// let slow = 100 * ms;
/// let f = InFlight::new(slow); // cohorts of 50 ms
/// let call = f.enter(10 * ms, 0);
/// assert_eq!(f.overdue(149 * ms, slow, 0), 0);
/// assert_eq!(f.overdue(150 * ms, slow, 0), 1); // cohort [0, 50 ms) + 100 ms
/// assert_eq!(f.overdue(150 * ms, slow, 1), 0); // only the generation that admitted it
/// f.exit(call, 0);
/// assert_eq!(f.overdue(150 * ms, slow, 0), 0);
/// ```
#[derive(Debug)]
pub struct InFlight {
    width: AtomicU64,
    /// The latest cohort number an enter computed: the next enter checks it with two
    /// multiplications instead of dividing (it sits in the padding before the 16-byte slots).
    hint: AtomicU64,
    slots: [AtomicU128; SLOTS],
    aged: AtomicU128,
}

impl InFlight {
    /// A tracker for a slow-call duration of `slow_nanos`.
    pub fn new(slow_nanos: u64) -> Self {
        Self {
            width: AtomicU64::new((slow_nanos / 2).max(1)),
            hint: AtomicU64::new(0),
            slots: std::array::from_fn(|_| AtomicU128::new(0)),
            aged: AtomicU128::new(0),
        }
    }

    /// Follows a new slow-call duration at `now`: calls starting from now join cohorts of the
    /// new width; the cohorts of calls already in flight are folded into the aged slot as if
    /// they had ended `now` at the latest (every one of their calls started before now, so none
    /// counts before it has run for the new duration, and the aged slot keeps no end in the
    /// future that would hide the calls folded into it later).
    pub fn set_slow_call_duration(&self, slow_nanos: u64, now: u64) {
        let width = (slow_nanos / 2).max(1);
        if self.width.swap(width, Ordering::Relaxed) == width {
            return;
        }
        for slot in &self.slots {
            let mut cur = slot.load(Ordering::Relaxed);
            loop {
                let (end, t, n) = unpack(cur);
                if n <= 0 {
                    break;
                }
                match slot.compare_exchange_weak(cur, 0, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => {
                        self.fold(t, end.min(end_units(now)), n);
                        break;
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
    }

    /// Registers a call of `generation` starting at `now`.
    #[inline]
    pub fn enter(&self, now: u64, generation: u64) -> Cohort {
        let width = self.width.load(Ordering::Relaxed);
        let hint = self.hint.load(Ordering::Relaxed);
        let start = hint.saturating_mul(width);
        let cohort = if now >= start && now - start < width {
            hint
        } else {
            let c = now / width;
            self.hint.store(c, Ordering::Relaxed);
            c
        };
        let end = cohort.saturating_add(1).saturating_mul(width);
        let eu = end_units(end);
        let t = gen_tag(generation);
        let i = (cohort % SLOTS as u64) as usize;
        let slot = &self.slots[i];
        let mut cur = slot.load(Ordering::Relaxed);
        loop {
            let (send, stag, n) = unpack(cur);
            let (new, folded) = if n <= 0 {
                (pack(eu, t, 1), None)
            } else if stag == t && send == eu {
                if n >= COUNT_MAX {
                    self.fold(t, eu, 1);
                    return Cohort { end, slot: AGED };
                }
                (cur + 1, None)
            } else if tag::newer(stag, t, TAG_BITS) {
                // A newer generation holds the slot: this call's generation is over, and its
                // calls no longer count.
                return Cohort::NONE;
            } else if stag == t && send > eu {
                // A newer cohort holds the slot (this reading is old): account the call with
                // the aged ones.
                self.fold(t, eu, 1);
                return Cohort { end, slot: AGED };
            } else {
                // An older cohort, or an older generation's: recycle the slot. This
                // generation's calls move to the aged slot; an older generation's are dropped.
                (pack(eu, t, 1), (stag == t).then_some((send, n)))
            };
            match slot.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    if let Some((e, k)) = folded {
                        self.fold(t, e, k);
                    }
                    return Cohort { end, slot: i as u8 };
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Adds `count` calls of generation tag `t` whose cohort ended at `end` (in units) to the
    /// aged slot.
    fn fold(&self, t: u64, end: u64, count: i64) {
        let mut cur = self.aged.load(Ordering::Relaxed);
        loop {
            let (aend, atag, an) = unpack(cur);
            let new = if atag == t {
                pack(aend.max(end), t, an.saturating_add(count))
            } else if an != 0 && tag::newer(atag, t, TAG_BITS) {
                return;
            } else {
                // An older generation's calls, or none at all (an empty slot, whatever tag it
                // carries: the untouched slot's tag 0 reads as newer than any tag from 2^31 on).
                pack(end, t, count)
            };
            match self
                .aged
                .compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Unregisters a call that joined `cohort` in `generation`.
    #[inline]
    pub fn exit(&self, cohort: Cohort, generation: u64) {
        if cohort.slot == UNTRACKED {
            return;
        }
        let t = gen_tag(generation);
        if let Some(slot) = self.slots.get(cohort.slot as usize) {
            let mut cur = slot.load(Ordering::Relaxed);
            loop {
                let (send, stag, n) = unpack(cur);
                if stag != t || send != end_units(cohort.end) || n <= 0 {
                    break;
                }
                match slot.compare_exchange_weak(cur, cur - 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => return,
                    Err(actual) => cur = actual,
                }
            }
        }
        // The cohort was folded into the aged slot (or is being folded right now, then the
        // count dips below zero until the fold lands), or dropped with its generation.
        self.fold(t, 0, -1);
    }

    /// Calls of `generation` in flight past `slow` at `now`.
    pub fn overdue(&self, now: u64, slow: u64, generation: u64) -> u64 {
        let t = gen_tag(generation);
        self.slots
            .iter()
            .chain(std::iter::once(&self.aged))
            .map(|s| {
                let (end, stag, n) = unpack(s.load(Ordering::Relaxed));
                let end = end << END_SHIFT;
                if stag == t && n > 0 && crate::rules::overdue(end, slow, now) {
                    n as u64
                } else {
                    0
                }
            })
            .sum()
    }

    /// How often the closed breaker re-checks in-flight calls on acquire: the cohort width.
    pub fn width(&self) -> u64 {
        self.width.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn counts_only_overdue_calls() {
        let f = InFlight::new(100 * MS); // cohorts of 50 ms
        let a = f.enter(0, 0);
        let _b = f.enter(10 * MS, 0);
        let c = f.enter(120 * MS, 0);
        // Cohort 0 (0..50 ms) is overdue once 50 + 100 ms have passed.
        assert_eq!(f.overdue(149 * MS, 100 * MS, 0), 0);
        assert_eq!(f.overdue(150 * MS, 100 * MS, 0), 2);
        f.exit(a, 0);
        assert_eq!(f.overdue(150 * MS, 100 * MS, 0), 1);
        f.exit(c, 0);
        assert_eq!(f.overdue(1000 * MS, 100 * MS, 0), 1);
    }

    /// The aged slot starts empty with tag 0, which a wrapping comparison reads as newer than
    /// every tag from 2^31 on: a fold of such a generation must still land.
    #[test]
    fn a_fold_lands_whatever_the_generation_tag() {
        for generation in [
            0,
            1,
            (1 << 31) - 1,
            1 << 31,
            0xFFFF_FFFF,
            31_536_000_000_000,
        ] {
            let f = InFlight::new(100 * MS);
            let _old = f.enter(0, generation); // cohort 0, slot 0
            let _newer = f.enter(3 * 50 * MS, generation); // slot 0 again: cohort 0 is folded
            assert_eq!(
                f.overdue(10_000 * MS, 100 * MS, generation),
                2,
                "generation {generation}"
            );
        }
    }

    #[test]
    fn recycled_slots_fold_into_aged() {
        let f = InFlight::new(100 * MS);
        let old = f.enter(0, 0); // cohort 0, slot 0
        let newer = f.enter(3 * 50 * MS, 0); // cohort 3, slot 0 again: cohort 0 moves to aged
        assert_eq!(f.overdue(10_000 * MS, 100 * MS, 0), 2);
        f.exit(old, 0);
        assert_eq!(f.overdue(10_000 * MS, 100 * MS, 0), 1);
        f.exit(newer, 0);
        assert_eq!(f.overdue(10_000 * MS, 100 * MS, 0), 0);
    }

    /// Calls hung from before the breaker last entered Closed never count again, not even
    /// once their cohorts were folded into the aged slot.
    #[test]
    fn only_calls_of_the_generation_count() {
        let f = InFlight::new(100 * MS);
        let hung: Vec<_> = (0..5).map(|i| f.enter(i * MS, 0)).collect();
        assert_eq!(f.overdue(200 * MS, 100 * MS, 0), 5);
        // Generation 3 (after trip, half-open, close): the old calls are not its calls.
        assert_eq!(f.overdue(200 * MS, 100 * MS, 3), 0);
        // Generation 3's traffic recycles every slot; the old calls stay out.
        for c in 0..20u64 {
            let p = f.enter(1_000 * MS + c * 50 * MS, 3);
            f.exit(p, 3);
        }
        assert_eq!(f.overdue(1_000_000 * MS, 100 * MS, 3), 0);
        // Their exits, late, do not disturb generation 3's count.
        let live = f.enter(5_000 * MS, 3);
        for h in hung {
            f.exit(h, 0);
        }
        assert_eq!(f.overdue(6_000 * MS, 100 * MS, 3), 1);
        f.exit(live, 3);
        assert_eq!(f.overdue(6_000 * MS, 100 * MS, 3), 0);
    }

    #[test]
    fn an_exit_before_the_fold_of_its_cohort_is_not_lost() {
        let f = InFlight::new(100 * MS);
        let a = f.enter(0, 0);
        // The exit finds its slot recycled before the fold has landed: emulate the order
        // "recycle, exit, fold" by hand.
        f.slots[0].store(pack(end_units(250 * MS), 0, 1), Ordering::Relaxed);
        f.exit(a, 0);
        f.fold(0, end_units(50 * MS), 1);
        assert_eq!(f.overdue(10_000 * MS, 100 * MS, 0), 1); // only the recycling call
    }

    /// After the slow-call duration changes, new calls use the new width at once (100 ms ->
    /// 60 s: a 450 ms call no longer counts; 60 s -> 100 ms: a hung call counts within 150 ms).
    #[test]
    fn cohorts_follow_a_new_slow_call_duration() {
        let f = InFlight::new(100 * MS);
        f.set_slow_call_duration(60_000 * MS, 0);
        let c = f.enter(0, 0);
        assert_eq!(f.overdue(450 * MS, 60_000 * MS, 0), 0);
        assert_eq!(f.overdue(90_000 * MS, 60_000 * MS, 0), 1);
        f.exit(c, 0);

        let f = InFlight::new(60_000 * MS);
        let old = f.enter(0, 0); // a 30 s cohort, ending at 30 s
        f.set_slow_call_duration(100 * MS, 10_000 * MS);
        let new = f.enter(40_000 * MS, 0);
        assert_eq!(f.overdue(40_149 * MS, 100 * MS, 0), 1); // the old call, folded
        assert_eq!(f.overdue(40_150 * MS, 100 * MS, 0), 2);
        f.exit(old, 0);
        f.exit(new, 0);
        assert_eq!(f.overdue(50_000 * MS, 100 * MS, 0), 0);
    }

    /// Clocks with large readings: a UNIX-epoch origin with a 2 ms slow-call duration (the
    /// old 40-bit cohort tags overflowed there) and readings near `u64::MAX`.
    #[test]
    fn large_clock_readings_are_counted() {
        let unix = 1_700_000_000_000_000_000u64;
        let f = InFlight::new(2 * MS);
        let c = f.enter(unix, 7);
        assert_eq!(f.overdue(unix + 3 * MS, 2 * MS, 7), 1);
        f.exit(c, 7);
        assert_eq!(f.overdue(unix + 3 * MS, 2 * MS, 7), 0);

        let f = InFlight::new(2 * MS);
        let near = u64::MAX - MS;
        let c = f.enter(near, 1);
        assert_eq!(f.overdue(near, 2 * MS, 1), 0);
        assert_eq!(f.overdue(u64::MAX, 2 * MS, 1), 1);
        f.exit(c, 1);
        assert_eq!(f.overdue(u64::MAX, 2 * MS, 1), 0);
    }

    #[test]
    fn concurrent_enters_and_exits_balance() {
        use std::sync::Arc;
        let f = Arc::new(InFlight::new(2 * MS));
        let hs: Vec<_> = (0..4u64)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    for i in 0..20_000u64 {
                        let now = (i * 7 + t) * MS / 3;
                        let c = f.enter(now, i / 5_000);
                        f.exit(c, i / 5_000);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        for g in 0..4 {
            assert_eq!(f.overdue(u64::MAX, 2 * MS, g), 0, "generation {g}");
        }
    }
}
