//! The HTTP classifier and the `Retry-After` reader.
#![cfg(feature = "http")]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tripline::{Classify, Outcome};
use tripline_policies::http::{HttpClassifier, parse_retry_after, retry_after};

fn response(status: u16, retry_after: Option<&str>) -> Result<http::Response<()>, std::io::Error> {
    let mut b = http::Response::builder().status(status);
    if let Some(v) = retry_after {
        b = b.header("retry-after", v);
    }
    Ok(b.body(()).unwrap())
}

#[test]
fn statuses_are_classified_by_what_they_say_about_the_dependency() {
    for (status, outcome) in [
        (200, Outcome::Success),
        (204, Outcome::Success),
        (301, Outcome::Success),
        (400, Outcome::Ignored),
        (404, Outcome::Ignored),
        (409, Outcome::Ignored),
        (429, Outcome::Failure),
        (500, Outcome::Failure),
        (503, Outcome::Failure),
        (599, Outcome::Failure),
    ] {
        assert_eq!(
            HttpClassifier.classify(&response(status, None)).outcome,
            outcome,
            "{status}"
        );
    }
    let refused: Result<http::Response<()>, _> =
        Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
    assert_eq!(HttpClassifier.classify(&refused).outcome, Outcome::Failure);
}

#[test]
fn retry_after_is_kept_on_failures_only() {
    let c = HttpClassifier.classify(&response(429, Some("7")));
    assert_eq!(c.retry_after, Some(Duration::from_secs(7)));
    let c = HttpClassifier.classify(&response(503, Some("  120 ")));
    assert_eq!(c.retry_after, Some(Duration::from_secs(120)));
    let c = HttpClassifier.classify(&response(200, Some("7")));
    assert_eq!(c.retry_after, None);
    let c = HttpClassifier.classify(&response(503, Some("later")));
    assert_eq!(c.retry_after, None);
}

#[test]
fn retry_after_reads_delta_seconds_and_http_dates() {
    let now = UNIX_EPOCH + Duration::from_secs(1_445_412_400); // Wed, 21 Oct 2015 07:26:40 GMT
    assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
    assert_eq!(
        parse_retry_after("86400", now),
        Some(Duration::from_secs(86_400))
    );
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
        Some(Duration::from_secs(80))
    );
    // The obsolete formats HTTP still accepts.
    assert_eq!(
        parse_retry_after("Wednesday, 21-Oct-15 07:28:00 GMT", now),
        Some(Duration::from_secs(80))
    );
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
        Some(Duration::ZERO),
        "a date already past"
    );
    for bad in ["", "-5", "1.5", "soon", "99999999999999999999999"] {
        let r = parse_retry_after(bad, now);
        assert!(bad.starts_with('9') || r.is_none(), "{bad:?} -> {r:?}");
    }
    let mut headers = http::HeaderMap::new();
    assert_eq!(retry_after(&headers, SystemTime::now()), None);
    headers.insert("retry-after", "3".parse().unwrap());
    assert_eq!(
        retry_after(&headers, SystemTime::now()),
        Some(Duration::from_secs(3))
    );
}

#[cfg(feature = "retry")]
#[test]
fn the_http_retry_predicate_retries_transient_statuses_and_errors() {
    use tripline_policies::http::HttpRetryable;
    use tripline_policies::retry::Retryable;
    for (status, retry) in [
        (200, false),
        (404, false),
        (429, true),
        (500, true),
        (501, false),
        (502, true),
        (503, true),
        (504, true),
    ] {
        assert_eq!(
            HttpRetryable.is_retryable(&response(status, None)),
            retry,
            "{status}"
        );
    }
    let reset: Result<http::Response<()>, _> =
        Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
    assert!(HttpRetryable.is_retryable(&reset));
}
