//! Operations glue: breaker metrics through the `metrics` facade (feature `metrics`) and
//! transitions as `tracing` events (feature `tracing`).

#[cfg(feature = "metrics")]
pub use self::metrics_export::{BreakerMetrics, describe_metrics};
#[cfg(feature = "metrics")]
pub(crate) use self::metrics_export::{DependencyGauges, FollowState, StateGauges};
#[cfg(feature = "tracing")]
pub use self::tracing_events::TracingListener;

#[cfg(feature = "metrics")]
mod metrics_export {
    use metrics::{Counter, Gauge, Label};

    use crate::{CircuitBreaker, Clock, Event, EventKind, FailureKind, Listener, State};

    /// One gauge per state, 1 for the current state and 0 for the others; the breaker it is
    /// attached to sets them at every transition, from its event queue ([`FollowState`]), so
    /// that a recorder's code never runs under a lock of the breaker's and a slow recorder
    /// holds up only the thread delivering the events.
    #[derive(Clone, Debug)]
    pub(crate) struct StateGauges([Gauge; 6]);

    impl StateGauges {
        fn new(labels: &[Label]) -> Self {
            Self(State::ALL.map(|s| {
                let mut l = labels.to_vec();
                l.push(Label::new("state", s.as_str()));
                metrics::gauge!("tripline_breaker_state", l)
            }))
        }

        /// Shows `state` as the current one.
        pub(crate) fn show(&self, state: State) {
            for (g, s) in self.0.iter().zip(State::ALL) {
                g.set(if s == state { 1.0 } else { 0.0 });
            }
        }

        /// Shows no state at all (the breaker is gone).
        pub(crate) fn clear(&self) {
            for g in &self.0 {
                g.set(0.0);
            }
        }
    }

    /// State gauges as a listener: the state of the `Initial` event, then each transition's.
    #[derive(Debug)]
    pub(crate) struct FollowState(pub(crate) StateGauges);

    impl Listener for FollowState {
        fn on_event(&self, e: &Event) {
            match e.kind {
                EventKind::Initial { state, .. } => self.0.show(state),
                EventKind::Transition { to, .. } => self.0.show(to),
                _ => {}
            }
        }
    }

