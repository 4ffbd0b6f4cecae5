//! The outlier detector on a manual clock: each rule with its thresholds and volume minimums,
//! ejection times growing and decaying, the cap, the panic threshold, host churn, bad input,
//! the balancers, events, and the tower layer with per-host breakers.
#![cfg(feature = "outlier")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tripline::{Clock, ManualClock};
use tripline_policies::outlier::{
    Balance, EjectionType, HostOutcome, OutlierConfig, OutlierConfigBuilder, OutlierDetector,
    OutlierEvent, OutlierEventKind,
};

const S: Duration = Duration::from_secs(1);

fn config() -> OutlierConfigBuilder {
    OutlierConfig::builder()
}

/// A detector over hosts 0..n on a manual clock, seeded.
fn detector(c: OutlierConfig, n: u32) -> (OutlierDetector<u32, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let d = OutlierDetector::builder(c)
        .clock(clock.clone())
        .seed(7)
        .build(0..n)
        .unwrap();
    (d, clock)
}

fn record(d: &OutlierDetector<u32, ManualClock>, host: u32, outcome: HostOutcome, times: u32) {
    for _ in 0..times {
        assert!(d.record_host(&host, outcome));
    }
}

fn ejected(d: &OutlierDetector<u32, ManualClock>, host: u32) -> bool {
    d.is_ejected(&host).unwrap()
}

fn events(d: &OutlierDetector<u32, ManualClock>) -> Arc<Mutex<Vec<OutlierEvent<u32>>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    d.subscribe(move |e| l.lock().unwrap().push(e.clone()));
    log
}

// ---- consecutive rules ----

#[test]
fn consecutive_5xx_ejects_at_exactly_five_in_a_row() {
    let (d, _) = detector(OutlierConfig::default(), 10);
    record(&d, 3, HostOutcome::Status(500), 4);
    record(&d, 3, HostOutcome::Success, 1); // a success resets the run
    record(&d, 3, HostOutcome::Status(503), 4);
    assert!(!ejected(&d, 3));
    record(&d, 3, HostOutcome::Status(500), 1);
    assert!(ejected(&d, 3));
    let s = d.stats();
    assert_eq!(s.enforced(EjectionType::Consecutive5xx), 1);
    assert_eq!(s.detected(EjectionType::Consecutive5xx), 1);
    assert_eq!((s.ejections_active, s.ejections_enforced_total), (1, 1));
    assert!(!d.selectable().contains(&3));
}

#[test]
fn a_4xx_is_a_success_for_the_consecutive_rules() {
    let (d, _) = detector(OutlierConfig::default(), 10);
    for _ in 0..10 {
        record(&d, 1, HostOutcome::Status(500), 4);
        record(&d, 1, HostOutcome::Status(404), 1);
    }
    assert!(!ejected(&d, 1));
}

#[test]
fn gateway_failures_are_detected_but_not_enforced_by_default() {
    let (d, _) = detector(config().consecutive_5xx(100).build().unwrap(), 10);
    record(&d, 2, HostOutcome::Status(502), 5);
    assert!(!ejected(&d, 2));
    let s = d.stats();
    assert_eq!(s.detected(EjectionType::ConsecutiveGatewayFailure), 1);
    assert_eq!(s.enforced(EjectionType::ConsecutiveGatewayFailure), 0);

    let (d, _) = detector(
        config()
            .consecutive_5xx(100)
            .enforcing_consecutive_gateway_failure(100)
            .build()
            .unwrap(),
        10,
    );
    // A 500 is a 5xx but not a gateway failure: it breaks the gateway run.
    record(&d, 2, HostOutcome::Status(503), 4);
    record(&d, 2, HostOutcome::Status(500), 1);
    record(&d, 2, HostOutcome::Status(504), 4);
    assert!(!ejected(&d, 2));
    record(&d, 2, HostOutcome::Status(502), 1);
    assert!(ejected(&d, 2));
    assert_eq!(
        d.stats().enforced(EjectionType::ConsecutiveGatewayFailure),
        1
    );
}

#[test]
fn unsplit_timeouts_and_connect_failures_count_as_5xx() {
    let (d, _) = detector(OutlierConfig::default(), 10);
    record(&d, 4, HostOutcome::Timeout, 3);
    record(&d, 4, HostOutcome::ConnectFailed, 1);
    record(&d, 4, HostOutcome::Failure, 1);
    assert!(ejected(&d, 4));
    assert_eq!(d.stats().enforced(EjectionType::Consecutive5xx), 1);
}

#[test]
fn split_mode_counts_local_origin_failures_apart() {
    let c = config()
        .split_external_local_origin_errors(true)
        .build()
        .unwrap();
    let (d, _) = detector(c, 10);
    // Timeouts do not feed the 5xx run, and a response breaks the local-origin run.
    record(&d, 5, HostOutcome::Status(500), 4);
    record(&d, 5, HostOutcome::Timeout, 4);
    record(&d, 5, HostOutcome::Status(500), 1);
    assert_eq!(d.stats().detected(EjectionType::Consecutive5xx), 1);
    assert!(ejected(&d, 5));

    let (d, _) = detector(c, 10);
    record(&d, 6, HostOutcome::Timeout, 4);
    record(&d, 6, HostOutcome::Status(200), 1);
    record(&d, 6, HostOutcome::ConnectFailed, 4);
    assert!(!ejected(&d, 6));
    record(&d, 6, HostOutcome::Timeout, 1);
    assert!(ejected(&d, 6));
    assert_eq!(
        d.stats()
            .enforced(EjectionType::ConsecutiveLocalOriginFailure),
        1
    );
}

// ---- rate rules ----

fn interval(d: &OutlierDetector<u32, ManualClock>, clock: &ManualClock) {
    clock.advance(Duration::from_secs(10));
    assert!(d.tick());
}

#[test]
fn success_rate_ejects_below_mean_minus_stdev_factor() {
    // Envoy's example: rates 50, 100, 100, 100, 100: mean 90, stdev 20, threshold 52.
    // One host of five is 20 %: the cap must allow it.
    let sr = config().consecutive_5xx(1000).max_ejection_percent(20);
    let (d, clock) = detector(sr.build().unwrap(), 5);
    for h in 0..5 {
        record(&d, h, HostOutcome::Success, if h == 0 { 50 } else { 100 });
    }
    record(&d, 0, HostOutcome::Status(500), 50);
    interval(&d, &clock);
    assert!(ejected(&d, 0));
    assert_eq!(d.stats().enforced(EjectionType::SuccessRate), 1);
    assert_eq!(d.host_status(&1).unwrap().success_rate, Some(100.0));

    // Rates 90, 95, 100, 100, 100: mean 97, stdev 4, threshold 89.4; 90 is not an outlier.
    let (d, clock) = detector(sr.build().unwrap(), 5);
    record(&d, 0, HostOutcome::Success, 90);
    record(&d, 0, HostOutcome::Status(500), 10);
    record(&d, 1, HostOutcome::Success, 95);
    record(&d, 1, HostOutcome::Status(500), 5);
    for h in 2..5 {
        record(&d, h, HostOutcome::Success, 100);
    }
    interval(&d, &clock);
    assert_eq!(d.stats().detected(EjectionType::SuccessRate), 0);
    // A stricter factor (1.0) puts the threshold at 93: host 0 is one.
    let (d, clock) = detector(sr.success_rate_stdev_factor(1000).build().unwrap(), 5);
    record(&d, 0, HostOutcome::Success, 90);
    record(&d, 0, HostOutcome::Status(500), 10);
    record(&d, 1, HostOutcome::Success, 95);
    record(&d, 1, HostOutcome::Status(500), 5);
    for h in 2..5 {
        record(&d, h, HostOutcome::Success, 100);
    }
    interval(&d, &clock);
    assert!(ejected(&d, 0) && !ejected(&d, 1));
}

