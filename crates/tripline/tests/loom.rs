//! Model checking of the atomic kernel with loom: every interleaving of two threads (the
//! half-open probes, tripping, and the in-flight cohorts racing their recycling).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p tripline --test loom --release`.
#![cfg(loom)]

use std::time::Duration;

use loom::thread;
use tripline::{BreakerConfig, CircuitBreaker, ManualClock, Outcome, State};

fn breaker(k: u32) -> (CircuitBreaker<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let config = BreakerConfig::builder()
        .count_window(2)
        .minimum_calls(2)
        .count_in_flight_as_slow(false)
        .open_duration(Duration::from_secs(10))
        .half_open_calls(k)
        .seed(1)
        .build()
        .unwrap();
    (
        CircuitBreaker::with_clock("loom", config, clock.clone()),
        clock,
    )
}

#[test]
fn half_open_never_admits_more_than_k_and_transitions_once() {
    loom::model(|| {
        let (b, clock) = breaker(1);
        b.trip();
        clock.advance(Duration::from_secs(10));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || match b.try_acquire() {
                    Ok(p) => {
                        std::mem::forget(p);
                        1
                    }
                    Err(_) => 0,
                })
            })
            .collect();
        let admitted: u32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(admitted, 1);
        assert_eq!(b.state(), State::HalfOpen);
        // Closed -> Open -> HalfOpen: exactly two transitions.
        assert_eq!(b.generation(), 2);
    });
}

