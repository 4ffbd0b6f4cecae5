//! `tune` on generated traces whose incidents are known: healthy traffic at 100 calls a
//! second with 1 % errors, and incidents of slow calls, of errors, or of both, at known times,
//! in the part the choice is made on and in a later part held out from it. The choice must
//! trip in every held-out incident and admit at most a tenth of its bad calls; the cost model
//! must count a slow success as bad whether admitted or refused; settings the trace says
//! nothing about keep the value in force; a trace with no incident is refused.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal};
use rand_pcg::Pcg64Mcg;
use tripline::BreakerConfig;
use tripline::trace::{ReadOptions, Trace, read};
use tripline_sim::replay::{Candidate, Prepared, ReplayOptions, prepare, replay};
use tripline_sim::tune::{Holdout, Space, TuneOptions, TuneReport, tune};

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Every call succeeds, in 4.5 to 5.5 s.
    Latency,
    /// 60 % of the calls fail at once.
    Errors,
    /// 30 % fail at once, and half of the others succeed in about 5 s.
    Mixed,
}

/// A trace of `secs` seconds at 100 calls a second: healthy (1 % errors, a 40 ms median)
/// except in the incidents `(kind, from_s, until_s)`. Lines come in the order calls end, as
/// a recorder writes them.
fn generated(secs: u64, incidents: &[(Kind, u64, u64)], seed: u64) -> Trace {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    let healthy = LogNormal::new(40f64.ln(), 0.4).unwrap();
    let mut calls: Vec<(f64, f64, bool)> = Vec::new(); // start ms, duration ms, failed
    for i in 0..secs * 100 {
        let start = i as f64 * 10.0 + rng.random_range(0.0..10.0);
        let kind = incidents
            .iter()
            .find(|(_, a, b)| start >= *a as f64 * 1000.0 && start < *b as f64 * 1000.0)
            .map(|(k, _, _)| *k);
        let u: f64 = rng.random();
        let slow = rng.random_range(4500.0..5500.0);
        let (duration, failed) = match kind {
            None if u < 0.01 => (20.0, true),
            Some(Kind::Errors) if u < 0.6 => (20.0, true),
            Some(Kind::Mixed) if u < 0.3 => (20.0, true),
            Some(Kind::Mixed) if u < 0.65 => (slow, false),
            Some(Kind::Latency) => (slow, false),
            _ => (healthy.sample(&mut rng), false),
        };
        calls.push((start, duration, failed));
    }
    calls.sort_by(|a, b| (a.0 + a.1).total_cmp(&(b.0 + b.1)));
    let mut text = String::from("start,duration_ms,outcome\n");
    for (start, duration, failed) in calls {
        let outcome = if failed { "failure" } else { "success" };
        text.push_str(&format!("{start:.3},{duration:.3},{outcome}\n"));
    }
    read(text.as_bytes(), &ReadOptions::default()).unwrap()
}

fn prepared(trace: &Trace) -> Prepared {
    prepare(trace, &ReplayOptions::default()).unwrap()
}

/// The incidents found are the ones generated (to within a second).
fn assert_found(p: &Prepared, incidents: &[(Kind, u64, u64)]) {
    let found = p.incidents();
    assert_eq!(found.len(), incidents.len(), "{found:?}");
    for (f, (kind, a, b)) in found.iter().zip(incidents) {
        assert!(
            (f.start_s - *a as f64).abs() <= 1.0 && (f.end_s - *b as f64).abs() <= 1.0,
            "{kind:?} {a}..{b}: found {f:?}"
        );
    }
}

fn tuned(p: &Prepared, holdout: Holdout) -> TuneReport {
    let opts = TuneOptions {
        holdout,
        ..TuneOptions::default()
    };
    tune(
        p,
        &Space::default(),
        &opts,
        &ReplayOptions::default(),
        &|_| {},
    )
    .unwrap()
}

