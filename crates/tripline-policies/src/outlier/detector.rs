//! The detector: the host set, per-host counters, ejections, sweeps and the balancer.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use rand::{Rng, RngCore, SeedableRng};
use rand_pcg::Pcg64Mcg;
use tripline::{Clock, ConfigError, MonotonicClock};

use super::config::OutlierConfig;
use super::rules;
use crate::delivery::Delivery;
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Mutex, MutexGuard, lock};

/// What a host key must be: cloneable, hashable, printable (errors name the host), shareable.
/// `String`, `&'static str`, `SocketAddr`, `u32` and `Arc<str>` all are.
///
/// The key's `Clone`, `Hash` and `Eq` run under the detector's lock (the lock's contract is in
/// the [module docs](super#locks-and-callbacks)): they must not call the detector.
pub trait HostKey: Clone + Eq + Hash + fmt::Debug + Send + Sync + 'static {}
impl<T: Clone + Eq + Hash + fmt::Debug + Send + Sync + 'static> HostKey for T {}

/// What one call to a host came to, in Envoy's terms.
///
/// | outcome | split off (default) | split on |
/// |---|---|---|
/// | `Success` | a 200 | a 200, and a local-origin success |
/// | `Status(code)` | the code: 5xx count for `consecutive_5xx`, 502/503/504 also for `consecutive_gateway_failure`, anything else is a success | the same, and a local-origin success |
/// | `Failure` | a 500 | a 503 |
/// | `Timeout` | a 504 | a local-origin failure |
/// | `ConnectFailed` | a 503 | a local-origin failure |
///
/// A call that never reached the host (refused by a local policy, cancelled) is not an
/// outcome: drop its [`Pick`] instead, and nothing is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostOutcome {
    /// The host answered well (any response that is not a 5xx).
    Success,
    /// The host answered with this HTTP status code.
    Status(u16),
    /// The host failed the transaction (a protocol-level error that is not an HTTP status).
    Failure,
    /// The call timed out (a local-origin failure).
    Timeout,
    /// The connection could not be made, or was reset (a local-origin failure).
    ConnectFailed,
}

/// Which rule found an outlier: Envoy's `OutlierEjectionType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EjectionType {
    /// `consecutive_5xx` failures in a row.
    Consecutive5xx,
    /// `consecutive_gateway_failure` gateway failures (502, 503, 504) in a row.
    ConsecutiveGatewayFailure,
    /// `consecutive_local_origin_failure` local-origin failures in a row (split mode).
    ConsecutiveLocalOriginFailure,
    /// A success rate below the hosts' mean minus the stdev factor.
    SuccessRate,
    /// The same over local-origin results (split mode).
    LocalOriginSuccessRate,
    /// A failure percentage at or above `failure_percentage_threshold`.
    FailurePercentage,
    /// The same over local-origin results (split mode).
    LocalOriginFailurePercentage,
}

impl EjectionType {
    /// Every type, in the order of [`OutlierStats`]' arrays.
    pub const ALL: [EjectionType; 7] = [
        EjectionType::Consecutive5xx,
        EjectionType::ConsecutiveGatewayFailure,
        EjectionType::ConsecutiveLocalOriginFailure,
        EjectionType::SuccessRate,
        EjectionType::LocalOriginSuccessRate,
        EjectionType::FailurePercentage,
        EjectionType::LocalOriginFailurePercentage,
    ];

    /// The suffix of Envoy's statistics for this type (`ejections_enforced_` + it).
    ///
    /// ```
    /// use tripline_policies::outlier::EjectionType;
    /// assert_eq!(EjectionType::Consecutive5xx.as_str(), "consecutive_5xx");
    /// assert_eq!(EjectionType::LocalOriginFailurePercentage.as_str(), "local_origin_failure_percentage");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            EjectionType::Consecutive5xx => "consecutive_5xx",
            EjectionType::ConsecutiveGatewayFailure => "consecutive_gateway_failure",
            EjectionType::ConsecutiveLocalOriginFailure => "consecutive_local_origin_failure",
            EjectionType::SuccessRate => "success_rate",
            EjectionType::LocalOriginSuccessRate => "local_origin_success_rate",
            EjectionType::FailurePercentage => "failure_percentage",
            EjectionType::LocalOriginFailurePercentage => "local_origin_failure_percentage",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for EjectionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the balancer picks among the selectable hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Balance {
    /// Each selectable host in turn.
    #[default]
    RoundRobin,
    /// Two selectable hosts drawn at random; the one with fewer calls in flight (Envoy's
    /// `LEAST_REQUEST` with two choices, tower's p2c over pending requests).
    PowerOfTwoChoices,
}

/// The detector's counters, named as Envoy's `outlier_detection.*` statistics, and the
/// balancer's state. Arrays are indexed by [`EjectionType::ALL`]'s order; see
/// [`enforced`](Self::enforced) and [`detected`](Self::detected).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutlierStats {
    /// Hosts ejected now (`ejections_active`).
    pub ejections_active: u32,
    /// Ejections refused by `max_ejection_percent` (`ejections_overflow`).
    pub ejections_overflow: u64,
    /// Ejections carried out, all types (`ejections_enforced_total`).
    pub ejections_enforced_total: u64,
    /// Ejections carried out, by type (`ejections_enforced_<type>`).
    pub ejections_enforced: [u64; 7],
    /// Outliers found, by type, whether ejected or not (`ejections_detected_<type>`).
    pub ejections_detected: [u64; 7],
    /// Picks made while in panic (Envoy's `lb_healthy_panic`).
    pub lb_healthy_panic: u64,
    /// Listener calls that panicked (each is caught; the other listeners still get the event).
    pub listener_panics: u64,
    /// Whether the balancer is in panic now: it picks among every host.
    pub panic: bool,
    /// Hosts in the set.
    pub hosts: u32,
    /// Hosts not ejected.
    pub hosts_healthy: u32,
}

impl OutlierStats {
    /// `ejections_enforced_<type>`.
    pub fn enforced(&self, t: EjectionType) -> u64 {
        self.ejections_enforced[t.index()]
    }

