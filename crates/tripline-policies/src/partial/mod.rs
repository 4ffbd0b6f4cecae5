//! Partial opening: reject a share of calls in proportion to the excess error rate, instead of
//! all of them.
//!
//! # Why not the classic breaker?
//!
//! A breaker aggregates outcomes into one verdict, and the verdict is binary. If one shard in
//! ten is hot, the window sees a 10 % error rate; a breaker tuned to trip at that rate opens
//! and short-circuits **all** the traffic, including the 90 % that would have succeeded (Marc
//! Brooker: circuit breakers can misinterpret a partial failure as a total failure). Shopify's
//! Semian answers with an *adaptive* circuit breaker: a PID controller that moves a rejection
//! rate between 0 and 1, so a partial failure is met with a partial opening, and a total
//! outage still opens it (almost) fully. This module is that controller, on an injected clock.
//!
//! # How it works (Semian's equations and defaults)
//!
//! Every `interval` (1 s) the controller reads the error rate over the last `window` (10 s) of
//! admitted calls (rejected calls are not counted: they have no outcome), compares it with an
//! **ideal error rate** and moves the rejection rate:
//!
//! ```text
//! Δ  = error_rate − ideal          (0 when within the dead zone, ideal × dead_zone_ratio above)
//! P  = Δ − (1 − Δ) × rejection_rate
//! I += P × dt                      (clamped to [integral_lower_cap, integral_upper_cap])
//! rejection_rate += kp × P + ki × I + kd × (P − P_previous) / dt      (clamped to [0, 1])
//! ```
//!
//! `P` says "open more while the error rate exceeds what the rejections already remove". For a
//! constant error rate `e` the rejection rate settles where `P = 0`: `r = Δ / (1 − Δ)` with `Δ =
//! e − ideal` (`tests/partial_props.rs` checks the convergence): for a sustained 20 % error
//! rate and the initial ideal of 5 %, about 17.6 % of calls are rejected, where a breaker
//! that trips on it rejects nearly all of them (`tests/partial.rs` compares the two over the
//! same outcomes). The ideal error rate is learned by Semian's exponential smoother: it starts
//! at `initial_error_rate` (5 %), ignores observations above `ideal_error_rate_cap` (10 %: a
//! 20 % error rate is an incident, not a baseline), converges down fast and up slowly, and
//! more slowly still after 30 minutes.
//!
//! Each call is rejected with the current rejection rate, drawn from an injected random
//! generator; the refusal is a [`PartiallyOpen`] with the rate.
//!
//! Two properties of Semian's design are worth knowing, and pinned by the tests. The ideal
//! rate converges down fast and up slowly, so under a noisy error rate it settles below the
//! rate's mean, and part of the noise clears the dead zone: a steady 1 % error rate at 100
//! calls a second has about 0.25 % of its calls rejected. And the loop biases its own
//! measure slightly upwards: a second of many errors raises the rejection rate, the seconds
//! after it admit fewer calls, and in the overlapping windows that follow that second weighs
//! more than its share (about +0.01 on the measured rate at a rejection rate of 0.7).
//!
//! # Time, without a thread
//!
//! Semian updates every breaker from one background thread. Here the update runs from the
//! first [`try_acquire`](PartialBreaker::try_acquire) or record after an interval boundary (or
//! from [`tick`](PartialBreaker::tick)), and replays every boundary that passed since, each
//! with the window as it was at that boundary; so the state at any instant is the one a thread
//! ticking exactly on the boundaries would have produced (`tests/partial.rs` checks it).
//! Boundaries are multiples of `interval` on the injected [`Clock`]. After a long quiet spell
//! the controller comes to rest within a few updates (no calls: no errors, the rejection rate
//! falls to 0), and the rest of the spell is applied at once, so a call after a year of quiet
//! costs no more than one after a second. Gains that keep it from resting for 100,000
//! intervals (a very small `ki`) get the rest of the spell in closed form, equal to the
//! boundary-by-boundary result within floating-point rounding.
//!
//! ```
//! use std::time::Duration;
//! use rand::SeedableRng;
//! use tripline::{ManualClock, Outcome};
//! use tripline_policies::partial::{PartialBreaker, PartialConfig};
//!
//! let clock = ManualClock::new();
//! let breaker = PartialBreaker::with_clock_and_rng(
//!     PartialConfig::default(),
//!     clock.clone(),
//!     rand_pcg::Pcg64Mcg::seed_from_u64(7),
//! );
//! // A hot shard: one call in five fails, for a minute, 100 calls a second.
//! for i in 0..6000 {
//!     if let Ok(permit) = breaker.try_acquire() {
//!         permit.record(if i % 5 == 0 { Outcome::Failure } else { Outcome::Success });
//!     }
//!     clock.advance(Duration::from_millis(10));
//! }
//! let r = breaker.rejection_rate();
//! assert!(r > 0.1 && r < 0.3, "{r}"); // partly open, near 0.15 / 0.85
//! # Ok::<(), tripline::ConfigError>(())
//! ```
//!
//! # Where it differs from Semian
//!
//! * An interval with no calls in the window reads as no errors, as in Semian, but is not fed
//!   to the ideal error rate: a quiet night teaches nothing about the baseline.
//! * Updates are replayed lazily on the injected clock (above) rather than run by a thread.
//! * The draw comes from an injected generator, so runs are reproducible.

