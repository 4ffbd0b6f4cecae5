//! Random histories of arrivals (queued or not), releases, grants, timeouts, cancellations and
//! limit changes on a shedder and on an adaptive limiter, checking after every step:
//!
//! * a call is never refused while a call of lower priority would be admitted in the same
//!   state, and admission never decreases with the priority;
//! * no waiter is left waiting while its share would let it in, and a slot goes to the highest
//!   waiter first, the oldest of a priority first;
//! * a full queue only ever pushes out its newest waiter of the lowest priority, for a higher
//!   call; a `QueueFull` refusal finds no waiter below the call;
//! * every slot is accounted for: in flight equals the permits held, waiting the tickets
//!   pending, and a shedder never holds more than its capacity.
//!
//! `PROPTEST_CASES=20000 cargo test --release -p tripline-policies --test shed_props` for a
//! long run.
#![cfg(all(feature = "shed", feature = "limiter"))]

use std::time::Duration;

use proptest::prelude::*;
use tripline_policies::limiter::{
    AimdConfig, LimitAlgorithm, LimitExceeded, Limiter, LimiterAdmission, LimiterConfig,
    LimiterPermit, LimiterTicket,
};
use tripline_policies::shed::{
    Priority, Refusal, Shares, Shed, ShedAdmission, ShedConfig, ShedPermit, ShedTicket, Shedder,
};

#[derive(Clone, Debug)]
enum Op {
    Arrive {
        priority: u8,
        queue: bool,
    },
    Release(usize),
    TimeOut(usize),
    Cancel(usize),
    /// A sample for the limiter (ignored by the shedder): moves the limit.
    Sample {
        dropped: bool,
        in_flight: u32,
    },
}

fn priority() -> impl Strategy<Value = u8> {
    prop_oneof![Just(0u8), Just(128u8), Just(255u8), any::<u8>(),]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (priority(), any::<bool>()).prop_map(|(priority, queue)| Op::Arrive { priority, queue }),
        3 => any::<usize>().prop_map(Op::Release),
        1 => any::<usize>().prop_map(Op::TimeOut),
        1 => any::<usize>().prop_map(Op::Cancel),
        2 => (any::<bool>(), 0u32..20).prop_map(|(dropped, in_flight)| Op::Sample { dropped, in_flight }),
    ]
}

fn shares() -> impl Strategy<Value = Option<Shares>> {
    prop_oneof![
        Just(None),
        (1u32..=100, 1u32..=100, 1u32..=100).prop_map(|(a, b, c)| {
            let mut v = [a, b, c];
            v.sort_unstable();
            Some(Shares::new(f64::from(v[2]), f64::from(v[1]), f64::from(v[0])).unwrap())
        }),
    ]
}

/// What both pools look like to the checks.
trait Pool {
    type Permit;
    type Ticket;
    fn try_acquire(&self, p: Priority) -> Result<Self::Permit, Refusal>;
    fn admit(&self, p: Priority) -> Result<Result<Self::Permit, Self::Ticket>, Refusal>;
    fn take(t: &mut Self::Ticket) -> Option<Result<Self::Permit, Refusal>>;
    fn time_out(t: Self::Ticket) -> Result<Self::Permit, Refusal>;
    fn sample(&self, _dropped: bool, _in_flight: u32) {}
    fn would_admit(&self, p: Priority) -> bool;
    fn in_flight(&self) -> u32;
    fn waiting(&self) -> u32;
    fn queue(&self) -> Vec<Priority>;
    fn capacity(&self) -> Option<u32>;
}

