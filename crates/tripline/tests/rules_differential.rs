//! The in-process breaker decides as the pure rules do, on any sequence of calls: random
//! configurations (count and time windows, both rates, the consecutive rule, calls in flight,
//! both half-open policies, leases, the maximum half-open wait and where it ends, automatic
//! transition, failure-kind weights, lumping, ramps, call durations) and random steps
//! (acquires, results of every kind, abandoned permits, time, timers, operator actions and
//! transitions), compared step by step: every decision, every recorded verdict, the state,
//! the window and the transitions. The built-in vectors pin chosen cases; this pins the rest.
#![cfg(feature = "serde")]

use std::time::Duration;

use proptest::prelude::*;
use tripline::conformance::{self, Action, LocalSubject, RulesSubject, Subject, Wait};
use tripline::{Classification, FailureKind, Outcome, State};

#[derive(Clone, Debug)]
struct Setup {
    count: Option<u32>,
    time_secs: u64,
    minimum_calls: u32,
    failure_rate: u32,
    slow_ms: u64,
    slow_rate: Option<u32>,
    slow_rule: bool,
    consecutive: Option<u32>,
    in_flight: bool,
    open_secs: u64,
    probes: u32,
    consecutive_policy: bool,
    lease_secs: Option<u64>,
    max_wait_secs: Option<u64>,
    after_max_wait_closed: bool,
    automatic: bool,
    weights: bool,
    lumping_ms: Option<u64>,
    ramp: Option<(u32, u64, u32)>,
    durations: bool,
    failure_count: Option<(u32, u64)>,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        (
            prop::option::weighted(0.7, 1u32..8),
            2u64..6,
            1u32..6,
            prop::sample::select(vec![20u32, 34, 50, 67, 100]),
            prop::sample::select(vec![200u64, 1_000, 3_000]),
            prop::option::of(prop::sample::select(vec![40u32, 50, 100])),
            prop::bool::weighted(0.8),
            prop::option::of(1u32..4),
            any::<bool>(),
            1u64..8,
        ),
        (
            1u32..4,
            any::<bool>(),
            prop::option::of(1u64..6),
            prop::option::of(2u64..15),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            prop::option::of(prop::sample::select(vec![300u64, 1_000])),
            prop::option::weighted(0.3, (1u32..90, 1u64..4, 1u32..4)),
            any::<bool>(),
            prop::option::weighted(0.3, (2u32..6, 1u64..10)),
        ),
    )
        .prop_map(|(a, b)| Setup {
            count: a.0,
            time_secs: a.1,
            minimum_calls: a.2,
            failure_rate: a.3,
            slow_ms: a.4,
            slow_rate: a.5,
            slow_rule: a.6,
            consecutive: a.7,
            in_flight: a.8,
            open_secs: a.9,
            probes: b.0,
            consecutive_policy: b.1,
            lease_secs: b.2,
            max_wait_secs: b.3,
            after_max_wait_closed: b.4,
            automatic: b.5,
            weights: b.6,
            lumping_ms: b.7,
            ramp: b.8,
            durations: b.9,
            failure_count: b.10,
        })
}

impl Setup {
    fn toml(&self) -> String {
        let mut t = String::from("name = 'differential'\nstep = []\n[config]\n");
        match self.count {
            Some(size) => t += &format!("window = {{ kind = 'count', size = {size} }}\n"),
            None => {
                t += &format!(
                    "window = {{ kind = 'time', length = '{}s', bucket = '1s' }}\n",
                    self.time_secs
                )
            }
        }
        let minimum = self
            .count
            .map_or(self.minimum_calls, |n| self.minimum_calls.min(n));
        t += &format!("minimum_calls = {minimum}\n");
        t += &format!("failure_rate_threshold = {}\n", self.failure_rate);
        t += &format!("slow_call_duration = '{}ms'\n", self.slow_ms);
        if let Some(r) = self.slow_rate {
            t += &format!("slow_call_rate_threshold = {r}\n");
        }
        if !self.slow_rule {
            t += "slow_call_rule = false\n";
        }
        if let Some(n) = self.consecutive {
            t += &format!("consecutive_failures = {n}\n");
        }
        if let Some((n, secs)) = self.failure_count {
            t += &format!("failure_count = {{ failures = {n}, within = '{secs}s' }}\n");
        }
        t += &format!(
            "count_in_flight_as_slow = {}\n",
            self.in_flight && self.slow_rule
        );
        if self.weights {
            t += "failure_kinds = { rate-limited = 0, timeout = 3 }\n";
        }
        if let Some(ms) = self.lumping_ms {
            t += &format!("lumping_interval = '{ms}ms'\n");
        }
        if let Some((from, over, steps)) = self.ramp {
            t += &format!("ramp_up = {{ from = {from}.0, over = '{over}s', steps = {steps} }}\n");
        }
        if self.durations {
            t += "call_durations = true\n";
        }
        t += &format!("[config.open]\nduration = '{}s'\n", self.open_secs);
        t += &format!("[config.half_open]\npermitted_calls = {}\n", self.probes);
        if self.consecutive_policy {
            t += "policy = 'consecutive'\n";
        }
        if let Some(s) = self.lease_secs {
            t += &format!("probe_lease = '{s}s'\n");
        }
        if let Some(s) = self.max_wait_secs {
            t += &format!("max_wait = '{s}s'\n");
            if self.after_max_wait_closed {
                t += "after_max_wait = 'closed'\n";
            }
        }
        if self.automatic {
            t += "automatic_transition = true\n";
        }
        t
    }
}