    /// `ejections_detected_<type>`.
    pub fn detected(&self, t: EjectionType) -> u64 {
        self.ejections_detected[t.index()]
    }
}

/// What happened, for listeners ([`OutlierDetector::subscribe`]).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum OutlierEventKind {
    /// The host was ejected, for `duration` (jitter included); `multiplier` is its ejection
    /// multiplier now.
    Ejected {
        /// The rule.
        ejection_type: EjectionType,
        /// How long it stays out (it returns at the first sweep after that).
        duration: Duration,
        /// Its multiplier after this ejection.
        multiplier: u32,
    },
    /// An outlier was found but its `enforcing_*` percentage said no.
    NotEnforced {
        /// The rule.
        ejection_type: EjectionType,
    },
    /// An outlier was found but `max_ejection_percent` (or the last-host rule) refused it.
    Overflow {
        /// The rule.
        ejection_type: EjectionType,
    },
    /// The host's ejection time is over: it is back in the balancer.
    Returned,
    /// The host set shrank ([`OutlierDetector::set_hosts`]) and this host's ejection was past
    /// what `max_ejection_percent` (or the last-host rule) allows of the new set: it is back
    /// before its time.
    ReturnedEarly,
    /// The balancer entered panic: too few healthy hosts, it picks among all of them.
    PanicStarted,
    /// The balancer left panic.
    PanicEnded,
    /// The host joined the set.
    HostAdded,
    /// The host left the set; its state is gone.
    HostRemoved,
}

/// An event of one detector.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct OutlierEvent<H> {
    /// The event's number in this detector (1, 2, ...), in the order the events happened.
    /// Listeners receive the events in this order, whatever thread caused them.
    pub seq: u64,
    /// Nanoseconds on the detector's clock.
    pub at: u64,
    /// The host concerned (`None` for panic events).
    pub host: Option<H>,
    /// What happened.
    pub kind: OutlierEventKind,
    /// Hosts ejected after the event.
    pub ejections_active: u32,
}

/// The hot state of one host: counters updated without a lock.
struct HostEntry<H> {
    key: H,
    /// Unique per entry: a host removed and added again is a new entry.
    id: u64,
    live: AtomicBool,
    in_flight: AtomicU32,
    consecutive_5xx: AtomicU32,
    consecutive_gateway: AtomicU32,
    consecutive_local: AtomicU32,
    /// The current interval's external-origin requests and failures.
    ext_total: AtomicU64,
    ext_failed: AtomicU64,
    /// The current interval's local-origin requests and failures (split mode).
    local_total: AtomicU64,
    local_failed: AtomicU64,
}

impl<H> HostEntry<H> {
    fn new(key: H, id: u64) -> Self {
        Self {
            key,
            id,
            live: AtomicBool::new(true),
            in_flight: AtomicU32::new(0),
            consecutive_5xx: AtomicU32::new(0),
            consecutive_gateway: AtomicU32::new(0),
            consecutive_local: AtomicU32::new(0),
            ext_total: AtomicU64::new(0),
            ext_failed: AtomicU64::new(0),
            local_total: AtomicU64::new(0),
            local_failed: AtomicU64::new(0),
        }
    }

    fn reset_consecutive(&self) {
        self.consecutive_5xx.store(0, Ordering::Relaxed);
        self.consecutive_gateway.store(0, Ordering::Relaxed);
        self.consecutive_local.store(0, Ordering::Relaxed);
    }

    /// Takes the interval's counts: `(ext_total, ext_failed, local_total, local_failed)`.
    /// Failures are clamped to totals: a result recorded while the counts are taken may land
    /// half in one interval and half in the next.
    fn take_interval(&self) -> (u64, u64, u64, u64) {
        let et = self.ext_total.swap(0, Ordering::AcqRel);
        let ef = self.ext_failed.swap(0, Ordering::AcqRel).min(et);
        let lt = self.local_total.swap(0, Ordering::AcqRel);
        let lf = self.local_failed.swap(0, Ordering::AcqRel).min(lt);
        (et, ef, lt, lf)
    }
}

/// What the balancer reads: the hosts and which of them may be picked. Replaced whole on
/// every change (an ejection, a return, a change of the set), read without a lock.
struct Snapshot<H> {
    hosts: Box<[Arc<HostEntry<H>>]>,
    index: HashMap<H, u32>,
    selectable: Box<[u32]>,
    panic: bool,
}

/// The ejection bookkeeping of one host (under the control lock), parallel to the snapshot's
/// hosts.
#[derive(Clone, Copy, Debug, Default)]
struct Ejection {
    /// When it was ejected, while it is.
    since: Option<u64>,
    /// How long this ejection lasts.
    duration: u64,
    /// Envoy's ejection-time backoff: grows on ejection, decays while healthy.
    multiplier: u32,
    /// When it last returned.
    returned: Option<u64>,
    /// The rate of its last complete interval, for [`OutlierDetector::host_status`].
    last_success_rate: Option<f64>,
}

/// Everything that changes at an ejection, a return, a sweep or a change of the set, under the
/// control lock. See the [module docs](super#locks-and-callbacks) for the lock's contract.
struct Control<H> {
    hosts: Vec<Arc<HostEntry<H>>>,
    ejections: Vec<Ejection>,
    active: u32,
    next_id: u64,
    /// When the next sweep is due: Envoy's timer, which fires every interval from the start.
    next_sweep: u64,
    /// The latest clock reading the detector acted on. Readings are taken before the lock, so
    /// a thread may bring an older one than another thread already used: it acts at this
    /// time instead, and the detector's time never goes back.
    now: u64,
    rng: Pcg64Mcg,
    stats: OutlierStats,
}

impl<H> Control<H> {
    /// The time to act at, given a reading taken before the lock.
    fn at(&mut self, reading: u64) -> u64 {
        self.now = self.now.max(reading);
        self.now
    }
}

