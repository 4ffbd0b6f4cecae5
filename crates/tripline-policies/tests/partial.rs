//! The partial breaker on a manual clock: against the classic breaker over the same outcomes
//! (a sustained 20 % error rate, a hot shard, a total outage), lazy updates against a ticker,
//! long horizons, the tower layer, the pipeline, the gauges, bad input.
#![cfg(feature = "partial")]

mod support;

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use tripline::{BreakerConfig, CircuitBreaker, ManualClock, Outcome};
use tripline_policies::partial::{PartialBreaker, PartialConfig};

const TICK: Duration = Duration::from_millis(10); // 100 calls a second

fn partial(clock: &ManualClock, seed: u64) -> PartialBreaker {
    PartialBreaker::with_clock_and_rng(
        PartialConfig::default(),
        clock.clone(),
        Pcg64Mcg::seed_from_u64(seed),
    )
}

/// A classic breaker tuned to trip on this kind of failure: 10 % of the last 100 calls (at
/// least 50), open 5 s, then 10 probes judged together (resilience4j's policy). A breaker with
/// a 50 % threshold would not trip on a 20 % error rate at all, and so would not be the one
/// the comparison is about.
fn classic(clock: &ManualClock) -> CircuitBreaker<ManualClock> {
    let config = BreakerConfig::builder()
        .count_window(100)
        .minimum_calls(50)
        .failure_rate_threshold(10.0)
        .open_duration(Duration::from_secs(5))
        .half_open_calls(10)
        .build()
        .unwrap();
    CircuitBreaker::with_clock("classic", config, clock.clone())
}

/// What a guard did with the calls offered to it.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    offered: u32,
    rejected: u32,
    /// Rejected calls that would have succeeded.
    healthy_rejected: u32,
    /// Calls that reached the dependency and failed.
    failed: u32,
}

trait Guard {
    /// Offers one call whose outcome would be `fails`; whether it was admitted.
    fn offer(&self, fails: bool) -> bool;
}

impl Guard for CircuitBreaker<ManualClock> {
    fn offer(&self, fails: bool) -> bool {
        match self.try_acquire() {
            Ok(p) => {
                let _ = p.record(if fails {
                    Outcome::Failure
                } else {
                    Outcome::Success
                });
                true
            }
            Err(_) => false,
        }
    }
}

impl Guard for PartialBreaker {
    fn offer(&self, fails: bool) -> bool {
        match self.try_acquire() {
            Ok(p) => {
                p.record(if fails {
                    Outcome::Failure
                } else {
                    Outcome::Success
                });
                true
            }
            Err(_) => false,
        }
    }
}

/// Drives `guard` over the outcomes, one call per tick; tallies the calls from `from` on.
fn drive(guard: &impl Guard, clock: &ManualClock, outcomes: &[bool], from: usize) -> Tally {
    let mut t = Tally::default();
    for (i, &fails) in outcomes.iter().enumerate() {
        let admitted = guard.offer(fails);
        if i >= from {
            t.offered += 1;
            if admitted {
                t.failed += u32::from(fails);
            } else {
                t.rejected += 1;
                t.healthy_rejected += u32::from(!fails);
            }
        }
        clock.advance(TICK);
    }
    t
}

const WARM_UP: usize = 5 * 60 * 100; // five healthy minutes
const INCIDENT: usize = 5 * 60 * 100; // five minutes of incident

/// Five healthy minutes (1 % errors), then five minutes where each call fails as `fails` says.
fn outcomes(seed: u64, fails: impl Fn(&mut Pcg64Mcg, usize) -> bool) -> Vec<bool> {
    let mut rng = Pcg64Mcg::seed_from_u64(seed);
    (0..WARM_UP + INCIDENT)
        .map(|i| {
            if i < WARM_UP {
                rng.random_bool(0.01)
            } else {
                fails(&mut rng, i)
            }
        })
        .collect()
}

fn both(outcomes: &[bool]) -> (Tally, Tally) {
    let (c1, c2) = (ManualClock::new(), ManualClock::new());
    let classic = drive(&classic(&c1), &c1, outcomes, WARM_UP);
    let partial = drive(&partial(&c2, 11), &c2, outcomes, WARM_UP);
    (classic, partial)
}

