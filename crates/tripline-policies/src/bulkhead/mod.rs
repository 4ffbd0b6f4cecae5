//! A bulkhead: bounded concurrency per dependency, with a bounded, timed wait.
//!
//! # Why a bulkhead next to a breaker?
//!
//! A breaker reacts to evidence, and evidence takes time: until the window holds enough slow
//! or failed calls, every call to a dependency that has turned slow holds a task, a socket and
//! a slot in some pool. A bulkhead caps that cost from the first call: one dependency can hold
//! at most `max_concurrent` slots, so the rest of the process (the checkout page, when the
//! recommendation widget hangs) keeps its own. It is the ship's bulkhead: a flooded
//! compartment does not sink the ship.
//!
//! A call that finds every slot busy may wait, but only in a bounded queue (`max_waiting`) and
//! only for a bounded time (`max_wait`); otherwise it is refused with a [`BulkheadFull`], a
//! value distinct from the dependency's errors. Unbounded waiting would rebuild the very pile-up
//! the bulkhead exists to prevent. The queue is first-come first-served: a call takes its
//! place when it is made (for the tower service, in `call`, not when its future is first
//! polled), tokio's semaphore hands freed slots to the queued calls in that order, and a call
//! that finds others queued queues behind them even if a slot is momentarily free. The wait
//! is timed from the same moment.
//!
//! A queued call that is handed a freed slot holds it from that moment, whether or not its
//! future (or [`BulkheadWaiter`]) has collected it yet: it counts as in flight, not as
//! waiting, so the place it left in the queue is free for the next call. A call is refused at
//! once exactly when `max_concurrent + max_waiting` calls are already inside (holding a slot,
//! handed one, or waiting for one); while fewer are, it takes a slot or a place. A call counts
//! as gone from the moment its slot starts being released.
//!
//! Defaults are resilience4j's: 25 concurrent calls and no waiting.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tripline_policies::bulkhead::{Bulkhead, BulkheadConfig};
//!
//! let bulkhead = Bulkhead::new(
//!     BulkheadConfig::builder()
//!         .max_concurrent(10)
//!         .max_waiting(5)
//!         .max_wait(Duration::from_millis(100))
//!         .build()?,
//! );
//! let slots: Vec<_> = (0..10).map(|_| bulkhead.try_acquire().unwrap()).collect();
//! let refused = bulkhead.acquire().await.unwrap_err(); // waited 100 ms for nothing
//! assert!(refused.timed_out());
//! drop(slots);
//! let _slot = bulkhead.acquire().await?;
//! # Ok(())
//! # }
//! ```

pub mod error;
#[cfg(feature = "tower")]
pub mod future;
#[cfg(feature = "tower")]
mod layer;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tripline::ConfigError;

use crate::sync::{AtomicU32, AtomicU64};

pub use error::BulkheadFull;
#[cfg(feature = "tower")]
pub use layer::BulkheadLayer;

/// The largest `max_concurrent` and `max_waiting`.
pub const MAX_SLOTS: u32 = 1_000_000;
/// The longest `max_wait`.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// The limits of a [`Bulkhead`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkheadConfig {
    max_concurrent: u32,
    max_waiting: u32,
    max_wait: Duration,
}

impl Default for BulkheadConfig {
    /// 25 concurrent calls, no waiting (resilience4j's defaults).
    fn default() -> Self {
        Self {
            max_concurrent: 25,
            max_waiting: 0,
            max_wait: Duration::ZERO,
        }
    }
}

impl BulkheadConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> BulkheadConfigBuilder {
        BulkheadConfigBuilder(Self::default())
    }

    /// Calls in flight allowed.
    pub fn max_concurrent(&self) -> u32 {
        self.max_concurrent
    }

    /// Calls allowed to wait for a slot.
    pub fn max_waiting(&self) -> u32 {
        self.max_waiting
    }

    /// How long a call may wait for a slot.
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }
}

/// Builds a [`BulkheadConfig`], checking every value.
#[derive(Clone, Copy, Debug)]
pub struct BulkheadConfigBuilder(BulkheadConfig);

impl BulkheadConfigBuilder {
    /// Calls in flight allowed, in `[1, 1000000]`. Default 25.
    pub fn max_concurrent(mut self, n: u32) -> Self {
        self.0.max_concurrent = n;
        self
    }

    /// Calls allowed to wait for a slot, in `[0, 1000000]`. Default 0.
    pub fn max_waiting(mut self, n: u32) -> Self {
        self.0.max_waiting = n;
        self
    }

