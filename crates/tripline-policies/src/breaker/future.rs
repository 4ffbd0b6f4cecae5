//! The breaker service's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tripline::{Breaker, BreakerPermit, CircuitBreaker, Classify, Clock};

use crate::BoxError;

pin_project! {
    /// The response of a [`Breaker`](super::Breaker): the inner call and the permit whose
    /// result it records, or the breaker's refusal. Dropping it mid-call abandons the permit.
    /// With the in-process breaker nothing is allocated per call; with a breaker whose
    /// recording waits (a shared one), the response is yielded once the result is recorded.
    ///
    /// `R` is the inner service's response type (kept while the result is being recorded).
    pub struct ResponseFuture<F, C, K, B = CircuitBreaker<C>, R = ()>
    where
        C: Clock,
        B: Breaker,
    {
        #[pin]
        inner: Option<F>,
        permit: Option<B::Permit>,
        failed: Option<BoxError>,
        recording: Option<<B::Permit as BreakerPermit>::Record>,
        output: Option<Result<R, BoxError>>,
        classifier: K,
        clock: std::marker::PhantomData<fn() -> C>,
    }
}

impl<F, C: Clock, K, B: Breaker, R> ResponseFuture<F, C, K, B, R> {
    pub(crate) fn called(inner: F, permit: B::Permit, classifier: K) -> Self {
        Self {
            inner: Some(inner),
            permit: Some(permit),
            failed: None,
            recording: None,
            output: None,
            classifier,
            clock: std::marker::PhantomData,
        }
    }

    pub(crate) fn failed(error: BoxError, classifier: K) -> Self {
        Self {
            inner: None,
            permit: None,
            failed: Some(error),
            recording: None,
            output: None,
            classifier,
            clock: std::marker::PhantomData,
        }
    }
}

impl<F, C: Clock, K, B: Breaker, R> fmt::Debug for ResponseFuture<F, C, K, B, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("rejected", &self.failed)
            .field("recording", &self.recording.is_some())
            .finish_non_exhaustive()
    }
}

impl<F, T, E, C, K, B> Future for ResponseFuture<F, C, K, B, T>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    C: Clock,
    B: Breaker,
    K: Classify<T, BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Some(recording) = this.recording.as_mut() {
            let _ = std::task::ready!(Pin::new(recording).poll(cx));
            *this.recording = None;
            return match this.output.take() {
                Some(output) => Poll::Ready(output),
                None => panic!("ResponseFuture polled after completion"),
            };
        }
        if let Some(failed) = this.failed.take() {
            return Poll::Ready(Err(failed));
        }
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            panic!("ResponseFuture polled after completion");
        };
        let result = std::task::ready!(inner.poll(cx)).map_err(Into::into);
        this.inner.set(None);
        let Some(permit) = this.permit.take() else {
            return Poll::Ready(result);
        };
        let mut recording = permit.record_classified(super::classify(this.classifier, &result));
        match Pin::new(&mut recording).poll(cx) {
            Poll::Ready(_) => Poll::Ready(result),
            Poll::Pending => {
                *this.recording = Some(recording);
                *this.output = Some(result);
                Poll::Pending
            }
        }
    }
}
