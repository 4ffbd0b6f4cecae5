//! The deliberate differences from resilience4j, gobreaker, Polly and failsafe-go that
//! `docs/porting.md` lists, each pinned here under the name the guide gives it.

use std::time::Duration;

use tripline::{
    BreakerConfig, CircuitBreaker, EventKind, EventLog, HalfOpenPolicy, ManualClock, Outcome,
    Reason, Recorded, RejectReason, State, TransitionError,
};

const S: Duration = Duration::from_secs(1);

fn breaker(builder: tripline::BreakerConfigBuilder) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = builder
        .count_in_flight_as_slow(false)
        .open_duration(10 * S)
        .seed(9)
        .build()
        .unwrap();
    (
        CircuitBreaker::with_clock("dep", config, clock.clone()),
        clock,
    )
}

fn record(b: &CircuitBreaker<ManualClock>, o: Outcome) -> Recorded {
    b.try_acquire().unwrap().record(o)
}

/// "Early reopen in all-probes": resilience4j waits for all permitted calls before judging
/// them; tripline reopens as soon as the failures already seen reach the threshold over K,
/// since no later result could let it close.
#[test]
fn all_probes_reopens_as_soon_as_closing_is_impossible() {
    let (b, clock) = breaker(
        BreakerConfig::builder()
            .count_window(2)
            .minimum_calls(2)
            .half_open_calls(4)
            .half_open_policy(HalfOpenPolicy::AllProbes),
    );
    b.trip();
    clock.advance(10 * S);
    let probes: Vec<_> = (0..4).map(|_| b.try_acquire().unwrap()).collect();
    let mut probes = probes.into_iter();
    let _ = probes.next().unwrap().record(Outcome::Failure);
    assert_eq!(b.state(), State::HalfOpen);
    let _ = probes.next().unwrap().record(Outcome::Failure);
    // 2 of 4 failed: 50 % whatever the other two say. Open now, two probes still out.
    assert_eq!(b.state(), State::Open);
    for p in probes {
        assert_eq!(p.record(Outcome::Success), Recorded::Stale);
    }
}

/// "Reset is a transition": resilience4j's `reset()` publishes a reset event and keeps the
/// state machine's generation of calls; tripline's reset is a transition to Closed like any
/// other (also from Closed), with a new generation, so calls admitted before it are stale.
#[test]
fn a_reset_is_a_transition_with_a_new_generation() {
    let (b, _clock) = breaker(BreakerConfig::builder().count_window(4).minimum_calls(4));
    let log = EventLog::new();
    b.subscribe(log.clone());
    let before = b.try_acquire().unwrap();
    b.reset();
    assert_eq!(b.generation(), 1);
    assert!(log.events().iter().any(|e| matches!(
        e.kind,
        EventKind::Transition {
            from: State::Closed,
            to: State::Closed,
            reason: Reason::Operator,
            generation: 1,
            ..
        }
    )));
    assert_eq!(before.record(Outcome::Failure), Recorded::Stale);
}

/// "The half-open retry-after": resilience4j's `CallNotPermittedException` carries no time;
/// tripline's refusal in HalfOpen says when the earliest probe lease expires, the latest a
/// slot comes free while the breaker stays half-open.
#[test]
fn a_half_open_refusal_says_when_a_probe_slot_frees() {
    let (b, clock) = breaker(
        BreakerConfig::builder()
            .count_window(2)
            .minimum_calls(2)
            .half_open_calls(1)
            .probe_lease(20 * S),
    );
    b.trip();
    clock.advance(10 * S);
    let probe = b.try_acquire().unwrap();
    clock.advance(5 * S);
    let r = b.try_acquire().unwrap_err();
    assert_eq!(r.reason(), RejectReason::ProbesBusy);
    assert_eq!(r.retry_after(), Some(15 * S));
    // Once the lease expires the slot is reclaimed: the next acquire is a probe.
    clock.advance(15 * S);
    assert!(b.try_acquire().unwrap().is_probe());
    assert_eq!(probe.record(Outcome::Success), Recorded::Stale);
}

/// "Success evaluation", in the window: a success is judged where it can change the verdict.
/// The one that brings the window to the minimum trips it if the rate is over the threshold
/// (as resilience4j does), and so does the first result past a time bucket boundary when the
/// successes that kept the rate under it expired.
#[test]
fn a_success_that_condemns_the_window_trips_it() {
    let (b, _clock) = breaker(BreakerConfig::builder().count_window(4).minimum_calls(4));
    for _ in 0..3 {
        record(&b, Outcome::Failure);
    }
    assert_eq!(b.state(), State::Closed);
    record(&b, Outcome::Success);
    assert_eq!(b.state(), State::Open);

    let (b, clock) = breaker(
        BreakerConfig::builder()
            .time_window(2 * S, S)
            .minimum_calls(3)
            .failure_rate_threshold(50.0),
    );
    for _ in 0..3 {
        record(&b, Outcome::Success);
    }
    clock.advance(S);
    record(&b, Outcome::Failure);
    record(&b, Outcome::Failure);
    assert_eq!(b.state(), State::Closed); // 2 of 5
    clock.advance(S); // the three successes leave the window
    record(&b, Outcome::Success); // 2 of 3: judged, and it trips
    assert_eq!(b.state(), State::Open);
}

