//! What opened the breaker, for its rejections to carry ([`TripCause`]): written by the
//! transition to Open or ForcedOpen, under the core lock, and read without a lock by every
//! rejection.
//!
//! The cause is nine words behind a sequence number (a seqlock): the writer, one at a time
//! under the core lock, makes the sequence odd, writes the words, and makes it even again; a
//! reader reads the sequence, the words and the sequence again, and keeps the words only when
//! both readings are the same even number. What holds:
//! * A reader never returns a cause made of two writes' words (a torn read): the two readings
//!   of the sequence would differ.
//! * A reader never waits for a writer: after a few torn attempts it answers `None` (a
//!   rejection made while the breaker is moving on carries no cause, rather than blocking).
//!   The writer is the breaker's own code under the core lock (no user code runs there), so
//!   a torn attempt is rare and short.
//! * A rejection carries the cause of the open period that refused it, or none: the cause
//!   names its generation, and a reader keeps it only for that generation (or, HalfOpen, the
//!   Open before it).

use crate::error::TripCause;
use crate::event::Reason;
use crate::outcome::FailureKind;
use crate::state::State;
use crate::sync::{AtomicU64, Ordering, fence};
use crate::window::WindowSnapshot;

const WORDS: usize = 8;

/// A cause as the cell holds it: what a rejection carries, decoded by
/// [`Rejected::cause`](crate::Rejected::cause).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawCause([u64; WORDS]);

impl RawCause {
    pub(crate) fn decode(&self) -> Option<TripCause> {
        decode(&self.0)
    }
}

/// The last cause written.
#[derive(Debug)]
pub(super) struct CauseCell {
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

/// How many torn reads a reader tries before it answers `None`.
const ATTEMPTS: usize = 4;

impl CauseCell {
    pub(super) fn new() -> Self {
        Self {
            seq: AtomicU64::new(0),
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Writes `cause`. Only under the core lock: one writer at a time.
    pub(super) fn write(&self, cause: &TripCause) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (w, v) in self.words.iter().zip(encode(cause)) {
            w.store(v, Ordering::Relaxed);
        }
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// The cause of the open period a rejection in `state` at `generation` belongs to: the
    /// last cause written if it is that generation's (or, for HalfOpen, the Open period's
    /// before it), else `None`.
    pub(super) fn read_for(&self, state: State, generation: u64) -> Option<RawCause> {
        let c = self.read_raw()?;
        let g = c.0[7];
        let of_this_period =
            g == generation || (state == State::HalfOpen && g.wrapping_add(1) == generation);
        of_this_period.then_some(c)
    }

    #[cfg(test)]
    fn read(&self) -> Option<TripCause> {
        self.read_raw().and_then(|r| r.decode())
    }

    fn read_raw(&self) -> Option<RawCause> {
        for _ in 0..ATTEMPTS {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let mut v = [0u64; WORDS];
            for (x, w) in v.iter_mut().zip(&self.words) {
                *x = w.load(Ordering::Relaxed);
            }
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                return (s1 != 0).then_some(RawCause(v));
            }
        }
        None
    }
}

fn encode(c: &TripCause) -> [u64; WORDS] {
    let (tag, a, b, d) = match c.reason {
        Reason::FailureRate => (1, 0, 0, 0),
        Reason::SlowCallRate => (2, 0, 0, 0),
        Reason::ConsecutiveFailures { count } => (3, count, 0, 0),
        Reason::FailureCount { count } => (4, count, 0, 0),
        Reason::OpenElapsed => (5, 0, 0, 0),
        Reason::ProbesSucceeded {
            probes,
            failures,
            slow,
        } => (6, u64::from(probes), u64::from(failures), u64::from(slow)),
        Reason::ProbesFailed {
            probes,
            failures,
            slow,
        } => (7, u64::from(probes), u64::from(failures), u64::from(slow)),
        Reason::HalfOpenTimeout => (8, 0, 0, 0),
        Reason::Operator => (9, 0, 0, 0),
        Reason::IntervalElapsed => (10, 0, 0, 0),
    };
    let kind = c.kind.map_or(0, |k| k.index() as u64 + 1);
    [
        tag | kind << 8,
        a,
        b << 32 | d,
        c.window.calls,
        c.window.failures,
        c.window.slow_calls,
        c.window.in_flight_slow,
        c.generation,
    ]
}

fn decode(v: &[u64; WORDS]) -> Option<TripCause> {
    let (a, b, d) = (v[1], (v[2] >> 32) as u32, v[2] as u32);
    let probes = a as u32;
    let reason = match v[0] & 0xFF {
        1 => Reason::FailureRate,
        2 => Reason::SlowCallRate,
        3 => Reason::ConsecutiveFailures { count: a },
        4 => Reason::FailureCount { count: a },
        5 => Reason::OpenElapsed,
        6 => Reason::ProbesSucceeded {
            probes,
            failures: b,
            slow: d,
        },
        7 => Reason::ProbesFailed {
            probes,
            failures: b,
            slow: d,
        },
        8 => Reason::HalfOpenTimeout,
        9 => Reason::Operator,
        10 => Reason::IntervalElapsed,
        _ => return None,
    };
    let kind = match (v[0] >> 8) & 0xFF {
        0 => None,
        k => FailureKind::ALL.get(k as usize - 1).copied(),
    };
    Some(TripCause {
        reason,
        kind,
        window: WindowSnapshot {
            calls: v[3],
            failures: v[4],
            slow_calls: v[5],
            in_flight_slow: v[6],
        },
        generation: v[7],
    })
}

#[cfg(all(test, not(loom), not(shuttle)))]
mod tests {
    use super::*;

    #[test]
    fn every_reason_and_kind_reads_back_as_written() {
        let reasons = [
            Reason::FailureRate,
            Reason::SlowCallRate,
            Reason::ConsecutiveFailures { count: u64::MAX },
            Reason::FailureCount { count: 12 },
            Reason::OpenElapsed,
            Reason::ProbesSucceeded {
                probes: u32::MAX,
                failures: 0,
                slow: 3,
            },
            Reason::ProbesFailed {
                probes: 10,
                failures: u32::MAX,
                slow: u32::MAX,
            },
            Reason::HalfOpenTimeout,
            Reason::Operator,
            Reason::IntervalElapsed,
        ];
        let cell = CauseCell::new();
        assert_eq!(cell.read(), None, "nothing written yet");
        let kinds = std::iter::once(None).chain(FailureKind::ALL.map(Some));
        for (i, (reason, kind)) in reasons.iter().zip(kinds.cycle()).enumerate() {
            let c = TripCause {
                reason: *reason,
                kind,
                window: WindowSnapshot {
                    calls: u64::MAX,
                    failures: i as u64,
                    slow_calls: 7,
                    in_flight_slow: u64::MAX - 1,
                },
                generation: u64::MAX - i as u64,
            };
            cell.write(&c);
            assert_eq!(cell.read(), Some(c));
        }
    }

    #[test]
    fn a_cause_belongs_to_its_open_period() {
        let cell = CauseCell::new();
        let c = TripCause {
            reason: Reason::FailureRate,
            kind: None,
            window: WindowSnapshot::default(),
            generation: 5,
        };
        cell.write(&c);
        let read = |s, g| cell.read_for(s, g).and_then(|r| r.decode());
        assert_eq!(read(State::Open, 5), Some(c));
        assert_eq!(read(State::HalfOpen, 6), Some(c));
        assert_eq!(read(State::Open, 7), None);
        assert_eq!(read(State::HalfOpen, 8), None);
        assert_eq!(read(State::ForcedOpen, 4), None);
    }
}
