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
            "--window-size=1100,2000",
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

/// The page's verdict: `data-status`, and how many charts it found drawn.
fn verdict(dom: &str) -> (String, usize, String) {
    let at = dom
        .find("id=\"report-status\"")
        .expect("the page has its status line");
    let tag_start = dom[..at].rfind('<').unwrap();
    let tag_end = at + dom[at..].find('>').unwrap();
    let tag = &dom[tag_start..tag_end];
    let attr = |name: &str| {
        let key = format!("{name}=\"");
        tag.find(&key).map(|i| {
            let rest = &tag[i + key.len()..];
            rest[..rest.find('"').unwrap()].to_string()
        })
    };
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
