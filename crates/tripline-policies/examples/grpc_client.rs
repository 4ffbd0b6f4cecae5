//! A tonic client with the breaker as a tower layer around its `Channel`, against a real tonic
//! server in this process: the vendor fails with `UNAVAILABLE`, the breaker opens and the next
//! calls fail locally without reaching it; `NOT_FOUND` is the caller's problem and never trips
//! it; a `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms` keeps the breaker open as long as
//! the server asked; a hung call times out inside the breaker and counts as a timeout.
//!
//! `cargo run -p tripline-policies --example grpc_client --features grpc,timeout`

#[path = "grpc/vendor.rs"]
mod vendor;

use std::error::Error as _;
use std::time::Duration;

use tonic::Code;
use tower::ServiceBuilder;
use tripline::{BreakerConfig, CircuitBreaker, Rejected, TokioClock};
use tripline_policies::breaker::BreakerLayer;
use tripline_policies::grpc::GrpcClassifier;
use tripline_policies::timeout::TimeoutLayer;
use vendor::{Answer, Vendor};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let vendor = Vendor::new();
    let addr = vendor::serve(vendor.clone()).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;

    let breaker = CircuitBreaker::with_clock(
        "vendor",
        BreakerConfig::builder()
            .count_window(10)
            .minimum_calls(5)
            .open_duration(Duration::from_secs(2))
            .max_retry_after(Duration::from_secs(60))
            .build()?,
        TokioClock::new(),
    );
    // The timeout inside the breaker: a hung call settles, as a failure of kind "timeout".
    let client = ServiceBuilder::new()
        .layer(BreakerLayer::new(breaker.clone()).classifier(GrpcClassifier::default()))
        .layer(TimeoutLayer::new(Duration::from_millis(500))?)
        .service(channel);

    println!(
        "{:?}",
        vendor::card(client.clone(), "42").await?.into_inner()
    );

    vendor.set(Answer::Hang);
    let hung = vendor::card(client.clone(), "42").await.unwrap_err();
    println!(
        "a hung call: {:?} after the 500 ms timeout inside the breaker; timeouts counted: {}",
        hung.code(),
        breaker
            .metrics()
            .failures_by_kind
            .get(tripline::FailureKind::Timeout)
    );

    vendor.set(Answer::Fail(Code::NotFound, None));
    for _ in 0..10 {
        let _ = vendor::card(client.clone(), "missing").await;
    }
    println!(
        "10 x NOT_FOUND: breaker {}, {} ignored",
        breaker.state(),
        breaker.metrics().ignored_calls
    );

    vendor.set(Answer::Fail(Code::Unavailable, None));
    for _ in 0..5 {
        let _ = vendor::card(client.clone(), "42").await;
    }
    let before = vendor.calls();
    let err = vendor::card(client.clone(), "42").await.unwrap_err();
    let rejected = err
        .source()
        .and_then(|e| e.downcast_ref::<Rejected>())
        .expect("the breaker's refusal, inside tonic's status");
    println!(
        "5 x UNAVAILABLE: breaker {}; next call refused locally ({rejected}), vendor calls {} -> {}",
        breaker.state(),
        before,
        vendor.calls()
    );

    breaker.reset();
    vendor.set(Answer::Fail(Code::ResourceExhausted, Some("30000")));
    for _ in 0..5 {
        let _ = vendor::card(client.clone(), "42").await;
    }
    let err = vendor::card(client.clone(), "42").await.unwrap_err();
    let rejected = err.source().and_then(|e| e.downcast_ref::<Rejected>());
    println!(
        "5 x RESOURCE_EXHAUSTED with a 30 s pushback: {}",
        rejected.map_or("not refused".to_string(), |r| r.to_string())
    );
    let m = breaker.metrics();
    println!(
        "failures by kind: unavailable {}, rate_limited {}",
        m.failures_by_kind.get(tripline::FailureKind::Unavailable),
        m.failures_by_kind.get(tripline::FailureKind::RateLimited)
    );
    Ok(())
}
