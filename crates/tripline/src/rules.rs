//! The breaker's rules, as pure functions over plain values.
//!
//! Every decision a breaker takes is one of the functions below: whether its window trips it,
//! whether a result is worth judging the window for, how a half-open round ends, how long an
//! open period lasts, what share of calls a ramp admits, whether a call in flight is overdue.
//! They take the time as an argument (`now`, in nanoseconds on the breaker's clock), read no
//! clock, touch no atomic, take no lock and allocate nothing: a reader finds "when does it
//! trip" in one screen, and every case below is a doc test.
//!
//! The hosts of the rules call these functions, or are checked against them:
//!
//! * the in-process [`CircuitBreaker`](crate::CircuitBreaker): lock-free atomics that gather a
//!   window, an in-flight count and a probe round, then ask these functions what to do;
//! * `conformance::RulesSubject` (with the `serde` feature): the same functions over
//!   plain values (a ring, a list of buckets), one step at a time. The conformance vectors
//!   run against it, against the in-process breaker and against the Redis store's Lua
//!   functions (a second implementation of these rules that must decide alike), so all three
//!   agree on every vector; beyond the vectors, a property test drives the in-process breaker
//!   and this subject through random configurations and steps and compares every decision
//!   (`tests/rules_differential.rs`);
//! * the simulator (`tripline-sim`), which drives the in-process breaker itself.
//!
//! Rates are compared in integers, in parts per million ([`PPM`]): `bad × 10⁶ ≥ ppm × total`,
//! never in floats, so a 100 % threshold trips when every call is bad and a threshold given as
//! a fraction trips at exactly that fraction ([`ppm_of_percent`]).

use std::time::Duration;

use crate::config::{AfterMaxWait, BreakerConfig, HalfOpenPolicy, RampCurve};
use crate::event::Reason;
use crate::state::State;
use crate::window::WindowSnapshot;

/// Parts per million: the unit of every threshold the rules compare.
pub const PPM: u64 = 1_000_000;

/// A percentage in `(0, 100]` as the threshold in parts per million the rules compare, never
/// rounded against the user: a percentage that is a whole number of ppm (within the
/// rounding of the `f64` it was written as: `33.3` is 333,000) is that number, and any other is
/// rounded down, toward tripping, so that `100 k / n` trips at exactly `k` bad calls of `n`
/// for every `n` up to 1000 (a fraction `k / n` that is not a whole number of ppm is at least
/// `1 / n` ppm away from the next one).
///
/// ```
/// use tripline::rules::{ppm_of_percent, rate_reached};
/// assert_eq!(ppm_of_percent(50.0), 500_000);
/// assert_eq!(ppm_of_percent(33.3), 333_000);
/// // failsafe-go's WithFailureThresholdRatio(2, 3), as the porting guide maps it:
/// let two_thirds = ppm_of_percent(100.0 * 2.0 / 3.0);
/// assert_eq!(two_thirds, 666_666);
/// assert!(rate_reached(2, 3, two_thirds)); // 2 of 3 trips
/// assert!(!rate_reached(1, 3, two_thirds));
/// assert_eq!(ppm_of_percent(100.0), 1_000_000);
/// assert_eq!(ppm_of_percent(1e-9), 1); // a tiny positive threshold stays positive
/// ```
pub fn ppm_of_percent(percent: f64) -> u64 {
    let x = percent * 10_000.0;
    let nearest = x.round();
    let ppm = if (x - nearest).abs() <= x.abs() * 4.0 * f64::EPSILON {
        nearest
    } else {
        x.floor()
    };
    (ppm as u64).clamp(1, PPM)
}

/// Whether `bad` of `total` reaches a threshold of `ppm` parts per million:
/// `bad × 10⁶ ≥ ppm × total`. An empty total reaches any threshold only with nothing bad in
/// it, and the rules never ask about one (see [`minimum_reached`]).
///
/// ```
/// use tripline::rules::rate_reached;
/// assert!(rate_reached(5, 10, 500_000)); // 50 % of 10
/// assert!(!rate_reached(4, 10, 500_000));
/// assert!(rate_reached(10, 10, 1_000_000)); // 100 %: every call
/// assert!(!rate_reached(9, 10, 1_000_000));
/// ```
pub fn rate_reached(bad: u64, total: u64, ppm: u64) -> bool {
    u128::from(bad) * u128::from(PPM) >= u128::from(ppm) * u128::from(total)
}

/// Whether a window of `calls` holds enough calls for its rates to be judged.
///
/// ```
/// use tripline::rules::minimum_reached;
/// assert!(!minimum_reached(19, 20));
/// assert!(minimum_reached(20, 20));
/// assert!(minimum_reached(1, 0)); // a minimum of 0 means 1
/// ```
pub fn minimum_reached(calls: u64, minimum_calls: u64) -> bool {
    calls >= minimum_calls.max(1)
}

