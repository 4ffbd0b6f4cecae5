//! Traces from simulations (`tripline simulate --trace FILE`).
//!
//! A simulated run's breakers are observed by a recorder like the library's
//! [`TraceRecorder`](tripline::trace::TraceRecorder), written synchronously (the run is on
//! virtual time, so nothing may be dropped): every attempt the breakers admitted becomes a line
//! with its outcome and duration, every attempt they refused a `rejected` line. Times are
//! relative, in the run's virtual time. Each breaker of the run is one key: the dependency's
//! name for one breaker shared by all replicas, `dep/host=replica-N` for a replica's own
//! breaker, `dep/shard=N` for a shared per-shard breaker.
//!
//! With `shadow` the run's breakers are put in MetricsOnly before the first call, as a service
//! recording its traffic before trusting a breaker would: every call is made, with the
//! protection's timeout and retries, and the trace holds every outcome.
//!
//! ```
//! use tripline_sim::{Scenario, trace::{record, TraceOptions}};
//! use tripline::trace::{read, ReadOptions};
//!
//! let s = Scenario::load("fowler")?;
//! let (run, bytes) = record(&s, None, &TraceOptions::default(), Vec::new()).unwrap();
//! let trace = read(&bytes[..], &ReadOptions::default()).unwrap();
//! // 33 calls reached the dependency and 27 were refused: 60 lines.
//! assert_eq!((run.dependency_calls, run.rejected_fast, trace.calls.len()), (33, 27, 60));
//! # Ok::<(), tripline_sim::ScenarioError>(())
//! ```

use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tripline::trace::{Format, Header, Record, Start, TraceOutcome, TraceWriter};
use tripline::{Event, EventKind, Listener};

use crate::engine;
use crate::report::{self, RunReport};
use crate::scenario::{Scenario, Scope, Sharing};

/// Which run to record, and how.
///
/// ```
/// let o = tripline_sim::trace::TraceOptions::default();
/// assert!(o.run.is_none() && !o.shadow);
/// ```
#[derive(Clone, Debug, Default)]
pub struct TraceOptions {
    /// The protected run's label (default: the first protection).
    pub run: Option<String>,
    /// Put the run's breakers in MetricsOnly, so every call is made and recorded.
    pub shadow: bool,
    /// JSON Lines or CSV.
    pub format: Format,
}

type Shared<W> = Arc<Mutex<(Option<TraceWriter<W>>, Option<io::Error>)>>;

struct SimRecorder<W: Write + Send + 'static> {
    out: Shared<W>,
    key: String,
}

impl<W: Write + Send + 'static> Listener for SimRecorder<W> {
    fn on_event(&self, e: &Event) {
        let (outcome, duration) = match &e.kind {
            EventKind::CallOutcome {
                outcome, duration, ..
            } => (TraceOutcome::from(*outcome), *duration),
            EventKind::Rejected { .. } => (TraceOutcome::Rejected, Duration::ZERO),
            _ => return,
        };
        // A call said to be longer than the clock reading (`record_with_duration`) starts at
        // zero and still ends when it was recorded.
        let duration = duration.min(e.at);
        let start = Start::Relative(e.at - duration);
        let record = Record::new(start, duration, outcome).with_key(&self.key);
        let mut guard = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let (writer, error) = &mut *guard;
        if error.is_none() {
            if let Some(w) = writer.as_mut() {
                if let Err(err) = w.write(&record) {
                    *error = Some(err);
                }
            }
        }
    }

    fn wants_call_events(&self) -> bool {
        true
    }

    fn wants_outcome_events(&self) -> bool {
        true
    }
}

/// The key of a run's breaker `idx`.
fn key(s: &Scenario, p: &crate::scenario::Protection, idx: u32) -> String {
    let dep = &s.dependency.name;
    let shards = if p.scope == Scope::Shard {
        s.shards.map_or(1, |x| x.count)
    } else {
        1
    };
    let (replica, shard) = (idx / shards, idx % shards);
    match (p.sharing, p.scope) {
        (Sharing::Shared, Scope::Dependency | Scope::ServerDirected) => dep.clone(),
        (Sharing::Shared, Scope::Shard) => format!("{dep}/shard={shard}"),
        (Sharing::Local, Scope::Dependency | Scope::ServerDirected) => {
            format!("{dep}/host=replica-{replica}")
        }
        (Sharing::Local, Scope::Shard) => format!("{dep}/shard={shard}@replica-{replica}"),
    }
}

/// Runs one protected variant of `scenario` and writes its calls to `out` as a trace.
/// Returns the run's figures (those of the shadow run with [`TraceOptions::shadow`]) and the
/// output.
pub fn record<W: Write + Send + 'static>(
    scenario: &Scenario,
    seed: Option<u64>,
    opts: &TraceOptions,
    out: W,
) -> Result<(RunReport, W), String> {
    let labels = || {
        scenario
            .protection
            .iter()
            .map(|p| format!("{:?}", p.label))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let p = match &opts.run {
        None => scenario.protection.first().ok_or_else(|| {
            format!(
                "scenario {:?} has no protected run to record: a trace is recorded from a run's breakers",
                scenario.name
            )
        })?,
        Some(label) => scenario
            .protection
            .iter()
            .find(|p| &p.label == label)
            .ok_or_else(|| {
                format!(
                    "--trace-run {label:?} names no protected run of {:?}; its protected runs are {} \
                     (record the unprotected service with a protected run and --trace-shadow)",
                    scenario.name,
                    labels()
                )
            })?,
    };
    if !p.breakers {
        return Err(format!(
            "run {:?} has no breakers to record (breakers = false)",
            p.label
        ));
    }
    let seed = seed.unwrap_or(scenario.seed);
    let header = Header {
        source: Some(format!(
            "tripline simulate {} --seed {seed}, run {:?}{}",
            scenario.name,
            p.label,
            if opts.shadow { ", in MetricsOnly" } else { "" }
        )),
        ..Header::default()
    };
    let writer = TraceWriter::new(out, opts.format, &header).map_err(|e| e.to_string())?;
    let shared: Shared<W> = Arc::new(Mutex::new((Some(writer), None)));
    let shadow = opts.shadow;
    let observe = {
        let shared = shared.clone();
        move |idx: u32, b: &tripline::CircuitBreaker<tripline::ManualClock>| {
            if shadow {
                b.metrics_only();
            }
            b.subscribe(SimRecorder {
                out: shared.clone(),
                key: key(scenario, p, idx),
            });
        }
    };
    let model = engine::Model::new(scenario);
    let index = scenario.protection.iter().position(|x| std::ptr::eq(x, p));
    let run = engine::run(
        scenario,
        &model,
        &engine::Variant {
            index,
            protection: Some(p),
            observe: Some(&observe),
        },
        seed,
        &|_| {},
    );
    let report = report::run_report(scenario, index, run);
    let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = guard.1.take() {
        return Err(format!("writing the trace failed: {e}"));
    }
    let writer = guard.0.take().ok_or("the trace writer is gone")?;
    let out = writer
        .into_inner()
        .map_err(|e| format!("writing the trace failed: {e}"))?;
    Ok((report, out))
}
