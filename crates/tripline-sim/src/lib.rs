#![doc = include_str!("../README.md")]
//!
//! ## Modules
//!
//! * [`scenario`]: the model and its TOML file format, and the built-in scenarios.
//! * [`engine`]: the event loop and the life of a request.
//! * [`hosts`]: the dependency's hosts behind the caller's balancer, and outlier detection.
//! * [`report`]: the figures, the table and the JSON schema.
//! * [`chart`]: the time series as SVG and HTML.
//! * [`trace`]: a simulated run's calls as a trace (`tripline simulate --trace`).
//! * [`replay`]: a trace replayed against configurations (`tripline replay`).
//! * [`replay_chart`]: a replay's charts, as SVG and HTML.
//! * [`tune`]: a configuration chosen from a trace (`tripline tune`).

#![forbid(unsafe_code)]

pub mod chart;
mod dist;
pub mod engine;
pub mod hosts;
pub mod replay;
pub mod replay_chart;
pub mod report;
pub mod scenario;
pub mod trace;
pub mod tune;

pub use dist::{Dist, MAX_LATENCY, Rate};
pub use report::{Report, RunReport, SCHEMA_VERSION};
pub use scenario::{Scenario, ScenarioError, builtin};

/// Simulates a scenario: the unprotected run and each protected variant. `seed` overrides the
/// scenario's own.
pub fn simulate(scenario: &Scenario, seed: Option<u64>) -> Report {
    simulate_with_progress(scenario, seed, &|_| {})
}

/// Simulates one variant alone, on this thread: the unprotected run (`variant` = `None`) or
/// the protection at that index. Returns `None` for an index past the last protection.
///
/// ```
/// let s = tripline_sim::Scenario::load("fowler")?;
/// let without = tripline_sim::simulate_variant(&s, None, None).unwrap();
/// assert_eq!((without.label.as_str(), without.dependency_calls), ("without", 60));
/// # Ok::<(), tripline_sim::ScenarioError>(())
/// ```
pub fn simulate_variant(
    scenario: &Scenario,
    variant: Option<usize>,
    seed: Option<u64>,
) -> Option<RunReport> {
    let p = match variant {
        None => None,
        Some(i) => Some(scenario.protection.get(i)?),
    };
    let seed = seed.unwrap_or(scenario.seed);
    let model = engine::Model::new(scenario);
    let out = engine::run(
        scenario,
        &model,
        &engine::Variant {
            protection: p,
            observe: None,
        },
        seed,
        &|_| {},
    );
    Some(report::run_report(scenario, p, out))
}

/// How much progress a simulation reports in all ([`simulate_with_progress`]): virtual
/// milliseconds of arrivals, summed over the runs.
pub fn progress_total(scenario: &Scenario) -> u64 {
    (scenario.duration.as_millis() as u64).saturating_mul(1 + scenario.protection.len() as u64)
}

/// [`simulate`], calling `progress` with virtual milliseconds as they are simulated (from
/// several threads: the runs go in parallel). The figures do not depend on the threads.
pub fn simulate_with_progress(
    scenario: &Scenario,
    seed: Option<u64>,
    progress: &(dyn Fn(u64) + Sync),
) -> Report {
    let seed = seed.unwrap_or(scenario.seed);
    let model = engine::Model::new(scenario);
    let variants: Vec<Option<&scenario::Protection>> = std::iter::once(None)
        .chain(scenario.protection.iter().map(Some))
        .collect();
    let runs: Vec<RunReport> = std::thread::scope(|s| {
        let handles: Vec<_> = variants
            .iter()
            .map(|&p| {
                let model = &model;
                s.spawn(move || {
                    let out = engine::run(
                        scenario,
                        model,
                        &engine::Variant {
                            protection: p,
                            observe: None,
                        },
                        seed,
                        progress,
                    );
                    report::run_report(scenario, p, out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    Report {
        schema_version: SCHEMA_VERSION,
        scenario: scenario.name.clone(),
        description: scenario.description.clone(),
        seed,
        duration_s: scenario.duration.as_secs_f64(),
        dependency: scenario.dependency.name.clone(),
        replicas: scenario.service.replicas,
        workers_per_replica: scenario.service.workers,
        incident: scenario.incident().map(|(a, b)| report::Incident {
            start_s: a.as_secs_f64(),
            end_s: b.as_secs_f64(),
        }),
        runs,
    }
}