impl Pool for Shedder {
    type Permit = ShedPermit;
    type Ticket = ShedTicket;
    fn try_acquire(&self, p: Priority) -> Result<ShedPermit, Refusal> {
        Shedder::try_acquire(self, p).map_err(|e: Shed| e.reason())
    }
    fn admit(&self, p: Priority) -> Result<Result<ShedPermit, ShedTicket>, Refusal> {
        match Shedder::admit(self, p) {
            Ok(ShedAdmission::Now(x)) => Ok(Ok(x)),
            Ok(ShedAdmission::Queued(t)) => Ok(Err(t)),
            Err(e) => Err(e.reason()),
        }
    }
    fn take(t: &mut ShedTicket) -> Option<Result<ShedPermit, Refusal>> {
        t.try_take().map(|r| r.map_err(|e| e.reason()))
    }
    fn time_out(t: ShedTicket) -> Result<ShedPermit, Refusal> {
        t.time_out().map_err(|e| e.reason())
    }
    fn would_admit(&self, p: Priority) -> bool {
        Shedder::would_admit(self, p)
    }
    fn in_flight(&self) -> u32 {
        Shedder::in_flight(self)
    }
    fn waiting(&self) -> u32 {
        Shedder::waiting(self)
    }
    fn queue(&self) -> Vec<Priority> {
        Shedder::queue(self)
    }
    fn capacity(&self) -> Option<u32> {
        Some(Shedder::capacity(self))
    }
}

impl Pool for Limiter {
    type Permit = LimiterPermit;
    type Ticket = LimiterTicket;
    fn try_acquire(&self, p: Priority) -> Result<LimiterPermit, Refusal> {
        Limiter::try_acquire(self, p).map_err(|e: LimitExceeded| e.reason())
    }
    fn admit(&self, p: Priority) -> Result<Result<LimiterPermit, LimiterTicket>, Refusal> {
        match Limiter::admit(self, p) {
            Ok(LimiterAdmission::Now(x)) => Ok(Ok(x)),
            Ok(LimiterAdmission::Queued(t)) => Ok(Err(t)),
            Err(e) => Err(e.reason()),
        }
    }
    fn take(t: &mut LimiterTicket) -> Option<Result<LimiterPermit, Refusal>> {
        t.try_take().map(|r| r.map_err(|e| e.reason()))
    }
    fn time_out(t: LimiterTicket) -> Result<LimiterPermit, Refusal> {
        t.time_out().map_err(|e| e.reason())
    }
    fn sample(&self, dropped: bool, in_flight: u32) {
        Limiter::sample(self, Duration::from_millis(5), in_flight, dropped);
    }
    fn would_admit(&self, p: Priority) -> bool {
        Limiter::would_admit(self, p)
    }
    fn in_flight(&self) -> u32 {
        Limiter::in_flight(self)
    }
    fn waiting(&self) -> u32 {
        Limiter::waiting(self)
    }
    fn queue(&self) -> Vec<Priority> {
        Limiter::queue(self)
    }
    fn capacity(&self) -> Option<u32> {
        None
    }
}

const PROBES: [u8; 10] = [0, 1, 63, 64, 127, 128, 129, 200, 254, 255];

