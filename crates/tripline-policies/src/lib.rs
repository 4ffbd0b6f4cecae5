//! # tripline-policies
//!
//! The policies around a [tripline] circuit breaker. A breaker alone is not enough:
//! the timeout must sit inside it so that every admitted call settles, retries need a budget
//! or they re-amplify what the breaker stopped, and bulkheads cap the blast radius while the
//! breaker is still gathering evidence. And a breaker is modal: it sends everything or almost
//! nothing, to a fixed threshold, to every caller alike; so beside it are a concurrency limit
//! that follows latency, shedding by priority, partial opening, and fault injection to prove
//! it all on a game day.
//!
//! | module | policy | refuses with |
//! |---|---|---|
//! | [`timeout`] | a timeout per attempt, innermost; its expiry is a failure for the breaker | [`Elapsed`](timeout::Elapsed) |
//! | [`retry`] | retries with exponential backoff and jitter, a predicate, and [budgets](retry::budget) (ratio, token bucket, error rate) | — |
//! | [`bulkhead`] | bounded concurrency with a bounded, timed wait | [`BulkheadFull`](bulkhead::BulkheadFull) |
//! | [`gate`] | Envoy-style ceilings on requests, pending requests and retries; instant refusal | [`GateOverflow`](gate::GateOverflow) |
//! | [`throttle`] | client-side adaptive throttling (Google SRE) | [`Throttled`](throttle::Throttled) |
//! | [`limiter`] | an adaptive concurrency limit following latency (Netflix concurrency-limits' Vegas, Gradient2, AIMD), with a priority queue and shares | [`LimitExceeded`](limiter::LimitExceeded) |
//! | [`shed`] | priority load shedding: slots shared out by priority, the lowest refused first, a priority queue | [`Shed`](shed::Shed) |
//! | [`partial`] | partial opening: a share of calls rejected in proportion to the excess error rate (Shopify Semian's PID controller) | [`PartiallyOpen`](partial::PartiallyOpen) |
//! | [`chaos`] | fault injection for game days: latency, errors or hangs for a share of calls, switched at run time | — ([`InjectedFault`](chaos::InjectedFault) plays the dependency's failure) |
//! | [`outlier`] | Envoy's outlier detection per host, with an ejection cap and a panic threshold, and a balancer that skips ejected hosts | — |
//! | [`pipeline`] | all of the above and a breaker, assembled in one order, with the timeout innermost | [`PipelineError`](pipeline::PipelineError) |
//! | `breaker` | the core breaker as a tower layer | [`tripline::Rejected`] |
//! | `http` | an HTTP response classifier and a `Retry-After` reader | — |
//! | `grpc` | a classifier for tonic's status codes, with `grpc-retry-pushback-ms` | — |
//! | `reqwest` | `reqwest-middleware` middlewares: a breaker (one, or one per host) and a budgeted retry; a classifier and a retry predicate for reqwest's results; the pipeline's reqwest defaults | [`tripline::Rejected`] |
//! | [`config`] | every policy's settings from TOML, a whole pipeline's, a service's file (a registry's breakers and a pipeline per dependency), each bad value named at its line | — |
//! | [`metrics`] | every policy's counters and gauges through the `metrics` facade, and one call that exports them with the breakers' and a registry's | — |
//!
//! Every policy is a cheap, cloneable handle on shared state: make one per dependency and
//! share it between the tasks (and the tower services) that call that dependency. Every
//! configuration is checked when it is built, and a bad value is an error naming the field,
//! the value and what is allowed (`max_attempts must be in [1, 100], got 0`). Every policy
//! that reads time takes an injected [`tripline::Clock`] or runs on tokio's timer, so tests run
//! on paused or manual time.
//!
//! The default order of the [`pipeline`], from the outside in, is **retry → breaker → partial
//! → gate → bulkhead → shed → limiter → throttle → timeout → chaos**: the retry outside the
//! breaker, so a breaker that re-opens gets zero retries; the timeout innermost but for the
//! injected faults (which play the dependency), whatever order the builder is called in.
//!
//! ```
//! # #[cfg(feature = "pipeline")]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tripline::{BreakerConfig, CircuitBreaker, TokioClock};
//! use tripline_policies::pipeline::Pipeline;
//! use tripline_policies::retry::RetryPolicy;
//! use tripline_policies::retry::budget::{ErrorRateBudget, RetryBudget, TpsBudget};
//!
//! // Retries: 10% of requests, and none while the error rate is above 10%.
//! let budget = TpsBudget::builder().retry_ratio(0.1).build()?
//!     .and(ErrorRateBudget::builder().threshold_percent(10.0).build()?);
//! let pipeline = Pipeline::builder()
//!     .retry(RetryPolicy::builder().budget(Arc::new(budget)).build()?)
//!     .breaker(CircuitBreaker::with_clock("vendor", BreakerConfig::default(), TokioClock::new()))
//!     .timeout(Duration::from_millis(2500))
//!     .build()?;
//! let answer = pipeline.call(|| async { Ok::<_, std::io::Error>(42) }).await?;
//! assert_eq!(answer, 42);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "pipeline"))]
//! # fn main() {}
//! ```
//!
//! ## tower
//!
//! With the `tower` feature each policy has a `Layer` and a `Service` in tower's layout (one
//! module per middleware with its layer, its `ResponseFuture` and its errors); errors are
//! `BoxError`s from which each refusal downcasts to its own type. A stack in the pipeline's
//! order:
//!
//! ```
//! # #[cfg(all(feature = "tower", feature = "pipeline"))]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use std::time::Duration;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//! use tripline::{BreakerConfig, CircuitBreaker, TokioClock};
//! use tripline_policies::breaker::BreakerLayer;
//! use tripline_policies::gate::{Gate, GateLayer};
//! use tripline_policies::retry::{RetryLayer, RetryPolicy};
//! use tripline_policies::timeout::TimeoutLayer;
//!
//! let gate = Gate::default();
//! let breaker = CircuitBreaker::with_clock("vendor", BreakerConfig::default(), TokioClock::new());
//! let svc = ServiceBuilder::new()
//!     .layer(RetryLayer::new(RetryPolicy::default()).gate(gate.clone()))
//!     .layer(BreakerLayer::new(breaker))
//!     .layer(GateLayer::new(gate))
//!     .layer(TimeoutLayer::new(Duration::from_millis(2500))?)
//!     .service(service_fn(|id: u32| async move { Ok::<_, std::io::Error>(id) }));
//! assert_eq!(svc.oneshot(7).await?, 7);
//! # Ok(())
//! # }
//! # #[cfg(not(all(feature = "tower", feature = "pipeline")))]
//! # fn main() {}
//! ```
//!
//! ## Features
//!
//! One feature per component, each usable alone: `retry`, `bulkhead`, `gate`, `throttle`,
//! `timeout`, `shed`, `limiter`, `partial`, `chaos`; `pipeline` (default) enables all nine and
//! the pipeline. `tower` adds the layers of the enabled components and the breaker's; `http`
//! adds the HTTP classifier (and reading a request's priority from its extensions); `grpc` the
//! gRPC one for tonic (and `tower`, `http`); `reqwest`
//! adds the `reqwest-middleware` integration (and `http`). `outlier` (default) adds the
//! outlier detector and its balancer; `serde` (default) reads every policy's settings, a
//! pipeline's and a service's file from TOML ([`config`]); `metrics` exports every policy's
//! figures through the `metrics` facade ([`metrics`]).
//!
#![cfg_attr(not(feature = "serde"), doc = "[`config`]: #features")]
#![cfg_attr(not(feature = "metrics"), doc = "[`metrics`]: #features")]
#![forbid(unsafe_code)]
// The docs link every component's items to each other's; a link to a component whose feature
// is off stays text. The links are checked with every feature on (docs.rs builds so).
#![cfg_attr(
    not(all(
        feature = "pipeline",
        feature = "outlier",
        feature = "serde",
        feature = "metrics",
        feature = "tower",
        feature = "http",
        feature = "reqwest",
        feature = "grpc"
    )),
    allow(
        rustdoc::broken_intra_doc_links,
        reason = "links to the items of features that are off"
    )
)]

