//! Configuration: every bad value is refused with its field, value and allowed range; TOML
//! round-trips with human durations.

use std::time::Duration;

use tripline::{Backoff, BreakerConfig};

fn err(b: tripline::BreakerConfigBuilder) -> String {
    b.build().unwrap_err().to_string()
}

#[test]
fn bad_values_name_field_value_and_range() {
    let b = BreakerConfig::builder;
    let cases = [
        (
            err(b().failure_rate_threshold(0.0)),
            "failure_rate_threshold must be in (0, 100], got 0",
        ),
        (
            err(b().failure_rate_threshold(f64::NAN)),
            "failure_rate_threshold must be in (0, 100], got NaN",
        ),
        (
            err(b().slow_call_rate_threshold(100.5)),
            "slow_call_rate_threshold must be in (0, 100], got 100.5",
        ),
        (
            err(b().count_window(0).minimum_calls(1)),
            "window.size must be in [1, 1000000], got 0",
        ),
        (
            err(b().count_window(10).minimum_calls(11)),
            "minimum_calls must be at most window.size (10), or the breaker could never trip, got 11",
        ),
        (
            err(b().time_window(Duration::from_millis(2500), Duration::from_secs(1))),
            "window.length must be a whole number of buckets of 1s, got 2s 500ms",
        ),
        (
            err(b().time_window(Duration::from_secs(10), Duration::from_micros(10))),
            "window.bucket must be between 1ms and 1h, got 10us",
        ),
        (
            err(b().half_open_calls(0)),
            "half_open.permitted_calls must be in [1, 1000], got 0",
        ),
        (
            err(b().open_duration(Duration::ZERO)),
            "open.duration must be between 1ms and 7days, got 0s",
        ),
        (
            err(b().consecutive_failures(0)),
            "consecutive_failures must be in [1, 1000000], got 0",
        ),
        (err(b().stripes(65)), "stripes must be in [1, 64], got 65"),
        (
            err(b().open_backoff(Backoff {
                multiplier: 0.5,
                max: Duration::from_secs(600),
                healthy_after: Duration::ZERO,
            })),
            "open.backoff.multiplier must be a number in [1, 100], got 0.5",
        ),
        (
            err(b()
                .open_duration(Duration::from_secs(60))
                .open_backoff(Backoff {
                    multiplier: 2.0,
                    max: Duration::from_secs(30),
                    healthy_after: Duration::ZERO,
                })),
            "open.backoff.max must be between open.duration (1m) and 7 days, got 30s",
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got, want);
    }
}

