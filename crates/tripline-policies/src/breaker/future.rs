//! The breaker service's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tripline::{Classify, Clock, OwnedPermit, Rejected};

use crate::BoxError;

pin_project! {
    /// The response of a [`Breaker`](super::Breaker): the inner call and the permit whose
    /// result it records, or the breaker's rejection. Dropping it mid-call abandons the permit.
    /// Nothing is allocated per call.
    pub struct ResponseFuture<F, C: Clock, K> {
        #[pin]
        inner: Option<F>,
        permit: Option<OwnedPermit<C>>,
        rejected: Option<Rejected>,
        classifier: K,
    }
}

impl<F, C: Clock, K> ResponseFuture<F, C, K> {
    pub(crate) fn called(inner: F, permit: OwnedPermit<C>, classifier: K) -> Self {
        Self {
            inner: Some(inner),
            permit: Some(permit),
            rejected: None,
            classifier,
        }
    }

    pub(crate) fn rejected(rejected: Rejected, classifier: K) -> Self {
        Self {
            inner: None,
            permit: None,
            rejected: Some(rejected),
            classifier,
        }
    }
}

impl<F, C: Clock, K> fmt::Debug for ResponseFuture<F, C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("rejected", &self.rejected)
            .finish_non_exhaustive()
    }
}

impl<F, T, E, C, K> Future for ResponseFuture<F, C, K>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    C: Clock,
    K: Classify<T, BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Some(rejected) = this.rejected.take() {
            return Poll::Ready(Err(rejected.into()));
        }
        let Some(inner) = this.inner.as_pin_mut() else {
            panic!("ResponseFuture polled after completion");
        };
        let result = std::task::ready!(inner.poll(cx)).map_err(Into::into);
        if let Some(permit) = this.permit.take() {
            let _ = permit.record_classified(super::classify(this.classifier, &result));
        }
        Poll::Ready(result)
    }
}
