//! The server-directed breaker service: per-shard mini breakers the server directs.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tower_layer::Layer;
use tower_service::Service;
use tripline::registry::ServerDirected;
use tripline::{Classify, Clock, MonotonicClock, ResultClassifier};

use crate::BoxError;

/// Names the shard a request goes to, if the caller knows (a routing key, a header): the
/// shard's breaker, if the server has blamed the shard before, must admit the call too.
/// Implemented for closures `Fn(&Req) -> Option<String>` and by [`NoShard`].
pub trait NameShard<Req> {
    /// The shard `req` goes to.
    fn shard(&self, req: &Req) -> Option<String>;
}

impl<Req, F: Fn(&Req) -> Option<String>> NameShard<Req> for F {
    fn shard(&self, req: &Req) -> Option<String> {
        self(req)
    }
}

/// Names no shard: only the dependency-wide breaker admits calls, and blamed results still go
/// to the blamed shard's breaker.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoShard;

impl<Req> NameShard<Req> for NoShard {
    fn shard(&self, _: &Req) -> Option<String> {
        None
    }
}

/// A tower layer running calls through a [`ServerDirected`] dependency: a call is admitted by
/// the dependency-wide breaker and by the breaker of the shard it names (one exists only once
/// the server has blamed that shard); its result is classified by `K`, and recorded on the
/// breaker of the shard `K`'s [`blame`](tripline::Classify::blame) names (a
/// [`BlameHeader`](crate::http::BlameHeader) reads `x-overloaded-shard`) instead of the
/// dependency-wide one. A refusal fails the call with the core's
/// [`Rejected`](tripline::Rejected), naming the breaker that refused. Local rejections
/// further in are ignored, as by [`BreakerLayer`](super::BreakerLayer).
///
/// Cost beyond [`BreakerLayer`](super::BreakerLayer): one boxed response future per call,
/// one registry lookup (a lock-free read) when the call names a shard, and one breaker
/// (about 410 bytes) per shard the server has blamed, at most the dependency's cap (64 by
/// default: set it on the dependency with
/// [`ServerDirected::with_max_scopes`](tripline::registry::ServerDirected::with_max_scopes))
/// and the registry's `max_breakers`, and dropped by its idle eviction. A blame that is not
/// followed (a header value that cannot be a key, the cap taken, the registry full) is
/// recorded on the dependency-wide breaker and counted
/// ([`ServerDirected::refused_blames`](tripline::registry::ServerDirected::refused_blames)),
/// never dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use std::sync::Arc;
/// use tower::{Layer, ServiceExt, service_fn};
/// use tripline::registry::{Blame, Key, Registry, RegistryConfig, ServerDirected};
/// use tripline::{Blaming, Rejected, ResultClassifier};
/// use tripline_policies::breaker::ServerDirectedLayer;
///
/// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
/// let catalog = ServerDirected::new(registry, Key::new("catalog")?)?;
/// // Requests are shard numbers; shard 7 answers "overloaded", naming itself.
/// let svc = ServerDirectedLayer::new(catalog)
///     .classifier(Blaming::new(ResultClassifier, |r: &Result<u32, tripline_policies::BoxError>| {
///         r.as_ref().err().map(|e| Blame::shard(&e.to_string()))
///     }))
///     .names_shard(|shard: &u32| Some(shard.to_string()))
///     .layer(service_fn(|shard: u32| async move {
///         if shard == 7 { Err(std::io::Error::other("7")) } else { Ok(shard) }
///     }));
/// for _ in 0..100 {
///     let _ = svc.clone().oneshot(7).await;
/// }
/// let err = svc.clone().oneshot(7).await.unwrap_err();
/// assert_eq!(err.downcast_ref::<Rejected>().unwrap().breaker(), "catalog/shard=7");
/// assert_eq!(svc.oneshot(8).await?, 8);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ServerDirectedLayer<C: Clock + Clone = MonotonicClock, K = ResultClassifier, N = NoShard>
{
    directed: ServerDirected<C>,
    classifier: K,
    namer: Arc<N>,
}

impl<C: Clock + Clone, K: Clone, N> Clone for ServerDirectedLayer<C, K, N> {
    fn clone(&self) -> Self {
        Self {
            directed: self.directed.clone(),
            classifier: self.classifier.clone(),
            namer: self.namer.clone(),
        }
    }
}

impl<C: Clock + Clone> ServerDirectedLayer<C> {
    /// A layer for `directed`, counting `Ok` as a success and `Err` as a failure, blaming no
    /// one and naming no shard until [`classifier`](Self::classifier) and
    /// [`names_shard`](Self::names_shard) say otherwise.
    pub fn new(directed: ServerDirected<C>) -> Self {
        Self {
            directed,
            classifier: ResultClassifier,
            namer: Arc::new(NoShard),
        }
    }
}

impl<C: Clock + Clone, K, N> ServerDirectedLayer<C, K, N> {
    /// The same layer with another classifier (one whose [`blame`](tripline::Classify::blame)
    /// reads the server's verdict: [`BlameHeader`](crate::http::BlameHeader),
    /// [`Blaming`](tripline::Blaming)).
    pub fn classifier<K2>(self, classifier: K2) -> ServerDirectedLayer<C, K2, N> {
        ServerDirectedLayer {
            directed: self.directed,
            classifier,
            namer: self.namer,
        }
    }

    /// The same layer naming each request's shard with `namer`.
    pub fn names_shard<N2>(self, namer: N2) -> ServerDirectedLayer<C, K, N2> {
        ServerDirectedLayer {
            directed: self.directed,
            classifier: self.classifier,
            namer: Arc::new(namer),
        }
    }

    /// The dependency.
    pub fn directed(&self) -> &ServerDirected<C> {
        &self.directed
    }
}

impl<S, C: Clock + Clone, K: Clone, N> Layer<S> for ServerDirectedLayer<C, K, N> {
    type Service = ServerDirectedBreaker<S, C, K, N>;

    fn layer(&self, inner: S) -> Self::Service {
        ServerDirectedBreaker {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service behind a [`ServerDirected`] dependency; made by [`ServerDirectedLayer`].
#[derive(Debug)]
pub struct ServerDirectedBreaker<
    S,
    C: Clock + Clone = MonotonicClock,
    K = ResultClassifier,
    N = NoShard,
> {
    inner: S,
    layer: ServerDirectedLayer<C, K, N>,
}

impl<S: Clone, C: Clock + Clone, K: Clone, N> Clone for ServerDirectedBreaker<S, C, K, N> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S, C, K, N, Req> Service<Req> for ServerDirectedBreaker<S, C, K, N>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    C: Clock + Clone + Send + Sync + 'static,
    K: Classify<S::Response, BoxError> + Clone + Send + 'static,
    N: NameShard<Req>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let shard = self.layer.namer.shard(&req);
        let permit = match self.layer.directed.admit(shard.as_deref()) {
            Ok(p) => p,
            Err(rejected) => return Box::pin(std::future::ready(Err(rejected.into()))),
        };
        let call = self.inner.call(req);
        let classifier = self.layer.classifier.clone();
        Box::pin(async move {
            let result = call.await.map_err(Into::into);
            let classification = super::classify(&classifier, &result);
            let blame = match &result {
                Err(e) if crate::is_local_rejection(&**e) => None,
                _ => classifier.blame(&result),
            };
            permit.record(classification, blame.as_ref());
            result
        })
    }
}
