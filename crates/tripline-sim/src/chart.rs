//! Charts of a report's time series (SVG, drawn with plotters) and a self-contained HTML page.
//!
//! The time-series panels share the time axis (one-second bins), one line per run:
//! worker-pool use, p99 latency of the endpoints that use the dependency, p99 latency of the
//! other endpoints, the share of breakers open, the calls reaching the dependency per second,
//! and, where some run has them, the retries granted and the requests refused locally per
//! second. The incident window is shaded.
//!
//! The HTML page ([`html`]) is the report to read: the comparison as a table, each tier's
//! figures and charts, a state timeline per breaker (one lane per replica or shard: closed,
//! open, half-open over time), the policies' own counters, a sweep's table, and the first
//! transitions. A small script on the page checks that every chart was drawn and records any
//! script error into the page itself (`#report-status`, `#report-errors`), so a headless
//! browser's `--dump-dom` tells whether the page works.

use std::fmt::Write as _;

use plotters::prelude::*;
use tripline::State;

use crate::report::{Lanes, Report, RunReport};

const COLORS: [RGBColor; 10] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
];

type Line = Vec<(f64, f64)>;
type Panel<'a> = (&'a str, Box<dyn Fn(&RunReport) -> Vec<(f64, f64)> + 'a>);

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The per-second series of a run as points, from the bins `f` reads.
fn points(bins: &[crate::engine::Bin], f: impl Fn(&crate::engine::Bin) -> f64) -> Line {
    bins.iter()
        .enumerate()
        .map(|(i, b)| (i as f64, f(b)))
        .collect()
}

/// The main panels: `(title, one line per run)`.
fn main_panels(report: &Report) -> Vec<(String, Vec<Line>)> {
    let total_workers = f64::from(report.replicas) * f64::from(report.workers_per_replica);
    let panels: Vec<Panel<'_>> = vec![
        (
            "worker pool in use (% of all workers, peak per second)",
            Box::new(move |r: &RunReport| {
                points(&r.series.bins, |b| {
                    f64::from(b.busy_peak) * 100.0 / total_workers
                })
            }),
        ),
        (
            "p99 latency, endpoints using the dependency (s)",
            Box::new(|r: &RunReport| {
                r.series
                    .using_dependency
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|(_, p99)| (i as f64, p99 / 1000.0)))
                    .collect()
            }),
        ),
        (
            "p99 latency, other endpoints (s)",
            Box::new(|r: &RunReport| {
                r.series
                    .other
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|(_, p99)| (i as f64, p99 / 1000.0)))
                    .collect()
            }),
        ),
        (
            "breakers open (% of breakers, end of each second)",
            Box::new(|r: &RunReport| {
                r.series
                    .open
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (i as f64, v * 100.0))
                    .collect()
            }),
        ),
        (
            "calls reaching the dependency (per second)",
            Box::new(|r: &RunReport| points(&r.series.bins, |b| f64::from(b.dependency_calls))),
        ),
    ];
    let mut out: Vec<(String, Vec<Line>)> = panels
        .iter()
        .map(|(title, f)| (title.to_string(), report.runs.iter().map(f).collect()))
        .collect();
    // Panels that only some scenarios have: shown when some run has a point above zero.
    let extra: Vec<(&str, Vec<Line>)> = vec![
        (
            "retries granted (per second)",
            report
                .runs
                .iter()
                .map(|r| {
                    let last = r.tiers.last().map(|t| &t.series[..]).unwrap_or(&[]);
                    points(last, |b| f64::from(b.retries))
                })
                .collect(),
        ),
        (
            "requests refused by a local policy (per second)",
            report
                .runs
                .iter()
                .map(|r| points(&r.series.bins, |b| f64::from(b.rejected)))
                .collect(),
        ),
    ];
    for (title, lines) in extra {
        if lines.iter().flatten().any(|p| p.1 > 0.0) {
            out.push((title.to_string(), lines));
        }
    }
    out.extend(
        crate::hosts::panels(report)
            .into_iter()
            .map(|(t, l)| (t.to_string(), l)),
    );
    out.retain(|(_, lines)| lines.iter().any(|l| !l.is_empty()));
    out
}

