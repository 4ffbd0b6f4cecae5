//! The retry policy: attempts, backoff, budget, predicate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use tripline::{ConfigError, Outcome};

use super::backoff::{Backoff, Jitter};
use super::budget::{RetryBudget, RetryCause};

/// The most attempts a policy may allow.
pub const MAX_ATTEMPTS: u32 = 100;

/// Decides whether a result is worth retrying. Implemented for closures
/// `Fn(&Result<T, E>) -> bool` and by [`RetryOnError`].
///
/// The predicate sees the dependency's own result: an `Ok` can be retryable (an HTTP 503 is a
/// response), an `Err` can be final (a validation error will fail again). Whatever it says, a
/// call refused by a local policy (an open breaker, a full bulkhead, the gate, the throttle) is
/// never retried, and a timeout is retried as
/// [`retry_timeouts`](RetryPolicyBuilder::retry_timeouts) says, without asking the predicate:
/// the pipeline's timeout is not a result of the call, and the tower layer does the same with
/// the timeouts it recognises (this crate's `Elapsed`, tower's `TimeoutLayer` error, tokio's
/// `timeout` error, anywhere in the error's chain), so both retry alike.
///
/// ```
/// use tripline_policies::retry::Retryable;
///
/// let transient = |r: &Result<u16, std::io::Error>| match r {
///     Ok(status) => matches!(status, 429 | 502 | 503 | 504),
///     Err(e) => e.kind() != std::io::ErrorKind::InvalidInput,
/// };
/// assert!(transient.is_retryable(&Ok(503)));
/// assert!(!transient.is_retryable(&Ok(404)));
/// ```
pub trait Retryable<T, E> {
    /// Whether `result` should be retried.
    fn is_retryable(&self, result: &Result<T, E>) -> bool;
}

impl<T, E, F> Retryable<T, E> for F
where
    F: Fn(&Result<T, E>) -> bool,
{
    fn is_retryable(&self, result: &Result<T, E>) -> bool {
        self(result)
    }
}

/// The default predicate: every `Err` is retryable, every `Ok` is final.
///
/// ```
/// use tripline_policies::retry::{RetryOnError, Retryable};
/// assert!(RetryOnError.is_retryable(&Err::<(), _>("reset")));
/// assert!(!RetryOnError.is_retryable(&Ok::<_, ()>(1)));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RetryOnError;

impl<T, E> Retryable<T, E> for RetryOnError {
    fn is_retryable(&self, result: &Result<T, E>) -> bool {
        result.is_err()
    }
}

/// Counters of a retry policy since it was built (shared by its clones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryStats {
    /// Requests started.
    pub requests: u64,
    /// Retries made: granted by the budget and the gate, and sent on. A retry that a local
    /// policy further in refuses (an open breaker, a full bulkhead, the gate, the throttle), or
    /// whose request is dropped during its backoff, is not counted, and its budget withdrawal is
    /// given back.
    pub retries: u64,
    /// Retries the budget refused.
    pub budget_exhausted: u64,
    /// Retries refused because the concurrency gate's retry limit was reached.
    pub gate_overflows: u64,
    /// Requests that still failed after the last allowed attempt.
    pub attempts_exhausted: u64,
    /// Calls refused by a local policy (breaker, bulkhead, gate, throttle), never retried.
    pub local_rejections: u64,
    /// Requests that succeeded on their first attempt (resilience4j's
    /// `successful_without_retry`).
    pub succeeded_without_retry: u64,
    /// Requests that succeeded after at least one retry (`successful_with_retry`).
    pub succeeded_with_retry: u64,
    /// Requests that ended with a failure (or an error not worth retrying) without a retry:
    /// not retryable, or refused a retry by the budget or the gate (`failed_without_retry`).
    pub failed_without_retry: u64,
    /// Requests that ended with a failure after at least one retry (`failed_with_retry`).
    pub failed_with_retry: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    retries: AtomicU64,
    budget_exhausted: AtomicU64,
    gate_overflows: AtomicU64,
    attempts_exhausted: AtomicU64,
    local_rejections: AtomicU64,
    /// Requests ended: succeeded without, with a retry; failed without, with a retry.
    ended: [AtomicU64; 4],
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

