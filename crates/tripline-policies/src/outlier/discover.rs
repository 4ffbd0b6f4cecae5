//! Outlier ejection for `tower::balance`: a [`Discover`](tower::discover::Discover) that
//! follows another one and takes ejected hosts out of the balancer.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll, Waker};

use futures_core::Stream;
use tower::discover::{Change, Discover};
use tower_service::Service;
use tripline::{Clock, MonotonicClock};

use super::future::ResponseFuture;
use super::{HostClassifier, HostKey, OutlierDetector, ResultHostClassifier};
use crate::BoxError;

/// Wakes the discovery's task when the detector's selectable hosts change. Set by a detector
/// listener (which runs with no lock of the detector held); its own lock guards only the
/// waker, and the waker is woken after it is released.
#[derive(Default)]
struct Signal {
    changed: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    fn raise(&self) {
        self.changed.store(true, Ordering::Release);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn register(&self, cx: &Context<'_>) {
        let mut w = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
        if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            *w = Some(cx.waker().clone());
        }
    }
}

/// A [`Discover`](tower::discover::Discover) for `tower::balance` with outlier ejection: it
/// follows another discovery (`D`: the hosts and their services), keeps an
/// [`OutlierDetector`]'s host set equal to the discovered one, and offers the balancer only
/// the hosts the detector lets be picked: an ejected host is removed from the balancer, and
/// inserted again when it returns (or when the detector enters panic, which makes every host
/// selectable). Each service it offers records its calls' results on its host, classified by
/// `K` ([`ResultHostClassifier`] by default; a result it classifies as `None`, such as a
/// local refusal, records nothing).
///
/// The discovered services must be `Clone`: a clone is kept for each host so that a host can
/// be offered again after an ejection (tower's balancer drops the service of a host it is told
/// to remove). The detector always keeps at least one host: when discovery removes the last
/// one, the detector keeps it (it is not offered), until discovery inserts another. A host
/// set larger than the detector's `max_hosts` is an error of the stream.
///
/// tower's p2c balancer needs a load on each service: wrap this discovery in
/// `tower::load::PendingRequestsDiscover` (or another load).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use tower::balance::p2c::Balance;
/// use tower::discover::ServiceList;
/// use tower::load::{CompleteOnResponse, PendingRequestsDiscover};
/// use tower::{Service, ServiceExt, service_fn};
/// use tripline_policies::BoxError;
/// use tripline_policies::outlier::{OutlierConfig, OutlierDetector, OutlierDiscover};
///
/// // Ten replicas; replica 3 fails every call.
/// let replicas: Vec<_> = (0..10usize)
///     .map(|i| {
///         service_fn(move |req: u32| async move {
///             if i == 3 { Err::<u32, BoxError>("500".into()) } else { Ok(req) }
///         })
///     })
///     .collect();
/// let detector = OutlierDetector::new(OutlierConfig::default(), 0..10usize)?;
/// let discover = OutlierDiscover::new(ServiceList::new(replicas), detector.clone());
/// let mut balance = Balance::new(PendingRequestsDiscover::new(discover, CompleteOnResponse::default()));
/// for _ in 0..100 {
///     let _ = balance.ready().await?.call(1).await;
/// }
/// // Five failures in a row ejected replica 3: the balancer no longer sends it anything.
/// assert_eq!(detector.is_ejected(&3), Some(true));
/// assert_eq!(balance.len(), 9);
/// # Ok(())
/// # }
/// ```
pub struct OutlierDiscover<D, Key, Svc, C = MonotonicClock, K = ResultHostClassifier>
where
    Key: HostKey,
    C: Clock,
{
    inner: D,
    detector: OutlierDetector<Key, C>,
    classifier: K,
    /// Every discovered host's service, in discovery order.
    services: HashMap<Key, Svc>,
    order: Vec<Key>,
    /// The hosts offered to the balancer now.
    offered: HashSet<Key>,
    changes: VecDeque<Change<Key, OutlierEndpoint<Svc, Key, C, K>>>,
    signal: Arc<Signal>,
    inner_done: bool,
}

// Nothing is pinned structurally: the inner discovery is polled through `Pin::new`, which
// needs it `Unpin` (as tower's balancer needs the discovery it is given).
impl<D: Unpin, Key: HostKey, Svc, C: Clock, K> Unpin for OutlierDiscover<D, Key, Svc, C, K> {}

impl<D, Key: HostKey, Svc, C: Clock, K> fmt::Debug for OutlierDiscover<D, Key, Svc, C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutlierDiscover")
            .field("detector", &self.detector)
            .field("discovered", &self.order)
            .field("offered", &self.offered.len())
            .finish_non_exhaustive()
    }
}

impl<D, Key, Svc, C> OutlierDiscover<D, Key, Svc, C>
where
    D: Discover<Key = Key, Service = Svc>,
    Key: HostKey,
    C: Clock,
{
    /// Follows `inner`, with `detector` judging its hosts and results classified by
    /// [`ResultHostClassifier`]. The detector's hosts become the discovered ones at the first
    /// discovery (its state is kept for the hosts in both).
    pub fn new(inner: D, detector: OutlierDetector<Key, C>) -> Self {
        Self::with_classifier(inner, detector, ResultHostClassifier)
    }
}

