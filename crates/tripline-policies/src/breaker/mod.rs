//! The circuit breaker as a tower layer.
//!
//! The breaker itself is the core's [`CircuitBreaker`], or any other host of the
//! [`tripline::Breaker`] interface (the fleet-wide `tripline_redis::SharedBreaker`, through
//! [`BreakerLayer::new`]); this module only adapts it to tower. Each call asks the breaker for a permit; a refusal fails the call
//! at once with the core's [`Rejected`] (downcastable from the `BoxError`), without calling the
//! inner service; an admitted call's result is classified and recorded. A response future
//! dropped before it completes abandons its permit, which frees a half-open probe slot and
//! counts as neither success nor failure.
//!
//! Errors that come from local policies further in (a full bulkhead, the gate, the throttle)
//! are recorded as ignored: they say nothing about the dependency, and counting them as
//! failures would let a saturated bulkhead trip the breaker. A timeout further in
//! ([`TimeoutLayer`](crate::timeout::TimeoutLayer)) is an error like any other, so it counts as
//! a failure: that is why the timeout goes inside the breaker.
//!
//! # Cost
//!
//! With a breaker that may wait (the shared one) the permit is acquired in `poll_ready` (see
//! [`Breaker`]) and the response future awaits the recording of the result (one round trip
//! unless batched) before it yields the response. With the in-process breaker:
//!
//! The permit is acquired in `call` (an [`OwnedPermit`](tripline::OwnedPermit), one
//! reference-count increment) and travels in an unboxed response future: no allocation per
//! call beyond the inner service's own, and no `Clone` or `Send` bound on the inner service.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use tower::{Layer, ServiceExt, service_fn};
//! use tripline::{BreakerConfig, CircuitBreaker, Rejected, State};
//! use tripline_policies::breaker::BreakerLayer;
//!
//! let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
//! let svc = BreakerLayer::new(breaker.clone())
//!     .layer(service_fn(|id: u32| async move { Ok::<_, std::io::Error>(id) }));
//! assert_eq!(svc.clone().oneshot(7).await?, 7);
//!
//! breaker.force_open();
//! let err = svc.oneshot(7).await.unwrap_err();
//! let rejected = err.downcast_ref::<Rejected>().unwrap();
//! assert_eq!(rejected.state(), State::ForcedOpen);
//! # Ok(())
//! # }
//! ```

pub mod error;
pub mod future;
mod layer;

use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tower_service::Service;
use tripline::{
    Breaker as AnyBreaker, CircuitBreaker, Classification, Classify, Clock, FailureKind,
    MonotonicClock, Outcome, ResultClassifier,
};

pub use error::Rejected;
use future::ResponseFuture;
pub use layer::BreakerLayer;

use crate::BoxError;

/// A service behind a breaker: the in-process [`CircuitBreaker`] by default, or any host of
/// the [`tripline::Breaker`] interface (`B`: a fleet-wide `tripline_redis::SharedBreaker`).
/// Made by [`BreakerLayer`].
///
/// A breaker that admits at once (the in-process one: [`tripline::Breaker::ADMITS_AT_ONCE`])
/// is asked in `call`, as always. One that may wait for a round trip is asked in `poll_ready`,
/// after the inner service is ready: the service is ready once the breaker has decided, and
/// `call` then sends the request under the permit, or fails it with the refusal. A permit
/// taken in `poll_ready` and never used (the service dropped before `call`) is abandoned.
pub struct Breaker<
    S,
    C: Clock = MonotonicClock,
    K = ResultClassifier,
    B: AnyBreaker = CircuitBreaker<C>,
> {
    inner: S,
    breaker: B,
    classifier: K,
    /// A breaker that may wait: its decision, in `poll_ready`, for the next `call`.
    admission: Option<Admission<B>>,
    clock: PhantomData<fn() -> C>,
}

/// An admission in progress, or decided and waiting for `call`.
enum Admission<B: AnyBreaker> {
    Deciding(B::Acquire),
    Decided(Result<B::Permit, tripline::Rejected>),
}

