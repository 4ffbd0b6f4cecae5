//! Priority load shedding: when capacity is short, refuse the least valuable work first.
//!
//! # Why priorities?
//!
//! A bulkhead caps what one dependency can hold, but inside the cap every call is equal: when
//! the exercise catalog turns slow, the workout cards that wait on it fill the pool, and
//! `POST /log-set`, the one action users came for, is refused with them. Load shedding ranks
//! the work instead. Each call carries a [`Priority`] (critical, default, sheddable, or a
//! number in between), and when capacity is short the lowest priorities are refused first:
//! the Google SRE book's rule for criticality ("Handling Overload"), which this module keeps
//! at every instant: **a call is never refused while a call of lower priority would be
//! admitted in the same state.**
//!
//! # Shares: room kept for the calls that matter
//!
//! A slow call holds its slot for as long as it is slow, so a queue alone cannot protect the
//! critical calls: by the time one arrives, sheddable calls may hold every slot for seconds.
//! [`Shares`] keep room instead. A call of priority `p` takes a slot only while fewer than
//! `ceil(capacity × share(p))` calls are in flight (all priorities together, itself
//! excluded); the defaults are 100 % for critical calls, 90 % for default ones and 50 % for
//! sheddable ones, so a flood of sheddable calls can hold at most half the slots and ordinary
//! traffic at most nine tenths, and the last tenth is always there for critical calls.
//! Numeric priorities between the named ones get a share interpolated linearly between
//! theirs. Shares never decrease with the priority (the configuration is checked), which is
//! what makes the rule above hold: if a call of priority `p` is refused, every lower priority
//! is refused too.
//!
//! # The queue: highest priority first
//!
//! With `max_waiting > 0`, a call that cannot take a slot waits, for at most `max_wait`, in a
//! queue served highest priority first and, within a priority, in arrival order. A freed slot
//! goes to the first waiter whose share allows it; no call ever overtakes a waiter of its own
//! or a higher priority. When the queue is full, a call makes room by refusing the newest
//! waiter of the lowest priority, if that priority is below its own
//! ([`Refusal::Evicted`]); otherwise the call is refused ([`Refusal::QueueFull`]).
//!
//! # Fairness: no class is starved once capacity returns
//!
//! Shares are fractions of the *current* capacity, so a class is never locked out for good:
//! whenever the calls in flight fall below its share, it is admitted again, and a waiter's
//! wait is bounded by `max_wait`. Under the [adaptive limiter](crate::limiter) the capacity
//! itself moves, and there a class could be starved for good: the limit only grows while the
//! limiter is busy (at least half full, Netflix's "app-limited" rule), and a class held back by
//! its share does not make it busy. So the limiter counts refused and queued calls as demand:
//! a sample taken while calls were being refused counts as a full limiter, and once latency
//! shows room the limit, and every share with it, grows back
//! (`tests/shed.rs::a_sheddable_class_is_admitted_again_once_capacity_returns`).
//!
//! ```
//! use tripline_policies::shed::{Priority, Refusal, ShedConfig, Shedder};
//!
//! let shedder = Shedder::new(ShedConfig::builder().capacity(10).build()?);
//! let cards: Vec<_> = (0..5).map(|_| shedder.try_acquire(Priority::SHEDDABLE).unwrap()).collect();
//! // Half the pool is busy with workout cards: more cards are shed, log-set still gets in.
//! assert_eq!(shedder.try_acquire(Priority::SHEDDABLE).unwrap_err().reason(), Refusal::Shed);
//! let log_set = shedder.try_acquire(Priority::CRITICAL)?;
//! drop(cards);
//! assert_eq!(shedder.in_flight(), 1);
//! # drop(log_set);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A [`Shedder`] is a bulkhead (or the admission to a pool of workers) with priorities: size
//! it as you would the [`Bulkhead`](crate::bulkhead::Bulkhead), which keeps its plain
//! first-come queue. The [`Limiter`](crate::limiter::Limiter) applies the same shares and
//! queue to its adaptive limit. With the `tower` feature, [`ShedLayer`] puts a shedder in front
//! of a service; each request's priority comes from a [`Prioritize`] (a closure, or with
//! `http` the request's extensions). For a caller that runs its own clock (a simulator),
//! [`Shedder::admit`] and [`ShedTicket`] run the queue without tokio.

