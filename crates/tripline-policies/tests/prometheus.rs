//! Every policy's series in a real Prometheus scrape (metrics-exporter-prometheus's rendered
//! text): each name the `metrics` module documents is there, with its `# HELP`; and the
//! Grafana dashboard shipped in `grafana/tripline.json` asks only for series and labels such a
//! scrape has.
#![cfg(all(feature = "metrics", feature = "pipeline"))]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
use tripline::{BreakerConfig, CircuitBreaker, TokioClock};
use tripline_policies::bulkhead::Bulkhead;
use tripline_policies::gate::Gate;
use tripline_policies::limiter::Limiter;
use tripline_policies::metrics::{CALL_DURATION_BUCKETS, Metrics};
use tripline_policies::partial::PartialBreaker;
use tripline_policies::pipeline::Pipeline;
use tripline_policies::retry::RetryPolicy;
use tripline_policies::retry::budget::TpsBudget;
use tripline_policies::shed::Shedder;
use tripline_policies::throttle::Throttle;

/// The process's recorder, installed once: a registry makes some of its handles when a key
/// is first used and others when it exports, so they must reach the recorder that renders.
fn recorder() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets_for_metric(
                Matcher::Full("tripline_breaker_call_duration_seconds".into()),
                &CALL_DURATION_BUCKETS,
            )
            .unwrap()
            .build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).unwrap();
        handle
    })
}

/// A service with every policy, a few calls through it, and the scrape that follows.
async fn scrape() -> String {
    let handle = recorder();
    let config = BreakerConfig::builder()
        .call_durations(true)
        .build()
        .unwrap();
    let breaker = CircuitBreaker::with_clock("vendor", config.clone(), TokioClock::new());
    let pipeline = Pipeline::builder()
        .retry(
            RetryPolicy::builder()
                .base_delay(Duration::from_millis(1))
                .budget(Arc::new(TpsBudget::default()))
                .build()
                .unwrap(),
        )
        .breaker(breaker.clone())
        .partial(PartialBreaker::default())
        .gate(Gate::default())
        .bulkhead(Bulkhead::default())
        .shed(Shedder::default())
        .limiter(Limiter::default())
        .throttle(Throttle::default())
        .timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let registry =
        Arc::new(Registry::new(RegistryConfig::default().with_config("default", config)).unwrap());
    let metrics = Metrics::new()
        .registry(registry.clone())
        .pipeline("vendor", &pipeline);
    for i in 0..4 {
        let _ = pipeline
            .call(|| async move {
                if i == 3 {
                    Err(std::io::Error::other("reset"))
                } else {
                    Ok(i)
                }
            })
            .await;
    }
    let tenant = registry
        .get(&Key::scoped("vendor", ScopeKind::Tenant, "acme").unwrap())
        .unwrap();
    tenant.call(|| Ok::<_, ()>(())).unwrap();
    breaker.force_open();
    let _ = pipeline
        .call_or_else(|| async { Ok::<_, std::io::Error>(1) }, |_| async { 0 })
        .await;
    metrics.update();
    handle.render()
}

/// Each series' name in the scrape (a histogram's `_bucket`, `_sum`, `_count` under its own
/// name), with every label name it carries.
fn series(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i + 1..line.find('}').unwrap()]),
            None => (line.split(' ').next().unwrap(), ""),
        };
        let labels = out.entry(name.to_string()).or_default();
        for pair in rest.split(',').filter(|p| !p.is_empty()) {
            labels.insert(pair.split('=').next().unwrap().to_string());
        }
    }
    out
}

