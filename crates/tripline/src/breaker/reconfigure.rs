//! A live reconfiguration, and what a registry asks of its breakers: to follow its record
//! (the configuration and the operator override in force for the key), and whether a breaker
//! may be evicted or rebuilt.
//!
//! # The registry's record and the breaker
//! A registry keeps one record of what is in force: its active configuration and its table of
//! operator overrides. A breaker follows the record through [`Inner::follow`], which reads the
//! record *under the breaker's core lock* and applies it there. Two syncs of one breaker are
//! therefore applied in the order they read, and the last one applies the newest record; no
//! version numbers are compared and no copy of the override is kept beside the breaker: the
//! override the breaker holds ([`Core::hold`](super::transition::Core)) is the only one, and
//! every operator call that would leave it is refused under the same lock.

use std::sync::Arc;

use super::{CircuitBreaker, Inner};
use crate::clock::{Clock, nanos};
use crate::config::BreakerConfig;
use crate::error::ConfigError;
use crate::event::EventKind;
use crate::state::State;
use crate::sync::{Ordering, lock};

use super::transition::{Core, OpenWait};

/// What [`Inner::follow`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Followed {
    /// The breaker changed state (the override moved it).
    pub(crate) moved: bool,
    /// The configuration changed in place.
    pub(crate) reconfigured: bool,
    /// The configuration in force has another window shape: the breaker must be rebuilt to
    /// follow it (it keeps its own meanwhile).
    pub(crate) new_shape: bool,
}

impl<C: Clock> CircuitBreaker<C> {
    /// Replaces the configuration, keeping state, generation and window. The window's shape
    /// (kind, size, length, bucket, stripes, call durations) is fixed for a breaker's life: a
    /// configuration that changes it is refused, and the breaker is left untouched. A Closed
    /// breaker's window is judged at once by the new thresholds (lower ones may trip it then),
    /// a waiting timer task (`run_timer`, feature `tokio`) follows the new schedule, and a
    /// configuration that compares call times against durations finer than the clock's
    /// readings resolve makes the breaker read the clock's precise readings from then on
    /// ([`Clock::precise_now`]).
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker};
    /// let breaker = CircuitBreaker::new("db", BreakerConfig::default());
    /// let looser = breaker.config().to_builder().failure_rate_threshold(80.0).build()?;
    /// breaker.reconfigure(looser)?;
    /// let other_shape = BreakerConfig::builder().count_window(10).minimum_calls(5).build()?;
    /// assert_eq!(breaker.reconfigure(other_shape).unwrap_err().field(), "window");
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn reconfigure(&self, config: impl Into<Arc<BreakerConfig>>) -> Result<(), ConfigError> {
        let config = config.into();
        config.validate()?;
        let inner = &*self.inner;
        // The clock is user code: read before the core lock.
        let (now, resolution) = (inner.now(), inner.clock.resolution());
        let cold = inner.cold();
        {
            let mut core = lock(&cold.core);
            if config.counted_failures() != core.config.counted_failures()
                && config.window == core.config.window
            {
                return Err(ConfigError::new(
                    "failure_count.failures",
                    config.counted_failures(),
                    format!(
                        "the live breaker's {} (0: the rule off), fixed for its life; build a new breaker to change it",
                        core.config.counted_failures()
                    ),
                ));
            }
            if !config.same_shape(&core.config) {
                return Err(ConfigError::new(
                    "window",
                    config.shape(),
                    format!(
                        "the live breaker's shape, {}; build a new breaker to change it",
                        core.config.shape()
                    ),
                ));
            }
            inner.reconfigure_locked(&mut core, config, now, resolution);
        }
        inner.drain(cold);
        Ok(())
    }

    /// Whether a registry may drop this breaker at `now`: Closed, nothing bad in its window, no
    /// ramp running and no open backoff it still remembers, no call in flight through it, and
    /// no handle held outside the registry (`holders` is how many handles the caller itself
    /// holds).
    pub(crate) fn evictable(&self, holders: usize, now: u64) -> bool {
        if self.in_use(holders) || self.state() != State::Closed {
            return false;
        }
        let snap = self.inner.snapshot(now);
        if snap.failures != 0 || snap.slow_calls != 0 || snap.in_flight_slow != 0 {
            return false;
        }
        !self.remembers_recovery(now)
    }

    /// Whether this Closed breaker remembers more than its window at `now`: a ramp after
    /// recovery still running, or, with open backoff, a recent open period that makes the next
    /// one longer. A fresh breaker in its place would forget both.
    pub(crate) fn remembers_recovery(&self, now: u64) -> bool {
        let inner = &*self.inner;
        let Some(cold) = inner.cold.get() else {
            return false;
        };
        let generation = inner.word().generation();
        if inner.hot.ramping.load(Ordering::Relaxed) && cold.ramp.running(generation, now) {
            return true;
        }
        let core = lock(&cold.core);
        core.ever_opened
            && core.config.open_backoff.is_some_and(|b| {
                now.saturating_sub(inner.closed_since.load(Ordering::Relaxed))
                    < nanos(b.healthy_after)
            })
    }
}