pub mod error;
#[cfg(feature = "tower")]
pub mod future;
#[cfg(feature = "tower")]
mod layer;
pub(crate) mod slots;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tripline::ConfigError;

pub use error::{Refusal, Shed};
#[cfg(feature = "tower")]
pub use layer::ShedLayer;
use slots::{Admit, Slot, Slots, Ticket};

/// How much a call matters when capacity is short: a number from 0 to 255, higher more
/// important. [`CRITICAL`](Self::CRITICAL) (255), [`DEFAULT`](Self::DEFAULT) (128, what a call
/// without a priority gets) and [`SHEDDABLE`](Self::SHEDDABLE) (0) are the named ones.
///
/// Written in a configuration as `"critical"`, `"default"`, `"sheddable"` or a number.
///
/// ```
/// use tripline_policies::shed::Priority;
///
/// assert!(Priority::CRITICAL > Priority::DEFAULT);
/// assert_eq!(Priority::default(), Priority::DEFAULT);
/// assert_eq!("sheddable".parse::<Priority>()?, Priority::SHEDDABLE);
/// assert_eq!("200".parse::<Priority>()?, Priority::new(200));
/// assert_eq!(Priority::new(200).to_string(), "200");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(u8);

impl Priority {
    /// Work that must land (a payment, `POST /log-set`): may use every slot.
    pub const CRITICAL: Priority = Priority(255);
    /// Ordinary work, and any call that carries no priority.
    pub const DEFAULT: Priority = Priority(128);
    /// Work the caller can do without (a recommendation widget, a workout card's media):
    /// refused first.
    pub const SHEDDABLE: Priority = Priority(0);

    /// A numeric priority; higher is more important.
    pub const fn new(n: u8) -> Self {
        Priority(n)
    }

    /// The number.
    pub const fn get(self) -> u8 {
        self.0
    }
}

impl Default for Priority {
    fn default() -> Self {
        Priority::DEFAULT
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Priority::CRITICAL => f.write_str("critical"),
            Priority::DEFAULT => f.write_str("default"),
            Priority::SHEDDABLE => f.write_str("sheddable"),
            Priority(n) => write!(f, "{n}"),
        }
    }
}

impl FromStr for Priority {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        match s {
            "critical" => Ok(Priority::CRITICAL),
            "default" => Ok(Priority::DEFAULT),
            "sheddable" => Ok(Priority::SHEDDABLE),
            _ => s.parse::<u8>().map(Priority).map_err(|_| {
                ConfigError::new(
                    "priority",
                    s,
                    "\"critical\", \"default\", \"sheddable\" or a number in [0, 255]",
                )
            }),
        }
    }
}

/// The largest capacity and queue (the bulkhead's bound).
pub const MAX_SLOTS: u32 = 1_000_000;
/// The longest `max_wait` (the bulkhead's bound).
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// The share of the capacity each priority may fill, in percent: a call of priority `p` takes
/// a slot only while fewer than `ceil(capacity × share(p) / 100)` calls are in flight.
///
/// | field | default | why |
/// |---|---|---|
/// | `critical` | 100 | critical calls may use every slot |
/// | `default` | 90 | ordinary traffic leaves the last tenth to critical calls, so a surge of it cannot lock them out |
/// | `sheddable` | 50 | sheddable calls, often the slow ones when a dependency degrades, hold at most half |
///
/// Each in `(0, 100]`, and `sheddable ≤ default ≤ critical`. Priorities between the named ones
/// get a share interpolated linearly (priority 64 gets 70 % with the defaults).
///
/// ```
/// use tripline_policies::shed::{Priority, Shares};
///
/// let shares = Shares::default();
/// assert_eq!(shares.cutoff(Priority::SHEDDABLE, 25), 13); // ceil(12.5)
/// assert_eq!(shares.cutoff(Priority::DEFAULT, 25), 23);
/// assert_eq!(shares.cutoff(Priority::CRITICAL, 25), 25);
/// assert_eq!(shares.cutoff(Priority::new(64), 10), 7);
/// let err = Shares::new(100.0, 40.0, 50.0).unwrap_err();
/// assert_eq!(err.to_string(), "shares.sheddable must be in (0, 100] and at most shares.default (40), got 50");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shares {
    critical: f64,
    default: f64,
    sheddable: f64,
    ppm: [u32; 3],
}

