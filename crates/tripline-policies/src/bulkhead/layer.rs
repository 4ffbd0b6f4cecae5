//! The bulkhead's layer.

use tower_layer::Layer;

use super::{Bulkhead, BulkheadService};

/// Puts a [`Bulkhead`] in front of a service. Every service the layer wraps shares the
/// bulkhead's slots.
///
/// ```
/// use tower::{Layer, ServiceExt, service_fn};
/// use tripline_policies::bulkhead::{Bulkhead, BulkheadConfig, BulkheadFull, BulkheadLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let bulkhead = Bulkhead::new(BulkheadConfig::builder().max_concurrent(1).build()?);
/// let svc = BulkheadLayer::new(bulkhead.clone())
///     .layer(service_fn(|x: u32| async move { Ok::<_, std::io::Error>(x * 2) }));
/// assert_eq!(svc.clone().oneshot(21).await?, 42);
///
/// let _busy = bulkhead.try_acquire()?;
/// let err = svc.oneshot(21).await.unwrap_err();
/// assert!(err.downcast_ref::<BulkheadFull>().is_some());
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct BulkheadLayer {
    bulkhead: Bulkhead,
}

impl BulkheadLayer {
    /// A layer for `bulkhead`.
    pub const fn new(bulkhead: Bulkhead) -> Self {
        Self { bulkhead }
    }
}

impl<S> Layer<S> for BulkheadLayer {
    type Service = BulkheadService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BulkheadService::new(inner, self.bulkhead.clone())
    }
}