/// Whether a call that took `elapsed` nanoseconds is slow: strictly longer than the slow-call
/// duration (`u64::MAX` when the slow-call rule is off, so that no call is).
///
/// ```
/// use tripline::rules::is_slow;
/// assert!(!is_slow(2_000, 2_000));
/// assert!(is_slow(2_001, 2_000));
/// assert!(!is_slow(u64::MAX, u64::MAX));
/// ```
pub fn is_slow(elapsed: u64, slow_nanos: u64) -> bool {
    elapsed > slow_nanos
}

/// What a window is judged by: the two rate thresholds in ppm and the minimum calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// The failure-rate threshold, in ppm.
    pub failure_ppm: u64,
    /// The slow-call-rate threshold, in ppm.
    pub slow_ppm: u64,
    /// Calls a window must hold before its rates are judged.
    pub minimum_calls: u64,
}

impl Thresholds {
    /// The thresholds of `config`.
    ///
    /// ```
    /// use tripline::{BreakerConfig, rules::Thresholds};
    /// let t = Thresholds::of(&BreakerConfig::default());
    /// assert_eq!((t.failure_ppm, t.slow_ppm, t.minimum_calls), (500_000, 1_000_000, 20));
    /// ```
    pub fn of(config: &BreakerConfig) -> Self {
        Self {
            failure_ppm: config.failure_ppm(),
            slow_ppm: config.slow_ppm(),
            minimum_calls: u64::from(config.minimum_calls()),
        }
    }
}

/// The trip rules that fire on a window. A trip names the first of them, in this order: the
/// consecutive-failure rule (with its run), the failure-count-in-time rule (with its count),
/// the failure rate, the slow-call rate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fired {
    /// The run of consecutive failures, when the consecutive-failure rule fired.
    pub consecutive: Option<u64>,
    /// The failures within the failure-count rule's time, when that rule fired
    /// ([`failure_count_fires`]).
    pub failure_count: Option<u64>,
    /// The failure rate reached its threshold (with the minimum calls recorded).
    pub failure_rate: bool,
    /// The slow-call rate (overdue calls in flight included) reached its threshold (with the
    /// minimum calls).
    pub slow_call_rate: bool,
}

impl Fired {
    /// Whether any rule fired: the breaker trips.
    pub fn any(&self) -> bool {
        self.consecutive.is_some()
            || self.failure_count.is_some()
            || self.failure_rate
            || self.slow_call_rate
    }

    /// The reason a trip names: the first rule that fired.
    ///
    /// ```
    /// use tripline::{Reason, rules::Fired};
    /// let f = Fired { consecutive: Some(3), failure_rate: true, ..Fired::default() };
    /// assert_eq!(f.reason(), Some(Reason::ConsecutiveFailures { count: 3 }));
    /// let f = Fired { failure_count: Some(12), failure_rate: true, ..Fired::default() };
    /// assert_eq!(f.reason(), Some(Reason::FailureCount { count: 12 }));
    /// assert_eq!(Fired::default().reason(), None);
    /// ```
    pub fn reason(&self) -> Option<Reason> {
        self.reasons().next()
    }

    /// Every rule that fired, in the order a trip names them.
    pub fn reasons(&self) -> impl Iterator<Item = Reason> + use<> {
        [
            self.consecutive
                .map(|count| Reason::ConsecutiveFailures { count }),
            self.failure_count
                .map(|count| Reason::FailureCount { count }),
            self.failure_rate.then_some(Reason::FailureRate),
            self.slow_call_rate.then_some(Reason::SlowCallRate),
        ]
        .into_iter()
        .flatten()
    }

    /// The rules that fire now and did not in `before`: what a breaker in shadow mode
    /// (MetricsOnly) reports, once each time a rule starts firing.
    ///
    /// ```
    /// use tripline::rules::Fired;
    /// let before = Fired { failure_rate: true, ..Fired::default() };
    /// let now = Fired { failure_rate: true, slow_call_rate: true, ..Fired::default() };
    /// assert_eq!(now.since(before), Fired { slow_call_rate: true, ..Fired::default() });
    /// ```
    pub fn since(&self, before: Fired) -> Fired {
        Fired {
            consecutive: self.consecutive.filter(|_| before.consecutive.is_none()),
            failure_count: self
                .failure_count
                .filter(|_| before.failure_count.is_none()),
            failure_rate: self.failure_rate && !before.failure_rate,
            slow_call_rate: self.slow_call_rate && !before.slow_call_rate,
        }
    }
}

/// Whether a run of `run` consecutive failures fires the consecutive-failure rule of `limit`
/// (`None`: the rule is off).
///
/// ```
/// use tripline::rules::consecutive_fires;
/// assert!(!consecutive_fires(2, Some(3)));
/// assert!(consecutive_fires(3, Some(3)));
/// assert!(!consecutive_fires(100, None));
/// ```
pub fn consecutive_fires(run: u64, limit: Option<u32>) -> bool {
    limit.is_some_and(|l| l != 0 && run >= u64::from(l))
}