    /// How long a call may wait for a slot: in `(0, 1h]` when `max_waiting` is positive.
    pub fn max_wait(mut self, d: Duration) -> Self {
        self.0.max_wait = d;
        self
    }

    /// The configuration.
    ///
    /// ```
    /// use tripline_policies::bulkhead::BulkheadConfig;
    ///
    /// let err = BulkheadConfig::builder().max_waiting(5).build().unwrap_err();
    /// assert_eq!(err.to_string(), "max_wait must be in (0ns, 3600s] when max_waiting > 0, got 0ns");
    /// ```
    pub fn build(self) -> Result<BulkheadConfig, ConfigError> {
        let c = self.0;
        if !(1..=MAX_SLOTS).contains(&c.max_concurrent) {
            return Err(ConfigError::new(
                "max_concurrent",
                c.max_concurrent,
                format!("in [1, {MAX_SLOTS}]"),
            ));
        }
        crate::check_queue(c.max_waiting, c.max_wait, MAX_SLOTS, MAX_WAIT)?;
        Ok(c)
    }
}

#[derive(Debug)]
struct Inner {
    config: BulkheadConfig,
    /// The slots. Its permits are taken by calls (a slot) and handed by tokio, first come
    /// first served, to the calls waiting in it.
    semaphore: Arc<Semaphore>,
    /// Calls inside: holding a slot, handed one, or waiting for one; at most `max_concurrent +
    /// max_waiting`. Taken (with a bounded compare-and-swap) before a call asks the semaphore
    /// for a slot, given back when it leaves: by its permit before the slot is released, or by
    /// its place in the queue when it gives up. No lock, and no user code, is involved.
    inside: AtomicU32,
    full: AtomicU64,
    timed_out: AtomicU64,
}

impl Inner {
    /// Takes a place inside, if fewer than `max_concurrent + max_waiting` calls are in.
    fn enter(&self) -> bool {
        let max = self.config.max_concurrent + self.config.max_waiting;
        self.inside
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A bulkhead shared by every call to one dependency. Cloning is cheap; clones share the
/// slots. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct Bulkhead {
    inner: Arc<Inner>,
}

impl Default for Bulkhead {
    /// A bulkhead with the default limits.
    fn default() -> Self {
        Self::new(BulkheadConfig::default())
    }
}

/// Counts of the calls a bulkhead refused.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BulkheadRejections {
    /// Refused at once: every slot busy and the queue full.
    pub queue_full: u64,
    /// Refused after waiting `max_wait` in the queue.
    pub timed_out: u64,
}

pub(crate) enum Admission {
    Now(BulkheadPermit),
    Queued(Queued),
    Full(BulkheadFull),
}

