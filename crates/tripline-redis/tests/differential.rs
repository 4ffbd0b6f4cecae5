//! Random configurations and step sequences, run side by side on the in-process breaker and
//! the Redis store: every decision, `Retry-After`, verdict, state and window must agree, with
//! calls in flight past the slow-call duration and quiet periods of hours and a year, and
//! every rule: failure-kind weights, lumping, ramps after recovery, where HalfOpen goes after
//! its maximum wait, the slow-call rule off, call durations, the failure-count-in-time rule,
//! and operator transitions (Open for a wait or until a time, HalfOpen, refused edges).

mod common;
use common::RedisSubject;

use std::time::Duration;

use proptest::prelude::*;
use tripline::conformance::{Action, LocalSubject, Subject, Vector, Wait};
use tripline::{
    AfterMaxWait, Backoff, BreakerConfig, Classification, FailureKind, HalfOpenPolicy, ManualClock,
    Outcome, RampCurve, RampUp, Rejected, State, WindowConfig,
};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig, TimeSource};

#[derive(Clone, Debug)]
enum Op {
    Acquire,
    Record(usize, Outcome),
    /// A failure of a kind.
    Fail(usize, FailureKind),
    Abandon(usize),
    Advance(u64),
    Tick,
    Operator(Action),
    Transition(State, Wait),
}

fn transition() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Transition(State::HalfOpen, Wait::Configured)),
        Just(Op::Transition(State::Open, Wait::Configured)),
        Just(Op::Transition(
            State::Open,
            Wait::For(Duration::from_secs(3))
        )),
        Just(Op::Transition(State::Open, Wait::For(Duration::ZERO))),
        Just(Op::Transition(State::Closed, Wait::Configured)),
        (0u64..20).prop_map(|s| Op::Transition(State::Open, Wait::Until(Duration::from_secs(s)))),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Acquire),
        6 => (any::<usize>(), prop_oneof![
            5 => Just(Outcome::Failure),
            4 => Just(Outcome::Success),
            1 => Just(Outcome::Ignored),
        ])
            .prop_map(|(i, o)| Op::Record(i, o)),
        2 => (any::<usize>(), prop_oneof![
            Just(FailureKind::Timeout),
            Just(FailureKind::RateLimited),
            Just(FailureKind::ServerError),
        ])
            .prop_map(|(i, k)| Op::Fail(i, k)),
        1 => any::<usize>().prop_map(Op::Abandon),
        3 => prop_oneof![Just(1u64), Just(250), Just(999), Just(1000), Just(2500), Just(10_000)]
            .prop_map(Op::Advance),
        // Long quiet periods: hours past the old 16-bit bucket stamps, and a year.
        1 => prop_oneof![
            Just(40_000_000u64), Just(65_536_000), Just(327_689_000), Just(31_536_000_000)
        ]
            .prop_map(Op::Advance),
        1 => Just(Op::Tick),
        1 => prop_oneof![
            Just(Action::ForceOpen),
            Just(Action::Disable),
            Just(Action::MetricsOnly),
            Just(Action::Reset),
        ]
        .prop_map(Op::Operator),
        1 => transition(),
    ]
}

/// The rules beyond the thresholds: failure-kind weights, lumping, a ramp after recovery,
/// Closed after the maximum half-open wait, the slow-call rule off, call durations.
fn extras() -> impl Strategy<Value = (bool, bool, bool, bool, bool, bool)> {
    (
        any::<bool>(),
        prop_oneof![3 => Just(false), 1 => Just(true)],
        prop_oneof![3 => Just(false), 1 => Just(true)],
        any::<bool>(),
        prop_oneof![4 => Just(false), 1 => Just(true)],
        any::<bool>(),
    )
}

