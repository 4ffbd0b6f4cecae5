//! The outlier detector's layer.

use tower_layer::Layer;
use tripline::{Clock, MonotonicClock};

use super::{HostKey, OutlierDetector, OutlierService, ResultHostClassifier};

/// Puts an [`OutlierDetector`] in front of a service that takes `(host, request)`: each
/// request goes to a host the detector picks, and its result is recorded for that host.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use tower::{Layer, ServiceExt, service_fn};
/// use tripline_policies::outlier::{OutlierConfig, OutlierDetector, OutlierLayer};
///
/// let detector = OutlierDetector::new(OutlierConfig::default(), ["a:80", "b:80"])?;
/// let call = |(host, id): (&'static str, u32)| async move {
///     Ok::<_, std::io::Error>(format!("{id} from {host}"))
/// };
/// let svc = OutlierLayer::new(detector.clone()).layer(service_fn(call));
/// assert_eq!(svc.clone().oneshot(1).await?, "1 from a:80");
/// assert_eq!(svc.oneshot(2).await?, "2 from b:80");
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct OutlierLayer<H: HostKey, C: Clock = MonotonicClock, K = ResultHostClassifier> {
    detector: OutlierDetector<H, C>,
    classifier: K,
}

impl<H: HostKey, C: Clock, K: Clone> Clone for OutlierLayer<H, C, K> {
    fn clone(&self) -> Self {
        Self {
            detector: self.detector.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<H: HostKey, C: Clock> OutlierLayer<H, C> {
    /// A layer for `detector`, with the default classifier.
    pub const fn new(detector: OutlierDetector<H, C>) -> Self {
        Self {
            detector,
            classifier: ResultHostClassifier,
        }
    }
}

impl<H: HostKey, C: Clock, K> OutlierLayer<H, C, K> {
    /// The same layer with another classifier.
    pub fn classifier<K2>(self, classifier: K2) -> OutlierLayer<H, C, K2> {
        OutlierLayer {
            detector: self.detector,
            classifier,
        }
    }
}

impl<S, H: HostKey, C: Clock, K: Clone> Layer<S> for OutlierLayer<H, C, K> {
    type Service = OutlierService<S, H, C, K>;

    fn layer(&self, inner: S) -> Self::Service {
        OutlierService::new(inner, self.detector.clone(), self.classifier.clone())
    }
}