/// Whether a failure recorded at `at` counts for the failure-count-in-time rule at `now`: it
/// is at most `within` old (a failure exactly `within` old still counts, as in Semian, whose
/// window drops a time only once `time + error_timeout < now`). A time after `now` (another
/// thread's failure, read a moment later) counts.
///
/// ```
/// use tripline::rules::counts_within;
/// let s = 1_000_000_000;
/// assert!(counts_within(0, 20 * s, 20 * s)); // exactly the timeout: still counts
/// assert!(!counts_within(0, 20 * s, 20 * s + 1)); // older than the timeout
/// assert!(counts_within(5 * s, 20 * s, 4 * s)); // a time just after this reading
/// assert!(counts_within(u64::MAX, 1, 0) && !counts_within(0, 1, u64::MAX)); // no wrap
/// ```
pub fn counts_within(at: u64, within: u64, now: u64) -> bool {
    now.saturating_sub(at) <= within
}

/// The failure-count-in-time rule: the failures of the Closed period recorded at `times`
/// (the last `failures` of them are enough; their order does not matter) that count at `now`
/// ([`counts_within`]); `Some(count)` when they reach the rule's `failures`. `None` also when
/// the rule is off (`rule` is `None`: `(failures, within)` in nanoseconds).
///
/// ```
/// use tripline::rules::failure_count_fires;
/// let s = 1_000_000_000u64;
/// let twelve_in_twenty = Some((12, 20 * s));
/// // Twelve errors, one a second: the twelfth trips.
/// let times: Vec<u64> = (0..12).map(|i| i * s).collect();
/// assert_eq!(failure_count_fires(&times, twelve_in_twenty, 11 * s), Some(12));
/// assert_eq!(failure_count_fires(&times[..11], twelve_in_twenty, 10 * s), None);
/// // The same twelve spread over 22 s: the first has aged out by the twelfth.
/// let spread: Vec<u64> = (0..12).map(|i| i * 2 * s).collect();
/// assert_eq!(failure_count_fires(&spread, twelve_in_twenty, 22 * s), None);
/// assert_eq!(failure_count_fires(&times, None, 11 * s), None); // the rule is off
/// ```
pub fn failure_count_fires(times: &[u64], rule: Option<(u32, u64)>, now: u64) -> Option<u64> {
    let (failures, within) = rule?;
    let n = times
        .iter()
        .filter(|at| counts_within(**at, within, now))
        .count() as u64;
    (failures != 0 && n >= u64::from(failures)).then_some(n)
}

/// The rules that fire on `window`: the failure rate over the recorded calls, the slow-call
/// rate over the recorded calls and the overdue calls in flight (each with the minimum calls
/// reached), and the consecutive-failure rule, whose run `consecutive` is when it fired.
///
/// ```
/// use tripline::WindowSnapshot;
/// use tripline::rules::{Fired, Thresholds, fired};
/// let t = Thresholds { failure_ppm: 500_000, slow_ppm: 1_000_000, minimum_calls: 10 };
/// let w = |calls, failures, slow_calls, in_flight_slow| WindowSnapshot {
///     calls, failures, slow_calls, in_flight_slow,
/// };
/// // Half of 10 failed: the failure rate trips.
/// assert!(fired(&w(10, 5, 0, 0), &t, None).failure_rate);
/// // Half of 8: fewer than the minimum, nothing is judged.
/// assert_eq!(fired(&w(8, 4, 0, 0), &t, None), Fired::default());
/// // Every call slow, counting 2 hung in flight to reach the minimum.
/// assert!(fired(&w(8, 0, 8, 2), &t, None).slow_call_rate);
/// // In-flight calls do not dilute the failure rate: 4 of 8 recorded.
/// assert!(!fired(&w(8, 4, 0, 2), &t, None).failure_rate);
/// ```
pub fn fired(window: &WindowSnapshot, t: &Thresholds, consecutive: Option<u64>) -> Fired {
    let slow_total = window.total();
    Fired {
        consecutive,
        failure_count: None,
        failure_rate: minimum_reached(window.calls, t.minimum_calls)
            && rate_reached(window.failures, window.calls, t.failure_ppm),
        slow_call_rate: minimum_reached(slow_total, t.minimum_calls)
            && rate_reached(
                window.slow_calls.saturating_add(window.in_flight_slow),
                slow_total,
                t.slow_ppm,
            ),
    }
}

