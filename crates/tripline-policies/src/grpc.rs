//! gRPC: a classifier for tonic's status codes, for calls and for the breaker's tower layer
//! around a tonic `Channel`.
//!
//! # What a status says about the dependency
//!
//! | status | outcome | kind | why |
//! |---|---|---|---|
//! | `OK` | success | | |
//! | `UNAVAILABLE` | failure | unavailable | the server cannot serve now (or could not be reached) |
//! | `DEADLINE_EXCEEDED` | failure | timeout | the call did not finish in time |
//! | `RESOURCE_EXHAUSTED` | failure | rate-limited | the server is out of capacity or quota and says so |
//! | `INTERNAL`, `UNKNOWN` | failure | server-error | the server broke |
//! | `INVALID_ARGUMENT`, `NOT_FOUND`, `ALREADY_EXISTS`, `PERMISSION_DENIED`, `UNAUTHENTICATED`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`, `UNIMPLEMENTED`, `ABORTED`, `CANCELLED`, `DATA_LOSS` | ignored | | the request (or the caller) was wrong, not the dependency |
//! | a transport error (no response) | failure | connection | the dependency did not answer |
//! | a timeout inside the breaker | failure | timeout | |
//! | a refusal by a local policy (this breaker, a bulkhead, the gate) | ignored | | the call never left |
//!
//! The failing set is the one the gRPC documentation calls server-side or transient trouble;
//! change it with [`GrpcClassifier::failing`] and [`GrpcClassifier::ignoring`] (`DATA_LOSS`,
//! say, if your server uses it for corruption it cannot recover from). `UNKNOWN` is also what
//! tonic reports for an error it cannot map, so a local refusal reaching the classifier as
//! `UNKNOWN` is recognised by its source and ignored.
//!
//! A failure's `grpc-retry-pushback-ms` (gRPC's retry design, A6: a server's word on how long
//! to stay away) becomes the classification's `retry_after`, so a failure that trips the
//! breaker keeps it open at least that long (capped by `open.max_retry_after`). A negative or
//! malformed value is no hint.
//!
//! # Where the status is
//! At the call (`client.method(req).await`, a `Result<tonic::Response<T>, tonic::Status>`) the
//! status is tonic's. In the tower layer around a `Channel` the breaker sees the HTTP response
//! when its headers arrive: a server that fails a call before sending a message answers with
//! its status in those headers (a "trailers-only" response: every error a tonic or grpc-go
//! handler returns), and the classifier reads it there. A status that comes in trailers after
//! messages (a stream that fails midway) is after the breaker's decision: the call counts as a
//! success. Put the layer where a stream's failure matters to you, or classify at the call.
//!
//! ```
//! use tonic::{Code, Status};
//! use tripline::{Classify, FailureKind, Outcome};
//! use tripline_policies::grpc::GrpcClassifier;
//!
//! let mut busy = Status::new(Code::ResourceExhausted, "slow down");
//! busy.metadata_mut().insert("grpc-retry-pushback-ms", "45000".parse().unwrap());
//! let c = GrpcClassifier::default().classify(&Err::<(), _>(busy));
//! assert_eq!((c.outcome, c.kind), (Outcome::Failure, Some(FailureKind::RateLimited)));
//! assert_eq!(c.retry_after, Some(std::time::Duration::from_secs(45)));
//!
//! let not_found = Status::not_found("no such card");
//! assert_eq!(GrpcClassifier::default().classify(&Err::<(), _>(not_found)).outcome, Outcome::Ignored);
//! ```

use std::time::Duration;

use http::HeaderMap;
use tonic::{Code, Status};
use tripline::{Classification, Classify, FailureKind, Outcome};

use crate::BoxError;

/// The metadata key of a server's retry pushback, in milliseconds.
pub const PUSHBACK: &str = "grpc-retry-pushback-ms";

const ALL_CODES: [Code; 17] = [
    Code::Ok,
    Code::Cancelled,
    Code::Unknown,
    Code::InvalidArgument,
    Code::DeadlineExceeded,
    Code::NotFound,
    Code::AlreadyExists,
    Code::PermissionDenied,
    Code::ResourceExhausted,
    Code::FailedPrecondition,
    Code::Aborted,
    Code::OutOfRange,
    Code::Unimplemented,
    Code::Internal,
    Code::Unavailable,
    Code::DataLoss,
    Code::Unauthenticated,
];

