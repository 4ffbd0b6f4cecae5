//! States and the packed state word.
//!
//! "Open" means calls are blocked (the circuit is open, no current flows), as in electrical
//! engineering; "Closed" means calls flow.

use std::fmt;

/// A breaker's state.
///
/// ```
/// use tripline::State;
/// assert!(State::Closed.permits_calls());
/// assert!(!State::ForcedOpen.permits_calls());
/// assert_eq!(State::HalfOpen.to_string(), "half-open");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum State {
    /// Calls flow; outcomes are recorded; the breaker trips when the rules say so.
    Closed = 0,
    /// Calls are rejected until the open wait has elapsed.
    Open = 1,
    /// A bounded number of probes test whether the dependency recovered.
    HalfOpen = 2,
    /// Operator state: every call is permitted and nothing is recorded.
    Disabled = 3,
    /// Operator state (shadow mode): calls are permitted and recorded, and the breaker reports
    /// when it would trip, but never trips.
    MetricsOnly = 4,
    /// Operator state (kill switch): every call is rejected.
    ForcedOpen = 5,
}

impl State {
    /// All states, in declaration order.
    pub const ALL: [State; 6] = [
        State::Closed,
        State::Open,
        State::HalfOpen,
        State::Disabled,
        State::MetricsOnly,
        State::ForcedOpen,
    ];

    /// Whether calls may pass in this state (HalfOpen passes only probes).
    pub fn permits_calls(self) -> bool {
        matches!(
            self,
            State::Closed | State::HalfOpen | State::Disabled | State::MetricsOnly
        )
    }

    /// Whether an operator put the breaker in this state.
    pub fn is_operator_state(self) -> bool {
        matches!(
            self,
            State::Disabled | State::MetricsOnly | State::ForcedOpen
        )
    }

    /// The states an operator may move a breaker in `self` to
    /// ([`CircuitBreaker::transition_to`](crate::CircuitBreaker::transition_to)). Every state
    /// may go to Closed (a reset, also from Closed: a fresh window), Open (from Open: a new
    /// wait), Disabled, MetricsOnly and ForcedOpen; only Open, HalfOpen and ForcedOpen may go to
    /// HalfOpen, since half-open means "recovering from open": Closed, Disabled and MetricsOnly
    /// have nothing to recover from. Asking for the state a breaker is already in is allowed and
    /// does nothing, except for Closed and Open as said.
    ///
    /// ```
    /// use tripline::State;
    /// assert!(State::ForcedOpen.operator_targets().contains(&State::HalfOpen));
    /// assert!(!State::Closed.operator_targets().contains(&State::HalfOpen));
    /// ```
    pub const fn operator_targets(self) -> &'static [State] {
        use State::*;
        match self {
            Open | HalfOpen | ForcedOpen => {
                &[Closed, Open, HalfOpen, Disabled, MetricsOnly, ForcedOpen]
            }
            Closed | Disabled | MetricsOnly => &[Closed, Open, Disabled, MetricsOnly, ForcedOpen],
        }
    }

    /// A stable lowercase name (`"half-open"`), as used in configuration and events.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Closed => "closed",
            State::Open => "open",
            State::HalfOpen => "half-open",
            State::Disabled => "disabled",
            State::MetricsOnly => "metrics-only",
            State::ForcedOpen => "forced-open",
        }
    }

    pub(crate) fn from_bits(bits: u64) -> State {
        match bits & STATE_MASK {
            0 => State::Closed,
            1 => State::Open,
            2 => State::HalfOpen,
            3 => State::Disabled,
            4 => State::MetricsOnly,
            _ => State::ForcedOpen,
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const STATE_BITS: u32 = 3;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;

/// The state word: generation in the high bits, state in the low three. One atomic load gives
/// both, and one compare-and-swap moves both, so a transition and its generation bump are a
/// single step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Word(pub(crate) u64);

impl Word {
    pub(crate) fn new(state: State, generation: u64) -> Self {
        Word((generation << STATE_BITS) | state as u64)
    }
    pub(crate) fn state(self) -> State {
        State::from_bits(self.0)
    }
    pub(crate) fn generation(self) -> u64 {
        self.0 >> STATE_BITS
    }
    pub(crate) fn next(self, state: State) -> Self {
        Word::new(state, self.generation().wrapping_add(1))
    }
}
