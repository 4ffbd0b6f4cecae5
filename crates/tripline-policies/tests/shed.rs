//! Priority shedding: the shares, the priority queue (order, eviction, timeout, cancellation),
//! the fairness rule under the adaptive limiter, the tower layer, the pipeline, bad input.
#![cfg(all(feature = "shed", feature = "limiter"))]

mod support;

use std::time::Duration;

use tokio::time::Instant;
use tripline::ManualClock;
use tripline_policies::limiter::{AimdConfig, LimitAlgorithm, Limiter, LimiterConfig};
use tripline_policies::shed::{
    Priority, Refusal, Shares, ShedAdmission, ShedConfig, ShedTicket, Shedder,
};

fn shedder(capacity: u32, max_waiting: u32) -> Shedder {
    let mut b = ShedConfig::builder()
        .capacity(capacity)
        .max_waiting(max_waiting);
    if max_waiting > 0 {
        b = b.max_wait(Duration::from_secs(1));
    }
    Shedder::new(b.build().unwrap())
}

fn queued(s: &Shedder, p: Priority) -> ShedTicket {
    match s.admit(p).unwrap() {
        ShedAdmission::Queued(t) => t,
        ShedAdmission::Now(_) => panic!("expected to queue"),
    }
}

#[test]
fn each_priority_fills_its_share_and_no_more() {
    let s = shedder(10, 0);
    assert_eq!(s.cutoff(Priority::SHEDDABLE), 5);
    assert_eq!(s.cutoff(Priority::DEFAULT), 9);
    assert_eq!(s.cutoff(Priority::CRITICAL), 10);
    let cards: Vec<_> = (0..5)
        .map(|_| s.try_acquire(Priority::SHEDDABLE).unwrap())
        .collect();
    let e = s.try_acquire(Priority::SHEDDABLE).unwrap_err();
    assert_eq!(
        (e.reason(), e.in_flight(), e.capacity()),
        (Refusal::Shed, 5, 10)
    );
    let ordinary: Vec<_> = (0..4)
        .map(|_| s.try_acquire(Priority::DEFAULT).unwrap())
        .collect();
    assert_eq!(
        s.try_acquire(Priority::DEFAULT).unwrap_err().reason(),
        Refusal::Shed
    );
    let critical = s.try_acquire(Priority::CRITICAL).unwrap();
    assert_eq!(
        s.try_acquire(Priority::CRITICAL).unwrap_err().reason(),
        Refusal::Full
    );
    let st = s.stats();
    assert_eq!((st.admitted, st.shed, st.full), (10, 2, 1));
    drop((cards, ordinary, critical));
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn numeric_priorities_get_shares_in_between() {
    let s = shedder(100, 0);
    let cutoffs: Vec<u32> = [0u8, 32, 64, 128, 192, 255]
        .iter()
        .map(|&p| s.cutoff(Priority::new(p)))
        .collect();
    assert_eq!(cutoffs, [50, 60, 70, 90, 96, 100]);
    assert!(cutoffs.windows(2).all(|w| w[0] <= w[1]));
}

/// The SRE book's criticality rule, pinned at every level of load: a call is never refused
/// while a call of lower priority would be admitted in the same state.
#[test]
fn a_call_is_never_refused_while_a_lower_one_would_be_admitted() {
    let s = shedder(37, 0);
    let mut held = Vec::new();
    for _ in 0..37 {
        let admitted: Vec<bool> = (0..=255u8)
            .map(|p| s.would_admit(Priority::new(p)))
            .collect();
        for p in 1..=255usize {
            assert!(
                !admitted[p - 1] || admitted[p],
                "priority {p} refused while {} admitted, at {} in flight",
                p - 1,
                s.in_flight()
            );
        }
        held.push(s.try_acquire(Priority::CRITICAL).unwrap());
    }
}

#[test]
fn the_queue_serves_the_highest_priority_first_and_each_priority_in_order() {
    let s = shedder(1, 8);
    let first = s.try_acquire(Priority::DEFAULT).unwrap();
    let mut low = queued(&s, Priority::SHEDDABLE);
    let mut a = queued(&s, Priority::DEFAULT);
    let mut b = queued(&s, Priority::DEFAULT);
    let mut crit = queued(&s, Priority::CRITICAL);
    assert_eq!(
        s.queue(),
        [
            Priority::CRITICAL,
            Priority::DEFAULT,
            Priority::DEFAULT,
            Priority::SHEDDABLE
        ]
    );
    drop(first);
    let c = crit.try_take().unwrap().unwrap();
    assert!(a.try_take().is_none() && b.try_take().is_none() && low.try_take().is_none());
    drop(c);
    let x = a.try_take().unwrap().unwrap();
    assert!(b.try_take().is_none());
    drop(x);
    let y = b.try_take().unwrap().unwrap();
    drop(y);
    // The sheddable waiter's share is half of one slot: ceil(0.5) = 1, so it gets in too.
    let _z = low.try_take().unwrap().unwrap();
    assert_eq!(s.stats().admitted_after_wait, 4);
}

#[test]
fn a_waiter_whose_share_is_used_up_lets_a_higher_one_pass() {
    let s = shedder(4, 8);
    let held: Vec<_> = (0..2)
        .map(|_| s.try_acquire(Priority::CRITICAL).unwrap())
        .collect();
    // Sheddable calls may hold 2 of 4 slots: with 2 busy, a sheddable call waits.
    let mut low = queued(&s, Priority::SHEDDABLE);
    // ... while a default one takes a free slot at once.
    let d = s.try_acquire(Priority::DEFAULT).unwrap();
    assert!(low.try_take().is_none());
    drop(d);
    assert!(
        low.try_take().is_none(),
        "still two busy: its share is used"
    );
    drop(held);
    let _l = low.try_take().unwrap().unwrap();
}

#[test]
fn a_full_queue_makes_room_by_pushing_out_the_newest_lowest_waiter() {
    let s = shedder(1, 2);
    let _busy = s.try_acquire(Priority::CRITICAL).unwrap();
    let mut old = queued(&s, Priority::SHEDDABLE);
    let mut new = queued(&s, Priority::SHEDDABLE);
    let refused = s.admit(Priority::SHEDDABLE).unwrap_err();
    assert_eq!(refused.reason(), Refusal::QueueFull);
    let _crit = queued(&s, Priority::CRITICAL);
    assert_eq!(
        new.try_take().unwrap().unwrap_err().reason(),
        Refusal::Evicted
    );
    assert!(old.try_take().is_none());
    // A default call pushes out the last sheddable one; another default finds no one lower.
    let _d = queued(&s, Priority::DEFAULT);
    assert_eq!(
        old.try_take().unwrap().unwrap_err().reason(),
        Refusal::Evicted
    );
    assert_eq!(
        s.admit(Priority::DEFAULT).unwrap_err().reason(),
        Refusal::QueueFull
    );
    let st = s.stats();
    assert_eq!((st.evicted, st.queue_full), (2, 2));
}

#[tokio::test(start_paused = true)]
async fn a_wait_times_out_after_max_wait_and_leaves_the_queue() {
    let s = shedder(1, 4);
    let _busy = s.try_acquire(Priority::DEFAULT).unwrap();
    let start = Instant::now();
    let e = s.acquire(Priority::CRITICAL).await.unwrap_err();
    assert_eq!(e.reason(), Refusal::TimedOut);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!((s.waiting(), s.stats().timed_out), (0, 1));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_gets_the_slot_the_moment_it_frees() {
    let s = shedder(1, 4);
    let held = s.try_acquire(Priority::DEFAULT).unwrap();
    let waiter = tokio::spawn({
        let s = s.clone();
        async move {
            let start = Instant::now();
            let p = s.acquire(Priority::DEFAULT).await.unwrap();
            (start.elapsed(), p.priority())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.waiting(), 1);
    drop(held);
    assert_eq!(
        waiter.await.unwrap(),
        (Duration::from_millis(300), Priority::DEFAULT)
    );
    assert_eq!(s.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_wait_leaves_the_queue_and_a_slot_granted_to_it_comes_back() {
    let s = shedder(1, 4);
    let held = s.try_acquire(Priority::DEFAULT).unwrap();
    let r = tokio::time::timeout(Duration::from_millis(10), s.acquire(Priority::DEFAULT)).await;
    assert!(r.is_err());
    assert_eq!(s.waiting(), 0);
    // Granted, never taken.
    let t = queued(&s, Priority::DEFAULT);
    drop(held);
    assert_eq!(s.in_flight(), 1);
    drop(t);
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn time_out_after_a_grant_hands_over_the_slot() {
    let s = shedder(1, 4);
    let held = s.try_acquire(Priority::DEFAULT).unwrap();
    let t = queued(&s, Priority::DEFAULT);
    drop(held);
    let p = t.time_out().unwrap();
    assert_eq!(s.in_flight(), 1);
    drop(p);
    assert_eq!(s.stats().timed_out, 0);
}

/// GymFolks: the exercise catalog turns slow, and workout cards (sheddable) pile up in the
/// pool of 200; `POST /log-set` (critical) still finds slots, because cards may hold only half.
#[test]
fn slow_sheddable_calls_never_lock_out_the_critical_ones() {
    let pool = Shedder::new(ShedConfig::builder().capacity(200).build().unwrap());
    let mut stuck = Vec::new();
    for _ in 0..1000 {
        if let Ok(p) = pool.try_acquire(Priority::SHEDDABLE) {
            stuck.push(p); // each card hangs on the vendor
        }
    }
    assert_eq!(stuck.len(), 100);
    let log_sets: Vec<_> = (0..100)
        .map(|_| pool.try_acquire(Priority::CRITICAL).unwrap())
        .collect();
    assert_eq!(pool.in_flight(), 200);
    drop(log_sets);
}

/// The fairness rule. After an incident the AIMD limit sits at its minimum (10), critical
/// calls hold 4 slots (below half the limit, so the limiter is not "busy"), and the sheddable
/// share (30 % of 10: 3 slots) is used up by them. Were refused demand not counted, the limit
/// would never grow again and the sheddable class would be refused for ever; counted, the
/// limit grows with each good sample until the sheddable share fits.
#[test]
fn a_sheddable_class_is_admitted_again_once_capacity_returns() {
    let clock = ManualClock::new();
    let aimd = AimdConfig::builder()
        .min_limit(10)
        .initial_limit(100)
        .max_limit(200)
        .build()
        .unwrap();
    let config = LimiterConfig::builder()
        .algorithm(LimitAlgorithm::Aimd(aimd))
        .shares(Shares::new(100.0, 90.0, 30.0).unwrap())
        .build()
        .unwrap();
    let limiter = Limiter::with_clock(config, clock.clone());
    // The incident: every call dropped.
    while limiter.limit() > 10 {
        limiter.try_acquire(Priority::CRITICAL).unwrap().dropped();
    }
    assert_eq!(limiter.limit(), 10);
    // Recovered: four critical calls at a time, each answering well in 10 ms; one sheddable
    // call offered per round.
    let mut admitted_in_round = None;
    for round in 0..50 {
        let critical: Vec<_> = (0..4)
            .map(|_| limiter.try_acquire(Priority::CRITICAL).unwrap())
            .collect();
        match limiter.try_acquire(Priority::SHEDDABLE) {
            Ok(p) => {
                admitted_in_round.get_or_insert(round);
                p.success();
            }
            Err(e) => assert_eq!(e.reason(), Refusal::Shed),
        }
        clock.advance(Duration::from_millis(10));
        critical.into_iter().for_each(|p| p.success());
    }
    let round = admitted_in_round.expect("the sheddable class was starved");
    assert!(round <= 10, "admitted again only at round {round}");
}

#[cfg(feature = "tower")]
mod tower_layer {
    use std::time::Duration;

    use tower::{Service, ServiceExt, service_fn};
    use tripline_policies::BoxError;
    use tripline_policies::shed::{Priority, Refusal, Shed, ShedLayer};

    use super::shedder;

    #[tokio::test(start_paused = true)]
    async fn the_layer_takes_each_requests_priority() {
        let s = shedder(2, 0);
        let svc = tower::Layer::layer(
            &ShedLayer::new(s.clone()).priority(|p: &Priority| *p),
            service_fn(|p: Priority| async move { Ok::<_, BoxError>(p) }),
        );
        let _busy = s.try_acquire(Priority::DEFAULT).unwrap();
        let err = svc.clone().oneshot(Priority::SHEDDABLE).await.unwrap_err();
        assert_eq!(err.downcast_ref::<Shed>().unwrap().reason(), Refusal::Shed);
        assert_eq!(
            svc.oneshot(Priority::CRITICAL).await.unwrap(),
            Priority::CRITICAL
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_queued_request_takes_its_place_in_call_and_runs_when_a_slot_frees() {
        let s = shedder(1, 4);
        let mut svc = tower::Layer::layer(
            &ShedLayer::new(s.clone()),
            service_fn(|x: u32| async move { Ok::<_, BoxError>(x) }),
        );
        let held = s.try_acquire(Priority::DEFAULT).unwrap();
        let fut = svc.ready().await.unwrap().call(7);
        assert_eq!(s.waiting(), 1, "queued in call, before any poll");
        let task = tokio::spawn(fut);
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(held);
        assert_eq!(task.await.unwrap().unwrap(), 7);
        assert_eq!(s.in_flight(), 0);
    }

    #[cfg(feature = "http")]
    #[tokio::test(start_paused = true)]
    async fn with_http_the_priority_comes_from_the_request_extensions() {
        use tripline_policies::shed::FromExtensions;
        let s = shedder(2, 0);
        let svc = tower::Layer::layer(
            &ShedLayer::new(s.clone()).priority(FromExtensions),
            service_fn(|_: http::Request<()>| async { Ok::<_, BoxError>(()) }),
        );
        let _busy = s.try_acquire(Priority::DEFAULT).unwrap();
        let mut req = http::Request::new(());
        req.extensions_mut().insert(Priority::SHEDDABLE);
        assert!(svc.clone().oneshot(req).await.is_err());
        let mut req = http::Request::new(());
        req.extensions_mut().insert(Priority::CRITICAL);
        assert!(svc.oneshot(req).await.is_ok());
    }
}

#[cfg(feature = "pipeline")]
#[tokio::test(start_paused = true)]
async fn in_the_pipeline_a_shed_call_is_a_local_refusal_the_breaker_ignores() {
    use tripline_policies::pipeline::{Pipeline, PipelineError};
    let s = shedder(2, 0);
    let breaker = support::small_breaker("shed");
    let pipeline = Pipeline::builder()
        .breaker(breaker.clone())
        .shed(s.clone())
        .build()
        .unwrap();
    let _busy = s.try_acquire(Priority::DEFAULT).unwrap();
    for _ in 0..10 {
        let r = pipeline
            .call_with_priority(Priority::SHEDDABLE, || async { Ok::<_, support::Boom>(()) })
            .await;
        let e = r.unwrap_err();
        assert!(matches!(e, PipelineError::Shed(_)) && e.is_local_rejection());
    }
    let m = breaker.metrics();
    assert_eq!((m.failed_calls, m.ignored_calls), (0, 10));
}

#[test]
fn bad_settings_are_refused_with_the_field_the_value_and_what_is_allowed() {
    let cases = [
        (
            ShedConfig::builder().capacity(0).build().unwrap_err(),
            "capacity must be in [1, 1000000], got 0",
        ),
        (
            ShedConfig::builder().max_waiting(3).build().unwrap_err(),
            "max_wait must be in (0ns, 3600s] when max_waiting > 0, got 0ns",
        ),
        (
            Shares::new(0.0, 0.0, 0.0).unwrap_err(),
            "shares.critical must be in (0, 100], got 0",
        ),
        (
            Shares::new(80.0, 90.0, 50.0).unwrap_err(),
            "shares.default must be in (0, 100] and at most shares.critical (80), got 90",
        ),
        (
            Shares::new(100.0, 90.0, f64::NAN).unwrap_err(),
            "shares.sheddable must be in (0, 100] and at most shares.default (90), got NaN",
        ),
        (
            "urgent".parse::<Priority>().unwrap_err(),
            "priority must be \"critical\", \"default\", \"sheddable\" or a number in [0, 255], got urgent",
        ),
    ];
    for (e, want) in cases {
        assert_eq!(e.to_string(), want);
    }
}