struct Shared {
    max_attempts: u32,
    backoff: Backoff,
    retry_timeouts: bool,
    budget: Option<Arc<dyn RetryBudget>>,
    /// Guards the jitter's generator (the policy's own): only the backoff's draw runs under
    /// it, never the predicate, the budget or a user's code.
    rng: Mutex<Pcg64Mcg>,
    counters: Counters,
}

/// When and how often to retry: a maximum number of attempts, a [`Backoff`] with jitter, an
/// optional shared [`RetryBudget`], whether timeouts are retried, and a [`Retryable`]
/// predicate. Cloning is cheap; clones share the budget, the random generator and the counters.
///
/// Defaults: 3 attempts (the AWS SDKs' standard mode), 100 ms doubling to 20 s with full
/// jitter, timeouts retried, no budget, every `Err` retryable.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tripline_policies::retry::{Jitter, RetryPolicy};
/// use tripline_policies::retry::budget::TokenBucketBudget;
///
/// let policy = RetryPolicy::builder()
///     .max_attempts(4)
///     .base_delay(Duration::from_millis(50))
///     .max_delay(Duration::from_secs(2))
///     .jitter(Jitter::Decorrelated)
///     .budget(Arc::new(TokenBucketBudget::default()))
///     .retry_if(|r: &Result<u16, std::io::Error>| !matches!(r, Ok(200..=499)))
///     .seed(42)
///     .build()?;
/// assert_eq!(policy.max_attempts(), 4);
///
/// let err = RetryPolicy::builder().max_attempts(0).build().unwrap_err();
/// assert_eq!(err.to_string(), "max_attempts must be in [1, 100], got 0");
/// # Ok::<(), tripline::ConfigError>(())
/// ```
pub struct RetryPolicy<P = RetryOnError> {
    shared: Arc<Shared>,
    predicate: P,
}

impl<P: Clone> Clone for RetryPolicy<P> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            predicate: self.predicate.clone(),
        }
    }
}

impl<P> std::fmt::Debug for RetryPolicy<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("max_attempts", &self.shared.max_attempts)
            .field("backoff", &self.shared.backoff)
            .field("retry_timeouts", &self.shared.retry_timeouts)
            .field("budget", &self.shared.budget)
            .finish_non_exhaustive()
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::builder()
            .build()
            .expect("the defaults are valid")
    }
}

impl RetryPolicy {
    /// A builder with the defaults.
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder {
            max_attempts: 3,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(20),
            jitter: Jitter::Full,
            retry_timeouts: true,
            budget: None,
            seed: None,
            predicate: RetryOnError,
        }
    }
}

