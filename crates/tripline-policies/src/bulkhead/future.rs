//! The bulkhead service's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::{BulkheadFull, BulkheadPermit};
use crate::BoxError;

type Wait = Pin<Box<dyn Future<Output = Result<BulkheadPermit, BulkheadFull>> + Send>>;

pin_project! {
    /// The response of a [`BulkheadService`](super::BulkheadService): waiting for a slot, then
    /// the inner call holding it; or the rejection at once. The slot is given back as soon as
    /// the inner future completes, or when this future is dropped.
    pub struct ResponseFuture<S, Req>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S::Future, S, Req>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, Req> {
        Queued {
            wait: Wait,
            service: Option<S>,
            request: Option<Req>,
        },
        Called {
            #[pin]
            fut: F,
            permit: Option<BulkheadPermit>,
        },
        Full {
            error: BulkheadFull,
        },
    }
}

impl<S: Service<Req>, Req> fmt::Debug for ResponseFuture<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Queued { .. } => "queued",
            State::Called { .. } => "called",
            State::Full { .. } => "full",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S: Service<Req>, Req> ResponseFuture<S, Req> {
    pub(crate) fn called(fut: S::Future, permit: BulkheadPermit) -> Self {
        Self {
            state: State::Called {
                fut,
                permit: Some(permit),
            },
        }
    }

    pub(crate) fn queued(wait: Wait, service: S, request: Req) -> Self {
        Self {
            state: State::Queued {
                wait,
                service: Some(service),
                request: Some(request),
            },
        }
    }

    pub(crate) fn full(error: BulkheadFull) -> Self {
        Self {
            state: State::Full { error },
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
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Queued {
                    wait,
                    service,
                    request,
                } => {
                    let permit = match ready!(wait.as_mut().poll(cx)) {
                        Ok(p) => p,
                        Err(e) => return Poll::Ready(Err(Box::new(e))),
                    };
                    // Both are taken exactly once, on this transition.
                    let (Some(mut service), Some(request)) = (service.take(), request.take())
                    else {
                        return Poll::Ready(Err("bulkhead future polled after completion".into()));
                    };
                    let fut = service.call(request);
                    this.state.set(State::Called {
                        fut,
                        permit: Some(permit),
                    });
                }
                StateProj::Called { fut, permit } => {
                    let out = ready!(fut.poll(cx));
                    *permit = None;
                    return Poll::Ready(out.map_err(Into::into));
                }
                StateProj::Full { error } => return Poll::Ready(Err(Box::new(*error))),
            }
        }
    }
}