struct Inner<H, C> {
    name: Arc<str>,
    config: OutlierConfig,
    balance: Balance,
    panic_ppm: u64,
    base: u64,
    max: u64,
    interval: u64,
    clock: C,
    snapshot: ArcSwap<Snapshot<H>>,
    control: Mutex<Control<H>>,
    next_sweep: AtomicU64,
    rr: AtomicU64,
    p2c: AtomicU64,
    panic_picks: AtomicU64,
    /// The events, queued under `control`, delivered after it is released.
    events: Delivery<OutlierEvent<H>>,
}

/// Per-host outlier detection with an ejection cap, and a balancer over its hosts. Cloning is
/// cheap; clones share everything. See the [module docs](super).
pub struct OutlierDetector<H: HostKey, C: Clock = MonotonicClock> {
    inner: Arc<Inner<H, C>>,
}

impl<H: HostKey, C: Clock> Clone for OutlierDetector<H, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<H: HostKey, C: Clock> fmt::Debug for OutlierDetector<H, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutlierDetector")
            .field("name", &self.inner.name)
            .field("balance", &self.inner.balance)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Builds an [`OutlierDetector`]: its name, clock, seed and balancing.
pub struct OutlierDetectorBuilder<C: Clock = MonotonicClock> {
    name: Arc<str>,
    config: OutlierConfig,
    clock: C,
    seed: Option<u64>,
    balance: Balance,
}

impl<C: Clock> fmt::Debug for OutlierDetectorBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutlierDetectorBuilder")
            .field("name", &self.name)
            .field("config", &self.config)
            .field("seed", &self.seed)
            .field("balance", &self.balance)
            .finish_non_exhaustive()
    }
}

impl<C: Clock> OutlierDetectorBuilder<C> {
    /// The detector's name (the upstream cluster it watches), in metrics and `Debug`.
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = name.into();
        self
    }

    /// The clock (a `ManualClock` in tests, virtual time in the simulator).
    pub fn clock<C2: Clock>(self, clock: C2) -> OutlierDetectorBuilder<C2> {
        OutlierDetectorBuilder {
            name: self.name,
            config: self.config,
            clock,
            seed: self.seed,
            balance: self.balance,
        }
    }

    /// Seeds the random draws (enforcement, ejection jitter, the power-of-two choices), for
    /// reproducible runs. Default: seeded by the OS.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// How [`OutlierDetector::pick`] balances. Default round robin.
    pub fn balance(mut self, balance: Balance) -> Self {
        self.balance = balance;
        self
    }

    /// The detector over `hosts`: at least one, at most `max_hosts`, no duplicates.
    ///
    /// ```
    /// use tripline_policies::outlier::{OutlierConfig, OutlierDetector};
    ///
    /// let err = OutlierDetector::builder(OutlierConfig::default())
    ///     .build(Vec::<String>::new())
    ///     .unwrap_err();
    /// assert_eq!(err.to_string(), "hosts must be at least one host, got none");
    /// let err = OutlierDetector::builder(OutlierConfig::default())
    ///     .build(["a", "b", "a"])
    ///     .unwrap_err();
    /// assert_eq!(err.to_string(), "hosts must be distinct hosts, got \"a\" twice");
    /// ```
    pub fn build<H: HostKey>(
        self,
        hosts: impl IntoIterator<Item = H>,
    ) -> Result<OutlierDetector<H, C>, ConfigError> {
        let config = self.config;
        let hosts = check_hosts(&config, hosts)?;
        let seed = self
            .seed
            .unwrap_or_else(|| Pcg64Mcg::from_os_rng().next_u64());
        let now = self.clock.now();
        let interval = nanos(config.interval);
        let entries: Vec<Arc<HostEntry<H>>> = hosts
            .into_iter()
            .enumerate()
            .map(|(i, h)| Arc::new(HostEntry::new(h, i as u64)))
            .collect();
        let n = entries.len();
        let panic_ppm = (config.healthy_panic_threshold * 10_000.0).round() as u64;
        let control = Control {
            ejections: vec![Ejection::default(); n],
            active: 0,
            next_id: n as u64,
            next_sweep: now.saturating_add(interval),
            now,
            rng: Pcg64Mcg::seed_from_u64(seed),
            stats: OutlierStats::default(),
            hosts: entries,
        };
        let snapshot = build_snapshot(&control, panic_ppm);
        let d = OutlierDetector {
            inner: Arc::new(Inner {
                name: self.name,
                config,
                balance: self.balance,
                panic_ppm,
                base: nanos(config.base_ejection_time),
                max: nanos(config.max_ejection_time()),
                interval,
                clock: self.clock,
                snapshot: ArcSwap::from_pointee(snapshot),
                control: Mutex::new(control),
                next_sweep: AtomicU64::new(now.saturating_add(interval)),
                rr: AtomicU64::new(0),
                p2c: AtomicU64::new(seed ^ 0x5DEE_CE66_D1CE_4E5B),
                panic_picks: AtomicU64::new(0),
                events: Delivery::new(),
            }),
        };
        Ok(d)
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn check_hosts<H: HostKey>(
    config: &OutlierConfig,
    hosts: impl IntoIterator<Item = H>,
) -> Result<Vec<H>, ConfigError> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for h in hosts {
        if out.len() as u64 >= u64::from(config.max_hosts) {
            return Err(ConfigError::new(
                "hosts",
                format!("more than {} hosts", config.max_hosts),
                format!("at most max_hosts = {} hosts", config.max_hosts),
            ));
        }
        if !seen.insert(h.clone()) {
            return Err(ConfigError::new(
                "hosts",
                format!("{h:?} twice"),
                "distinct hosts",
            ));
        }
        out.push(h);
    }
    if out.is_empty() {
        return Err(ConfigError::new("hosts", "none", "at least one host"));
    }
    Ok(out)
}

fn build_snapshot<H: HostKey>(c: &Control<H>, panic_ppm: u64) -> Snapshot<H> {
    let n = c.hosts.len() as u32;
    let healthy: Box<[u32]> = (0..n)
        .filter(|&i| c.ejections[i as usize].since.is_none())
        .collect();
    let panic = rules::in_panic(healthy.len() as u32, n, panic_ppm);
    Snapshot {
        index: c
            .hosts
            .iter()
            .enumerate()
            .map(|(i, e)| (e.key.clone(), i as u32))
            .collect(),
        hosts: c.hosts.clone().into_boxed_slice(),
        selectable: if panic { (0..n).collect() } else { healthy },
        panic,
    }
}

