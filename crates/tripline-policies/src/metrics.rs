//! Every policy's figures through the `metrics` facade (feature `metrics`), and one call
//! that exports them all with the breakers' and a registry's.
//!
//! Each policy has a handle type made once (its series registered with the recorder
//! installed then) and updated from the policy's counters on each scrape, never per call, as
//! the breaker's [`BreakerMetrics`] are. Every series
//! carries the policy's name label (`retry`, `bulkhead`, `gate`, `throttle`, `shed`,
//! `pipeline`, `limiter`, `breaker`) and any extra labels given.
//!
//! | name | type | what |
//! |---|---|---|
//! | `tripline_retry_requests_total` | counter | requests the retry policy started |
//! | `tripline_retry_retries_total` | counter | retries made (granted and sent on) |
//! | `tripline_retry_calls_total{outcome}` | counter | requests by how they ended: `success_without_retry`, `success_with_retry`, `failure_without_retry`, `failure_with_retry` |
//! | `tripline_retry_refused_total{reason}` | counter | retries not made: `budget` (the budget refused), `gate` (the gate's retry limit), `attempts` (the last attempt failed) |
//! | `tripline_retry_local_rejections_total` | counter | attempts a local policy refused (never retried) |
//! | `tripline_retry_budget_remaining` | gauge | retries the budget would grant now; NaN for a budget that does not count them (an error-rate rule while retries are on) or none |
//! | `tripline_bulkhead_in_flight` | gauge | calls holding a slot |
//! | `tripline_bulkhead_available` | gauge | slots free |
//! | `tripline_bulkhead_max_concurrent` | gauge | the slots |
//! | `tripline_bulkhead_waiting` | gauge | calls in the queue |
//! | `tripline_bulkhead_rejected_total{reason}` | counter | refusals: `queue_full`, `timed_out` |
//! | `tripline_gate_active{limit}` | gauge | slots held: `requests`, `pending`, `retries` |
//! | `tripline_gate_remaining{limit}` | gauge | Envoy's `remaining_rq`, `remaining_pending`, `remaining_retries` |
//! | `tripline_gate_overflow_total{limit}` | counter | Envoy's `upstream_rq_overflow`, `upstream_rq_pending_overflow`, `upstream_rq_retry_overflow` |
//! | `tripline_throttle_rejection_probability` | gauge | the chance a request attempted now is refused |
//! | `tripline_throttle_window{count}` | gauge | the window's `requests` and `accepts` |
//! | `tripline_throttle_rejected_total` | counter | requests refused locally |
//! | `tripline_shed_in_flight`, `tripline_shed_waiting` | gauge | calls holding a slot, waiting |
//! | `tripline_shed_admitted_total{wait}` | counter | admissions: `none` (at once), `queued` |
//! | `tripline_shed_rejected_total{reason}` | counter | refusals: `full`, `shed`, `queue_full`, `evicted`, `timed_out` |
//! | `tripline_pipeline_calls_total{result}` | counter | calls by how they ended: `success`, `failure`, `ignored` (the classifier's verdict on the last result), `timeout`, `injected`, `refused` |
//! | `tripline_pipeline_refused_total{stage}` | counter | calls a local stage refused: `breaker`, `partial`, `gate`, `bulkhead`, `shed`, `limiter`, `throttle` |
//! | `tripline_pipeline_fallbacks_total` | counter | errors handed to a fallback |
//!
//! With the limiter's ([`LimiterMetrics`](crate::limiter::LimiterMetrics)), the partial
//! breaker's ([`PartialMetrics`](crate::partial::PartialMetrics)) and the outlier detector's
//! ([`OutlierMetrics`](crate::outlier::OutlierMetrics)) series, and the breakers' and
//! registries' (`tripline_breaker_*`, `tripline_registry_*`), that is every series; a
//! pipeline's [`PipelineMetrics`] holds the handles of each stage it has. [`describe`] gives
//! each its `# HELP` text.
//!
//! # One call
//!
//! [`Metrics`] gathers them: made after the recorder is installed, it describes every series,
//! takes the registries, breakers and pipelines to export, and publishes them all in one
//! [`update`](Metrics::update) per scrape.
//!
//! ```
//! # #[cfg(feature = "pipeline")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use tripline::registry::{Key, Registry, RegistryConfig, ScopeKind};
//! use tripline_policies::metrics::Metrics;
//! use tripline_policies::pipeline::Pipeline;
//! use tripline_policies::retry::RetryPolicy;
//!
//! let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
//! let handle = recorder.handle();
//! metrics::set_global_recorder(recorder)?;
//!
//! let registry = Arc::new(Registry::new(RegistryConfig::default())?);
//! let pipeline = Pipeline::builder()
//!     .retry(RetryPolicy::default())
//!     .timeout(Duration::from_secs(2))
//!     .build()?;
//! let metrics = Metrics::new().registry(registry.clone()).pipeline("vendor", &pipeline);
//! registry.get(&Key::scoped("vendor", ScopeKind::Tenant, "acme")?)?;
//!
//! // On each scrape:
//! metrics.update();
//! let scrape = handle.render();
//! assert!(scrape.contains("# HELP tripline_retry_requests_total"));
//! assert!(scrape.contains("tripline_pipeline_calls_total{pipeline=\"vendor\",result=\"success\"} 0"));
//! assert!(scrape.contains("tripline_breaker_state{breaker=\"vendor/tenant=acme\""));
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "pipeline"))]
//! # fn main() {}
//! ```

