//! The metrics snapshot: counters since creation, the window and the round now, and the
//! memory figures.

use std::sync::Arc;
use std::time::Duration;

use super::hot::Lanes;
use super::transition::Cold;
use super::{CircuitBreaker, Inner, PaddedLane};
use crate::clock::Clock;
use crate::config::BreakerConfig;
use crate::outcome::FailureKind;
use crate::state::State;
use crate::sync::{AtomicU64, Ordering, lock};
use crate::window::WindowSnapshot;

/// Refused calls by the state that refused them (resilience4j's "not permitted calls", per
/// state).
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, State};
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// breaker.force_open();
/// let _ = breaker.try_acquire();
/// assert_eq!(breaker.metrics().rejections.in_state(State::ForcedOpen), 1);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Rejections {
    /// Refused while Open.
    pub open: u64,
    /// Refused while HalfOpen, every probe slot taken.
    pub half_open: u64,
    /// Refused while ForcedOpen.
    pub forced_open: u64,
    /// Refused while Closed, ramping traffic back up after recovery
    /// ([`RampUp`](crate::RampUp)).
    pub ramping_up: u64,
}

impl Rejections {
    /// Refusals in `state` (0 for the states that never refuse).
    pub fn in_state(&self, state: State) -> u64 {
        match state {
            State::Open => self.open,
            State::HalfOpen => self.half_open,
            State::ForcedOpen => self.forced_open,
            State::Closed => self.ramping_up,
            _ => 0,
        }
    }

    /// All refusals.
    pub fn total(&self) -> u64 {
        self.open + self.half_open + self.forced_open + self.ramping_up
    }
}

/// The probes of the current half-open round (all zero in other states).
///
/// ```
/// use tripline::ProbeCounts;
/// assert_eq!(ProbeCounts::default().admitted, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ProbeCounts {
    /// Probes admitted in this round (expired, abandoned and ignored ones included).
    pub admitted: u32,
    /// Probes in flight now.
    pub in_flight: u32,
    /// Probe results that were successes (slow ones included).
    pub succeeded: u32,
    /// Probe results that were failures.
    pub failed: u32,
    /// Probe results that were slow (successful or not).
    pub slow: u32,
}

/// Failures by [`FailureKind`], counted whatever the kind's weight.
///
/// ```
/// use tripline::{KindCounts, FailureKind};
/// assert_eq!(KindCounts::default().get(FailureKind::Timeout), 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCounts([u64; 7]);

impl KindCounts {
    /// Counts given in [`FailureKind::ALL`] order (for a host of the rules that counts them
    /// itself, such as the shared breaker).
    ///
    /// ```
    /// use tripline::{FailureKind, KindCounts};
    /// let counts = KindCounts::from_counts([0, 0, 0, 0, 0, 0, 3]);
    /// assert_eq!(counts.get(FailureKind::ALL[6]), 3);
    /// assert_eq!(counts.total(), 3);
    /// ```
    pub const fn from_counts(counts: [u64; 7]) -> Self {
        Self(counts)
    }

    /// Failures of `kind`.
    pub fn get(&self, kind: FailureKind) -> u64 {
        self.0[kind.index()]
    }

    /// Every kind with its count, in [`FailureKind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (FailureKind, u64)> + '_ {
        FailureKind::ALL.into_iter().map(|k| (k, self.get(k)))
    }

    /// Failures that carried a kind.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for KindCounts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(7))?;
        for (k, n) in self.iter() {
            m.serialize_entry(k.as_str(), &n)?;
        }
        m.end()
    }
}

