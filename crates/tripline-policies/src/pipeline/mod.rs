//! The pipeline: retry, breaker, partial breaker, gate, bulkhead, shedder, limiter, throttle,
//! timeout and fault injector, composed in the one order that keeps each of them honest.
//!
//! # The order
//!
//! From the outside in, the default order is:
//!
//! | stage | why here |
//! |---|---|
//! | **retry** | outside the breaker: every attempt asks the breaker, so once the breaker (re-)opens, the remaining retries are refused at once and never retried. A re-opened breaker gets zero retries. |
//! | **breaker** | sees every attempt that could reach the dependency, and nothing else: local refusals further in are recorded as ignored. |
//! | **partial** | the [partial breaker](crate::partial), beside the classic one and for the same reasons: it sees the attempts, and records what the dependency did with them. |
//! | **gate** | refuses instantly (Envoy style) before anything waits; a call about to queue in the bulkhead holds a *pending* slot, then a *request* slot once it has its bulkhead slot; retries hold a *retry* slot. |
//! | **bulkhead** | waits in a bounded queue for a bounded time; that wait is not part of the timeout. |
//! | **shed** | the [shedder](crate::shed) shares the slots out by the call's priority (and may queue, highest priority first); after the bulkhead, it decides among the calls the bulkhead let through. |
//! | **limiter** | the [adaptive limit](crate::limiter), after every wait, so the round-trip time it learns from is the dependency's alone; a success is a sample, a failure or a timeout a drop. |
//! | **throttle** | next to the wire, so its `requests` and `accepts` count exactly the attempts about to be sent and the backend's answers; a throttled attempt frees its slots at once. |
//! | **timeout** | innermost but for the injected faults: it times the dependency call and nothing else, so every admitted attempt settles, its expiry is a failure for the breaker and the throttle, and a retry's timer is a per-attempt one. |
//! | **chaos** | the [fault injector](crate::chaos) plays the dependency, so it sits where the dependency is: inside the timeout, which cuts an injected stall as it would a real one. |
//!
//! The gate's pending slot covers the bulkhead's queue; a call waiting in the shedder's or the
//! limiter's queue holds its request slot.
//!
//! Calls carry a [`Priority`] for the shedder and the limiter: [`Pipeline::call`] makes
//! [`Priority::DEFAULT`] calls, [`Pipeline::call_with_priority`] others.
//!
//! The builder's methods may be called in any order: the stages are always assembled as
//! above, and [`Pipeline::order`] says what was built. Every stage is optional.
//!
//! # The other order, deliberately
//!
//! [`PipelineBuilder::retry_inside_breaker`] moves the retry inside the breaker: the breaker
//! admits the *call* once, the retries run within that one admission, and only the final
//! result is recorded. The breaker then measures "calls that failed even after retrying",
//! which suits a breaker guarding a caller's SLO rather than the dependency's health; but
//! retries are no longer stopped by the breaker between attempts, so the retry budget is the
//! only thing bounding them, and the breaker's slow-call measure includes the backoff delays.
//! A call refused by the breaker is, as always, not retried.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tripline::{BreakerConfig, CircuitBreaker, TokioClock};
//! use tripline_policies::bulkhead::{Bulkhead, BulkheadConfig};
//! use tripline_policies::pipeline::{Pipeline, PipelineError, Stage};
//! use tripline_policies::retry::RetryPolicy;
//! use tripline_policies::retry::budget::TpsBudget;
//!
//! let breaker = CircuitBreaker::with_clock("catalog", BreakerConfig::default(), TokioClock::new());
//! let pipeline = Pipeline::builder()
//!     .timeout(Duration::from_millis(2500)) // written first, still innermost
//!     .bulkhead(Bulkhead::new(BulkheadConfig::builder().max_concurrent(20).build()?))
//!     .breaker(breaker)
//!     .retry(RetryPolicy::builder().budget(Arc::new(TpsBudget::default())).build()?)
//!     .build()?;
//! assert_eq!(pipeline.order(), [Stage::Retry, Stage::Breaker, Stage::Bulkhead, Stage::Timeout]);
//!
//! let card = pipeline.call(|| async { Ok::<_, std::io::Error>("full card") }).await?;
//! assert_eq!(card, "full card");
//!
//! let slow = pipeline
//!     .call(|| async {
//!         tokio::time::sleep(Duration::from_secs(10)).await;
//!         Ok::<_, std::io::Error>("late")
//!     })
//!     .await;
//! assert!(matches!(slow, Err(PipelineError::Timeout(_))));
//! # Ok(())
//! # }
//! ```
//!
//! # Results, counters, configuration
//!
//! * A call returns the dependency's last result: an `Err` is [`PipelineError::Failed`]; an
//!   `Ok` stays the call's value even when the classifier judged it a failure (an HTTP 503 is
//!   a response), unless [`PipelineBuilder::failures_as_errors`] turns it into the call's
//!   error, so that [`Pipeline::call_or_else`]'s fallback sees it (the reqwest defaults,
//!   [`PipelineBuilder::reqwest`], do).
//! * [`Pipeline::stats`] counts the calls by how they ended (the classifier's verdict on the
//!   last result, a timeout, an injected fault, a refusal by stage, a fallback), once per call.
//! * [`Pipeline::with_breaker`] makes the same pipeline around another breaker: one per
//!   tenant, host or shard, taken from a registry for each call.
//! * With the `serde` feature, [`PipelineConfig`] reads every stage from one TOML table.

