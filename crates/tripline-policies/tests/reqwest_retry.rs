//! Retries of reqwest calls, against a real HTTP server in this process: the HTTP predicate on
//! reqwest's results, the budgeted retry middleware in front of the breaker, and the pipeline
//! with the reqwest defaults, whose failed response after the last retry reaches the fallback.
//! The backoff is 1 ms without jitter: what the tests check (attempts, budgets, outcomes)
//! never depends on how long anything took.
#![cfg(all(feature = "reqwest", feature = "pipeline"))]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State as AxumState;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tripline::{BreakerConfig, CircuitBreaker, State};
use tripline_policies::http::HttpRetryable;
use tripline_policies::pipeline::{Pipeline, PipelineError};
use tripline_policies::reqwest::{
    BreakerMiddleware, ReqwestClassifier, RetryMiddleware, rejection,
};
use tripline_policies::retry::budget::{RetryBudget, TokenBucketBudget};
use tripline_policies::retry::{Jitter, RetryPolicy, Retryable};

/// `/flaky` answers 503 (with `Retry-After: 30`) to its first `failures` requests, then 200;
/// `/missing` is a 404; `/slow` answers after 10 s. Every request is counted.
#[derive(Clone, Default)]
struct Vendor {
    failures: Arc<AtomicUsize>,
    hits: Arc<AtomicUsize>,
}

async fn flaky(AxumState(v): AxumState<Vendor>) -> Response {
    let n = v.hits.fetch_add(1, Ordering::SeqCst);
    if n < v.failures.load(Ordering::SeqCst) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [("retry-after", "30")],
            "down",
        )
            .into_response()
    } else {
        "42".into_response()
    }
}

async fn missing(AxumState(v): AxumState<Vendor>) -> StatusCode {
    v.hits.fetch_add(1, Ordering::SeqCst);
    StatusCode::NOT_FOUND
}

async fn slow(AxumState(v): AxumState<Vendor>) -> &'static str {
    v.hits.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(10)).await;
    "late"
}

struct Server {
    addr: SocketAddr,
    vendor: Vendor,
    task: JoinHandle<()>,
}

