//! The HTML report in a real headless browser: Chromium (Debian's `chromium` package, which
//! `scripts/test` installs when it is missing) loads the page from a file, runs its script,
//! and `--dump-dom` gives back the page as the browser left it. The page's own script checks
//! that every chart was drawn (an SVG with a size and marks) and records every script error
//! into the page, so the test reads the verdict from the DOM. Two tests break a page on
//! purpose (a script error, a chart removed) to show the check can fail.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use tripline_sim::{Report, Scenario, chart, simulate};

/// The Chromium binary: `$TRIPLINE_CHROMIUM`, or Debian's `/usr/bin/chromium`, or
/// `chromium` on `PATH`.
fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("TRIPLINE_CHROMIUM") {
        return PathBuf::from(p);
    }
    let debian = Path::new("/usr/bin/chromium");
    if debian.is_file() {
        return debian.to_path_buf();
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!(
            "chromium was not found (set TRIPLINE_CHROMIUM, or install Debian's package: \
             `sudo apt-get install -y chromium`; scripts/test installs it)"
        )
    })
}

/// A fresh directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tripline-page-{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Loads `page` in headless Chromium and returns the DOM after its scripts ran.
fn render(name: &str, page: &str) -> String {
    render_at(name, page, 1100)
}

/// [`render`] in a window `width` pixels wide.
fn render_at(name: &str, page: &str, width: u32) -> String {
    let dir = scratch(name);
    let file = dir.join("report.html");
    std::fs::write(&file, page).unwrap();
    let profile = dir.join("profile");
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-extensions",
            &format!("--window-size={width},2000"),
            "--virtual-time-budget=10000",
            "--timeout=60000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", file.display()))
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

/// An attribute of the status line, as the page's script left it.
fn status_attr(dom: &str, name: &str) -> Option<String> {
    let at = dom
        .find("id=\"report-status\"")
        .expect("the page has its status line");
    let tag_start = dom[..at].rfind('<').unwrap();
    let tag_end = at + dom[at..].find('>').unwrap();
    let tag = &dom[tag_start..tag_end];
    let key = format!("{name}=\"");
    tag.find(&key).map(|i| {
        let rest = &tag[i + key.len()..];
        rest[..rest.find('"').unwrap()].to_string()
    })
}

/// The page's verdict: `data-status`, and how many charts it found drawn.
fn verdict(dom: &str) -> (String, usize, String) {
    let attr = |name: &str| status_attr(dom, name);
    let errors = dom
        .find("id=\"report-errors\"")
        .map(|i| {
            let rest = &dom[i..];
            rest[..rest.find("</ul>").unwrap_or(rest.len())].to_string()
        })
        .unwrap_or_default();
    (
        attr("data-status").unwrap_or_default(),
        attr("data-charts")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0),
        errors,
    )
}

fn shortened(name: &str, secs: u64) -> Scenario {
    let mut s = Scenario::load(name).unwrap();
    s.duration = Duration::from_secs(secs);
    s
}

fn check_page(name: &str, report: &Report) {
    let page = chart::html(report).unwrap();
    let dom = render(name, &page);
    let (status, charts, errors) = verdict(&dom);
    assert_eq!(status, "ok", "{name}: {errors}");
    assert_eq!(charts, chart::chart_count(report), "{name}");
    assert!(!errors.contains("<li>"), "{name}: {errors}");
    // The comparison is a table, with one column per run.
    assert!(dom.contains("<table class=\"cmp\">"), "{name}");
    for r in &report.runs {
        assert!(
            dom.contains(&format!(">{}</th>", r.label)),
            "{name}: {}",
            r.label
        );
    }
}

#[test]
fn fowler_page_draws_its_charts_without_a_script_error() {
    let report = simulate(&Scenario::load("fowler").unwrap(), None);
    check_page("fowler", &report);
}

#[test]
fn per_shard_breakers_get_one_lane_each() {
    let report = simulate(&shortened("hot-shard", 75), None);
    let page = chart::html(&report).unwrap();
    // One timeline per run with breakers; the per-shard one names its shards.
    assert!(page.contains("shard 11") && page.contains("shard 3"));
    check_page("hot-shard", &report);
}