impl Default for Shares {
    /// 100 % critical, 90 % default, 50 % sheddable.
    fn default() -> Self {
        Self {
            critical: 100.0,
            default: 90.0,
            sheddable: 50.0,
            ppm: [500_000, 900_000, 1_000_000],
        }
    }
}

fn percent_ppm(p: f64) -> u32 {
    (p * 10_000.0).round() as u32
}

impl Shares {
    /// The shares of critical, default and sheddable calls, in percent.
    pub fn new(critical: f64, default: f64, sheddable: f64) -> Result<Self, ConfigError> {
        let bad = |v: f64| !(v > 0.0 && v <= 100.0);
        if bad(critical) {
            return Err(ConfigError::new("shares.critical", critical, "in (0, 100]"));
        }
        if bad(default) || default > critical {
            return Err(ConfigError::new(
                "shares.default",
                default,
                format!("in (0, 100] and at most shares.critical ({critical})"),
            ));
        }
        if bad(sheddable) || sheddable > default {
            return Err(ConfigError::new(
                "shares.sheddable",
                sheddable,
                format!("in (0, 100] and at most shares.default ({default})"),
            ));
        }
        Ok(Self {
            critical,
            default,
            sheddable,
            ppm: [
                percent_ppm(sheddable),
                percent_ppm(default),
                percent_ppm(critical),
            ],
        })
    }

    /// Every priority may use every slot: priorities only order the wait queue.
    pub fn none() -> Self {
        Self {
            critical: 100.0,
            default: 100.0,
            sheddable: 100.0,
            ppm: [1_000_000; 3],
        }
    }

    /// The critical share, in percent.
    pub fn critical(&self) -> f64 {
        self.critical
    }

    /// The default share, in percent.
    pub fn default_share(&self) -> f64 {
        self.default
    }

    /// The sheddable share, in percent.
    pub fn sheddable(&self) -> f64 {
        self.sheddable
    }

    /// The share of priority `p`, in millionths.
    pub fn share_ppm(&self, p: Priority) -> u32 {
        let [s, d, c] = self.ppm.map(u64::from);
        let n = u64::from(p.0);
        let ppm = if n <= 128 {
            s + (d - s) * n / 128
        } else {
            d + (c - d) * (n - 128) / 127
        };
        ppm as u32
    }

    /// How many calls in flight (all priorities) still let a call of priority `p` in, out of
    /// `capacity`: `ceil(capacity × share(p))`, at least 1.
    pub fn cutoff(&self, p: Priority, capacity: u32) -> u32 {
        let c = (u64::from(capacity) * u64::from(self.share_ppm(p))).div_ceil(1_000_000);
        (c as u32).clamp(1.min(capacity), capacity)
    }
}

/// The settings of a [`Shedder`].
///
/// | field | default | why |
/// |---|---|---|
/// | `capacity` | 25 | the slots (a pool's size, a bulkhead's `max_concurrent`; resilience4j's bulkhead default) |
/// | `shares` | 100 / 90 / 50 % | see [`Shares`] |
/// | `max_waiting` | 0 | no queue: refusals are instant, and the shares do the shedding |
/// | `max_wait` | 0 | how long a queued call waits, in `(0, 1h]` when `max_waiting > 0` |
///
/// ```
/// use std::time::Duration;
/// use tripline_policies::shed::ShedConfig;
///
/// let c = ShedConfig::builder().capacity(200).max_waiting(50).max_wait(Duration::from_millis(100)).build()?;
/// assert_eq!(c.capacity(), 200);
/// let err = ShedConfig::builder().capacity(0).build().unwrap_err();
/// assert_eq!(err.to_string(), "capacity must be in [1, 1000000], got 0");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(try_from = "raw::RawShedConfig")
)]
pub struct ShedConfig {
    capacity: u32,
    shares: Shares,
    max_waiting: u32,
    max_wait: Duration,
}

