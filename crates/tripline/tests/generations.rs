//! Generations never alias: however many transitions a long-lived breaker makes (a flapping
//! dependency, an operator script resetting it in a loop), results of an old generation never
//! count in a new one, and results of the current one always do.

use std::time::Duration;

use tripline::inflight::InFlight;
use tripline::{BreakerConfig, CircuitBreaker, ManualClock, Outcome, Recorded, State};

fn time_window() -> (CircuitBreaker<ManualClock>, ManualClock) {
    let config = BreakerConfig::builder()
        .time_window(Duration::from_secs(10), Duration::from_secs(1))
        .minimum_calls(10)
        .failure_rate_threshold(50.0)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap();
    let clock = ManualClock::new();
    (
        CircuitBreaker::with_clock("flapping", config, clock.clone()),
        clock,
    )
}

/// Nine failures, then 2^19 resets within the same second: the window of the last generation
/// is empty, and one more failure does not trip it.
#[test]
fn half_a_million_resets_never_revive_old_failures_in_a_time_window() {
    let (b, _clock) = time_window();
    for _ in 0..9 {
        let _ = b.try_acquire().unwrap().record(Outcome::Failure);
    }
    for _ in 0..1u64 << 19 {
        b.reset();
    }
    assert_eq!(b.metrics().window.failures, 0, "old failures revived");
    let _ = b.try_acquire().unwrap().record(Outcome::Failure);
    assert_eq!(b.state(), State::Closed);
}

/// A success, then 2^18 + 1 resets: a permit of the current generation still counts.
#[test]
fn a_current_result_counts_after_a_quarter_million_resets() {
    let (b, _clock) = time_window();
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    for _ in 0..(1u64 << 18) + 1 {
        b.reset();
    }
    assert_eq!(
        b.try_acquire().unwrap().record(Outcome::Failure),
        Recorded::Counted
    );
    assert_eq!(b.metrics().window.calls, 1);
}

/// A call hung in flight since generation 0 never counts in a generation 2^32 later (nor 2^40,
/// nor 2^43 later: 278 years of transitions at one per millisecond), and a current call always
/// does.
#[test]
fn a_call_hung_in_flight_never_counts_in_a_much_later_generation() {
    let ms = 1_000_000;
    let slow = 100 * ms;
    let f = InFlight::new(slow);
    let _hung = f.enter(0, 0);
    assert_eq!(f.overdue(200 * ms, slow, 0), 1);
    for later in [1u64 << 32, 1 << 40, (1 << 43) - 1, (1 << 44) + 5] {
        assert_eq!(
            f.overdue(200 * ms, slow, later),
            0,
            "generation {later} counts a call of generation 0"
        );
        let g = InFlight::new(slow);
        let _old = g.enter(0, 0);
        let now = g.enter(10 * ms, later);
        assert_eq!(
            g.overdue(200 * ms, slow, later),
            1,
            "generation {later}'s own call"
        );
        g.exit(now, later);
        assert_eq!(g.overdue(200 * ms, slow, later), 0);
    }
}