/// Whether a recorded result is worth judging the window for. A failure, a slow call or a
/// run that fires the consecutive rule always is. A good result can trip the window only by
/// bringing it to the minimum calls, or once old good results left it, so it is judged only
/// when its window's success gate is open ([`count_success_gate`], [`time_success_gate`]);
/// the gate is asked only for a good result (a time window's gate is won by the first good
/// result past each bucket boundary). In shadow mode (MetricsOnly) every result is judged, so
/// that every rule is reported when it starts firing.
///
/// ```
/// use tripline::rules::result_evaluates;
/// assert!(result_evaluates(true, false, false, || unreachable!())); // a failure
/// assert!(result_evaluates(false, true, false, || unreachable!())); // a slow success
/// assert!(!result_evaluates(false, false, false, || false)); // a success, gate shut
/// assert!(result_evaluates(false, false, false, || true)); // a success, gate open
/// ```
pub fn result_evaluates(
    failure: bool,
    slow: bool,
    consecutive_fired: bool,
    success_gate: impl FnOnce() -> bool,
) -> bool {
    failure || slow || consecutive_fired || success_gate()
}

/// The success gate of a count window: open while the ring is still filling (a good result
/// that replaces an outcome in a full ring cannot raise either rate).
///
/// ```
/// use tripline::rules::count_success_gate;
/// assert!(count_success_gate(true));
/// assert!(!count_success_gate(false));
/// ```
pub fn count_success_gate(filling: bool) -> bool {
    filling
}

/// The success gate of a time window: open while the last evaluation saw fewer than the
/// minimum calls (the good result that brings the window to the minimum must be judged), and
/// otherwise for the first result at or past `next_boundary`, the end of the bucket in which
/// the window was last judged (a window loses calls only when a bucket boundary passes).
///
/// ```
/// use tripline::rules::time_success_gate;
/// let s = 1_000_000_000;
/// assert!(time_success_gate(true, 5 * s / 10, s)); // below the minimum last time
/// assert!(!time_success_gate(false, 5 * s / 10, s)); // within the bucket judged
/// assert!(time_success_gate(false, s, s)); // the first result of the next bucket
/// ```
pub fn time_success_gate(below_minimum: bool, now: u64, next_boundary: u64) -> bool {
    below_minimum || now >= next_boundary
}

/// The results of a half-open round so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundCounts {
    /// Probe results counted (ignored ones are not).
    pub results: u32,
    /// Failed ones among them.
    pub failures: u32,
    /// Slow ones among them (failed or not).
    pub slow: u32,
    /// Good ones: neither failed nor slow.
    pub successes: u32,
}

impl RoundCounts {
    /// The counts with one more result.
    ///
    /// ```
    /// use tripline::rules::RoundCounts;
    /// let c = RoundCounts::default().with(false, true).with(true, false);
    /// assert_eq!((c.results, c.failures, c.slow, c.successes), (2, 1, 1, 0));
    /// ```
    pub fn with(self, failure: bool, slow: bool) -> Self {
        Self {
            results: self.results.saturating_add(1),
            failures: self.failures.saturating_add(u32::from(failure)),
            slow: self.slow.saturating_add(u32::from(slow)),
            successes: self.successes.saturating_add(u32::from(!failure && !slow)),
        }
    }

    /// The reason a verdict names.
    pub fn reason(&self, verdict: Verdict) -> Reason {
        let (probes, failures, slow) = (self.results, self.failures, self.slow);
        match verdict {
            Verdict::Close => Reason::ProbesSucceeded {
                probes,
                failures,
                slow,
            },
            Verdict::Reopen => Reason::ProbesFailed {
                probes,
                failures,
                slow,
            },
        }
    }
}

/// How a half-open round ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The probes proved recovery: to Closed.
    Close,
    /// The probes failed: back to Open.
    Reopen,
}

impl Verdict {
    /// The state the verdict leads to.
    pub fn state(self) -> State {
        match self {
            Verdict::Close => State::Closed,
            Verdict::Reopen => State::Open,
        }
    }
}

/// Whether `failures` or `slow` of `of` probes reach their thresholds.
///
/// ```
/// use tripline::rules::{Thresholds, round_fails};
/// let t = Thresholds { failure_ppm: 500_000, slow_ppm: 1_000_000, minimum_calls: 1 };
/// assert!(round_fails(5, 0, 10, &t));
/// assert!(!round_fails(4, 9, 10, &t));
/// assert!(round_fails(0, 10, 10, &t));
/// ```
pub fn round_fails(failures: u32, slow: u32, of: u32, t: &Thresholds) -> bool {
    let of = u64::from(of);
    rate_reached(u64::from(failures), of, t.failure_ppm)
        || rate_reached(u64::from(slow), of, t.slow_ppm)
}

/// The results that count toward a round of `k`: every result for all-probes (the round
/// judges `k` results), the good ones for consecutive (it needs `k` good ones in a row).
pub fn settled(policy: HalfOpenPolicy, c: &RoundCounts) -> u32 {
    match policy {
        HalfOpenPolicy::AllProbes => c.results,
        HalfOpenPolicy::Consecutive => c.successes,
    }
}

