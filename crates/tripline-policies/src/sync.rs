//! The synchronisation primitives of the policies whose concurrency is model-checked: std's,
//! and in the crate's own unit tests (`cargo test --lib`) shuttle's, so that the shuttle tests
//! (`src/model_tests.rs`) run the real detector, bulkhead and delivery code under thousands of
//! randomized schedules, with listeners, clocks and generators that call back in.
//!
//! Integration tests, doc tests, benches and users get std's: the switch is `cfg(test)`, which
//! only the library's own unit-test build sets. A unit test that touches a type built on these
//! primitives must therefore run inside `shuttle::check_random` (outside it, shuttle panics
//! with "not running inside a Shuttle test", which names the mistake).

#![allow(
    unused_imports,
    dead_code,
    reason = "each feature set uses its own part of the primitives"
)]

#[cfg(not(test))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(not(test))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(test)]
pub(crate) use shuttle::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(test)]
pub(crate) use shuttle::sync::{Mutex, MutexGuard};

/// Locks a mutex, ignoring poisoning: the state behind every lock of ours is valid after any
/// panic (a panicking user callback never runs under one).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
