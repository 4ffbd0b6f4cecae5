//! Turns an access log into a trace for `tripline replay` and `tripline tune`.
//!
//! Two formats:
//!
//! * `envoy`: Envoy's default access-log format, which starts with `[%START_TIME%]` and has
//!   `%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION%` after the
//!   request line, and `"%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"` at the end. The key is the
//!   authority (the dependency); a response flag such as `UT` (upstream timeout) or `UF`
//!   (connection failure) becomes the error kind, and the call a failure.
//! * `nginx`: nginx's `combined` format with `$request_time` appended (nginx's default has no
//!   duration: add `log_format timed '$remote_addr - $remote_user [$time_local] "$request" '
//!   '$status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time';`).
//!   `$time_local` is when the line was written, at the request's end, so the start is that
//!   minus `$request_time`. The key is the path's first segment (`/exercises/42` → `exercises`).
//!
//! The status decides the outcome (5xx and 429 fail, other 4xx are ignored). Lines that do not
//! match, are not UTF-8, or hold what a trace cannot (a call that ended more than a second
//! before the line above it, a time past year 9999) are reported on stderr with their number
//! and skipped.
//!
//! ```text
//! cargo run -p tripline --features trace --example access_log -- envoy < access.log > trace.jsonl
//! tripline tune trace.jsonl --out catalog.toml
//! ```

use std::io::{BufRead, Write};
use std::time::Duration;

use regex_lite::Regex;
use time::OffsetDateTime;
use tripline::Outcome;
use tripline::trace::{Format, Header, Record, Start, TraceClock, TraceOutcome, TraceWriter};

/// One parsed line: start (UNIX nanoseconds), duration, status, error kind, key.
#[derive(Debug, PartialEq)]
struct Line {
    start: i128,
    duration: Duration,
    status: u16,
    error: Option<String>,
    key: Option<String>,
}

struct Parser {
    re: Regex,
    kind: Kind,
    nginx_time: Vec<time::format_description::BorrowedFormatItem<'static>>,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Envoy,
    Nginx,
}

const ENVOY: &str = r#"^\[(?P<start>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d{3}|-) (?P<flags>\S+) \d+ \d+ (?P<duration>\d+) \S+ "[^"]*" "[^"]*" "[^"]*" "(?P<authority>[^"]*)" "[^"]*""#;
const NGINX: &str = r#"^\S+ - \S+ \[(?P<time>[^\]]+)\] "(?P<request>[^"]*)" (?P<status>\d{3}) \S+ "[^"]*" "[^"]*" (?P<duration>\d+(?:\.\d+)?)$"#;

impl Parser {
    fn new(kind: Kind) -> Self {
        let re = Regex::new(if kind == Kind::Envoy { ENVOY } else { NGINX })
            .expect("the patterns are valid");
        let nginx_time = time::format_description::parse_borrowed::<2>(
            "[day]/[month repr:short]/[year]:[hour]:[minute]:[second] [offset_hour sign:mandatory][offset_minute]",
        )
        .expect("the nginx time format is valid");
        Self {
            re,
            kind,
            nginx_time,
        }
    }

