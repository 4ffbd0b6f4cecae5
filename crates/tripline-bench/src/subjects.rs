//! The breakers under test, built the same way in every benchmark.
//!
//! Closed subjects never trip under a stream of successes. Open subjects are tripped with a
//! wait far longer than any run, so every call is rejected for the whole measurement.

use std::time::Duration;

use failsafe::{CircuitBreaker as _, backoff, failure_policy};
use recloser::Recloser;
use tripline::{BreakerConfig, CircuitBreaker, Clock, ManualClock, MonotonicClock};

/// An open wait longer than any benchmark.
pub const LONG_WAIT: Duration = Duration::from_secs(3600);

/// The size of the count windows (tripline) and ring buffers (recloser).
pub const COUNT_WINDOW: u32 = 100;

/// The time window's length and bucket: 10 s in 1 s buckets.
pub const TIME_WINDOW: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(1));

/// Tripline with a count window of 100 on the production clock `CircuitBreaker::new` picks (the
/// coarse one for this configuration, whose shortest duration is the 60 s slow-call duration).
/// `in_flight` sets `count_in_flight_as_slow` (on by default).
pub fn tripline_count(in_flight: bool) -> CircuitBreaker {
    CircuitBreaker::new("bench", count_config(in_flight))
}

/// [`tripline_count`] on the precise clock (a time-stamp-counter read per reading), as every
/// breaker read before the default clock followed the configuration.
pub fn tripline_count_precise(in_flight: bool) -> CircuitBreaker {
    CircuitBreaker::with_clock("bench", count_config(in_flight), MonotonicClock::new())
}

/// Tripline judged by its failure rate alone (the slow-call rule off): recloser's semantics.
/// A count window then reads no clock on its closed path.
pub fn tripline_count_failure_rate_only() -> CircuitBreaker {
    let config = count_config(false)
        .to_builder()
        .slow_call_rule(false)
        .build()
        .expect("valid");
    CircuitBreaker::new("bench", config)
}

/// [`tripline_count`] on a [`ManualClock`], which costs one atomic load per reading: the
/// breaker's own work without the clock's.
pub fn tripline_count_manual(in_flight: bool) -> CircuitBreaker<ManualClock> {
    CircuitBreaker::with_clock("bench", count_config(in_flight), ManualClock::new())
}

/// [`tripline_count`] (in-flight counting on) whose window also keeps call durations
/// (`call_durations`), and, with `tuned`, lumping and failure-kind weights set (which only
/// failures read): what the tuning features cost when they are on.
pub fn tripline_count_durations(tuned: bool) -> CircuitBreaker {
    let mut b = count_config(true).to_builder().call_durations(true);
    if tuned {
        b = b
            .lumping_interval(std::time::Duration::from_millis(10))
            .failure_kind_weight(tripline::FailureKind::RateLimited, 0);
    }
    CircuitBreaker::new("bench", b.build().expect("valid"))
}

/// [`tripline_count`] over `stripes` writer stripes: each thread keeps its fast successes in
/// its stripe and puts them in the shared ring by batches.
pub fn tripline_count_striped(stripes: u32, in_flight: bool) -> CircuitBreaker {
    let config = count_config(in_flight)
        .to_builder()
        .stripes(stripes)
        .build()
        .expect("valid");
    CircuitBreaker::new("bench", config)
}

/// Tripline with a time window of 10 s in 1 s buckets over `stripes` writer stripes.
pub fn tripline_time(stripes: u32, in_flight: bool) -> CircuitBreaker {
    CircuitBreaker::new("bench", time_config(stripes, in_flight))
}

/// The count-window configuration: window of 100, defaults otherwise.
pub fn count_config(in_flight: bool) -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(COUNT_WINDOW)
        .count_in_flight_as_slow(in_flight)
        .open_duration(LONG_WAIT)
        .build()
        .expect("valid count-window configuration")
}

/// The time-window configuration: 10 s in 1 s buckets, `stripes` stripes, defaults otherwise.
pub fn time_config(stripes: u32, in_flight: bool) -> BreakerConfig {
    BreakerConfig::builder()
        .time_window(TIME_WINDOW.0, TIME_WINDOW.1)
        .stripes(stripes)
        .count_in_flight_as_slow(in_flight)
        .open_duration(LONG_WAIT)
        .build()
        .expect("valid time-window configuration")
}

/// A tripline breaker tripped to Open (by [`CircuitBreaker::trip`]) with an open wait of an
/// hour: every acquire is rejected by the Open branch (coarse clock read, wait check).
pub fn tripline_open() -> CircuitBreaker {
    let b = tripline_count(true);
    b.trip();
    b
}

