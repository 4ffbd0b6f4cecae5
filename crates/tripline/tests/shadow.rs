//! A candidate configuration beside the live breaker: where the two decide differently.

use std::time::Duration;

use tripline::shadow::ShadowCandidate;
use tripline::{BreakerConfig, CircuitBreaker, HalfOpenPolicy, ManualClock, Outcome, State};

fn tight() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(10)
        .minimum_calls(5)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(5))
        .half_open_calls(1)
        .half_open_policy(HalfOpenPolicy::Consecutive)
        .build()
        .unwrap()
}

/// One call every 100 ms for a minute; calls fail from 10 s to 30 s.
fn outcome_at(i: u64) -> Outcome {
    if (100..300).contains(&i) {
        Outcome::Failure
    } else {
        Outcome::Success
    }
}

/// With the live breaker in MetricsOnly every call is made, so the candidate's figures are
/// those of the candidate alone on the same traffic: every call it refuses is one that a
/// breaker with its configuration refuses, with the outcome the call then had.
#[test]
fn beside_a_shadow_live_breaker_the_candidate_decides_as_it_would_alone() {
    let clock = ManualClock::new();
    let live = CircuitBreaker::with_clock("dep", BreakerConfig::default(), clock.clone());
    live.metrics_only();
    let shadow = ShadowCandidate::new(live, tight()).unwrap();
    let alone = CircuitBreaker::with_clock("alone", tight(), clock.clone());
    let (mut refused, mut refused_failed, mut refused_ok) = (0, 0, 0);
    for i in 0..600u64 {
        clock.set(Duration::from_millis(i * 100));
        let o = outcome_at(i);
        let p = shadow
            .try_acquire()
            .expect("a MetricsOnly breaker admits every call");
        let _ = p.record(o);
        match alone.try_acquire() {
            Ok(p) => {
                let _ = p.record(o);
            }
            Err(_) => {
                refused += 1;
                if o == Outcome::Failure {
                    refused_failed += 1;
                } else {
                    refused_ok += 1;
                }
            }
        }
    }
    let r = shadow.report();
    assert_eq!(r.calls, 600);
    assert_eq!(shadow.live().state(), State::MetricsOnly);
    assert_eq!(r.candidate_would_reject, refused);
    assert_eq!(r.candidate_would_reject_failed, refused_failed);
    assert_eq!(r.candidate_would_reject_succeeded, refused_ok);
    assert_eq!(r.candidate_would_admit, 0);
    assert_eq!(r.both_admitted + r.candidate_would_reject, 600);
    assert!(refused_failed > 150, "{r:?}");
    // The candidate recovered within one open wait of the end of the failures.
    assert!(refused_ok <= 50, "{r:?}");
    assert_eq!(shadow.candidate().state(), State::Closed);
    assert_eq!(
        shadow.candidate().metrics().transitions,
        alone.metrics().transitions
    );
    // Disagreement periods cover every refusal, each with the states at the time.
    let d = &r.disagreements;
    assert_eq!(d.iter().map(|d| d.calls).sum::<u64>(), refused);
    assert!(
        d.iter()
            .all(|d| d.candidate_rejected && d.live == State::MetricsOnly)
    );
    assert_eq!(d[0].from, Duration::from_millis(10_500));
}

/// When the live breaker refuses and the candidate would not, the call is not made: the
/// candidate gets no outcome (it is recorded as ignored) and its state is untouched.
#[test]
fn a_call_only_the_candidate_would_admit_has_no_outcome() {
    let clock = ManualClock::new();
    let live = CircuitBreaker::with_clock("dep", tight(), clock.clone());
    let loose = BreakerConfig::builder()
        .count_window(100)
        .minimum_calls(100)
        .build()
        .unwrap();
    let shadow = ShadowCandidate::new(live, loose).unwrap();
    for _ in 0..5 {
        let _ = shadow.call(|| Err::<(), _>("503"));
    }
    assert_eq!(shadow.live().state(), State::Open);
    for _ in 0..20 {
        assert!(shadow.call(|| Ok::<_, ()>(())).is_err());
    }
    let r = shadow.report();
    assert_eq!((r.both_admitted, r.candidate_would_admit), (5, 20));
    let m = shadow.candidate().metrics();
    assert_eq!(
        (m.failed_calls, m.successful_calls, m.ignored_calls),
        (5, 0, 20)
    );
    assert_eq!(m.window.calls, 5);
    assert_eq!(r.disagreements.len(), 1);
    assert!(!r.disagreements[0].candidate_rejected);
    assert_eq!(r.disagreements[0].live, State::Open);
}

/// Two periods in which the candidate refused while the live breaker admitted, with the same
/// states, separated by a call on which both agreed (the candidate's failed probe): two
/// periods, not one.
#[test]
fn disagreements_separated_by_agreement_are_separate_periods() {
    let clock = ManualClock::new();
    let live = CircuitBreaker::with_clock("dep", BreakerConfig::default(), clock.clone());
    let candidate = BreakerConfig::builder()
        .count_window(20)
        .minimum_calls(5)
        .open_duration(Duration::from_secs(10))
        .half_open_calls(1)
        .build()
        .unwrap();
    let shadow = ShadowCandidate::new(live, candidate).unwrap();
    for _ in 0..5 {
        let _ = shadow.call(|| Err::<(), _>("503")); // both admit; the candidate trips
    }
    for _ in 0..3 {
        let _ = shadow.call(|| Err::<(), _>("503")); // only the live breaker admits
    }
    clock.advance(Duration::from_secs(10));
    let _ = shadow.call(|| Err::<(), _>("503")); // both admit: the candidate's probe fails
    for _ in 0..2 {
        let _ = shadow.call(|| Err::<(), _>("503")); // only the live breaker admits again
    }
    assert_eq!(shadow.live().state(), State::Closed);
    let r = shadow.report();
    let periods: Vec<u64> = r.disagreements.iter().map(|d| d.calls).collect();
    assert_eq!(periods, [3, 2], "{:?}", r.disagreements);
    assert_eq!(r.disagreements[1].from, Duration::from_secs(10));
}
