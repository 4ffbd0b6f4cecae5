//! One call through each subject. Every function is `#[inline]` so that a benchmark loop
//! measures the call itself; results go through [`black_box`].
//!
//! The closed paths panic if the breaker rejects, and the open paths panic if it admits: a
//! benchmark that silently measured the wrong path would be worse than none.

use std::hint::black_box;

use tripline::{CircuitBreaker, Clock, Outcome};

/// Tripline, closed: `try_acquire` then `record(Success)`. The breaker reads the clock at both
/// ends for the slow-call rule.
#[inline]
pub fn tripline_permit_success<C: Clock>(b: &CircuitBreaker<C>) {
    let permit = b.try_acquire().expect("closed breaker admits");
    let _ = black_box(permit.record(black_box(Outcome::Success)));
}

/// Tripline, closed: `try_acquire` then `record_with_duration(Success, 1 ms)` (the caller's
/// own measure of the call).
#[inline]
pub fn tripline_permit_success_timed<C: Clock>(b: &CircuitBreaker<C>) {
    let permit = b.try_acquire().expect("closed breaker admits");
    let _ = black_box(permit.record_with_duration(
        black_box(Outcome::Success),
        black_box(std::time::Duration::from_millis(1)),
    ));
}

/// Tripline, closed: `try_acquire_owned` (a permit holding an `Arc` of the breaker, for
/// `'static` futures) then `record(Success)`.
#[inline]
pub fn tripline_owned_permit_success<C: Clock>(b: &CircuitBreaker<C>) {
    let permit = b.try_acquire_owned().expect("closed breaker admits");
    let _ = black_box(permit.record(black_box(Outcome::Success)));
}

/// Tripline, closed, through `call` with a closure returning `Ok`.
#[inline]
pub fn tripline_call<C: Clock>(b: &CircuitBreaker<C>) {
    let r = b.call(|| Ok::<u32, ()>(black_box(1)));
    black_box(r.expect("closed breaker admits"));
}

/// Tripline, open or forced open: `try_acquire` is rejected. The `Rejected` value is built
/// and dropped, as a caller would.
#[inline]
pub fn tripline_reject<C: Clock>(b: &CircuitBreaker<C>) {
    match b.try_acquire() {
        Err(rejected) => drop(black_box(rejected)),
        Ok(_) => panic!("open breaker admitted a call"),
    }
}

/// Recloser, closed: `call` with a closure returning `Ok` (permit and success).
#[inline]
pub fn recloser_success(r: &recloser::Recloser) {
    let v = r.call(|| Ok::<u32, ()>(black_box(1)));
    black_box(v.expect("closed recloser admits"));
}

/// Recloser, open: `call` is rejected.
#[inline]
pub fn recloser_reject(r: &recloser::Recloser) {
    match r.call(|| Ok::<u32, ()>(black_box(1))) {
        Err(recloser::Error::Rejected) => {}
        _ => panic!("open recloser admitted a call"),
    }
}

/// Failsafe, closed: `call` with a closure returning `Ok`.
#[inline]
pub fn failsafe_success(cb: &impl failsafe::CircuitBreaker) {
    let v = cb.call(|| Ok::<u32, ()>(black_box(1)));
    black_box(v.expect("closed failsafe admits"));
}

/// Failsafe, open: `call` is rejected.
#[inline]
pub fn failsafe_reject(cb: &impl failsafe::CircuitBreaker) {
    match cb.call(|| Ok::<u32, ()>(black_box(1))) {
        Err(failsafe::Error::Rejected) => {}
        _ => panic!("open failsafe admitted a call"),
    }
}