mod config;
mod controller;
pub mod error;
#[cfg(feature = "tower")]
pub mod future;
#[cfg(feature = "tower")]
mod layer;
#[cfg(feature = "metrics")]
mod metrics;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rand::{RngCore, SeedableRng};
use tripline::{Clock, MonotonicClock, Outcome};

pub use config::{PartialConfig, PartialConfigBuilder};
use controller::Controller;
pub use error::PartiallyOpen;
#[cfg(feature = "tower")]
pub use layer::PartialLayer;
#[cfg(feature = "metrics")]
pub use metrics::PartialMetrics;

use crate::draws::Draws;
use crate::window::Buckets;

const ERRORS: usize = 0;
const SUCCESSES: usize = 1;

/// Most updates replayed one by one in one catch-up; beyond it (reachable only with gains that
/// keep the controller from resting for that long) the quiet boundaries left are applied at
/// once, in closed form ([`controller::Controller::jump`]).
const MAX_REPLAY: u64 = 100_000;

struct State {
    window: Buckets,
    controller: Controller,
    next_update: u64,
    updates: u64,
}

struct Inner {
    config: PartialConfig,
    interval: u64,
    /// Guards the window and the controller (the updates run under it). Never run under it:
    /// the clock (read before it is taken) and the generator (drawn after it is released).
    state: Mutex<State>,
    /// The generator, drawn from with no lock held (it may call back in): see `crate::draws`.
    draws: Draws,
    /// The rejection rate in millionths, read by every acquire without the lock.
    rejection_ppm: AtomicU32,
    /// The next boundary, read by every acquire without the lock.
    next_update: AtomicU64,
    clock: Box<dyn Clock>,
    admitted: AtomicU64,
    rejected: AtomicU64,
}

/// A partially opening breaker shared by every call to one dependency. Cloning is cheap;
/// clones share the controller. See the [module docs](self).
#[derive(Clone)]
pub struct PartialBreaker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PartialBreaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartialBreaker")
            .field("rejection_rate", &self.rejection_rate())
            .finish_non_exhaustive()
    }
}

impl Default for PartialBreaker {
    /// A partial breaker with Semian's defaults, on the production clock.
    fn default() -> Self {
        Self::new(PartialConfig::default())
    }
}

/// The controller's state now.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct PartialSnapshot {
    /// The share of calls rejected, in `[0, 1]`.
    pub rejection_rate: f64,
    /// The error rate over the window at the last update.
    pub error_rate: f64,
    /// The ideal error rate learned so far.
    pub ideal_error_rate: f64,
    /// The last `P`.
    pub p: f64,
    /// The integral (after its clamp).
    pub integral: f64,
    /// The last derivative term.
    pub derivative: f64,
    /// Updates run so far (one per interval boundary passed).
    pub updates: u64,
    /// Calls admitted so far.
    pub admitted: u64,
    /// Calls rejected so far.
    pub rejected: u64,
}

impl PartialBreaker {
    /// A partial breaker on the production clock, drawing from a generator seeded by the
    /// configuration's `seed` (or the OS).
    pub fn new(config: PartialConfig) -> Self {
        Self::with_clock(config, MonotonicClock::new())
    }

