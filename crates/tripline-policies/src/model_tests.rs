//! Shuttle tests of the locks and atomics of the event delivery, the outlier detector, the
//! bulkhead and the policies' random draws: the real code, on shuttle's primitives
//! ([`crate::sync`]), under thousands of randomized schedules, with listeners, clocks and
//! generators that call back in. A deadlock (a lock of ours held while user code takes it
//! again) is reported by shuttle as a failure, with the schedule that produced it.

use std::sync::Arc;

use shuttle::sync::Mutex;
use shuttle::thread;

/// Schedules tried per test: enough to find an ordering bug in a handful of threads, small
/// enough to keep the unit tests fast in a debug build.
const SCHEDULES: usize = 2_000;

/// Every listener saw every event in sequence order, event `n` reached every listener before
/// any saw `n + 1`, and no event was lost or delivered twice.
fn assert_in_sequence(log: &[(u8, u64)], listeners: u8) {
    let n = log.iter().map(|&(_, s)| s).max().unwrap_or(0);
    let want: Vec<(u8, u64)> = (1..=n)
        .flat_map(|s| (1..=listeners).map(move |l| (l, s)))
        .collect();
    let mut got: Vec<(u8, u64)> = log.to_vec();
    // Within one event, listeners run in subscription order.
    assert!(
        got.windows(2).all(|w| w[0].1 <= w[1].1),
        "out of sequence: {got:?}"
    );
    got.sort_unstable_by_key(|&(l, s)| (s, l));
    assert_eq!(got, want, "lost or repeated events");
}

mod delivery {
    use super::*;
    use crate::delivery::Delivery;

    /// Two threads cause events (under an owner's lock, as a policy does) and deliver them; a
    /// listener causes more events from inside its call. Whatever the schedule: one sequence,
    /// every event to every listener, in order, nothing stranded in the queue.
    #[test]
    fn events_are_delivered_in_sequence_when_listeners_call_back_in() {
        shuttle::check_random(
            || {
                let owner = Arc::new(Mutex::new(()));
                let events: Arc<Delivery<u64>> = Arc::new(Delivery::new());
                let log = Arc::new(Mutex::new(Vec::new()));
                let cause = {
                    let (owner, events) = (owner.clone(), events.clone());
                    move || {
                        {
                            let _owner = owner.lock().unwrap();
                            events.queue(|seq| seq);
                        }
                        events.deliver();
                    }
                };
                {
                    let (log, cause) = (log.clone(), cause.clone());
                    events.subscribe(Arc::new(move |&seq: &u64| {
                        log.lock().unwrap().push((1, seq));
                        if seq % 3 == 1 && seq < 10 {
                            cause(); // re-entrant: queued behind this event
                        }
                    }));
                }
                {
                    let log = log.clone();
                    events.subscribe(Arc::new(move |&seq: &u64| {
                        log.lock().unwrap().push((2, seq));
                    }));
                }
                let threads: Vec<_> = (0..2)
                    .map(|_| {
                        let cause = cause.clone();
                        thread::spawn(move || {
                            for _ in 0..3 {
                                cause();
                            }
                        })
                    })
                    .collect();
                cause();
                for t in threads {
                    t.join().unwrap();
                }
                let log = log.lock().unwrap();
                assert_in_sequence(&log, 2);
                assert!(log.len() >= 14, "7 caused directly, more by the listener");
            },
            SCHEDULES,
        );
    }

    /// A listener subscribed from inside a listener, while other events may wait in the
    /// queue, gets exactly the events queued after it subscribed.
    #[test]
    fn a_listener_subscribed_from_a_listener_gets_the_events_after_it() {
        shuttle::check_random(
            || {
                let events: Arc<Delivery<u64>> = Arc::new(Delivery::new());
                let late: Arc<Mutex<Vec<u64>>> = Arc::default();
                let all: Arc<Mutex<Vec<u64>>> = Arc::default();
                {
                    let (events2, late) = (events.clone(), late.clone());
                    events.subscribe(Arc::new(move |&seq: &u64| {
                        if seq == 2 {
                            let late = late.clone();
                            events2.subscribe(Arc::new(move |&s: &u64| {
                                late.lock().unwrap().push(s);
                            }));
                        }
                    }));
                }
                {
                    let all = all.clone();
                    events.subscribe(Arc::new(move |&seq: &u64| {
                        all.lock().unwrap().push(seq);
                    }));
                }
                let t = {
                    let events = events.clone();
                    thread::spawn(move || {
                        for _ in 0..3 {
                            events.queue(|s| s);
                            events.deliver();
                        }
                    })
                };
                for _ in 0..3 {
                    events.queue(|s| s);
                    events.deliver();
                }
                t.join().unwrap();
                assert_eq!(*all.lock().unwrap(), [1, 2, 3, 4, 5, 6]);
                let late = late.lock().unwrap();
                if let Some(&first) = late.first() {
                    assert!(first > 2 && late.iter().copied().eq(first..=6), "{late:?}");
                }
            },
            SCHEDULES,
        );
    }
}

