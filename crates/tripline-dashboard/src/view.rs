//! The JSON the API answers with, redacted for the reader.

use std::time::Duration;

use serde_json::{Value, json};
use tripline::registry::{Key, OperatorState};
use tripline::{Clock, Reason, WindowSnapshot};

use crate::history::{Figures, Incident, Point, SLOT_NANOS, rate};
use crate::manual::{Held, Layer};
use crate::store::{Kind, Record, Source, Target};
use crate::{Principal, Shared, millis};

/// Slots in a card's sparkline (five minutes).
pub(crate) const SPARK: usize = 30;

pub(crate) fn operator_str(o: OperatorState) -> Option<&'static str> {
    match o {
        OperatorState::Auto => None,
        OperatorState::ForcedOpen => Some("forced-open"),
        OperatorState::Disabled => Some("disabled"),
        OperatorState::MetricsOnly => Some("metrics-only"),
    }
}

pub(crate) fn window(w: &WindowSnapshot) -> Value {
    json!({
        "calls": w.calls,
        "failures": w.failures,
        "slow_calls": w.slow_calls,
        "in_flight_slow": w.in_flight_slow,
        "failure_rate": round2(w.failure_rate()),
        "slow_rate": round2(w.slow_rate()),
    })
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// The rule behind a transition, by name, with its figures.
pub(crate) fn reason(r: &Reason) -> Value {
    match r {
        Reason::FailureRate => json!({ "rule": "failure-rate" }),
        Reason::SlowCallRate => json!({ "rule": "slow-call-rate" }),
        Reason::ConsecutiveFailures { count } => {
            json!({ "rule": "consecutive-failures", "count": count })
        }
        Reason::FailureCount { count } => json!({ "rule": "failure-count", "count": count }),
        Reason::OpenElapsed => json!({ "rule": "open-elapsed" }),
        Reason::ProbesSucceeded {
            probes,
            failures,
            slow,
        } => json!({
            "rule": "probes-succeeded", "probes": probes, "failures": failures, "slow": slow,
        }),
        Reason::ProbesFailed {
            probes,
            failures,
            slow,
        } => json!({
            "rule": "probes-failed", "probes": probes, "failures": failures, "slow": slow,
        }),
        Reason::HalfOpenTimeout => json!({ "rule": "half-open-timeout" }),
        Reason::Operator => json!({ "rule": "operator" }),
        Reason::IntervalElapsed => json!({ "rule": "interval-elapsed" }),
        other => json!({ "rule": format!("{other:?}") }),
    }
}

/// Key, dependency and scope as `principal` may see them.
pub(crate) fn key_fields<C: Clock + Clone>(
    sh: &Shared<C>,
    principal: &Principal,
    key: &Key,
    out: &mut serde_json::Map<String, Value>,
) {
    let redacted = sh.redacted(principal, key);
    out.insert("dependency".into(), key.dependency().into());
    out.insert("redacted".into(), redacted.into());
    if redacted {
        out.insert("key".into(), Value::Null);
        out.insert("scope".into(), Value::Null);
    } else {
        out.insert("key".into(), key.to_string().into());
        out.insert(
            "scope".into(),
            key.scope().map_or(
                Value::Null,
                |(kind, value)| json!({ "kind": kind.as_str(), "value": value }),
            ),
        );
    }
}

fn target<C: Clock + Clone>(sh: &Shared<C>, principal: &Principal, t: &Target) -> Value {
    match t {
        Target::Key(key) => {
            let mut m = serde_json::Map::new();
            key_fields(sh, principal, key, &mut m);
            Value::Object(m)
        }
        Target::Dependency(d) => json!({ "dependency": d }),
    }
}

/// One record, as `principal` may see it; `now` is a reading of the dashboard's clock.
pub(crate) fn record<C: Clock + Clone>(
    sh: &Shared<C>,
    principal: &Principal,
    r: &Record,
    now: u64,
) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("seq".into(), r.seq.into());
    m.insert(
        "age_ms".into(),
        millis(Duration::from_nanos(now.saturating_sub(r.at))).into(),
    );
    m.insert("unix_ms".into(), r.unix_ms.into());
    match &r.breaker {
        Some((source, key)) => {
            m.insert("id".into(), sh.id(*source, key).into());
            m.insert("source".into(), source.as_str().into());
            key_fields(sh, principal, key, &mut m);
        }
        None => {
            m.insert("id".into(), Value::Null);
        }
    }
    match &r.kind {
        Kind::Transition {
            from,
            to,
            generation,
            reason: why,
            window: w,
            open_for,
        } => {
            m.insert("kind".into(), "transition".into());
            m.insert("from".into(), from.as_str().into());
            m.insert("to".into(), to.as_str().into());
            m.insert("generation".into(), (*generation).into());
            m.insert("reason".into(), reason(why));
            m.insert("window".into(), window(w));
            m.insert(
                "open_for_ms".into(),
                open_for.map_or(Value::Null, |d| millis(d).into()),
            );
        }
        Kind::WouldTrip {
            reason: why,
            window: w,
        } => {
            m.insert("kind".into(), "would-trip".into());
            m.insert("reason".into(), reason(why));
            m.insert("window".into(), window(w));
        }
        Kind::Reconfigured { generation } => {
            m.insert("kind".into(), "reconfigured".into());
            m.insert("generation".into(), (*generation).into());
        }
        Kind::Audit(a) => {
            m.insert("kind".into(), "audit".into());
            m.insert("principal".into(), a.principal.clone().into());
            m.insert("action".into(), a.action.as_str().into());
            m.insert("target".into(), target(sh, principal, &a.target));
            m.insert("changed".into(), a.changed.into());
            m.insert(
                "in_force".into(),
                operator_str(a.in_force).map_or(Value::Null, Value::from),
            );
        }
    }
    Value::Object(m)
}

