//! The throttle's layer.

use tower_layer::Layer;
use tripline::ResultClassifier;

use super::{Throttle, ThrottleService};

/// Puts an adaptive [`Throttle`] in front of a service. Every service the layer wraps shares
/// the throttle's window. The classifier decides what counts as accepted (anything not
/// classified a failure); the default counts `Ok` as accepted and `Err` as not.
///
/// ```
/// use tower::{Layer, ServiceExt, service_fn};
/// use tripline_policies::throttle::{Throttle, ThrottleLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let throttle = Throttle::default();
/// let svc = ThrottleLayer::new(throttle.clone())
///     .layer(service_fn(|x: u32| async move { Ok::<_, std::io::Error>(x) }));
/// svc.oneshot(7).await?;
/// assert_eq!(throttle.counts(), (1, 1));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ThrottleLayer<K = ResultClassifier> {
    throttle: Throttle,
    classifier: K,
}

impl ThrottleLayer {
    /// A layer for `throttle`, counting `Ok` as accepted.
    pub const fn new(throttle: Throttle) -> Self {
        Self {
            throttle,
            classifier: ResultClassifier,
        }
    }
}

impl<K> ThrottleLayer<K> {
    /// The same layer with another classifier (for instance the HTTP one, under which a 503 or
    /// a 429 is not accepted but a 404 is).
    pub fn classifier<K2>(self, classifier: K2) -> ThrottleLayer<K2> {
        ThrottleLayer {
            throttle: self.throttle,
            classifier,
        }
    }
}

impl<S, K: Clone> Layer<S> for ThrottleLayer<K> {
    type Service = ThrottleService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        ThrottleService::new(inner, self.throttle.clone(), self.classifier.clone())
    }
}
