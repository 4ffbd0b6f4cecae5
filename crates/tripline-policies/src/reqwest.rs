//! reqwest: a [`reqwest_middleware`] middleware that runs each request through a breaker, and
//! a classifier for reqwest's results.
//!
//! [`BreakerMiddleware`] asks its [`CircuitBreaker`] for a permit before the request goes on
//! down the middleware chain. A refusal fails the request at once, without sending it, with
//! `reqwest_middleware::Error::Middleware` wrapping the core's [`Rejected`]; [`rejection`]
//! finds it (so does `anyhow::Error::downcast_ref`). An admitted request's result is
//! classified by [`ReqwestClassifier`] and recorded:
//!
//! | result | outcome |
//! |---|---|
//! | no response: connection refused or reset, timed out, too many redirects | failure |
//! | 5xx, 429 | failure, with its `Retry-After` (delta-seconds or HTTP-date) as the open wait's hint |
//! | other 4xx | ignored: the request was wrong, not the dependency |
//! | anything else | success |
//! | a request reqwest could not build | ignored: it was never sent |
//! | a refusal by a local policy further down the chain (another breaker, a bulkhead, a gate, a throttle) | ignored |
//! | any other error of a middleware further down, with no reqwest error in its chain (an auth middleware that could not get a token) | ignored: nothing says the request reached the dependency |
//!
//! A middleware further down that wraps a transport error keeps it classified by what it says
//! as long as the `reqwest::Error` stays in the error's chain (as `anyhow`'s `context` keeps
//! it); one that reports a dependency failure in an error of its own can be classified with a
//! [`classifier`](BreakerMiddleware::classifier) of your own.
//!
//! If the request's future is dropped before it completes (the caller gave up, a `select!`
//! took another branch), the permit is abandoned: it frees a half-open probe slot and counts
//! as neither a success nor a failure.
//!
//! # Where it goes in the chain
//!
//! Middlewares run in the order they are attached, the last one next to the wire. Attach the
//! retry middleware ([`RetryMiddleware`] with feature `retry`: attempts, backoff and a budget)
//! *before* the breaker, so that every attempt asks the breaker and a breaker that opens stops
//! the retries; and set the timeout on the reqwest `Client` (or per request), which acts
//! inside the whole chain, so an expired request is a failure for the breaker.
//!
//! # Through the pipeline
//!
//! A plain `Client`'s calls run through a [pipeline](crate::pipeline) (every policy, the
//! timeout innermost) with [`PipelineBuilder::reqwest`](crate::pipeline::PipelineBuilder::reqwest):
//! [`ReqwestClassifier`] for the breaker, [`HttpRetryable`](crate::http::HttpRetryable) for
//! the retries, and [`StatusError`], which turns a failed response after the last attempt into
//! the call's error, so the fallback fires for a 503:
//!
//! ```
//! # #[cfg(feature = "pipeline")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tripline::{BreakerConfig, CircuitBreaker};
//! use tripline_policies::pipeline::Pipeline;
//! use tripline_policies::retry::RetryPolicy;
//!
//! let client = reqwest::Client::new();
//! let prices = Pipeline::builder()
//!     .retry(RetryPolicy::default())
//!     .breaker(CircuitBreaker::new("prices", BreakerConfig::default()))
//!     .timeout(std::time::Duration::from_secs(2))
//!     .reqwest()
//!     .build()?;
//! let price = match prices.call(|| client.get("http://127.0.0.1:9/price").send()).await {
//!     Ok(resp) => resp.text().await?,
//!     Err(_) => "9.99".to_string(), // refused, timed out, no answer, a 5xx after the retries
//! };
//! assert_eq!(price, "9.99");
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "pipeline"))]
//! # fn main() {}
//! ```
//!
//! [`HostBreakerMiddleware`] does the same with one breaker per host, taken from a
//! [`Registry`]: one failing replica does not cut the client off from the healthy ones.
//! [`KeyedBreakerMiddleware`] takes them from any holder of keyed breakers, such as the
//! fleet's `tripline_redis::SharedRegistry`: a host one replica's failures opened is refused
//! on every replica.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tripline::{BreakerConfig, CircuitBreaker, State};
//! use tripline_policies::reqwest::{BreakerMiddleware, rejection};
//!
//! let breaker = CircuitBreaker::new("prices", BreakerConfig::default());
//! let reqwest = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
//! let client = reqwest_middleware::ClientBuilder::new(reqwest)
//!     .with(BreakerMiddleware::new(breaker.clone()))
//!     .build();
//!
//! breaker.force_open();
//! let err = client.get("http://127.0.0.1:9/price").send().await.unwrap_err();
//! let rejected = rejection(&err).expect("refused by the breaker, never sent");
//! assert_eq!(rejected.state(), State::ForcedOpen);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use std::marker::PhantomData;
use tripline::registry::{Key, Registry, ScopeKind, ServerDirected};

