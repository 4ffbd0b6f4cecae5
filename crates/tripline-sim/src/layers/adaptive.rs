//! The layers of the partial breaker, the shedder and the adaptive limiter (see
//! [`crate::adaptive`]), and their counters.
//!
//! | layer | admit | settle |
//! |---|---|---|
//! | partial | `PartialBreaker::try_acquire` | `PartialPermit::record(outcome)`; a refusal further in is `Ignored` (nothing) |
//! | shed | `Shedder::try_acquire(priority)`, or `admit` with a queue (`ShedTicket::try_take` once a slot is handed over, `time_out` at `max_wait`) | the permit is dropped, and the next waiter served |
//! | limiter | `Limiter::try_acquire(priority)`, or `admit` with a queue, as the shedder | `LimiterPermit::record(outcome)`: a success is an RTT sample on virtual time, a failure or a timeout a drop, a refusal further in nothing |

use serde::Serialize;
use tripline::Outcome;
use tripline_policies::limiter::{
    LimitExceeded, Limiter, LimiterAdmission, LimiterPermit, LimiterTicket,
};
use tripline_policies::partial::{PartialBreaker, PartialPermit};
use tripline_policies::shed::{
    Priority, Shed, ShedAdmission, ShedPermit, ShedStats, ShedTicket, Shedder,
};

use super::{Admit, Cx, Layer, Policy, PolicyReport, Woken, put, take};

/// What the partial breakers did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PartialReport {
    /// Attempts admitted.
    pub admitted: u64,
    /// Attempts refused (`PartiallyOpen`).
    pub rejected: u64,
    /// The highest rejection rate any replica's controller reached, in [0, 1].
    pub highest_rejection_rate: f64,
}

/// What the shedders did ([`ShedStats`], summed over the replicas).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ShedReport {
    /// `"client"` or `"workers"`.
    pub at: &'static str,
    /// Calls (or, at the workers, requests) that took a slot at once.
    pub admitted: u64,
    /// Took a slot after waiting in the shedder's queue.
    pub admitted_after_wait: u64,
    /// Refused with slots free: kept for higher priorities.
    pub shed: u64,
    /// Refused: every slot busy.
    pub full: u64,
    /// Refused: the queue full.
    pub queue_full: u64,
    /// Pushed out of the queue by a higher priority.
    pub evicted: u64,
    /// Waited `max_wait` for nothing.
    pub timed_out: u64,
}

impl ShedReport {
    pub(crate) fn add(&mut self, s: ShedStats) {
        self.admitted += s.admitted;
        self.admitted_after_wait += s.admitted_after_wait;
        self.shed += s.shed;
        self.full += s.full;
        self.queue_full += s.queue_full;
        self.evicted += s.evicted;
        self.timed_out += s.timed_out;
    }

    /// Calls refused, for any reason.
    pub fn refused(&self) -> u64 {
        self.shed + self.full + self.queue_full + self.evicted + self.timed_out
    }
}

/// What the adaptive limiters did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LimiterReport {
    /// `"fixed"`, `"aimd"`, `"vegas"` or `"gradient2"`.
    pub algorithm: &'static str,
    /// The initial limit, per replica.
    pub initial_limit: u32,
    /// The lowest limit any replica's limiter reached.
    pub lowest_limit: u32,
    /// The highest.
    pub highest_limit: u32,
    /// The limits at the end of the run, summed over the replicas.
    pub final_limit: u32,
    /// Samples fed as successes (RTTs).
    pub successes: u64,
    /// Samples fed as drops (failures and timeouts).
    pub drops: u64,
    /// What the slots decided: admissions and refusals by reason.
    pub slots: ShedReport,
}

/// What the fault injectors did ([`ChaosStats`](tripline_policies::chaos::ChaosStats)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ChaosReport {
    /// Attempts decided while switched on.
    pub calls: u64,
    /// Attempts delayed.
    pub latency: u64,
    /// Attempts failed at once.
    pub errors: u64,
    /// Attempts hung until their timeout.
    pub hangs: u64,
}

/// The partial breaker, per replica.
pub(crate) struct PartialLayer<'p> {
    pub(crate) breakers: &'p [PartialBreaker],
    pub(crate) permits: Vec<Option<PartialPermit>>,
    pub(crate) highest: f64,
}

