//! Promises of the async timer, the registry's eviction and the metrics that the code does not
//! keep yet: each test names the promise, quotes it and fails until the code keeps it.
#![cfg(all(feature = "tokio", feature = "serde"))]

use std::time::Duration;

use tripline::registry::{Key, Registry, RegistryConfig};
use tripline::{
    Backoff, BreakerConfig, CircuitBreaker, ManualClock, RampCurve, RampUp, State, TokioClock,
};

/// `run_timer` must pick up a timer that a reconfiguration switches on.
///
/// Steps: a breaker on paused tokio time with `automatic_transition` off and a 5 s open wait;
/// `run_timer` spawned; `trip()`; 1 s later `reconfigure` to the same configuration with
/// `automatic_transition(true)`; sleep 10 s (well past the open wait); no traffic.
///
/// Promised: `run_timer` "Drives the breaker's timers forever (see `tick`): spawn it as a task
/// to move Open to HalfOpen on schedule without waiting for traffic", and `reconfigure`
/// "Replaces the configuration, keeping state, generation and window".
///
/// Observed: the breaker is still Open 11 s after the trip. `run_timer` parked on the notifier
/// when `tick` returned `None` (no timer under the old configuration), and `reconfigure` never
/// notifies it (only `transition` calls `notify_one`), so the timer sleeps until some other
/// transition. The same happens to a `half_open_max_wait` added by a reconfiguration while
/// HalfOpen: the breaker stays HalfOpen past the new maximum wait.
#[tokio::test(start_paused = true)]
async fn run_timer_follows_a_reconfiguration_that_turns_on_automatic_transition() {
    let config = BreakerConfig::builder()
        .open_duration(Duration::from_secs(5))
        .build()
        .unwrap();
    let breaker = CircuitBreaker::with_clock("db", config.clone(), TokioClock::new());
    let timer = tokio::spawn({
        let b = breaker.clone();
        async move { b.run_timer().await }
    });
    tokio::task::yield_now().await;
    breaker.trip();
    tokio::time::sleep(Duration::from_secs(1)).await;
    breaker
        .reconfigure(
            config
                .to_builder()
                .automatic_transition(true)
                .build()
                .unwrap(),
        )
        .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let state = breaker.state();
    timer.abort();
    assert_eq!(
        state,
        State::HalfOpen,
        "11 s after the trip, 6 s past the 5 s open wait, the timer has not moved the breaker"
    );
}

/// Idle eviction must not drop a breaker that is still ramping traffic back up.
///
/// Steps: a registry on a `ManualClock`, `idle_after` 1 s, its default configuration ramping
/// up from 10 % over 600 s in 10 steps after recovery, one probe. Look up `vendor`, trip it,
/// wait out the 1 s open wait, let one successful probe close it (the ramp starts), drop the
/// handle. 5 s later (still in the ramp's first 60 s step, where 10 % is admitted) call
/// `evict_idle`, look `vendor` up again and try 100 acquires.
///
/// Promised: `RampUp` "within each step it admits at most the step's share of the calls that
/// step has seen ... so a recovering dependency never sees more than the ramp allows"; the
/// registry docs give the reason a breaker that matters is kept: "a missing breaker reads as a
/// fresh Closed one, so evicting an Open breaker would admit everything".
///
/// Observed: `evict_idle` evicts the ramping breaker (it is Closed with a clean window:
/// `CircuitBreaker::evictable` looks only at the state, the window and the handles), and the
/// fresh breaker admits all 100 calls, ten times the step's share; the same breaker kept admits
/// 10. A reload's rebuild (`reload_entry`, Closed and not held) drops the ramp the same way.
#[test]
fn idle_eviction_never_ends_a_ramp_early() {
    let clock = ManualClock::new();
    let ramp = RampUp {
        from: 10.0,
        over: Duration::from_secs(600),
        steps: 10,
        curve: RampCurve::Linear,
    };
    let config = BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(5)
        .half_open_calls(1)
        .open_duration(Duration::from_secs(1))
        .ramp_up(ramp)
        .build()
        .unwrap();
    let registry = Registry::with_clock(
        RegistryConfig::default()
            .with_config("default", config)
            .with_idle_after(Duration::from_secs(1)),
        clock.clone(),
    )
    .unwrap();
    let key = Key::new("vendor").unwrap();
    {
        let b = registry.get(&key).unwrap();
        b.trip();
        clock.advance(Duration::from_secs(2));
        b.call(|| Ok::<_, ()>(())).unwrap();
        assert_eq!(b.state(), State::Closed);
    }
    clock.advance(Duration::from_secs(5));
    let evicted = registry.evict_idle();
    let b = registry.get(&key).unwrap();
    let admitted = (0..100).filter(|_| b.try_acquire().is_ok()).count();
    assert!(
        admitted <= 10,
        "in the ramp's first step (10 %) {admitted} of 100 calls were admitted \
         ({evicted} breaker(s) evicted)"
    );
}