use tripline::{
    Breaker as AnyBreaker, BreakerPermit as _, CircuitBreaker, Classification, Classify, Clock,
    ConfigError, FailureKind, MonotonicClock, Outcome, Rejected,
};

/// Classifies reqwest's results for a breaker. See the [module docs](self) for the table.
///
/// It classifies both `Result<Response, reqwest::Error>` (a plain `Client`, for instance
/// inside a [`Pipeline`](crate::pipeline::Pipeline) given
/// [`.classifier(ReqwestClassifier)`](crate::pipeline::PipelineBuilder::classifier)) and
/// `Result<Response, reqwest_middleware::Error>` (inside a middleware chain).
///
/// ```
/// use tripline::{Classify, Outcome};
/// use tripline_policies::reqwest::ReqwestClassifier;
///
/// let resp = |status: u16, retry_after: &str| -> Result<reqwest::Response, reqwest::Error> {
///     let r = http::Response::builder().status(status).header("retry-after", retry_after);
///     Ok(r.body("").unwrap().into())
/// };
/// let c = ReqwestClassifier.classify(&resp(503, "30"));
/// assert_eq!(c.outcome, Outcome::Failure);
/// assert_eq!(c.retry_after, Some(std::time::Duration::from_secs(30)));
/// assert_eq!(ReqwestClassifier.classify(&resp(404, "30")).outcome, Outcome::Ignored);
/// assert_eq!(ReqwestClassifier.classify(&resp(200, "30")).outcome, Outcome::Success);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ReqwestClassifier;

impl ReqwestClassifier {
    fn response(resp: &Response) -> Classification {
        crate::http::classify_response(resp.status().as_u16(), resp.headers())
    }

    fn error(e: &reqwest::Error) -> Classification {
        if e.is_builder() {
            // Never sent: says nothing about the dependency.
            return Classification::new(Outcome::Ignored);
        }
        match e.status() {
            // `error_for_status`: the status decides, as for a response.
            Some(status) => {
                let status = status.as_u16();
                let mut c = Classification::new(Outcome::from_http_status(status));
                c.kind = Classification::http_kind(status);
                c
            }
            None if e.is_timeout() => Classification::failure(FailureKind::Timeout),
            None if e.is_connect() => Classification::failure(FailureKind::Connection),
            None => Classification::new(Outcome::Failure),
        }
    }

    fn middleware_error(e: &anyhow::Error) -> Classification {
        for cause in e.chain() {
            if crate::is_local_rejection(cause) {
                return Classification::new(Outcome::Ignored);
            }
            if let Some(e) = cause.downcast_ref::<reqwest::Error>() {
                return Self::error(e);
            }
        }
        // A middleware's own error with no reqwest error behind it (an auth middleware that
        // could not get a token): nothing says the request reached the dependency.
        Classification::new(Outcome::Ignored)
    }
}

impl Classify<Response, reqwest::Error> for ReqwestClassifier {
    fn classify(&self, result: &Result<Response, reqwest::Error>) -> Classification {
        match result {
            Ok(resp) => Self::response(resp),
            Err(e) => Self::error(e),
        }
    }
}

impl Classify<Response, reqwest_middleware::Error> for ReqwestClassifier {
    fn classify(&self, result: &Result<Response, reqwest_middleware::Error>) -> Classification {
        match result {
            Ok(resp) => Self::response(resp),
            Err(reqwest_middleware::Error::Reqwest(e)) => Self::error(e),
            Err(reqwest_middleware::Error::Middleware(e)) => Self::middleware_error(e),
        }
    }
}

/// Whether a reqwest error is worth retrying: never for a request reqwest could not build
/// (it was never sent); by its status for an `error_for_status` error; otherwise (no answer:
/// refused, reset, timed out) yes.
#[cfg(feature = "retry")]
fn error_retryable(e: &reqwest::Error) -> bool {
    if e.is_builder() {
        return false;
    }
    match e.status() {
        Some(status) => crate::http::retryable_status(status.as_u16()),
        None => true,
    }
}

/// A reqwest error in a middleware's error, if there is one in its chain.
#[cfg(feature = "retry")]
fn reqwest_error(e: &anyhow::Error) -> Option<&reqwest::Error> {
    e.chain().find_map(|c| c.downcast_ref())
}

/// [`HttpRetryable`](crate::http::HttpRetryable) for a plain `Client`'s results: errors with
/// no answer, 429, 500, 502, 503 and 504 are retried; a request reqwest could not build is
/// not (it was never sent); an `error_for_status` error by its status.
#[cfg(feature = "retry")]
impl crate::retry::Retryable<Response, reqwest::Error> for crate::http::HttpRetryable {
    fn is_retryable(&self, result: &Result<Response, reqwest::Error>) -> bool {
        match result {
            Ok(resp) => crate::http::retryable_status(resp.status().as_u16()),
            Err(e) => error_retryable(e),
        }
    }
}