#[cfg(feature = "outlier")]
mod outlier {
    use std::sync::OnceLock;
    use std::time::Duration;

    use tripline::{Clock, ManualClock};

    use super::*;
    use crate::outlier::{HostOutcome, OutlierConfig, OutlierDetector, OutlierEventKind};

    /// A clock that reads the detector it times.
    #[derive(Clone)]
    struct ReadingClock {
        clock: ManualClock,
        detector: Arc<OnceLock<OutlierDetector<u32, ReadingClock>>>,
    }

    impl Clock for ReadingClock {
        fn now(&self) -> u64 {
            if let Some(d) = self.detector.get() {
                let _ = (d.stats(), d.host_status(&0), d.ejected());
            }
            self.clock.now()
        }
    }

    /// Three threads record (ejecting hosts), pick, tick on a moving clock and change the
    /// host set; the clock reads the detector; one listener records on another host, reads
    /// the figures and changes the set from inside its call. Whatever the schedule: no
    /// deadlock, one sequence of events delivered in order to every listener, the cap held at
    /// every ejection, a host to pick, every pick given back.
    #[test]
    fn the_detector_keeps_its_promises_with_a_clock_and_listeners_that_call_back_in() {
        shuttle::check_random(
            || {
                let clock = ReadingClock {
                    clock: ManualClock::new(),
                    detector: Arc::default(),
                };
                let config = OutlierConfig::builder()
                    .interval(Duration::from_secs(1))
                    .base_ejection_time(Duration::from_secs(2))
                    .max_ejection_percent(20)
                    .build()
                    .unwrap();
                let d = OutlierDetector::builder(config)
                    .clock(clock.clone())
                    .seed(3)
                    .build(0..10u32)
                    .unwrap();
                assert!(clock.detector.set(d.clone()).is_ok());
                let log = Arc::new(Mutex::new(Vec::new()));
                let ejected_active = Arc::new(Mutex::new(Vec::new()));
                {
                    let (d2, log, active) = (d.clone(), log.clone(), ejected_active.clone());
                    d.subscribe(move |e| {
                        log.lock().unwrap().push((1, e.seq));
                        let _ = d2.stats();
                        match (e.host, &e.kind) {
                            (Some(h), OutlierEventKind::Ejected { .. }) => {
                                active.lock().unwrap().push(e.ejections_active);
                                if h == 0 {
                                    // Calls back in: another host's failures, and a deploy.
                                    for _ in 0..5 {
                                        d2.record_host(&5, HostOutcome::Status(500));
                                    }
                                    let _ = d2.add_host(10);
                                }
                            }
                            (Some(_), OutlierEventKind::Returned) => {
                                let p = d2.pick();
                                d2.record(p, HostOutcome::Success);
                            }
                            _ => {}
                        }
                    });
                }
                {
                    let log = log.clone();
                    d.subscribe(move |e| log.lock().unwrap().push((2, e.seq)));
                }
                let failing = {
                    let d = d.clone();
                    thread::spawn(move || {
                        for _ in 0..5 {
                            d.record_host(&0, HostOutcome::Status(500));
                        }
                        let p = d.pick();
                        d.record(p, HostOutcome::Status(503));
                    })
                };
                let operator = {
                    let (d, clock) = (d.clone(), clock.clone());
                    thread::spawn(move || {
                        clock.clock.advance(Duration::from_secs(3));
                        d.tick();
                        let _ = d.remove_host(&9);
                    })
                };
                for _ in 0..5 {
                    d.record_host(&7, HostOutcome::Status(500));
                }
                drop(d.pick());
                failing.join().unwrap();
                operator.join().unwrap();

                assert_in_sequence(&log.lock().unwrap(), 2);
                // 20 % of 9 to 11 hosts: never more than 2 out.
                for &active in ejected_active.lock().unwrap().iter() {
                    assert!(active <= 2, "{active} ejected");
                }
                assert!(!d.selectable().is_empty());
                for h in d.hosts() {
                    assert_eq!(d.host_status(&h).unwrap().in_flight, 0);
                }
                assert_eq!(d.stats().listener_panics, 0);
            },
            SCHEDULES,
        );
    }
}

