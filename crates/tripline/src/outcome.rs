//! What a call's result says about the dependency.
//!
//! The classification is the caller's: a `404` or a validation error says nothing about the
//! dependency's health, so it should be [`Outcome::Ignored`], not a failure.

use std::time::Duration;

use crate::registry::Blame;

/// The verdict on one call.
///
/// ```
/// use tripline::Outcome;
/// assert_eq!(Outcome::from_result(&Ok::<_, ()>(1)), Outcome::Success);
/// assert_eq!(Outcome::from_result(&Err::<(), _>("boom")), Outcome::Failure);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The dependency answered well (it may still be slow: slowness is measured separately).
    Success,
    /// The dependency failed: an error, a timeout, a 5xx.
    Failure,
    /// The result says nothing about the dependency (a 4xx, a cancelled request); not recorded
    /// in the window.
    Ignored,
}

impl Outcome {
    /// `Ok` is a success, `Err` a failure.
    pub fn from_result<T, E>(result: &Result<T, E>) -> Self {
        if result.is_ok() {
            Outcome::Success
        } else {
            Outcome::Failure
        }
    }

    /// The HTTP rule: 5xx and 429 are failures (the dependency is sick or overloaded), other
    /// 4xx are ignored (the request was wrong, not the dependency), everything else succeeds.
    ///
    /// ```
    /// use tripline::Outcome;
    /// assert_eq!(Outcome::from_http_status(503), Outcome::Failure);
    /// assert_eq!(Outcome::from_http_status(429), Outcome::Failure);
    /// assert_eq!(Outcome::from_http_status(404), Outcome::Ignored);
    /// assert_eq!(Outcome::from_http_status(200), Outcome::Success);
    /// ```
    pub fn from_http_status(status: u16) -> Self {
        match status {
            429 | 500..=599 => Outcome::Failure,
            400..=499 => Outcome::Ignored,
            _ => Outcome::Success,
        }
    }
}

/// What kind of failure a call had, as a classifier labels it: metrics count failures by
/// kind, and a breaker may ignore or weight chosen kinds
/// ([`BreakerConfigBuilder::failure_kind_weight`](crate::BreakerConfigBuilder::failure_kind_weight)),
/// so that, say, a 429 that only asks the caller to slow down does not count like a crash.
///
/// ```
/// use tripline::FailureKind;
/// assert_eq!(FailureKind::RateLimited.as_str(), "rate_limited");
/// assert_eq!(FailureKind::ALL.len(), 7);
/// assert_eq!("quota-exhausted".parse::<FailureKind>(), Ok(FailureKind::QuotaExhausted));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum FailureKind {
    /// The call did not finish in time (a client timeout, gRPC `DEADLINE_EXCEEDED`).
    Timeout = 0,
    /// No answer: connection refused, reset, DNS, TLS.
    Connection = 1,
    /// The dependency answered that it failed (a 5xx other than 503, gRPC `INTERNAL`,
    /// `UNKNOWN`).
    ServerError = 2,
    /// The dependency answered that it cannot serve now (a 503, gRPC `UNAVAILABLE`).
    Unavailable = 3,
    /// The dependency asked the caller to slow down (a 429; gRPC `RESOURCE_EXHAUSTED`, which
    /// covers rate limits and quotas alike).
    RateLimited = 4,
    /// The caller used up a quota that will not come back soon (a daily limit).
    QuotaExhausted = 5,
    /// Any other failure a classifier wants to tell apart.
    Other = 6,
}

impl FailureKind {
    /// Every kind, in declaration order (the order of [`FailureKind::index`]).
    pub const ALL: [FailureKind; 7] = [
        FailureKind::Timeout,
        FailureKind::Connection,
        FailureKind::ServerError,
        FailureKind::Unavailable,
        FailureKind::RateLimited,
        FailureKind::QuotaExhausted,
        FailureKind::Other,
    ];

    /// A stable snake_case name, as used in metric labels (`rate_limited`).
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureKind::Timeout => "timeout",
            FailureKind::Connection => "connection",
            FailureKind::ServerError => "server_error",
            FailureKind::Unavailable => "unavailable",
            FailureKind::RateLimited => "rate_limited",
            FailureKind::QuotaExhausted => "quota_exhausted",
            FailureKind::Other => "other",
        }
    }

    /// The kind's position in [`FailureKind::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for FailureKind {
    type Err = crate::ConfigError;

    /// Reads a kind's name, with `-` or `_` between words (`rate-limited`, `rate_limited`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.replace('-', "_");
        FailureKind::ALL
            .into_iter()
            .find(|k| k.as_str() == norm)
            .ok_or_else(|| {
                crate::ConfigError::new(
                    "failure kind",
                    format!("{s:?}"),
                    "one of timeout, connection, server-error, unavailable, rate-limited, quota-exhausted, other",
                )
            })
    }
}

/// An outcome plus an optional hint for how long the dependency asked not to be called
/// (a `Retry-After`) and, for a failure, its [`FailureKind`]. When this result trips the
/// breaker, the open wait is at least the hint (capped by the configuration's
/// `open.max_retry_after`).
///
/// ```
/// use tripline::{Classification, FailureKind, Outcome};
/// use std::time::Duration;
///
/// let c = Classification::http(503, Some("120"));
/// assert_eq!(c.outcome, Outcome::Failure);
/// assert_eq!(c.retry_after, Some(Duration::from_secs(120)));
/// assert_eq!(c.kind, Some(FailureKind::Unavailable));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classification {
    /// The verdict.
    pub outcome: Outcome,
    /// How long the dependency asked callers to stay away, if it said.
    pub retry_after: Option<Duration>,
    /// What kind of failure it was, if the classifier said (only read for failures).
    pub kind: Option<FailureKind>,
}