fn config() -> impl Strategy<Value = BreakerConfig> {
    (
        prop_oneof![
            (4u32..8).prop_map(|size| WindowConfig::Count { size }),
            (2u64..6).prop_map(|n| WindowConfig::Time {
                length: Duration::from_secs(n),
                bucket: Duration::from_secs(1),
            }),
        ],
        1u32..5,
        prop_oneof![Just(50.0), Just(100.0), Just(33.3)],
        (
            prop_oneof![Just(None), (2u32..4).prop_map(Some)],
            prop_oneof![Just(None), (2u32..5, 1u64..6).prop_map(Some)],
        ),
        any::<bool>(),
        (1u32..4, any::<bool>()),
        prop_oneof![Just(None), Just(Some(Duration::from_secs(4)))],
        any::<bool>(),
        any::<bool>(),
        extras(),
    )
        .prop_map(
            |(
                window,
                min,
                rate,
                (consecutive, failure_count),
                in_flight,
                (k, all),
                max_wait,
                backoff,
                auto,
                (weights, lumping, ramp, to_closed, no_slow_rule, durations),
            )| {
                let mut b = BreakerConfig::builder()
                    .window(window)
                    .minimum_calls(min)
                    .failure_rate_threshold(rate)
                    .slow_call_rate_threshold(50.0)
                    .slow_call_duration(Duration::from_secs(2))
                    .count_in_flight_as_slow(in_flight)
                    .open_duration(Duration::from_secs(5))
                    .half_open_calls(k)
                    .half_open_policy(if all {
                        HalfOpenPolicy::AllProbes
                    } else {
                        HalfOpenPolicy::Consecutive
                    })
                    .probe_lease(Duration::from_secs(3))
                    .automatic_transition(auto);
                if let Some(n) = consecutive {
                    b = b.consecutive_failures(n);
                }
                if let Some((n, secs)) = failure_count {
                    b = b.failure_count(n, Duration::from_secs(secs));
                }
                if let Some(w) = max_wait {
                    b = b.half_open_max_wait(w);
                    if to_closed {
                        b = b.half_open_after_max_wait(AfterMaxWait::Closed);
                    }
                }
                if weights {
                    b = b
                        .failure_kind_weight(FailureKind::RateLimited, 0)
                        .failure_kind_weight(FailureKind::Timeout, 3);
                }
                if lumping {
                    b = b.lumping_interval(Duration::from_millis(1000));
                }
                if ramp {
                    b = b.ramp_up(RampUp {
                        from: 50.0,
                        over: Duration::from_secs(2),
                        steps: 2,
                        curve: RampCurve::Linear,
                    });
                }
                if no_slow_rule {
                    b = b.slow_call_rule(false);
                }
                if durations {
                    b = b.call_durations(true);
                }
                if backoff {
                    b = b.open_backoff(Backoff {
                        multiplier: 2.0,
                        max: Duration::from_secs(40),
                        healthy_after: Duration::from_secs(20),
                    });
                }
                b.build().unwrap()
            },
        )
}

fn decision<P>(r: &Result<P, Rejected>, probe: impl Fn(&P) -> bool) -> String {
    match r {
        Ok(p) if probe(p) => "probe".into(),
        Ok(_) => "permit".into(),
        Err(e) => format!("reject {} {:?}", e.state(), e.retry_after()),
    }
}

/// Runs `ops` on both hosts, returning the first disagreement.
fn compare(local: &LocalSubject, redis: &RedisSubject, ops: &[Op]) -> Result<(), String> {
    let mut lp = Vec::new();
    let mut rp = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let at = |what: &str, l: String, r: String| {
            Err(format!("step {i} {op:?} ({what}): local {l}, redis {r}"))
        };
        match op {
            Op::Acquire => {
                let l = local.acquire();
                let r = redis.acquire();
                let (dl, dr) = (
                    decision(&l, LocalSubject::is_probe),
                    decision(&r, RedisSubject::is_probe),
                );
                if dl != dr {
                    return at("acquire", dl, dr);
                }
                if let (Ok(l), Ok(r)) = (l, r) {
                    lp.push(l);
                    rp.push(r);
                }
            }
            Op::Record(n, _) | Op::Abandon(n) if !lp.is_empty() => {
                let idx = n % lp.len();
                let (l, r) = (lp.swap_remove(idx), rp.swap_remove(idx));
                if let Op::Record(_, o) = op {
                    let (vl, vr) = (local.record(l, *o), redis.record(r, *o));
                    if vl != vr {
                        return at("record", format!("{vl:?}"), format!("{vr:?}"));
                    }
                } else {
                    local.abandon(l);
                    redis.abandon(r);
                }
            }
            Op::Fail(n, kind) if !lp.is_empty() => {
                let idx = n % lp.len();
                let (l, r) = (lp.swap_remove(idx), rp.swap_remove(idx));
                let c = Classification::failure(*kind);
                let (vl, vr) = (local.record_classified(l, c), redis.record_classified(r, c));
                if vl != vr {
                    return at("record-classified", format!("{vl:?}"), format!("{vr:?}"));
                }
            }
            Op::Record(..) | Op::Abandon(_) | Op::Fail(..) => {}
            Op::Transition(to, wait) => {
                let (tl, tr) = (local.transition(*to, *wait), redis.transition(*to, *wait));
                if tl.is_ok() != tr.is_ok() {
                    return at("transition", format!("{tl:?}"), format!("{tr:?}"));
                }
            }
            Op::Advance(ms) => {
                local.advance(Duration::from_millis(*ms));
                redis.advance(Duration::from_millis(*ms));
            }
            Op::Tick => {
                local.tick();
                redis.tick();
            }
            Op::Operator(a) => {
                local.operator(*a);
                redis.operator(*a);
            }
        }
        let (tl, tr) = (local.take_transitions(), redis.take_transitions());
        if tl != tr {
            return at("transitions", format!("{tl:?}"), format!("{tr:?}"));
        }
        let (sl, sr) = (local.state(), redis.state());
        if sl != sr {
            return at("state", format!("{sl}"), format!("{sr}"));
        }
        let (wl, wr) = (local.window(), redis.window());
        if (wl.calls, wl.failures, wl.slow_calls) != (wr.calls, wr.failures, wr.slow_calls) {
            return at("window", format!("{wl:?}"), format!("{wr:?}"));
        }
        let (dl, dr) = (local.durations(), redis.durations());
        if dl != dr {
            return at("durations", format!("{dl:?}"), format!("{dr:?}"));
        }
    }
    Ok(())
}

