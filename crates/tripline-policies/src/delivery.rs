//! Event delivery for the policies with listeners: events are queued under the owner's lock
//! (so that queue order is that lock's order, which is the order the events happened in) and
//! delivered after every lock is released, in sequence order, by one delivery loop.
//!
//! # The contract
//!
//! * **No listener runs under a lock.** The owner queues events while it holds its own lock and
//!   calls [`Delivery::deliver`] after releasing it; `deliver` holds its own small lock only to
//!   pop the next event, never while a listener runs. A listener may therefore call any public
//!   method of the policy that delivered the event (change it, record on it, subscribe to it).
//! * **One delivery loop at a time, in sequence order.** A thread that finds another delivering
//!   (or finds itself delivering: a listener that caused new events) leaves its events in the
//!   queue and returns; the loop that is running delivers them after the event it is on, once
//!   every listener has seen that one. Every listener sees every event in sequence order, and
//!   sees event `n` before any listener sees event `n + 1`. An event caused by a listener is
//!   delivered after the event that listener was given, never inside it.
//! * **Nothing is stranded.** The loop gives up its turn, under the same lock, only when it
//!   finds the queue empty: an event queued at any moment is delivered by the loop running
//!   then, or by the thread that queued it.
//! * **From subscription on.** A listener receives the events queued after it subscribed (a
//!   listener added by a listener does not receive the event being delivered, nor the ones
//!   already queued).
//! * **A panicking listener** is counted ([`Delivery::panics`]) and skipped for that event; the
//!   others still receive it, and the loop carries on.
//!
//! Events from a thread whose events another thread is delivering are delivered on that other
//! thread: the call that caused them may return before its listeners ran.
//!
//! # The lock
//!
//! `state` guards the queue, the delivering flag, the listener list and the sequence counter.
//! It is taken after the owner's lock (to queue) or alone (to pop, to subscribe); nothing is
//! called under it but the owner's event constructor (which only copies values).

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::sync::{AtomicU64, Mutex, lock};

/// A listener of events of type `E`.
pub(crate) type Listener<E> = Arc<dyn Fn(&E) + Send + Sync>;

struct Entry<E> {
    listener: Listener<E>,
    /// The last sequence number queued before it subscribed.
    after: u64,
}

impl<E> Clone for Entry<E> {
    fn clone(&self) -> Self {
        Self {
            listener: self.listener.clone(),
            after: self.after,
        }
    }
}

struct State<E> {
    queue: VecDeque<(u64, E)>,
    delivering: bool,
    listeners: Arc<[Entry<E>]>,
    seq: u64,
}

/// The event queue and the delivery loop of one policy. See the [module docs](self).
pub(crate) struct Delivery<E> {
    state: Mutex<State<E>>,
    panics: AtomicU64,
}

impl<E> Default for Delivery<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> Delivery<E> {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                delivering: false,
                listeners: Arc::from(Vec::new()),
                seq: 0,
            }),
            panics: AtomicU64::new(0),
        }
    }

    /// Queues the event `make` builds from its sequence number (1, 2, ...), if anyone listens.
    /// Call it under the owner's lock, so that sequence order is the order of that lock.
    pub(crate) fn queue(&self, make: impl FnOnce(u64) -> E) {
        let mut s = lock(&self.state);
        if s.listeners.is_empty() {
            return;
        }
        s.seq += 1;
        let seq = s.seq;
        let event = make(seq);
        s.queue.push_back((seq, event));
    }

    /// Adds a listener: it receives the events queued from now on.
    pub(crate) fn subscribe(&self, listener: Listener<E>) {
        let mut s = lock(&self.state);
        let after = s.seq;
        let mut list: Vec<Entry<E>> = s.listeners.to_vec();
        list.push(Entry { listener, after });
        s.listeners = Arc::from(list);
    }

    /// Listener calls that panicked.
    pub(crate) fn panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }

    /// Delivers the queued events, unless a delivery loop is running already (on another
    /// thread, or further up this thread's stack): then that loop delivers them. Call it with
    /// no lock held.
    pub(crate) fn deliver(&self) {
        {
            let mut s = lock(&self.state);
            if s.delivering || s.queue.is_empty() {
                return;
            }
            s.delivering = true;
        }
        loop {
            let (seq, event, listeners) = {
                let mut s = lock(&self.state);
                match s.queue.pop_front() {
                    Some((seq, event)) => (seq, event, s.listeners.clone()),
                    None => {
                        // Under the lock that queues: nothing queued now is left behind.
                        s.delivering = false;
                        return;
                    }
                }
            };
            for e in listeners.iter().filter(|e| seq > e.after) {
                if catch_unwind(AssertUnwindSafe(|| (e.listener)(&event))).is_err() {
                    self.panics.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}
