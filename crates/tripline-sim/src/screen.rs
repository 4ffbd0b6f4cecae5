//! The first screen of `tripline simulate`: the headline, then the comparison laid out for
//! the terminal's width.
//!
//! A comparison holds one column per run, eight for `gymfolks`, about 200 characters wide.
//! On a terminal (or with `COLUMNS` set) the runs are cut into groups of columns that fit the
//! width, each group under the row labels again, and a cell still too wide is wrapped
//! (comfy-table measures and wraps); piped, the full table is printed as one, as `--json` is.
//!
//! ```
//! let s = tripline_sim::Scenario::load("fowler")?;
//! let r = tripline_sim::simulate(&s, None);
//! let text = tripline_sim::screen::screen(&r, Some(60));
//! assert!(text.lines().all(|l| l.chars().count() <= 60));
//! assert!(text.contains("What happened"));
//! // Piped, the headline is one line a sentence, and the table the full one.
//! assert!(tripline_sim::screen::screen(&r, None).contains("\nWhat happened: From 5 s to 30 s"));
//! # Ok::<(), tripline_sim::ScenarioError>(())
//! ```

use std::fmt::Write as _;
use std::io::IsTerminal;

use comfy_table::{CellAlignment, ContentArrangement, Table, presets};

use crate::report::Report;

/// The narrowest layout: below this, columns are laid out for this width anyway.
pub const MIN_WIDTH: usize = 40;

/// The width to lay the screen out for: `COLUMNS` when it holds a number, else the
/// terminal's when standard output is one, else `None` (a pipe: the full table).
pub fn width() -> Option<usize> {
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return Some(n.max(MIN_WIDTH));
    }
    if !std::io::stdout().is_terminal() {
        return None;
    }
    terminal_size::terminal_size().map(|(w, _)| usize::from(w.0).max(MIN_WIDTH))
}

/// The headline as text: what happened, then what each protection changed, one line per
/// protected run; laid out in two columns wrapped to `width` when given.
pub fn headline_text(r: &Report, width: Option<usize>) -> String {
    let h = crate::headline::headline(r);
    let mut rows: Vec<(String, String)> = vec![("What happened".into(), h.happened.clone())];
    if !h.runs.is_empty() {
        rows.push(("What each protection changed".into(), String::new()));
        rows.extend(h.runs.iter().map(|(l, t)| (format!("  {l}"), t.clone())));
    }
    let Some(width) = width else {
        let mut out = String::new();
        for (label, text) in rows {
            let sep = if text.is_empty() { ":" } else { ": " };
            let _ = writeln!(out, "{label}{sep}{}", text.replace('\u{a0}', " "));
        }
        return out;
    };
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(u16::try_from(width.max(MIN_WIDTH)).unwrap_or(u16::MAX));
    for (label, text) in rows {
        let indent = label.len() - label.trim_start().len();
        t.add_row([
            format!("{}{}", "\u{a0}".repeat(indent), label.trim_start()),
            text,
        ]);
    }
    lines_of(&t)
}

/// A table's lines, without the blank border lines of the borderless preset and with the
/// kept indents (non-breaking spaces) turned back into spaces.
fn lines_of(t: &Table) -> String {
    let mut out = String::new();
    for line in t.to_string().lines() {
        let line = line.replace('\u{a0}', " ");
        let line = line.trim_end();
        if !line.is_empty() {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

/// Writes rows as tables that fit `width`: the runs cut into groups of columns that fit,
/// each group under the row labels, cells wrapped where one column alone is too wide.
pub fn fit_table(
    out: &mut String,
    width: usize,
    corner: &str,
    heads: &[String],
    rows: &[(String, Vec<String>)],
) {
    let chars = |s: &str| s.chars().count();
    let width = width.max(MIN_WIDTH);
    // comfy-table pads each cell with a space on either side.
    const PAD: usize = 2;
    let label_w = rows
        .iter()
        .map(|(l, _)| chars(l))
        .chain([chars(corner)])
        .max()
        .unwrap_or(0)
        .min(width / 2);
    let col_w: Vec<usize> = (0..heads.len())
        .map(|i| {
            rows.iter()
                .map(|(_, v)| v.get(i).map_or(0, |x| chars(x)))
                .chain([chars(&heads[i])])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let room = width.saturating_sub(label_w + PAD);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut used = 0;
    for (i, w) in col_w.iter().enumerate() {
        let w = w + PAD;
        match groups.last_mut() {
            Some(g) if used + w <= room => g.push(i),
            _ => {
                groups.push(vec![i]);
                used = 0;
            }
        }
        used += w;
    }
    for (n, g) in groups.iter().enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let mut t = Table::new();
        t.load_preset(presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_width(u16::try_from(width).unwrap_or(u16::MAX));
        t.set_header(
            std::iter::once(corner.to_string()).chain(g.iter().map(|&i| heads[i].clone())),
        );
        for (label, vals) in rows {
            // A sub-row keeps its indent as non-breaking spaces (a cell's own spaces may be
            // trimmed where it wraps).
            let indent = label.len() - label.trim_start().len();
            let label = format!("{}{}", "\u{a0}".repeat(indent), label.trim_start());
            t.add_row(
                std::iter::once(label)
                    .chain(g.iter().map(|&i| vals.get(i).cloned().unwrap_or_default())),
            );
        }
        for c in 1..=g.len() {
            if let Some(col) = t.column_mut(c) {
                col.set_cell_alignment(CellAlignment::Right);
            }
        }
        out.push_str(&lines_of(&t));
    }
}

/// The first screen: the title line, the headline, and the report's tables laid out for
/// `width` (`None`: the full table, as [`Report::table`] writes it).
pub fn screen(r: &Report, width: Option<usize>) -> String {
    let table = r.table_at(width);
    let mut lines = table.splitn(3, '\n');
    let title = lines.next().unwrap_or_default();
    let meta = lines.next().unwrap_or_default();
    let rest = lines.next().unwrap_or_default();
    let mut out = String::new();
    match width {
        Some(w) => {
            let mut t = Table::new();
            t.load_preset(presets::NOTHING)
                .set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(u16::try_from(w.max(MIN_WIDTH)).unwrap_or(u16::MAX));
            t.add_row([title]);
            t.add_row([meta]);
            out.push_str(&lines_of(&t));
        }
        None => {
            let _ = writeln!(out, "{title}\n{meta}");
        }
    }
    out.push('\n');
    out.push_str(&headline_text(r, width));
    out.push_str(rest);
    out
}