#[cfg(feature = "serde")]
mod config;
pub mod error;
mod stats;

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use tripline::{
    Breaker as AnyBreaker, BreakerPermit as _, CircuitBreaker, Classification, Classify, Clock,
    ConfigError, MonotonicClock, Outcome, ResultClassifier,
};

use crate::bulkhead::{Admission, Bulkhead, BulkheadPermit};
use crate::chaos::Chaos;
use crate::gate::{Gate, GateGuard};
use crate::limiter::Limiter;
use crate::partial::PartialBreaker;
use crate::retry::budget::RetryCause;
use crate::retry::policy::Verdict;
use crate::retry::{RetryOnError, RetryPolicy, Retryable};
use crate::shed::{Priority, Shedder};
use crate::throttle::Throttle;
use crate::timeout::Elapsed;
#[cfg(feature = "serde")]
pub use config::PipelineConfig;
pub use error::PipelineError;
pub use stats::{PipelineStats, Refusals};

/// Where the retry sits relative to the breaker. See the [module docs](self).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RetryPlacement {
    /// Every attempt asks the breaker; a re-opened breaker gets zero retries. The default.
    #[default]
    OutsideBreaker,
    /// The breaker admits the whole retried call once and records its final result.
    InsideBreaker,
}

/// A stage of a pipeline, as listed by [`Pipeline::order`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// The retry loop.
    Retry,
    /// The circuit breaker.
    Breaker,
    /// The partial breaker.
    Partial,
    /// The concurrency gate.
    Gate,
    /// The bulkhead.
    Bulkhead,
    /// The priority shedder.
    Shed,
    /// The adaptive concurrency limit.
    Limiter,
    /// The adaptive throttle.
    Throttle,
    /// The timeout.
    Timeout,
    /// The fault injector.
    Chaos,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Retry => "retry",
            Stage::Breaker => "breaker",
            Stage::Partial => "partial",
            Stage::Gate => "gate",
            Stage::Bulkhead => "bulkhead",
            Stage::Shed => "shed",
            Stage::Limiter => "limiter",
            Stage::Throttle => "throttle",
            Stage::Timeout => "timeout",
            Stage::Chaos => "chaos",
        })
    }
}

/// What becomes of a call's last result when it is an `Ok` that the classifier judged a
/// failure (an HTTP 503 is a response): kept as the call's value ([`KeepFailures`], the
/// default), or turned into the call's error ([`PipelineBuilder::failures_as_errors`]), so
/// that the caller's error path and [`Pipeline::call_or_else`]'s fallback see it.
///
/// Implemented for closures `Fn(T) -> Result<T, E>` (return `Ok` to keep the value after
/// all) and by [`KeepFailures`]; the reqwest integration has its own
/// (`tripline_policies::reqwest::StatusError`).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tripline::ConfigError> {
/// use tripline::{Classification, Outcome};
/// use tripline_policies::pipeline::{Pipeline, PipelineError};
///
/// #[derive(Debug)]
/// struct Status(u16);
/// let pipeline = Pipeline::builder()
///     .classifier(|r: &Result<u16, Status>| match r {
///         Ok(s) if *s >= 500 => Classification::new(Outcome::Failure),
///         _ => Classification::new(Outcome::Success),
///     })
///     .failures_as_errors(|status: u16| Err::<u16, _>(Status(status)))
///     .build()?;
/// let r = pipeline.call(|| async { Ok::<u16, Status>(503) }).await;
/// assert!(matches!(r, Err(PipelineError::Failed(Status(503)))));
/// let cached = pipeline.call_or_else(|| async { Ok(503) }, |_| async { 200 }).await;
/// assert_eq!(cached, 200); // the fallback answered
/// # Ok(())
/// # }
/// ```
pub trait FailureToError<T, E> {
    /// Whether any value is turned into an error; `false` spares the pipeline classifying
    /// the last result again.
    fn active(&self) -> bool {
        true
    }

