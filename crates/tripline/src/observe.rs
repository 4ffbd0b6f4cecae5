//! Operations glue: breaker metrics through the `metrics` facade (feature `metrics`) and
//! transitions as `tracing` events (feature `tracing`).

#[cfg(feature = "metrics")]
pub use self::metrics_export::BreakerMetrics;
#[cfg(feature = "tracing")]
pub use self::tracing_events::TracingListener;

#[cfg(feature = "metrics")]
mod metrics_export {
    use metrics::{Counter, Gauge, Label};

    use crate::{CircuitBreaker, Clock, State};

    /// The metric handles of one breaker, created once, updated from
    /// [`CircuitBreaker::metrics`] snapshots (never per call, so the hot path pays nothing).
    ///
    /// Names follow Prometheus conventions; every series carries the label `breaker`, plus any
    /// extra labels given (a registry adds `dependency`, `scope_kind` and `scope`):
    ///
    /// | name | type | meaning |
    /// |---|---|---|
    /// | `tripline_breaker_calls_total{outcome}` | counter | recorded calls, `outcome` = success, failure, ignored |
    /// | `tripline_breaker_slow_calls_total` | counter | calls slower than the slow-call duration |
    /// | `tripline_breaker_rejected_calls_total` | counter | calls refused |
    /// | `tripline_breaker_stale_results_total` | counter | results discarded as from an old generation |
    /// | `tripline_breaker_abandoned_permits_total` | counter | permits dropped without a result |
    /// | `tripline_breaker_transitions_total` | counter | state changes |
    /// | `tripline_breaker_state{state}` | gauge | 1 for the current state, 0 for the others |
    /// | `tripline_breaker_failure_rate` | gauge | failure ratio of the window, 0 to 1 |
    /// | `tripline_breaker_slow_call_rate` | gauge | slow-call ratio of the window, 0 to 1 |
    /// | `tripline_breaker_window_calls` | gauge | calls in the window |
    /// | `tripline_breaker_open_duration_seconds` | gauge | cumulative seconds spent Open or ForcedOpen |
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker};
    /// use tripline::observe::BreakerMetrics;
    ///
    /// let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
    /// let metrics = BreakerMetrics::new(&breaker, Vec::new());
    /// breaker.call(|| Ok::<_, ()>(())).unwrap();
    /// metrics.update(&breaker); // on each scrape
    /// ```
    #[derive(Debug)]
    pub struct BreakerMetrics {
        success: Counter,
        failure: Counter,
        ignored: Counter,
        slow: Counter,
        rejected: Counter,
        stale: Counter,
        abandoned: Counter,
        transitions: Counter,
        state: [Gauge; 6],
        failure_rate: Gauge,
        slow_rate: Gauge,
        window_calls: Gauge,
        open_seconds: Gauge,
    }

    impl BreakerMetrics {
        /// Registers the handles for `breaker`, with `extra` labels beside `breaker`.
        pub fn new<C: Clock>(breaker: &CircuitBreaker<C>, extra: Vec<Label>) -> Self {
            let mut labels = vec![Label::new("breaker", breaker.name().to_string())];
            labels.extend(extra);
            let with = |k: &'static str, v: &'static str| {
                let mut l = labels.clone();
                l.push(Label::new(k, v));
                l
            };
            Self {
                success: metrics::counter!(
                    "tripline_breaker_calls_total",
                    with("outcome", "success")
                ),
                failure: metrics::counter!(
                    "tripline_breaker_calls_total",
                    with("outcome", "failure")
                ),
                ignored: metrics::counter!(
                    "tripline_breaker_calls_total",
                    with("outcome", "ignored")
                ),
                slow: metrics::counter!("tripline_breaker_slow_calls_total", labels.clone()),
                rejected: metrics::counter!(
                    "tripline_breaker_rejected_calls_total",
                    labels.clone()
                ),
                stale: metrics::counter!("tripline_breaker_stale_results_total", labels.clone()),
                abandoned: metrics::counter!(
                    "tripline_breaker_abandoned_permits_total",
                    labels.clone()
                ),
                transitions: metrics::counter!(
                    "tripline_breaker_transitions_total",
                    labels.clone()
                ),
                state: State::ALL
                    .map(|s| metrics::gauge!("tripline_breaker_state", with("state", s.as_str()))),
                failure_rate: metrics::gauge!("tripline_breaker_failure_rate", labels.clone()),
                slow_rate: metrics::gauge!("tripline_breaker_slow_call_rate", labels.clone()),
                window_calls: metrics::gauge!("tripline_breaker_window_calls", labels.clone()),
                open_seconds: metrics::gauge!("tripline_breaker_open_duration_seconds", labels),
            }
        }

        /// Publishes the breaker's current figures.
        pub fn update<C: Clock>(&self, breaker: &CircuitBreaker<C>) {
            let m = breaker.metrics();
            self.success.absolute(m.successful_calls);
            self.failure.absolute(m.failed_calls);
            self.ignored.absolute(m.ignored_calls);
            self.slow.absolute(m.slow_calls);
            self.rejected.absolute(m.rejected_calls);
            self.stale.absolute(m.stale_results);
            self.abandoned.absolute(m.abandoned_permits);
            self.transitions.absolute(m.transitions);
            for (g, s) in self.state.iter().zip(State::ALL) {
                g.set(if s == m.state { 1.0 } else { 0.0 });
            }
            self.failure_rate.set(m.window.failure_rate() / 100.0);
            self.slow_rate.set(m.window.slow_rate() / 100.0);
            self.window_calls.set(m.window.calls as f64);
            self.open_seconds.set(m.time_open.as_secs_f64());
        }
    }

    impl BreakerMetrics {
        pub(crate) fn for_key<C: Clock>(
            breaker: &CircuitBreaker<C>,
            key: &crate::registry::Key,
        ) -> Self {
            let mut extra = vec![Label::new("dependency", key.dependency().to_string())];
            if let Some((kind, v)) = key.scope() {
                extra.push(Label::new("scope_kind", kind.as_str()));
                extra.push(Label::new("scope", v.to_string()));
            }
            Self::new(breaker, extra)
        }
    }
}

