//! The injector service's response future.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Sleep;

use super::InjectedFault;
use crate::BoxError;

pin_project! {
    /// The response of a [`ChaosService`](super::ChaosService): the inner call, possibly after
    /// an injected delay; an injected error; or a hang that never completes.
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
        Pass {
            #[pin]
            fut: F,
        },
        Delayed {
            #[pin]
            fut: F,
            delay: Duration,
            // Made on the first poll: a timer needs the runtime, and `call` may run outside
            // one.
            #[pin]
            sleep: Option<Sleep>,
            slept: bool,
        },
        Failed,
        Hung,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn pass(fut: F) -> Self {
        Self {
            kind: Kind::Pass { fut },
        }
    }

    pub(crate) fn delayed(fut: F, delay: Duration) -> Self {
        Self {
            kind: Kind::Delayed {
                fut,
                delay,
                sleep: None,
                slept: false,
            },
        }
    }

    pub(crate) fn failed() -> Self {
        Self { kind: Kind::Failed }
    }

    pub(crate) fn hung() -> Self {
        Self { kind: Kind::Hung }
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
            KindProj::Pass { fut } => fut.poll(cx).map_err(Into::into),
            KindProj::Delayed {
                fut,
                delay,
                mut sleep,
                slept,
            } => {
                if !*slept {
                    if sleep.is_none() {
                        sleep.set(Some(tokio::time::sleep(*delay)));
                    }
                    if let Some(s) = sleep.as_mut().as_pin_mut() {
                        ready!(s.poll(cx));
                    }
                    *slept = true;
                }
                fut.poll(cx).map_err(Into::into)
            }
            KindProj::Failed => Poll::Ready(Err(Box::new(InjectedFault::new()))),
            KindProj::Hung => Poll::Pending,
        }
    }
}
