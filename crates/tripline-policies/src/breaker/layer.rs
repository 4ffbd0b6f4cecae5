//! The breaker's layer.

use std::marker::PhantomData;
use tower_layer::Layer;

use tripline::{Breaker as AnyBreaker, CircuitBreaker, Clock, MonotonicClock, ResultClassifier};

use super::Breaker;

/// Puts a [`CircuitBreaker`] in front of a service, or
/// any host of the [`tripline::Breaker`] interface (a fleet-wide
/// `tripline_redis::SharedBreaker`: the one-line change from one replica to a fleet). Every
/// service the layer wraps shares the breaker. The default classifier counts `Ok` as a success and `Err` as a failure; give
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
pub struct BreakerLayer<
    C: Clock = MonotonicClock,
    K = ResultClassifier,
    B: AnyBreaker = CircuitBreaker<C>,
> {
    breaker: B,
    classifier: K,
    clock: PhantomData<fn() -> C>,
}

impl<C: Clock, K: Clone, B: AnyBreaker> Clone for BreakerLayer<C, K, B> {
    fn clone(&self) -> Self {
        Self {
            breaker: self.breaker.clone(),
            classifier: self.classifier.clone(),
            clock: PhantomData,
        }
    }
}

impl<B: AnyBreaker> BreakerLayer<B::Clock, ResultClassifier, B> {
    /// A layer for `breaker`, counting `Ok` as a success and `Err` as a failure. `breaker` is
    /// a [`CircuitBreaker`] or any other host of the [`tripline::Breaker`] interface: a
    /// fleet-wide `tripline_redis::SharedBreaker` here is the whole change from one replica to
    /// a fleet.
    pub const fn new(breaker: B) -> Self {
        Self {
            breaker,
            classifier: ResultClassifier,
            clock: PhantomData,
        }
    }
}

impl<C: Clock, K, B: AnyBreaker> BreakerLayer<C, K, B> {
    /// The same layer with another classifier.
    pub fn classifier<K2>(self, classifier: K2) -> BreakerLayer<C, K2, B> {
        BreakerLayer {
            breaker: self.breaker,
            classifier,
            clock: PhantomData,
        }
    }

    /// The breaker.
    pub fn breaker(&self) -> &B {
        &self.breaker
    }
}

impl<S, C: Clock, K: Clone, B: AnyBreaker> Layer<S> for BreakerLayer<C, K, B> {
    type Service = Breaker<S, C, K, B>;

    fn layer(&self, inner: S) -> Self::Service {
        Breaker {
            inner,
            breaker: self.breaker.clone(),
            classifier: self.classifier.clone(),
            admission: None,
            clock: PhantomData,
        }
    }
}
