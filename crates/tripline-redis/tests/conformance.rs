//! The core's conformance vectors against the Redis store: the same decisions, verdicts,
//! states, windows and transitions as the in-process breaker, asking Redis on every acquire
//! and deciding from the last answer.

use std::cell::RefCell;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::broadcast;
use tripline::conformance::{self, Action, Subject, Vector};
use tripline::{ManualClock, Outcome, Recorded, Rejected, State, WindowSnapshot};
use tripline_redis::server::RedisServer;
use tripline_redis::{Backend, SharedBreaker, SharedConfig, SharedPermit, TimeSource, Transition};

struct RedisSubject {
    rt: Runtime,
    breaker: SharedBreaker<ManualClock>,
    events: RefCell<broadcast::Receiver<Transition>>,
}

impl RedisSubject {
    fn new(url: &str, vector: &Vector, scope: &str, view_ttl: Duration) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let shared = SharedConfig::builder()
            .time_source(TimeSource::Local)
            .view_ttl(view_ttl)
            // Generous: a loaded test machine must not push a call into the fallback.
            .redis_timeout(Duration::from_secs(10))
            .replica_id("conformance")
            .build()
            .unwrap();
        let backend = {
            let _rt = rt.enter();
            Backend::single(url).unwrap()
        };
        let clock = ManualClock::new();
        let breaker =
            SharedBreaker::with_clock(scope, vector.config.clone(), shared, backend, clock)
                .unwrap();
        let events = RefCell::new(breaker.subscribe());
        Self {
            rt,
            breaker,
            events,
        }
    }
}

impl Subject for RedisSubject {
    type Permit<'a> = SharedPermit<ManualClock>;

    fn acquire(&self) -> Result<Self::Permit<'_>, Rejected> {
        self.rt.block_on(self.breaker.acquire())
    }
    fn is_probe(permit: &Self::Permit<'_>) -> bool {
        permit.is_probe()
    }
    fn record(&self, permit: Self::Permit<'_>, outcome: Outcome) -> Recorded {
        self.rt.block_on(permit.record(outcome))
    }
    fn abandon(&self, permit: Self::Permit<'_>) {
        self.rt.block_on(permit.abandon());
    }
    fn advance(&self, by: Duration) {
        self.breaker.clock().advance(by);
    }
    fn tick(&self) {
        self.rt.block_on(self.breaker.tick()).unwrap();
    }
    fn operator(&self, action: Action) {
        let b = &self.breaker;
        self.rt
            .block_on(async {
                match action {
                    Action::ForceOpen => b.force_open().await,
                    Action::Disable => b.disable().await,
                    Action::MetricsOnly => b.metrics_only().await,
                    Action::Reset => b.reset().await,
                }
            })
            .unwrap();
    }
    fn state(&self) -> State {
        self.rt.block_on(self.breaker.refresh()).unwrap().state
    }
    fn window(&self) -> WindowSnapshot {
        self.rt.block_on(self.breaker.refresh()).unwrap().window
    }
    fn take_transitions(&self) -> Vec<(State, State)> {
        let mut rx = self.events.borrow_mut();
        let mut out = Vec::new();
        while let Ok(t) = rx.try_recv() {
            out.push((t.from, t.to));
        }
        out
    }
}

fn run_all(view_ttl: Duration, mode: &str) {
    let server = RedisServer::start().expect("redis-server");
    let mut failures = Vec::new();
    for v in conformance::builtin() {
        let subject = RedisSubject::new(&server.url(), &v, &format!("{mode}:{}", v.name), view_ttl);
        if let Err(e) = conformance::run(&v, &subject) {
            failures.push(e.to_string());
        }
        assert_eq!(subject.breaker.metrics().redis_errors, 0, "{}", v.name);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_vector_passes_asking_redis_on_every_acquire() {
    run_all(Duration::ZERO, "exact");
}

#[test]
fn every_vector_passes_deciding_from_the_last_answer() {
    run_all(Duration::from_secs(3600), "view");
}