/// A sustained 20 % error rate: the classic breaker, once tripped, keeps reopening (ten probes
/// at 20 % rarely show fewer than 10 % failures) and turns the 80 % of calls that would have
/// succeeded away with the rest; the partial breaker settles near Δ / (1 − Δ), with Δ the
/// excess over the ideal rate it learned in the healthy minutes (about 0.6 %): 24 %.
#[test]
fn on_a_sustained_20_percent_error_rate_far_fewer_healthy_calls_are_rejected() {
    let stream = outcomes(1, |rng, _| rng.random_bool(0.20));
    let (classic, partial) = both(&stream);
    eprintln!("20 %: classic {classic:?}\n      partial {partial:?}");
    assert!(
        classic.healthy_rejected > INCIDENT as u32 / 2,
        "the classic breaker trips on it: {classic:?}"
    );
    assert!(
        partial.healthy_rejected * 3 < classic.healthy_rejected,
        "partial {partial:?} vs classic {classic:?}"
    );
    let share = f64::from(partial.rejected) / f64::from(partial.offered);
    assert!((0.18..0.28).contains(&share), "{share}");
}

/// A hot shard: one shard in ten fails every call, the others none (a 10 % error rate over
/// the dependency). The classic breaker trips and short-circuits the nine healthy shards too.
#[test]
fn on_a_hot_shard_far_fewer_healthy_calls_are_rejected() {
    let stream = outcomes(2, |rng, _| rng.random_range(0..10) == 3);
    let (classic, partial) = both(&stream);
    eprintln!("hot shard: classic {classic:?}\n           partial {partial:?}");
    assert!(
        classic.healthy_rejected > INCIDENT as u32 / 2,
        "{classic:?}"
    );
    assert!(
        partial.healthy_rejected * 5 < classic.healthy_rejected,
        "partial {partial:?} vs classic {classic:?}"
    );
}

/// A total outage: the partial breaker still protects, rejecting the great majority of calls
/// (it lets a trickle through each time its window empties, the nearest thing it has to
/// probes).
#[test]
fn on_a_total_outage_it_still_protects() {
    let stream = outcomes(3, |_, _| true);
    let (classic, partial) = both(&stream);
    eprintln!("outage: classic {classic:?}\n        partial {partial:?}");
    let share = |t: Tally| f64::from(t.rejected) / f64::from(t.offered);
    assert!(share(classic) > 0.95, "{classic:?}");
    assert!(share(partial) > 0.9, "{partial:?}");
    // After the first seconds it is fully open most of the time.
    assert!(partial.failed < INCIDENT as u32 / 10, "{partial:?}");
}

#[test]
fn a_dependency_without_errors_is_never_rejected() {
    let stream = vec![false; WARM_UP + INCIDENT];
    let c = ManualClock::new();
    let t = drive(&partial(&c, 5), &c, &stream, 0);
    assert_eq!(t.rejected, 0, "{t:?}");
}

/// Semian's estimate of the ideal error rate converges down fast and up slowly, so under a
/// noisy rate it settles below the rate's mean, and part of the noise clears the dead zone: a
/// steady 1 % error rate (at 100 calls a second) has a fraction of a percent of its calls
/// rejected. The module docs say so; this pins the size.
#[test]
fn a_steady_one_percent_error_rate_costs_a_fraction_of_a_percent_of_calls() {
    let stream = outcomes(4, |rng, _| rng.random_bool(0.01));
    let c = ManualClock::new();
    let t = drive(&partial(&c, 5), &c, &stream, 0);
    let share = f64::from(t.rejected) / f64::from(t.offered);
    eprintln!("1 %: {t:?} ({:.3} % rejected)", share * 100.0);
    assert!(t.rejected > 0 && share < 0.005, "{t:?}");
}

/// The state at any instant is the one a thread ticking exactly on every boundary would have
/// produced: a breaker driven only by its calls decides exactly as one also ticked every 10 ms.
#[test]
fn lazy_updates_equal_a_ticker_on_every_boundary() {
    let stream = outcomes(6, |rng, i| {
        rng.random_bool(if i % 6000 < 3000 { 0.3 } else { 0.02 })
    });
    let (c1, c2) = (ManualClock::new(), ManualClock::new());
    let (lazy, ticked) = (partial(&c1, 9), partial(&c2, 9));
    for (i, &fails) in stream.iter().enumerate().take(20_000) {
        // Long silences now and then: no call for up to a minute.
        let gap = if i % 2_500 == 0 { 6_000 } else { 1 };
        assert_eq!(lazy.offer(fails), ticked.offer(fails), "call {i}");
        for _ in 0..gap {
            c1.advance(TICK);
            c2.advance(TICK);
            ticked.tick();
        }
    }
    assert_eq!(lazy.snapshot(), ticked.snapshot());
}

