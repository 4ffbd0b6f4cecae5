//! The budget contract "a withdrawal that is not used after all is given back", for every
//! budget type (ratio, token bucket, error rate, and all three combined) and every local
//! refusal (breaker, bulkhead, gate, throttle), in the pipeline and in the tower retry layer:
//! a retry refused by a local policy, or abandoned during its backoff, leaves the budget as if
//! it had never been asked for, and is not counted as a retry made.
#![cfg(feature = "pipeline")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use tripline::{BreakerConfig, CircuitBreaker, ManualClock, Outcome, TokioClock};
use tripline_policies::bulkhead::{Bulkhead, BulkheadConfig};
use tripline_policies::gate::{Gate, GateConfig};
use tripline_policies::pipeline::{Pipeline, PipelineError};
use tripline_policies::retry::budget::{
    Both, ErrorRateBudget, RetryBudget, RetryCause, TokenBucketBudget, TpsBudget,
};
use tripline_policies::retry::{Jitter, RetryPolicy};
use tripline_policies::throttle::{Throttle, ThrottleConfig};

use support::Boom;

/// The backoff before the retry: 100 ms, no jitter.
const BACKOFF: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Ratio,
    Bucket,
    ErrorRate,
    All,
}

const KINDS: [Kind; 4] = [Kind::Ratio, Kind::Bucket, Kind::ErrorRate, Kind::All];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Refusal {
    Breaker,
    Bulkhead,
    Gate,
    Throttle,
}

const REFUSALS: [Refusal; 4] = [
    Refusal::Breaker,
    Refusal::Bulkhead,
    Refusal::Gate,
    Refusal::Throttle,
];

type All = Both<Both<TpsBudget<ManualClock>, TokenBucketBudget>, ErrorRateBudget<ManualClock>>;

fn ratio() -> TpsBudget<ManualClock> {
    TpsBudget::builder()
        .build_with_clock(ManualClock::new())
        .unwrap()
}

fn bucket() -> TokenBucketBudget {
    TokenBucketBudget::default()
}

fn error_rate() -> ErrorRateBudget<ManualClock> {
    // One call is enough for the rule to apply; a 100% threshold keeps retries on.
    ErrorRateBudget::builder()
        .minimum_calls(1)
        .threshold_percent(100.0)
        .build_with_clock(ManualClock::new())
        .unwrap()
}

fn all() -> All {
    ratio().and(bucket()).and(error_rate())
}

/// What a budget holds, as far as its public accessors tell.
trait Snapshot {
    fn snapshot(&self) -> String;
}

impl Snapshot for TpsBudget<ManualClock> {
    fn snapshot(&self) -> String {
        format!("ratio: {} retries", self.remaining())
    }
}

impl Snapshot for TokenBucketBudget {
    fn snapshot(&self) -> String {
        format!("bucket: {} tokens", self.tokens())
    }
}

impl Snapshot for ErrorRateBudget<ManualClock> {
    fn snapshot(&self) -> String {
        format!(
            "error rate: {:?}, retries on {}",
            self.counts(),
            self.allows_retries()
        )
    }
}

impl<A: Snapshot, B: Snapshot> Snapshot for Both<A, B> {
    fn snapshot(&self) -> String {
        format!("{}; {}", self.0.snapshot(), self.1.snapshot())
    }
}

/// A budget of `kind` in a policy (3 attempts, 100 ms backoff), and a twin of the same type
/// told about the same request and its failed first attempt, but never asked for a retry.
struct Case {
    policy: RetryPolicy,
    state: Box<dyn Fn() -> String>,
    twin: String,
}

fn twin_of<B: RetryBudget + Snapshot>(twin: B) -> String {
    twin.on_request();
    twin.on_outcome(Outcome::Failure, None);
    twin.snapshot()
}

/// The cause of the refused retry (an error or a timeout) changes what the budget charges,
/// not what the twin sees: a first attempt that failed.
fn case(kind: Kind, _cause: RetryCause) -> Case {
    fn make<B: RetryBudget + Snapshot>(used: B, twin: B) -> Case {
        let used = Arc::new(used);
        let policy = RetryPolicy::builder()
            .max_attempts(3)
            .base_delay(BACKOFF)
            .jitter(Jitter::None)
            .budget(used.clone())
            .build()
            .unwrap();
        Case {
            policy,
            state: Box::new(move || used.snapshot()),
            twin: twin_of(twin),
        }
    }
    match kind {
        Kind::Ratio => make(ratio(), ratio()),
        Kind::Bucket => make(bucket(), bucket()),
        Kind::ErrorRate => make(error_rate(), error_rate()),
        Kind::All => make(all(), all()),
    }
}