#[cfg(feature = "tower")]
pub mod breaker;
#[cfg(feature = "bulkhead")]
pub mod bulkhead;
#[cfg(feature = "chaos")]
pub mod chaos;
#[cfg(feature = "serde")]
pub mod config;
#[cfg(all(
    feature = "serde",
    any(
        feature = "retry",
        feature = "bulkhead",
        feature = "gate",
        feature = "throttle",
        feature = "shed",
        feature = "partial"
    )
))]
mod de;
#[cfg(feature = "outlier")]
mod delivery;
#[cfg(any(feature = "throttle", feature = "partial", feature = "chaos"))]
mod draws;
#[cfg(feature = "gate")]
pub mod gate;
#[cfg(feature = "grpc")]
pub mod grpc;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "limiter")]
pub mod limiter;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(test)]
mod model_tests;
#[cfg(feature = "outlier")]
pub mod outlier;
#[cfg(feature = "partial")]
pub mod partial;
#[cfg(feature = "pipeline")]
pub mod pipeline;
#[cfg(all(feature = "tower", feature = "shed"))]
mod queued;
#[cfg(feature = "reqwest")]
pub mod reqwest;
#[cfg(feature = "retry")]
pub mod retry;
#[cfg(feature = "shed")]
pub mod shed;
#[cfg(any(
    feature = "outlier",
    feature = "bulkhead",
    feature = "throttle",
    feature = "partial",
    feature = "chaos",
    feature = "shed"
))]
mod sync;
#[cfg(feature = "throttle")]
pub mod throttle;
#[cfg(feature = "timeout")]
pub mod timeout;
#[cfg(any(feature = "retry", feature = "throttle", feature = "partial"))]
mod window;

