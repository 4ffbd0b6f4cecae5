//! A user's random generator, shared by the calls of one policy (the fault injector, the
//! throttle, the partial breaker) and drawn from with no lock held while it runs.
//!
//! # The lock
//!
//! `rng` holds the generator. It is only ever try-locked, never waited on: a call that takes
//! it draws and lets go; a call that finds it held (another thread is drawing, or the
//! generator itself called back into the policy) draws from the policy's spare stream instead
//! (splitmix64 over an atomic counter: uniform, and lock-free). So a generator may call back
//! into the policy it draws for without deadlock, and no call ever waits for another's draw.
//! Calls made one at a time draw every number from the generator, in order: a seeded generator
//! replays the same run. A generator that panics leaves the lock poisoned, which changes
//! nothing: the next draw takes it as usual.

use std::sync::atomic::Ordering;

use rand::RngCore;

use crate::sync::{AtomicU64, Mutex};

/// The generator and the spare stream. See the [module docs](self).
pub(crate) struct Draws {
    rng: Mutex<Box<dyn RngCore + Send>>,
    spare: AtomicU64,
}

impl std::fmt::Debug for Draws {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Draws").finish_non_exhaustive()
    }
}

impl Draws {
    pub(crate) fn new(rng: impl RngCore + Send + 'static) -> Self {
        Self {
            rng: Mutex::new(Box::new(rng)),
            spare: AtomicU64::new(0x243F_6A88_85A3_08D3),
        }
    }

    /// Runs `f` with the generator, or with the spare stream if the generator is in use.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut dyn RngCore) -> R) -> R {
        let held = match self.rng.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        match held {
            Some(mut g) => f(&mut **g),
            None => f(&mut Spare(&self.spare)),
        }
    }
}

/// splitmix64 over a shared counter.
struct Spare<'a>(&'a AtomicU64);

impl RngCore for Spare<'_> {
    fn next_u64(&mut self) -> u64 {
        let mut z = self
            .0
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}
