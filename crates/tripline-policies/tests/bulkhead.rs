//! Bulkhead: the concurrency cap, the bounded queue, the wait's timeout on paused time, and
//! the tower service.
#![cfg(feature = "bulkhead")]

mod support;

use std::time::Duration;

use tokio::time::Instant;
use tripline_policies::bulkhead::{Bulkhead, BulkheadConfig};

fn bulkhead(max_concurrent: u32, max_waiting: u32, max_wait_ms: u64) -> Bulkhead {
    Bulkhead::new(
        BulkheadConfig::builder()
            .max_concurrent(max_concurrent)
            .max_waiting(max_waiting)
            .max_wait(Duration::from_millis(max_wait_ms))
            .build()
            .unwrap(),
    )
}

#[test]
fn caps_concurrency_and_refuses_at_once_without_a_queue() {
    let b = bulkhead(2, 0, 0);
    let s1 = b.try_acquire().unwrap();
    let _s2 = b.try_acquire().unwrap();
    let full = b.try_acquire().unwrap_err();
    assert!(!full.timed_out());
    assert_eq!((b.in_flight(), b.available()), (2, 0));
    drop(s1);
    assert_eq!(b.available(), 1);
    let _s3 = b.try_acquire().unwrap();
    assert_eq!(b.rejections().queue_full, 1);
}