    /// `value`, the call's last result, judged a failure by the classifier: `Err` fails the
    /// call with [`PipelineError::Failed`], `Ok` keeps the value.
    fn failure_to_error(&self, value: T) -> Result<T, E>;
}

impl<T, E, F> FailureToError<T, E> for F
where
    F: Fn(T) -> Result<T, E>,
{
    fn failure_to_error(&self, value: T) -> Result<T, E> {
        self(value)
    }
}

/// The default [`FailureToError`]: an `Ok` is the call's value, whatever the classifier
/// made of it (the breaker, the budget and the throttle still count it as a failure).
#[derive(Clone, Copy, Debug, Default)]
pub struct KeepFailures;

impl<T, E> FailureToError<T, E> for KeepFailures {
    fn active(&self) -> bool {
        false
    }

    fn failure_to_error(&self, value: T) -> Result<T, E> {
        Ok(value)
    }
}

/// Resilience policies composed around calls to one dependency. See the [module docs](self).
///
/// `C` is the breaker's clock, `P` the retry predicate, `K` the classifier that turns a result
/// into a breaker outcome (and a throttle accept), `M` what becomes of an `Ok` the classifier
/// judged a failure ([`FailureToError`]). Cloning is cheap: every policy is shared, and so
/// are the [counters](Pipeline::stats).
pub struct Pipeline<
    C: Clock = MonotonicClock,
    P = RetryOnError,
    K = ResultClassifier,
    M = KeepFailures,
    B: AnyBreaker = CircuitBreaker<C>,
> {
    retry: Option<RetryPolicy<P>>,
    clock: PhantomData<fn() -> C>,
    breaker: Option<B>,
    stages: Stages,
    placement: RetryPlacement,
    classifier: K,
    failures: M,
    stats: Arc<stats::Counters>,
}

/// The stages that do not change the pipeline's type.
#[derive(Clone, Debug, Default)]
struct Stages {
    partial: Option<PartialBreaker>,
    gate: Option<Gate>,
    bulkhead: Option<Bulkhead>,
    shed: Option<Shedder>,
    limiter: Option<Limiter>,
    throttle: Option<Throttle>,
    timeout: Option<Duration>,
    chaos: Option<Chaos>,
}

impl<C: Clock, P: Clone, K: Clone, M: Clone, B: AnyBreaker> Clone for Pipeline<C, P, K, M, B> {
    fn clone(&self) -> Self {
        Self {
            retry: self.retry.clone(),
            clock: PhantomData,
            breaker: self.breaker.clone(),
            stages: self.stages.clone(),
            placement: self.placement,
            classifier: self.classifier.clone(),
            failures: self.failures.clone(),
            stats: self.stats.clone(),
        }
    }
}

impl<C: Clock, P, K, M, B: AnyBreaker> fmt::Debug for Pipeline<C, P, K, M, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("order", &self.order())
            .field("retry", &self.retry)
            .field("breaker", &self.breaker)
            .field("stages", &self.stages)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A builder with no stage.
    pub fn builder() -> PipelineBuilder {
        PipelineBuilder {
            retry: None,
            clock: PhantomData,
            breaker: None,
            stages: Stages::default(),
            placement: RetryPlacement::OutsideBreaker,
            classifier: ResultClassifier,
            failures: KeepFailures,
        }
    }
}

type Attempt<T, E> = Result<Result<T, E>, PipelineError<E>>;

