//! What a tuner reads and says, on the manual clock: explicit call durations, slow successes
//! and slow failures, the window's durations, rates that are not yet evaluated, refusals by
//! state and why, live probe counts, runs of consecutive outcomes, failure kinds with their
//! weights, and error lumping.

use std::time::Duration;

use tripline::{
    BreakerConfig, CircuitBreaker, Classification, EventKind, EventLog, FailureKind, ManualClock,
    Outcome, Recorded, RejectReason, State,
};

const S: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn breaker(builder: tripline::BreakerConfigBuilder) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = builder
        .count_in_flight_as_slow(false)
        .seed(5)
        .build()
        .unwrap();
    (
        CircuitBreaker::with_clock("dep", config, clock.clone()),
        clock,
    )
}

fn count(size: u32, min: u32) -> tripline::BreakerConfigBuilder {
    BreakerConfig::builder()
        .count_window(size)
        .minimum_calls(min)
        .open_duration(10 * S)
}

fn record(b: &CircuitBreaker<ManualClock>, c: impl Into<Classification>) -> Recorded {
    b.try_acquire().unwrap().record_classified(c.into())
}

fn timed(b: &CircuitBreaker<ManualClock>, c: impl Into<Classification>, d: Duration) -> Recorded {
    b.try_acquire().unwrap().record_with_duration(c, d)
}

#[test]
fn an_explicit_duration_decides_slowness_instead_of_the_elapsed_time() {
    let (b, clock) = breaker(count(10, 10).slow_call_duration(2 * S));
    // Granted, then an hour passes on the breaker's clock: the caller measured 1 s.
    let p = b.try_acquire().unwrap();
    clock.advance(Duration::from_secs(3600));
    assert_eq!(
        p.record_with_duration(Outcome::Success, S),
        Recorded::Counted
    );
    // Granted and recorded at once: the caller measured 3 s.
    assert_eq!(timed(&b, Outcome::Success, 3 * S), Recorded::Counted);
    assert_eq!(timed(&b, Outcome::Failure, 5 * S), Recorded::Counted);
    let m = b.metrics();
    assert_eq!(
        (m.slow_successful_calls, m.slow_failed_calls, m.slow_calls),
        (1, 1, 2)
    );
    assert_eq!(m.window.slow_calls, 2);

    // The same for a probe: a fast-measured probe closes, though it took long on the clock.
    let (b, clock) = breaker(
        count(2, 2)
            .slow_call_duration(2 * S)
            .half_open_calls(1)
            .half_open_policy(tripline::HalfOpenPolicy::Consecutive),
    );
    b.trip();
    clock.advance(10 * S);
    let p = b.try_acquire().unwrap();
    clock.advance(60 * S);
    assert_eq!(
        p.record_with_duration(Outcome::Success, MS),
        Recorded::Counted
    );
    assert_eq!(b.state(), State::Closed);
    // And a slow-measured one reopens.
    b.trip();
    clock.advance(10 * S);
    let p = b.try_acquire().unwrap();
    let _ = p.record_with_duration(Outcome::Success, 3 * S);
    assert_eq!(b.state(), State::Open);
}

/// An outcome event reports the caller's measure of the call when it gave one.
#[test]
fn outcome_events_carry_the_explicit_duration() {
    struct Outcomes(std::sync::Arc<std::sync::Mutex<Vec<Duration>>>);
    impl tripline::Listener for Outcomes {
        fn on_event(&self, e: &tripline::Event) {
            if let EventKind::CallOutcome { duration, .. } = e.kind {
                self.0.lock().unwrap().push(duration);
            }
        }
        fn wants_outcome_events(&self) -> bool {
            true
        }
    }
    let (b, clock) = breaker(count(10, 10));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    b.subscribe(Outcomes(seen.clone()));
    let p = b.try_acquire().unwrap();
    clock.advance(5 * S);
    let _ = p.record_with_duration(Outcome::Success, 40 * MS);
    let p = b.try_acquire().unwrap();
    clock.advance(2 * S);
    let _ = p.record(Outcome::Success);
    assert_eq!(*seen.lock().unwrap(), vec![40 * MS, 2 * S]);
}

