//! What must hold for every input of the core's parsers (the trace reader and writer, the
//! breaker's and the registry's TOML), beyond "it does not panic". Driven by proptest in
//! `tests/hostile.rs` (stable, every CI run) and by libFuzzer in `fuzz/` (which includes this
//! file), so both check the same promises.

use std::time::Duration;

use arbitrary::{Result, Unstructured};
use tripline::BreakerConfig;
use tripline::registry::{Registry, RegistryConfig};
use tripline::trace::{
    self, Format, Header, ReadOptions, Record, Start, Trace, TraceClock, TraceOutcome, TraceWriter,
};

/// The most heap a parser of ours may hold at once: this many bytes per byte of input, plus
/// [`FIXED`]; a TOML configuration may also hold what the TOML parser itself holds for the
/// same text (see [`within_memory_beside_toml`]).
pub(crate) const PER_BYTE: u64 = 64;
/// See [`PER_BYTE`].
pub(crate) const FIXED: u64 = 1 << 20;
/// The most heap the TOML parser (the `toml` crate) may hold for a text: this many bytes per
/// byte, plus [`FIXED`]. Measured: 11 to 100 bytes per byte on long repetitive texts (a
/// token, an event and an error message for many bytes), and up to about 500 per byte on
/// short malformed ones (a 2,449-byte registry configuration peaked at 1,217,148 bytes),
/// linear in the length; so a quadratic cost still fails here.
pub(crate) const TOML_PER_BYTE: u64 = 2048;

/// Runs `f`, checking that the heap it holds at its peak stays within a bound proportional
/// to the input (a 32-year gap must not allocate 8 GB).
pub(crate) fn within_memory<T>(what: &str, input: usize, f: impl FnOnce() -> T) -> T {
    within(what, input, 0, f)
}

/// [`within_memory`] for a parser of TOML `text`: the bound adds what the TOML parser itself
/// holds at its peak for the same text (a document read into a table), which is checked in
/// turn against [`TOML_PER_BYTE`]. Our share stays within [`PER_BYTE`].
pub(crate) fn within_memory_beside_toml<T>(what: &str, text: &str, f: impl FnOnce() -> T) -> T {
    let toml = allocation_counter::measure(|| drop(toml::from_str::<toml::Table>(text))).bytes_max;
    let bound = TOML_PER_BYTE * text.len() as u64 + FIXED;
    assert!(
        toml <= bound,
        "the TOML parser: {toml} bytes at the peak for {} bytes of input (bound {bound})",
        text.len()
    );
    within(what, text.len(), toml, f)
}

fn within<T>(what: &str, input: usize, beside: u64, f: impl FnOnce() -> T) -> T {
    let mut out = None;
    let info = allocation_counter::measure(|| out = Some(f()));
    let bound = PER_BYTE * input as u64 + FIXED + beside;
    assert!(
        info.bytes_max <= bound,
        "{what}: {} bytes at the peak for {input} bytes of input (bound {bound}, of which \
         {beside} the TOML parser's own peak)",
        info.bytes_max
    );
    out.expect("the closure ran")
}

fn outcome(i: u8) -> TraceOutcome {
    [
        TraceOutcome::Success,
        TraceOutcome::Failure,
        TraceOutcome::Ignored,
        TraceOutcome::Rejected,
    ][usize::from(i % 4)]
}