impl<C: Clock, P, K, M, B: AnyBreaker> Pipeline<C, P, K, M, B> {
    /// The stages built, from the outside in.
    pub fn order(&self) -> Vec<Stage> {
        let retry = self.retry.is_some().then_some(Stage::Retry);
        let breaker = self.breaker.is_some().then_some(Stage::Breaker);
        let (first, second) = match self.placement {
            RetryPlacement::OutsideBreaker => (retry, breaker),
            RetryPlacement::InsideBreaker => (breaker, retry),
        };
        let st = &self.stages;
        [
            first,
            second,
            st.partial.is_some().then_some(Stage::Partial),
            st.gate.is_some().then_some(Stage::Gate),
            st.bulkhead.is_some().then_some(Stage::Bulkhead),
            st.shed.is_some().then_some(Stage::Shed),
            st.limiter.is_some().then_some(Stage::Limiter),
            st.throttle.is_some().then_some(Stage::Throttle),
            st.timeout.is_some().then_some(Stage::Timeout),
            st.chaos.is_some().then_some(Stage::Chaos),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The retry policy, if any.
    pub fn retry(&self) -> Option<&RetryPolicy<P>> {
        self.retry.as_ref()
    }

    /// The breaker, if any.
    pub fn breaker(&self) -> Option<&B> {
        self.breaker.as_ref()
    }

    /// The partial breaker, if any.
    pub fn partial(&self) -> Option<&PartialBreaker> {
        self.stages.partial.as_ref()
    }

    /// The gate, if any.
    pub fn gate(&self) -> Option<&Gate> {
        self.stages.gate.as_ref()
    }

    /// The bulkhead, if any.
    pub fn bulkhead(&self) -> Option<&Bulkhead> {
        self.stages.bulkhead.as_ref()
    }

    /// The shedder, if any.
    pub fn shed(&self) -> Option<&Shedder> {
        self.stages.shed.as_ref()
    }

    /// The adaptive limiter, if any.
    pub fn limiter(&self) -> Option<&Limiter> {
        self.stages.limiter.as_ref()
    }

    /// The throttle, if any.
    pub fn throttle(&self) -> Option<&Throttle> {
        self.stages.throttle.as_ref()
    }

    /// The per-attempt timeout, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.stages.timeout
    }

    /// The fault injector, if any.
    pub fn chaos(&self) -> Option<&Chaos> {
        self.stages.chaos.as_ref()
    }

    /// Where the retry sits relative to the breaker.
    pub fn placement(&self) -> RetryPlacement {
        self.placement
    }

    /// The counters of the calls made so far, by how they ended (shared by the clones, and
    /// by the pipelines [`with_breaker`](Self::with_breaker) made).
    pub fn stats(&self) -> PipelineStats {
        self.stats.snapshot()
    }

    /// The same pipeline (every other stage shared, and the counters) around another breaker:
    /// one per tenant or shard from a [`Registry`](tripline::registry::Registry), taken for
    /// each call. Cheap: a few reference-count increments.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
    /// use tripline_policies::pipeline::{Pipeline, PipelineError};
    ///
    /// let registry = Registry::new(RegistryConfig::default())?;
    /// let pipeline = Pipeline::builder().timeout(Duration::from_secs(2)).build()?;
    /// let for_tenant = |tenant: &str| -> Result<_, Box<dyn std::error::Error>> {
    ///     let breaker = registry.get(&Key::scoped("vendor", ScopeKind::Tenant, tenant)?)?;
    ///     Ok(pipeline.with_breaker(breaker))
    /// };
    /// registry.get(&Key::scoped("vendor", ScopeKind::Tenant, "acme")?)?.force_open();
    /// let acme = for_tenant("acme")?.call(|| async { Ok::<_, std::io::Error>("acme") }).await;
    /// assert!(matches!(acme, Err(PipelineError::Rejected(_))));
    /// let globex = for_tenant("globex")?.call(|| async { Ok::<_, std::io::Error>("globex") }).await?;
    /// assert_eq!(globex, "globex");
    /// assert_eq!(pipeline.stats().calls, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_breaker<B2: AnyBreaker>(&self, breaker: B2) -> Pipeline<B2::Clock, P, K, M, B2>
    where
        P: Clone,
        K: Clone,
        M: Clone,
    {
        Pipeline {
            retry: self.retry.clone(),
            clock: PhantomData,
            breaker: Some(breaker),
            stages: self.stages.clone(),
            placement: self.placement,
            classifier: self.classifier.clone(),
            failures: self.failures.clone(),
            stats: self.stats.clone(),
        }
    }

    /// Runs the future `f` makes through every stage; `f` is called once per attempt, and not
    /// at all when a local policy refuses the attempt. If the returned future is dropped
    /// mid-call, every slot, permit and ticket is given back (the breaker counts the permit as
    /// abandoned).
    pub async fn call<T, E, F, Fut>(&self, f: F) -> Result<T, PipelineError<E>>
    where
        P: Retryable<T, E>,
        K: Classify<T, E>,
        M: FailureToError<T, E>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call_with_priority(Priority::DEFAULT, f).await
    }

