//! Promises of the policies' docs, tried the way a careful user would.
#![cfg(feature = "outlier")]

use tripline::ManualClock;
use tripline_policies::outlier::{HostOutcome, OutlierConfig, OutlierDetector};

/// Steps: ten hosts with the defaults (`max_ejection_percent` 10); host 0 answers five 500s in
/// a row and is ejected (1 of 10, within the cap). The set then shrinks to hosts 0 and 1 (a
/// scale-down), then to host 0 alone, each through `set_hosts`.
///
/// Promised (outlier module docs): "`max_ejection_percent` (10 %): never more than that share
/// of the hosts is ejected at once", and "the detector never ejects the last host in the set,
/// so the balancer always has a host to pick ... here at least one always stays in".
/// Observed: the ejection survives the shrink, so 1 host of 2 (50 %) and then the only host
/// (100 %) stand ejected.
#[test]
fn shrinking_the_host_set_never_leaves_more_than_the_cap_ejected() {
    let d = OutlierDetector::builder(OutlierConfig::default())
        .clock(ManualClock::new())
        .seed(7)
        .build(0..10u32)
        .unwrap();
    for _ in 0..5 {
        assert!(d.record_host(&0, HostOutcome::Status(500)));
    }
    assert_eq!(d.is_ejected(&0), Some(true), "1 of 10 is within the cap");

    d.set_hosts([0, 1]).unwrap();
    let active = d.stats().ejections_active;
    assert!(
        active * 100 <= 10 * 2,
        "{active} of 2 hosts ejected, over the 10 % cap"
    );

    d.set_hosts([0]).unwrap();
    assert_eq!(
        d.is_ejected(&0),
        Some(false),
        "the only host in the set stands ejected"
    );
}

/// Steps: a throttle with `K = 1.0004` (inside the documented `[1, 100]`), on a manual clock.
/// 10 000 requests, each accepted, then one more request held in flight: the window holds
/// 10 001 requests and 10 000 accepts.
///
/// Promised (throttle module docs and `try_acquire`): a request "is refused with probability
/// `max(0, (requests − K × accepts) / (requests + 1))` ... compared exactly in integers", and
/// `K` "in `[1, 100]`". Here `10 001 − 1.0004 × 10 000 = −3`, so the probability is 0.
/// Observed: `probability()` is about 1e-4 (≈ 1 / 10 002) and requests are refused at that
/// rate: `K` is silently rounded to thousandths (1.000), so the throttle sheds traffic the
/// formula says it must let through.
#[cfg(feature = "throttle")]
#[test]
fn throttle_probability_follows_the_formula_for_every_valid_k() {
    use rand::SeedableRng;
    use tripline::Outcome;
    use tripline_policies::throttle::{Throttle, ThrottleConfig};

    let t = Throttle::with_clock_and_rng(
        ThrottleConfig::builder().k(1.0004).build().unwrap(),
        ManualClock::new(),
        rand_pcg::Pcg64Mcg::seed_from_u64(1),
    );
    for _ in 0..10_000 {
        t.try_acquire().unwrap().record(Outcome::Success);
    }
    let _in_flight = t.try_acquire().unwrap();
    assert_eq!(t.counts(), (10_001, 10_000));
    assert_eq!(
        t.probability(),
        0.0,
        "10 001 − 1.0004 × 10 000 < 0: nothing may be refused"
    );
}

/// Steps: two partial breakers with `ki = 0.00001` and `initial_error_rate = 0` (both inside
/// the documented ranges; 0 is also where the ideal rate settles after a long all-success
/// stream), on manual clocks, with the same seed. Both take the same minute of total outage
/// (100 calls a second, every admitted call a failure), then a quiet spell of 1 000 000 s: one
/// clock jumps over it at once, the other moves a second at a time with `tick` after each step.
/// Both then move one more second and `tick`.
///
/// Promised (partial module docs, "Time, without a thread"): the update "replays every
/// boundary that passed since ... so the state at any instant is the one a thread ticking
/// exactly on the boundaries would have produced", and "a call after a year of quiet costs no
/// more than one after a second".
/// Observed: the breaker that jumped rejects 33 calls per million (rate 3.3e-5, integral
/// frozen at 3.31), the one that ticked rejects none (its integral has decayed to ≈ 5e-4).
/// The catch-up gave up after `MAX_REPLAY` (100 000) updates, set the rejection rate to 0 and
/// left the integral where it was, so the next update brought the rate back from the stale
/// integral. Now the rest of the quiet is applied in closed form (the module docs say: equal
/// within floating-point rounding).
#[cfg(feature = "partial")]
#[test]
fn a_long_quiet_spell_replayed_at_once_matches_a_thread_ticking_every_boundary() {
    use std::time::Duration;

    use rand::SeedableRng;
    use tripline::Outcome;
    use tripline_policies::partial::{PartialBreaker, PartialConfig};

    let outage = || {
        let clock = ManualClock::new();
        let b = PartialBreaker::with_clock_and_rng(
            PartialConfig::builder()
                .ki(0.00001)
                .initial_error_rate(0.0)
                .build()
                .unwrap(),
            clock.clone(),
            rand_pcg::Pcg64Mcg::seed_from_u64(3),
        );
        for _ in 0..6000 {
            if let Ok(p) = b.try_acquire() {
                p.record(Outcome::Failure);
            }
            clock.advance(Duration::from_millis(10));
        }
        (b, clock)
    };
    let (jumped, jumped_clock) = outage();
    let (ticked, ticked_clock) = outage();
    jumped_clock.advance(Duration::from_secs(1_000_000));
    jumped.tick();
    for _ in 0..1_000_000 {
        ticked_clock.advance(Duration::from_secs(1));
        ticked.tick();
    }
    jumped_clock.advance(Duration::from_secs(1));
    ticked_clock.advance(Duration::from_secs(1));
    jumped.tick();
    ticked.tick();
    // Past 100,000 intervals the quiet is applied in closed form: equal within rounding.
    let (a, b) = (jumped.snapshot(), ticked.snapshot());
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-6 * x.abs().max(y.abs()) + 1e-12;
    assert!(
        close(a.rejection_rate, b.rejection_rate),
        "jumped: {a:?}\nticked: {b:?}"
    );
    assert!(
        close(a.integral, b.integral),
        "jumped: {a:?}\nticked: {b:?}"
    );
}
