//! An async timeout on each call.
//!
//! # Why the timeout sits innermost
//!
//! A timeout does not make anything faster. Its job, inside a resilience stack, is to make
//! every admitted call *settle*: a breaker's window can only learn from calls that end, a
//! bulkhead's slot is only freed when its call ends, and a call that hangs forever teaches
//! nothing while holding everything. So the timeout wraps the dependency call itself, inside
//! the breaker, the bulkhead and the retry: its expiry is an [`Elapsed`] error that a breaker
//! counts as a failure, that frees the bulkhead's slot, and that a retry policy may retry (as
//! a timeout, which some budgets charge more for). Placed outside the breaker instead, it would
//! cut the call off before the breaker saw any result, and the breaker would only see an
//! abandoned permit. The [pipeline](crate::pipeline) keeps it innermost whatever order its
//! builder is called in; only the [fault injector](crate::chaos), which plays the dependency,
//! sits inside it, so that an injected stall is cut like a real one.
//!
//! Each attempt gets its own timeout; a deadline for the whole retried call is a timeout
//! placed outside the retry, on purpose.
//!
//! ```
//! # #[cfg(feature = "tower")]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use std::time::Duration;
//! use tower::{Layer, ServiceExt, service_fn};
//! use tripline_policies::timeout::{Elapsed, TimeoutLayer};
//!
//! let slow = service_fn(|_: ()| async {
//!     tokio::time::sleep(Duration::from_secs(10)).await;
//!     Ok::<_, std::io::Error>("late")
//! });
//! let svc = TimeoutLayer::new(Duration::from_secs(2))?.layer(slow);
//! let err = svc.oneshot(()).await.unwrap_err();
//! assert_eq!(err.downcast_ref::<Elapsed>(), Some(&Elapsed::new(Duration::from_secs(2))));
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "tower"))]
//! # fn main() {}
//! ```

pub mod error;
#[cfg(feature = "tower")]
pub mod future;
#[cfg(feature = "tower")]
mod layer;

use std::time::Duration;

use tripline::ConfigError;

pub use error::Elapsed;
#[cfg(feature = "tower")]
pub use layer::TimeoutLayer;

/// The longest timeout allowed.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// Checks a timeout: it must be in `(0, 1d]`. `field` names it in the error.
///
/// ```
/// use std::time::Duration;
/// use tripline_policies::timeout::check;
///
/// assert!(check("timeout", Duration::from_secs(2)).is_ok());
/// let err = check("timeout", Duration::ZERO).unwrap_err();
/// assert_eq!(err.to_string(), "timeout must be in (0ns, 86400s], got 0ns");
/// ```
pub fn check(field: &str, timeout: Duration) -> Result<Duration, ConfigError> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(ConfigError::new(
            field,
            format!("{timeout:?}"),
            format!("in (0ns, {MAX_TIMEOUT:?}]"),
        ));
    }
    Ok(timeout)
}

#[cfg(feature = "tower")]
mod service {
    use std::task::{Context, Poll};
    use std::time::Duration;

    use tower_service::Service;

    use super::future::ResponseFuture;
    use crate::BoxError;

    /// A service whose calls fail with [`Elapsed`](super::Elapsed) when they take longer than
    /// the timeout. Made by [`TimeoutLayer`](super::TimeoutLayer). Readiness is the inner
    /// service's and is not timed.
    #[derive(Clone, Debug)]
    pub struct Timeout<S> {
        inner: S,
        timeout: Duration,
    }

    impl<S> Timeout<S> {
        pub(crate) const fn new(inner: S, timeout: Duration) -> Self {
            Self { inner, timeout }
        }

        /// The timeout.
        pub fn timeout(&self) -> Duration {
            self.timeout
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

    impl<S, Req> Service<Req> for Timeout<S>
    where
        S: Service<Req>,
        S::Error: Into<BoxError>,
    {
        type Response = S::Response;
        type Error = BoxError;
        type Future = ResponseFuture<S::Future>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            self.inner.poll_ready(cx).map_err(Into::into)
        }

        fn call(&mut self, req: Req) -> Self::Future {
            ResponseFuture::new(self.inner.call(req), self.timeout)
        }
    }
}

#[cfg(feature = "tower")]
pub use service::Timeout;
