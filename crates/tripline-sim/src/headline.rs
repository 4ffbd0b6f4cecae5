//! What a report says in words: what happened without protection, and what each protected
//! run changed. `tripline simulate` opens with it, and the HTML page puts it at the top:
//! two sentences and three numbers for the main protection (the first run with breakers,
//! else the first protected run), and one line per protected run.
//!
//! ```
//! let s = tripline_sim::Scenario::load("fowler")?;
//! let r = tripline_sim::simulate(&s, None);
//! let h = tripline_sim::headline::headline(&r);
//! // Figures keep their units on one line: the spaces in them are no-break spaces.
//! let happened = h.happened.replace('\u{a0}', " ");
//! assert!(happened.starts_with("From 5 s to 30 s service was faulty: without protection 25 of 60 requests"));
//! assert_eq!(h.main.as_deref(), Some("with"));
//! assert_eq!(h.numbers[0].what, "requests answered with an error");
//! // The breaker answers its 27 refusals with an error (no fallback), 7 of them after the faults.
//! assert_eq!((h.numbers[0].without.as_str(), h.numbers[0].with.as_str()), ("25", "32"));
//! # Ok::<(), tripline_sim::ScenarioError>(())
//! ```

use serde::Serialize;

use crate::report::{Report, RunReport, fmt_ms};

/// A report's headline.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Headline {
    /// What happened without protection, in one sentence.
    pub happened: String,
    /// The main protection's label.
    pub main: Option<String>,
    /// What the main protection changed, in one sentence.
    pub saved: Option<String>,
    /// Three figures without and with the main protection.
    pub numbers: Vec<Number>,
    /// One line per protected run: its label and what it changed.
    pub runs: Vec<(String, String)>,
}

/// A figure without and with the main protection.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Number {
    /// What it counts.
    pub what: String,
    /// Without protection.
    pub without: String,
    /// With the main protection.
    pub with: String,
}

/// A count with its thousands apart by a no-break space, so a line never wraps inside it:
/// `225 316`.
///
/// ```
/// assert_eq!(tripline_sim::headline::count(225_316), "225\u{a0}316");
/// assert_eq!(tripline_sim::headline::count(999), "999");
/// ```
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push('\u{a0}');
        }
        out.push(c);
    }
    out
}

/// A figure whose number and unit stay on one line.
fn nb(s: &str) -> String {
    s.replace(' ', "\u{a0}")
}

fn secs(x: f64) -> String {
    nb(&if x < 10.0 && x.fract() != 0.0 {
        format!("{x:.2} s")
    } else {
        format!("{x:.0} s")
    })
}

/// Requests answered with an error: failed, shed, or refused without a fallback.
fn errors(r: &RunReport) -> u64 {
    r.failed + r.shed + r.rejected_fast.saturating_sub(r.fallback_served)
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "0 %".into();
    }
    let p = part as f64 * 100.0 / whole as f64;
    if p > 0.0 && p < 1.0 {
        format!("{p:.1} %")
    } else {
        format!("{p:.0} %")
    }
}

/// Which latency tells the story: the endpoints that never call the dependency when there
/// are some (what a full pool does to bystanders), else those that call it.
fn story_latency(r: &Report) -> (bool, String) {
    let other = r.runs.iter().any(|x| x.latency.other.count > 0);
    let what = if other {
        format!("p99, endpoints that do not call {}", r.dependency)
    } else {
        format!("p99, requests that call {}", r.dependency)
    };
    (other, what)
}

fn p99(r: &RunReport, other: bool) -> Option<f64> {
    if other {
        r.latency.other.p99_ms
    } else {
        r.latency.using_dependency.p99_ms
    }
}

fn baseline(r: &RunReport, other: bool) -> Option<f64> {
    if other {
        r.latency.other.baseline_p99_ms
    } else {
        r.latency.using_dependency.baseline_p99_ms
    }
}

