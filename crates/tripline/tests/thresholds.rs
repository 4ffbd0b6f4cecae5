//! A threshold given as a fraction trips at exactly that fraction: `100 k / n` percent trips
//! at `k` bad calls of `n`, and not at `k - 1`, for every `k / n` with `n` up to 1000, in the
//! closed window and in the half-open round, for failures and slow calls alike.

use std::time::Duration;

use tripline::{BreakerConfig, CircuitBreaker, HalfOpenPolicy, ManualClock, Outcome, State};

fn percent(k: u64, n: u64) -> f64 {
    100.0 * k as f64 / n as f64
}

/// The documented comparison (`BreakerConfig::failure_ppm`): `bad × 10⁶ ≥ ppm × total`.
fn reaches(bad: u64, total: u64, ppm: u64) -> bool {
    bad * 1_000_000 >= ppm * total
}

#[test]
fn every_k_of_n_threshold_in_parts_per_million_trips_at_exactly_k_of_n() {
    let mut wrong = Vec::new();
    for n in 1..=1000u64 {
        for k in 1..=n {
            let c = BreakerConfig::builder()
                .failure_rate_threshold(percent(k, n))
                .slow_call_rate_threshold(percent(k, n))
                .build()
                .unwrap();
            for (rule, ppm) in [("failure", c.failure_ppm()), ("slow", c.slow_ppm())] {
                if !reaches(k, n, ppm) || reaches(k - 1, n, ppm) {
                    wrong.push(format!("{rule} {k}/{n}: {ppm} ppm"));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} thresholds round against the user, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
}

fn breaker(n: u32, k: u64, slow: bool) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let b = BreakerConfig::builder()
        .count_window(n)
        .minimum_calls(n)
        .count_in_flight_as_slow(false)
        .slow_call_duration(Duration::from_secs(1));
    let b = if slow {
        b.slow_call_rate_threshold(percent(k, u64::from(n)))
            .failure_rate_threshold(100.0)
    } else {
        b.failure_rate_threshold(percent(k, u64::from(n)))
    };
    let clock = ManualClock::new();
    (
        CircuitBreaker::with_clock("k-of-n", b.build().unwrap(), clock.clone()),
        clock,
    )
}

/// `bad` bad calls first, then good ones up to `n`: whether the breaker is Open after them.
fn trips(n: u32, k: u64, bad: u64, slow: bool) -> bool {
    let (b, clock) = breaker(n, k, slow);
    for i in 0..u64::from(n) {
        let p = b.try_acquire().unwrap();
        if i < bad {
            if slow {
                clock.advance(Duration::from_secs(2));
                let _ = p.record(Outcome::Success);
            } else {
                let _ = p.record(Outcome::Failure);
            }
        } else {
            let _ = p.record(Outcome::Success);
        }
    }
    b.state() == State::Open
}

fn k_of_n_in_the_window(ns: impl Iterator<Item = u32>, ks: impl Fn(u32) -> Vec<u64>) {
    let mut wrong = Vec::new();
    for n in ns {
        for k in ks(n) {
            for slow in [false, true] {
                if !trips(n, k, k, slow) {
                    wrong.push(format!("{k}/{n} (slow {slow}) did not trip at {k}"));
                }
                if trips(n, k, k - 1, slow) {
                    wrong.push(format!("{k}/{n} (slow {slow}) tripped at {}", k - 1));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}

#[test]
fn a_window_trips_at_exactly_k_of_n_for_every_small_n() {
    k_of_n_in_the_window(1..=40, |n| (1..=u64::from(n)).collect());
}

#[test]
fn a_window_trips_at_exactly_k_of_n_for_large_n() {
    k_of_n_in_the_window([97, 99, 100, 999, 1000].into_iter(), |n| {
        let n = u64::from(n);
        let mut ks: Vec<u64> = (1..=n).step_by(37).collect();
        ks.extend([n / 3, n / 3 + 1, n / 2, 2 * n / 3, 2 * n / 3 + 1, n - 1, n]);
        ks.retain(|k| *k >= 1);
        ks.sort_unstable();
        ks.dedup();
        ks
    });
}

/// A half-open round of `n` probes whose threshold is `k / n`: `k` failed (or slow) probes
/// reopen, `k - 1` close (failsafe-go's `WithFailureThresholdRatio(2, 3)`: 2 of 3 reopens).
#[test]
fn a_half_open_round_reopens_at_exactly_k_of_n() {
    let mut wrong = Vec::new();
    for n in 1..=30u32 {
        for k in 1..=u64::from(n) {
            for slow in [false, true] {
                for bad in [k - 1, k] {
                    let c = BreakerConfig::builder()
                        .count_in_flight_as_slow(false)
                        .slow_call_duration(Duration::from_secs(1))
                        .open_duration(Duration::from_secs(1))
                        .half_open_calls(n)
                        .half_open_policy(HalfOpenPolicy::AllProbes)
                        .probe_lease(Duration::from_secs(3600));
                    let c = if slow {
                        c.slow_call_rate_threshold(percent(k, u64::from(n)))
                    } else {
                        c.failure_rate_threshold(percent(k, u64::from(n)))
                    };
                    let clock = ManualClock::new();
                    let b = CircuitBreaker::with_clock("round", c.build().unwrap(), clock.clone());
                    b.trip();
                    clock.advance(Duration::from_secs(1));
                    let probes: Vec<_> = (0..n).map(|_| b.try_acquire().unwrap()).collect();
                    if slow {
                        clock.advance(Duration::from_secs(2));
                    }
                    for (i, p) in probes.into_iter().enumerate() {
                        let o = if (i as u64) < bad && !slow {
                            Outcome::Failure
                        } else {
                            Outcome::Success
                        };
                        if slow && (i as u64) >= bad {
                            // Good probes must not be slow: record them with a short duration.
                            let _ = p.record_with_duration(o, Duration::from_millis(1));
                        } else {
                            let _ = p.record(o);
                        }
                    }
                    let want = if bad == k { State::Open } else { State::Closed };
                    if b.state() != want {
                        wrong.push(format!("{bad} bad of {n} at {k}/{n} (slow {slow})"));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}