/// The panels of tier `k`: its pool, its errors, its calls below, its retries.
fn tier_panels(report: &Report, k: usize) -> Vec<(String, Vec<Line>)> {
    let below = report
        .tiers
        .get(k + 1)
        .unwrap_or(&report.dependency)
        .clone();
    fn tier(r: &RunReport, k: usize) -> Option<(u32, u32, &[crate::engine::Bin])> {
        r.tiers
            .get(k)
            .map(|t| (t.workers, t.replicas, &t.series[..]))
    }
    let line = |f: &dyn Fn(&crate::engine::Bin, f64) -> f64| -> Vec<Line> {
        report
            .runs
            .iter()
            .map(|r| {
                tier(r, k).map_or_else(Vec::new, |(w, n, bins)| {
                    let total = f64::from(w) * f64::from(n);
                    points(bins, |b| f(b, total))
                })
            })
            .collect()
    };
    let mut out = vec![
        (
            "worker pool in use (% of the tier's workers, peak per second)".to_string(),
            line(&|b, total| f64::from(b.busy_peak) * 100.0 / total),
        ),
        (
            "errors answered (failed, refused without a fallback, shed; per second)".to_string(),
            line(&|b, _| f64::from(b.failed + b.rejected - b.fallback + b.shed)),
        ),
        (
            format!("calls to {below} (per second)"),
            line(&|b, _| f64::from(b.dependency_calls)),
        ),
    ];
    let retries = line(&|b, _| f64::from(b.retries));
    if retries.iter().flatten().any(|p| p.1 > 0.0) {
        out.push(("retries granted (per second)".to_string(), retries));
    }
    out
}

/// One entry of a panel's legend: a run with a line in the panel, its colour, and the
/// earlier run whose line it repeats point for point (drawn dashed over it, so both show).
#[derive(Clone, Debug, PartialEq)]
struct LegendItem {
    label: String,
    color: usize,
    same_as: Option<String>,
}

impl LegendItem {
    fn text(&self) -> String {
        match &self.same_as {
            Some(other) => format!("{} (same as {other})", self.label),
            None => self.label.clone(),
        }
    }

    fn width(&self) -> i32 {
        60 + 8 * self.text().chars().count() as i32
    }
}

/// A panel's legend: the runs that have a line in it, each marked with the earlier run whose
/// line it repeats, in rows wrapped to the width.
fn legend_rows(report: &Report, lines: &[Line], width: i32) -> Vec<Vec<LegendItem>> {
    let mut rows: Vec<Vec<LegendItem>> = vec![Vec::new()];
    let mut x = 10;
    for (i, r) in report.runs.iter().enumerate() {
        let Some(line) = lines.get(i).filter(|l| !l.is_empty()) else {
            continue;
        };
        let same_as = (0..i)
            .find(|&j| lines.get(j) == Some(line))
            .map(|j| report.runs[j].label.clone());
        let item = LegendItem {
            label: r.label.clone(),
            color: i,
            same_as,
        };
        let w = item.width();
        if x + w > width && !rows.last().is_some_and(Vec::is_empty) {
            rows.push(Vec::new());
            x = 10;
        }
        if let Some(row) = rows.last_mut() {
            row.push(item);
        }
        x += w;
    }
    rows
}

const PANEL_H: u32 = 230;
const LEGEND_ROW_H: u32 = 22;

