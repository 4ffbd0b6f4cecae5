//! Time, injected.
//!
//! Every time the breaker reads (window buckets, the open wait, half-open deadlines, probe
//! leases, call durations) comes from a [`Clock`]. Production code uses [`MonotonicClock`];
//! tests and the simulator use [`ManualClock`], so no test sleeps to wait for a state;
//! async code under paused tokio time uses `TokioClock` (feature `tokio`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A monotonic clock reading nanoseconds since an origin fixed for the clock's lifetime.
///
/// ```
/// use tripline::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(clock.now(), 5_000_000);
/// ```
pub trait Clock: Send + Sync + 'static {
    /// Nanoseconds since the clock's origin. Never decreases.
    fn now(&self) -> u64;

    /// A cheaper reading that may lag [`Clock::now`] slightly (up to the refresh interval of a
    /// coarse clock). The breaker uses it only where a little lag is harmless: deciding that an
    /// open breaker still rejects. Defaults to [`Clock::now`].
    fn recent(&self) -> u64 {
        self.now()
    }

    /// How coarse [`Clock::now`]'s readings are: the most a reading may lag the true time
    /// (zero, the default, for a clock that reads as precisely as it can). A breaker whose
    /// configuration compares call times against durations this clock cannot resolve (see
    /// [`MonotonicClock::for_config`]) reads [`Clock::precise_now`] instead.
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// A reading on the same origin as [`Clock::now`], as precise as the clock can make it
    /// (the default is [`Clock::now`]). Never decreases, and never less than a `now()` read
    /// before it.
    fn precise_now(&self) -> u64 {
        self.now()
    }
}

/// The production clock: `quanta`'s TSC-based monotonic clock.
///
/// [`Clock::now`] reads the time-stamp counter through one process-wide `quanta::Clock` and
/// scales the delta from the origin, with no thread-local lookup and no `Duration`
/// conversion. Every `MonotonicClock` of a process shares that clock and its origin (the
/// first one's creation), so a clock costs 16 bytes in each breaker that holds it.
/// [`Clock::recent`] reads quanta's coarse clock, which costs about a nanosecond when a
/// `quanta::Upkeep` thread is running, and falls back to [`Clock::now`] when none is.
///
/// ```
/// use tripline::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let a = clock.now();
/// assert!(clock.now() >= a);
/// assert!(clock.recent() <= clock.now() + 1_000_000_000);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    base: &'static Base,
}

/// The calibrated clock and the origin every [`MonotonicClock`] of the process reads from, and
/// whether its readings are coarse: two of them, one precise and one coarse, so a clock is one
/// pointer.
#[derive(Debug)]
struct Base {
    clock: quanta::Clock,
    origin_raw: u64,
    origin: quanta::Instant,
    coarse: bool,
}

static BASE: std::sync::OnceLock<Base> = std::sync::OnceLock::new();
static COARSE_BASE: std::sync::OnceLock<Base> = std::sync::OnceLock::new();

/// The process-wide upkeep thread behind [`MonotonicClock::coarse`]; it runs while the process
/// does.
static UPKEEP: std::sync::OnceLock<Option<quanta::Handle>> = std::sync::OnceLock::new();

impl MonotonicClock {
    /// A clock on the process-wide origin (fixed when the first one is made).
    pub fn new() -> Self {
        let base = BASE.get_or_init(|| {
            let clock = quanta::Clock::new();
            let origin_raw = clock.raw();
            let origin = clock.scaled(origin_raw);
            Base {
                clock,
                origin_raw,
                origin,
                coarse: false,
            }
        });
        Self { base }
    }

    /// A clock whose every reading is quanta's coarse time, refreshed each millisecond by one
    /// process-wide background thread (started by the first call). A reading then costs about
    /// a nanosecond instead of a time-stamp-counter read, but call durations are measured to
    /// the millisecond: fine for slow-call thresholds of 100 ms and more, wrong for a
    /// sub-millisecond one. If the thread cannot be started, readings fall back to the precise
    /// clock.
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker, MonotonicClock};
    /// let breaker = CircuitBreaker::with_clock("db", BreakerConfig::default(), MonotonicClock::coarse());
    /// breaker.call(|| Ok::<_, ()>(())).unwrap();
    /// ```
    pub fn coarse() -> Self {
        let running = UPKEEP
            .get_or_init(|| quanta::Upkeep::new(Duration::from_millis(1)).start().ok())
            .is_some();
        let precise = Self::new();
        if !running {
            return precise;
        }
        let base = COARSE_BASE.get_or_init(|| Base {
            clock: precise.base.clock.clone(),
            coarse: true,
            ..*precise.base
        });
        Self { base }
    }
}

