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
        #[serde(default, with = "humantime_serde::option")]
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
        #[serde(with = "humantime_serde")]
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
        #[serde(default, with = "humantime_serde::option")]
        open_for: Option<Duration>,
        /// For Open: until the clock reads this.
        #[serde(default, with = "humantime_serde::option")]
        open_until: Option<Duration>,
        /// Whether it is made.
        #[serde(default)]
        expect: TransitionExpect,
    },
    /// Check the window's call durations (`call_durations`).
    ExpectDurations {
        /// The expected total duration of the window's calls.
        #[serde(default, with = "humantime_serde::option")]
        total: Option<Duration>,
        /// The expected mean duration of the window's calls.
        #[serde(default, with = "humantime_serde::option")]
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
        }
    }
}