const fn bit(code: Code) -> u32 {
    1 << (code as u32)
}

/// Classifies tonic results by status code; see the [module docs](self) for the defaults.
///
/// ```
/// use tonic::Code;
/// use tripline_policies::grpc::GrpcClassifier;
///
/// let c = GrpcClassifier::default().failing(Code::DataLoss).ignoring(Code::Unknown);
/// assert!(c.fails(Code::DataLoss) && c.fails(Code::Unavailable));
/// assert!(!c.fails(Code::Unknown) && !c.fails(Code::NotFound));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrpcClassifier {
    /// Bit `c` set: code `c` is a failure.
    failing: u32,
}

impl Default for GrpcClassifier {
    fn default() -> Self {
        Self::new()
    }
}

impl GrpcClassifier {
    /// The default: `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`, `INTERNAL` and
    /// `UNKNOWN` fail, every other code but `OK` is ignored.
    pub const fn new() -> Self {
        Self {
            failing: bit(Code::Unavailable)
                | bit(Code::DeadlineExceeded)
                | bit(Code::ResourceExhausted)
                | bit(Code::Internal)
                | bit(Code::Unknown),
        }
    }

    /// The same classifier with `code` a failure (`OK` stays a success).
    #[must_use]
    pub const fn failing(mut self, code: Code) -> Self {
        if !matches!(code, Code::Ok) {
            self.failing |= bit(code);
        }
        self
    }

    /// The same classifier with `code` ignored.
    #[must_use]
    pub const fn ignoring(mut self, code: Code) -> Self {
        self.failing &= !bit(code);
        self
    }

    /// Whether `code` is a failure.
    pub const fn fails(&self, code: Code) -> bool {
        self.failing & bit(code) != 0
    }

    /// The codes that are failures, in code order.
    pub fn failing_codes(&self) -> Vec<Code> {
        ALL_CODES.into_iter().filter(|c| self.fails(*c)).collect()
    }

    /// The classification of a status `code` with its metadata (`headers`, for the pushback).
    ///
    /// ```
    /// use tonic::Code;
    /// use tripline::{FailureKind, Outcome};
    /// use tripline_policies::grpc::GrpcClassifier;
    ///
    /// let c = GrpcClassifier::default().classify_code(Code::DeadlineExceeded, &Default::default());
    /// assert_eq!((c.outcome, c.kind), (Outcome::Failure, Some(FailureKind::Timeout)));
    /// ```
    pub fn classify_code(&self, code: Code, headers: &HeaderMap) -> Classification {
        if code == Code::Ok {
            return Classification::new(Outcome::Success);
        }
        if !self.fails(code) {
            return Classification::new(Outcome::Ignored);
        }
        let mut c = Classification::failure(kind(code));
        c.retry_after = pushback(headers);
        c
    }

    fn classify_status(&self, status: &Status) -> Classification {
        if is_local(status) {
            return Classification::new(Outcome::Ignored);
        }
        if status.code() == Code::Cancelled && is_timeout(status) {
            return Classification::failure(FailureKind::Timeout);
        }
        self.classify_code(status.code(), status.metadata().as_ref())
    }

    fn classify_error(&self, e: &BoxError) -> Classification {
        if crate::is_local_rejection(&**e) {
            return Classification::new(Outcome::Ignored);
        }
        if crate::is_timeout(&**e) {
            return Classification::failure(FailureKind::Timeout);
        }
        if let Some(status) = find_status(&**e) {
            return self.classify_status(status);
        }
        // Nothing came back: the channel could not reach the server.
        Classification::failure(FailureKind::Connection)
    }
}

/// The kind of a failing code.
fn kind(code: Code) -> FailureKind {
    match code {
        Code::DeadlineExceeded => FailureKind::Timeout,
        Code::Unavailable => FailureKind::Unavailable,
        Code::ResourceExhausted => FailureKind::RateLimited,
        Code::Internal | Code::Unknown => FailureKind::ServerError,
        _ => FailureKind::Other,
    }
}

