//! Shared helpers: breakers on tokio's paused clock, a random generator whose draw the test
//! sets, and a counted mock service.
#![allow(
    dead_code,
    unreachable_pub,
    reason = "each test binary uses a different part of the shared helpers"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tripline::{BreakerConfig, CircuitBreaker, TokioClock};

/// A breaker that opens on 50% failures over the last 4 calls (at least 4), stays open 10 s,
/// and closes after 1 successful probe.
pub fn small_breaker(name: &'static str) -> CircuitBreaker<TokioClock> {
    let config = BreakerConfig::builder()
        .count_window(4)
        .minimum_calls(4)
        .failure_rate_threshold(50.0)
        .open_duration(Duration::from_secs(10))
        .half_open_calls(1)
        .build()
        .unwrap();
    CircuitBreaker::with_clock(name, config, TokioClock::new())
}

/// A random generator whose every 32-bit draw is the value the test stores.
#[derive(Clone, Debug, Default)]
pub struct FixedRng(pub Arc<AtomicU32>);

impl FixedRng {
    pub fn new(u: u32) -> Self {
        Self(Arc::new(AtomicU32::new(u)))
    }
    pub fn set(&self, u: u32) {
        self.0.store(u, Ordering::SeqCst);
    }
}

impl rand::RngCore for FixedRng {
    fn next_u32(&mut self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
    fn next_u64(&mut self) -> u64 {
        u64::from(self.next_u32()) << 32 | u64::from(self.next_u32())
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(4) {
            let b = self.next_u32().to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
    }
}

/// Counts calls.
#[derive(Clone, Debug, Default)]
pub struct Calls(pub Arc<AtomicU32>);

impl Calls {
    pub fn bump(&self) -> u32 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A plain error type for mock dependencies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boom(pub &'static str);

impl std::fmt::Display for Boom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Boom {}
