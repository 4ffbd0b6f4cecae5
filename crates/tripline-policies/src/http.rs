//! HTTP: a response classifier for `http::Response` and a `Retry-After` reader.
//!
//! # What an HTTP answer says about the dependency
//!
//! | answer | outcome | why |
//! |---|---|---|
//! | no response (connection refused, reset, timed out) | failure | the dependency did not answer |
//! | 5xx | failure | the dependency is sick |
//! | 429 | failure | the dependency is overloaded and says so |
//! | other 4xx | ignored | the request was wrong, not the dependency |
//! | anything else | success | |
//!
//! Failures carry a [`FailureKind`](tripline::FailureKind): 429 rate-limited, 503 unavailable,
//! other 5xx server errors, so a breaker may weigh them apart (a 429 weighing 0, say).
//!
//! A failure's `Retry-After` header, in delta-seconds or as an HTTP-date, becomes the
//! classification's `retry_after`: if that result trips the breaker, the breaker stays open at
//! least that long (up to its configured maximum), instead of probing a dependency that asked
//! to be left alone.
//!
//! ```
//! use std::time::Duration;
//! use tripline::{Classify, Outcome};
//! use tripline_policies::http::HttpClassifier;
//!
//! let resp = http::Response::builder().status(503).header("retry-after", "30").body(()).unwrap();
//! let c = HttpClassifier.classify(&Ok::<_, std::io::Error>(resp));
//! assert_eq!(c.outcome, Outcome::Failure);
//! assert_eq!(c.retry_after, Some(Duration::from_secs(30)));
//!
//! let not_found = http::Response::builder().status(404).body(()).unwrap();
//! assert_eq!(HttpClassifier.classify(&Ok::<_, std::io::Error>(not_found)).outcome, Outcome::Ignored);
//! ```

use std::time::{Duration, SystemTime};

use http::header::RETRY_AFTER;
use http::{HeaderMap, Response};
use tripline::{Classification, Classify, Outcome};

/// Classifies `Result<http::Response<B>, E>`: an error, a 5xx or a 429 is a failure (with the
/// `Retry-After` hint), another 4xx is ignored, anything else is a success. See the
/// [module docs](self).
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpClassifier;

impl<B, E> Classify<Response<B>, E> for HttpClassifier {
    fn classify(&self, result: &Result<Response<B>, E>) -> Classification {
        match result {
            Err(_) => Classification::new(Outcome::Failure),
            Ok(resp) => classify_response(resp.status().as_u16(), resp.headers()),
        }
    }
}

/// The classification of a response with `status` and `headers`: the status decides, and a
/// failure keeps its `Retry-After` hint, read now.
pub(crate) fn classify_response(status: u16, headers: &HeaderMap) -> Classification {
    let outcome = Outcome::from_http_status(status);
    let retry_after = match outcome {
        Outcome::Failure => retry_after(headers, SystemTime::now()),
        _ => None,
    };
    Classification {
        outcome,
        retry_after,
        kind: Classification::http_kind(status),
    }
}

/// The retry predicate for HTTP: errors (no response), 429, 500, 502, 503 and 504 are retried;
/// other statuses are not (a 501 will not be implemented on the second try, a 400 will not
/// become valid). With the `reqwest` feature it also judges `reqwest::Response` results, of a
/// plain `Client` and of a middleware chain (where a local refusal, such as a breaker's, is
/// never retried, nor a request reqwest could not build).
///
/// ```
/// use tripline_policies::http::HttpRetryable;
/// use tripline_policies::retry::Retryable;
///
/// let resp = |s: u16| Ok::<_, std::io::Error>(http::Response::builder().status(s).body(()).unwrap());
/// assert!(HttpRetryable.is_retryable(&resp(503)));
/// assert!(!HttpRetryable.is_retryable(&resp(501)));
/// assert!(!HttpRetryable.is_retryable(&resp(404)));
/// ```
#[cfg(feature = "retry")]
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpRetryable;

#[cfg(feature = "retry")]
impl<B, E> crate::retry::Retryable<Response<B>, E> for HttpRetryable {
    fn is_retryable(&self, result: &Result<Response<B>, E>) -> bool {
        match result {
            Err(_) => true,
            Ok(resp) => retryable_status(resp.status().as_u16()),
        }
    }
}

/// Whether a response with `status` is worth retrying: 429, 500, 502, 503, 504.
#[cfg(feature = "retry")]
pub(crate) fn retryable_status(status: u16) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
}

/// The `Retry-After` of `headers`, read at `now` (see [`parse_retry_after`]).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderMap;
/// use tripline_policies::http::retry_after;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", "120".parse().unwrap());
/// assert_eq!(retry_after(&headers, SystemTime::now()), Some(Duration::from_secs(120)));
/// ```
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    parse_retry_after(headers.get(RETRY_AFTER)?.to_str().ok()?, now)
}