#[derive(Clone, Debug)]
enum Op {
    Acquire,
    /// Records the permit at this index (modulo those held) with this result.
    Record(usize, u8),
    Abandon(usize),
    AdvanceMs(u64),
    Tick,
    Operator(u8),
    Transition(u8, u8, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Acquire),
        6 => (any::<usize>(), 0u8..6).prop_map(|(i, r)| Op::Record(i, r)),
        1 => any::<usize>().prop_map(Op::Abandon),
        3 => prop::sample::select(vec![1u64, 100, 250, 999, 1_000, 2_500, 10_000]).prop_map(Op::AdvanceMs),
        1 => Just(Op::Tick),
        1 => (0u8..4).prop_map(Op::Operator),
        1 => (0u8..6, 0u8..3, 0u64..20).prop_map(|(t, w, s)| Op::Transition(t, w, s)),
    ]
}

fn classification(r: u8) -> Classification {
    match r {
        0 | 1 => Outcome::Success.into(),
        2 => Outcome::Failure.into(),
        3 => Outcome::Ignored.into(),
        4 => Classification::failure(FailureKind::Timeout),
        _ => Classification::failure(FailureKind::RateLimited),
    }
}

/// A rejection as the two hosts must agree on it.
fn rejection(r: &tripline::Rejected) -> String {
    format!("{:?} {:?} {:?}", r.state(), r.reason(), r.retry_after())
}

fn acquire<S: Subject>(s: &S) -> (String, Option<S::Permit<'_>>) {
    match s.acquire() {
        Ok(p) => {
            let what = if S::is_probe(&p) { "probe" } else { "permit" };
            (what.to_string(), Some(p))
        }
        Err(r) => (format!("reject {}", rejection(&r)), None),
    }
}

fn compare(setup: &Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let vector = conformance::parse(&setup.toml()).expect("the configuration parses");
    let local = LocalSubject::new(&vector);
    let rules = RulesSubject::new(&vector);
    let mut held_local = Vec::new();
    let mut held_rules = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let (a, b) = match op {
            Op::Acquire => {
                let (a, pa) = acquire(&local);
                let (b, pb) = acquire(&rules);
                if let (Some(pa), Some(pb)) = (pa, pb) {
                    held_local.push(pa);
                    held_rules.push(pb);
                }
                (a, b)
            }
            Op::Record(k, r) if !held_local.is_empty() => {
                let k = k % held_local.len();
                let c = classification(*r);
                let a = local.record_classified(held_local.swap_remove(k), c);
                let b = rules.record_classified(held_rules.swap_remove(k), c);
                (format!("{a:?}"), format!("{b:?}"))
            }
            Op::Abandon(k) if !held_local.is_empty() => {
                let k = k % held_local.len();
                local.abandon(held_local.swap_remove(k));
                rules.abandon(held_rules.swap_remove(k));
                (String::new(), String::new())
            }
            Op::Record(..) | Op::Abandon(_) => continue,
            Op::AdvanceMs(ms) => {
                local.advance(Duration::from_millis(*ms));
                rules.advance(Duration::from_millis(*ms));
                (String::new(), String::new())
            }
            Op::Tick => {
                local.tick();
                rules.tick();
                (String::new(), String::new())
            }
            Op::Operator(a) => {
                let action = [
                    Action::ForceOpen,
                    Action::Disable,
                    Action::MetricsOnly,
                    Action::Reset,
                ][usize::from(*a)];
                local.operator(action);
                rules.operator(action);
                (String::new(), String::new())
            }
            Op::Transition(t, w, s) => {
                let to = [
                    State::Closed,
                    State::Open,
                    State::HalfOpen,
                    State::Disabled,
                    State::MetricsOnly,
                    State::ForcedOpen,
                ][usize::from(*t)];
                let wait = match w {
                    0 => Wait::Configured,
                    1 => Wait::For(Duration::from_secs(*s)),
                    _ => Wait::Until(Duration::from_secs(*s)),
                };
                let a = local.transition(to, wait).is_ok();
                let b = rules.transition(to, wait).is_ok();
                (format!("{a}"), format!("{b}"))
            }
        };
        let context = || {
            format!(
                "step {i} ({op:?}) of {ops:?}\nconfiguration:\n{}",
                setup.toml()
            )
        };
        prop_assert_eq!(&a, &b, "decision differs at {}", context());
        prop_assert_eq!(
            local.state(),
            rules.state(),
            "state differs at {}",
            context()
        );
        prop_assert_eq!(
            local.window(),
            rules.window(),
            "window differs at {}",
            context()
        );
        prop_assert_eq!(
            local.take_transitions(),
            rules.take_transitions(),
            "transitions differ at {}",
            context()
        );
        prop_assert_eq!(
            local.durations(),
            rules.durations(),
            "durations differ at {}",
            context()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// The in-process breaker and the pure rules take the same decision at every step.
    #[test]
    fn the_in_process_breaker_decides_as_the_pure_rules_do(
        setup in setup(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        compare(&setup, &ops)?;
    }
}
