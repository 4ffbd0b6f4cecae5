//! The tower service: picks a host per request, records the classified result.

use std::task::{Context, Poll};

use tower_service::Service;
use tripline::{Clock, MonotonicClock};

use super::future::ResponseFuture;
use super::{HostKey, HostOutcome, OutlierDetector};
use crate::BoxError;

/// Turns a call's result into the host's outcome, or `None` when the result says nothing
/// about the host (a local refusal further in): then nothing is recorded.
///
/// Closures `Fn(&Result<T, BoxError>) -> Option<HostOutcome>` are classifiers.
pub trait HostClassifier<T> {
    /// The outcome for the host, if any.
    fn classify(&self, result: &Result<T, BoxError>) -> Option<HostOutcome>;
}

impl<T, F> HostClassifier<T> for F
where
    F: Fn(&Result<T, BoxError>) -> Option<HostOutcome>,
{
    fn classify(&self, result: &Result<T, BoxError>) -> Option<HostOutcome> {
        self(result)
    }
}

/// The default classifier: `Ok` is a success; a local refusal (a breaker's rejection, a full
/// bulkhead, the gate, the throttle) records nothing; a [`timeout`](crate::timeout) expiry is
/// a [`HostOutcome::Timeout`]; any other error is a [`HostOutcome::Failure`]. With the `http`
/// feature, `http::Response`s are classified by status code.
///
/// ```
/// use tripline_policies::BoxError;
/// use tripline_policies::outlier::{HostClassifier, HostOutcome, ResultHostClassifier};
///
/// let ok: Result<u32, BoxError> = Ok(1);
/// assert_eq!(ResultHostClassifier.classify(&ok), Some(HostOutcome::Success));
/// let err: Result<u32, BoxError> = Err("reset".into());
/// assert_eq!(ResultHostClassifier.classify(&err), Some(HostOutcome::Failure));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ResultHostClassifier;

/// The outcome of an error: `None` for a local refusal, `Timeout` for a timeout's expiry,
/// `Failure` otherwise.
fn error_outcome(e: &BoxError) -> Option<HostOutcome> {
    let e: &(dyn std::error::Error + 'static) = &**e;
    if crate::is_local_rejection(e) {
        return None;
    }
    #[cfg(feature = "timeout")]
    {
        let mut cur = Some(e);
        while let Some(x) = cur {
            if x.is::<crate::timeout::Elapsed>() {
                return Some(HostOutcome::Timeout);
            }
            cur = x.source();
        }
    }
    Some(HostOutcome::Failure)
}

impl<T> HostClassifier<T> for ResultHostClassifier {
    fn classify(&self, result: &Result<T, BoxError>) -> Option<HostOutcome> {
        match result {
            Ok(_) => Some(HostOutcome::Success),
            Err(e) => error_outcome(e),
        }
    }
}

/// Classifies `http::Response`s by status code ([`HostOutcome::Status`]), errors as
/// [`ResultHostClassifier`] does.
///
/// ```
/// use tripline_policies::BoxError;
/// use tripline_policies::outlier::{HostClassifier, HostOutcome, HttpHostClassifier};
///
/// let resp: Result<http::Response<()>, BoxError> =
///     Ok(http::Response::builder().status(503).body(()).unwrap());
/// assert_eq!(HttpHostClassifier.classify(&resp), Some(HostOutcome::Status(503)));
/// ```
#[cfg(feature = "http")]
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpHostClassifier;

#[cfg(feature = "http")]
impl<B> HostClassifier<http::Response<B>> for HttpHostClassifier {
    fn classify(&self, result: &Result<http::Response<B>, BoxError>) -> Option<HostOutcome> {
        match result {
            Ok(r) => Some(HostOutcome::Status(r.status().as_u16())),
            Err(e) => error_outcome(e),
        }
    }
}

/// A service that picks a host for each request with an [`OutlierDetector`] and calls the
/// inner service with `(host, request)`. Made by [`OutlierLayer`](super::OutlierLayer).
///
/// Readiness is the inner service's. The pick is made in `call` and counted in flight on
/// the host until the response completes (its result is classified and recorded) or the
/// response future is dropped (nothing is recorded).
#[derive(Debug)]
pub struct OutlierService<S, H: HostKey, C: Clock = MonotonicClock, K = ResultHostClassifier> {
    inner: S,
    detector: OutlierDetector<H, C>,
    classifier: K,
}

impl<S: Clone, H: HostKey, C: Clock, K: Clone> Clone for OutlierService<S, H, C, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            detector: self.detector.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<S, H: HostKey, C: Clock, K> OutlierService<S, H, C, K> {
    /// `inner` behind `detector`, results classified by `classifier`.
    pub const fn new(inner: S, detector: OutlierDetector<H, C>, classifier: K) -> Self {
        Self {
            inner,
            detector,
            classifier,
        }
    }

    /// The detector.
    pub fn detector(&self) -> &OutlierDetector<H, C> {
        &self.detector
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

impl<S, H, C, K, Req> Service<Req> for OutlierService<S, H, C, K>
where
    S: Service<(H, Req)>,
    S::Error: Into<BoxError>,
    H: HostKey,
    C: Clock,
    K: HostClassifier<S::Response> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, H, C, K>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let pick = self.detector.pick();
        let host = pick.host().clone();
        ResponseFuture::new(
            self.inner.call((host, req)),
            pick,
            self.detector.clone(),
            self.classifier.clone(),
        )
    }
}
