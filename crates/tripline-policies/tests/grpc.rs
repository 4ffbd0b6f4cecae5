//! The gRPC classifier against a real tonic server in this process (a hand-written service, no
//! code generation): each status code's verdict and kind, the pushback feeding the open wait,
//! transport errors and timeouts, local refusals, and the breaker as a tower layer around a
//! tonic `Channel`. The breaker runs on a manual clock, so no decision depends on wall time.

#[path = "../examples/grpc/vendor.rs"]
mod vendor;

use std::error::Error as _;
use std::time::Duration;

use tonic::Code;
use tower::ServiceBuilder;
use tripline::{
    BreakerConfig, CircuitBreaker, Classify, FailureKind, ManualClock, Outcome, Rejected, State,
};
use tripline_policies::breaker::{Breaker, BreakerLayer};
use tripline_policies::grpc::GrpcClassifier;
use tripline_policies::timeout::TimeoutLayer;
use vendor::{Answer, Vendor};

type Client = Breaker<tonic::transport::Channel, ManualClock, GrpcClassifier>;

fn breaker() -> CircuitBreaker<ManualClock> {
    let config = BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(3)
        .count_in_flight_as_slow(false)
        .open_duration(Duration::from_secs(10))
        .max_retry_after(Duration::from_secs(120))
        .build()
        .unwrap();
    CircuitBreaker::with_clock("vendor", config, ManualClock::new())
}

/// A channel to `vendor`, served on a fresh loopback port.
async fn channel(vendor: &Vendor) -> tonic::transport::Channel {
    let addr = vendor::serve(vendor.clone()).await;
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn client(vendor: &Vendor, b: &CircuitBreaker<ManualClock>) -> Client {
    ServiceBuilder::new()
        .layer(BreakerLayer::new(b.clone()).classifier(GrpcClassifier::default()))
        .service(channel(vendor).await)
}

fn rejected(status: &tonic::Status) -> Option<&Rejected> {
    status.source().and_then(|e| e.downcast_ref::<Rejected>())
}

#[tokio::test]
async fn the_failing_codes_trip_the_breaker_and_the_next_call_never_leaves() {
    for (code, kind) in [
        (Code::Unavailable, FailureKind::Unavailable),
        (Code::DeadlineExceeded, FailureKind::Timeout),
        (Code::ResourceExhausted, FailureKind::RateLimited),
        (Code::Internal, FailureKind::ServerError),
        (Code::Unknown, FailureKind::ServerError),
    ] {
        let vendor = Vendor::new();
        let b = breaker();
        let c = client(&vendor, &b).await;
        vendor.set(Answer::Fail(code, None));
        for _ in 0..3 {
            let err = vendor::card(c.clone(), "1").await.unwrap_err();
            assert_eq!(err.code(), code);
        }
        assert_eq!(b.state(), State::Open, "{code:?}");
        let m = b.metrics();
        assert_eq!(m.failures_by_kind.get(kind), 3, "{code:?}");
        let err = vendor::card(c.clone(), "1").await.unwrap_err();
        let r = rejected(&err).expect("a local refusal inside the status");
        assert_eq!(r.state(), State::Open);
        assert_eq!(
            vendor.calls(),
            3,
            "{code:?}: the refused call reached the vendor"
        );
    }
}

#[tokio::test]
async fn the_callers_mistakes_are_ignored() {
    let vendor = Vendor::new();
    let b = breaker();
    let c = client(&vendor, &b).await;
    let ignored = [
        Code::InvalidArgument,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::Unauthenticated,
        Code::FailedPrecondition,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Aborted,
        Code::Cancelled,
        Code::DataLoss,
    ];
    for code in ignored {
        vendor.set(Answer::Fail(code, None));
        for _ in 0..3 {
            assert_eq!(vendor::card(c.clone(), "1").await.unwrap_err().code(), code);
        }
    }
    let m = b.metrics();
    assert_eq!(b.state(), State::Closed);
    assert_eq!(
        (m.ignored_calls, m.window.calls),
        (3 * ignored.len() as u64, 0)
    );
    vendor.set(Answer::Card);
    assert_eq!(
        vendor::card(c.clone(), "7").await.unwrap().into_inner(),
        "card 7"
    );
    assert_eq!(b.metrics().successful_calls, 1);
}

/// `grpc-retry-pushback-ms` on the failure that trips the breaker sets the open wait (at
/// least the configured one, at most `max_retry_after`); a malformed or negative one is no
/// hint.
#[tokio::test]
async fn the_servers_pushback_feeds_the_open_wait() {
    for (pushback, wait) in [
        (Some("45000"), 45),
        (Some("500"), 10),
        (Some("600000"), 120),
        (Some("-1"), 10),
        (Some("soon"), 10),
        (None, 10),
    ] {
        let vendor = Vendor::new();
        let b = breaker();
        let c = client(&vendor, &b).await;
        vendor.set(Answer::Fail(Code::ResourceExhausted, pushback));
        for _ in 0..3 {
            let _ = vendor::card(c.clone(), "1").await;
        }
        let err = vendor::card(c.clone(), "1").await.unwrap_err();
        assert_eq!(
            rejected(&err).unwrap().retry_after(),
            Some(Duration::from_secs(wait)),
            "{pushback:?}"
        );
    }
}

/// Classified at the call instead of in the layer: the same verdicts from tonic's status.
#[tokio::test]
async fn calls_classified_at_the_call_agree_with_the_layer() {
    let vendor = Vendor::new();
    let channel = channel(&vendor).await;
    let b = breaker();
    let call = |id: &'static str| {
        let (b, channel) = (b.clone(), channel.clone());
        async move {
            b.call_async_classified(None, GrpcClassifier::default(), || {
                vendor::card(channel, id)
            })
            .await
        }
    };
    vendor.set(Answer::Fail(Code::NotFound, None));
    assert!(call("1").await.is_err());
    assert_eq!(b.metrics().ignored_calls, 1);
    vendor.set(Answer::Fail(Code::Unavailable, Some("30000")));
    for _ in 0..3 {
        assert!(call("1").await.is_err());
    }
    assert_eq!(b.state(), State::Open);
    let r = call("1").await.unwrap_err();
    assert!(r.is_rejected());
    assert_eq!(
        b.try_acquire().unwrap_err().retry_after(),
        Some(Duration::from_secs(30))
    );
}

