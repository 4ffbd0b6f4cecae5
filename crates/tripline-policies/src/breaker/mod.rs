//! The circuit breaker as a tower layer.
//!
//! The breaker itself is the core's [`CircuitBreaker`]; this module
//! only adapts it to tower. Each call asks the breaker for a permit; a refusal fails the call
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

use std::task::{Context, Poll};

use tower_service::Service;
use tripline::{
    CircuitBreaker, Classification, Classify, Clock, FailureKind, MonotonicClock, Outcome,
    ResultClassifier,
};

pub use error::Rejected;
use future::ResponseFuture;
pub use layer::BreakerLayer;

use crate::BoxError;

/// A service behind a [`CircuitBreaker`]. Made by [`BreakerLayer`].
#[derive(Debug)]
pub struct Breaker<S, C: Clock = MonotonicClock, K = ResultClassifier> {
    inner: S,
    breaker: CircuitBreaker<C>,
    classifier: K,
}

impl<S: Clone, C: Clock, K: Clone> Clone for Breaker<S, C, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            breaker: self.breaker.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<S, C: Clock, K> Breaker<S, C, K> {
    /// `inner` behind `breaker`, its results classified by `classifier`.
    pub const fn new(inner: S, breaker: CircuitBreaker<C>, classifier: K) -> Self {
        Self {
            inner,
            breaker,
            classifier,
        }
    }

    /// The breaker.
    pub fn breaker(&self) -> &CircuitBreaker<C> {
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

impl<S, C, K, Req> Service<Req> for Breaker<S, C, K>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: Clock,
    K: Classify<S::Response, BoxError> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, C, K>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        match self.breaker.try_acquire_owned() {
            Ok(permit) => {
                ResponseFuture::called(self.inner.call(req), permit, self.classifier.clone())
            }
            Err(rejected) => ResponseFuture::rejected(rejected, self.classifier.clone()),
        }
    }
}