use std::fmt;
use std::sync::Arc;

#[cfg(any(
    feature = "retry",
    feature = "bulkhead",
    feature = "gate",
    feature = "throttle",
    feature = "shed"
))]
use metrics::{Counter, Gauge, Label};
use tripline::observe::BreakerMetrics;
use tripline::registry::Registry;
use tripline::{CircuitBreaker, Clock};

#[cfg(any(
    feature = "retry",
    feature = "bulkhead",
    feature = "gate",
    feature = "throttle",
    feature = "shed"
))]
fn labels(key: &'static str, name: &str, extra: Vec<Label>) -> Vec<Label> {
    let mut l = vec![Label::new(key, name.to_string())];
    l.extend(extra);
    l
}

#[cfg(any(
    feature = "retry",
    feature = "bulkhead",
    feature = "gate",
    feature = "throttle",
    feature = "shed"
))]
fn with(labels: &[Label], k: &'static str, v: &'static str) -> Vec<Label> {
    let mut l = labels.to_vec();
    l.push(Label::new(k, v));
    l
}

#[cfg(any(
    feature = "retry",
    feature = "bulkhead",
    feature = "gate",
    feature = "throttle",
    feature = "shed"
))]
fn set_all<const N: usize>(counters: &[Counter; N], values: [u64; N]) {
    for (c, v) in counters.iter().zip(values) {
        c.absolute(v);
    }
}

/// The metric handles of one retry policy and its budget. See the [module docs](self).
///
/// ```
/// use tripline_policies::metrics::RetryMetrics;
/// use tripline_policies::retry::RetryPolicy;
///
/// let policy = RetryPolicy::default();
/// let metrics = RetryMetrics::new("vendor", Vec::new());
/// metrics.update(&policy); // on each scrape
/// ```
#[cfg(feature = "retry")]
#[derive(Debug)]
pub struct RetryMetrics {
    requests: Counter,
    retries: Counter,
    calls: [Counter; 4],
    refused: [Counter; 3],
    local: Counter,
    remaining: Gauge,
}

#[cfg(feature = "retry")]
impl RetryMetrics {
    /// Registers the handles for the retry policy called `name`, with `extra` labels.
    pub fn new(name: &str, extra: Vec<Label>) -> Self {
        let l = labels("retry", name, extra);
        Self {
            requests: metrics::counter!("tripline_retry_requests_total", l.clone()),
            retries: metrics::counter!("tripline_retry_retries_total", l.clone()),
            calls: [
                "success_without_retry",
                "success_with_retry",
                "failure_without_retry",
                "failure_with_retry",
            ]
            .map(|o| metrics::counter!("tripline_retry_calls_total", with(&l, "outcome", o))),
            refused: ["budget", "gate", "attempts"]
                .map(|r| metrics::counter!("tripline_retry_refused_total", with(&l, "reason", r))),
            local: metrics::counter!("tripline_retry_local_rejections_total", l.clone()),
            remaining: metrics::gauge!("tripline_retry_budget_remaining", l),
        }
    }

