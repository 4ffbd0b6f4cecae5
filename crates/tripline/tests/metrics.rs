//! The `metrics` facade (feature `metrics`): every figure a tuner needs reaches the recorder
//! under its Prometheus name, the state gauges follow transitions as they happen, and a
//! registry's series stay bounded by its live keys.
#![cfg(feature = "metrics")]

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tripline::observe::BreakerMetrics;
use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
use tripline::{
    BreakerConfig, CircuitBreaker, Classification, FailureKind, ManualClock, Outcome, State,
};

const S: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq)]
enum V {
    Counter(u64),
    Gauge(f64),
    Other,
}

type Series = Vec<(String, Vec<(String, String)>, V)>;

fn series(s: &Snapshotter) -> Series {
    s.snapshot()
        .into_vec()
        .into_iter()
        .map(|(ck, _, _, v)| {
            let labels = ck
                .key()
                .labels()
                .map(|l| (l.key().to_string(), l.value().to_string()))
                .collect();
            let v = match v {
                DebugValue::Counter(c) => V::Counter(c),
                DebugValue::Gauge(g) => V::Gauge(g.into_inner()),
                _ => V::Other,
            };
            (ck.key().name().to_string(), labels, v)
        })
        .collect()
}

/// The value of `name` whose labels include every pair of `labels`.
fn value(all: &Series, name: &str, labels: &[(&str, &str)]) -> V {
    let found: Vec<_> = all
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
    found[0].2
}

fn gauge(all: &Series, name: &str, labels: &[(&str, &str)]) -> f64 {
    match value(all, name, labels) {
        V::Gauge(g) => g,
        v => panic!("{name} is {v:?}"),
    }
}

fn counter(all: &Series, name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(all, name, labels) {
        V::Counter(c) => c,
        v => panic!("{name} is {v:?}"),
    }
}

fn current_state(all: &Series, labels: &[(&str, &str)]) -> Vec<State> {
    State::ALL
        .into_iter()
        .filter(|s| {
            let mut l = labels.to_vec();
            l.push(("state", s.as_str()));
            gauge(all, "tripline_breaker_state", &l) == 1.0
        })
        .collect()
}

fn small() -> tripline::BreakerConfigBuilder {
    BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(4)
        .count_in_flight_as_slow(false)
        .open_duration(10 * S)
        .half_open_calls(1)
        .slow_call_duration(S)
}

/// The state gauges are current after every transition, a failed probe's included, with no
/// call to `update`.
#[test]
fn the_state_gauge_follows_every_transition_as_it_happens() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let clock = ManualClock::new();
    let b = CircuitBreaker::with_clock("vendor", small().build().unwrap(), clock.clone());
    let _metrics = metrics::with_local_recorder(&recorder, || BreakerMetrics::new(&b, vec![]));
    let at = [("breaker", "vendor")];
    assert_eq!(current_state(&series(&snap), &at), vec![State::Closed]);
    b.trip();
    assert_eq!(current_state(&series(&snap), &at), vec![State::Open]);
    clock.advance(10 * S);
    let probe = b.try_acquire().unwrap();
    assert_eq!(current_state(&series(&snap), &at), vec![State::HalfOpen]);
    let _ = probe.record(Outcome::Failure);
    assert_eq!(current_state(&series(&snap), &at), vec![State::Open]);
    b.force_open();
    assert_eq!(current_state(&series(&snap), &at), vec![State::ForcedOpen]);

    // A second set of handles for the same breaker follows it on update.
    let recorder2 = DebuggingRecorder::new();
    let snap2 = recorder2.snapshotter();
    let second = metrics::with_local_recorder(&recorder2, || BreakerMetrics::new(&b, vec![]));
    assert_eq!(current_state(&series(&snap2), &at), vec![State::ForcedOpen]);
    b.reset();
    second.update(&b);
    assert_eq!(current_state(&series(&snap2), &at), vec![State::Closed]);
    assert_eq!(current_state(&series(&snap), &at), vec![State::Closed]);
}