    /// A partial breaker on `clock`, drawing from a generator seeded by the configuration's
    /// `seed` (or the OS).
    pub fn with_clock(config: PartialConfig, clock: impl Clock) -> Self {
        let rng = match config.seed() {
            Some(s) => rand_pcg::Pcg64Mcg::seed_from_u64(s),
            None => rand_pcg::Pcg64Mcg::from_os_rng(),
        };
        Self::with_clock_and_rng(config, clock, rng)
    }

    /// A partial breaker on `clock`, drawing from `rng`. Neither runs under a lock of the
    /// breaker, so either may call it (a generator may read its [`snapshot`](Self::snapshot));
    /// a call decided while the generator is in use (by another thread, or from inside it)
    /// draws from the breaker's own spare stream instead of waiting for it.
    pub fn with_clock_and_rng(
        config: PartialConfig,
        clock: impl Clock,
        rng: impl RngCore + Send + 'static,
    ) -> Self {
        let interval = u64::try_from(config.interval.as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        let buckets = (config.window.as_nanos() / u128::from(interval)).max(1) as u32;
        let now = clock.now();
        let next = (now / interval).saturating_add(1).saturating_mul(interval);
        Self {
            inner: Arc::new(Inner {
                config,
                interval,
                state: Mutex::new(State {
                    window: Buckets::new(config.interval, buckets),
                    controller: Controller::new(&config),
                    next_update: next,
                    updates: 0,
                }),
                draws: Draws::new(rng),
                rejection_ppm: AtomicU32::new(0),
                next_update: AtomicU64::new(next),
                clock: Box::new(clock),
                admitted: AtomicU64::new(0),
                rejected: AtomicU64::new(0),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> PartialConfig {
        self.inner.config
    }

    /// Runs every update due by `now`, with the lock held.
    fn catch_up(&self, s: &mut State, now: u64) {
        let i = &*self.inner;
        let mut replayed = 0u64;
        // `u64::MAX` is the end of time: no boundary there or after.
        while s.next_update <= now && s.next_update != u64::MAX {
            let at = s.next_update;
            let [errors, successes] = s.window.totals(at - 1);
            let total = errors + successes;
            if total == 0 && s.controller.at_rest() {
                // Nothing in the window until `now`, and the controller at rest: every update
                // left changes only the integral, in closed form.
                let left = (now - at) / i.interval + 1;
                s.controller.rest(left);
                s.updates += left;
                s.next_update = at.saturating_add(left.saturating_mul(i.interval));
                break;
            }
            let rate = (total > 0).then(|| errors as f64 / total as f64);
            s.controller.update(rate);
            s.updates += 1;
            s.next_update = at.saturating_add(i.interval);
            replayed += 1;
            if replayed >= MAX_REPLAY
                && s.next_update <= now
                && s.window.totals(s.next_update - 1) == [0, 0]
            {
                // The window emptied long ago (it is far shorter than this many intervals):
                // the boundaries left are updates with no call, applied at once.
                let left = (now - s.next_update) / i.interval + 1;
                s.controller.jump(left);
                s.updates += left;
                s.next_update = s
                    .next_update
                    .saturating_add(left.saturating_mul(i.interval));
                break;
            }
        }
        let ppm = (s.controller.rejection_rate * 1_000_000.0).round() as u32;
        i.rejection_ppm.store(ppm, Ordering::Release);
        i.next_update.store(s.next_update, Ordering::Release);
    }

    fn lock_at(&self, now: u64) -> std::sync::MutexGuard<'_, State> {
        let mut s = crate::lock(&self.inner.state);
        if s.next_update <= now {
            self.catch_up(&mut s, now);
        }
        s
    }

    /// Asks to make one call: refused with the current rejection rate, admitted otherwise. The
    /// draw `u`, uniform in `[0, 1)` from 32 random bits, refuses when it is below the rate
    /// (in millionths, compared in integers). No number is drawn, and no lock taken, while the
    /// rate is zero and no update is due.
    pub fn try_acquire(&self) -> Result<PartialPermit, PartiallyOpen> {
        let i = &*self.inner;
        let now = i.clock.now();
        let due = now >= i.next_update.load(Ordering::Acquire);
        if !due && i.rejection_ppm.load(Ordering::Acquire) == 0 {
            i.admitted.fetch_add(1, Ordering::Relaxed);
            return Ok(PartialPermit {
                breaker: self.clone(),
            });
        }
        drop(self.lock_at(now));
        let ppm = i.rejection_ppm.load(Ordering::Acquire);
        if ppm > 0 {
            let u = u64::from(i.draws.with(|rng| rng.next_u32()));
            if u * 1_000_000 < u64::from(ppm) << 32 {
                i.rejected.fetch_add(1, Ordering::Relaxed);
                return Err(PartiallyOpen {
                    rejection_rate: f64::from(ppm) / 1_000_000.0,
                });
            }
        }
        i.admitted.fetch_add(1, Ordering::Relaxed);
        Ok(PartialPermit {
            breaker: self.clone(),
        })
    }

    fn record(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Success => SUCCESSES,
            Outcome::Failure => ERRORS,
            Outcome::Ignored => return,
        };
        let now = self.inner.clock.now();
        let mut s = self.lock_at(now);
        s.window.add(now, counter, 1);
    }

    /// Runs the updates due by now (calls do it themselves; this is for a caller that wants
    /// the rate to move while no call comes).
    pub fn tick(&self) {
        let now = self.inner.clock.now();
        drop(self.lock_at(now));
    }

    /// The share of calls rejected now, in `[0, 1]` (as of the last update: call
    /// [`tick`](Self::tick) first to run the updates due).
    pub fn rejection_rate(&self) -> f64 {
        f64::from(self.inner.rejection_ppm.load(Ordering::Acquire)) / 1_000_000.0
    }

    /// The controller's state, after running the updates due.
    pub fn snapshot(&self) -> PartialSnapshot {
        let now = self.inner.clock.now();
        let s = self.lock_at(now);
        let c = &s.controller;
        PartialSnapshot {
            rejection_rate: c.rejection_rate,
            error_rate: c.error_rate,
            ideal_error_rate: c.ideal.value(),
            p: c.p,
            integral: c.integral,
            derivative: c.derivative,
            updates: s.updates,
            admitted: self.inner.admitted.load(Ordering::Relaxed),
            rejected: self.inner.rejected.load(Ordering::Relaxed),
        }
    }
}

/// A call the partial breaker admitted. Report how it went with [`record`](Self::record); a
/// permit dropped without one (a cancelled call) records nothing.
#[must_use = "record how the call went"]
#[derive(Debug)]
pub struct PartialPermit {
    breaker: PartialBreaker,
}

impl PartialPermit {
    /// Records the call's outcome in the window: a success or a failure (an ignored outcome,
    /// such as a 4xx, records nothing).
    pub fn record(self, outcome: Outcome) {
        self.breaker.record(outcome);
    }
}

#[cfg(feature = "tower")]
mod service {
    use std::task::{Context, Poll};

    use tower_service::Service;
    use tripline::{Classify, ResultClassifier};

    use super::PartialBreaker;
    use super::future::ResponseFuture;
    use crate::BoxError;

    /// A service behind a [`PartialBreaker`]: each call is rejected with the breaker's rate (a
    /// [`PartiallyOpen`](super::PartiallyOpen) error, without calling the inner service), and
    /// an admitted call's result, classified by `K`, is recorded. Refusals by local policies
    /// further in record nothing. Made by [`PartialLayer`](super::PartialLayer).
    #[derive(Clone, Debug)]
    pub struct PartialService<S, K = ResultClassifier> {
        inner: S,
        breaker: PartialBreaker,
        classifier: K,
    }

    impl<S, K> PartialService<S, K> {
        /// `inner` behind `breaker`.
        pub const fn new(inner: S, breaker: PartialBreaker, classifier: K) -> Self {
            Self {
                inner,
                breaker,
                classifier,
            }
        }

        /// The breaker.
        pub fn breaker(&self) -> &PartialBreaker {
            &self.breaker
        }

        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// The inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    }

    impl<S, K, Req> Service<Req> for PartialService<S, K>
    where
        S: Service<Req>,
        S::Error: Into<BoxError>,
        K: Classify<S::Response, BoxError> + Clone,
    {
        type Response = S::Response;
        type Error = BoxError;
        type Future = ResponseFuture<S::Future, K>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            self.inner.poll_ready(cx).map_err(Into::into)
        }

        fn call(&mut self, req: Req) -> Self::Future {
            match self.breaker.try_acquire() {
                Ok(permit) => {
                    ResponseFuture::called(self.inner.call(req), permit, self.classifier.clone())
                }
                Err(e) => ResponseFuture::rejected(e),
            }
        }
    }
}

#[cfg(feature = "tower")]
pub use service::PartialService;