fn run<P: Pool>(pool: &P, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut permits: Vec<P::Permit> = Vec::new();
    // Pending tickets with their priority and arrival number.
    let mut tickets: Vec<(P::Ticket, Priority, usize)> = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        let mut arrival = None;
        match *op {
            Op::Arrive { priority, queue } => {
                let p = Priority::new(priority);
                let lower_admissible = (0..priority).any(|q| pool.would_admit(Priority::new(q)));
                let queued_before = pool.queue();
                let r = if queue {
                    pool.admit(p)
                } else {
                    pool.try_acquire(p).map(Ok)
                };
                match r {
                    Ok(Ok(permit)) => permits.push(permit),
                    Ok(Err(t)) => tickets.push((t, p, step)),
                    Err(reason) => {
                        prop_assert!(
                            !lower_admissible,
                            "step {step}: {p} refused ({reason:?}) while a lower priority was admissible"
                        );
                        if reason == Refusal::QueueFull {
                            prop_assert!(queued_before.iter().all(|q| *q >= p));
                        }
                    }
                }
                arrival = Some((p, queued_before));
            }
            Op::Release(i) => {
                if !permits.is_empty() {
                    let i = i % permits.len();
                    drop(permits.swap_remove(i));
                }
            }
            Op::TimeOut(i) => {
                if !tickets.is_empty() {
                    let (t, ..) = tickets.swap_remove(i % tickets.len());
                    match P::time_out(t) {
                        Ok(permit) => permits.push(permit),
                        Err(r) => prop_assert!(matches!(r, Refusal::TimedOut | Refusal::Evicted)),
                    }
                }
            }
            Op::Cancel(i) => {
                if !tickets.is_empty() {
                    drop(tickets.swap_remove(i % tickets.len()));
                }
            }
            Op::Sample { dropped, in_flight } => pool.sample(dropped, in_flight),
        }

        // Take every grant and every eviction, and check who got them.
        let mut granted = Vec::new();
        let mut evicted = Vec::new();
        let mut still = Vec::new();
        for (mut t, p, n) in tickets.drain(..) {
            match P::take(&mut t) {
                Some(Ok(permit)) => {
                    permits.push(permit);
                    granted.push((p, n));
                }
                Some(Err(r)) => {
                    prop_assert_eq!(r, Refusal::Evicted);
                    evicted.push((p, n));
                }
                None => still.push((t, p, n)),
            }
        }
        tickets = still;
        for &(gp, gn) in &granted {
            for (_, wp, wn) in &tickets {
                prop_assert!(
                    gp > *wp || (gp == *wp && gn < *wn),
                    "step {step}: granted {gp} (#{gn}) while {wp} (#{wn}) waits"
                );
            }
        }
        if !evicted.is_empty() {
            let Some((p, before)) = &arrival else {
                return Err(TestCaseError::fail(format!(
                    "step {step}: evicted without an arrival"
                )));
            };
            prop_assert_eq!(evicted.len(), 1);
            let (ep, _) = evicted[0];
            prop_assert!(ep < *p, "evicted {ep} for {p}");
            prop_assert!(before.iter().all(|q| *q >= ep));
        }

        // The state.
        let admits: Vec<bool> = PROBES
            .iter()
            .map(|&q| pool.would_admit(Priority::new(q)))
            .collect();
        prop_assert!(
            admits.windows(2).all(|w| !w[0] || w[1]),
            "step {step}: {admits:?}"
        );
        for q in pool.queue() {
            prop_assert!(!pool.would_admit(q), "step {step}: {q} waits but could go");
        }
        prop_assert_eq!(pool.in_flight() as usize, permits.len());
        prop_assert_eq!(pool.waiting() as usize, tickets.len());
        prop_assert_eq!(pool.queue().len(), tickets.len());
        if let Some(c) = pool.capacity() {
            prop_assert!(pool.in_flight() <= c);
        }
    }
    drop(permits);
    drop(tickets);
    prop_assert_eq!(pool.in_flight(), 0);
    prop_assert_eq!(pool.waiting(), 0);
    Ok(())
}

proptest! {
    #[test]
    fn shedder(
        capacity in 1u32..8,
        max_waiting in 0u32..6,
        shares in shares(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let mut b = ShedConfig::builder().capacity(capacity).max_waiting(max_waiting).max_wait(Duration::from_secs(1));
        b = b.shares(shares.unwrap_or_else(Shares::none));
        let s = Shedder::new(b.build().unwrap());
        run(&s, &ops)?;
    }

    #[test]
    fn limiter(
        min in 1u32..4,
        extra in 0u32..8,
        max_waiting in 0u32..6,
        shares in shares(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let aimd = AimdConfig::builder()
            .min_limit(min)
            .initial_limit(min + extra / 2)
            .max_limit(min + extra)
            .backoff_ratio(0.5)
            .build()
            .unwrap();
        let mut b = LimiterConfig::builder()
            .algorithm(LimitAlgorithm::Aimd(aimd))
            .max_waiting(max_waiting)
            .max_wait(Duration::from_secs(1));
        if let Some(s) = shares {
            b = b.shares(s);
        }
        let l = Limiter::new(b.build().unwrap());
        run(&l, &ops)?;
    }
}
