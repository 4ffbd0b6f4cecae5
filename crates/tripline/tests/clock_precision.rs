//! A breaker reads its clock as precisely as its configuration needs, also after a
//! reconfiguration asks for finer time than the clock it was built on reads.

use std::time::Duration;

use tripline::registry::{Key, Registry, RegistryConfig};
use tripline::{BreakerConfig, CircuitBreaker, Clock, ManualClock, Outcome};

/// A clock whose readings lag to the last whole 2 ms, as a coarse clock's do, and which can
/// read precisely when asked.
#[derive(Clone, Debug, Default)]
struct Coarse(ManualClock);

const TICK: u64 = 2_000_000;

impl Clock for Coarse {
    fn now(&self) -> u64 {
        self.0.now() / TICK * TICK
    }
    fn resolution(&self) -> Duration {
        Duration::from_nanos(TICK)
    }
    fn precise_now(&self) -> u64 {
        self.0.now()
    }
}

/// Calls of 0.2 ms that each cross a tick of the coarse readings.
fn slow_calls<C: Clock>(b: &CircuitBreaker<C>, clock: &ManualClock) -> u64 {
    for _ in 0..10 {
        clock.advance(Duration::from_micros(1_900));
        let p = b.try_acquire().unwrap();
        clock.advance(Duration::from_micros(200));
        let _ = p.record(Outcome::Success);
    }
    b.metrics().slow_calls
}

fn fine() -> BreakerConfig {
    BreakerConfig::builder()
        .slow_call_duration(Duration::from_millis(1))
        .build()
        .unwrap()
}

#[test]
fn a_breaker_reconfigured_to_a_fine_rule_reads_precise_time() {
    let clock = Coarse::default();
    let b = CircuitBreaker::with_clock("db", BreakerConfig::default(), clock.clone());
    b.reconfigure(fine()).unwrap();
    assert_eq!(slow_calls(&b, &clock.0), 0, "0.2 ms calls counted as slow");
}

#[test]
fn a_breaker_built_on_a_coarse_clock_for_a_fine_rule_reads_precise_time() {
    let clock = Coarse::default();
    let b = CircuitBreaker::with_clock("db", fine(), clock.clone());
    assert_eq!(slow_calls(&b, &clock.0), 0, "0.2 ms calls counted as slow");
}

#[test]
fn a_registry_reloaded_with_a_fine_rule_reads_precise_time() {
    let clock = Coarse::default();
    let r = Registry::with_clock(RegistryConfig::default(), clock.clone()).unwrap();
    let key = Key::new("db").unwrap();
    r.get(&key).unwrap();
    r.reload(RegistryConfig::default().with_config("default", fine()))
        .unwrap();
    let b = r.get(&key).unwrap();
    assert_eq!(slow_calls(&b, &clock.0), 0, "0.2 ms calls counted as slow");
}

/// A clock whose cheap reading runs ahead of its full one (a contract no clock should break,
/// but one a hand-written clock may).
#[derive(Clone, Debug, Default)]
struct Ahead(ManualClock);

impl Clock for Ahead {
    fn now(&self) -> u64 {
        self.0.now()
    }
    fn recent(&self) -> u64 {
        self.0.now() + 1_000_000_000
    }
}

#[test]
fn an_open_breaker_on_a_clock_whose_recent_reading_runs_ahead_rejects_instead_of_spinning() {
    let clock = Ahead::default();
    let config = BreakerConfig::builder()
        .open_duration(Duration::from_secs(10))
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("ahead", config, clock.clone());
    b.trip();
    clock.0.advance(Duration::from_millis(9_500));
    let (tx, rx) = std::sync::mpsc::channel();
    let b2 = b.clone();
    std::thread::spawn(move || {
        let _ = tx.send(b2.try_acquire().map(|_| ()).map_err(|r| r.retry_after()));
    });
    // A liveness bound on a spin, not a measure of speed.
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("try_acquire spun for 10 s");
    assert_eq!(got, Err(Some(Duration::from_millis(500))));
    clock.0.advance(Duration::from_millis(500));
    assert!(b.try_acquire().unwrap().is_probe());
}