/// Whether a round of `k` with `in_flight` probes out and `c` so far admits one more probe:
/// at most `k` probes in flight and settled together.
///
/// ```
/// use tripline::HalfOpenPolicy;
/// use tripline::rules::{RoundCounts, admits_probe};
/// let none = RoundCounts::default();
/// assert!(admits_probe(HalfOpenPolicy::AllProbes, 3, 2, &none));
/// assert!(!admits_probe(HalfOpenPolicy::AllProbes, 3, 3, &none));
/// let one = none.with(false, false);
/// assert!(!admits_probe(HalfOpenPolicy::AllProbes, 3, 2, &one));
/// ```
pub fn admits_probe(policy: HalfOpenPolicy, k: u32, in_flight: u32, c: &RoundCounts) -> bool {
    in_flight.saturating_add(settled(policy, c)) < k
}

/// The verdict after a probe's result (already in `c`; `bad` says whether it failed or was
/// slow), for a round of `k`:
///
/// * all-probes: reopen as soon as the failures (or slow probes) reach the threshold over the
///   `k` probes (no later result could let it close), close once `k` results are in;
/// * consecutive: reopen on the first failed or slow probe, close after `k` good ones.
///
/// ```
/// use tripline::HalfOpenPolicy::{AllProbes, Consecutive};
/// use tripline::rules::{RoundCounts, Thresholds, Verdict, probe_verdict};
/// let t = Thresholds { failure_ppm: 500_000, slow_ppm: 1_000_000, minimum_calls: 1 };
/// let good = RoundCounts::default().with(false, false);
/// assert_eq!(probe_verdict(AllProbes, 3, &good, false, &t), None);
/// let two_bad = good.with(true, false).with(true, false); // 2 of 3 reach 50 %
/// assert_eq!(probe_verdict(AllProbes, 3, &two_bad, true, &t), Some(Verdict::Reopen));
/// let three_good = good.with(false, false).with(false, false);
/// assert_eq!(probe_verdict(AllProbes, 3, &three_good, false, &t), Some(Verdict::Close));
/// assert_eq!(probe_verdict(Consecutive, 3, &good.with(true, false), true, &t), Some(Verdict::Reopen));
/// ```
pub fn probe_verdict(
    policy: HalfOpenPolicy,
    k: u32,
    c: &RoundCounts,
    bad: bool,
    t: &Thresholds,
) -> Option<Verdict> {
    match policy {
        HalfOpenPolicy::AllProbes if round_fails(c.failures, c.slow, k, t) => Some(Verdict::Reopen),
        HalfOpenPolicy::AllProbes if c.results >= k => Some(Verdict::Close),
        HalfOpenPolicy::Consecutive if bad => Some(Verdict::Reopen),
        HalfOpenPolicy::Consecutive if c.successes >= k => Some(Verdict::Close),
        _ => None,
    }
}

/// The verdict of a round that already holds the results a round of `k` asks for (a
/// reconfiguration lowered `k` while it ran): decided by this configuration's rule over the
/// results it has, since no probe could decide it; `None` while it does not hold them.
///
/// ```
/// use tripline::HalfOpenPolicy::AllProbes;
/// use tripline::rules::{RoundCounts, Thresholds, Verdict, settled_verdict};
/// let t = Thresholds { failure_ppm: 500_000, slow_ppm: 1_000_000, minimum_calls: 1 };
/// let c = RoundCounts::default().with(false, false).with(true, false);
/// assert_eq!(settled_verdict(AllProbes, 3, &c, &t), None);
/// assert_eq!(settled_verdict(AllProbes, 2, &c, &t), Some(Verdict::Reopen)); // 1 of 2 is 50 %
/// ```
pub fn settled_verdict(
    policy: HalfOpenPolicy,
    k: u32,
    c: &RoundCounts,
    t: &Thresholds,
) -> Option<Verdict> {
    if settled(policy, c) < k {
        return None;
    }
    match policy {
        HalfOpenPolicy::AllProbes if round_fails(c.failures, c.slow, c.results, t) => {
            Some(Verdict::Reopen)
        }
        _ => Some(Verdict::Close),
    }
}

/// Whether a probe lease that ends at `deadline` has expired at `now` (its slot may be
/// reclaimed, and its result is then stale).
///
/// ```
/// use tripline::rules::lease_expired;
/// assert!(!lease_expired(10, 9));
/// assert!(lease_expired(10, 10));
/// ```
pub fn lease_expired(deadline: u64, now: u64) -> bool {
    deadline <= now
}

