//! What a call's result says about the dependency.
//!
//! The classification is the caller's: a `404` or a validation error says nothing about the
//! dependency's health, so it should be [`Outcome::Ignored`], not a failure.

use std::time::Duration;

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

/// An outcome plus an optional hint for how long the dependency asked not to be called
/// (a `Retry-After`). When this result trips the breaker, the open wait is at least the hint
/// (capped by the configuration's `open.max_retry_after`).
///
/// ```
/// use tripline::{Classification, Outcome};
/// use std::time::Duration;
///
/// let c = Classification::http(503, Some("120"));
/// assert_eq!(c.outcome, Outcome::Failure);
/// assert_eq!(c.retry_after, Some(Duration::from_secs(120)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classification {
    /// The verdict.
    pub outcome: Outcome,
    /// How long the dependency asked callers to stay away, if it said.
    pub retry_after: Option<Duration>,
}

impl Classification {
    /// A classification with no retry-after hint.
    pub const fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            retry_after: None,
        }
    }

    /// Classifies an HTTP status with the value of its `Retry-After` header, read as
    /// delta-seconds (an unparseable value, or the HTTP-date form, is no hint: the core has no
    /// wall clock to compare a date with; `tripline_policies::http` reads both forms). The hint
    /// is kept only on failures.
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