/// A snapshot of a breaker's state and counters since creation.
///
/// The counters (`*_calls`, `rejections`, `failures_by_kind`, ...) count since the breaker was
/// made; the window, its rates and durations, the runs of consecutive outcomes and the probe
/// counts describe now.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, State};
/// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
/// let _ = breaker.call(|| Err::<(), _>("boom"));
/// let m = breaker.metrics();
/// assert_eq!((m.state, m.failed_calls, m.window.failures), (State::Closed, 1, 1));
/// // One call is below the default minimum of 20: the rates are not evaluated yet.
/// assert_eq!(m.failure_rate, None);
/// assert_eq!(m.consecutive_failures, 1);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[non_exhaustive]
pub struct Metrics {
    /// Current state.
    pub state: State,
    /// Current generation.
    pub generation: u64,
    /// The closed window now, with overdue in-flight calls.
    pub window: WindowSnapshot,
    /// The window's failure rate in percent, or `None` while it holds fewer than the minimum
    /// calls: not yet evaluated (resilience4j reports -1 there), which is not the same as 0.
    pub failure_rate: Option<f64>,
    /// The window's slow-call rate in percent (overdue in-flight calls included), or `None`
    /// below the minimum calls.
    pub slow_call_rate: Option<f64>,
    /// The total duration of the window's calls (`None` unless `call_durations` is on). A
    /// weighted failure counts its duration once per outcome it adds.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration::serde::option"))]
    pub total_duration: Option<Duration>,
    /// The mean duration of the window's calls (`None` unless `call_durations` is on and the
    /// window holds a call).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration::serde::option"))]
    pub mean_duration: Option<Duration>,
    /// Calls recorded as successes (slow ones included).
    pub successful_calls: u64,
    /// Calls recorded as failures (lumped ones included).
    pub failed_calls: u64,
    /// Calls recorded as slow (successful or not): `slow_successful_calls + slow_failed_calls`.
    pub slow_calls: u64,
    /// Successful calls that were slow.
    pub slow_successful_calls: u64,
    /// Failed calls that were slow.
    pub slow_failed_calls: u64,
    /// Calls whose outcome was ignored (failures of a kind weighing 0 included).
    pub ignored_calls: u64,
    /// Failures by the kind their classifier gave.
    pub failures_by_kind: KindCounts,
    /// Failures lumped into an earlier one (`lumping_interval`).
    pub lumped_failures: u64,
    /// The current run of failures since the last success or state change (a weighted
    /// failure adds its weight; a lumped one adds nothing: it counts once with the failure it
    /// was lumped into). It counts up to 1,048,575, above every `consecutive_failures` limit a
    /// configuration may set, and stays there (a MetricsOnly breaker's run can go on for ever).
    pub consecutive_failures: u64,
    /// The current run of successes since the last failure (lumped ones included) or state
    /// change (approximate while results race each other).
    pub consecutive_successes: u64,
    /// Calls the breaker refused: `rejections.total()`.
    pub rejected_calls: u64,
    /// Calls the breaker refused, by state.
    pub rejections: Rejections,
    /// The current half-open round.
    pub probes: ProbeCounts,
    /// Results discarded because their generation (or probe lease) was old.
    pub stale_results: u64,
    /// Permits dropped without a result.
    pub abandoned_permits: u64,
    /// Probe leases that expired and were reclaimed.
    pub expired_probes: u64,
    /// Transitions so far.
    pub transitions: u64,
    /// Probes in flight now.
    pub probes_in_flight: u32,
    /// Time spent Open or ForcedOpen.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration::serde"))]
    pub time_open: Duration,
    /// Time spent HalfOpen.
    #[cfg_attr(feature = "serde", serde(with = "crate::duration::serde"))]
    pub time_half_open: Duration,
    /// Time since the breaker entered its current state (since its creation when it never
    /// left Closed).
    #[cfg_attr(feature = "serde", serde(with = "crate::duration::serde"))]
    pub time_in_state: Duration,
    /// Listener panics caught.
    pub listener_panics: u64,
    /// Open-wait function panics caught (the configured wait applied instead; see
    /// [`BreakerConfigBuilder::open_duration_fn`](crate::BreakerConfigBuilder::open_duration_fn)).
    pub open_wait_panics: u64,
}

impl<C: Clock> CircuitBreaker<C> {
    /// A snapshot of the state and counters.
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics()
    }

    /// Approximate bytes held by this breaker: the shared part, the window's heap, the name
    /// and, once allocated, the part transitions need. A configuration shared with other
    /// breakers (one `Arc<BreakerConfig>` passed to each) is not counted.
    pub fn memory_bytes(&self) -> usize {
        let inner = &*self.inner;
        // A configuration counts when this breaker holds every reference to it.
        let held = |c: &Arc<BreakerConfig>, refs: usize| {
            if Arc::strong_count(c) <= refs {
                std::mem::size_of::<BreakerConfig>()
            } else {
                0
            }
        };
        let (own_config, cold) = match inner.cold.get() {
            None => (held(&inner.config, 1), 0),
            Some(cold) => {
                let core = lock(&cold.core);
                let configs = if Arc::ptr_eq(&inner.config, &core.config) {
                    held(&inner.config, 2)
                } else {
                    held(&inner.config, 1) + held(&core.config, 1)
                };
                (
                    configs,
                    std::mem::size_of::<Cold>() + core.round.heap_bytes(),
                )
            }
        };
        std::mem::size_of::<Inner<C>>()
            + inner.lanes.as_ref().map_or(0, |l| {
                std::mem::size_of::<Lanes>() + std::mem::size_of_val::<[PaddedLane]>(&l.0)
            })
            + inner.window.heap_bytes()
            + inner.name.len()
            + own_config
            + cold
    }
}

