//! The synchronisation primitives the breaker and the registry use, switched to loom's under
//! `--cfg loom` (the model checker explores every interleaving of the atomic kernel) and to
//! shuttle's under `--cfg shuttle` (randomized schedules of whole lifecycles: lookups,
//! evictions, reloads, overrides, with listeners that call back in).

#[cfg(loom)]
pub(crate) use loom::sync::{
    Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
};
#[cfg(all(shuttle, not(loom)))]
pub(crate) use shuttle::sync::{
    Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
};
#[cfg(not(any(loom, shuttle)))]
pub(crate) use std::sync::{
    Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
};

/// A 128-bit atomic: `portable_atomic`'s (one `cmpxchg16b` on x86-64, `casp`/`ldxp` on
/// AArch64, chosen at run time where the target does not promise it), so a window cell or an
/// in-flight cohort can carry a full 64-bit time beside its counts and generation tag.
#[cfg(not(any(loom, shuttle)))]
pub(crate) use portable_atomic::AtomicU128;

/// Under a model checker, a 128-bit atomic modelled by a mutex: each operation is one
/// indivisible step, which is what the checker needs to explore the interleavings around it.
#[cfg(any(loom, shuttle))]
#[derive(Debug)]
pub(crate) struct AtomicU128(Mutex<u128>);

#[cfg(any(loom, shuttle))]
impl AtomicU128 {
    pub(crate) fn new(v: u128) -> Self {
        Self(Mutex::new(v))
    }
    pub(crate) fn load(&self, _: Ordering) -> u128 {
        *lock(&self.0)
    }
    pub(crate) fn store(&self, v: u128, _: Ordering) {
        *lock(&self.0) = v;
    }
    pub(crate) fn compare_exchange_weak(
        &self,
        current: u128,
        new: u128,
        _: Ordering,
        _: Ordering,
    ) -> Result<u128, u128> {
        let mut g = lock(&self.0);
        if *g == current {
            *g = new;
            Ok(current)
        } else {
            Err(*g)
        }
    }
    pub(crate) fn compare_exchange(
        &self,
        current: u128,
        new: u128,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u128, u128> {
        self.compare_exchange_weak(current, new, success, failure)
    }
    pub(crate) fn fetch_sub(&self, v: u128, _: Ordering) -> u128 {
        let mut g = lock(&self.0);
        let old = *g;
        *g = old.wrapping_sub(v);
        old
    }
    pub(crate) fn fetch_or(&self, v: u128, _: Ordering) -> u128 {
        let mut g = lock(&self.0);
        let old = *g;
        *g = old | v;
        old
    }
}

/// Lets another thread run: the model checker's yield under loom and shuttle (a loop waiting
/// for another thread must yield there, or the schedule never reaches that thread).
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(all(shuttle, not(loom)))]
    shuttle::thread::yield_now();
    #[cfg(not(any(loom, shuttle)))]
    std::thread::yield_now();
}

/// Waits a moment for another thread to finish a short critical step (a window writer that
/// must complete before a reset may clear its bits, an entry being retired).
#[inline]
pub(crate) fn spin(round: u32) {
    #[cfg(any(loom, shuttle))]
    {
        let _ = round;
        yield_now();
    }
    #[cfg(not(any(loom, shuttle)))]
    {
        if round < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Locks a mutex; a poisoned lock (a panicking thread elsewhere) is still usable because
/// every critical section leaves the protected state consistent before it can panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes a read lock, as [`lock`] does.
pub(crate) fn read<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}

/// Takes a write lock, as [`lock`] does.
pub(crate) fn write<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|e| e.into_inner())
}

/// The stripe a thread writes to, for structures that spread writers over several cache lines.
#[cfg(not(any(loom, shuttle)))]
pub(crate) fn stripe_index() -> usize {
    use std::cell::Cell;
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        s.set(v);
        v
    })
}

#[cfg(any(loom, shuttle))]
pub(crate) fn stripe_index() -> usize {
    0
}

/// Generation tags: the low bits of a generation, stored beside data so that a writer of an
/// older generation can never land in a newer generation's cohort or run. Every tag is at
/// least 44 bits wide: two generations alias only 2^43 transitions apart (278 years at one
/// transition per millisecond).
pub(crate) mod tag {
    /// Whether `a` is a newer tag than `b`, for tags of `bits` bits that are less than half
    /// the tag space apart.
    #[inline]
    pub(crate) fn newer(a: u64, b: u64, bits: u32) -> bool {
        let d = a.wrapping_sub(b) & ((1u64 << bits) - 1);
        d != 0 && d < 1u64 << (bits - 1)
    }
}