#[test]
fn success_rate_needs_volume_and_enough_hosts() {
    let c = config().consecutive_5xx(1000).build().unwrap();
    // The bad host has 99 requests: below success_rate_request_volume (100).
    let (d, clock) = detector(c, 6);
    record(&d, 0, HostOutcome::Status(500), 99);
    for h in 1..6 {
        record(&d, h, HostOutcome::Success, 100);
    }
    interval(&d, &clock);
    assert_eq!(d.stats().detected(EjectionType::SuccessRate), 0);

    // Only 4 hosts have the volume: below success_rate_minimum_hosts (5).
    let (d, clock) = detector(c, 6);
    record(&d, 0, HostOutcome::Status(500), 100);
    for h in 1..4 {
        record(&d, h, HostOutcome::Success, 100);
    }
    record(&d, 4, HostOutcome::Success, 10);
    interval(&d, &clock);
    assert_eq!(d.stats().detected(EjectionType::SuccessRate), 0);

    // Counts are per interval: the previous interval's requests do not add up.
    let (d, clock) = detector(c, 5);
    for h in 0..5 {
        record(&d, h, HostOutcome::Success, 60);
    }
    interval(&d, &clock);
    record(&d, 0, HostOutcome::Status(500), 60);
    for h in 1..5 {
        record(&d, h, HostOutcome::Success, 60);
    }
    interval(&d, &clock);
    assert_eq!(d.stats().detected(EjectionType::SuccessRate), 0);
}

#[test]
fn failure_percentage_ejects_at_the_threshold_with_volume() {
    let c = config()
        .consecutive_5xx(1000)
        .enforcing_success_rate(0)
        .enforcing_failure_percentage(100)
        .max_ejection_percent(20)
        .build()
        .unwrap();
    let (d, clock) = detector(c, 5);
    // 85 of 100 fail: at the threshold (85 %), ejected; 84 of 100: not.
    record(&d, 0, HostOutcome::Status(500), 85);
    record(&d, 0, HostOutcome::Success, 15);
    record(&d, 1, HostOutcome::Status(500), 84);
    record(&d, 1, HostOutcome::Success, 16);
    for h in 2..5 {
        record(&d, h, HostOutcome::Success, 50);
    }
    interval(&d, &clock);
    assert!(ejected(&d, 0));
    assert!(!ejected(&d, 1));
    assert_eq!(d.stats().enforced(EjectionType::FailurePercentage), 1);

    // 49 requests: below failure_percentage_request_volume (50).
    let (d, clock) = detector(c, 5);
    record(&d, 0, HostOutcome::Status(500), 49);
    for h in 1..5 {
        record(&d, h, HostOutcome::Success, 50);
    }
    interval(&d, &clock);
    assert_eq!(d.stats().detected(EjectionType::FailurePercentage), 0);

    // Four hosts: below failure_percentage_minimum_hosts (5).
    let (d, clock) = detector(c, 4);
    record(&d, 0, HostOutcome::Status(500), 100);
    for h in 1..4 {
        record(&d, h, HostOutcome::Success, 50);
    }
    interval(&d, &clock);
    assert_eq!(d.stats().detected(EjectionType::FailurePercentage), 0);
}

#[test]
fn split_mode_runs_the_rate_rules_on_local_origin_results_too() {
    let c = config()
        .split_external_local_origin_errors(true)
        .consecutive_local_origin_failure(1000)
        .enforcing_success_rate(0)
        .max_ejection_percent(20)
        .build()
        .unwrap();
    let (d, clock) = detector(c, 5);
    record(&d, 0, HostOutcome::Timeout, 100);
    for h in 1..5 {
        record(&d, h, HostOutcome::Success, 100);
    }
    interval(&d, &clock);
    assert!(ejected(&d, 0));
    let s = d.stats();
    assert_eq!(s.enforced(EjectionType::LocalOriginSuccessRate), 1);
    assert_eq!(s.detected(EjectionType::SuccessRate), 0);
}

// ---- ejection time ----

#[test]
fn ejection_time_grows_with_each_ejection_up_to_the_max() {
    let c = config()
        .interval(S)
        .base_ejection_time(Duration::from_secs(3))
        .max_ejection_time(Duration::from_secs(7))
        .build()
        .unwrap();
    let (d, clock) = detector(c, 10);
    let mut times = Vec::new();
    for _ in 0..5 {
        record(&d, 0, HostOutcome::Status(500), 5);
        assert!(ejected(&d, 0));
        let st = d.host_status(&0).unwrap();
        let since = clock.now();
        times.push((st.ejected_until.unwrap() - since) / 1_000_000_000);
        // Not back before its time...
        while st.ejected_until.unwrap() > clock.now() + 1_000_000_000 {
            clock.advance(S);
            d.tick();
            assert!(ejected(&d, 0), "back early at {:?}", clock.elapsed());
        }
        // ...and back at the first sweep after it.
        clock.advance(S);
        d.tick();
        assert!(!ejected(&d, 0));
    }
    assert_eq!(times, [3, 6, 7, 7, 7]);
}

#[test]
fn the_multiplier_decays_while_the_host_stays_healthy() {
    let c = config()
        .interval(S)
        .base_ejection_time(S)
        .max_ejection_time(Duration::from_secs(100))
        .build()
        .unwrap();
    let (d, clock) = detector(c, 10);
    for _ in 0..4 {
        record(&d, 0, HostOutcome::Status(500), 5);
        let until = d.host_status(&0).unwrap().ejected_until.unwrap();
        clock.set(Duration::from_nanos(until));
        d.tick();
        assert!(!ejected(&d, 0));
    }
    assert_eq!(d.host_status(&0).unwrap().multiplier, 4);
    // One step per sweep once it has been back a whole interval.
    let mut seen = Vec::new();
    for _ in 0..6 {
        clock.advance(S);
        d.tick();
        seen.push(d.host_status(&0).unwrap().multiplier);
    }
    assert_eq!(seen, [3, 2, 1, 0, 0, 0]);
    record(&d, 0, HostOutcome::Status(500), 5);
    let st = d.host_status(&0).unwrap();
    assert_eq!(
        (st.multiplier, st.ejected_until.unwrap() - clock.now()),
        (1, 1_000_000_000)
    );
}