#[test]
fn every_tuning_figure_reaches_the_recorder() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    let clock = ManualClock::new();
    let config = small()
        .count_window(10)
        .minimum_calls(6)
        .call_durations(true)
        .lumping_interval(Duration::from_millis(1))
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("vendor", config, clock.clone());
    let m = metrics::with_local_recorder(&recorder, || {
        BreakerMetrics::new(&b, vec![metrics::Label::new("team", "checkout")])
    });
    let rec = |c: Classification, d: Duration| {
        clock.advance(Duration::from_millis(5));
        b.try_acquire().unwrap().record_with_duration(c, d)
    };
    rec(Outcome::Success.into(), 2 * S); // slow success
    rec(Classification::failure(FailureKind::Timeout), 3 * S); // slow failure
    rec(Classification::http(503, None), Duration::from_millis(100));
    m.update(&b);
    let all = series(&snap);
    let at = [("breaker", "vendor"), ("team", "checkout")];
    let with = |k: &'static str, v: &'static str| {
        let mut l = at.to_vec();
        l.push((k, v));
        l
    };
    assert_eq!(
        counter(
            &all,
            "tripline_breaker_calls_total",
            &with("outcome", "failure")
        ),
        2
    );
    assert_eq!(
        counter(
            &all,
            "tripline_breaker_slow_calls_total",
            &with("outcome", "success")
        ),
        1
    );
    assert_eq!(
        counter(
            &all,
            "tripline_breaker_slow_calls_total",
            &with("outcome", "failure")
        ),
        1
    );
    assert_eq!(
        counter(
            &all,
            "tripline_breaker_failures_by_kind_total",
            &with("kind", "timeout")
        ),
        1
    );
    assert_eq!(
        counter(
            &all,
            "tripline_breaker_failures_by_kind_total",
            &with("kind", "unavailable")
        ),
        1
    );
    // Three calls, fewer than six: not yet evaluated.
    assert!(gauge(&all, "tripline_breaker_failure_rate", &at).is_nan());
    assert!(gauge(&all, "tripline_breaker_slow_call_rate", &at).is_nan());
    assert_eq!(
        gauge(&all, "tripline_breaker_window_call_duration_seconds", &at),
        5.1
    );
    assert_eq!(
        gauge(
            &all,
            "tripline_breaker_window_mean_call_duration_seconds",
            &at
        ),
        1.7
    );
    assert_eq!(
        gauge(
            &all,
            "tripline_breaker_consecutive_calls",
            &with("outcome", "failure")
        ),
        2.0
    );

    for _ in 0..3 {
        rec(Outcome::Success.into(), Duration::from_millis(1));
    }
    b.try_acquire().unwrap().record(Outcome::Failure); // counted
    let _ = b.try_acquire().unwrap().record(Outcome::Failure); // same instant: lumped
    m.update(&b);
    let all = series(&snap);
    assert_eq!(gauge(&all, "tripline_breaker_failure_rate", &at), 3.0 / 7.0);
    assert_eq!(
        counter(&all, "tripline_breaker_lumped_failures_total", &at),
        1
    );
    assert_eq!(
        gauge(
            &all,
            "tripline_breaker_consecutive_calls",
            &with("outcome", "success")
        ),
        0.0
    );

    // Probes and refusals per state.
    b.trip();
    let _ = b.try_acquire();
    clock.advance(10 * S);
    let probe = b.try_acquire().unwrap();
    let _ = b.try_acquire();
    b.force_open();
    let _ = b.try_acquire();
    b.transition_to_half_open().unwrap();
    let probe2 = b.try_acquire().unwrap();
    m.update(&b);
    let all = series(&snap);
    for (state, n) in [("open", 1), ("half-open", 1), ("forced-open", 1)] {
        assert_eq!(
            counter(
                &all,
                "tripline_breaker_rejected_calls_total",
                &with("state", state)
            ),
            n,
            "{state}"
        );
    }
    assert_eq!(
        gauge(&all, "tripline_breaker_probes", &with("status", "admitted")),
        1.0
    );
    assert_eq!(
        gauge(
            &all,
            "tripline_breaker_probes",
            &with("status", "in_flight")
        ),
        1.0
    );
    drop((probe, probe2));
}

fn registry(max: usize) -> (Registry<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = RegistryConfig::default()
        .with_config("default", small().build().unwrap())
        .with_max_breakers(max)
        .with_idle_after(S);
    (Registry::with_clock(config, clock.clone()).unwrap(), clock)
}