    /// The metric handles of one breaker, created once. The state gauges follow every
    /// transition as it happens (a failed probe's HalfOpen -> Open too); everything else is
    /// published from a [`CircuitBreaker::metrics`] snapshot by [`update`](Self::update), on
    /// each scrape, never per call, so the hot path pays nothing.
    ///
    /// Names follow Prometheus conventions; every series carries the label `breaker`, plus any
    /// extra labels given (a registry adds `dependency`, `scope_kind` and `scope`):
    ///
    /// | name | type | meaning |
    /// |---|---|---|
    /// | `tripline_breaker_calls_total{outcome}` | counter | recorded calls, `outcome` = success, failure, ignored |
    /// | `tripline_breaker_slow_calls_total{outcome}` | counter | calls slower than the slow-call duration, `outcome` = success, failure |
    /// | `tripline_breaker_failures_by_kind_total{kind}` | counter | failures by the kind their classifier gave (timeout, connection, server_error, unavailable, rate_limited, quota_exhausted, other) |
    /// | `tripline_breaker_lumped_failures_total` | counter | failures lumped into an earlier one |
    /// | `tripline_breaker_rejected_calls_total{state}` | counter | calls refused, `state` = open, half-open, forced-open |
    /// | `tripline_breaker_stale_results_total` | counter | results discarded as from an old generation |
    /// | `tripline_breaker_abandoned_permits_total` | counter | permits dropped without a result |
    /// | `tripline_breaker_transitions_total` | counter | state changes |
    /// | `tripline_breaker_state{state}` | gauge | 1 for the current state, 0 for the others; all 0 once a registry evicted the key |
    /// | `tripline_breaker_failure_rate` | gauge | failure ratio of the window, 0 to 1; NaN below the minimum calls (not yet evaluated) |
    /// | `tripline_breaker_slow_call_rate` | gauge | slow-call ratio of the window, 0 to 1; NaN below the minimum calls |
    /// | `tripline_breaker_window_calls` | gauge | calls in the window |
    /// | `tripline_breaker_window_call_duration_seconds` | gauge | total duration of the window's calls; NaN unless `call_durations` |
    /// | `tripline_breaker_window_mean_call_duration_seconds` | gauge | mean duration of the window's calls; NaN unless `call_durations` and the window holds a call |
    /// | `tripline_breaker_probes{status}` | gauge | the half-open round: `status` = admitted, in_flight, succeeded, failed |
    /// | `tripline_breaker_consecutive_calls{outcome}` | gauge | the current run of successes or failures |
    /// | `tripline_breaker_open_duration_seconds` | gauge | cumulative seconds spent Open or ForcedOpen |
    /// | `tripline_breaker_call_duration_seconds{outcome}` | histogram | each recorded call's duration, `outcome` = success, failure, ignored; only with `call_durations` on |
    ///
    /// The histogram is the only series recorded per call: with the configuration's
    /// `call_durations` on, the first `BreakerMetrics` made for a breaker subscribes a listener
    /// of its outcome events (which times every call; each result then costs one short critical
    /// section on the breaker's listener list). An exporter shows it as a summary unless told
    /// buckets for it (`metrics-exporter-prometheus`: `set_buckets_for_metric`).
    /// [`describe_metrics`] gives every series its `# HELP` text.
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
        calls: [Counter; 3],
        slow: [Counter; 2],
        kinds: [Counter; 7],
        lumped: Counter,
        rejected: [Counter; 3],
        stale: Counter,
        abandoned: Counter,
        transitions: Counter,
        state: StateGauges,
        /// Whether the breaker keeps `state` current itself (the first handles made for it).
        state_attached: bool,
        failure_rate: Gauge,
        slow_rate: Gauge,
        window_calls: Gauge,
        window_duration: Gauge,
        mean_duration: Gauge,
        probes: [Gauge; 4],
        consecutive: [Gauge; 2],
        open_seconds: Gauge,
        /// The breaker's totals as of the last update: counters are published as increments
        /// since then, so a breaker rebuilt or re-created for the same key (whose totals start
        /// at zero) carries the series on instead of holding it below its old value.
        published: std::sync::Mutex<[u64; COUNTERS]>,
    }

    /// calls 3, slow 2, kinds 7, lumped, rejected 3, stale, abandoned, transitions.
    const COUNTERS: usize = 19;

    fn with(labels: &[Label], k: &'static str, v: &'static str) -> Vec<Label> {
        let mut l = labels.to_vec();
        l.push(Label::new(k, v));
        l
    }

    impl BreakerMetrics {
        /// Registers the handles for `breaker`, with `extra` labels beside `breaker`, and shows
        /// its state now. The first `BreakerMetrics` made for a breaker is kept current by its
        /// transitions; a second one shows the state as of its last [`update`](Self::update).
        /// Counters are published as increments since the handles' last update, so a
        /// breaker that replaces another under the same labels (a registry's rebuilt or
        /// re-created key) carries the series on; two handles for one breaker under the same
        /// labels would count its calls twice.
        pub fn new<C: Clock>(breaker: &CircuitBreaker<C>, extra: Vec<Label>) -> Self {
            let mut labels = vec![Label::new("breaker", breaker.name().to_string())];
            labels.extend(extra);
            let l = &labels[..];
            let outcome = |v| with(l, "outcome", v);
            let state = StateGauges::new(l);
            let state_attached = breaker.attach_state_gauges(&state);
            if !state_attached {
                state.show(breaker.state());
            }
            if state_attached && breaker.config().call_durations() {
                breaker.subscribe(DurationHistogram(["success", "failure", "ignored"].map(
                    |o| metrics::histogram!("tripline_breaker_call_duration_seconds", outcome(o)),
                )));
            }
            Self::handles(l, state, state_attached)
        }

        /// Every handle but the state gauges' and the histogram's, under `l`.
        fn handles(l: &[Label], state: StateGauges, state_attached: bool) -> Self {
            let outcome = |v| with(l, "outcome", v);
            Self {
                calls: ["success", "failure", "ignored"]
                    .map(|o| metrics::counter!("tripline_breaker_calls_total", outcome(o))),
                slow: ["success", "failure"]
                    .map(|o| metrics::counter!("tripline_breaker_slow_calls_total", outcome(o))),
                kinds: FailureKind::ALL.map(|k| {
                    metrics::counter!(
                        "tripline_breaker_failures_by_kind_total",
                        with(l, "kind", k.as_str())
                    )
                }),
                lumped: metrics::counter!("tripline_breaker_lumped_failures_total", l.to_vec()),
                rejected: [State::Open, State::HalfOpen, State::ForcedOpen].map(|s| {
                    metrics::counter!(
                        "tripline_breaker_rejected_calls_total",
                        with(l, "state", s.as_str())
                    )
                }),
                stale: metrics::counter!("tripline_breaker_stale_results_total", l.to_vec()),
                abandoned: metrics::counter!(
                    "tripline_breaker_abandoned_permits_total",
                    l.to_vec()
                ),
                transitions: metrics::counter!("tripline_breaker_transitions_total", l.to_vec()),
                state,
                state_attached,
                failure_rate: metrics::gauge!("tripline_breaker_failure_rate", l.to_vec()),
                slow_rate: metrics::gauge!("tripline_breaker_slow_call_rate", l.to_vec()),
                window_calls: metrics::gauge!("tripline_breaker_window_calls", l.to_vec()),
                window_duration: metrics::gauge!(
                    "tripline_breaker_window_call_duration_seconds",
                    l.to_vec()
                ),
                mean_duration: metrics::gauge!(
                    "tripline_breaker_window_mean_call_duration_seconds",
                    l.to_vec()
                ),
                probes: ["admitted", "in_flight", "succeeded", "failed"]
                    .map(|s| metrics::gauge!("tripline_breaker_probes", with(l, "status", s))),
                consecutive: ["success", "failure"]
                    .map(|o| metrics::gauge!("tripline_breaker_consecutive_calls", outcome(o))),
                open_seconds: metrics::gauge!("tripline_breaker_open_duration_seconds", l.to_vec()),
                published: std::sync::Mutex::new([0; COUNTERS]),
            }
        }

        /// The handles for any host of the [`Breaker`](crate::Breaker) interface (a fleet-wide
        /// `tripline_redis::SharedBreaker`), with `extra` labels beside `breaker`: the same
        /// series, names and labels as [`new`](Self::new) makes for an in-process breaker,
        /// published from [`Breaker::metrics`](crate::Breaker::metrics) by
        /// [`update_from`](Self::update_from) on each scrape. The `breaker` label is the
        /// breaker's [`label`](crate::Breaker::label) (a shared breaker with hashed scopes
        /// shows the hash, never the scope). For an in-process breaker this is
        /// [`new`](Self::new) (the state gauges follow every transition as it happens); for a
        /// shared one the state gauges show the state as of the last update, and there is no
        /// per-call histogram (its call durations are in its figures' `mean_duration`).
        ///
        /// ```
        /// use tripline::{Breaker, BreakerConfig, CircuitBreaker};
        /// use tripline::observe::BreakerMetrics;
        ///
        /// fn export<B: Breaker>(breaker: &B) -> BreakerMetrics {
        ///     let metrics = BreakerMetrics::for_breaker(breaker, Vec::new());
        ///     metrics.update_from(breaker); // on each scrape
        ///     metrics
        /// }
        /// let _ = export(&CircuitBreaker::new("catalog", BreakerConfig::default()));
        /// ```
        pub fn for_breaker<B: crate::Breaker>(breaker: &B, extra: Vec<Label>) -> Self {
            breaker.breaker_metrics(extra)
        }

        /// [`for_breaker`](Self::for_breaker) for a host that does not make its own handles:
        /// every series from its figures, the state as of the last update.
        pub(crate) fn from_figures<B: crate::Breaker>(breaker: &B, extra: Vec<Label>) -> Self {
            let mut labels = vec![Label::new("breaker", breaker.label().to_string())];
            labels.extend(extra);
            let m = Self::handles(&labels, StateGauges::new(&labels), false);
            m.state.show(breaker.state());
            m
        }

        /// [`for_breaker`](Self::for_breaker) with the labels a registry gives its keys:
        /// `dependency`, and `scope_kind` and `scope` for a scoped key (a keyed holder of
        /// fleet-wide breakers, `tripline_redis::SharedRegistry`, exports its keys so).
        pub fn for_keyed_breaker<B: crate::Breaker>(
            breaker: &B,
            key: &crate::registry::Key,
        ) -> Self {
            Self::for_breaker(breaker, key_labels(key))
        }

        /// Publishes the current figures of any host of the [`Breaker`](crate::Breaker)
        /// interface (see [`for_breaker`](Self::for_breaker)).
        pub fn update_from<B: crate::Breaker>(&self, breaker: &B) {
            self.publish(&breaker.metrics());
        }

        /// Publishes the breaker's current figures.
        pub fn update<C: Clock>(&self, breaker: &CircuitBreaker<C>) {
            self.publish(&breaker.metrics());
        }

        /// Publishes a snapshot's figures.
        fn publish(&self, m: &crate::Metrics) {
            let r = m.rejections;
            let mut now = [0u64; COUNTERS];
            now[..3].copy_from_slice(&[m.successful_calls, m.failed_calls, m.ignored_calls]);
            now[3..5].copy_from_slice(&[m.slow_successful_calls, m.slow_failed_calls]);
            for (slot, (_, n)) in now[5..12].iter_mut().zip(m.failures_by_kind.iter()) {
                *slot = n;
            }
            now[12] = m.lumped_failures;
            now[13..16].copy_from_slice(&[r.open, r.half_open, r.forced_open]);
            now[16..].copy_from_slice(&[m.stale_results, m.abandoned_permits, m.transitions]);
            let counters = self
                .calls
                .iter()
                .chain(&self.slow)
                .chain(&self.kinds)
                .chain([&self.lumped])
                .chain(&self.rejected)
                .chain([&self.stale, &self.abandoned, &self.transitions]);
            // The increments are worked out under the lock and handed to the recorder after it
            // (increments commute, so two updates racing add up either way).
            let mut increments = [0u64; COUNTERS];
            {
                let mut published = self
                    .published
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                for ((inc, before), v) in increments.iter_mut().zip(published.iter_mut()).zip(now) {
                    // Totals only grow; one that went back (a reset of the counts) adds nothing.
                    *inc = v.saturating_sub(*before);
                    *before = v;
                }
            }
            for (c, inc) in counters.zip(increments) {
                c.increment(inc);
            }
            if !self.state_attached {
                self.state.show(m.state);
            }
            let ratio = |r: Option<f64>| r.map_or(f64::NAN, |p| p / 100.0);
            self.failure_rate.set(ratio(m.failure_rate));
            self.slow_rate.set(ratio(m.slow_call_rate));
            self.window_calls.set(m.window.calls as f64);
            let secs = |d: Option<std::time::Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
            self.window_duration.set(secs(m.total_duration));
            self.mean_duration.set(secs(m.mean_duration));
            let p = m.probes;
            for (g, v) in self
                .probes
                .iter()
                .zip([p.admitted, p.in_flight, p.succeeded, p.failed])
            {
                g.set(f64::from(v));
            }
            self.consecutive[0].set(m.consecutive_successes as f64);
            self.consecutive[1].set(m.consecutive_failures as f64);
            self.open_seconds.set(m.time_open.as_secs_f64());
        }

        /// The breaker is gone (a registry evicted its key): its state gauges read 0, so a sum
        /// over keys counts only live breakers until the exporter drops the idle series.
        pub(crate) fn retire(&self) {
            self.state.clear();
        }
    }

    /// Records each outcome's duration in `tripline_breaker_call_duration_seconds{outcome}`.
    struct DurationHistogram([metrics::Histogram; 3]);

    impl crate::Listener for DurationHistogram {
        fn on_event(&self, e: &crate::Event) {
            if let crate::EventKind::CallOutcome {
                outcome, duration, ..
            } = e.kind
            {
                let i = match outcome {
                    crate::Outcome::Success => 0,
                    crate::Outcome::Failure => 1,
                    crate::Outcome::Ignored => 2,
                };
                self.0[i].record(duration.as_secs_f64());
            }
        }

        fn wants_outcome_events(&self) -> bool {
            true
        }
    }

    /// Gives every series of [`BreakerMetrics`] and of a registry's summary its unit and its
    /// `# HELP` text, in the recorder installed now (call it once, after installing it; a
    /// recorder keeps the first description of each name).
    ///
    /// ```
    /// let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    /// let handle = recorder.handle();
    /// metrics::with_local_recorder(&recorder, || {
    ///     tripline::observe::describe_metrics();
    ///     metrics::counter!("tripline_breaker_transitions_total").increment(1);
    /// });
    /// assert!(handle.render().contains("# HELP tripline_breaker_transitions_total "));
    /// ```
    pub fn describe_metrics() {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        for (name, help) in [
            (
                "tripline_breaker_calls_total",
                "Calls whose result the breaker recorded, by outcome (success, failure, ignored).",
            ),
            (
                "tripline_breaker_slow_calls_total",
                "Recorded calls slower than the slow-call duration, by outcome.",
            ),
            (
                "tripline_breaker_failures_by_kind_total",
                "Failures by the kind their classifier gave.",
            ),
            (
                "tripline_breaker_lumped_failures_total",
                "Failures lumped into an earlier one (lumping_interval).",
            ),
            (
                "tripline_breaker_rejected_calls_total",
                "Calls the breaker refused, by the state that refused them.",
            ),
            (
                "tripline_breaker_stale_results_total",
                "Results discarded because an older generation admitted them.",
            ),
            (
                "tripline_breaker_abandoned_permits_total",
                "Permits dropped without a result (cancelled or panicked calls).",
            ),
            ("tripline_breaker_transitions_total", "State changes."),
            (
                "tripline_directed_blames_refused_total",
                "Server-directed blames not followed to a scope's breaker (the result went \
                 dependency-wide), by reason (invalid_scope, too_many_scopes, registry_full).",
            ),
        ] {
            describe_counter!(name, Unit::Count, help);
        }
        for (name, unit, help) in [
            (
                "tripline_breaker_state",
                Unit::Count,
                "1 for the breaker's current state, 0 for the others (all 0 once evicted).",
            ),
            (
                "tripline_breaker_failure_rate",
                Unit::Count,
                "Failed share of the window, 0 to 1; NaN below the minimum calls.",
            ),
            (
                "tripline_breaker_slow_call_rate",
                Unit::Count,
                "Slow share of the window, 0 to 1; NaN below the minimum calls.",
            ),
            (
                "tripline_breaker_window_calls",
                Unit::Count,
                "Calls in the window.",
            ),
            (
                "tripline_breaker_window_call_duration_seconds",
                Unit::Seconds,
                "Total duration of the window's calls; NaN unless call_durations.",
            ),
            (
                "tripline_breaker_window_mean_call_duration_seconds",
                Unit::Seconds,
                "Mean duration of the window's calls; NaN unless call_durations.",
            ),
            (
                "tripline_breaker_probes",
                Unit::Count,
                "The half-open round: probes admitted, in flight, succeeded, failed.",
            ),
            (
                "tripline_breaker_consecutive_calls",
                Unit::Count,
                "The current run of consecutive successes or failures.",
            ),
            (
                "tripline_breaker_open_duration_seconds",
                Unit::Seconds,
                "Cumulative time spent Open or ForcedOpen.",
            ),
            (
                "tripline_registry_breakers",
                Unit::Count,
                "A registry's breakers of each dependency, by state.",
            ),
        ] {
            describe_gauge!(name, unit, help);
        }
        describe_histogram!(
            "tripline_breaker_call_duration_seconds",
            Unit::Seconds,
            "Duration of each recorded call, by outcome (with call_durations on)."
        );
    }

    impl BreakerMetrics {
        pub(crate) fn for_key<C: Clock>(
            breaker: &CircuitBreaker<C>,
            key: &crate::registry::Key,
        ) -> Self {
            Self::new(breaker, key_labels(key))
        }
    }

    /// The labels of a registry's key.
    fn key_labels(key: &crate::registry::Key) -> Vec<Label> {
        let mut extra = vec![Label::new("dependency", key.dependency().to_string())];
        if let Some((kind, v)) = key.scope() {
            extra.push(Label::new("scope_kind", kind.as_str()));
            extra.push(Label::new("scope", v.to_string()));
        }
        extra
    }

    /// A registry's summary series, one set per dependency (bounded by the dependencies, not
    /// the keys): `tripline_registry_breakers{dependency, state}`, how many of the
    /// dependency's breakers are in each state.
    #[derive(Debug, Default)]
    pub(crate) struct DependencyGauges(std::collections::BTreeMap<String, [Gauge; 6]>);

    impl DependencyGauges {
        /// The dependencies of `summary` that have no gauges yet (read under the registry's
        /// lock; their gauges are registered after it is released, since registering runs the
        /// recorder's code).
        pub(crate) fn missing(
            &self,
            summary: &std::collections::BTreeMap<String, crate::registry::DependencySummary>,
        ) -> Vec<String> {
            summary
                .keys()
                .filter(|d| !self.0.contains_key(*d))
                .cloned()
                .collect()
        }

        /// Registers `dependency`'s gauges with the recorder (with no lock held).
        pub(crate) fn register(dependency: String) -> (String, [Gauge; 6]) {
            let gauges = State::ALL.map(|st| {
                metrics::gauge!(
                    "tripline_registry_breakers",
                    vec![
                        Label::new("dependency", dependency.clone()),
                        Label::new("state", st.as_str()),
                    ]
                )
            });
            (dependency, gauges)
        }

        /// The gauges to set for `summary` and their values (a dependency that has no breaker
        /// left reads 0 everywhere): worked out under the registry's lock, set after it.
        /// `made` are the gauges registered since [`missing`](Self::missing) (a racing export
        /// may have kept its own).
        pub(crate) fn plan(
            &mut self,
            summary: &std::collections::BTreeMap<String, crate::registry::DependencySummary>,
            made: Vec<(String, [Gauge; 6])>,
        ) -> Vec<(Gauge, f64)> {
            for (dep, gauges) in made {
                self.0.entry(dep).or_insert(gauges);
            }
            let mut sets = Vec::new();
            for (dep, s) in summary {
                // Registered above or by an earlier export.
                let Some(gauges) = self.0.get(dep) else {
                    continue;
                };
                for (g, st) in gauges.iter().zip(State::ALL) {
                    sets.push((g.clone(), s.in_state(st) as f64));
                }
            }
            for (dep, gauges) in &self.0 {
                if !summary.contains_key(dep) {
                    for g in gauges {
                        sets.push((g.clone(), 0.0));
                    }
                }
            }
            sets
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