#[test]
fn after_ten_years_of_quiet_an_outage_is_forgotten_in_one_step() {
    let c = ManualClock::new();
    let b = partial(&c, 1);
    for _ in 0..3000 {
        b.offer(true);
        c.advance(TICK);
    }
    assert!(b.rejection_rate() > 0.5);
    c.advance(Duration::from_secs(10 * 365 * 86_400));
    assert!(b.try_acquire().is_ok());
    let s = b.snapshot();
    assert_eq!(s.rejection_rate, 0.0);
    assert_eq!(
        s.integral, -10.0,
        "at its lower cap after a decade of no errors"
    );
    assert!(
        s.updates > 10 * 365 * 86_400,
        "every boundary counted: {}",
        s.updates
    );
}

#[test]
fn a_clock_near_its_end_never_loops_or_wraps() {
    let c = ManualClock::new();
    c.set(Duration::from_nanos(u64::MAX - 5_000_000_000));
    let b = partial(&c, 1);
    for _ in 0..1000 {
        b.offer(true);
        c.advance(TICK);
    }
    assert_eq!(c.now_nanos(), u64::MAX);
    b.offer(false);
    b.tick();
    assert!((0.0..=1.0).contains(&b.rejection_rate()));
}

trait NowNanos {
    fn now_nanos(&self) -> u64;
}

impl NowNanos for ManualClock {
    fn now_nanos(&self) -> u64 {
        tripline::Clock::now(self)
    }
}

#[test]
fn the_defaults_are_semians() {
    let c = PartialConfig::default();
    assert_eq!((c.kp(), c.ki(), c.kd()), (1.0, 0.2, 0.0));
    assert_eq!(
        (c.integral_upper_cap(), c.integral_lower_cap()),
        (10.0, -10.0)
    );
    assert_eq!(
        (c.window(), c.interval()),
        (Duration::from_secs(10), Duration::from_secs(1))
    );
    assert_eq!(
        (
            c.dead_zone_ratio(),
            c.initial_error_rate(),
            c.ideal_error_rate_cap()
        ),
        (0.25, 0.05, 0.1)
    );
}

#[test]
fn bad_settings_are_refused_with_the_field_the_value_and_what_is_allowed() {
    let b = PartialConfig::builder;
    let cases = [
        (
            b().kp(-1.0).build().unwrap_err(),
            "kp must be in [0, 100], got -1",
        ),
        (
            b().kp(0.0).ki(0.0).build().unwrap_err(),
            "kp must be positive when ki is 0 (with both 0 the breaker never rejects), got 0",
        ),
        (
            b().kd(f64::INFINITY).build().unwrap_err(),
            "kd must be in [0, 100], got inf",
        ),
        (
            b().integral_lower_cap(1.0).build().unwrap_err(),
            "integral_lower_cap must be in [-1000, 0], got 1",
        ),
        (
            b().window(Duration::from_millis(1500)).build().unwrap_err(),
            "window must be a whole number (1 to 3600) of intervals of 1s, got 1.5s",
        ),
        (
            b().interval(Duration::from_micros(10)).build().unwrap_err(),
            "interval must be in [1ms, window = 10s], got 10µs",
        ),
        (
            b().ideal_error_rate_cap(1.0).build().unwrap_err(),
            "ideal_error_rate_cap must be in [0, 1), got 1",
        ),
        (
            b().dead_zone_ratio(11.0).build().unwrap_err(),
            "dead_zone_ratio must be in [0, 10], got 11",
        ),
    ];
    for (e, want) in cases {
        assert_eq!(e.to_string(), want);
    }
}

#[cfg(feature = "tower")]
#[tokio::test(start_paused = true)]
async fn the_tower_layer_rejects_with_the_rate_and_records_what_the_dependency_did() {
    use tower::{Layer, ServiceExt, service_fn};
    use tripline_policies::BoxError;
    use tripline_policies::partial::{PartialLayer, PartiallyOpen};

    let clock = ManualClock::new();
    let b = partial(&clock, 2);
    let svc = PartialLayer::new(b.clone()).layer(service_fn(|fail: bool| async move {
        if fail {
            Err::<(), BoxError>("503".into())
        } else {
            Ok(())
        }
    }));
    let mut rejected = None;
    for _ in 0..3000 {
        if let Err(e) = svc.clone().oneshot(true).await {
            if let Some(r) = e.downcast_ref::<PartiallyOpen>() {
                rejected = Some(*r);
            }
        }
        clock.advance(TICK);
    }
    let r = rejected.expect("opened");
    assert!(r.rejection_rate() > 0.0);
    let s = b.snapshot();
    assert!(s.rejected > 0 && s.admitted > 0, "{s:?}");
    assert_eq!(s.error_rate, 1.0);
}