impl Default for ShedConfig {
    fn default() -> Self {
        Self {
            capacity: 25,
            shares: Shares::default(),
            max_waiting: 0,
            max_wait: Duration::ZERO,
        }
    }
}

impl ShedConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> ShedConfigBuilder {
        ShedConfigBuilder(Self::default())
    }

    /// The slots.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The shares.
    pub fn shares(&self) -> Shares {
        self.shares
    }

    /// Calls allowed to wait.
    pub fn max_waiting(&self) -> u32 {
        self.max_waiting
    }

    /// How long a call may wait.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }
}

/// Builds a [`ShedConfig`], checking every value.
#[derive(Clone, Copy, Debug)]
pub struct ShedConfigBuilder(ShedConfig);

impl ShedConfigBuilder {
    /// The slots, in `[1, 1000000]`. Default 25.
    pub fn capacity(mut self, n: u32) -> Self {
        self.0.capacity = n;
        self
    }

    /// The shares by priority. Default 100 / 90 / 50 %.
    pub fn shares(mut self, shares: Shares) -> Self {
        self.0.shares = shares;
        self
    }

    /// Calls allowed to wait for a slot, in `[0, 1000000]`. Default 0.
    pub fn max_waiting(mut self, n: u32) -> Self {
        self.0.max_waiting = n;
        self
    }

    /// How long a call may wait: in `(0, 1h]` when `max_waiting` is positive. Default 0.
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.0.max_wait = d;
        self
    }

    /// The configuration.
    pub fn build(self) -> Result<ShedConfig, ConfigError> {
        let c = self.0;
        if !(1..=MAX_SLOTS).contains(&c.capacity) {
            return Err(ConfigError::new(
                "capacity",
                c.capacity,
                format!("in [1, {MAX_SLOTS}]"),
            ));
        }
        crate::check_queue(c.max_waiting, c.max_wait, MAX_SLOTS, MAX_WAIT)?;
        Ok(c)
    }
}

/// Counts of what a [`Shedder`] (or a [`Limiter`](crate::limiter::Limiter)) decided since it
/// was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShedStats {
    /// Calls that took a slot at once.
    pub admitted: u64,
    /// Calls that took a slot after waiting in the queue.
    pub admitted_after_wait: u64,
    /// Refused: every slot busy, no queue ([`Refusal::Full`]).
    pub full: u64,
    /// Refused: slots free, but kept for higher priorities ([`Refusal::Shed`]).
    pub shed: u64,
    /// Refused: the queue full of equal or higher priorities ([`Refusal::QueueFull`]).
    pub queue_full: u64,
    /// Pushed out of the full queue by a higher priority ([`Refusal::Evicted`]).
    pub evicted: u64,
    /// Waited `max_wait` for nothing ([`Refusal::TimedOut`]).
    pub timed_out: u64,
}

impl From<slots::Counts> for ShedStats {
    fn from(c: slots::Counts) -> Self {
        Self {
            admitted: c.admitted,
            admitted_after_wait: c.admitted_after_wait,
            full: c.full,
            shed: c.shed,
            queue_full: c.queue_full,
            evicted: c.evicted,
            timed_out: c.timed_out,
        }
    }
}

/// A pool of slots shared out by priority, shared by every call to one dependency (or every
/// request a server handles). Cloning is cheap; clones share the slots. See the
/// [module docs](self).
#[derive(Clone, Debug)]
pub struct Shedder {
    slots: Arc<Slots>,
    config: ShedConfig,
}

impl Default for Shedder {
    /// A shedder with the default settings.
    fn default() -> Self {
        Self::new(ShedConfig::default())
    }
}

/// What [`Shedder::admit`] decided: a slot now, or a place in the queue.
#[derive(Debug)]
pub enum ShedAdmission {
    /// A slot, now.
    Now(ShedPermit),
    /// A place in the queue.
    Queued(ShedTicket),
}

impl Shedder {
    /// A shedder with the given settings.
    pub fn new(config: ShedConfig) -> Self {
        Self {
            slots: Slots::new(config.capacity, Some(config.shares), config.max_waiting),
            config,
        }
    }

