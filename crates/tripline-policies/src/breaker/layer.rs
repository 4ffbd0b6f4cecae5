//! The breaker's layer.

use tower_layer::Layer;
use tripline::{CircuitBreaker, Clock, MonotonicClock, ResultClassifier};

use super::Breaker;

/// Puts a [`CircuitBreaker`] in front of a service. Every service the layer wraps shares the
/// breaker. The default classifier counts `Ok` as a success and `Err` as a failure; give
/// [`HttpClassifier`](crate::http::HttpClassifier) (feature `http`) to classify HTTP responses
/// by status, with `Retry-After`.
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker, Classification, Outcome};
/// use tripline_policies::breaker::BreakerLayer;
///
/// let breaker = CircuitBreaker::new("search", BreakerConfig::default());
/// // "Not found" says nothing about the dependency's health.
/// let layer = BreakerLayer::new(breaker).classifier(
///     |r: &Result<Option<String>, tripline_policies::BoxError>| match r {
///         Ok(None) => Classification::new(Outcome::Ignored),
///         Ok(Some(_)) => Classification::new(Outcome::Success),
///         Err(_) => Classification::new(Outcome::Failure),
///     },
/// );
/// # let _ = layer;
/// ```
#[derive(Debug)]
pub struct BreakerLayer<C: Clock = MonotonicClock, K = ResultClassifier> {
    breaker: CircuitBreaker<C>,
    classifier: K,
}

impl<C: Clock, K: Clone> Clone for BreakerLayer<C, K> {
    fn clone(&self) -> Self {
        Self {
            breaker: self.breaker.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<C: Clock> BreakerLayer<C> {
    /// A layer for `breaker`, counting `Ok` as a success and `Err` as a failure.
    pub const fn new(breaker: CircuitBreaker<C>) -> Self {
        Self {
            breaker,
            classifier: ResultClassifier,
        }
    }
}

impl<C: Clock, K> BreakerLayer<C, K> {
    /// The same layer with another classifier.
    pub fn classifier<K2>(self, classifier: K2) -> BreakerLayer<C, K2> {
        BreakerLayer {
            breaker: self.breaker,
            classifier,
        }
    }
}

impl<S, C: Clock, K: Clone> Layer<S> for BreakerLayer<C, K> {
    type Service = Breaker<S, C, K>;

    fn layer(&self, inner: S) -> Self::Service {
        Breaker::new(inner, self.breaker.clone(), self.classifier.clone())
    }
}