/// splitmix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A host picked by the balancer, counted as one call in flight on it until it is recorded
/// ([`OutlierDetector::record`]) or dropped (a call that never reached the host: nothing is
/// recorded).
#[must_use = "record the call's outcome with OutlierDetector::record, or drop the pick"]
pub struct Pick<H> {
    entry: Arc<HostEntry<H>>,
}

impl<H: fmt::Debug> fmt::Debug for Pick<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pick")
            .field("host", &self.entry.key)
            .finish_non_exhaustive()
    }
}

impl<H> Pick<H> {
    /// The host.
    pub fn host(&self) -> &H {
        &self.entry.key
    }
}

impl<H> Drop for Pick<H> {
    fn drop(&mut self) {
        self.entry.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One host's state, for operators ([`OutlierDetector::host_status`]).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct HostStatus {
    /// Whether it is ejected now.
    pub ejected: bool,
    /// When its current ejection ends (it returns at the first sweep after), in clock
    /// nanoseconds.
    pub ejected_until: Option<u64>,
    /// Its ejection multiplier.
    pub multiplier: u32,
    /// Calls picked and not yet recorded or dropped.
    pub in_flight: u32,
    /// 5xx in a row now.
    pub consecutive_5xx: u32,
    /// Its external-origin success rate over the last complete interval, in percent.
    pub success_rate: Option<f64>,
}

/// What a change of the host set did ([`OutlierDetector::set_hosts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostChange {
    /// Hosts that joined (fresh state).
    pub added: u32,
    /// Hosts that left (state dropped).
    pub removed: u32,
    /// Hosts kept with their state.
    pub kept: u32,
}

impl OutlierDetector<String> {
    /// A builder with `config`, on the production clock, round robin, seeded by the OS.
    pub fn builder(config: OutlierConfig) -> OutlierDetectorBuilder {
        OutlierDetectorBuilder {
            name: Arc::from("upstream"),
            config,
            clock: MonotonicClock::new(),
            seed: None,
            balance: Balance::RoundRobin,
        }
    }
}

impl<H: HostKey> OutlierDetector<H> {
    /// A detector over `hosts` with `config`, on the production clock, round robin.
    pub fn new(
        config: OutlierConfig,
        hosts: impl IntoIterator<Item = H>,
    ) -> Result<Self, ConfigError> {
        OutlierDetector::builder(config).build(hosts)
    }
}

impl<H: HostKey, C: Clock> OutlierDetector<H, C> {
    /// The settings.
    pub fn config(&self) -> &OutlierConfig {
        &self.inner.config
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The balancing policy of [`pick`](Self::pick).
    pub fn balance(&self) -> Balance {
        self.inner.balance
    }

    /// Picks a host with the detector's balancing policy. Never fails: at least one host is
    /// always selectable (the last host is never ejected, and in panic every host is).
    pub fn pick(&self) -> Pick<H> {
        match self.inner.balance {
            Balance::RoundRobin => self.pick_round_robin(),
            Balance::PowerOfTwoChoices => self.pick_p2c(),
        }
    }

    /// Picks the next selectable host in turn.
    pub fn pick_round_robin(&self) -> Pick<H> {
        self.maybe_sweep();
        let s = self.inner.snapshot.load();
        let n = s.selectable.len() as u64;
        let k = self.inner.rr.fetch_add(1, Ordering::Relaxed) % n.max(1);
        self.take(&s, s.selectable[k as usize])
    }

    /// Picks the less loaded (fewer calls in flight) of two selectable hosts drawn at random.
    pub fn pick_p2c(&self) -> Pick<H> {
        self.maybe_sweep();
        let s = self.inner.snapshot.load();
        let n = s.selectable.len() as u64;
        let r = mix(self
            .inner
            .p2c
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed));
        let i = if n < 2 {
            s.selectable[0]
        } else {
            let a = (r % n) as usize;
            let b = ((a as u64 + 1 + (r >> 32) % (n - 1)) % n) as usize;
            let (ha, hb) = (s.selectable[a], s.selectable[b]);
            let load = |h: u32| s.hosts[h as usize].in_flight.load(Ordering::Relaxed);
            if load(hb) < load(ha) { hb } else { ha }
        };
        self.take(&s, i)
    }

