//! Charts of a report's time series (SVG, drawn with plotters) and a self-contained HTML page.
//!
//! Five panels share the time axis (one-second bins), one line per run: worker-pool use, p99
//! latency of the endpoints that use the dependency, p99 latency of the other endpoints, the
//! share of breakers open, and the calls reaching the dependency per second. The incident
//! window is shaded.

use std::fmt::Write as _;

use plotters::prelude::*;

use crate::report::{Report, RunReport};

const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

type Line = Vec<(f64, f64)>;
type Panel<'a> = (&'a str, Box<dyn Fn(&RunReport) -> Vec<(f64, f64)> + 'a>);

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
    let total_workers = f64::from(report.replicas) * f64::from(report.workers_per_replica);
    let panels: Vec<Panel<'_>> = vec![
        (
            "worker pool in use (% of all workers, peak per second)",
            Box::new(move |r: &RunReport| {
                r.series
                    .bins
                    .iter()
                    .enumerate()
                    .map(|(i, b)| (i as f64, f64::from(b.busy_peak) * 100.0 / total_workers))
                    .collect()
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
            Box::new(|r: &RunReport| {
                r.series
                    .bins
                    .iter()
                    .enumerate()
                    .map(|(i, b)| (i as f64, f64::from(b.dependency_calls)))
                    .collect()
            }),
        ),
    ];
    // Each panel's lines, one per run; panels without any point (no such endpoints) are left out.
    let panels: Vec<(&str, Vec<Line>)> = panels
        .iter()
        .map(|(title, f)| (*title, report.runs.iter().map(f).collect::<Vec<_>>()))
        .chain(crate::hosts::panels(report))
        .filter(|(_, lines)| lines.iter().any(|l| !l.is_empty()))
        .collect();
    let (w, h) = (960u32, 230 * panels.len().max(1) as u32 + 40);
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (legend, body) = root.split_vertically(40);
        // Legend.
        let mut x = 10;
        for (i, r) in report.runs.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            legend
                .draw(&PathElement::new(
                    vec![(x, 20), (x + 30, 20)],
                    c.stroke_width(3),
                ))
                .map_err(|e| e.to_string())?;
            legend
                .draw(&Text::new(
                    r.label.clone(),
                    (x + 36, 12),
                    ("sans-serif", 15),
                ))
                .map_err(|e| e.to_string())?;
            x += 60 + 9 * r.label.chars().count() as i32;
        }
        let x_max = report
            .runs
            .iter()
            .map(|r| r.series.bins.len())
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let areas = body.split_evenly((panels.len().max(1), 1));
        for ((title, lines), area) in panels.into_iter().zip(areas.iter()) {
            let y_max = lines
                .iter()
                .flatten()
                .map(|p| p.1)
                .fold(0.0f64, f64::max)
                .max(1e-3)
                * 1.08;
            let mut chart = ChartBuilder::on(area)
                .caption(title, ("sans-serif", 15))
                .margin(8)
                .x_label_area_size(22)
                .y_label_area_size(56)
                .build_cartesian_2d(0f64..x_max, 0f64..y_max)
                .map_err(|e| e.to_string())?;
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
                .map_err(|e| e.to_string())?;
            if let Some(i) = report.incident {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(i.start_s, 0.0), (i.end_s.min(x_max), y_max)],
                        RGBColor(255, 200, 120).mix(0.25).filled(),
                    )))
                    .map_err(|e| e.to_string())?;
            }
            for (i, pts) in lines.into_iter().enumerate() {
                let c = COLORS[i % COLORS.len()];
                chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
            }
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A self-contained HTML page: the table, the charts (inline SVG) and the transitions.
pub fn html(report: &Report) -> Result<String, String> {
    let svg = svg(report)?;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>tripline: {name}</title>\n<style>\
         body{{font-family:sans-serif;margin:24px;color:#222}}\
         pre{{background:#f6f6f6;padding:12px;overflow:auto}}\
         </style></head><body>\n<h1>{name}</h1>\n<p>{desc}</p>\n<pre>{table}</pre>\n{svg}\n\
         <p>Seed {seed}. Rerun with <code>tripline simulate {name} --seed {seed}</code>.</p>\n\
         </body></html>\n",
        name = esc(&report.scenario),
        desc = esc(&report.description),
        table = esc(&report.table()),
        seed = report.seed,
    );
    Ok(h)
}
