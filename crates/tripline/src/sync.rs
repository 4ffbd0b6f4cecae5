//! The synchronisation primitives the breaker uses, switched to loom's under `--cfg loom`
//! so the model checker can explore every interleaving of the atomic kernel.

#[cfg(loom)]
pub(crate) use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
};

/// A 128-bit atomic: `portable_atomic`'s (one `cmpxchg16b` on x86-64, `casp`/`ldxp` on
/// AArch64, chosen at run time where the target does not promise it), so a window cell or an
/// in-flight cohort can carry a full 64-bit time beside its counts and generation tag.
#[cfg(not(loom))]
pub(crate) use portable_atomic::AtomicU128;

/// Under loom, a 128-bit atomic modelled by a mutex: each operation is one indivisible step,
/// which is what loom needs to explore the interleavings around it.
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

#[cfg(loom)]
impl AtomicU128 {
    pub(crate) fn new(v: u128) -> Self {
        Self(loom::sync::Mutex::new(v))
    }
    pub(crate) fn load(&self, _: Ordering) -> u128 {
        *self.0.lock().unwrap()
    }
    pub(crate) fn compare_exchange_weak(
        &self,
        current: u128,
        new: u128,
        _: Ordering,
        _: Ordering,
    ) -> Result<u128, u128> {
        let mut g = self.0.lock().unwrap();
        if *g == current {
            *g = new;
            Ok(current)
        } else {
            Err(*g)
        }
    }
}

/// Waits a moment for another thread to finish a short critical step (a window writer that
/// must complete before a reset may clear its bits).
#[inline]
pub(crate) fn spin(round: u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        if round < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Locks a mutex; a poisoned lock (a panicking listener elsewhere) is still usable because
/// every critical section leaves the protected state consistent before it can panic.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(loom)]
    {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
    #[cfg(not(loom))]
    {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The stripe a thread writes to, for structures that spread writers over several cache lines.
#[cfg(not(loom))]
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

#[cfg(loom)]
pub(crate) fn stripe_index() -> usize {
    0
}

/// Generation tags: the low bits of a generation, stored beside data so that a writer of an
/// older generation can never land in a newer generation's window or cohort.
pub(crate) mod tag {
    /// Whether `a` is a newer tag than `b`, for tags of `bits` bits that are less than half
    /// the tag space apart (a writer would have to stall across 2^(bits-1) transitions).
    #[inline]
    pub(crate) fn newer(a: u64, b: u64, bits: u32) -> bool {
        let d = a.wrapping_sub(b) & ((1u64 << bits) - 1);
        d != 0 && d < 1u64 << (bits - 1)
    }
}