impl Bulkhead {
    /// A bulkhead with the given limits.
    pub fn new(config: BulkheadConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                semaphore: Arc::new(Semaphore::new(config.max_concurrent as usize)),
                inside: AtomicU32::new(0),
                full: AtomicU64::new(0),
                timed_out: AtomicU64::new(0),
            }),
        }
    }

    /// The limits.
    pub fn config(&self) -> BulkheadConfig {
        self.inner.config
    }

    /// Takes a slot if one is free now; never waits.
    pub fn try_acquire(&self) -> Result<BulkheadPermit, BulkheadFull> {
        if !self.inner.enter() {
            return Err(self.full(None));
        }
        match self.take_slot() {
            Some(p) => Ok(p),
            None => {
                self.inner.leave();
                Err(self.full(None))
            }
        }
    }

    /// A free slot for a call that has its place inside, if the semaphore has one.
    fn take_slot(&self) -> Option<BulkheadPermit> {
        let p = self.inner.semaphore.try_acquire().ok()?;
        p.forget();
        Some(BulkheadPermit {
            bulkhead: self.inner.clone(),
        })
    }

    /// Takes a slot, waiting for one (in the bounded queue, for at most `max_wait`) if all are
    /// busy. Cancellation-safe: a dropped wait leaves the queue.
    pub async fn acquire(&self) -> Result<BulkheadPermit, BulkheadFull> {
        match self.admit() {
            Admission::Now(p) => Ok(p),
            Admission::Queued(q) => q.wait().await,
            Admission::Full(e) => Err(e),
        }
    }

    /// Takes a free slot, or a place in the wait queue, or refuses at once: never waits, and
    /// needs no runtime and no timer. For callers that keep their own time (an event loop, a
    /// simulator on virtual time): a queued call collects its slot with
    /// [`BulkheadWaiter::try_slot`] once the bulkhead hands it one (after a slot is freed, in
    /// queue order), and the caller gives up with [`BulkheadWaiter::time_out`] once `max_wait`
    /// has passed on its clock. [`acquire`](Self::acquire) is the same wait on tokio's timer.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline_policies::bulkhead::{Bulkhead, BulkheadConfig, Entry};
    ///
    /// let bulkhead = Bulkhead::new(
    ///     BulkheadConfig::builder().max_concurrent(1).max_waiting(2).max_wait(Duration::from_secs(1)).build()?,
    /// );
    /// let Ok(Entry::Admitted(first)) = bulkhead.enter() else { unreachable!() };
    /// let Ok(Entry::Queued(mut second)) = bulkhead.enter() else { unreachable!() };
    /// let Ok(Entry::Queued(third)) = bulkhead.enter() else { unreachable!() };
    /// assert!(bulkhead.enter().is_err()); // the queue holds two
    /// assert!(second.try_slot().is_none());
    /// drop(first); // the slot goes to the first in the queue
    /// let slot = second.try_slot().expect("its turn");
    /// let refused = third.time_out(); // a second passed on the caller's clock
    /// assert!(refused.timed_out());
    /// assert_eq!((bulkhead.rejections().queue_full, bulkhead.rejections().timed_out), (1, 1));
    /// # drop(slot);
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn enter(&self) -> Result<Entry, BulkheadFull> {
        match self.admit() {
            Admission::Now(p) => Ok(Entry::Admitted(p)),
            Admission::Full(e) => Err(e),
            Admission::Queued(q) => {
                let mut waiter = BulkheadWaiter {
                    acquire: Box::pin(self.inner.semaphore.clone().acquire_owned()),
                    queued: Some(q),
                    config: self.inner.config,
                };
                // The first poll takes the call's place in the semaphore's FIFO.
                match waiter.try_slot() {
                    Some(p) => Ok(Entry::Admitted(p)),
                    None => Ok(Entry::Queued(waiter)),
                }
            }
        }
    }

    /// Takes a free slot, or a place in the queue, or refuses; never waits. Refuses exactly
    /// when `max_concurrent + max_waiting` calls are inside.
    pub(crate) fn admit(&self) -> Admission {
        if !self.inner.enter() {
            return Admission::Full(self.full(None));
        }
        if let Some(p) = self.take_slot() {
            return Admission::Now(p);
        }
        if self.inner.config.max_waiting == 0 {
            // No queue: every slot is held (one may be on its way out).
            self.inner.leave();
            return Admission::Full(self.full(None));
        }
        Admission::Queued(Queued {
            bulkhead: self.clone(),
        })
    }

    fn full(&self, waited: Option<Duration>) -> BulkheadFull {
        let i = &*self.inner;
        let counter = if waited.is_some() {
            &i.timed_out
        } else {
            &i.full
        };
        counter.fetch_add(1, Ordering::Relaxed);
        BulkheadFull {
            max_concurrent: i.config.max_concurrent,
            max_waiting: i.config.max_waiting,
            waited,
        }
    }

    /// Slots free now.
    pub fn available(&self) -> u32 {
        self.inner.semaphore.available_permits() as u32
    }

    /// Calls in flight now: holding a slot, or handed one they have not collected yet.
    pub fn in_flight(&self) -> u32 {
        self.inner.config.max_concurrent - self.available()
    }

    /// Calls waiting for a slot now: not yet handed one (a call handed a freed slot holds it,
    /// collected or not, and counts in [`in_flight`](Self::in_flight)).
    pub fn waiting(&self) -> u32 {
        let inside = self.inner.inside.load(Ordering::Acquire);
        inside.saturating_sub(self.in_flight())
    }

    /// Calls refused so far.
    pub fn rejections(&self) -> BulkheadRejections {
        BulkheadRejections {
            queue_full: self.inner.full.load(Ordering::Relaxed),
            timed_out: self.inner.timed_out.load(Ordering::Relaxed),
        }
    }
}

/// Where [`Bulkhead::enter`] put a call.
#[derive(Debug)]
pub enum Entry {
    /// A slot was free: the call goes now.
    Admitted(BulkheadPermit),
    /// Every slot was busy: the call waits in the queue, in its turn.
    Queued(BulkheadWaiter),
}

/// A call waiting in a bulkhead's queue, for a caller that keeps its own time (see
/// [`Bulkhead::enter`]). Its place in the first-come first-served queue was taken when it
/// entered; the bulkhead hands it a slot in its turn, which [`try_slot`](Self::try_slot)
/// collects. Dropping it leaves the queue without counting anything.
pub struct BulkheadWaiter {
    acquire: Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>,
    queued: Option<Queued>,
    config: BulkheadConfig,
}

