//! A concurrency gate in the style of Envoy's cluster circuit breakers.
//!
//! # A gate, not a state machine
//!
//! Envoy's `circuit_breakers` are not breakers in the sense of this crate's core: they keep no
//! window and no state, they never probe. They are ceilings on concurrency — requests in
//! flight, requests pending, retries in flight — and a request over a ceiling is refused *at
//! once*, with a counter bumped, instead of waiting. That is their point: a gate sheds the
//! excess in nanoseconds and never builds a queue, so it caps the damage a slow dependency can
//! do to the caller's own resources (Little's law: in flight = rate × latency, so when latency
//! grows a hundredfold, so does the demand for slots).
//!
//! The ceilings only protect if they are sized from the traffic: a limit of 1024 (Envoy's
//! default) on a dependency that peaks at 30 concurrent calls never triggers. Size
//! `max_requests` from the peak rate times the latency you are willing to wait for.
//!
//! # The limits
//!
//! | limit | refuses | counter | gauge |
//! |---|---|---|---|
//! | `max_requests` | a request when that many are in flight | `upstream_rq_overflow` | `remaining_rq` |
//! | `max_pending` | a request that would wait when that many already wait | `upstream_rq_pending_overflow` | `remaining_pending` |
//! | `max_retries` | a retry when that many retries are in flight | `upstream_rq_retry_overflow` | `remaining_retries` |
//!
//! With a retry budget configured, the retry limit is not fixed but
//! `max(min_retry_concurrency, budget_percent × (active + pending))`, so retries scale with the
//! traffic instead of being sized once (and the fixed `max_retries` is ignored, as in Envoy).
//!
//! Slots are taken with [`Gate::try_request`], [`Gate::try_pending`] and [`Gate::try_retry`],
//! and held by a [`GateGuard`] that releases its slot when dropped, so a cancelled call never
//! leaks one.
//!
//! ```
//! use tripline_policies::gate::{Gate, GateConfig, Limit};
//!
//! let gate = Gate::new(GateConfig::builder().max_requests(2).max_pending(0).max_retries(1).build()?);
//! let a = gate.try_request()?;
//! let b = gate.try_request()?;
//! assert_eq!(gate.try_request().unwrap_err().limit(), Limit::Requests);
//! assert_eq!(gate.overflows().upstream_rq_overflow, 1);
//! assert_eq!(gate.remaining().requests, 0);
//! drop((a, b));
//! assert_eq!(gate.remaining().requests, 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! With the `tower` feature, [`GateLayer`] puts a gate in front of a service; a retry layer
//! given the same gate ([`RetryLayer::gate`](crate::retry::RetryLayer::gate)) takes a retry
//! slot for each retry.

pub mod error;
#[cfg(feature = "tower")]
pub mod future;
#[cfg(feature = "tower")]
mod layer;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tripline::ConfigError;

pub use error::{GateOverflow, Limit};
#[cfg(feature = "tower")]
pub use layer::GateLayer;

/// The largest value any limit may take.
pub const MAX_LIMIT: u32 = 1 << 30;

/// The limits of a [`Gate`]. Defaults are Envoy's: 1024 requests, 1024 pending, 3 retries, no
/// retry budget.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GateConfig {
    max_requests: u32,
    max_pending: u32,
    max_retries: u32,
    retry_budget: Option<(f64, u32)>,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            max_requests: 1024,
            max_pending: 1024,
            max_retries: 3,
            retry_budget: None,
        }
    }
}

impl GateConfig {
    /// A builder starting from Envoy's defaults.
    pub fn builder() -> GateConfigBuilder {
        GateConfigBuilder(Self::default())
    }

    /// Requests in flight allowed.
    pub fn max_requests(&self) -> u32 {
        self.max_requests
    }

    /// Requests waiting allowed.
    pub fn max_pending(&self) -> u32 {
        self.max_pending
    }

    /// Retries in flight allowed when no retry budget is set.
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The retry budget, `(budget_percent, min_retry_concurrency)`, if set.
    pub fn retry_budget(&self) -> Option<(f64, u32)> {
        self.retry_budget
    }
}