/// Bounded at four preemptions: each record is a dozen atomic steps (claim, register, bits,
/// totals, the trip under the lock), and the unbounded space takes hours to walk.
#[test]
fn concurrent_failures_trip_exactly_once() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(4);
    model.check(|| {
        let (b, _clock) = breaker(1);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || {
                    let p = b.try_acquire();
                    if let Ok(p) = p {
                        let _ = p.record(Outcome::Failure);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(b.state(), State::Open);
        assert_eq!(b.generation(), 1);
    });
}

#[test]
fn a_probe_result_racing_an_abandoned_probe_never_leaks_a_slot() {
    loom::model(|| {
        let (b, clock) = breaker(2);
        b.trip();
        clock.advance(Duration::from_secs(10));
        let p1 = b.try_acquire().unwrap();
        std::mem::forget(p1);
        let b2 = b.clone();
        let t = thread::spawn(move || {
            if let Ok(p) = b2.try_acquire() {
                drop(p); // abandoned: the slot must come back
            }
        });
        let b3 = b.clone();
        let r = thread::spawn(move || {
            // Competes for the slot the other thread gives back.
            b3.try_acquire().map(std::mem::forget).is_ok()
        });
        t.join().unwrap();
        let kept = r.join().unwrap();
        // p1 still holds its slot; the racing thread holds one if it got in; the abandoned
        // probe holds none.
        let m = b.metrics();
        assert_eq!(m.probes_in_flight, 1 + u32::from(kept));
        assert_eq!(b.state(), State::HalfOpen);
    });
}

/// Every call of generation 0 the tracker holds, aged ones included (all overdue at the end
/// of time).
fn in_flight(f: &tripline::inflight::InFlight) -> u64 {
    f.overdue(u64::MAX / 2, 0, 0)
}

/// A slow-call duration of 100 gives cohorts 50 wide; cohort 3 reuses cohort 0's slot.
const RECYCLING_START: u64 = 3 * 50;

#[test]
fn an_exit_racing_the_recycling_of_its_slot_keeps_the_count() {
    loom::model(|| {
        let f = loom::sync::Arc::new(tripline::inflight::InFlight::new(100));
        let old = f.enter(0, 0);
        let f2 = f.clone();
        let t = thread::spawn(move || f2.exit(old, 0));
        let newer = f.enter(RECYCLING_START, 0);
        t.join().unwrap();
        assert_eq!(in_flight(&f), 1);
        f.exit(newer, 0);
        assert_eq!(in_flight(&f), 0);
    });
}

#[test]
fn joins_and_exits_racing_a_recycling_keep_the_count() {
    loom::model(|| {
        let f = loom::sync::Arc::new(tripline::inflight::InFlight::new(100));
        let a = f.enter(0, 0);
        let f2 = f.clone();
        let t = thread::spawn(move || {
            // Joins cohort 0, or the aged calls if the slot already holds the newer cohort.
            let b = f2.enter(10, 0);
            f2.exit(b, 0);
            f2.exit(a, 0);
        });
        let c = f.enter(RECYCLING_START, 0);
        // c at least, and never a call that is not there: a, b and c at most.
        let seen = in_flight(&f);
        assert!((1..=3).contains(&seen), "{seen} in flight");
        t.join().unwrap();
        assert_eq!(in_flight(&f), 1);
        f.exit(c, 0);
        assert_eq!(in_flight(&f), 0);
    });
}

/// Calls of an older generation never count in a newer one, whatever the interleaving of
/// their joins and exits with the newer generation's.
#[test]
fn an_older_generation_never_counts_in_a_newer_one() {
    loom::model(|| {
        let f = loom::sync::Arc::new(tripline::inflight::InFlight::new(100));
        let f2 = f.clone();
        let t = thread::spawn(move || {
            let old = f2.enter(0, 0);
            f2.exit(old, 0);
            let _hung = f2.enter(5, 0);
        });
        let new = f.enter(RECYCLING_START, 1);
        assert!(f.overdue(u64::MAX / 2, 0, 1) <= 1);
        t.join().unwrap();
        assert_eq!(f.overdue(u64::MAX / 2, 0, 1), 1);
        f.exit(new, 1);
        assert_eq!(f.overdue(u64::MAX / 2, 0, 1), 0);
    });
}

fn shadow_breaker(config: BreakerConfig) -> CircuitBreaker<ManualClock> {
    CircuitBreaker::with_clock("loom", config, ManualClock::new())
}

/// A result recorded while another thread resets the window (ending shadow mode) lands in the
/// generation that admitted it or nowhere, and never tears a count window's running total.
#[test]
fn a_result_racing_a_reset_lands_in_its_generation_or_nowhere() {
    for time_window in [false, true] {
        // Bounded like the two-failure model: the reset, the record and the checks after them
        // are dozens of atomic steps, and unbounded exploration runs for many minutes; this
        // explores every schedule with at most four preemptions.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(4);
        model.check(move || {
            let builder = BreakerConfig::builder()
                .minimum_calls(2)
                .failure_rate_threshold(100.0)
                .count_in_flight_as_slow(false);
            let builder = if time_window {
                builder.time_window(Duration::from_secs(1), Duration::from_secs(1))
            } else {
                builder.count_window(2)
            };
            let b = shadow_breaker(builder.build().unwrap());
            b.metrics_only();
            let p = b.try_acquire().unwrap(); // admitted in generation 1
            let b2 = b.clone();
            let t = thread::spawn(move || b2.reset()); // generation 2
            let _ = p.record(Outcome::Failure);
            t.join().unwrap();
            assert_eq!(b.generation(), 2);
            // Generation 2's window never holds generation 1's failure.
            assert_eq!(b.metrics().window.failures, 0);
            // And its totals follow its bits: two successes read as two clean calls.
            for _ in 0..2 {
                let _ = b.try_acquire().unwrap().record(Outcome::Success);
            }
            let w = b.metrics().window;
            assert_eq!((w.calls, w.failures), (2, 0));
        });
    }
}

/// Two failures at the same instant with lumping on: exactly one counts in the window, the
/// other is lumped, whichever wins the race for the interval.
#[test]
fn failures_racing_for_the_lumping_interval_count_once() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let config = BreakerConfig::builder()
            .count_window(4)
            .minimum_calls(4)
            .count_in_flight_as_slow(false)
            .lumping_interval(Duration::from_secs(1))
            .build()
            .unwrap();
        let b = CircuitBreaker::with_clock("loom", config, ManualClock::new());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || b.try_acquire().unwrap().record(Outcome::Failure))
            })
            .collect();
        let mut got: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        got.sort_by_key(|r| format!("{r:?}"));
        assert_eq!(
            got,
            vec![tripline::Recorded::Counted, tripline::Recorded::Lumped]
        );
        let m = b.metrics();
        assert_eq!(
            (m.window.failures, m.lumped_failures, m.failed_calls),
            (1, 1, 2)
        );
    });
}

