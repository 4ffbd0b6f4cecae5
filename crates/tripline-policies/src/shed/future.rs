//! The shedder service's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::{Shed, ShedPermit};
use crate::BoxError;
use crate::queued::{Queued, Wait};

pin_project! {
    /// The response of a [`ShedService`](super::ShedService): waiting in the queue for a slot,
    /// then the inner call holding it; or the refusal at once. The slot is given back as soon
    /// as the inner future completes, or when this future is dropped.
    pub struct ResponseFuture<S, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        state: Queued<S, Req, ShedPermit, Shed>,
    }
}

impl<S: Service<Req>, Req> fmt::Debug for ResponseFuture<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("state", &self.state.name())
            .finish()
    }
}

impl<S: Service<Req>, Req> ResponseFuture<S, Req> {
    pub(crate) fn called(fut: S::Future, permit: ShedPermit) -> Self {
        Self {
            state: Queued::called(fut, permit),
        }
    }

    pub(crate) fn queued(wait: Wait<ShedPermit, Shed>, service: S, request: Req) -> Self {
        Self {
            state: Queued::waiting(wait, service, request),
        }
    }

    pub(crate) fn shed(shed: Shed) -> Self {
        Self {
            state: Queued::refused(shed),
        }
    }
}

impl<S, Req> Future for ResponseFuture<S, Req>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().state.poll_with(cx, |permit, _| drop(permit))
    }
}
