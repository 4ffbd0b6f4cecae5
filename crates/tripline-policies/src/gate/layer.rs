//! The gate's layer.

use tower_layer::Layer;

use super::{Gate, GateService};

/// Puts a [`Gate`] in front of a service. Every service the layer wraps shares the gate.
///
/// ```
/// use tower::{Layer, ServiceExt, service_fn};
/// use tripline_policies::gate::{Gate, GateConfig, GateLayer, GateOverflow};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let gate = Gate::new(GateConfig::builder().max_requests(1).build()?);
/// let svc = GateLayer::new(gate.clone())
///     .layer(service_fn(|x: u32| async move { Ok::<_, std::io::Error>(x + 1) }));
/// assert_eq!(svc.clone().oneshot(1).await?, 2);
///
/// let _busy = gate.try_request()?;
/// let err = svc.oneshot(1).await.unwrap_err();
/// assert!(err.downcast_ref::<GateOverflow>().is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct GateLayer {
    gate: Gate,
}

impl GateLayer {
    /// A layer for `gate`.
    pub const fn new(gate: Gate) -> Self {
        Self { gate }
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GateService::new(inner, self.gate.clone())
    }
}
