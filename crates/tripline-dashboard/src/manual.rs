//! Overrides of the breakers registered by hand.
//!
//! They mirror a registry's run-time layer: an override per key and one per dependency, the
//! key's deciding where both are set, so that "force open all" on a dependency of
//! hand-registered breakers holds (and shows) as it does for a registry's.
//!
//! # No listener under a lock
//! Forcing a breaker open, disabling it or resetting it runs its listeners on the calling
//! thread, and a listener may call back into the dashboard (read the page through the
//! router, or send a control of its own). So the lock here guards only the *desired* state:
//! an action writes it under the lock and moves the version, then applies it to the breaker
//! with no lock held, and checks afterwards under the lock that the version did not move
//! meanwhile; if it did, it applies again. Two actions racing each other therefore leave the
//! breaker in the state of the one written last, and a reset racing a kill switch ends
//! forced open.

use std::collections::HashMap;

use tripline::registry::OperatorState;
use tripline::{CircuitBreaker, Clock, State};

/// Which layer holds a breaker in its state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Layer {
    /// A run-time override of exactly this key.
    Key,
    /// A run-time override of its whole dependency.
    Dependency,
    /// The registry's configuration (`[operator]`).
    Configuration,
}

impl Layer {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Layer::Key => "run-time key override",
            Layer::Dependency => "run-time dependency override",
            Layer::Configuration => "registry configuration",
        }
    }
}

/// The desired overrides of the hand-registered breakers, by index.
#[derive(Debug)]
pub(crate) struct ManualControl {
    keys: Vec<Option<OperatorState>>,
    dependencies: HashMap<String, OperatorState>,
    /// What was last applied to each breaker.
    applied: Vec<OperatorState>,
    version: u64,
}

impl ManualControl {
    pub(crate) fn new(n: usize) -> Self {
        Self {
            keys: vec![None; n],
            dependencies: HashMap::new(),
            applied: vec![OperatorState::Auto; n],
            version: 0,
        }
    }

    /// The override in force for breaker `i` of `dependency`, and the layer holding it.
    pub(crate) fn in_force(&self, i: usize, dependency: &str) -> (OperatorState, Option<Layer>) {
        if let Some(s) = self.keys.get(i).copied().flatten() {
            return (s, Some(Layer::Key));
        }
        match self.dependencies.get(dependency) {
            Some(s) => (*s, Some(Layer::Dependency)),
            None => (OperatorState::Auto, None),
        }
    }

    /// The dependency-wide override of `dependency`, if any.
    pub(crate) fn dependency(&self, dependency: &str) -> Option<OperatorState> {
        self.dependencies.get(dependency).copied()
    }

    pub(crate) fn has_key(&self, i: usize) -> bool {
        self.keys.get(i).is_some_and(Option::is_some)
    }

    pub(crate) fn set_key(&mut self, i: usize, state: Option<OperatorState>) {
        if let Some(k) = self.keys.get_mut(i) {
            *k = state;
        }
        self.version += 1;
    }

    pub(crate) fn set_dependency(&mut self, dependency: &str, state: Option<OperatorState>) {
        match state {
            Some(s) => self.dependencies.insert(dependency.to_string(), s),
            None => self.dependencies.remove(dependency),
        };
        self.version += 1;
    }
}

/// Brings breaker `i` to the override in force, with no lock held while the breaker runs
/// its listeners (see the module docs); whether its state changed.
pub(crate) fn reconcile<C: Clock>(
    control: &std::sync::Mutex<ManualControl>,
    i: usize,
    dependency: &str,
    breaker: &CircuitBreaker<C>,
) -> bool {
    let before = breaker.state();
    loop {
        let (want, from, version) = {
            let c = lock(control);
            (c.in_force(i, dependency).0, c.applied[i], c.version)
        };
        apply(breaker, from, want);
        let mut c = lock(control);
        if c.version == version {
            c.applied[i] = want;
            break;
        }
    }
    breaker.state() != before
}

/// Puts `breaker` in the state `to` asks for; `from` is the override applied before.
fn apply<C: Clock>(breaker: &CircuitBreaker<C>, from: OperatorState, to: OperatorState) {
    let state = breaker.state();
    match to {
        OperatorState::ForcedOpen if state != State::ForcedOpen => breaker.force_open(),
        OperatorState::Disabled if state != State::Disabled => breaker.disable(),
        OperatorState::MetricsOnly if state != State::MetricsOnly => breaker.metrics_only(),
        OperatorState::Auto if from != OperatorState::Auto && state.is_operator_state() => {
            breaker.reset();
        }
        _ => {}
    }
}

pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The override holding a breaker, and where it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) state: OperatorState,
    pub(crate) layer: Option<Layer>,
}