/// One breaker's row: figures, state, override, last transition.
/// What a row shows of its breaker, whichever host it has.
pub(crate) struct Resolved {
    pub(crate) metrics: tripline::Metrics,
    pub(crate) config: tripline::BreakerConfig,
    pub(crate) held: Held,
    pub(crate) reach: tripline::Reach,
}

pub(crate) fn entry<C: Clock + Clone>(
    sh: &Shared<C>,
    principal: &Principal,
    source: Source,
    key: &Key,
    resolved: &Resolved,
    now: u64,
) -> Value {
    let (m, config, held) = (&resolved.metrics, &resolved.config, resolved.held);
    let mut out = serde_json::Map::new();
    out.insert("id".into(), sh.id(source, key).into());
    out.insert("source".into(), source.as_str().into());
    // `fleet`: the state is the fleet's, kept in a shared store; the figures this replica's.
    out.insert("reach".into(), resolved.reach.as_str().into());
    key_fields(sh, principal, key, &mut out);
    out.insert("state".into(), m.state.as_str().into());
    out.insert("generation".into(), m.generation.into());
    // A run-time Auto override (the rules decide over the configuration's) shows as "auto".
    let shown = match (operator_str(held.state), held.layer) {
        (Some(s), _) => Value::from(s),
        (None, Some(Layer::Key | Layer::Dependency)) => Value::from("auto"),
        (None, _) => Value::Null,
    };
    out.insert("override".into(), shown);
    out.insert(
        "override_by".into(),
        held.layer.map_or(Value::Null, |l| match l {
            Layer::Key => "run-time-key".into(),
            Layer::Dependency => "run-time-dependency".into(),
            Layer::Configuration => "configuration".into(),
        }),
    );
    out.insert("window".into(), window(&m.window));
    out.insert(
        "thresholds".into(),
        json!({
            "failure_rate": config.failure_rate_threshold(),
            "slow_call_rate": config.slow_call_rate_threshold(),
            "minimum_calls": config.minimum_calls(),
            "slow_call_ms": millis(config.slow_call_duration()),
        }),
    );
    out.insert(
        "calls".into(),
        json!({
            "successful": m.successful_calls,
            "failed": m.failed_calls,
            "slow": m.slow_calls,
            "ignored": m.ignored_calls,
            "rejected": m.rejected_calls,
            "stale": m.stale_results,
            "abandoned": m.abandoned_permits,
        }),
    );
    out.insert("probes_in_flight".into(), m.probes_in_flight.into());
    out.insert("transitions".into(), m.transitions.into());
    out.insert("time_in_state_ms".into(), millis(m.time_in_state).into());
    out.insert("time_open_ms".into(), millis(m.time_open).into());
    out.insert("time_half_open_ms".into(), millis(m.time_half_open).into());
    out.insert(
        "last_transition".into(),
        sh.store
            .last_transition(&(source, key.clone()))
            .map_or(Value::Null, |r| record(sh, principal, &r, now)),
    );
    Value::Object(out)
}