/// Two operators' transitions racing, with a listener: every event is delivered once, in
/// sequence order, the Initial first, whichever thread delivers it; and the listener runs with
/// no lock held (it reads the breaker's metrics, which take the core lock).
#[test]
fn events_of_racing_transitions_are_delivered_once_in_order() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        let (b, _clock) = breaker(1);
        // Plain std bookkeeping: the listener lives inside the breaker it reads (a cycle loom
        // would report as a leak of its own Arc).
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        {
            let (seen, inner) = (seen.clone(), b.clone());
            b.subscribe(move |e: &tripline::Event| {
                if matches!(e.kind, tripline::EventKind::Transition { .. }) {
                    let _ = inner.metrics();
                }
                seen.lock().unwrap().push(e.seq);
            });
        }
        let b2 = b.clone();
        let t = thread::spawn(move || b2.force_open());
        b.reset();
        t.join().unwrap();
        let seen = seen.lock().unwrap().clone();
        // Initial, then both transitions, each once, in order.
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
        assert_eq!(b.generation(), 2);
    });
}

fn counting(failures: u32) -> CircuitBreaker<ManualClock> {
    let config = BreakerConfig::builder()
        .count_window(100)
        .minimum_calls(100)
        .slow_call_rule(false)
        .failure_count(failures, Duration::from_secs(10))
        .build()
        .unwrap();
    CircuitBreaker::with_clock("loom-count", config, ManualClock::new())
}

/// Two failures racing for the last cells of the failure-count ring: whichever reads the ring
/// full trips it, once.
#[test]
fn failures_racing_for_the_failure_count_trip_once() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let b = counting(2);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || {
                    if let Ok(p) = b.try_acquire() {
                        let _ = p.record(Outcome::Failure);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(b.state(), State::Open);
        assert_eq!(b.generation(), 1);
    });
}

/// A failure racing a reset lands in the generation that admitted it or nowhere: the
/// failure of the generation before the reset never makes up the count with it.
#[test]
fn a_failure_racing_a_reset_never_counts_with_the_generation_before() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let b = counting(2);
        b.try_acquire().unwrap().record(Outcome::Failure);
        let writer = {
            let b = b.clone();
            thread::spawn(move || {
                if let Ok(p) = b.try_acquire() {
                    let _ = p.record(Outcome::Failure);
                }
            })
        };
        let operator = {
            let b = b.clone();
            thread::spawn(move || b.reset())
        };
        writer.join().unwrap();
        operator.join().unwrap();
        // Tripped before the reset (two failures of generation 0), or one failure of the
        // reset's generation, or a stale one: Closed in every case.
        assert_eq!(b.state(), State::Closed);
        let m = b.metrics();
        assert!(m.window.failures <= 1, "{m:?}");
    });
}

