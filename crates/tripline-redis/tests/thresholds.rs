//! A threshold given as a fraction trips the fleet's breaker at exactly that fraction, as it
//! trips the in-process one: `100 k / n` percent trips at `k` bad calls of `n` and not at
//! `k - 1`, in the closed window and in the half-open round (the Lua functions compare the
//! same integers, the configuration's parts per million).

mod common;
use common::RedisSubject;

use std::time::Duration;

use tripline::conformance::Subject;
use tripline::{BreakerConfig, HalfOpenPolicy, Outcome, State};
use tripline_redis::server::RedisServer;

fn percent(k: u64, n: u64) -> f64 {
    100.0 * k as f64 / n as f64
}

/// `bad` failures first, then successes up to `n`, on a count window of `n`: whether the
/// fleet's breaker is Open after them.
fn window_trips(server: &RedisServer, n: u32, k: u64, bad: u64) -> bool {
    let config = BreakerConfig::builder()
        .count_window(n)
        .minimum_calls(n)
        .count_in_flight_as_slow(false)
        .failure_rate_threshold(percent(k, u64::from(n)))
        .build()
        .unwrap();
    let s = RedisSubject::single(
        &server.url(),
        config,
        &format!("window-{k}-of-{n}-bad-{bad}"),
        Duration::ZERO,
    );
    for i in 0..u64::from(n) {
        let p = s.acquire().unwrap();
        let o = if i < bad {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        let _ = s.record(p, o);
    }
    s.state() == State::Open
}

/// `k` of `n` for every `n` up to 12, and the ratios of thirds, halves and near-misses at
/// 99 and 100 calls.
#[test]
fn the_fleets_window_trips_at_exactly_k_of_n() {
    let server = RedisServer::start().expect("redis-server");
    let mut cases: Vec<(u32, u64)> = (1..=12u32)
        .flat_map(|n| (1..=u64::from(n)).map(move |k| (n, k)))
        .collect();
    for n in [99u32, 100] {
        let m = u64::from(n);
        cases.extend([m / 3, m / 3 + 1, m / 2, 2 * m / 3, 2 * m / 3 + 1, m - 1].map(|k| (n, k)));
    }
    let mut wrong = Vec::new();
    for (n, k) in cases {
        if !window_trips(&server, n, k, k) {
            wrong.push(format!("{k}/{n} did not trip at {k}"));
        }
        if window_trips(&server, n, k, k - 1) {
            wrong.push(format!("{k}/{n} tripped at {}", k - 1));
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}

/// failsafe-go's `WithFailureThresholdRatio(2, 3)` in the half-open round: 2 failed probes of
/// 3 reopen, 1 closes; and every `k` of `n` probes for `n` up to 6.
#[test]
fn the_fleets_half_open_round_reopens_at_exactly_k_of_n() {
    let server = RedisServer::start().expect("redis-server");
    let mut wrong = Vec::new();
    for n in 1..=6u32 {
        for k in 1..=u64::from(n) {
            for bad in [k - 1, k] {
                let config = BreakerConfig::builder()
                    .count_window(2)
                    .minimum_calls(1)
                    .count_in_flight_as_slow(false)
                    .failure_rate_threshold(percent(k, u64::from(n)))
                    .open_duration(Duration::from_secs(1))
                    .half_open_calls(n)
                    .half_open_policy(HalfOpenPolicy::AllProbes)
                    .probe_lease(Duration::from_secs(3600))
                    .build()
                    .unwrap();
                let s = RedisSubject::single(
                    &server.url(),
                    config,
                    &format!("round-{k}-of-{n}-bad-{bad}"),
                    Duration::ZERO,
                );
                // One failure trips the window (1 of 1 reaches any threshold).
                let p = s.acquire().unwrap();
                let _ = s.record(p, Outcome::Failure);
                assert_eq!(s.state(), State::Open);
                s.advance(Duration::from_secs(1));
                let probes: Vec<_> = (0..n).map(|_| s.acquire().unwrap()).collect();
                for (i, p) in probes.into_iter().enumerate() {
                    let o = if (i as u64) < bad {
                        Outcome::Failure
                    } else {
                        Outcome::Success
                    };
                    let _ = s.record(p, o);
                }
                let want = if bad == k { State::Open } else { State::Closed };
                let got = s.state();
                if got != want {
                    wrong.push(format!("{bad} failed of {n} at {k}/{n}: {got}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}
