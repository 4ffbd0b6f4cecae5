//! What opened the breaker, from its rejections ([`Rejected::cause`]): the rule, the kind of
//! the failure whose result tripped it, the window, the generation; for every state that
//! refuses (Open, HalfOpen, ForcedOpen) and never a cause from another open period.

use std::time::Duration;

use tripline::{
    BreakerConfig, CircuitBreaker, Classification, FailureKind, HalfOpenPolicy, ManualClock,
    Outcome, RampCurve, RampUp, Reason, RejectReason, Rejected, State,
};

const S: Duration = Duration::from_secs(1);

fn breaker(config: BreakerConfig) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (
        CircuitBreaker::with_clock("cause", config, clock.clone()),
        clock,
    )
}

fn rate() -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .slow_call_rule(false)
        .open_duration(10 * S)
        .half_open_calls(1)
        .half_open_policy(HalfOpenPolicy::Consecutive)
        .build()
        .unwrap()
}

fn fail(b: &CircuitBreaker<ManualClock>, kind: Option<FailureKind>) {
    let p = b.try_acquire().expect("admitted");
    match kind {
        Some(k) => p.record_classified(Classification::failure(k)),
        None => p.record(Outcome::Failure),
    };
}

#[test]
fn a_rejection_says_which_failure_and_rule_opened_the_breaker() {
    let (b, _) = breaker(rate());
    b.try_acquire().unwrap().record(Outcome::Success);
    b.try_acquire().unwrap().record(Outcome::Success);
    fail(&b, Some(FailureKind::Connection));
    fail(&b, Some(FailureKind::Timeout));
    let r = b.try_acquire().unwrap_err();
    assert_eq!(r.state(), State::Open);
    let c = r.cause().expect("the cause");
    assert_eq!(c.reason, Reason::FailureRate);
    assert_eq!(
        c.kind,
        Some(FailureKind::Timeout),
        "the failure that tripped it"
    );
    assert_eq!((c.window.calls, c.window.failures), (4, 2));
    assert_eq!(c.generation, b.generation());
}

#[test]
fn the_failure_count_rule_and_an_unlabelled_failure_are_named_as_such() {
    let config = rate()
        .to_builder()
        .count_window(100)
        .minimum_calls(100)
        .failure_count(3, 10 * S)
        .build()
        .unwrap();
    let (b, _) = breaker(config);
    for _ in 0..3 {
        fail(&b, None);
    }
    let r = b.try_acquire().unwrap_err();
    let c = r.cause().unwrap();
    assert_eq!(c.reason, Reason::FailureCount { count: 3 });
    assert_eq!(c.kind, None);
}

#[test]
fn a_half_open_rejection_carries_the_cause_of_the_open_before_it() {
    let (b, clock) = breaker(rate());
    for _ in 0..4 {
        fail(&b, Some(FailureKind::ServerError));
    }
    clock.advance(10 * S);
    let probe = b.try_acquire().unwrap();
    assert!(probe.is_probe());
    let r = b.try_acquire().unwrap_err();
    assert_eq!(r.reason(), RejectReason::ProbesBusy);
    let c = r.cause().expect("the Open's cause");
    assert_eq!(c.reason, Reason::FailureRate);
    assert_eq!(c.kind, Some(FailureKind::ServerError));
    assert_eq!(c.generation + 1, b.generation());
    // The probe fails: the new open period names the probes and the probe's kind.
    probe.record_classified(Classification::failure(FailureKind::Unavailable));
    let r = b.try_acquire().unwrap_err();
    let c = r.cause().unwrap();
    assert_eq!(
        c.reason,
        Reason::ProbesFailed {
            probes: 1,
            failures: 1,
            slow: 0
        }
    );
    assert_eq!(c.kind, Some(FailureKind::Unavailable));
    assert_eq!(c.generation, b.generation());
}

#[test]
fn a_cause_from_an_earlier_open_period_is_never_carried() {
    let (b, clock) = breaker(rate());
    for _ in 0..4 {
        fail(&b, Some(FailureKind::Timeout));
    }
    clock.advance(10 * S);
    b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    b.force_open();
    let r = b.try_acquire().unwrap_err();
    let c = r.cause().expect("the operator's");
    assert_eq!((c.reason, c.kind), (Reason::Operator, None));
    assert_eq!(c.generation, b.generation());
    // An operator's explicit Open too.
    b.reset();
    b.transition_to_open_for(5 * S).unwrap();
    assert_eq!(
        b.try_acquire().unwrap_err().cause().unwrap().reason,
        Reason::Operator
    );
}

#[test]
fn a_ramp_refusal_carries_no_cause() {
    let config = rate()
        .to_builder()
        .ramp_up(RampUp {
            from: 10.0,
            over: 10 * S,
            steps: 10,
            curve: RampCurve::Linear,
        })
        .build()
        .unwrap();
    let (b, clock) = breaker(config);
    for _ in 0..4 {
        fail(&b, None);
    }
    clock.advance(10 * S);
    b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    let refused = (0..20)
        .filter_map(|_| b.try_acquire().err())
        .collect::<Vec<_>>();
    assert!(!refused.is_empty());
    for r in refused {
        assert_eq!(r.reason(), RejectReason::RampingUp);
        assert!(r.cause().is_none());
    }
}

#[test]
fn rejections_compare_equal_whatever_their_cause() {
    let (b, _) = breaker(rate());
    b.force_open();
    let r = b.try_acquire().unwrap_err();
    assert!(r.cause().is_some());
    let plain = Rejected::new("cause", State::ForcedOpen, None);
    assert!(plain.cause().is_none());
    assert_eq!(r, plain);
}