/// A rejection racing the trip that opened the breaker, and an operator's ForcedOpen racing
/// both: a rejection by Open or ForcedOpen carries that period's cause (the cause is written
/// before the word that lets anyone be refused), never a torn one or another period's; it
/// carries none only when the breaker moved on to the next period while it was made.
#[test]
fn a_rejection_racing_transitions_carries_its_own_periods_cause() {
    use tripline::Reason;
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let b = counting(1);
        let tripper = {
            let b = b.clone();
            thread::spawn(move || {
                if let Ok(p) = b.try_acquire() {
                    let _ = p.record(Outcome::Failure);
                }
            })
        };
        let operator = {
            let b = b.clone();
            thread::spawn(move || b.force_open())
        };
        let r = b.try_acquire();
        tripper.join().unwrap();
        operator.join().unwrap();
        if let Err(r) = r {
            match (r.cause(), r.state()) {
                (Some(c), State::Open) => assert_eq!(c.reason, Reason::FailureCount { count: 1 }),
                (Some(c), State::ForcedOpen) => assert_eq!(c.reason, Reason::Operator),
                // Refused by the Open period, whose cause the ForcedOpen replaced meanwhile.
                (None, State::Open) => assert_eq!(b.state(), State::ForcedOpen),
                (c, s) => panic!("refused in {s} with {c:?}"),
            }
        }
    });
}

/// A striped count window of `size` (a batch of 2 kept successes), its ring full and its
/// lane batching: `prefill` results recorded first, one thread at a time.
fn batching(size: u32, prefill: &[Outcome]) -> CircuitBreaker<ManualClock> {
    let config = BreakerConfig::builder()
        .count_window(size)
        .minimum_calls(2)
        .failure_rate_threshold(100.0)
        .slow_call_rule(false)
        .count_in_flight_as_slow(false)
        .stripes(2)
        .build()
        .unwrap();
    let b = CircuitBreaker::with_clock("loom", config, ManualClock::new());
    // `size` fill the ring, one more finds it full: the lane batches from there on.
    let fill = vec![Outcome::Success; size as usize + 1];
    for o in fill.iter().chain(prefill) {
        let _ = b.try_acquire().unwrap().record(*o);
    }
    b
}

/// A success kept in a lane while another thread resets the breaker goes with the window of
/// its generation: the new generation's window never holds it, and its ring still counts.
#[test]
fn a_kept_success_racing_a_reset_goes_with_its_generation() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let b = batching(2, &[]);
        let before = b.generation();
        let p = b.try_acquire().unwrap();
        let b2 = b.clone();
        let t = thread::spawn(move || b2.reset());
        let _ = p.record(Outcome::Success);
        t.join().unwrap();
        assert!(b.generation() > before);
        assert_eq!(b.metrics().window.calls, 0);
        for _ in 0..2 {
            let _ = b.try_acquire().unwrap().record(Outcome::Success);
        }
        let w = b.metrics().window;
        assert_eq!((w.calls, w.failures), (2, 0));
    });
}

/// A kept success racing a failure from another thread: the failure is judged with the
/// success in the ring or after it, never lost; the window ends as the last two results.
#[test]
fn a_kept_success_racing_a_failure_is_never_lost() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let b = batching(2, &[]);
        let b2 = b.clone();
        let t = thread::spawn(move || {
            let _ = b2.try_acquire().unwrap().record(Outcome::Failure);
        });
        let _ = b.try_acquire().unwrap().record(Outcome::Success);
        t.join().unwrap();
        let m = b.metrics();
        assert_eq!((m.window.calls, m.window.failures), (2, 1));
        assert_eq!(m.successful_calls, 4);
        assert_eq!(m.state, State::Closed);
    });
}

/// Kept successes of two threads racing for one lane's batch (one puts both in the ring, or
/// each its own, or the snapshot puts the last in): none is lost, and together they push the
/// two failures out of a window of 4.
#[test]
fn kept_successes_racing_for_a_batch_push_old_failures_out() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let b = batching(4, &[Outcome::Failure, Outcome::Failure]);
        assert_eq!(b.metrics().window.failures, 2);
        let b2 = b.clone();
        let t = thread::spawn(move || {
            for _ in 0..2 {
                let _ = b2.try_acquire().unwrap().record(Outcome::Success);
            }
        });
        for _ in 0..2 {
            let _ = b.try_acquire().unwrap().record(Outcome::Success);
        }
        t.join().unwrap();
        let m = b.metrics();
        assert_eq!((m.window.calls, m.window.failures), (4, 0));
        assert_eq!(m.successful_calls, 9);
    });
}
