#![doc = include_str!("../README.md")]
//!
//! ## Modules
//!
//! * [`scenario`]: the model and its TOML file format, and the built-in scenarios.
//! * [`protection`]: the policy sections (retry and budgets, bulkhead, gate, throttle) and how
//!   a tier's client is resolved from them.
//! * [`engine`]: the event loop, the tiers and the life of a request.
//! * [`layers`]: a tier's client on virtual time: the real policies in the pipeline's order.
//! * [`hosts`]: the dependency's hosts behind the caller's balancer, and outlier detection.
//! * [`sweep`]: the scenario again over the values of one field.
//! * [`report`]: the figures, the table and the JSON schema.
//! * [`headline`]: what a report says in words, at the top of the screen and of the page.
//! * [`screen`]: the first screen of `tripline simulate`, laid out for the terminal.
//! * [`chart`]: the time series as SVG, and the HTML report page.
//! * [`trace`]: a simulated run's calls as a trace (`tripline simulate --trace`).
//! * [`replay`]: a trace replayed against configurations (`tripline replay`).
//! * [`replay_chart`]: a replay's charts, as SVG and HTML.
//! * [`tune`]: a configuration chosen from a trace (`tripline tune`).

#![forbid(unsafe_code)]

pub mod adaptive;
pub mod chart;
mod dist;
pub mod engine;
pub mod headline;
pub mod hosts;
pub mod layers;
pub mod protection;
pub mod replay;
pub mod replay_chart;
pub mod report;
pub mod scenario;
pub mod screen;
pub mod sweep;
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
            index: variant,
            protection: p,
            observe: None,
        },
        seed,
        &|_| {},
    );
    Some(report::run_report(scenario, variant, out))
}

/// How much progress a simulation reports in all ([`simulate_with_progress`]): virtual
/// milliseconds of arrivals, summed over the runs (a sweep's included).
pub fn progress_total(scenario: &Scenario) -> u64 {
    let runs = 1 + scenario.protection.len() as u64;
    let own = (scenario.duration.as_millis() as u64).saturating_mul(runs);
    let swept: u64 = scenario.sweep.as_ref().map_or(0, |s| {
        s.points(scenario)
            .iter()
            .map(|(_, p)| {
                (p.duration.as_millis() as u64)
                    .saturating_mul(runs)
                    .saturating_mul(u64::from(s.repeat))
            })
            .sum()
    });
    own.saturating_add(swept)
}

/// Runs every variant of `scenario` in parallel, one thread each.
fn run_all(scenario: &Scenario, seed: u64, progress: &(dyn Fn(u64) + Sync)) -> Vec<RunReport> {
    let model = engine::Model::new(scenario);
    let variants: Vec<Option<usize>> = std::iter::once(None)
        .chain((0..scenario.protection.len()).map(Some))
        .collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = variants
            .iter()
            .map(|&v| {
                let model = &model;
                s.spawn(move || {
                    let p = v.map(|i| &scenario.protection[i]);
                    let out = engine::run(
                        scenario,
                        model,
                        &engine::Variant {
                            index: v,
                            protection: p,
                            observe: None,
                        },
                        seed,
                        progress,
                    );
                    report::run_report(scenario, v, out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// [`simulate`], calling `progress` with virtual milliseconds as they are simulated (from
/// several threads: the runs go in parallel). The figures do not depend on the threads.
pub fn simulate_with_progress(
    scenario: &Scenario,
    seed: Option<u64>,
    progress: &(dyn Fn(u64) + Sync),
) -> Report {
    let seed = seed.unwrap_or(scenario.seed);
    let runs = run_all(scenario, seed, progress);
    let sweep = scenario.sweep.as_ref().map(|sw| sweep::SweepReport {
        field: sw.field.clone(),
        metrics: sw.metrics.clone(),
        repeat: sw.repeat,
        summary: sw.summary,
        points: sw
            .points(scenario)
            .into_iter()
            .map(|(value, point)| {
                // figures[run][metric][repetition]
                let reps: Vec<Vec<RunReport>> = (0..u64::from(sw.repeat))
                    .map(|i| run_all(&point, seed.wrapping_add(i), progress))
                    .collect();
                let runs = reps.first().map_or(0, Vec::len);
                let faults = point
                    .incident()
                    .map(|(a, b)| (a.as_secs_f64(), b.as_secs_f64()));
                let values = |r: usize, m: &str| -> Vec<Option<f64>> {
                    reps.iter()
                        .map(|rep| sweep::metric_in(&rep[r], m, faults))
                        .collect()
                };
                sweep::SweepPoint {
                    value,
                    runs: (0..runs)
                        .map(|r| sweep::SweepRun {
                            label: reps[0][r].label.clone(),
                            figures: sw
                                .metrics
                                .iter()
                                .map(|m| sweep::mean(&values(r, m)))
                                .collect(),
                            spread: sw
                                .metrics
                                .iter()
                                .map(|m| sweep::spread(m, &values(r, m)))
                                .collect(),
                        })
                        .collect(),
                }
            })
            .collect(),
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
        tiers: (0..scenario.tier_count())
            .map(|k| scenario.tier_name(k).to_string())
            .collect(),
        runs,
        sweep,
    }
}
