//! Events: every transition, rejection, stale result and abandoned permit, for listeners.
//!
//! # One queue, delivered after every lock is released
//! Every event of a breaker, whatever its kind, takes the next number of the breaker's
//! sequence and joins one queue, in that order; events are delivered from that queue only,
//! to every listener in sequence order, each exactly once. A thread that makes an event (a
//! transition, an operator call, a rejection) queues it, releases every lock it holds, and
//! then delivers what is queued; if another thread is delivering already, it leaves its
//! events to that thread, which looks at the queue again before it stops, so no event is
//! stranded. No lock of the library's is held while a listener runs, so a listener may call
//! back into the breaker or the registry (look a key up, reset, reload, subscribe, read the
//! metrics): its own events are queued behind the one it is handling and delivered after it
//! returns. A registry's listeners are the breakers' listeners: the registry subscribes them
//! to each breaker, so they get each breaker's events through that breaker's queue.
//!
//! A listener receives [`EventKind::Initial`] first, with the state when it subscribed, then
//! every later event. Per-call events (rejections, stale results, abandoned permits) go only
//! to listeners that ask for them ([`Listener::wants_call_events`]), and
//! [`EventKind::CallOutcome`], one event per recorded result, only to those that ask for it
//! ([`Listener::wants_outcome_events`]): a breaker with no such listener pays one atomic load
//! per call for them, takes no lock and allocates nothing. A panicking listener is isolated:
//! the panic is caught and counted.
//!
//! # Locks
//! * `Hub::state`, a mutex: the listeners, the next sequence number and the queue. Held to
//!   number and queue an event, to subscribe, and to take the next event out; never while a
//!   listener runs. A transition queues its event under the breaker's core lock, before it
//!   publishes the new state, so that any event a thread makes after seeing the new state
//!   comes after the transition in the sequence.
//!   Beside them it keeps the *delivering* flag, which is not a lock: the thread that set it
//!   delivers, nobody waits for it, and it is cleared in the same critical section that finds
//!   the queue empty, so no event is ever left undelivered.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use crate::error::BreakerName;
use crate::outcome::Outcome;
use crate::state::State;
use crate::sync::{AtomicU64, AtomicUsize, Mutex, Ordering, lock};
use crate::window::WindowSnapshot;

/// One thing that happened to a breaker.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Position in the breaker's event sequence (starts at 0, no gaps across all events).
    pub seq: u64,
    /// Clock reading when it happened, since the clock's origin.
    pub at: Duration,
    /// The breaker.
    pub breaker: BreakerName,
    /// What happened.
    pub kind: EventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum EventKind {
    /// First event a listener receives: the state when it subscribed.
    Initial {
        /// The state.
        state: State,
        /// Its generation.
        generation: u64,
    },
    /// The breaker changed state.
    Transition {
        /// Old state.
        from: State,
        /// New state.
        to: State,
        /// Generation of the new state.
        generation: u64,
        /// The rule that fired.
        reason: Reason,
        /// The window behind the decision (for probe verdicts, the closed window as it was).
        window: WindowSnapshot,
        /// For transitions to Open: how long it stays open.
        open_for: Option<Duration>,
    },
    /// In MetricsOnly, the rules would have tripped the breaker now (reported once each time
    /// the condition becomes true).
    WouldTrip {
        /// The rule.
        reason: Reason,
        /// The window behind it.
        window: WindowSnapshot,
    },
    /// The configuration was replaced.
    Reconfigured {
        /// Current generation (unchanged by a reconfiguration).
        generation: u64,
    },
    /// A call was refused.
    Rejected {
        /// The refusing state.
        state: State,
        /// Why.
        reason: crate::RejectReason,
        /// Time until a probe may be admitted (see [`crate::RejectReason`]).
        retry_after: Option<Duration>,
    },
    /// A result arrived for an older generation (or an expired probe lease) and was discarded.
    StaleResult {
        /// The permit's generation.
        permit_generation: u64,
        /// The breaker's current generation.
        generation: u64,
    },
    /// A permit was dropped without a result.
    Abandoned {
        /// The permit's generation.
        generation: u64,
        /// Whether it was a half-open probe.
        probe: bool,
    },
    /// A call's result was recorded on its permit (whether it counted, was ignored or came
    /// too late and was discarded as stale). Delivered only to listeners that ask for it
    /// ([`Listener::wants_outcome_events`]); the event's `at` is when the result was recorded,
    /// so the call started at `at - duration`. Calls of a Disabled breaker record nothing and
    /// produce none. More fields may be added (a failure kind), so match it with `..`.
    #[non_exhaustive]
    CallOutcome {
        /// The caller's verdict.
        outcome: Outcome,
        /// From the permit's grant to the result, on the breaker's clock; or the caller's own
        /// measure of the call, if it recorded one (`Permit::record_with_duration`).
        duration: Duration,
        /// Whether the call was slower than the slow-call duration in force.
        slow: bool,
        /// The generation the permit was granted in.
        generation: u64,
        /// Whether it was a half-open probe.
        probe: bool,
        /// Whether the result counted (false: ignored, or stale).
        counted: bool,
    },
}