impl Layer for PartialLayer<'_> {
    fn admit(&mut self, cx: &Cx, _: &mut Vec<Woken>) -> Admit {
        let b = &self.breakers[cx.replica as usize];
        let r = b.try_acquire();
        self.highest = self.highest.max(b.rejection_rate());
        match r {
            Ok(p) => {
                put(&mut self.permits, cx.slot, p);
                Admit::Go
            }
            Err(_) => Admit::Refused(Policy::Partial),
        }
    }

    fn settle(&mut self, cx: &Cx, outcome: Option<Outcome>, _: &mut Vec<Woken>) {
        if let Some(p) = take(&mut self.permits, cx.slot) {
            p.record(outcome.unwrap_or(Outcome::Ignored));
        }
    }

    fn report(&self, r: &mut PolicyReport) {
        let mut x = PartialReport {
            highest_rejection_rate: self.highest,
            ..PartialReport::default()
        };
        for b in self.breakers {
            let s = b.snapshot();
            x.admitted += s.admitted;
            x.rejected += s.rejected;
        }
        r.partial = Some(x);
    }
}

/// A pool of slots by priority with an optional queue: the [`Shedder`] and the [`Limiter`]
/// have the same admission (`try_acquire`, `admit`, a ticket), differing in what a permit
/// does at the end.
pub(crate) trait SlotPool {
    type Permit;
    type Ticket;
    const POLICY: Policy;
    fn queues(&self) -> bool;
    fn max_wait_nanos(&self) -> u64;
    fn acquire(&self, p: Priority) -> Option<Self::Permit>;
    fn enter(&self, p: Priority) -> Option<Result<Self::Permit, Self::Ticket>>;
    /// `Some(Some(permit))` once handed a slot, `Some(None)` once pushed out, `None` while it
    /// waits.
    fn try_take(t: &mut Self::Ticket) -> Option<Option<Self::Permit>>;
    /// Gives up waiting; a slot handed over meanwhile is given back.
    fn time_out(t: Self::Ticket);
    /// The call this permit admitted ended (`None`: refused further in).
    fn finish(&self, permit: Self::Permit, outcome: Option<Outcome>);
    /// The limit now, for a pool whose size moves (the limiter).
    fn limit(&self) -> Option<u32>;
}

impl SlotPool for Shedder {
    type Permit = ShedPermit;
    type Ticket = ShedTicket;
    const POLICY: Policy = Policy::Shed;
    fn queues(&self) -> bool {
        self.config().max_waiting() > 0
    }
    fn max_wait_nanos(&self) -> u64 {
        crate::dist::nanos(self.config().max_wait())
    }
    fn acquire(&self, p: Priority) -> Option<ShedPermit> {
        self.try_acquire(p).ok()
    }
    fn enter(&self, p: Priority) -> Option<Result<ShedPermit, ShedTicket>> {
        match self.admit(p) {
            Ok(ShedAdmission::Now(permit)) => Some(Ok(permit)),
            Ok(ShedAdmission::Queued(t)) => Some(Err(t)),
            Err(_) => None,
        }
    }
    fn try_take(t: &mut ShedTicket) -> Option<Option<ShedPermit>> {
        t.try_take().map(|r: Result<ShedPermit, Shed>| r.ok())
    }
    fn time_out(t: ShedTicket) {
        drop(t.time_out());
    }
    fn finish(&self, permit: ShedPermit, _: Option<Outcome>) {
        drop(permit);
    }
    fn limit(&self) -> Option<u32> {
        None
    }
}

impl SlotPool for Limiter {
    type Permit = LimiterPermit;
    type Ticket = LimiterTicket;
    const POLICY: Policy = Policy::Limiter;
    fn queues(&self) -> bool {
        self.config().max_waiting() > 0
    }
    fn max_wait_nanos(&self) -> u64 {
        crate::dist::nanos(self.config().max_wait())
    }
    fn acquire(&self, p: Priority) -> Option<LimiterPermit> {
        self.try_acquire(p).ok()
    }
    fn enter(&self, p: Priority) -> Option<Result<LimiterPermit, LimiterTicket>> {
        match self.admit(p) {
            Ok(LimiterAdmission::Now(permit)) => Some(Ok(permit)),
            Ok(LimiterAdmission::Queued(t)) => Some(Err(t)),
            Err(_) => None,
        }
    }
    fn try_take(t: &mut LimiterTicket) -> Option<Option<LimiterPermit>> {
        t.try_take()
            .map(|r: Result<LimiterPermit, LimitExceeded>| r.ok())
    }
    fn time_out(t: LimiterTicket) {
        // A permit handed over meanwhile is dropped unreported: it feeds nothing.
        drop(t.time_out());
    }
    fn finish(&self, permit: LimiterPermit, outcome: Option<Outcome>) {
        permit.record(outcome.unwrap_or(Outcome::Ignored));
    }
    fn limit(&self) -> Option<u32> {
        Some(Limiter::limit(self))
    }
}

