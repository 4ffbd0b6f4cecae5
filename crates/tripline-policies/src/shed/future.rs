//! The shedder service's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::{Shed, ShedPermit};
use crate::BoxError;

type Wait = Pin<Box<dyn Future<Output = Result<ShedPermit, Shed>> + Send>>;

pin_project! {
    /// The response of a [`ShedService`](super::ShedService): waiting in the queue for a slot,
    /// then the inner call holding it; or the refusal at once. The slot is given back as soon
    /// as the inner future completes, or when this future is dropped.
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
            permit: Option<ShedPermit>,
        },
        Shed {
            shed: Shed,
        },
    }
}

impl<S: Service<Req>, Req> fmt::Debug for ResponseFuture<S, Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Queued { .. } => "queued",
            State::Called { .. } => "called",
            State::Shed { .. } => "shed",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S: Service<Req>, Req> ResponseFuture<S, Req> {
    pub(crate) fn called(fut: S::Future, permit: ShedPermit) -> Self {
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

    pub(crate) fn shed(shed: Shed) -> Self {
        Self {
            state: State::Shed { shed },
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
                    let (Some(mut service), Some(request)) = (service.take(), request.take())
                    else {
                        return Poll::Ready(Err("shed future polled after completion".into()));
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
                StateProj::Shed { shed } => return Poll::Ready(Err(Box::new(*shed))),
            }
        }
    }
}
