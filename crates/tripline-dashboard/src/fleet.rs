//! Breakers of any host registered by hand ([`DashboardBuilder::shared_breaker`]): above all
//! the fleet-wide `tripline_redis::SharedBreaker`, whose state and kill switch live in Redis.
//! The page shows each as a card of its own (its fleet state, this replica's figures), and its
//! controls go to the breaker itself: a force open is the breaker's own operator move, so on a
//! shared breaker it is thrown in Redis and every replica of the fleet refuses. Such a breaker
//! has no override layers of the dashboard's: the state the store holds is the operator's word,
//! so `clear` and `auto` close it, as `reset` does.
//!
//! [`DashboardBuilder::shared_breaker`]: crate::DashboardBuilder::shared_breaker

use std::future::Future;
use std::pin::Pin;

use tripline::registry::Key;
use tripline::{Breaker, BreakerConfig, Metrics, OperatorError, Reach, State};

/// A breaker of any host, behind one object-safe face.
pub(crate) trait Hosted: Send + Sync + 'static {
    fn metrics(&self) -> Metrics;
    fn state(&self) -> State;
    fn config(&self) -> BreakerConfig;
    fn reach(&self) -> Reach;
    fn transition_to(
        &self,
        to: State,
    ) -> Pin<Box<dyn Future<Output = Result<(), OperatorError>> + Send>>;
}

impl<B: Breaker> Hosted for B {
    fn metrics(&self) -> Metrics {
        Breaker::metrics(self)
    }

    fn state(&self) -> State {
        Breaker::state(self)
    }

    fn config(&self) -> BreakerConfig {
        Breaker::config(self)
    }

    fn reach(&self) -> Reach {
        Breaker::reach(self)
    }

    fn transition_to(
        &self,
        to: State,
    ) -> Pin<Box<dyn Future<Output = Result<(), OperatorError>> + Send>> {
        Box::pin(Breaker::transition_to(self, to))
    }
}

/// A breaker registered with [`DashboardBuilder::shared_breaker`](crate::DashboardBuilder::shared_breaker).
pub(crate) struct Fleet {
    pub(crate) key: Key,
    pub(crate) breaker: Box<dyn Hosted>,
}