    /// Publishes the policy's counters and its budget's balance.
    pub fn update<P>(&self, policy: &crate::retry::RetryPolicy<P>) {
        let s = policy.stats();
        self.requests.absolute(s.requests);
        self.retries.absolute(s.retries);
        set_all(
            &self.calls,
            [
                s.succeeded_without_retry,
                s.succeeded_with_retry,
                s.failed_without_retry,
                s.failed_with_retry,
            ],
        );
        set_all(
            &self.refused,
            [s.budget_exhausted, s.gate_overflows, s.attempts_exhausted],
        );
        self.local.absolute(s.local_rejections);
        let remaining = policy.budget().and_then(|b| b.remaining());
        self.remaining.set(remaining.map_or(f64::NAN, |r| r as f64));
    }
}

/// The metric handles of one bulkhead. See the [module docs](self).
///
/// ```
/// use tripline_policies::bulkhead::Bulkhead;
/// use tripline_policies::metrics::BulkheadMetrics;
///
/// let bulkhead = Bulkhead::default();
/// let metrics = BulkheadMetrics::new("vendor", Vec::new());
/// metrics.update(&bulkhead); // on each scrape
/// ```
#[cfg(feature = "bulkhead")]
#[derive(Debug)]
pub struct BulkheadMetrics {
    in_flight: Gauge,
    available: Gauge,
    max: Gauge,
    waiting: Gauge,
    rejected: [Counter; 2],
}

#[cfg(feature = "bulkhead")]
impl BulkheadMetrics {
    /// Registers the handles for the bulkhead called `name`, with `extra` labels.
    pub fn new(name: &str, extra: Vec<Label>) -> Self {
        let l = labels("bulkhead", name, extra);
        Self {
            in_flight: metrics::gauge!("tripline_bulkhead_in_flight", l.clone()),
            available: metrics::gauge!("tripline_bulkhead_available", l.clone()),
            max: metrics::gauge!("tripline_bulkhead_max_concurrent", l.clone()),
            waiting: metrics::gauge!("tripline_bulkhead_waiting", l.clone()),
            rejected: ["queue_full", "timed_out"].map(|r| {
                metrics::counter!("tripline_bulkhead_rejected_total", with(&l, "reason", r))
            }),
        }
    }

    /// Publishes the bulkhead's figures now.
    pub fn update(&self, bulkhead: &crate::bulkhead::Bulkhead) {
        self.in_flight.set(f64::from(bulkhead.in_flight()));
        self.available.set(f64::from(bulkhead.available()));
        self.max.set(f64::from(bulkhead.config().max_concurrent()));
        self.waiting.set(f64::from(bulkhead.waiting()));
        let r = bulkhead.rejections();
        set_all(&self.rejected, [r.queue_full, r.timed_out]);
    }
}

/// The metric handles of one concurrency gate, with Envoy's figures. See the
/// [module docs](self).
///
/// ```
/// use tripline_policies::gate::Gate;
/// use tripline_policies::metrics::GateMetrics;
///
/// let gate = Gate::default();
/// let metrics = GateMetrics::new("vendor", Vec::new());
/// metrics.update(&gate); // on each scrape
/// ```
#[cfg(feature = "gate")]
#[derive(Debug)]
pub struct GateMetrics {
    active: [Gauge; 3],
    remaining: [Gauge; 3],
    overflow: [Counter; 3],
}

#[cfg(feature = "gate")]
impl GateMetrics {
    /// Registers the handles for the gate called `name`, with `extra` labels.
    pub fn new(name: &str, extra: Vec<Label>) -> Self {
        let l = labels("gate", name, extra);
        let limits = ["requests", "pending", "retries"];
        Self {
            active: limits.map(|k| metrics::gauge!("tripline_gate_active", with(&l, "limit", k))),
            remaining: limits
                .map(|k| metrics::gauge!("tripline_gate_remaining", with(&l, "limit", k))),
            overflow: limits
                .map(|k| metrics::counter!("tripline_gate_overflow_total", with(&l, "limit", k))),
        }
    }