#[test]
fn jitter_adds_at_most_max_ejection_time_jitter() {
    let c = config()
        .interval(S)
        .max_ejection_time_jitter(Duration::from_secs(5))
        .build()
        .unwrap();
    let (d, clock) = detector(c, 10);
    let mut extra = Vec::new();
    for _ in 0..50 {
        record(&d, 0, HostOutcome::Status(500), 5);
        let st = d.host_status(&0).unwrap();
        let len = st.ejected_until.unwrap() - clock.now();
        let base = 30_000_000_000 * u64::from(st.multiplier);
        assert!(len >= base.min(300_000_000_000), "{len}");
        extra.push(len - base.min(300_000_000_000));
        clock.set(Duration::from_nanos(st.ejected_until.unwrap()));
        d.tick();
    }
    assert!(extra.iter().all(|&e| e <= 5_000_000_000));
    assert!(extra.iter().any(|&e| e > 0));
}

#[test]
fn time_far_from_the_origin_and_long_jumps() {
    let clock = ManualClock::new();
    clock.set(Duration::from_nanos(u64::MAX - 3_600_000_000_000));
    let d = OutlierDetector::builder(OutlierConfig::default())
        .clock(clock.clone())
        .seed(1)
        .build(0..10u32)
        .unwrap();
    record(&d, 0, HostOutcome::Status(500), 5);
    assert!(ejected(&d, 0));
    clock.advance(Duration::from_secs(40));
    d.tick();
    assert!(!ejected(&d, 0));

    // Ten years of quiet, then a failure run: ejected, and back 30 s later.
    let (d, clock) = detector(OutlierConfig::default(), 10);
    clock.advance(Duration::from_secs(10 * 365 * 24 * 3600));
    record(&d, 1, HostOutcome::Status(500), 5);
    assert!(ejected(&d, 1));
    clock.advance(Duration::from_secs(30));
    d.tick();
    assert!(!ejected(&d, 1));
}

// ---- the cap and panic ----

#[test]
fn the_cap_refuses_ejections_over_max_ejection_percent() {
    let (d, _) = detector(OutlierConfig::default(), 10);
    let log = events(&d);
    record(&d, 0, HostOutcome::Status(500), 5);
    record(&d, 1, HostOutcome::Status(500), 15);
    assert!(ejected(&d, 0));
    assert!(!ejected(&d, 1));
    let s = d.stats();
    assert_eq!((s.ejections_active, s.ejections_overflow), (1, 3));
    assert_eq!(s.detected(EjectionType::Consecutive5xx), 4);
    let kinds: Vec<_> = log.lock().unwrap().iter().map(|e| e.kind.clone()).collect();
    assert!(matches!(
        kinds[0],
        OutlierEventKind::Ejected {
            ejection_type: EjectionType::Consecutive5xx,
            ..
        }
    ));
    assert_eq!(
        kinds[1],
        OutlierEventKind::Overflow {
            ejection_type: EjectionType::Consecutive5xx
        }
    );

    // A 10 % cap on 5 hosts ejects nobody, unless always_eject_one_host.
    let (d, _) = detector(OutlierConfig::default(), 5);
    record(&d, 0, HostOutcome::Status(500), 5);
    assert!(!ejected(&d, 0));
    let (d, _) = detector(config().always_eject_one_host(true).build().unwrap(), 5);
    record(&d, 0, HostOutcome::Status(500), 5);
    record(&d, 1, HostOutcome::Status(500), 5);
    assert!(ejected(&d, 0) && !ejected(&d, 1));
}

#[test]
fn without_a_cap_the_last_host_always_stays_in() {
    let c = config()
        .max_ejection_percent(100)
        .healthy_panic_threshold(0.0)
        .build()
        .unwrap();
    let (d, _) = detector(c, 10);
    for h in 0..10 {
        record(&d, h, HostOutcome::Status(500), 5);
    }
    let s = d.stats();
    assert_eq!((s.ejections_active, s.ejections_overflow), (9, 1));
    assert_eq!(d.selectable(), [9]);
    assert!(!s.panic);
    for _ in 0..5 {
        assert_eq!(*d.pick().host(), 9);
    }
}

#[test]
fn below_the_panic_threshold_the_balancer_uses_every_host() {
    let c = config().max_ejection_percent(100).build().unwrap();
    let (d, clock) = detector(c, 10);
    let log = events(&d);
    for h in 0..5 {
        record(&d, h, HostOutcome::Status(500), 5);
    }
    // 5 of 10 healthy: 50 % is not below 50 %.
    assert!(!d.stats().panic);
    assert_eq!(d.selectable().len(), 5);
    record(&d, 5, HostOutcome::Status(500), 5);
    let s = d.stats();
    assert!(s.panic);
    assert_eq!(s.ejections_active, 6);
    assert_eq!(d.selectable().len(), 10);
    let picked: std::collections::BTreeSet<u32> = (0..10).map(|_| *d.pick().host()).collect();
    assert_eq!(picked.len(), 10);
    assert_eq!(d.stats().lb_healthy_panic, 10);
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|e| e.kind == OutlierEventKind::PanicStarted && e.ejections_active == 6)
    );
    // The hosts return; panic ends.
    clock.advance(Duration::from_secs(30));
    d.tick();
    assert!(!d.stats().panic);
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|e| e.kind == OutlierEventKind::PanicEnded)
    );
}

#[test]
fn enforcing_percentages_eject_that_share_of_outliers() {
    let c = config()
        .enforcing_consecutive_5xx(30)
        .interval(Duration::from_millis(1))
        .base_ejection_time(Duration::from_millis(1))
        .max_ejection_time(Duration::from_millis(1))
        .build()
        .unwrap();
    let (d, clock) = detector(c, 10);
    for _ in 0..2000 {
        record(&d, 0, HostOutcome::Status(500), 5);
        clock.advance(Duration::from_millis(2));
        d.tick();
    }
    let s = d.stats();
    assert_eq!(s.detected(EjectionType::Consecutive5xx), 2000);
    let enforced = s.enforced(EjectionType::Consecutive5xx);
    assert!((500..700).contains(&enforced), "{enforced}");
}

// ---- balancers ----

#[test]
fn round_robin_spreads_evenly_over_the_survivors() {
    let (d, _) = detector(OutlierConfig::default(), 10);
    record(&d, 4, HostOutcome::Status(500), 5);
    let mut counts = [0u32; 10];
    for _ in 0..900 {
        let p = d.pick();
        counts[*p.host() as usize] += 1;
    }
    assert_eq!(counts[4], 0);
    assert!(
        counts.iter().enumerate().all(|(i, &c)| i == 4 || c == 100),
        "{counts:?}"
    );
}

