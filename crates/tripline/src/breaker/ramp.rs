//! Gradual recovery after closing ([`RampUp`](crate::RampUp)): the share each step admits is
//! [`rules::ramp_share_ppm`], and which call of a step is admitted is [`rules::ramp_admits`];
//! this is their host in atomics.

use super::Inner;
use crate::clock::{Clock, nanos};
use crate::config::{RampCurve, RampUp};
use crate::error::{RejectReason, Rejected};
use crate::rules;
use crate::state::{State, Word};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering, lock};

/// A ramp in progress: its start and step length, fixed when the breaker closes, and one word
/// for the current step: `step index << 48 | share in ppm << 28 | calls seen in the step`.
#[derive(Debug)]
pub(super) struct Ramp {
    generation: AtomicU64,
    start: AtomicU64,
    step_nanos: AtomicU64,
    /// The ramp's configuration: `from` as f64 bits, the steps, the curve (true: exponential).
    from_bits: AtomicU64,
    steps: AtomicU32,
    exponential: AtomicBool,
    step: AtomicU64,
    pub(super) rejected: AtomicU64,
}

const COUNT_BITS: u32 = 28;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;
const SHARE_SHIFT: u32 = COUNT_BITS;
const STEP_SHIFT: u32 = 48;

impl Ramp {
    pub(super) fn new() -> Self {
        Self {
            generation: AtomicU64::new(0),
            start: AtomicU64::new(0),
            step_nanos: AtomicU64::new(1),
            from_bits: AtomicU64::new(0),
            steps: AtomicU32::new(1),
            exponential: AtomicBool::new(false),
            step: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    fn share(&self, i: u64) -> u64 {
        let r = Ordering::Relaxed;
        let curve = if self.exponential.load(r) {
            RampCurve::Exponential
        } else {
            RampCurve::Linear
        };
        rules::ramp_share_ppm(
            f64::from_bits(self.from_bits.load(r)),
            self.steps.load(r),
            curve,
            u32::try_from(i).unwrap_or(u32::MAX),
        )
    }

    /// Starts a ramp for `generation` at `now` (under the core lock, before the word).
    pub(super) fn begin(&self, ramp: &RampUp, generation: u64, now: u64) {
        let r = Ordering::Relaxed;
        self.generation.store(generation, r);
        self.start.store(now, r);
        self.step_nanos
            .store((nanos(ramp.over) / u64::from(ramp.steps.max(1))).max(1), r);
        self.from_bits.store(ramp.from.to_bits(), r);
        self.steps.store(ramp.steps.max(1), r);
        self.exponential
            .store(ramp.curve == RampCurve::Exponential, r);
        self.step.store(ramp.share_ppm(0) << SHARE_SHIFT, r);
    }

    /// Hands the ramp in progress on to `generation` (an interval's new generation), where
    /// it goes on from the step it is in (under the core lock, before the word).
    pub(super) fn carry(&self, generation: u64) {
        self.generation.store(generation, Ordering::Relaxed);
    }

    /// The step `generation`'s ramp is in at `now`, while it runs.
    fn current_step(&self, generation: u64, now: u64) -> Option<u64> {
        let r = Ordering::Relaxed;
        let i = rules::ramp_step(self.start.load(r), self.step_nanos.load(r), now);
        (self.generation.load(r) == generation && i < u64::from(self.steps.load(r))).then_some(i)
    }

    /// Whether the ramp of `generation` still runs at `now` (it would refuse some calls).
    pub(super) fn running(&self, generation: u64, now: u64) -> bool {
        self.current_step(generation, now).is_some()
    }

    /// Whether the ramp of `generation` admits a call at `now`: `None` once the ramp is over.
    fn admits(&self, generation: u64, now: u64) -> Option<bool> {
        let i = self.current_step(generation, now)?;
        let r = Ordering::Relaxed;
        let mut cur = self.step.load(r);
        loop {
            let (step, share, n) = (
                cur >> STEP_SHIFT,
                (cur >> SHARE_SHIFT) & ((1 << 20) - 1),
                cur & COUNT_MAX,
            );
            let (new, share, n) = if step < i {
                // The first call of a new step computes its share.
                let share = self.share(i);
                (i << STEP_SHIFT | share << SHARE_SHIFT | 1, share, 0)
            } else {
                // This step, or a newer one in place (this reading is old): judge by it.
                (cur + u64::from(n < COUNT_MAX), share, n)
            };
            match self.step.compare_exchange(cur, new, r, r) {
                Ok(_) => return Some(rules::ramp_admits(n, share)),
                Err(actual) => cur = actual,
            }
        }
    }
}

impl<C: Clock> Inner<C> {
    /// Whether a ramping breaker admits a call now; ends the ramp once it is over.
    #[cold]
    #[inline(never)]
    pub(super) fn ramp_admits(&self, word: Word, now: u64) -> bool {
        let Some(cold) = self.cold.get() else {
            return true;
        };
        match cold.ramp.admits(word.generation(), now) {
            Some(admit) => admit,
            None => {
                if word.state() == State::Closed {
                    // Over (or another generation's): full traffic from now on.
                    let _core = lock(&cold.core);
                    if self.word() == word {
                        self.hot.ramping.store(false, Ordering::Relaxed);
                    }
                }
                true
            }
        }
    }

    #[cold]
    #[inline(never)]
    pub(super) fn ramp_reject(&self, now: u64) -> Rejected {
        let cold = self.cold();
        cold.ramp.rejected.fetch_add(1, Ordering::Relaxed);
        let reason = RejectReason::RampingUp;
        if let Some(cold) = self.call_events() {
            self.rejection_event(cold, State::Closed, reason, None, now);
        }
        Rejected {
            breaker: self.name.clone(),
            state: State::Closed,
            reason,
            retry_after: None,
            cause: None,
        }
    }
}