    /// Publishes the gate's figures now.
    pub fn update(&self, gate: &crate::gate::Gate) {
        for (g, v) in self
            .active
            .iter()
            .zip([gate.active(), gate.pending(), gate.retries()])
        {
            g.set(f64::from(v));
        }
        let r = gate.remaining();
        for (g, v) in self
            .remaining
            .iter()
            .zip([r.requests, r.pending, r.retries])
        {
            g.set(f64::from(v));
        }
        let o = gate.overflows();
        set_all(
            &self.overflow,
            [
                o.upstream_rq_overflow,
                o.upstream_rq_pending_overflow,
                o.upstream_rq_retry_overflow,
            ],
        );
    }
}

/// The metric handles of one adaptive throttle. See the [module docs](self).
///
/// ```
/// use tripline_policies::metrics::ThrottleMetrics;
/// use tripline_policies::throttle::Throttle;
///
/// let throttle = Throttle::default();
/// let metrics = ThrottleMetrics::new("vendor", Vec::new());
/// metrics.update(&throttle); // on each scrape
/// ```
#[cfg(feature = "throttle")]
#[derive(Debug)]
pub struct ThrottleMetrics {
    probability: Gauge,
    window: [Gauge; 2],
    rejected: Counter,
}

#[cfg(feature = "throttle")]
impl ThrottleMetrics {
    /// Registers the handles for the throttle called `name`, with `extra` labels.
    pub fn new(name: &str, extra: Vec<Label>) -> Self {
        let l = labels("throttle", name, extra);
        Self {
            probability: metrics::gauge!("tripline_throttle_rejection_probability", l.clone()),
            window: ["requests", "accepts"]
                .map(|c| metrics::gauge!("tripline_throttle_window", with(&l, "count", c))),
            rejected: metrics::counter!("tripline_throttle_rejected_total", l),
        }
    }

    /// Publishes the throttle's figures now.
    pub fn update(&self, throttle: &crate::throttle::Throttle) {
        self.probability.set(throttle.probability());
        let (requests, accepts) = throttle.counts();
        self.window[0].set(requests as f64);
        self.window[1].set(accepts as f64);
        self.rejected.absolute(throttle.rejected());
    }
}

/// The metric handles of one priority shedder. See the [module docs](self).
///
/// ```
/// use tripline_policies::metrics::ShedMetrics;
/// use tripline_policies::shed::Shedder;
///
/// let shedder = Shedder::default();
/// let metrics = ShedMetrics::new("vendor", Vec::new());
/// metrics.update(&shedder); // on each scrape
/// ```
#[cfg(feature = "shed")]
#[derive(Debug)]
pub struct ShedMetrics {
    in_flight: Gauge,
    waiting: Gauge,
    admitted: [Counter; 2],
    rejected: [Counter; 5],
}

#[cfg(feature = "shed")]
impl ShedMetrics {
    /// Registers the handles for the shedder called `name`, with `extra` labels.
    pub fn new(name: &str, extra: Vec<Label>) -> Self {
        let l = labels("shed", name, extra);
        Self {
            in_flight: metrics::gauge!("tripline_shed_in_flight", l.clone()),
            waiting: metrics::gauge!("tripline_shed_waiting", l.clone()),
            admitted: ["none", "queued"]
                .map(|w| metrics::counter!("tripline_shed_admitted_total", with(&l, "wait", w))),
            rejected: ["full", "shed", "queue_full", "evicted", "timed_out"]
                .map(|r| metrics::counter!("tripline_shed_rejected_total", with(&l, "reason", r))),
        }
    }

    /// Publishes the shedder's figures now.
    pub fn update(&self, shedder: &crate::shed::Shedder) {
        self.in_flight.set(f64::from(shedder.in_flight()));
        self.waiting.set(f64::from(shedder.waiting()));
        let s = shedder.stats();
        set_all(&self.admitted, [s.admitted, s.admitted_after_wait]);
        set_all(
            &self.rejected,
            [s.full, s.shed, s.queue_full, s.evicted, s.timed_out],
        );
    }
}

