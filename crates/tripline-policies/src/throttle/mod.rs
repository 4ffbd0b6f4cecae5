//! Client-side adaptive throttling, as in the Google SRE book ("Handling Overload").
//!
//! # Why throttle in the client?
//!
//! A backend that rejects a request still pays for it: reading it, deciding, answering. When
//! it is overloaded, rejections alone can consume it. Adaptive throttling moves the rejection
//! into the client: each client compares, over the last two minutes, the *requests* it
//! attempted with the requests the backend *accepted*, and once requests exceed `K` times
//! accepts it rejects new requests locally, before they cost the backend anything, with
//! probability
//!
//! ```text
//! max(0, (requests − K × accepts) / (requests + 1))
//! ```
//!
//! Unlike a breaker, which is modal (send everything, or almost nothing), the throttle degrades
//! smoothly in proportion to the failure rate, and it never stops sending entirely: the
//! requests that still go out keep measuring the backend. With `K = 2` (the book's value) the
//! client lets through about twice what the backend accepts, spending some load to detect
//! recovery quickly; a `K` closer to 1 is more aggressive.
//!
//! Requests are counted when they are attempted, rejected ones included (the book's
//! definition), so a backend that stops accepting drives the probability up even while calls
//! are still in flight. A response counts as accepted unless it is classified as a failure (an
//! error, a timeout, a 5xx or 429): an ignored result such as a 404 was accepted by the backend.
//! A call that never left the process (refused by a local policy further in) is taken back with
//! [`ThrottleTicket::not_sent`].
//!
//! A call cancelled before its answer (the caller gave up, a `select!` took another branch, a
//! hedged request lost the race) is taken back too: it counts neither as a request nor as an
//! accept. Counting it as "not accepted" would make a client that hedges or cancels often
//! throttle itself against a healthy backend; counting it as accepted would hide a backend
//! that hangs. A hanging backend is seen through the timeout *inside* the throttle, whose
//! expiry is a failure (the [pipeline](crate::pipeline) always puts its timeout there; with
//! tower, put `TimeoutLayer` inside `ThrottleLayer`), not through callers giving up.
//!
//! The window is a ring of buckets (2 minutes in 1 s buckets by default), so old history ages
//! out smoothly. Time comes from an injected [`Clock`] and the draw from an injected random
//! generator, so tests can check the formula exactly.
//!
//! ```
//! use rand::SeedableRng;
//! use tripline::{ManualClock, Outcome};
//! use tripline_policies::throttle::{Throttle, ThrottleConfig};
//!
//! let throttle = Throttle::with_clock_and_rng(
//!     ThrottleConfig::default(),
//!     ManualClock::new(),
//!     rand_pcg::Pcg64Mcg::seed_from_u64(1),
//! );
//! // The backend accepts nothing: requests pile up, accepts stay at zero.
//! for _ in 0..9 {
//!     if let Ok(ticket) = throttle.try_acquire() {
//!         ticket.record(Outcome::Failure);
//!     }
//! }
//! assert_eq!(throttle.probability(), 9.0 / 10.0); // (9 − 2 × 0) / (9 + 1)
//! ```

pub mod error;
#[cfg(feature = "tower")]
pub mod future;
#[cfg(feature = "tower")]
mod layer;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::RngCore;
use tripline::{Clock, ConfigError, MonotonicClock, Outcome};

use crate::draws::Draws;
use crate::window::Buckets;
pub use error::Throttled;
#[cfg(feature = "tower")]
pub use layer::ThrottleLayer;

const REQUESTS: usize = 0;
const ACCEPTS: usize = 1;

/// The settings of a [`Throttle`]: the window and `K`. Defaults: 2 minutes in 1 s buckets,
/// `K = 2`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ThrottleConfig {
    window: Duration,
    bucket: Duration,
    k: f64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(120),
            bucket: Duration::from_secs(1),
            k: 2.0,
        }
    }
}

impl ThrottleConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> ThrottleConfigBuilder {
        ThrottleConfigBuilder(Self::default())
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The multiplier `K`.
    pub fn k(&self) -> f64 {
        self.k
    }
}

/// Builds a [`ThrottleConfig`], checking every value.
#[derive(Clone, Copy, Debug)]
pub struct ThrottleConfigBuilder(ThrottleConfig);

impl ThrottleConfigBuilder {
    /// The window's length and its bucket width: `bucket` in `[1ms, window]`, `window` a whole
    /// number of buckets, at most 3600 of them. Default 2 minutes in 1 s buckets.
    pub fn window(mut self, window: Duration, bucket: Duration) -> Self {
        self.0.window = window;
        self.0.bucket = bucket;
        self
    }

    /// The multiplier `K`, in `[1, 100]`. Default 2.
    pub fn k(mut self, k: f64) -> Self {
        self.0.k = k;
        self
    }

