//! User code never runs under a lock of the policies: a random generator, a waker or a clock
//! may call back into the policy that called it without deadlock. Each case runs the call on a
//! thread of its own and fails if it does not finish within a generous bound (a deadlocked
//! call never finishes).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rand::{RngCore, SeedableRng};
use rand_pcg::Pcg64Mcg;

/// Runs `f` on its own thread and fails if it has not finished within a generous bound.
fn finishes<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what} did not finish: deadlocked"))
}

type Callback = Arc<OnceLock<Box<dyn Fn() + Send + Sync>>>;

/// A generator that, on each draw, first calls back into the policy it draws for (once at a
/// time: a draw asked from inside the callback does not call back again).
struct CallingBack {
    rng: Pcg64Mcg,
    callback: Callback,
    inside: bool,
    calls: Arc<std::sync::atomic::AtomicU32>,
}

impl CallingBack {
    fn new(seed: u64) -> (Self, Callback, Arc<std::sync::atomic::AtomicU32>) {
        let callback: Callback = Arc::default();
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let rng = Self {
            rng: Pcg64Mcg::seed_from_u64(seed),
            callback: callback.clone(),
            inside: false,
            calls: calls.clone(),
        };
        (rng, callback, calls)
    }

    fn call_back(&mut self) {
        if self.inside {
            return;
        }
        if let Some(f) = self.callback.get() {
            self.inside = true;
            self.calls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            f();
            self.inside = false;
        }
    }
}

impl RngCore for CallingBack {
    fn next_u32(&mut self) -> u32 {
        self.call_back();
        self.rng.next_u32()
    }
    fn next_u64(&mut self) -> u64 {
        self.call_back();
        self.rng.next_u64()
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        self.call_back();
        self.rng.fill_bytes(dst);
    }
}

#[cfg(feature = "chaos")]
#[test]
fn a_fault_injector_whose_generator_calls_it_back_does_not_deadlock() {
    use tripline_policies::chaos::{Chaos, ChaosConfig};

    let (rng, callback, calls) = CallingBack::new(1);
    let config = ChaosConfig::builder().error(0.5).build().unwrap();
    let chaos = Chaos::with_rng(config, rng);
    chaos.enable();
    let c = chaos.clone();
    assert!(
        callback
            .set(Box::new(move || {
                let _ = (c.decide(), c.stats(), c.config());
            }))
            .is_ok()
    );
    let c = chaos.clone();
    finishes(
        "a decision drawing from a generator that decides",
        move || {
            for _ in 0..100 {
                let _ = c.decide();
            }
        },
    );
    assert!(calls.load(std::sync::atomic::Ordering::Relaxed) > 0);
    // 100 calls, and one more decided from inside each draw that called back.
    assert!(chaos.stats().calls > 100);
}

