//! The last hour of every breaker, kept on the server in bounded memory.
//!
//! # What is kept
//! Time is cut into slots of 10 s of the dashboard's clock. For each breaker, a slot holds
//! the calls recorded, the failures, the slow calls and the rejections in it, every state the
//! breaker was in during it and the state it ended in, and, for a breaker whose window keeps
//! call durations (`call_durations`), the median and 99th percentile of its calls' durations.
//! A breaker's slots go after an hour (360 slots); a slot in which a Closed breaker saw no
//! call is not stored at all (it reads back as an idle Closed slot), so a quiet key costs no
//! slot. Beside the slots, an *incident* record follows every breaker that left Closed: when,
//! to which state, by which rule and with which window, how often it tripped again, and when
//! it closed again.
//!
//! # Where the figures come from
//! * Counts are differences of [`CircuitBreaker::metrics`](tripline::CircuitBreaker::metrics)
//!   between two samples: a sample reads every breaker once per slot (the
//!   [`Dashboard::run_history`](crate::Dashboard::run_history) task, or any request once a
//!   slot is due), so a breaker pays nothing per call for them. A sample that comes late
//!   (nobody ran the task and nobody asked) covers several slots: its figures are spread
//!   over them as a mean (`span`).
//! * States and incidents come from the transition events of the dashboard's listener, as
//!   they happen.
//! * Durations come from the core's outcome events ([`Listener::wants_outcome_events`]),
//!   asked for only on breakers that keep durations (they read the clock per call anyway); a
//!   result costs one atomic increment in a histogram of 104 logarithmic buckets (four per
//!   octave, 1 µs to 134 s: a percentile is the middle of its bucket, within 12 %). Breakers
//!   without `call_durations` get no such listener and pay nothing.
//!
//! # Bounds
//! Per breaker: at most [`SLOTS`] slots of [`SLOT_BYTES`] bytes (7,200 bytes), a fixed record
//! of about 200 bytes, and for a breaker that keeps durations a histogram pair of 832 bytes.
//! In all: at most `history_slots` slots (default 1,000,000: 20 MB; past it, the oldest slot
//! of all goes first), one record per breaker the dashboard shows, per dependency at most 360
//! percentile pairs (8 bytes each), and at most [`MAX_INCIDENTS`] incident records. Counts
//! are stored in 16 bits to three significant digits (exact below 2,048, else within 0.1 %).
//!
//! # Locks
//! One mutex guards the slots and incidents. Nothing runs under it but this module's own
//! code: no listener, no clock, no application callback (a sample reads the breakers, and
//! so the clock, before it takes the lock).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use tripline::registry::Key;
use tripline::{Event, EventKind, Listener, Metrics, Reason, State, WindowSnapshot};

use crate::store::Source;

/// One slot, in nanoseconds of the dashboard's clock.
pub(crate) const SLOT_NANOS: u64 = 10_000_000_000;
/// Slots kept per breaker: an hour.
pub(crate) const SLOTS: usize = 360;
/// Bytes one stored slot takes.
pub(crate) const SLOT_BYTES: usize = std::mem::size_of::<Slot>();
/// Slots a breaker's ring grows by (360 is a multiple).
const GROW: usize = 12;
/// Incident records kept at most.
pub(crate) const MAX_INCIDENTS: usize = 1_000;
/// Latency buckets: four per octave from 1 µs to 2^27 µs.
const BUCKETS: usize = 104;
/// Encoded "no value" (a percentile of a slot without timed calls).
const NONE: u16 = u16::MAX;

type BreakerId = (Source, Key);

/// Counters of a breaker since its creation, as the metrics give them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    calls: u64,
    failures: u64,
    slow: u64,
    rejected: u64,
}

impl Counts {
    pub(crate) fn of(m: &Metrics) -> Self {
        Self {
            calls: m.successful_calls + m.failed_calls + m.ignored_calls,
            failures: m.failed_calls,
            slow: m.slow_calls,
            rejected: m.rejected_calls,
        }
    }

