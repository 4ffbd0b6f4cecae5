//! Traces from the simulator, replayed and tuned: a replay of a simulated run reproduces its
//! trips; `tune` finds a configuration that trips as fast as the team's hand-tuned one and
//! refuses fewer healthy calls than resilience4j's defaults; both are deterministic.

use std::time::Duration;

use tripline::trace::{ReadOptions, Trace, read};
use tripline_sim::replay::{Candidate, ConfigReplay, Prepared, ReplayOptions, prepare, replay};
use tripline_sim::trace::{TraceOptions, record};
use tripline_sim::tune::{Space, TuneOptions, resilience4j_defaults, tune};
use tripline_sim::{RunReport, Scenario};

/// The built-in scenario with the fault cut to `incident` seconds, `after` seconds of run
/// after it, and the arrivals scaled by `rate` (as the scenario tests shorten them).
fn shortened(name: &str, incident: u64, after: u64, rate: f64) -> Scenario {
    let mut s = Scenario::load(name).unwrap();
    let start = s.dependency.faults[0].from;
    for f in &mut s.dependency.faults {
        f.until = start + Duration::from_secs(incident);
    }
    s.duration = start + Duration::from_secs(incident + after);
    s.arrivals.rate = s.arrivals.rate.map(|r| r * rate);
    s
}

fn traced(s: &Scenario, run: &str, shadow: bool) -> (RunReport, Trace) {
    let opts = TraceOptions {
        run: Some(run.into()),
        shadow,
        ..TraceOptions::default()
    };
    let (report, bytes) = record(s, None, &opts, Vec::new()).unwrap();
    (report, read(&bytes[..], &ReadOptions::default()).unwrap())
}

fn config_of(s: &Scenario, label: &str) -> tripline::BreakerConfig {
    s.protection
        .iter()
        .find(|p| p.label == label)
        .unwrap()
        .breaker
        .clone()
}

fn replayed(trace: &Trace, s: &Scenario, label: &str) -> (Prepared, ConfigReplay) {
    let opts = ReplayOptions {
        seed: s.seed,
        ..ReplayOptions::default()
    };
    let p = prepare(trace, &opts).unwrap();
    let r = replay(&p, &Candidate::new(label, config_of(s, label)), &opts);
    (p, r)
}

fn assert_same_trips(s: &Scenario, label: &str) {
    let (run, trace) = traced(s, label, false);
    let (_, r) = replayed(&trace, s, label);
    assert_eq!(r.keys.len(), 1);
    let sim: Vec<(f64, tripline::State, tripline::State, &str)> = run
        .transitions
        .iter()
        .map(|t| (t.at_s, t.from, t.to, t.reason))
        .collect();
    let rep: Vec<(f64, tripline::State, tripline::State, &str)> = r.keys[0]
        .transitions
        .iter()
        .map(|t| (t.at_s, t.from, t.to, t.reason))
        .collect();
    assert!(!sim.is_empty());
    assert_eq!(rep, sim, "{label}");
    // Every refusal of the run is a refusal of the replay, and nothing else is.
    assert_eq!(r.totals.figures.rejected, run.rejected_fast);
    assert_eq!(r.totals.figures.rejected_unknown, run.rejected_fast);
    assert_eq!(r.totals.figures.admitted, run.dependency_calls);
}

#[test]
fn a_simulated_gymfolks_trace_replays_to_the_same_trips() {
    assert_same_trips(&shortened("gymfolks", 60, 60, 0.5), "shared");
}

#[test]
fn fowlers_trace_replays_to_the_same_trips() {
    let s = Scenario::load("fowler").unwrap();
    assert_same_trips(&s, "with");
    let (run, trace) = traced(&s, "with", false);
    assert_eq!(trace.key(trace.calls[0]), "service/host=replica-0");
    assert_eq!((run.dependency_calls, trace.calls.len()), (33, 60));
}

#[test]
#[ignore = "the full scenario: run with --release -- --ignored"]
fn the_full_gymfolks_trace_replays_to_the_same_trips() {
    assert_same_trips(&Scenario::load("gymfolks").unwrap(), "shared");
}