/// The metric handles of one pipeline: its own counters, and each stage's handles (the
/// breaker's [`BreakerMetrics`], [`RetryMetrics`], [`BulkheadMetrics`], [`GateMetrics`],
/// [`ShedMetrics`], the limiter's, the partial breaker's, [`ThrottleMetrics`]), each stage
/// labelled with the pipeline's name (the breaker with its own). See the
/// [module docs](self).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tripline::ConfigError> {
/// use tripline_policies::metrics::PipelineMetrics;
/// use tripline_policies::pipeline::Pipeline;
///
/// let pipeline = Pipeline::builder().build()?;
/// let metrics = PipelineMetrics::new("vendor", &pipeline, Vec::new());
/// let _ = pipeline.call(|| async { Ok::<_, std::io::Error>(1) }).await;
/// metrics.update(&pipeline); // on each scrape
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "pipeline")]
#[derive(Debug)]
pub struct PipelineMetrics {
    calls: [Counter; 6],
    refused: [Counter; 7],
    fallbacks: Counter,
    breaker: Option<BreakerMetrics>,
    retry: Option<RetryMetrics>,
    partial: Option<crate::partial::PartialMetrics>,
    gate: Option<GateMetrics>,
    bulkhead: Option<BulkheadMetrics>,
    shed: Option<ShedMetrics>,
    limiter: Option<crate::limiter::LimiterMetrics>,
    throttle: Option<ThrottleMetrics>,
}

#[cfg(feature = "pipeline")]
impl PipelineMetrics {
    /// Registers the handles for `pipeline`, called `name`, and for each stage it has, with
    /// `extra` labels.
    pub fn new<C: Clock, P, K, M, B: tripline::Breaker>(
        name: &str,
        pipeline: &crate::pipeline::Pipeline<C, P, K, M, B>,
        extra: Vec<Label>,
    ) -> Self {
        let l = labels("pipeline", name, extra.clone());
        let e = || extra.clone();
        Self {
            calls: [
                "success", "failure", "ignored", "timeout", "injected", "refused",
            ]
            .map(|r| metrics::counter!("tripline_pipeline_calls_total", with(&l, "result", r))),
            refused: [
                "breaker", "partial", "gate", "bulkhead", "shed", "limiter", "throttle",
            ]
            .map(|s| metrics::counter!("tripline_pipeline_refused_total", with(&l, "stage", s))),
            fallbacks: metrics::counter!("tripline_pipeline_fallbacks_total", l.clone()),
            breaker: pipeline
                .breaker()
                .map(|b| BreakerMetrics::for_breaker(b, e())),
            retry: pipeline.retry().map(|_| RetryMetrics::new(name, e())),
            partial: pipeline
                .partial()
                .map(|_| crate::partial::PartialMetrics::new(name, e())),
            gate: pipeline.gate().map(|_| GateMetrics::new(name, e())),
            bulkhead: pipeline.bulkhead().map(|_| BulkheadMetrics::new(name, e())),
            shed: pipeline.shed().map(|_| ShedMetrics::new(name, e())),
            limiter: pipeline
                .limiter()
                .map(|_| crate::limiter::LimiterMetrics::new(name, e())),
            throttle: pipeline.throttle().map(|_| ThrottleMetrics::new(name, e())),
        }
    }

    /// Publishes the pipeline's counters and each stage's figures.
    pub fn update<C: Clock, P, K, M, B: tripline::Breaker>(
        &self,
        pipeline: &crate::pipeline::Pipeline<C, P, K, M, B>,
    ) {
        let s = pipeline.stats();
        let r = s.refused;
        set_all(
            &self.calls,
            [
                s.succeeded,
                s.failed,
                s.ignored,
                s.timed_out,
                s.injected,
                r.total(),
            ],
        );
        set_all(
            &self.refused,
            [
                r.breaker, r.partial, r.gate, r.bulkhead, r.shed, r.limiter, r.throttle,
            ],
        );
        self.fallbacks.absolute(s.fallbacks);
        if let (Some(m), Some(b)) = (&self.breaker, pipeline.breaker()) {
            m.update_from(b);
        }
        if let (Some(m), Some(p)) = (&self.retry, pipeline.retry()) {
            m.update(p);
        }
        if let (Some(m), Some(p)) = (&self.partial, pipeline.partial()) {
            m.update(p);
        }
        if let (Some(m), Some(g)) = (&self.gate, pipeline.gate()) {
            m.update(g);
        }
        if let (Some(m), Some(b)) = (&self.bulkhead, pipeline.bulkhead()) {
            m.update(b);
        }
        if let (Some(m), Some(s)) = (&self.shed, pipeline.shed()) {
            m.update(s);
        }
        if let (Some(m), Some(l)) = (&self.limiter, pipeline.limiter()) {
            m.update(l);
        }
        if let (Some(m), Some(t)) = (&self.throttle, pipeline.throttle()) {
            m.update(t);
        }
    }
}