    /// `self - earlier`; all of `self` when any counter went back (a new breaker).
    fn since(self, earlier: Counts) -> Counts {
        if self.calls < earlier.calls
            || self.failures < earlier.failures
            || self.slow < earlier.slow
            || self.rejected < earlier.rejected
        {
            return self;
        }
        Counts {
            calls: self.calls - earlier.calls,
            failures: self.failures - earlier.failures,
            slow: self.slow - earlier.slow,
            rejected: self.rejected - earlier.rejected,
        }
    }
}

/// A count in 16 bits: exact below 2,048, else to 11 significant bits.
pub(crate) fn encode(n: u64) -> u16 {
    if n < 2048 {
        return n as u16;
    }
    let e = 63 - n.leading_zeros() - 10;
    let m = (n >> e) - 1024;
    (2048 + (u64::from(e) - 1) * 1024 + m).min(u64::from(NONE - 1)) as u16
}

/// The middle of the range `code` stands for.
pub(crate) fn decode(code: u16) -> u64 {
    let code = u64::from(code);
    if code < 2048 {
        return code;
    }
    let e = (code - 2048) / 1024 + 1;
    let m = (code - 2048) % 1024 + 1024;
    (m << e) + (1 << (e - 1))
}

/// One slot of one breaker.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    /// The slot's number: the clock's reading divided by 10 s (fits 32 bits for any reading).
    index: u32,
    /// How many slots the figures cover (more than 1 when the sample came late).
    span: u8,
    /// A bit per state the breaker was in during the slot.
    states: u8,
    /// The state at its end.
    end: u8,
    calls: u16,
    failures: u16,
    slow: u16,
    rejected: u16,
    /// Median and 99th percentile of the calls' durations, microseconds, encoded.
    p50: u16,
    p99: u16,
}

fn bit(s: State) -> u8 {
    1 << (s as u8)
}

fn state_of(code: u8) -> State {
    State::ALL
        .into_iter()
        .find(|s| *s as u8 == code)
        .unwrap_or(State::Closed)
}

/// Most urgent first, as the listing sorts.
pub(crate) fn severity(s: State) -> u8 {
    match s {
        State::Open => 0,
        State::HalfOpen => 1,
        State::ForcedOpen => 2,
        State::MetricsOnly => 3,
        State::Disabled => 4,
        State::Closed => 5,
    }
}

/// The most urgent of the states in `bits`.
fn worst(bits: u8) -> State {
    State::ALL
        .into_iter()
        .filter(|s| bits & bit(*s) != 0)
        .min_by_key(|s| severity(*s))
        .unwrap_or(State::Closed)
}

// ---------------------------------------------------------------------------------------------
// Durations.

fn bucket(micros: u64) -> usize {
    let v = micros.min((1 << 27) - 1);
    if v < 4 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as u64;
    ((e - 1) * 4 + ((v >> (e - 2)) & 3)) as usize
}

/// The lowest duration (µs) of bucket `i`.
fn bucket_floor(i: usize) -> u64 {
    if i < 4 {
        return i as u64;
    }
    let (e, sub) = (i as u64 / 4 + 1, i as u64 % 4);
    (4 + sub) << (e - 2)
}

/// The middle of the bucket holding the `q` quantile of `h`, in µs.
fn quantile(h: &[u64; BUCKETS], q: f64) -> Option<u64> {
    let total: u64 = h.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut seen = 0;
    for (i, n) in h.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some((bucket_floor(i) + bucket_floor(i + 1)) / 2);
        }
    }
    None
}

/// The durations of one breaker's calls in the open slot (two histograms, by slot parity, so
/// that closing a slot does not race the calls of the next).
pub(crate) struct Latency {
    hists: [[AtomicU32; BUCKETS]; 2],
}

impl Latency {
    fn new() -> Self {
        Self {
            hists: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU32::new(0))),
        }
    }

    fn record(&self, slot: u64, micros: u64) {
        self.hists[(slot % 2) as usize][bucket(micros)].fetch_add(1, Ordering::Relaxed);
    }

    /// Moves the counts of slots `from..to` into `into`.
    fn take(&self, from: u64, to: u64, into: &mut [u64; BUCKETS]) {
        for parity in 0..2u64 {
            let covered = (from..to).any(|s| s % 2 == parity);
            if covered {
                for (i, b) in self.hists[parity as usize].iter().enumerate() {
                    into[i] += u64::from(b.swap(0, Ordering::Relaxed));
                }
            }
        }
    }
}