#[test]
fn tiers_and_sweeps_have_their_panels() {
    let mut s = shortened("gymfolks-cascade", 80);
    s.arrivals.rate = Some(300.0);
    if let Some(sw) = s.sweep.as_mut() {
        sw.values.truncate(1);
    }
    let report = simulate(&s, None);
    let page = chart::html(&report).unwrap();
    for part in [
        "id=\"tiers\"",
        "<h3>gateway</h3>",
        "<h3>workout-service</h3>",
        "data-chart=\"tier-0\"",
        "data-chart=\"tier-1\"",
        "id=\"sweep\"",
        "retries made",
    ] {
        assert!(page.contains(part), "{part}");
    }
    check_page("cascade", &report);
}

#[test]
fn a_script_error_is_caught() {
    let report = simulate(&Scenario::load("fowler").unwrap(), None);
    let page = chart::html(&report)
        .unwrap()
        .replace("</body>", "<script>notAFunction();</script></body>");
    let (status, _, errors) = verdict(&render("script-error", &page));
    assert_eq!(status, "failed");
    assert!(errors.contains("notAFunction"), "{errors}");
}

#[test]
fn a_missing_chart_is_caught() {
    let report = simulate(&Scenario::load("fowler").unwrap(), None);
    let page = chart::html(&report).unwrap();
    // Take the SVG out of the first chart.
    let fig = page.find("<figure class=\"chart\"").unwrap();
    let start = fig + page[fig..].find("<svg").unwrap();
    let end = start + page[start..].find("</svg>").unwrap() + "</svg>".len();
    let broken = format!("{}{}", &page[..start], &page[end..]);
    let (status, charts, errors) = verdict(&render("missing-chart", &broken));
    assert_eq!(status, "failed");
    assert_eq!(charts, chart::chart_count(&report) - 1);
    assert!(errors.contains("no SVG"), "{errors}");
}

/// The page an SRE reads first: a headline at the top (what happened and what the breaker
/// saved, two sentences and three numbers), a comparison of eight runs seen whole in a
/// window 1 400 px wide, a legend over every panel, and runs whose lines are the same drawn
/// so that both show.
#[test]
fn the_gymfolks_page_opens_with_its_headline_and_shows_its_table_whole() {
    let mut s = shortened("gymfolks", 150);
    for f in &mut s.dependency.faults {
        f.until = Duration::from_secs(110);
    }
    s.arrivals.rate = Some(300.0);
    let report = simulate(&s, None);
    assert_eq!(report.runs.len(), 8);
    let page = chart::html(&report).unwrap();
    let dom = render_at("gymfolks-1400", &page, 1400);
    let (status, _, errors) = verdict(&dom);
    assert_eq!(status, "ok", "{errors}");
    assert_eq!(status_attr(&dom, "data-tables-cut").as_deref(), Some("0"));
    // The headline comes first, before the comparison: two sentences, three numbers.
    let headline = dom.find("id=\"headline\"").expect("a headline");
    assert!(headline < dom.find("id=\"comparison\"").unwrap());
    let section = &dom[headline..headline + dom[headline..].find("</section>").unwrap()];
    assert!(
        section.contains("class=\"happened\">From 60&nbsp;s to 110&nbsp;s"),
        "{section}"
    );
    assert!(
        section.contains("class=\"saved\">With the breaker (“with”)"),
        "{section}"
    );
    assert_eq!(section.matches("class=\"figure\"").count(), 3, "{section}");
    assert!(
        section.contains("requests answered with an error"),
        "{section}"
    );
    // Each panel has its legend: "without" is named once per panel of the series chart.
    let series = &page[page.find("data-chart=\"series\"").unwrap()..];
    let series = &series[..series.find("</figure>").unwrap()];
    let panels = [
        "worker pool in use",
        "p99 latency, endpoints using the dependency",
        "p99 latency, other endpoints",
        "breakers open",
        "calls reaching the dependency",
        "retries granted",
        "requests refused by a local policy",
    ]
    .iter()
    .filter(|t| series.contains(*t))
    .count();
    assert_eq!(panels, 7);
    assert_eq!(series.matches(">\nwithout\n</text>").count(), panels);
    // "breaker + budget" makes exactly the calls "shared" makes: its line is dashed over
    // the other, and its legend says so.
    assert!(
        series.contains("breaker + budget (same as shared)"),
        "same-as legend"
    );
    // In a narrow window the table scrolls in its box, and the page says it is not whole.
    let narrow = render_at("gymfolks-700", &page, 700);
    assert_eq!(verdict(&narrow).0, "ok");
    assert_ne!(
        status_attr(&narrow, "data-tables-cut").as_deref(),
        Some("0")
    );
}