/// "Success evaluation", in half-open: a slow success is not proof of recovery. The
/// consecutive policy (gobreaker's, Polly's) reopens on it, where they count any success; the
/// all-probes policy counts it in the slow rate.
#[test]
fn a_slow_probe_is_not_a_success() {
    let (b, clock) = breaker(
        BreakerConfig::builder()
            .count_window(2)
            .minimum_calls(2)
            .slow_call_duration(S)
            .half_open_calls(2)
            .half_open_policy(HalfOpenPolicy::Consecutive),
    );
    b.trip();
    clock.advance(10 * S);
    let p = b.try_acquire().unwrap();
    assert_eq!(
        p.record_with_duration(Outcome::Success, 2 * S),
        Recorded::Counted
    );
    assert_eq!(b.state(), State::Open);
}

/// "A minimum larger than the window": resilience4j quietly lowers `minimumNumberOfCalls` to
/// a count window's size; tripline refuses the configuration, naming both. A time window has
/// no fixed capacity, so any minimum is allowed there.
#[test]
fn a_minimum_larger_than_a_count_window_is_refused() {
    let err = BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(20)
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "minimum_calls must be at most window.size (10), or the breaker could never trip, got 20"
    );
    assert!(
        BreakerConfig::builder()
            .time_window(10 * S, S)
            .minimum_calls(1000)
            .build()
            .is_ok()
    );
}

/// "Half-open only from open": resilience4j allows Disabled -> HalfOpen and failsafe-go's
/// `HalfOpen()` works from Closed; tripline refuses both, since there is nothing to recover
/// from.
#[test]
fn half_open_is_only_reached_from_open_or_forced_open() {
    for from in [State::Closed, State::Disabled, State::MetricsOnly] {
        let (b, _clock) = breaker(BreakerConfig::builder());
        b.transition_to(from).unwrap();
        assert_eq!(
            b.transition_to_half_open(),
            Err(TransitionError::NoSuchEdge {
                from,
                to: State::HalfOpen
            })
        );
    }
}

/// "Not yet evaluated": resilience4j reports -1 for the rates below the minimum calls;
/// tripline reports `None` (and NaN through the `metrics` facade).
#[test]
fn rates_below_the_minimum_are_not_yet_evaluated() {
    let (b, _clock) = breaker(BreakerConfig::builder().count_window(10).minimum_calls(5));
    record(&b, Outcome::Failure);
    let m = b.metrics();
    assert_eq!((m.failure_rate, m.slow_call_rate), (None, None));
}

/// "A panic is no failure": gobreaker counts a panicking request as a failure (and
/// re-panics); tripline's permit is dropped unrecorded and counts as abandoned, giving its
/// probe slot back.
#[test]
fn a_panicking_call_is_abandoned_not_failed() {
    let (b, _clock) = breaker(BreakerConfig::builder().count_window(4).minimum_calls(1));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = b.call(|| -> Result<(), ()> { panic!("bug in the caller") });
    }));
    assert!(r.is_err());
    let m = b.metrics();
    assert_eq!(
        (m.failed_calls, m.abandoned_permits, m.state),
        (0, 1, State::Closed)
    );
}

/// "An operator may open a shadow breaker." resilience4j has no MetricsOnly -> Open edge;
/// tripline lets an operator move any state to Open (Closed, Disabled and MetricsOnly alike:
/// "stop calling it now"), as the operator table says.
#[test]
fn an_operator_may_open_a_metrics_only_breaker() {
    let (b, _clock) = breaker(BreakerConfig::builder());
    b.metrics_only();
    b.transition_to_open().unwrap();
    assert_eq!(b.state(), State::Open);
}

/// "Half-open again keeps the round." resilience4j's HalfOpen -> HalfOpen starts a fresh
/// round; in tripline asking for the state a breaker is in changes nothing (only Closed and
/// Open start over): the probes out keep their slots and their results count.
#[test]
fn half_open_again_keeps_the_round() {
    let (b, clock) = breaker(BreakerConfig::builder().half_open_calls(2));
    b.trip();
    clock.advance(10 * S);
    let probe = b.try_acquire().unwrap();
    let generation = b.generation();
    b.transition_to_half_open().unwrap();
    assert_eq!(b.generation(), generation);
    assert_eq!(b.metrics().probes.in_flight, 1);
    assert_eq!(probe.record(Outcome::Success), Recorded::Counted);
}
