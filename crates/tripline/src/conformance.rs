//! The breaker's rules as data: conformance vectors and their runner.
//!
//! A vector is a configuration and a list of steps (acquire, record, abandon, advance the clock,
//! operator actions) with the decision or state expected after each. Every store that hosts the
//! rules (the in-process breaker here, the Redis store elsewhere) implements [`Subject`] and
//! runs the same vectors, so the hosts cannot drift apart. The built-in vectors live in
//! `crates/tripline/conformance/*.toml` and are returned by [`builtin`].
//!
//! ```
//! use tripline::conformance::{self, LocalSubject};
//!
//! for vector in conformance::builtin() {
//!     let subject = LocalSubject::new(&vector);
//!     conformance::run(&vector, &subject).unwrap();
//! }
//! ```
//!
//! # Format
//! ```toml
//! name = "trip-on-failure-rate"
//! description = "..."
//! [config]                       # a BreakerConfig; jitter must be 0 for a vector
//! window = { kind = "count", size = 10 }
//! minimum_calls = 5
//! [[step]]
//! op = "acquire"                 # expect: "permit" | "probe" | "reject"
//! id = "a"                       # names the permit for a later record/abandon
//! expect = "permit"
//! [[step]]
//! op = "record"                  # outcome: success | failure | ignored
//! id = "a"                       # expect: counted | ignored | stale | disabled
//! outcome = "failure"
//! expect = "counted"
//! [[step]]
//! op = "advance"
//! by = "10s"
//! [[step]]
//! op = "expect"                  # state, and optionally window counts
//! state = "open"
//! [[step]]
//! op = "transitions"             # transitions since the last such step, in order
//! expect = ["closed->open"]
//! [[step]]
//! op = "record-classified"       # a failure of a kind (failure_kinds weights, lumping)
//! id = "b"                       # expect: counted | ignored | stale | disabled | lumped
//! kind = "rate-limited"
//! expect = "ignored"
//! [[step]]
//! op = "transition"              # an operator's transition: to, and for Open open_for or
//! to = "open"                    # open_until (a clock reading); expect: ok | refused
//! open_for = "5m"
//! [[step]]
//! op = "expect-durations"        # with call_durations: the window's total and mean
//! total = "3s"
//! mean = "1500ms"
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;

use crate::{
    BreakerConfig, CircuitBreaker, Classification, Event, EventKind, EventLog, FailureKind,
    ManualClock, Outcome, Recorded, Rejected, State, WindowSnapshot,
};

/// One conformance vector.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vector {
    /// A short unique name.
    pub name: String,
    /// What the vector checks, and which seed or rule it comes from.
    #[serde(default)]
    pub description: String,
    /// The breaker's configuration.
    pub config: BreakerConfig,
    /// The steps, in order.
    #[serde(rename = "step")]
    pub steps: Vec<Step>,
}

/// The decision expected from an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// A normal permit.
    Permit,
    /// A half-open probe.
    Probe,
    /// A rejection.
    Reject,
}

/// An outcome, as written in a vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeName {
    /// [`Outcome::Success`].
    Success,
    /// [`Outcome::Failure`].
    Failure,
    /// [`Outcome::Ignored`].
    Ignored,
}

impl From<OutcomeName> for Outcome {
    fn from(o: OutcomeName) -> Self {
        match o {
            OutcomeName::Success => Outcome::Success,
            OutcomeName::Failure => Outcome::Failure,
            OutcomeName::Ignored => Outcome::Ignored,
        }
    }
}

/// A [`Recorded`] value, as written in a vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordedName {
    /// [`Recorded::Counted`].
    Counted,
    /// [`Recorded::Ignored`].
    Ignored,
    /// [`Recorded::Stale`].
    Stale,
    /// [`Recorded::Disabled`].
    Disabled,
    /// [`Recorded::Lumped`].
    Lumped,
}

impl RecordedName {
    fn matches(self, r: Recorded) -> bool {
        matches!(
            (self, r),
            (RecordedName::Counted, Recorded::Counted)
                | (RecordedName::Ignored, Recorded::Ignored)
                | (RecordedName::Stale, Recorded::Stale)
                | (RecordedName::Disabled, Recorded::Disabled)
                | (RecordedName::Lumped, Recorded::Lumped)
        )
    }
}

/// How long an operator's Open lasts ([`Step::Transition`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The configured open wait (jitter and backoff included).
    Configured,
    /// Exactly this long ([`CircuitBreaker::transition_to_open_for`]).
    For(Duration),
    /// Until the clock reads this ([`CircuitBreaker::transition_to_open_until`]).
    Until(Duration),
}

/// What an operator's transition should do ([`Step::Transition`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransitionExpect {
    /// It is made.
    #[default]
    Ok,
    /// It is refused (no such operator edge).
    Refused,
}

/// An operator action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// [`CircuitBreaker::force_open`].
    ForceOpen,
    /// [`CircuitBreaker::disable`].
    Disable,
    /// [`CircuitBreaker::metrics_only`].
    MetricsOnly,
    /// [`CircuitBreaker::reset`].
    Reset,
}