/// [`tripline_open`] named with a `String`, so each rejection clones a shared (`Arc`) name
/// instead of a `&'static str`.
pub fn tripline_open_owned_name() -> CircuitBreaker {
    let b = CircuitBreaker::new(String::from("bench"), count_config(true));
    b.trip();
    b
}

/// A tripline breaker forced open by the operator (kill switch): rejected without a clock
/// comparison.
pub fn tripline_forced_open() -> CircuitBreaker {
    let b = tripline_count(true);
    b.force_open();
    b
}

/// Builds a tripline breaker of either window on any clock (for the memory figures).
pub fn tripline_with<C: Clock>(
    config: impl Into<std::sync::Arc<BreakerConfig>>,
    clock: C,
) -> CircuitBreaker<C> {
    CircuitBreaker::with_clock("bench", config, clock)
}

/// The production clock, for [`tripline_with`].
pub fn monotonic() -> MonotonicClock {
    MonotonicClock::new()
}

/// Recloser with its defaults: a closed ring buffer of 100, like tripline's count window.
pub fn recloser_closed() -> Recloser {
    Recloser::custom()
        .closed_len(COUNT_WINDOW as usize)
        .open_wait(LONG_WAIT)
        .build()
}

/// Recloser tripped open: a ring of 1, two failures, and an hour's wait.
pub fn recloser_open() -> Recloser {
    let r = Recloser::custom()
        .closed_len(1)
        .open_wait(LONG_WAIT)
        .build();
    for _ in 0..2 {
        let _ = r.call(|| Err::<(), ()>(()));
    }
    assert!(
        matches!(r.call(|| Ok::<(), ()>(())), Err(recloser::Error::Rejected)),
        "recloser should be open"
    );
    r
}

/// A recloser that goes Closed → Open → HalfOpen → Closed every four calls (rings of 1, no
/// open wait), for the transition (RSS) check.
pub fn recloser_cycling() -> Recloser {
    Recloser::custom()
        .closed_len(1)
        .half_open_len(1)
        .open_wait(Duration::ZERO)
        .build()
}

/// Failsafe's default breaker (`Config::new()`: success rate over a time window, or
/// consecutive failures, with jittered backoff).
pub fn failsafe_closed() -> impl failsafe::CircuitBreaker + Send + Sync {
    failsafe::Config::new().build()
}

/// Failsafe tripped open by a `consecutive_failures(1, constant(1 h))` policy.
pub fn failsafe_open() -> impl failsafe::CircuitBreaker + Send + Sync {
    let cb = failsafe::Config::new()
        .failure_policy(failure_policy::consecutive_failures(
            1,
            backoff::constant(LONG_WAIT),
        ))
        .build();
    let _ = cb.call(|| Err::<(), ()>(()));
    assert!(
        matches!(cb.call(|| Ok::<(), ()>(())), Err(failsafe::Error::Rejected)),
        "failsafe should be open"
    );
    cb
}

/// A failsafe breaker that trips on every failure and may probe at once, for the transition
/// (RSS) check: a failure opens it, the next call moves it to HalfOpen and its success closes
/// it.
pub fn failsafe_cycling() -> impl failsafe::CircuitBreaker + Send + Sync {
    failsafe::Config::new()
        .failure_policy(failure_policy::consecutive_failures(
            1,
            backoff::constant(Duration::ZERO),
        ))
        .build()
}

/// A [`Clock`] that holds its own `quanta::Clock` and reads the TSC through it, skipping the
/// thread-local mock-clock lookup that `quanta::Instant::now` makes on every call. Not what
/// tripline ships: it shows what that lookup costs on the closed path.
#[derive(Clone, Debug)]
pub struct HeldQuantaClock {
    clock: quanta::Clock,
    origin: u64,
}

impl HeldQuantaClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        Self { clock, origin }
    }
}

impl Default for HeldQuantaClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for HeldQuantaClock {
    #[inline]
    fn now(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

/// [`tripline_count`] on [`MonotonicClock::coarse`] (millisecond call durations, one atomic
/// load per reading; starts quanta's upkeep thread).
pub fn tripline_count_coarse(in_flight: bool) -> CircuitBreaker<MonotonicClock> {
    CircuitBreaker::with_clock("bench", count_config(in_flight), MonotonicClock::coarse())
}

/// [`tripline_count`] on a [`HeldQuantaClock`].
pub fn tripline_count_held(in_flight: bool) -> CircuitBreaker<HeldQuantaClock> {
    CircuitBreaker::with_clock("bench", count_config(in_flight), HeldQuantaClock::new())
}