/// Whether a half-open breaker that entered HalfOpen at `since` has reached its maximum wait
/// at `now` (`None`: it waits for its probes forever).
///
/// ```
/// use tripline::rules::half_open_expired;
/// assert!(!half_open_expired(100, Some(50), 149));
/// assert!(half_open_expired(100, Some(50), 150));
/// assert!(!half_open_expired(100, None, u64::MAX));
/// ```
pub fn half_open_expired(since: u64, max_wait: Option<u64>, now: u64) -> bool {
    max_wait.is_some_and(|w| now >= since.saturating_add(w))
}

/// Where a half-open breaker goes once its maximum wait passed without a verdict.
pub fn after_max_wait(to: AfterMaxWait) -> State {
    match to {
        AfterMaxWait::Open => State::Open,
        AfterMaxWait::Closed => State::Closed,
    }
}

/// Whether an open breaker whose wait ends at `until` may probe at `now`.
///
/// ```
/// use tripline::rules::open_elapsed;
/// assert!(!open_elapsed(10, 9));
/// assert!(open_elapsed(10, 10));
/// ```
pub fn open_elapsed(until: u64, now: u64) -> bool {
    now >= until
}

/// Whether a Closed generation whose `interval` ends at `end` is over at `now`: the
/// boundary belongs to the next generation, as an open wait's end belongs to HalfOpen
/// ([`open_elapsed`]). An end of `u64::MAX` is no interval (or one that ends past the
/// clock's last reading): never over, so a clock that saturates never ends generation after
/// generation.
///
/// ```
/// use tripline::rules::interval_over;
/// let s = 1_000_000_000u64;
/// assert!(!interval_over(30 * s, 30 * s - 1));
/// assert!(interval_over(30 * s, 30 * s));
/// assert!(!interval_over(u64::MAX, u64::MAX)); // no interval
/// ```
pub fn interval_over(end: u64, now: u64) -> bool {
    now >= end && end != u64::MAX
}

/// The least an open-wait function's wait may be, in nanoseconds (the least `open.duration`).
pub const MIN_OPEN_WAIT: u64 = 1_000_000;
/// The most an open-wait function's wait may be, in nanoseconds (the most `open.duration`:
/// 7 days).
pub const MAX_OPEN_WAIT: u64 = 7 * 24 * 3600 * 1_000_000_000;

/// An open-wait function's wait, in nanoseconds, within `open.duration`'s bounds:
/// [`MIN_OPEN_WAIT`] to [`MAX_OPEN_WAIT`].
///
/// ```
/// use tripline::rules::{MAX_OPEN_WAIT, MIN_OPEN_WAIT, clamp_open_wait};
/// assert_eq!(clamp_open_wait(0), MIN_OPEN_WAIT);
/// assert_eq!(clamp_open_wait(5_000_000_000), 5_000_000_000);
/// assert_eq!(clamp_open_wait(u64::MAX), MAX_OPEN_WAIT);
/// ```
pub fn clamp_open_wait(wait: u64) -> u64 {
    wait.clamp(MIN_OPEN_WAIT, MAX_OPEN_WAIT)
}

/// How the open wait is computed: the configuration's part of it, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpenWaitRule {
    /// The base wait (`open_duration`).
    pub base: u64,
    /// The most jitter added (`open_jitter`).
    pub jitter: u64,
    /// With backoff: the multiplier and the cap (`open_backoff`).
    pub backoff: Option<(f64, u64)>,
    /// The backoff's `healthy_after`: a breaker closed this long before its next trip starts
    /// again at the base wait.
    pub healthy_after: u64,
    /// The longest `Retry-After` hint honoured.
    pub max_hint: u64,
}

impl OpenWaitRule {
    /// The rule of `config`.
    pub fn of(config: &BreakerConfig) -> Self {
        let n = crate::clock::nanos;
        Self {
            base: n(config.open_duration()),
            jitter: n(config.open_jitter()),
            backoff: config.open_backoff().map(|b| (b.multiplier, n(b.max))),
            healthy_after: config.open_backoff().map_or(0, |b| n(b.healthy_after)),
            max_hint: n(config.max_retry_after()),
        }
    }
}

/// The backoff level of the next open period: how many times the wait has grown. A reopen
/// from HalfOpen grows it; a trip from Closed grows it only if the breaker was not closed for
/// `healthy_after` since it last opened (a flapping breaker keeps its longer wait), and starts
/// over otherwise; an operator's explicit wait leaves it alone.
///
/// ```
/// use tripline::State;
/// use tripline::rules::next_backoff_level;
/// assert_eq!(next_backoff_level(2, State::HalfOpen, false, true, 0, 60), 3);
/// assert_eq!(next_backoff_level(2, State::Closed, false, true, 10, 60), 3); // flapping
/// assert_eq!(next_backoff_level(2, State::Closed, false, true, 60, 60), 0); // healthy again
/// assert_eq!(next_backoff_level(0, State::Closed, false, false, 0, 60), 0); // first trip
/// assert_eq!(next_backoff_level(2, State::HalfOpen, true, true, 0, 60), 2); // explicit
/// ```
pub fn next_backoff_level(
    level: u32,
    from: State,
    explicit: bool,
    ever_opened: bool,
    closed_for: u64,
    healthy_after: u64,
) -> u32 {
    if explicit {
        level
    } else if from == State::HalfOpen || (ever_opened && closed_for < healthy_after) {
        level.saturating_add(1)
    } else {
        0
    }
}

