//! Recent events, kept per breaker and bounded.
//!
//! A listener on the registry (and on each breaker registered by hand) turns transitions,
//! would-trip reports and reconfigurations into records; the dashboard adds one for each
//! operator action. Records are kept per key, at most `per_key` for one key and `total` in
//! all (the oldest record of all goes first), and the records of a key the registry no longer
//! holds are dropped by the next sweep. Operator actions are also kept in a ring of their own
//! (at most [`AUDIT_RING`]), so a dependency-wide action shows in the detail of every key of
//! the dependency without being copied into each.
//!
//! Every record is also broadcast to the event streams; a stream that falls behind by more
//! than the channel holds is told so (`lagged`) and the page refetches.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::broadcast;
use tripline::registry::{Key, OperatorState, Registry};
use tripline::{Clock, Event, EventKind, Listener, Reason, State, WindowSnapshot};

use crate::history::History;

/// Operator actions kept in the audit ring.
pub(crate) const AUDIT_RING: usize = 256;
/// Records a stream may fall behind by before it is told it lagged.
const STREAM_BACKLOG: usize = 1024;

/// Where a breaker comes from.
///
/// ```
/// use tripline_dashboard::Source;
/// assert_eq!(Source::Registry.as_str(), "registry");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// A key of the dashboard's [`Registry`](tripline::registry::Registry).
    Registry,
    /// A breaker registered by hand with [`DashboardBuilder::breaker`](crate::DashboardBuilder::breaker).
    Manual,
}

impl Source {
    /// `registry` or `manual`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Registry => "registry",
            Source::Manual => "manual",
        }
    }
}

/// An operator action.
///
/// ```
/// use tripline_dashboard::Action;
/// assert_eq!("force-open".parse::<Action>(), Ok(Action::ForceOpen));
/// assert_eq!(Action::MetricsOnly.as_str(), "metrics-only");
/// assert!("open".parse::<Action>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// Kill switch: reject every call until the override is cleared.
    ForceOpen,
    /// Permit every call and record nothing.
    Disable,
    /// Shadow mode: record and report would-trip, never trip.
    MetricsOnly,
    /// Back to Closed with a fresh window (refused while an override is in force).
    Reset,
    /// Remove the run-time override: the configuration's, or the rules, decide again.
    Clear,
    /// Let the rules decide: a run-time override to Auto, which holds over an override from
    /// the registry's configuration (`[operator]`) until cleared.
    Auto,
}

impl Action {
    /// Every action, in the order the page shows them.
    pub const ALL: [Action; 6] = [
        Action::ForceOpen,
        Action::Disable,
        Action::MetricsOnly,
        Action::Reset,
        Action::Clear,
        Action::Auto,
    ];

    /// The name used in the API (`force-open`).
    pub fn as_str(self) -> &'static str {
        match self {
            Action::ForceOpen => "force-open",
            Action::Disable => "disable",
            Action::MetricsOnly => "metrics-only",
            Action::Reset => "reset",
            Action::Clear => "clear",
            Action::Auto => "auto",
        }
    }

    /// The operator state the action sets, for the three that set one.
    pub(crate) fn operator_state(self) -> Option<OperatorState> {
        match self {
            Action::ForceOpen => Some(OperatorState::ForcedOpen),
            Action::Disable => Some(OperatorState::Disabled),
            Action::MetricsOnly => Some(OperatorState::MetricsOnly),
            Action::Auto => Some(OperatorState::Auto),
            Action::Reset | Action::Clear => None,
        }
    }
}

impl std::str::FromStr for Action {
    type Err = tripline::ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Action::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                tripline::ConfigError::new(
                    "action",
                    format!("{s:?}"),
                    "one of force-open, disable, metrics-only, reset, clear, auto",
                )
            })
    }
}

/// What an operator action was aimed at.
///
/// ```
/// use tripline_dashboard::Target;
/// let t = Target::Key("payments/tenant=acme".parse()?);
/// assert_eq!(t.dependency(), "payments");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Target {
    /// One key (the registry's breaker and the hand-registered one, where both exist).
    Key(Key),
    /// Every key of a dependency, now and later.
    Dependency(String),
}

impl Target {
    /// The dependency the target belongs to.
    pub fn dependency(&self) -> &str {
        match self {
            Target::Key(k) => k.dependency(),
            Target::Dependency(d) => d,
        }
    }
}