impl Server {
    /// A server whose `/flaky` fails its first `failures` requests.
    async fn start(failures: usize) -> Server {
        let vendor = Vendor::default();
        vendor.failures.store(failures, Ordering::SeqCst);
        let app = Router::new()
            .route("/flaky", get(flaky))
            .route("/missing", get(missing))
            .route("/slow", get(slow))
            .with_state(vendor.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Server { addr, vendor, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn hits(&self) -> usize {
        self.vendor.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .unwrap()
}

/// `attempts` attempts 1 ms apart, with `budget`.
fn policy(attempts: u32, budget: Arc<TokenBucketBudget>) -> RetryPolicy {
    RetryPolicy::builder()
        .max_attempts(attempts)
        .base_delay(Duration::from_millis(1))
        .max_delay(Duration::from_millis(1))
        .jitter(Jitter::None)
        .budget(budget)
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_http_predicate_judges_reqwest_results_a_503_yes_a_404_no() {
    let server = Server::start(1).await;
    let c = client(Duration::from_secs(5));
    let unavailable = c.get(server.url("/flaky")).send().await;
    assert_eq!(unavailable.as_ref().unwrap().status(), 503);
    assert!(HttpRetryable.is_retryable(&unavailable));
    let ok = c.get(server.url("/flaky")).send().await;
    assert!(!HttpRetryable.is_retryable(&ok));
    let not_found = c.get(server.url("/missing")).send().await;
    assert!(!HttpRetryable.is_retryable(&not_found));
    // No answer: retried. A request reqwest could not build: never sent, not retried.
    let refused = c.get("http://127.0.0.1:9/").send().await;
    assert!(HttpRetryable.is_retryable(&refused));
    let unbuildable = c.get("http://").send().await;
    assert!(unbuildable.as_ref().unwrap_err().is_builder());
    assert!(!HttpRetryable.is_retryable(&unbuildable));
    // Through a middleware chain: a breaker's refusal is never retried.
    let breaker = CircuitBreaker::new("vendor", BreakerConfig::default());
    breaker.force_open();
    let chained = reqwest_middleware::ClientBuilder::new(c.clone())
        .with(BreakerMiddleware::new(breaker))
        .build();
    let rejected = chained.get(server.url("/flaky")).send().await;
    assert!(rejection(rejected.as_ref().unwrap_err()).is_some());
    assert!(!HttpRetryable.is_retryable(&rejected));
    // A status error (`error_for_status`) is judged by its status.
    let status_error: Result<reqwest::Response, reqwest::Error> = Err(c
        .get(server.url("/missing"))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap_err());
    assert!(!HttpRetryable.is_retryable(&status_error));
}

#[tokio::test]
async fn a_pipeline_with_the_reqwest_defaults_retries_a_503_until_the_vendor_answers() {
    let server = Server::start(2).await;
    let c = client(Duration::from_secs(5));
    let budget = Arc::new(TokenBucketBudget::default());
    let pipeline = Pipeline::builder()
        .retry(policy(3, budget.clone()))
        .reqwest()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let url = server.url("/flaky");
    let resp = pipeline.call(|| c.get(&url).send()).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(server.hits(), 3);
    let stats = pipeline.retry().unwrap().stats();
    assert_eq!((stats.retries, stats.succeeded_with_retry), (2, 1));
    // The retries were charged and, since the second one succeeded, refunded.
    assert_eq!(budget.tokens(), 500 - 5);
}

#[tokio::test]
async fn a_503_after_the_last_retry_fails_the_call_so_the_fallback_fires() {
    let server = Server::start(usize::MAX).await;
    let c = client(Duration::from_secs(5));
    let breaker = CircuitBreaker::new(
        "vendor",
        BreakerConfig::builder()
            .count_window(10)
            .minimum_calls(10)
            .build()
            .unwrap(),
    );
    let pipeline = Pipeline::builder()
        .retry(policy(3, Arc::new(TokenBucketBudget::default())))
        .breaker(breaker.clone())
        .reqwest()
        .build()
        .unwrap();
    let url = server.url("/flaky");
    let mut seen = None;
    let answer = pipeline
        .call_or_else(
            || c.get(&url).send(),
            |e| {
                seen = Some(match &e {
                    PipelineError::Failed(e) => e.status().map(|s| s.as_u16()),
                    other => panic!("not the dependency's failure: {other:?}"),
                });
                // The cached answer, as a response.
                async { reqwest::Response::from(http::Response::new("cached")) }
            },
        )
        .await;
    assert_eq!(answer.text().await.unwrap(), "cached");
    assert_eq!(seen, Some(Some(503)), "the status reaches the fallback");
    assert_eq!(server.hits(), 3, "every attempt was made first");
    // Every attempt was a failure to the breaker, with the response's Retry-After.
    assert_eq!(breaker.metrics().failed_calls, 3);
    let stats = pipeline.stats();
    assert_eq!((stats.calls, stats.failed, stats.fallbacks), (1, 1, 1));

    // Without the reqwest defaults' StatusError, the 503 is the call's value: the pipeline
    // documents it, and the classifier still counts the failure.
    let keep = Pipeline::builder()
        .classifier(ReqwestClassifier)
        .build()
        .unwrap();
    let resp = keep.call(|| c.get(&url).send()).await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(keep.stats().failed, 1);
}

#[tokio::test]
async fn the_retry_middleware_retries_a_503_only_while_its_budget_lasts() {
    let server = Server::start(usize::MAX).await;
    // Two retries in the bucket, whatever the requests.
    let budget = Arc::new(
        TokenBucketBudget::builder()
            .capacity(10)
            .retry_cost(5)
            .build()
            .unwrap(),
    );
    let retry = RetryMiddleware::new(policy(3, budget.clone()));
    let stats = retry.policy().clone();
    let c = reqwest_middleware::ClientBuilder::new(client(Duration::from_secs(5)))
        .with(retry)
        .build();
    let first = c.get(server.url("/flaky")).send().await.unwrap();
    assert_eq!(first.status(), 503, "the last answer comes back as it came");
    assert_eq!(server.hits(), 3);
    let second = c.get(server.url("/flaky")).send().await.unwrap();
    assert_eq!(second.status(), 503);
    assert_eq!(server.hits(), 4, "the budget is spent: no retry");
    let s = stats.stats();
    assert_eq!(
        (
            s.retries,
            s.budget_exhausted,
            s.failed_with_retry,
            s.failed_without_retry
        ),
        (2, 1, 1, 1)
    );
    assert_eq!(budget.remaining(), Some(0));
    // A 404 is not retried, and costs nothing.
    let _ = c.get(server.url("/missing")).send().await.unwrap();
    assert_eq!(server.hits(), 5);
}

#[tokio::test]
async fn the_retry_middleware_stops_at_once_when_the_breaker_behind_it_opens() {
    let server = Server::start(usize::MAX).await;
    let budget = Arc::new(TokenBucketBudget::default());
    let retry = RetryMiddleware::new(policy(5, budget.clone()));
    let policy = retry.policy().clone();
    let breaker = CircuitBreaker::new(
        "vendor",
        BreakerConfig::builder()
            .consecutive_failures(2)
            .build()
            .unwrap(),
    );
    let c = reqwest_middleware::ClientBuilder::new(client(Duration::from_secs(5)))
        .with(retry)
        .with(BreakerMiddleware::new(breaker.clone()))
        .build();
    let err = c.get(server.url("/flaky")).send().await.unwrap_err();
    assert!(
        rejection(&err).is_some(),
        "the third attempt met the open breaker"
    );
    assert_eq!(breaker.state(), State::Open);
    assert_eq!(server.hits(), 2, "the open breaker sent nothing more");
    let s = policy.stats();
    assert_eq!(
        (s.retries, s.local_rejections),
        (1, 1),
        "the refused retry was never made"
    );
    assert_eq!(budget.tokens(), 500 - 5, "and its tokens came back");
}

#[tokio::test]
async fn a_timeout_is_retried_as_a_timeout_and_only_when_asked() {
    let server = Server::start(0).await;
    let budget = Arc::new(TokenBucketBudget::default());
    let c = reqwest_middleware::ClientBuilder::new(client(Duration::from_millis(50)))
        .with(RetryMiddleware::new(policy(2, budget.clone())))
        .build();
    let err = c.get(server.url("/slow")).send().await.unwrap_err();
    assert!(matches!(&err, reqwest_middleware::Error::Reqwest(e) if e.is_timeout()));
    assert_eq!(server.hits(), 2);
    assert_eq!(
        budget.tokens(),
        500 - 10,
        "a retried timeout costs 10 tokens"
    );

    let no_timeouts = RetryPolicy::builder()
        .max_attempts(3)
        .retry_timeouts(false)
        .build()
        .unwrap();
    let c = reqwest_middleware::ClientBuilder::new(client(Duration::from_millis(50)))
        .with(RetryMiddleware::new(no_timeouts))
        .build();
    let _ = c.get(server.url("/slow")).send().await.unwrap_err();
    assert_eq!(server.hits(), 3, "one attempt only");
}
