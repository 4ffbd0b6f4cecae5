//! Gradual recovery after closing (`RampUp`): the share of calls admitted grows step by step,
//! the rest is refused as `RampingUp`, and the closed rules keep working.

use std::time::Duration;

use proptest::prelude::*;
use tripline::{
    BreakerConfig, CircuitBreaker, ManualClock, Outcome, RampCurve, RampUp, RejectReason, State,
};

const S: Duration = Duration::from_secs(1);

fn ramped(ramp: RampUp) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .count_window(20)
        .minimum_calls(10)
        .failure_rate_threshold(50.0)
        .count_in_flight_as_slow(false)
        .open_duration(10 * S)
        .half_open_calls(1)
        .ramp_up(ramp)
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("vendor", config, clock.clone());
    (b, clock)
}

/// Trips, waits, and lets one probe close the breaker: the ramp starts now.
fn recover(b: &CircuitBreaker<ManualClock>, clock: &ManualClock) {
    b.trip();
    clock.advance(10 * S);
    let probe = b.try_acquire().expect("a probe");
    assert!(probe.is_probe());
    let _ = probe.record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
}

const LINEAR: RampUp = RampUp {
    from: 10.0,
    over: Duration::from_secs(10),
    steps: 10,
    curve: RampCurve::Linear,
};

#[test]
fn each_step_admits_exactly_its_share() {
    let (b, clock) = ramped(LINEAR);
    recover(&b, &clock);
    for step in 0..10u32 {
        let mut admitted = 0;
        for _ in 0..100 {
            match b.try_acquire() {
                Ok(p) => {
                    admitted += 1;
                    let _ = p.record(Outcome::Success);
                }
                Err(r) => {
                    assert_eq!(r.reason(), RejectReason::RampingUp);
                    assert_eq!(r.state(), State::Closed);
                    assert_eq!(r.retry_after(), None);
                }
            }
        }
        let share = LINEAR.share_ppm(step);
        assert_eq!(admitted, 100 * share / 1_000_000, "step {step}");
        clock.advance(S);
    }
    // Past the ramp: everything again.
    for _ in 0..100 {
        b.try_acquire().expect("ramp over").record(Outcome::Success);
    }
    let m = b.metrics();
    assert_eq!(
        m.rejections.in_state(State::Closed),
        m.rejections.ramping_up
    );
    let admitted: u64 = (0..10).map(|i| 100 * LINEAR.share_ppm(i) / 1_000_000).sum();
    assert_eq!(admitted, 505); // 10 + 19 + 28 + ... + 91
    assert_eq!(m.rejections.ramping_up, 1000 - admitted);
}

#[test]
fn a_trip_during_the_ramp_reopens_as_usual() {
    let (b, clock) = ramped(LINEAR);
    recover(&b, &clock);
    clock.advance(5 * S);
    // Half of the calls are admitted now; they fail.
    let mut failed = 0;
    while b.state() == State::Closed && failed < 100 {
        if let Ok(p) = b.try_acquire() {
            let _ = p.record(Outcome::Failure);
            failed += 1;
        }
    }
    assert_eq!(b.state(), State::Open);
    assert_eq!(failed, 10, "minimum calls, all failed");
    let r = b.try_acquire().unwrap_err();
    assert_eq!(r.reason(), RejectReason::Open);
    // The next recovery ramps again from the first step.
    clock.advance(10 * S);
    let _ = b.try_acquire().unwrap().record(Outcome::Success);
    assert_eq!(b.state(), State::Closed);
    let admitted = (0..20).filter(|_| b.try_acquire().is_ok()).count();
    assert_eq!(admitted, 2);
}

#[test]
fn only_a_recovery_ramps() {
    let (b, clock) = ramped(LINEAR);
    // A fresh breaker, an operator reset and an operator close admit everything.
    assert!((0..50).all(|_| b.try_acquire().is_ok()));
    b.trip();
    b.reset();
    assert!((0..50).all(|_| b.try_acquire().is_ok()));
    b.trip();
    clock.advance(10 * S);
    b.transition_to_closed().unwrap();
    assert!((0..50).all(|_| b.try_acquire().is_ok()));
    // Reconfiguring the ramp away ends a ramp in progress.
    recover(&b, &clock);
    assert!(b.try_acquire().is_err());
    let c = BreakerConfig::builder()
        .count_window(20)
        .minimum_calls(10)
        .count_in_flight_as_slow(false)
        .open_duration(10 * S)
        .half_open_calls(1)
        .build()
        .unwrap();
    b.reconfigure(c).unwrap();
    assert!((0..50).all(|_| b.try_acquire().is_ok()));
}