#[cfg(feature = "bulkhead")]
mod bulkhead {
    use std::time::Duration;

    use shuttle::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::bulkhead::{Bulkhead, BulkheadConfig, BulkheadPermit, Entry};

    /// Holds a permit while counting it: never more than `max` held at once.
    fn hold(held: &AtomicU32, max: u32, permit: BulkheadPermit) {
        let n = held.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(n <= max, "{n} slots held, max {max}");
        thread::yield_now();
        held.fetch_sub(1, Ordering::SeqCst);
        drop(permit);
    }

    /// Three threads enter, wait (collecting their slot, or giving up), and leave, in every
    /// order shuttle tries: never more slots held than `max_concurrent`, every call either
    /// served or refused, and, once all are done, every slot and place back.
    #[test]
    fn slots_and_places_are_bounded_and_all_come_back() {
        shuttle::check_random(
            || {
                let b = Bulkhead::new(
                    BulkheadConfig::builder()
                        .max_concurrent(1)
                        .max_waiting(1)
                        .max_wait(Duration::from_secs(1))
                        .build()
                        .unwrap(),
                );
                let held = Arc::new(AtomicU32::new(0));
                let served = Arc::new(AtomicU32::new(0));
                let threads: Vec<_> = (0..3)
                    .map(|t| {
                        let (b, held, served) = (b.clone(), held.clone(), served.clone());
                        thread::spawn(move || {
                            for _ in 0..2 {
                                match b.enter() {
                                    Ok(Entry::Admitted(p)) => {
                                        served.fetch_add(1, Ordering::SeqCst);
                                        hold(&held, 1, p);
                                    }
                                    Ok(Entry::Queued(mut w)) => {
                                        let mut tries = 0;
                                        loop {
                                            if let Some(p) = w.try_slot() {
                                                served.fetch_add(1, Ordering::SeqCst);
                                                hold(&held, 1, p);
                                                break;
                                            }
                                            tries += 1;
                                            if tries > 2 + t {
                                                let _ = w.time_out();
                                                break;
                                            }
                                            thread::yield_now();
                                        }
                                    }
                                    Err(_) => {}
                                }
                            }
                        })
                    })
                    .collect();
                for t in threads {
                    t.join().unwrap();
                }
                let r = b.rejections();
                let served = u64::from(served.load(Ordering::SeqCst));
                assert_eq!(served + r.queue_full + r.timed_out, 6);
                assert!(served >= 1);
                assert_eq!((b.in_flight(), b.waiting(), b.available()), (0, 0, 1));
                // Everything given back: the next call takes the slot at once.
                assert!(matches!(b.enter(), Ok(Entry::Admitted(_))));
            },
            SCHEDULES,
        );
    }
}