/// The open wait in nanoseconds at backoff `level`, with `jitter_draw` (uniform in
/// `[0, rule.jitter]`, drawn by the caller) and a `Retry-After` `hint`:
///
/// * the base wait, grown by the backoff's multiplier once per level up to
///   `max - jitter` (but not below the base), so that the jitter still spreads replicas at the
///   cap;
/// * plus the jitter draw;
/// * at least the hint (capped at `max_hint`);
/// * with backoff, at most its `max`, jitter and hint included.
///
/// ```
/// use tripline::rules::{OpenWaitRule, open_wait};
/// let s = 1_000_000_000u64;
/// let rule = OpenWaitRule { base: 10 * s, jitter: 0, backoff: Some((2.0, 60 * s)), healthy_after: 0, max_hint: 300 * s };
/// assert_eq!(open_wait(&rule, 0, 0, None), 10 * s);
/// assert_eq!(open_wait(&rule, 2, 0, None), 40 * s);
/// assert_eq!(open_wait(&rule, 3, 0, None), 60 * s); // 80 s, capped
/// assert_eq!(open_wait(&rule, 0, 0, Some(30 * s)), 30 * s); // the hint is honoured
/// assert_eq!(open_wait(&rule, 0, 0, Some(90 * s)), 60 * s); // within the cap
/// let jittered = OpenWaitRule { jitter: 5 * s, ..rule };
/// assert_eq!(open_wait(&jittered, 3, 5 * s, None), 60 * s); // 55 s + 5 s at the cap
/// ```
pub fn open_wait(rule: &OpenWaitRule, level: u32, jitter_draw: u64, hint: Option<u64>) -> u64 {
    let mut wait = rule.base;
    if let Some((multiplier, max)) = rule.backoff {
        let grown =
            Duration::from_nanos(rule.base).as_secs_f64() * multiplier.powi(level.min(1000) as i32);
        let room = max.saturating_sub(rule.jitter).max(rule.base);
        wait = if grown.is_finite() && grown < room as f64 / 1e9 {
            // Never below the base (a multiplier below 1, or a negative one, a caller of
            // these functions may pass).
            crate::clock::nanos(Duration::from_secs_f64(grown.max(0.0))).max(rule.base)
        } else {
            room
        };
    }
    wait = wait.saturating_add(jitter_draw.min(rule.jitter));
    if let Some(hint) = hint {
        wait = wait.max(hint.min(rule.max_hint));
    }
    match rule.backoff {
        Some((_, max)) => wait.min(max),
        None => wait,
    }
}

/// The share of calls step `i` of a ramp admits, in ppm: from `from` percent to 100 % in
/// `steps` equal steps, linearly or by the same factor each step; 1,000,000 from step `steps`
/// on. Rounded toward refusing (a share that is not a whole number of ppm is rounded down, as
/// [`ppm_of_percent`] does), and never 0.
///
/// ```
/// use tripline::RampCurve;
/// use tripline::rules::ramp_share_ppm;
/// assert_eq!(ramp_share_ppm(10.0, 10, RampCurve::Linear, 0), 100_000);
/// assert_eq!(ramp_share_ppm(10.0, 10, RampCurve::Linear, 5), 550_000);
/// assert_eq!(ramp_share_ppm(10.0, 10, RampCurve::Exponential, 5), 316_227);
/// assert_eq!(ramp_share_ppm(10.0, 10, RampCurve::Linear, 10), 1_000_000);
/// ```
pub fn ramp_share_ppm(from: f64, steps: u32, curve: RampCurve, i: u32) -> u64 {
    if i >= steps {
        return PPM;
    }
    let f = (from / 100.0).clamp(0.0, 1.0);
    let t = f64::from(i) / f64::from(steps.max(1));
    let share = match curve {
        RampCurve::Linear => f + (1.0 - f) * t,
        RampCurve::Exponential => f * (1.0 / f).powf(t),
    };
    ppm_of_percent(share * 100.0)
}

/// The step of a ramp that started at `start` with steps of `step_nanos`, at `now`.
///
/// ```
/// use tripline::rules::ramp_step;
/// assert_eq!(ramp_step(1_000, 100, 1_050), 0);
/// assert_eq!(ramp_step(1_000, 100, 1_250), 2);
/// assert_eq!(ramp_step(1_000, 100, 10), 0); // a reading before the start
/// ```
pub fn ramp_step(start: u64, step_nanos: u64, now: u64) -> u64 {
    now.saturating_sub(start) / step_nanos.max(1)
}