#[tokio::test(start_paused = true)]
async fn the_wait_times_out_after_max_wait() {
    let b = bulkhead(1, 4, 250);
    let _held = b.try_acquire().unwrap();
    let start = Instant::now();
    let err = b.acquire().await.unwrap_err();
    assert!(err.timed_out());
    assert_eq!(err.waited(), Some(Duration::from_millis(250)));
    assert_eq!(start.elapsed(), Duration::from_millis(250));
    assert_eq!(b.waiting(), 0);
    assert_eq!(b.rejections().timed_out, 1);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gets_the_slot_when_it_frees() {
    let b = bulkhead(1, 4, 1000);
    let held = b.try_acquire().unwrap();
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            let start = Instant::now();
            let _slot = b.acquire().await.unwrap();
            start.elapsed()
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.waiting(), 1);
    drop(held);
    assert_eq!(waiter.await.unwrap(), Duration::from_millis(300));
    assert_eq!(b.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_queue_is_bounded() {
    let b = bulkhead(1, 1, 1000);
    let _held = b.try_acquire().unwrap();
    let first = tokio::spawn({
        let b = b.clone();
        async move { b.acquire().await.map(drop) }
    });
    tokio::task::yield_now().await;
    assert_eq!(b.waiting(), 1);
    // The queue is full: refused at once, without waiting.
    let start = Instant::now();
    let err = b.acquire().await.unwrap_err();
    assert!(!err.timed_out());
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert!(first.await.unwrap().is_err(), "the queued one times out");
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_leaves_the_queue() {
    let b = bulkhead(1, 1, 1000);
    let _held = b.try_acquire().unwrap();
    let r = tokio::time::timeout(Duration::from_millis(10), b.acquire()).await;
    assert!(r.is_err());
    assert_eq!(b.waiting(), 0);
}

#[test]
fn bad_configuration_is_rejected() {
    let cases = [
        (
            BulkheadConfig::builder()
                .max_concurrent(0)
                .build()
                .unwrap_err(),
            "max_concurrent must be in [1, 1000000], got 0",
        ),
        (
            BulkheadConfig::builder()
                .max_waiting(5)
                .build()
                .unwrap_err(),
            "max_wait must be in (0ns, 3600s] when max_waiting > 0, got 0ns",
        ),
        (
            BulkheadConfig::builder()
                .max_wait(Duration::from_secs(7200))
                .build()
                .unwrap_err(),
            "max_wait must be in [0ns, 3600s], got 7200s",
        ),
    ];
    for (err, msg) in cases {
        assert_eq!(err.to_string(), msg);
    }
}

#[cfg(feature = "tower")]
mod tower_service {
    use super::*;
    use tower::{Layer, ServiceExt, service_fn};
    use tripline_policies::bulkhead::{BulkheadFull, BulkheadLayer};

    #[tokio::test(start_paused = true)]
    async fn a_queued_call_goes_out_when_a_slot_frees() {
        let b = bulkhead(1, 1, 1000);
        let calls = support::Calls::default();
        let svc = BulkheadLayer::new(b.clone()).layer(service_fn({
            let calls = calls.clone();
            move |ms: u64| {
                calls.bump();
                async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok::<_, support::Boom>(ms)
                }
            }
        }));
        let first = tokio::spawn(svc.clone().oneshot(400));
        tokio::task::yield_now().await;
        assert_eq!(b.in_flight(), 1);
        let start = Instant::now();
        let second = svc.clone().oneshot(100).await.unwrap();
        assert_eq!(second, 100);
        // Waited for the first call's 400 ms, then ran 100 ms.
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        assert_eq!(first.await.unwrap().unwrap(), 400);
        assert_eq!((calls.get(), b.in_flight()), (2, 0));

        // Queue full: refused without calling the inner service.
        let _held = b.try_acquire().unwrap();
        let queued = tokio::spawn(svc.clone().oneshot(1));
        tokio::task::yield_now().await;
        let err = svc.clone().oneshot(1).await.unwrap_err();
        assert!(!err.downcast_ref::<BulkheadFull>().unwrap().timed_out());
        let err = queued.await.unwrap().unwrap_err();
        assert!(err.downcast_ref::<BulkheadFull>().unwrap().timed_out());
        assert_eq!(calls.get(), 2);
    }

    /// A service that records the order in which its calls arrive.
    fn recorder(
        order: &std::sync::Arc<std::sync::Mutex<Vec<u32>>>,
    ) -> impl tower::Service<u32, Response = u32, Error = support::Boom, Future = impl Send> + Clone
    {
        let order = order.clone();
        service_fn(move |x: u32| {
            order.lock().unwrap().push(x);
            async move { Ok::<_, support::Boom>(x) }
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_call_keeps_its_place_from_call_not_from_its_first_poll() {
        use tower::Service;
        let b = bulkhead(1, 2, 1000);
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut svc = BulkheadLayer::new(b.clone()).layer(recorder(&order));
        let held = b.try_acquire().unwrap();
        svc.ready().await.unwrap();
        let first = svc.call(1); // queued behind `held`, not polled yet
        assert_eq!(b.waiting(), 1);
        drop(held); // the slot frees before `first` is ever polled
        svc.ready().await.unwrap();
        let second = svc.call(2); // must queue behind `first`, not take the freed slot
        let (second, first) = tokio::join!(second, first);
        assert_eq!((first.unwrap(), second.unwrap()), (1, 2));
        assert_eq!(*order.lock().unwrap(), [1, 2], "first come, first served");
        assert_eq!((b.in_flight(), b.waiting()), (0, 0));
    }

    /// One slot, one place in the queue: a queued call A is handed the freed slot but has not
    /// been polled yet. It is no longer waiting, so the queue has room and B queues behind
    /// it instead of being refused.
    #[tokio::test(start_paused = true)]
    async fn a_call_queues_while_the_call_handed_the_freed_slot_is_unpolled() {
        use tower::Service;
        let b = bulkhead(1, 1, 1000);
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut svc = BulkheadLayer::new(b.clone()).layer(recorder(&order));
        let held = b.try_acquire().unwrap();
        svc.ready().await.unwrap();
        let a = svc.call(1);
        drop(held); // the slot goes to A, which is not polled yet
        assert_eq!(b.waiting(), 0, "A holds the slot");
        svc.ready().await.unwrap();
        let second = svc.call(2);
        assert_eq!(b.waiting(), 1);
        let (a, second) = tokio::join!(a, second);
        assert_eq!((a.unwrap(), second.expect("queued, not refused")), (1, 2));
        assert_eq!(*order.lock().unwrap(), [1, 2]);
        assert_eq!(b.rejections().queue_full, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_is_timed_from_the_call() {
        use tower::Service;
        let b = bulkhead(1, 1, 1000);
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut svc = BulkheadLayer::new(b.clone()).layer(recorder(&order));
        let _held = b.try_acquire().unwrap();
        let start = Instant::now();
        svc.ready().await.unwrap();
        let queued = svc.call(1);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let err = queued.await.unwrap_err();
        assert!(err.downcast_ref::<BulkheadFull>().unwrap().timed_out());
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(1000),
            "max_wait after the call"
        );
        assert!(order.lock().unwrap().is_empty());
    }
}

/// The bulkhead driven without a runtime, as an event loop or a simulator on virtual time
/// drives it ([`Bulkhead::enter`]): the same slots, the same first-come first-served queue,
/// the same counters.
mod own_time {
    use super::bulkhead;
    use tripline_policies::bulkhead::{BulkheadWaiter, Entry};

    fn queued(e: Entry) -> BulkheadWaiter {
        match e {
            Entry::Queued(w) => w,
            Entry::Admitted(_) => panic!("admitted, expected a place in the queue"),
        }
    }

    #[test]
    fn freed_slots_go_to_the_queue_in_order() {
        let b = bulkhead(2, 3, 1000);
        let Ok(Entry::Admitted(a)) = b.enter() else {
            panic!("a slot was free")
        };
        let Ok(Entry::Admitted(c)) = b.enter() else {
            panic!("a slot was free")
        };
        let mut w1 = queued(b.enter().unwrap());
        let mut w2 = queued(b.enter().unwrap());
        let mut w3 = queued(b.enter().unwrap());
        assert_eq!((b.in_flight(), b.waiting()), (2, 3));
        assert!(b.enter().is_err(), "the queue holds three");
        assert_eq!(b.rejections().queue_full, 1);
        assert!(w1.try_slot().is_none() && w2.try_slot().is_none());
        // A slot freed goes to the first in the queue, not to whoever asks first.
        drop(c);
        assert!(w3.try_slot().is_none());
        assert!(w2.try_slot().is_none());
        let s1 = w1.try_slot().expect("first in the queue");
        assert_eq!(b.waiting(), 2);
        assert!(w1.try_slot().is_none(), "collected once");
        // A newcomer queues behind the waiters even when a slot frees.
        drop(a);
        let mut w4 = queued(b.enter().unwrap());
        assert!(w4.try_slot().is_none());
        let s2 = w2.try_slot().expect("second in the queue");
        drop((s1, s2));
        assert!(w3.try_slot().is_some());
        assert!(w4.try_slot().is_some());
        assert_eq!(b.waiting(), 0);
        assert_eq!(b.rejections().timed_out, 0);
    }

    #[test]
    fn a_waiter_that_times_out_leaves_its_slot_to_the_next() {
        let b = bulkhead(1, 2, 250);
        let Ok(Entry::Admitted(held)) = b.enter() else {
            panic!("a slot was free")
        };
        let w1 = queued(b.enter().unwrap());
        let mut w2 = queued(b.enter().unwrap());
        // The slot is handed to w1 as it frees; w1 gives up before collecting it.
        drop(held);
        let refused = w1.time_out();
        assert!(refused.timed_out());
        assert_eq!(
            refused.waited(),
            Some(std::time::Duration::from_millis(250))
        );
        assert_eq!(b.rejections().timed_out, 1);
        assert!(
            w2.try_slot().is_some(),
            "the slot went on to the next waiter"
        );
        assert_eq!(b.waiting(), 0);
    }

    #[test]
    fn a_dropped_waiter_leaves_the_queue_uncounted() {
        let b = bulkhead(1, 1, 250);
        let Ok(Entry::Admitted(_held)) = b.enter() else {
            panic!("a slot was free")
        };
        let w = queued(b.enter().unwrap());
        assert!(b.enter().is_err());
        drop(w);
        assert_eq!(b.waiting(), 0);
        let _again = queued(b.enter().unwrap());
        assert_eq!(b.rejections().queue_full, 1);
        assert_eq!(b.rejections().timed_out, 0);
    }

    #[test]
    fn a_call_queues_while_the_freed_slot_waits_to_be_collected() {
        let b = bulkhead(1, 1, 1000);
        let Ok(Entry::Admitted(held)) = b.enter() else {
            panic!("a slot was free")
        };
        let mut first = queued(b.enter().unwrap());
        assert!(b.enter().is_err(), "one slot busy, one call waiting: full");
        drop(held); // handed to `first`, which has not collected it
        assert_eq!((b.in_flight(), b.waiting()), (1, 0));
        let mut second = queued(b.enter().expect("the queue has room"));
        assert_eq!(b.waiting(), 1);
        assert!(
            b.enter().is_err(),
            "one slot busy, one call waiting: full again"
        );
        let slot = first.try_slot().expect("its slot");
        assert!(second.try_slot().is_none());
        drop(slot);
        assert!(second.try_slot().is_some());
        assert_eq!(b.rejections().queue_full, 2);
    }

    /// The bounds hold whatever the interleaving of entries, collections, give-ups and
    /// releases: never more than `max_concurrent` slots held, never more than `max_waiting`
    /// calls waiting, and a call is refused only when both are full.
    #[test]
    fn the_bounds_hold_and_a_call_is_refused_only_when_both_are_full() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(11);
        for (max_concurrent, max_waiting) in [(1, 1), (2, 1), (1, 3), (3, 2)] {
            let b = bulkhead(max_concurrent, max_waiting, 1000);
            let mut held = Vec::new();
            let mut waiters: Vec<BulkheadWaiter> = Vec::new();
            for _ in 0..5000 {
                match rng.random_range(0..5) {
                    0 | 1 => {
                        let busy = held.len() as u32;
                        let waiting = waiters.len() as u32;
                        match b.enter() {
                            Ok(Entry::Admitted(p)) => held.push(p),
                            Ok(Entry::Queued(w)) => waiters.push(w),
                            Err(_) => {
                                // Refused: every slot is held or handed to a waiter, and the
                                // calls not yet handed one fill the queue.
                                let handed = (busy + waiting).min(max_concurrent) - busy;
                                assert!(busy + handed == max_concurrent);
                                assert_eq!(waiting - handed, max_waiting);
                            }
                        }
                    }
                    2 if !held.is_empty() => {
                        let i = rng.random_range(0..held.len());
                        drop(held.swap_remove(i));
                    }
                    3 if !waiters.is_empty() => {
                        let i = rng.random_range(0..waiters.len());
                        if let Some(p) = waiters[i].try_slot() {
                            held.push(p);
                            waiters.swap_remove(i);
                        }
                    }
                    4 if !waiters.is_empty() => {
                        let i = rng.random_range(0..waiters.len());
                        let _ = waiters.swap_remove(i).time_out();
                    }
                    _ => {}
                }
                assert!(b.in_flight() <= max_concurrent);
                assert!(b.waiting() <= max_waiting, "{} waiting", b.waiting());
            }
        }
    }

    #[test]
    fn a_waiter_that_got_its_slot_cannot_time_out() {
        let b = bulkhead(1, 1, 250);
        let Ok(Entry::Admitted(held)) = b.enter() else {
            panic!("a slot was free")
        };
        let mut w = queued(b.enter().unwrap());
        drop(held);
        let slot = w.try_slot().unwrap();
        let _ = w.time_out();
        assert_eq!(b.rejections().timed_out, 0, "it was served, not refused");
        assert_eq!(b.in_flight(), 1);
        drop(slot);
        assert_eq!(b.in_flight(), 0);
    }
}