#[tokio::test]
async fn every_documented_series_is_in_a_real_scrape_with_help_text() {
    let text = scrape().await;
    let have = series(&text);
    let docs = include_str!("../src/metrics.rs");
    let mut documented = 0;
    for line in docs.lines().filter(|l| l.starts_with("//! | `tripline_")) {
        let cell = line.split('|').nth(1).unwrap();
        for name in cell.split('`').filter(|s| s.starts_with("tripline_")) {
            let name = name.split('{').next().unwrap();
            assert!(
                have.contains_key(name),
                "{name} is documented but not in:\n{text}"
            );
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "{name} has no help text"
            );
            documented += 1;
        }
    }
    assert!(documented >= 20, "{documented}");
    // The breakers' and the registry's, the limiter's and the partial breaker's, with help.
    for name in [
        "tripline_breaker_calls_total",
        "tripline_breaker_state",
        "tripline_breaker_call_duration_seconds_bucket",
        "tripline_registry_breakers",
        "tripline_limiter_limit",
        "tripline_partial_rejection_rate",
    ] {
        assert!(have.contains_key(name), "{name}");
    }
    for name in have.keys() {
        let base = name
            .trim_end_matches("_bucket")
            .trim_end_matches("_sum")
            .trim_end_matches("_count");
        assert!(
            text.contains(&format!("# HELP {base} ")),
            "{base} has no help text"
        );
    }
    // The registry's key carries its dependency and scope.
    assert!(
        text.contains("breaker=\"vendor/tenant=acme\",dependency=\"vendor\",scope_kind=\"tenant\",scope=\"acme\""),
        "{text}"
    );
}

/// The metric names in a PromQL expression, and the label names its selectors and `by`
/// clauses use for each.
fn queried(expr: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut out = Vec::new();
    let by: BTreeSet<String> = expr
        .match_indices("by (")
        .flat_map(|(i, _)| {
            let rest = &expr[i + 4..];
            rest[..rest.find(')').unwrap()]
                .split(',')
                .map(|l| l.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|l| l != "le")
        .collect();
    let mut rest = expr;
    while let Some(i) = rest.find("tripline_") {
        rest = &rest[i..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = rest[..end].to_string();
        let mut labels = by.clone();
        if rest[end..].starts_with('{') {
            let close = rest[end..].find('}').unwrap();
            for m in rest[end + 1..end + close].split(',') {
                labels.insert(m.split(['=', '!', '~']).next().unwrap().trim().to_string());
            }
        }
        out.push((name, labels));
        rest = &rest[end..];
    }
    out
}

#[tokio::test]
async fn the_grafana_dashboard_asks_only_for_series_and_labels_a_scrape_has() {
    let text = scrape().await;
    let have = series(&text);
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../grafana/tripline.json")).unwrap();
    let mut exprs = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr" | "definition", serde_json::Value::String(s)) => {
                            out.push(s.clone())
                        }
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&dashboard, &mut exprs);
    assert!(exprs.len() >= 25, "{}", exprs.len());
    let mut names = BTreeSet::new();
    for expr in &exprs {
        let found = queried(expr);
        assert!(!found.is_empty(), "{expr} asks for no tripline series");
        for (name, labels) in found {
            let Some(series_labels) = have.get(&name) else {
                panic!("the dashboard asks for {name}, which no scrape has ({expr})");
            };
            // Every label asked for is one the series carries (or, in an expression over two
            // series, one of them does).
            for l in labels {
                let in_any = queried(expr)
                    .iter()
                    .any(|(n, _)| have.get(n).is_some_and(|s| s.contains(&l)));
                assert!(
                    series_labels.contains(&l) || in_any,
                    "{name} has no label {l} ({expr}); it has {series_labels:?}"
                );
            }
            names.insert(name);
        }
    }
    // A panel for each policy.
    for prefix in [
        "tripline_breaker_",
        "tripline_registry_",
        "tripline_pipeline_",
        "tripline_retry_",
        "tripline_bulkhead_",
        "tripline_gate_",
        "tripline_limiter_",
        "tripline_throttle_",
        "tripline_shed_",
        "tripline_partial_",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(prefix)),
            "no panel shows {prefix}*"
        );
    }
}
