//! What must hold for every reply of the breaker's functions, every `INFO` text and every
//! record found in Redis, beyond "it does not panic". Driven by proptest in
//! `tests/hostile.rs` (stable, every CI run) and by libFuzzer in `fuzz/` (which includes
//! this file).

use std::sync::LazyLock;
use std::time::Duration;

use arbitrary::{Result, Unstructured};
use redis::Value;
use tripline::{BreakerConfig, ManualClock, Outcome};
use tripline_redis::fuzzing;
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig, TimeSource};

const WORDS: [&str; 16] = [
    "ok",
    "rejected",
    "probe",
    "stale",
    "closed",
    "open",
    "half-open",
    "forced-open",
    "disabled",
    "metrics-only",
    "closed>open>failure-rate",
    "open>half-open>wait",
    "half-open>closed>probes",
    "x>y>z",
    ">>",
    "open>closed",
];

fn text(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    Ok(match u.int_in_range(0..=5)? {
        0 | 1 => u.choose(&WORDS)?.as_bytes().to_vec(),
        2 => u
            .choose(&[
                "0",
                "1",
                "6",
                "7",
                "-1",
                "18446744073709551615",
                "18446744073709551616",
                "+3",
                " 1",
            ])?
            .as_bytes()
            .to_vec(),
        3 => u.arbitrary::<u64>()?.to_string().into_bytes(),
        _ => u.arbitrary()?,
    })
}

fn value(u: &mut Unstructured<'_>, depth: u32) -> Result<Value> {
    Ok(match u.int_in_range(0..=9)? {
        0..=4 => Value::BulkString(text(u)?),
        5 => Value::Int(u.arbitrary()?),
        6 => Value::SimpleString(String::from_utf8_lossy(&text(u)?).into_owned()),
        7 => Value::Nil,
        8 if depth < 2 => Value::Array(vec![value(u, depth + 1)?]),
        _ => Value::Okay,
    })
}

/// A reply of the functions: usually a header of nine entries (verdict, state, epoch, open
/// deadline, now, expired, origin, notes, number of fields) then fields and transitions, with
/// hostile entries anywhere.
pub(crate) fn reply(u: &mut Unstructured<'_>) -> Result<Vec<Value>> {
    let n = u.int_in_range(0..=20)?;
    let mut v = Vec::with_capacity(n);
    for i in 0..n {
        v.push(if u.ratio(3, 4)? && i < 9 {
            let plausible = match i {
                0 => u.choose(&["ok", "rejected", "probe", "stale"])?.to_string(),
                1 => u
                    .choose(&["closed", "open", "half-open", "forced-open", "disabled"])?
                    .to_string(),
                8 => u.int_in_range(0..=7u8)?.to_string(),
                _ => u.arbitrary::<u64>()?.to_string(),
            };
            Value::BulkString(plausible.into_bytes())
        } else {
            value(u, 0)?
        });
    }
    Ok(v)
}

/// A reply decodes or is refused; what decodes is what its entries say: written again in its
/// wire form it decodes the same, the last transition carries the reply's epoch and the
/// epochs never go down.
pub(crate) fn parse_reply(raw: Vec<Value>) {
    let Some(summary) = fuzzing::parse_reply(raw) else {
        return;
    };
    assert!(summary.len() >= 16, "{summary:?}");
    let epoch: u64 = summary[2].parse().expect("the epoch is a number");
    let epochs: Vec<u64> = summary[16..]
        .iter()
        .map(|t| {
            t.rsplit_once('@')
                .expect("an epoch")
                .1
                .parse()
                .expect("a number")
        })
        .collect();
    assert!(epochs.windows(2).all(|w| w[0] <= w[1]), "{summary:?}");
    assert!(epochs.last().is_none_or(|e| *e == epoch), "{summary:?}");
    let wire: Vec<Value> = summary
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let s = if i >= 16 {
                s.rsplit_once('@').expect("an epoch").0
            } else {
                s.as_str()
            };
            Value::BulkString(s.as_bytes().to_vec())
        })
        .collect();
    assert_eq!(fuzzing::parse_reply(wire).as_ref(), Some(&summary));
}

/// `INFO` text: read without a panic; a field it names is read as written.
pub(crate) fn parse_info(info: &str) {
    let h = fuzzing::parse_info(info);
    if let Some(v) = info.lines().find_map(|l| l.strip_prefix("redis_version:")) {
        assert_eq!(h.redis_version, v.trim());
    }
}

