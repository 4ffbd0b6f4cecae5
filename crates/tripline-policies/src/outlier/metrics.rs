//! The detector's figures through the `metrics` facade (feature `metrics`).

use metrics::{Counter, Gauge, Label};
use tripline::Clock;

use super::{EjectionType, HostKey, OutlierDetector};

/// The metric handles of one detector, created once, updated from
/// [`OutlierDetector::stats`] snapshots (on each scrape, never per call).
///
/// Names are Envoy's `outlier_detection.*` statistics under `tripline_outlier_`, with `_total`
/// on counters; every series carries the label `upstream` (the detector's name) and any extra
/// labels given:
///
/// | name | type | Envoy |
/// |---|---|---|
/// | `tripline_outlier_ejections_enforced_total` | counter | `ejections_enforced_total` |
/// | `tripline_outlier_ejections_enforced_<type>_total` | counter | `ejections_enforced_consecutive_5xx`, `…_consecutive_gateway_failure`, `…_consecutive_local_origin_failure`, `…_success_rate`, `…_local_origin_success_rate`, `…_failure_percentage`, `…_local_origin_failure_percentage` |
/// | `tripline_outlier_ejections_detected_<type>_total` | counter | `ejections_detected_<type>` |
/// | `tripline_outlier_ejections_overflow_total` | counter | `ejections_overflow` |
/// | `tripline_outlier_ejections_active` | gauge | `ejections_active` |
/// | `tripline_outlier_lb_healthy_panic_total` | counter | `lb_healthy_panic` |
/// | `tripline_outlier_panic` | gauge | 1 while the balancer is in panic |
/// | `tripline_outlier_hosts` | gauge | hosts in the set |
/// | `tripline_outlier_hosts_healthy` | gauge | hosts not ejected |
///
/// ```
/// use tripline_policies::outlier::{OutlierConfig, OutlierDetector, OutlierMetrics};
///
/// let detector = OutlierDetector::new(OutlierConfig::default(), ["a", "b"])?;
/// let metrics = OutlierMetrics::new(&detector, Vec::new());
/// metrics.update(&detector); // on each scrape
/// # Ok::<(), tripline::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct OutlierMetrics {
    enforced_total: Counter,
    enforced: [Counter; 7],
    detected: [Counter; 7],
    overflow: Counter,
    active: Gauge,
    panic_picks: Counter,
    panic: Gauge,
    hosts: Gauge,
    healthy: Gauge,
}

impl OutlierMetrics {
    /// Registers the handles for `detector`, with `extra` labels beside `upstream`.
    pub fn new<H: HostKey, C: Clock>(detector: &OutlierDetector<H, C>, extra: Vec<Label>) -> Self {
        let mut labels = vec![Label::new("upstream", detector.name().to_string())];
        labels.extend(extra);
        let counter = |name: String| metrics::counter!(name, labels.clone());
        let gauge = |name: &'static str| metrics::gauge!(name, labels.clone());
        Self {
            enforced_total: counter("tripline_outlier_ejections_enforced_total".into()),
            enforced: EjectionType::ALL.map(|t| {
                counter(format!(
                    "tripline_outlier_ejections_enforced_{}_total",
                    t.as_str()
                ))
            }),
            detected: EjectionType::ALL.map(|t| {
                counter(format!(
                    "tripline_outlier_ejections_detected_{}_total",
                    t.as_str()
                ))
            }),
            overflow: counter("tripline_outlier_ejections_overflow_total".into()),
            active: gauge("tripline_outlier_ejections_active"),
            panic_picks: counter("tripline_outlier_lb_healthy_panic_total".into()),
            panic: gauge("tripline_outlier_panic"),
            hosts: gauge("tripline_outlier_hosts"),
            healthy: gauge("tripline_outlier_hosts_healthy"),
        }
    }

    /// Publishes the detector's current figures.
    pub fn update<H: HostKey, C: Clock>(&self, detector: &OutlierDetector<H, C>) {
        let s = detector.stats();
        self.enforced_total.absolute(s.ejections_enforced_total);
        for (c, v) in self.enforced.iter().zip(s.ejections_enforced) {
            c.absolute(v);
        }
        for (c, v) in self.detected.iter().zip(s.ejections_detected) {
            c.absolute(v);
        }
        self.overflow.absolute(s.ejections_overflow);
        self.active.set(f64::from(s.ejections_active));
        self.panic_picks.absolute(s.lb_healthy_panic);
        self.panic.set(if s.panic { 1.0 } else { 0.0 });
        self.hosts.set(f64::from(s.hosts));
        self.healthy.set(f64::from(s.hosts_healthy));
    }
}
