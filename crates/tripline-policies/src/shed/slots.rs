//! The slot pool behind the [`Shedder`](super::Shedder) and the
//! [`Limiter`](crate::limiter::Limiter): a capacity that may change, shares of it by priority,
//! and a bounded wait queue served highest priority first.
//!
//! Everything is decided under one small mutex, so every decision sees one consistent state:
//! the capacity, the calls in flight and the queue. The rules, which the property tests check
//! after every step:
//!
//! * a call of priority `p` takes a slot at once iff `in_flight < cutoff(p)`, where `cutoff`
//!   never decreases with the priority;
//! * after every change, the queue's first waiter (highest priority, oldest) cannot take a
//!   slot, so no call ever overtakes a waiter of its own or a higher priority;
//! * a freed slot (or a larger capacity) goes to the first waiter, then the next, while their
//!   cutoffs allow;
//! * a full queue makes room for a call by refusing its newest waiter of the lowest priority,
//!   and only if that waiter's priority is below the call's; otherwise the call is refused.
//!
//! # The lock
//!
//! `state` guards the capacity, the calls in flight, the queue and the counts. Never run under
//! it: a waiter's waker. A grant (or a refusal) is decided under the lock and sent to its
//! waiter after the lock is released ([`Outbox`]), because sending wakes the waiter's task and
//! a waker is code of the executor's (or the caller's), which may call back into the pool.
//! A grant is the waiter's from the moment it is decided (counted in flight); if the waiter
//! has gone by the time it is sent, the slot comes back as any slot does.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::oneshot;

use super::{Priority, Refusal, Shares};
use crate::sync::{AtomicBool, AtomicU32, Mutex, MutexGuard, lock};

type Key = (Reverse<Priority>, u64);
type Grant = Result<Slot, Refusal>;

/// Counts of what the pool decided, since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) admitted: u64,
    pub(crate) admitted_after_wait: u64,
    pub(crate) full: u64,
    pub(crate) shed: u64,
    pub(crate) queue_full: u64,
    pub(crate) evicted: u64,
    pub(crate) timed_out: u64,
}

#[derive(Debug)]
struct State {
    limit: u32,
    in_flight: u32,
    shares: Option<Shares>,
    max_waiting: u32,
    queue: BTreeMap<Key, oneshot::Sender<Grant>>,
    next_seq: u64,
    counts: Counts,
}

impl State {
    fn cutoff(&self, p: Priority) -> u32 {
        match &self.shares {
            None => self.limit,
            Some(s) => s.cutoff(p, self.limit),
        }
    }
}

/// The pool. Shared behind an `Arc`: every [`Slot`] holds one.
#[derive(Debug)]
pub(crate) struct Slots {
    /// See the [module docs](self#the-lock).
    state: Mutex<State>,
    in_flight: AtomicU32,
    waiting: AtomicU32,
    limit: AtomicU32,
    /// A call was refused or queued since the flag was last taken.
    demand_refused: AtomicBool,
}

/// What [`Slots::admit`] decided.
#[derive(Debug)]
pub(crate) enum Admit {
    Now(Slot),
    Queued(Ticket),
}

