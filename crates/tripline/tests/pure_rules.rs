//! The rules module is public: its functions take any values a caller passes (not only those
//! a validated configuration makes), and none of them panics on any input.

use proptest::prelude::*;
use tripline::HalfOpenPolicy;
use tripline::rules::{self, OpenWaitRule, RoundCounts, Thresholds};

fn policy() -> impl Strategy<Value = HalfOpenPolicy> {
    prop_oneof![
        Just(HalfOpenPolicy::AllProbes),
        Just(HalfOpenPolicy::Consecutive)
    ]
}

fn counts() -> impl Strategy<Value = RoundCounts> {
    (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
        |(results, failures, slow, successes)| RoundCounts {
            results,
            failures,
            slow,
            successes,
        },
    )
}

fn thresholds() -> impl Strategy<Value = Thresholds> {
    (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(failure_ppm, slow_ppm, minimum_calls)| {
        Thresholds {
            failure_ppm,
            slow_ppm,
            minimum_calls,
        }
    })
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-2.0),
        Just(-0.5),
        Just(0.0),
        Just(1.5),
    ]
}

proptest! {
    #[test]
    fn the_open_wait_never_panics_on_any_rule(
        base in any::<u64>(),
        jitter in any::<u64>(),
        multiplier in float(),
        max in any::<u64>(),
        level in any::<u32>(),
        draw in any::<u64>(),
        hint in any::<Option<u64>>(),
        max_hint in any::<u64>(),
        backoff in any::<bool>(),
    ) {
        let rule = OpenWaitRule {
            base,
            jitter,
            backoff: backoff.then_some((multiplier, max)),
            healthy_after: 0,
            max_hint,
        };
        let wait = rules::open_wait(&rule, level, draw, hint);
        if backoff {
            prop_assert!(wait <= max);
        }
    }

    #[test]
    fn the_ramp_rules_never_panic_on_any_input(
        n in any::<u64>(),
        share in any::<u64>(),
        from in float(),
        steps in any::<u32>(),
        i in any::<u32>(),
        start in any::<u64>(),
        step in any::<u64>(),
        now in any::<u64>(),
    ) {
        let _ = rules::ramp_admits(n, share);
        prop_assert!(rules::ramp_share_ppm(from, steps, tripline::RampCurve::Linear, i) >= 1);
        prop_assert!(rules::ramp_share_ppm(from, steps, tripline::RampCurve::Exponential, i) >= 1);
        let _ = rules::ramp_step(start, step, now);
    }

    #[test]
    fn the_round_rules_never_panic_on_any_counts(
        policy in policy(),
        k in any::<u32>(),
        in_flight in any::<u32>(),
        c in counts(),
        t in thresholds(),
        failure in any::<bool>(),
        slow in any::<bool>(),
    ) {
        let _ = c.with(failure, slow);
        let _ = rules::admits_probe(policy, k, in_flight, &c);
        let _ = rules::probe_verdict(policy, k, &c, failure || slow, &t);
        let _ = rules::settled_verdict(policy, k, &c, &t);
        let _ = rules::round_fails(c.failures, c.slow, k, &t);
        let _ = c.reason(rules::Verdict::Close);
    }

    #[test]
    fn the_window_rules_never_panic_on_any_window(
        calls in any::<u64>(),
        failures in any::<u64>(),
        slow_calls in any::<u64>(),
        in_flight_slow in any::<u64>(),
        t in thresholds(),
        run in any::<u64>(),
        limit in any::<Option<u32>>(),
        percent in float(),
    ) {
        let w = tripline::WindowSnapshot { calls, failures, slow_calls, in_flight_slow };
        let _ = rules::fired(&w, &t, rules::consecutive_fires(run, limit).then_some(run));
        let _ = (w.failure_rate(), w.slow_rate());
        let ppm = rules::ppm_of_percent(percent);
        prop_assert!((1..=rules::PPM).contains(&ppm));
    }
}

#[test]
fn a_shrinking_or_negative_backoff_multiplier_never_panics() {
    for multiplier in [-2.0, -0.5, 0.0, 0.5, f64::NAN, f64::NEG_INFINITY] {
        for level in 0..4 {
            let rule = OpenWaitRule {
                base: 10_000_000_000,
                jitter: 0,
                backoff: Some((multiplier, 60_000_000_000)),
                healthy_after: 0,
                max_hint: 0,
            };
            let wait = rules::open_wait(&rule, level, 0, None);
            assert!(wait <= 60_000_000_000, "{multiplier} {level}: {wait}");
        }
    }
}

proptest! {
    /// The in-flight tracker is public too (other hosts of the rules use it): any times,
    /// generations and slow-call durations, in any order, never panic, and once every call
    /// has left, none counts as overdue.
    #[test]
    fn the_in_flight_tracker_never_panics_and_forgets_calls_that_left(
        slow in any::<u64>(),
        calls in proptest::collection::vec((any::<u64>(), 0u64..4), 1..20),
        later_slow in any::<u64>(),
        at in any::<u64>(),
    ) {
        let f = tripline::inflight::InFlight::new(slow);
        let cohorts: Vec<_> = calls.iter().map(|&(now, g)| (f.enter(now, g), g)).collect();
        f.set_slow_call_duration(later_slow, at);
        let _ = f.overdue(at, later_slow, 0);
        for (c, g) in cohorts {
            f.exit(c, g);
        }
        for g in 0..4 {
            prop_assert_eq!(f.overdue(u64::MAX, 0, g), 0);
        }
    }
}