/// [`HttpRetryable`](crate::http::HttpRetryable) for a middleware chain's results: as for a
/// plain `Client`, and a middleware's error only when a reqwest error is in its chain (then
/// that error decides); a local refusal further down (a breaker's) is never retried.
#[cfg(feature = "retry")]
impl crate::retry::Retryable<Response, reqwest_middleware::Error> for crate::http::HttpRetryable {
    fn is_retryable(&self, result: &Result<Response, reqwest_middleware::Error>) -> bool {
        match result {
            Ok(resp) => crate::http::retryable_status(resp.status().as_u16()),
            Err(reqwest_middleware::Error::Reqwest(e)) => error_retryable(e),
            Err(reqwest_middleware::Error::Middleware(e)) => {
                !e.chain().any(crate::is_local_rejection)
                    && reqwest_error(e).is_some_and(error_retryable)
            }
        }
    }
}

/// Turns a response the classifier judged a failure (a 5xx, a 429) into reqwest's own
/// status error (`Response::error_for_status`), when it is a [pipeline](crate::pipeline)'s
/// last result: the caller's error path and the fallback of
/// [`call_or_else`](crate::pipeline::Pipeline::call_or_else) then see it, as
/// [`PipelineError::Failed`](crate::pipeline::PipelineError::Failed) with the status and the
/// URL (`reqwest::Error::status`). The retry predicate, the breaker and the budget saw the
/// response itself, `Retry-After` included. A response a classifier of your own fails
/// although its status is not an error (a 200) stays the call's value.
/// [`PipelineBuilder::reqwest`](crate::pipeline::PipelineBuilder::reqwest) sets it.
#[cfg(feature = "pipeline")]
#[derive(Clone, Copy, Debug, Default)]
pub struct StatusError;

#[cfg(feature = "pipeline")]
impl crate::pipeline::FailureToError<Response, reqwest::Error> for StatusError {
    fn failure_to_error(&self, value: Response) -> Result<Response, reqwest::Error> {
        value.error_for_status()
    }
}

#[cfg(feature = "pipeline")]
impl crate::pipeline::FailureToError<Response, reqwest_middleware::Error> for StatusError {
    fn failure_to_error(&self, value: Response) -> Result<Response, reqwest_middleware::Error> {
        value
            .error_for_status()
            .map_err(reqwest_middleware::Error::Reqwest)
    }
}

/// The breaker's refusal inside `err`, if a breaker refused the request (so it was never sent).
///
/// ```
/// use tripline::{BreakerConfig, CircuitBreaker};
/// use tripline_policies::reqwest::rejection;
///
/// let breaker = CircuitBreaker::new("prices", BreakerConfig::default());
/// breaker.force_open();
/// let err = reqwest_middleware::Error::middleware(breaker.try_acquire().unwrap_err());
/// assert_eq!(rejection(&err).unwrap().breaker(), "prices");
///
/// let other = reqwest_middleware::Error::Middleware(anyhow::anyhow!("no token"));
/// assert!(rejection(&other).is_none());
/// ```
pub fn rejection(err: &reqwest_middleware::Error) -> Option<&Rejected> {
    match err {
        reqwest_middleware::Error::Middleware(e) => e.chain().find_map(|c| c.downcast_ref()),
        reqwest_middleware::Error::Reqwest(_) => None,
    }
}

/// Runs the request through `breaker`: refused at once while it is open, else sent on and its
/// result classified and recorded. A dropped future abandons the permit.
async fn guarded<B, K>(
    breaker: &B,
    classifier: &K,
    req: Request,
    extensions: &mut Extensions,
    next: Next<'_>,
) -> reqwest_middleware::Result<Response>
where
    B: AnyBreaker,
    K: Classify<Response, reqwest_middleware::Error>,
{
    let permit = breaker
        .acquire()
        .await
        .map_err(reqwest_middleware::Error::middleware)?;
    let result = next.run(req, extensions).await;
    let classification = match &result {
        Err(reqwest_middleware::Error::Middleware(e))
            if e.chain().any(crate::is_local_rejection) =>
        {
            Classification::new(Outcome::Ignored)
        }
        _ => classifier.classify(&result),
    };
    let _ = permit.record_classified(classification).await;
    result
}

/// A [`reqwest_middleware::Middleware`] that runs every request through one
/// [`CircuitBreaker`], or through any host of the
/// [`tripline::Breaker`] interface (a fleet-wide `tripline_redis::SharedBreaker`, whose
/// admission may wait for a round trip and whose recording is awaited before the response is
/// returned). See the [module docs](self).
///
/// `K` classifies each result ([`ReqwestClassifier`] unless [`classifier`](Self::classifier)
/// sets another); refusals by local policies further down the chain are always ignored.
pub struct BreakerMiddleware<
    C: Clock = MonotonicClock,
    K = ReqwestClassifier,
    B: AnyBreaker = CircuitBreaker<C>,
> {
    breaker: B,
    classifier: K,
    clock: PhantomData<fn() -> C>,
}