/// Builds a [`GateConfig`], checking every value.
#[derive(Clone, Copy, Debug)]
pub struct GateConfigBuilder(GateConfig);

impl GateConfigBuilder {
    /// Requests in flight allowed, in `[1, 2³⁰]`. Default 1024.
    pub fn max_requests(mut self, n: u32) -> Self {
        self.0.max_requests = n;
        self
    }

    /// Requests waiting allowed, in `[0, 2³⁰]`. Default 1024.
    pub fn max_pending(mut self, n: u32) -> Self {
        self.0.max_pending = n;
        self
    }

    /// Retries in flight allowed, in `[0, 2³⁰]`. Default 3. Ignored when a retry budget is set.
    pub fn max_retries(mut self, n: u32) -> Self {
        self.0.max_retries = n;
        self
    }

    /// Limits retries in flight to `max(min_retry_concurrency, budget_percent × (active +
    /// pending))`; Envoy's defaults are 20% and 3. `budget_percent` in `[0, 100]`,
    /// `min_retry_concurrency` in `[0, 2³⁰]`.
    pub fn retry_budget(mut self, budget_percent: f64, min_retry_concurrency: u32) -> Self {
        self.0.retry_budget = Some((budget_percent, min_retry_concurrency));
        self
    }

    /// The configuration.
    ///
    /// ```
    /// use tripline_policies::gate::GateConfig;
    ///
    /// let err = GateConfig::builder().retry_budget(120.0, 3).build().unwrap_err();
    /// assert_eq!(err.to_string(), "retry_budget.budget_percent must be in [0, 100], got 120");
    /// let err = GateConfig::builder().max_requests(0).build().unwrap_err();
    /// assert_eq!(err.to_string(), "max_requests must be in [1, 1073741824], got 0");
    /// ```
    pub fn build(self) -> Result<GateConfig, ConfigError> {
        let c = self.0;
        if !(1..=MAX_LIMIT).contains(&c.max_requests) {
            return Err(ConfigError::new(
                "max_requests",
                c.max_requests,
                format!("in [1, {MAX_LIMIT}]"),
            ));
        }
        for (field, v) in [
            ("max_pending", c.max_pending),
            ("max_retries", c.max_retries),
        ] {
            if v > MAX_LIMIT {
                return Err(ConfigError::new(field, v, format!("in [0, {MAX_LIMIT}]")));
            }
        }
        if let Some((percent, min)) = c.retry_budget {
            if !(0.0..=100.0).contains(&percent) {
                return Err(ConfigError::new(
                    "retry_budget.budget_percent",
                    percent,
                    "in [0, 100]",
                ));
            }
            if min > MAX_LIMIT {
                return Err(ConfigError::new(
                    "retry_budget.min_retry_concurrency",
                    min,
                    format!("in [0, {MAX_LIMIT}]"),
                ));
            }
        }
        Ok(c)
    }
}

/// Slots left under each limit now: Envoy's `remaining_rq`, `remaining_pending` and
/// `remaining_retries` gauges. Exact whenever no slot is changing hands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Remaining {
    /// Requests that may still start.
    pub requests: u32,
    /// Requests that may still wait.
    pub pending: u32,
    /// Retries that may still start.
    pub retries: u32,
}

/// Calls refused by each limit since the gate was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Overflows {
    /// Refused by `max_requests`.
    pub upstream_rq_overflow: u64,
    /// Refused by `max_pending`.
    pub upstream_rq_pending_overflow: u64,
    /// Refused by the retry limit.
    pub upstream_rq_retry_overflow: u64,
}

#[derive(Debug)]
struct Inner {
    config: GateConfig,
    budget_ppm: Option<(u64, u32)>,
    active: AtomicU32,
    pending: AtomicU32,
    retries: AtomicU32,
    rq_overflow: AtomicU64,
    pending_overflow: AtomicU64,
    retry_overflow: AtomicU64,
}

/// A concurrency gate shared by every call to one dependency. Cloning is cheap; clones share
/// the counts. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct Gate {
    inner: Arc<Inner>,
}

impl Default for Gate {
    /// A gate with Envoy's default limits.
    fn default() -> Self {
        Self::new(GateConfig::default())
    }
}

