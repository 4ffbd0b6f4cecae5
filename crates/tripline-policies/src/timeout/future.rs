//! The timeout service's response future.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Sleep;

use super::Elapsed;
use crate::BoxError;

pin_project! {
    /// The response of a [`Timeout`](super::Timeout): the inner call raced against a timer.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        response: F,
        #[pin]
        sleep: Sleep,
        timeout: Duration,
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(response: F, timeout: Duration) -> Self {
        Self {
            response,
            sleep: tokio::time::sleep(timeout),
            timeout,
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
        let this = self.project();
        if let Poll::Ready(out) = this.response.poll(cx) {
            return Poll::Ready(out.map_err(Into::into));
        }
        match this.sleep.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Box::new(Elapsed::new(*this.timeout)))),
            Poll::Pending => Poll::Pending,
        }
    }
}