fn pool(r: &RunReport) -> String {
    if r.pool_full_s > 0 {
        format!(
            "pool {}/{}, full for {}\u{a0}s",
            r.pool_peak, r.pool_size, r.pool_full_s
        )
    } else {
        format!("pool peak {}/{}, never full", r.pool_peak, r.pool_size)
    }
}

fn recovery(r: &Report, run: &RunReport) -> Option<String> {
    let i = r.incident?;
    if i.end_s >= r.duration_s {
        return None;
    }
    Some(match run.recovery_s {
        Some(0.0) => "healthy as the faults ended".into(),
        Some(x) => format!("healthy {} after the faults", secs(x)),
        None => "never healthy again within the run".into(),
    })
}

/// The headline of a report (see the [module docs](self)).
pub fn headline(r: &Report) -> Headline {
    let Some(without) = r.runs.first() else {
        return Headline {
            happened: String::new(),
            main: None,
            saved: None,
            numbers: Vec::new(),
            runs: Vec::new(),
        };
    };
    let (other, lat_what) = story_latency(r);
    let pool_matters = r.runs.iter().any(|x| x.pool_full_s > 0);
    let dep = &r.dependency;
    let main = r
        .runs
        .iter()
        .skip(1)
        .find(|x| x.breaker.is_some())
        .or_else(|| r.runs.get(1));

    // What happened.
    let mut happened = match r.incident {
        Some(i) => format!(
            "From {} to {} {dep} was faulty: without protection {} of {} requests ({}) were \
             answered with an error",
            secs(i.start_s),
            secs(i.end_s),
            count(errors(without)),
            count(without.requests),
            pct(errors(without), without.requests)
        ),
        None => format!(
            "No faults: without protection {} requests made {} calls to {dep}",
            count(without.requests),
            count(without.dependency_calls)
        ),
    };
    if pool_matters && without.pool_full_s > 0 {
        happened.push_str(&format!(
            ", the worker pool was full ({}/{}) for {}\u{a0}s",
            without.pool_peak, without.pool_size, without.pool_full_s
        ));
    }
    if let (Some(p), Some(b)) = (p99(without, other), baseline(without, other)) {
        if p > 2.0 * b {
            let whom = if other {
                format!("the endpoints that do not call {dep}")
            } else {
                "the requests".to_string()
            };
            happened.push_str(&format!(
                ", {whom} answered in {} at p99 (normally {})",
                nb(&fmt_ms(Some(p))),
                nb(&fmt_ms(Some(b)))
            ));
        }
    }
    if r.incident.is_none() {
        if let Some(c) = without.completion_s {
            happened.push_str(&format!(", the last answered at {}", secs(c)));
        }
    }
    match recovery(r, without) {
        Some(rec) => happened.push_str(&format!("; it was {rec}.")),
        None => happened.push('.'),
    }

    // What the main protection changed.
    let saved = main.map(|m| {
        let who = if m.breaker.is_some() {
            format!("the breaker (\u{201c}{}\u{201d})", m.label)
        } else {
            format!("\u{201c}{}\u{201d}", m.label)
        };
        let mut changes = vec![if r.incident.is_some() {
            format!(
                "{} requests were answered with an error instead of {}",
                count(errors(m)),
                count(errors(without))
            )
        } else {
            format!(
                "{} calls reached {dep} instead of {}",
                count(m.dependency_calls),
                count(without.dependency_calls)
            )
        }];
        if pool_matters {
            changes.push(if m.pool_full_s > 0 {
                format!("the worker pool was full for {}\u{a0}s", m.pool_full_s)
            } else {
                format!(
                    "the worker pool peaked at {}/{} and never filled",
                    m.pool_peak, m.pool_size
                )
            });
        }
        if let Some(p) = p99(m, other) {
            changes.push(if other {
                format!(
                    "the endpoints that do not call {dep} answered in {} at p99",
                    nb(&fmt_ms(Some(p)))
                )
            } else {
                format!("the requests answered in {} at p99", nb(&fmt_ms(Some(p))))
            });
        }
        let last = changes.pop().unwrap_or_default();
        let mut s = if changes.is_empty() {
            format!("With {who}, {last}")
        } else {
            format!("With {who}, {}, and {last}", changes.join(", "))
        };
        if m.rejected_fast > 0 {
            s.push_str(&format!("; it refused {} requests", count(m.rejected_fast)));
            if m.fallback_served == m.rejected_fast {
                s.push_str(", all answered from the fallback");
            } else if m.fallback_served > 0 {
                s.push_str(&format!(
                    ", {} answered from the fallback",
                    count(m.fallback_served)
                ));
            }
            if let Some(w) = m.rejected_would_succeed {
                s.push_str(&format!(", {} of which would have succeeded", count(w)));
            }
        }
        if let Some(rec) = recovery(r, m) {
            s.push_str(&format!("; it was {rec}"));
        }
        s.push('.');
        s
    });

    // Three numbers.
    let mut numbers = Vec::new();
    if let Some(m) = main {
        if r.incident.is_some() {
            numbers.push(Number {
                what: "requests answered with an error".into(),
                without: count(errors(without)),
                with: count(errors(m)),
            });
        } else if let (Some(a), Some(b)) = (without.completion_s, m.completion_s) {
            numbers.push(Number {
                what: "last request answered at".into(),
                without: secs(a),
                with: secs(b),
            });
        }
        if pool_matters {
            numbers.push(Number {
                what: "seconds with a full worker pool".into(),
                without: without.pool_full_s.to_string(),
                with: m.pool_full_s.to_string(),
            });
        } else {
            numbers.push(Number {
                what: format!("calls that reached {dep}"),
                without: count(without.dependency_calls),
                with: count(m.dependency_calls),
            });
        }
        if let (Some(a), Some(b)) = (p99(without, other), p99(m, other)) {
            numbers.push(Number {
                what: lat_what.clone(),
                without: nb(&fmt_ms(Some(a))),
                with: nb(&fmt_ms(Some(b))),
            });
        }
        if numbers.len() < 3 && r.incident.is_some() {
            numbers.push(Number {
                what: format!("calls that reached {dep}"),
                without: count(without.dependency_calls),
                with: count(m.dependency_calls),
            });
        }
        numbers.truncate(3);
    }

    // One line per protected run.
    let recovered_at_once = |x: &RunReport| x.recovery_s.is_some_and(|v| v == 0.0);
    let recovery_matters = r.incident.is_some() && !r.runs.iter().all(recovered_at_once);
    let runs = r
        .runs
        .iter()
        .skip(1)
        .map(|x| {
            let mut parts = vec![if r.incident.is_some() {
                let n = errors(x);
                format!("{} error{}", count(n), if n == 1 { "" } else { "s" })
            } else {
                format!(
                    "last answered at {}",
                    x.completion_s.map_or("—".into(), secs)
                )
            }];
            if pool_matters {
                parts.push(pool(x));
            }
            if let Some(p) = p99(x, other) {
                parts.push(format!(
                    "p99 {}{}",
                    nb(&fmt_ms(Some(p))),
                    if other { " elsewhere" } else { "" }
                ));
            }
            if r.incident.is_none() || !pool_matters {
                parts.push(format!("{} calls to {dep}", count(x.dependency_calls)));
            }
            if x.rejected_fast > 0 {
                parts.push(match x.rejected_would_succeed {
                    Some(w) => format!(
                        "{} refused ({} would have succeeded)",
                        count(x.rejected_fast),
                        count(w)
                    ),
                    None => format!("{} refused", count(x.rejected_fast)),
                });
            }
            if recovery_matters {
                if let Some(rec) = recovery(r, x) {
                    parts.push(rec);
                }
            }
            (x.label.clone(), parts.join("; "))
        })
        .collect();
    Headline {
        happened,
        main: main.map(|m| m.label.clone()),
        saved,
        numbers,
        runs,
    }
}
