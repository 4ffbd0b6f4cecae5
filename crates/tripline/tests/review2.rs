//! Promises of the async timer, the registry's eviction and the metrics that the code does not
//! keep yet: each test names the promise, quotes it and fails until the code keeps it.
#![cfg(all(feature = "tokio", feature = "serde"))]

use std::time::Duration;

use tripline::{BreakerConfig, CircuitBreaker, State, TokioClock};

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