    /// [`call`](Self::call) for a call of `priority`: the shedder and the limiter refuse the
    /// lowest priorities first and serve their queues highest priority first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tripline_policies::pipeline::{Pipeline, PipelineError};
    /// use tripline_policies::shed::{Priority, ShedConfig, Shedder};
    ///
    /// let shedder = Shedder::new(ShedConfig::builder().capacity(2).build()?);
    /// let pipeline = Pipeline::builder().shed(shedder.clone()).build()?;
    /// let _busy = shedder.try_acquire(Priority::DEFAULT)?;
    /// let card = pipeline
    ///     .call_with_priority(Priority::SHEDDABLE, || async { Ok::<_, std::io::Error>("card") })
    ///     .await;
    /// assert!(matches!(card, Err(PipelineError::Shed(_))));
    /// let logged = pipeline
    ///     .call_with_priority(Priority::CRITICAL, || async { Ok::<_, std::io::Error>("logged") })
    ///     .await?;
    /// assert_eq!(logged, "logged");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call_with_priority<T, E, F, Fut>(
        &self,
        priority: Priority,
        mut f: F,
    ) -> Result<T, PipelineError<E>>
    where
        P: Retryable<T, E>,
        K: Classify<T, E>,
        M: FailureToError<T, E>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let attempt = match (self.placement, &self.breaker) {
            (RetryPlacement::InsideBreaker, Some(breaker)) => match breaker.acquire().await {
                Ok(permit) => {
                    let r = self.attempts(&mut f, false, priority).await;
                    let _ = permit
                        .record_classified(self.breaker_classification(&r))
                        .await;
                    r
                }
                Err(rejected) => Err(PipelineError::Rejected(rejected)),
            },
            _ => self.attempts(&mut f, true, priority).await,
        };
        match attempt {
            Ok(r) => {
                let outcome = self.classifier.classify(&r).outcome;
                self.stats.result(outcome);
                match r {
                    Ok(v) if outcome == Outcome::Failure && self.failures.active() => self
                        .failures
                        .failure_to_error(v)
                        .map_err(PipelineError::Failed),
                    Ok(v) => Ok(v),
                    Err(e) => Err(PipelineError::Failed(e)),
                }
            }
            Err(e) => {
                self.stats.error(&e);
                Err(e)
            }
        }
    }

    /// [`call`](Self::call), handing any refusal, timeout or error to `fallback`, which
    /// produces the caller's answer (a cached value, a default, a degraded page).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), tripline::ConfigError> {
    /// use tripline::{BreakerConfig, CircuitBreaker};
    /// use tripline_policies::pipeline::Pipeline;
    ///
    /// let breaker = CircuitBreaker::new("recommendations", BreakerConfig::default());
    /// let pipeline = Pipeline::builder().breaker(breaker.clone()).build()?;
    /// breaker.force_open();
    /// let picks = pipeline
    ///     .call_or_else(
    ///         || async { Ok::<_, std::io::Error>(vec!["personalised"]) },
    ///         |_| async { vec!["bestsellers"] },
    ///     )
    ///     .await;
    /// assert_eq!(picks, ["bestsellers"]);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call_or_else<T, E, F, Fut, G, GFut>(&self, f: F, fallback: G) -> T
    where
        P: Retryable<T, E>,
        K: Classify<T, E>,
        M: FailureToError<T, E>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        G: FnOnce(PipelineError<E>) -> GFut,
        GFut: Future<Output = T>,
    {
        match self.call(f).await {
            Ok(v) => v,
            Err(e) => {
                self.stats.fallback();
                fallback(e).await
            }
        }
    }

    /// The retry loop (or a single attempt without a policy).
    async fn attempts<T, E, F, Fut>(
        &self,
        f: &mut F,
        through_breaker: bool,
        priority: Priority,
    ) -> Attempt<T, E>
    where
        P: Retryable<T, E>,
        K: Classify<T, E>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let Some(policy) = &self.retry else {
            return self.attempt(f, through_breaker, priority).await;
        };
        let mut attempts = policy.start();
        let mut retry_slot: Option<GateGuard> = None;
        loop {
            let r = self.attempt(f, through_breaker, priority).await;
            // The attempt is over: a retry's gate slot goes back.
            drop(retry_slot.take());
            let verdict = match &r {
                Ok(result) => Verdict::of(policy.predicate(), result),
                Err(PipelineError::Timeout(_)) => Verdict::Failure {
                    cause: RetryCause::Timeout,
                    retryable: policy.retries_timeouts(),
                },
                // An injected error plays a failure of the dependency's: retried as one.
                Err(PipelineError::Injected(_)) => Verdict::Failure {
                    cause: RetryCause::Error,
                    retryable: true,
                },
                Err(_) => Verdict::Local,
            };
            let Some(delay) = attempts.next(verdict) else {
                return r;
            };
            if let Some(gate) = &self.stages.gate {
                match gate.try_retry() {
                    Ok(slot) => retry_slot = Some(slot),
                    Err(_) => {
                        attempts.cancel();
                        return r;
                    }
                }
            }
            tokio::time::sleep(delay).await;
            attempts.begin();
        }
    }

    /// One attempt: the breaker (when asked), then the admitted stages.
    async fn attempt<T, E, F, Fut>(
        &self,
        f: &mut F,
        through_breaker: bool,
        priority: Priority,
    ) -> Attempt<T, E>
    where
        K: Classify<T, E>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let permit = match &self.breaker {
            Some(b) if through_breaker => Some(b.acquire().await.map_err(PipelineError::Rejected)?),
            _ => None,
        };
        let r = self.admitted(f, priority).await;
        if let Some(permit) = permit {
            let _ = permit
                .record_classified(self.breaker_classification(&r))
                .await;
        }
        r
    }

    /// The stages inside the breaker: the partial breaker, then the slots.
    async fn admitted<T, E, F, Fut>(&self, f: &mut F, priority: Priority) -> Attempt<T, E>
    where
        K: Classify<T, E>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let partial = match &self.stages.partial {
            Some(p) => Some(p.try_acquire().map_err(PipelineError::PartiallyOpen)?),
            None => None,
        };
        let r = self.limited(f, priority).await;
        if let Some(permit) = partial {
            permit.record(self.breaker_classification(&r).outcome);
        }
        r
    }

    /// Gate and bulkhead, shedder, limiter; then the call.
    async fn limited<T, E, F, Fut>(&self, f: &mut F, priority: Priority) -> Attempt<T, E>
    where
        K: Classify<T, E>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let st = &self.stages;
        let _slots = self.admit().await?;
        let _shed = match &st.shed {
            Some(s) => Some(s.acquire(priority).await.map_err(PipelineError::Shed)?),
            None => None,
        };
        let limit = match &st.limiter {
            Some(l) => Some(
                l.acquire(priority)
                    .await
                    .map_err(PipelineError::LimitExceeded)?,
            ),
            None => None,
        };
        let r = self.sent(f).await;
        if let Some(permit) = limit {
            permit.record(self.breaker_classification(&r).outcome);
        }
        r
    }

    /// Throttle, timeout, injected faults, and the call.
    async fn sent<T, E, F, Fut>(&self, f: &mut F) -> Attempt<T, E>
    where
        K: Classify<T, E>,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let st = &self.stages;
        let ticket = match &st.throttle {
            Some(t) => Some(t.try_acquire().map_err(PipelineError::Throttled)?),
            None => None,
        };
        let call = async {
            if let Some(chaos) = &st.chaos {
                chaos.inject().await.map_err(PipelineError::Injected)?;
            }
            Ok(f().await)
        };
        let r = match st.timeout {
            Some(d) => match tokio::time::timeout(d, call).await {
                Ok(r) => r,
                Err(_) => Err(PipelineError::Timeout(Elapsed::new(d))),
            },
            None => call.await,
        };
        if let Some(ticket) = ticket {
            ticket.record(match &r {
                Ok(result) => self.classifier.classify(result).outcome,
                Err(_) => Outcome::Failure,
            });
        }
        r
    }

    /// The gate's and the bulkhead's slots: a request slot at once when the bulkhead has a
    /// free slot; a pending slot while waiting in its queue, turned into a request slot after.
    async fn admit<E>(
        &self,
    ) -> Result<(Option<BulkheadPermit>, Option<GateGuard>), PipelineError<E>> {
        let request = |gate: Option<&Gate>| {
            gate.map(Gate::try_request)
                .transpose()
                .map_err(PipelineError::Overflow)
        };
        let Some(bulkhead) = &self.stages.bulkhead else {
            return Ok((None, request(self.stages.gate.as_ref())?));
        };
        match bulkhead.admit() {
            Admission::Now(permit) => Ok((Some(permit), request(self.stages.gate.as_ref())?)),
            Admission::Queued(queued) => {
                let pending = self
                    .stages
                    .gate
                    .as_ref()
                    .map(Gate::try_pending)
                    .transpose()
                    .map_err(PipelineError::Overflow)?;
                let permit = queued.wait().await.map_err(PipelineError::BulkheadFull)?;
                let guard = pending
                    .map(GateGuard::activate)
                    .transpose()
                    .map_err(PipelineError::Overflow)?;
                Ok((Some(permit), guard))
            }
            Admission::Full(e) => Err(PipelineError::BulkheadFull(e)),
        }
    }

    /// What an attempt means to the breaker (and the partial breaker and the limiter): the
    /// classifier's verdict on the dependency's result, a failure for a timeout or an injected
    /// error, nothing for a local refusal.
    fn breaker_classification<T, E>(&self, r: &Attempt<T, E>) -> Classification
    where
        K: Classify<T, E>,
    {
        match r {
            Ok(result) => self.classifier.classify(result),
            Err(PipelineError::Timeout(_) | PipelineError::Injected(_)) => {
                Classification::new(Outcome::Failure)
            }
            Err(_) => Classification::new(Outcome::Ignored),
        }
    }
}