    fn parse(&self, line: &str) -> Result<Line, String> {
        let c = self
            .re
            .captures(line.trim_end())
            .ok_or_else(|| "does not match the format".to_string())?;
        let status: u16 = c["status"].parse().unwrap_or(0);
        match self.kind {
            Kind::Envoy => {
                let start = OffsetDateTime::parse(
                    &c["start"],
                    &time::format_description::well_known::Rfc3339,
                )
                .map_err(|e| format!("START_TIME {:?}: {e}", &c["start"]))?;
                let ms: u64 = c["duration"].parse().map_err(|_| "bad DURATION")?;
                let flags = &c["flags"];
                let authority = &c["authority"];
                Ok(Line {
                    start: start.unix_timestamp_nanos(),
                    duration: Duration::from_millis(ms),
                    status,
                    error: (flags != "-").then(|| flags.to_string()),
                    key: (!authority.is_empty() && authority != "-").then(|| authority.to_string()),
                })
            }
            Kind::Nginx => {
                let end = OffsetDateTime::parse(&c["time"], &self.nginx_time)
                    .map_err(|e| format!("time_local {:?}: {e}", &c["time"]))?;
                let duration = c["duration"]
                    .parse::<f64>()
                    .ok()
                    .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
                    .ok_or("bad request_time")?;
                let path = c["request"].split(' ').nth(1).unwrap_or("");
                let segment = path
                    .trim_start_matches('/')
                    .split(['/', '?'])
                    .next()
                    .unwrap_or("");
                Ok(Line {
                    start: end.unix_timestamp_nanos() - duration.as_nanos() as i128,
                    duration,
                    status,
                    error: None,
                    key: (!segment.is_empty()).then(|| segment.to_string()),
                })
            }
        }
    }
}

fn outcome(l: &Line) -> TraceOutcome {
    if l.status == 0 {
        // Envoy writes `-` when no response came back (a reset, a timeout).
        return TraceOutcome::Failure;
    }
    match (Outcome::from_http_status(l.status), &l.error) {
        // UT, UF, URX...: the upstream failed whatever the status says.
        (_, Some(flags)) if flags.starts_with('U') => TraceOutcome::Failure,
        (o, _) => o.into(),
    }
}

/// Converts `input`; each line skipped is told to `skip` with its number and why.
fn convert(
    kind: Kind,
    input: impl BufRead,
    out: impl Write,
    mut skip: impl FnMut(usize, &str),
) -> std::io::Result<(u64, u64)> {
    let parser = Parser::new(kind);
    let header = Header {
        clock: TraceClock::Unix,
        source: Some(format!(
            "{} access log",
            if kind == Kind::Envoy {
                "envoy"
            } else {
                "nginx"
            }
        )),
        ..Header::default()
    };
    let mut w = TraceWriter::new(out, Format::JsonLines, &header)?;
    let (mut written, mut skipped) = (0, 0);
    for (i, line) in input.split(b'\n').enumerate() {
        let line = line?;
        // A line that is not UTF-8 (a raw byte in a path) is skipped, not the whole log.
        let Ok(line) = std::str::from_utf8(&line) else {
            skip(i + 1, "is not valid UTF-8");
            skipped += 1;
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        let parsed = parser.parse(line).and_then(|l| {
            let mut r = Record::new(Start::UnixNanos(l.start), l.duration, outcome(&l));
            r.status = (l.status != 0).then_some(l.status);
            r.error = l.error.as_deref();
            r.key = l.key.as_deref();
            // What the trace writer refuses (a line that ends long before the one written
            // before it, a time past year 9999) is skipped; an I/O error stops.
            match w.write(&r) {
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(e.to_string()),
                other => Ok(other),
            }
        });
        match parsed {
            Ok(done) => {
                done?;
                written += 1;
            }
            Err(e) => {
                skip(i + 1, &e);
                skipped += 1;
            }
        }
    }
    w.into_inner()?.flush()?;
    Ok((written, skipped))
}

/// What must hold for any input, in either format (the first byte chooses): the conversion
/// succeeds, counts every non-empty line as written or skipped, and writes a trace that
/// reads back with every call written, each classified as its status says. Run by the tests
/// below (on arbitrary bytes and mutated logs) and by the fuzz target `access_log` (`fuzz/`).
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "run by the tests and the fuzz target, not by the command"
    )
)]
pub(crate) fn check(data: &[u8]) {
    let Some((&k, input)) = data.split_first() else {
        return;
    };
    let kind = if k & 1 == 0 { Kind::Envoy } else { Kind::Nginx };
    let mut out = Vec::new();
    let (written, skipped) =
        convert(kind, input, &mut out, |_, _| {}).expect("converting into memory");
    let lines = input
        .split(|&b| b == b'\n')
        .filter(|l| !String::from_utf8_lossy(l).trim().is_empty())
        .count() as u64;
    assert_eq!(
        written + skipped,
        lines,
        "every non-empty line is written or skipped"
    );
    let t = match tripline::trace::read(&out[..], &tripline::trace::ReadOptions::default()) {
        Ok(t) => t,
        Err(tripline::trace::TraceError::Empty { .. }) if written == 0 => return,
        Err(e) => panic!(
            "{e}: the converter's trace does not read back:\n{}",
            String::from_utf8_lossy(&out)
        ),
    };
    assert_eq!(t.calls.len() as u64, written);
    for c in &t.calls {
        if c.status >= 500 || c.status == 429 {
            assert_eq!(c.outcome, TraceOutcome::Failure, "{c:?}");
        }
    }
}

