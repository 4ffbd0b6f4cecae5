//! The partial breaker service's response future.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tripline::{Classify, Outcome};

use super::{PartialPermit, PartiallyOpen};
use crate::BoxError;

pin_project! {
    /// The response of a [`PartialService`](super::PartialService): the inner call, whose
    /// result is recorded when it completes; or the rejection at once. Dropped mid-call, it
    /// records nothing.
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
            permit: Option<PartialPermit>,
            classifier: K,
        },
        Rejected {
            rejected: PartiallyOpen,
        },
    }
}

impl<F, K> ResponseFuture<F, K> {
    pub(crate) fn called(fut: F, permit: PartialPermit, classifier: K) -> Self {
        Self {
            kind: Kind::Called {
                fut,
                permit: Some(permit),
                classifier,
            },
        }
    }

    pub(crate) fn rejected(rejected: PartiallyOpen) -> Self {
        Self {
            kind: Kind::Rejected { rejected },
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
                permit,
                classifier,
            } => {
                let out = ready!(fut.poll(cx)).map_err(Into::into);
                if let Some(permit) = permit.take() {
                    match &out {
                        Err(e) if crate::is_local_rejection(&**e) => {
                            permit.record(Outcome::Ignored)
                        }
                        _ => permit.record(classifier.classify(&out).outcome),
                    }
                }
                Poll::Ready(out)
            }
            KindProj::Rejected { rejected } => Poll::Ready(Err(Box::new(*rejected))),
        }
    }
}