impl<P> RetryPolicy<P> {
    /// Attempts per request, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.shared.max_attempts
    }

    /// The backoff between attempts.
    pub fn backoff(&self) -> Backoff {
        self.shared.backoff
    }

    /// Whether timeouts are retried.
    pub fn retries_timeouts(&self) -> bool {
        self.shared.retry_timeouts
    }

    /// The predicate.
    pub fn predicate(&self) -> &P {
        &self.predicate
    }

    /// The counters so far.
    pub fn stats(&self) -> RetryStats {
        let c = &self.shared.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RetryStats {
            requests: r(&c.requests),
            retries: r(&c.retries),
            budget_exhausted: r(&c.budget_exhausted),
            gate_overflows: r(&c.gate_overflows),
            attempts_exhausted: r(&c.attempts_exhausted),
            local_rejections: r(&c.local_rejections),
            succeeded_without_retry: r(&c.ended[0]),
            succeeded_with_retry: r(&c.ended[1]),
            failed_without_retry: r(&c.ended[2]),
            failed_with_retry: r(&c.ended[3]),
        }
    }

    /// The budget, if any.
    pub fn budget(&self) -> Option<&Arc<dyn RetryBudget>> {
        self.shared.budget.as_ref()
    }

    /// The same policy (sharing its budget, its random generator and its counters) with
    /// another predicate: a policy read from a configuration, given the predicate of the
    /// results it retries.
    ///
    /// ```
    /// use tripline_policies::retry::{RetryPolicy, Retryable};
    ///
    /// let policy = RetryPolicy::default();
    /// let http = policy.clone().with_predicate(|r: &Result<u16, ()>| matches!(r, Ok(503) | Err(_)));
    /// assert!(http.predicate().is_retryable(&Ok(503)));
    /// assert_eq!(http.max_attempts(), policy.max_attempts());
    /// ```
    pub fn with_predicate<Q>(self, predicate: Q) -> RetryPolicy<Q> {
        RetryPolicy {
            shared: self.shared,
            predicate,
        }
    }

    /// Runs `f` until it succeeds, returns a result the predicate does not retry, or the
    /// attempts or the budget run out; waits the backoff (on tokio's timer) between attempts.
    /// Returns the last result.
    ///
    /// This is the bare retry loop: it knows nothing of the other policies, so it cannot tell a
    /// breaker's rejection from any other error. To retry calls through a breaker, use the
    /// [pipeline](crate::pipeline) (or the tower layers), which never retries a rejection.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), tripline::ConfigError> {
    /// use tripline_policies::retry::RetryPolicy;
    ///
    /// let policy = RetryPolicy::builder().max_attempts(3).seed(9).build()?;
    /// let mut calls = 0;
    /// let r: Result<u32, &str> = policy
    ///     .call(|| {
    ///         calls += 1;
    ///         let n = calls;
    ///         async move { if n < 3 { Err("reset") } else { Ok(n) } }
    ///     })
    ///     .await;
    /// assert_eq!(r, Ok(3));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn call<T, E, F, Fut>(&self, mut f: F) -> Result<T, E>
    where
        P: Retryable<T, E>,
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let mut attempts = self.start();
        loop {
            let result = f().await;
            let verdict = Verdict::of(&self.predicate, &result);
            match attempts.next(verdict) {
                None => return result,
                Some(delay) => tokio::time::sleep(delay).await,
            }
            attempts.begin();
        }
    }

    /// Starts a request whose attempts the caller makes and times itself (an event loop, a
    /// simulator): tells the budget, and returns the [`RetryState`] to drive.
    pub fn begin_request(&self) -> RetryState {
        RetryState {
            attempts: self.start(),
            retry_timeouts: self.shared.retry_timeouts,
        }
    }

    /// Starts a request: tells the budget, and returns the state of its attempts.
    pub(crate) fn start(&self) -> Attempts {
        bump(&self.shared.counters.requests);
        if let Some(b) = &self.shared.budget {
            b.on_request();
        }
        Attempts {
            shared: self.shared.clone(),
            made: 1,
            previous_delay: self.shared.backoff.base(),
            cause: None,
            retry: Granted::None,
        }
    }
}

/// The result of one attempt, as a [`RetryState`] is told it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttemptResult {
    /// The attempt succeeded.
    Success,
    /// A result that is not worth retrying (an error the predicate would not retry): it ends
    /// the request, and no budget counts it.
    Final,
    /// The dependency failed: with an error worth retrying ([`RetryCause::Error`]), or by
    /// timing out ([`RetryCause::Timeout`], retried only with
    /// [`retry_timeouts`](RetryPolicyBuilder::retry_timeouts)).
    Failure(RetryCause),
    /// A local policy refused the attempt before it was sent (an open breaker, a full
    /// bulkhead, the gate, the throttle): never retried, and a refused retry was never made.
    Refused,
}