/// Why a transition happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// Failure rate at or above the threshold with the minimum calls seen.
    FailureRate,
    /// Slow-call rate (in-flight overdue calls included) at or above the threshold.
    SlowCallRate,
    /// The consecutive-failure rule.
    ConsecutiveFailures {
        /// Failures in a row.
        count: u64,
    },
    /// The failure-count-in-time rule ([`FailureCount`](crate::FailureCount)): this many
    /// failures within its `within`.
    FailureCount {
        /// Failures within the rule's time.
        count: u64,
    },
    /// The open wait elapsed.
    OpenElapsed,
    /// The probes proved recovery.
    ProbesSucceeded {
        /// Probe results counted.
        probes: u32,
        /// Failed ones among them.
        failures: u32,
        /// Slow ones among them.
        slow: u32,
    },
    /// The probes failed.
    ProbesFailed {
        /// Probe results counted.
        probes: u32,
        /// Failed ones among them.
        failures: u32,
        /// Slow ones among them.
        slow: u32,
    },
    /// HalfOpen reached its maximum wait without a verdict.
    HalfOpenTimeout,
    /// An operator asked for it.
    Operator,
    /// The Closed generation's `interval` ended (Closed to Closed, or MetricsOnly to
    /// MetricsOnly): a new generation with every count cleared
    /// ([`BreakerConfigBuilder::interval`](crate::BreakerConfigBuilder::interval)).
    IntervalElapsed,
}

/// Receives events. Implemented for closures `Fn(&Event)`.
///
/// # Delivery
/// Every event of a breaker takes the next number of its sequence and joins one queue, and is
/// delivered from it after every lock of the library's is released, to each listener once, in
/// sequence order, [`EventKind::Initial`] first. The thread that made an event delivers it,
/// unless another thread is delivering already (then that one does). So a listener may call
/// back into the breaker or its registry (look a key up, reset, reload, subscribe, read the
/// metrics): the events its calls make are delivered after it returns. A slow listener holds up
/// only the thread delivering, and the events queued behind it.
///
/// The queue has no bound, and the thread delivering goes on while events keep coming: a
/// listener that asks for per-call events ([`wants_call_events`](Self::wants_call_events),
/// [`wants_outcome_events`](Self::wants_outcome_events)) runs once per call on whichever
/// caller's thread is delivering, so while it is slower than the calls that make its events,
/// that caller's call does not return and the queue grows. Keep such a listener short (count,
/// or hand the event to a channel of your own).
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, EventKind};
/// use std::sync::{Arc, Mutex};
///
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
/// let log = seen.clone();
/// breaker.subscribe(move |e: &tripline::Event| log.lock().unwrap().push(e.kind.clone()));
/// breaker.force_open();
/// let seen = seen.lock().unwrap();
/// assert!(matches!(seen[0], EventKind::Initial { .. }));
/// assert!(matches!(seen[1], EventKind::Transition { .. }));
/// ```
pub trait Listener: Send + Sync + 'static {
    /// Called for each event.
    fn on_event(&self, event: &Event);

    /// Whether this listener also wants per-call events (rejections, stale results, abandoned
    /// permits). These cost a little on the hot path, so they are off by default.
    fn wants_call_events(&self) -> bool {
        false
    }

    /// Whether this listener wants an [`EventKind::CallOutcome`] for every recorded result
    /// (a trace recorder does). These are as many as the calls, so they are off by default,
    /// separately from [`wants_call_events`](Self::wants_call_events).
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker, Event, EventKind, Listener, Outcome};
    /// use std::sync::{Arc, Mutex};
    ///
    /// struct Outcomes(Arc<Mutex<Vec<Outcome>>>);
    /// impl Listener for Outcomes {
    ///     fn on_event(&self, e: &Event) {
    ///         if let EventKind::CallOutcome { outcome, .. } = e.kind {
    ///             self.0.lock().unwrap().push(outcome);
    ///         }
    ///     }
    ///     fn wants_outcome_events(&self) -> bool {
    ///         true
    ///     }
    /// }
    ///
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
    /// breaker.subscribe(Outcomes(seen.clone()));
    /// let _ = breaker.call(|| Err::<(), _>("503"));
    /// breaker.call(|| Ok::<_, ()>(())).unwrap();
    /// assert_eq!(*seen.lock().unwrap(), [Outcome::Failure, Outcome::Success]);
    /// ```
    fn wants_outcome_events(&self) -> bool {
        false
    }
}