#[cfg(feature = "throttle")]
#[test]
fn a_throttle_whose_generator_calls_it_back_does_not_deadlock() {
    use tripline::{ManualClock, Outcome};
    use tripline_policies::throttle::{Throttle, ThrottleConfig};

    let (rng, callback, calls) = CallingBack::new(2);
    let throttle = Throttle::with_clock_and_rng(ThrottleConfig::default(), ManualClock::new(), rng);
    let t = throttle.clone();
    assert!(
        callback
            .set(Box::new(move || {
                let _ = (t.counts(), t.probability());
                if let Ok(ticket) = t.try_acquire() {
                    ticket.record(Outcome::Failure);
                }
            }))
            .is_ok()
    );
    let t = throttle.clone();
    finishes(
        "a request drawing from a generator that requests",
        move || {
            // The backend refuses everything: the throttle draws to refuse locally.
            for _ in 0..200 {
                if let Ok(ticket) = t.try_acquire() {
                    ticket.record(Outcome::Failure);
                }
            }
        },
    );
    assert!(calls.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert!(throttle.rejected() > 0);
}

#[cfg(feature = "partial")]
#[test]
fn a_partial_breaker_whose_generator_reads_it_does_not_deadlock() {
    use tripline::{ManualClock, Outcome};
    use tripline_policies::partial::{PartialBreaker, PartialConfig};

    let (rng, callback, calls) = CallingBack::new(3);
    let clock = ManualClock::new();
    let breaker = PartialBreaker::with_clock_and_rng(PartialConfig::default(), clock.clone(), rng);
    let b = breaker.clone();
    assert!(
        callback
            .set(Box::new(move || {
                let _ = (b.snapshot(), b.rejection_rate());
                if let Ok(p) = b.try_acquire() {
                    p.record(Outcome::Failure);
                }
            }))
            .is_ok()
    );
    let b = breaker.clone();
    finishes(
        "a call drawing from a generator that reads the breaker",
        move || {
            // Every call fails, for ten seconds: the rejection rate climbs and calls are drawn.
            for _ in 0..1000 {
                if let Ok(p) = b.try_acquire() {
                    p.record(Outcome::Failure);
                }
                clock.advance(Duration::from_millis(10));
            }
        },
    );
    assert!(calls.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert!(breaker.rejection_rate() > 0.0);
}

/// A waker that calls back into the policy whose grant wakes it: an executor whose wake runs
/// code at once, or a waker that logs the queue.
#[cfg(feature = "shed")]
struct CallingWaker(Box<dyn Fn() + Send + Sync>);

#[cfg(feature = "shed")]
impl std::task::Wake for CallingWaker {
    fn wake(self: Arc<Self>) {
        (self.0)();
    }
}

/// Polls `fut` once with a waker that runs `on_wake`.
#[cfg(feature = "shed")]
fn poll_once<F: std::future::Future + Unpin>(
    fut: &mut F,
    on_wake: impl Fn() + Send + Sync + 'static,
) -> std::task::Poll<F::Output> {
    let waker = std::task::Waker::from(Arc::new(CallingWaker(Box::new(on_wake))));
    let mut cx = std::task::Context::from_waker(&waker);
    std::pin::Pin::new(fut).poll(&mut cx)
}

#[cfg(feature = "shed")]
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

#[cfg(feature = "shed")]
#[test]
fn a_shedder_grant_whose_waker_calls_it_back_does_not_deadlock() {
    use tripline_policies::shed::{Priority, ShedConfig, Shedder};

    let shedder = Shedder::new(
        ShedConfig::builder()
            .capacity(1)
            .max_waiting(2)
            .max_wait(Duration::from_secs(1))
            .build()
            .unwrap(),
    );
    let s = shedder.clone();
    finishes(
        "a slot handed to a waiter whose waker reads the queue",
        move || {
            paused_runtime().block_on(async move {
                let held = s.try_acquire(Priority::DEFAULT).unwrap();
                let mut waiting = Box::pin(s.acquire(Priority::DEFAULT));
                let s2 = s.clone();
                assert!(
                    poll_once(&mut waiting, move || {
                        let _ = (s2.stats(), s2.queue(), s2.try_acquire(Priority::CRITICAL));
                    })
                    .is_pending()
                );
                drop(held); // the slot goes to the waiter: its waker runs
                let permit = waiting.await.expect("the freed slot");
                drop(permit);
            });
        },
    );
    assert_eq!((shedder.in_flight(), shedder.waiting()), (0, 0));
}

#[cfg(feature = "limiter")]
#[test]
fn a_limiter_grant_whose_waker_reads_it_does_not_deadlock() {
    use tripline::ManualClock;
    use tripline_policies::limiter::{AimdConfig, LimitAlgorithm, Limiter, LimiterConfig};
    use tripline_policies::shed::Priority;

    let aimd = AimdConfig::builder()
        .min_limit(1)
        .initial_limit(1)
        .max_limit(10)
        .build()
        .unwrap();
    let limiter = Limiter::with_clock(
        LimiterConfig::builder()
            .algorithm(LimitAlgorithm::Aimd(aimd))
            .max_waiting(2)
            .max_wait(Duration::from_secs(1))
            .build()
            .unwrap(),
        ManualClock::new(),
    );
    let l = limiter.clone();
    finishes(
        "a raised limit that hands a slot to a waiter whose waker reads the limiter",
        move || {
            paused_runtime().block_on(async move {
                let held = l.try_acquire(Priority::DEFAULT).unwrap();
                let mut waiting = Box::pin(l.acquire(Priority::DEFAULT));
                let l2 = l.clone();
                assert!(
                    poll_once(&mut waiting, move || {
                        let _ = (l2.snapshot(), l2.limit(), l2.queue());
                    })
                    .is_pending()
                );
                // A success at full load raises the limit to 2: the waiter gets the new slot.
                l.sample(Duration::from_millis(5), 1, false);
                assert_eq!(l.limit(), 2);
                let permit = waiting.await.expect("the slot of the raised limit");
                drop((held, permit));
            });
        },
    );
    assert_eq!(limiter.in_flight(), 0);
}

/// A clock that reads the budget it times, once at a time (a reading asked from inside that
/// read does not read again).
#[cfg(feature = "retry")]
struct BudgetClock {
    clock: tripline::ManualClock,
    budget: Arc<OnceLock<Arc<tripline_policies::retry::budget::ErrorRateBudget<BudgetClock>>>>,
    inside: std::sync::atomic::AtomicBool,
    reads: Arc<std::sync::atomic::AtomicU32>,
}

#[cfg(feature = "retry")]
impl tripline::Clock for BudgetClock {
    fn now(&self) -> u64 {
        use std::sync::atomic::Ordering;
        if let Some(b) = self.budget.get() {
            if !self.inside.swap(true, Ordering::AcqRel) {
                let _ = (b.counts(), b.allows_retries());
                self.reads.fetch_add(1, Ordering::Relaxed);
                self.inside.store(false, Ordering::Release);
            }
        }
        tripline::Clock::now(&self.clock)
    }
}

#[cfg(feature = "retry")]
#[test]
fn an_error_rate_budget_whose_clock_reads_it_does_not_deadlock() {
    use tripline::Outcome;
    use tripline_policies::retry::budget::{ErrorRateBudget, RetryBudget};

    let slot = Arc::new(OnceLock::new());
    let reads = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let clock = BudgetClock {
        clock: tripline::ManualClock::new(),
        budget: slot.clone(),
        inside: std::sync::atomic::AtomicBool::new(false),
        reads: reads.clone(),
    };
    let budget = Arc::new(ErrorRateBudget::builder().build_with_clock(clock).unwrap());
    assert!(slot.set(budget.clone()).is_ok());
    let b = budget.clone();
    finishes(
        "the budget's figures, read on a clock that reads them",
        move || {
            for i in 0..50 {
                b.on_outcome(
                    if i % 2 == 0 {
                        Outcome::Failure
                    } else {
                        Outcome::Success
                    },
                    None,
                );
                let _ = (b.counts(), b.allows_retries());
            }
        },
    );
    assert!(reads.load(std::sync::atomic::Ordering::Relaxed) > 0);
    assert_eq!(budget.counts(), (50, 25));
}
