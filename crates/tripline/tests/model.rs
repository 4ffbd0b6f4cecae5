//! Model-based property test: random sequences of acquire / record (with or without the
//! caller's own duration) / abandon / advance / operator (every edge, and the refused ones,
//! explicit open waits too) / reconfigure actions against a small sequential reference model of the rules,
//! over count and time windows, with time jumps from a nanosecond to ten years and clocks that
//! start at zero, at a UNIX-epoch reading or near `u64::MAX`. After every step the breaker and
//! the model must agree on the decision, the recorded verdict, the state, the generation and
//! the window; and the invariants hold: no forbidden edge, never more than K probes in flight,
//! stale results never applied, abandoned permits never leak.
//!
//! `PROPTEST_CASES=100000 cargo test --release -p tripline --test model` for a long search.

use std::collections::VecDeque;
use std::time::Duration;

use proptest::prelude::*;
use tripline::{
    BreakerConfig, CircuitBreaker, EventKind, EventLog, HalfOpenPolicy, ManualClock, Outcome,
    Permit, Reason, Recorded, State,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grant {
    Window {
        generation: u64,
        started: u64,
    },
    Probe {
        generation: u64,
        slot: usize,
        token: u64,
        started: u64,
    },
    Passthrough,
}

/// The reference window: the last `size` outcomes, or every outcome with its bucket number.
#[derive(Debug)]
enum ModelWindow {
    Count {
        size: usize,
        /// (failed, slow)
        outcomes: VecDeque<(bool, bool)>,
    },
    Time {
        bucket: u64,
        buckets: u64,
        /// The breaker's creation time: bucket numbers count from here.
        origin: u64,
        /// (bucket, failed, slow)
        outcomes: Vec<(u64, bool, bool)>,
        /// When the next good result evaluates, and whether the last evaluation saw fewer
        /// than the minimum calls.
        next_success_eval: u64,
        below_minimum: bool,
    },
}

impl ModelWindow {
    fn clear(&mut self) {
        match self {
            ModelWindow::Count { outcomes, .. } => outcomes.clear(),
            ModelWindow::Time {
                outcomes,
                next_success_eval,
                below_minimum,
                ..
            } => {
                outcomes.clear();
                *next_success_eval = 0;
                *below_minimum = true;
            }
        }
    }

    /// (calls, failures, slow calls) at `now`.
    fn snapshot(&self, now: u64) -> (u64, u64, u64) {
        match self {
            ModelWindow::Count { outcomes, .. } => (
                outcomes.len() as u64,
                outcomes.iter().filter(|o| o.0).count() as u64,
                outcomes.iter().filter(|o| o.1).count() as u64,
            ),
            ModelWindow::Time {
                bucket,
                buckets,
                origin,
                outcomes,
                ..
            } => {
                let e = now.saturating_sub(*origin) / bucket;
                let live = outcomes
                    .iter()
                    .filter(|(b, ..)| *b <= e && *b + buckets > e);
                let (mut c, mut f, mut sl) = (0, 0, 0);
                for (_, failed, slow) in live {
                    c += 1;
                    f += u64::from(*failed);
                    sl += u64::from(*slow);
                }
                (c, f, sl)
            }
        }
    }

    /// Records an outcome at `now`; whether a good result evaluates the rules.
    fn push(&mut self, now: u64, failure: bool, slow: bool) -> bool {
        match self {
            ModelWindow::Count { size, outcomes } => {
                let filling = outcomes.len() < *size;
                outcomes.push_back((failure, slow));
                if outcomes.len() > *size {
                    outcomes.pop_front();
                }
                filling
            }
            ModelWindow::Time {
                bucket,
                origin,
                outcomes,
                next_success_eval,
                below_minimum,
                ..
            } => {
                let e = now.saturating_sub(*origin) / *bucket;
                outcomes.push((e, failure, slow));
                if *below_minimum {
                    return true;
                }
                if now >= *next_success_eval {
                    *next_success_eval = origin.saturating_add((e + 1).saturating_mul(*bucket));
                    return true;
                }
                false
            }
        }
    }

    fn evaluated(&mut self, calls: u64, min: u64) {
        if let ModelWindow::Time { below_minimum, .. } = self {
            *below_minimum = calls < min;
        }
    }
}

#[derive(Debug)]
struct Model {
    min: usize,
    failure_ppm: u64,
    slow_ppm: u64,
    slow: u64,
    open: u64,
    k: u32,
    policy: HalfOpenPolicy,
    lease: u64,
    consecutive_limit: Option<u64>,
    now: u64,
    state: State,
    generation: u64,
    window: ModelWindow,
    consecutive: u64,
    open_until: u64,
    leases: Vec<Option<(u64, u64)>>,
    results: u32,
    failures: u32,
    slow_probes: u32,
    successes: u32,
    next_token: u64,
}

impl Model {
    fn transition(&mut self, to: State) {
        if self.state == State::HalfOpen || to == State::HalfOpen {
            self.leases = vec![None; self.k as usize];
            self.results = 0;
            self.failures = 0;
            self.slow_probes = 0;
            self.successes = 0;
        }
        match to {
            State::Open => self.open_until = self.now.saturating_add(self.open),
            State::Closed | State::MetricsOnly => {
                self.window.clear();
                self.consecutive = 0;
            }
            _ => {}
        }
        self.state = to;
        self.generation += 1;
    }

    fn acquire(&mut self) -> Option<Grant> {
        loop {
            match self.state {
                State::Closed | State::MetricsOnly => {
                    return Some(Grant::Window {
                        generation: self.generation,
                        started: self.now,
                    });
                }
                State::Disabled => return Some(Grant::Passthrough),
                State::ForcedOpen => return None,
                State::Open => {
                    if self.now < self.open_until {
                        return None;
                    }
                    self.transition(State::HalfOpen);
                }
                State::HalfOpen => {
                    for l in self.leases.iter_mut() {
                        if l.is_some_and(|(_, d)| d <= self.now) {
                            *l = None;
                        }
                    }
                    let in_flight = self.leases.iter().filter(|l| l.is_some()).count() as u32;
                    let settled = match self.policy {
                        HalfOpenPolicy::AllProbes => self.results,
                        _ => self.successes,
                    };
                    if in_flight + settled >= self.k {
                        return None;
                    }
                    let slot = self.leases.iter().position(Option::is_none).unwrap();
                    let token = self.next_token;
                    self.next_token += 1;
                    self.leases[slot] = Some((token, self.now.saturating_add(self.lease)));
                    return Some(Grant::Probe {
                        generation: self.generation,
                        slot,
                        token,
                        started: self.now,
                    });
                }
            }
        }
    }

    /// Records `outcome`; `took` is the caller's own measure of the call, if given.
    fn record(&mut self, grant: Grant, outcome: Outcome, took: Option<u64>) -> Recorded {
        match grant {
            Grant::Passthrough => Recorded::Disabled,
            Grant::Window {
                generation,
                started,
            } => {
                if generation != self.generation {
                    return Recorded::Stale;
                }
                let failure = match outcome {
                    Outcome::Ignored => return Recorded::Ignored,
                    o => o == Outcome::Failure,
                };
                let slow = took.unwrap_or(self.now.saturating_sub(started)) > self.slow;
                let good_evaluates = self.window.push(self.now, failure, slow);
                let mut consecutive = false;
                if let Some(limit) = self.consecutive_limit {
                    if failure {
                        self.consecutive += 1;
                        consecutive = self.consecutive >= limit;
                    } else {
                        self.consecutive = 0;
                    }
                }
                let evaluate = self.state == State::MetricsOnly
                    || failure
                    || slow
                    || consecutive
                    || good_evaluates;
                if evaluate && self.evaluate(consecutive) && self.state == State::Closed {
                    self.transition(State::Open);
                }
                Recorded::Counted
            }
            Grant::Probe {
                generation,
                slot,
                token,
                started,
            } => {
                let lease_ok = self
                    .leases
                    .get(slot)
                    .copied()
                    .flatten()
                    .is_some_and(|(t, _)| t == token);
                if generation != self.generation || self.state != State::HalfOpen || !lease_ok {
                    return Recorded::Stale;
                }
                self.leases[slot] = None;
                let failure = match outcome {
                    Outcome::Ignored => return Recorded::Ignored,
                    o => o == Outcome::Failure,
                };
                let slow = took.unwrap_or(self.now.saturating_sub(started)) > self.slow;
                self.results += 1;
                self.failures += u32::from(failure);
                self.slow_probes += u32::from(slow);
                self.successes += u32::from(!failure && !slow);
                let k = u64::from(self.k);
                let verdict = match self.policy {
                    HalfOpenPolicy::AllProbes => {
                        if u64::from(self.failures) * 1_000_000 >= self.failure_ppm * k
                            || u64::from(self.slow_probes) * 1_000_000 >= self.slow_ppm * k
                        {
                            Some(State::Open)
                        } else if self.results >= self.k {
                            Some(State::Closed)
                        } else {
                            None
                        }
                    }
                    _ => {
                        if failure || slow {
                            Some(State::Open)
                        } else if self.successes >= self.k {
                            Some(State::Closed)
                        } else {
                            None
                        }
                    }
                };
                if let Some(to) = verdict {
                    self.transition(to);
                }
                Recorded::Counted
            }
        }
    }

    /// Evaluates the rules on the window; whether they trip.
    fn evaluate(&mut self, consecutive: bool) -> bool {
        let (calls, fails, slow) = self.window.snapshot(self.now);
        let min = self.min as u64;
        self.window.evaluated(calls, min);
        consecutive
            || (calls >= min
                && (fails * 1_000_000 >= self.failure_ppm * calls
                    || slow * 1_000_000 >= self.slow_ppm * calls))
    }

    fn reconfigure(&mut self, failure_ppm: u64) {
        self.failure_ppm = failure_ppm;
        if self.state == State::Closed && self.evaluate(false) {
            self.transition(State::Open);
        }
    }

    fn abandon(&mut self, grant: Grant) {
        if let Grant::Probe { slot, token, .. } = grant {
            if let Some(l) = self.leases.get_mut(slot) {
                if l.is_some_and(|(t, _)| t == token) {
                    *l = None;
                }
            }
        }
    }

    /// An operator transition along the edge table; `wait` is an explicit open wait. Whether
    /// the edge exists.
    fn operator(&mut self, to: State, wait: Option<u64>) -> bool {
        let from = self.state;
        if to == State::HalfOpen
            && matches!(from, State::Closed | State::Disabled | State::MetricsOnly)
        {
            return false;
        }
        if from != to || matches!(to, State::Closed | State::Open) {
            self.transition(to);
            if let Some(w) = wait {
                self.open_until = self.now.saturating_add(w);
            }
        }
        true
    }
}

#[derive(Clone, Debug)]
enum Op {
    Acquire,
    Record(usize, Outcome),
    /// With the caller's own measure of the call, in nanoseconds.
    RecordTimed(usize, Outcome, u64),
    /// An operator's Open for exactly this many nanoseconds.
    OpenFor(u64),
    Abandon(usize),
    /// Nanoseconds.
    Advance(u64),
    Operator(State),
    Tick,
    /// A new failure-rate threshold, same window shape.
    Reconfigure(f64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Acquire),
        6 => (any::<usize>(), prop_oneof![
            3 => Just(Outcome::Failure), 3 => Just(Outcome::Success), 1 => Just(Outcome::Ignored)
        ]).prop_map(|(i, o)| Op::Record(i, o)),
        2 => (any::<usize>(), prop_oneof![
            3 => Just(Outcome::Failure), 3 => Just(Outcome::Success), 1 => Just(Outcome::Ignored)
        ], prop_oneof![Just(0u64), 0u64..40_000_000_000]).prop_map(|(i, o, d)| Op::RecordTimed(i, o, d)),
        1 => (0u64..40_000).prop_map(|ms| Op::OpenFor(ms * 1_000_000)),
        1 => any::<usize>().prop_map(Op::Abandon),
        3 => (0u64..20_000).prop_map(|ms| Op::Advance(ms * 1_000_000)),
        1 => prop_oneof![
            Just(1u64), 1u64..1_000_000, Just(65_536 * 1_000_000_000),
            Just(40_000 * 1_000_000_000), 1u64..(10 * 365 * 86_400 * 1_000_000_000)
        ].prop_map(Op::Advance),
        1 => prop_oneof![
            Just(State::ForcedOpen), Just(State::Disabled), Just(State::MetricsOnly), Just(State::Closed),
            Just(State::Open), Just(State::HalfOpen)
        ].prop_map(Op::Operator),
        1 => Just(Op::Tick),
        1 => prop_oneof![Just(50.0), Just(100.0), 1.0f64..100.0].prop_map(Op::Reconfigure),
    ]
}