impl<C: Clock> Inner<C> {
    /// Applies `config` (of the same shape) under the core lock: the round's size, the
    /// in-flight cohorts' width, the thresholds, a `Reconfigured` event, and an evaluation of a
    /// Closed breaker's window by the new thresholds. `now` and the clock's `resolution` were
    /// read before the lock (a clock is user code).
    fn reconfigure_locked(
        &self,
        core: &mut Core,
        config: Arc<BreakerConfig>,
        now: u64,
        resolution: std::time::Duration,
    ) {
        let word = self.word();
        if word.state() == State::HalfOpen {
            // Probes already out keep their leases (and count against the new number); the
            // next claim decides a round that already has the results the new number asks for.
            core.round.resize(config.half_open_calls);
        }
        if config.slow_call_duration != core.config.slow_call_duration {
            let slow = nanos(config.slow_call_duration);
            self.lane.inflight.set_slow_call_duration(slow, now);
            for lane in self.striped() {
                lane.inflight.set_slow_call_duration(slow, now);
            }
            // The acquire-time check follows the new cohort width from now.
            self.next_closed_check.store(
                now.saturating_add(self.lane.inflight.width()),
                Ordering::Relaxed,
            );
        }
        if config.interval != core.config.interval
            && matches!(word.state(), State::Closed | State::MetricsOnly)
        {
            // A new interval counts from the change.
            let end = super::transition::interval_end(&config, now);
            self.interval_end.store(end, Ordering::Relaxed);
            let next = self.next_closed_check.load(Ordering::Relaxed).min(end);
            self.next_closed_check.store(next, Ordering::Relaxed);
        }
        self.cold()
            .lump_nanos
            .store(config.lumping_interval.map_or(0, nanos), Ordering::Relaxed);
        if config.ramp_up.is_none() {
            // A ramp in progress ends with the setting.
            self.hot.ramping.store(false, Ordering::Relaxed);
        }
        self.hot.set(&config, resolution);
        core.config = config;
        self.cold().hub.push(
            now,
            &self.name,
            EventKind::Reconfigured {
                generation: word.generation(),
            },
        );
        // Lower thresholds may condemn the window as it stands: evaluate it now rather than
        // wait for the next failure.
        if word.state() == State::Closed {
            let events = crate::rules::Fired {
                failure_count: self.failure_count_at(word.generation(), now),
                ..Default::default()
            };
            if let Some((reason, snap)) = self.trip_reason(word.generation(), now, events, true) {
                self.transition(core, word, State::Open, reason, snap, now, OpenWait::RULES);
            }
        }
        // The new configuration may schedule what the old one did not (automatic transition
        // turned on, a half-open max wait added): a timer waiting for the next transition
        // looks again.
        #[cfg(feature = "tokio")]
        self.cold().notify.notify_one();
    }

    /// Follows a registry's record: `read` (called under the core lock) gives the
    /// configuration and the operator override in force for this breaker. The configuration
    /// is applied in place when only its shape is the same (else the result says it needs a
    /// rebuild), the override is held. See the module docs for why the read happens under the
    /// lock.
    pub(crate) fn follow(
        &self,
        read: impl Fn() -> (Arc<BreakerConfig>, Option<State>),
    ) -> Followed {
        if self.cold.get().is_none() {
            // A breaker that has never left Closed, never been reconfigured and holds nothing
            // has nothing to do when the record asks nothing of it: no transition part is
            // allocated for it (most of a registry's keys). The second look orders this with a
            // sync that allocates the part meanwhile: that sync read the record under the lock
            // after this one read it, or this one sees the part and takes the lock too.
            let (config, hold) = read();
            if hold.is_none()
                && (Arc::ptr_eq(&config, &self.config) || *config == *self.config)
                && self.cold.get().is_none()
            {
                return Followed::default();
            }
        }
        // The clock is user code: read before the core lock.
        let (now, resolution) = (self.now(), self.clock.resolution());
        let cold = self.cold();
        let done = {
            let mut core = lock(&cold.core);
            let (config, hold) = read();
            let mut done = Followed::default();
            if !Arc::ptr_eq(&config, &core.config) && *config != *core.config {
                if config.same_shape(&core.config) {
                    self.reconfigure_locked(&mut core, config, now, resolution);
                    done.reconfigured = true;
                } else {
                    done.new_shape = true;
                }
            }
            done.moved = self.apply_hold(&mut core, hold, now);
            done
        };
        self.drain(cold);
        done
    }
}
