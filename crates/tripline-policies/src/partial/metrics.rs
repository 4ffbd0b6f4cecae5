//! The partial breaker's figures through the `metrics` facade (feature `metrics`).

use metrics::{Counter, Gauge, Label};

use super::PartialBreaker;

/// The metric handles of one partial breaker, created once, updated from
/// [`PartialBreaker::snapshot`] (on each scrape, never per call). Every series carries the
/// label `breaker` (the name given) and any extra labels.
///
/// | name | type | what |
/// |---|---|---|
/// | `tripline_partial_rejection_rate` | gauge | the share of calls rejected, 0 to 1 |
/// | `tripline_partial_error_rate` | gauge | the window's error rate at the last update |
/// | `tripline_partial_ideal_error_rate` | gauge | the ideal error rate learned |
/// | `tripline_partial_calls_total{decision="admitted"\|"rejected"}` | counter | calls by decision |
///
/// ```
/// use tripline_policies::partial::{PartialBreaker, PartialMetrics};
///
/// let breaker = PartialBreaker::default();
/// let metrics = PartialMetrics::new("catalog", Vec::new());
/// metrics.update(&breaker); // on each scrape
/// ```
#[derive(Debug)]
pub struct PartialMetrics {
    rejection_rate: Gauge,
    error_rate: Gauge,
    ideal: Gauge,
    admitted: Counter,
    rejected: Counter,
}

impl PartialMetrics {
    /// Registers the handles for the breaker called `name`, with `extra` labels.
    pub fn new(name: &str, extra: Vec<Label>) -> Self {
        let mut labels = vec![Label::new("breaker", name.to_string())];
        labels.extend(extra);
        let with = |v: &'static str| {
            let mut l = labels.clone();
            l.push(Label::new("decision", v));
            l
        };
        Self {
            rejection_rate: metrics::gauge!("tripline_partial_rejection_rate", labels.clone()),
            error_rate: metrics::gauge!("tripline_partial_error_rate", labels.clone()),
            ideal: metrics::gauge!("tripline_partial_ideal_error_rate", labels.clone()),
            admitted: metrics::counter!("tripline_partial_calls_total", with("admitted")),
            rejected: metrics::counter!("tripline_partial_calls_total", with("rejected")),
        }
    }

    /// Publishes the breaker's current figures.
    pub fn update(&self, breaker: &PartialBreaker) {
        let s = breaker.snapshot();
        self.rejection_rate.set(s.rejection_rate);
        self.error_rate.set(s.error_rate);
        self.ideal.set(s.ideal_error_rate);
        self.admitted.absolute(s.admitted);
        self.rejected.absolute(s.rejected);
    }
}