/// The figures of a slot, per second and in percent.
pub(crate) fn rates(f: &Figures) -> Value {
    let per_s = |n: u64| (n as f64 * 100.0 / f.seconds.max(1.0)).round() / 100.0;
    json!({
        "window_s": f.seconds,
        "calls_per_s": per_s(f.calls),
        "rejected_per_s": per_s(f.rejected),
        "failure_rate": rate(f.failures, f.calls),
        "slow_rate": rate(f.slow, f.calls),
        "rejection_rate": rate(f.rejected, f.calls + f.rejected),
        "p50_ms": f.p50_us.map(|us| us as f64 / 1000.0),
        "p99_ms": f.p99_us.map(|us| us as f64 / 1000.0),
    })
}

/// A card's sparkline: failure and slow-call rates of the last slots (`null`: no data).
pub(crate) fn spark(points: &[Option<(f64, f64)>]) -> Value {
    points
        .iter()
        .map(|p| p.map_or(Value::Null, |(f, s)| json!([f, s])))
        .collect()
}

/// A breaker's hour in columns, oldest slot first.
pub(crate) fn series(points: &[Point]) -> Value {
    let mut state = Vec::new();
    let mut end = Vec::new();
    let mut columns: [Vec<Value>; 9] = Default::default();
    for p in points {
        match p {
            Point::NoData => {
                state.push(Value::Null);
                end.push(Value::Null);
                for c in &mut columns {
                    c.push(Value::Null);
                }
            }
            Point::Slot {
                worst,
                end: last,
                figures,
            } => {
                state.push(worst.as_str().into());
                end.push(last.as_str().into());
                let r = rates(figures);
                for (c, name) in columns.iter_mut().zip([
                    "calls_per_s",
                    "rejected_per_s",
                    "failure_rate",
                    "slow_rate",
                    "rejection_rate",
                    "p50_ms",
                    "p99_ms",
                ]) {
                    c.push(r[name].clone());
                }
                columns[7].push(figures.calls.into());
                columns[8].push(figures.rejected.into());
            }
        }
    }
    let [
        calls_per_s,
        rejected_per_s,
        failure_rate,
        slow_rate,
        rejection_rate,
        p50,
        p99,
        calls,
        rejected,
    ] = columns;
    json!({
        "slot_s": SLOT_NANOS / 1_000_000_000,
        "slots": points.len(),
        "state": state,
        "end_state": end,
        "calls": calls,
        "rejected": rejected,
        "calls_per_s": calls_per_s,
        "rejected_per_s": rejected_per_s,
        "failure_rate": failure_rate,
        "slow_rate": slow_rate,
        "rejection_rate": rejection_rate,
        "p50_ms": p50,
        "p99_ms": p99,
    })
}

/// One incident, as `principal` may see it.
pub(crate) fn incident<C: Clock + Clone>(
    sh: &Shared<C>,
    principal: &Principal,
    i: &Incident,
    now: u64,
) -> Value {
    let (source, key) = &i.breaker;
    let mut m = serde_json::Map::new();
    m.insert("seq".into(), i.seq.into());
    m.insert("id".into(), sh.id(*source, key).into());
    m.insert("source".into(), source.as_str().into());
    key_fields(sh, principal, key, &mut m);
    m.insert(
        "started_age_ms".into(),
        millis(Duration::from_nanos(now.saturating_sub(i.started))).into(),
    );
    m.insert("unix_ms".into(), i.unix_ms.into());
    m.insert("to".into(), i.to.as_str().into());
    m.insert(
        "reason".into(),
        i.reason.as_ref().map_or(Value::Null, reason),
    );
    m.insert(
        "window".into(),
        i.window.as_ref().map_or(Value::Null, window),
    );
    m.insert("state".into(), i.state.as_str().into());
    m.insert("trips".into(), i.trips.into());
    m.insert(
        "ended_age_ms".into(),
        i.ended.map_or(Value::Null, |e| {
            millis(Duration::from_nanos(now.saturating_sub(e))).into()
        }),
    );
    Value::Object(m)
}