#[test]
fn power_of_two_choices_avoids_the_busier_host() {
    let clock = ManualClock::new();
    let d = OutlierDetector::builder(OutlierConfig::default())
        .clock(clock)
        .balance(Balance::PowerOfTwoChoices)
        .seed(3)
        .build(0..2u32)
        .unwrap();
    let held: Vec<_> = (0..3).map(|_| d.pick()).collect();
    // Two hosts, both always drawn: the picks alternate to keep them even.
    let on0 = held.iter().filter(|p| *p.host() == 0).count();
    assert!(on0 == 1 || on0 == 2);
    let busy = if on0 == 2 { 0 } else { 1 };
    let next = d.pick();
    assert_ne!(*next.host(), busy);
    assert_eq!(d.host_status(&busy).unwrap().in_flight, 2);
    drop(held);
    assert_eq!(d.host_status(&busy).unwrap().in_flight, 0);
    // It skips ejected hosts as well.
    let (d, _) = detector(OutlierConfig::default(), 10);
    let d2 = OutlierDetector::builder(*d.config())
        .balance(Balance::PowerOfTwoChoices)
        .seed(5)
        .build(0..10u32)
        .unwrap();
    for _ in 0..5 {
        d2.record_host(&2, HostOutcome::Status(500));
    }
    assert!((0..500).all(|_| *d2.pick_p2c().host() != 2));
}

// ---- hosts come and go ----

#[test]
fn a_removed_host_loses_its_state_and_a_returning_host_starts_fresh() {
    let (d, _) = detector(OutlierConfig::default(), 10);
    record(&d, 0, HostOutcome::Status(500), 5);
    record(&d, 1, HostOutcome::Status(500), 4);
    let stale = loop {
        let p = d.pick();
        if *p.host() == 1 {
            break p;
        }
    };
    assert_eq!(d.stats().ejections_active, 1);
    let change = d.set_hosts(2..10).unwrap();
    assert_eq!((change.removed, change.kept), (2, 8));
    assert_eq!(d.stats().ejections_active, 0);
    assert_eq!(d.is_ejected(&0), None);
    assert!(!d.record_host(&1, HostOutcome::Status(500)));
    // Back again: fresh counters, fresh multiplier.
    d.set_hosts(0..10).unwrap();
    assert_eq!(d.host_status(&0).unwrap().multiplier, 0);
    assert_eq!(d.host_status(&1).unwrap().consecutive_5xx, 0);
    // A pick made before the removal records nothing on the new host 1.
    d.record(stale, HostOutcome::Status(500));
    assert_eq!(d.host_status(&1).unwrap().consecutive_5xx, 0);
    record(&d, 1, HostOutcome::Status(500), 4);
    assert!(!ejected(&d, 1));
}

#[test]
fn churn_does_not_grow_the_state() {
    let (d, clock) = detector(OutlierConfig::default(), 10);
    for round in 0..2000u32 {
        // A rolling deploy: a new pod replaces the oldest each round.
        let hosts: Vec<u32> = (round + 1..round + 11).collect();
        d.set_hosts(hosts).unwrap();
        let p = d.pick();
        d.record(p, HostOutcome::Status(500));
        if round % 7 == 0 {
            record(&d, round + 5, HostOutcome::Status(500), 5);
        }
        clock.advance(Duration::from_millis(500));
    }
    assert_eq!(d.hosts().len(), 10);
    let s = d.stats();
    assert_eq!(s.hosts, 10);
    assert!(s.ejections_active <= 1);
}

#[test]
fn bad_input_is_an_error_naming_field_value_and_range() {
    let err = |b: OutlierConfigBuilder| b.build().unwrap_err().to_string();
    assert_eq!(
        err(config().enforcing_success_rate(101)),
        "enforcing_success_rate must be in [0, 100], got 101"
    );
    assert_eq!(
        err(config().healthy_panic_threshold(-1.0)),
        "healthy_panic_threshold must be in [0, 100], got -1"
    );
    assert_eq!(
        err(config().healthy_panic_threshold(f64::NAN)),
        "healthy_panic_threshold must be in [0, 100], got NaN"
    );
    assert_eq!(
        err(config().failure_percentage_threshold(200)),
        "failure_percentage_threshold must be in [0, 100], got 200"
    );
    assert_eq!(
        err(config().base_ejection_time(Duration::ZERO)),
        "base_ejection_time must be in [1ms, 86400s], got 0ns"
    );
    assert!(
        err(config().consecutive_5xx(0)).starts_with("consecutive_5xx must be in [1, 1048576]")
    );
    assert_eq!(
        err(config().max_hosts(0)),
        "max_hosts must be in [1, 1000000], got 0"
    );
    let c = config().max_hosts(3).build().unwrap();
    let e = OutlierDetector::builder(c).build(0..4u32).unwrap_err();
    assert_eq!(e.field(), "hosts");
    assert_eq!(
        e.to_string(),
        "hosts must be at most max_hosts = 3 hosts, got more than 3 hosts"
    );
    let (d, _) = detector(OutlierConfig::default(), 2);
    assert!(d.set_hosts(std::iter::empty()).is_err());
    assert!(d.set_hosts([1, 1]).is_err());
    assert_eq!(d.hosts(), [0, 1]); // nothing changed
    assert!(d.remove_host(&0).unwrap());
    assert!(!d.remove_host(&0).unwrap());
    let e = d.remove_host(&1).unwrap_err();
    assert_eq!(
        e.to_string(),
        "hosts must be at least one host, got removing 1, the last host"
    );
    d.add_host(5).unwrap();
    assert!(d.add_host(5).is_err());
}

#[test]
fn events_are_ordered_and_name_the_host() {
    let (d, clock) = detector(OutlierConfig::default(), 10);
    let log = events(&d);
    record(&d, 2, HostOutcome::Status(500), 5);
    clock.advance(Duration::from_secs(30));
    d.tick();
    d.remove_host(&3).unwrap();
    let log = log.lock().unwrap();
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
    let got: Vec<(Option<u32>, OutlierEventKind)> =
        log.iter().map(|e| (e.host, e.kind.clone())).collect();
    assert_eq!(
        got,
        [
            (
                Some(2),
                OutlierEventKind::Ejected {
                    ejection_type: EjectionType::Consecutive5xx,
                    duration: Duration::from_secs(30),
                    multiplier: 1
                }
            ),
            (Some(2), OutlierEventKind::Returned),
            (Some(3), OutlierEventKind::HostRemoved),
        ]
    );
    assert_eq!(log[1].at, 30_000_000_000);
}

#[test]
fn sweeps_run_from_picks_and_records_without_a_tick() {
    let (d, clock) = detector(OutlierConfig::default(), 10);
    record(&d, 2, HostOutcome::Status(500), 5);
    clock.advance(Duration::from_secs(30));
    drop(d.pick());
    assert!(!ejected(&d, 2));
    // No sweep is due again for an interval.
    assert!(!d.tick());
}

// ---- tower, per-host breakers, metrics ----