/// A server's `grpc-retry-pushback-ms`: a non-negative number of milliseconds, else no hint.
///
/// ```
/// use std::time::Duration;
/// use tripline_policies::grpc::pushback;
///
/// let mut h = http::HeaderMap::new();
/// h.insert("grpc-retry-pushback-ms", "1500".parse().unwrap());
/// assert_eq!(pushback(&h), Some(Duration::from_millis(1500)));
/// h.insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
/// assert_eq!(pushback(&h), None);
/// ```
pub fn pushback(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get(PUSHBACK)?.to_str().ok()?.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Duration::from_millis(v.parse().unwrap_or(u64::MAX)))
}

fn sources<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| e.source())
}

/// A status tonic made from a local refusal (it keeps the refusal as its source).
fn is_local(status: &Status) -> bool {
    std::error::Error::source(status).is_some_and(crate::is_local_rejection)
}

/// A status tonic made from a timeout inside the channel or the breaker.
fn is_timeout(status: &Status) -> bool {
    std::error::Error::source(status).is_some_and(crate::is_timeout)
}

fn find_status<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Status> {
    sources(e).find_map(|e| e.downcast_ref::<Status>())
}

/// Calls: `Ok` succeeds, a status is classified by its code.
impl<T> Classify<T, Status> for GrpcClassifier {
    fn classify(&self, result: &Result<T, Status>) -> Classification {
        match result {
            Ok(_) => Classification::new(Outcome::Success),
            Err(status) => self.classify_status(status),
        }
    }
}

/// The tower layer around a gRPC channel: a response is classified by the `grpc-status` of
/// its headers (no status there: a success so far), an error by the status in its chain, as
/// a timeout, or as a failed connection.
impl<B> Classify<http::Response<B>, BoxError> for GrpcClassifier {
    fn classify(&self, result: &Result<http::Response<B>, BoxError>) -> Classification {
        match result {
            Ok(resp) => {
                let headers = resp.headers();
                match headers
                    .get("grpc-status")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<i32>().ok())
                {
                    Some(code) => self.classify_code(Code::from_i32(code), headers),
                    None => Classification::new(Outcome::Success),
                }
            }
            Err(e) => self.classify_error(e),
        }
    }
}

/// A classifier of tonic call results `K` (a [`GrpcClassifier`]) whose failed statuses also
/// carry the shard the server blamed, read from the status's metadata (a trailer such as
/// `x-overloaded-shard`): the gRPC form of [`BlameHeader`](crate::http::BlameHeader), for a
/// [`ServerDirected`](tripline::registry::ServerDirected) dependency. (Around a channel, the
/// tower layer sees `http::Response`s: give it a `BlameHeader` of the [`GrpcClassifier`].)
///
/// ```
/// use tripline::registry::Blame;
/// use tripline::{Classify, Outcome};
/// use tripline_policies::grpc::{BlameMetadata, GrpcClassifier};
///
/// let k = BlameMetadata::new(GrpcClassifier::default(), "x-overloaded-shard")?;
/// let mut status = tonic::Status::unavailable("shard 17 is hot");
/// status.metadata_mut().insert("x-overloaded-shard", "17".parse().unwrap());
/// let result: Result<(), _> = Err(status);
/// assert_eq!(k.classify(&result).outcome, Outcome::Failure);
/// assert_eq!(k.blame(&result), Some(Blame::shard("17")));
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct BlameMetadata<K>(crate::http::BlameHeader<K>);

impl<K> BlameMetadata<K> {
    /// `classifier`'s verdicts, blaming the shard the metadata entry `name` names. Fails if
    /// `name` is not a valid metadata key.
    pub fn new(classifier: K, name: &str) -> Result<Self, tripline::ConfigError> {
        crate::http::BlameHeader::new(classifier, name).map(Self)
    }

    /// The same classifier blaming another kind of part.
    pub fn scope_kind(self, kind: tripline::registry::ScopeKind) -> Self {
        Self(self.0.scope_kind(kind))
    }
}

impl<T, K: Classify<T, Status>> Classify<T, Status> for BlameMetadata<K> {
    fn classify(&self, result: &Result<T, Status>) -> Classification {
        self.0.inner().classify(result)
    }

    fn blame(&self, result: &Result<T, Status>) -> Option<tripline::registry::Blame> {
        match result {
            Ok(_) => self.0.inner().blame(result),
            Err(status) => self.0.blame_in(status.metadata().as_ref()),
        }
    }
}