    /// The settings.
    pub fn config(&self) -> ShedConfig {
        self.config
    }

    fn shed(&self, priority: Priority, reason: Refusal) -> Shed {
        Shed {
            priority,
            reason,
            in_flight: self.slots.in_flight(),
            capacity: self.slots.limit(),
        }
    }

    /// A slot for a call of `priority` if its share allows one now; never waits.
    pub fn try_acquire(&self, priority: Priority) -> Result<ShedPermit, Shed> {
        self.slots
            .try_admit(priority)
            .map(ShedPermit)
            .map_err(|r| self.shed(priority, r))
    }

    /// A slot now, a place in the queue, or the refusal; never waits. For callers that run
    /// the wait themselves (a simulator on virtual time): poll the ticket with
    /// [`ShedTicket::try_take`] and give up with [`ShedTicket::time_out`].
    pub fn admit(&self, priority: Priority) -> Result<ShedAdmission, Shed> {
        match self.slots.admit(priority) {
            Ok(Admit::Now(s)) => Ok(ShedAdmission::Now(ShedPermit(s))),
            Ok(Admit::Queued(t)) => Ok(ShedAdmission::Queued(ShedTicket {
                ticket: t,
                shedder: self.clone(),
            })),
            Err(r) => Err(self.shed(priority, r)),
        }
    }

    /// A slot for a call of `priority`, waiting for one (in the queue, for at most `max_wait`,
    /// on tokio's timer) if none is free. Cancellation-safe: a dropped wait leaves the queue,
    /// and a slot granted meanwhile goes back.
    pub async fn acquire(&self, priority: Priority) -> Result<ShedPermit, Shed> {
        match self.admit(priority)? {
            ShedAdmission::Now(p) => Ok(p),
            ShedAdmission::Queued(t) => t.wait(self.config.max_wait).await,
        }
    }

    /// Whether a call of `priority` would take a slot at once now.
    pub fn would_admit(&self, priority: Priority) -> bool {
        self.slots.would_admit(priority)
    }

    /// The most calls in flight (all priorities) that still let a call of `priority` in.
    pub fn cutoff(&self, priority: Priority) -> u32 {
        self.slots.cutoff(priority)
    }

    /// Calls holding a slot now.
    pub fn in_flight(&self) -> u32 {
        self.slots.in_flight()
    }

    /// Calls waiting now.
    pub fn waiting(&self) -> u32 {
        self.slots.waiting()
    }

    /// The priorities of the calls waiting now, in the order they will be served.
    pub fn queue(&self) -> Vec<Priority> {
        self.slots.queued()
    }

    /// The slots.
    pub fn capacity(&self) -> u32 {
        self.slots.limit()
    }

    /// What the shedder decided so far.
    pub fn stats(&self) -> ShedStats {
        self.slots.counts().into()
    }
}

/// A slot, given back when dropped: to the first waiter whose share allows it, if any.
#[must_use = "the slot is released as soon as the permit is dropped"]
#[derive(Debug)]
pub struct ShedPermit(Slot);

impl ShedPermit {
    /// The priority the slot was taken for.
    pub fn priority(&self) -> Priority {
        self.0.priority()
    }
}

/// A place in a [`Shedder`]'s wait queue. Dropping it leaves the queue.
#[derive(Debug)]
pub struct ShedTicket {
    ticket: Ticket,
    shedder: Shedder,
}

impl ShedTicket {
    /// The priority it waits with.
    pub fn priority(&self) -> Priority {
        self.ticket.priority()
    }

    /// The slot, once granted (`Some(Ok(..))`); the refusal, once pushed out of the queue by
    /// a higher priority; `None` while still waiting.
    pub fn try_take(&mut self) -> Option<Result<ShedPermit, Shed>> {
        let p = self.ticket.priority();
        self.ticket
            .try_take()
            .map(|g| g.map(ShedPermit).map_err(|r| self.shedder.shed(p, r)))
    }