/// Draws panels sharing the time axis, one line per run, as one SVG document. Each panel has
/// its own legend above it, naming the runs drawn in it; a run whose line is the same as an
/// earlier run's is drawn dashed over it, and its legend entry says which.
fn draw_panels(report: &Report, panels: Vec<(String, Vec<Line>)>) -> Result<String, String> {
    let w = 960u32;
    let legends: Vec<Vec<Vec<LegendItem>>> = panels
        .iter()
        .map(|(_, lines)| legend_rows(report, lines, w as i32 - 20))
        .collect();
    let heights: Vec<u32> = legends
        .iter()
        .map(|l| PANEL_H + 8 + LEGEND_ROW_H * l.len() as u32)
        .collect();
    let h = heights.iter().sum::<u32>().max(PANEL_H);
    let x_max = report
        .runs
        .iter()
        .map(|r| r.series.bins.len())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut rest = root.clone();
        for (((title, lines), legend), height) in panels.into_iter().zip(&legends).zip(&heights) {
            let (area, below) = rest.split_vertically(*height);
            rest = below;
            let legend_h = 8 + LEGEND_ROW_H * legend.len() as u32;
            let (top, body) = area.split_vertically(legend_h);
            for (row, items) in legend.iter().enumerate() {
                let y = 16 + LEGEND_ROW_H as i32 * row as i32;
                let mut x = 10;
                for item in items {
                    let c = COLORS[item.color % COLORS.len()];
                    if item.same_as.is_some() {
                        top.draw(&plotters::element::DashedPathElement::new(
                            vec![(x, y), (x + 30, y)],
                            6,
                            5,
                            c.stroke_width(3),
                        ))
                        .map_err(err)?;
                    } else {
                        top.draw(&PathElement::new(
                            vec![(x, y), (x + 30, y)],
                            c.stroke_width(3),
                        ))
                        .map_err(err)?;
                    }
                    top.draw(&Text::new(item.text(), (x + 36, y - 8), ("sans-serif", 14)))
                        .map_err(err)?;
                    x += item.width();
                }
            }
            let y_max = lines
                .iter()
                .flatten()
                .map(|p| p.1)
                .fold(0.0f64, f64::max)
                .max(1e-3)
                * 1.08;
            let mut chart = ChartBuilder::on(&body)
                .caption(title, ("sans-serif", 15))
                .margin(8)
                .x_label_area_size(22)
                .y_label_area_size(56)
                .build_cartesian_2d(0f64..x_max, 0f64..y_max)
                .map_err(err)?;
            let y_fmt = |y: &f64| {
                if y_max >= 20.0 {
                    format!("{y:.0}")
                } else if y_max >= 2.0 {
                    format!("{y:.1}")
                } else {
                    format!("{y:.2}")
                }
            };
            chart
                .configure_mesh()
                .x_label_formatter(&|x| format!("{x:.0} s"))
                .y_label_formatter(&y_fmt)
                .light_line_style(WHITE.mix(0.0))
                .draw()
                .map_err(err)?;
            if let Some(i) = report.incident {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(i.start_s, 0.0), (i.end_s.min(x_max), y_max)],
                        RGBColor(255, 200, 120).mix(0.25).filled(),
                    )))
                    .map_err(err)?;
            }
            let dashed: Vec<bool> = (0..lines.len())
                .map(|i| {
                    legend
                        .iter()
                        .flatten()
                        .any(|l| l.color == i && l.same_as.is_some())
                })
                .collect();
            for (i, pts) in lines.into_iter().enumerate() {
                let c = COLORS[i % COLORS.len()];
                if dashed[i] {
                    chart
                        .draw_series(DashedLineSeries::new(pts, 7, 7, c.stroke_width(2)))
                        .map_err(err)?;
                } else {
                    chart
                        .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                        .map_err(err)?;
                }
            }
        }
        root.present().map_err(err)?;
    }
    Ok(buf)
}

/// Draws the report's time series as one SVG document.
///
/// ```
/// let scenario = tripline_sim::Scenario::load("fowler")?;
/// let report = tripline_sim::simulate(&scenario, None);
/// let svg = tripline_sim::chart::svg(&report)?;
/// assert!(svg.starts_with("<svg"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn svg(report: &Report) -> Result<String, String> {
    draw_panels(report, main_panels(report))
}

/// The colour of a breaker state in the timeline.
fn state_color(s: State) -> RGBColor {
    match s {
        State::Closed => RGBColor(205, 232, 205),
        State::Open | State::ForcedOpen => RGBColor(214, 39, 40),
        State::HalfOpen => RGBColor(255, 159, 28),
        _ => RGBColor(190, 190, 190),
    }
}

/// The most lanes one timeline draws.
pub const MAX_LANES: u32 = 48;

/// A lane's name: the replica and the shard its breaker belongs to.
fn lane_name(l: &Lanes, i: u32, replicas: u32) -> String {
    let (rep, key) = (i / l.keys.max(1), i % l.keys.max(1));
    match (l.shared, l.keys > 1) {
        (true, true) => format!("shard {key}"),
        (true, false) => "shared".into(),
        (false, true) if replicas > 1 => format!("r{rep} s{key}"),
        (false, true) => format!("shard {key}"),
        (false, false) => format!("replica {rep}"),
    }
}

