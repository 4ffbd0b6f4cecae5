//! `tripline replay` and `tripline tune`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use tripline::BreakerConfig;
use tripline::trace::{Format, ReadOptions, Trace, TraceError, read_path};
use tripline_sim::replay::{
    Candidate, ConfigReplay, Detect, ReplayOptions, prepare, replay, replay_all,
};
use tripline_sim::replay_chart;
use tripline_sim::tune::{Holdout, Space, TuneOptions, resilience4j_defaults, tune};

/// How the trace is read and its incidents found (shared by replay and tune).
#[derive(Debug, Args)]
pub(crate) struct TraceArgs {
    /// `jsonl` or `csv` (default: from the file's extension, else its first line).
    #[arg(long, value_name = "FORMAT")]
    format: Option<String>,
    /// Count and skip lines that do not parse, instead of stopping at the first.
    #[arg(long)]
    skip_bad_lines: bool,
    /// How far out of end order a line may be.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    reorder_window: String,
    /// The random seed the breakers' jitter derives from (a simulated trace replays exactly
    /// with its run's seed).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// One breaker for the whole trace, whatever its keys.
    #[arg(long)]
    one_breaker: bool,
    /// An incident, from the trace's origin: `60s..420s` (repeat for more; default: found
    /// from the trace).
    #[arg(long, value_name = "FROM..UNTIL")]
    incident: Vec<String>,
    /// A call at least this slow is bad (default: 5 × the median duration of the successes).
    #[arg(long, value_name = "DURATION")]
    bad_latency: Option<String>,
    /// Incident detection: the share of bad calls that makes a second bad.
    #[arg(long, default_value_t = 0.25, value_name = "SHARE")]
    incident_share: f64,
    /// Incident detection: the known outcomes a second needs for a verdict.
    #[arg(long, default_value_t = 5, value_name = "N")]
    incident_min_calls: u32,
}

fn duration(field: &str, s: &str) -> Result<Duration, String> {
    tripline::duration::parse(s.trim())
        .map_err(|e| format!("{field} must be a duration such as \"1s\", got {s:?}: {e}"))
}

impl TraceArgs {
    fn read(&self, path: &Path) -> Result<(Trace, ReplayOptions), String> {
        let format = match self.format.as_deref() {
            None => None,
            Some("jsonl" | "json" | "ndjson") => Some(Format::JsonLines),
            Some("csv") => Some(Format::Csv),
            Some(other) => return Err(format!("--format must be jsonl or csv, got {other:?}")),
        };
        let opts = ReadOptions {
            format,
            skip_bad_lines: self.skip_bad_lines,
            reorder_window: duration("--reorder-window", &self.reorder_window)?,
            ..ReadOptions::default()
        };
        let trace = read_path(path, &opts)
            .map_err(|e| format!("invalid trace {}: {}", path.display(), explain(&e, path)))?;
        let incidents = if self.incident.is_empty() {
            None
        } else {
            let mut v = Vec::new();
            for i in &self.incident {
                let (a, b) = i.split_once("..").ok_or_else(|| {
                    format!("--incident must be FROM..UNTIL such as 60s..420s, got {i:?}")
                })?;
                let (a, b) = (duration("--incident", a)?, duration("--incident", b)?);
                if a >= b {
                    return Err(format!("--incident must start before it ends, got {i:?}"));
                }
                v.push((a, b));
            }
            Some(v)
        };
        let ropts = ReplayOptions {
            seed: self.seed,
            by_key: !self.one_breaker,
            incidents,
            detect: Detect {
                bad_latency: self
                    .bad_latency
                    .as_deref()
                    .map(|s| duration("--bad-latency", s))
                    .transpose()?,
                bad_share: self.incident_share,
                min_calls: self.incident_min_calls,
                ..Detect::default()
            },
        };
        Ok((trace, ropts))
    }
}