/// Idle eviction must not reset the grown open wait of a breaker that flaps.
///
/// Steps: a registry on a `ManualClock`, `idle_after` 1 s, its default configuration opening
/// for 10 s with backoff (×2, max 600 s, `healthy_after` 1 h), one probe. Look up `vendor`,
/// trip it (10 s wait), let its probe fail (20 s wait), let the next probe close it, drop the
/// handle. 5 s later call `evict_idle`, look it up again and trip it with 5 failures.
///
/// Promised: `Backoff::healthy_after` "The growth decays back to the base wait only after the
/// breaker stayed closed this long before its next trip; a breaker that flaps keeps its longer
/// wait"; and the registry keeps breakers that matter because "a missing breaker reads as a
/// fresh Closed one".
///
/// Observed: the breaker closed 5 s ago, far short of `healthy_after`, is evicted (Closed and
/// clean is all `evictable` checks), and the fresh one opens for the base 10 s. Kept, the same
/// breaker opens for 40 s (level 2).
#[test]
fn idle_eviction_keeps_a_flapping_breakers_grown_open_wait() {
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(5)
        .half_open_calls(1)
        .open_duration(Duration::from_secs(10))
        .open_backoff(Backoff {
            multiplier: 2.0,
            max: Duration::from_secs(600),
            healthy_after: Duration::from_secs(3600),
        })
        .build()
        .unwrap();
    let registry = Registry::with_clock(
        RegistryConfig::default()
            .with_config("default", config)
            .with_idle_after(Duration::from_secs(1)),
        clock.clone(),
    )
    .unwrap();
    let key = Key::new("vendor").unwrap();
    {
        let b = registry.get(&key).unwrap();
        b.trip();
        clock.advance(Duration::from_secs(11));
        let _ = b.call(|| Err::<(), _>("probe fails"));
        clock.advance(Duration::from_secs(21));
        b.call(|| Ok::<_, ()>(())).unwrap();
        assert_eq!(b.state(), State::Closed);
    }
    clock.advance(Duration::from_secs(5));
    let evicted = registry.evict_idle();
    let b = registry.get(&key).unwrap();
    for _ in 0..5 {
        let _ = b.call(|| Err::<(), _>("503"));
    }
    let wait = b.try_acquire().unwrap_err().retry_after();
    assert_eq!(
        wait,
        Some(Duration::from_secs(40)),
        "a breaker closed 5 s ago (healthy_after 1 h) reopened with the base wait \
         ({evicted} breaker(s) evicted)"
    );
}

/// A failure lumped into an earlier one still ends the run of successes.
///
/// Steps: a breaker on a `ManualClock` with `lumping_interval` 1 s. At t = 0: one failure,
/// three successes, one more failure (within 1 s of the first, so lumped).
///
/// Promised: `Metrics::consecutive_successes` is "The current run of successes since the last
/// failure or state change", `consecutive_failures` "The current run of failures since the
/// last success or state change", and `failed_calls` counts "Calls recorded as failures
/// (lumped ones included)": the lumped call is a recorded failure (`failed_calls` 2,
/// `lumped_failures` 1), so the last result is a failure.
///
/// Observed: `consecutive_successes` is 3 and `consecutive_failures` 0, as if the last call had
/// succeeded: `admit_failure` returns `Recorded::Lumped` before `counted_failure`, the only
/// place that moves the run of failures and the success mark.
#[test]
fn a_lumped_failure_ends_the_run_of_successes() {
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .lumping_interval(Duration::from_secs(1))
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("db", config, clock);
    let _ = b.call(|| Err::<(), _>("503"));
    for _ in 0..3 {
        b.call(|| Ok::<_, ()>(())).unwrap();
    }
    let _ = b.call(|| Err::<(), _>("503"));
    let m = b.metrics();
    assert_eq!((m.failed_calls, m.lumped_failures), (2, 1));
    assert_eq!(
        m.consecutive_successes, 0,
        "the last call failed, yet the run of successes goes on"
    );
}

/// The breaker's own timeout is a failure of kind Timeout: `failures_by_kind` counts it, and a
/// weight set for timeouts applies to it as to a classifier's.
#[tokio::test(start_paused = true)]
async fn the_breakers_own_timeout_is_a_failure_of_kind_timeout() {
    use tripline::FailureKind;
    let config = BreakerConfig::builder()
        .failure_kind_weight(FailureKind::Timeout, 0)
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("db", config, tripline::TokioClock::new());
    let r = b
        .call_async(Some(Duration::from_millis(100)), || async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, ()>(())
        })
        .await;
    assert!(matches!(r, Err(tripline::CallError::Timeout(_))));
    let m = b.metrics();
    assert_eq!(m.failures_by_kind.get(FailureKind::Timeout), 1);
    // Weight 0: it says nothing about the dependency, so the window holds no failure.
    assert_eq!(m.window.failures, 0);
}