impl Slots {
    pub(crate) fn new(limit: u32, shares: Option<Shares>, max_waiting: u32) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                limit,
                in_flight: 0,
                shares,
                max_waiting,
                queue: BTreeMap::new(),
                next_seq: 0,
                counts: Counts::default(),
            }),
            in_flight: AtomicU32::new(0),
            waiting: AtomicU32::new(0),
            limit: AtomicU32::new(limit),
            demand_refused: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is counters and a queue of channels, valid after any panic.
        lock(&self.state)
    }

    /// Publishes the gauges; called with the lock held, after every change.
    fn publish(&self, s: &State) {
        self.in_flight.store(s.in_flight, Ordering::Relaxed);
        self.waiting.store(s.queue.len() as u32, Ordering::Relaxed);
        self.limit.store(s.limit, Ordering::Relaxed);
    }

    /// A slot now, or the refusal; never queues.
    pub(crate) fn try_admit(self: &Arc<Self>, p: Priority) -> Result<Slot, Refusal> {
        let mut s = self.lock();
        if s.in_flight < s.cutoff(p) {
            return Ok(self.take(&mut s, p));
        }
        Err(self.refuse(&mut s, false))
    }

    /// A slot now, a place in the queue, or the refusal.
    pub(crate) fn admit(self: &Arc<Self>, p: Priority) -> Result<Admit, Refusal> {
        let mut s = self.lock();
        if s.in_flight < s.cutoff(p) {
            return Ok(Admit::Now(self.take(&mut s, p)));
        }
        drop(s);
        let mut out = Outbox::default();
        let admitted = self.admit_or_queue(p, &mut out);
        out.send();
        admitted
    }

    /// [`admit`](Self::admit) when no slot was free a moment ago: the decision again, under
    /// the lock, with the queue; a waiter pushed out is told after the lock is released.
    #[cold]
    fn admit_or_queue(self: &Arc<Self>, p: Priority, out: &mut Outbox) -> Result<Admit, Refusal> {
        let mut s = self.lock();
        if s.in_flight < s.cutoff(p) {
            return Ok(Admit::Now(self.take(&mut s, p)));
        }
        if s.max_waiting == 0 {
            return Err(self.refuse(&mut s, false));
        }
        if s.queue.len() as u32 >= s.max_waiting {
            // Make room by refusing the newest waiter of the lowest priority, if it is below p.
            let lowest = s.queue.last_key_value().map(|(k, _)| k.0.0);
            match lowest {
                Some(low) if low < p => {
                    if let Some((_, tx)) = s.queue.pop_last() {
                        s.counts.evicted += 1;
                        out.push(tx, Err(Refusal::Evicted));
                    }
                }
                _ => return Err(self.refuse(&mut s, true)),
            }
        }
        let seq = s.next_seq;
        s.next_seq += 1;
        let key = (Reverse(p), seq);
        let (tx, rx) = oneshot::channel();
        s.queue.insert(key, tx);
        self.demand_refused.store(true, Ordering::Relaxed);
        self.publish(&s);
        Ok(Admit::Queued(Ticket {
            slots: Arc::clone(self),
            key,
            rx,
            settled: false,
        }))
    }

    fn take(self: &Arc<Self>, s: &mut State, p: Priority) -> Slot {
        s.in_flight += 1;
        s.counts.admitted += 1;
        self.publish(s);
        Slot {
            slots: Some(Arc::clone(self)),
            priority: p,
            in_flight: s.in_flight,
        }
    }

    fn refuse(&self, s: &mut State, queue_full: bool) -> Refusal {
        self.demand_refused.store(true, Ordering::Relaxed);
        if queue_full {
            s.counts.queue_full += 1;
            Refusal::QueueFull
        } else if s.in_flight < s.limit {
            s.counts.shed += 1;
            Refusal::Shed
        } else {
            s.counts.full += 1;
            Refusal::Full
        }
    }

    /// Gives the freed capacity to the waiters, first first, while their cutoffs allow. The
    /// grants go out once the lock is released.
    fn grant(self: &Arc<Self>, s: &mut State, out: &mut Outbox) {
        while let Some(&key) = s.queue.keys().next() {
            let p = key.0.0;
            if s.in_flight >= s.cutoff(p) {
                break;
            }
            let Some(tx) = s.queue.remove(&key) else {
                break;
            };
            s.in_flight += 1;
            s.counts.admitted_after_wait += 1;
            let slot = Slot {
                slots: Some(Arc::clone(self)),
                priority: p,
                in_flight: s.in_flight,
            };
            out.push(tx, Ok(slot));
        }
    }

    fn release(self: &Arc<Self>) {
        let out = {
            let mut s = self.lock();
            s.in_flight = s.in_flight.saturating_sub(1);
            let out = (!s.queue.is_empty()).then(|| {
                let mut out = Outbox::default();
                self.grant(&mut s, &mut out);
                out
            });
            self.publish(&s);
            out
        };
        if let Some(out) = out {
            out.send();
        }
    }

    /// A grant whose waiter had gone when it was sent: it was not admitted after all (its slot
    /// comes back when dropped).
    fn ungrant(&self) {
        let mut s = self.lock();
        s.counts.admitted_after_wait = s.counts.admitted_after_wait.saturating_sub(1);
    }

    /// Changes the capacity; a larger one goes to the waiters, whose grants the caller sends
    /// once it holds no lock ([`Outbox::send`]). Callers serialise their calls (the limiter
    /// holds its algorithm's lock), so an unchanged limit is seen without taking the lock.
    #[cfg_attr(
        not(feature = "limiter"),
        expect(
            dead_code,
            reason = "the limiter moves the capacity; a shedder's is fixed"
        )
    )]
    pub(crate) fn set_limit(self: &Arc<Self>, limit: u32) -> Outbox {
        let mut out = Outbox::default();
        if self.limit.load(Ordering::Relaxed) == limit {
            return out;
        }
        let mut s = self.lock();
        if s.limit == limit {
            return out;
        }
        s.limit = limit;
        self.grant(&mut s, &mut out);
        self.publish(&s);
        out
    }

    /// Whether any call was refused or queued since the last call of this, and resets it.
    #[cfg_attr(
        not(feature = "limiter"),
        expect(dead_code, reason = "read by the limiter's fairness rule")
    )]
    pub(crate) fn take_demand_refused(&self) -> bool {
        self.demand_refused.load(Ordering::Relaxed)
            && self.demand_refused.swap(false, Ordering::Relaxed)
    }

    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub(crate) fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Relaxed)
    }

    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    pub(crate) fn counts(&self) -> Counts {
        self.lock().counts
    }

    /// Whether a call of priority `p` would take a slot at once now.
    pub(crate) fn would_admit(&self, p: Priority) -> bool {
        let s = self.lock();
        s.in_flight < s.cutoff(p)
    }

    /// The most calls of priority `p` may hold now (all priorities together, with it).
    pub(crate) fn cutoff(&self, p: Priority) -> u32 {
        self.lock().cutoff(p)
    }

    /// The priorities waiting, first first.
    pub(crate) fn queued(&self) -> Vec<Priority> {
        self.lock().queue.keys().map(|k| k.0.0).collect()
    }
}

