//! A user's random generator, shared by the calls of one policy (the fault injector, the
//! throttle, the partial breaker) and drawn from with no lock held while it runs.
//!
//! # The lock
//!
//! `rng` guards only the slot the generator sits in: a call takes the generator out, draws
//! from it with the lock released, and puts it back (also when the generator panics). No user
//! code runs under it, so a generator may call back into the policy it draws for. A call that
//! finds the slot empty (the generator is out: another thread is drawing, or the generator
//! itself called back in) draws from the policy's spare stream instead (splitmix64 over an
//! atomic counter: uniform, and lock-free), so no call ever waits for another's draw. Calls
//! made one at a time draw every number from the generator, in order: a seeded generator
//! replays the same run.

use std::sync::atomic::Ordering;

use rand::RngCore;

use crate::sync::{AtomicU64, Mutex, lock};

type Generator = Box<dyn RngCore + Send>;

/// The generator and the spare stream. See the [module docs](self).
pub(crate) struct Draws {
    rng: Mutex<Option<Generator>>,
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
            rng: Mutex::new(Some(Box::new(rng))),
            spare: AtomicU64::new(0x243F_6A88_85A3_08D3),
        }
    }

    /// Runs `f` with the generator (or the spare stream, if the generator is out), no lock
    /// held while `f` draws.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut dyn RngCore) -> R) -> R {
        let taken = lock(&self.rng).take();
        match taken {
            Some(rng) => {
                let mut out = Out {
                    slot: &self.rng,
                    rng: Some(rng),
                };
                match out.rng.as_deref_mut() {
                    Some(rng) => f(rng),
                    None => f(&mut Spare(&self.spare)),
                }
            }
            None => f(&mut Spare(&self.spare)),
        }
    }
}

/// The generator while it is out of its slot; dropping it (after the draw, or while a
/// panicking generator unwinds) puts it back.
struct Out<'a> {
    slot: &'a Mutex<Option<Generator>>,
    rng: Option<Generator>,
}

impl Drop for Out<'_> {
    fn drop(&mut self) {
        *lock(self.slot) = self.rng.take();
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