/// Builds a [`Pipeline`]. The methods may be called in any order; see the
/// [module docs](self) for the order the stages are assembled in.
#[derive(Debug)]
pub struct PipelineBuilder<
    C: Clock = MonotonicClock,
    P = RetryOnError,
    K = ResultClassifier,
    M = KeepFailures,
    B: AnyBreaker = CircuitBreaker<C>,
> {
    retry: Option<RetryPolicy<P>>,
    clock: PhantomData<fn() -> C>,
    breaker: Option<B>,
    stages: Stages,
    placement: RetryPlacement,
    classifier: K,
    failures: M,
}

impl<C: Clock, P, K, M, B: AnyBreaker> PipelineBuilder<C, P, K, M, B> {
    /// Retries with `policy`.
    pub fn retry<P2>(self, policy: RetryPolicy<P2>) -> PipelineBuilder<C, P2, K, M, B> {
        PipelineBuilder {
            retry: Some(policy),
            clock: PhantomData,
            breaker: self.breaker,
            stages: self.stages,
            placement: self.placement,
            classifier: self.classifier,
            failures: self.failures,
        }
    }

    /// Retries what `predicate` says is worth retrying, with the retry policy already set (a
    /// policy read from a configuration file retries every `Err`): see
    /// [`RetryPolicy::with_predicate`]. Without a retry policy, nothing is retried.
    pub fn retry_if<P2>(self, predicate: P2) -> PipelineBuilder<C, P2, K, M, B> {
        PipelineBuilder {
            retry: self.retry.map(|p| p.with_predicate(predicate)),
            clock: PhantomData,
            breaker: self.breaker,
            stages: self.stages,
            placement: self.placement,
            classifier: self.classifier,
            failures: self.failures,
        }
    }