/// Grants and refusals decided under the pool's lock, to be sent to their waiters once no lock
/// is held (sending wakes the waiter's task). Dropping it sends them too; call
/// [`send`](Self::send) where the moment matters (after the last lock is released).
#[derive(Debug, Default)]
#[must_use = "send the grants once no lock is held"]
pub(crate) struct Outbox(Vec<(oneshot::Sender<Grant>, Grant)>);

impl Outbox {
    fn push(&mut self, tx: oneshot::Sender<Grant>, grant: Grant) {
        self.0.push((tx, grant));
    }

    /// Sends every grant and refusal. A grant whose waiter has gone comes back: it is not
    /// counted as admitted, and its slot is released (which may grant the next waiter).
    #[inline]
    pub(crate) fn send(mut self) {
        self.flush();
    }

    #[inline]
    fn flush(&mut self) {
        if self.0.is_empty() {
            return;
        }
        self.deliver();
    }

    #[cold]
    fn deliver(&mut self) {
        for (tx, grant) in self.0.drain(..) {
            if let Err(Ok(slot)) = tx.send(grant) {
                if let Some(slots) = &slot.slots {
                    slots.ungrant();
                }
                drop(slot);
            }
        }
    }
}

impl Drop for Outbox {
    #[inline]
    fn drop(&mut self) {
        self.flush();
    }
}