/// Bucket bounds, in seconds, for the call-duration histogram
/// (`tripline_breaker_call_duration_seconds`): 1 ms to 60 s. An exporter renders a histogram
/// as a summary unless told buckets (`metrics-exporter-prometheus`:
/// `set_buckets_for_metric(Matcher::Full("tripline_breaker_call_duration_seconds".into()),
/// &CALL_DURATION_BUCKETS)`); the Grafana dashboard's latency panel needs them.
pub const CALL_DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

type Update = Box<dyn Fn() + Send + Sync>;

/// Every breaker's, registry's and policy's metrics, exported in one call per scrape. Make
/// it after installing the recorder (its handles, and the `# HELP` texts, go to the recorder
/// installed then); add what to export; call [`update`](Self::update) before each render.
/// See the [module docs](self) for an example.
#[derive(Default)]
pub struct Metrics {
    updates: Vec<Update>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("exports", &self.updates.len())
            .finish()
    }
}

impl Metrics {
    /// An exporter of nothing yet; every series gets its `# HELP` text ([`describe`]).
    pub fn new() -> Self {
        describe();
        Self::default()
    }

    /// Exports every breaker of `registry` (`tripline_breaker_*`, labelled with their key's
    /// dependency and scope) and its summary per dependency (`tripline_registry_breakers`).
    pub fn registry<C: Clock + Clone>(mut self, registry: Arc<Registry<C>>) -> Self {
        self.updates
            .push(Box::new(move || registry.export_metrics()));
        self
    }

    /// Exports a breaker of its own (not a registry's: those are exported with it).
    pub fn breaker<C: Clock>(mut self, breaker: &CircuitBreaker<C>) -> Self {
        let m = BreakerMetrics::new(breaker, Vec::new());
        let b = breaker.clone();
        self.updates.push(Box::new(move || m.update(&b)));
        self
    }

    /// Exports any host of the [`tripline::Breaker`] interface (a fleet-wide
    /// `tripline_redis::SharedBreaker`) under the series and labels of
    /// [`breaker`](Self::breaker) ([`BreakerMetrics::for_breaker`]).
    pub fn any_breaker<B: tripline::Breaker>(mut self, breaker: &B) -> Self {
        let m = BreakerMetrics::for_breaker(breaker, Vec::new());
        let b = breaker.clone();
        self.updates.push(Box::new(move || m.update_from(&b)));
        self
    }

    /// Exports `pipeline`, called `name`, and each of its stages ([`PipelineMetrics`]).
    #[cfg(feature = "pipeline")]
    pub fn pipeline<C, P, K, M, B>(
        mut self,
        name: &str,
        pipeline: &crate::pipeline::Pipeline<C, P, K, M, B>,
    ) -> Self
    where
        C: Clock,
        B: tripline::Breaker,
        P: Clone + Send + Sync + 'static,
        K: Clone + Send + Sync + 'static,
        M: Clone + Send + Sync + 'static,
    {
        let m = PipelineMetrics::new(name, pipeline, Vec::new());
        let p = pipeline.clone();
        self.updates.push(Box::new(move || m.update(&p)));
        self
    }

    /// Exports anything else on each update: a limiter, an outlier detector, a policy used
    /// on its own, with its handles.
    ///
    /// ```
    /// use tripline_policies::bulkhead::Bulkhead;
    /// use tripline_policies::metrics::{BulkheadMetrics, Metrics};
    ///
    /// let bulkhead = Bulkhead::default();
    /// let handles = BulkheadMetrics::new("reports", Vec::new());
    /// let metrics = Metrics::new().with(move || handles.update(&bulkhead));
    /// metrics.update();
    /// ```
    pub fn with(mut self, update: impl Fn() + Send + Sync + 'static) -> Self {
        self.updates.push(Box::new(update));
        self
    }

    /// Publishes everything added, now: call it on each scrape, before rendering.
    pub fn update(&self) {
        for u in &self.updates {
            u();
        }
    }
}