    /// A pick of `host`, chosen by another balancer (tower's, through
    /// [`OutlierDiscover`](super::OutlierDiscover)): counted in flight on it until recorded
    /// or dropped. `None` when `host` is not in the set.
    #[cfg_attr(
        not(feature = "tower"),
        expect(dead_code, reason = "used by the tower discovery")
    )]
    pub(crate) fn pick_host(&self, host: &H) -> Option<Pick<H>> {
        let s = self.inner.snapshot.load();
        let &i = s.index.get(host)?;
        let entry = s.hosts[i as usize].clone();
        entry.in_flight.fetch_add(1, Ordering::AcqRel);
        Some(Pick { entry })
    }

    fn take(&self, s: &Snapshot<H>, i: u32) -> Pick<H> {
        if s.panic {
            self.inner.panic_picks.fetch_add(1, Ordering::Relaxed);
        }
        let entry = s.hosts[i as usize].clone();
        entry.in_flight.fetch_add(1, Ordering::AcqRel);
        Pick { entry }
    }

    /// Records the outcome of a call to the picked host. The sweep that is due runs first (as
    /// before a pick), so a result is applied to the host set as it is now: a host whose
    /// ejection is over is back before its result counts. A consecutive-failure rule that
    /// reaches its threshold tries to eject the host at once (within the cap); the rate-based
    /// rules run at the sweeps. A pick of a host that has left the set records nothing.
    pub fn record(&self, pick: Pick<H>, outcome: HostOutcome) {
        self.maybe_sweep();
        self.put(&pick.entry, outcome);
        drop(pick);
    }

    /// Records the outcome of a call to `host` that was not picked here (another balancer
    /// chose it), after the sweep that is due, as [`record`](Self::record). Returns false,
    /// recording nothing, when `host` is not in the set.
    pub fn record_host(&self, host: &H, outcome: HostOutcome) -> bool {
        self.maybe_sweep();
        let entry = {
            let s = self.inner.snapshot.load();
            match s.index.get(host) {
                Some(&i) => s.hosts[i as usize].clone(),
                None => return false,
            }
        };
        self.put(&entry, outcome);
        true
    }

    fn put(&self, e: &Arc<HostEntry<H>>, outcome: HostOutcome) {
        if !e.live.load(Ordering::Acquire) {
            return;
        }
        let c = &self.inner.config;
        let split = c.split_external_local_origin_errors;
        let code = match (outcome, split) {
            (HostOutcome::Success, false) => 200,
            (HostOutcome::Status(code), false) => code,
            (HostOutcome::Failure, false) => 500,
            (HostOutcome::Timeout, false) => 504,
            (HostOutcome::ConnectFailed, false) => 503,
            (HostOutcome::Timeout | HostOutcome::ConnectFailed, true) => {
                e.local_total.fetch_add(1, Ordering::Relaxed);
                e.local_failed.fetch_add(1, Ordering::Relaxed);
                let n = e.consecutive_local.fetch_add(1, Ordering::AcqRel) + 1;
                if n == c.consecutive_local_origin_failure {
                    self.consecutive(e, EjectionType::ConsecutiveLocalOriginFailure);
                }
                return;
            }
            (HostOutcome::Failure, true) => 503,
            (HostOutcome::Success, true) | (HostOutcome::Status(_), true) => {
                e.local_total.fetch_add(1, Ordering::Relaxed);
                e.consecutive_local.store(0, Ordering::Relaxed);
                match outcome {
                    HostOutcome::Status(code) => code,
                    _ => 200,
                }
            }
        };
        // Envoy's putHttpResponseCode.
        if (500..600).contains(&code) {
            e.ext_failed.fetch_add(1, Ordering::Relaxed);
            e.ext_total.fetch_add(1, Ordering::Relaxed);
            if matches!(code, 502..=504) {
                let n = e.consecutive_gateway.fetch_add(1, Ordering::AcqRel) + 1;
                if n == c.consecutive_gateway_failure {
                    self.consecutive(e, EjectionType::ConsecutiveGatewayFailure);
                }
            } else {
                e.consecutive_gateway.store(0, Ordering::Relaxed);
            }
            let n = e.consecutive_5xx.fetch_add(1, Ordering::AcqRel) + 1;
            if n == c.consecutive_5xx {
                self.consecutive(e, EjectionType::Consecutive5xx);
            }
        } else {
            e.ext_total.fetch_add(1, Ordering::Relaxed);
            e.consecutive_5xx.store(0, Ordering::Relaxed);
            e.consecutive_gateway.store(0, Ordering::Relaxed);
        }
    }

    /// A consecutive rule reached its threshold on `e`.
    fn consecutive(&self, e: &Arc<HostEntry<H>>, t: EjectionType) {
        let now = self.inner.clock.now();
        let mut ctl = lock(&self.inner.control);
        let now = ctl.at(now);
        let Some(i) = position(&ctl, e) else {
            return;
        };
        if ctl.ejections[i].since.is_some() {
            return;
        }
        let changed = self.eject(&mut ctl, i, t, now);
        match t {
            EjectionType::Consecutive5xx => e.consecutive_5xx.store(0, Ordering::Relaxed),
            EjectionType::ConsecutiveGatewayFailure => {
                e.consecutive_gateway.store(0, Ordering::Relaxed)
            }
            _ => e.consecutive_local.store(0, Ordering::Relaxed),
        }
        if changed {
            self.publish(&mut ctl, now);
        }
        self.dispatch(ctl);
    }

    /// Envoy's ejectHost: the cap, then the enforcement draw, then the ejection. Returns
    /// whether the host was ejected.
    fn eject(&self, ctl: &mut Control<H>, i: usize, t: EjectionType, now: u64) -> bool {
        let c = &self.inner.config;
        ctl.stats.ejections_detected[t.index()] += 1;
        let n = ctl.hosts.len() as u32;
        let key = ctl.hosts[i].key.clone();
        if !rules::cap_allows(
            ctl.active,
            n,
            c.max_ejection_percent,
            c.always_eject_one_host,
        ) {
            ctl.stats.ejections_overflow += 1;
            self.event(
                ctl,
                now,
                Some(key),
                OutlierEventKind::Overflow { ejection_type: t },
            );
            return false;
        }
        let pct = match t {
            EjectionType::Consecutive5xx => c.enforcing_consecutive_5xx,
            EjectionType::ConsecutiveGatewayFailure => c.enforcing_consecutive_gateway_failure,
            EjectionType::ConsecutiveLocalOriginFailure => {
                c.enforcing_consecutive_local_origin_failure
            }
            EjectionType::SuccessRate => c.enforcing_success_rate,
            EjectionType::LocalOriginSuccessRate => c.enforcing_local_origin_success_rate,
            EjectionType::FailurePercentage => c.enforcing_failure_percentage,
            EjectionType::LocalOriginFailurePercentage => {
                c.enforcing_failure_percentage_local_origin
            }
        };
        let enforce = match pct {
            0 => false,
            100.. => true,
            p => ctl.rng.random_range(0..100) < p,
        };
        if !enforce {
            self.event(
                ctl,
                now,
                Some(key),
                OutlierEventKind::NotEnforced { ejection_type: t },
            );
            return false;
        }
        let (base, max) = (self.inner.base, self.inner.max);
        let jitter_max = nanos(c.max_ejection_time_jitter);
        let jitter = if jitter_max == 0 {
            0
        } else {
            ctl.rng.random_range(0..=jitter_max)
        };
        let ej = &mut ctl.ejections[i];
        ej.multiplier = rules::next_multiplier(base, max, ej.multiplier);
        ej.duration = rules::ejection_nanos(base, max, ej.multiplier).saturating_add(jitter);
        ej.since = Some(now);
        let (duration, multiplier) = (ej.duration, ej.multiplier);
        ctl.active += 1;
        ctl.stats.ejections_enforced_total += 1;
        ctl.stats.ejections_enforced[t.index()] += 1;
        self.event(
            ctl,
            now,
            Some(key),
            OutlierEventKind::Ejected {
                ejection_type: t,
                duration: Duration::from_nanos(duration),
                multiplier,
            },
        );
        true
    }

    /// Queues an event, under the control lock: sequence order is the order of the lock.
    fn event(&self, ctl: &mut Control<H>, at: u64, host: Option<H>, kind: OutlierEventKind) {
        let ejections_active = ctl.active;
        self.inner.events.queue(|seq| OutlierEvent {
            seq,
            at,
            host,
            kind,
            ejections_active,
        });
    }

    /// Publishes a new snapshot after a change, with panic events.
    fn publish(&self, ctl: &mut Control<H>, now: u64) {
        let was = self.inner.snapshot.load().panic;
        let snap = build_snapshot(ctl, self.inner.panic_ppm);
        let panic = snap.panic;
        self.inner.snapshot.store(Arc::new(snap));
        if panic != was {
            let kind = if panic {
                OutlierEventKind::PanicStarted
            } else {
                OutlierEventKind::PanicEnded
            };
            self.event(ctl, now, None, kind);
        }
    }

    /// Releases the control lock, then delivers the events queued under it (or leaves them to
    /// the delivery loop running already, on another thread or further up this one's stack).
    fn dispatch(&self, ctl: MutexGuard<'_, Control<H>>) {
        drop(ctl);
        self.inner.events.deliver();
    }

    fn maybe_sweep(&self) {
        let now = self.inner.clock.recent();
        if now < self.inner.next_sweep.load(Ordering::Acquire) {
            return;
        }
        // Read before the lock: a user clock may read the detector.
        let now = self.inner.clock.now();
        if let Ok(ctl) = self.inner.control.try_lock() {
            self.sweep_locked(ctl, now);
        }
    }

    /// Runs the sweep if one is due: returns, success-rate and failure-percentage checks, the
    /// decay of multipliers. Sweeps also run from [`pick`](Self::pick) and
    /// [`record`](Self::record) when due, so calling this is needed only when no calls come
    /// (to let ejected hosts return on time). Returns whether a sweep ran.
    ///
    /// The sweeps are Envoy's timer, run lazily: due every `interval` from the detector's
    /// start, whenever they actually run. A sweep that runs after several were due stands for
    /// all of them: a host whose ejection ended in the gap returns as of the first of them
    /// after its time, and the multipliers decay by one for each of them that found the host
    /// in and back for an interval, as Envoy's timer would have; the rate rules run once, over
    /// the calls since the last sweep.
    pub fn tick(&self) -> bool {
        // Read before the lock: a user clock may read the detector.
        let now = self.inner.clock.now();
        let ctl = lock(&self.inner.control);
        self.sweep_locked(ctl, now)
    }

    fn sweep_locked(&self, mut ctl: MutexGuard<'_, Control<H>>, now: u64) -> bool {
        let now = ctl.at(now);
        let due = ctl.next_sweep;
        if now < due {
            return false;
        }
        let interval = self.inner.interval;
        let ticks = rules::ticks_due(due, interval, now);
        let mut changed = false;
        // 1. The sweeps due before this one, and this one's returns: when each ejected host
        //    came back, and how far its multiplier decayed since.
        let mut decays_now = Vec::with_capacity(ctl.hosts.len());
        for i in 0..ctl.hosts.len() {
            let ej = ctl.ejections[i];
            let end = ej.since.map(|s| s.saturating_add(ej.duration));
            let c = rules::catch_up(end, ej.returned, due, interval, ticks, now);
            if let Some(back) = c.returns_at {
                changed = true;
                ctl.ejections[i].since = None;
                ctl.ejections[i].returned = Some(back);
                ctl.active -= 1;
                ctl.hosts[i].reset_consecutive();
                let key = ctl.hosts[i].key.clone();
                self.event(&mut ctl, now, Some(key), OutlierEventKind::Returned);
            }
            let m = &mut ctl.ejections[i].multiplier;
            *m = m.saturating_sub(u32::try_from(c.decays_before).unwrap_or(u32::MAX));
            decays_now.push(c.decays_now);
        }
        // 2. The interval's counts.
        let counts: Vec<(u64, u64, u64, u64)> =
            ctl.hosts.iter().map(|e| e.take_interval()).collect();
        for (i, &(t, f, _, _)) in counts.iter().enumerate() {
            ctl.ejections[i].last_success_rate = (t > 0).then(|| rules::success_rate(t, f));
        }
        // 3. The rate rules, external origin, then local origin in split mode.
        let ext: Vec<(u64, u64)> = counts.iter().map(|c| (c.0, c.1)).collect();
        changed |= self.rate_rules(&mut ctl, &ext, false, now);
        if self.inner.config.split_external_local_origin_errors {
            let local: Vec<(u64, u64)> = counts.iter().map(|c| (c.2, c.3)).collect();
            changed |= self.rate_rules(&mut ctl, &local, true, now);
        }
        // 4. Decay: a host that is in, and has been back for an interval, loses one step.
        for (ej, decays) in ctl.ejections.iter_mut().zip(decays_now) {
            if decays && ej.since.is_none() {
                ej.multiplier = ej.multiplier.saturating_sub(1);
            }
        }
        ctl.next_sweep = due.saturating_add(ticks.saturating_mul(interval));
        self.inner
            .next_sweep
            .store(ctl.next_sweep, Ordering::Release);
        if changed {
            self.publish(&mut ctl, now);
        }
        self.dispatch(ctl);
        true
    }

    /// Envoy's processSuccessRateEjections over one origin's `(total, failed)` per host.
    fn rate_rules(
        &self,
        ctl: &mut Control<H>,
        counts: &[(u64, u64)],
        local: bool,
        now: u64,
    ) -> bool {
        let c = &self.inner.config;
        let n = ctl.hosts.len() as u64;
        if n < u64::from(c.success_rate_minimum_hosts)
            && n < u64::from(c.failure_percentage_minimum_hosts)
        {
            return false;
        }
        let mut sr_hosts = Vec::new();
        let mut fp_hosts = Vec::new();
        for (i, &(total, failed)) in counts.iter().enumerate() {
            if ctl.ejections[i].since.is_some() || total == 0 {
                continue;
            }
            if total >= u64::from(c.success_rate_request_volume) {
                sr_hosts.push((i, rules::success_rate(total, failed)));
            }
            if total >= u64::from(c.failure_percentage_request_volume) {
                fp_hosts.push((i, total, failed));
            }
        }
        let mut changed = false;
        if !sr_hosts.is_empty() && sr_hosts.len() as u64 >= u64::from(c.success_rate_minimum_hosts)
        {
            let rates: Vec<f64> = sr_hosts.iter().map(|h| h.1).collect();
            let (_, threshold) = rules::success_rate_threshold(&rates, c.success_rate_stdev_factor);
            let t = if local {
                EjectionType::LocalOriginSuccessRate
            } else {
                EjectionType::SuccessRate
            };
            for &(i, rate) in &sr_hosts {
                if rate < threshold && ctl.ejections[i].since.is_none() {
                    changed |= self.eject(ctl, i, t, now);
                }
            }
        }
        if !fp_hosts.is_empty()
            && fp_hosts.len() as u64 >= u64::from(c.failure_percentage_minimum_hosts)
        {
            let t = if local {
                EjectionType::LocalOriginFailurePercentage
            } else {
                EjectionType::FailurePercentage
            };
            for &(i, total, failed) in &fp_hosts {
                if rules::failure_percentage_reached(total, failed, c.failure_percentage_threshold)
                    && ctl.ejections[i].since.is_none()
                {
                    changed |= self.eject(ctl, i, t, now);
                }
            }
        }
        changed
    }

    /// Replaces the host set. Hosts in both sets keep their state (counters, ejection,
    /// multiplier); hosts only in the new set start fresh; hosts only in the old set are
    /// dropped with their state (an ejected one no longer counts as ejected). A host that
    /// returns later starts fresh. If the kept ejections are more than `max_ejection_percent`
    /// of the new set allows (or would leave no host in), those past the cap return at once,
    /// the ones due back soonest first ([`OutlierEventKind::ReturnedEarly`]). The new set must hold
    /// at least one host, at most `max_hosts`, no duplicates; otherwise nothing changes.
    ///
    /// ```
    /// use tripline_policies::outlier::{OutlierConfig, OutlierDetector};
    ///
    /// let d = OutlierDetector::new(OutlierConfig::default(), ["a", "b", "c"])?;
    /// let change = d.set_hosts(["b", "c", "d"])?;
    /// assert_eq!((change.added, change.removed, change.kept), (1, 1, 2));
    /// assert_eq!(d.hosts(), ["b", "c", "d"]);
    /// assert!(d.set_hosts(Vec::<&str>::new()).is_err());
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn set_hosts(&self, hosts: impl IntoIterator<Item = H>) -> Result<HostChange, ConfigError> {
        let hosts = check_hosts(&self.inner.config, hosts)?;
        let now = self.inner.clock.now();
        let mut guard = lock(&self.inner.control);
        let now = guard.at(now);
        let ctl = &mut *guard;
        let mut old: HashMap<H, (Arc<HostEntry<H>>, Ejection)> = ctl
            .hosts
            .drain(..)
            .zip(ctl.ejections.drain(..))
            .map(|(e, j)| (e.key.clone(), (e, j)))
            .collect();
        let mut change = HostChange::default();
        let mut entries = Vec::with_capacity(hosts.len());
        let mut ejections = Vec::with_capacity(hosts.len());
        let mut added = Vec::new();
        for h in hosts {
            match old.remove(&h) {
                Some((e, j)) => {
                    change.kept += 1;
                    entries.push(e);
                    ejections.push(j);
                }
                None => {
                    change.added += 1;
                    let id = ctl.next_id;
                    ctl.next_id += 1;
                    added.push(h.clone());
                    entries.push(Arc::new(HostEntry::new(h, id)));
                    ejections.push(Ejection::default());
                }
            }
        }
        ctl.hosts = entries;
        ctl.ejections = ejections;
        ctl.active = ctl.ejections.iter().filter(|j| j.since.is_some()).count() as u32;
        self.return_over_cap(ctl, now);
        for h in added {
            self.event(ctl, now, Some(h), OutlierEventKind::HostAdded);
        }
        for (h, (e, _)) in old {
            change.removed += 1;
            e.live.store(false, Ordering::Release);
            self.event(ctl, now, Some(h), OutlierEventKind::HostRemoved);
        }
        self.publish(ctl, now);
        self.dispatch(guard);
        Ok(change)
    }

    /// A smaller host set can leave more ejected than `max_ejection_percent` (or the last-host
    /// rule) allows of it: those past the cap return now, the ones due back soonest first.
    fn return_over_cap(&self, ctl: &mut Control<H>, now: u64) {
        let c = &self.inner.config;
        let n = ctl.hosts.len() as u32;
        while ctl.active > 0
            && !rules::cap_allows(
                ctl.active - 1,
                n,
                c.max_ejection_percent,
                c.always_eject_one_host,
            )
        {
            let Some(i) = (0..ctl.ejections.len())
                .filter_map(|i| {
                    let j = &ctl.ejections[i];
                    j.since.map(|s| (s.saturating_add(j.duration), i))
                })
                .min()
                .map(|(_, i)| i)
            else {
                break;
            };
            ctl.ejections[i].since = None;
            ctl.ejections[i].returned = Some(now);
            ctl.active -= 1;
            ctl.hosts[i].reset_consecutive();
            let key = ctl.hosts[i].key.clone();
            self.event(ctl, now, Some(key), OutlierEventKind::ReturnedEarly);
        }
    }

    /// Adds one host (fresh state). Fails if it is already in the set or the set is full.
    pub fn add_host(&self, host: H) -> Result<(), ConfigError> {
        let mut hosts = self.hosts();
        hosts.push(host);
        self.set_hosts(hosts).map(|_| ())
    }

    /// Removes one host and its state. Returns false if it was not in the set; fails if it is
    /// the last host.
    pub fn remove_host(&self, host: &H) -> Result<bool, ConfigError> {
        let hosts = self.hosts();
        let before = hosts.len();
        let rest: Vec<H> = hosts.into_iter().filter(|h| h != host).collect();
        if rest.len() == before {
            return Ok(false);
        }
        if rest.is_empty() {
            return Err(ConfigError::new(
                "hosts",
                format!("removing {host:?}, the last host"),
                "at least one host",
            ));
        }
        self.set_hosts(rest).map(|_| true)
    }

    /// The hosts, in set order.
    pub fn hosts(&self) -> Vec<H> {
        self.inner
            .snapshot
            .load()
            .hosts
            .iter()
            .map(|e| e.key.clone())
            .collect()
    }

    /// The hosts the balancer picks from now: the healthy ones, or every host in panic.
    pub fn selectable(&self) -> Vec<H> {
        let s = self.inner.snapshot.load();
        s.selectable
            .iter()
            .map(|&i| s.hosts[i as usize].key.clone())
            .collect()
    }

    /// Whether the balancer is in panic now (picking among every host), without a lock.
    pub fn in_panic(&self) -> bool {
        self.inner.snapshot.load().panic
    }

    /// The hosts ejected now.
    pub fn ejected(&self) -> Vec<H> {
        let ctl = lock(&self.inner.control);
        ctl.hosts
            .iter()
            .zip(&ctl.ejections)
            .filter(|(_, j)| j.since.is_some())
            .map(|(e, _)| e.key.clone())
            .collect()
    }

    /// Whether `host` is ejected now (`None` if it is not in the set).
    pub fn is_ejected(&self, host: &H) -> Option<bool> {
        self.host_status(host).map(|s| s.ejected)
    }

    /// One host's state (`None` if it is not in the set).
    pub fn host_status(&self, host: &H) -> Option<HostStatus> {
        let ctl = lock(&self.inner.control);
        let i = ctl.hosts.iter().position(|e| &e.key == host)?;
        let (e, j) = (&ctl.hosts[i], ctl.ejections[i]);
        Some(HostStatus {
            ejected: j.since.is_some(),
            ejected_until: j.since.map(|s| s.saturating_add(j.duration)),
            multiplier: j.multiplier,
            in_flight: e.in_flight.load(Ordering::Relaxed),
            consecutive_5xx: e.consecutive_5xx.load(Ordering::Relaxed),
            success_rate: j.last_success_rate,
        })
    }

    /// The counters and the balancer's state.
    pub fn stats(&self) -> OutlierStats {
        let ctl = lock(&self.inner.control);
        let mut s = ctl.stats.clone();
        s.ejections_active = ctl.active;
        s.hosts = ctl.hosts.len() as u32;
        s.hosts_healthy = s.hosts - ctl.active;
        s.panic = self.inner.snapshot.load().panic;
        s.lb_healthy_panic = self.inner.panic_picks.load(Ordering::Relaxed);
        s.listener_panics = self.inner.events.panics();
        s
    }

    /// Hosts ejected now: from the snapshot, without the lock, except in panic.
    pub fn ejections_active(&self) -> u32 {
        let s = self.inner.snapshot.load();
        if s.panic {
            // In panic the selectable list is every host; count from the control state.
            drop(s);
            return lock(&self.inner.control).active;
        }
        (s.hosts.len() - s.selectable.len()) as u32
    }

    /// Calls `listener` with every event from now on (ejections, refusals, returns, panic,
    /// changes of the set), in sequence order. Listeners run after every lock of the detector
    /// is released, so a listener may call any method of the detector (record, change the
    /// set, subscribe): the events it causes are delivered after the one it was given, once
    /// every listener has seen that one, never inside it. Events are delivered by one loop at
    /// a time: on the thread that caused them, or, if another thread is delivering at that
    /// moment, on that thread, which delivers every queued event before it returns (so the
    /// call that caused an event may return before its listeners ran). A listener that panics
    /// is counted ([`OutlierStats::listener_panics`]) and the others still get the event.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use tripline_policies::outlier::{HostOutcome, OutlierConfig, OutlierDetector, OutlierEventKind};
    ///
    /// let config = OutlierConfig::builder().max_ejection_percent(50).build()?;
    /// let d = OutlierDetector::new(config, ["a", "b", "c"])?;
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let (s, d2) = (seen.clone(), d.clone());
    /// d.subscribe(move |e| {
    ///     s.lock().unwrap().push((e.seq, e.kind.clone()));
    ///     if let OutlierEventKind::Ejected { .. } = e.kind {
    ///         d2.remove_host(&"c").unwrap(); // calls back in: delivered next, in order
    ///     }
    /// });
    /// for _ in 0..5 {
    ///     d.record_host(&"a", HostOutcome::Status(500));
    /// }
    /// let seen = seen.lock().unwrap();
    /// assert!(matches!(seen[0], (1, OutlierEventKind::Ejected { .. })));
    /// assert_eq!(seen[1], (2, OutlierEventKind::HostRemoved));
    /// # Ok::<(), tripline::ConfigError>(())
    /// ```
    pub fn subscribe(&self, listener: impl Fn(&OutlierEvent<H>) + Send + Sync + 'static) {
        self.inner.events.subscribe(Arc::new(listener));
    }
}

fn position<H: HostKey>(ctl: &Control<H>, e: &Arc<HostEntry<H>>) -> Option<usize> {
    if !e.live.load(Ordering::Acquire) {
        return None;
    }
    ctl.hosts.iter().position(|x| x.id == e.id)
}
