//! The shedder's layer.

use tower_layer::Layer;

use super::{DefaultPriority, ShedService, Shedder};

/// Puts a [`Shedder`] in front of a service. Every service the layer wraps shares the
/// shedder's slots; each request's priority comes from `P` (by default
/// [`Priority::DEFAULT`](super::Priority::DEFAULT) for all).
///
/// ```
/// use tower::{Layer, ServiceExt, service_fn};
/// use tripline_policies::shed::{Priority, Refusal, Shed, ShedConfig, ShedLayer, Shedder};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let shedder = Shedder::new(ShedConfig::builder().capacity(2).build()?);
/// // Paths under /cards are sheddable, /log-set critical.
/// let svc = ShedLayer::new(shedder.clone())
///     .priority(|path: &&'static str| {
///         if path.starts_with("/cards") { Priority::SHEDDABLE } else { Priority::CRITICAL }
///     })
///     .layer(service_fn(|path: &'static str| async move { Ok::<_, std::io::Error>(path.len()) }));
///
/// let _busy = shedder.try_acquire(Priority::DEFAULT)?; // half the slots busy
/// let err = svc.clone().oneshot("/cards/17").await.unwrap_err();
/// assert_eq!(err.downcast_ref::<Shed>().unwrap().reason(), Refusal::Shed);
/// assert_eq!(svc.oneshot("/log-set").await?, 8);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ShedLayer<P = DefaultPriority> {
    shedder: Shedder,
    prioritize: P,
}

impl ShedLayer {
    /// A layer for `shedder`, every request at the default priority.
    pub const fn new(shedder: Shedder) -> Self {
        Self {
            shedder,
            prioritize: DefaultPriority,
        }
    }
}

impl<P> ShedLayer<P> {
    /// The same layer with each request's priority from `prioritize` (a closure
    /// `Fn(&Req) -> Priority`, or [`FromExtensions`](super::FromExtensions) with `http`).
    pub fn priority<P2>(self, prioritize: P2) -> ShedLayer<P2> {
        ShedLayer {
            shedder: self.shedder,
            prioritize,
        }
    }
}

impl<S, P: Clone> Layer<S> for ShedLayer<P> {
    type Service = ShedService<S, P>;

    fn layer(&self, inner: S) -> Self::Service {
        ShedService::new(inner, self.shedder.clone(), self.prioritize.clone())
    }
}