/// One operator action, as audit events and [`DashboardBuilder::on_audit`] see it (an
/// example is there).
///
/// [`DashboardBuilder::on_audit`]: crate::DashboardBuilder::on_audit
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct AuditRecord {
    /// The principal the authentication check returned.
    pub principal: String,
    /// What they did.
    pub action: Action,
    /// To what.
    pub target: Target,
    /// How many breakers changed state.
    pub changed: usize,
    /// The override in force for the target afterwards.
    pub in_force: OperatorState,
    /// For an action aimed by id (the page's buttons), the one breaker it reached: a
    /// hand-registered breaker and a registry's under the same key are two rows, and an id
    /// names one of them. `None` for an action aimed by key (both) or by dependency.
    pub source: Option<Source>,
    /// Reading of the dashboard's clock when it happened.
    pub at: Duration,
}

/// What a record says.
#[derive(Clone, Debug)]
pub(crate) enum Kind {
    Transition {
        from: State,
        to: State,
        generation: u64,
        reason: Reason,
        window: WindowSnapshot,
        open_for: Option<Duration>,
    },
    WouldTrip {
        reason: Reason,
        window: WindowSnapshot,
    },
    Reconfigured {
        generation: u64,
    },
    Audit(AuditRecord),
}

/// One thing that happened, to one breaker or (for a dependency-wide action) to a dependency.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    /// The dashboard's sequence number (no gaps, in the order records were made).
    pub(crate) seq: u64,
    /// The breaker; `None` for a dependency-wide action.
    pub(crate) breaker: Option<(Source, Key)>,
    /// Clock reading (breaker's clock, or the dashboard's for actions).
    pub(crate) at: u64,
    /// Wall-clock time it was recorded, for people reading it.
    pub(crate) unix_ms: u64,
    pub(crate) kind: Kind,
}

impl Record {
    pub(crate) fn is_transition(&self) -> bool {
        matches!(self.kind, Kind::Transition { .. })
    }
}

type Slot = (Source, Key);

struct Inner {
    by_key: HashMap<Slot, VecDeque<Arc<Record>>>,
    /// Each non-empty queue's oldest record: the first element is the oldest of all.
    oldest: BTreeSet<(u64, Slot)>,
    len: usize,
    audits: VecDeque<Arc<Record>>,
}

/// The bounded store of recent records.
pub(crate) struct Store {
    inner: Mutex<Inner>,
    per_key: usize,
    total: usize,
    seq: AtomicU64,
    tx: broadcast::Sender<Arc<Record>>,
    /// Records stored but not yet sent to the streams, in order.
    outbox: Mutex<VecDeque<Arc<Record>>>,
    /// Held by whoever sends the outbox; never waited for (see [`Store::flush`]).
    sending: Mutex<()>,
}

