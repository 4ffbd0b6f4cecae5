//! The outlier service's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tripline::Clock;

use super::{HostClassifier, HostKey, OutlierDetector, Pick};
use crate::BoxError;

pin_project! {
    /// The response of an [`OutlierService`](super::OutlierService) or an
    /// [`OutlierEndpoint`](super::OutlierEndpoint): the inner call and the pick whose outcome
    /// it records when it completes. Dropped before that, it records nothing (the host's
    /// in-flight count is given back).
    pub struct ResponseFuture<F, H: HostKey, C: Clock, K> {
        #[pin]
        inner: F,
        pick: Option<Pick<H>>,
        detector: OutlierDetector<H, C>,
        classifier: K,
    }
}

impl<F, H: HostKey, C: Clock, K> ResponseFuture<F, H, C, K> {
    pub(crate) fn new(
        inner: F,
        pick: Pick<H>,
        detector: OutlierDetector<H, C>,
        classifier: K,
    ) -> Self {
        Self::with_pick(inner, Some(pick), detector, classifier)
    }

    /// A call whose host may have left the detector's set (`None`: nothing is recorded).
    pub(crate) fn with_pick(
        inner: F,
        pick: Option<Pick<H>>,
        detector: OutlierDetector<H, C>,
        classifier: K,
    ) -> Self {
        Self {
            inner,
            pick,
            detector,
            classifier,
        }
    }
}

impl<F, H: HostKey, C: Clock, K> fmt::Debug for ResponseFuture<F, H, C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("pick", &self.pick)
            .finish_non_exhaustive()
    }
}

impl<F, T, E, H, C, K> Future for ResponseFuture<F, H, C, K>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    H: HostKey,
    C: Clock,
    K: HostClassifier<T>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx)).map_err(Into::into);
        if let Some(pick) = this.pick.take() {
            match this.classifier.classify(&result) {
                Some(outcome) => this.detector.record(pick, outcome),
                None => drop(pick),
            }
        }
        Poll::Ready(result)
    }
}
