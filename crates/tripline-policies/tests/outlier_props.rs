//! Property tests of the outlier detector against the promises of its docs: never more hosts
//! ejected than the cap allows, never the last host, always a host to pick, and every ejected
//! host back at the first sweep after its time, never before.
//!
//! Long run: `PROPTEST_CASES=20000 cargo test --release -p tripline-policies --test outlier_props`
#![cfg(feature = "outlier")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use tripline::{Clock, ManualClock};
use tripline_policies::outlier::{
    HostOutcome, OutlierConfig, OutlierDetector, OutlierEvent, OutlierEventKind,
};

#[derive(Clone, Debug)]
enum Op {
    /// Record `n` outcomes on a host (index into the current set).
    Record(usize, u8, u8),
    /// Pick a host and record an outcome for it.
    Pick(u8),
    /// Advance the clock (ms) and tick.
    Advance(u32),
    /// Replace the host set with these ids (at least one).
    Hosts(Vec<u8>),
}

fn outcome(k: u8) -> HostOutcome {
    match k % 6 {
        0 | 1 => HostOutcome::Status(500),
        2 => HostOutcome::Status(503),
        3 => HostOutcome::Timeout,
        4 => HostOutcome::Success,
        _ => HostOutcome::Status(200),
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..16usize, 0..6u8, 1..8u8).prop_map(|(h, k, n)| Op::Record(h, k, n)),
        3 => (0..6u8).prop_map(Op::Pick),
        3 => (1..20_000u32).prop_map(Op::Advance),
        1 => proptest::collection::vec(0..24u8, 1..16).prop_map(Op::Hosts),
    ]
}

fn config() -> impl Strategy<Value = OutlierConfig> {
    (
        0..=100u32,
        prop_oneof![Just(0.0), Just(50.0), 0.0..100.0f64],
        any::<bool>(),
        1..4u32,
        any::<bool>(),
    )
        .prop_map(|(pct, panic, always, consecutive, split)| {
            OutlierConfig::builder()
                .max_ejection_percent(pct)
                .healthy_panic_threshold(panic)
                .always_eject_one_host(always)
                .consecutive_5xx(consecutive)
                .consecutive_local_origin_failure(consecutive)
                .split_external_local_origin_errors(split)
                .interval(Duration::from_secs(1))
                .base_ejection_time(Duration::from_secs(3))
                .max_ejection_time(Duration::from_secs(10))
                .max_ejection_time_jitter(Duration::from_millis(500))
                .success_rate_minimum_hosts(3)
                .success_rate_request_volume(5)
                .failure_percentage_minimum_hosts(3)
                .failure_percentage_request_volume(5)
                .enforcing_failure_percentage(100)
                .enforcing_consecutive_gateway_failure(50)
                .build()
                .unwrap()
        })
}

#[derive(Debug)]
enum OpKind {
    Hosts,
    Other,
}

proptest! {
    #[test]
    fn cap_selectable_and_returns_hold(
        c in config(),
        n in 1..14u8,
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let clock = ManualClock::new();
        let d = OutlierDetector::builder(c).clock(clock.clone()).seed(seed).build(0..n).unwrap();
        let log: Arc<Mutex<Vec<OutlierEvent<u8>>>> = Arc::default();
        let l = log.clone();
        d.subscribe(move |e| l.lock().unwrap().push(e.clone()));
        // When each ejected host may return, from its Ejected event.
        let mut due: HashMap<u8, u64> = HashMap::new();
        let mut size = u32::from(n);
        for op in ops {
            let op_kind = match op {
                Op::Hosts(_) => OpKind::Hosts,
                _ => OpKind::Other,
            };
            match op {
                Op::Record(i, k, times) => {
                    let hosts = d.hosts();
                    let h = hosts[i % hosts.len()];
                    for _ in 0..times {
                        d.record_host(&h, outcome(k));
                    }
                }
                Op::Pick(k) => {
                    let p = d.pick();
                    prop_assert!(d.hosts().contains(p.host()));
                    d.record(p, outcome(k));
                }
                Op::Advance(ms) => {
                    clock.advance(Duration::from_millis(u64::from(ms)));
                    d.tick();
                }
                Op::Hosts(mut ids) => {
                    ids.sort_unstable();
                    ids.dedup();
                    size = ids.len() as u32;
                    d.set_hosts(ids).unwrap();
                }
            }
            for e in log.lock().unwrap().drain(..) {
                match e.kind {
                    OutlierEventKind::Ejected { duration, .. } => {
                        // Never more than the cap, never the last host.
                        let active = e.ejections_active;
                        prop_assert!(active < size, "{active} of {size} ejected");
                        prop_assert!(
                            active * 100 <= c.max_ejection_percent() * size
                                || (c.always_eject_one_host() && active == 1),
                            "{active} of {size} ejected with a cap of {}%", c.max_ejection_percent()
                        );
                        due.insert(e.host.unwrap(), e.at + duration.as_nanos() as u64);
                    }
                    OutlierEventKind::Returned => {
                        // Never before its time.
                        let h = e.host.unwrap();
                        prop_assert!(e.at >= due[&h], "{h} back at {} before {}", e.at, due[&h]);
                        due.remove(&h);
                    }
                    OutlierEventKind::ReturnedEarly => {
                        // Only when the set shrank under the ejections it held.
                        prop_assert!(matches!(op_kind, OpKind::Hosts), "returned early on {op_kind:?}");
                        due.remove(&e.host.unwrap());
                    }
                    OutlierEventKind::HostRemoved => {
                        due.remove(&e.host.unwrap());
                    }
                    _ => {}
                }
            }
            let s = d.stats();
            // Always a host to pick.
            prop_assert!(!d.selectable().is_empty());
            // The cap holds after any change of the host set too, and a host always stays in.
            prop_assert!(
                s.ejections_active * 100 <= c.max_ejection_percent() * size
                    || (c.always_eject_one_host() && s.ejections_active == 1),
                "{} of {size} ejected with a cap of {}%", s.ejections_active, c.max_ejection_percent()
            );
            prop_assert!(s.ejections_active < size);
            // Back at the first sweep after its time: a host still out after a tick has a due
            // time less than an interval ago.
            let now = clock.now();
            for h in d.hosts() {
                let st = d.host_status(&h).unwrap();
                if let Some(until) = st.ejected_until {
                    prop_assert!(until + 1_000_000_000 > now, "{h} still out at {now}, due {until}");
                }
            }
        }
    }
}