/// The state timeline of one tier's breakers in one run: one lane per breaker (at most
/// [`MAX_LANES`], those that left Closed first), closed, open and half-open over time.
/// Returns the SVG and how many lanes it left out.
pub fn timeline(lanes: &Lanes, replicas: u32, x_max: f64) -> Result<(String, u32), String> {
    let mut moved: Vec<u32> = lanes.transitions.iter().map(|t| t.0).collect();
    moved.sort_unstable();
    moved.dedup();
    let mut shown: Vec<u32> = moved.clone();
    for i in 0..lanes.count {
        if shown.len() as u32 >= MAX_LANES {
            break;
        }
        if moved.binary_search(&i).is_err() {
            shown.push(i);
        }
    }
    shown.truncate(MAX_LANES as usize);
    shown.sort_unstable();
    let hidden = lanes.count.saturating_sub(shown.len() as u32);
    let n = shown.len().max(1);
    let (w, h) = (960u32, 70 + 20 * n as u32);
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let names: Vec<String> = shown
            .iter()
            .map(|&i| lane_name(lanes, i, replicas))
            .collect();
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(22)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..x_max.max(1.0), -0.5f64..n as f64 - 0.5)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_label_style(("sans-serif", 12))
            .y_label_style(("sans-serif", 12))
            .x_label_formatter(&|x| format!("{x:.0} s"))
            .y_labels(n)
            .y_label_formatter(&|y| {
                let i = y.round();
                if (y - i).abs() > 0.01 || i < 0.0 {
                    return String::new();
                }
                names.get(i as usize).cloned().unwrap_or_default()
            })
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        let mut rects = Vec::new();
        for (lane, &b) in shown.iter().enumerate() {
            let y0 = lane as f64 - 0.4;
            let y1 = lane as f64 + 0.4;
            let mut state = State::Closed;
            let mut since = 0.0;
            for &(_, at, to) in lanes.transitions.iter().filter(|t| t.0 == b) {
                if at > since {
                    rects.push(Rectangle::new(
                        [(since, y0), (at, y1)],
                        state_color(state).filled(),
                    ));
                }
                state = to;
                since = at;
            }
            rects.push(Rectangle::new(
                [(since, y0), (x_max.max(since), y1)],
                state_color(state).filled(),
            ));
        }
        chart.draw_series(rects).map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok((buf, hidden))
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Writes rows as an HTML table, the runs as columns.
fn table(h: &mut String, corner: &str, heads: &[String], rows: &[(String, Vec<String>)]) {
    let _ = write!(
        h,
        "<div class=\"wide\"><table class=\"cmp\"><thead><tr><th>{}</th>",
        esc(corner)
    );
    for (i, head) in heads.iter().enumerate() {
        let _ = write!(h, "<th data-run=\"{i}\">{}</th>", esc(head));
    }
    h.push_str("</tr></thead><tbody>\n");
    for (label, vals) in rows {
        let sub = label.starts_with("  ");
        let _ = write!(
            h,
            "<tr{}><th scope=\"row\">{}</th>",
            if sub { " class=\"sub\"" } else { "" },
            esc(label.trim_start())
        );
        for (i, v) in vals.iter().enumerate() {
            let _ = write!(h, "<td data-run=\"{i}\">{}</td>", esc(v));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></div>\n");
}

fn figure(h: &mut String, id: &str, svg: &str, caption: &str) {
    let _ = writeln!(
        h,
        "<figure class=\"chart\" data-chart=\"{}\">{svg}<figcaption>{}</figcaption></figure>",
        esc(id),
        esc(caption)
    );
}

/// The page's checks: every chart drawn, every script error recorded in the page.
const SCRIPT_HEAD: &str = r#"<script>
"use strict";
window.reportErrors = [];
function recordError(message) {
  window.reportErrors.push(String(message));
  var list = document.getElementById("report-errors");
  if (list) {
    var item = document.createElement("li");
    item.textContent = String(message);
    list.appendChild(item);
    list.hidden = false;
  }
  // An error after the check, too, fails the page.
  var status = document.getElementById("report-status");
  if (status && status.getAttribute("data-status") !== "pending") {
    status.setAttribute("data-status", "failed");
    status.textContent = "This page did not render fully: " + window.reportErrors.join("; ");
  }
}
window.onerror = function (message, source, line, column) {
  recordError(message + " (" + (source || "page") + ":" + line + ":" + column + ")");
};
window.addEventListener("unhandledrejection", function (e) {
  recordError("unhandled rejection: " + e.reason);
});
</script>"#;

const SCRIPT_BODY: &str = r#"<script>
"use strict";
window.addEventListener("load", function () {
  // A run's column is highlighted, in every table, when its head is clicked.
  document.querySelectorAll("th[data-run]").forEach(function (th) {
    th.addEventListener("click", function () {
      var run = th.getAttribute("data-run");
      var on = !th.classList.contains("picked");
      document.querySelectorAll("[data-run]").forEach(function (cell) {
        cell.classList.toggle("picked", on && cell.getAttribute("data-run") === run);
      });
    });
  });
  // Every chart must have been drawn: an SVG with a size and some marks.
  var figures = document.querySelectorAll("figure[data-chart]");
  var drawn = 0;
  figures.forEach(function (f) {
    var svg = f.querySelector("svg");
    var name = f.getAttribute("data-chart");
    if (!svg) { recordError("chart " + name + ": no SVG"); return; }
    var box = svg.getBoundingClientRect();
    var marks = svg.querySelectorAll("path, rect, polyline, line, circle, text").length;
    if (!(box.width > 0 && box.height > 0)) { recordError("chart " + name + ": not drawn (no size)"); return; }
    if (marks < 3) { recordError("chart " + name + ": empty"); return; }
    drawn += 1;
  });
  // Every table must be seen whole: inside the window, or inside a box that scrolls it.
  var cut = 0;
  document.querySelectorAll("table.cmp").forEach(function (t) {
    var box = t.parentElement.getBoundingClientRect();
    var inner = t.getBoundingClientRect();
    var width = document.documentElement.clientWidth;
    if (box.left < 0 || box.right > width + 1 || inner.width > box.width + 1) { cut += 1; }
  });
  var status = document.getElementById("report-status");
  status.setAttribute("data-tables-cut", String(cut));
  status.setAttribute("data-charts", String(drawn));
  status.setAttribute("data-expected", status.getAttribute("data-expected") || String(figures.length));
  var ok = window.reportErrors.length === 0 && drawn === figures.length &&
    String(drawn) === status.getAttribute("data-expected");
  status.setAttribute("data-status", ok ? "ok" : "failed");
  status.textContent = ok
    ? drawn + " charts drawn, no script error."
    : "This page did not render fully: " + window.reportErrors.join("; ");
});
</script>"#;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1000px;padding:0 16px;color:#222;line-height:1.4}\
h1{margin-bottom:4px}h2{margin-top:36px;border-bottom:1px solid #ddd}\
.meta{color:#555}nav a{margin-right:14px}\
#headline{background:#f4f8fb;border-left:4px solid #1f77b4;padding:8px 16px;margin:16px 0}\
#headline p{margin:6px 0}#headline ul.numbers{display:flex;flex-wrap:wrap;gap:12px;list-style:none;padding:0;margin:10px 0 4px}\
#headline ul.numbers li{background:#fff;border:1px solid #dde6ee;padding:6px 12px;min-width:180px}\
#headline .figure{display:block;font-size:22px;font-weight:600}#headline .what{color:#555;font-size:13px}\
#headline ul.runs{margin:6px 0;padding-left:18px;font-size:13px;color:#444}\
div.wide{width:max-content;max-width:calc(100vw - 32px);overflow-x:auto;position:relative;left:50%;transform:translateX(-50%)}\
table.cmp{border-collapse:collapse;font-size:13px;margin:8px 0 16px}\
table.cmp th,table.cmp td{border-bottom:1px solid #eee;padding:3px 8px;text-align:right;white-space:nowrap}\
table.cmp thead th{white-space:normal;max-width:9em;vertical-align:bottom}\
table.cmp th[scope=row]{text-align:left;font-weight:normal;white-space:normal;min-width:14em}\
table.cmp tr.sub th[scope=row]{padding-left:28px;color:#555}\
table.cmp thead th{cursor:pointer;background:#f6f6f6}\
.picked{background:#fff3c4!important}\
figure.chart{margin:12px 0}figure.chart svg{max-width:100%;height:auto}\
figcaption{color:#555;font-size:13px}\
.legend span{display:inline-block;width:14px;height:10px;margin:0 4px 0 12px}\
#report-errors{color:#b00}\
pre{background:#f6f6f6;padding:12px;overflow:auto;font-size:13px}";

/// The page's headline: what happened and what the main protection saved, in two sentences
/// and three numbers, then a line per protected run.
fn headline_section(h: &mut String, report: &Report) {
    let hl = crate::headline::headline(report);
    h.push_str("<section id=\"headline\">\n");
    let _ = writeln!(h, "<p class=\"happened\">{}</p>", esc(&hl.happened));
    if let Some(saved) = &hl.saved {
        let _ = writeln!(h, "<p class=\"saved\">{}</p>", esc(saved));
    }
    if !hl.numbers.is_empty() {
        h.push_str("<ul class=\"numbers\">");
        for n in &hl.numbers {
            let _ = write!(
                h,
                "<li><span class=\"figure\">{} → {}</span><span class=\"what\">{}, without → {}</span></li>",
                esc(&n.without),
                esc(&n.with),
                esc(&n.what),
                esc(hl.main.as_deref().unwrap_or("with"))
            );
        }
        h.push_str("</ul>\n");
    }
    if hl.runs.len() > 1 {
        h.push_str("<ul class=\"runs\">");
        for (label, line) in &hl.runs {
            let _ = write!(h, "<li><b>{}</b>: {}</li>", esc(label), esc(line));
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</section>\n");
}

/// The number of charts [`html`] draws for a report: the time series, each tier's panels, and
/// one timeline per run and tier with breakers.
pub fn chart_count(report: &Report) -> usize {
    let tiers = if report.tiers.len() > 1 {
        report.tiers.len()
    } else {
        0
    };
    let lanes: usize = report
        .runs
        .iter()
        .map(|r| r.series.lanes.iter().filter(|l| l.count > 0).count())
        .sum();
    1 + tiers + lanes
}

/// A self-contained HTML page: the comparison table, the tiers, the breakers' state
/// timelines, the time series, a sweep's table and the first transitions. See the
/// [module docs](self).
///
/// ```
/// let scenario = tripline_sim::Scenario::load("fowler")?;
/// let report = tripline_sim::simulate(&scenario, None);
/// let page = tripline_sim::chart::html(&report)?;
/// assert!(page.contains("<table class=\"cmp\">"));
/// assert!(page.contains("data-chart=\"timeline"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn html(report: &Report) -> Result<String, String> {
    let mut h = String::new();
    let name = esc(&report.scenario);
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>tripline: {name}</title>\n<style>{STYLE}</style>\n{SCRIPT_HEAD}\n</head><body>\n\
         <h1>{name}</h1>\n<p>{}</p>\n",
        esc(&report.description)
    );
    let incident = report.incident.map_or_else(
        || "no faults".to_string(),
        |i| format!("faults from {:.0} s to {:.0} s", i.start_s, i.end_s),
    );
    let _ = writeln!(
        h,
        "<p class=\"meta\">Seed {} · {:.0} s of arrivals · {} replica(s) × {} workers · {} · \
         tiers: {}. Rerun with <code>tripline simulate {name} --seed {}</code>.</p>",
        report.seed,
        report.duration_s,
        report.replicas,
        report.workers_per_replica,
        esc(&incident),
        esc(&report.tiers.join(" → ")),
        report.seed
    );
    headline_section(&mut h, report);
    let expected = chart_count(report);
    let _ = write!(
        h,
        "<p id=\"report-status\" data-status=\"pending\" data-expected=\"{expected}\">Checking the charts…</p>\n\
         <ul id=\"report-errors\" hidden></ul>\n<nav><a href=\"#comparison\">comparison</a>"
    );
    if report.tiers.len() > 1 {
        h.push_str("<a href=\"#tiers\">tiers</a>");
    }
    h.push_str("<a href=\"#timelines\">breaker states</a><a href=\"#series\">over time</a>");
    if report.sweep.is_some() {
        h.push_str("<a href=\"#sweep\">sweep</a>");
    }
    h.push_str("<a href=\"#transitions\">transitions</a></nav>\n");

    let labels: Vec<String> = report.runs.iter().map(|r| r.label.clone()).collect();
    h.push_str(
        "<h2 id=\"comparison\">Comparison</h2>\n<p>One column per run, the same arrivals in \
         each; click a run's name to highlight it. The policies' own counters (retries made, \
         refused by the budget, gate overflows, bulkhead waits, throttle refusals) are the \
         rows under the calls.</p>\n",
    );
    table(&mut h, "", &labels, &report.rows());

    if report.tiers.len() > 1 {
        h.push_str(
            "<h2 id=\"tiers\">Tiers</h2>\n<p>Each tier from the callers' side to the service \
             that calls the dependency: what it answered, its pool, its calls to the tier \
             below (retries included).</p>\n",
        );
        for (k, (tier, rows)) in report.tier_rows().into_iter().enumerate() {
            let _ = writeln!(h, "<h3>{}</h3>", esc(&tier));
            table(&mut h, "", &labels, &rows);
            let svg = draw_panels(report, tier_panels(report, k))?;
            figure(
                &mut h,
                &format!("tier-{k}"),
                &svg,
                &format!("{tier}: pool, errors and calls below, per second; the faults shaded"),
            );
        }
    }

    h.push_str(
        "<h2 id=\"timelines\">Breaker states</h2>\n<p class=\"legend\">One lane per breaker \
         (per replica, or per shard):<span style=\"background:#cde8cd\"></span>closed\
         <span style=\"background:#d62728\"></span>open<span style=\"background:#ff9f1c\">\
         </span>half-open</p>\n",
    );
    let mut any = false;
    for r in &report.runs {
        for (k, lanes) in r.series.lanes.iter().enumerate() {
            if lanes.count == 0 {
                continue;
            }
            any = true;
            let replicas = r.tiers.get(k).map_or(report.replicas, |t| t.replicas);
            let x_max = r.series.bins.len() as f64;
            let (svg, hidden) = timeline(lanes, replicas, x_max)?;
            let more = if hidden > 0 {
                format!(" ({hidden} more that never left closed are not drawn)")
            } else {
                String::new()
            };
            figure(
                &mut h,
                &format!("timeline-{}-{k}", r.label),
                &svg,
                &format!(
                    "{}: {} breaker(s) in front of {}{more}",
                    r.label,
                    lanes.count,
                    report.tiers.get(k + 1).unwrap_or(&report.dependency)
                ),
            );
        }
    }
    if !any {
        h.push_str("<p>No run has a breaker.</p>\n");
    }

    h.push_str("<h2 id=\"series\">Over time</h2>\n");
    figure(
        &mut h,
        "series",
        &svg(report)?,
        "one line per run, one-second bins; the faults shaded",
    );

    if let Some(sw) = &report.sweep {
        let (heads, rows) = crate::report::sweep_rows(sw);
        let _ = write!(
            h,
            "<h2 id=\"sweep\">Sweep over <code>{}</code></h2>\n<p>The scenario again at each \
             value{}: {}.</p>\n",
            esc(&sw.field),
            crate::sweep::repeat_note(sw),
            esc(&sw.metrics.join(" / "))
        );
        table(&mut h, &sw.field, &heads, &rows);
    }

    h.push_str("<h2 id=\"transitions\">Transitions</h2>\n");
    let mut text = String::new();
    for r in &report.runs {
        if r.transitions.is_empty() {
            continue;
        }
        let _ = writeln!(text, "{}:", r.label);
        for t in r.transitions.iter().take(40) {
            let who = match (t.replica, t.shard) {
                (Some(rp), Some(s)) => format!(" replica {rp} shard {s}"),
                (None, Some(s)) => format!(" shard {s}"),
                (Some(rp), None) => format!(" replica {rp}"),
                _ => String::new(),
            };
            let _ = writeln!(
                text,
                "  t={:>9.3} s{who}: {} → {} ({})",
                t.at_s, t.from, t.to, t.reason
            );
        }
        if r.transitions.len() > 40 {
            let _ = writeln!(text, "  … {} in all", r.transitions.len());
        }
    }
    if text.is_empty() {
        text.push_str("No breaker moved.");
    }
    let _ = writeln!(h, "<pre>{}</pre>", esc(&text));
    let _ = write!(h, "{SCRIPT_BODY}\n</body></html>\n");
    Ok(h)
}