#[test]
fn an_exponential_ramp_starts_slower() {
    let exp = RampUp {
        curve: RampCurve::Exponential,
        ..LINEAR
    };
    for i in 1..10 {
        assert!(exp.share_ppm(i) < LINEAR.share_ppm(i), "step {i}");
        assert!(exp.share_ppm(i) > exp.share_ppm(i - 1));
    }
    assert_eq!(exp.share_ppm(0), LINEAR.share_ppm(0));
    assert_eq!(exp.share_ppm(10), 1_000_000);
}

#[test]
fn bad_ramps_are_refused_with_what_is_allowed() {
    let b = |r: RampUp| BreakerConfig::builder().ramp_up(r).build().unwrap_err();
    assert_eq!(
        b(RampUp {
            from: 100.0,
            ..LINEAR
        })
        .field(),
        "ramp_up.from"
    );
    assert_eq!(
        b(RampUp {
            from: f64::NAN,
            ..LINEAR
        })
        .field(),
        "ramp_up.from"
    );
    assert_eq!(
        b(RampUp {
            over: Duration::ZERO,
            ..LINEAR
        })
        .field(),
        "ramp_up.over"
    );
    assert_eq!(b(RampUp { steps: 0, ..LINEAR }).field(), "ramp_up.steps");
    let e = b(RampUp {
        over: Duration::from_millis(5),
        steps: 10,
        ..LINEAR
    });
    assert_eq!(
        e.to_string(),
        "ramp_up.steps must be steps of at least 1ms: at most 5 for ramp_up.over = 5ms, got 10"
    );
}

#[test]
fn a_ramp_reads_from_toml() {
    let c: BreakerConfig = toml::from_str(
        "[ramp_up]\nfrom = 10\nover = \"30s\"\nsteps = 6\ncurve = \"exponential\"\n",
    )
    .unwrap();
    assert_eq!(
        c.ramp_up(),
        Some(RampUp {
            from: 10.0,
            over: Duration::from_secs(30),
            steps: 6,
            curve: RampCurve::Exponential
        })
    );
    let err = toml::from_str::<BreakerConfig>("[ramp_up]\nfrom = 0\nover = \"30s\"\n").unwrap_err();
    assert!(err.to_string().contains("ramp_up.from"), "{err}");
}

proptest! {
    /// The ramp never admits more than its share: in every step, of the calls the step saw,
    /// at most floor(calls × share) are admitted (exactly that many, as calls are sequential).
    #[test]
    fn the_ramp_never_admits_more_than_its_share(
        from in 1.0f64..99.0,
        steps in 1u32..20,
        exponential in any::<bool>(),
        gaps in proptest::collection::vec(0u64..400, 1..400),
    ) {
        let ramp = RampUp {
            from,
            over: Duration::from_secs(4),
            steps,
            curve: if exponential { RampCurve::Exponential } else { RampCurve::Linear },
        };
        let (b, clock) = ramped(ramp);
        recover(&b, &clock);
        let step_nanos = 4_000_000_000 / u64::from(steps);
        let mut per_step: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
        let mut t = 0u64;
        for g in gaps {
            clock.advance(Duration::from_millis(g));
            t += g * 1_000_000;
            let step = t / step_nanos;
            let e = per_step.entry(step).or_default();
            e.0 += 1;
            if let Ok(p) = b.try_acquire() {
                e.1 += 1;
                let _ = p.record(Outcome::Success);
            }
        }
        for (step, (calls, admitted)) in per_step {
            let share = ramp.share_ppm(u32::try_from(step).unwrap_or(u32::MAX));
            prop_assert_eq!(admitted, calls * share / 1_000_000, "step {}", step);
        }
    }
}