fn main() {
    let kind = match std::env::args().nth(1).as_deref() {
        Some("envoy") => Kind::Envoy,
        Some("nginx") => Kind::Nginx,
        _ => {
            eprintln!("usage: access_log envoy|nginx < access.log > trace.jsonl");
            std::process::exit(2);
        }
    };
    let stdin = std::io::stdin();
    let report = |line: usize, why: &str| eprintln!("line {line}: {why}; skipped");
    match convert(kind, stdin.lock(), std::io::stdout().lock(), report) {
        Ok((n, skipped)) => eprintln!("{n} calls written, {skipped} lines skipped"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tripline::trace::{ReadOptions, read};

    // In the order Envoy writes them: when each request ended.
    const ENVOY_LOG: &str = r#"[2026-12-01T12:00:00.120Z] "GET /exercises/42 HTTP/1.1" 200 - 0 1532 312 310 "-" "workout-service" "4f0c" "catalog.vendor.example" "10.0.3.7:443"
[2026-12-01T12:00:00.300Z] "GET /exercises/x HTTP/1.1" 404 - 0 9 20 19 "-" "workout-service" "4f0e" "catalog.vendor.example" "10.0.3.7:443"
[2026-12-01T12:00:00.180Z] "GET /exercises/7 HTTP/1.1" 504 UT 0 24 2500 - "-" "workout-service" "4f0d" "catalog.vendor.example" "10.0.3.8:443"
not a log line
"#;

    const NGINX_LOG: &str = r#"10.0.0.1 - - [01/Dec/2026:19:00:00 +0700] "GET /exercises/42 HTTP/1.1" 200 1532 "-" "app" 0.312
10.0.0.2 - - [01/Dec/2026:19:00:03 +0700] "GET /sessions?page=2 HTTP/1.1" 503 24 "-" "app" 2.500
"#;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 10_000, ..Default::default() })]

        /// Arbitrary bytes, in either format, never fail the conversion; what it writes reads back.
        #[test]
        fn any_bytes_convert_to_a_trace_that_reads_back(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            check(&data);
        }

        /// Nor do the test logs with a few bytes changed, removed or added.
        #[test]
        fn mutated_logs_convert_to_a_trace_that_reads_back(
            nginx in proptest::prelude::any::<bool>(),
            edits in proptest::collection::vec((proptest::prelude::any::<u16>(), proptest::prelude::any::<u8>(), 0u8..3), 1..6),
        ) {
            let mut b = vec![u8::from(nginx)];
            b.extend_from_slice(if nginx { NGINX_LOG } else { ENVOY_LOG }.as_bytes());
            for (pos, byte, op) in edits {
                let i = 1 + usize::from(pos) % (b.len() - 1).max(1);
                match op {
                    0 if i < b.len() => b[i] = byte,
                    1 if i < b.len() => { b.remove(i); }
                    _ => b.insert(i.min(b.len()), byte),
                }
            }
            check(&b);
        }
    }

    /// Found by the fuzz target: an nginx line whose path holds a byte that is not UTF-8
    /// stopped the whole conversion ("stream did not contain valid UTF-8").
    #[test]
    fn a_line_that_is_not_utf8_is_skipped_and_the_rest_converted() {
        let mut log = NGINX_LOG.as_bytes().to_vec();
        let at = log.iter().position(|&b| b == b'x').unwrap();
        log[at] = 0x8d;
        let mut input = vec![1];
        input.extend_from_slice(&log);
        check(&input);
        let mut skipped = Vec::new();
        let (n, s) = convert(Kind::Nginx, &log[..], Vec::new(), |l, why| {
            skipped.push((l, why.to_string()))
        })
        .unwrap();
        assert_eq!((n, s), (1, 1));
        assert_eq!(skipped, [(1, "is not valid UTF-8".to_string())]);
    }

    /// A `$request_time` longer than a `Duration` holds panicked (`Duration::from_secs_f64`).
    #[test]
    fn a_request_time_too_long_for_a_duration_is_skipped() {
        let log = NGINX_LOG.replace("0.312", "99999999999999999999999.5");
        let mut input = vec![1];
        input.extend_from_slice(log.as_bytes());
        check(&input);
    }

    /// A line the trace writer refuses (a call that ends long before the one written before
    /// it, a time past year 9999) stopped the whole conversion.
    #[test]
    fn a_line_the_trace_writer_refuses_is_skipped_and_the_rest_converted() {
        let late = NGINX_LOG.replace("19:00:03", "18:00:03");
        let far = NGINX_LOG
            .replace("2026:19:00:03", "9999:23:59:59")
            .replace("2.500", "0.5");
        for log in [late, far] {
            let mut input = vec![1];
            input.extend_from_slice(log.as_bytes());
            check(&input);
            let (n, s) = convert(Kind::Nginx, log.as_bytes(), Vec::new(), |_, _| {}).unwrap();
            assert_eq!((n, s), (1, 1), "{log}");
        }
    }

    #[test]
    fn envoy_lines_become_a_trace() {
        let mut out = Vec::new();
        let (n, skipped) = convert(Kind::Envoy, ENVOY_LOG.as_bytes(), &mut out, |_, _| {}).unwrap();
        assert_eq!((n, skipped), (3, 1));
        let t = read(&out[..], &ReadOptions::default()).unwrap();
        assert_eq!(t.origin_unix_nanos, Some(1_796_126_400_120_000_000));
        let c: Vec<_> = t
            .calls
            .iter()
            .map(|c| (c.start, c.duration, c.outcome))
            .collect();
        assert_eq!(
            c,
            [
                (0, 312_000_000, TraceOutcome::Success),
                (180_000_000, 20_000_000, TraceOutcome::Ignored),
                (60_000_000, 2_500_000_000, TraceOutcome::Failure),
            ]
        );
        assert_eq!(t.error_kind(t.calls[2]), Some("UT"));
        assert_eq!(t.key(t.calls[0]), "catalog.vendor.example");
    }

    #[test]
    fn nginx_lines_start_their_duration_before_they_were_logged() {
        let mut out = Vec::new();
        let (n, _) = convert(Kind::Nginx, NGINX_LOG.as_bytes(), &mut out, |_, _| {}).unwrap();
        assert_eq!(n, 2);
        let t = read(&out[..], &ReadOptions::default()).unwrap();
        // 19:00:00 +07:00 minus 312 ms.
        assert_eq!(t.origin_unix_nanos, Some(1_796_126_399_688_000_000));
        // The second started at 19:00:00.500, 812 ms after the first.
        assert_eq!(t.calls[1].start, 812_000_000);
        assert_eq!(t.calls[1].outcome, TraceOutcome::Failure);
        assert_eq!(
            (t.key(t.calls[0]), t.key(t.calls[1])),
            ("exercises", "sessions")
        );
    }
}