impl std::fmt::Debug for BulkheadWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkheadWaiter")
            .field("waiting", &self.queued.is_some())
            .finish_non_exhaustive()
    }
}

impl BulkheadWaiter {
    /// The slot, once the bulkhead has handed it to this call (a slot freed while calls queued
    /// before this one still wait goes to them first); `None` while it must wait. Never waits.
    pub fn try_slot(&mut self) -> Option<BulkheadPermit> {
        self.queued.as_ref()?;
        let mut cx = Context::from_waker(Waker::noop());
        match self.acquire.as_mut().poll(&mut cx) {
            Poll::Pending => None,
            Poll::Ready(r) => {
                // Out of the queue: its place inside goes on with the slot.
                let queued = self.queued.take()?;
                // The semaphore is never closed; a closed one gives no slot.
                match r {
                    Ok(p) => Some(queued.into_permit(p)),
                    Err(_) => None,
                }
            }
        }
    }

    /// Gives up: the call waited `max_wait` (on the caller's clock) without a slot. It leaves
    /// the queue and is counted as timed out ([`BulkheadRejections::timed_out`]); a slot the
    /// bulkhead had just handed it, uncollected, goes to the next call in the queue. A waiter
    /// whose slot [`try_slot`](Self::try_slot) already collected is not in the queue any more:
    /// giving it up counts nothing.
    pub fn time_out(mut self) -> BulkheadFull {
        let waited = self.config.max_wait;
        match self.queued.take() {
            Some(q) => q.full(Some(waited)),
            None => BulkheadFull {
                max_concurrent: self.config.max_concurrent,
                max_waiting: self.config.max_waiting,
                waited: Some(waited),
            },
        }
    }
}

/// A place in the wait queue. Leaving it by timing out or being dropped gives the place inside
/// back; getting a slot hands the place on to the permit.
pub(crate) struct Queued {
    bulkhead: Bulkhead,
}

impl Queued {
    /// The wait for a slot, timed from now: it fails after `max_wait`. Its place in the
    /// semaphore's FIFO is taken when it is first polled, or earlier with [`Wait::join`].
    pub(crate) fn wait(
        self,
    ) -> Wait<impl Future<Output = Result<OwnedSemaphorePermit, AcquireError>>> {
        let i = &*self.bulkhead.inner;
        let deadline = Instant::now() + i.config.max_wait;
        Wait {
            acquire: i.semaphore.clone().acquire_owned(),
            timer: Timer::Unset { deadline },
            queued: Some(self),
        }
    }

    fn full(&self, waited: Option<Duration>) -> BulkheadFull {
        self.bulkhead.full(waited)
    }

    /// The slot tokio handed this call: the call stays inside, now holding it.
    fn into_permit(self, p: OwnedSemaphorePermit) -> BulkheadPermit {
        p.forget();
        let bulkhead = self.bulkhead.inner.clone();
        std::mem::forget(self);
        BulkheadPermit { bulkhead }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.bulkhead.inner.leave();
    }
}

pin_project! {
    /// A queued call's wait for a slot (see [`Queued::wait`]).
    pub(crate) struct Wait<F> {
        #[pin]
        acquire: F,
        #[pin]
        timer: Timer,
        queued: Option<Queued>,
    }
}

pin_project! {
    #[project = TimerProj]
    enum Timer {
        // The deadline, before the first poll made a timer for it (a timer needs the runtime;
        // the wait may be made outside one, as a tower service's `call` may be).
        Unset { deadline: Instant },
        Set {
            #[pin]
            sleep: Sleep,
        },
    }
}

impl<F> Wait<F>
where
    F: Future<Output = Result<OwnedSemaphorePermit, AcquireError>>,
{
    /// Takes the call's place in the FIFO now, without waiting and without a timer: the
    /// semaphore hands freed slots to the calls queued in it, in order, so a call that queued
    /// first is served first even if it is polled later than one that came after it. `Ready`
    /// if a slot was free after all (the wait is then over: do not poll it again).
    #[cfg_attr(
        not(feature = "tower"),
        expect(dead_code, reason = "used by the tower service")
    )]
    pub(crate) fn join(self: Pin<&mut Self>) -> Poll<Result<BulkheadPermit, BulkheadFull>> {
        let mut cx = Context::from_waker(Waker::noop());
        self.poll_acquire(&mut cx)
    }

    /// Polls the semaphore; once the wait is over (a slot, or a refusal), `Pending` forever.
    fn poll_acquire(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<BulkheadPermit, BulkheadFull>> {
        let this = self.project();
        if this.queued.is_none() {
            return Poll::Pending;
        }
        let acquired = ready!(this.acquire.poll(cx));
        // Out of the queue, now, not when the wait is dropped.
        let Some(queued) = this.queued.take() else {
            return Poll::Pending;
        };
        Poll::Ready(match acquired {
            Ok(p) => Ok(queued.into_permit(p)),
            // The semaphore is never closed; treat it as a full queue if it ever is.
            Err(_) => Err(queued.full(None)),
        })
    }
}

