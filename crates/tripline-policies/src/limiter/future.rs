//! The limiter service's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower_service::Service;
use tripline::Classify;

use super::{LimitExceeded, LimiterPermit};
use crate::BoxError;
use crate::queued::{Queued, Wait};

pin_project! {
    /// The response of a [`LimiterService`](super::LimiterService): waiting in the queue, then
    /// the inner call holding its slot, whose result is fed to the limiter when it completes;
    /// or the refusal at once. Dropped mid-call, the permit feeds nothing and its slot goes
    /// back.
    pub struct ResponseFuture<S, Req, K>
    where
        S: Service<Req>,
    {
        #[pin]
        state: Queued<S, Req, LimiterPermit, LimitExceeded>,
        classifier: K,
    }
}

impl<S: Service<Req>, Req, K> fmt::Debug for ResponseFuture<S, Req, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("state", &self.state.name())
            .finish_non_exhaustive()
    }
}

impl<S: Service<Req>, Req, K> ResponseFuture<S, Req, K> {
    pub(crate) fn called(fut: S::Future, permit: LimiterPermit, classifier: K) -> Self {
        Self {
            state: Queued::called(fut, permit),
            classifier,
        }
    }

    pub(crate) fn queued(
        wait: Wait<LimiterPermit, LimitExceeded>,
        service: S,
        request: Req,
        classifier: K,
    ) -> Self {
        Self {
            state: Queued::waiting(wait, service, request),
            classifier,
        }
    }

    pub(crate) fn refused(error: LimitExceeded, classifier: K) -> Self {
        Self {
            state: Queued::refused(error),
            classifier,
        }
    }
}

impl<S, Req, K> Future for ResponseFuture<S, Req, K>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    K: Classify<S::Response, BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let classifier = &*this.classifier;
        this.state.poll_with(cx, |permit, out| match out {
            Err(e) if crate::is_local_rejection(&**e) => permit.ignore(),
            _ => permit.record(classifier.classify(out).outcome),
        })
    }
}