/// One request's attempts, driven step by step by a caller that keeps its own time: an event
/// loop, or a simulator on virtual time. It is the loop [`RetryPolicy::call`] and the
/// [pipeline](crate::pipeline) run, with the waiting left to the caller: the same budget
/// charges and refunds, the same backoff draws, the same counters.
///
/// Tell it each attempt's result with [`next`](Self::next): `Some(delay)` means retry after
/// `delay` (the budget has been charged and the retry counted); call [`send`](Self::send) when
/// the retry's attempt goes out, or [`cancel`](Self::cancel) if another limit (a gate's retry
/// limit) refuses it first. A state dropped while a granted retry waits for its backoff gives
/// the retry back, as a dropped request does.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tripline::ManualClock;
/// use tripline_policies::retry::budget::{RetryCause, TpsBudget};
/// use tripline_policies::retry::{AttemptResult, Jitter, RetryPolicy};
///
/// let clock = ManualClock::new();
/// let budget = TpsBudget::builder().min_per_sec(0).retry_ratio(0.5).build_with_clock(clock)?;
/// let policy = RetryPolicy::builder()
///     .max_attempts(3)
///     .base_delay(Duration::from_millis(100))
///     .jitter(Jitter::None)
///     .budget(Arc::new(budget))
///     .build()?;
///
/// let mut first = policy.begin_request(); // deposits half a retry
/// let mut second = policy.begin_request(); // and another half
/// let delay = first.next(AttemptResult::Failure(RetryCause::Error));
/// assert_eq!(delay, Some(Duration::from_millis(100))); // the caller waits, then sends
/// first.send();
/// assert_eq!(first.next(AttemptResult::Failure(RetryCause::Timeout)), None); // budget spent
/// assert_eq!(second.next(AttemptResult::Success), None);
/// let stats = policy.stats();
/// assert_eq!((stats.requests, stats.retries, stats.budget_exhausted), (2, 1, 1));
/// # Ok::<(), tripline::ConfigError>(())
/// ```
pub struct RetryState {
    attempts: Attempts,
    retry_timeouts: bool,
}

impl std::fmt::Debug for RetryState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RetryState")
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl RetryState {
    /// Reports an attempt's result and decides: `Some(delay)` means retry after `delay`;
    /// `None` means the request ends with this result (a success, a final result, a refusal,
    /// or a failure with no attempt or budget left).
    pub fn next(&mut self, result: AttemptResult) -> Option<Duration> {
        let verdict = match result {
            AttemptResult::Success => Verdict::Success,
            AttemptResult::Final => Verdict::Final,
            AttemptResult::Failure(cause) => Verdict::Failure {
                cause,
                retryable: cause == RetryCause::Error || self.retry_timeouts,
            },
            AttemptResult::Refused => Verdict::Local,
        };
        self.attempts.next(verdict)
    }

    /// The retry [`next`](Self::next) granted goes out now: from here on it counts as made,
    /// unless a local policy refuses its attempt ([`AttemptResult::Refused`]).
    pub fn send(&mut self) {
        self.attempts.begin();
    }

    /// Takes back the retry [`next`](Self::next) granted, before it is sent: another limit
    /// refused it (a gate's retry limit). The budget is refunded and the refusal counted in
    /// [`RetryStats::gate_overflows`].
    pub fn cancel(&mut self) {
        self.attempts.cancel();
    }

    /// Attempts made or granted so far, the first included.
    pub fn attempts(&self) -> u32 {
        self.attempts.made
    }
}

/// What an attempt's result means for the retry loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The call ended well.
    Success,
    /// A result the predicate does not retry.
    Final,
    /// A failure worth retrying (`retryable` false when it may not be: a timeout with timeouts
    /// not retried).
    Failure { cause: RetryCause, retryable: bool },
    /// Refused by a local policy: never retried, not reported to the budget.
    Local,
}

impl Verdict {
    /// The verdict on a dependency's result, by the predicate.
    pub(crate) fn of<T, E, P: Retryable<T, E>>(predicate: &P, result: &Result<T, E>) -> Self {
        if predicate.is_retryable(result) {
            Verdict::Failure {
                cause: RetryCause::Error,
                retryable: true,
            }
        } else if result.is_ok() {
            Verdict::Success
        } else {
            Verdict::Final
        }
    }
}

/// Where the retry that [`Attempts::next`] granted stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Granted {
    /// No retry is outstanding: a first attempt, or a retry whose result has been reported.
    None,
    /// Granted, and waiting for its backoff: not made yet.
    Waiting(RetryCause),
    /// Handed on to the stages further in, which may still refuse it.
    Sent(RetryCause),
}