/// Parses a `Retry-After` value: delta-seconds (`"120"`), or an HTTP-date
/// (`"Wed, 21 Oct 2015 07:28:00 GMT"`), read as the time from `now` until then (zero for a
/// date already past). Anything else is no hint.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use tripline_policies::http::parse_retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_400); // 2015-10-21 07:26:40 UTC
/// assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now), Some(Duration::from_secs(80)));
/// assert_eq!(parse_retry_after(" 5 ", now), Some(Duration::from_secs(5)));
/// assert_eq!(parse_retry_after("soon", now), None);
/// assert_eq!(parse_retry_after("-1", now), None);
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// An untrusted header value as an error shows it: its first 32 bytes escaped to printable
/// ASCII (`\xe2`), quoted, and its length when cut.
fn shown(v: &[u8]) -> String {
    const MAX: usize = 32;
    let mut out = String::from("\"");
    for &b in v.iter().take(MAX) {
        out.extend(std::ascii::escape_default(b).map(char::from));
    }
    out.push('"');
    if v.len() > MAX {
        out.push_str(&format!("... ({} bytes)", v.len()));
    }
    out
}

/// A classifier `K` whose results also carry the part of the dependency the server blamed,
/// read from a response header (`x-overloaded-shard: 17`): a
/// [`ServerDirected`](tripline::registry::ServerDirected) dependency records the result on
/// `dependency/shard=17`'s breaker instead of the dependency-wide one (see
/// [`ServerDirectedLayer`](crate::breaker::ServerDirectedLayer) and the reqwest
/// `ServerDirectedMiddleware`). A header value that is not visible ASCII text is a refused
/// blame ([`Blame::invalid`](tripline::registry::Blame::invalid), its error showing the value
/// only as an escaped 32-byte prefix); one that is text is trimmed and checked by the key
/// rules when it becomes a key (an empty or blank value cannot be one). Either way the
/// failure is recorded on the dependency-wide breaker and the refusal counted and reported
/// (see [`tripline::registry::directed`]). Implemented for `http::Response` results
/// here, for reqwest's (feature `reqwest`) and tonic's statuses' metadata (feature `grpc`).
///
/// ```
/// use tripline::registry::{Blame, ScopeKind};
/// use tripline::{Classify, Outcome};
/// use tripline_policies::http::{BlameHeader, HttpClassifier};
///
/// let k = BlameHeader::new(HttpClassifier, "x-overloaded-shard")?;
/// let resp = http::Response::builder().status(503).header("x-overloaded-shard", "17");
/// let result = Ok::<_, std::io::Error>(resp.body(()).unwrap());
/// assert_eq!(k.classify(&result).outcome, Outcome::Failure);
/// assert_eq!(k.blame(&result), Some(Blame::shard("17")));
///
/// let err = BlameHeader::new(HttpClassifier, "x overloaded").unwrap_err();
/// assert_eq!(err.field(), "blame header");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct BlameHeader<K> {
    classifier: K,
    name: http::HeaderName,
    kind: tripline::registry::ScopeKind,
}

impl<K> BlameHeader<K> {
    /// `classifier`'s verdicts, blaming the shard the response's header `name` names. Fails
    /// if `name` is not a valid header name.
    pub fn new(classifier: K, name: &str) -> Result<Self, tripline::ConfigError> {
        let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            tripline::ConfigError::new(
                "blame header",
                format!("{name:?}"),
                "an HTTP header name (letters, digits and !#$%&'*+-.^_`|~, no spaces)",
            )
        })?;
        Ok(Self {
            classifier,
            name,
            kind: tripline::registry::ScopeKind::Shard,
        })
    }

    /// The same classifier blaming another kind of part (a cell named in the header is a
    /// [`ScopeKind::Region`](tripline::registry::ScopeKind::Region), say).
    pub fn scope_kind(mut self, kind: tripline::registry::ScopeKind) -> Self {
        self.kind = kind;
        self
    }

    /// The header's name.
    pub fn header(&self) -> &http::HeaderName {
        &self.name
    }

    /// The blame in `headers`, if the header is there.
    pub(crate) fn blame_in(&self, headers: &HeaderMap) -> Option<tripline::registry::Blame> {
        use tripline::registry::Blame;
        let value = headers.get(&self.name)?;
        Some(match value.to_str() {
            Ok(v) => Blame::new(self.kind, v.trim()),
            Err(_) => Blame::invalid(
                self.kind,
                tripline::ConfigError::new(
                    format!("header {}", self.name),
                    shown(value.as_bytes()),
                    "visible ASCII text naming a part of the dependency",
                ),
            ),
        })
    }

    /// The classifier it wraps.
    pub(crate) fn inner(&self) -> &K {
        &self.classifier
    }
}

impl<B, E, K: Classify<Response<B>, E>> Classify<Response<B>, E> for BlameHeader<K> {
    fn classify(&self, result: &Result<Response<B>, E>) -> Classification {
        self.classifier.classify(result)
    }

    fn blame(&self, result: &Result<Response<B>, E>) -> Option<tripline::registry::Blame> {
        match result {
            Ok(resp) => self.blame_in(resp.headers()),
            Err(_) => self.classifier.blame(result),
        }
    }
}