/// The error type of the tower services: any error, boxed. Each refusal downcasts to its own
/// type ([`tripline::Rejected`], `Elapsed`, `BulkheadFull`, `GateOverflow`, `Throttled`,
/// `Shed`, `LimitExceeded`, `PartiallyOpen`), and an injected fault to `InjectedFault`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Locks a mutex, ignoring poisoning: the state behind every lock in this crate is counters,
/// valid after any panic.
#[cfg(any(
    feature = "retry",
    feature = "throttle",
    feature = "partial",
    feature = "chaos"
))]
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Checks a bucketed window: `bucket` in `[1ms, window]`, `window` a whole number of buckets,
/// at most 3600 of them. Returns the number of buckets.
#[cfg(any(feature = "retry", feature = "throttle", feature = "partial"))]
pub(crate) fn check_window(
    field: &str,
    window: std::time::Duration,
    bucket: std::time::Duration,
) -> Result<u32, tripline::ConfigError> {
    use std::time::Duration;
    if bucket < Duration::from_millis(1) || bucket > window {
        return Err(tripline::ConfigError::new(
            format!("{field}.bucket"),
            format!("{bucket:?}"),
            format!("in [1ms, {field} = {window:?}]"),
        ));
    }
    let n = window.as_nanos() / bucket.as_nanos();
    if window.as_nanos() % bucket.as_nanos() != 0 || n > 3600 {
        return Err(tripline::ConfigError::new(
            field,
            format!("{window:?}"),
            format!("a whole number (1 to 3600) of buckets of {bucket:?}"),
        ));
    }
    Ok(n as u32)
}

/// Checks a wait queue's bounds: `max_waiting` in `[0, max_slots]`, and `max_wait` in
/// `(0, max]` when calls may wait (`[0, max]` otherwise).
#[cfg(any(feature = "bulkhead", feature = "shed"))]
pub(crate) fn check_queue(
    max_waiting: u32,
    max_wait: std::time::Duration,
    max_slots: u32,
    max: std::time::Duration,
) -> Result<(), tripline::ConfigError> {
    use tripline::ConfigError;
    if max_waiting > max_slots {
        return Err(ConfigError::new(
            "max_waiting",
            max_waiting,
            format!("in [0, {max_slots}]"),
        ));
    }
    if max_wait > max || (max_waiting > 0 && max_wait.is_zero()) {
        let allowed = if max_waiting > 0 {
            format!("in (0ns, {max:?}] when max_waiting > 0")
        } else {
            format!("in [0ns, {max:?}]")
        };
        return Err(ConfigError::new(
            "max_wait",
            format!("{max_wait:?}"),
            allowed,
        ));
    }
    Ok(())
}