#[cfg(feature = "chaos")]
mod draws {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64 as StdAtomicU64, Ordering as StdOrdering};

    use rand::{RngCore, SeedableRng};

    use super::*;
    use crate::chaos::{Chaos, ChaosConfig};

    /// A generator that counts its draws and decides once more from inside each draw.
    struct CallingBack {
        rng: rand_pcg::Pcg64Mcg,
        chaos: Arc<OnceLock<Chaos>>,
        draws: Arc<StdAtomicU64>,
        inside: bool,
    }

    impl RngCore for CallingBack {
        fn next_u32(&mut self) -> u32 {
            self.draws.fetch_add(1, StdOrdering::Relaxed);
            if !self.inside {
                if let Some(c) = self.chaos.get() {
                    self.inside = true;
                    let _ = (c.decide(), c.stats());
                    self.inside = false;
                }
            }
            self.rng.next_u32()
        }
        fn next_u64(&mut self) -> u64 {
            u64::from(self.next_u32())
        }
        fn fill_bytes(&mut self, dst: &mut [u8]) {
            self.rng.fill_bytes(dst);
        }
    }

    /// Two threads decide while the generator, drawn with no lock held, decides again from
    /// inside its draws: no deadlock, every decision made (from the generator or the spare
    /// stream), and the generator back in its slot afterwards: the next decisions, made one
    /// at a time, all draw from it.
    #[test]
    fn a_generator_that_calls_back_in_is_never_drawn_under_a_lock_nor_lost() {
        shuttle::check_random(
            || {
                let slot: Arc<OnceLock<Chaos>> = Arc::default();
                let draws = Arc::new(StdAtomicU64::new(0));
                let rng = CallingBack {
                    rng: rand_pcg::Pcg64Mcg::seed_from_u64(5),
                    chaos: slot.clone(),
                    draws: draws.clone(),
                    inside: false,
                };
                let chaos =
                    Chaos::with_rng(ChaosConfig::builder().error(0.5).build().unwrap(), rng);
                chaos.enable();
                assert!(slot.set(chaos.clone()).is_ok());
                let t = {
                    let chaos = chaos.clone();
                    thread::spawn(move || {
                        for _ in 0..3 {
                            let _ = chaos.decide();
                        }
                    })
                };
                for _ in 0..3 {
                    let _ = chaos.decide();
                }
                t.join().unwrap();
                // Six decisions, and one more from inside each draw of the generator that did
                // not find it busy.
                let made = chaos.stats().calls;
                assert!(made >= 6, "{made}");
                // Back in its slot: alone, each decision draws from the generator (once for
                // itself, the callback's own decision from the spare stream).
                let before = draws.load(StdOrdering::Relaxed);
                for _ in 0..4 {
                    let _ = chaos.decide();
                }
                assert_eq!(draws.load(StdOrdering::Relaxed) - before, 4);
            },
            SCHEDULES,
        );
    }
}

#[cfg(feature = "shed")]
mod shed {
    use std::task::{Context, Poll, Wake, Waker};

    use super::*;
    use crate::shed::Priority;
    use crate::shed::slots::{Admit, Slots};

    /// A waker that reads and asks the pool whose grant wakes it.
    struct Reading(Arc<Slots>);

    impl Wake for Reading {
        fn wake(self: Arc<Self>) {
            let _ = (self.0.counts(), self.0.queued());
            drop(self.0.try_admit(Priority::CRITICAL));
        }
    }

    /// Three threads take, queue for, wait on (through a waker that calls the pool back),
    /// give up and release slots: no deadlock (a grant is sent after the lock is released),
    /// never more slots held than the capacity, every call accounted for, and everything back
    /// at the end.
    #[test]
    fn grants_are_sent_outside_the_lock_to_wakers_that_call_back_in() {
        shuttle::check_random(
            || {
                let pool = Slots::new(1, None, 2);
                let threads: Vec<_> = (0..3)
                    .map(|t| {
                        let pool = pool.clone();
                        thread::spawn(move || {
                            let waker = Waker::from(Arc::new(Reading(pool.clone())));
                            let mut cx = Context::from_waker(&waker);
                            match pool.admit(Priority::DEFAULT) {
                                Ok(Admit::Now(slot)) => {
                                    assert!(pool.in_flight() <= 1);
                                    thread::yield_now();
                                    drop(slot);
                                }
                                Ok(Admit::Queued(mut ticket)) => {
                                    if t == 2 {
                                        let _ = ticket.time_out();
                                        return;
                                    }
                                    for _ in 0..4 {
                                        let outcome = {
                                            let fut = std::pin::pin!(ticket.outcome());
                                            fut.poll(&mut cx)
                                        };
                                        if let Poll::Ready(granted) = outcome {
                                            assert!(pool.in_flight() <= 1);
                                            drop(granted);
                                            return;
                                        }
                                        thread::yield_now();
                                    }
                                    let _ = ticket.time_out();
                                }
                                Err(_) => {}
                            }
                        })
                    })
                    .collect();
                for t in threads {
                    t.join().unwrap();
                }
                assert_eq!((pool.in_flight(), pool.waiting()), (0, 0));
                let c = pool.counts();
                // Every call of the threads (and of the wakers) took a slot or was refused.
                let refused = c.full + c.shed + c.queue_full + c.evicted + c.timed_out;
                assert!(c.admitted + c.admitted_after_wait + refused >= 3, "{c:?}");
                assert!(pool.try_admit(Priority::DEFAULT).is_ok());
            },
            SCHEDULES,
        );
    }
}