/// One step of a vector.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Step {
    /// Ask for a permit.
    Acquire {
        /// Names the permit (not needed for an expected rejection).
        #[serde(default)]
        id: String,
        /// The expected decision.
        expect: Decision,
        /// For a rejection: the expected time until a probe may be admitted.
        #[serde(default, with = "crate::duration::serde::option")]
        retry_after: Option<Duration>,
    },
    /// Record the outcome of a permit.
    Record {
        /// The permit.
        id: String,
        /// Its outcome.
        outcome: OutcomeName,
        /// What the breaker should say of it.
        expect: RecordedName,
    },
    /// Drop a permit without a result.
    Abandon {
        /// The permit.
        id: String,
    },
    /// Move the clock forward.
    Advance {
        /// By how much.
        #[serde(with = "crate::duration::serde")]
        by: Duration,
    },
    /// Run the timers ([`CircuitBreaker::tick`]).
    Tick,
    /// An operator action.
    Operator {
        /// Which one.
        action: Action,
    },
    /// Check the state and, optionally, the window.
    Expect {
        /// The expected state.
        state: State,
        /// Expected recorded calls in the window.
        #[serde(default)]
        calls: Option<u64>,
        /// Expected failures in the window.
        #[serde(default)]
        failures: Option<u64>,
        /// Expected slow calls in the window.
        #[serde(default)]
        slow_calls: Option<u64>,
    },
    /// Check the transitions since the last such step, written `"from->to"`.
    Transitions {
        /// Expected transitions, in order.
        expect: Vec<String>,
    },
    /// Record a classified outcome of a permit: a failure of a kind (its `failure_kinds`
    /// weight, lumping).
    RecordClassified {
        /// The permit.
        id: String,
        /// Its outcome (a failure unless said).
        #[serde(default = "failure")]
        outcome: OutcomeName,
        /// The failure's kind.
        #[serde(default)]
        kind: Option<FailureKind>,
        /// What the breaker should say of it.
        expect: RecordedName,
    },
    /// An operator's transition ([`CircuitBreaker::transition_to`] and its Open variants).
    Transition {
        /// The state asked for.
        to: State,
        /// For Open: exactly this long.
        #[serde(default, with = "crate::duration::serde::option")]
        open_for: Option<Duration>,
        /// For Open: until the clock reads this.
        #[serde(default, with = "crate::duration::serde::option")]
        open_until: Option<Duration>,
        /// Whether it is made.
        #[serde(default)]
        expect: TransitionExpect,
    },
    /// Check the window's call durations (`call_durations`).
    ExpectDurations {
        /// The expected total duration of the window's calls.
        #[serde(default, with = "crate::duration::serde::option")]
        total: Option<Duration>,
        /// The expected mean duration of the window's calls.
        #[serde(default, with = "crate::duration::serde::option")]
        mean: Option<Duration>,
    },
}

fn failure() -> OutcomeName {
    OutcomeName::Failure
}

/// A host of the rules that a vector can drive.
pub trait Subject {
    /// The store's permit.
    type Permit<'a>
    where
        Self: 'a;