/// The shedder (in the client) or the limiter, per replica: a slot for the attempt's
/// priority now, a place in the queue (the attempt waits, holding its worker and the slots
/// of the layers before), or a refusal. Every change that may hand a slot to a waiter (a
/// slot given back, a limit that grew, a waiter pushed out) serves the replica's waiters.
pub(crate) struct SlotLayer<'p, P: SlotPool> {
    pub(crate) pools: &'p [P],
    pub(crate) permits: Vec<Option<P::Permit>>,
    pub(crate) tickets: Vec<Option<P::Ticket>>,
    /// Per replica: the slots waiting, in the order they queued.
    pub(crate) waiting: Vec<Vec<u32>>,
    /// After each settle: the lowest and highest limits seen (the limiter's).
    pub(crate) limits: Option<(u32, u32)>,
}

impl<'p, P: SlotPool> SlotLayer<'p, P> {
    pub(crate) fn new(pools: &'p [P]) -> Self {
        Self {
            pools,
            permits: Vec::new(),
            tickets: Vec::new(),
            waiting: (0..pools.len()).map(|_| Vec::new()).collect(),
            limits: pools.iter().filter_map(P::limit).fold(None, |acc, l| {
                Some(acc.map_or((l, l), |(lo, hi): (u32, u32)| (lo.min(l), hi.max(l))))
            }),
        }
    }

    /// Collects what the replica's waiters were handed: a slot (on through the layers) or a
    /// refusal (pushed out by a higher priority).
    fn serve(&mut self, replica: u32, woken: &mut Vec<Woken>) {
        let Some(list) = self.waiting.get_mut(replica as usize) else {
            return;
        };
        if list.is_empty() {
            return;
        }
        let (tickets, permits) = (&mut self.tickets, &mut self.permits);
        list.retain(|&slot| {
            let Some(ticket) = tickets.get_mut(slot as usize).and_then(Option::as_mut) else {
                return false;
            };
            match P::try_take(ticket) {
                None => true,
                Some(granted) => {
                    tickets[slot as usize] = None;
                    match granted {
                        Some(permit) => {
                            put(permits, slot, permit);
                            woken.push((slot, None));
                        }
                        None => woken.push((slot, Some(P::POLICY))),
                    }
                    false
                }
            }
        });
    }
}

impl<P: SlotPool> Layer for SlotLayer<'_, P> {
    fn admit(&mut self, cx: &Cx, woken: &mut Vec<Woken>) -> Admit {
        let pool = &self.pools[cx.replica as usize];
        if !pool.queues() {
            return match pool.acquire(cx.priority) {
                Some(p) => {
                    put(&mut self.permits, cx.slot, p);
                    Admit::Go
                }
                None => Admit::Refused(P::POLICY),
            };
        }
        let r = pool.enter(cx.priority);
        let wait = pool.max_wait_nanos();
        let admit = match r {
            Some(Ok(p)) => {
                put(&mut self.permits, cx.slot, p);
                Admit::Go
            }
            Some(Err(t)) => {
                put(&mut self.tickets, cx.slot, t);
                self.waiting[cx.replica as usize].push(cx.slot);
                Admit::Wait(cx.now.saturating_add(wait))
            }
            None => Admit::Refused(P::POLICY),
        };
        // A full queue may have pushed out a lower waiter to make room.
        self.serve(cx.replica, woken);
        admit
    }

    fn settle(&mut self, cx: &Cx, outcome: Option<Outcome>, woken: &mut Vec<Woken>) {
        if let Some(p) = take(&mut self.permits, cx.slot) {
            let pool = &self.pools[cx.replica as usize];
            pool.finish(p, outcome);
            if let (Some(limits), Some(l)) = (self.limits.as_mut(), pool.limit()) {
                *limits = (limits.0.min(l), limits.1.max(l));
            }
            self.serve(cx.replica, woken);
        }
    }

    fn expire(&mut self, cx: &Cx, woken: &mut Vec<Woken>) -> Policy {
        if let Some(t) = take(&mut self.tickets, cx.slot) {
            let list = &mut self.waiting[cx.replica as usize];
            if let Some(i) = list.iter().position(|&s| s == cx.slot) {
                list.remove(i);
            }
            P::time_out(t);
            // A slot handed to it, uncollected, went back and on to the next waiter.
            self.serve(cx.replica, woken);
        }
        P::POLICY
    }

    fn report(&self, r: &mut PolicyReport) {
        if let Some((lo, hi)) = self.limits {
            let x = r.limiter.get_or_insert_with(LimiterReport::default);
            x.lowest_limit = lo;
            x.highest_limit = hi;
        }
    }
}
