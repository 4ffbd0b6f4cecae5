//! Per-host outlier detection with an ejection cap, and a balancer that skips ejected hosts.
//!
//! # The third "circuit breaker"
//!
//! "Circuit breaker" names three mechanisms. The crate's core is the library state machine,
//! one per dependency. [`gate`](crate::gate) is Envoy's `circuit_breakers`: concurrency
//! ceilings, no state. This module is the third, Envoy's *outlier detection*, which Envoy
//! itself calls passive health checking: it watches each **host** (pod, instance) of one
//! upstream, **ejects** a host that behaves unlike the others from the load-balancing set for a
//! while, and lets it back when the ejection time is over (the closest thing it has to
//! half-open). A per-dependency breaker would turn one bad pod out of ten into a verdict on
//! all ten; ejection removes just the bad one.
//!
//! # Why a cap, and why panic
//!
//! Ejection looks like free safety and behaves like a feedback loop. Each ejected host's
//! traffic goes to the survivors. If they had little headroom, they cross their own
//! saturation point, slow down, time out, fail, and are ejected in turn, and the traffic
//! concentrates on fewer and fewer hosts until the last ones fall over. Mercari described
//! exactly this ("When your circuit breaker backfires: outlier detection in Istio and
//! Envoy"): a bad deploy, ejections, survivors overloaded, the whole service down, and errors
//! in services that had nothing to do with the change. Every part did its job.
//!
//! Two settings break the loop, and both are on by default:
//!
//! * **`max_ejection_percent`** (10 %): never more than that share of the hosts is ejected at
//!   once; an ejection over the cap is refused and counted (`ejections_overflow`). Whatever
//!   the cap, the detector never ejects the last host in the set, so the balancer always has
//!   a host to pick (Envoy, with a cap of 100 %, can eject every host and then answers "no
//!   healthy upstream"; here at least one always stays in).
//! * **`healthy_panic_threshold`** (50 %, Envoy's load-balancer default): when fewer than
//!   that share of the hosts are healthy, the balancer stops trusting the verdicts and
//!   balances over **every** host, ejected or not (Envoy's panic mode, counted in
//!   `lb_healthy_panic`). Spreading the load over all hosts, some of them bad, beats
//!   concentrating it on a few good ones until they die.
//!
//! `tripline simulate mercari` replays the cascade with no cap and no panic, and with the
//! defaults (see the simulator's README for the figures).
//!
//! # The rules (Envoy's, with Envoy's defaults)
//!
//! Each call's outcome is a [`HostOutcome`]; see its table for how timeouts and connection
//! failures count.
//!
//! * **Consecutive 5xx** (5, enforced 100 %): that many 5xx in a row eject at once, inline.
//! * **Consecutive gateway failures** (502, 503, 504; 5, enforced 0 %).
//! * **Consecutive local-origin failures** (timeouts, connect failures; 5, enforced 100 %),
//!   only with `split_external_local_origin_errors`.
//! * **Success rate**, every `interval` (10 s): over the hosts with at least
//!   `success_rate_request_volume` (100) requests in the interval, if there are at least
//!   `success_rate_minimum_hosts` (5) of them, eject those below `mean − stdev ×
//!   success_rate_stdev_factor / 1000` (1900: 1.9 standard deviations). Enforced 100 %.
//! * **Failure percentage**, every `interval`: with at least
//!   `failure_percentage_minimum_hosts` (5) hosts of `failure_percentage_request_volume` (50)
//!   requests, eject those failing at least `failure_percentage_threshold` (85 %), compared in
//!   integers. Enforced 0 %.
//!
//! An outlier is ejected only if the cap allows it, then only with its `enforcing_*`
//! probability. An ejection lasts `base_ejection_time × multiplier` (30 s ×), capped at
//! `max_ejection_time` (300 s), plus up to `max_ejection_time_jitter`; the multiplier grows by
//! one per ejection and shrinks by one at each sweep (each `interval`) that finds a returned
//! host in and back for an interval, so a host that keeps failing stays out longer and longer,
//! and one that recovered earns its short ejections back. Ejected hosts return at the first
//! sweep after their time, as in Envoy.
//!
//! # Time and threads
//!
//! Time comes from an injected [`Clock`](tripline::Clock): a `ManualClock` in tests, virtual
//! time in the simulator. There is no background thread: the sweep runs from the first
//! [`pick`](OutlierDetector::pick), [`record`](OutlierDetector::record) or
//! [`record_host`](OutlierDetector::record_host) after it is due (before the pick is made or
//! the result applied), or from [`tick`](OutlierDetector::tick). The sweeps are Envoy's timer
//! run lazily: due every `interval` from the detector's start, and a sweep that runs after
//! several were due stands for all of them, so a quiet spell decays the multipliers by the
//! intervals that passed and a host whose time ended in it returns as of the sweep after its
//! time, exactly as Envoy's timer would have left them (`rules::catch_up`, checked against a
//! sweep-by-sweep replay). Picks and records take no lock and allocate nothing
//! (`tests/outlier.rs` counts): counters are atomics, and the balancer reads an immutable
//! snapshot of the selectable hosts that every ejection, return or change of the set
//! replaces. Only an outlier found, a due sweep or a change of the set takes a small lock.
//!
//! # Locks and callbacks
//!
//! No clock, listener or classifier runs under a lock of the detector, so each may call any
//! method of the detector: a listener may change the host set or record on another host, a
//! clock may read [`stats`](OutlierDetector::stats). The detector has two locks:
//!
//! * **The control lock** guards the host set, the ejection bookkeeping (when each host was
//!   ejected, for how long, its multiplier, when it came back), the sweep schedule, the
//!   enforcement and jitter draws and the counters of [`OutlierStats`]. Ejections, sweeps and
//!   changes of the set take it; picks and records do not (they read the snapshot and bump
//!   atomics). Never run under it: the clock (read before it is taken; a reading older than
//!   one already acted on is taken as that one, so the detector's time never goes back),
//!   listeners (events are queued under it and delivered after it is released) and the
//!   tower layer's classifier (run before the result is recorded). Only the host key's
//!   `Clone`, `Hash` and `Eq` run under it.
//! * **The delivery lock** guards the queue of events, the listener list and whether a
//!   delivery loop is running. It is taken under the control lock to queue an event (so that
//!   sequence order is the order things happened in) and alone to take the next event off
//!   the queue; never while a listener runs.
//!
//! Events are delivered by one loop at a time, in sequence order: every listener sees event
//! `n` before any listener sees event `n + 1`. A listener's own calls that cause events queue
//! them behind the one it was given, and the running loop delivers them once every listener
//! has seen that one. A listener that panics is counted in
//! [`listener_panics`](OutlierStats::listener_panics) and the others still get the event.
//! `src/model_tests.rs` checks these promises under randomized schedules (shuttle), with
//! listeners and clocks that call back in.
//!
//! # Hosts come and go
//!
//! [`set_hosts`](OutlierDetector::set_hosts) replaces the set (a deploy): kept hosts keep their
//! state, new ones start fresh, removed ones are dropped with their state, and a host that
//! comes back later starts fresh. The detector holds state for the current set only, at most
//! `max_hosts` (10 000), whatever the churn.
//!
//! ```
//! use std::time::Duration;
//! use tripline::ManualClock;
//! use tripline_policies::outlier::{HostOutcome, OutlierConfig, OutlierDetector};
//!
//! let clock = ManualClock::new();
//! let pods: Vec<String> = (0..10).map(|i| format!("10.0.0.{i}:8080")).collect();
//! let detector = OutlierDetector::builder(OutlierConfig::default())
//!     .name("catalog")
//!     .clock(clock.clone())
//!     .build(pods)?;
//!
//! // Pods 3 and 7 got a bad deploy: every call they serve fails with a 500.
//! for _ in 0..200 {
//!     let pick = detector.pick();
//!     let bad = matches!(pick.host().as_str(), "10.0.0.3:8080" | "10.0.0.7:8080");
//!     let outcome = if bad { HostOutcome::Status(500) } else { HostOutcome::Success };
//!     detector.record(pick, outcome);
//! }
//! // One of them is ejected; the cap (10 % of 10 pods) refused the other.
//! let stats = detector.stats();
//! assert_eq!(stats.ejections_active, 1);
//! assert!(stats.ejections_overflow > 0);
//! assert_eq!(detector.selectable().len(), 9);
//!
//! // 30 s later, at the next sweep, the ejected pod is back.
//! clock.advance(Duration::from_secs(30));
//! detector.tick();
//! assert_eq!(detector.stats().ejections_active, 0);
//! # Ok::<(), tripline::ConfigError>(())
//! ```
//!
//! # With tower, and with per-host breakers
//!
//! With the `tower` feature, [`OutlierLayer`] makes a service that picks a host for each
//! request, calls the inner service with `(host, request)`, and records the classified result
//! (a [`HostClassifier`]); a request whose future is dropped records nothing. To keep
//! `tower::balance` as the balancer, wrap its discovery in an [`OutlierDiscover`]: the
//! detector follows the discovered hosts, each service records its results on its host, and
//! an ejected host is taken out of the balancer until it returns. Per-host
//! breakers from a [`Registry`](tripline::registry::Registry) compose with it: the inner
//! service asks the picked host's breaker, and a breaker's rejection is a local refusal that
//! the default classifier does not count against the host (the breaker stops the calls; the
//! detector takes the host out of the balancer for everyone).

mod config;
mod detector;
#[cfg(feature = "tower")]
mod discover;
#[cfg(feature = "tower")]
pub mod future;
#[cfg(feature = "tower")]
mod layer;
#[cfg(feature = "metrics")]
mod metrics;
mod rules;
#[cfg(feature = "tower")]
mod service;

pub use config::{
    MAX_CONSECUTIVE, MAX_HOSTS, MAX_STDEV_FACTOR, MAX_TIME, OutlierConfig, OutlierConfigBuilder,
};
pub use detector::{
    Balance, EjectionType, HostChange, HostKey, HostOutcome, HostStatus, OutlierDetector,
    OutlierDetectorBuilder, OutlierEvent, OutlierEventKind, OutlierStats, Pick,
};
#[cfg(feature = "tower")]
pub use discover::{OutlierDiscover, OutlierEndpoint};
#[cfg(feature = "tower")]
pub use layer::OutlierLayer;
#[cfg(feature = "metrics")]
pub use metrics::OutlierMetrics;
#[cfg(all(feature = "tower", feature = "http"))]
pub use service::HttpHostClassifier;
#[cfg(feature = "tower")]
pub use service::{HostClassifier, OutlierService, ResultHostClassifier};