impl Classification {
    /// A classification with no retry-after hint and no kind.
    pub const fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            retry_after: None,
            kind: None,
        }
    }

    /// A failure of `kind`.
    ///
    /// ```
    /// use tripline::{Classification, FailureKind, Outcome};
    /// let c = Classification::failure(FailureKind::Timeout);
    /// assert_eq!((c.outcome, c.kind), (Outcome::Failure, Some(FailureKind::Timeout)));
    /// ```
    pub const fn failure(kind: FailureKind) -> Self {
        Self {
            outcome: Outcome::Failure,
            retry_after: None,
            kind: Some(kind),
        }
    }

    /// The same classification labelled with `kind`.
    pub const fn with_kind(mut self, kind: FailureKind) -> Self {
        self.kind = Some(kind);
        self
    }

    /// The same classification with a retry-after hint.
    pub const fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// The kind of an HTTP status that [`Outcome::from_http_status`] calls a failure: 429
    /// rate-limited, 503 unavailable, other 5xx server errors.
    ///
    /// ```
    /// use tripline::{Classification, FailureKind};
    /// assert_eq!(Classification::http_kind(429), Some(FailureKind::RateLimited));
    /// assert_eq!(Classification::http_kind(500), Some(FailureKind::ServerError));
    /// assert_eq!(Classification::http_kind(404), None);
    /// ```
    pub const fn http_kind(status: u16) -> Option<FailureKind> {
        match status {
            429 => Some(FailureKind::RateLimited),
            503 => Some(FailureKind::Unavailable),
            500..=599 => Some(FailureKind::ServerError),
            _ => None,
        }
    }

    /// Classifies an HTTP status with the value of its `Retry-After` header, read as
    /// delta-seconds (an unparseable value, or the HTTP-date form, is no hint: the core has no
    /// wall clock to compare a date with; `tripline_policies::http` reads both forms). The hint
    /// is kept only on failures, which are labelled with [`Classification::http_kind`].
    pub fn http(status: u16, retry_after: Option<&str>) -> Self {
        let outcome = Outcome::from_http_status(status);
        let retry_after = match outcome {
            Outcome::Failure => retry_after
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs),
            _ => None,
        };
        Self {
            outcome,
            retry_after,
            kind: Self::http_kind(status),
        }
    }
}

impl From<Outcome> for Classification {
    fn from(outcome: Outcome) -> Self {
        Self::new(outcome)
    }
}

/// Turns a call's result into a [`Classification`]. Implemented for closures
/// `Fn(&Result<T, E>) -> Classification` and by [`ResultClassifier`].
///
/// ```
/// use tripline::{Classification, Classify, Outcome};
///
/// // A "not found" error says nothing about the dependency's health.
/// let classify = |r: &Result<u32, &str>| match r {
///     Ok(_) => Outcome::Success.into(),
///     Err(e) if *e == "not found" => Outcome::Ignored.into(),
///     Err(_) => Classification::new(Outcome::Failure),
/// };
/// assert_eq!(classify.classify(&Err("not found")).outcome, Outcome::Ignored);
/// ```
pub trait Classify<T, E> {
    /// The verdict on `result`.
    fn classify(&self, result: &Result<T, E>) -> Classification;

    /// The part of the dependency the server blamed for `result`, if it said (a response
    /// header naming the overloaded shard, an error type): a
    /// [`ServerDirected`](crate::registry::ServerDirected) dependency records the result on
    /// that part's breaker instead of the dependency-wide one (a failure's blame only). No
    /// blame by default; give one with [`Blaming`].
    fn blame(&self, result: &Result<T, E>) -> Option<Blame> {
        let _ = result;
        None
    }
}

/// A classifier `K` with a blame read by `F` (`Fn(&Result<T, E>) -> Option<Blame>`): the way
/// to say which shard an error type or a response names.
///
/// ```
/// use tripline::registry::Blame;
/// use tripline::{Blaming, Classify, ResultClassifier};
///
/// #[derive(Debug)]
/// struct ShardOverloaded(String);
/// let k = Blaming::new(ResultClassifier, |r: &Result<(), ShardOverloaded>| {
///     r.as_ref().err().map(|e| Blame::shard(&e.0))
/// });
/// let failed = Err(ShardOverloaded("17".into()));
/// assert_eq!(k.blame(&failed), Some(Blame::shard("17")));
/// assert_eq!(k.blame(&Ok(())), None);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Blaming<K, F> {
    classifier: K,
    blame: F,
}

impl<K, F> Blaming<K, F> {
    /// `classifier`'s verdicts, with the blame `blame` reads.
    pub const fn new(classifier: K, blame: F) -> Self {
        Self { classifier, blame }
    }
}

impl<T, E, K, F> Classify<T, E> for Blaming<K, F>
where
    K: Classify<T, E>,
    F: Fn(&Result<T, E>) -> Option<Blame>,
{
    fn classify(&self, result: &Result<T, E>) -> Classification {
        self.classifier.classify(result)
    }

    fn blame(&self, result: &Result<T, E>) -> Option<Blame> {
        (self.blame)(result)
    }
}

impl<T, E, F> Classify<T, E> for F
where
    F: Fn(&Result<T, E>) -> Classification,
{
    fn classify(&self, result: &Result<T, E>) -> Classification {
        self(result)
    }
}

/// The default classifier: `Ok` succeeds, `Err` fails.
///
/// ```
/// use tripline::{Classify, Outcome, ResultClassifier};
/// assert_eq!(ResultClassifier.classify(&Err::<(), _>(())).outcome, Outcome::Failure);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct ResultClassifier;

impl<T, E> Classify<T, E> for ResultClassifier {
    fn classify(&self, result: &Result<T, E>) -> Classification {
        Outcome::from_result(result).into()
    }
}