#[cfg(feature = "tower")]
mod tower_layer {
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};

    use tower::{Layer, Service, ServiceExt, service_fn};
    use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
    use tripline::{BreakerConfig, ManualClock};
    use tripline_policies::BoxError;
    use tripline_policies::outlier::{HostOutcome, OutlierConfig, OutlierDetector, OutlierLayer};

    fn detector() -> OutlierDetector<&'static str, ManualClock> {
        OutlierDetector::builder(OutlierConfig::default())
            .clock(ManualClock::new())
            .seed(1)
            .build(["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"])
            .unwrap()
    }

    #[tokio::test]
    async fn the_layer_records_each_result_on_the_picked_host() {
        let d = detector();
        let svc = OutlierLayer::new(d.clone()).layer(service_fn(
            |(host, _): (&'static str, u32)| async move {
                if host == "c" {
                    Err::<&str, BoxError>("500".into())
                } else {
                    Ok(host)
                }
            },
        ));
        let mut answered = Vec::new();
        for i in 0..100 {
            match svc.clone().oneshot(i).await {
                Ok(h) => answered.push(h),
                Err(e) => assert_eq!(e.to_string(), "500"),
            }
        }
        // "c" failed 5 calls in a row (an error is a Failure, a 5xx): ejected; the rest served.
        assert_eq!(d.is_ejected(&"c"), Some(true));
        assert_eq!(answered.len(), 95);
        assert!(!answered.contains(&"c"));
    }

    #[test]
    fn a_dropped_response_records_nothing() {
        let d = detector();
        let mut svc =
            OutlierLayer::new(d.clone()).layer(service_fn(|(_h, _): (&'static str, u32)| {
                std::future::pending::<Result<u32, BoxError>>()
            }));
        let mut cx = Context::from_waker(Waker::noop());
        assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
        let mut fut = Box::pin(svc.call(1));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert_eq!(d.host_status(&"a").unwrap().in_flight, 1);
        drop(fut);
        let st = d.host_status(&"a").unwrap();
        assert_eq!((st.in_flight, st.consecutive_5xx), (0, 0));
    }

    /// Per-host breakers from a registry compose with the detector: the detector picks the
    /// host, the inner service calls through that host's breaker, and a breaker's rejection
    /// (a local refusal) is not counted against the host.
    #[test]
    fn per_host_breakers_from_the_registry_compose() {
        let d = detector();
        let small = BreakerConfig::builder()
            .count_window(2)
            .minimum_calls(2)
            .failure_rate_threshold(50.0)
            .build()
            .unwrap();
        let registry = Arc::new(
            Registry::with_clock(
                RegistryConfig::default().with_config("default", small),
                ManualClock::new(),
            )
            .unwrap(),
        );
        let r = registry.clone();
        let inner = service_fn(move |(host, fail): (&'static str, bool)| {
            let breaker = r.get(&Key::scoped("catalog", ScopeKind::Host, host).unwrap());
            async move {
                let breaker = breaker.map_err(|e| -> BoxError { e.to_string().into() })?;
                let permit = breaker.try_acquire_owned()?;
                let result: Result<&str, BoxError> =
                    if fail { Err("502".into()) } else { Ok(host) };
                let _ = permit.record(if result.is_ok() {
                    tripline::Outcome::Success
                } else {
                    tripline::Outcome::Failure
                });
                result
            }
        });
        let mut svc = OutlierLayer::new(d.clone()).layer(inner);
        let mut cx = Context::from_waker(Waker::noop());
        let mut call = |fail: bool| {
            assert!(matches!(svc.poll_ready(&mut cx), Poll::Ready(Ok(()))));
            match pin!(svc.call(fail)).poll(&mut cx) {
                Poll::Ready(r) => r,
                Poll::Pending => unreachable!(),
            }
        };
        // Host "a" fails twice: its breaker opens (2 of 2); the detector saw 2 failures.
        assert!(call(true).is_err()); // a
        for _ in 0..9 {
            call(false).unwrap(); // b..j
        }
        assert!(call(true).is_err()); // a again: its breaker opens
        for _ in 0..9 {
            call(false).unwrap();
        }
        // Now every call to "a" is rejected by its breaker, locally: not recorded on "a".
        for _ in 0..30 {
            let _ = call(false);
        }
        let key = Key::scoped("catalog", ScopeKind::Host, "a").unwrap();
        assert_eq!(registry.get(&key).unwrap().state(), tripline::State::Open);
        let st = d.host_status(&"a").unwrap();
        assert_eq!(st.consecutive_5xx, 2);
        assert_eq!(d.is_ejected(&"a"), Some(false));
        let _ = HostOutcome::Success;
    }
}

#[cfg(feature = "metrics")]
#[test]
fn metrics_use_envoys_names() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tripline_policies::outlier::OutlierMetrics;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let c = config().max_ejection_percent(100).build().unwrap();
    let (d, _) = detector(c, 4);
    metrics::with_local_recorder(&recorder, || {
        let m = OutlierMetrics::new(&d, Vec::new());
        record(&d, 0, HostOutcome::Status(500), 5);
        record(&d, 1, HostOutcome::Status(500), 5);
        record(&d, 2, HostOutcome::Status(500), 5);
        record(&d, 3, HostOutcome::Status(500), 5);
        drop(d.pick());
        m.update(&d);
    });
    let snapshot = snapshotter.snapshot().into_vec();
    let get = |name: &str| {
        snapshot
            .iter()
            .find(|(k, _, _, _)| {
                k.key().name() == name
                    && k.key()
                        .labels()
                        .any(|l| l.key() == "upstream" && l.value() == "upstream")
            })
            .map(|(_, _, _, v)| v)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(
        get("tripline_outlier_ejections_enforced_consecutive_5xx_total"),
        &DebugValue::Counter(3)
    );
    assert_eq!(
        get("tripline_outlier_ejections_enforced_total"),
        &DebugValue::Counter(3)
    );
    assert_eq!(
        get("tripline_outlier_ejections_overflow_total"),
        &DebugValue::Counter(1)
    );
    assert_eq!(
        get("tripline_outlier_ejections_detected_consecutive_5xx_total"),
        &DebugValue::Counter(4)
    );
    assert_eq!(
        get("tripline_outlier_lb_healthy_panic_total"),
        &DebugValue::Counter(1)
    );
    let gauge = |name: &str| match get(name) {
        DebugValue::Gauge(g) => g.0,
        v => panic!("{name}: {v:?}"),
    };
    assert_eq!(gauge("tripline_outlier_ejections_active"), 3.0);
    assert_eq!(gauge("tripline_outlier_panic"), 1.0);
    assert_eq!(gauge("tripline_outlier_hosts"), 4.0);
    assert_eq!(gauge("tripline_outlier_hosts_healthy"), 1.0);
}