/// The tuner's promise: chosen on the first part (two or three incidents), the configuration
/// trips in every incident of the held-out later part (as many, of the same kinds) and admits
/// at most a tenth of their bad calls.
fn check_held_out(kinds: &[Kind]) {
    let part = 60 + 110 * kinds.len() as u64;
    let mut incidents = Vec::new();
    for n in 0..2u64 {
        for (i, &k) in kinds.iter().enumerate() {
            let from = n * part + 60 + i as u64 * 110;
            incidents.push((k, from, from + 40));
        }
    }
    let trace = generated(2 * part, &incidents, 7);
    let p = prepared(&trace);
    assert_found(&p, &incidents);
    let r = tuned(&p, Holdout::From(Duration::from_secs(part)));
    assert_eq!(r.held_out_from_s, Some(part as f64));
    assert_eq!(r.incidents, kinds.len() as u64);
    let fit = &r.chosen.replay.totals;
    let held = &r.held_out.as_ref().unwrap().totals;
    let what = format!(
        "{kinds:?}: chosen {:?}\nfit {fit:?}\nheld out {held:?}",
        r.chosen.config
    );
    assert_eq!(held.incidents, kinds.len() as u64, "{what}");
    assert_eq!(held.incidents_tripped, held.incidents, "{what}");
    assert!(
        held.figures.bad_admitted * 10 <= held.bad_in_incidents,
        "{what}"
    );
    // On the part it was chosen on, too.
    assert_eq!(fit.incidents_tripped, fit.incidents, "{what}");
    assert!(
        fit.figures.bad_admitted * 10 <= fit.bad_in_incidents,
        "{what}"
    );
}

#[test]
fn the_choice_trips_in_every_held_out_latency_incident_and_admits_a_tenth_at_most() {
    check_held_out(&[Kind::Latency, Kind::Latency]);
}

#[test]
fn the_choice_trips_in_every_held_out_error_incident_and_admits_a_tenth_at_most() {
    check_held_out(&[Kind::Errors, Kind::Errors]);
}

#[test]
fn the_choice_trips_in_every_held_out_mixed_incident_and_admits_a_tenth_at_most() {
    check_held_out(&[Kind::Latency, Kind::Errors, Kind::Mixed]);
}

/// A success slower than the bad latency is bad whether admitted or refused: refusing it is
/// not a healthy call refused, and admitting it during an incident is a bad call admitted.
#[test]
fn a_slow_success_is_a_bad_call_whether_admitted_or_refused() {
    let incidents = [(Kind::Latency, 60, 100)];
    let trace = generated(160, &incidents, 3);
    let p = prepared(&trace);
    assert_found(&p, &incidents);
    let opts = ReplayOptions::default();
    let bad = p.bad_in_incidents();
    assert!(bad > 3900, "{bad}");
    // A breaker that never trips on slow calls admits every one of them.
    let never = BreakerConfig::builder()
        .slow_call_rate_threshold(100.0)
        .slow_call_duration(Duration::from_secs(60))
        .build()
        .unwrap();
    let r = replay(&p, &Candidate::new("never", never), &opts);
    assert_eq!(r.totals.figures.bad_admitted, bad);
    assert_eq!(r.totals.bad_in_incidents, bad);
    // One that trips on them refuses slow successes: bad calls spared, not healthy ones.
    let trips = BreakerConfig::builder()
        .slow_call_rate_threshold(50.0)
        .slow_call_duration(Duration::from_secs(1))
        .open_duration(Duration::from_secs(5))
        .build()
        .unwrap();
    let r = replay(&p, &Candidate::new("trips", trips), &opts);
    let f = &r.totals.figures;
    assert_eq!(r.totals.incidents_tripped, 1);
    assert_eq!(
        f.rejected_would_succeed,
        f.rejected_slow + f.rejected_healthy
    );
    assert!(f.rejected_slow > 3000, "{f:?}");
    assert!(f.rejected_healthy < f.rejected_slow / 5, "{f:?}");
    assert!(f.bad_admitted * 10 < bad, "{f:?}");
}

/// The issue the cost model had: on a trace of latency incidents alone, where every call
/// succeeds, the choice used to be never to trip. It must trip in each of them.
#[test]
fn on_latency_incidents_alone_the_choice_trips_in_each() {
    let incidents = [
        (Kind::Latency, 60, 100),
        (Kind::Latency, 200, 240),
        (Kind::Latency, 340, 380),
    ];
    let trace = generated(440, &incidents, 11);
    let p = prepared(&trace);
    let r = tuned(&p, Holdout::None);
    let t = &r.chosen.replay.totals;
    assert_eq!(t.incidents_tripped, 3, "{:?} {t:?}", r.chosen.config);
    assert!(t.figures.bad_admitted * 10 <= t.bad_in_incidents, "{t:?}");
    assert!(t.max_time_to_trip_s.unwrap() < 2.0, "{t:?}");
}

