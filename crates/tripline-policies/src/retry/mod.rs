//! Retry with exponential backoff, jitter and budgets.
//!
//! # What a retry may and may not do
//!
//! Retries exist to survive blips: a dropped connection, one overloaded replica, a timeout
//! that would not repeat. They are also the easiest way to turn a blip into an outage: every
//! failing request retried three times is three times the load on a dependency that was
//! already failing. This module keeps retries on the right side of that line:
//!
//! * **A bounded number of attempts** per request ([`RetryPolicy`], 3 by default).
//! * **Backoff with jitter** between attempts ([`Backoff`], [`Jitter`]): exponential from a
//!   base up to a cap, randomised with one of the three formulas of the AWS article
//!   "Exponential Backoff and Jitter", so that clients that failed together do not retry
//!   together.
//! * **A budget** across requests ([`budget`]): a share of the traffic, a token bucket, or
//!   none at all while the error rate is high. The budget is what stops retries from
//!   re-amplifying an outage.
//! * **A predicate** ([`Retryable`]) for what is worth retrying: a 503 is, a 400 is not.
//! * **Never a local rejection.** A call refused by an open breaker, a full bulkhead, the
//!   concurrency gate or the throttle is returned at once, whatever the predicate says. Those
//!   policies refused it to shed load; retrying would put the load back. In particular, with
//!   the retry outside the breaker (the [pipeline](crate::pipeline)'s default), a breaker that
//!   re-opens gets zero retries. A retry whose attempt such a policy refuses was never made: its
//!   budget withdrawal is given back and it is not counted in [`RetryStats::retries`] (nor is a
//!   retry whose request is dropped during its backoff).
//!
//! Backoff delays run on tokio's timer, so paused-time tests step through them instantly. A
//! caller that keeps its own time (an event loop, a simulator on virtual time) drives the same
//! loop step by step with [`RetryPolicy::begin_request`] and [`RetryState`], and waits the
//! delays itself.
//!
//! With the `tower` feature, [`RetryLayer`] retries a service's calls; the request must be
//! cloned for each retry ([`CloneRequest`]: `Clone` requests by default, or a function for
//! requests that are not, such as HTTP requests with buffered bodies).

mod backoff;
pub mod budget;
mod config;
#[cfg(feature = "tower")]
pub mod future;
#[cfg(feature = "tower")]
mod layer;
pub(crate) mod policy;

pub use backoff::{Backoff, Jitter, MAX_BASE_DELAY, MAX_DELAY};
pub use config::{BudgetConfig, RetryConfig};
#[cfg(feature = "tower")]
pub use layer::RetryLayer;
pub use policy::{
    AttemptResult, MAX_ATTEMPTS, RetryOnError, RetryPolicy, RetryPolicyBuilder, RetryState,
    RetryStats, Retryable,
};

/// Makes the copy of a request that a retry sends. Implemented for closures
/// `Fn(&Req) -> Option<Req>` (return `None` for a request that cannot be retried, such as one
/// with a streaming body) and by [`CloneAll`] for `Clone` requests.
///
/// ```
/// use tripline_policies::retry::CloneRequest;
///
/// // Only idempotent requests are retried.
/// let idempotent = |req: &(&'static str, u32)| (req.0 != "POST").then_some(*req);
/// assert_eq!(idempotent.clone_request(&("GET", 1)), Some(("GET", 1)));
/// assert_eq!(idempotent.clone_request(&("POST", 1)), None);
/// ```
pub trait CloneRequest<Req> {
    /// A copy of `req` for a retry, or `None` if it must not be retried.
    fn clone_request(&self, req: &Req) -> Option<Req>;
}

impl<Req, F> CloneRequest<Req> for F
where
    F: Fn(&Req) -> Option<Req>,
{
    fn clone_request(&self, req: &Req) -> Option<Req> {
        self(req)
    }
}

/// Retries any `Clone` request, by cloning it.
#[derive(Clone, Copy, Debug, Default)]
pub struct CloneAll;

impl<Req: Clone> CloneRequest<Req> for CloneAll {
    fn clone_request(&self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }
}

#[cfg(feature = "tower")]
mod service {
    use std::task::{Context, Poll};

    use tower_service::Service;

    use super::future::ResponseFuture;
    use super::{CloneAll, CloneRequest, RetryOnError, RetryPolicy, Retryable};
    use crate::BoxError;

    /// A service whose failed calls are retried by a [`RetryPolicy`]. Made by
    /// [`RetryLayer`](super::RetryLayer).
    ///
    /// The call that was made ready goes out at once; each retry waits its backoff, then for
    /// the inner service to be ready again, and sends a copy of the request made before the
    /// previous attempt. The result of the last attempt is returned. A call refused by a local
    /// policy further in is returned at once, never retried. The inner service must be `Clone`
    /// (each call keeps the one it was made ready with). The response future allocates
    /// nothing beyond the requests' copies.
    #[derive(Clone, Debug)]
    pub struct Retry<S, P = RetryOnError, K = CloneAll> {
        inner: S,
        policy: RetryPolicy<P>,
        cloner: K,
        gate: crate::RetryGate,
    }

    impl<S, P, K> Retry<S, P, K> {
        pub(crate) const fn new(
            inner: S,
            policy: RetryPolicy<P>,
            cloner: K,
            gate: crate::RetryGate,
        ) -> Self {
            Self {
                inner,
                policy,
                cloner,
                gate,
            }
        }

        /// The policy.
        pub fn policy(&self) -> &RetryPolicy<P> {
            &self.policy
        }

        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// The inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    }

    impl<S, P, K, Req> Service<Req> for Retry<S, P, K>
    where
        S: Service<Req> + Clone,
        S::Error: Into<BoxError>,
        P: Retryable<S::Response, BoxError> + Clone,
        K: CloneRequest<Req> + Clone,
    {
        type Response = S::Response;
        type Error = BoxError;
        type Future = ResponseFuture<S, Req, P, K>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            self.inner.poll_ready(cx).map_err(Into::into)
        }

        fn call(&mut self, req: Req) -> Self::Future {
            let clone = self.inner.clone();
            let service = std::mem::replace(&mut self.inner, clone);
            ResponseFuture::new(
                service,
                req,
                self.policy.clone(),
                self.cloner.clone(),
                self.gate.clone(),
            )
        }
    }
}

#[cfg(feature = "tower")]
pub use service::Retry;