/// The local policies, each set up to admit the first attempt and refuse the retry.
struct Locals {
    breaker: CircuitBreaker<TokioClock>,
    bulkhead: Bulkhead,
    gate: Gate,
    throttle: Throttle,
}

impl Locals {
    fn new() -> Self {
        let config = BreakerConfig::builder()
            .consecutive_failures(1)
            .build()
            .unwrap();
        Self {
            // Opens on the first failure: the retry finds it open.
            breaker: CircuitBreaker::with_clock("vendor", config, TokioClock::new()),
            bulkhead: Bulkhead::new(BulkheadConfig::builder().max_concurrent(1).build().unwrap()),
            gate: Gate::new(GateConfig::builder().max_requests(1).build().unwrap()),
            // Every draw is 0: refused as soon as the probability is positive, which it is
            // once one request failed (p = 1/2).
            throttle: Throttle::with_clock_and_rng(
                ThrottleConfig::default(),
                ManualClock::new(),
                support::FixedRng::new(0),
            ),
        }
    }

    /// During the backoff, takes the only bulkhead slot or gate slot for a second, so that
    /// the retry finds it busy.
    async fn occupy(&self, refusal: Refusal) {
        tokio::time::sleep(BACKOFF / 2).await;
        let held = match refusal {
            Refusal::Bulkhead => Some((Some(self.bulkhead.try_acquire().unwrap()), None)),
            Refusal::Gate => Some((None, Some(self.gate.try_request().unwrap()))),
            _ => None,
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(held);
    }
}

fn pipeline(locals: &Locals, refusal: Refusal, policy: RetryPolicy) -> Pipeline<TokioClock> {
    // Every pipeline has a breaker; only the breaker case has the one that opens.
    let breaker = match refusal {
        Refusal::Breaker => locals.breaker.clone(),
        _ => CircuitBreaker::with_clock("quiet", BreakerConfig::default(), TokioClock::new()),
    };
    let b = Pipeline::builder()
        .retry(policy)
        .breaker(breaker)
        .timeout(Duration::from_secs(1));
    match refusal {
        Refusal::Breaker => b,
        Refusal::Bulkhead => b.bulkhead(locals.bulkhead.clone()),
        Refusal::Gate => b.gate(locals.gate.clone()),
        Refusal::Throttle => b.throttle(locals.throttle.clone()),
    }
    .build()
    .unwrap()
}

fn assert_given_back(c: &Case, what: &str) {
    assert_eq!(
        (c.state)(),
        c.twin,
        "{what}: the budget is as if never asked"
    );
    let s = c.policy.stats();
    assert_eq!(
        (s.requests, s.retries),
        (1, 0),
        "{what}: the refused retry is not counted as made"
    );
}

#[tokio::test(start_paused = true)]
async fn pipeline_a_retry_refused_by_a_local_policy_gives_its_withdrawal_back() {
    for kind in KINDS {
        for refusal in REFUSALS {
            let what = format!("{kind:?} budget, {refusal:?} refusal, pipeline");
            let c = case(kind, RetryCause::Error);
            let locals = Locals::new();
            let p = pipeline(&locals, refusal, c.policy.clone());
            let (r, ()) = tokio::join!(
                p.call(|| async { Err::<(), _>(Boom("503")) }),
                locals.occupy(refusal)
            );
            let err = r.unwrap_err();
            assert!(err.is_local_rejection(), "{what}: {err:?}");
            assert_given_back(&c, &what);
            assert_eq!(c.policy.stats().local_rejections, 1, "{what}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn pipeline_a_refused_retry_of_a_timeout_gives_the_timeout_price_back() {
    for kind in KINDS {
        for refusal in REFUSALS {
            let what = format!("{kind:?} budget, {refusal:?} refusal of a timeout retry");
            let c = case(kind, RetryCause::Timeout);
            let locals = Locals::new();
            let p = pipeline(&locals, refusal, c.policy.clone());
            let (r, ()) = tokio::join!(
                p.call(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    Ok::<_, Boom>(())
                }),
                async {
                    // The first attempt times out at 1 s; the retry goes at 1.1 s.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    locals.occupy(refusal).await;
                }
            );
            assert!(r.unwrap_err().is_local_rejection(), "{what}");
            assert_given_back(&c, &what);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn pipeline_a_retry_abandoned_during_its_backoff_gives_its_withdrawal_back() {
    for kind in KINDS {
        let what = format!("{kind:?} budget, call dropped during the backoff");
        let c = case(kind, RetryCause::Error);
        let p = Pipeline::builder().retry(c.policy.clone()).build().unwrap();
        let r =
            tokio::time::timeout(BACKOFF / 2, p.call(|| async { Err::<(), _>(Boom("503")) })).await;
        assert!(r.is_err(), "{what}: dropped mid-backoff");
        assert_given_back(&c, &what);
    }
}

#[tokio::test(start_paused = true)]
async fn fifty_refused_timeout_retries_leave_the_token_bucket_full() {
    // The example of the AWS standard mode: with the bucket charged for refused retries, fifty
    // of them would drain it, and retries would stay off after recovery until about 500
    // first-try successes refilled it.
    let bucket = Arc::new(TokenBucketBudget::default());
    let policy = RetryPolicy::builder()
        .max_attempts(3)
        .jitter(Jitter::None)
        .budget(bucket.clone())
        .build()
        .unwrap();
    let config = BreakerConfig::builder()
        .consecutive_failures(1)
        .build()
        .unwrap();
    let breaker = CircuitBreaker::with_clock("vendor", config, TokioClock::new());
    let p = Pipeline::builder()
        .retry(policy.clone())
        .breaker(breaker.clone())
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    for _ in 0..50 {
        breaker.reset();
        let r = p
            .call(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<_, Boom>(())
            })
            .await;
        assert!(matches!(r, Err(PipelineError::Rejected(_))));
    }
    assert_eq!(bucket.tokens(), 500);
    let s = policy.stats();
    assert_eq!((s.requests, s.retries, s.local_rejections), (50, 0, 50));
}

#[cfg(feature = "tower")]
mod tower_layer {
    use super::*;
    use tower::util::BoxCloneService;
    use tower::{ServiceBuilder, ServiceExt, service_fn};
    use tripline_policies::BoxError;
    use tripline_policies::breaker::BreakerLayer;
    use tripline_policies::bulkhead::BulkheadLayer;
    use tripline_policies::gate::GateLayer;
    use tripline_policies::retry::RetryLayer;
    use tripline_policies::throttle::ThrottleLayer;

    type Svc = BoxCloneService<u32, u32, BoxError>;

    fn failing() -> Svc {
        BoxCloneService::new(service_fn(|_: u32| async {
            Err::<u32, BoxError>(Box::new(Boom("503")))
        }))
    }

    fn stack(locals: &Locals, refusal: Refusal, policy: RetryPolicy) -> Svc {
        let local: Svc = match refusal {
            Refusal::Breaker => BoxCloneService::new(
                ServiceBuilder::new()
                    .layer(BreakerLayer::new(locals.breaker.clone()))
                    .service(failing()),
            ),
            Refusal::Bulkhead => BoxCloneService::new(
                ServiceBuilder::new()
                    .layer(BulkheadLayer::new(locals.bulkhead.clone()))
                    .service(failing()),
            ),
            Refusal::Gate => BoxCloneService::new(
                ServiceBuilder::new()
                    .layer(GateLayer::new(locals.gate.clone()))
                    .service(failing()),
            ),
            Refusal::Throttle => BoxCloneService::new(
                ServiceBuilder::new()
                    .layer(ThrottleLayer::new(locals.throttle.clone()))
                    .service(failing()),
            ),
        };
        BoxCloneService::new(
            ServiceBuilder::new()
                .layer(RetryLayer::new(policy))
                .service(local),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn tower_a_retry_refused_by_a_local_policy_gives_its_withdrawal_back() {
        for kind in KINDS {
            for refusal in REFUSALS {
                let what = format!("{kind:?} budget, {refusal:?} refusal, tower");
                let c = case(kind, RetryCause::Error);
                let locals = Locals::new();
                let svc = stack(&locals, refusal, c.policy.clone());
                let (r, ()) = tokio::join!(svc.oneshot(1), locals.occupy(refusal));
                let err = r.unwrap_err();
                assert!(err.downcast_ref::<Boom>().is_none(), "{what}: {err}");
                assert_given_back(&c, &what);
                assert_eq!(c.policy.stats().local_rejections, 1, "{what}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn tower_a_retry_abandoned_during_its_backoff_gives_its_withdrawal_back() {
        for kind in KINDS {
            let what = format!("{kind:?} budget, tower call dropped during the backoff");
            let c = case(kind, RetryCause::Error);
            let svc = RetryLayer::new(c.policy.clone());
            let svc = ServiceBuilder::new().layer(svc).service(failing());
            let r = tokio::time::timeout(BACKOFF / 2, svc.oneshot(1)).await;
            assert!(r.is_err(), "{what}: dropped mid-backoff");
            assert_given_back(&c, &what);
        }
    }
}