/// A percentage in ppm as the docs say (`BreakerConfig::failure_ppm`): a whole number of ppm
/// (within the float's rounding) is that number, anything else is rounded down.
fn ppm(threshold: f64) -> u64 {
    let x = threshold * 10_000.0;
    let r = if (x - x.round()).abs() <= x.abs() * 4.0 * f64::EPSILON {
        x.round()
    } else {
        x.floor()
    };
    (r as u64).clamp(1, 1_000_000)
}

proptest! {
    // 256 cases by default; PROPTEST_CASES=20000 for a longer search.
    #[test]
    fn breaker_matches_the_reference_model(
        size in 1u32..8,
        min_frac in 1u32..=8,
        threshold in prop_oneof![Just(50.0), Just(100.0), Just(34.0), 1.0f64..100.0],
        open_ms in 1u64..30_000,
        k in 1u32..4,
        all_probes in any::<bool>(),
        lease_ms in 1u64..40_000,
        consecutive in proptest::option::of(1u32..5),
        slow_threshold in prop_oneof![Just(100.0), 1.0f64..100.0],
        slow_ms in prop_oneof![Just(7 * 24 * 3_600_000u64), 1u64..20_000],
        time in proptest::option::of((prop_oneof![Just(1u64), Just(250), Just(1000)], 1u64..6)),
        origin in prop_oneof![
            3 => Just(0u64),
            1 => Just(1_700_000_000_000_000_000u64),
            1 => Just(u64::MAX - 10 * 365 * 86_400 * 1_000_000_000),
        ],
        ops in proptest::collection::vec(op(), 1..150),
    ) {
        let min = if time.is_some() { min_frac } else { min_frac.min(size) };
        let policy = if all_probes { HalfOpenPolicy::AllProbes } else { HalfOpenPolicy::Consecutive };
        let builder = match time {
            None => BreakerConfig::builder().count_window(size),
            Some((bucket_ms, buckets)) => BreakerConfig::builder().time_window(
                Duration::from_millis(bucket_ms * buckets),
                Duration::from_millis(bucket_ms),
            ),
        };
        let mut builder = builder
            .minimum_calls(min)
            .failure_rate_threshold(threshold)
            .slow_call_rate_threshold(slow_threshold)
            .slow_call_duration(Duration::from_millis(slow_ms))
            .count_in_flight_as_slow(false)
            .open_duration(Duration::from_millis(open_ms))
            .half_open_calls(k)
            .half_open_policy(policy)
            .probe_lease(Duration::from_millis(lease_ms));
        if let Some(c) = consecutive {
            builder = builder.consecutive_failures(c);
        }
        let config = builder.build().unwrap();
        let ms = 1_000_000;
        let window = match time {
            None => ModelWindow::Count { size: size as usize, outcomes: VecDeque::new() },
            Some((bucket_ms, buckets)) => ModelWindow::Time {
                bucket: bucket_ms * ms,
                buckets,
                origin,
                outcomes: Vec::new(),
                next_success_eval: 0,
                below_minimum: true,
            },
        };
        let mut model = Model {
            min: min as usize,
            failure_ppm: ppm(threshold),
            slow_ppm: ppm(slow_threshold),
            slow: slow_ms * ms,
            open: open_ms * ms,
            k,
            policy,
            lease: lease_ms * ms,
            consecutive_limit: consecutive.map(u64::from),
            now: origin,
            state: State::Closed,
            generation: 0,
            window,
            consecutive: 0,
            open_until: 0,
            leases: vec![None; k as usize],
            results: 0,
            failures: 0,
            slow_probes: 0,
            successes: 0,
            next_token: 1,
        };
        let clock = ManualClock::new();
        clock.set(Duration::from_nanos(origin));
        let breaker = CircuitBreaker::with_clock("model", config.clone(), clock.clone());
        let log = EventLog::new();
        breaker.subscribe(log.clone());
        let mut held: Vec<(Permit<'_, ManualClock>, Grant)> = Vec::new();
        let mut abandoned = 0u64;

        for op in ops {
            match op {
                Op::Acquire => {
                    let want = model.acquire();
                    match (breaker.try_acquire(), want) {
                        (Ok(p), Some(g)) => {
                            prop_assert_eq!(p.is_probe(), matches!(g, Grant::Probe { .. }));
                            held.push((p, g));
                        }
                        (Err(_), None) => {}
                        (got, want) => prop_assert!(false, "acquire: breaker {:?}, model {:?}", got.map(|p| p.is_probe()), want),
                    }
                }
                Op::Record(i, outcome) | Op::RecordTimed(i, outcome, _) if !held.is_empty() => {
                    let (p, g) = held.swap_remove(i % held.len());
                    let before = breaker.metrics();
                    let took = match op {
                        Op::RecordTimed(_, _, d) => Some(d),
                        _ => None,
                    };
                    let got = match took {
                        Some(d) => p.record_with_duration(outcome, Duration::from_nanos(d)),
                        None => p.record(outcome),
                    };
                    let want = model.record(g, outcome, took);
                    prop_assert_eq!(got, want);
                    if got == Recorded::Stale {
                        let after = breaker.metrics();
                        prop_assert_eq!(before.successful_calls + before.failed_calls,
                                        after.successful_calls + after.failed_calls);
                        prop_assert_eq!(before.window, after.window);
                    }
                }
                Op::Abandon(i) if !held.is_empty() => {
                    let (p, g) = held.swap_remove(i % held.len());
                    drop(p);
                    model.abandon(g);
                    if g != Grant::Passthrough {
                        abandoned += 1;
                    }
                }
                Op::Advance(by) => {
                    clock.advance(Duration::from_nanos(by));
                    model.now = model.now.saturating_add(by);
                }
                Op::Operator(to) => {
                    let allowed = match to {
                        State::ForcedOpen => { breaker.force_open(); true }
                        State::Disabled => { breaker.disable(); true }
                        State::MetricsOnly => { breaker.metrics_only(); true }
                        State::Closed => { breaker.reset(); true }
                        _ => breaker.transition_to(to).is_ok(),
                    };
                    prop_assert_eq!(allowed, model.operator(to, None), "operator {}", to);
                }
                Op::OpenFor(wait) => {
                    breaker.transition_to_open_for(Duration::from_nanos(wait)).unwrap();
                    prop_assert!(model.operator(State::Open, Some(wait)));
                }
                Op::Tick => {
                    breaker.tick();
                }
                Op::Reconfigure(t) => {
                    let c = config.to_builder().failure_rate_threshold(t).build().unwrap();
                    breaker.reconfigure(c).unwrap();
                    model.reconfigure(ppm(t));
                }
                _ => {}
            }
            let m = breaker.metrics();
            prop_assert_eq!(m.state, model.state);
            prop_assert_eq!(m.generation, model.generation);
            if matches!(model.state, State::Closed | State::MetricsOnly) {
                let (calls, failures, slow) = model.window.snapshot(model.now);
                prop_assert_eq!(m.window.calls, calls);
                prop_assert_eq!(m.window.failures, failures);
                prop_assert_eq!(m.window.slow_calls, slow);
            }
            prop_assert!(m.probes_in_flight <= k, "{} probes in flight", m.probes_in_flight);
            // Probes whose result would still count: current generation, lease not reclaimed.
            let live_probes = held
                .iter()
                .filter(|(_, g)| matches!(g, Grant::Probe { generation, slot, token, .. }
                    if *generation == model.generation
                        && model.leases[*slot].is_some_and(|(t, _)| t == *token)))
                .count();
            prop_assert!(live_probes as u32 <= k);
        }

        // Abandoned permits never leak: drop everything, every slot comes back.
        for (p, g) in held.drain(..) {
            drop(p);
            if g != Grant::Passthrough {
                abandoned += 1;
            }
        }
        let m = breaker.metrics();
        prop_assert_eq!(m.probes_in_flight, 0);
        prop_assert_eq!(m.abandoned_permits, abandoned);

        // No forbidden edge; generations step by one; each transition starts where the last ended.
        let mut prev = (State::Closed, 0u64);
        for e in log.events() {
            if let EventKind::Transition { from, to, generation, reason, .. } = e.kind {
                prop_assert_eq!(from, prev.0);
                prop_assert_eq!(generation, prev.1 + 1);
                if reason != Reason::Operator {
                    prop_assert!(
                        matches!((from, to),
                            (State::Closed, State::Open) | (State::Open, State::HalfOpen)
                            | (State::HalfOpen, State::Closed) | (State::HalfOpen, State::Open)),
                        "forbidden edge {from} -> {to} ({reason:?})"
                    );
                }
                prev = (to, generation);
            }
        }
    }
}