/// A reading error as the command says it. A line out of end order is named by the two
/// lines, quoted as written (their times in the file's own terms), and the gap: the reader's
/// own figure for the line's end counts from the earliest start read so far, an origin that
/// moves as earlier starts turn up, so it is left out.
fn explain(e: &TraceError, path: &Path) -> String {
    match e {
        TraceError::Backwards {
            line,
            back_ms,
            latest_line,
            window_ms,
            ..
        } => {
            let quoted = quote_lines(path, &[*line, *latest_line]);
            let q = |n: u64| {
                quoted
                    .iter()
                    .find(|(l, _)| *l == n)
                    .map(|(_, t)| format!(" ({t})"))
                    .unwrap_or_default()
            };
            format!(
                "line {line}{}: the call ends (start + duration_ms) {back_ms} ms before the call \
                 of line {latest_line}{} ends; lines must come in the order calls ended, at most \
                 {window_ms} ms out of order (--reorder-window): sort the trace by end time, \
                 widen the window, or skip such lines (--skip-bad-lines)",
                q(*line),
                q(*latest_line)
            )
        }
        other => other.to_string(),
    }
}

/// The lines `wanted` (1-based) of a text file, each in backquotes and cut to 80 characters.
fn quote_lines(path: &Path, wanted: &[u64]) -> Vec<(u64, String)> {
    use std::io::BufRead as _;
    let Some(&last) = wanted.iter().max() else {
        return Vec::new();
    };
    let Ok(file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, text) in std::io::BufReader::new(file).lines().enumerate() {
        let n = i as u64 + 1;
        if n > last {
            break;
        }
        let Ok(text) = text else { break };
        if wanted.contains(&n) {
            let text = text.trim_end_matches('\r');
            let cut: String = text.chars().take(80).collect();
            let more = if text.chars().count() > 80 { "…" } else { "" };
            out.push((n, format!("`{cut}{more}`")));
        }
    }
    out
}

/// Configurations given by name instead of a file.
const BUILTIN_CONFIGS: [&str; 2] = ["resilience4j", "tripline-default"];

/// Reads `--config` arguments: a built-in name, a `BreakerConfig` file (labelled by its
/// stem) or a registry file (each of its `[configs.NAME]`).
fn load_configs(args: &[String]) -> Result<Vec<Candidate>, String> {
    let mut out = Vec::new();
    for a in args {
        match a.as_str() {
            "resilience4j" => out.push(Candidate::new("resilience4j", resilience4j_defaults())),
            "tripline-default" => {
                out.push(Candidate::new("tripline-default", BreakerConfig::default()))
            }
            path => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    format!(
                        "cannot read configuration {path}: {e} (built-in names: {})",
                        BUILTIN_CONFIGS.join(", ")
                    )
                })?;
                let doc: toml::Table = toml::from_str(&text)
                    .map_err(|e| format!("invalid configuration {path}: {e}"))?;
                if let Some(configs) = doc.get("configs") {
                    let configs: std::collections::BTreeMap<String, BreakerConfig> = configs
                        .clone()
                        .try_into()
                        .map_err(|e| format!("invalid configuration {path}: configs: {e}"))?;
                    if configs.is_empty() {
                        return Err(format!("{path} has an empty [configs] table"));
                    }
                    out.extend(configs.into_iter().map(|(n, c)| Candidate::new(n, c)));
                } else {
                    let c: BreakerConfig = toml::from_str(&text)
                        .map_err(|e| format!("invalid configuration {path}: {e}"))?;
                    let label = Path::new(path)
                        .file_stem()
                        .map_or(path.to_string(), |s| s.to_string_lossy().into_owned());
                    out.push(Candidate::new(label, c));
                }
            }
        }
    }
    Ok(out)
}

/// `tripline replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The trace (JSON Lines or CSV).
    trace: PathBuf,
    /// A configuration: a TOML file (a breaker's, or a registry's: each `[configs.NAME]`), or
    /// `resilience4j` or `tripline-default`. Repeat to compare several.
    #[arg(long, required = true, value_name = "FILE")]
    config: Vec<String>,
    /// Print the figures as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write an HTML page (or an SVG when the name ends in `.svg`).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    #[command(flatten)]
    trace_args: TraceArgs,
}