    /// Asks for a permit.
    fn acquire(&self) -> Result<Self::Permit<'_>, Rejected>;
    /// Whether a permit is a half-open probe.
    fn is_probe(permit: &Self::Permit<'_>) -> bool;
    /// Records a permit's outcome.
    fn record(&self, permit: Self::Permit<'_>, outcome: Outcome) -> Recorded;
    /// Drops a permit without a result.
    fn abandon(&self, permit: Self::Permit<'_>);
    /// Moves the store's clock forward.
    fn advance(&self, by: Duration);
    /// Runs the timers.
    fn tick(&self);
    /// Performs an operator action.
    fn operator(&self, action: Action);
    /// The current state.
    fn state(&self) -> State;
    /// The window now.
    fn window(&self) -> WindowSnapshot;
    /// Transitions since the last call, oldest first.
    fn take_transitions(&self) -> Vec<(State, State)>;

    /// Records a classified outcome (a failure of a kind). By default the outcome alone,
    /// for a store that takes no kinds.
    fn record_classified(&self, permit: Self::Permit<'_>, c: Classification) -> Recorded {
        self.record(permit, c.outcome)
    }

    /// An operator's transition to `to` (Open for `wait`); `Err` with the reason when it is
    /// refused. By default the four [`Action`]s, and `Err` for any other.
    fn transition(&self, to: State, wait: Wait) -> Result<(), String> {
        let action = match (to, wait) {
            (State::ForcedOpen, _) => Action::ForceOpen,
            (State::Disabled, _) => Action::Disable,
            (State::MetricsOnly, _) => Action::MetricsOnly,
            (State::Closed, _) => Action::Reset,
            _ => return Err(format!("this store takes no operator transition to {to}")),
        };
        self.operator(action);
        Ok(())
    }

    /// The window's total and mean call duration (`call_durations`); by default unknown.
    fn durations(&self) -> (Option<Duration>, Option<Duration>) {
        (None, None)
    }
}

/// A step that did not go as the vector expected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("vector '{vector}', step {step} ({op}): expected {expected}, got {actual}")]
pub struct Mismatch {
    /// The vector.
    pub vector: String,
    /// The step's index (from 1).
    pub step: usize,
    /// The step's operation.
    pub op: String,
    /// What was expected.
    pub expected: String,
    /// What happened.
    pub actual: String,
}

/// Runs `vector` against `subject`.
pub fn run<S: Subject>(vector: &Vector, subject: &S) -> Result<(), Mismatch> {
    let mut permits: HashMap<String, S::Permit<'_>> = HashMap::new();
    for (i, step) in vector.steps.iter().enumerate() {
        let fail = |op: &str, expected: String, actual: String| Mismatch {
            vector: vector.name.clone(),
            step: i + 1,
            op: op.to_string(),
            expected,
            actual,
        };
        match step {
            Step::Acquire {
                id,
                expect,
                retry_after,
            } => {
                let got = subject.acquire();
                let decision = match &got {
                    Ok(p) if S::is_probe(p) => Decision::Probe,
                    Ok(_) => Decision::Permit,
                    Err(_) => Decision::Reject,
                };
                if decision != *expect {
                    let detail = match &got {
                        Err(r) => format!("{decision:?} ({r})"),
                        Ok(_) => format!("{decision:?}"),
                    };
                    return Err(fail("acquire", format!("{expect:?}"), detail));
                }
                match got {
                    Ok(p) => {
                        permits.insert(id.clone(), p);
                    }
                    Err(r) => {
                        if retry_after.is_some() && r.retry_after() != *retry_after {
                            return Err(fail(
                                "acquire",
                                format!("retry_after {retry_after:?}"),
                                format!("retry_after {:?}", r.retry_after()),
                            ));
                        }
                    }
                }
            }
            Step::Record {
                id,
                outcome,
                expect,
            } => {
                let Some(p) = permits.remove(id) else {
                    return Err(fail(
                        "record",
                        format!("a permit named '{id}'"),
                        "none".into(),
                    ));
                };
                let r = subject.record(p, (*outcome).into());
                if !expect.matches(r) {
                    return Err(fail("record", format!("{expect:?}"), format!("{r:?}")));
                }
            }
            Step::Abandon { id } => {
                let Some(p) = permits.remove(id) else {
                    return Err(fail(
                        "abandon",
                        format!("a permit named '{id}'"),
                        "none".into(),
                    ));
                };
                subject.abandon(p);
            }
            Step::Advance { by } => subject.advance(*by),
            Step::Tick => subject.tick(),
            Step::Operator { action } => subject.operator(*action),
            Step::Expect {
                state,
                calls,
                failures,
                slow_calls,
            } => {
                let got = subject.state();
                if got != *state {
                    return Err(fail(
                        "expect",
                        format!("state {state}"),
                        format!("state {got}"),
                    ));
                }
                let w = subject.window();
                for (name, want, have) in [
                    ("calls", calls, w.calls),
                    ("failures", failures, w.failures),
                    ("slow_calls", slow_calls, w.slow_calls),
                ] {
                    if let Some(want) = want {
                        if *want != have {
                            return Err(fail(
                                "expect",
                                format!("{name} {want}"),
                                format!("{name} {have}"),
                            ));
                        }
                    }
                }
            }
            Step::RecordClassified {
                id,
                outcome,
                kind,
                expect,
            } => {
                let Some(p) = permits.remove(id) else {
                    return Err(fail(
                        "record-classified",
                        format!("a permit named '{id}'"),
                        "none".into(),
                    ));
                };
                let mut c = Classification::new((*outcome).into());
                c.kind = *kind;
                let r = subject.record_classified(p, c);
                if !expect.matches(r) {
                    return Err(fail(
                        "record-classified",
                        format!("{expect:?}"),
                        format!("{r:?}"),
                    ));
                }
            }
            Step::Transition {
                to,
                open_for,
                open_until,
                expect,
            } => {
                let wait = match (open_for, open_until) {
                    (Some(d), _) => Wait::For(*d),
                    (None, Some(at)) => Wait::Until(*at),
                    (None, None) => Wait::Configured,
                };
                let got = match subject.transition(*to, wait) {
                    Ok(()) => TransitionExpect::Ok,
                    Err(_) => TransitionExpect::Refused,
                };
                if got != *expect {
                    return Err(fail(
                        "transition",
                        format!("{expect:?} (to {to})"),
                        format!("{got:?}"),
                    ));
                }
            }
            Step::ExpectDurations { total, mean } => {
                let (t, m) = subject.durations();
                if total.is_some() && t != *total {
                    return Err(fail(
                        "expect-durations",
                        format!("total {total:?}"),
                        format!("total {t:?}"),
                    ));
                }
                if mean.is_some() && m != *mean {
                    return Err(fail(
                        "expect-durations",
                        format!("mean {mean:?}"),
                        format!("mean {m:?}"),
                    ));
                }
            }
            Step::Transitions { expect } => {
                let got: Vec<String> = subject
                    .take_transitions()
                    .into_iter()
                    .map(|(a, b)| format!("{a}->{b}"))
                    .collect();
                if got != *expect {
                    return Err(fail(
                        "transitions",
                        format!("{expect:?}"),
                        format!("{got:?}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The built-in vectors.
pub fn builtin() -> Vec<Vector> {
    BUILTIN
        .iter()
        .map(|(file, text)| {
            toml::from_str(text)
                .unwrap_or_else(|e| panic!("built-in vector {file} is invalid: {e}"))
        })
        .collect()
}

/// Parses a vector from TOML.
///
/// ```
/// let v = tripline::conformance::parse("name = 'x'\n[config]\n[[step]]\nop = 'tick'\n").unwrap();
/// assert_eq!(v.name, "x");
/// ```
pub fn parse(text: &str) -> Result<Vector, toml::de::Error> {
    toml::from_str(text)
}

macro_rules! vectors {
    ($($f:literal),* $(,)?) => {
        &[$(($f, include_str!(concat!("../conformance/", $f)))),*]
    };
}

const BUILTIN: &[(&str, &str)] = vectors![
    "trip-on-failure-rate.toml",
    "minimum-calls.toml",
    "full-threshold.toml",
    "slow-call-rate.toml",
    "fowler-trace.toml",
    "half-open-all-probes.toml",
    "half-open-consecutive.toml",
    "probe-limit.toml",
    "stale-results.toml",
    "abandoned-probe.toml",
    "probe-lease-expiry.toml",
    "half-open-max-wait.toml",
    "operator-states.toml",
    "time-window-slides.toml",
    "in-flight-slow.toml",
    "ignored-outcomes.toml",
    "no-forbidden-edges.toml",
    "automatic-transition.toml",
    "failure-kind-weights.toml",
    "lumping.toml",
    "ramp-up.toml",
    "after-max-wait-closed.toml",
    "slow-call-rule-off.toml",
    "operator-transitions.toml",
    "call-durations.toml",
    "failure-count-in-time.toml",
];

/// The in-process breaker as a [`Subject`], on a manual clock.
#[derive(Debug)]
pub struct LocalSubject {
    breaker: CircuitBreaker<ManualClock>,
    log: EventLog,
    seen: RefCell<usize>,
}

impl LocalSubject {
    /// A fresh breaker with the vector's configuration, at time zero.
    pub fn new(vector: &Vector) -> Self {
        let breaker = CircuitBreaker::with_clock(
            vector.name.clone(),
            vector.config.clone(),
            ManualClock::new(),
        );
        let log = EventLog::new();
        breaker.subscribe(log.clone());
        Self {
            breaker,
            log,
            seen: RefCell::new(0),
        }
    }

    /// The breaker under test.
    pub fn breaker(&self) -> &CircuitBreaker<ManualClock> {
        &self.breaker
    }
}

impl Subject for LocalSubject {
    type Permit<'a> = crate::Permit<'a, ManualClock>;

    fn acquire(&self) -> Result<Self::Permit<'_>, Rejected> {
        self.breaker.try_acquire()
    }
    fn is_probe(permit: &Self::Permit<'_>) -> bool {
        permit.is_probe()
    }
    fn record(&self, permit: Self::Permit<'_>, outcome: Outcome) -> Recorded {
        permit.record(outcome)
    }
    fn abandon(&self, permit: Self::Permit<'_>) {
        drop(permit);
    }
    fn advance(&self, by: Duration) {
        self.breaker.clock().advance(by);
    }
    fn tick(&self) {
        self.breaker.tick();
    }
    fn operator(&self, action: Action) {
        match action {
            Action::ForceOpen => self.breaker.force_open(),
            Action::Disable => self.breaker.disable(),
            Action::MetricsOnly => self.breaker.metrics_only(),
            Action::Reset => self.breaker.reset(),
        }
    }
    fn state(&self) -> State {
        self.breaker.state()
    }
    fn window(&self) -> WindowSnapshot {
        self.breaker.metrics().window
    }
    fn record_classified(&self, permit: Self::Permit<'_>, c: Classification) -> Recorded {
        permit.record_classified(c)
    }
    fn transition(&self, to: State, wait: Wait) -> Result<(), String> {
        let r = match (to, wait) {
            (State::Open, Wait::For(d)) => self.breaker.transition_to_open_for(d),
            (State::Open, Wait::Until(at)) => self.breaker.transition_to_open_until(at),
            (to, _) => self.breaker.transition_to(to),
        };
        r.map_err(|e| e.to_string())
    }
    fn durations(&self) -> (Option<Duration>, Option<Duration>) {
        let m = self.breaker.metrics();
        (m.total_duration, m.mean_duration)
    }
    fn take_transitions(&self) -> Vec<(State, State)> {
        let events: Vec<Event> = self.log.events();
        let mut seen = self.seen.borrow_mut();
        let out = events[*seen..]
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Transition { from, to, .. } => Some((from, to)),
                _ => None,
            })
            .collect();
        *seen = events.len();
        out
    }
}

impl Rejected {
    /// A rejection, for stores other than the in-process breaker; its reason is the state's
    /// ([`RejectReason::of_state`](crate::RejectReason::of_state)).
    pub fn new(
        breaker: impl Into<crate::BreakerName>,
        state: State,
        retry_after: Option<Duration>,
    ) -> Self {
        Self::with_reason(
            breaker,
            state,
            crate::RejectReason::of_state(state),
            retry_after,
        )
    }

    /// A rejection with an explicit reason, for stores other than the in-process breaker.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline::{RejectReason, Rejected, State};
    /// let r = Rejected::with_reason("fleet", State::HalfOpen, RejectReason::ProbesBusy, Some(Duration::from_secs(3)));
    /// assert_eq!(r.to_string(), "circuit breaker 'fleet' is half-open with every probe slot taken; a probe slot frees in 3s");
    /// ```
    pub fn with_reason(
        breaker: impl Into<crate::BreakerName>,
        state: State,
        reason: crate::RejectReason,
        retry_after: Option<Duration>,
    ) -> Self {
        Self {
            breaker: breaker.into(),
            state,
            reason,
            retry_after,
            cause: None,
        }
    }
}

/// The pure rules ([`crate::rules`]) as a [`Subject`]: a sequential host over plain values (a
/// ring or a list of buckets, a list of calls in flight, a round of leases) that asks the
/// rules every decision, on a manual clock. It is the reference the vectors describe: the
/// in-process breaker and the Redis store are checked against the same vectors, so the three
/// agree on each of them.
///
/// It models what the vectors exercise: count and time windows, both rates, the minimum calls,
/// the consecutive and failure-count rules, calls in flight, the open wait (with backoff and a
/// seeded or no jitter), both half-open policies, probe leases, the maximum half-open wait, automatic
/// transition, the operator actions and transitions (exact and until-a-reading open waits),
/// failure-kind weights, lumping, the ramp after recovery and the window's call durations.
///
/// ```
/// use tripline::conformance::{self, RulesSubject};
///
/// for vector in conformance::builtin() {
///     conformance::run(&vector, &RulesSubject::new(&vector)).unwrap();
/// }
/// ```
#[derive(Debug)]
pub struct RulesSubject {
    m: RefCell<Machine>,
}

/// A permit of the [`RulesSubject`].
#[derive(Debug)]
pub struct RulesPermit {
    generation: u64,
    started: u64,
    kind: RulesKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RulesKind {
    /// A closed call; its id among the calls in flight, if they are counted.
    Window(Option<u64>),
    Probe {
        slot: usize,
        token: u64,
    },
    Passthrough,
}

#[derive(Debug)]
enum PlainWindow {
    /// The last `size` outcomes: `(failed, slow, duration in nanoseconds)`.
    Count {
        size: usize,
        outcomes: std::collections::VecDeque<(bool, bool, u64)>,
    },
    /// Every outcome with its bucket number (since the breaker's creation) and duration.
    Time {
        bucket: u64,
        buckets: u64,
        outcomes: Vec<(u64, bool, bool, u64)>,
        /// When the next good result is judged, and whether the last judgement saw fewer than
        /// the minimum calls.
        next_boundary: u64,
        below_minimum: bool,
    },
}

#[derive(Debug)]
struct Machine {
    name: String,
    config: BreakerConfig,
    now: u64,
    state: State,
    generation: u64,
    window: PlainWindow,
    /// Calls in flight of the current generation, by id: when they started.
    in_flight: HashMap<u64, u64>,
    next_call: u64,
    next_inflight_check: u64,
    run: u64,
    /// The failure-count rule's times: the current Closed period's last failures.
    failure_times: std::collections::VecDeque<u64>,
    open_until: u64,
    level: u32,
    ever_opened: bool,
    closed_since: u64,
    half_open_since: u64,
    leases: Vec<Option<(u64, u64)>>,
    round: crate::rules::RoundCounts,
    next_token: u64,
    rng: Option<rand_pcg::Pcg64Mcg>,
    transitions: Vec<(State, State)>,
    /// When the last failure that counted (not lumped) was recorded, this generation.
    last_counted_failure: Option<u64>,
    /// The ramp after a recovery, while one runs.
    ramp: Option<PlainRamp>,
}

/// A ramp in progress ([`crate::RampUp`]): when it started, its step length, and the calls
/// seen in its current step.
#[derive(Debug)]
struct PlainRamp {
    config: crate::RampUp,
    start: u64,
    step_nanos: u64,
    step: u64,
    seen: u64,
}

impl RulesSubject {
    /// A fresh host with the vector's configuration, at time zero.
    pub fn new(vector: &Vector) -> Self {
        use rand::SeedableRng;
        let c = vector.config.clone();
        let window = match c.window() {
            crate::WindowConfig::Count { size } => PlainWindow::Count {
                size: size as usize,
                outcomes: Default::default(),
            },
            crate::WindowConfig::Time { length, bucket } => PlainWindow::Time {
                bucket: crate::clock::nanos(bucket),
                buckets: (length.as_nanos() / bucket.as_nanos()) as u64,
                outcomes: Vec::new(),
                next_boundary: 0,
                below_minimum: true,
            },
        };
        let width = (crate::clock::nanos(c.slow_call_duration()) / 2).max(1);
        Self {
            m: RefCell::new(Machine {
                name: vector.name.clone(),
                rng: c.seed().map(rand_pcg::Pcg64Mcg::seed_from_u64),
                config: c,
                now: 0,
                state: State::Closed,
                generation: 0,
                window,
                in_flight: HashMap::new(),
                next_call: 0,
                next_inflight_check: width,
                run: 0,
                failure_times: Default::default(),
                open_until: 0,
                level: 0,
                ever_opened: false,
                closed_since: 0,
                half_open_since: 0,
                leases: Vec::new(),
                round: Default::default(),
                next_token: 1,
                transitions: Vec::new(),
                last_counted_failure: None,
                ramp: None,
            }),
        }
    }
}

impl Machine {
    fn thresholds(&self) -> crate::rules::Thresholds {
        crate::rules::Thresholds::of(&self.config)
    }

    fn slow_nanos(&self) -> u64 {
        if self.config.slow_call_rule() {
            crate::clock::nanos(self.config.slow_call_duration())
        } else {
            u64::MAX
        }
    }

    fn width(&self) -> u64 {
        (crate::clock::nanos(self.config.slow_call_duration()) / 2).max(1)
    }

    /// The outcomes the window holds now: `(failed, slow, duration in nanoseconds)`.
    fn live(&self) -> Vec<(bool, bool, u64)> {
        match &self.window {
            PlainWindow::Count { outcomes, .. } => outcomes.iter().copied().collect(),
            PlainWindow::Time {
                bucket,
                buckets,
                outcomes,
                ..
            } => {
                let e = self.now / bucket;
                outcomes
                    .iter()
                    .filter(|(b, ..)| *b <= e && b + buckets > e)
                    .map(|(_, f, sl, d)| (*f, *sl, *d))
                    .collect()
            }
        }
    }

    /// The window now, with the overdue calls in flight when asked (and counted).
    fn snapshot(&self, with_in_flight: bool) -> WindowSnapshot {
        let mut s = WindowSnapshot::default();
        for (failed, slow, _) in self.live() {
            s.calls += 1;
            s.failures += u64::from(failed);
            s.slow_calls += u64::from(slow);
        }
        if with_in_flight && self.config.counts_in_flight() {
            let (w, slow) = (self.width(), self.slow_nanos());
            s.in_flight_slow = self
                .in_flight
                .values()
                .filter(|start| {
                    let end = (*start / w).saturating_add(1).saturating_mul(w);
                    crate::rules::overdue(end, slow, self.now)
                })
                .count() as u64;
        }
        s
    }

    /// The window's calls' total and mean duration (`call_durations`), as the breaker's
    /// metrics report them: in whole microseconds, a mean only when the window holds calls.
    fn durations(&self) -> (Option<Duration>, Option<Duration>) {
        if !self.config.call_durations {
            return (None, None);
        }
        let micros: Vec<u64> = self.live().iter().map(|(.., d)| d / 1_000).collect();
        if micros.is_empty() {
            return (Some(Duration::ZERO), None);
        }
        let total = micros.iter().fold(0u64, |a, d| a.saturating_add(*d));
        let mean = total / micros.len() as u64;
        (
            Some(Duration::from_micros(total)),
            Some(Duration::from_micros(mean)),
        )
    }

    /// Judges the window (noting, for a time window, whether it held the minimum).
    fn fired(&mut self, with_in_flight: bool, consecutive: Option<u64>) -> crate::rules::Fired {
        let snap = self.snapshot(with_in_flight);
        let t = self.thresholds();
        if let PlainWindow::Time { below_minimum, .. } = &mut self.window {
            *below_minimum = !crate::rules::minimum_reached(snap.calls, t.minimum_calls);
        }
        crate::rules::fired(&snap, &t, consecutive)
    }

    fn transition(&mut self, to: State, explicit_wait: Option<u64>) {
        use crate::rules;
        let from = self.state;
        if to == State::Open {
            let rule = rules::OpenWaitRule::of(&self.config);
            self.level = rules::next_backoff_level(
                self.level,
                from,
                explicit_wait.is_some(),
                self.ever_opened,
                self.now.saturating_sub(self.closed_since),
                rule.healthy_after,
            );
            let wait = explicit_wait.unwrap_or_else(|| {
                let draw = match (&mut self.rng, rule.jitter) {
                    (_, 0) | (None, _) => 0,
                    (Some(rng), j) => rand::Rng::random_range(rng, 0..=j),
                };
                rules::open_wait(&rule, self.level, draw, None)
            });
            self.open_until = self.now.saturating_add(wait);
            self.ever_opened = true;
        }
        if to == State::HalfOpen {
            self.half_open_since = self.now;
            self.leases = vec![None; self.config.half_open_calls() as usize];
            self.round = Default::default();
        }
        if matches!(to, State::Closed | State::MetricsOnly) {
            match &mut self.window {
                PlainWindow::Count { outcomes, .. } => outcomes.clear(),
                PlainWindow::Time {
                    outcomes,
                    next_boundary,
                    below_minimum,
                    ..
                } => {
                    outcomes.clear();
                    *next_boundary = 0;
                    *below_minimum = true;
                }
            }
            self.in_flight.clear();
            self.closed_since = self.now;
            self.next_inflight_check = self.now.saturating_add(self.width());
        }
        self.run = 0;
        self.failure_times.clear();
        self.last_counted_failure = None;
        self.ramp = None;
        self.state = to;
        self.generation += 1;
        self.transitions.push((from, to));
    }

    /// Ends a half-open round with the probes' verdict: to Open, or to Closed and, with a
    /// `ramp_up`, a ramp (only probes start one; an operator's close or a timeout does not).
    fn end_round(&mut self, to: State) {
        self.transition(to, None);
        if to == State::Closed {
            if let Some(r) = self.config.ramp_up {
                self.ramp = Some(PlainRamp {
                    config: r,
                    start: self.now,
                    step_nanos: (crate::clock::nanos(r.over) / u64::from(r.steps.max(1))).max(1),
                    step: 0,
                    seen: 0,
                });
            }
        }
    }

    /// Whether the ramp (if one runs) admits a call now; ends it once it is over.
    fn ramp_admits(&mut self) -> bool {
        let now = self.now;
        let Some(r) = &mut self.ramp else {
            return true;
        };
        let i = crate::rules::ramp_step(r.start, r.step_nanos, now);
        if i >= u64::from(r.config.steps.max(1)) {
            self.ramp = None;
            return true;
        }
        if i != r.step {
            r.step = i;
            r.seen = 0;
        }
        let share = crate::rules::ramp_share_ppm(
            r.config.from,
            r.config.steps.max(1),
            r.config.curve,
            u32::try_from(i).unwrap_or(u32::MAX),
        );
        let n = r.seen;
        r.seen += 1;
        crate::rules::ramp_admits(n, share)
    }

    fn reject(&self, state: State, retry_after: Option<u64>) -> Rejected {
        Rejected::new(
            self.name.clone(),
            state,
            retry_after.map(Duration::from_nanos),
        )
    }

    fn acquire(&mut self) -> Result<RulesPermit, Rejected> {
        use crate::rules;
        loop {
            match self.state {
                State::Closed | State::MetricsOnly => {
                    if !self.ramp_admits() {
                        return Err(Rejected::with_reason(
                            self.name.clone(),
                            State::Closed,
                            crate::RejectReason::RampingUp,
                            None,
                        ));
                    }
                    if self.config.counts_in_flight() && self.now >= self.next_inflight_check {
                        self.next_inflight_check = self.now.saturating_add(self.width());
                        let fired = self.fired(true, None);
                        if self.state == State::Closed && fired.any() {
                            self.transition(State::Open, None);
                            continue;
                        }
                    }
                    let id = self.config.counts_in_flight().then(|| {
                        self.next_call += 1;
                        self.in_flight.insert(self.next_call, self.now);
                        self.next_call
                    });
                    return Ok(RulesPermit {
                        generation: self.generation,
                        started: self.now,
                        kind: RulesKind::Window(id),
                    });
                }
                State::Open => {
                    if !rules::open_elapsed(self.open_until, self.now) {
                        return Err(self.reject(State::Open, Some(self.open_until - self.now)));
                    }
                    self.transition(State::HalfOpen, None);
                }
                State::HalfOpen => {
                    let max_wait = self.config.half_open_max_wait().map(crate::clock::nanos);
                    if rules::half_open_expired(self.half_open_since, max_wait, self.now) {
                        self.transition(rules::after_max_wait(self.config.after_max_wait()), None);
                        continue;
                    }
                    let now = self.now;
                    for l in self.leases.iter_mut() {
                        if l.is_some_and(|(_, d)| rules::lease_expired(d, now)) {
                            *l = None;
                        }
                    }
                    let (k, policy) = (
                        self.config.half_open_calls(),
                        self.config.half_open_policy(),
                    );
                    let t = self.thresholds();
                    if let Some(v) = rules::settled_verdict(policy, k, &self.round, &t) {
                        self.end_round(v.state());
                        continue;
                    }
                    let in_flight = self.leases.iter().filter(|l| l.is_some()).count() as u32;
                    if rules::admits_probe(policy, k, in_flight, &self.round) {
                        if let Some(slot) = self.leases.iter().position(Option::is_none) {
                            let token = self.next_token;
                            self.next_token += 1;
                            let lease = crate::clock::nanos(self.config.probe_lease());
                            self.leases[slot] = Some((token, now.saturating_add(lease)));
                            return Ok(RulesPermit {
                                generation: self.generation,
                                started: now,
                                kind: RulesKind::Probe { slot, token },
                            });
                        }
                    }
                    let retry = self
                        .leases
                        .iter()
                        .flatten()
                        .map(|(_, d)| d.saturating_sub(now))
                        .min();
                    return Err(self.reject(State::HalfOpen, retry));
                }
                State::Disabled => {
                    return Ok(RulesPermit {
                        generation: self.generation,
                        started: self.now,
                        kind: RulesKind::Passthrough,
                    });
                }
                State::ForcedOpen => return Err(self.reject(State::ForcedOpen, None)),
            }
        }
    }

    fn record(&mut self, p: RulesPermit, c: Classification) -> Recorded {
        use crate::rules;
        let elapsed = self.now.saturating_sub(p.started);
        let slow = rules::is_slow(elapsed, self.slow_nanos());
        // A failure's weight (`failure_kinds`): 0 makes it an ignored outcome.
        let weight = match (c.outcome, c.kind) {
            (Outcome::Failure, Some(kind)) => u64::from(self.config.failure_kinds.get(kind)),
            _ => 1,
        };
        match p.kind {
            RulesKind::Passthrough => Recorded::Disabled,
            RulesKind::Window(id) => {
                if let Some(id) = id {
                    self.in_flight.remove(&id);
                }
                if p.generation != self.generation {
                    return Recorded::Stale;
                }
                let failure = match c.outcome {
                    Outcome::Ignored => return Recorded::Ignored,
                    _ if weight == 0 => return Recorded::Ignored,
                    o => o == Outcome::Failure,
                };
                let now = self.now;
                if failure {
                    // Lumping: a failure within the interval of the last counted one counts
                    // only in the metrics (it adds nothing to the run).
                    if let Some(interval) = self.config.lumping_interval {
                        let interval = crate::clock::nanos(interval);
                        if rules::lumped(self.last_counted_failure, interval, now) {
                            return Recorded::Lumped;
                        }
                        self.last_counted_failure = Some(now);
                    }
                }
                let mut filling = false;
                // A weighted failure lands as `weight` failed outcomes.
                for n in 0..weight {
                    let f = match &mut self.window {
                        PlainWindow::Count { size, outcomes } => {
                            let f = outcomes.len() < *size;
                            outcomes.push_back((failure, slow, elapsed));
                            if outcomes.len() > *size {
                                outcomes.pop_front();
                            }
                            f
                        }
                        PlainWindow::Time {
                            bucket, outcomes, ..
                        } => {
                            outcomes.push((now / *bucket, failure, slow, elapsed));
                            false
                        }
                    };
                    if n == 0 {
                        filling = f;
                    }
                }
                self.run = if failure { self.run + weight } else { 0 };
                let consecutive = (failure
                    && rules::consecutive_fires(self.run, self.config.consecutive_failures()))
                .then_some(self.run);
                let mut failure_count = None;
                if let (true, Some(rule)) = (failure, self.config.failure_count()) {
                    // A weighted failure counts its weight; a lumped one returned above.
                    for _ in 0..weight {
                        self.failure_times.push_back(now);
                    }
                    while self.failure_times.len() > rule.failures as usize {
                        self.failure_times.pop_front();
                    }
                    failure_count = rules::failure_count_fires(
                        self.failure_times.make_contiguous(),
                        Some((rule.failures, crate::clock::nanos(rule.within))),
                        now,
                    );
                }
                if self.state == State::MetricsOnly {
                    return Recorded::Counted;
                }
                let evaluate = rules::result_evaluates(
                    failure,
                    slow,
                    consecutive.is_some() || failure_count.is_some(),
                    || match &mut self.window {
                        PlainWindow::Count { .. } => rules::count_success_gate(filling),
                        PlainWindow::Time {
                            bucket,
                            next_boundary,
                            below_minimum,
                            ..
                        } => {
                            let open =
                                rules::time_success_gate(*below_minimum, now, *next_boundary);
                            if open && !*below_minimum {
                                *next_boundary = (now / *bucket + 1).saturating_mul(*bucket);
                            }
                            open
                        }
                    },
                );
                if evaluate {
                    let fired = crate::rules::Fired {
                        failure_count,
                        ..self.fired(failure || slow, consecutive)
                    };
                    if fired.any() {
                        self.transition(State::Open, None);
                    }
                }
                Recorded::Counted
            }
            RulesKind::Probe { slot, token } => {
                let leased = self
                    .leases
                    .get(slot)
                    .copied()
                    .flatten()
                    .is_some_and(|(t, _)| t == token);
                if p.generation != self.generation || self.state != State::HalfOpen || !leased {
                    return Recorded::Stale;
                }
                self.leases[slot] = None;
                // A probe is one sample of the round, whatever its kind's weight (above 0).
                let failure = match c.outcome {
                    Outcome::Ignored => return Recorded::Ignored,
                    _ if weight == 0 => return Recorded::Ignored,
                    o => o == Outcome::Failure,
                };
                self.round = self.round.with(failure, slow);
                let (k, policy) = (
                    self.config.half_open_calls(),
                    self.config.half_open_policy(),
                );
                if let Some(v) = rules::probe_verdict(
                    policy,
                    k,
                    &self.round,
                    failure || slow,
                    &self.thresholds(),
                ) {
                    self.end_round(v.state());
                }
                Recorded::Counted
            }
        }
    }

    /// An operator's transition along an edge of [`State::operator_targets`]: asking for the
    /// current state changes nothing, except that Closed starts a fresh window and Open a new
    /// wait (exactly `wait` when given, at most 7 days).
    fn operator_transition(&mut self, to: State, wait: Wait) -> Result<(), String> {
        let explicit = match wait {
            Wait::Configured => None,
            Wait::For(d) => Some(("open_for", d)),
            Wait::Until(at) => Some((
                "open_until",
                Duration::from_nanos(crate::clock::nanos(at).saturating_sub(self.now)),
            )),
        };
        let explicit = match explicit {
            Some((field, d)) if to == State::Open => {
                Some(crate::operator::explicit_wait(field, d).map_err(|e| e.to_string())?)
            }
            _ => None,
        };
        match crate::rules::operator_edge(self.state, to) {
            None => Err(format!(
                "no operator transition from {} to {to}",
                self.state
            )),
            Some(moves) => {
                if moves {
                    self.transition(to, explicit);
                }
                Ok(())
            }
        }
    }

    fn abandon(&mut self, p: RulesPermit) {
        match p.kind {
            RulesKind::Window(Some(id)) => {
                self.in_flight.remove(&id);
            }
            RulesKind::Probe { slot, token } => {
                if let Some(l) = self.leases.get_mut(slot) {
                    if l.is_some_and(|(t, _)| t == token) {
                        *l = None;
                    }
                }
            }
            _ => {}
        }
    }

    fn tick(&mut self) {
        use crate::rules;
        match self.state {
            State::Open
                if self.config.automatic_transition()
                    && rules::open_elapsed(self.open_until, self.now) =>
            {
                self.transition(State::HalfOpen, None);
            }
            State::HalfOpen => {
                let max_wait = self.config.half_open_max_wait().map(crate::clock::nanos);
                if rules::half_open_expired(self.half_open_since, max_wait, self.now) {
                    self.transition(rules::after_max_wait(self.config.after_max_wait()), None);
                }
            }
            _ => {}
        }
    }

    fn operator(&mut self, to: State) {
        if crate::rules::operator_edge(self.state, to) == Some(true) {
            self.transition(to, None);
        }
    }
}

impl Subject for RulesSubject {
    type Permit<'a> = RulesPermit;

    fn acquire(&self) -> Result<Self::Permit<'_>, Rejected> {
        self.m.borrow_mut().acquire()
    }
    fn is_probe(permit: &Self::Permit<'_>) -> bool {
        matches!(permit.kind, RulesKind::Probe { .. })
    }
    fn record(&self, permit: Self::Permit<'_>, outcome: Outcome) -> Recorded {
        self.m.borrow_mut().record(permit, outcome.into())
    }
    fn record_classified(&self, permit: Self::Permit<'_>, c: Classification) -> Recorded {
        self.m.borrow_mut().record(permit, c)
    }
    fn transition(&self, to: State, wait: Wait) -> Result<(), String> {
        self.m.borrow_mut().operator_transition(to, wait)
    }
    fn durations(&self) -> (Option<Duration>, Option<Duration>) {
        self.m.borrow().durations()
    }
    fn abandon(&self, permit: Self::Permit<'_>) {
        self.m.borrow_mut().abandon(permit)
    }
    fn advance(&self, by: Duration) {
        let mut m = self.m.borrow_mut();
        m.now = m.now.saturating_add(crate::clock::nanos(by));
    }
    fn tick(&self) {
        self.m.borrow_mut().tick()
    }
    fn operator(&self, action: Action) {
        self.m.borrow_mut().operator(match action {
            Action::ForceOpen => State::ForcedOpen,
            Action::Disable => State::Disabled,
            Action::MetricsOnly => State::MetricsOnly,
            Action::Reset => State::Closed,
        })
    }
    fn state(&self) -> State {
        self.m.borrow().state
    }
    fn window(&self) -> WindowSnapshot {
        // While Open, the window that tripped (as the breaker's metrics show it), with its
        // overdue calls in flight.
        self.m.borrow().snapshot(true)
    }
    fn take_transitions(&self) -> Vec<(State, State)> {
        std::mem::take(&mut self.m.borrow_mut().transitions)
    }
}