#[test]
fn the_window_keeps_its_calls_durations_when_asked() {
    let (b, _clock) = breaker(count(3, 3).call_durations(true));
    let m = b.metrics();
    assert_eq!(
        (m.total_duration, m.mean_duration),
        (Some(Duration::ZERO), None)
    );
    timed(&b, Outcome::Success, 100 * MS);
    timed(&b, Outcome::Success, 200 * MS);
    timed(&b, Outcome::Success, 600 * MS);
    let m = b.metrics();
    assert_eq!(m.total_duration, Some(900 * MS));
    assert_eq!(m.mean_duration, Some(300 * MS));
    // The ring slides: the 100 ms call leaves.
    timed(&b, Outcome::Success, 400 * MS);
    assert_eq!(b.metrics().total_duration, Some(1200 * MS));
    // Ignored calls are not in the window; a reset empties it.
    let _ = b
        .try_acquire()
        .unwrap()
        .record_with_duration(Outcome::Ignored, 99 * S);
    assert_eq!(b.metrics().total_duration, Some(1200 * MS));
    b.reset();
    assert_eq!(b.metrics().total_duration, Some(Duration::ZERO));
    timed(&b, Outcome::Failure, 7 * MS);
    assert_eq!(b.metrics().mean_duration, Some(7 * MS));

    // Off by default: nothing to show.
    let (b, _clock) = breaker(count(3, 3));
    timed(&b, Outcome::Success, S);
    assert_eq!(
        (b.metrics().total_duration, b.metrics().mean_duration),
        (None, None)
    );
}

#[test]
fn a_time_window_keeps_durations_per_bucket_and_they_expire_with_it() {
    let (b, clock) = breaker(
        BreakerConfig::builder()
            .time_window(10 * S, S)
            .minimum_calls(100)
            .call_durations(true),
    );
    timed(&b, Outcome::Success, 100 * MS);
    clock.advance(5 * S);
    timed(&b, Outcome::Success, 300 * MS);
    let m = b.metrics();
    assert_eq!(
        (m.total_duration, m.mean_duration),
        (Some(400 * MS), Some(200 * MS))
    );
    clock.advance(5 * S); // the first bucket leaves the window
    let m = b.metrics();
    assert_eq!((m.window.calls, m.total_duration), (1, Some(300 * MS)));
    // A duration past a week counts as a week.
    timed(&b, Outcome::Success, Duration::from_secs(30 * 86_400));
    assert_eq!(
        b.metrics().total_duration,
        Some(300 * MS + Duration::from_secs(7 * 86_400))
    );
}

/// The window's shape is fixed for a breaker's life, durations included.
#[test]
fn call_durations_cannot_change_on_a_live_breaker() {
    let (b, _clock) = breaker(count(3, 3));
    let with = b
        .config()
        .to_builder()
        .call_durations(true)
        .build()
        .unwrap();
    let err = b.reconfigure(with).unwrap_err();
    assert_eq!(err.field(), "window");
    assert!(err.value().contains("call durations"), "{err}");
}

#[test]
fn rates_are_not_evaluated_below_the_minimum() {
    let (b, _clock) = breaker(count(10, 4));
    let m = b.metrics();
    assert_eq!((m.failure_rate, m.slow_call_rate), (None, None));
    for _ in 0..3 {
        record(&b, Outcome::Failure);
    }
    // Three failures of three: 100 %, but not yet evaluated.
    assert_eq!(b.metrics().failure_rate, None);
    assert_eq!(b.metrics().window.failure_rate(), 100.0);
    record(&b, Outcome::Success);
    let m = b.metrics();
    assert_eq!(m.failure_rate, Some(75.0));
    assert_eq!(m.slow_call_rate, Some(0.0));
}