impl<C: Clock> Inner<C> {
    fn metrics(&self) -> Metrics {
        let r = Ordering::Relaxed;
        // The clock first: no lock is held while it is read.
        let now = self.now();
        let sum = |f: fn(&super::Lane) -> &AtomicU64| self.lanes().map(|l| f(l).load(r)).sum();
        let rejections = Rejections {
            open: sum(|l| &l.rejected[0]),
            half_open: self.cold.get().map_or(0, |c| c.half_open_rejected.load(r)),
            forced_open: sum(|l| &l.rejected[1]),
            ramping_up: self.cold.get().map_or(0, |c| c.ramp.rejected.load(r)),
        };
        let slow_successful_calls = sum(|l| &l.slow_successes);
        let slow_failed_calls = sum(|l| &l.slow_failures);
        let mut m = Metrics {
            state: State::Closed,
            generation: 0,
            window: WindowSnapshot::default(),
            failure_rate: None,
            slow_call_rate: None,
            total_duration: None,
            mean_duration: None,
            successful_calls: sum(|l| &l.successes),
            failed_calls: sum(|l| &l.failures),
            slow_calls: slow_successful_calls + slow_failed_calls,
            slow_successful_calls,
            slow_failed_calls,
            ignored_calls: sum(|l| &l.ignored),
            failures_by_kind: KindCounts::default(),
            lumped_failures: 0,
            consecutive_failures: 0,
            consecutive_successes: 0,
            rejected_calls: rejections.total(),
            rejections,
            probes: ProbeCounts::default(),
            stale_results: 0,
            abandoned_permits: sum(|l| &l.abandoned),
            expired_probes: 0,
            transitions: 0,
            probes_in_flight: 0,
            time_open: Duration::ZERO,
            time_half_open: Duration::ZERO,
            time_in_state: Duration::ZERO,
            listener_panics: 0,
            open_wait_panics: 0,
        };
        // The word first: if the cold part is missing after it was read, no transition had
        // happened by then (Closed, generation 0, no time elsewhere); if it exists, the word is
        // read again under the core lock, consistent with the core's figures.
        let mut word = self.word();
        let core = self.cold.get().map(|cold| {
            m.stale_results = cold.stale.load(r);
            m.expired_probes = cold.expired_probes.load(r);
            m.listener_panics = cold.hub.listener_panics.load(r);
            m.open_wait_panics = cold.open_wait_panics.load(r);
            m.lumped_failures = cold.lumped.load(r);
            m.failures_by_kind = KindCounts(std::array::from_fn(|i| cold.kind_failures[i].load(r)));
            let core = lock(&cold.core);
            word = self.word();
            core
        });
        (m.state, m.generation) = (word.state(), word.generation());
        let closed_generation = self.closed_generation.load(Ordering::Acquire);
        m.window = self.snapshot_of(closed_generation, now);
        let min = u64::from(self.hot.minimum_calls.load(r));
        if crate::rules::minimum_reached(m.window.calls, min) {
            m.failure_rate = Some(m.window.failure_rate());
        }
        if crate::rules::minimum_reached(m.window.total(), min) {
            m.slow_call_rate = Some(m.window.slow_rate());
        }
        if let Some(d) = self.window.durations(closed_generation, now) {
            let us = |n: u64| Duration::from_micros(n);
            if d.calls == 0 || m.window.calls == 0 {
                m.total_duration = Some(Duration::ZERO);
            } else {
                let mean = d.micros / d.calls;
                m.mean_duration = Some(us(mean));
                // A time bucket whose durations were halved keeps their mean, not their sum.
                m.total_duration = Some(us(if d.calls == m.window.calls {
                    d.micros
                } else {
                    mean.saturating_mul(m.window.calls)
                }));
            }
        }
        m.consecutive_failures = self.hot.failure_run(word.generation());
        if m.consecutive_failures == 0 {
            m.consecutive_successes = m
                .successful_calls
                .saturating_sub(self.hot.success_mark.load(r));
        }
        // Without the cold part the breaker never left Closed: in it since its creation.
        m.time_in_state =
            Duration::from_nanos(now.saturating_sub(self.closed_since.load(Ordering::Relaxed)));
        if let Some(core) = core {
            let current = now.saturating_sub(core.entered_at);
            m.time_in_state = Duration::from_nanos(current);
            let time_in =
                |s: State| core.time_in[s as usize] + if word.state() == s { current } else { 0 };
            m.transitions = core.transitions;
            if word.state() == State::HalfOpen {
                let round = &core.round;
                let c = round.counts;
                m.probes_in_flight = round.in_flight();
                m.probes = ProbeCounts {
                    admitted: round.admitted,
                    in_flight: m.probes_in_flight,
                    succeeded: c.results - c.failures,
                    failed: c.failures,
                    slow: c.slow,
                };
            }
            m.time_open = Duration::from_nanos(time_in(State::Open) + time_in(State::ForcedOpen));
            m.time_half_open = Duration::from_nanos(time_in(State::HalfOpen));
        }
        m
    }
}