impl<D, Key, Svc, C, K> OutlierDiscover<D, Key, Svc, C, K>
where
    D: Discover<Key = Key, Service = Svc>,
    Key: HostKey,
    C: Clock,
{
    /// Follows `inner`, results classified by `classifier` (an [`HttpHostClassifier`]
    /// for `http::Response`s, or a closure).
    ///
    /// [`HttpHostClassifier`]: super::HttpHostClassifier
    pub fn with_classifier(inner: D, detector: OutlierDetector<Key, C>, classifier: K) -> Self {
        let signal = Arc::new(Signal::default());
        let weak: Weak<Signal> = Arc::downgrade(&signal);
        detector.subscribe(move |_| {
            if let Some(s) = weak.upgrade() {
                s.raise();
            }
        });
        Self {
            inner,
            detector,
            classifier,
            services: HashMap::new(),
            order: Vec::new(),
            offered: HashSet::new(),
            changes: VecDeque::new(),
            signal,
            inner_done: false,
        }
    }

    /// The detector.
    pub fn detector(&self) -> &OutlierDetector<Key, C> {
        &self.detector
    }
}

impl<D, Key, Svc, C, K> OutlierDiscover<D, Key, Svc, C, K>
where
    Key: HostKey,
    Svc: Clone,
    C: Clock,
    K: Clone,
{
    /// Queues the changes that make the offered hosts the discovered ones the detector lets
    /// be picked now: removals first, then insertions, in discovery order.
    fn reconcile(&mut self) {
        let selectable: HashSet<Key> = self.detector.selectable().into_iter().collect();
        let target: Vec<&Key> = self
            .order
            .iter()
            .filter(|k| selectable.contains(*k))
            .collect();
        let keep: HashSet<&Key> = target.iter().copied().collect();
        let gone: Vec<Key> = self
            .offered
            .iter()
            .filter(|k| !keep.contains(k))
            .cloned()
            .collect();
        for k in gone {
            self.offered.remove(&k);
            self.changes.push_back(Change::Remove(k));
        }
        for k in target {
            if self.offered.insert(k.clone()) {
                let endpoint = OutlierEndpoint {
                    inner: self.services[k].clone(),
                    host: k.clone(),
                    detector: self.detector.clone(),
                    classifier: self.classifier.clone(),
                };
                self.changes.push_back(Change::Insert(k.clone(), endpoint));
            }
        }
    }
}

impl<D, Key, Svc, C, K> Stream for OutlierDiscover<D, Key, Svc, C, K>
where
    D: Discover<Key = Key, Service = Svc> + Unpin,
    D::Error: Into<BoxError>,
    Key: HostKey,
    Svc: Clone,
    C: Clock,
    K: Clone,
{
    type Item = Result<Change<Key, OutlierEndpoint<Svc, Key, C, K>>, BoxError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(change) = this.changes.pop_front() {
                return Poll::Ready(Some(Ok(change)));
            }
            // Registered before the checks below, so that a change after them wakes us.
            this.signal.register(cx);
            let mut discovered = false;
            while !this.inner_done {
                match Pin::new(&mut this.inner).poll_discover(cx) {
                    Poll::Ready(Some(Ok(Change::Insert(k, svc)))) => {
                        if this.services.insert(k.clone(), svc).is_none() {
                            this.order.push(k);
                        }
                        discovered = true;
                    }
                    Poll::Ready(Some(Ok(Change::Remove(k)))) => {
                        if this.services.remove(&k).is_some() {
                            this.order.retain(|x| x != &k);
                        }
                        discovered = true;
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
                    // The hosts are known for good; ejections and returns still change the
                    // offer, so this stream goes on.
                    Poll::Ready(None) => this.inner_done = true,
                    Poll::Pending => break,
                }
            }
            if discovered && !this.order.is_empty() {
                if let Err(e) = this.detector.set_hosts(this.order.iter().cloned()) {
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
            }
            let changed = this.signal.changed.swap(false, Ordering::AcqRel);
            if !(discovered || changed) {
                return Poll::Pending;
            }
            this.reconcile();
            if this.changes.is_empty() {
                return Poll::Pending;
            }
        }
    }
}

/// A discovered host's service, offered to the balancer by [`OutlierDiscover`]: each call is
/// counted in flight on its host and its result recorded on it (as
/// [`OutlierService`](super::OutlierService) does for the host it picks).
pub struct OutlierEndpoint<S, Key: HostKey, C: Clock = MonotonicClock, K = ResultHostClassifier> {
    inner: S,
    host: Key,
    detector: OutlierDetector<Key, C>,
    classifier: K,
}

impl<S, Key: HostKey, C: Clock, K> fmt::Debug for OutlierEndpoint<S, Key, C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutlierEndpoint")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl<S, Key: HostKey, C: Clock, K> OutlierEndpoint<S, Key, C, K> {
    /// The host.
    pub fn host(&self) -> &Key {
        &self.host
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, Key, C, K, Req> Service<Req> for OutlierEndpoint<S, Key, C, K>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    Key: HostKey,
    C: Clock,
    K: HostClassifier<S::Response> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, Key, C, K>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let pick = self.detector.pick_host(&self.host);
        ResponseFuture::with_pick(
            self.inner.call(req),
            pick,
            self.detector.clone(),
            self.classifier.clone(),
        )
    }
}
