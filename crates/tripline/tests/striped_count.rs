//! A striped count window keeps each lane's fast successes out of its shared ring and puts
//! them in by batches, before any other result and before every snapshot. It holds what one
//! ring holds: step by step, whichever thread (and so lane) each result comes from, its
//! window, rates, state and transitions are those of the same breaker unstriped.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use proptest::prelude::*;
use tripline::{BreakerConfig, CircuitBreaker, ManualClock, Outcome, State};

/// A thread of its own, so that its results come from its own lane.
struct Worker {
    jobs: mpsc::Sender<Box<dyn FnOnce() + Send>>,
    done: mpsc::Receiver<()>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Worker {
    fn new() -> Self {
        let (jobs, rx) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let (tx, done) = mpsc::channel();
        let handle = thread::spawn(move || {
            for job in rx {
                job();
                let _ = tx.send(());
            }
        });
        Self {
            jobs,
            done,
            handle: Some(handle),
        }
    }

    /// Runs `f` on this worker and waits for it.
    fn run(&self, f: impl FnOnce() + Send + 'static) {
        self.jobs.send(Box::new(f)).expect("the worker runs");
        self.done.recv().expect("the worker answers");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let (jobs, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.jobs, jobs));
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Fast,
    Slow,
    Failure,
    Ignored,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => Just(Op::Fast),
        1 => Just(Op::Slow),
        2 => Just(Op::Failure),
        1 => Just(Op::Ignored),
    ]
}

fn config(stripes: u32, size: u32, minimum: u32) -> BreakerConfig {
    BreakerConfig::builder()
        .count_window(size)
        .minimum_calls(minimum)
        .failure_rate_threshold(30.0)
        .slow_call_rate_threshold(40.0)
        .slow_call_duration(Duration::from_millis(100))
        .stripes(stripes)
        .build()
        .expect("a valid configuration")
}

fn apply(b: &CircuitBreaker<ManualClock>, op: Op) {
    let Ok(permit) = b.try_acquire() else {
        return;
    };
    match op {
        Op::Fast => permit.record_with_duration(Outcome::Success, Duration::from_millis(1)),
        Op::Slow => permit.record_with_duration(Outcome::Success, Duration::from_millis(500)),
        Op::Failure => permit.record_with_duration(Outcome::Failure, Duration::from_millis(1)),
        Op::Ignored => permit.record_with_duration(Outcome::Ignored, Duration::from_millis(1)),
    };
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A striped count window holds exactly what the same window unstriped holds, at every
    /// step, whichever of four threads each result comes from.
    #[test]
    fn a_striped_count_window_holds_what_one_ring_holds(
        size in 2u32..40,
        minimum in 1u32..40,
        ops in proptest::collection::vec((0usize..4, op()), 1..400),
    ) {
        let clock = ManualClock::new();
        let striped = CircuitBreaker::with_clock("striped", config(4, size, minimum.min(size)), clock.clone());
        let single = CircuitBreaker::with_clock("single", config(1, size, minimum.min(size)), clock.clone());
        let workers: Vec<Worker> = (0..4).map(|_| Worker::new()).collect();
        for (w, op) in ops {
            let b = striped.clone();
            workers[w].run(move || apply(&b, op));
            apply(&single, op);
            let (s, u) = (striped.metrics(), single.metrics());
            prop_assert_eq!(s.window, u.window);
            prop_assert_eq!(s.state, u.state);
            prop_assert_eq!(s.transitions, u.transitions);
            prop_assert_eq!(s.successful_calls, u.successful_calls);
            prop_assert_eq!(s.failed_calls, u.failed_calls);
            if s.state != State::Closed {
                // Both tripped on the same result; start both over.
                striped.reset();
                single.reset();
            }
        }
    }
}

/// Fast successes kept in lanes are put in the ring before a failure is judged: they push old
/// failures out as they would have gone in one by one. A window of 40 (a batch of 20 per
/// lane): 11 failures, then 29 successes over four threads, then a failure: the last 40 hold
/// 11 failures (27.5 %, no trip), where the ring without the kept successes would hold 12
/// (30 %, a trip).
#[test]
fn successes_kept_in_lanes_count_before_the_next_failure_is_judged() {
    let clock = ManualClock::new();
    let b = CircuitBreaker::with_clock("b", config(4, 40, 40), clock);
    let workers: Vec<Worker> = (0..4).map(|_| Worker::new()).collect();
    let on = |w: usize, op: Op| {
        let c = b.clone();
        workers[w].run(move || apply(&c, op));
    };
    // Fill the ring, then one more success per lane: every lane has seen it full.
    for i in 0..44 {
        on(i % 4, Op::Fast);
    }
    for _ in 0..11 {
        on(0, Op::Failure);
    }
    for i in 0..29 {
        on(i % 4, Op::Fast);
    }
    on(1, Op::Failure);
    let m = b.metrics();
    assert_eq!((m.window.calls, m.window.failures), (40, 11));
    assert_eq!(m.state, State::Closed);
    assert_eq!(m.successful_calls, 73);
}

/// Four threads racing on a striped count window, with a listener that reads the metrics
/// (which puts every lane's kept successes in) from inside each transition: every result is
/// counted once, the window never holds more than its size or more failures than calls, and
/// after the race it holds the last results as one ring would (all successes at the end).
#[test]
fn racing_threads_and_a_reentrant_listener_keep_the_counts() {
    let clock = ManualClock::new();
    let b = CircuitBreaker::with_clock("race", config(4, 50, 20), clock);
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (inner, counter) = (b.clone(), seen.clone());
    b.subscribe(move |_: &tripline::Event| {
        let m = inner.metrics();
        assert!(m.window.calls <= 50 && m.window.failures <= m.window.calls);
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    let results: u64 = thread::scope(|s| {
        let handles: Vec<_> = (0..4u64)
            .map(|t| {
                let b = b.clone();
                s.spawn(move || {
                    let mut counted = 0;
                    for i in 0..5_000u64 {
                        let op = if (i * 7 + t) % 23 == 0 {
                            Op::Failure
                        } else {
                            Op::Fast
                        };
                        if let Ok(p) = b.try_acquire() {
                            let o = if matches!(op, Op::Failure) {
                                Outcome::Failure
                            } else {
                                Outcome::Success
                            };
                            if p.record_with_duration(o, Duration::from_millis(1))
                                .counted()
                            {
                                counted += 1;
                            }
                        }
                        if i % 1_000 == 999 && b.state() != State::Closed {
                            b.reset();
                        }
                    }
                    counted
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let m = b.metrics();
    assert_eq!(m.successful_calls + m.failed_calls, results);
    assert!(m.window.calls <= 50 && m.window.failures <= m.window.calls);
    assert!(
        seen.load(std::sync::atomic::Ordering::Relaxed) >= 1,
        "the Initial event at least"
    );
    // Once every thread is done, fifty successes leave a clean ring of fifty.
    b.reset();
    for _ in 0..60 {
        let _ = b.try_acquire().unwrap().record(Outcome::Success);
    }
    let w = b.metrics().window;
    assert_eq!((w.calls, w.failures), (50, 0));
}