/// Whether `e`, or an error in its chain, is a refusal by a local policy: a breaker's
/// rejection, a full bulkhead, the gate's overflow, the throttle, the shedder, the limiter,
/// the partial breaker. Such a call never reached the
/// dependency: it is never retried, and a breaker records it as ignored.
#[cfg(any(feature = "tower", feature = "reqwest"))]
pub(crate) fn is_local_rejection(e: &(dyn std::error::Error + 'static)) -> bool {
    #[cfg(feature = "bulkhead")]
    fn bulkhead(e: &(dyn std::error::Error + 'static)) -> bool {
        e.is::<bulkhead::BulkheadFull>()
    }
    #[cfg(not(feature = "bulkhead"))]
    fn bulkhead(_: &(dyn std::error::Error + 'static)) -> bool {
        false
    }
    #[cfg(feature = "gate")]
    fn gate(e: &(dyn std::error::Error + 'static)) -> bool {
        e.is::<gate::GateOverflow>()
    }
    #[cfg(not(feature = "gate"))]
    fn gate(_: &(dyn std::error::Error + 'static)) -> bool {
        false
    }
    #[cfg(feature = "throttle")]
    fn throttle(e: &(dyn std::error::Error + 'static)) -> bool {
        e.is::<throttle::Throttled>()
    }
    #[cfg(not(feature = "throttle"))]
    fn throttle(_: &(dyn std::error::Error + 'static)) -> bool {
        false
    }
    #[cfg(feature = "shed")]
    fn shed(e: &(dyn std::error::Error + 'static)) -> bool {
        e.is::<shed::Shed>()
    }
    #[cfg(not(feature = "shed"))]
    fn shed(_: &(dyn std::error::Error + 'static)) -> bool {
        false
    }
    #[cfg(feature = "limiter")]
    fn limiter(e: &(dyn std::error::Error + 'static)) -> bool {
        e.is::<limiter::LimitExceeded>()
    }
    #[cfg(not(feature = "limiter"))]
    fn limiter(_: &(dyn std::error::Error + 'static)) -> bool {
        false
    }
    #[cfg(feature = "partial")]
    fn partial(e: &(dyn std::error::Error + 'static)) -> bool {
        e.is::<partial::PartiallyOpen>()
    }
    #[cfg(not(feature = "partial"))]
    fn partial(_: &(dyn std::error::Error + 'static)) -> bool {
        false
    }
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.is::<tripline::Rejected>()
            || bulkhead(e)
            || gate(e)
            || throttle(e)
            || shed(e)
            || limiter(e)
            || partial(e)
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Whether `e`, or an error in its chain, is a timeout's expiry: this crate's
/// [`Elapsed`](timeout::Elapsed), tower's `TimeoutLayer` error or tokio's `timeout` error.
#[cfg(feature = "tower")]
pub(crate) fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    #[cfg(feature = "timeout")]
    fn ours(e: &(dyn std::error::Error + 'static)) -> bool {
        e.is::<timeout::Elapsed>()
    }
    #[cfg(not(feature = "timeout"))]
    fn ours(_: &(dyn std::error::Error + 'static)) -> bool {
        false
    }
    let mut cur = Some(e);
    while let Some(e) = cur {
        if ours(e)
            || e.is::<tower::timeout::error::Elapsed>()
            || e.is::<tokio::time::error::Elapsed>()
        {
            return true;
        }
        cur = e.source();
    }
    false
}

/// The gate a tower retry takes its retry slots from (nothing without the `gate` feature).
#[cfg(all(feature = "tower", feature = "retry", feature = "gate"))]
pub(crate) type RetryGate = Option<gate::Gate>;
#[cfg(all(feature = "tower", feature = "retry", not(feature = "gate")))]
#[derive(Clone, Debug, Default)]
pub(crate) struct RetryGate;
#[cfg(all(feature = "tower", feature = "retry", feature = "gate"))]
pub(crate) const NO_RETRY_GATE: RetryGate = None;
#[cfg(all(feature = "tower", feature = "retry", not(feature = "gate")))]
pub(crate) const NO_RETRY_GATE: RetryGate = RetryGate;

/// A retry's slot in the gate.
#[cfg(all(feature = "tower", feature = "retry", feature = "gate"))]
pub(crate) type RetrySlot = Option<gate::GateGuard>;
#[cfg(all(feature = "tower", feature = "retry", not(feature = "gate")))]
#[derive(Debug, Default)]
pub(crate) struct RetrySlot;

/// Takes a retry slot from the gate, if there is one; `Err` when its retry limit is reached.
#[cfg(all(feature = "tower", feature = "retry", feature = "gate"))]
pub(crate) fn retry_slot(gate: &RetryGate) -> Result<RetrySlot, ()> {
    match gate {
        None => Ok(None),
        Some(g) => g.try_retry().map(Some).map_err(|_| ()),
    }
}
#[cfg(all(feature = "tower", feature = "retry", not(feature = "gate")))]
pub(crate) fn retry_slot(_: &RetryGate) -> Result<RetrySlot, ()> {
    Ok(RetrySlot)
}