#[test]
fn refusals_are_counted_per_state_and_say_why() {
    let (b, clock) = breaker(count(2, 2).half_open_calls(1).probe_lease(30 * S));
    b.trip();
    let r = b.try_acquire().unwrap_err();
    assert_eq!((r.state(), r.reason()), (State::Open, RejectReason::Open));
    assert_eq!(r.retry_after(), Some(10 * S));
    assert_eq!(
        r.to_string(),
        "circuit breaker 'dep' is open; next probe in 10s"
    );
    clock.advance(10 * S);
    let probe = b.try_acquire().unwrap();
    clock.advance(4 * S);
    let r = b.try_acquire().unwrap_err();
    assert_eq!(
        (r.state(), r.reason()),
        (State::HalfOpen, RejectReason::ProbesBusy)
    );
    // Until the probe's lease (30 s from its start) expires.
    assert_eq!(r.retry_after(), Some(26 * S));
    assert_eq!(
        r.to_string(),
        "circuit breaker 'dep' is half-open with every probe slot taken; a probe slot frees in 26s"
    );
    b.force_open();
    let r = b.try_acquire().unwrap_err();
    assert_eq!(
        (r.reason(), r.retry_after()),
        (RejectReason::ForcedOpen, None)
    );
    let _ = b.try_acquire();
    let m = b.metrics();
    assert_eq!(
        (
            m.rejections.open,
            m.rejections.half_open,
            m.rejections.forced_open
        ),
        (1, 1, 2)
    );
    assert_eq!(m.rejected_calls, 4);
    assert_eq!(m.rejections.in_state(State::HalfOpen), 1);
    drop(probe);

    // Listeners of call events see the reason too.
    let log = EventLog::new();
    b.subscribe(log.clone());
    let _ = b.try_acquire();
    assert!(log.events().iter().any(|e| matches!(
        e.kind,
        EventKind::Rejected {
            state: State::ForcedOpen,
            reason: RejectReason::ForcedOpen,
            retry_after: None
        }
    )));
    assert_eq!(
        RejectReason::of_state(State::HalfOpen).as_str(),
        "probes_busy"
    );
}

#[test]
fn probe_counts_are_live_and_belong_to_the_round() {
    let (b, clock) = breaker(count(2, 2).half_open_calls(4).slow_call_duration(S));
    assert_eq!(b.metrics().probes, tripline::ProbeCounts::default());
    b.trip();
    clock.advance(10 * S);
    let p: Vec<_> = (0..4).map(|_| b.try_acquire().unwrap()).collect();
    let m = b.metrics().probes;
    assert_eq!(
        (m.admitted, m.in_flight, m.succeeded, m.failed),
        (4, 4, 0, 0)
    );
    let mut p = p.into_iter();
    let _ = p.next().unwrap().record(Outcome::Success);
    let _ = p
        .next()
        .unwrap()
        .record_with_duration(Outcome::Success, 2 * S);
    drop(p.next().unwrap()); // abandoned: admitted, no result
    let m = b.metrics().probes;
    assert_eq!(
        (m.admitted, m.in_flight, m.succeeded, m.failed, m.slow),
        (4, 1, 2, 0, 1)
    );
    let _ = p.next().unwrap().record(Outcome::Failure);
    // 1 failure and 1 slow of 4: under 50 % each, but a probe slot is free again.
    let q = b.try_acquire().unwrap();
    assert_eq!(b.metrics().probes.admitted, 5);
    let _ = q.record(Outcome::Failure);
    // Two failures of four: 50 % trips, the round is over and its counts with it.
    assert_eq!(b.state(), State::Open);
    assert_eq!(b.metrics().probes, tripline::ProbeCounts::default());
}