/// Gives every series of the breakers, the registries and the policies its unit and its
/// `# HELP` text, in the recorder installed now ([`Metrics::new`] calls it).
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge};
    tripline::observe::describe_metrics();
    for (name, help) in [
        (
            "tripline_retry_requests_total",
            "Requests the retry policy started.",
        ),
        (
            "tripline_retry_retries_total",
            "Retries made: granted by the budget and sent on.",
        ),
        (
            "tripline_retry_calls_total",
            "Requests by how they ended: success or failure, with or without a retry.",
        ),
        (
            "tripline_retry_refused_total",
            "Retries not made: refused by the budget, the gate's retry limit, or no attempt left.",
        ),
        (
            "tripline_retry_local_rejections_total",
            "Attempts a local policy refused (never retried).",
        ),
        (
            "tripline_bulkhead_rejected_total",
            "Calls the bulkhead refused, by reason.",
        ),
        (
            "tripline_gate_overflow_total",
            "Calls the gate refused, by the limit reached.",
        ),
        (
            "tripline_throttle_rejected_total",
            "Requests the throttle refused locally.",
        ),
        (
            "tripline_shed_admitted_total",
            "Calls the shedder admitted, at once or after queueing.",
        ),
        (
            "tripline_shed_rejected_total",
            "Calls the shedder refused, by reason.",
        ),
        (
            "tripline_pipeline_calls_total",
            "Calls through the pipeline by how they ended.",
        ),
        (
            "tripline_pipeline_refused_total",
            "Calls a local stage of the pipeline refused, by stage.",
        ),
        (
            "tripline_pipeline_fallbacks_total",
            "Errors the pipeline handed to a fallback.",
        ),
        (
            "tripline_limiter_samples_total",
            "Samples the limiter's permits fed, by outcome.",
        ),
        (
            "tripline_limiter_rejected_total",
            "Calls the limiter refused, by reason.",
        ),
        (
            "tripline_partial_calls_total",
            "Calls the partial breaker admitted or rejected.",
        ),
    ] {
        describe_counter!(name, Unit::Count, help);
    }
    for (name, unit, help) in [
        (
            "tripline_retry_budget_remaining",
            Unit::Count,
            "Retries the budget would grant now; NaN when it does not count them.",
        ),
        (
            "tripline_bulkhead_in_flight",
            Unit::Count,
            "Calls holding a bulkhead slot.",
        ),
        (
            "tripline_bulkhead_available",
            Unit::Count,
            "Bulkhead slots free.",
        ),
        (
            "tripline_bulkhead_max_concurrent",
            Unit::Count,
            "The bulkhead's slots.",
        ),
        (
            "tripline_bulkhead_waiting",
            Unit::Count,
            "Calls waiting for a bulkhead slot.",
        ),
        (
            "tripline_gate_active",
            Unit::Count,
            "Gate slots held, by limit.",
        ),
        (
            "tripline_gate_remaining",
            Unit::Count,
            "Gate slots left, by limit.",
        ),
        (
            "tripline_throttle_rejection_probability",
            Unit::Count,
            "The chance a request attempted now is refused by the throttle.",
        ),
        (
            "tripline_throttle_window",
            Unit::Count,
            "The throttle window's requests and accepts.",
        ),
        (
            "tripline_shed_in_flight",
            Unit::Count,
            "Calls holding a shedder slot.",
        ),
        (
            "tripline_shed_waiting",
            Unit::Count,
            "Calls waiting in the shedder's queue.",
        ),
        (
            "tripline_limiter_limit",
            Unit::Count,
            "The adaptive concurrency limit.",
        ),
        (
            "tripline_limiter_in_flight",
            Unit::Count,
            "Calls holding a limiter slot.",
        ),
        (
            "tripline_limiter_waiting",
            Unit::Count,
            "Calls waiting in the limiter's queue.",
        ),
        (
            "tripline_limiter_rtt_seconds",
            Unit::Seconds,
            "The limiter's round-trip estimates: the last sample, the baseline.",
        ),
        (
            "tripline_partial_rejection_rate",
            Unit::Count,
            "Share of calls the partial breaker rejects.",
        ),
        (
            "tripline_partial_error_rate",
            Unit::Count,
            "The partial breaker's window error rate.",
        ),
        (
            "tripline_partial_ideal_error_rate",
            Unit::Count,
            "The ideal error rate learned.",
        ),
    ] {
        describe_gauge!(name, unit, help);
    }
}