#[cfg(feature = "tracing")]
mod tracing_events {
    use crate::{Event, EventKind, Listener, State};

    /// Logs transitions (and would-trip reports) as `tracing` events with the decision behind
    /// them; never per call. Opening logs at WARN, everything else at INFO.
    ///
    /// ```
    /// use tripline::{BreakerConfig, CircuitBreaker};
    /// use tripline::observe::TracingListener;
    ///
    /// let breaker = CircuitBreaker::new("catalog", BreakerConfig::default());
    /// breaker.subscribe(TracingListener);
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct TracingListener;

    impl Listener for TracingListener {
        fn on_event(&self, e: &Event) {
            match &e.kind {
                EventKind::Transition {
                    from,
                    to,
                    generation,
                    reason,
                    window,
                    open_for,
                } => {
                    let open_for_s = open_for.map(|d| d.as_secs_f64());
                    if matches!(to, State::Open | State::ForcedOpen) {
                        tracing::warn!(
                            breaker = %e.breaker, %from, %to, generation, reason = ?reason,
                            calls = window.calls, failures = window.failures,
                            slow_calls = window.slow_calls, in_flight_slow = window.in_flight_slow,
                            failure_rate = window.failure_rate(), slow_rate = window.slow_rate(),
                            open_for_s, "circuit breaker opened"
                        );
                    } else {
                        tracing::info!(
                            breaker = %e.breaker, %from, %to, generation, reason = ?reason,
                            calls = window.calls, failures = window.failures,
                            slow_calls = window.slow_calls, "circuit breaker changed state"
                        );
                    }
                }
                EventKind::WouldTrip { reason, window } => tracing::warn!(
                    breaker = %e.breaker, reason = ?reason, calls = window.calls,
                    failures = window.failures, slow_calls = window.slow_calls,
                    "circuit breaker would trip (metrics-only)"
                ),
                _ => {}
            }
        }
    }
}
