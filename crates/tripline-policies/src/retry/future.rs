//! The retry service's response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use super::budget::RetryCause;
use super::policy::{Attempts, Verdict};
use super::{CloneRequest, RetryPolicy, Retryable};
use crate::BoxError;

pin_project! {
    /// The response of a [`Retry`](super::Retry): the current attempt, or the backoff before
    /// the next one.
    pub struct ResponseFuture<S, Req, P, K>
    where
        S: Service<Req>,
    {
        #[pin]
        state: State<S::Future>,
        service: S,
        request: Option<Req>,
        policy: RetryPolicy<P>,
        cloner: K,
        attempts: Attempts,
        gate: crate::RetryGate,
        slot: crate::RetrySlot,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Called {
            #[pin]
            fut: F,
        },
        Waiting {
            #[pin]
            sleep: Sleep,
        },
        Ready,
    }
}

impl<S: Service<Req>, Req, P, K> fmt::Debug for ResponseFuture<S, Req, P, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Waiting { .. } => "waiting",
            State::Ready => "ready",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl<S, Req, P, K> ResponseFuture<S, Req, P, K>
where
    S: Service<Req>,
    K: CloneRequest<Req>,
{
    pub(crate) fn new(
        mut service: S,
        request: Req,
        policy: RetryPolicy<P>,
        cloner: K,
        gate: crate::RetryGate,
    ) -> Self {
        let attempts = policy.start();
        let copy = if attempts.may_retry() {
            cloner.clone_request(&request)
        } else {
            None
        };
        let fut = service.call(request);
        Self {
            state: State::Called { fut },
            service,
            request: copy,
            policy,
            cloner,
            attempts,
            gate,
            slot: Default::default(),
        }
    }
}

/// The verdict on a tower result: local rejections and timeouts are recognised in the error's
/// chain, everything else goes to the predicate. A timeout is retried as `retry_timeouts`
/// says, without asking the predicate, as in the pipeline (whose timeout is not a result the
/// predicate could see).
fn verdict<T, P: Retryable<T, BoxError>>(
    policy: &RetryPolicy<P>,
    result: &Result<T, BoxError>,
) -> Verdict {
    if let Err(e) = result {
        if crate::is_local_rejection(&**e) {
            return Verdict::Local;
        }
        if crate::is_timeout(&**e) {
            return Verdict::Failure {
                cause: RetryCause::Timeout,
                retryable: policy.retries_timeouts(),
            };
        }
    }
    Verdict::of(policy.predicate(), result)
}

impl<S, Req, P, K> Future for ResponseFuture<S, Req, P, K>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    P: Retryable<S::Response, BoxError>,
    K: CloneRequest<Req>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Called { fut } => {
                    let result = ready!(fut.poll(cx)).map_err(Into::into);
                    // The attempt is over: a retry's gate slot goes back.
                    *this.slot = Default::default();
                    let v = verdict(this.policy, &result);
                    if this.request.is_none() && this.attempts.may_retry() {
                        // No copy of the request could be made: it cannot be retried.
                        this.attempts.report(v);
                        return Poll::Ready(result);
                    }
                    // `next` grants a retry only while attempts remain, and then a copy of
                    // the request is in hand.
                    let Some(delay) = this.attempts.next(v) else {
                        return Poll::Ready(result);
                    };
                    match crate::retry_slot(this.gate) {
                        Ok(slot) => *this.slot = slot,
                        Err(()) => {
                            this.attempts.cancel();
                            return Poll::Ready(result);
                        }
                    }
                    this.state.set(State::Waiting {
                        sleep: tokio::time::sleep(delay),
                    });
                }
                StateProj::Waiting { sleep } => {
                    ready!(sleep.poll(cx));
                    this.state.set(State::Ready);
                }
                StateProj::Ready => {
                    if let Err(e) = ready!(this.service.poll_ready(cx)) {
                        return Poll::Ready(Err(e.into()));
                    }
                    let Some(request) = this.request.take() else {
                        // Unreachable: a retry is only scheduled with a copy in hand.
                        return Poll::Ready(Err("retry scheduled without a request".into()));
                    };
                    if this.attempts.may_retry() {
                        *this.request = this.cloner.clone_request(&request);
                    }
                    this.attempts.begin();
                    let fut = this.service.call(request);
                    this.state.set(State::Called { fut });
                }
            }
        }
    }
}
