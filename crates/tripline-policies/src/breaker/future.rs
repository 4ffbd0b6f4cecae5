//! The breaker service's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::BoxError;

type Boxed<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

/// The response of a [`Breaker`](super::Breaker): the permit, the inner call and the recording
/// of its result. Dropping it mid-call abandons the permit.
pub struct ResponseFuture<T> {
    inner: Boxed<T>,
}

impl<T> ResponseFuture<T> {
    pub(crate) fn new(inner: Boxed<T>) -> Self {
        Self { inner }
    }
}

impl<T> fmt::Debug for ResponseFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<T> Future for ResponseFuture<T> {
    type Output = Result<T, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
