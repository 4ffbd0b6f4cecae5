//! The throttle service's response future.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tripline::Classify;

use super::{ThrottleTicket, Throttled};
use crate::BoxError;

pin_project! {
    /// The response of a [`ThrottleService`](super::ThrottleService): the inner call, whose
    /// result is reported to the throttle when it completes; or the local rejection at once.
    #[derive(Debug)]
    pub struct ResponseFuture<F, K> {
        #[pin]
        kind: Kind<F, K>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<F, K> {
        Called {
            #[pin]
            fut: F,
            ticket: Option<ThrottleTicket>,
            classifier: K,
        },
        Throttled {
            throttled: Throttled,
        },
    }
}

impl<F, K> ResponseFuture<F, K> {
    pub(crate) fn called(fut: F, ticket: ThrottleTicket, classifier: K) -> Self {
        Self {
            kind: Kind::Called {
                fut,
                ticket: Some(ticket),
                classifier,
            },
        }
    }

    pub(crate) fn throttled(throttled: Throttled) -> Self {
        Self {
            kind: Kind::Throttled { throttled },
        }
    }
}

impl<F, T, E, K> Future for ResponseFuture<F, K>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    K: Classify<T, BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Called {
                fut,
                ticket,
                classifier,
            } => {
                let out = ready!(fut.poll(cx)).map_err(Into::into);
                if let Some(ticket) = ticket.take() {
                    match &out {
                        Err(e) if crate::is_local_rejection(&**e) => ticket.not_sent(),
                        _ => ticket.record(classifier.classify(&out).outcome),
                    }
                }
                Poll::Ready(out)
            }
            KindProj::Throttled { throttled } => Poll::Ready(Err(Box::new(*throttled))),
        }
    }
}