#[test]
fn runs_of_consecutive_outcomes_follow_the_results_and_start_over_with_each_state() {
    let (b, clock) = breaker(count(10, 10).half_open_calls(3));
    for _ in 0..3 {
        record(&b, Outcome::Success);
    }
    let m = b.metrics();
    assert_eq!((m.consecutive_successes, m.consecutive_failures), (3, 0));
    record(&b, Outcome::Failure);
    record(&b, Outcome::Failure);
    let m = b.metrics();
    assert_eq!((m.consecutive_successes, m.consecutive_failures), (0, 2));
    record(&b, Outcome::Ignored);
    assert_eq!(b.metrics().consecutive_failures, 2);
    record(&b, Outcome::Success);
    let m = b.metrics();
    assert_eq!((m.consecutive_successes, m.consecutive_failures), (1, 0));
    // A state change starts both runs over; probes continue them.
    b.trip();
    let m = b.metrics();
    assert_eq!((m.consecutive_successes, m.consecutive_failures), (0, 0));
    clock.advance(10 * S);
    let probes: Vec<_> = (0..2).map(|_| b.try_acquire().unwrap()).collect();
    for p in probes {
        let _ = p.record(Outcome::Success);
    }
    assert_eq!(b.metrics().consecutive_successes, 2);
}

#[test]
fn failures_are_counted_by_kind() {
    let (b, _clock) = breaker(count(10, 10));
    record(&b, Classification::failure(FailureKind::Timeout));
    record(&b, Classification::failure(FailureKind::Timeout));
    record(&b, Classification::http(503, None));
    record(&b, Classification::http(429, Some("3")));
    record(&b, Outcome::Failure); // no kind
    let m = b.metrics();
    assert_eq!(m.failures_by_kind.get(FailureKind::Timeout), 2);
    assert_eq!(m.failures_by_kind.get(FailureKind::Unavailable), 1);
    assert_eq!(m.failures_by_kind.get(FailureKind::RateLimited), 1);
    assert_eq!(m.failures_by_kind.total(), 4);
    assert_eq!(m.failed_calls, 5);
    // A success's kind means nothing.
    assert!(record(&b, Outcome::Success).counted());
    let _ = record(
        &b,
        Classification::new(Outcome::Success).with_kind(FailureKind::Other),
    );
    assert_eq!(b.metrics().failures_by_kind.get(FailureKind::Other), 0);
}

/// A kind weighing 0 is ignored, as if the classifier had said so: a storm of 429s does not
/// trip a breaker told that rate limits say nothing about health.
#[test]
fn a_kind_weighing_zero_is_ignored_and_cannot_trip() {
    let (b, _clock) = breaker(count(4, 2).failure_kind_weight(FailureKind::RateLimited, 0));
    for _ in 0..20 {
        assert_eq!(
            record(&b, Classification::http(429, None)),
            Recorded::Ignored
        );
    }
    let m = b.metrics();
    assert_eq!(m.state, State::Closed);
    assert_eq!((m.window.calls, m.ignored_calls), (0, 20));
    assert_eq!(m.failures_by_kind.get(FailureKind::RateLimited), 20);
    assert_eq!(m.consecutive_failures, 0);
    // Other kinds still count.
    record(&b, Classification::http(500, None));
    record(&b, Classification::http(500, None));
    assert_eq!(b.state(), State::Open);
}

/// A kind weighing `n` counts as `n` failed calls: in the window and in the run of
/// consecutive failures.
#[test]
fn a_weighted_kind_counts_as_that_many_failures() {
    let (b, _clock) = breaker(count(10, 4).failure_kind_weight(FailureKind::Timeout, 3));
    record(&b, Outcome::Success);
    record(&b, Classification::failure(FailureKind::Timeout));
    let m = b.metrics();
    // One success and one timeout weighing three: 4 calls, 3 failures: 75 % trips at once.
    assert_eq!(m.state, State::Open);
    let Some(trip) = trip_window(&b) else {
        panic!("no trip recorded")
    };
    assert_eq!((trip.calls, trip.failures), (4, 3));
    assert_eq!(m.failed_calls, 1);

    let (b, _clock) = breaker(
        count(10, 10)
            .consecutive_failures(4)
            .failure_kind_weight(FailureKind::Connection, 2),
    );
    record(&b, Classification::failure(FailureKind::Connection));
    assert_eq!(b.metrics().consecutive_failures, 2);
    record(&b, Classification::failure(FailureKind::Connection));
    assert_eq!(b.state(), State::Open);
}

fn trip_window(b: &CircuitBreaker<ManualClock>) -> Option<tripline::WindowSnapshot> {
    // The window that tripped is the one metrics show while Open.
    (b.state() == State::Open).then(|| b.metrics().window)
}