/// The trace reader on `data`, its first byte choosing the options: whatever it reads, a
/// writer writes again and the reader reads back equal, in both formats; an error names a
/// line of the input.
pub(crate) fn trace_read(data: &[u8]) {
    let Some((&o, text)) = data.split_first() else {
        return;
    };
    let opts = ReadOptions {
        format: [None, Some(Format::JsonLines), Some(Format::Csv)][usize::from(o % 3)],
        skip_bad_lines: o & 4 != 0,
        reorder_window: if o & 8 != 0 {
            Duration::ZERO
        } else {
            Duration::from_secs(1)
        },
        max_calls: if o & 16 != 0 { 3 } else { 1 << 20 },
        max_keys: if o & 32 != 0 { 2 } else { 1 << 16 },
    };
    let lines = text.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
    let t = match within_memory("read", text.len(), || trace::read(text, &opts)) {
        Ok(t) => t,
        Err(e) => {
            if let Some(line) = e.line() {
                assert!(
                    (1..=lines).contains(&line),
                    "{e} (the input has {lines} lines)"
                );
            }
            return;
        }
    };
    assert!(!t.calls.is_empty());
    // The CSV reader also ends a record at a lone CR, where the line count (and the line an
    // error names) does not: records are bounded by line breaks of either kind.
    let breaks = lines
        + text
            .windows(2)
            .filter(|w| w[0] == b'\r' && w[1] != b'\n')
            .count() as u64
        + u64::from(text.last() == Some(&b'\r'));
    assert!(t.calls.len() as u64 + t.skipped <= breaks && t.lines <= lines);
    assert!(t.bad_lines.len() as u64 <= t.skipped);
    for c in &t.calls {
        assert!((c.key as usize) < t.keys.len());
        assert!(c.error == u32::MAX || (c.error as usize) < t.error_kinds.len());
        assert!(c.duration <= 604_800_000_000_000);
        assert!(c.status == 0 || (100..=599).contains(&c.status));
    }
    for format in [Format::JsonLines, Format::Csv] {
        let back = rewrite(&t, format);
        assert_eq!(back.header, t.header);
        assert_eq!(back.calls, t.calls, "{format:?}");
        assert_eq!(back.keys, t.keys);
        assert_eq!(back.error_kinds, t.error_kinds);
        assert_eq!(back.origin_unix_nanos, t.origin_unix_nanos);
    }
}

/// `t` written by a [`TraceWriter`] in `format`, and read back.
fn rewrite(t: &Trace, format: Format) -> Trace {
    let mut w = TraceWriter::new(Vec::new(), format, &t.header).expect("a header read writes");
    for c in &t.calls {
        let start = match t.origin_unix_nanos {
            Some(o) => Start::UnixNanos(o + i128::from(c.start)),
            None => Start::Relative(Duration::from_nanos(c.start)),
        };
        let mut r = Record::new(start, Duration::from_nanos(c.duration), c.outcome);
        r.status = (c.status != 0).then_some(c.status);
        r.error = t.error_kind(*c);
        r.key = Some(t.key(*c));
        w.write(&r)
            .unwrap_or_else(|e| panic!("a call read ({c:?}) is refused by the writer: {e}"));
    }
    let bytes = w.into_inner().expect("writing to memory");
    let opts = ReadOptions {
        format: Some(format),
        max_keys: 1 << 16,
        ..ReadOptions::default()
    };
    trace::read(&bytes[..], &opts).unwrap_or_else(|e| {
        panic!(
            "{e}: what the writer wrote does not read back:\n{}",
            String::from_utf8_lossy(&bytes)
        )
    })
}

/// What the writer promises to write for a text field: control characters escaped as
/// `\u{hex}`, cut at a character boundary to `max` bytes; an empty one is none.
pub(crate) fn written_text(s: &str, max: usize) -> Option<String> {
    let mut out = String::new();
    for c in s.chars() {
        let piece = if c.is_control() {
            format!("\\u{{{:x}}}", u32::from(c))
        } else {
            c.to_string()
        };
        if out.len() + piece.len() > max {
            break;
        }
        out.push_str(&piece);
    }
    (!out.is_empty()).then_some(out)
}

