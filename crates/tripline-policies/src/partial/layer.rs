//! The partial breaker's layer.

use tower_layer::Layer;
use tripline::ResultClassifier;

use super::{PartialBreaker, PartialService};

/// Puts a [`PartialBreaker`] in front of a service. Every service the layer wraps shares the
/// breaker. The classifier decides what is a failure; the default counts `Ok` as a success and
/// `Err` as a failure.
///
/// ```
/// use tower::{Layer, ServiceExt, service_fn};
/// use tripline_policies::partial::{PartialBreaker, PartialLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let breaker = PartialBreaker::default();
/// let svc = PartialLayer::new(breaker.clone())
///     .layer(service_fn(|x: u32| async move { Ok::<_, std::io::Error>(x) }));
/// assert_eq!(svc.oneshot(7).await?, 7);
/// assert_eq!(breaker.snapshot().admitted, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PartialLayer<K = ResultClassifier> {
    breaker: PartialBreaker,
    classifier: K,
}

impl PartialLayer {
    /// A layer for `breaker`, counting `Ok` as a success and `Err` as a failure.
    pub const fn new(breaker: PartialBreaker) -> Self {
        Self {
            breaker,
            classifier: ResultClassifier,
        }
    }
}

impl<K> PartialLayer<K> {
    /// The same layer with another classifier (the HTTP one, say: 5xx and 429 fail, other
    /// 4xx are ignored).
    pub fn classifier<K2>(self, classifier: K2) -> PartialLayer<K2> {
        PartialLayer {
            breaker: self.breaker,
            classifier,
        }
    }
}

impl<S, K: Clone> Layer<S> for PartialLayer<K> {
    type Service = PartialService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        PartialService::new(inner, self.breaker.clone(), self.classifier.clone())
    }
}
