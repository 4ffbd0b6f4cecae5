//! The half-open round: at most K probes, each a lease with a deadline, claimed and settled
//! under the core lock (a handful of calls per open period). The verdicts are
//! [`rules::probe_verdict`] and [`rules::settled_verdict`].

use super::Inner;
use super::permit::{Kind, Recorded, Ticket};
use super::transition::OpenWait;
use crate::clock::{Clock, nanos};
use crate::error::Rejected;
use crate::outcome::{Classification, Outcome};
use crate::rules::{self, RoundCounts};
use crate::state::{State, Word};
use crate::sync::{Ordering, lock};

#[derive(Clone, Copy, Debug)]
struct Lease {
    token: u64,
    deadline: u64,
}

/// A half-open round's probes and results.
#[derive(Debug)]
pub(super) struct Round {
    leases: Vec<Option<Lease>>,
    /// Probes admitted in this round (expired, abandoned and ignored ones included).
    pub(super) admitted: u32,
    pub(super) counts: RoundCounts,
}

impl Round {
    pub(super) fn new(k: u32) -> Self {
        Self {
            leases: vec![None; k as usize],
            admitted: 0,
            counts: RoundCounts::default(),
        }
    }

    pub(super) fn in_flight(&self) -> u32 {
        self.leases.iter().filter(|l| l.is_some()).count() as u32
    }

    /// Makes room for `k` probes; probes already out keep their leases (and count against
    /// the new number).
    pub(super) fn resize(&mut self, k: u32) {
        let held = self
            .leases
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |i| i + 1);
        self.leases.resize((k as usize).max(held), None);
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.leases.capacity() * std::mem::size_of::<Option<Lease>>()
    }
}

impl<C: Clock> Inner<C> {
    /// Claims a probe slot. `None`: the state moved; look again.
    pub(super) fn claim_probe(&self, word: Word) -> Option<Result<Ticket, Rejected>> {
        let now = self.now();
        let cold = self.cold();
        let mut core = lock(&cold.core);
        if self.word() != word {
            return None;
        }
        if core.opening_from(word) {
            // The round has its verdict: the breaker is opening.
            drop(core);
            return Some(Err(self.reject::<1>(None, now, word.generation())));
        }
        if self.end_half_open_past_max_wait(&mut core, word, now) {
            drop(core);
            self.drain(cold);
            return None;
        }
        // Reclaim expired leases: their probes' results will be refused as stale.
        for lease in core.round.leases.iter_mut() {
            if lease.is_some_and(|l| rules::lease_expired(l.deadline, now)) {
                *lease = None;
                cold.expired_probes.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (k, policy) = (core.config.half_open_calls, core.config.half_open_policy);
        let thresholds = self.hot.thresholds();
        // A round begun under a larger `half_open_calls` (a reconfiguration while HalfOpen)
        // may already hold the results this configuration asks for.
        if let Some(verdict) = rules::settled_verdict(policy, k, &core.round.counts, &thresholds) {
            let reason = core.round.counts.reason(verdict);
            let snap = self.snapshot(now);
            self.transition(
                &mut core,
                word,
                verdict.state(),
                reason,
                snap,
                now,
                OpenWait::RULES,
            );
            drop(core);
            self.drain(cold);
            return None;
        }
        if rules::admits_probe(policy, k, core.round.in_flight(), &core.round.counts) {
            if let Some(slot) = core.round.leases.iter().position(Option::is_none) {
                let token = core.next_token;
                core.next_token += 1;
                let deadline = now.saturating_add(nanos(core.config.probe_lease));
                core.round.leases[slot] = Some(Lease { token, deadline });
                core.round.admitted = core.round.admitted.saturating_add(1);
                self.lane().1.admitted.fetch_add(1, Ordering::Relaxed);
                return Some(Ok(Ticket {
                    generation: word.generation(),
                    started: now,
                    kind: Kind::Probe {
                        slot: slot as u32,
                        token,
                    },
                }));
            }
        }
        let retry = core
            .round
            .leases
            .iter()
            .flatten()
            .map(|l| l.deadline.saturating_sub(now))
            .min();
        drop(core);
        Some(Err(self.reject::<1>(retry, now, word.generation())))
    }

    pub(super) fn record_probe(
        &self,
        generation: u64,
        slot: u32,
        token: u64,
        now: u64,
        elapsed: u64,
        c: Classification,
    ) -> Recorded {
        let cold = self.cold();
        let mut core = lock(&cold.core);
        let word = self.word();
        let lease_ok = core
            .round
            .leases
            .get(slot as usize)
            .copied()
            .flatten()
            .is_some_and(|l| l.token == token);
        if word.generation() != generation || word.state() != State::HalfOpen || !lease_ok {
            drop(core);
            return self.stale(generation, now);
        }
        core.round.leases[slot as usize] = None;
        let slow = rules::is_slow(elapsed, self.hot.slow_nanos.load(Ordering::Relaxed));
        let mut outcome = c.outcome;
        if outcome == Outcome::Failure {
            if let Some(kind) = c.kind {
                cold.kind_failures[kind.index()].fetch_add(1, Ordering::Relaxed);
                if self.hot.weight(kind) == 0 {
                    outcome = Outcome::Ignored;
                }
            }
        }
        let Some(failure) = self.lane().1.count(outcome, slow) else {
            return Recorded::Ignored;
        };
        // A probe is one sample of the round, whatever its kind's weight.
        if failure {
            self.hot.consecutive_failure(generation, 1);
            self.hot
                .success_mark
                .store(self.successes(), Ordering::Relaxed);
        } else {
            self.hot.consecutive_success(generation);
        }
        let (k, policy) = (core.config.half_open_calls, core.config.half_open_policy);
        core.round.counts = core.round.counts.with(failure, slow);
        let counts = core.round.counts;
        if let Some(verdict) =
            rules::probe_verdict(policy, k, &counts, failure || slow, &self.hot.thresholds())
        {
            let snap = self.snapshot(now);
            core.pending_kind = c.kind.filter(|_| failure);
            self.transition(
                &mut core,
                word,
                verdict.state(),
                counts.reason(verdict),
                snap,
                now,
                OpenWait::Rules(c.retry_after),
            );
        }
        drop(core);
        self.drain(cold);
        Recorded::Counted
    }

    /// Gives back the slot of a probe dropped without a result; whether it still held one (a
    /// probe whose lease expired, or whose round is over, held none).
    pub(super) fn abandon_probe(&self, slot: u32, token: u64) -> bool {
        let mut core = lock(&self.cold().core);
        match core.round.leases.get_mut(slot as usize) {
            Some(lease) if lease.is_some_and(|l| l.token == token) => {
                *lease = None;
                true
            }
            _ => false,
        }
    }
}