/// No server: a transport error is a failure of kind connection.
#[tokio::test]
async fn an_unreachable_server_is_a_connection_failure() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let b = breaker();
    let c = ServiceBuilder::new()
        .layer(BreakerLayer::new(b.clone()).classifier(GrpcClassifier::default()))
        .service(channel);
    for _ in 0..3 {
        let err = vendor::card(c.clone(), "1").await.unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err}");
    }
    assert_eq!(b.metrics().failures_by_kind.get(FailureKind::Connection), 3);
    assert_eq!(b.state(), State::Open);
}

/// A timeout inside the breaker is a failure of kind timeout, whatever status tonic makes of
/// it.
#[tokio::test(start_paused = true)]
async fn a_timeout_inside_the_breaker_is_a_timeout_failure() {
    let c = GrpcClassifier::default();
    let elapsed: tripline_policies::BoxError = Box::new(
        tokio::time::timeout(Duration::from_millis(1), std::future::pending::<()>())
            .await
            .unwrap_err(),
    );
    let r: Result<http::Response<()>, _> = Err(elapsed);
    let got = c.classify(&r);
    assert_eq!(
        (got.outcome, got.kind),
        (Outcome::Failure, Some(FailureKind::Timeout))
    );

    // Through the layers, on a real channel.
    let vendor = Vendor::new();
    let channel = channel(&vendor).await;
    let b = breaker();
    let svc = ServiceBuilder::new()
        .layer(BreakerLayer::new(b.clone()).classifier(GrpcClassifier::default()))
        .layer(TimeoutLayer::new(Duration::from_secs(2)).unwrap())
        .service(channel);
    // The vendor never answers; on paused time the 2 s timeout fires as soon as nothing else
    // can happen.
    vendor.set(Answer::Hang);
    let err = vendor::card(svc, "1").await.unwrap_err();
    assert_ne!(err.code(), Code::Ok);
    assert_eq!(b.metrics().failures_by_kind.get(FailureKind::Timeout), 1);
    assert_eq!(b.metrics().failed_calls, 1);
}

#[test]
fn the_failing_set_can_change() {
    let c = GrpcClassifier::default()
        .failing(Code::DataLoss)
        .ignoring(Code::Unknown)
        .failing(Code::Ok);
    assert_eq!(
        c.failing_codes(),
        vec![
            Code::DeadlineExceeded,
            Code::ResourceExhausted,
            Code::Internal,
            Code::Unavailable,
            Code::DataLoss
        ]
    );
    let r = c.classify(&Err::<(), _>(tonic::Status::data_loss("torn page")));
    assert_eq!(
        (r.outcome, r.kind),
        (Outcome::Failure, Some(FailureKind::Other))
    );
    let r = c.classify(&Err::<(), _>(tonic::Status::unknown("?")));
    assert_eq!(r.outcome, Outcome::Ignored);
    assert_eq!(
        c.classify(&Ok::<_, tonic::Status>(())).outcome,
        Outcome::Success
    );
}

/// A status tonic made from a local refusal (it reports those as `UNKNOWN`) is recognised by
/// its source and ignored, not counted as the server's `UNKNOWN`.
#[tokio::test]
async fn a_local_refusal_reported_as_unknown_is_ignored() {
    let vendor = Vendor::new();
    let b = breaker();
    let c = client(&vendor, &b).await;
    b.force_open();
    let status = vendor::card(c.clone(), "1").await.unwrap_err();
    assert_eq!(status.code(), Code::Unknown);
    assert!(rejected(&status).is_some());
    let verdict = GrpcClassifier::default().classify(&Err::<(), _>(status));
    assert_eq!(verdict.outcome, Outcome::Ignored);
}