impl<C: Clock, K: Clone, B: AnyBreaker> Clone for BreakerMiddleware<C, K, B> {
    fn clone(&self) -> Self {
        Self {
            breaker: self.breaker.clone(),
            classifier: self.classifier.clone(),
            clock: PhantomData,
        }
    }
}

impl<C: Clock, K, B: AnyBreaker> fmt::Debug for BreakerMiddleware<C, K, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerMiddleware")
            .field("breaker", &self.breaker)
            .finish_non_exhaustive()
    }
}

impl<B: AnyBreaker> BreakerMiddleware<B::Clock, ReqwestClassifier, B> {
    /// A middleware for `breaker` (a [`CircuitBreaker`], or any host of the
    /// [`tripline::Breaker`] interface: a fleet-wide shared one), classifying with
    /// [`ReqwestClassifier`].
    pub const fn new(breaker: B) -> Self {
        Self {
            breaker,
            classifier: ReqwestClassifier,
            clock: PhantomData,
        }
    }
}

impl<C: Clock, K, B: AnyBreaker> BreakerMiddleware<C, K, B> {
    /// The same middleware with another classifier.
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker, Classification, Classify, Outcome};
    /// use tripline_policies::reqwest::{BreakerMiddleware, ReqwestClassifier};
    ///
    /// // This dependency answers 404 when it has lost its data: a failure.
    /// let breaker = CircuitBreaker::new("store", BreakerConfig::default());
    /// let middleware = BreakerMiddleware::new(breaker).classifier(
    ///     |r: &Result<reqwest::Response, reqwest_middleware::Error>| match r {
    ///         Ok(resp) if resp.status() == 404 => Classification::new(Outcome::Failure),
    ///         _ => ReqwestClassifier.classify(r),
    ///     },
    /// );
    /// # let _ = middleware;
    /// ```
    pub fn classifier<K2>(self, classifier: K2) -> BreakerMiddleware<C, K2, B> {
        BreakerMiddleware {
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

#[async_trait::async_trait]
impl<C, K, B> Middleware for BreakerMiddleware<C, K, B>
where
    C: Clock,
    B: AnyBreaker,
    K: Classify<Response, reqwest_middleware::Error> + Send + Sync + 'static,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        guarded(&self.breaker, &self.classifier, req, extensions, next).await
    }
}

/// A [`reqwest_middleware::Middleware`] with one breaker per host, taken from a [`Registry`]
/// under the key `dependency/host=HOST` (`HOST:PORT` when the URL names a port that is not
/// its scheme's default). Otherwise it behaves as [`BreakerMiddleware`].
///
/// A request the registry cannot give a breaker for fails without being sent, with
/// `reqwest_middleware::Error::Middleware` wrapping the reason: a [`ConfigError`] for a URL
/// without a host (or a host that cannot be a key), a
/// [`RegistryError`](tripline::registry::RegistryError) when the registry is full.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
/// use tripline_policies::reqwest::{HostBreakerMiddleware, rejection};
///
/// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(HostBreakerMiddleware::new("prices", registry.clone())?)
///     .build();
///
/// registry.get(&Key::scoped("prices", ScopeKind::Host, "127.0.0.1:9")?)?.force_open();
/// let err = client.get("http://127.0.0.1:9/price").send().await.unwrap_err();
/// assert_eq!(rejection(&err).unwrap().breaker(), "prices/host=127.0.0.1:9");
///
/// let err = HostBreakerMiddleware::new("prices api", registry).unwrap_err();
/// assert_eq!(err.field(), "key.dependency");
/// # Ok(())
/// # }
/// ```
pub struct HostBreakerMiddleware<C: Clock + Clone = MonotonicClock, K = ReqwestClassifier> {
    registry: Arc<Registry<C>>,
    dependency: Key,
    classifier: K,
}

