//! Async execution on tokio: the timeout inside the breaker, a fallback helper, and the timer
//! task that drives automatic transitions.

use std::future::Future;
use std::time::Duration;

use super::CircuitBreaker;
use crate::clock::Clock;
use crate::error::CallError;
use crate::outcome::{Classification, Classify, FailureKind, ResultClassifier};

impl<C: Clock> CircuitBreaker<C> {
    /// Runs the future `f` makes through the breaker, with `timeout` inside the breaker: every
    /// admitted call settles, and a timeout counts as a failure of kind
    /// [`FailureKind::Timeout`]. `f` is not called when the
    /// breaker rejects. If the returned future is dropped mid-call, the permit is abandoned
    /// (it frees its probe slot and counts as neither success nor failure).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use tripline::{BreakerConfig, CallError, CircuitBreaker, TokioClock};
    /// use std::time::Duration;
    ///
    /// let breaker = CircuitBreaker::with_clock("vendor", BreakerConfig::default(), TokioClock::new());
    /// let slow = breaker
    ///     .call_async(Some(Duration::from_millis(2500)), || async {
    ///         tokio::time::sleep(Duration::from_secs(10)).await;
    ///         Ok::<_, std::io::Error>("late")
    ///     })
    ///     .await;
    /// assert!(matches!(slow, Err(CallError::Timeout(_))));
    /// assert_eq!(breaker.metrics().failed_calls, 1);
    /// # }
    /// ```
    pub async fn call_async<T, E, F, Fut>(
        &self,
        timeout: Option<Duration>,
        f: F,
    ) -> Result<T, CallError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call_async_classified(timeout, ResultClassifier, f)
            .await
    }

    /// [`call_async`](Self::call_async) with a classifier.
    pub async fn call_async_classified<T, E, K, F, Fut>(
        &self,
        timeout: Option<Duration>,
        classify: K,
        f: F,
    ) -> Result<T, CallError<E>>
    where
        K: Classify<T, E>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let permit = self.try_acquire().map_err(CallError::Rejected)?;
        let result = match timeout {
            Some(t) => match tokio::time::timeout(t, f()).await {
                Ok(r) => r,
                Err(_) => {
                    // The breaker's own timeout: a failure of kind Timeout (its weight, and
                    // `failures_by_kind`, apply as to a classifier's timeouts).
                    let _ = permit.record_classified(Classification::failure(FailureKind::Timeout));
                    return Err(CallError::Timeout(t));
                }
            },
            None => f().await,
        };
        let _ = permit.record_classified(classify.classify(&result));
        result.map_err(CallError::Failed)
    }

    /// [`call_async`](Self::call_async), handing a rejection, a timeout or an error to
    /// `fallback`, which produces the caller's answer (a cached value, a default).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use tripline::{BreakerConfig, CircuitBreaker};
    ///
    /// let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
    /// breaker.force_open();
    /// let card = breaker
    ///     .call_async_or_else(None, || async { Ok::<_, ()>("full card") }, |_| async { "cached card" })
    ///     .await;
    /// assert_eq!(card, "cached card");
    /// # }
    /// ```
    pub async fn call_async_or_else<T, E, F, Fut, G, GFut>(
        &self,
        timeout: Option<Duration>,
        f: F,
        fallback: G,
    ) -> T
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        G: FnOnce(CallError<E>) -> GFut,
        GFut: Future<Output = T>,
    {
        match self.call_async(timeout, f).await {
            Ok(v) => v,
            Err(e) => fallback(e).await,
        }
    }

    /// Drives the breaker's timers forever (see [`tick`](Self::tick)): spawn it as a task
    /// to move Open to HalfOpen on schedule without waiting for traffic.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use tripline::{BreakerConfig, CircuitBreaker, State, TokioClock};
    /// use std::time::Duration;
    ///
    /// let config = BreakerConfig::builder().automatic_transition(true)
    ///     .open_duration(Duration::from_secs(5)).build().unwrap();
    /// let breaker = CircuitBreaker::with_clock("db", config, TokioClock::new());
    /// let timer = tokio::spawn({ let b = breaker.clone(); async move { b.run_timer().await } });
    /// breaker.trip();
    /// tokio::time::sleep(Duration::from_secs(6)).await;
    /// assert_eq!(breaker.state(), State::HalfOpen);
    /// timer.abort();
    /// # }
    /// ```
    pub async fn run_timer(&self) {
        loop {
            let notified = self.inner.cold().notify.notified();
            match self.tick() {
                Some(d) => {
                    let _ = tokio::time::timeout(d.max(Duration::from_millis(1)), notified).await;
                }
                None => notified.await,
            }
        }
    }
}