/// An errors-only trace says nothing about the slow-call settings: the choice names them and
/// keeps the values in force there, whatever the search's seed.
#[test]
fn settings_the_trace_does_not_constrain_keep_the_value_in_force() {
    let incidents = [(Kind::Errors, 40, 70), (Kind::Errors, 130, 160)];
    let trace = generated(200, &incidents, 5);
    let p = prepared(&trace);
    let current = BreakerConfig::builder()
        .count_window(20)
        .minimum_calls(10)
        .slow_call_rate_threshold(30.0)
        .slow_call_duration(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut slow = Vec::new();
    for seed in 0..5 {
        let opts = TuneOptions {
            seed,
            budget: 48,
            keep: Some(current.clone()),
            ..TuneOptions::default()
        };
        let r = tune(
            &p,
            &Space::default(),
            &opts,
            &ReplayOptions::default(),
            &|_| {},
        )
        .unwrap();
        let names: Vec<&str> = r.unconstrained.iter().map(|u| u.setting).collect();
        assert!(
            names.contains(&"slow_call_rate_threshold") && names.contains(&"slow_call_duration"),
            "seed {seed}: {names:?}"
        );
        let c = &r.chosen.config;
        slow.push((c.slow_call_rate_threshold(), c.slow_call_duration()));
        // The written configuration is the one with the kept values, and it still trips.
        let back: BreakerConfig = toml::from_str(&r.chosen.replay.config).unwrap();
        assert_eq!(&back, c);
        assert_eq!(r.chosen.replay.totals.incidents_tripped, 2);
    }
    assert!(
        slow.iter().all(|s| *s == (30.0, Duration::from_secs(2))),
        "{slow:?}"
    );
    // Without a configuration in force, tripline's defaults are kept.
    let opts = TuneOptions {
        budget: 48,
        ..TuneOptions::default()
    };
    let r = tune(
        &p,
        &Space::default(),
        &opts,
        &ReplayOptions::default(),
        &|_| {},
    )
    .unwrap();
    let d = BreakerConfig::default();
    assert_eq!(
        (
            r.chosen.config.slow_call_rate_threshold(),
            r.chosen.config.slow_call_duration()
        ),
        (d.slow_call_rate_threshold(), d.slow_call_duration())
    );
}

#[test]
fn a_trace_with_no_incident_is_refused() {
    let trace = generated(120, &[], 1);
    let p = prepared(&trace);
    assert!(p.incidents().is_empty());
    let e = tune(
        &p,
        &Space::default(),
        &TuneOptions::default(),
        &ReplayOptions::default(),
        &|_| {},
    )
    .unwrap_err();
    assert!(e.contains("no incident"), "{e}");
    // Nor is one whose incidents all fall in the held-out part.
    let trace = generated(300, &[(Kind::Errors, 250, 280)], 1);
    let p = prepared(&trace);
    let opts = TuneOptions {
        holdout: Holdout::From(Duration::from_secs(200)),
        ..TuneOptions::default()
    };
    let e = tune(
        &p,
        &Space::default(),
        &opts,
        &ReplayOptions::default(),
        &|_| {},
    )
    .unwrap_err();
    assert!(e.contains("holds no incident"), "{e}");
}

/// A bound no candidate meets is not ignored: the report says how many met it (none) and
/// names the nearest.
#[test]
fn a_max_time_to_trip_no_candidate_meets_names_the_nearest() {
    let trace = generated(160, &[(Kind::Latency, 60, 100)], 2);
    let p = prepared(&trace);
    let opts = TuneOptions {
        budget: 48,
        max_time_to_trip: Some(Duration::from_millis(1)),
        ..TuneOptions::default()
    };
    let r = tune(
        &p,
        &Space::default(),
        &opts,
        &ReplayOptions::default(),
        &|_| {},
    )
    .unwrap();
    assert_eq!(r.eligible, 0);
    assert!(!r.chosen.eligible);
    let n = r.nearest.as_ref().unwrap();
    assert_eq!(n.replay.totals.incidents_tripped, 1);
    assert!(r.table(&[]).contains(&format!("the nearest: #{}", n.index)));
    // With a bound that some meet, there is no nearest.
    let opts = TuneOptions {
        max_time_to_trip: Some(Duration::from_secs(5)),
        ..opts
    };
    let r = tune(
        &p,
        &Space::default(),
        &opts,
        &ReplayOptions::default(),
        &|_| {},
    )
    .unwrap();
    assert!(r.eligible > 0 && r.nearest.is_none() && r.chosen.eligible);
}

/// The split for a share of the trace never cuts an incident in two, nor the time after it
/// in which a configuration may still be open.
#[test]
fn a_holdout_share_moves_the_split_out_of_an_incident() {
    let incidents = [(Kind::Errors, 60, 100), (Kind::Errors, 200, 240)];
    let trace = generated(300, &incidents, 4);
    let p = prepared(&trace);
    // 30 % of 300 s: 210 s, inside the second incident, with one before it.
    let tail = tripline_sim::tune::holdout_tail(&Space::default());
    let at = tripline_sim::tune::split_point(&p, Holdout::Share(0.3), tail).unwrap();
    assert!((at.as_secs_f64() - 200.0).abs() <= 1.0, "{at:?}");
    let r = tuned(&p, Holdout::Share(0.3));
    assert_eq!(r.incidents, 1);
    assert_eq!(r.held_out.as_ref().unwrap().totals.incidents, 1);
    // 10 % would split at 270 s, 30 s after the second incident: within the tail of 65 s, so
    // the split moves back to that incident's start.
    let at = tripline_sim::tune::split_point(&p, Holdout::Share(0.1), tail).unwrap();
    assert!((at.as_secs_f64() - 200.0).abs() <= 1.0, "{at:?}");
}

/// The failure-count-in-time rule is part of the space when a space file asks for it: each
/// count with each time, beside the rule off, so a space of one candidate becomes five; a
/// chosen configuration with the rule writes back as a breaker's TOML that reads back equal;
/// the space itself round-trips; a bad count or time names the field.
#[test]
fn a_space_with_the_failure_count_rule_searches_it_beside_the_rule_off() {
    let trace = generated(160, &[(Kind::Errors, 60, 100)], 4);
    let p = prepared(&trace);
    let one = "count_windows = [100]\ntime_windows = []\nminimum_calls = [100, 100]\n\
         failure_rate = [90.0, 90.0]\nslow_call_rate = [100.0, 100.0]\n\
         slow_call_duration = [\"10s\", \"10s\"]\nopen_duration = [\"5s\", \"5s\"]\n\
         half_open_calls = [1, 1]\npolicies = [\"consecutive\"]\n";
    let without = Space::from_toml(one).unwrap();
    assert!(without.failure_counts.is_empty(), "off unless asked for");
    let with = Space::from_toml(&format!(
        "{one}failure_counts = [5, 20]\nfailure_count_within = [\"1s\", \"10s\"]\n"
    ))
    .unwrap();
    assert_eq!(Space::from_toml(&with.to_toml()).unwrap(), with);
    let opts = TuneOptions {
        budget: 100,
        holdout: Holdout::None,
        ..TuneOptions::default()
    };
    let r0 = tune(&p, &without, &opts, &ReplayOptions::default(), &|_| {}).unwrap();
    let r = tune(&p, &with, &opts, &ReplayOptions::default(), &|_| {}).unwrap();
    assert_eq!(r0.evaluated, 1);
    assert_eq!(r.evaluated, 5, "off, and 2 counts x 2 times");
    // 60 % errors at 100 calls a second: the 90 % rate never trips, a count does.
    assert_eq!(r0.chosen.replay.totals.incidents_tripped, 0);
    assert_eq!(r.chosen.replay.totals.incidents_tripped, 1);
    let chosen = r
        .chosen
        .config
        .failure_count()
        .expect("the count rule chosen");
    assert!([5, 20].contains(&chosen.failures), "{chosen:?}");
    let text = tripline_sim::tune::to_toml(&r.chosen.config);
    assert!(text.contains("failure_count = { failures = "), "{text}");
    assert_eq!(
        toml::from_str::<BreakerConfig>(&text).unwrap(),
        r.chosen.config
    );
    assert_eq!(
        Space::from_toml("failure_counts = [0]").unwrap_err(),
        "failure_counts must hold counts in [1, 1000], got [0]"
    );
    assert!(
        Space::from_toml("failure_count_within = [\"0s\"]")
            .unwrap_err()
            .starts_with("failure_count_within must hold times in [1ms, 7 days]")
    );
}