impl<F: Fn(&Event) + Send + Sync + 'static> Listener for F {
    fn on_event(&self, event: &Event) {
        self(event)
    }
}

/// A listener that keeps every event (call events included), for tests and tools.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, EventLog};
///
/// let log = EventLog::new();
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// breaker.subscribe(log.clone());
/// breaker.force_open();
/// let _ = breaker.try_acquire();
/// assert_eq!(log.events().len(), 3); // initial, transition, rejection
/// ```
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    events: Arc<std::sync::Mutex<Vec<Event>>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Removes and returns the events so far.
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(
            &mut *self
                .events
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl Listener for EventLog {
    fn on_event(&self, event: &Event) {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event.clone());
    }
    fn wants_call_events(&self) -> bool {
        true
    }
}

/// A subscribed listener and what it asked for.
struct Sub {
    listener: Arc<dyn Listener>,
    /// Sequence number of this listener's Initial event: it sees nothing earlier.
    from_seq: u64,
    calls: bool,
    outcomes: bool,
}

impl Sub {
    fn wants(&self, event: &Event) -> bool {
        if event.seq < self.from_seq {
            return false;
        }
        match event.kind {
            EventKind::Initial { .. } => event.seq == self.from_seq,
            EventKind::Rejected { .. }
            | EventKind::StaleResult { .. }
            | EventKind::Abandoned { .. } => self.calls,
            EventKind::CallOutcome { .. } => self.outcomes,
            _ => true,
        }
    }
}

/// What `Hub::state` guards.
struct HubState {
    next_seq: u64,
    pending: VecDeque<Event>,
    listeners: Arc<[Sub]>,
    /// Whether a thread is delivering (see the module docs): a flag, not a lock; nobody waits
    /// for it.
    draining: bool,
}