impl<S: std::fmt::Debug, C: Clock, K: std::fmt::Debug, B: AnyBreaker> std::fmt::Debug
    for Breaker<S, C, K, B>
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breaker")
            .field("inner", &self.inner)
            .field("breaker", &self.breaker)
            .field("classifier", &self.classifier)
            .field(
                "admission",
                &match &self.admission {
                    None => "none",
                    Some(Admission::Deciding(_)) => "deciding",
                    Some(Admission::Decided(Ok(_))) => "admitted",
                    Some(Admission::Decided(Err(_))) => "refused",
                },
            )
            .finish()
    }
}

impl<S: Clone, C: Clock, K: Clone, B: AnyBreaker> Clone for Breaker<S, C, K, B> {
    /// A clone is a service of its own: it shares the breaker, not a decision made for this
    /// one's next call.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            breaker: self.breaker.clone(),
            classifier: self.classifier.clone(),
            admission: None,
            clock: PhantomData,
        }
    }
}

impl<S, K, B: AnyBreaker> Breaker<S, B::Clock, K, B> {
    /// `inner` behind `breaker` (a [`CircuitBreaker`], or any host of the
    /// [`tripline::Breaker`] interface), its results classified by `classifier`.
    pub const fn new(inner: S, breaker: B, classifier: K) -> Self {
        Self {
            inner,
            breaker,
            classifier,
            admission: None,
            clock: PhantomData,
        }
    }
}

impl<S, C: Clock, K, B: AnyBreaker> Breaker<S, C, K, B> {
    /// The breaker.
    pub fn breaker(&self) -> &B {
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

/// The classification of a result for a breaker: local rejections from further in are
/// ignored, anything else goes to `classifier`; a failure the classifier left without a kind
/// is a [`FailureKind::Timeout`] when a timeout further in expired.
pub(crate) fn classify<T, K: Classify<T, BoxError>>(
    classifier: &K,
    result: &Result<T, BoxError>,
) -> Classification {
    match result {
        Err(e) if crate::is_local_rejection(&**e) => Classification::new(Outcome::Ignored),
        Err(e) => {
            let mut c = classifier.classify(result);
            if c.outcome == Outcome::Failure && c.kind.is_none() && crate::is_timeout(&**e) {
                c.kind = Some(FailureKind::Timeout);
            }
            c
        }
        Ok(_) => classifier.classify(result),
    }
}

/// `call` on a breaker service whose breaker had not decided: `poll_ready` was not called (or
/// did not return ready) first, as tower's contract asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotReady;

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the breaker service was called before poll_ready returned ready")
    }
}

impl std::error::Error for NotReady {}

impl<S, C, K, B, Req> Service<Req> for Breaker<S, C, K, B>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: Clock,
    B: AnyBreaker,
    K: Classify<S::Response, BoxError> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, C, K, B, S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        ready!(self.inner.poll_ready(cx)).map_err(Into::into)?;
        if B::ADMITS_AT_ONCE {
            return Poll::Ready(Ok(()));
        }
        loop {
            match &mut self.admission {
                None => self.admission = Some(Admission::Deciding(self.breaker.acquire())),
                Some(Admission::Deciding(decision)) => {
                    let decided = ready!(Pin::new(decision).poll(cx));
                    self.admission = Some(Admission::Decided(decided));
                }
                Some(Admission::Decided(_)) => return Poll::Ready(Ok(())),
            }
        }
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let decided = if B::ADMITS_AT_ONCE {
            self.breaker.try_acquire_now()
        } else {
            match self.admission.take() {
                Some(Admission::Decided(d)) => Some(d),
                other => {
                    self.admission = other;
                    None
                }
            }
        };
        match decided {
            Some(Ok(permit)) => {
                ResponseFuture::called(self.inner.call(req), permit, self.classifier.clone())
            }
            Some(Err(rejected)) => ResponseFuture::failed(rejected.into(), self.classifier.clone()),
            None => ResponseFuture::failed(NotReady.into(), self.classifier.clone()),
        }
    }
}