/// The listener that times a breaker's calls (on breakers that keep durations only).
pub(crate) struct Timing(pub(crate) Arc<Latency>);

impl Listener for Timing {
    fn on_event(&self, event: &Event) {
        if let EventKind::CallOutcome { duration, .. } = &event.kind {
            let at = u64::try_from(event.at.as_nanos()).unwrap_or(u64::MAX);
            let micros = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
            self.0.record(at / SLOT_NANOS, micros);
        }
    }

    fn wants_outcome_events(&self) -> bool {
        true
    }
}

// ---------------------------------------------------------------------------------------------
// Incidents.

/// One breaker's time out of Closed.
#[derive(Clone, Debug)]
pub(crate) struct Incident {
    pub(crate) seq: u64,
    pub(crate) breaker: BreakerId,
    /// Clock reading when it left Closed.
    pub(crate) started: u64,
    pub(crate) unix_ms: u64,
    /// The state it left Closed for.
    pub(crate) to: State,
    /// The rule that fired; `None` when it was already out of Closed when the dashboard began
    /// to follow it.
    pub(crate) reason: Option<Reason>,
    pub(crate) window: Option<WindowSnapshot>,
    /// Its state now (or when it closed).
    pub(crate) state: State,
    /// Transitions to Open during the incident.
    pub(crate) trips: u32,
    /// When it was Closed again.
    pub(crate) ended: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// The store.

struct Track {
    baseline: Counts,
    /// The breaker's state when the open slot began.
    start_state: State,
    /// States entered during the open slot.
    seen: u8,
    /// The first slot this breaker's figures cover.
    since: u32,
    slots: VecDeque<Slot>,
    latency: Option<Arc<Latency>>,
    /// The incident under way, by sequence number.
    incident: Option<u64>,
    /// Samples in a row that did not find the breaker (it goes at the second).
    missed: u8,
}

impl Track {
    fn new(state: State, since: u32) -> Self {
        Self {
            baseline: Counts::default(),
            start_state: state,
            seen: 0,
            since,
            slots: VecDeque::new(),
            latency: None,
            incident: None,
            missed: 0,
        }
    }
}

struct Inner {
    tracks: HashMap<BreakerId, Track>,
    /// The slot accumulating now; `None` before the first sample.
    open: Option<u64>,
    /// Slots held in all.
    held: usize,
    /// Each non-empty track's oldest slot: the first is the oldest of all.
    oldest: BTreeSet<(u32, BreakerId)>,
    incidents: VecDeque<Incident>,
    next_incident: u64,
    /// Per dependency: (the last slot a sample covered, p50, p99) of all its timed calls.
    dependency_latency: HashMap<String, VecDeque<(u32, u16, u16)>>,
}

/// The figures of one slot, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Figures {
    pub(crate) seconds: f64,
    pub(crate) calls: u64,
    pub(crate) failures: u64,
    pub(crate) slow: u64,
    pub(crate) rejected: u64,
    pub(crate) p50_us: Option<u64>,
    pub(crate) p99_us: Option<u64>,
}

impl Figures {
    fn of(s: &Slot) -> Self {
        let p = |c: u16| (c != NONE).then(|| decode(c));
        Self {
            seconds: f64::from(s.span) * (SLOT_NANOS / 1_000_000_000) as f64,
            calls: decode(s.calls),
            failures: decode(s.failures),
            slow: decode(s.slow),
            rejected: decode(s.rejected),
            p50_us: p(s.p50),
            p99_us: p(s.p99),
        }
    }

    fn idle() -> Self {
        Self {
            seconds: (SLOT_NANOS / 1_000_000_000) as f64,
            ..Self::default()
        }
    }