/// The lines of a Prometheus scrape named `name` whose labels include each of `labels`, with
/// their values.
fn scrape(text: &str, name: &str, labels: &[&str]) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').unwrap();
            (series.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// Keys come and go; the series that read "this breaker is in this state" are never more than
/// the live keys, an evicted key reads no state at all, and the per-dependency summary (bounded
/// by the dependencies) stays exact. Read through a real Prometheus exporter's scrape.
#[test]
fn a_registrys_state_series_stay_bounded_by_its_live_keys() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let (r, clock) = registry(5);
    let tenant = |i: u32| Key::scoped("payments", ScopeKind::Tenant, &format!("t{i}")).unwrap();
    let state_of = |text: &str, scope: &str| -> Vec<String> {
        scrape(
            text,
            "tripline_breaker_state",
            &[&format!("scope=\"{scope}\"")],
        )
        .into_iter()
        .filter(|(_, v)| *v == 1.0)
        .map(|(s, _)| {
            s.rsplit_once("state=\"")
                .unwrap()
                .1
                .trim_end_matches("\"}")
                .to_string()
        })
        .collect()
    };
    metrics::with_local_recorder(&recorder, || {
        for i in 0..40 {
            let b = r.get(&tenant(i)).unwrap();
            b.call(|| Ok::<_, ()>(())).unwrap();
            drop(b);
            clock.advance(2 * S);
            r.export_metrics();
            let text = handle.render();
            let showing = scrape(&text, "tripline_breaker_state", &[])
                .into_iter()
                .filter(|(_, v)| *v == 1.0)
                .count();
            assert_eq!(showing, r.len(), "after {i} keys");
            assert!(r.len() <= 5);
            let summary = scrape(
                &text,
                "tripline_registry_breakers",
                &["dependency=\"payments\"", "state=\"closed\""],
            );
            assert_eq!(summary.len(), 1);
            assert_eq!(summary[0].1, r.len() as f64);
        }
        // An open breaker is never evicted, and reads open.
        let hot = tenant(1000);
        let b = r.get(&hot).unwrap();
        b.trip();
        drop(b);
        clock.advance(10 * S);
        r.evict_idle();
        r.export_metrics();
        let text = handle.render();
        assert_eq!(state_of(&text, "t1000"), vec!["open"]);
        let open = scrape(
            &text,
            "tripline_registry_breakers",
            &["dependency=\"payments\"", "state=\"open\""],
        );
        assert_eq!(open[0].1, 1.0);
        // Evicted keys read no state.
        assert!(state_of(&text, "t0").is_empty());
        // A key made again shows its state at once, and follows it.
        let again = r.get(&tenant(0)).unwrap();
        assert_eq!(state_of(&handle.render(), "t0"), vec!["closed"]);
        again.force_open();
        assert_eq!(state_of(&handle.render(), "t0"), vec!["forced-open"]);
    });
}

#[test]
fn call_durations_feed_a_histogram_by_outcome_once_per_breaker() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let config = small().call_durations(true).build().unwrap();
    let b = CircuitBreaker::with_clock("db", config, clock.clone());
    let (first, second) = metrics::with_local_recorder(&recorder, || {
        (
            BreakerMetrics::new(&b, vec![]),
            // A second set of handles for the same breaker must not record every call again.
            BreakerMetrics::new(&b, vec![]),
        )
    });
    let p = b.try_acquire().unwrap();
    p.record_with_duration(Outcome::Success, Duration::from_millis(40));
    let p = b.try_acquire().unwrap();
    p.record_with_duration(Outcome::Failure, Duration::from_millis(250));
    let p = b.try_acquire().unwrap();
    clock.advance(Duration::from_millis(10));
    p.record(Outcome::Success);
    first.update(&b);
    second.update(&b);
    let histograms: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(ck, _, _, v)| match v {
            DebugValue::Histogram(h) => {
                let outcome = ck
                    .key()
                    .labels()
                    .find(|l| l.key() == "outcome")
                    .map(|l| l.value().to_string())
                    .unwrap();
                let mut values: Vec<f64> = h.into_iter().map(|v| v.into_inner()).collect();
                values.sort_by(f64::total_cmp);
                (ck.key().name() == "tripline_breaker_call_duration_seconds")
                    .then_some((outcome, values))
            }
            _ => None,
        })
        .collect();
    let of = |o: &str| {
        histograms
            .iter()
            .find(|(k, _)| k == o)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(of("success"), [0.01, 0.04]);
    assert_eq!(of("failure"), [0.25]);
    assert!(of("ignored").is_empty());
}

#[test]
fn without_call_durations_no_call_is_recorded_per_call() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let b = CircuitBreaker::with_clock("db", small().build().unwrap(), ManualClock::new());
    let _m = metrics::with_local_recorder(&recorder, || BreakerMetrics::new(&b, vec![]));
    b.call(|| Ok::<_, ()>(())).unwrap();
    assert!(
        snapshotter
            .snapshot()
            .into_vec()
            .iter()
            .all(|(ck, _, _, _)| ck.key().name() != "tripline_breaker_call_duration_seconds")
    );
}

#[test]
fn every_series_has_help_text_in_a_prometheus_scrape() {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let clock = ManualClock::new();
    let config = small().call_durations(true).build().unwrap();
    let registry = Registry::with_clock(
        RegistryConfig::default().with_config("default", config),
        clock.clone(),
    )
    .unwrap();
    metrics::with_local_recorder(&recorder, || {
        tripline::observe::describe_metrics();
        let key = Key::scoped("payments", ScopeKind::Tenant, "acme").unwrap();
        let b = registry.get(&key).unwrap();
        let p = b.try_acquire().unwrap();
        p.record_with_duration(Outcome::Success, Duration::from_millis(5));
        registry.export_metrics();
    });
    let text = handle.render();
    let names: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap())
        .map(|n| {
            n.trim_end_matches("_sum")
                .trim_end_matches("_count")
                .trim_end_matches("_bucket")
        })
        .collect();
    assert!(
        names.contains("tripline_breaker_call_duration_seconds"),
        "{text}"
    );
    for name in names {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no help text:\n{text}"
        );
    }
}