#[cfg(feature = "pipeline")]
#[tokio::test(start_paused = true)]
async fn in_the_pipeline_a_partial_rejection_is_local_and_timeouts_are_failures() {
    use tripline_policies::pipeline::{Pipeline, PipelineError, Stage};
    let clock = ManualClock::new();
    let b = partial(&clock, 3);
    let breaker = support::small_breaker("beside");
    let pipeline = Pipeline::builder()
        .partial(b.clone())
        .breaker(breaker.clone())
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    assert_eq!(
        pipeline.order(),
        [Stage::Breaker, Stage::Partial, Stage::Timeout]
    );
    breaker.metrics_only(); // the classic one records but never trips: the partial one decides
    let mut partial_rejections = 0;
    for _ in 0..2000 {
        let r = pipeline
            .call(|| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok::<_, support::Boom>(())
            })
            .await;
        match r {
            Err(PipelineError::PartiallyOpen(_)) => partial_rejections += 1,
            Err(PipelineError::Timeout(_)) => {}
            other => panic!("{other:?}"),
        }
        clock.advance(TICK);
    }
    assert!(partial_rejections > 1000, "{partial_rejections}");
    assert!(b.snapshot().error_rate > 0.99, "timeouts count as failures");
    let m = breaker.metrics();
    assert_eq!(
        m.ignored_calls, partial_rejections,
        "a partial rejection is a local refusal"
    );
    assert_eq!(m.failed_calls, 2000 - partial_rejections);
}

#[cfg(feature = "metrics")]
#[test]
fn the_gauges_show_the_rates() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tripline_policies::partial::PartialMetrics;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let b = partial(&clock, 4);
    metrics::with_local_recorder(&recorder, || {
        let m = PartialMetrics::new("catalog", Vec::new());
        for _ in 0..1000 {
            b.offer(true);
            clock.advance(TICK);
        }
        m.update(&b);
    });
    let s = b.snapshot();
    let mut gauges = std::collections::HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        if let DebugValue::Gauge(g) = value {
            gauges.insert(key.key().name().to_string(), g.into_inner());
        }
    }
    assert_eq!(gauges["tripline_partial_rejection_rate"], s.rejection_rate);
    assert_eq!(gauges["tripline_partial_error_rate"], 1.0);
    assert_eq!(gauges["tripline_partial_ideal_error_rate"], 0.05);
}

/// A generator that counts its draws.
#[derive(Clone, Default)]
struct Counting(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl rand::RngCore for Counting {
    fn next_u32(&mut self) -> u32 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        u32::MAX
    }
    fn next_u64(&mut self) -> u64 {
        u64::from(self.next_u32())
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        dst.fill(0xff);
    }
}

/// The module docs' promise: no number is drawn while the rejection rate is zero.
#[test]
fn nothing_is_drawn_while_the_rate_is_zero() {
    let c = ManualClock::new();
    let draws = Counting::default();
    let b = PartialBreaker::with_clock_and_rng(PartialConfig::default(), c.clone(), draws.clone());
    for _ in 0..10_000 {
        b.offer(false);
        c.advance(TICK);
    }
    assert_eq!(draws.0.load(std::sync::atomic::Ordering::SeqCst), 0);
    for _ in 0..2_000 {
        b.offer(true);
        c.advance(TICK);
    }
    assert!(
        draws.0.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "draws once partly open"
    );
}

/// Real threads calling and recording while another moves the clock, for a bounded number of
/// rounds: every call is counted once, admitted or rejected, and the rate stays in [0, 1].
#[test]
fn under_real_threads_every_call_is_counted_and_the_rate_stays_in_bounds() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let c = ManualClock::new();
    let b = partial(&c, 8);
    let done = Arc::new(AtomicBool::new(false));
    let ticker = std::thread::spawn({
        let (c, done) = (c.clone(), Arc::clone(&done));
        move || {
            while !done.load(Ordering::SeqCst) {
                c.advance(Duration::from_millis(50));
                std::thread::yield_now();
            }
        }
    });
    let callers: Vec<_> = (0..3u64)
        .map(|t| {
            let b = b.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u64 {
                    if let Ok(p) = b.try_acquire() {
                        p.record(if (i + t) % 3 == 0 {
                            Outcome::Failure
                        } else {
                            Outcome::Success
                        });
                    }
                    assert!((0.0..=1.0).contains(&b.rejection_rate()));
                }
            })
        })
        .collect();
    for t in callers {
        t.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    ticker.join().unwrap();
    let s = b.snapshot();
    assert_eq!(s.admitted + s.rejected, 60_000);
    assert!((0.0..=1.0).contains(&s.rejection_rate));
}