    /// The configuration.
    ///
    /// ```
    /// use tripline_policies::throttle::ThrottleConfig;
    ///
    /// let err = ThrottleConfig::builder().k(0.5).build().unwrap_err();
    /// assert_eq!(err.to_string(), "k must be in [1, 100], got 0.5");
    /// ```
    pub fn build(self) -> Result<ThrottleConfig, ConfigError> {
        let c = self.0;
        crate::check_window("window", c.window, c.bucket)?;
        if !(1.0..=100.0).contains(&c.k) {
            return Err(ConfigError::new("k", c.k, "in [1, 100]"));
        }
        Ok(c)
    }
}

struct Inner {
    config: ThrottleConfig,
    /// K exactly, as `k_num / 2^k_shift` (every f64 in [1, 100] is such a fraction).
    k_num: i128,
    k_shift: u32,
    /// Guards the requests and accepts per bucket. Never run under it: the clock (read before
    /// it is taken) and the generator (drawn after it is released).
    window: Mutex<Buckets>,
    /// The generator, drawn from with no lock held (it may call back in): see `crate::draws`.
    draws: Draws,
    clock: Box<dyn Clock>,
    rejected: std::sync::atomic::AtomicU64,
}

/// An adaptive throttle shared by every call to one backend. Cloning is cheap; clones share
/// the window. See the [module docs](self).
#[derive(Clone)]
pub struct Throttle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (requests, accepts) = self.counts();
        f.debug_struct("Throttle")
            .field("config", &self.inner.config)
            .field("requests", &requests)
            .field("accepts", &accepts)
            .finish_non_exhaustive()
    }
}

impl Default for Throttle {
    /// A throttle with the default settings.
    fn default() -> Self {
        Self::new(ThrottleConfig::default())
    }
}

impl Throttle {
    /// A throttle on the production clock, with a random generator seeded by the OS.
    pub fn new(config: ThrottleConfig) -> Self {
        use rand::SeedableRng;
        Self::with_clock_and_rng(
            config,
            MonotonicClock::new(),
            rand_pcg::Pcg64Mcg::from_os_rng(),
        )
    }

