//! The retry layer.

use tower_layer::Layer;

use super::{CloneAll, Retry, RetryOnError, RetryPolicy};

/// Retries a service's failed calls with a [`RetryPolicy`]. Every service the layer wraps
/// shares the policy (its budget, random generator and counters).
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU32, Ordering};
/// use tower::{Layer, ServiceExt, service_fn};
/// use tripline_policies::retry::{RetryLayer, RetryPolicy};
///
/// let calls = Arc::new(AtomicU32::new(0));
/// let flaky = service_fn({
///     let calls = calls.clone();
///     move |x: u32| {
///         let n = calls.fetch_add(1, Ordering::SeqCst);
///         async move { if n < 2 { Err("connection reset") } else { Ok(x) } }
///     }
/// });
/// let policy = RetryPolicy::builder().max_attempts(3).seed(1).build()?;
/// let svc = RetryLayer::new(policy.clone()).layer(flaky);
/// assert_eq!(svc.oneshot(5).await?, 5);
/// assert_eq!(calls.load(Ordering::SeqCst), 3);
/// assert_eq!(policy.stats().retries, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RetryLayer<P = RetryOnError, K = CloneAll> {
    policy: RetryPolicy<P>,
    cloner: K,
    gate: crate::RetryGate,
}

impl<P> RetryLayer<P> {
    /// A layer retrying with `policy`; requests must be `Clone`.
    pub const fn new(policy: RetryPolicy<P>) -> Self {
        Self {
            policy,
            cloner: CloneAll,
            gate: crate::NO_RETRY_GATE,
        }
    }
}

impl<P, K> RetryLayer<P, K> {
    /// The same layer, copying requests with `cloner` (see
    /// [`CloneRequest`](super::CloneRequest)).
    pub fn clone_requests_with<K2>(self, cloner: K2) -> RetryLayer<P, K2> {
        RetryLayer {
            policy: self.policy,
            cloner,
            gate: self.gate,
        }
    }

    /// The same layer, taking a retry slot from `gate` for each retry (held while the retry is
    /// in flight), as Envoy's router does: when the gate's retry limit is reached, the retry is
    /// not made, the last result is returned and `upstream_rq_retry_overflow` counts it.
    #[cfg(feature = "gate")]
    pub fn gate(mut self, gate: crate::gate::Gate) -> Self {
        self.gate = Some(gate);
        self
    }
}

impl<S, P: Clone, K: Clone> Layer<S> for RetryLayer<P, K> {
    type Service = Retry<S, P, K>;

    fn layer(&self, inner: S) -> Self::Service {
        Retry::new(
            inner,
            self.policy.clone(),
            self.cloner.clone(),
            self.gate.clone(),
        )
    }
}
