//! The shared breaker as a [`tripline::Breaker`]: what lets the policies, the metrics and the
//! operator's page hold it where they hold an in-process breaker.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tripline::{
    Breaker, BreakerConfig, BreakerPermit, Classification, Clock, KindCounts, Metrics,
    OperatorError, Reach, Recorded, Rejected, Rejections, State,
};

use super::{SharedBreaker, SharedPermit, SharedTransitionError, lock};

/// A boxed, sendable future: the shared breaker's futures wait on Redis, and a box per call is
/// nothing beside a round trip.
type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl From<SharedTransitionError> for OperatorError {
    fn from(e: SharedTransitionError) -> Self {
        match e {
            SharedTransitionError::Refused(e) => OperatorError::Refused(e),
            SharedTransitionError::Redis(e) => OperatorError::Unreachable(e.to_string()),
        }
    }
}

impl<C: Clock + Clone> BreakerPermit for SharedPermit<C> {
    type Record = Boxed<Recorded>;

    fn record_classified(self, classification: Classification) -> Self::Record {
        Box::pin(SharedPermit::record_classified(self, classification))
    }

    fn is_probe(&self) -> bool {
        SharedPermit::is_probe(self)
    }
}

/// The shared breaker through the one breaker interface. Admission and recording are the
/// inherent [`SharedBreaker::acquire`] and [`SharedPermit::record_classified`]: a round trip
/// to Redis where the view is not fresh, the local fallback where Redis is unreachable.
/// Operator moves are fleet-wide ([`SharedBreaker::transition_to`]); one that did not reach
/// Redis is [`OperatorError::Unreachable`].
///
/// [`Breaker::state`] is the fleet's state as this replica last saw it (the local shadow's
/// before the first answer from Redis); [`Breaker::metrics`] is this replica's view: the
/// fleet's state and epoch (as `generation`), and this replica's calls: the results it
/// recorded (successes, failures, ignored, slow, by kind), its refusals, stale results,
/// abandoned permits, lumped failures and call durations; the window, the runs of consecutive
/// outcomes, the probe round and the time in each state are its local shadow breaker's (this
/// replica's outcomes, following the fleet's transitions): the fleet's own window is one
/// round trip away ([`SharedBreaker::refresh`]).
///
/// ```no_run
/// use tripline::{Breaker, BreakerConfig, Reach};
/// use tripline_redis::{Backend, SharedBreaker, SharedConfig};
///
/// # fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let breaker = SharedBreaker::new(
///     "dep:catalog",
///     BreakerConfig::default(),
///     SharedConfig::default(),
///     Backend::single("redis://127.0.0.1:6379/")?,
/// )?;
/// assert_eq!(breaker.reach(), Reach::Fleet);
/// # Ok(())
/// # }
/// ```
impl<C: Clock + Clone> Breaker for SharedBreaker<C> {
    type Clock = C;
    type Permit = SharedPermit<C>;
    type Acquire = Boxed<Result<SharedPermit<C>, Rejected>>;
    type Operation = Boxed<Result<(), OperatorError>>;

    fn name(&self) -> &str {
        SharedBreaker::name(self)
    }

    fn label(&self) -> &str {
        SharedBreaker::label(self)
    }

    fn reach(&self) -> Reach {
        Reach::Fleet
    }

    fn config(&self) -> BreakerConfig {
        SharedBreaker::config(self).clone()
    }

    fn acquire(&self) -> Self::Acquire {
        let this = self.clone();
        Box::pin(async move { SharedBreaker::acquire(&this).await })
    }

    fn state(&self) -> State {
        self.last_known_state()
            .unwrap_or_else(|| self.inner.shadow.state())
    }

    fn metrics(&self) -> Metrics {
        let inner = &self.inner;
        let c = &inner.counters;
        let r = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let mut m = inner.shadow.metrics();
        {
            let v = lock(&inner.view);
            if v.valid {
                m.state = v.state;
                m.generation = v.epoch;
            }
        }
        let rejections = Rejections {
            open: r(&c.rejected_in[0]),
            half_open: r(&c.rejected_in[1]),
            forced_open: r(&c.rejected_in[2]),
            ramping_up: r(&c.rejected_in[3]),
        };
        m.successful_calls = r(&c.outcomes[0]);
        m.failed_calls = r(&c.outcomes[1]);
        m.ignored_calls = r(&c.outcomes[2]);
        m.slow_successful_calls = r(&c.slow_outcomes[0]);
        m.slow_failed_calls = r(&c.slow_outcomes[1]);
        m.slow_calls = m.slow_successful_calls + m.slow_failed_calls;
        m.failures_by_kind = KindCounts::from_counts(std::array::from_fn(|i| r(&c.kinds[i])));
        m.rejected_calls = rejections.total();
        m.rejections = rejections;
        m.stale_results = r(&c.stale_results);
        m.abandoned_permits = r(&c.abandoned);
        m.lumped_failures = r(&c.lumped);
        m.expired_probes = r(&c.expired_probes);
        if let Some(d) = &inner.durations {
            let d = d.metrics();
            m.total_duration = d.total_duration;
            m.mean_duration = d.mean_duration;
        }
        m
    }

    fn transition_to(&self, to: State) -> Self::Operation {
        let this = self.clone();
        Box::pin(async move {
            SharedBreaker::transition_to(&this, to)
                .await
                .map_err(OperatorError::from)
        })
    }

    fn same_breaker(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
