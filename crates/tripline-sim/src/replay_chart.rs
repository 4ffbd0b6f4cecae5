//! Charts of a replay (SVG, drawn with plotters) and a self-contained HTML page: the trace's
//! error rate and latency over time, and each configuration's state timeline (the share of
//! its breakers open, and half-open, at the end of each second), incidents shaded.

use std::fmt::Write as _;

use plotters::prelude::*;
use tripline::State;

use crate::chart::esc;
use crate::replay::ReplayReport;

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

/// A titled panel of named lines.
type Panel = (String, Vec<(String, Vec<(f64, f64)>)>);

/// Per second, the share of a configuration's breakers open (1) or half-open (½).
fn timeline(r: &ReplayReport, config: usize, seconds: usize) -> Vec<(f64, f64)> {
    let c = &r.configs[config];
    let mut sum = vec![0.0f64; seconds];
    for k in &c.keys {
        let mut state = State::Closed;
        let mut tr = k.transitions.iter().peekable();
        for (s, v) in sum.iter_mut().enumerate() {
            let end = (s + 1) as f64;
            while let Some(t) = tr.next_if(|t| t.at_s < end) {
                state = t.to;
            }
            *v += match state {
                State::Open | State::ForcedOpen => 1.0,
                State::HalfOpen => 0.5,
                _ => 0.0,
            };
        }
    }
    let n = c.keys.len().max(1) as f64;
    sum.iter()
        .enumerate()
        .map(|(i, v)| (i as f64, v * 100.0 / n))
        .collect()
}

/// Draws the replay as one SVG document.
///
/// ```
/// use tripline_sim::replay::{prepare, replay_all, Candidate, ReplayOptions};
/// use tripline::trace::{read, ReadOptions};
///
/// let t = read("start,duration_ms,outcome\n0,5,success\n1000,5,failure\n".as_bytes(), &ReadOptions::default()).unwrap();
/// let p = prepare(&t, &ReplayOptions::default()).unwrap();
/// let c = [Candidate::new("default", tripline::BreakerConfig::default())];
/// let r = replay_all("t.csv", &t, &p, &c, &ReplayOptions::default());
/// assert!(tripline_sim::replay_chart::svg(&r)?.starts_with("<svg"));
/// # Ok::<(), String>(())
/// ```
pub fn svg(r: &ReplayReport) -> Result<String, String> {
    let seconds = r.series.len().max(1);
    let error: Vec<(f64, f64)> = r
        .series
        .iter()
        .enumerate()
        .filter(|(_, s)| s.calls > 0)
        .map(|(i, s)| (i as f64, f64::from(s.failures) * 100.0 / f64::from(s.calls)))
        .collect();
    let p50: Vec<(f64, f64)> = r
        .series
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.p50_ms.map(|v| (i as f64, v)))
        .collect();
    let p99: Vec<(f64, f64)> = r
        .series
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.p99_ms.map(|v| (i as f64, v)))
        .collect();
    let mut panels: Vec<Panel> = vec![
        (
            "trace: failed calls (% of the calls started each second)".into(),
            vec![("failures".into(), error)],
        ),
        (
            "trace: call duration (ms), p50 and p99 per second".into(),
            vec![("p50".into(), p50), ("p99".into(), p99)],
        ),
    ];
    for (i, c) in r.configs.iter().enumerate() {
        panels.push((
            format!(
                "{}: breakers open (100) or half-open (50), % of keys",
                c.label
            ),
            vec![(c.label.clone(), timeline(r, i, seconds))],
        ));
    }
    let (w, h) = (960u32, 200 * panels.len() as u32 + 10);
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let areas = root.split_evenly((panels.len(), 1));
        let x_max = seconds as f64;
        for (pi, ((title, lines), area)) in panels.into_iter().zip(areas.iter()).enumerate() {
            let y_max = lines
                .iter()
                .flat_map(|(_, l)| l.iter().map(|p| p.1))
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
            chart
                .configure_mesh()
                .x_label_formatter(&|x| format!("{x:.0} s"))
                .light_line_style(WHITE.mix(0.0))
                .draw()
                .map_err(|e| e.to_string())?;
            for inc in &r.incidents {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(inc.start_s, 0.0), (inc.end_s.min(x_max), y_max)],
                        RGBColor(255, 200, 120).mix(0.2).filled(),
                    )))
                    .map_err(|e| e.to_string())?;
            }
            for (li, (_, pts)) in lines.into_iter().enumerate() {
                let c = if pi >= 2 {
                    COLORS[(pi - 2) % COLORS.len()]
                } else {
                    COLORS[(li + 1) % COLORS.len()]
                };
                chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
            }
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

/// A self-contained HTML page: the table, the charts (inline SVG) and each configuration's
/// TOML.
pub fn html(r: &ReplayReport) -> Result<String, String> {
    let svg = svg(r)?;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>tripline replay: {trace}</title>\n<style>\
         body{{font-family:sans-serif;margin:24px;color:#222}}\
         pre{{background:#f6f6f6;padding:12px;overflow:auto}}\
         </style></head><body>\n<h1>Replay of {trace}</h1>\n<pre>{table}</pre>\n{svg}\n",
        trace = esc(&r.trace),
        table = esc(&r.table()),
    );
    for c in &r.configs {
        let _ = write!(
            h,
            "<h2>{}</h2>\n<pre>{}</pre>\n",
            esc(&c.label),
            esc(&c.config)
        );
    }
    let _ = write!(
        h,
        "<p>Seed {}. Rerun with <code>tripline replay {} --seed {}</code> and the same \
         configurations.</p>\n</body></html>\n",
        r.seed,
        esc(&r.trace),
        r.seed
    );
    Ok(h)
}
