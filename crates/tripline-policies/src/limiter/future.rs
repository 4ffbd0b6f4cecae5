//! The limiter service's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tower_service::Service;
use tripline::Classify;

use super::{LimitExceeded, LimiterPermit};
use crate::BoxError;

type Wait = Pin<Box<dyn Future<Output = Result<LimiterPermit, LimitExceeded>> + Send>>;

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
        state: State<S::Future, S, Req>,
        classifier: K,
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
            permit: Option<LimiterPermit>,
        },
        Refused {
            error: LimitExceeded,
        },
    }
}

impl<S: Service<Req>, Req, K> fmt::Debug for ResponseFuture<S, Req, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Queued { .. } => "queued",
            State::Called { .. } => "called",
            State::Refused { .. } => "refused",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl<S: Service<Req>, Req, K> ResponseFuture<S, Req, K> {
    pub(crate) fn called(fut: S::Future, permit: LimiterPermit, classifier: K) -> Self {
        Self {
            state: State::Called {
                fut,
                permit: Some(permit),
            },
            classifier,
        }
    }

    pub(crate) fn queued(wait: Wait, service: S, request: Req, classifier: K) -> Self {
        Self {
            state: State::Queued {
                wait,
                service: Some(service),
                request: Some(request),
            },
            classifier,
        }
    }

    pub(crate) fn refused(error: LimitExceeded, classifier: K) -> Self {
        Self {
            state: State::Refused { error },
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
                        return Poll::Ready(Err("limiter future polled after completion".into()));
                    };
                    let fut = service.call(request);
                    this.state.set(State::Called {
                        fut,
                        permit: Some(permit),
                    });
                }
                StateProj::Called { fut, permit } => {
                    let out = ready!(fut.poll(cx)).map_err(Into::into);
                    if let Some(permit) = permit.take() {
                        match &out {
                            Err(e) if crate::is_local_rejection(&**e) => permit.ignore(),
                            _ => permit.record(this.classifier.classify(&out).outcome),
                        }
                    }
                    return Poll::Ready(out);
                }
                StateProj::Refused { error } => return Poll::Ready(Err(Box::new(*error))),
            }
        }
    }
}