/// In half-open a probe is one sample whatever its kind's weight; a kind weighing 0 is an
/// ignored probe, which gives its slot back.
#[test]
fn probe_kinds_count_once_and_ignored_kinds_free_their_slot() {
    let (b, clock) = breaker(
        count(2, 2)
            .half_open_calls(2)
            .failure_kind_weight(FailureKind::RateLimited, 0)
            .failure_kind_weight(FailureKind::Timeout, 5),
    );
    b.trip();
    clock.advance(10 * S);
    let p = b.try_acquire().unwrap();
    let q = b.try_acquire().unwrap();
    assert!(b.try_acquire().is_err());
    assert_eq!(
        p.record_classified(Classification::http(429, None)),
        Recorded::Ignored
    );
    let r = b.try_acquire().unwrap(); // the ignored probe's slot came back
    let _ = q.record(Outcome::Success);
    let _ = r.record_classified(Classification::failure(FailureKind::Timeout));
    // One failed probe of two: 50 % reopens; the timeout counted as one probe, not five.
    assert_eq!(b.state(), State::Open);
    assert_eq!(
        b.metrics().failures_by_kind.get(FailureKind::RateLimited),
        1
    );
}

/// Semian's lumping: failures within the interval of the last counted one count once.
#[test]
fn failures_within_the_lumping_interval_count_once() {
    let (b, clock) = breaker(count(10, 4).lumping_interval(S));
    assert_eq!(record(&b, Outcome::Failure), Recorded::Counted);
    for _ in 0..40 {
        clock.advance(20 * MS);
        assert_eq!(record(&b, Outcome::Failure), Recorded::Lumped);
    }
    // 800 ms later; the interval runs from the counted failure, at 0: up to 1 s.
    clock.advance(200 * MS - Duration::from_nanos(1));
    assert_eq!(record(&b, Outcome::Failure), Recorded::Lumped);
    clock.advance(Duration::from_nanos(1));
    assert_eq!(record(&b, Outcome::Failure), Recorded::Counted);
    let m = b.metrics();
    assert_eq!((m.window.calls, m.window.failures), (2, 2));
    assert_eq!((m.failed_calls, m.lumped_failures), (43, 41));
    assert_eq!(m.state, State::Closed);
    // Successes are never lumped, and do not end the interval.
    clock.advance(500 * MS);
    assert_eq!(record(&b, Outcome::Success), Recorded::Counted);
    assert_eq!(record(&b, Outcome::Failure), Recorded::Lumped);
    clock.advance(500 * MS);
    assert_eq!(record(&b, Outcome::Failure), Recorded::Counted);
    assert_eq!(b.state(), State::Open);
}

/// A new generation starts without an interval: the first failure after a reset counts, even
/// within the interval of one counted before it.
#[test]
fn lumping_starts_over_with_each_generation_and_reads_any_clock() {
    for origin in [0u64, 1_700_000_000_000_000_000, u64::MAX - 10_000_000_000] {
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(origin));
        let config = count(10, 10).lumping_interval(S).build().unwrap();
        let b = CircuitBreaker::with_clock("dep", config, clock.clone());
        assert_eq!(record(&b, Outcome::Failure), Recorded::Counted, "{origin}");
        assert_eq!(record(&b, Outcome::Failure), Recorded::Lumped, "{origin}");
        b.reset();
        assert_eq!(record(&b, Outcome::Failure), Recorded::Counted, "{origin}");
        clock.advance(2 * S);
        assert_eq!(record(&b, Outcome::Failure), Recorded::Counted, "{origin}");
    }
}

/// A stale failure (admitted before a reset) neither counts nor moves the lumping interval.
#[test]
fn a_stale_failure_leaves_the_lumping_interval_alone() {
    let (b, _clock) = breaker(count(10, 10).lumping_interval(S));
    let old = b.try_acquire().unwrap();
    b.reset();
    assert_eq!(old.record(Outcome::Failure), Recorded::Stale);
    assert_eq!(record(&b, Outcome::Failure), Recorded::Counted);
}