#[test]
fn picks_and_records_allocate_nothing() {
    let (rr, _) = detector(OutlierConfig::default(), 10);
    let p2c = OutlierDetector::builder(OutlierConfig::default())
        .clock(ManualClock::new())
        .balance(Balance::PowerOfTwoChoices)
        .seed(2)
        .build(0..10u32)
        .unwrap();
    let run = |n: u32| {
        for i in 0..n {
            for d in [&rr, &p2c] {
                let p = d.pick();
                let outcome = if i % 3 == 0 {
                    HostOutcome::Status(503)
                } else {
                    HostOutcome::Success
                };
                d.record(p, outcome);
                d.record_host(&(i % 10), HostOutcome::Success);
            }
        }
    };
    run(10);
    let info = allocation_counter::measure(|| run(1000));
    assert_eq!(info.count_total, 0);
}

/// Bounded real-thread stress: two threads pick and record (half of one host's calls fail)
/// while a third changes the host set and moves the clock, and a listener records from inside
/// its calls. Afterwards every pick is given back, the cap held at every ejection, a host is
/// selectable, and the events reached the listeners in sequence order.
#[test]
fn concurrent_picks_records_churn_and_sweeps_keep_the_invariants() {
    let c = config()
        .interval(Duration::from_millis(10))
        .base_ejection_time(Duration::from_millis(30))
        .max_ejection_percent(20)
        .build()
        .unwrap();
    let (d, clock) = detector(c, 10);
    let log = events(&d);
    // A listener that calls back in, from whichever thread delivers.
    let d2 = d.clone();
    d.subscribe(move |e| {
        if let (Some(h), OutlierEventKind::Ejected { .. }) = (e.host, &e.kind) {
            d2.record_host(&(h + 1), HostOutcome::Success);
            let _ = d2.stats();
        }
    });
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let d = d.clone();
            s.spawn(move || {
                for i in 0..20_000u32 {
                    let p = d.pick();
                    let bad = *p.host() % 5 == t;
                    let outcome = if bad && i % 2 == 0 {
                        HostOutcome::Status(500)
                    } else {
                        HostOutcome::Success
                    };
                    if i % 97 == 0 {
                        drop(p);
                    } else {
                        d.record(p, outcome);
                    }
                }
            });
        }
        let d = d.clone();
        let clock = clock.clone();
        s.spawn(move || {
            for round in 0..400u32 {
                let start = round % 3;
                d.set_hosts(start..start + 10).unwrap();
                clock.advance(Duration::from_millis(5));
                d.tick();
            }
        });
    });
    for h in d.hosts() {
        assert_eq!(d.host_status(&h).unwrap().in_flight, 0, "host {h}");
    }
    assert!(!d.selectable().is_empty());
    let log = log.lock().unwrap();
    let mut ejections = 0;
    for e in log.iter() {
        if let OutlierEventKind::Ejected { .. } = e.kind {
            ejections += 1;
            assert!(e.ejections_active <= 2, "{e:?}");
        }
    }
    assert!(ejections > 0);
    // One delivery loop at a time: the listener got every event, in sequence order,
    // whichever thread caused it.
    let seqs: Vec<u64> = log.iter().map(|e| e.seq).collect();
    assert!(seqs.iter().copied().eq(1..=seqs.len() as u64), "{seqs:?}");
}

// ---- listeners and clocks that call back in ----

/// Runs `f` on its own thread and fails if it has not finished within a generous bound: a
/// call that deadlocks never finishes.
fn finishes<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what} did not finish: deadlocked"))
}

/// `(listener, event)` in the order the listeners were called.
type SharedLog = Arc<Mutex<Vec<(u8, OutlierEvent<u32>)>>>;

/// Two listeners logging `(listener, seq)` in one shared log, in the order they were called.
fn two_logs(
    d: &OutlierDetector<u32, ManualClock>,
    first: impl Fn(&OutlierEvent<u32>) + Send + Sync + 'static,
) -> SharedLog {
    let log: SharedLog = Arc::default();
    let l = log.clone();
    d.subscribe(move |e| {
        l.lock().unwrap().push((1, e.clone()));
        first(e);
    });
    let l = log.clone();
    d.subscribe(move |e| l.lock().unwrap().push((2, e.clone())));
    log
}

/// Every listener saw every event in sequence order, and event n reached every listener before
/// any listener saw event n + 1.
fn assert_delivered_in_sequence(log: &[(u8, OutlierEvent<u32>)]) {
    let seqs: Vec<(u64, u8)> = log.iter().map(|(l, e)| (e.seq, *l)).collect();
    let mut sorted = seqs.clone();
    sorted.sort_unstable();
    assert_eq!(seqs, sorted, "delivered out of sequence");
    let n = log.iter().map(|(_, e)| e.seq).max().unwrap_or(0);
    assert_eq!(
        log.len() as u64,
        2 * n,
        "an event missed a listener: {seqs:?}"
    );
}

#[test]
fn a_listener_that_changes_the_host_set_leaves_the_events_in_sequence() {
    let (d, _) = detector(config().max_ejection_percent(20).build().unwrap(), 10);
    let d2 = d.clone();
    let log = two_logs(&d, move |e| {
        if let OutlierEventKind::Ejected { .. } = e.kind {
            // A deploy reacting to the ejection: the set changes from inside the listener.
            d2.remove_host(&9).unwrap();
            d2.add_host(10).unwrap();
        }
    });
    record(&d, 0, HostOutcome::Status(500), 5);
    let log = log.lock().unwrap();
    assert_delivered_in_sequence(&log);
    let second: Vec<(Option<u32>, OutlierEventKind)> = log
        .iter()
        .filter(|(l, _)| *l == 2)
        .map(|(_, e)| (e.host, e.kind.clone()))
        .collect();
    assert!(matches!(
        second[0],
        (Some(0), OutlierEventKind::Ejected { .. })
    ));
    assert_eq!(second[1], (Some(9), OutlierEventKind::HostRemoved));
    assert_eq!(second[2], (Some(10), OutlierEventKind::HostAdded));
}

#[test]
fn a_listener_that_records_on_another_host_sees_ejected_before_returned() {
    let (d, clock) = detector(OutlierConfig::default(), 10);
    let (d2, c2) = (d.clone(), clock.clone());
    let log = two_logs(&d, move |e| {
        if let (Some(0), OutlierEventKind::Ejected { .. }) = (e.host, &e.kind) {
            // The ejection is over by the time the listener records on host 1: the sweep it
            // runs returns host 0, after the ejection every listener must see first.
            c2.advance(Duration::from_secs(30));
            d2.record_host(&1, HostOutcome::Success);
        }
    });
    record(&d, 0, HostOutcome::Status(500), 5);
    let log = log.lock().unwrap();
    assert_delivered_in_sequence(&log);
    let second: Vec<OutlierEventKind> = log
        .iter()
        .filter(|(l, _)| *l == 2)
        .map(|(_, e)| e.kind.clone())
        .collect();
    assert!(
        matches!(second[0], OutlierEventKind::Ejected { .. }),
        "{second:?}"
    );
    assert_eq!(second[1], OutlierEventKind::Returned);
    assert!(!ejected(&d, 0));
}