/// A breaker's listeners and its event queue (see the module docs).
pub(crate) struct Hub {
    state: Mutex<HubState>,
    /// How many listeners want per-call events, and outcome events: read without the lock by
    /// the hot paths, which make those events only when some listener wants them.
    call_listeners: AtomicUsize,
    outcome_listeners: AtomicUsize,
    pub(crate) listener_panics: AtomicU64,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

impl Hub {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(HubState {
                next_seq: 0,
                pending: VecDeque::new(),
                listeners: Arc::new([]),
                draining: false,
            }),
            call_listeners: AtomicUsize::new(0),
            outcome_listeners: AtomicUsize::new(0),
            listener_panics: AtomicU64::new(0),
        }
    }

    /// Numbers `kind` and queues it for the listeners that want it; with none, the event only
    /// takes its number (a listener subscribed later starts after it anyway). Delivered by
    /// the next [`drain`](Self::drain).
    pub(crate) fn push(&self, at: u64, breaker: &BreakerName, kind: EventKind) {
        Self::push_locked(&mut lock(&self.state), at, breaker, kind);
    }

    fn push_locked(st: &mut HubState, at: u64, breaker: &BreakerName, kind: EventKind) {
        let event = Event {
            seq: st.next_seq,
            at: Duration::from_nanos(at),
            breaker: breaker.clone(),
            kind,
        };
        st.next_seq += 1;
        if st.listeners.iter().any(|s| s.wants(&event)) {
            st.pending.push_back(event);
        }
    }

    /// Adds a listener and queues its `initial` event, the first it will receive.
    pub(crate) fn subscribe(
        &self,
        listener: Arc<dyn Listener>,
        at: u64,
        breaker: &BreakerName,
        initial: EventKind,
    ) {
        let calls = listener.wants_call_events();
        let outcomes = listener.wants_outcome_events();
        let mut st = lock(&self.state);
        let seq = st.next_seq;
        let mut list: Vec<Sub> = st
            .listeners
            .iter()
            .map(|s| Sub {
                listener: s.listener.clone(),
                ..*s
            })
            .collect();
        list.push(Sub {
            listener,
            from_seq: seq,
            calls,
            outcomes,
        });
        st.listeners = list.into();
        if calls {
            self.call_listeners.fetch_add(1, Ordering::Relaxed);
        }
        if outcomes {
            self.outcome_listeners.fetch_add(1, Ordering::Relaxed);
        }
        Self::push_locked(&mut st, at, breaker, initial);
    }

    /// Delivers the queued events in order, unless another thread is delivering (it then
    /// delivers these too). Call it only with no lock held: listeners run here.
    ///
    /// Whether a thread is delivering is decided under the queue's lock, in the same critical
    /// section that takes an event out or finds the queue empty: an event queued before the
    /// deliverer finds the queue empty is delivered by it, one queued after finds nobody
    /// delivering and is delivered by the thread that queued it.
    pub(crate) fn drain(&self) {
        {
            let mut st = lock(&self.state);
            if st.draining {
                return;
            }
            st.draining = true;
        }
        loop {
            let next = {
                let mut st = lock(&self.state);
                match st.pending.pop_front() {
                    Some(e) => Some((e, st.listeners.clone())),
                    None => {
                        st.draining = false;
                        None
                    }
                }
            };
            let Some((event, listeners)) = next else {
                return;
            };
            for s in listeners.iter().filter(|s| s.wants(&event)) {
                self.deliver(&*s.listener, &event);
            }
        }
    }

    fn deliver(&self, listener: &dyn Listener, event: &Event) {
        if catch_unwind(AssertUnwindSafe(|| listener.on_event(event))).is_err() {
            self.listener_panics.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[inline]
    pub(crate) fn wants_call_events(&self) -> bool {
        self.call_listeners.load(Ordering::Relaxed) != 0
    }

    #[inline]
    pub(crate) fn wants_outcome_events(&self) -> bool {
        self.outcome_listeners.load(Ordering::Relaxed) != 0
    }

    /// Queues a per-call event and delivers it (with anything before it) on this thread,
    /// unless another thread is delivering. Called with no lock held.
    #[cold]
    pub(crate) fn call_event(&self, at: u64, breaker: &BreakerName, kind: EventKind) {
        self.push(at, breaker, kind);
        self.drain();
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::thread;

    /// Two threads each queue an event and deliver: every event reaches the listener once.
    #[test]
    fn no_event_is_stranded() {
        loom::model(|| {
            let hub = loom::sync::Arc::new(Hub::new());
            let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
            let s = seen.clone();
            let name = BreakerName::from("loom");
            hub.subscribe(
                Arc::new(move |e: &Event| s.lock().unwrap().push(e.seq)),
                0,
                &name,
                EventKind::Initial {
                    state: State::Closed,
                    generation: 0,
                },
            );
            hub.drain();
            let h2 = hub.clone();
            let n2 = name.clone();
            let t = thread::spawn(move || {
                h2.push(0, &n2, EventKind::Reconfigured { generation: 0 });
                h2.drain();
            });
            hub.push(0, &name, EventKind::Reconfigured { generation: 0 });
            hub.drain();
            t.join().unwrap();
            let seen = seen.lock().unwrap().clone();
            assert_eq!(seen, [0, 1, 2]);
        });
    }
}
