//! The Redis store as a `tripline::conformance::Subject`, shared by the test files.
#![allow(dead_code, reason = "each test file uses a part of this shared helper")]

use std::cell::RefCell;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::broadcast;
use tripline::conformance::{Action, Subject, Wait};
use tripline::{
    BreakerConfig, Classification, ManualClock, Outcome, Recorded, Rejected, State, WindowSnapshot,
};
use tripline_redis::{Backend, SharedBreaker, SharedConfig, SharedPermit, TimeSource, Transition};

/// A shared breaker on a manual clock, driven step by step on its own runtime.
pub(crate) struct RedisSubject {
    rt: Runtime,
    pub(crate) breaker: SharedBreaker<ManualClock>,
    events: RefCell<broadcast::Receiver<Transition>>,
}

impl RedisSubject {
    /// On one server.
    pub(crate) fn single(
        url: &str,
        config: BreakerConfig,
        scope: &str,
        view_ttl: Duration,
    ) -> Self {
        Self::new(|| Backend::single(url).unwrap(), config, scope, view_ttl)
    }

    /// On a cluster, from its nodes' urls.
    pub(crate) fn cluster(
        urls: &[String],
        config: BreakerConfig,
        scope: &str,
        view_ttl: Duration,
    ) -> Self {
        Self::new(|| Backend::cluster(urls).unwrap(), config, scope, view_ttl)
    }

    /// Runs `f` on the subject's runtime (its backend's supervisor runs there).
    pub(crate) fn run<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    fn new(
        backend: impl FnOnce() -> Backend,
        config: BreakerConfig,
        scope: &str,
        view_ttl: Duration,
    ) -> Self {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let shared = SharedConfig::builder()
            .time_source(TimeSource::Local)
            .view_ttl(view_ttl)
            // Generous: a loaded test machine must not push a call into the fallback.
            .redis_timeout(Duration::from_secs(1))
            .replica_id("conformance")
            .build()
            .unwrap();
        let backend = {
            let _rt = rt.enter();
            backend()
        };
        let breaker =
            SharedBreaker::with_clock(scope, config, shared, backend, ManualClock::new()).unwrap();
        // The record is made now, as the in-process breaker is: a breaker that has not left
        // Closed counts its time Closed (for the backoff's `healthy_after`) from then.
        rt.block_on(breaker.tick()).unwrap();
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
    fn record_classified(&self, permit: Self::Permit<'_>, c: Classification) -> Recorded {
        self.rt.block_on(permit.record_classified(c))
    }
    fn transition(&self, to: State, wait: Wait) -> Result<(), String> {
        let b = &self.breaker;
        self.rt
            .block_on(async {
                match (to, wait) {
                    (State::Open, Wait::For(d)) => b.transition_to_open_for(d).await,
                    (State::Open, Wait::Until(at)) => b.transition_to_open_until(at).await,
                    (to, _) => b.transition_to(to).await,
                }
            })
            .map_err(|e| e.to_string())
    }
    fn durations(&self) -> (Option<Duration>, Option<Duration>) {
        let m = self.breaker.metrics();
        (m.total_duration, m.mean_duration)
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