    /// A throttle on `clock`, drawing from `rng` (seed it for reproducible runs). Neither runs
    /// under a lock of the throttle, so either may call it; a request decided while the
    /// generator is in use (by another thread, or from inside it) draws from the throttle's
    /// own spare stream instead of waiting for it.
    pub fn with_clock_and_rng(
        config: ThrottleConfig,
        clock: impl Clock,
        rng: impl RngCore + Send + 'static,
    ) -> Self {
        let buckets = (config.window.as_nanos() / config.bucket.as_nanos().max(1)) as u32;
        let (k_num, k_shift) = exact_fraction(config.k);
        Self {
            inner: Arc::new(Inner {
                config,
                k_num,
                k_shift,
                window: Mutex::new(Buckets::new(config.bucket, buckets)),
                draws: Draws::new(rng),
                clock: Box::new(clock),
                rejected: Default::default(),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> ThrottleConfig {
        self.inner.config
    }

    /// Asks to send one request. The request is counted now, whatever the answer. With the
    /// window's `requests` and `accepts` (this request not included), it is refused with
    /// probability `max(0, (requests − K × accepts) / (requests + 1))`: the draw `u`, uniform in
    /// `[0, 1)` from 32 random bits, refuses when `u` is below it, compared exactly in integers.
    /// No number is drawn while the probability is zero.
    pub fn try_acquire(&self) -> Result<ThrottleTicket, Throttled> {
        let i = &*self.inner;
        let now = i.clock.now();
        let (epoch, [requests, accepts]) = {
            let mut w = crate::lock(&i.window);
            let totals = w.totals(now);
            (w.add(now, REQUESTS, 1), totals)
        };
        let (num, den) = self.ratio(requests, accepts);
        if num > 0 {
            let u = i128::from(i.draws.with(|rng| rng.next_u32()));
            if u * den < num << 32 {
                i.rejected
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Err(Throttled {
                    probability: num as f64 / den as f64,
                });
            }
        }
        Ok(ThrottleTicket {
            throttle: self.clone(),
            epoch,
            settled: false,
        })
    }

    /// `(numerator, denominator)` of the probability, exactly: `(r·2^s − m·a, (r + 1)·2^s)`
    /// for K = m / 2^s. Windows past 2^38 requests (far beyond any real one) are scaled down
    /// first, keeping the share of accepts, so that the products fit.
    fn ratio(&self, requests: i64, accepts: i64) -> (i128, i128) {
        let (mut r, mut a) = (requests.max(0), accepts.max(0));
        let excess = (64 - r.leading_zeros()).saturating_sub(38);
        r >>= excess;
        a >>= excess;
        let (r, a) = (i128::from(r), i128::from(a));
        let s = self.inner.k_shift;
        ((r << s) - self.inner.k_num * a, (r + 1) << s)
    }

    /// The probability that a request attempted now is refused.
    pub fn probability(&self) -> f64 {
        let (requests, accepts) = self.counts();
        let (num, den) = self.ratio(requests as i64, accepts as i64);
        if num <= 0 {
            0.0
        } else {
            num as f64 / den as f64
        }
    }

    /// `(requests, accepts)` in the window now.
    pub fn counts(&self) -> (u64, u64) {
        let now = self.inner.clock.now();
        let [r, a] = crate::lock(&self.inner.window).totals(now);
        (r.max(0) as u64, a.max(0) as u64)
    }

    /// Requests refused locally so far.
    pub fn rejected(&self) -> u64 {
        self.inner
            .rejected
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A request the throttle let through. Report the backend's answer with
/// [`record`](Self::record). A ticket dropped without one (the caller gave up, a hedged call
/// lost the race) is taken back as [`not_sent`](Self::not_sent): a cancelled call says nothing
/// about whether the backend would have accepted it.
#[must_use = "record whether the backend accepted the request"]
#[derive(Debug)]
pub struct ThrottleTicket {
    throttle: Throttle,
    epoch: u64,
    settled: bool,
}

impl ThrottleTicket {
    /// Reports the answer: a success or an ignored result (the backend took the request and
    /// answered, even with a 404) is an accept; a failure (an error, a timeout, a 5xx, a 429)
    /// is not.
    pub fn record(mut self, outcome: Outcome) {
        self.settled = true;
        if outcome != Outcome::Failure {
            let i = &*self.throttle.inner;
            let now = i.clock.now();
            crate::lock(&i.window).add(now, ACCEPTS, 1);
        }
    }

    /// The request never left the process (a local policy further in refused it): it is taken
    /// back out of the window's requests, if its bucket is still in the window.
    pub fn not_sent(mut self) {
        self.take_back();
    }

    fn take_back(&mut self) {
        self.settled = true;
        let i = &*self.throttle.inner;
        let now = i.clock.now();
        crate::lock(&i.window).add_at(now, self.epoch, REQUESTS, -1);
    }
}

impl Drop for ThrottleTicket {
    fn drop(&mut self) {
        if !self.settled {
            self.take_back();
        }
    }
}

#[cfg(feature = "tower")]
mod service {
    use std::task::{Context, Poll};

    use tower_service::Service;
    use tripline::{Classify, ResultClassifier};

    use super::Throttle;
    use super::future::ResponseFuture;
    use crate::BoxError;

    /// A service behind an adaptive [`Throttle`]: each call is counted as a request, refused
    /// locally with the throttle's probability (a [`Throttled`](super::Throttled) error,
    /// without calling the inner service), and its result classified with `K` to count
    /// accepts. Made by [`ThrottleLayer`](super::ThrottleLayer).
    ///
    /// Errors from local policies further in (a breaker's rejection, a full bulkhead, the
    /// gate) are taken back as [not sent](super::ThrottleTicket::not_sent). Readiness is the
    /// inner service's.
    #[derive(Clone, Debug)]
    pub struct ThrottleService<S, K = ResultClassifier> {
        inner: S,
        throttle: Throttle,
        classifier: K,
    }

    impl<S, K> ThrottleService<S, K> {
        /// `inner` behind `throttle`, with `classifier` deciding what counts as accepted.
        pub const fn new(inner: S, throttle: Throttle, classifier: K) -> Self {
            Self {
                inner,
                throttle,
                classifier,
            }
        }

        /// The throttle.
        pub fn throttle(&self) -> &Throttle {
            &self.throttle
        }

        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// The inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    }

    impl<S, K, Req> Service<Req> for ThrottleService<S, K>
    where
        S: Service<Req>,
        S::Error: Into<BoxError>,
        K: Classify<S::Response, BoxError> + Clone,
    {
        type Response = S::Response;
        type Error = BoxError;
        type Future = ResponseFuture<S::Future, K>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            self.inner.poll_ready(cx).map_err(Into::into)
        }

        fn call(&mut self, req: Req) -> Self::Future {
            match self.throttle.try_acquire() {
                Ok(ticket) => {
                    ResponseFuture::called(self.inner.call(req), ticket, self.classifier.clone())
                }
                Err(t) => ResponseFuture::throttled(t),
            }
        }
    }
}

#[cfg(feature = "tower")]
pub use service::ThrottleService;

/// A finite `k >= 1` as `(m, s)` with `k = m / 2^s` exactly (an f64 is a 53-bit integer times
/// a power of two); `s` is at most 52 for the `k` in [1, 100] the configuration allows.
fn exact_fraction(k: f64) -> (i128, u32) {
    let bits = k.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32 - 1075;
    let mut m = i128::from((bits & ((1u64 << 52) - 1)) | (1u64 << 52));
    if exp >= 0 {
        return (m << exp, 0);
    }
    let mut s = exp.unsigned_abs();
    let tz = m.trailing_zeros().min(s);
    m >>= tz;
    s -= tz;
    (m, s)
}

#[cfg(test)]
mod tests {
    use super::exact_fraction;

    #[test]
    fn k_is_kept_exactly() {
        for k in [1.0, 1.0004, 1.5, 2.0, 3.3, 99.99, 100.0] {
            let (m, s) = exact_fraction(k);
            assert_eq!(m as f64 / 2f64.powi(s as i32), k, "{k}");
            assert!(s <= 52);
        }
        assert_eq!(exact_fraction(2.0), (2, 0));
        assert_eq!(exact_fraction(1.5), (3, 1));
    }
}