impl<C: Clock + Clone, K: Clone> Clone for HostBreakerMiddleware<C, K> {
    fn clone(&self) -> Self {
        Self {
            registry: self.registry.clone(),
            dependency: self.dependency.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<C: Clock + Clone, K> fmt::Debug for HostBreakerMiddleware<C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBreakerMiddleware")
            .field("dependency", &self.dependency)
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl<C: Clock + Clone> HostBreakerMiddleware<C> {
    /// A middleware taking the breakers of `dependency`'s hosts from `registry`, classifying
    /// with [`ReqwestClassifier`]. Fails if `dependency` cannot be a key's dependency (empty,
    /// longer than 128 bytes, or holding whitespace, control characters, `/`, `=`, `{`, `}`).
    pub fn new(dependency: &str, registry: Arc<Registry<C>>) -> Result<Self, ConfigError> {
        Ok(Self {
            registry,
            dependency: Key::new(dependency)?,
            classifier: ReqwestClassifier,
        })
    }
}

impl<C: Clock + Clone, K> HostBreakerMiddleware<C, K> {
    /// The same middleware with another classifier.
    pub fn classifier<K2>(self, classifier: K2) -> HostBreakerMiddleware<C, K2> {
        HostBreakerMiddleware {
            registry: self.registry,
            dependency: self.dependency,
            classifier,
        }
    }

    /// The registry.
    pub fn registry(&self) -> &Arc<Registry<C>> {
        &self.registry
    }

    /// The key of the breaker for `url`'s host.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tripline::registry::{Registry, RegistryConfig};
    /// use tripline_policies::reqwest::HostBreakerMiddleware;
    ///
    /// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
    /// let m = HostBreakerMiddleware::new("prices", registry)?;
    /// let key = |u: &str| m.key_for(&reqwest::Url::parse(u).unwrap()).map(|k| k.to_string());
    /// assert_eq!(key("https://eu.prices.example/v1")?, "prices/host=eu.prices.example");
    /// assert_eq!(key("http://10.0.0.7:8080/v1")?, "prices/host=10.0.0.7:8080");
    /// // No host, no breaker: a clear error rather than a shared catch-all breaker.
    /// let err = m.key_for(&reqwest::Url::parse("file:///tmp/prices")?).unwrap_err();
    /// assert_eq!(err.field(), "request.url.host");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_for(&self, url: &reqwest::Url) -> Result<Key, ConfigError> {
        host_key(&self.dependency, url)
    }
}

/// The key of `dependency`'s breaker for `url`'s host: `dependency/host=HOST[:PORT]`.
fn host_key(dependency: &Key, url: &reqwest::Url) -> Result<Key, ConfigError> {
    let Some(host) = url.host_str() else {
        return Err(ConfigError::new(
            "request.url.host",
            "none",
            format!("a host, for a breaker per host of '{dependency}'"),
        ));
    };
    let dependency = dependency.dependency();
    match url.port() {
        Some(port) => Key::scoped(dependency, ScopeKind::Host, &format!("{host}:{port}")),
        None => Key::scoped(dependency, ScopeKind::Host, host),
    }
}

/// The breaker `lookup` gives for `url`'s host's key, or the middleware error that says why
/// none (no host, a host that cannot be a key, a full registry).
fn host_breaker<B, E>(
    dependency: &Key,
    url: &reqwest::Url,
    lookup: impl FnOnce(&Key) -> Result<B, E>,
) -> reqwest_middleware::Result<B>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let key = host_key(dependency, url).map_err(reqwest_middleware::Error::middleware)?;
    lookup(&key).map_err(reqwest_middleware::Error::middleware)
}

/// [`HostBreakerMiddleware`] over any holder of keyed breakers
/// ([`ScopeHolder`](tripline::registry::ScopeHolder)): the in-process [`Registry`], or the
/// fleet's `tripline_redis::SharedRegistry`, whose breaker per host every replica shares
/// (one replica's failures on a host refuse that host on every replica; the other hosts go
/// on). The key, the classification and the errors are [`HostBreakerMiddleware`]'s; a
/// request the holder gives no breaker for fails unsent with its error.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
/// use tripline_policies::reqwest::{KeyedBreakerMiddleware, rejection};
///
/// // Here the in-process registry; a `tripline_redis::SharedRegistry` goes the same way.
/// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(KeyedBreakerMiddleware::new("prices", registry.clone())?)
///     .build();
/// registry.get(&Key::scoped("prices", ScopeKind::Host, "127.0.0.1:9")?)?.force_open();
/// let err = client.get("http://127.0.0.1:9/price").send().await.unwrap_err();
/// assert_eq!(rejection(&err).unwrap().breaker(), "prices/host=127.0.0.1:9");
/// # Ok(())
/// # }
/// ```
pub struct KeyedBreakerMiddleware<H, K = ReqwestClassifier> {
    holder: Arc<H>,
    dependency: Key,
    classifier: K,
}

impl<H, K: Clone> Clone for KeyedBreakerMiddleware<H, K> {
    fn clone(&self) -> Self {
        Self {
            holder: self.holder.clone(),
            dependency: self.dependency.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

impl<H, K> fmt::Debug for KeyedBreakerMiddleware<H, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedBreakerMiddleware")
            .field("dependency", &self.dependency)
            .finish_non_exhaustive()
    }
}

impl<H: tripline::registry::ScopeHolder> KeyedBreakerMiddleware<H> {
    /// A middleware taking the breakers of `dependency`'s hosts from `holder`, classifying
    /// with [`ReqwestClassifier`]. Fails as [`HostBreakerMiddleware::new`] does.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tripline::registry::{Registry, RegistryConfig};
    /// use tripline_policies::reqwest::KeyedBreakerMiddleware;
    /// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
    /// let err = KeyedBreakerMiddleware::new("prices api", registry).unwrap_err();
    /// assert_eq!(err.field(), "key.dependency");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(dependency: &str, holder: Arc<H>) -> Result<Self, ConfigError> {
        Ok(Self {
            holder,
            dependency: Key::new(dependency)?,
            classifier: ReqwestClassifier,
        })
    }
}

impl<H, K> KeyedBreakerMiddleware<H, K> {
    /// The same middleware with another classifier.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tripline::registry::{Registry, RegistryConfig};
    /// use tripline_policies::reqwest::{KeyedBreakerMiddleware, ReqwestClassifier};
    /// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
    /// let m = KeyedBreakerMiddleware::new("prices", registry)?.classifier(ReqwestClassifier);
    /// # drop(m);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn classifier<K2>(self, classifier: K2) -> KeyedBreakerMiddleware<H, K2> {
        KeyedBreakerMiddleware {
            holder: self.holder,
            dependency: self.dependency,
            classifier,
        }
    }