/// One slot of the pool, given back when dropped (to the queue's first waiter, if its share
/// allows).
#[derive(Debug)]
pub(crate) struct Slot {
    slots: Option<Arc<Slots>>,
    priority: Priority,
    in_flight: u32,
}

impl Slot {
    /// The priority it was taken for.
    pub(crate) fn priority(&self) -> Priority {
        self.priority
    }

    /// Calls in flight just after it was taken, itself included.
    #[cfg_attr(
        not(feature = "limiter"),
        expect(dead_code, reason = "the limiter's samples carry it")
    )]
    pub(crate) fn in_flight_at_start(&self) -> u32 {
        self.in_flight
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.take() {
            slots.release();
        }
    }
}

/// A place in the wait queue. Dropping it leaves the queue (a slot granted meanwhile goes
/// back at once).
#[derive(Debug)]
pub(crate) struct Ticket {
    slots: Arc<Slots>,
    key: Key,
    rx: oneshot::Receiver<Grant>,
    settled: bool,
}

impl Ticket {
    /// The priority it waits with.
    pub(crate) fn priority(&self) -> Priority {
        self.key.0.0
    }

    /// The slot, if it was granted; the refusal, if the waiter was pushed out; `None` while it
    /// still waits.
    pub(crate) fn try_take(&mut self) -> Option<Grant> {
        if self.settled {
            return None;
        }
        match self.rx.try_recv() {
            Ok(g) => {
                self.settled = true;
                Some(g)
            }
            Err(oneshot::error::TryRecvError::Empty) => None,
            Err(oneshot::error::TryRecvError::Closed) => {
                self.settled = true;
                Some(Err(Refusal::Evicted))
            }
        }
    }

    /// Gives up waiting: the refusal, counted as timed out, unless the slot was granted (or the
    /// waiter pushed out) first.
    pub(crate) fn time_out(mut self) -> Grant {
        let place = {
            let mut s = self.slots.lock();
            let place = s.queue.remove(&self.key);
            if place.is_some() {
                s.counts.timed_out += 1;
                self.slots.publish(&s);
            }
            place
        };
        // Dropped with the lock released: dropping a sender wakes its waiter.
        if place.is_some() {
            drop(place);
            self.settled = true;
            return Err(Refusal::TimedOut);
        }
        if let Some(grant) = self.try_take() {
            return grant;
        }
        // Granted, but the grant is still on its way (in another call's outbox): the waiter
        // gives up all the same; the slot comes back when the grant finds it gone.
        self.settled = true;
        let mut s = self.slots.lock();
        s.counts.timed_out += 1;
        Err(Refusal::TimedOut)
    }