/// A MessagePack value for a record field: numbers of every width and sign, floats, text,
/// nil, booleans, nested arrays and maps.
fn msgpack(u: &mut Unstructured<'_>, depth: u32) -> Result<rmpv::Value> {
    use rmpv::Value as M;
    Ok(match u.int_in_range(0..=11)? {
        0 | 1 => M::from(u.int_in_range(0..=1_000_000_000i64)?),
        2 => M::from(u.arbitrary::<i64>()?),
        3 => M::from(u.arbitrary::<u64>()?),
        4 => M::F64(
            u.choose(&[0.5, -1.0, f64::NAN, f64::INFINITY, 1e300, -0.0])?
                .to_owned(),
        ),
        5 => M::from(
            u.choose(&[
                "closed",
                "open",
                "half-open",
                "forced-open",
                "disabled",
                "metrics-only",
                "",
                "x",
            ])?
            .to_owned(),
        ),
        6 => M::Binary(u.arbitrary()?),
        7 => M::Nil,
        8 => M::Boolean(u.arbitrary()?),
        9 if depth < 2 => M::Array(vec![msgpack(u, depth + 1)?, msgpack(u, depth + 1)?]),
        10 if depth < 2 => M::Map(vec![(
            M::from(u.arbitrary::<String>()?),
            msgpack(u, depth + 1)?,
        )]),
        _ => M::from(u.arbitrary::<String>()?),
    })
}

/// The record's fields, as `breaker.lua` names them.
const FIELDS: [&str; 32] = [
    "ab", "cf", "cs", "eo", "ep", "hs", "ld", "lk", "ln", "lt", "lv", "nse", "o", "ou", "ox", "rf",
    "rr", "rs", "ru", "st", "tc", "tf", "th", "tr", "ts", "wc", "wf", "wq", "wr", "ws", "wx", "xa",
];

/// What a record in Redis may hold: MessagePack bytes of a map of the record's fields with
/// hostile values, of another value, or not MessagePack at all.
pub(crate) fn record(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    use rmpv::Value as M;
    let value = match u.int_in_range(0..=7)? {
        0 => return u.arbitrary(),
        1 => msgpack(u, 0)?,
        _ => {
            let mut m = Vec::new();
            for _ in 0..u.int_in_range(0..=12)? {
                let k = if u.ratio(7, 8)? {
                    M::from(*u.choose(&FIELDS)?)
                } else {
                    msgpack(u, 1)?
                };
                m.push((k, msgpack(u, 0)?));
            }
            M::Map(m)
        }
    };
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &value).expect("encoding into memory");
    Ok(out)
}

struct Store {
    server: RedisServer,
    client: redis::Client,
    runtime: tokio::runtime::Runtime,
    conn: std::sync::Mutex<redis::Connection>,
}

static STORE: LazyLock<Store> = LazyLock::new(|| {
    let server = RedisServer::start().expect("redis-server (the Redis checks need it)");
    let client = redis::Client::open(server.url()).expect("a client");
    let conn = client.get_connection().expect("a connection");
    Store {
        client,
        runtime: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime"),
        server,
        conn: std::sync::Mutex::new(conn),
    }
});

/// A record found in Redis, whatever it holds (another version's, a hand edit, a bit flip):
/// the breaker's calls neither fail nor leave it so: reading, acquiring, recording and the
/// operator's actions all get an answer from Redis, and the record they leave reads back as
/// a record of a known state.
pub(crate) fn stored_record(bytes: &[u8]) {
    let store = &*STORE;
    let _rt = store.runtime.enter();
    let shared = SharedConfig::builder()
        .time_source(TimeSource::Local)
        .redis_timeout(Duration::from_secs(10))
        .replica_id("fuzz")
        .build()
        .expect("a shared configuration");
    let config = BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(2)
        .build()
        .expect("a configuration");
    let b = SharedBreaker::with_clock(
        "fuzz",
        config,
        shared,
        Backend::single(&store.server.url()).expect("a backend"),
        ManualClock::new(),
    )
    .expect("a breaker");
    {
        let mut c = store.conn.lock().unwrap_or_else(|p| p.into_inner());
        let keys = b.keys();
        // libFuzzer's timer (SIGALRM) can interrupt a blocking call: retry it.
        let mut run = |cmd: &redis::Cmd| {
            let mut last = None;
            for _ in 0..5 {
                match cmd.query::<()>(&mut *c) {
                    Ok(()) => return,
                    // The reply may be half read: start on a new connection.
                    Err(e) if e.is_io_error() => {
                        last = Some(e);
                        if let Ok(fresh) = store.client.get_connection() {
                            *c = fresh;
                        }
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            panic!("{last:?}");
        };
        run(redis::cmd("DEL").arg(&keys.all()[..]));
        run(redis::cmd("SET").arg(&keys.record).arg(bytes));
    }
    let rt = &store.runtime;
    let snapshot = rt.block_on(b.refresh());
    assert!(
        snapshot.is_ok(),
        "reading a record {bytes:?} fails: {snapshot:?}"
    );
    if let Ok(p) = rt.block_on(b.acquire()) {
        let _ = rt.block_on(p.record(Outcome::Failure));
    }
    assert!(
        rt.block_on(b.force_open()).is_ok(),
        "{:?}",
        b.last_redis_error()
    );
    assert!(rt.block_on(b.reset()).is_ok(), "{:?}", b.last_redis_error());
    assert_eq!(b.last_redis_error(), None, "after a record {bytes:?}");
    let after = rt.block_on(b.refresh());
    assert!(
        after.is_ok(),
        "after a record {bytes:?} the record left reads: {after:?}"
    );
}