fn write_report(path: &Path, doc: Result<String, String>) -> Result<(), String> {
    std::fs::write(path, doc?).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

pub(crate) fn run_replay(a: ReplayArgs) -> Result<(), String> {
    let candidates = load_configs(&a.config)?;
    let (trace, opts) = a.trace_args.read(&a.trace)?;
    let prepared = prepare(&trace, &opts)?;
    let report = replay_all(
        &a.trace.display().to_string(),
        &trace,
        &prepared,
        &candidates,
        &opts,
    );
    if a.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = a.report {
        let svg = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
        let doc = if svg {
            replay_chart::svg(&report)
        } else {
            replay_chart::html(&report)
        };
        write_report(&path, doc)?;
        if !a.json {
            println!("\nreport written to {}", path.display());
        }
    }
    Ok(())
}

/// `tripline tune`.
#[derive(Debug, Args)]
pub(crate) struct TuneArgs {
    /// The trace (JSON Lines or CSV).
    #[arg(required_unless_present = "show_space")]
    trace: Option<PathBuf>,
    /// The bounds of the search, as TOML (`--show-space` prints the defaults).
    #[arg(long, value_name = "FILE")]
    space: Option<PathBuf>,
    /// Print the default bounds and exit.
    #[arg(long)]
    show_space: bool,
    /// Candidates to replay.
    #[arg(long, default_value_t = 256)]
    budget: usize,
    /// The search's seed.
    #[arg(long, default_value_t = 0)]
    search_seed: u64,
    /// What a healthy call refused costs, counted in bad calls admitted.
    #[arg(long, default_value_t = 1.0)]
    healthy_weight: f64,
    /// Choose only among candidates that trip within this in every incident; when none
    /// does, the command names the nearest and fails.
    #[arg(long, value_name = "DURATION")]
    max_time_to_trip: Option<String>,
    /// The later part of the trace to check the choice on, after choosing on the rest: a
    /// share of its span (30%), a time from its origin (600s), or 0 for none.
    #[arg(long, value_name = "SHARE|TIME", default_value = "30%")]
    holdout: String,
    /// The configuration in force (a file or a built-in name, as for --config): the choice
    /// keeps its values for the settings the trace does not constrain, and it is compared
    /// with the choice (default: tripline's defaults are kept).
    #[arg(long, value_name = "FILE")]
    current: Option<String>,
    /// Configurations to compare the choice with (files or built-in names, as for replay;
    /// default: resilience4j).
    #[arg(long, value_name = "FILE")]
    config: Vec<String>,
    /// Write the chosen configuration here (TOML).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print the result as JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    trace_args: TraceArgs,
}

/// The incidents of a prepared trace, one line: "3 (bad: failed, or at least 250 ms): ...".
fn incidents_line(p: &tripline_sim::replay::Prepared, split: Option<f64>) -> String {
    let all = p.incidents();
    let keys: Vec<&str> = p.keys().collect();
    let shown: Vec<String> = all
        .iter()
        .take(12)
        .map(|i| {
            let key = if keys.len() > 1 {
                format!("{}: ", keys[i.key])
            } else {
                String::new()
            };
            let part = match split {
                Some(at) if i.start_s >= at => " (held out)",
                Some(at) if i.end_s > at => " (cut by the split)",
                _ => "",
            };
            format!("{key}{:.1} s – {:.1} s{part}", i.start_s, i.end_s)
        })
        .collect();
    let more = if all.len() > shown.len() {
        format!(
            ", … {} more (--json lists them all)",
            all.len() - shown.len()
        )
    } else {
        String::new()
    };
    format!(
        "incidents found: {} (bad: failed, or at least {:.0} ms){}{}{more}",
        all.len(),
        p.bad_latency.as_secs_f64() * 1000.0,
        if shown.is_empty() { "" } else { ": " },
        shown.join(", ")
    )
}

pub(crate) fn run_tune(a: TuneArgs) -> Result<(), String> {
    let space = match &a.space {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            Space::from_toml(&text).map_err(|e| format!("invalid space {}: {e}", p.display()))?
        }
        None => Space::default(),
    };
    if a.show_space {
        print!("{}", space.to_toml());
        return Ok(());
    }
    let Some(path) = a.trace.as_ref() else {
        return Err("a trace is needed".into());
    };
    let holdout = Holdout::from_arg(&a.holdout)?;
    let current = match &a.current {
        None => None,
        Some(c) => load_configs(std::slice::from_ref(c))?.into_iter().next(),
    };
    let mut baselines = current.iter().cloned().collect::<Vec<_>>();
    if a.config.is_empty() {
        baselines.push(Candidate::new("resilience4j", resilience4j_defaults()));
    } else {
        baselines.extend(load_configs(&a.config)?);
    }
    let (trace, ropts) = a.trace_args.read(path)?;
    let prepared = prepare(&trace, &ropts)?;
    let opts = TuneOptions {
        budget: a.budget,
        seed: a.search_seed,
        healthy_weight: a.healthy_weight,
        max_time_to_trip: a
            .max_time_to_trip
            .as_deref()
            .map(|s| duration("--max-time-to-trip", s))
            .transpose()?,
        holdout,
        keep: current.as_ref().map(|c| c.config.clone()),
    };
    let split = tripline_sim::tune::split_point(
        &prepared,
        opts.holdout,
        tripline_sim::tune::holdout_tail(&space),
    );
    if !a.json {
        println!(
            "{}",
            incidents_line(&prepared, split.map(|d| d.as_secs_f64()))
        );
    }
    let started = std::time::Instant::now();
    let bar = crate::progress_bar(opts.budget as u64, "replaying candidates", "candidates");
    let result = tune(&prepared, &space, &opts, &ropts, &|n| bar.tick(n));
    bar.finish();
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            if prepared.incidents().is_empty() || e.contains("holds no incident") {
                eprintln!(
                    "warning: NOTHING WAS LEARNED from {}: no configuration written",
                    path.display()
                );
            }
            return Err(e);
        }
    };
    let elapsed = started.elapsed();
    let (fit, later) = match split {
        Some(at) => (
            Some(prepared.part(Duration::ZERO, at)),
            Some(prepared.part(at, Duration::MAX)),
        ),
        None => (None, None),
    };
    let fit_p = fit.as_ref().unwrap_or(&prepared);
    let base: Vec<ConfigReplay> = baselines.iter().map(|c| replay(fit_p, c, &ropts)).collect();
    let base_later: Vec<ConfigReplay> = later
        .as_ref()
        .map(|l| baselines.iter().map(|c| replay(l, c, &ropts)).collect())
        .unwrap_or_default();
    let toml_text = format!(
        "# Chosen by `tripline tune` from {} ({} calls, {} candidates{}).\n\
         # In a registry, these lines go under a [configs.NAME] header as they are.\n{}",
        path.display(),
        prepared.calls,
        result.evaluated,
        result
            .held_out_from_s
            .map(|t| format!(", chosen on the calls before {t:.1} s"))
            .unwrap_or_default(),
        result.chosen.replay.config
    );
    let unmet = result.nearest.as_ref().map(|n| {
        let t = &n.replay.totals;
        format!(
            "no candidate trips within {} in every incident ({} candidates); the nearest is #{} \
             ({}), which trips in {} of {} incidents{}: widen --max-time-to-trip, the space or \
             the budget; no configuration written",
            a.max_time_to_trip.as_deref().unwrap_or_default(),
            result.evaluated,
            n.index,
            tripline_sim::tune::summary(&n.config),
            t.incidents_tripped,
            t.incidents,
            t.max_time_to_trip_s
                .map(|x| format!(", the slowest after {x:.2} s"))
                .unwrap_or_default()
        )
    });
    if a.json {
        let keys: Vec<&str> = prepared.keys().collect();
        let incidents: Vec<serde_json::Value> = prepared
            .incidents()
            .iter()
            .map(|i| {
                serde_json::json!({
                    "key": keys.get(i.key).copied().unwrap_or_default(),
                    "start_s": i.start_s,
                    "end_s": i.end_s,
                })
            })
            .collect();
        let doc = serde_json::json!({
            "schema_version": tripline_sim::replay::REPLAY_SCHEMA_VERSION,
            "trace": path.display().to_string(),
            "calls": prepared.calls,
            "bad_latency_ms": prepared.bad_latency.as_secs_f64() * 1000.0,
            "incidents": incidents,
            "evaluated": result.evaluated,
            "front": result.front,
            "chosen": result.chosen,
            "eligible": result.eligible,
            "nearest": result.nearest,
            "unconstrained": result.unconstrained,
            "held_out_from_s": result.held_out_from_s,
            "held_out": result.held_out,
            "baselines": base,
            "baselines_held_out": base_later,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", result.table_with(&base, &base_later));
        println!(
            "\n{} calls, {} keys, {} candidates in {:.2} s\n",
            prepared.calls,
            prepared.keys().count(),
            result.evaluated,
            elapsed.as_secs_f64()
        );
        if a.out.is_none() && unmet.is_none() {
            print!("{toml_text}");
        }
    }
    if let Some(e) = unmet {
        return Err(e);
    }
    if let Some(out) = &a.out {
        std::fs::write(out, &toml_text)
            .map_err(|e| format!("cannot write {}: {e}", out.display()))?;
        if !a.json {
            println!("configuration written to {}", out.display());
        }
    }
    Ok(())
}