/// Text as users and attackers write it: any character, control and bidi characters,
/// whitespace only, a byte-order mark, long enough to be cut.
pub(crate) fn hostile_text(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(match u.int_in_range(0..=4)? {
        0 | 1 => u.arbitrary()?,
        2 => {
            let piece: &str =
                u.choose(&["\t", "\u{7f}", "\u{85}", "a", "é", "\u{10348}", "\r\n"])?;
            piece.repeat(u.int_in_range(60..=600)?)
        }
        3 => u
            .choose(&[
                "",
                " ",
                "  padded  ",
                "\u{feff}",
                "\u{200b}",
                "\u{202e}abc",
                "a,b",
                "\"q\"",
                "#x",
                "\u{2028}",
            ])?
            .to_string(),
        _ => "k".repeat(u.int_in_range(500..=520)?),
    })
}

const WEEK_NS: u64 = 604_800_000_000_000;

fn hostile_duration(u: &mut Unstructured<'_>) -> Result<Duration> {
    Ok(match u.int_in_range(0..=4)? {
        0 | 1 => Duration::from_nanos(u.int_in_range(0..=2_000_000_000)?),
        2 => Duration::from_nanos(u.int_in_range(WEEK_NS - 2..=WEEK_NS + 2)?),
        3 => Duration::MAX,
        _ => Duration::new(u.arbitrary()?, u.int_in_range(0..=999_999_999)?),
    })
}

/// Records that end one after the other (sometimes a little before the last, sometimes
/// years later or at an extreme) with hostile durations, statuses and text, written by a
/// [`TraceWriter`] and read back: whatever the writer accepts reads back equal, after its
/// documented changes (a duration over 7 days cut to 7 days ending when the call ended, text
/// escaped and cut); it accepts every record a reader takes; and a record it refuses leaves
/// the trace as it was.
pub(crate) fn trace_round_trip(u: &mut Unstructured<'_>) -> Result<()> {
    let format = if u.arbitrary()? {
        Format::Csv
    } else {
        Format::JsonLines
    };
    let absolute: bool = u.arbitrary()?;
    let header = Header {
        clock: if absolute {
            TraceClock::Unix
        } else {
            TraceClock::Relative
        },
        source: if u.arbitrary()? {
            Some(hostile_text(u)?)
        } else {
            None
        },
        sample_rate: if u.ratio(1, 8)? { u.arbitrary()? } else { 1.0 },
        ..Header::default()
    };
    let Ok(mut w) = TraceWriter::new(Vec::new(), format, &header) else {
        assert!(!(header.sample_rate > 0.0 && header.sample_rate <= 1.0));
        return Ok(());
    };
    // Each accepted record as it must read back: start (ns), duration, outcome, status,
    // error kind, key.
    let mut kept: Vec<(i128, u64, TraceOutcome, u16, Option<String>, String)> = Vec::new();
    let mut latest: Option<i128> = None;
    let mut at: i128 = if absolute {
        *u.choose(&[0, 1_796_126_400_000_000_000, -1])?
    } else {
        0
    };
    for _ in 0..u.int_in_range(1..=12)? {
        let end = match u.int_in_range(0..=9)? {
            0..=5 => at + i128::from(u.int_in_range(0..=5_000_000_000u64)?),
            6 | 7 => at - i128::from(u.int_in_range(0..=2_000_000_000u64)?),
            8 => at + i128::from(u.arbitrary::<u64>()?) * 1000,
            _ => *u.choose(&[
                0,
                -1,
                253_402_300_799_999_999_999, // 9999-12-31T23:59:59.999999999Z
                -62_167_219_200_000_000_000, // 0000-01-01T00:00:00Z
                i128::from(u64::MAX),
                1_000_000_000_000_000_000_000, // 1e15 ms
            ])?,
        };
        let duration = hostile_duration(u)?;
        let dur = duration.as_nanos() as i128;
        let (start, end) = if absolute || end >= dur {
            (end - dur, end)
        } else {
            (0, dur)
        };
        let start_at = if absolute {
            Start::UnixNanos(start)
        } else {
            match u64::try_from(start) {
                Ok(s) => Start::Relative(Duration::from_nanos(s)),
                Err(_) => continue,
            }
        };
        let status = match u.int_in_range(0..=3)? {
            0 => None,
            1 => Some(u.arbitrary()?),
            _ => Some(u.int_in_range(100..=599)?),
        };
        let error = if u.arbitrary()? {
            Some(hostile_text(u)?)
        } else {
            None
        };
        let key = if u.arbitrary()? {
            Some(hostile_text(u)?)
        } else {
            None
        };
        let o = outcome(u.arbitrary()?);
        let mut r = Record::new(start_at, duration, o);
        r.status = status;
        r.error = error.as_deref();
        r.key = key.as_deref();
        let kept_dur = dur.min(i128::from(WEEK_NS));
        let kept_start = end - kept_dur;
        // Plainly readable: an HTTP status, in order, well inside the reader's ranges.
        let readable = status.is_none_or(|s| (100..=599).contains(&s))
            && latest.is_none_or(|l| end + 1_000_000_000 >= l)
            && if absolute {
                (-62_167_219_200_000_000_000..=253_402_300_799_999_999_999).contains(&kept_start)
                    && kept.iter().all(|k| {
                        (end - k.0).abs() < 1 << 62
                            && (k.0 + i128::from(k.1) - kept_start).abs() < 1 << 62
                    })
            } else {
                end < 1 << 62
            };
        let before = w.written();
        match w.write(&r) {
            Ok(()) => {
                at = end;
                latest = Some(latest.map_or(end, |l| l.max(end)));
                kept.push((
                    kept_start,
                    kept_dur as u64,
                    o,
                    status.unwrap_or(0),
                    error.as_deref().and_then(|e| written_text(e, 256)),
                    key.as_deref()
                        .and_then(|k| written_text(k, 512))
                        .unwrap_or_default(),
                ));
            }
            Err(e) => {
                assert!(!readable, "refused a readable record {r:?}: {e}");
                assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
                assert_eq!(w.written(), before);
            }
        }
    }
    let bytes = w.into_inner().expect("writing to memory");
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let opts = ReadOptions {
        format: Some(format),
        ..ReadOptions::default()
    };
    let t = match trace::read(&bytes[..], &opts) {
        Ok(t) => t,
        Err(trace::TraceError::Empty { .. }) if kept.is_empty() => return Ok(()),
        Err(e) => panic!("{e}: what the writer accepted does not read back:\n{text}"),
    };
    assert_eq!(t.header, header);
    let base = if absolute {
        kept.iter().map(|k| k.0).min().expect("kept")
    } else {
        0
    };
    assert_eq!(t.origin_unix_nanos, absolute.then_some(base));
    assert_eq!(t.calls.len(), kept.len(), "{text}");
    for (c, k) in t.calls.iter().zip(&kept) {
        let got = (
            i128::from(c.start) + base,
            c.duration,
            c.outcome,
            c.status,
            t.error_kind(*c).map(str::to_string),
            t.key(*c).to_string(),
        );
        assert_eq!(&got, k, "\n{text}");
    }
    Ok(())
}

