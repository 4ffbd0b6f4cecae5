//! The gate service's response future.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;

use super::{GateGuard, GateOverflow};
use crate::BoxError;

pin_project! {
    /// The response of a [`GateService`](super::GateService): the inner call holding its
    /// request slot, or the overflow at once. The slot is given back as soon as the inner
    /// future completes, or when this future is dropped.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<F> {
        Called {
            #[pin]
            fut: F,
            guard: Option<GateGuard>,
        },
        Overflow {
            overflow: GateOverflow,
        },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn called(fut: F, guard: GateGuard) -> Self {
        Self {
            kind: Kind::Called {
                fut,
                guard: Some(guard),
            },
        }
    }

    pub(crate) fn overflow(overflow: GateOverflow) -> Self {
        Self {
            kind: Kind::Overflow { overflow },
        }
    }
}

impl<F, T, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Called { fut, guard } => {
                let out = ready!(fut.poll(cx));
                *guard = None;
                Poll::Ready(out.map_err(Into::into))
            }
            KindProj::Overflow { overflow } => Poll::Ready(Err(Box::new(*overflow))),
        }
    }
}
