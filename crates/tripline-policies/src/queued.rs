//! The response future of a tower service whose calls may wait for a slot first (the shedder's
//! and the limiter's): waiting, then the inner call holding its permit, or the refusal.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tower_service::Service;

use crate::BoxError;

/// A boxed wait for a permit.
pub(crate) type Wait<P, E> = Pin<Box<dyn Future<Output = Result<P, E>> + Send>>;

pin_project! {
    #[project = StateProj]
    pub(crate) enum Queued<S, Req, P, E>
    where
        S: Service<Req>,
    {
        Waiting {
            wait: Wait<P, E>,
            service: Option<S>,
            request: Option<Req>,
        },
        Called {
            #[pin]
            fut: S::Future,
            permit: Option<P>,
        },
        Refused {
            error: Option<E>,
        },
        Done,
    }
}

impl<S: Service<Req>, Req, P, E> Queued<S, Req, P, E> {
    pub(crate) fn called(fut: S::Future, permit: P) -> Self {
        Queued::Called {
            fut,
            permit: Some(permit),
        }
    }

    pub(crate) fn waiting(wait: Wait<P, E>, service: S, request: Req) -> Self {
        Queued::Waiting {
            wait,
            service: Some(service),
            request: Some(request),
        }
    }

    pub(crate) fn refused(error: E) -> Self {
        Queued::Refused { error: Some(error) }
    }

    /// `waiting`, `called` or `refused`, for `Debug`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Queued::Waiting { .. } => "waiting",
            Queued::Called { .. } => "called",
            Queued::Refused { .. } => "refused",
            Queued::Done => "done",
        }
    }

    /// Polls the wait, then the call; `finish` gets the permit and the result when the call
    /// completes (and the permit is released when it returns).
    pub(crate) fn poll_with(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        finish: impl FnOnce(P, &Result<S::Response, BoxError>),
    ) -> Poll<Result<S::Response, BoxError>>
    where
        S::Error: Into<BoxError>,
        E: std::error::Error + Send + Sync + 'static,
    {
        loop {
            match self.as_mut().project() {
                StateProj::Waiting {
                    wait,
                    service,
                    request,
                } => {
                    let permit = match ready!(wait.as_mut().poll(cx)) {
                        Ok(p) => p,
                        Err(e) => {
                            self.set(Queued::Done);
                            return Poll::Ready(Err(Box::new(e)));
                        }
                    };
                    let (Some(mut service), Some(request)) = (service.take(), request.take())
                    else {
                        return Poll::Ready(Err("response future polled after completion".into()));
                    };
                    let fut = service.call(request);
                    self.set(Queued::called(fut, permit));
                }
                StateProj::Called { fut, permit } => {
                    let out = ready!(fut.poll(cx)).map_err(Into::into);
                    if let Some(p) = permit.take() {
                        finish(p, &out);
                    }
                    return Poll::Ready(out);
                }
                StateProj::Refused { error } => {
                    return Poll::Ready(Err(match error.take() {
                        Some(e) => Box::new(e),
                        None => "response future polled after completion".into(),
                    }));
                }
                StateProj::Done => {
                    return Poll::Ready(Err("response future polled after completion".into()));
                }
            }
        }
    }
}
