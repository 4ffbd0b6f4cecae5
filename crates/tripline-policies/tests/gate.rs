//! The Envoy-style gate: the (limit+1)-th item is refused and counted on each limit, the
//! remaining gauges are exact, the retry budget follows its formula, guards release on drop.
#![cfg(feature = "gate")]

use tripline_policies::gate::{Gate, GateConfig, Limit};

fn gate(requests: u32, pending: u32, retries: u32) -> Gate {
    Gate::new(
        GateConfig::builder()
            .max_requests(requests)
            .max_pending(pending)
            .max_retries(retries)
            .build()
            .unwrap(),
    )
}

#[test]
fn the_request_after_the_limit_is_refused_and_counted() {
    for limit in [1, 2, 7, 100] {
        let g = gate(limit, 0, 0);
        let held: Vec<_> = (0..limit).map(|_| g.try_request().unwrap()).collect();
        assert_eq!(g.remaining().requests, 0);
        let err = g.try_request().unwrap_err();
        assert_eq!((err.limit(), err.max()), (Limit::Requests, limit));
        assert_eq!(g.overflows().upstream_rq_overflow, 1);
        assert_eq!(g.overflows().upstream_rq_pending_overflow, 0);
        drop(held);
        assert_eq!((g.active(), g.remaining().requests), (0, limit));
    }
}

#[test]
fn pending_has_its_own_limit_and_counter() {
    let g = gate(1, 2, 0);
    let p1 = g.try_pending().unwrap();
    let _p2 = g.try_pending().unwrap();
    assert_eq!(g.remaining().pending, 0);
    assert_eq!(g.try_pending().unwrap_err().limit(), Limit::Pending);
    assert_eq!(g.overflows().upstream_rq_pending_overflow, 1);
    // Activation frees the pending slot and takes a request slot, which may be refused.
    let active = p1.activate().unwrap();
    assert_eq!((g.pending(), g.active()), (1, 1));
    let p3 = g.try_pending().unwrap();
    assert_eq!(p3.activate().unwrap_err().limit(), Limit::Requests);
    assert_eq!((g.pending(), g.active()), (1, 1));
    assert_eq!(g.overflows().upstream_rq_overflow, 1);
    drop(active);
    assert_eq!(g.remaining().requests, 1);
}

#[test]
fn retries_have_a_fixed_limit_without_a_budget() {
    let g = gate(10, 10, 3);
    let held: Vec<_> = (0..3).map(|_| g.try_retry().unwrap()).collect();
    assert_eq!(g.try_retry().unwrap_err().limit(), Limit::Retries);
    assert_eq!(g.overflows().upstream_rq_retry_overflow, 1);
    assert_eq!(g.remaining().retries, 0);
    drop(held);
    assert_eq!(g.remaining().retries, 3);
}

#[test]
fn the_retry_budget_is_max_of_the_minimum_and_the_share_of_active_plus_pending() {
    let g = Gate::new(
        GateConfig::builder()
            .max_requests(1000)
            .max_pending(1000)
            .max_retries(0) // ignored with a budget, as in Envoy
            .retry_budget(20.0, 3)
            .build()
            .unwrap(),
    );
    let mut held = Vec::new();
    // (active, pending) -> max(3, floor(20% × (active + pending)))
    for (active, pending, limit) in [
        (0, 0, 3),
        (10, 0, 3),
        (15, 4, 3),
        (20, 0, 4),
        (30, 20, 10),
        (99, 1, 20),
    ] {
        held.clear();
        for _ in 0..active {
            held.push(g.try_request().unwrap());
        }
        for _ in 0..pending {
            held.push(g.try_pending().unwrap());
        }
        assert_eq!(g.retry_limit(), limit, "active {active}, pending {pending}");
        let retries: Vec<_> = (0..limit).map(|_| g.try_retry().unwrap()).collect();
        assert!(g.try_retry().is_err());
        assert_eq!(g.remaining().retries, 0);
        drop(retries);
        assert_eq!(g.remaining().retries, limit);
    }
    assert_eq!(g.overflows().upstream_rq_retry_overflow, 6);
}

#[test]
fn guards_release_their_slots_on_drop() {
    let g = gate(2, 2, 2);
    {
        let _a = g.try_request().unwrap();
        let _b = g.try_pending().unwrap();
        let _c = g.try_retry().unwrap();
        assert_eq!((g.active(), g.pending(), g.retries()), (1, 1, 1));
    }
    assert_eq!((g.active(), g.pending(), g.retries()), (0, 0, 0));
    let r = g.remaining();
    assert_eq!((r.requests, r.pending, r.retries), (2, 2, 2));
}

#[test]
fn the_counters_are_named_as_in_envoy() {
    assert_eq!(Limit::Requests.overflow_counter(), "upstream_rq_overflow");
    assert_eq!(
        Limit::Pending.overflow_counter(),
        "upstream_rq_pending_overflow"
    );
    assert_eq!(
        Limit::Retries.overflow_counter(),
        "upstream_rq_retry_overflow"
    );
}

#[test]
fn bad_configuration_is_rejected() {
    let cases = [
        (
            GateConfig::builder().max_requests(0).build().unwrap_err(),
            "max_requests must be in [1, 1073741824], got 0",
        ),
        (
            GateConfig::builder()
                .max_pending(u32::MAX)
                .build()
                .unwrap_err(),
            "max_pending must be in [0, 1073741824], got 4294967295",
        ),
        (
            GateConfig::builder()
                .retry_budget(100.5, 3)
                .build()
                .unwrap_err(),
            "retry_budget.budget_percent must be in [0, 100], got 100.5",
        ),
        (
            GateConfig::builder()
                .retry_budget(-1.0, 3)
                .build()
                .unwrap_err(),
            "retry_budget.budget_percent must be in [0, 100], got -1",
        ),
    ];
    for (err, msg) in cases {
        assert_eq!(err.to_string(), msg);
    }
}

#[cfg(feature = "tower")]
mod tower_service {
    use super::*;
    use std::time::Duration;
    use tower::{Layer, Service, ServiceExt, service_fn};
    use tripline_policies::gate::{GateLayer, GateOverflow};

    #[tokio::test(start_paused = true)]
    async fn the_call_after_the_limit_fails_at_once_and_slots_free_on_completion() {
        let g = gate(2, 0, 0);
        let mut svc = GateLayer::new(g.clone()).layer(service_fn(|ms: u64| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok::<_, std::io::Error>(ms)
        }));
        let a = svc.ready().await.unwrap().call(100);
        let b = svc.ready().await.unwrap().call(100);
        let c = svc.ready().await.unwrap().call(100);
        assert_eq!(g.active(), 2);
        let err = c.await.unwrap_err();
        assert_eq!(
            err.downcast_ref::<GateOverflow>().unwrap().limit(),
            Limit::Requests
        );
        assert_eq!(g.overflows().upstream_rq_overflow, 1);
        assert_eq!(a.await.unwrap(), 100);
        assert_eq!(g.active(), 1);
        drop(b); // a dropped call frees its slot too
        assert_eq!(g.active(), 0);
        assert_eq!(svc.oneshot(1).await.unwrap(), 1);
    }
}
