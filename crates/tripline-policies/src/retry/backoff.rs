//! Exponential backoff with the three jitters of the AWS article "Exponential Backoff and
//! Jitter".

use std::time::Duration;

use rand::Rng;
use tripline::ConfigError;

/// The longest `base_delay` allowed.
pub const MAX_BASE_DELAY: Duration = Duration::from_secs(3600);
/// The longest `max_delay` allowed.
pub const MAX_DELAY: Duration = Duration::from_secs(86_400);

/// How a backoff delay is randomised. With `t = min(cap, base × 2ⁿ)` before retry `n`
/// (`n = 0` before the first retry):
///
/// | jitter | delay |
/// |---|---|
/// | `None` | `t` |
/// | `Full` | uniform in `[0, t]` |
/// | `Equal` | `t/2 + ` uniform in `[0, t/2]` |
/// | `Decorrelated` | `min(cap, ` uniform in `[base, 3 × previous])`, the previous delay starting at `base` |
///
/// Without jitter, clients that failed together retry together, in synchronised waves; full
/// jitter spreads them evenly and does the least work overall, which is why it is the default.
///
/// In a configuration file (feature `serde`): `"none"`, `"full"`, `"equal"` or
/// `"decorrelated"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "kebab-case")
)]
pub enum Jitter {
    /// No randomness: exactly `t`.
    None,
    /// Uniform in `[0, t]`.
    #[default]
    Full,
    /// Half of `t`, plus uniform in `[0, t/2]`.
    Equal,
    /// `min(cap, uniform in [base, 3 × previous delay])`.
    Decorrelated,
}

/// Exponential backoff, capped, with a [`Jitter`]. The exponent saturates: `base × 2ⁿ` is
/// computed without overflow for any `n`, so the thousandth retry waits the cap like the
/// twentieth.
///
/// ```
/// use std::time::Duration;
/// use rand::SeedableRng;
/// use tripline_policies::retry::{Backoff, Jitter};
///
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(20), Jitter::Full)?;
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(800));
/// assert_eq!(backoff.ceiling(1000), Duration::from_secs(20));
///
/// let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(7);
/// let d = backoff.delay(3, backoff.base(), &mut rng);
/// assert!(d <= Duration::from_millis(800));
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    jitter: Jitter,
}

impl Default for Backoff {
    /// 100 ms doubling to a 20 s cap (the AWS SDKs' cap), full jitter.
    fn default() -> Self {
        Self {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(20),
            jitter: Jitter::Full,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Backoff {
    /// A backoff from `base` doubling up to `cap`. `base` must be in `(0, 1h]` and `cap` in
    /// `[base, 1d]`; the errors name the fields `base_delay` and `max_delay`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline_policies::retry::{Backoff, Jitter};
    ///
    /// let err = Backoff::new(Duration::ZERO, Duration::from_secs(1), Jitter::Full).unwrap_err();
    /// assert_eq!(err.to_string(), "base_delay must be in (0ns, 3600s], got 0ns");
    /// ```
    pub fn new(base: Duration, cap: Duration, jitter: Jitter) -> Result<Self, ConfigError> {
        if base.is_zero() || base > MAX_BASE_DELAY {
            return Err(ConfigError::new(
                "base_delay",
                format!("{base:?}"),
                format!("in (0ns, {MAX_BASE_DELAY:?}]"),
            ));
        }
        if cap < base || cap > MAX_DELAY {
            return Err(ConfigError::new(
                "max_delay",
                format!("{cap:?}"),
                format!("in [base_delay = {base:?}, {MAX_DELAY:?}]"),
            ));
        }
        Ok(Self { base, cap, jitter })
    }

    /// The first delay's ceiling.
    pub const fn base(&self) -> Duration {
        self.base
    }

    /// The largest delay.
    pub const fn cap(&self) -> Duration {
        self.cap
    }

    /// The jitter.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// `min(cap, base × 2^retry)`, without overflow for any `retry`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let base = u128::from(nanos(self.base));
        let factor = 1u128.checked_shl(retry).unwrap_or(u128::MAX);
        let t = base.saturating_mul(factor).min(u128::from(nanos(self.cap)));
        Duration::from_nanos(t as u64)
    }

    /// The delay before retry number `retry` (0 for the first retry). `previous` is the delay
    /// before the previous retry (use [`base`](Self::base) for the first); only
    /// [`Jitter::Decorrelated`] reads it.
    pub fn delay<R: Rng + ?Sized>(&self, retry: u32, previous: Duration, rng: &mut R) -> Duration {
        let t = nanos(self.ceiling(retry));
        let d = match self.jitter {
            Jitter::None => t,
            Jitter::Full => rng.random_range(0..=t),
            Jitter::Equal => t / 2 + rng.random_range(0..=t / 2),
            Jitter::Decorrelated => {
                let base = nanos(self.base);
                let hi = nanos(previous).saturating_mul(3).max(base);
                rng.random_range(base..=hi).min(nanos(self.cap))
            }
        };
        Duration::from_nanos(d)
    }
}