    /// Gives up waiting ([`Refusal::TimedOut`], counted), unless the slot was granted, or the
    /// place taken, first.
    pub fn time_out(self) -> Result<ShedPermit, Shed> {
        let p = self.ticket.priority();
        let shedder = self.shedder;
        self.ticket
            .time_out()
            .map(ShedPermit)
            .map_err(|r| shedder.shed(p, r))
    }

    /// Waits for a slot for at most `max_wait` from now (not from the first poll), on tokio's
    /// timer.
    pub(crate) fn wait(
        self,
        max_wait: Duration,
    ) -> impl std::future::Future<Output = Result<ShedPermit, Shed>> + Send + 'static {
        let deadline = tokio::time::Instant::now() + max_wait;
        self.wait_until(deadline)
    }

    async fn wait_until(mut self, deadline: tokio::time::Instant) -> Result<ShedPermit, Shed> {
        let p = self.ticket.priority();
        match tokio::time::timeout_at(deadline, self.ticket.outcome()).await {
            Ok(g) => g.map(ShedPermit).map_err(|r| self.shedder.shed(p, r)),
            Err(_) => self.time_out(),
        }
    }
}

/// Where a tower service finds a request's [`Priority`].
///
/// Any `Fn(&Req) -> Priority` is one; [`DefaultPriority`] gives every request
/// [`Priority::DEFAULT`]; with the `http` feature, [`FromExtensions`] reads a `Priority` put in
/// an `http::Request`'s extensions (by a router or a middleware further out).
pub trait Prioritize<Req> {
    /// The request's priority.
    fn priority(&self, req: &Req) -> Priority;
}

impl<Req, F: Fn(&Req) -> Priority> Prioritize<Req> for F {
    fn priority(&self, req: &Req) -> Priority {
        self(req)
    }
}

/// Every request is [`Priority::DEFAULT`].
#[derive(Clone, Copy, Debug, Default)]
pub struct DefaultPriority;

impl<Req> Prioritize<Req> for DefaultPriority {
    fn priority(&self, _: &Req) -> Priority {
        Priority::DEFAULT
    }
}

/// The `Priority` in an `http::Request`'s extensions, or [`Priority::DEFAULT`] if there is none.
///
/// ```
/// use tripline_policies::shed::{FromExtensions, Prioritize, Priority};
///
/// let mut req = http::Request::new(());
/// assert_eq!(FromExtensions.priority(&req), Priority::DEFAULT);
/// req.extensions_mut().insert(Priority::CRITICAL);
/// assert_eq!(FromExtensions.priority(&req), Priority::CRITICAL);
/// ```
#[cfg(feature = "http")]
#[derive(Clone, Copy, Debug, Default)]
pub struct FromExtensions;

#[cfg(feature = "http")]
impl<B> Prioritize<http::Request<B>> for FromExtensions {
    fn priority(&self, req: &http::Request<B>) -> Priority {
        req.extensions()
            .get::<Priority>()
            .copied()
            .unwrap_or_default()
    }
}

#[cfg(feature = "tower")]
mod service {
    use std::task::{Context, Poll};

    use tower_service::Service;

    use super::future::ResponseFuture;
    use super::{DefaultPriority, Prioritize, ShedAdmission, Shedder};
    use crate::BoxError;

    /// A service behind a [`Shedder`]: each request takes a slot for its priority (from `P`)
    /// and holds it until its response is ready; one whose share is used up waits in the
    /// queue (if there is one) or fails with a [`Shed`](super::Shed). Made by
    /// [`ShedLayer`](super::ShedLayer).
    ///
    /// Readiness is the inner service's. A waiting call keeps the inner service it was made
    /// ready with (a clone is left in its place), so the service must be `Clone`; calls that
    /// find a slot allocate nothing, calls that queue allocate their wait once.
    #[derive(Clone, Debug)]
    pub struct ShedService<S, P = DefaultPriority> {
        inner: S,
        shedder: Shedder,
        prioritize: P,
    }

    impl<S, P> ShedService<S, P> {
        /// `inner` behind `shedder`, with each request's priority from `prioritize`.
        pub const fn new(inner: S, shedder: Shedder, prioritize: P) -> Self {
            Self {
                inner,
                shedder,
                prioritize,
            }
        }

