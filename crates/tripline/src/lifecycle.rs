//! The lifecycle of a registry entry: live, retiring, gone.
//!
//! A lookup takes a handle and then checks that the entry is live; a retiring side (eviction,
//! a reload's rebuild) marks the entry retiring and then checks that no handle is held outside
//! the registry. Each side's write and its read are separated by a sequentially consistent
//! fence, so at least one side sees the other (the store-buffering case cannot happen): either
//! the lookup sees the entry retiring and drops its handle, or the retiring side sees the
//! handle and leaves the entry live. A lookup therefore never returns a breaker the registry
//! no longer holds, and a breaker with a handle out is never evicted or replaced.
//!
//! The same fence pairs a lookup of a freshly inserted entry with an operator override
//! change: the change moves a version and then walks the map; the lookup inserts and then
//! reads the version. One of the two sees the other, so the new breaker gets the override.
//!
//! The protocol uses the crate's synchronisation primitives, so loom checks it.

use crate::sync::{AtomicU8, Ordering, fence};

const LIVE: u8 = 0;
const RETIRING: u8 = 1;
const GONE: u8 = 2;

/// An entry's lifecycle word.
#[derive(Debug)]
pub(crate) struct Life(AtomicU8);

impl Life {
    pub(crate) fn new() -> Self {
        Self(AtomicU8::new(LIVE))
    }

    /// Takes a handle with `take` and keeps it if the entry is live; `None` (the handle
    /// dropped) if it is retiring or gone, and the caller looks again.
    #[inline]
    pub(crate) fn hold<T>(&self, take: impl FnOnce() -> T) -> Option<T> {
        let handle = take();
        fence(Ordering::SeqCst);
        (self.0.load(Ordering::Relaxed) == LIVE).then_some(handle)
    }

    /// Marks the entry retiring and asks `may_go` (which reads the handles held); if it
    /// refuses, the entry is live again. `true`: the caller must [`finish`](Self::finish).
    pub(crate) fn retire(&self, may_go: impl FnOnce() -> bool) -> bool {
        if self
            .0
            .compare_exchange(LIVE, RETIRING, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        fence(Ordering::SeqCst);
        if may_go() {
            true
        } else {
            self.0.store(LIVE, Ordering::Release);
            false
        }
    }

    /// Ends a retirement: `gone` when the entry left the map, else it is live again.
    pub(crate) fn finish(&self, gone: bool) {
        self.0
            .store(if gone { GONE } else { LIVE }, Ordering::Release);
    }
}

/// Between a write that publishes something (an entry inserted, an override version moved)
/// and the read that checks the other side's publication.
#[inline]
pub(crate) fn publish_fence() {
    fence(Ordering::SeqCst);
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::AtomicU64;
    use loom::sync::Arc;
    use loom::thread;

    /// A lookup racing an eviction: never both "the lookup kept its handle" and "the entry
    /// was retired". The handle count is a relaxed counter, as `Arc`'s strong count is.
    #[test]
    fn a_lookup_and_a_retirement_never_both_win() {
        loom::model(|| {
            let life = Arc::new(Life::new());
            let handles = Arc::new(AtomicU64::new(1)); // the registry's own
            let (l2, h2) = (life.clone(), handles.clone());
            let lookup = thread::spawn(move || {
                let kept = l2.hold(|| h2.fetch_add(1, Ordering::Relaxed)).is_some();
                if !kept {
                    h2.fetch_sub(1, Ordering::Relaxed);
                }
                kept
            });
            let retired = life.retire(|| handles.load(Ordering::Relaxed) <= 1);
            if retired {
                life.finish(true);
            }
            let kept = lookup.join().unwrap();
            assert!(
                !(kept && retired),
                "a handle to a retired entry was handed out"
            );
        });
    }

    /// A new entry's lookup racing an override change: either the lookup sees the new
    /// version, or the change's walk sees the entry.
    #[test]
    fn a_new_breaker_and_an_override_change_see_each_other() {
        loom::model(|| {
            let inserted = Arc::new(AtomicU64::new(0));
            let version = Arc::new(AtomicU64::new(0));
            let life = Arc::new(Life::new());
            let (i2, v2) = (inserted.clone(), version.clone());
            let change = thread::spawn(move || {
                v2.fetch_add(1, Ordering::Relaxed);
                publish_fence();
                i2.load(Ordering::Relaxed) == 1
            });
            inserted.store(1, Ordering::Release);
            let _ = life.hold(|| ());
            let saw_change = version.load(Ordering::Acquire) == 1;
            let walk_saw_entry = change.join().unwrap();
            assert!(saw_change || walk_saw_entry);
        });
    }
}