fn take(slot: &AtomicU32, max: u32) -> bool {
    slot.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
        (n < max).then_some(n + 1)
    })
    .is_ok()
}

impl Gate {
    /// A gate with the given limits.
    pub fn new(config: GateConfig) -> Self {
        let budget_ppm = config
            .retry_budget
            .map(|(p, min)| ((p * 10_000.0).round() as u64, min));
        Self {
            inner: Arc::new(Inner {
                config,
                budget_ppm,
                active: AtomicU32::new(0),
                pending: AtomicU32::new(0),
                retries: AtomicU32::new(0),
                rq_overflow: AtomicU64::new(0),
                pending_overflow: AtomicU64::new(0),
                retry_overflow: AtomicU64::new(0),
            }),
        }
    }

    /// The limits.
    pub fn config(&self) -> GateConfig {
        self.inner.config
    }

    /// Takes a request slot, or refuses at once (counting `upstream_rq_overflow`).
    pub fn try_request(&self) -> Result<GateGuard, GateOverflow> {
        let i = &*self.inner;
        if take(&i.active, i.config.max_requests) {
            Ok(self.guard(Limit::Requests))
        } else {
            i.rq_overflow.fetch_add(1, Ordering::Relaxed);
            Err(GateOverflow {
                limit: Limit::Requests,
                max: i.config.max_requests,
            })
        }
    }

    /// Takes a pending slot for a request about to wait (for a bulkhead's slot, a pooled
    /// connection), or refuses at once (counting `upstream_rq_pending_overflow`). Turn it into
    /// a request slot with [`GateGuard::activate`] when the wait ends.
    pub fn try_pending(&self) -> Result<GateGuard, GateOverflow> {
        let i = &*self.inner;
        if take(&i.pending, i.config.max_pending) {
            Ok(self.guard(Limit::Pending))
        } else {
            i.pending_overflow.fetch_add(1, Ordering::Relaxed);
            Err(GateOverflow {
                limit: Limit::Pending,
                max: i.config.max_pending,
            })
        }
    }

    /// Takes a retry slot, held while the retry is in flight (on top of the retry's request
    /// slot), or refuses at once (counting `upstream_rq_retry_overflow`).
    ///
    /// ```
    /// use tripline_policies::gate::{Gate, GateConfig};
    ///
    /// // 25% of (active + pending), at least 1.
    /// let gate = Gate::new(GateConfig::builder().retry_budget(25.0, 1).build()?);
    /// let requests: Vec<_> = (0..8).map(|_| gate.try_request().unwrap()).collect();
    /// assert_eq!(gate.retry_limit(), 2);
    /// let r1 = gate.try_retry()?;
    /// let r2 = gate.try_retry()?;
    /// assert!(gate.try_retry().is_err());
    /// assert_eq!(gate.overflows().upstream_rq_retry_overflow, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_retry(&self) -> Result<GateGuard, GateOverflow> {
        let i = &*self.inner;
        let max = self.retry_limit();
        if take(&i.retries, max) {
            Ok(self.guard(Limit::Retries))
        } else {
            i.retry_overflow.fetch_add(1, Ordering::Relaxed);
            Err(GateOverflow {
                limit: Limit::Retries,
                max,
            })
        }
    }

    /// The retry limit now: `max_retries`, or with a budget `max(min_retry_concurrency,
    /// ⌊budget_percent × (active + pending) / 100⌋)`.
    pub fn retry_limit(&self) -> u32 {
        let i = &*self.inner;
        match i.budget_ppm {
            None => i.config.max_retries,
            Some((ppm, min)) => {
                let base = u64::from(self.active()) + u64::from(self.pending());
                let budget = base * ppm / 1_000_000;
                (budget.min(u64::from(MAX_LIMIT)) as u32).max(min)
            }
        }
    }

    /// Requests in flight.
    pub fn active(&self) -> u32 {
        self.inner.active.load(Ordering::Acquire)
    }

    /// Requests waiting.
    pub fn pending(&self) -> u32 {
        self.inner.pending.load(Ordering::Acquire)
    }

    /// Retries in flight.
    pub fn retries(&self) -> u32 {
        self.inner.retries.load(Ordering::Acquire)
    }

    /// Slots left under each limit.
    pub fn remaining(&self) -> Remaining {
        let c = &self.inner.config;
        Remaining {
            requests: c.max_requests.saturating_sub(self.active()),
            pending: c.max_pending.saturating_sub(self.pending()),
            retries: self.retry_limit().saturating_sub(self.retries()),
        }
    }

    /// Calls refused by each limit so far.
    pub fn overflows(&self) -> Overflows {
        let i = &*self.inner;
        Overflows {
            upstream_rq_overflow: i.rq_overflow.load(Ordering::Relaxed),
            upstream_rq_pending_overflow: i.pending_overflow.load(Ordering::Relaxed),
            upstream_rq_retry_overflow: i.retry_overflow.load(Ordering::Relaxed),
        }
    }

    fn guard(&self, limit: Limit) -> GateGuard {
        GateGuard {
            gate: self.clone(),
            limit,
        }
    }
}