#[cfg(feature = "serde")]
#[test]
fn toml_with_human_durations() {
    let text = r#"
window = { kind = "time", length = "10s", bucket = "500ms" }
minimum_calls = 10
failure_rate_threshold = 50
slow_call_rate_threshold = 30
slow_call_duration = "2s"
seed = 42

[open]
duration = "15s"
jitter = "5s"
backoff = { multiplier = 2.0, max = "5m", healthy_after = "1m" }

[half_open]
permitted_calls = 3
policy = "consecutive"
probe_lease = "2500ms"
"#;
    let c: BreakerConfig = toml::from_str(text).unwrap();
    assert_eq!(
        c.window(),
        tripline::WindowConfig::Time {
            length: Duration::from_secs(10),
            bucket: Duration::from_millis(500)
        }
    );
    assert_eq!(c.slow_call_duration(), Duration::from_secs(2));
    assert_eq!(c.open_jitter(), Duration::from_secs(5));
    assert_eq!(c.half_open_policy(), tripline::HalfOpenPolicy::Consecutive);
    assert_eq!(c.probe_lease(), Duration::from_millis(2500));
    assert_eq!(c.open_backoff().unwrap().max, Duration::from_secs(300));
    // Round trip.
    let back: BreakerConfig = toml::from_str(&toml::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
    // An empty document is the defaults.
    assert_eq!(
        toml::from_str::<BreakerConfig>("").unwrap(),
        BreakerConfig::default()
    );
}

#[cfg(feature = "serde")]
#[test]
fn toml_errors_point_at_the_problem() {
    let e = toml::from_str::<BreakerConfig>("failure_rate_threshold = 150\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("failure_rate_threshold must be in (0, 100], got 150"),
        "{e}"
    );
    let e = toml::from_str::<BreakerConfig>("minimum_calls = 5\nthreshold = 3\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown field `threshold`") && e.contains("line 2"),
        "{e}"
    );
    let e = toml::from_str::<BreakerConfig>("slow_call_duration = \"fast\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("slow_call_duration") || e.contains("line 1"),
        "{e}"
    );
    let e = toml::from_str::<BreakerConfig>("[half_open]\npolicy = \"sometimes\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("all-probes") && e.contains("consecutive"), "{e}");
}

proptest::proptest! {
    /// No configuration, however wrong, panics: it builds or is refused.
    #[test]
    fn arbitrary_configs_never_panic(
        size in 0u32..2_000_000, min in 0u32..2_000_000,
        fr in proptest::num::f64::ANY, sr in proptest::num::f64::ANY,
        slow_ms in 0u64..10_000_000_000, open_ms in 0u64..10_000_000_000,
        jitter_ms in 0u64..10_000_000_000, k in 0u32..5000,
        mult in proptest::num::f64::ANY, max_ms in 0u64..10_000_000_000,
        len_ms in 0u64..100_000_000, bucket_ms in 0u64..10_000_000, time in proptest::bool::ANY,
    ) {
        let mut b = BreakerConfig::builder()
            .minimum_calls(min)
            .failure_rate_threshold(fr)
            .slow_call_rate_threshold(sr)
            .slow_call_duration(Duration::from_millis(slow_ms))
            .open_duration(Duration::from_millis(open_ms))
            .open_jitter(Duration::from_millis(jitter_ms))
            .half_open_calls(k)
            .open_backoff(Backoff { multiplier: mult, max: Duration::from_millis(max_ms), healthy_after: Duration::ZERO });
        b = if time {
            b.time_window(Duration::from_millis(len_ms), Duration::from_millis(bucket_ms))
        } else {
            b.count_window(size)
        };
        if let Ok(c) = b.build() {
            // A valid configuration makes a working breaker.
            let breaker = tripline::CircuitBreaker::with_clock("p", c, tripline::ManualClock::new());
            for _ in 0..3 {
                let _ = breaker.call(|| Err::<(), _>(()));
            }
            breaker.trip();
            breaker.clock().advance(Duration::from_secs(1_000_000_000));
            let _ = breaker.try_acquire();
        }
    }
}

/// The line a TOML error points at.
#[cfg(feature = "serde")]
fn error_line(text: &str) -> (String, usize) {
    let e = toml::from_str::<BreakerConfig>(text).unwrap_err();
    let span = e.span().expect("a position");
    let line = text[..span.start].matches('\n').count() + 1;
    (e.message().to_string(), line)
}

#[cfg(feature = "serde")]
#[test]
fn an_out_of_range_value_points_at_its_fields_line_not_its_table() {
    let cases = [
        (
            "minimum_calls = 5\n\n[open]\njitter = \"1s\"\nduration = \"0s\"\n",
            "open.duration must be between 1ms and 7days, got 0s",
            5,
        ),
        (
            "[half_open]\npolicy = \"consecutive\"\npermitted_calls = 0\n",
            "half_open.permitted_calls must be in [1, 1000], got 0",
            3,
        ),
        (
            "[half_open]\nmax_wait = \"0s\"\n",
            "half_open.max_wait must be between 1ms and 7days, got 0s",
            2,
        ),
        (
            "seed = 1\nfailure_rate_threshold = 150\n",
            "failure_rate_threshold must be in (0, 100], got 150",
            2,
        ),
        (
            "seed = 1\nslow_call_rate_threshold = 0\n",
            "slow_call_rate_threshold must be in (0, 100], got 0",
            2,
        ),
        (
            "seed = 1\n\nminimum_calls = 0\n",
            "minimum_calls must be in [1, 1000000], got 0",
            3,
        ),
        (
            "seed = 1\nstripes = 65\n",
            "stripes must be in [1, 64], got 65",
            2,
        ),
        (
            "seed = 1\nconsecutive_failures = 0\n",
            "consecutive_failures must be in [1, 1000000], got 0",
            2,
        ),
        (
            "seed = 1\nslow_call_duration = \"0s\"\n",
            "slow_call_duration must be between 1ms and 7days, got 0s",
            2,
        ),
        (
            "seed = 1\nlumping_interval = \"2h\"\n",
            "lumping_interval must be between 1ms and 1h, got 2h",
            2,
        ),
        (
            "seed = 1\nwindow = { kind = \"count\", size = 0 }\n",
            "window.size must be in [1, 1000000], got 0",
            2,
        ),
        (
            "seed = 1\nwindow = { kind = \"time\", length = \"10s\", bucket = \"0s\" }\n",
            "window.bucket must be between 1ms and 1h, got 0s",
            2,
        ),
        (
            "seed = 1\n[failure_kinds]\nother = 1\ntimeout = 11\n",
            "failure_kinds.timeout must be in [0, 10], got 11",
            4,
        ),
        (
            "[open]\nduration = \"1s\"\nbackoff = { multiplier = 0.5, max = \"1m\" }\n",
            "open.backoff.multiplier must be a number in [1, 100], got 0.5",
            3,
        ),
        (
            "seed = 1\nramp_up = { from = 0, over = \"30s\" }\n",
            "ramp_up.from must be a percentage in (0, 100), got 0",
            2,
        ),
        (
            "seed = 1\nramp_up = { from = 10, over = \"30s\", steps = 0 }\n",
            "ramp_up.steps must be in [1, 1000], got 0",
            2,
        ),
    ];
    for (text, message, line) in cases {
        assert_eq!(error_line(text), (message.to_string(), line), "{text}");
    }
    // A rule that relates two fields points at their table, with the same message as the
    // builder's.
    let text = "[open]\nduration = \"1m\"\nbackoff = { multiplier = 2.0, max = \"30s\" }\n";
    let e = toml::from_str::<BreakerConfig>(text).unwrap_err();
    assert_eq!(
        e.message(),
        "open.backoff.max must be between open.duration (1m) and 7 days, got 30s"
    );
}

#[cfg(feature = "serde")]
#[test]
fn the_documented_toml_block_sets_every_field() {
    let text = include_str!("../docs/breaker.toml");
    let c: BreakerConfig = toml::from_str(text).unwrap();
    // Every field the serialized form has is in the documented block.
    let written = toml::to_string(&c).unwrap();
    let table: toml::Table = toml::from_str(&written).unwrap();
    let doc: toml::Table = toml::from_str(text).unwrap();
    fn keys(t: &toml::Table, prefix: &str, out: &mut Vec<String>) {
        for (k, v) in t {
            let name = format!("{prefix}{k}");
            match v {
                toml::Value::Table(inner)
                    if !matches!(
                        k.as_str(),
                        "window" | "failure_kinds" | "ramp_up" | "backoff"
                    ) =>
                {
                    keys(inner, &format!("{name}."), out)
                }
                _ => out.push(name),
            }
        }
    }
    let (mut want, mut have) = (Vec::new(), Vec::new());
    keys(&table, "", &mut want);
    keys(&doc, "", &mut have);
    for k in want {
        assert!(have.contains(&k), "the documented block lacks {k}");
    }
}