/// Seeds for the breaker's TOML: every field set, the defaults, a time window.
pub(crate) fn breaker_seeds() -> Vec<String> {
    use tripline::{AfterMaxWait, Backoff, FailureKind, HalfOpenPolicy, RampCurve, RampUp};
    let full = BreakerConfig::builder()
        .time_window(Duration::from_secs(10), Duration::from_millis(500))
        .minimum_calls(5)
        .consecutive_failures(3)
        .open_backoff(Backoff {
            multiplier: 2.0,
            max: Duration::from_secs(600),
            healthy_after: Duration::from_secs(30),
        })
        .half_open_max_wait(Duration::from_secs(5))
        .half_open_after_max_wait(AfterMaxWait::Closed)
        .failure_kind_weight(FailureKind::RateLimited, 0)
        .failure_kind_weight(FailureKind::Timeout, 3)
        .lumping_interval(Duration::from_millis(100))
        .ramp_up(RampUp {
            from: 0.1,
            over: Duration::from_secs(30),
            steps: 10,
            curve: RampCurve::Exponential,
        })
        .call_durations(true)
        .seed(7)
        .half_open_policy(HalfOpenPolicy::Consecutive)
        .build()
        .expect("a valid configuration");
    [full, BreakerConfig::default()]
        .iter()
        .map(|c| toml::to_string(c).expect("a configuration serializes"))
        .chain(["window = { kind = \"count\", size = 20 }\nminimum_calls = 5\nopen = { duration = \"10s\" }\n".into()])
        .collect()
}