/// A clock that reads the detector it times (an operator's clock that logs the figures).
#[derive(Clone)]
struct ReadingClock {
    clock: ManualClock,
    detector: Arc<std::sync::OnceLock<OutlierDetector<u32, ReadingClock>>>,
    reads: Arc<std::sync::atomic::AtomicU64>,
}

impl Clock for ReadingClock {
    fn now(&self) -> u64 {
        if let Some(d) = self.detector.get() {
            let s = d.stats();
            let _ = (d.host_status(&0), d.ejected(), d.ejections_active(), s);
            self.reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.clock.now()
    }
}

#[test]
fn a_clock_that_reads_the_detector_does_not_deadlock() {
    let clock = ReadingClock {
        clock: ManualClock::new(),
        detector: Arc::default(),
        reads: Arc::default(),
    };
    let d = OutlierDetector::builder(OutlierConfig::default())
        .clock(clock.clone())
        .seed(1)
        .build(0..10u32)
        .unwrap();
    assert!(clock.detector.set(d.clone()).is_ok());
    let reads = clock.reads.clone();
    finishes("a sweep, an ejection and a change of the set", move || {
        clock.clock.advance(Duration::from_secs(10));
        assert!(d.tick());
        for _ in 0..5 {
            d.record_host(&3, HostOutcome::Status(500));
        }
        assert!(ejected_c(&d, 3));
        clock.clock.advance(Duration::from_secs(30));
        let p = d.pick(); // the sweep that returns host 3, from a pick
        d.record(p, HostOutcome::Success);
        assert!(!ejected_c(&d, 3));
        d.set_hosts(0..5).unwrap();
    });
    assert!(reads.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

fn ejected_c<C: Clock>(d: &OutlierDetector<u32, C>, host: u32) -> bool {
    d.is_ejected(&host).unwrap()
}

#[test]
fn a_listener_may_call_every_method_of_its_detector() {
    let (d, clock) = detector(config().max_ejection_percent(50).build().unwrap(), 10);
    let d2 = d.clone();
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let c = calls.clone();
    d.subscribe(move |e| {
        c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let _ = (
            d2.stats(),
            d2.hosts(),
            d2.selectable(),
            d2.ejected(),
            d2.in_panic(),
        );
        let _ = (d2.host_status(&1), d2.is_ejected(&1), d2.ejections_active());
        let p = d2.pick();
        d2.record(p, HostOutcome::Success);
        d2.tick();
        if let (Some(2), OutlierEventKind::Ejected { .. }) = (e.host, &e.kind) {
            for _ in 0..5 {
                d2.record_host(&4, HostOutcome::Status(500));
            }
            d2.subscribe(|_| {});
            d2.set_hosts(0..12).unwrap();
        }
    });
    let d3 = d.clone();
    finishes("events whose listener calls back in", move || {
        for _ in 0..5 {
            d3.record_host(&2, HostOutcome::Status(500));
        }
        clock.advance(Duration::from_secs(40));
        d3.tick();
    });
    assert!(calls.load(std::sync::atomic::Ordering::Relaxed) >= 4);
    assert_eq!(d.hosts().len(), 12);
}

// ---- Envoy's timer, run lazily ----

/// Ejects `host` with five 5xx and lets it back at the first sweep after its time.
fn eject_and_return(d: &OutlierDetector<u32, ManualClock>, clock: &ManualClock, host: u32) {
    record(d, host, HostOutcome::Status(500), 5);
    assert!(ejected(d, host));
    let until = d.host_status(&host).unwrap().ejected_until.unwrap();
    while ejected(d, host) {
        clock.advance(Duration::from_secs(10));
        d.tick();
    }
    assert!(clock.now() >= until);
}

#[test]
fn the_multiplier_decays_by_the_intervals_that_passed() {
    // Envoy's timer decrements the multiplier of a host that stayed in at every interval,
    // whether or not calls came. After three ejections and 600 s of silence the multiplier is
    // back to 0, so the next ejection lasts one base time (10 s), as Envoy's does.
    let c = config()
        .base_ejection_time(Duration::from_secs(10))
        .build()
        .unwrap();
    let (d, clock) = detector(c, 10);
    for _ in 0..3 {
        eject_and_return(&d, &clock, 0);
        // Straight back in: no interval passes in between, so no decay.
        assert!(!ejected(&d, 0));
    }
    assert_eq!(d.host_status(&0).unwrap().multiplier, 3);
    clock.advance(Duration::from_secs(600));
    record(&d, 0, HostOutcome::Status(500), 5);
    let st = d.host_status(&0).unwrap();
    assert_eq!(st.multiplier, 1);
    assert_eq!(st.ejected_until.unwrap() - clock.now(), 10_000_000_000);
}

#[test]
fn an_ejection_that_ends_in_silence_decays_from_the_interval_it_ended_in() {
    // Ejected for 10 s at t = 0; no call and no tick for 100 s. Envoy's timer returns it at
    // the sweep at 10 s and decays its multiplier at 20 s: the next ejection lasts 10 s again.
    let c = config()
        .base_ejection_time(Duration::from_secs(10))
        .build()
        .unwrap();
    let (d, clock) = detector(c, 10);
    record(&d, 0, HostOutcome::Status(500), 5);
    assert_eq!(d.host_status(&0).unwrap().multiplier, 1);
    clock.advance(Duration::from_secs(100));
    assert!(d.tick());
    let st = d.host_status(&0).unwrap();
    assert_eq!((st.ejected, st.multiplier), (false, 0));
    record(&d, 0, HostOutcome::Status(500), 5);
    let st = d.host_status(&0).unwrap();
    assert_eq!(st.ejected_until.unwrap() - clock.now(), 10_000_000_000);
}

#[test]
fn sweeps_keep_envoys_interval_grid() {
    // The timer fires every interval from the start, whenever the sweep actually runs: a
    // sweep run late at 15 s leaves the next one due at 20 s, not 25 s.
    let (d, clock) = detector(OutlierConfig::default(), 10);
    clock.advance(Duration::from_secs(15));
    assert!(d.tick());
    clock.advance(Duration::from_secs(4));
    assert!(!d.tick());
    clock.advance(Duration::from_secs(1));
    assert!(d.tick());
}

#[test]
fn a_failure_for_a_host_whose_ejection_is_over_counts() {
    // The sweep that is due runs before a result is applied (as before a pick): the host is
    // back first, so its first failure counts and five failures eject it again, not six.
    let (d, clock) = detector(OutlierConfig::default(), 10);
    record(&d, 0, HostOutcome::Status(500), 5);
    assert!(ejected(&d, 0));
    clock.advance(Duration::from_secs(30));
    record(&d, 0, HostOutcome::Status(500), 4);
    assert!(!ejected(&d, 0));
    assert_eq!(d.host_status(&0).unwrap().consecutive_5xx, 4);
    record(&d, 0, HostOutcome::Status(500), 1);
    assert!(ejected(&d, 0));

    // The same through record(pick, ..): a call picked before the ejection, answered after
    // the ejection ended.
    let (d, clock) = detector(OutlierConfig::default(), 10);
    let early = loop {
        let p = d.pick();
        if *p.host() == 0 {
            break p;
        }
    };
    record(&d, 0, HostOutcome::Status(500), 5);
    clock.advance(Duration::from_secs(30));
    d.record(early, HostOutcome::Status(500));
    assert!(!ejected(&d, 0));
    assert_eq!(d.host_status(&0).unwrap().consecutive_5xx, 1);
    record(&d, 0, HostOutcome::Status(500), 4);
    assert!(ejected(&d, 0));
}

#[test]
fn a_panicking_listener_is_counted_and_the_others_still_get_the_event() {
    let (d, _) = detector(OutlierConfig::default(), 10);
    d.subscribe(|e| {
        if let OutlierEventKind::Ejected { .. } = e.kind {
            panic!("a listener's bug");
        }
    });
    let log = events(&d);
    record(&d, 0, HostOutcome::Status(500), 5); // ejected: the first listener panics
    record(&d, 1, HostOutcome::Status(500), 5); // refused by the cap: an overflow event
    let kinds: Vec<OutlierEventKind> = log.lock().unwrap().iter().map(|e| e.kind.clone()).collect();
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(matches!(kinds[0], OutlierEventKind::Ejected { .. }));
    assert!(matches!(kinds[1], OutlierEventKind::Overflow { .. }));
    assert_eq!(d.stats().listener_panics, 1);
}

// ---- tower::balance with outlier ejection ----

#[cfg(feature = "tower")]
mod tower_discover {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use tokio_stream::wrappers::UnboundedReceiverStream;
    use tower::balance::p2c::Balance;
    use tower::discover::{Change, ServiceList};
    use tower::load::{CompleteOnResponse, PendingRequestsDiscover};
    use tower::{Service, ServiceExt, service_fn};
    use tripline::ManualClock;
    use tripline_policies::BoxError;
    use tripline_policies::outlier::{
        HostOutcome, OutlierConfig, OutlierDetector, OutlierDiscover,
    };

    /// Ten replicas counting their calls; `bad` fails every call.
    fn replicas(
        calls: Arc<Vec<AtomicU32>>,
        bad: usize,
    ) -> Vec<
        impl Service<
            u32,
            Response = u32,
            Error = BoxError,
            Future = impl std::future::Future<Output = Result<u32, BoxError>> + Send,
        > + Clone
        + Send,
    > {
        (0..10usize)
            .map(|i| {
                let calls = calls.clone();
                service_fn(move |req: u32| {
                    calls[i].fetch_add(1, Ordering::Relaxed);
                    async move {
                        if i == bad {
                            Err::<u32, BoxError>("500".into())
                        } else {
                            Ok(req)
                        }
                    }
                })
            })
            .collect()
    }

    fn detector(clock: &ManualClock) -> OutlierDetector<usize, ManualClock> {
        OutlierDetector::builder(OutlierConfig::default())
            .clock(clock.clone())
            .seed(4)
            .build(0..10usize)
            .unwrap()
    }

    #[tokio::test]
    async fn tower_balance_skips_an_ejected_host_and_takes_it_back_when_it_returns() {
        let clock = ManualClock::new();
        let d = detector(&clock);
        let calls: Arc<Vec<AtomicU32>> = Arc::new((0..10).map(|_| AtomicU32::new(0)).collect());
        let discover =
            OutlierDiscover::new(ServiceList::new(replicas(calls.clone(), 3)), d.clone());
        let mut balance = Balance::new(PendingRequestsDiscover::new(
            discover,
            CompleteOnResponse::default(),
        ));
        for _ in 0..200 {
            let _ = balance.ready().await.unwrap().call(1).await;
        }
        // Five 5xx in a row: ejected, and out of tower's balancer.
        assert_eq!(d.is_ejected(&3), Some(true));
        assert_eq!(calls[3].load(Ordering::Relaxed), 5);
        assert_eq!(balance.len(), 9);
        assert_eq!(d.host_status(&0).unwrap().in_flight, 0);

        // 30 s later the next result's sweep lets it back: offered again, and it fails again.
        clock.advance(Duration::from_secs(30));
        for _ in 0..200 {
            let _ = balance.ready().await.unwrap().call(1).await;
        }
        assert!(
            calls[3].load(Ordering::Relaxed) > 5,
            "offered again after its return"
        );
        assert_eq!(d.is_ejected(&3), Some(true));
        assert_eq!(d.host_status(&3).unwrap().multiplier, 2);
        assert_eq!(balance.len(), 9);
    }

    #[tokio::test]
    async fn the_detector_follows_discovery_and_panic_offers_every_host() {
        let clock = ManualClock::new();
        // Started on placeholder hosts: the discovered set replaces them.
        let d = OutlierDetector::builder(
            OutlierConfig::builder()
                .max_ejection_percent(100)
                .build()
                .unwrap(),
        )
        .clock(clock.clone())
        .seed(4)
        .build([100usize])
        .unwrap();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let calls: Arc<Vec<AtomicU32>> = Arc::new((0..10).map(|_| AtomicU32::new(0)).collect());
        let services = replicas(calls.clone(), 9);
        for (i, s) in services.iter().enumerate().take(4) {
            tx.send(Ok::<_, Infallible>(Change::Insert(i, s.clone())))
                .unwrap();
        }
        let discover = OutlierDiscover::new(UnboundedReceiverStream::new(rx), d.clone());
        let mut balance = Balance::new(PendingRequestsDiscover::new(
            discover,
            CompleteOnResponse::default(),
        ));
        balance.ready().await.unwrap().call(1).await.unwrap();
        assert_eq!(d.hosts(), [0, 1, 2, 3]);
        assert_eq!(balance.len(), 4);

        tx.send(Ok(Change::Remove(1))).unwrap();
        tx.send(Ok(Change::Insert(9, services[9].clone()))).unwrap();
        let _ = balance.ready().await.unwrap().call(1).await;
        assert_eq!(d.hosts(), [0, 2, 3, 9]);
        assert_eq!(balance.len(), 4);

        // Host 0 is ejected (its 5xx recorded by hand, as another balancer would): it leaves.
        for _ in 0..5 {
            d.record_host(&0, HostOutcome::Status(500));
        }
        let _ = balance.ready().await.unwrap().call(1).await;
        assert_eq!(balance.len(), 3);
        // Then 2 and 9: one healthy host of four is below the panic threshold (50 %), so
        // every host is offered again.
        for h in [2, 9] {
            for _ in 0..5 {
                d.record_host(&h, HostOutcome::Status(500));
            }
        }
        assert!(d.in_panic());
        let before = calls[0].load(Ordering::Relaxed);
        for _ in 0..50 {
            let _ = balance.ready().await.unwrap().call(1).await;
        }
        assert_eq!(balance.len(), 4, "in panic every host is offered");
        assert!(calls[0].load(Ordering::Relaxed) > before);
    }
}