/// `tune` on a trace of the gymfolks run: the chosen configuration trips within the hand-tuned
/// breaker's time and refuses fewer healthy calls than resilience4j's defaults.
fn check_tune(s: &Scenario, shadow: bool) {
    let (_, trace) = traced(s, "shared", shadow);
    let (p, team) = replayed(&trace, s, "shared");
    let ropts = ReplayOptions {
        seed: s.seed,
        ..ReplayOptions::default()
    };
    let r4j = replay(
        &p,
        &Candidate::new("resilience4j", resilience4j_defaults()),
        &ropts,
    );
    let team_ttt = team.totals.max_time_to_trip_s.unwrap();
    let opts = TuneOptions {
        budget: 64,
        max_time_to_trip: Some(Duration::from_secs_f64(team_ttt)),
        ..TuneOptions::default()
    };
    let t = tune(&p, &Space::default(), &opts, &ropts, &|_| {}).unwrap();
    let chosen = &t.chosen.replay.totals;
    assert!(t.chosen.eligible, "{:?}", t.chosen);
    assert_eq!(chosen.incidents_tripped, chosen.incidents);
    assert!(chosen.max_time_to_trip_s.unwrap() <= team_ttt, "{chosen:?}");
    assert!(
        chosen.figures.rejected_healthy < r4j.totals.figures.rejected_healthy,
        "{chosen:?} vs {:?}",
        r4j.totals
    );
    // It is on the front, and the front really is one.
    assert!(t.front.iter().any(|e| e.index == t.chosen.index) || !t.chosen.eligible);
    for w in t.front.windows(2) {
        let (a, b) = (&w[0].replay.totals.figures, &w[1].replay.totals.figures);
        assert!(a.bad_admitted <= b.bad_admitted);
        assert!(a.rejected_healthy > b.rejected_healthy);
    }
    // The TOML written reads back as the same configuration.
    let back: tripline::BreakerConfig = toml::from_str(&t.chosen.replay.config).unwrap();
    assert_eq!(back, t.chosen.config);
}

#[test]
fn tune_on_a_shadow_gymfolks_trace_beats_the_defaults_and_trips_as_fast_as_the_team() {
    check_tune(&shortened("gymfolks", 60, 60, 0.5), true);
}

#[test]
fn tune_on_a_protected_gymfolks_trace_too() {
    check_tune(&shortened("gymfolks", 60, 60, 0.5), false);
}

#[test]
#[ignore = "the full scenario: run with --release -- --ignored"]
fn tune_on_the_full_gymfolks_traces() {
    let s = Scenario::load("gymfolks").unwrap();
    check_tune(&s, true);
    check_tune(&s, false);
}

#[test]
fn replay_and_tune_are_deterministic_whatever_the_threads() {
    let s = shortened("gymfolks", 30, 30, 0.25);
    let (_, trace) = traced(&s, "shared", true);
    let ropts = ReplayOptions::default();
    let p = prepare(&trace, &ropts).unwrap();
    let opts = TuneOptions {
        budget: 40,
        seed: 7,
        ..TuneOptions::default()
    };
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| tune(&p, &Space::default(), &opts, &ropts, &|_| {}).unwrap())
    };
    let (a, b) = (run(1), run(3));
    assert_eq!(a.chosen, b.chosen);
    assert_eq!(a.front, b.front);
    assert_eq!(a.evaluated, 40);
    // Another seed searches elsewhere.
    let c = tune(
        &p,
        &Space::default(),
        &TuneOptions { seed: 8, ..opts },
        &ropts,
        &|_| {},
    )
    .unwrap();
    assert_ne!(
        a.front.iter().map(|e| e.config.clone()).collect::<Vec<_>>(),
        c.front.iter().map(|e| e.config.clone()).collect::<Vec<_>>()
    );
    let cand = Candidate::new("team", config_of(&s, "shared"));
    assert_eq!(replay(&p, &cand, &ropts), replay(&p, &cand, &ropts));
}

/// The figures add up, and the incident is found where the faults were.
#[test]
fn replay_figures_add_up() {
    let s = shortened("gymfolks", 30, 30, 0.25);
    let (run, trace) = traced(&s, "shared", true);
    let (p, team) = replayed(&trace, &s, "shared");
    assert_eq!(p.unknown, 0);
    assert_eq!(trace.calls.len() as u64, run.dependency_calls);
    let f = &team.totals.figures;
    assert_eq!(f.admitted + f.rejected, f.calls);
    assert_eq!(
        f.rejected,
        f.rejected_would_fail + f.rejected_would_succeed + f.rejected_ignored + f.rejected_unknown
    );
    assert!(f.bad_admitted <= f.admitted && f.failures_admitted_bad <= f.failures_admitted);
    assert!(f.trips >= 1 && f.time_open_s > 0.0);
    let incident = &p.incidents()[0];
    assert!((incident.start_s - 60.0).abs() < 1.0, "{incident:?}");
}

/// At one instant a result comes before a new call: a failure that ends at 1 s trips a
/// one-failure breaker before the call that starts at 1 s asks, which is refused; a
/// zero-length call's own result comes after its admission.
#[test]
fn at_one_instant_results_come_before_new_calls_except_their_own() {
    let text = "start,duration_ms,outcome\n0,0,success\n0,1000,failure\n1000,0,success\n";
    let trace = read(text.as_bytes(), &ReadOptions::default()).unwrap();
    let opts = ReplayOptions::default();
    let p = prepare(&trace, &opts).unwrap();
    let one = tripline::BreakerConfig::builder()
        .consecutive_failures(1)
        .build()
        .unwrap();
    let r = replay(&p, &Candidate::new("one", one), &opts);
    let f = &r.totals.figures;
    assert_eq!(
        (f.admitted, f.rejected, f.rejected_would_succeed),
        (2, 1, 1)
    );
    assert_eq!(r.keys[0].transitions[0].at_s, 1.0);
}