impl MonotonicClock {
    /// The clock a breaker built with [`CircuitBreaker::new`](crate::CircuitBreaker::new) reads:
    /// the coarse one (millisecond readings, one load each; see [`coarse`](Self::coarse)) when
    /// every duration the configuration compares call times against is at least 100 ms (so a
    /// reading is off by 1 % at most), or when it times no call at all; the precise one when a
    /// rule needs finer time (a slow-call duration, a time-window bucket, a lumping interval or
    /// a ramp step under 100 ms) or the window keeps call durations.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline::{BreakerConfig, MonotonicClock};
    ///
    /// // The defaults compare durations with 60 s: millisecond readings serve.
    /// assert!(MonotonicClock::for_config(&BreakerConfig::default()).is_coarse()
    ///     || !MonotonicClock::coarse().is_coarse()); // (no upkeep thread: precise everywhere)
    /// let fine = BreakerConfig::builder().slow_call_duration(Duration::from_millis(20)).build()?;
    /// assert!(!MonotonicClock::for_config(&fine).is_coarse());
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn for_config(config: &crate::config::BreakerConfig) -> Self {
        if crate::rules::clock_serves(Duration::from_millis(1), config) {
            Self::coarse()
        } else {
            Self::new()
        }
    }

    /// Whether readings are coarse (millisecond) ones.
    pub fn is_coarse(&self) -> bool {
        self.base.coarse
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

/// A duration in nanoseconds, saturating at `u64::MAX` (about 584 years).
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        if self.base.coarse {
            // Never mixed with precise readings, so it never goes backwards; 0 until the first
            // tick after the origin.
            let r = self.base.clock.recent();
            return if r < self.base.origin {
                0
            } else {
                nanos(r.duration_since(self.base.origin))
            };
        }
        self.precise()
    }

    #[inline]
    fn recent(&self) -> u64 {
        let r = self.base.clock.recent();
        if r < self.base.origin {
            // No upkeep thread (quanta reports 0), or its last tick predates the origin.
            return self.precise();
        }
        nanos(r.duration_since(self.base.origin))
    }

    /// A millisecond for the coarse clock (quanta's upkeep thread refreshes it each
    /// millisecond), zero for the precise one.
    fn resolution(&self) -> Duration {
        if self.base.coarse {
            Duration::from_millis(1)
        } else {
            Duration::ZERO
        }
    }

    /// The time-stamp counter's reading, also for the coarse clock (whose readings lag it by
    /// up to a millisecond, so a precise reading is never less than a coarse one before it).
    #[inline]
    fn precise_now(&self) -> u64 {
        self.precise()
    }
}

impl MonotonicClock {
    #[inline]
    fn precise(&self) -> u64 {
        let b = self.base;
        b.clock.delta_as_nanos(b.origin_raw, b.clock.raw())
    }
}

/// A clock that moves only when told to. Clones share the same time.
///
/// ```
/// use tripline::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let same = clock.clone();
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(same.now(), 1_000_000_000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at time zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by`, saturating at `u64::MAX` nanoseconds (it never wraps
    /// back).
    ///
    /// ```
    /// use tripline::{Clock, ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// clock.set(Duration::from_nanos(u64::MAX - 1));
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(clock.now(), u64::MAX);
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = nanos(by);
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// Sets the clock to `at` since its origin; a time earlier than the current one is ignored,
    /// so the clock stays monotonic.
    pub fn set(&self, at: Duration) {
        self.nanos.fetch_max(nanos(at), Ordering::SeqCst);
    }

    /// The current reading as a duration since the origin.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.now())
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.nanos.load(Ordering::SeqCst)
    }
}

/// A clock on tokio's time, so `tokio::time::pause` and `advance` drive the breaker.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use tripline::{Clock, TokioClock};
/// use std::time::Duration;
///
/// let clock = TokioClock::new();
/// tokio::time::advance(Duration::from_secs(2)).await;
/// assert!(clock.now() >= 2_000_000_000);
/// # }
/// ```
#[cfg(feature = "tokio")]
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// A clock whose origin is tokio's now.
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    fn now(&self) -> u64 {
        nanos(tokio::time::Instant::now().saturating_duration_since(self.origin))
    }
}

impl<C: Clock> Clock for Arc<C> {
    fn now(&self) -> u64 {
        (**self).now()
    }
    fn recent(&self) -> u64 {
        (**self).recent()
    }
    fn resolution(&self) -> std::time::Duration {
        (**self).resolution()
    }
    fn precise_now(&self) -> u64 {
        (**self).precise_now()
    }
}