fn run(view_ttl: Duration, mode: &str) {
    let server = RedisServer::start().expect("redis-server");
    let case = std::cell::Cell::new(0u32);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(96);
    proptest!(ProptestConfig::with_cases(cases), |(config in config(), ops in prop::collection::vec(op(), 1..60))| {
        case.set(case.get() + 1);
        let vector = Vector {
            name: "differential".into(),
            description: String::new(),
            config: config.clone(),
            steps: Vec::new(),
        };
        let local = LocalSubject::new(&vector);
        let redis = RedisSubject::single(&server.url(), config, &format!("{mode}:{}", case.get()), view_ttl);
        let verdict = compare(&local, &redis, &ops);
        prop_assert!(verdict.is_ok(), "{}", verdict.unwrap_err());
    });
}

#[test]
fn random_histories_agree_asking_redis_on_every_acquire() {
    run(Duration::ZERO, "exact");
}

#[test]
fn random_histories_agree_deciding_from_the_last_answer() {
    run(Duration::from_secs(3600), "view");
}

/// Batching changes when outcomes reach Redis, not what they do: outcomes recorded in order
/// and sent in batches of any size leave the same state and window as the same outcomes
/// recorded one by one in-process (the trip happens at the same outcome; the rest are stale).
#[test]
fn batches_agree_with_records_one_by_one() {
    let server = RedisServer::start().expect("redis-server");
    let case = std::cell::Cell::new(0u32);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(64);
    let outcome = prop_oneof![
        5 => Just(Outcome::Failure),
        4 => Just(Outcome::Success),
        1 => Just(Outcome::Ignored),
    ];
    proptest!(ProptestConfig::with_cases(cases), |(
        config in config().prop_map(|c| c.to_builder().count_in_flight_as_slow(false).build().unwrap()),
        max_batch in 1u32..20,
        outcomes in prop::collection::vec((outcome, any::<bool>()), 1..60),
    )| {
        case.set(case.get() + 1);
        let vector = Vector {
            name: "batching".into(),
            description: String::new(),
            config: config.clone(),
            steps: Vec::new(),
        };
        let local = LocalSubject::new(&vector);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let clock = ManualClock::new();
        let shared = SharedConfig::builder()
            .time_source(TimeSource::Local)
            .view_ttl(Duration::from_secs(3600))
            .redis_timeout(Duration::from_secs(1))
            .batching(tripline_redis::Batching { flush_every: Duration::from_secs(10), max_batch, success_wait: None })
            .build()
            .unwrap();
        let redis = {
            let _rt = rt.enter();
            SharedBreaker::with_clock(
                &format!("batching:{}", case.get()),
                config,
                shared,
                Backend::single(&server.url()).unwrap(),
                clock.clone(),
            )
            .unwrap()
        };
        // Permits first (slow ones started 3 s before the others), then the outcomes in order.
        let mut lp = Vec::new();
        let mut rp = Vec::new();
        for (i, (_, slow)) in outcomes.iter().enumerate() {
            if *slow {
                lp.push((i, local.acquire().unwrap()));
                rp.push(Some(rt.block_on(redis.acquire()).unwrap()));
            }
        }
        local.advance(Duration::from_secs(3));
        clock.advance(Duration::from_secs(3));
        for (i, (_, slow)) in outcomes.iter().enumerate() {
            if !*slow {
                lp.push((i, local.acquire().unwrap()));
                rp.push(Some(rt.block_on(redis.acquire()).unwrap()));
            }
        }
        let mut lp: Vec<_> = lp.into_iter().map(Some).collect();
        for (i, (o, _)) in outcomes.iter().enumerate() {
            let at = lp.iter().position(|p| p.as_ref().is_some_and(|(j, _)| *j == i)).unwrap();
            let (_, l) = lp[at].take().unwrap();
            let r = rp[at].take().unwrap();
            let _ = local.record(l, *o);
            let _ = rt.block_on(r.record(*o));
        }
        rt.block_on(redis.flush());
        let snap = rt.block_on(redis.refresh()).unwrap();
        prop_assert_eq!(local.state(), snap.state);
        let w = local.window();
        prop_assert_eq!((w.calls, w.failures, w.slow_calls), (snap.window.calls, snap.window.failures, snap.window.slow_calls));
    });
}