/// The state of one request's attempts.
///
/// A retry is charged to the budget and counted when it is granted; it is taken back (the
/// budget refunded, the count lowered) if it is not made after all: another limit refuses it
/// at once ([`cancel`](Self::cancel)), a local policy further in refuses its attempt (a
/// [`Verdict::Local`] result), or the request is dropped before the attempt is sent.
pub(crate) struct Attempts {
    shared: Arc<Shared>,
    made: u32,
    previous_delay: Duration,
    /// The cause of the retry the current attempt is (`None` for the first attempt).
    cause: Option<RetryCause>,
    retry: Granted,
}

impl std::fmt::Debug for Attempts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attempts")
            .field("made", &self.made)
            .field("previous_delay", &self.previous_delay)
            .field("cause", &self.cause)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl Attempts {
    /// Whether another attempt may follow the ones made (so a copy of the request is worth
    /// making).
    #[cfg_attr(
        not(any(feature = "tower", feature = "reqwest")),
        expect(
            dead_code,
            reason = "used by the tower layer and the reqwest middleware"
        )
    )]
    pub(crate) fn may_retry(&self) -> bool {
        self.made < self.shared.max_attempts
    }

    /// The retry granted by [`next`](Self::next) is being sent on: from now on it counts as
    /// made unless a local policy further in refuses it.
    pub(crate) fn begin(&mut self) {
        if let Granted::Waiting(cause) = self.retry {
            self.retry = Granted::Sent(cause);
        }
    }

    /// Reports an attempt's result to the budget and the counters, without deciding anything:
    /// for a request that cannot be retried (no copy of it could be made), which ends with it.
    /// A retry refused by a local policy is taken back: it was never made.
    #[cfg_attr(
        not(any(feature = "tower", feature = "reqwest")),
        expect(
            dead_code,
            reason = "used by the tower layer and the reqwest middleware"
        )
    )]
    pub(crate) fn report(&mut self, verdict: Verdict) {
        self.observe(verdict);
        self.end(verdict, self.made > 1);
    }

    /// Counts how the request ended, with `verdict` as its last result: a success or a
    /// failure, with or without a retry made; a local refusal is counted as such already.
    fn end(&self, verdict: Verdict, retried: bool) {
        let failed = match verdict {
            Verdict::Success => false,
            Verdict::Final | Verdict::Failure { .. } => true,
            Verdict::Local => return,
        };
        bump(&self.shared.counters.ended[usize::from(failed) * 2 + usize::from(retried)]);
    }

    /// Reports an attempt's result to the budget (see [`report`](Self::report)).
    fn observe(&mut self, verdict: Verdict) {
        let outcome = match verdict {
            Verdict::Success => Outcome::Success,
            Verdict::Final => Outcome::Ignored,
            Verdict::Failure { .. } => Outcome::Failure,
            Verdict::Local => {
                if let Granted::Sent(cause) = self.retry {
                    self.take_back(cause);
                }
                self.retry = Granted::None;
                bump(&self.shared.counters.local_rejections);
                return;
            }
        };
        self.retry = Granted::None;
        if let Some(b) = &self.shared.budget {
            b.on_outcome(outcome, self.cause);
        }
    }

    /// After an attempt: reports it (see [`report`](Self::report)) and decides. `Some(delay)`
    /// means retry after `delay`; the budget has been charged and the retry counted (call
    /// [`begin`](Self::begin) when its attempt is sent, or [`cancel`](Self::cancel) if another
    /// limit refuses it).
    pub(crate) fn next(&mut self, verdict: Verdict) -> Option<Duration> {
        self.observe(verdict);
        let s = &*self.shared;
        let Verdict::Failure {
            cause,
            retryable: true,
        } = verdict
        else {
            self.end(verdict, self.made > 1);
            return None;
        };
        if self.made >= s.max_attempts {
            bump(&s.counters.attempts_exhausted);
            self.end(verdict, self.made > 1);
            return None;
        }
        if let Some(b) = &s.budget {
            if !b.withdraw(cause) {
                bump(&s.counters.budget_exhausted);
                self.end(verdict, self.made > 1);
                return None;
            }
        }
        let delay = {
            let mut rng = crate::lock(&s.rng);
            s.backoff
                .delay(self.made - 1, self.previous_delay, &mut *rng)
        };
        self.previous_delay = delay;
        self.made += 1;
        self.cause = Some(cause);
        self.retry = Granted::Waiting(cause);
        bump(&s.counters.retries);
        Some(delay)
    }

    /// Takes back the retry [`next`](Self::next) granted: another limit (the gate's retry
    /// limit) refused it. Refunds the budget.
    pub(crate) fn cancel(&mut self) {
        if let Granted::Waiting(cause) = self.retry {
            self.retry = Granted::None;
            self.take_back(cause);
            bump(&self.shared.counters.gate_overflows);
            // The request ends with the failure this retry was for; the retry was not made.
            let failure = Verdict::Failure {
                cause,
                retryable: true,
            };
            self.end(failure, self.made > 2);
        }
    }

    /// Gives a granted retry's withdrawal back and uncounts it.
    fn take_back(&self, cause: RetryCause) {
        let s = &*self.shared;
        if let Some(b) = &s.budget {
            b.refund(cause);
        }
        s.counters.retries.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for Attempts {
    /// A retry still waiting for its backoff when the request is dropped was never made.
    fn drop(&mut self) {
        if let Granted::Waiting(cause) = self.retry {
            self.take_back(cause);
        }
    }
}

/// `max_attempts` in `[1, MAX_ATTEMPTS]`.
pub(crate) fn check_attempts(n: u32) -> Result<(), ConfigError> {
    if !(1..=MAX_ATTEMPTS).contains(&n) {
        return Err(ConfigError::new(
            "max_attempts",
            n,
            format!("in [1, {MAX_ATTEMPTS}]"),
        ));
    }
    Ok(())
}

/// Builds a [`RetryPolicy`], checking every value.
#[derive(Debug)]
pub struct RetryPolicyBuilder<P = RetryOnError> {
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    jitter: Jitter,
    retry_timeouts: bool,
    budget: Option<Arc<dyn RetryBudget>>,
    seed: Option<u64>,
    predicate: P,
}

impl<P> RetryPolicyBuilder<P> {
    /// Attempts per request, the first included, in `[1, 100]`. Default 3.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n;
        self
    }

    /// The first backoff's ceiling, in `(0, 1h]`. Default 100 ms.
    pub fn base_delay(mut self, d: Duration) -> Self {
        self.base_delay = d;
        self
    }

    /// The largest backoff, in `[base_delay, 1d]`. Default 20 s.
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// The jitter. Default [`Jitter::Full`].
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Whether a timeout is retried (charged as a timeout by the budget), whatever the
    /// predicate says. Default true.
    pub fn retry_timeouts(mut self, yes: bool) -> Self {
        self.retry_timeouts = yes;
        self
    }

    /// A budget shared with the other policies that call the same dependency.
    pub fn budget<B: RetryBudget>(mut self, budget: Arc<B>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Seeds the jitter's random generator, for reproducible delays. Default: from the OS.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The predicate deciding which results are retried.
    pub fn retry_if<Q>(self, predicate: Q) -> RetryPolicyBuilder<Q> {
        RetryPolicyBuilder {
            max_attempts: self.max_attempts,
            base_delay: self.base_delay,
            max_delay: self.max_delay,
            jitter: self.jitter,
            retry_timeouts: self.retry_timeouts,
            budget: self.budget,
            seed: self.seed,
            predicate,
        }
    }

    /// A budget already shared as a trait object: one built from a
    /// [`BudgetConfig`](super::BudgetConfig), or another policy's
    /// ([`RetryPolicy::budget`]).
    pub fn shared_budget(mut self, budget: Arc<dyn RetryBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    /// The policy.
    pub fn build(self) -> Result<RetryPolicy<P>, ConfigError> {
        check_attempts(self.max_attempts)?;
        let backoff = Backoff::new(self.base_delay, self.max_delay, self.jitter)?;
        let rng = match self.seed {
            Some(s) => Pcg64Mcg::seed_from_u64(s),
            None => Pcg64Mcg::from_os_rng(),
        };
        Ok(RetryPolicy {
            shared: Arc::new(Shared {
                max_attempts: self.max_attempts,
                backoff,
                retry_timeouts: self.retry_timeouts,
                budget: self.budget,
                rng: Mutex::new(rng),
                counters: Counters::default(),
            }),
            predicate: self.predicate,
        })
    }
}