impl<F> Future for Wait<F>
where
    F: Future<Output = Result<OwnedSemaphorePermit, AcquireError>>,
{
    type Output = Result<BulkheadPermit, BulkheadFull>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(r) = self.as_mut().poll_acquire(cx) {
            return Poll::Ready(r);
        }
        let mut this = self.project();
        if let TimerProj::Unset { deadline } = this.timer.as_mut().project() {
            let sleep = tokio::time::sleep_until(*deadline);
            this.timer.set(Timer::Set { sleep });
        }
        let TimerProj::Set { sleep } = this.timer.project() else {
            return Poll::Pending;
        };
        ready!(sleep.poll(cx));
        let Some(queued) = this.queued.take() else {
            return Poll::Pending;
        };
        let waited = queued.bulkhead.inner.config.max_wait;
        Poll::Ready(Err(queued.full(Some(waited))))
    }
}

/// A slot in the bulkhead, given back when dropped.
#[must_use = "the slot is released as soon as the permit is dropped"]
#[derive(Debug)]
pub struct BulkheadPermit {
    bulkhead: Arc<Inner>,
}

impl Drop for BulkheadPermit {
    fn drop(&mut self) {
        // The call leaves first, then its slot goes (to the first waiter, if any): a call
        // that comes in between finds the place free and queues for the slot.
        self.bulkhead.leave();
        self.bulkhead.semaphore.add_permits(1);
    }
}

#[cfg(feature = "tower")]
mod service {
    use std::task::{Context, Poll};

    use tower_service::Service;

    use super::future::ResponseFuture;
    use super::{Admission, Bulkhead};
    use crate::BoxError;

    /// A service behind a [`Bulkhead`]: each call holds a slot until its response is ready. A
    /// call that finds a free slot calls the inner service at once; one that must wait does so
    /// in the bulkhead's bounded queue, for at most `max_wait`, and then calls it; one that
    /// finds the queue full, or waits in vain, fails with a
    /// [`BulkheadFull`](super::BulkheadFull). Made by [`BulkheadLayer`](super::BulkheadLayer).
    ///
    /// Readiness is the inner service's. A waiting call keeps the inner service it was made
    /// ready with (a clone is left in its place), so the service must be `Clone`. The wait's
    /// future is boxed: calls that find a free slot allocate nothing, calls that queue allocate
    /// once.
    #[derive(Clone, Debug)]
    pub struct BulkheadService<S> {
        inner: S,
        bulkhead: Bulkhead,
    }

    impl<S> BulkheadService<S> {
        /// `inner` behind `bulkhead`.
        pub const fn new(inner: S, bulkhead: Bulkhead) -> Self {
            Self { inner, bulkhead }
        }

        /// The bulkhead.
        pub fn bulkhead(&self) -> &Bulkhead {
            &self.bulkhead
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

    impl<S, Req> Service<Req> for BulkheadService<S>
    where
        S: Service<Req> + Clone,
        S::Error: Into<BoxError>,
    {
        type Response = S::Response;
        type Error = BoxError;
        type Future = ResponseFuture<S, Req>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            self.inner.poll_ready(cx).map_err(Into::into)
        }

        fn call(&mut self, req: Req) -> Self::Future {
            match self.bulkhead.admit() {
                Admission::Now(permit) => ResponseFuture::called(self.inner.call(req), permit),
                Admission::Queued(q) => {
                    // The call takes its place in the queue now, so that a slot freed before
                    // this future is first polled goes to it, not to a later call.
                    let mut wait = Box::pin(q.wait());
                    match wait.as_mut().join() {
                        Poll::Ready(Ok(permit)) => {
                            ResponseFuture::called(self.inner.call(req), permit)
                        }
                        Poll::Ready(Err(e)) => ResponseFuture::full(e),
                        Poll::Pending => {
                            let clone = self.inner.clone();
                            let ready = std::mem::replace(&mut self.inner, clone);
                            ResponseFuture::queued(wait, ready, req)
                        }
                    }
                }
                Admission::Full(e) => ResponseFuture::full(e),
            }
        }
    }
}

#[cfg(feature = "tower")]
pub use service::BulkheadService;