    /// Waits for the outcome (forever, if nothing comes: the caller bounds the wait).
    pub(crate) async fn outcome(&mut self) -> Grant {
        match (&mut self.rx).await {
            Ok(g) => {
                self.settled = true;
                g
            }
            Err(_) => {
                self.settled = true;
                Err(Refusal::Evicted)
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // Leave the queue first; a slot granted before that is in the channel and goes back
        // when the receiver drops (after the lock is released). The place's sender is dropped
        // after the lock is released too: dropping it wakes the waiter.
        let place = {
            let mut s = self.slots.lock();
            let place = s.queue.remove(&self.key);
            if place.is_some() {
                self.slots.publish(&s);
            }
            place
        };
        drop(place);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pool is built on shuttle's primitives in the crate's unit tests (`crate::sync`):
    /// these single-threaded cases run inside it, once.
    fn run(f: impl Fn() + Send + Sync + 'static) {
        shuttle::check_random(f, 1);
    }

    fn shares() -> Shares {
        Shares::default()
    }

    #[test]
    fn a_freed_slot_goes_to_the_highest_waiter_first() {
        run(|| {
            let pool = Slots::new(2, None, 8);
            let a = pool.try_admit(Priority::DEFAULT).unwrap();
            let _b = pool.try_admit(Priority::DEFAULT).unwrap();
            let Admit::Queued(mut low) = pool.admit(Priority::SHEDDABLE).unwrap() else {
                panic!("queued")
            };
            let Admit::Queued(mut high) = pool.admit(Priority::CRITICAL).unwrap() else {
                panic!("queued")
            };
            assert_eq!(pool.queued(), [Priority::CRITICAL, Priority::SHEDDABLE]);
            drop(a);
            let _granted = high.try_take().unwrap().unwrap();
            assert!(low.try_take().is_none());
            assert_eq!(pool.in_flight(), 2);
        });
    }

    #[test]
    fn a_full_queue_pushes_out_its_newest_lowest_waiter_for_a_higher_call() {
        run(|| {
            let pool = Slots::new(1, None, 2);
            let _a = pool.try_admit(Priority::DEFAULT).unwrap();
            let Admit::Queued(mut old) = pool.admit(Priority::SHEDDABLE).unwrap() else {
                panic!()
            };
            let Admit::Queued(mut new) = pool.admit(Priority::SHEDDABLE).unwrap() else {
                panic!()
            };
            assert!(matches!(
                pool.admit(Priority::SHEDDABLE),
                Err(Refusal::QueueFull)
            ));
            let Admit::Queued(_crit) = pool.admit(Priority::CRITICAL).unwrap() else {
                panic!()
            };
            assert!(matches!(new.try_take(), Some(Err(Refusal::Evicted))));
            assert!(old.try_take().is_none());
            assert_eq!(pool.counts().evicted, 1);
        });
    }

    #[test]
    fn shares_keep_room_for_higher_priorities() {
        run(|| {
            let pool = Slots::new(10, Some(shares()), 0);
            let held: Vec<_> = (0..5)
                .map(|_| pool.try_admit(Priority::SHEDDABLE).unwrap())
                .collect();
            assert!(matches!(
                pool.try_admit(Priority::SHEDDABLE),
                Err(Refusal::Shed)
            ));
            let more: Vec<_> = (0..4)
                .map(|_| pool.try_admit(Priority::DEFAULT).unwrap())
                .collect();
            assert!(matches!(
                pool.try_admit(Priority::DEFAULT),
                Err(Refusal::Shed)
            ));
            let last = pool.try_admit(Priority::CRITICAL).unwrap();
            assert!(matches!(
                pool.try_admit(Priority::CRITICAL),
                Err(Refusal::Full)
            ));
            drop((held, more, last));
            assert_eq!(pool.in_flight(), 0);
        });
    }

    #[test]
    fn a_dropped_ticket_leaves_the_queue_and_a_granted_slot_comes_back() {
        run(|| {
            let pool = Slots::new(1, None, 4);
            let a = pool.try_admit(Priority::DEFAULT).unwrap();
            let Admit::Queued(t) = pool.admit(Priority::DEFAULT).unwrap() else {
                panic!()
            };
            assert_eq!(pool.waiting(), 1);
            drop(t);
            assert_eq!(pool.waiting(), 0);
            let Admit::Queued(t) = pool.admit(Priority::DEFAULT).unwrap() else {
                panic!()
            };
            drop(a); // granted to t, which never takes it
            assert_eq!(pool.in_flight(), 1);
            drop(t);
            assert_eq!(pool.in_flight(), 0);
        });
    }

    #[test]
    fn a_larger_limit_goes_to_the_waiters() {
        run(|| {
            let pool = Slots::new(1, None, 4);
            let _a = pool.try_admit(Priority::DEFAULT).unwrap();
            let Admit::Queued(mut t) = pool.admit(Priority::DEFAULT).unwrap() else {
                panic!()
            };
            pool.set_limit(2).send();
            let _granted = t.try_take().unwrap().unwrap();
            assert_eq!(pool.in_flight(), 2);
        });
    }
}
