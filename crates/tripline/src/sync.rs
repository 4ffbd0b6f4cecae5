//! The synchronisation primitives the breaker uses, switched to loom's under `--cfg loom`
//! so the model checker can explore every interleaving of the atomic kernel.

#[cfg(loom)]
pub(crate) use loom::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering},
};
#[cfg(not(loom))]
pub(crate) use std::sync::{
    Mutex, MutexGuard,
    atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering},
};

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
