//! The limiter's layer.

use tower_layer::Layer;
use tripline::ResultClassifier;

use super::{Limiter, LimiterService};
use crate::shed::DefaultPriority;

/// Puts a [`Limiter`] in front of a service. Every service the layer wraps shares the limit.
/// Each request's result is classified by `K` (by default `Ok` is a success and `Err` a drop)
/// and its priority comes from `P` (by default every request is
/// [`Priority::DEFAULT`](crate::shed::Priority::DEFAULT)).
///
/// ```
/// use tower::{Layer, ServiceExt, service_fn};
/// use tripline_policies::limiter::{FixedLimit, LimitAlgorithm, LimitExceeded, Limiter, LimiterConfig, LimiterLayer};
/// use tripline_policies::shed::Priority;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let limiter = Limiter::new(
///     LimiterConfig::builder().algorithm(LimitAlgorithm::Fixed(FixedLimit::new(1)?)).build()?,
/// );
/// let svc = LimiterLayer::new(limiter.clone())
///     .layer(service_fn(|x: u32| async move { Ok::<_, std::io::Error>(x * 2) }));
/// assert_eq!(svc.clone().oneshot(21).await?, 42);
///
/// let _busy = limiter.try_acquire(Priority::DEFAULT)?;
/// let err = svc.oneshot(21).await.unwrap_err();
/// assert!(err.downcast_ref::<LimitExceeded>().is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct LimiterLayer<K = ResultClassifier, P = DefaultPriority> {
    limiter: Limiter,
    classifier: K,
    prioritize: P,
}

impl LimiterLayer {
    /// A layer for `limiter`: `Ok` is a success, `Err` a drop, every request at the default
    /// priority.
    pub const fn new(limiter: Limiter) -> Self {
        Self {
            limiter,
            classifier: ResultClassifier,
            prioritize: DefaultPriority,
        }
    }
}

impl<K, P> LimiterLayer<K, P> {
    /// The same layer with another classifier (a failure is a drop, an ignored result no
    /// sample).
    pub fn classifier<K2>(self, classifier: K2) -> LimiterLayer<K2, P> {
        LimiterLayer {
            limiter: self.limiter,
            classifier,
            prioritize: self.prioritize,
        }
    }

    /// The same layer with each request's priority from `prioritize`.
    pub fn priority<P2>(self, prioritize: P2) -> LimiterLayer<K, P2> {
        LimiterLayer {
            limiter: self.limiter,
            classifier: self.classifier,
            prioritize,
        }
    }
}

impl<S, K: Clone, P: Clone> Layer<S> for LimiterLayer<K, P> {
    type Service = LimiterService<S, K, P>;

    fn layer(&self, inner: S) -> Self::Service {
        LimiterService::new(
            inner,
            self.limiter.clone(),
            self.classifier.clone(),
            self.prioritize.clone(),
        )
    }
}