    /// The same builder without a breaker, typed for a breaker on `C2`.
    #[cfg(feature = "serde")]
    pub(crate) fn without_breaker<C2: Clock>(self) -> PipelineBuilder<C2, P, K, M> {
        PipelineBuilder {
            retry: self.retry,
            clock: PhantomData,
            breaker: None,
            stages: self.stages,
            placement: self.placement,
            classifier: self.classifier,
            failures: self.failures,
        }
    }

    /// Guards calls with `breaker`: a [`CircuitBreaker`], or any host of the
    /// [`tripline::Breaker`] interface (a fleet-wide `tripline_redis::SharedBreaker` here is
    /// the whole change from one replica to a fleet; its admission may wait for a round trip,
    /// and each attempt's result is recorded before the next stage sees it).
    pub fn breaker<B2: AnyBreaker>(self, breaker: B2) -> PipelineBuilder<B2::Clock, P, K, M, B2> {
        PipelineBuilder {
            retry: self.retry,
            clock: PhantomData,
            breaker: Some(breaker),
            stages: self.stages,
            placement: self.placement,
            classifier: self.classifier,
            failures: self.failures,
        }
    }

    /// Classifies results with `classifier` (for the breaker, and for the throttle's accepts:
    /// anything not a failure is accepted). Default: `Ok` succeeds, `Err` fails.
    pub fn classifier<K2>(self, classifier: K2) -> PipelineBuilder<C, P, K2, M, B> {
        PipelineBuilder {
            retry: self.retry,
            clock: PhantomData,
            breaker: self.breaker,
            stages: self.stages,
            placement: self.placement,
            classifier,
            failures: self.failures,
        }
    }