        /// The shedder.
        pub fn shedder(&self) -> &Shedder {
            &self.shedder
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

    impl<S, P, Req> Service<Req> for ShedService<S, P>
    where
        S: Service<Req> + Clone,
        S::Error: Into<BoxError>,
        P: Prioritize<Req>,
    {
        type Response = S::Response;
        type Error = BoxError;
        type Future = ResponseFuture<S, Req>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            self.inner.poll_ready(cx).map_err(Into::into)
        }

        fn call(&mut self, req: Req) -> Self::Future {
            let priority = self.prioritize.priority(&req);
            match self.shedder.admit(priority) {
                Ok(ShedAdmission::Now(permit)) => {
                    ResponseFuture::called(self.inner.call(req), permit)
                }
                Ok(ShedAdmission::Queued(ticket)) => {
                    let wait = Box::pin(ticket.wait(self.shedder.config.max_wait));
                    let clone = self.inner.clone();
                    let ready = std::mem::replace(&mut self.inner, clone);
                    ResponseFuture::queued(wait, ready, req)
                }
                Err(shed) => ResponseFuture::shed(shed),
            }
        }
    }
}

#[cfg(feature = "tower")]
pub use service::ShedService;

#[cfg(feature = "serde")]
mod raw {
    //! The serialized forms: every field optional, unknown fields rejected.
    use std::time::Duration;

    use serde::Deserialize;

    use super::{Priority, Shares, ShedConfig};
    use tripline::ConfigError;

    #[derive(Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawShares {
        critical: Option<f64>,
        default: Option<f64>,
        sheddable: Option<f64>,
    }

    impl TryFrom<RawShares> for Shares {
        type Error = ConfigError;
        fn try_from(r: RawShares) -> Result<Self, ConfigError> {
            let d = Shares::default();
            Shares::new(
                r.critical.unwrap_or(d.critical),
                r.default.unwrap_or(d.default),
                r.sheddable.unwrap_or(d.sheddable),
            )
        }
    }

    impl<'de> Deserialize<'de> for Shares {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let raw = RawShares::deserialize(d)?;
            Shares::try_from(raw).map_err(serde::de::Error::custom)
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum RawPriority {
        Number(u8),
        Name(String),
    }

    impl<'de> Deserialize<'de> for Priority {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            match RawPriority::deserialize(d).map_err(|_| {
                serde::de::Error::custom(
                    "priority must be \"critical\", \"default\", \"sheddable\" or a number in [0, 255]",
                )
            })? {
                RawPriority::Number(n) => Ok(Priority::new(n)),
                RawPriority::Name(s) => s.parse().map_err(serde::de::Error::custom),
            }
        }
    }

    use super::{MAX_SLOTS, MAX_WAIT};
    use crate::de::{checked, within};

    // Each field's own range, checked as it is read: an error points at the field's line.
    checked! {
        capacity: u32 = |v| within("capacity", *v, 1, MAX_SLOTS);
        max_waiting: u32 = |v| within("max_waiting", *v, 0, MAX_SLOTS);
    }
    checked! {
        max_wait: dur = |v| if v > MAX_WAIT {
            Err(ConfigError::new("max_wait", format!("{v:?}"), format!("in [0ns, {MAX_WAIT:?}]")))
        } else {
            Ok(())
        };
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawShedConfig {
        #[serde(default, deserialize_with = "capacity")]
        capacity: Option<u32>,
        shares: Option<Shares>,
        #[serde(default, deserialize_with = "max_waiting")]
        max_waiting: Option<u32>,
        #[serde(default, deserialize_with = "max_wait")]
        max_wait: Option<Duration>,
    }

    impl TryFrom<RawShedConfig> for ShedConfig {
        type Error = ConfigError;
        fn try_from(r: RawShedConfig) -> Result<Self, ConfigError> {
            let d = ShedConfig::default();
            ShedConfig::builder()
                .capacity(r.capacity.unwrap_or(d.capacity))
                .shares(r.shares.unwrap_or(d.shares))
                .max_waiting(r.max_waiting.unwrap_or(d.max_waiting))
                .max_wait(r.max_wait.unwrap_or(d.max_wait))
                .build()
        }
    }
}