    /// The holder of the breakers.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tripline::registry::{Registry, RegistryConfig};
    /// use tripline_policies::reqwest::KeyedBreakerMiddleware;
    /// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
    /// let m = KeyedBreakerMiddleware::new("prices", registry.clone())?;
    /// assert!(Arc::ptr_eq(m.holder(), &registry));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn holder(&self) -> &Arc<H> {
        &self.holder
    }

    /// The key of the breaker for `url`'s host (see [`HostBreakerMiddleware::key_for`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tripline::registry::{Registry, RegistryConfig};
    /// use tripline_policies::reqwest::KeyedBreakerMiddleware;
    /// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
    /// let m = KeyedBreakerMiddleware::new("prices", registry)?;
    /// let key = m.key_for(&reqwest::Url::parse("http://10.0.0.7:8080/v1")?)?;
    /// assert_eq!(key.to_string(), "prices/host=10.0.0.7:8080");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_for(&self, url: &reqwest::Url) -> Result<Key, ConfigError> {
        host_key(&self.dependency, url)
    }
}

#[async_trait::async_trait]
impl<H, K> Middleware for KeyedBreakerMiddleware<H, K>
where
    H: tripline::registry::ScopeHolder + Send + Sync + 'static,
    K: Classify<Response, reqwest_middleware::Error> + Send + Sync + 'static,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let breaker = host_breaker(&self.dependency, req.url(), |k| self.holder.breaker(k))?;
        guarded(&breaker, &self.classifier, req, extensions, next).await
    }
}

#[async_trait::async_trait]
impl<C, K> Middleware for HostBreakerMiddleware<C, K>
where
    C: Clock + Clone,
    K: Classify<Response, reqwest_middleware::Error> + Send + Sync + 'static,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let breaker = host_breaker(&self.dependency, req.url(), |k| self.registry.get(k))?;
        guarded(&breaker, &self.classifier, req, extensions, next).await
    }
}

/// Reads the blamed shard from reqwest's responses (and from an `error_for_status` error's
/// response, which keeps no headers: none there).
impl<K: Classify<Response, reqwest_middleware::Error>> Classify<Response, reqwest_middleware::Error>
    for crate::http::BlameHeader<K>
{
    fn classify(&self, result: &Result<Response, reqwest_middleware::Error>) -> Classification {
        self.inner().classify(result)
    }

    fn blame(
        &self,
        result: &Result<Response, reqwest_middleware::Error>,
    ) -> Option<tripline::registry::Blame> {
        match result {
            Ok(resp) => self.blame_in(resp.headers()),
            Err(_) => self.inner().blame(result),
        }
    }
}

/// A [`reqwest_middleware::Middleware`] with per-shard mini breakers the server directs: a
/// request is admitted by the dependency-wide breaker and by the breaker of the shard it
/// names (if the server has blamed that shard before); its result is recorded on the breaker
/// of the shard the response blames (`K`'s [`blame`](tripline::Classify::blame): a
/// [`BlameHeader`](crate::http::BlameHeader) reading `x-overloaded-shard`) instead of the
/// dependency-wide one. A blamed value that cannot be a key, or a new shard over the
/// dependency's cap ([`ServerDirected::with_max_scopes`], 64 by default), is recorded on the
/// dependency-wide breaker and counted
/// ([`ServerDirected::refused_blames`](tripline::registry::ServerDirected::refused_blames)). See
/// [`tripline::registry::directed`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use tripline::registry::{Key, Registry, RegistryConfig, ServerDirected};
/// use tripline_policies::http::BlameHeader;
/// use tripline_policies::reqwest::{ReqwestClassifier, ServerDirectedMiddleware, rejection};
///
/// let registry = Arc::new(Registry::new(RegistryConfig::default())?);
/// let catalog = ServerDirected::new(registry.clone(), Key::new("catalog")?)?;
/// let middleware = ServerDirectedMiddleware::new(catalog)
///     .classifier(BlameHeader::new(ReqwestClassifier, "x-overloaded-shard")?)
///     .names_shard(|req: &reqwest::Request| {
///         req.headers().get("x-shard")?.to_str().ok().map(str::to_owned)
///     });
/// let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
///     .with(middleware)
///     .build();
///
/// registry.get(&"catalog/shard=7".parse()?)?.force_open();
/// let err = client.get("http://127.0.0.1:9/item").header("x-shard", "7").send().await.unwrap_err();
/// assert_eq!(rejection(&err).unwrap().breaker(), "catalog/shard=7");
/// # Ok(())
/// # }
/// ```
pub struct ServerDirectedMiddleware<
    C: Clock + Clone = MonotonicClock,
    K = ReqwestClassifier,
    N = NoShard,
