//! `tripline`: simulate an incident with and without circuit breakers.
//!
//! ```text
//! tripline scenarios                     list the built-in scenarios
//! tripline show <name>                   print a built-in scenario's TOML (a starting point)
//! tripline simulate <name|file.toml> [--seed N] [--json] [--report FILE.html|FILE.svg]
//!                    [--trace FILE [--trace-run LABEL] [--trace-shadow]]
//! tripline replay TRACE --config FILE... [--json] [--report FILE.html|FILE.svg]
//! tripline tune TRACE [--space FILE] [--budget N] [--out FILE] [--json]
//! ```

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod commands;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tripline_sim::{Scenario, builtin, chart, scenario::BUILTIN, simulate_with_progress};

/// Simulate an incident with and without circuit breakers, on virtual time, with the real
/// tripline breaker.
#[derive(Debug, Parser)]
#[command(name = "tripline", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the built-in scenarios.
    Scenarios,
    /// Print a built-in scenario's TOML, to start a scenario of your own from it.
    Show {
        /// The scenario's name.
        name: String,
    },
    /// Run a scenario without and with protection and compare.
    Simulate {
        /// A built-in scenario's name or a scenario file (TOML).
        scenario: String,
        /// The random seed (default: the scenario's own).
        #[arg(long)]
        seed: Option<u64>,
        /// Print the figures as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Also write charts: an HTML page (table and charts), or an SVG when the name ends
        /// in `.svg`.
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Also write the calls of one protected run as a trace (JSON Lines, or CSV for a
        /// `.csv` name), for `tripline replay` and `tripline tune`.
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// The protected run to record (default: the first).
        #[arg(long, value_name = "LABEL", requires = "trace")]
        trace_run: Option<String>,
        /// Record that run with its breakers in MetricsOnly: every call is made and recorded.
        #[arg(long, requires = "trace")]
        trace_shadow: bool,
    },
    /// Replay a trace of real outcomes against breaker configurations.
    Replay(commands::ReplayArgs),
    /// Search the configuration space for the configuration that fits a trace best.
    Tune(commands::TuneArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<(), String> {
    match command {
        Command::Scenarios => {
            let w = BUILTIN.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
            for (name, _) in BUILTIN {
                let d = Scenario::load(name)
                    .map(|s| s.description)
                    .unwrap_or_else(|e| e.to_string());
                println!("{name:w$}  {d}");
            }
            Ok(())
        }
        Command::Show { name } => match builtin(&name) {
            Some(src) => {
                print!("{src}");
                Ok(())
            }
            None => Err(format!(
                "unknown scenario {name:?}; the built-in ones are: {}",
                BUILTIN
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        },
        Command::Simulate {
            scenario,
            seed,
            json,
            report,
            trace,
            trace_run,
            trace_shadow,
        } => {
            let s = Scenario::load(&scenario).map_err(|e| e.to_string())?;
            if let Some(path) = &trace {
                write_trace(&s, seed, path, trace_run, trace_shadow)?;
            }
            let bar = progress_bar(
                tripline_sim::progress_total(&s),
                "simulating",
                "of virtual time",
            );
            let r = simulate_with_progress(&s, seed, &|ms| bar.tick(ms));
            bar.finish();
            if json {
                println!("{}", r.to_json());
            } else {
                print!(
                    "{}",
                    tripline_sim::screen::screen(&r, tripline_sim::screen::width())
                );
            }
            if let Some(path) = report {
                let is_svg = path
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("svg"));
                let doc = if is_svg {
                    chart::svg(&r)?
                } else {
                    chart::html(&r)?
                };
                std::fs::write(&path, doc)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                if !json {
                    println!("\nreport written to {}", path.display());
                }
            }
            Ok(())
        }
        Command::Replay(a) => commands::run_replay(a),
        Command::Tune(a) => commands::run_tune(a),
    }
}

fn write_trace(
    s: &Scenario,
    seed: Option<u64>,
    path: &std::path::Path,
    run: Option<String>,
    shadow: bool,
) -> Result<(), String> {
    use tripline_sim::trace::{TraceOptions, record};
    let format = tripline::trace::Format::from_path(path).unwrap_or_default();
    // Written beside the file and moved onto it once complete: a run that cannot be recorded
    // (no breaker in it, an unknown label) leaves no file behind, and an old file at that
    // path stays as it was.
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let file = std::fs::File::create(&partial)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let opts = TraceOptions {
        run,
        shadow,
        format,
    };
    let done = record(s, seed, &opts, std::io::BufWriter::new(file))
        .and_then(|(_, mut w)| {
            use std::io::Write as _;
            w.flush()
                .map_err(|e| format!("cannot write {}: {e}", path.display()))
        })
        .and_then(|()| {
            std::fs::rename(&partial, path)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))
        });
    if done.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    done
}

/// A progress bar on stderr, drawn only on a terminal and only once the run has taken more
/// than a second.
pub(crate) struct Bar {
    bar: ProgressBar,
    started: Instant,
    shown: std::sync::atomic::AtomicBool,
    terminal: bool,
}

impl Bar {
    pub(crate) fn tick(&self, n: u64) {
        self.bar.inc(n);
        if self.terminal
            && !self.shown.load(std::sync::atomic::Ordering::Relaxed)
            && self.started.elapsed() > Duration::from_secs(1)
        {
            self.shown.store(true, std::sync::atomic::Ordering::Relaxed);
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

pub(crate) fn progress_bar(total: u64, what: &str, unit: &str) -> Bar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{what} {{bar:40}} {{percent:>3}}% {unit}, {{eta}} left"
    )) {
        bar.set_style(style);
    }
    Bar {
        bar,
        started: Instant::now(),
        shown: std::sync::atomic::AtomicBool::new(false),
        terminal: std::io::stderr().is_terminal(),
    }
}
