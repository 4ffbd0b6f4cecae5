//! The limiter's gauges and counters through the `metrics` facade (feature `metrics`).

use metrics::{Counter, Gauge, Label};

use super::Limiter;
use crate::shed::Refusal;

const REASONS: [Refusal; 5] = [
    Refusal::Full,
    Refusal::Shed,
    Refusal::QueueFull,
    Refusal::Evicted,
    Refusal::TimedOut,
];

/// The metric handles of one limiter, created once, updated from [`Limiter::snapshot`] (on
/// each scrape, never per call). Every series carries the label `limiter` (the name given)
/// and any extra labels.
///
/// | name | type | what |
/// |---|---|---|
/// | `tripline_limiter_limit` | gauge | the limit |
/// | `tripline_limiter_in_flight` | gauge | calls holding a slot |
/// | `tripline_limiter_waiting` | gauge | calls in the queue |
/// | `tripline_limiter_rtt_seconds{estimate="last"}` | gauge | the last sample's RTT |
/// | `tripline_limiter_rtt_seconds{estimate="baseline"}` | gauge | Vegas's no-load RTT, Gradient2's long-term average |
/// | `tripline_limiter_samples_total{outcome="success"\|"dropped"\|"ignored"}` | counter | what the permits fed |
/// | `tripline_limiter_rejected_total{reason="full"\|"shed"\|"queue_full"\|"evicted"\|"timed_out"}` | counter | refusals by reason |
///
/// ```
/// use tripline_policies::limiter::{Limiter, LimiterMetrics};
///
/// let limiter = Limiter::default();
/// let metrics = LimiterMetrics::new("catalog", Vec::new());
/// metrics.update(&limiter); // on each scrape
/// ```
#[derive(Debug)]
pub struct LimiterMetrics {
    limit: Gauge,
    in_flight: Gauge,
    waiting: Gauge,
    last_rtt: Gauge,
    baseline_rtt: Gauge,
    samples: [Counter; 3],
    rejected: [Counter; 5],
}

impl LimiterMetrics {
    /// Registers the handles for the limiter called `name`, with `extra` labels.
    pub fn new(name: &str, extra: Vec<Label>) -> Self {
        let mut labels = vec![Label::new("limiter", name.to_string())];
        labels.extend(extra);
        let with = |k: &'static str, v: &'static str| {
            let mut l = labels.clone();
            l.push(Label::new(k, v));
            l
        };
        Self {
            limit: metrics::gauge!("tripline_limiter_limit", labels.clone()),
            in_flight: metrics::gauge!("tripline_limiter_in_flight", labels.clone()),
            waiting: metrics::gauge!("tripline_limiter_waiting", labels.clone()),
            last_rtt: metrics::gauge!("tripline_limiter_rtt_seconds", with("estimate", "last")),
            baseline_rtt: metrics::gauge!(
                "tripline_limiter_rtt_seconds",
                with("estimate", "baseline")
            ),
            samples: ["success", "dropped", "ignored"]
                .map(|o| metrics::counter!("tripline_limiter_samples_total", with("outcome", o))),
            rejected: REASONS.map(|r| {
                metrics::counter!(
                    "tripline_limiter_rejected_total",
                    with("reason", r.as_str())
                )
            }),
        }
    }

    /// Publishes the limiter's current figures.
    pub fn update(&self, limiter: &Limiter) {
        let s = limiter.snapshot();
        self.limit.set(f64::from(s.limit));
        self.in_flight.set(f64::from(s.in_flight));
        self.waiting.set(f64::from(s.waiting));
        self.last_rtt.set(s.last_rtt.as_secs_f64());
        self.baseline_rtt.set(s.baseline_rtt.as_secs_f64());
        for (c, v) in self.samples.iter().zip([s.successes, s.drops, s.ignored]) {
            c.absolute(v);
        }
        let r = s.slots;
        for (c, v) in
            self.rejected
                .iter()
                .zip([r.full, r.shed, r.queue_full, r.evicted, r.timed_out])
        {
            c.absolute(v);
        }
    }
}