    pub(crate) fn add(&mut self, other: &Figures) {
        self.calls += other.calls;
        self.failures += other.failures;
        self.slow += other.slow;
        self.rejected += other.rejected;
    }
}

/// One slot of a breaker's hour as the API shows it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Point {
    /// Before the dashboard followed the breaker.
    NoData,
    /// The figures (for one slot of a span, the span's figures spread evenly).
    Slot {
        worst: State,
        end: State,
        figures: Figures,
    },
}

/// The bounded history (see the module docs).
pub(crate) struct History {
    inner: Mutex<Inner>,
    sampling: AtomicBool,
    max_slots: usize,
}

/// Clears the sampling flag when the sample ends, however it ends.
struct Sampling<'a>(&'a AtomicBool);

impl Drop for Sampling<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl History {
    pub(crate) fn new(max_slots: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                tracks: HashMap::new(),
                open: None,
                held: 0,
                oldest: BTreeSet::new(),
                incidents: VecDeque::new(),
                next_incident: 0,
                dependency_latency: HashMap::new(),
            }),
            sampling: AtomicBool::new(false),
            max_slots,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a sample at `now` would close a slot.
    pub(crate) fn due(&self, now: u64) -> bool {
        self.lock().open.is_none_or(|open| now / SLOT_NANOS > open)
    }

    /// Claims the right to sample; `None` while another sample runs (also one that called
    /// back into the dashboard from a breaker's clock).
    fn claim(&self) -> Option<Sampling<'_>> {
        self.sampling
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Sampling(&self.sampling))
    }

    /// Samples: `read` collects every breaker's counters and state (it runs with no lock of
    /// the history held: it reads the breakers, and so their clock). Returns whether a slot
    /// closed.
    pub(crate) fn sample(
        &self,
        now: impl FnOnce() -> u64,
        read: impl FnOnce() -> Vec<(BreakerId, Counts, State)>,
    ) -> bool {
        let Some(_claim) = self.claim() else {
            return false;
        };
        let now = now();
        if !self.due(now) {
            return false;
        }
        let seen = read();
        self.close(now / SLOT_NANOS, seen)
    }

    fn close(&self, current: u64, seen: Vec<(BreakerId, Counts, State)>) -> bool {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let Some(open) = inner.open else {
            // The first sample: every breaker's counters from here on.
            for (id, counts, state) in seen {
                let t = inner
                    .tracks
                    .entry(id)
                    .or_insert_with(|| Track::new(state, current as u32));
                t.baseline = counts;
                t.since = current as u32;
                t.start_state = state;
                t.seen = 0;
            }
            inner.open = Some(current);
            return false;
        };
        if current <= open {
            return false;
        }
        let span = (current - open).min(u64::from(u8::MAX)) as u8;
        let index = open as u32;
        for t in inner.tracks.values_mut() {
            t.missed = t.missed.saturating_add(1);
        }
        let mut by_dependency: HashMap<String, [u64; BUCKETS]> = HashMap::new();
        for (id, counts, state) in seen {
            let t = inner
                .tracks
                .entry(id.clone())
                .or_insert_with(|| Track::new(state, index));
            t.missed = 0;
            let delta = counts.since(t.baseline);
            t.baseline = counts;
            let mut hist = [0u64; BUCKETS];
            if let Some(l) = &t.latency {
                l.take(open, current, &mut hist);
            }
            let (p50, p99) = (quantile(&hist, 0.5), quantile(&hist, 0.99));
            if p50.is_some() {
                let dep = by_dependency
                    .entry(id.1.dependency().to_string())
                    .or_insert([0; BUCKETS]);
                for (a, b) in dep.iter_mut().zip(hist.iter()) {
                    *a += b;
                }
            }
            let slot = Slot {
                index,
                span,
                states: bit(t.start_state) | t.seen,
                end: state as u8,
                calls: encode(delta.calls),
                failures: encode(delta.failures),
                slow: encode(delta.slow),
                rejected: encode(delta.rejected),
                p50: p50.map_or(NONE, encode),
                p99: p99.map_or(NONE, encode),
            };
            t.start_state = state;
            t.seen = 0;
            let idle = delta.calls == 0
                && delta.rejected == 0
                && slot.states == bit(State::Closed)
                && state == State::Closed;
            if !idle {
                if t.slots.len() == t.slots.capacity() {
                    // Grow by two minutes at a time, never past an hour of slots: at most
                    // GROW - 1 slots of slack per breaker.
                    let more = GROW.min(SLOTS - t.slots.len()).max(1);
                    t.slots.reserve_exact(more);
                }
                if t.slots.is_empty() {
                    inner.oldest.insert((index, id.clone()));
                }
                t.slots.push_back(slot);
                inner.held += 1;
            }
            // An hour at most per breaker.
            while t
                .slots
                .front()
                .is_some_and(|s| u64::from(s.index) + SLOTS as u64 <= current)
            {
                pop_front(&mut inner.oldest, &mut inner.held, &id, t);
            }
            if t.slots.is_empty() {
                t.slots.shrink_to_fit();
            }
        }
        // A breaker two samples in a row did not find is gone (evicted, or rebuilt and
        // found under its new record): its slots go with it.
        let gone: Vec<BreakerId> = inner
            .tracks
            .iter()
            .filter(|(_, t)| t.missed >= 2)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some(mut t) = inner.tracks.remove(&id) {
                while !t.slots.is_empty() {
                    pop_front(&mut inner.oldest, &mut inner.held, &id, &mut t);
                }
            }
        }
        // At most `max_slots` in all: the oldest of all goes first.
        while inner.held > self.max_slots {
            let Some((_, id)) = inner.oldest.first().cloned() else {
                break;
            };
            let Some(t) = inner.tracks.get_mut(&id) else {
                inner.oldest.pop_first();
                continue;
            };
            pop_front(&mut inner.oldest, &mut inner.held, &id, t);
        }
        for (dep, hist) in by_dependency {
            let ring = inner.dependency_latency.entry(dep).or_default();
            // Filed under the last slot the sample covers.
            ring.push_back((
                (current - 1) as u32,
                quantile(&hist, 0.5).map_or(NONE, encode),
                quantile(&hist, 0.99).map_or(NONE, encode),
            ));
        }
        inner.dependency_latency.retain(|_, ring| {
            while ring
                .front()
                .is_some_and(|(i, _, _)| u64::from(*i) + SLOTS as u64 <= current)
            {
                ring.pop_front();
            }
            !ring.is_empty()
        });
        prune_incidents(inner, current.saturating_mul(SLOT_NANOS));
        inner.open = Some(current);
        true
    }

    /// Follows a breaker's events: states for the slots, incidents.
    pub(crate) fn on_event(&self, id: BreakerId, event: &Event) {
        let at = u64::try_from(event.at.as_nanos()).unwrap_or(u64::MAX);
        let mut guard = self.lock();
        let inner = &mut *guard;
        let since = inner.open.unwrap_or(at / SLOT_NANOS) as u32;
        match &event.kind {
            EventKind::Initial { state, .. } => {
                let t = inner
                    .tracks
                    .entry(id.clone())
                    .or_insert_with(|| Track::new(*state, since));
                // A new breaker (or one rebuilt under the key): its counters start at 0.
                t.baseline = Counts::default();
                t.seen |= bit(*state);
                if *state != State::Closed && t.incident.is_none() {
                    let seq = open_incident(inner, &id, at, *state, None, None);
                    if let Some(t) = inner.tracks.get_mut(&id) {
                        t.incident = Some(seq);
                    }
                }
            }
            EventKind::Transition {
                from,
                to,
                reason,
                window,
                ..
            } => {
                let t = inner
                    .tracks
                    .entry(id.clone())
                    .or_insert_with(|| Track::new(*from, since));
                t.seen |= bit(*to);
                let current = t.incident;
                let found = current.and_then(|seq| incident_mut(&mut inner.incidents, seq));
                match found {
                    Some(i) => {
                        i.state = *to;
                        if *to == State::Open {
                            i.trips += 1;
                        }
                        if *to == State::Closed {
                            i.ended = Some(at);
                            if let Some(t) = inner.tracks.get_mut(&id) {
                                t.incident = None;
                            }
                        }
                    }
                    None if *to != State::Closed => {
                        let r = (*from == State::Closed).then_some(*reason);
                        let w = (*from == State::Closed).then_some(*window);
                        let seq = open_incident(inner, &id, at, *to, r, w);
                        if let Some(t) = inner.tracks.get_mut(&id) {
                            t.incident = Some(seq);
                        }
                    }
                    None => {
                        if let Some(t) = inner.tracks.get_mut(&id) {
                            t.incident = None;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// Gives a breaker that keeps durations its histogram; the listener to subscribe to it.
    pub(crate) fn timing(&self, id: BreakerId, state: State) -> Timing {
        let latency = Arc::new(Latency::new());
        let mut inner = self.lock();
        let since = inner.open.unwrap_or(0) as u32;
        inner
            .tracks
            .entry(id)
            .or_insert_with(|| Track::new(state, since))
            .latency = Some(latency.clone());
        Timing(latency)
    }

    /// The breaker's hour, oldest slot first, as of the last sample: [`SLOTS`] points.
    pub(crate) fn series(&self, id: &BreakerId) -> Option<(u64, Vec<Point>)> {
        let inner = self.lock();
        let open = inner.open?;
        let t = inner.tracks.get(id)?;
        let mut points = vec![Point::NoData; SLOTS];
        let mut stored = t.slots.iter().peekable();
        for (n, point) in points.iter_mut().enumerate() {
            // Point `n` is slot `open - SLOTS + n`; the last is the newest closed slot.
            let Some(index) = (open + n as u64).checked_sub(SLOTS as u64) else {
                continue;
            };
            if index < u64::from(t.since) {
                continue;
            }
            while stored
                .peek()
                .is_some_and(|s| u64::from(s.index) + u64::from(s.span) <= index)
            {
                stored.next();
            }
            *point = match stored.peek() {
                Some(s) if u64::from(s.index) <= index => {
                    let mut f = Figures::of(s);
                    // A late sample's figures, spread over the slots it covers.
                    let k = u64::from(s.span.max(1));
                    f.seconds /= k as f64;
                    for c in [&mut f.calls, &mut f.failures, &mut f.slow, &mut f.rejected] {
                        *c = c.div_ceil(k);
                    }
                    Point::Slot {
                        worst: worst(s.states),
                        end: state_of(s.end),
                        figures: f,
                    }
                }
                _ => Point::Slot {
                    worst: State::Closed,
                    end: State::Closed,
                    figures: Figures::idle(),
                },
            };
        }
        Some((open, points))
    }

    /// The figures of the last closed slot of each breaker (idle where none is stored), and
    /// the dependencies' percentiles of that slot.
    pub(crate) fn latest(&self) -> (HashMap<BreakerId, Figures>, HashMap<String, Figures>) {
        let inner = self.lock();
        let mut per = HashMap::new();
        let mut deps: HashMap<String, Figures> = HashMap::new();
        let Some(open) = inner.open else {
            return (per, deps);
        };
        let last = open.saturating_sub(1);
        for (id, t) in &inner.tracks {
            if u64::from(t.since) > last {
                continue;
            }
            let f = t
                .slots
                .back()
                .filter(|s| u64::from(s.index) + u64::from(s.span) > last)
                .map_or_else(Figures::idle, Figures::of);
            deps.entry(id.1.dependency().to_string())
                .or_insert_with(|| Figures {
                    seconds: f.seconds,
                    ..Figures::default()
                })
                .add(&f);
            per.insert(id.clone(), f);
        }
        for (dep, ring) in &inner.dependency_latency {
            if let (Some(f), Some((i, p50, p99))) = (deps.get_mut(dep), ring.back()) {
                if u64::from(*i) == last {
                    f.p50_us = (*p50 != NONE).then(|| decode(*p50));
                    f.p99_us = (*p99 != NONE).then(|| decode(*p99));
                }
            }
        }
        (per, deps)
    }

    /// The failure and slow-call rates (percent) of a breaker's last `n` slots, oldest first;
    /// `None` for a slot before the dashboard followed it.
    pub(crate) fn recent_rates(&self, id: &BreakerId, n: usize) -> Vec<Option<(f64, f64)>> {
        let Some((_, points)) = self.series(id) else {
            return Vec::new();
        };
        points[SLOTS.saturating_sub(n)..]
            .iter()
            .map(|p| match p {
                Point::NoData => None,
                Point::Slot { figures: f, .. } => Some((
                    rate(f.failures, f.calls).unwrap_or(0.0),
                    rate(f.slow, f.calls).unwrap_or(0.0),
                )),
            })
            .collect()
    }

    /// The incidents under way and those that began within the hour before `now`, in the
    /// order they began.
    pub(crate) fn incidents(&self, now: u64) -> Vec<Incident> {
        let inner = self.lock();
        let hour = SLOTS as u64 * SLOT_NANOS;
        inner
            .incidents
            .iter()
            .filter(|i| i.ended.is_none() || now.saturating_sub(i.started) <= hour)
            .cloned()
            .collect()
    }

    /// Bytes held: the slots, the records, the histograms, the indexes and the incidents
    /// (allocations' contents; an allocator's own bookkeeping comes on top).
    pub(crate) fn memory_bytes(&self) -> usize {
        let inner = self.lock();
        // A record in a hash map that keeps at most 7 of 8 buckets full, and a few bytes of
        // control per bucket.
        let record = (std::mem::size_of::<(BreakerId, Track)>() + 1) * 8 / 7;
        let index = std::mem::size_of::<(u32, BreakerId)>() * 2;
        let tracks: usize = inner
            .tracks
            .values()
            .map(|t| {
                record
                    + t.slots.capacity() * SLOT_BYTES
                    + t.latency
                        .as_ref()
                        .map_or(0, |_| std::mem::size_of::<Latency>() + 16)
            })
            .sum();
        let deps: usize = inner
            .dependency_latency
            .iter()
            .map(|(d, r)| d.len() + 64 + r.capacity() * 8)
            .sum();
        tracks
            + inner.oldest.len() * index
            + inner.incidents.capacity() * std::mem::size_of::<Incident>()
            + deps
    }

    /// Slots held in all.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().held
    }
}

fn pop_front(
    oldest: &mut BTreeSet<(u32, BreakerId)>,
    held: &mut usize,
    id: &BreakerId,
    t: &mut Track,
) {
    let Some(old) = t.slots.pop_front() else {
        return;
    };
    oldest.remove(&(old.index, id.clone()));
    *held -= 1;
    if let Some(next) = t.slots.front() {
        oldest.insert((next.index, id.clone()));
    }
}

fn incident_mut(incidents: &mut VecDeque<Incident>, seq: u64) -> Option<&mut Incident> {
    let i = incidents.binary_search_by_key(&seq, |i| i.seq).ok()?;
    incidents.get_mut(i)
}

fn open_incident(
    inner: &mut Inner,
    id: &BreakerId,
    at: u64,
    to: State,
    reason: Option<Reason>,
    window: Option<WindowSnapshot>,
) -> u64 {
    let seq = inner.next_incident;
    inner.next_incident += 1;
    let unix_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    inner.incidents.push_back(Incident {
        seq,
        breaker: id.clone(),
        started: at,
        unix_ms,
        to,
        reason,
        window,
        state: to,
        trips: u32::from(to == State::Open),
        ended: None,
    });
    if inner.incidents.len() > MAX_INCIDENTS {
        // The oldest that ended goes first; else the oldest.
        let victim = inner
            .incidents
            .iter()
            .position(|i| i.ended.is_some())
            .unwrap_or(0);
        if let Some(gone) = inner.incidents.remove(victim) {
            if let Some(t) = inner.tracks.get_mut(&gone.breaker) {
                if t.incident == Some(gone.seq) {
                    t.incident = None;
                }
            }
        }
    }
    seq
}

/// Drops the incidents that ended more than an hour before `now`.
fn prune_incidents(inner: &mut Inner, now: u64) {
    let hour = SLOTS as u64 * SLOT_NANOS;
    inner
        .incidents
        .retain(|i| i.ended.is_none_or(|end| now.saturating_sub(end) <= hour));
}

/// `part` of `whole` in percent, `None` for an empty whole.
pub(crate) fn rate(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| (part as f64 * 10_000.0 / whole as f64).round() / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_round_trip_to_a_tenth_of_a_percent() {
        for n in (0..5000u64).chain([65_535, 1 << 20, 123_456_789, u64::MAX / 3]) {
            let back = decode(encode(n));
            if n < 2048 {
                assert_eq!(back, n);
            } else {
                let err = (back as f64 - n as f64).abs() / n as f64;
                assert!(err <= 0.001, "{n} read back as {back}");
            }
        }
        assert!(encode(u64::MAX) < NONE);
    }

    #[test]
    fn buckets_cover_every_duration_in_order() {
        let mut last = 0;
        for us in 0..(1u64 << 20) {
            let b = bucket(us);
            assert!(b >= last && b < BUCKETS);
            assert!(
                bucket_floor(b) <= us && us < bucket_floor(b + 1),
                "{us} in {b}"
            );
            last = b;
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_are_within_the_bucket_width() {
        let mut h = [0u64; BUCKETS];
        for us in 1..=1000u64 {
            h[bucket(us * 100)] += 1;
        }
        let p50 = quantile(&h, 0.5).unwrap() as f64;
        let p99 = quantile(&h, 0.99).unwrap() as f64;
        assert!((p50 / 50_000.0 - 1.0).abs() < 0.12, "{p50}");
        assert!((p99 / 99_000.0 - 1.0).abs() < 0.12, "{p99}");
        assert_eq!(quantile(&[0; BUCKETS], 0.5), None);
    }

    #[test]
    fn a_slot_is_twenty_bytes() {
        assert_eq!(SLOT_BYTES, 20);
    }

    fn id(k: &str) -> BreakerId {
        (Source::Registry, k.parse().unwrap())
    }

    fn busy(n: u64) -> Counts {
        Counts {
            calls: n,
            failures: n / 2,
            slow: 0,
            rejected: 0,
        }
    }

    #[test]
    fn an_hour_per_breaker_and_the_total_bound() {
        let h = History::new(500);
        let keys: Vec<BreakerId> = (0..3).map(|i| id(&format!("k{i}"))).collect();
        for slot in 0..1000u64 {
            let seen = keys
                .iter()
                .map(|k| (k.clone(), busy(slot * 10), State::Closed))
                .collect();
            h.close(slot, seen);
            let inner = h.lock();
            assert!(inner.held <= 500);
            assert_eq!(
                inner.held,
                inner.tracks.values().map(|t| t.slots.len()).sum::<usize>()
            );
            for t in inner.tracks.values() {
                assert!(t.slots.len() <= SLOTS && t.slots.capacity() <= SLOTS);
            }
            if slot > 0 {
                assert_eq!(inner.oldest.len(), 3);
            }
        }
        assert_eq!(h.held(), 500);
    }

    #[test]
    fn idle_closed_slots_are_not_stored() {
        let h = History::new(1000);
        for slot in 0..100u64 {
            h.close(slot, vec![(id("quiet"), busy(0), State::Closed)]);
        }
        assert_eq!(h.held(), 0);
        let (_, points) = h.series(&id("quiet")).unwrap();
        assert!(matches!(points[SLOTS - 1], Point::Slot { figures, .. } if figures.calls == 0));
        assert!(matches!(points[0], Point::NoData));
    }

    #[test]
    fn a_late_sample_spreads_its_figures() {
        let h = History::new(1000);
        h.close(10, vec![(id("a"), busy(0), State::Closed)]);
        h.close(13, vec![(id("a"), busy(300), State::Closed)]);
        let (open, points) = h.series(&id("a")).unwrap();
        assert_eq!(open, 13);
        for p in &points[SLOTS - 3..] {
            let Point::Slot { figures, .. } = p else {
                panic!("{p:?}")
            };
            assert_eq!((figures.calls, figures.seconds), (100, 10.0));
        }
    }
}
