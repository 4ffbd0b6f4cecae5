//! Why a call was refused a slot.

use std::fmt;

use super::Priority;

/// Why a call was refused a slot, by a [`Shedder`](super::Shedder) or a
/// [`Limiter`](crate::limiter::Limiter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// Every slot was busy and there is no wait queue.
    Full,
    /// Slots were free, but they are kept for higher priorities: the call's share of the
    /// capacity was used up.
    Shed,
    /// The wait queue was full of calls of the same or a higher priority.
    QueueFull,
    /// The call waited, and a call of higher priority took its place in the full queue.
    Evicted,
    /// The call waited `max_wait` for nothing.
    TimedOut,
}

impl Refusal {
    /// A short name: `full`, `shed`, `queue_full`, `evicted`, `timed_out`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Refusal::Full => "full",
            Refusal::Shed => "shed",
            Refusal::QueueFull => "queue_full",
            Refusal::Evicted => "evicted",
            Refusal::TimedOut => "timed_out",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::Full => "every slot is busy",
            Refusal::Shed => "the free slots are kept for higher priorities",
            Refusal::QueueFull => "the wait queue is full",
            Refusal::Evicted => "a higher priority took its place in the queue",
            Refusal::TimedOut => "no slot freed in time",
        })
    }
}

/// A call the [`Shedder`](super::Shedder) refused: its priority, why, and the pool at that
/// moment. A distinct value, never confused with the dependency's own error; downcastable from
/// a tower `BoxError`.
///
/// ```
/// use tripline_policies::shed::{Priority, Refusal, ShedConfig, Shedder};
///
/// let shedder = Shedder::new(ShedConfig::builder().capacity(2).build()?);
/// let _a = shedder.try_acquire(Priority::SHEDDABLE)?; // sheddable calls may hold half
/// let shed = shedder.try_acquire(Priority::SHEDDABLE).unwrap_err();
/// assert_eq!(shed.reason(), Refusal::Shed);
/// assert_eq!(
///     shed.to_string(),
///     "shed a sheddable call (1 of 2 slots busy): the free slots are kept for higher priorities"
/// );
/// let _b = shedder.try_acquire(Priority::CRITICAL)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shed {
    pub(crate) priority: Priority,
    pub(crate) reason: Refusal,
    pub(crate) in_flight: u32,
    pub(crate) capacity: u32,
}

impl Shed {
    /// The call's priority.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// Why it was refused.
    pub fn reason(&self) -> Refusal {
        self.reason
    }

    /// Calls in flight when it was refused.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The capacity then.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
}

impl fmt::Display for Shed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "shed a {} call ({} of {} slots busy): {}",
            self.priority, self.in_flight, self.capacity, self.reason
        )
    }
}

impl std::error::Error for Shed {}
