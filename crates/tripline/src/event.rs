//! Events: every transition, rejection, stale result and abandoned permit, for listeners.
//!
//! Transition events (and [`EventKind::Initial`], [`EventKind::WouldTrip`],
//! [`EventKind::Reconfigured`]) are delivered to every listener in sequence order, each
//! exactly once, by whichever thread is free to dispatch; no breaker lock is held while a
//! listener runs, so a listener may call back into the breaker. Per-call events (rejections,
//! stale results, abandoned permits) are delivered on the calling thread, only to listeners that
//! ask for them ([`Listener::wants_call_events`]), and may interleave with transition events;
//! a listener gets them only once its Initial event has been delivered.
//! [`EventKind::CallOutcome`], one event per recorded result, is delivered the same way, only to
//! listeners that ask for it ([`Listener::wants_outcome_events`]): a breaker with no such
//! listener pays one atomic load per result for it, takes no lock and allocates nothing.
//! A panicking listener is isolated: the panic is caught and counted.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use crate::error::BreakerName;
use crate::outcome::Outcome;
use crate::state::State;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, lock};
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
}

/// Receives events. Implemented for closures `Fn(&Event)`.
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

struct Entry {
    listener: Arc<dyn Listener>,
    /// Sequence number of this listener's Initial event: it sees nothing earlier.
    from_seq: u64,
    calls: bool,
    outcomes: bool,
    /// Whether its Initial event has been delivered; per-call events (delivered on the calling
    /// thread, not through the queue) wait for it, so Initial is always the first.
    started: Arc<AtomicBool>,
}

pub(crate) struct Hub {
    listeners: Mutex<Arc<Vec<Entry>>>,
    call_listeners: AtomicUsize,
    outcome_listeners: AtomicUsize,
    dispatching: Mutex<()>,
    pending: Mutex<VecDeque<Event>>,
    seq: AtomicU64,
    pub(crate) listener_panics: AtomicU64,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("seq", &self.seq.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Hub {
    pub(crate) fn new() -> Self {
        Self {
            listeners: Mutex::new(Arc::new(Vec::new())),
            call_listeners: AtomicUsize::new(0),
            outcome_listeners: AtomicUsize::new(0),
            dispatching: Mutex::new(()),
            pending: Mutex::new(VecDeque::new()),
            seq: AtomicU64::new(0),
            listener_panics: AtomicU64::new(0),
        }
    }

    /// Queues an ordered event. Called with the breaker's core lock held, so queue order is
    /// sequence order. With no listener the event only takes its sequence number: a listener
    /// added later (also under the core lock) starts after it anyway.
    pub(crate) fn queue(&self, at: u64, breaker: &BreakerName, kind: EventKind) {
        let seq = self.next_seq();
        if lock(&self.listeners).is_empty() {
            return;
        }
        self.push(seq, at, breaker, kind);
    }

    fn push(&self, seq: u64, at: u64, breaker: &BreakerName, kind: EventKind) {
        lock(&self.pending).push_back(Event {
            seq,
            at: Duration::from_nanos(at),
            breaker: breaker.clone(),
            kind,
        });
    }

    /// Adds a listener and queues its `initial` event, the first it will receive. Called with
    /// the breaker's core lock held.
    pub(crate) fn subscribe(
        &self,
        listener: Arc<dyn Listener>,
        at: u64,
        breaker: &BreakerName,
        initial: EventKind,
    ) {
        let seq = self.next_seq();
        self.add(listener, seq);
        self.push(seq, at, breaker, initial);
    }

    fn add(&self, listener: Arc<dyn Listener>, from_seq: u64) {
        let calls = listener.wants_call_events();
        let outcomes = listener.wants_outcome_events();
        let mut guard = lock(&self.listeners);
        let mut list: Vec<Entry> = guard
            .iter()
            .map(|e| Entry {
                listener: e.listener.clone(),
                from_seq: e.from_seq,
                calls: e.calls,
                outcomes: e.outcomes,
                started: e.started.clone(),
            })
            .collect();
        list.push(Entry {
            listener,
            from_seq,
            calls,
            outcomes,
            started: Arc::new(AtomicBool::new(false)),
        });
        *guard = Arc::new(list);
        if calls {
            self.call_listeners.fetch_add(1, Ordering::Relaxed);
        }
        if outcomes {
            self.outcome_listeners.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Delivers queued events in order. Whoever finds the dispatcher free drains the queue;
    /// a thread that finds it busy leaves its events to that dispatcher, which re-checks the
    /// queue after releasing it, so no event is stranded.
    pub(crate) fn dispatch(&self) {
        loop {
            let guard = match self.dispatching.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(_) => return,
            };
            loop {
                let Some(event) = lock(&self.pending).pop_front() else {
                    break;
                };
                let listeners = lock(&self.listeners).clone();
                for e in listeners.iter() {
                    let initial = matches!(event.kind, EventKind::Initial { .. });
                    if event.seq < e.from_seq || (initial && event.seq != e.from_seq) {
                        continue;
                    }
                    self.deliver(&*e.listener, &event);
                    if initial {
                        e.started.store(true, Ordering::Release);
                    }
                }
            }
            drop(guard);
            if lock(&self.pending).is_empty() {
                return;
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

    /// Delivers a per-call event on this thread.
    #[cold]
    pub(crate) fn call_event(&self, at: u64, breaker: &BreakerName, kind: EventKind) {
        self.deliver_now(at, breaker, kind, |e| e.calls);
    }

    #[inline]
    pub(crate) fn wants_outcome_events(&self) -> bool {
        self.outcome_listeners.load(Ordering::Relaxed) != 0
    }

    /// Delivers an [`EventKind::CallOutcome`] on this thread, to the listeners that want them.
    pub(crate) fn outcome_event(&self, at: u64, breaker: &BreakerName, kind: EventKind) {
        self.deliver_now(at, breaker, kind, |e| e.outcomes);
    }

    fn deliver_now(
        &self,
        at: u64,
        breaker: &BreakerName,
        kind: EventKind,
        wants: impl Fn(&Entry) -> bool,
    ) {
        let event = Event {
            seq: self.next_seq(),
            at: Duration::from_nanos(at),
            breaker: breaker.clone(),
            kind,
        };
        let listeners = lock(&self.listeners).clone();
        for e in listeners
            .iter()
            .filter(|e| wants(e) && event.seq > e.from_seq && e.started.load(Ordering::Acquire))
        {
            self.deliver(&*e.listener, &event);
        }
    }
}