impl Store {
    pub(crate) fn new(per_key: usize, total: usize) -> Self {
        let (tx, _) = broadcast::channel(STREAM_BACKLOG);
        Self {
            inner: Mutex::new(Inner {
                by_key: HashMap::new(),
                oldest: BTreeSet::new(),
                len: 0,
                audits: VecDeque::new(),
            }),
            per_key,
            total,
            seq: AtomicU64::new(0),
            tx,
            outbox: Mutex::new(VecDeque::new()),
            sending: Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<Record>> {
        self.tx.subscribe()
    }

    /// Turns a breaker's event into a record; per-call and initial events are not kept.
    pub(crate) fn on_event(&self, source: Source, key: Key, e: &Event) {
        let kind = match &e.kind {
            EventKind::Transition {
                from,
                to,
                generation,
                reason,
                window,
                open_for,
            } => Kind::Transition {
                from: *from,
                to: *to,
                generation: *generation,
                reason: *reason,
                window: *window,
                open_for: *open_for,
            },
            EventKind::WouldTrip { reason, window } => Kind::WouldTrip {
                reason: *reason,
                window: *window,
            },
            EventKind::Reconfigured { generation } => Kind::Reconfigured {
                generation: *generation,
            },
            _ => return,
        };
        let at = u64::try_from(e.at.as_nanos()).unwrap_or(u64::MAX);
        self.push(Some((source, key)), at, kind, false);
    }

    /// Records an operator action against each of `slots` (none for a dependency-wide one,
    /// which lives in the audit ring only).
    pub(crate) fn audit(&self, slots: &[Slot], record: AuditRecord) {
        let at = u64::try_from(record.at.as_nanos()).unwrap_or(u64::MAX);
        if slots.is_empty() {
            self.push(None, at, Kind::Audit(record), true);
        } else {
            // One action, however many breakers hold the key: the ring keeps it once.
            for (i, slot) in slots.iter().enumerate() {
                self.push(Some(slot.clone()), at, Kind::Audit(record.clone()), i == 0);
            }
        }
    }

    fn push(&self, breaker: Option<Slot>, at: u64, kind: Kind, ring: bool) {
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut inner = self.lock();
        // Numbered under the lock, so numbers follow the order records are stored and sent.
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let record = Arc::new(Record {
            seq,
            breaker: breaker.clone(),
            at,
            unix_ms,
            kind,
        });
        if ring {
            inner.audits.push_back(record.clone());
            if inner.audits.len() > AUDIT_RING {
                inner.audits.pop_front();
            }
        }
        if let Some(slot) = breaker {
            let inner = &mut *inner;
            let queue = inner.by_key.entry(slot.clone()).or_default();
            if queue.is_empty() {
                inner.oldest.insert((seq, slot.clone()));
            }
            queue.push_back(record.clone());
            inner.len += 1;
            if queue.len() > self.per_key {
                pop_oldest(inner, &slot);
            }
            while inner.len > self.total {
                let Some((_, slot)) = inner.oldest.first().cloned() else {
                    break;
                };
                pop_oldest(inner, &slot);
            }
        }
        // Queued under the lock, so the streams get records in the order they were stored;
        // sent after it, so no stream's waker runs under it.
        self.outbox
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(record);
        drop(inner);
        self.flush();
    }

    /// Sends the outbox to the streams. Whoever finds the sender free sends everything queued;
    /// a thread that finds it busy (another sender, or a waker that called back into the
    /// dashboard from inside a send) leaves its records to that sender, which looks again
    /// after letting go, so none is stranded and nobody waits.
    fn flush(&self) {
        loop {
            let guard = match self.sending.try_lock() {
                Ok(g) => g,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return,
            };
            loop {
                let next = self
                    .outbox
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .pop_front();
                let Some(record) = next else { break };
                let _ = self.tx.send(record);
            }
            drop(guard);
            if self
                .outbox
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
            {
                return;
            }
        }
    }

    /// The records of one breaker, oldest first.
    pub(crate) fn recent(&self, slot: &Slot) -> Vec<Arc<Record>> {
        self.lock()
            .by_key
            .get(slot)
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The newest transition of one breaker.
    pub(crate) fn last_transition(&self, slot: &Slot) -> Option<Arc<Record>> {
        self.lock()
            .by_key
            .get(slot)
            .and_then(|q| q.iter().rev().find(|r| r.is_transition()).cloned())
    }

    /// The operator actions kept, oldest first.
    pub(crate) fn audits(&self) -> Vec<Arc<Record>> {
        self.lock().audits.iter().cloned().collect()
    }

    /// The registry keys that have records.
    pub(crate) fn registry_keys(&self) -> Vec<Key> {
        self.lock()
            .by_key
            .keys()
            .filter(|(s, _)| *s == Source::Registry)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// Drops every record of `slot`; how many went.
    pub(crate) fn forget(&self, slot: &Slot) -> usize {
        let mut inner = self.lock();
        let Some(queue) = inner.by_key.remove(slot) else {
            return 0;
        };
        if let Some(front) = queue.front() {
            inner.oldest.remove(&(front.seq, slot.clone()));
        }
        inner.len -= queue.len();
        queue.len()
    }

    /// Records kept per key (audit ring aside).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len
    }
}

/// Removes the oldest record of `slot`'s queue, keeping the index and the count right.
fn pop_oldest(inner: &mut Inner, slot: &Slot) {
    let Some(queue) = inner.by_key.get_mut(slot) else {
        return;
    };
    let Some(old) = queue.pop_front() else {
        return;
    };
    inner.oldest.remove(&(old.seq, slot.clone()));
    inner.len -= 1;
    match queue.front() {
        Some(next) => {
            inner.oldest.insert((next.seq, slot.clone()));
        }
        None => {
            inner.by_key.remove(slot);
        }
    }
}

/// The listener the dashboard puts on its registry: breaker names are keys. It keeps the
/// recent events and the history, and gives each new breaker that keeps call durations the
/// listener that times its calls (only those: the others pay nothing per call).
pub(crate) struct RegistryListener<C: Clock + Clone> {
    pub(crate) store: Arc<Store>,
    pub(crate) history: Arc<History>,
    /// Weak: the registry holds this listener.
    pub(crate) registry: Weak<Registry<C>>,
}

impl<C: Clock + Clone> Listener for RegistryListener<C> {
    fn on_event(&self, event: &Event) {
        let Ok(key) = event.breaker.parse::<Key>() else {
            return;
        };
        self.history
            .on_event((Source::Registry, key.clone()), event);
        if let EventKind::Initial { state, .. } = event.kind {
            // A breaker's first event for this listener: a new breaker (or one rebuilt under
            // its key). `peek` takes no lock and creates nothing; the handle goes at once, so
            // it never keeps the breaker from eviction.
            if let Some(breaker) = self.registry.upgrade().and_then(|r| r.peek(&key)) {
                if breaker.config().call_durations() {
                    breaker.subscribe(self.history.timing((Source::Registry, key.clone()), state));
                }
            }
        }
        self.store.on_event(Source::Registry, key, event);
    }
}

/// The listener on a breaker registered by hand, under the key it was registered with.
pub(crate) struct ManualListener {
    pub(crate) store: Arc<Store>,
    pub(crate) history: Arc<History>,
    pub(crate) key: Key,
}

impl Listener for ManualListener {
    fn on_event(&self, event: &Event) {
        self.history
            .on_event((Source::Manual, self.key.clone()), event);
        self.store.on_event(Source::Manual, self.key.clone(), event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tripline::{BreakerConfig, CircuitBreaker, ManualClock};

    fn key(s: &str) -> Key {
        s.parse().unwrap()
    }

    fn flip(store: &Arc<Store>, k: &str, times: usize) {
        let b =
            CircuitBreaker::with_clock(k.to_string(), BreakerConfig::default(), ManualClock::new());
        let (s, kk) = (store.clone(), key(k));
        b.subscribe(move |e: &Event| s.on_event(Source::Registry, kk.clone(), e));
        for _ in 0..times {
            b.force_open();
            b.reset();
        }
    }

    #[test]
    fn per_key_bound_keeps_the_newest() {
        let store = Arc::new(Store::new(3, 100));
        flip(&store, "a", 5); // 10 transitions
        let kept = store.recent(&(Source::Registry, key("a")));
        assert_eq!(kept.len(), 3);
        let seqs: Vec<u64> = kept.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, vec![7, 8, 9]);
        assert_eq!(store.len(), 3);
    }

    #[test]
    fn total_bound_drops_the_oldest_of_all() {
        let store = Arc::new(Store::new(10, 12));
        flip(&store, "a", 3); // 6 records, seq 0..6
        flip(&store, "b", 3); // 6 more, seq 6..12
        assert_eq!(store.len(), 12);
        flip(&store, "c", 2); // 4 more: the 4 oldest (a's) go
        assert_eq!(store.len(), 12);
        assert_eq!(store.recent(&(Source::Registry, key("a"))).len(), 2);
        assert_eq!(store.recent(&(Source::Registry, key("b"))).len(), 6);
        assert_eq!(store.recent(&(Source::Registry, key("c"))).len(), 4);
        flip(&store, "d", 5); // 10 more: a's and b's and two of c's go
        assert_eq!(store.len(), 12);
        assert!(store.recent(&(Source::Registry, key("a"))).is_empty());
        assert!(store.recent(&(Source::Registry, key("b"))).is_empty());
        assert_eq!(store.recent(&(Source::Registry, key("c"))).len(), 2);
        assert_eq!(store.recent(&(Source::Registry, key("d"))).len(), 10);
        // The index holds exactly the non-empty queues.
        let inner = store.lock();
        assert_eq!(inner.oldest.len(), inner.by_key.len());
    }

    #[test]
    fn forget_keeps_the_count_and_index_right() {
        let store = Arc::new(Store::new(10, 100));
        flip(&store, "a", 2);
        flip(&store, "b", 1);
        assert_eq!(store.forget(&(Source::Registry, key("a"))), 4);
        assert_eq!(store.len(), 2);
        assert_eq!(store.registry_keys(), vec![key("b")]);
        let inner = store.lock();
        assert_eq!(inner.oldest.len(), 1);
    }

    #[test]
    fn audit_ring_is_bounded_and_counts_one_action_once() {
        let store = Store::new(10, 100);
        let record = |n: usize| AuditRecord {
            principal: "op".into(),
            action: Action::Reset,
            target: Target::Key(key("a")),
            changed: n,
            in_force: OperatorState::Auto,
            source: None,
            at: Duration::ZERO,
        };
        let both = [(Source::Registry, key("a")), (Source::Manual, key("a"))];
        store.audit(&both, record(0));
        assert_eq!(store.audits().len(), 1);
        assert_eq!(store.len(), 2);
        for n in 1..=AUDIT_RING + 10 {
            store.audit(&[], record(n));
        }
        assert_eq!(store.audits().len(), AUDIT_RING);
    }
}