/// Words the breaker's and the registry's TOML give meaning to.
pub(crate) const CONFIG_WORDS: &[&str] = &[
    "count",
    "time",
    "all-probes",
    "consecutive",
    "open",
    "closed",
    "linear",
    "exponential",
    "auto",
    "forced-open",
    "disabled",
    "metrics-only",
    "default",
    "vendor",
    "timeout",
    "rate-limited",
    "payments/tenant=acme",
    "a/b=c",
];

/// The breaker's TOML: an accepted configuration validates (its builder builds it again),
/// makes a breaker, and round-trips through TOML and JSON; a refused one is an error that
/// says what is wrong.
pub(crate) fn breaker_config(text: &str) {
    let parsed = within_memory_beside_toml("BreakerConfig", text, || {
        toml::from_str::<BreakerConfig>(text)
    });
    let c = match parsed {
        Ok(c) => c,
        Err(e) => {
            assert!(!e.message().is_empty());
            return;
        }
    };
    assert_eq!(
        c.to_builder().build().as_ref(),
        Ok(&c),
        "an accepted configuration validates"
    );
    let again = toml::to_string(&c).expect("an accepted configuration serializes");
    let back: BreakerConfig = toml::from_str(&again)
        .unwrap_or_else(|e| panic!("{e}: written as\n{again}\nit does not read back"));
    assert_eq!(back, c, "TOML round trip of\n{again}");
    let json = serde_json::to_string(&c).expect("serializes to JSON");
    assert_eq!(
        serde_json::from_str::<BreakerConfig>(&json).ok().as_ref(),
        Some(&c),
        "{json}"
    );
    let b = tripline::CircuitBreaker::new("fuzz", c);
    let _ = b.call(|| Err::<(), _>("x"));
}

/// Seeds for the registry's TOML.
pub(crate) fn registry_seeds() -> Vec<String> {
    let mut seeds = vec![
        "max_breakers = 10000\nidle_after = \"10m\"\n\n[configs.default]\nminimum_calls = 20\n\n\
         [configs.vendor]\nwindow = { kind = \"count\", size = 20 }\nminimum_calls = 10\n\n\
         [dependencies]\nexercise-catalog = \"vendor\"\n\n[keys]\n\"payments/tenant=acme\" = \"vendor\"\n\n\
         [operator]\n\"recommendations\" = \"forced-open\"\n\"payments/tenant=acme\" = \"metrics-only\"\n"
            .to_string(),
    ];
    for b in breaker_seeds() {
        seeds.push(format!(
            "max_breakers = 3\n[configs.a]\n{b}\n[dependencies]\nx = \"a\"\n"
        ));
    }
    seeds
}

/// The registry's TOML: an accepted configuration validates, makes a registry, and
/// round-trips through TOML.
pub(crate) fn registry_config(text: &str) {
    let parsed =
        within_memory_beside_toml("RegistryConfig", text, || RegistryConfig::from_toml(text));
    let c = match parsed {
        Ok(c) => c,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    assert_eq!(c.validate(), Ok(()));
    let again = toml::to_string(&c).expect("an accepted configuration serializes");
    let back = RegistryConfig::from_toml(&again)
        .unwrap_or_else(|e| panic!("{e}: written as\n{again}\nit does not read back"));
    assert_eq!(back, c, "TOML round trip of\n{again}");
    let r = Registry::new(c).expect("an accepted configuration makes a registry");
    let _ = r.get(&"exercise-catalog".parse().expect("a key"));
}
