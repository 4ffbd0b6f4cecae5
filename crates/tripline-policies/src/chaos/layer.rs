//! The injector's layer.

use tower_layer::Layer;

use super::{AllRequests, Chaos, ChaosService};

/// Injects faults from a [`Chaos`] into a service's requests: all of them, or those a
/// predicate selects ([`when`](Self::when)). Put it innermost, where the dependency is, so
/// that the timeout, the breaker and the retry outside it see the faults as the dependency's.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use tower::{Layer, ServiceExt, service_fn};
/// use tripline_policies::chaos::{Chaos, ChaosConfig, ChaosLayer, InjectedFault};
///
/// let chaos = Chaos::new(ChaosConfig::builder().error(1.0).enabled(true).build()?);
/// // Only the requests for tenant 7 take faults.
/// let svc = ChaosLayer::new(chaos.clone())
///     .when(|tenant: &u32| *tenant == 7)
///     .layer(service_fn(|tenant: u32| async move { Ok::<_, std::io::Error>(tenant) }));
/// assert_eq!(svc.clone().oneshot(3).await?, 3);
/// let err = svc.oneshot(7).await.unwrap_err();
/// assert!(err.downcast_ref::<InjectedFault>().is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ChaosLayer<W = AllRequests> {
    chaos: Chaos,
    targets: W,
}

impl ChaosLayer {
    /// A layer injecting from `chaos` into every request.
    pub const fn new(chaos: Chaos) -> Self {
        Self {
            chaos,
            targets: AllRequests,
        }
    }
}

impl<W> ChaosLayer<W> {
    /// The same layer, injecting only into the requests `targets` selects (a closure
    /// `Fn(&Req) -> bool`).
    pub fn when<W2>(self, targets: W2) -> ChaosLayer<W2> {
        ChaosLayer {
            chaos: self.chaos,
            targets,
        }
    }
}

impl<S, W: Clone> Layer<S> for ChaosLayer<W> {
    type Service = ChaosService<S, W>;

    fn layer(&self, inner: S) -> Self::Service {
        ChaosService::new(inner, self.chaos.clone(), self.targets.clone())
    }
}
