//! What a shared breaker shows outside its process: the first fallback to local decisions in
//! the log (a wrong URL fails nothing else visibly), and, with hashed scopes, nothing that
//! leaves the process (a Redis key or value, a metrics label, an event, a log line, a
//! rejection) carries the scope itself.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::DebuggingRecorder;
use tripline::observe::BreakerMetrics;
use tripline::{BreakerConfig, EventLog, ManualClock, Outcome, State, WindowConfig};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig, TimeSource};

const SECOND: Duration = Duration::from_secs(1);

/// A log sink for `tracing` events: every line written.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// A subscriber for the current thread writing here (no colours).
    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync + use<> {
        let sink = self.clone();
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || sink.clone())
            .finish()
    }
}

fn config() -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 4 })
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(10 * SECOND)
        .half_open_calls(1)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// A wrong Redis URL (nothing listens there) failed nothing visibly: the replica decided
/// alone, and only the health check, the mode or the last error showed it. The first fallback
/// is logged, once per episode, with the reason; the return to shared decisions too.
#[test]
fn a_wrong_url_is_logged_at_the_first_fallback() {
    let lines = Lines::default();
    let _log = tracing::subscriber::set_default(lines.subscriber());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let b = SharedBreaker::new(
            "dep:catalog",
            config(),
            SharedConfig::default(),
            Backend::single("redis://127.0.0.1:1/").unwrap(),
        )
        .unwrap();
        for _ in 0..5 {
            let p = b.acquire().await.expect("the local breaker decides");
            assert!(p.is_local());
            p.record(Outcome::Success).await;
        }
    });
    let text = lines.text();
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(warnings[0].contains("dep:catalog"), "{text}");
    assert!(warnings[0].contains("refused"), "{text}");
    assert!(warnings[0].contains("local breaker decides"), "{text}");
}

/// With `hash_scopes`, the scope stays in the process: no Redis key or value, metrics label,
/// event, log line or rejection carries it, through a trip, a probe, a recovery, an empty
/// restart that the replicas bring the trip back from, and an operator's reset.
#[test]
fn nothing_that_leaves_the_process_carries_a_hashed_scope() {
    let scope = "tenant:acme-industries-{eu}";
    let secret = "0123456789abcdef-a-secret-from-the-vault";
    let lines = Lines::default();
    let _log = tracing::subscriber::set_default(lines.subscriber());
    let recorder = DebuggingRecorder::new();
    let snapshot = recorder.snapshotter();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut server = RedisServer::start().expect("redis-server");
    let events = EventLog::new();
    let mut seen = Vec::new();
    rt.block_on(async {
        let clock = ManualClock::new();
        let fleet: Vec<SharedBreaker<ManualClock>> = ["a", "b"]
            .iter()
            .map(|id| {
                SharedBreaker::with_clock(
                    scope,
                    config(),
                    SharedConfig::builder()
                        .time_source(TimeSource::Local)
                        .view_ttl(Duration::ZERO)
                        .redis_timeout(Duration::from_millis(500))
                        .replica_id(*id)
                        .hash_scopes(secret)
                        .build()
                        .unwrap(),
                    Backend::single(&server.url()).unwrap(),
                    clock.clone(),
                )
                .unwrap()
            })
            .collect();
        let a = &fleet[0];
        assert_eq!(a.name(), scope, "the readable scope stays in the process");
        assert!(
            a.label().starts_with("h:") && a.label().len() == 34,
            "{}",
            a.label()
        );
        assert_eq!(
            a.label(),
            fleet[1].label(),
            "one label per scope and secret"
        );
        a.shadow().subscribe(events.clone());
        let metrics =
            metrics::with_local_recorder(&recorder, || BreakerMetrics::new(a.shadow(), Vec::new()));
        for _ in 0..4 {
            let p = a.acquire().await.unwrap();
            p.record(Outcome::Failure).await;
        }
        let r = fleet[1].acquire().await.unwrap_err();
        seen.push(r.to_string());
        seen.push(format!("{r:?}"));
        assert_eq!(r.state(), State::Open);
        // Redis forgets; the replicas bring the trip back.
        server.restart().unwrap();
        for b in &fleet {
            b.check(10 * SECOND).await.unwrap();
            let _ = b.acquire().await;
        }
        clock.advance(10 * SECOND);
        let p = a.acquire().await.unwrap();
        p.record(Outcome::Success).await;
        fleet[1].reset().await.unwrap();
        for e in a.fleet_events(100).await.unwrap() {
            seen.push(format!("{e:?}"));
        }
        metrics::with_local_recorder(&recorder, || metrics.update(a.shadow()));
        seen.push(format!("{:?}", a.metrics()));
        seen.push(format!("{:?}", a.keys()));
        seen.push(format!("{a:?}"));
    });
    // Every key, and every value in it.
    let keys = server.cli(&["KEYS", "*"]).unwrap();
    assert!(!keys.is_empty());
    seen.push(keys.clone());
    for key in keys.lines() {
        let kind = server.cli(&["TYPE", key]).unwrap();
        let dump = match kind.as_str() {
            "string" => server.cli(&["GET", key]).unwrap(),
            "hash" => server.cli(&["HGETALL", key]).unwrap(),
            "zset" => server
                .cli(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
                .unwrap(),
            "stream" => server.cli(&["XRANGE", key, "-", "+"]).unwrap(),
            other => panic!("a key of type {other}: {key}"),
        };
        seen.push(dump);
    }
    for (key, _, _, _) in snapshot.snapshot().into_vec() {
        seen.push(format!("{:?}", key.key()));
    }
    for e in events.events() {
        seen.push(format!("{e:?}"));
    }
    let log = lines.text();
    assert!(
        log.contains("h:"),
        "the restore was logged, by its label: {log}"
    );
    seen.push(log);
    for (i, text) in seen.iter().enumerate() {
        for needle in [scope, "acme"] {
            assert!(
                !text.contains(needle),
                "output {i} carries the scope ({needle:?}): {text}"
            );
        }
    }
}