/// A slot under one of the gate's limits, given back when dropped.
#[must_use = "the slot is released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct GateGuard {
    gate: Gate,
    limit: Limit,
}

impl GateGuard {
    /// The limit this slot counts against.
    pub fn limit(&self) -> Limit {
        self.limit
    }

    /// Turns a pending slot into a request slot (the wait is over): the pending slot is given
    /// back either way, and the request slot may be refused. A guard that is not pending is
    /// returned as it is.
    ///
    /// ```
    /// use tripline_policies::gate::{Gate, GateConfig, Limit};
    ///
    /// let gate = Gate::new(GateConfig::builder().max_requests(1).max_pending(1).build()?);
    /// let waiting = gate.try_pending()?;
    /// assert_eq!(gate.remaining().pending, 0);
    /// let active = waiting.activate()?;
    /// assert_eq!((gate.pending(), gate.active()), (0, 1));
    /// assert_eq!(active.limit(), Limit::Requests);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn activate(self) -> Result<GateGuard, GateOverflow> {
        if self.limit != Limit::Pending {
            return Ok(self);
        }
        let gate = self.gate.clone();
        drop(self);
        gate.try_request()
    }
}

impl Drop for GateGuard {
    fn drop(&mut self) {
        let i = &*self.gate.inner;
        let slot = match self.limit {
            Limit::Requests => &i.active,
            Limit::Pending => &i.pending,
            Limit::Retries => &i.retries,
        };
        slot.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(feature = "tower")]
mod service {
    use std::task::{Context, Poll};

    use tower_service::Service;

    use super::Gate;
    use super::future::ResponseFuture;
    use crate::BoxError;

    /// A service behind a [`Gate`]: each call takes a request slot for as long as its response
    /// is pending, or fails at once with a [`GateOverflow`](super::GateOverflow) without
    /// calling the inner service. Made by [`GateLayer`](super::GateLayer).
    ///
    /// Readiness is the inner service's: the gate itself never makes a caller wait. Nothing
    /// is ever *pending* in this service (a tower call only starts once the inner service is
    /// ready); the [pipeline](crate::pipeline) counts a call waiting for its bulkhead slot as
    /// pending, and [`Gate::try_pending`](super::Gate::try_pending) lets other code do so.
    #[derive(Clone, Debug)]
    pub struct GateService<S> {
        inner: S,
        gate: Gate,
    }

    impl<S> GateService<S> {
        /// `inner` behind `gate`.
        pub const fn new(inner: S, gate: Gate) -> Self {
            Self { inner, gate }
        }

        /// The gate.
        pub fn gate(&self) -> &Gate {
            &self.gate
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

    impl<S, Req> Service<Req> for GateService<S>
    where
        S: Service<Req>,
        S::Error: Into<BoxError>,
    {
        type Response = S::Response;
        type Error = BoxError;
        type Future = ResponseFuture<S::Future>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            self.inner.poll_ready(cx).map_err(Into::into)
        }

        fn call(&mut self, req: Req) -> Self::Future {
            match self.gate.try_request() {
                Ok(guard) => ResponseFuture::called(self.inner.call(req), guard),
                Err(overflow) => ResponseFuture::overflow(overflow),
            }
        }
    }
}

#[cfg(feature = "tower")]
pub use service::GateService;