> {
    directed: ServerDirected<C>,
    classifier: K,
    namer: N,
}

/// Names no shard (see [`ServerDirectedMiddleware::names_shard`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoShard;

/// Names the shard a request goes to: implemented for closures
/// `Fn(&reqwest::Request) -> Option<String>` and by [`NoShard`].
pub trait NameShard: Send + Sync + 'static {
    /// The shard `req` goes to.
    fn shard(&self, req: &Request) -> Option<String>;
}

impl<F: Fn(&Request) -> Option<String> + Send + Sync + 'static> NameShard for F {
    fn shard(&self, req: &Request) -> Option<String> {
        self(req)
    }
}

impl NameShard for NoShard {
    fn shard(&self, _: &Request) -> Option<String> {
        None
    }
}

impl<C: Clock + Clone, K: Clone, N: Clone> Clone for ServerDirectedMiddleware<C, K, N> {
    fn clone(&self) -> Self {
        Self {
            directed: self.directed.clone(),
            classifier: self.classifier.clone(),
            namer: self.namer.clone(),
        }
    }
}

impl<C: Clock + Clone, K, N> fmt::Debug for ServerDirectedMiddleware<C, K, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerDirectedMiddleware")
            .field("directed", &self.directed)
            .finish_non_exhaustive()
    }
}

impl<C: Clock + Clone> ServerDirectedMiddleware<C> {
    /// A middleware for `directed`, classifying with [`ReqwestClassifier`] (which blames no
    /// one: give a [`BlameHeader`](crate::http::BlameHeader) with
    /// [`classifier`](Self::classifier)) and naming no shard.
    pub fn new(directed: ServerDirected<C>) -> Self {
        Self {
            directed,
            classifier: ReqwestClassifier,
            namer: NoShard,
        }
    }
}

impl<C: Clock + Clone, K, N> ServerDirectedMiddleware<C, K, N> {
    /// The same middleware with another classifier.
    pub fn classifier<K2>(self, classifier: K2) -> ServerDirectedMiddleware<C, K2, N> {
        ServerDirectedMiddleware {
            directed: self.directed,
            classifier,
            namer: self.namer,
        }
    }

    /// The same middleware naming each request's shard with `namer`.
    pub fn names_shard<N2: NameShard>(self, namer: N2) -> ServerDirectedMiddleware<C, K, N2> {
        ServerDirectedMiddleware {
            directed: self.directed,
            classifier: self.classifier,
            namer,
        }
    }

    /// The dependency.
    pub fn directed(&self) -> &ServerDirected<C> {
        &self.directed
    }
}

#[async_trait::async_trait]
impl<C, K, N> Middleware for ServerDirectedMiddleware<C, K, N>
where
    C: Clock + Clone + Send + Sync + 'static,
    K: Classify<Response, reqwest_middleware::Error> + Send + Sync + 'static,
    N: NameShard,
{
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let shard = self.namer.shard(&req);
        let permit = self
            .directed
            .admit(shard.as_deref())
            .map_err(reqwest_middleware::Error::middleware)?;
        let result = next.run(req, extensions).await;
        let (classification, blame) = match &result {
            Err(reqwest_middleware::Error::Middleware(e))
                if e.chain().any(crate::is_local_rejection) =>
            {
                (Classification::new(Outcome::Ignored), None)
            }
            _ => (
                self.classifier.classify(&result),
                self.classifier.blame(&result),
            ),
        };
        permit.record(classification, blame.as_ref());
        result
    }
}

#[cfg(feature = "retry")]
pub use retry::RetryMiddleware;

#[cfg(feature = "retry")]
mod retry {
    use std::fmt;

    use http::Extensions;
    use reqwest::{Request, Response};
    use reqwest_middleware::{Middleware, Next};

    use crate::http::HttpRetryable;
    use crate::retry::budget::RetryCause;
    use crate::retry::policy::Verdict;
    use crate::retry::{RetryPolicy, Retryable};