/// Whether the `n`-th call (from 0) of a ramp step that admits `share` ppm is admitted: when
/// `floor((n + 1) × share)` exceeds `floor(n × share)`, so that of the first `n` calls of a
/// step exactly `floor(n × share / 10⁶)` are admitted (a count, not a coin).
///
/// ```
/// use tripline::rules::ramp_admits;
/// let admitted = (0..10).filter(|n| ramp_admits(*n, 300_000)).count();
/// assert_eq!(admitted, 3);
/// assert!(ramp_admits(0, 1_000_000));
/// ```
pub fn ramp_admits(n: u64, share: u64) -> bool {
    let (n, share) = (u128::from(n), u128::from(share));
    (n + 1) * share / u128::from(PPM) > n * share / u128::from(PPM)
}

/// Whether a call of the cohort that ends at `end` is overdue at `now` with a slow-call
/// duration of `slow`: it started before `end` and has run for at least `slow` (see the rule
/// in [`crate::inflight`]).
///
/// ```
/// use tripline::rules::overdue;
/// assert!(!overdue(50, 100, 149));
/// assert!(overdue(50, 100, 150));
/// assert!(!overdue(u64::MAX - 1, 100, u64::MAX - 1)); // saturates, never wraps
/// ```
pub fn overdue(end: u64, slow: u64, now: u64) -> bool {
    end.saturating_add(slow) <= now
}

/// Whether a failure at `now` falls within the lumping `interval` of the last counted one at
/// `last` (and so counts only in the metrics).
///
/// ```
/// use tripline::rules::lumped;
/// assert!(lumped(Some(100), 10, 105));
/// assert!(!lumped(Some(100), 10, 110));
/// assert!(!lumped(None, 10, 105));
/// assert!(!lumped(Some(100), 10, 99)); // an earlier reading is not within
/// ```
pub fn lumped(last: Option<u64>, interval: u64, now: u64) -> bool {
    last.is_some_and(|at| now >= at && now - at < interval)
}

/// What an operator's move from `from` to `to` does: `None` when the edge does not exist (see
/// [`State::operator_targets`]), `Some(true)` when it is a transition, `Some(false)` when it
/// asks for the state the breaker is in and changes nothing (Closed and Open always start
/// over: a fresh window, a new wait).
///
/// ```
/// use tripline::State::*;
/// use tripline::rules::operator_edge;
/// assert_eq!(operator_edge(Closed, HalfOpen), None);
/// assert_eq!(operator_edge(Closed, Closed), Some(true));
/// assert_eq!(operator_edge(HalfOpen, HalfOpen), Some(false));
/// assert_eq!(operator_edge(MetricsOnly, Open), Some(true));
/// ```
pub fn operator_edge(from: State, to: State) -> Option<bool> {
    from.operator_targets()
        .contains(&to)
        .then_some(from != to || matches!(to, State::Closed | State::Open))
}

/// Whether a breaker held in `hold` by an operator override (a registry's
/// [`set_operator`](crate::registry::Registry::set_operator)) may move to `to`: only to the
/// held state itself, until the override is cleared.
///
/// ```
/// use tripline::State::*;
/// use tripline::rules::hold_permits;
/// assert!(hold_permits(None, Closed));
/// assert!(!hold_permits(Some(ForcedOpen), Closed));
/// assert!(hold_permits(Some(ForcedOpen), ForcedOpen));
/// ```
pub fn hold_permits(hold: Option<State>, to: State) -> bool {
    hold.is_none_or(|h| h == to)
}

/// Whether a clock whose readings lag by up to `resolution` serves `config`: every duration the
/// configuration compares call times against is at least 100 resolutions long (an error of
/// 1 % at most), and the window keeps no call durations. A breaker whose clock does not serve
/// its configuration reads the clock's precise readings ([`Clock::precise_now`]).
///
/// [`Clock::precise_now`]: crate::Clock::precise_now
///
/// ```
/// use std::time::Duration;
/// use tripline::BreakerConfig;
/// use tripline::rules::clock_serves;
/// let ms = Duration::from_millis(1);
/// assert!(clock_serves(ms, &BreakerConfig::default())); // 60 s slow calls
/// let fine = BreakerConfig::builder().slow_call_duration(Duration::from_millis(20)).build()?;
/// assert!(!clock_serves(ms, &fine));
/// assert!(clock_serves(Duration::ZERO, &fine)); // a precise clock serves everything
/// # Ok::<(), tripline::ConfigError>(())
/// ```
pub fn clock_serves(resolution: Duration, config: &BreakerConfig) -> bool {
    resolution.is_zero()
        || (!config.call_durations()
            && config
                .finest_duration()
                .is_none_or(|d| d >= resolution.saturating_mul(100)))
}