    /// Turns a last result that is an `Ok` the classifier judged a failure into the call's
    /// error, with `failures` ([`FailureToError`]), so the caller's error path and the
    /// fallback of [`call_or_else`](Pipeline::call_or_else) see it. The retry predicate, the
    /// breaker and the budget still see the value itself (a 503 with its `Retry-After`).
    pub fn failures_as_errors<M2>(self, failures: M2) -> PipelineBuilder<C, P, K, M2, B> {
        PipelineBuilder {
            retry: self.retry,
            clock: PhantomData,
            breaker: self.breaker,
            stages: self.stages,
            placement: self.placement,
            classifier: self.classifier,
            failures,
        }
    }

    /// The reqwest defaults (feature `reqwest`): results classified by
    /// [`ReqwestClassifier`](crate::reqwest::ReqwestClassifier), retried by
    /// [`HttpRetryable`](crate::http::HttpRetryable) (errors, 429, 500, 502, 503, 504; never a
    /// local refusal), and a failed response after the last attempt turned into the call's
    /// error by [`StatusError`](crate::reqwest::StatusError), so the fallback fires for a 503.
    #[cfg(feature = "reqwest")]
    pub fn reqwest(
        self,
    ) -> PipelineBuilder<
        C,
        crate::http::HttpRetryable,
        crate::reqwest::ReqwestClassifier,
        crate::reqwest::StatusError,
        B,
    > {
        self.retry_if(crate::http::HttpRetryable)
            .classifier(crate::reqwest::ReqwestClassifier)
            .failures_as_errors(crate::reqwest::StatusError)
    }

    /// Rejects a share of attempts with the partial breaker `partial`.
    pub fn partial(mut self, partial: PartialBreaker) -> Self {
        self.stages.partial = Some(partial);
        self
    }

    /// Limits concurrency with `gate` (requests, pending, retries).
    pub fn gate(mut self, gate: Gate) -> Self {
        self.stages.gate = Some(gate);
        self
    }

    /// Limits concurrency with `bulkhead`, with its bounded wait.
    pub fn bulkhead(mut self, bulkhead: Bulkhead) -> Self {
        self.stages.bulkhead = Some(bulkhead);
        self
    }

    /// Shares slots out by priority with `shedder`.
    pub fn shed(mut self, shedder: Shedder) -> Self {
        self.stages.shed = Some(shedder);
        self
    }

    /// Limits concurrency adaptively with `limiter`.
    pub fn limiter(mut self, limiter: Limiter) -> Self {
        self.stages.limiter = Some(limiter);
        self
    }

    /// Throttles attempts adaptively with `throttle`.
    pub fn throttle(mut self, throttle: Throttle) -> Self {
        self.stages.throttle = Some(throttle);
        self
    }

    /// Times each attempt out after `timeout`, in `(0, 1d]`; always the innermost stage but
    /// for injected faults.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.stages.timeout = Some(timeout);
        self
    }

    /// Injects faults from `chaos` into the attempts, inside the timeout.
    pub fn chaos(mut self, chaos: Chaos) -> Self {
        self.stages.chaos = Some(chaos);
        self
    }

    /// Puts the retry inside the breaker, deliberately; see the [module docs](self).
    pub fn retry_inside_breaker(mut self) -> Self {
        self.placement = RetryPlacement::InsideBreaker;
        self
    }

    /// Sets where the retry sits relative to the breaker.
    pub fn placement(mut self, placement: RetryPlacement) -> Self {
        self.placement = placement;
        self
    }

    /// The pipeline.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline_policies::pipeline::Pipeline;
    ///
    /// let err = Pipeline::builder().timeout(Duration::ZERO).build().unwrap_err();
    /// assert_eq!(err.to_string(), "timeout must be in (0ns, 86400s], got 0ns");
    /// ```
    pub fn build(self) -> Result<Pipeline<C, P, K, M, B>, ConfigError> {
        let mut stages = self.stages;
        stages.timeout = stages
            .timeout
            .map(|t| crate::timeout::check("timeout", t))
            .transpose()?;
        Ok(Pipeline {
            retry: self.retry,
            clock: PhantomData,
            breaker: self.breaker,
            stages,
            placement: self.placement,
            classifier: self.classifier,
            failures: self.failures,
            stats: Arc::default(),
        })
    }
}