    /// A [`reqwest_middleware::Middleware`] that retries requests with a [`RetryPolicy`]:
    /// its attempts, its backoff with jitter and its budget (shared with any other policy
    /// holding it), deciding with [`HttpRetryable`] unless [`retry_if`](Self::retry_if) says
    /// otherwise. Put it *before* the breaker in the chain, so that every attempt asks the
    /// breaker: a breaker that opens (or any local refusal further down) ends the retries at
    /// once, and a retry refused that way was never made (its budget is refunded).
    ///
    /// The request is copied for each retry (`Request::try_clone`); one with a streaming body
    /// cannot be copied, so it is sent once. A timeout (the client's, reqwest's
    /// `is_timeout`) is retried as [`retry_timeouts`](crate::retry::RetryPolicyBuilder::retry_timeouts)
    /// says and charged as a timeout. After the last attempt the last result is returned as
    /// it came: a 503 is a response (the caller, or a [pipeline](crate::pipeline) with
    /// [`reqwest`](crate::pipeline::PipelineBuilder::reqwest), turns it into an error). The
    /// backoff runs on tokio's timer; a server's `Retry-After` lengthens the breaker's open
    /// wait, not the backoff.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tripline::{BreakerConfig, CircuitBreaker};
    /// use tripline_policies::reqwest::{BreakerMiddleware, RetryMiddleware, rejection};
    /// use tripline_policies::retry::RetryPolicy;
    /// use tripline_policies::retry::budget::TpsBudget;
    ///
    /// let retry = RetryPolicy::builder()
    ///     .max_attempts(3)
    ///     .budget(Arc::new(TpsBudget::default()))
    ///     .build()?;
    /// let breaker = CircuitBreaker::new("prices", BreakerConfig::default());
    /// let client = reqwest_middleware::ClientBuilder::new(
    ///     reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?,
    /// )
    /// .with(RetryMiddleware::new(retry.clone()))          // outside: each attempt asks...
    /// .with(BreakerMiddleware::new(breaker.clone()))     // ...the breaker
    /// .build();
    ///
    /// breaker.force_open();
    /// let err = client.get("http://127.0.0.1:9/price").send().await.unwrap_err();
    /// assert!(rejection(&err).is_some()); // refused, never sent, never retried
    /// assert_eq!(retry.stats().retries, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub struct RetryMiddleware<P = HttpRetryable> {
        policy: RetryPolicy<P>,
    }

    impl<P: Clone> Clone for RetryMiddleware<P> {
        fn clone(&self) -> Self {
            Self {
                policy: self.policy.clone(),
            }
        }
    }

    impl<P> fmt::Debug for RetryMiddleware<P> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("RetryMiddleware")
                .field("policy", &self.policy)
                .finish()
        }
    }

    impl RetryMiddleware {
        /// Retries with `policy` (its attempts, backoff and budget), deciding with
        /// [`HttpRetryable`] whatever predicate the policy had.
        pub fn new<Q>(policy: RetryPolicy<Q>) -> Self {
            Self {
                policy: policy.with_predicate(HttpRetryable),
            }
        }
    }

    impl<P> RetryMiddleware<P> {
        /// The same middleware deciding with `predicate` (a
        /// `Fn(&Result<Response, reqwest_middleware::Error>) -> bool`).
        pub fn retry_if<Q>(self, predicate: Q) -> RetryMiddleware<Q> {
            RetryMiddleware {
                policy: self.policy.with_predicate(predicate),
            }
        }

        /// The policy (its [`stats`](RetryPolicy::stats) count this middleware's requests).
        pub fn policy(&self) -> &RetryPolicy<P> {
            &self.policy
        }
    }

    fn is_timeout(e: &reqwest_middleware::Error) -> bool {
        match e {
            reqwest_middleware::Error::Reqwest(e) => e.is_timeout(),
            reqwest_middleware::Error::Middleware(e) => {
                super::reqwest_error(e).is_some_and(reqwest::Error::is_timeout)
            }
        }
    }

    fn verdict<P>(
        policy: &RetryPolicy<P>,
        result: &Result<Response, reqwest_middleware::Error>,
    ) -> Verdict
    where
        P: Retryable<Response, reqwest_middleware::Error>,
    {
        if let Err(e) = result {
            if let reqwest_middleware::Error::Middleware(m) = e {
                if m.chain().any(crate::is_local_rejection) {
                    return Verdict::Local;
                }
            }
            if is_timeout(e) {
                return Verdict::Failure {
                    cause: RetryCause::Timeout,
                    retryable: policy.retries_timeouts(),
                };
            }
        }
        Verdict::of(policy.predicate(), result)
    }

    #[async_trait::async_trait]
    impl<P> Middleware for RetryMiddleware<P>
    where
        P: Retryable<Response, reqwest_middleware::Error> + Send + Sync + 'static,
    {
        async fn handle(
            &self,
            req: Request,
            extensions: &mut Extensions,
            next: Next<'_>,
        ) -> reqwest_middleware::Result<Response> {
            let mut attempts = self.policy.start();
            let mut req = req;
            loop {
                let copy = if attempts.may_retry() {
                    req.try_clone()
                } else {
                    None
                };
                let result = next.clone().run(req, extensions).await;
                let v = verdict(&self.policy, &result);
                let Some(copy) = copy else {
                    if attempts.may_retry() {
                        // A streaming body: no copy to retry with.
                        attempts.report(v);
                        return result;
                    }
                    // The last attempt: `next` says the attempts ran out.
                    let _ = attempts.next(v);
                    return result;
                };
                let Some(delay) = attempts.next(v) else {
                    return result;
                };
                drop(result);
                tokio::time::sleep(delay).await;
                attempts.begin();
                req = copy;
            }
        }
    }
}
