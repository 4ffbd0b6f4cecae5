//! The scenario model and its file format (TOML).
//!
//! A scenario describes a service (replicas, worker pools, endpoints), its callers (an
//! arrival process), one dependency (latency, errors, a fault schedule, optionally a capacity)
//! and the protections to compare (breakers, timeouts, retries, fallbacks). The crate README
//! documents every field with a full example; [`Scenario::from_toml`] reads one and checks
//! every value, and [`builtin`] returns the scenarios that ship with the crate.
//!
//! ```
//! use tripline_sim::Scenario;
//!
//! let s = Scenario::from_toml(r#"
//!     name = "tiny"
//!     duration = "10s"
//!     arrivals = { rate = 5.0 }
//!     [[endpoints]]
//!     name = "/card"
//!     uses_dependency = true
//!     [dependency]
//!     latency = "20ms"
//!     [[protection]]
//!     breaker = { consecutive_failures = 3 }
//! "#)?;
//! assert_eq!(s.endpoints.len(), 1);
//!
//! let err = Scenario::from_toml("duration = \"10s\"\nspeed = 3\n").unwrap_err();
//! assert!(err.to_string().contains("unknown field `speed`"));
//! # Ok::<(), tripline_sim::ScenarioError>(())
//! ```

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use tripline::BreakerConfig;

use crate::dist::{Dist, Rate, fmt_d};
pub use crate::protection::Client;
use crate::protection::{ClientSpec, Policies};

/// The most requests one run may simulate (rate × duration), so a typo cannot start a run
/// that never ends or exhausts memory. All runs of a scenario together may simulate at most
/// [`MAX_TOTAL_REQUESTS`].
pub const MAX_REQUESTS: f64 = 20_000_000.0;
/// The most requests all runs of a scenario may simulate together (they run in parallel).
pub const MAX_TOTAL_REQUESTS: f64 = 50_000_000.0;
/// The most requests one run may hold at once: replicas × (workers + queue_limit).
pub const MAX_HELD: u64 = 4_000_000;
/// The most window cells (count-window slots, or time-window buckets × stripes) all the
/// breakers of one run may hold together.
pub const MAX_WINDOW_CELLS: u64 = 20_000_000;
/// The most breakers one run may hold (replicas × shards for per-shard local breakers).
pub const MAX_BREAKERS: u64 = 100_000;
/// The most views of shared breakers one run may hold: replicas × shared breakers, for a
/// protection with a `view_ttl` (each replica remembers what the store last told it about
/// each breaker). Without a `view_ttl` no view is kept.
pub const MAX_VIEWS: u64 = 4_000_000;
/// The longest a run may last in virtual time, arrivals and drain together, as bounded by
/// [`Scenario::longest_run`]: the one-second series and the latencies are kept for that long.
pub const MAX_RUN: Duration = Duration::from_secs(14 * 24 * 3600);
/// The most endpoints a scenario may list.
pub const MAX_ENDPOINTS: usize = 64;
const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

/// A complete scenario.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// A short name (the file stem when read from a file without one).
    #[serde(default)]
    pub name: String,
    /// One line saying what the scenario shows.
    #[serde(default)]
    pub description: String,
    /// The default random seed (`--seed` overrides it).
    #[serde(default)]
    pub seed: u64,
    /// How long requests arrive. The run then drains: requests in flight are answered.
    #[serde(with = "tripline::duration::serde")]
    pub duration: Duration,
    /// The callers.
    pub arrivals: Arrivals,
    /// Services in front of `[service]`, from the outside in (a gateway, say): each forwards
    /// every request to the next, through its own client (default: none, the callers reach
    /// `[service]` directly).
    #[serde(default)]
    pub tiers: Vec<Tier>,
    /// Replicas and their worker pools.
    #[serde(default)]
    pub service: Service,
    /// The endpoints requests are spread over, by weight.
    pub endpoints: Vec<Endpoint>,
    /// How `[service]` calls the dependency: timeout, attempts, backoff.
    #[serde(default)]
    pub client: Client,
    /// The dependency and its fault schedule.
    pub dependency: Dependency,
    /// Whether requests carry a shard key (for per-shard faults and breakers).
    #[serde(default)]
    pub shards: Option<Shards>,
    /// The protected variants to compare with the unprotected run, in order.
    #[serde(default)]
    pub protection: Vec<Protection>,
    /// Runs the whole scenario again for each of several values of one field, and reports
    /// some figures of every run side by side.
    #[serde(default)]
    pub sweep: Option<crate::sweep::Sweep>,
}

/// How requests arrive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Process {
    /// Evenly spaced, the first at time zero.
    #[default]
    Constant,
    /// A Poisson process (exponential gaps).
    Poisson,
    /// `count` requests, all at time zero: clients that start together.
    Burst,
}

/// The arrival process.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arrivals {
    /// `"constant"` (default), `"poisson"` or `"burst"`.
    #[serde(default)]
    pub process: Process,
    /// Requests per second to the whole service (all replicas); not with `"burst"`.
    #[serde(default)]
    pub rate: Option<f64>,
    /// With `"burst"`: how many requests arrive at time zero, in [1, 1000000].
    #[serde(default)]
    pub count: Option<u32>,
}

impl Arrivals {
    /// How many requests arrive over `duration`: `count` for a burst, else rate × duration.
    pub fn expected(&self, duration: Duration) -> f64 {
        match self.process {
            Process::Burst => f64::from(self.count.unwrap_or(0)),
            _ => self.rate.unwrap_or(0.0) * duration.as_secs_f64(),
        }
    }
}

/// How the load balancer picks a replica.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Balancer {
    /// Each replica in turn.
    #[default]
    RoundRobin,
    /// A replica drawn at random.
    Random,
}

/// The service: replicas, each with a bounded worker pool and a FIFO queue in front of it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Service {
    /// Its name, in the report's tiers (default `"service"`).
    #[serde(default = "service_name")]
    pub name: String,
    /// Replicas behind the load balancer (default 1).
    #[serde(default = "one")]
    pub replicas: u32,
    /// `"round-robin"` (default) or `"random"`.
    #[serde(default)]
    pub load_balancer: Balancer,
    /// Workers (threads, goroutines) per replica; a request holds one from the moment it
    /// starts until it is answered (default 200).
    #[serde(default = "two_hundred")]
    pub workers: u32,
    /// Requests that may wait for a worker, per replica; one more is shed at once
    /// (default 10000; 0 means no queue).
    #[serde(default = "ten_thousand")]
    pub queue_limit: u32,
    /// A request waiting longer than this for a worker is shed (default: waits as long as it
    /// takes).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub queue_timeout: Option<Duration>,
}

impl Default for Service {
    fn default() -> Self {
        Self {
            name: service_name(),
            replicas: 1,
            load_balancer: Balancer::RoundRobin,
            workers: 200,
            queue_limit: 10_000,
            queue_timeout: None,
        }
    }
}

fn one() -> u32 {
    1
}
fn service_name() -> String {
    "service".into()
}

/// A service in front of `[service]` (a gateway): its replicas and worker pools, its own work
/// per request, and its client to the tier below. Every request it takes holds a worker while
/// it calls the tier below, and answers an error when that call fails (an error answer, a
/// shed request, a timeout).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tier {
    /// Its name (unique; `[protection.tiers.NAME]` refers to it).
    pub name: String,
    /// Replicas (default 1, at most 1000).
    #[serde(default = "one")]
    pub replicas: u32,
    /// `"round-robin"` (default) or `"random"`.
    #[serde(default)]
    pub load_balancer: Balancer,
    /// Workers per replica (default 200).
    #[serde(default = "two_hundred")]
    pub workers: u32,
    /// Requests that may wait for a worker, per replica (default 10000).
    #[serde(default = "ten_thousand")]
    pub queue_limit: u32,
    /// A request waiting longer than this is shed (default: it waits).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub queue_timeout: Option<Duration>,
    /// Its own work per request, after the tier below answered (default 0).
    #[serde(default = "zero_dist")]
    pub work: Dist,
    /// How it calls the tier below: timeout, attempts, backoff.
    #[serde(default)]
    pub client: Client,
}
fn two_hundred() -> u32 {
    200
}
fn ten_thousand() -> u32 {
    10_000
}
fn one_f() -> f64 {
    1.0
}
fn zero_dist() -> Dist {
    Dist::Fixed(Duration::ZERO)
}

/// One endpoint of the service.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// Its name, such as `"/checkout"`.
    pub name: String,
    /// Its share of the requests, relative to the other weights (default 1).
    #[serde(default = "one_f")]
    pub weight: f64,
    /// Whether it calls the dependency (default false).
    #[serde(default)]
    pub uses_dependency: bool,
    /// Its own work, done while holding the worker, after the dependency answered (default 0).
    #[serde(default = "zero_dist")]
    pub work: Dist,
    /// How much its requests matter when capacity is short: `"critical"`, `"default"`
    /// (default), `"sheddable"` or a number in [0, 255]. Its requests carry it to the
    /// shedder and the limiter at every tier.
    #[serde(default)]
    pub priority: crate::adaptive::EndpointPriority,
}

/// The dependency.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Dependency {
    /// Its name (default `"dependency"`).
    #[serde(default = "dep_name")]
    pub name: String,
    /// How long a successful call takes when healthy.
    pub latency: Dist,
    /// The share of calls that fail when healthy (default 0).
    #[serde(default)]
    pub error_rate: Rate,
    /// How long a failing call takes when healthy (default: `latency`).
    #[serde(default)]
    pub error_latency: Option<Dist>,
    /// Calls it serves at full speed at once; past it every new call is slowed in proportion
    /// (latency × in-flight / capacity). Calls keep running at the dependency after the caller
    /// timed out, so retries can overload it. Default: unlimited.
    #[serde(default)]
    pub capacity: Option<u32>,
    /// What a call past the capacity meets: `"slow"` (default: slowed in proportion) or
    /// `"fail"` (refused at once, taking `error_latency`, and holding nothing: a resource
    /// with one writer at a time, a lock, a row written with optimistic concurrency).
    #[serde(default)]
    pub overload: Overload,
    /// Calls are updates of one row under optimistic concurrency control: each reads the
    /// row's version and writes it back conditionally, two round trips whose four legs each
    /// take `latency`; the write fails (a conflict) if another call's write landed since its
    /// read (default false). Not with a capacity or hosts.
    #[serde(default)]
    pub optimistic_writes: bool,
    /// Fault phases. At a given time and shard the first matching phase applies.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// The dependency's hosts (pods) behind the caller's balancer, each with its own capacity
    /// (default: one dependency, no hosts). See [`crate::hosts`].
    #[serde(default)]
    pub hosts: Option<crate::hosts::Hosts>,
}

fn dep_name() -> String {
    "dependency".into()
}

/// What a call to a dependency past its capacity meets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overload {
    /// It is slowed in proportion: latency × (calls in progress + 1) / capacity.
    #[default]
    Slow,
    /// It fails at once (a conflict), taking the error latency, and holds no capacity.
    Fail,
}

/// A fault phase: from `from` (included) until `until` (excluded), the dependency behaves as
/// described; unset fields keep the healthy behaviour.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// Start of the phase.
    #[serde(with = "tripline::duration::serde")]
    pub from: Duration,
    /// End of the phase (excluded).
    #[serde(with = "tripline::duration::serde")]
    pub until: Duration,
    /// The share of calls that fail.
    #[serde(default)]
    pub error_rate: Option<Rate>,
    /// How long a successful call takes.
    #[serde(default)]
    pub latency: Option<Dist>,
    /// How long a failing call takes (default: this phase's `latency` when set, else the
    /// dependency's `error_latency`, else its `latency`).
    #[serde(default)]
    pub error_latency: Option<Dist>,
    /// The dependency's capacity during the phase (a capacity drop: lost nodes, a noisy
    /// neighbour), in [1, 10000000] (default: `dependency.capacity`).
    #[serde(default)]
    pub capacity: Option<u32>,
    /// Only these shards are affected (default: all). Needs a `[shards]` table.
    #[serde(default)]
    pub shards: Option<Vec<u32>>,
    /// Only these hosts are affected (default: all). Needs a `[dependency.hosts]` table.
    #[serde(default)]
    pub hosts: Option<Vec<u32>>,
}

/// Shard keys carried by requests, drawn uniformly.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shards {
    /// How many shards.
    pub count: u32,
}

/// What a breaker is keyed by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// One breaker for the dependency.
    #[default]
    Dependency,
    /// One breaker per shard of the dependency.
    Shard,
    /// One breaker for the dependency, and a mini breaker per shard the server blames for a
    /// failure (a shard-scoped fault: the server names the overloaded shard), made on demand
    /// in a `tripline::registry::Registry` (`tripline::registry::ServerDirected`): blamed
    /// failures are recorded on the shard's breaker instead of the dependency-wide one, and a
    /// request to that shard must be admitted by both.
    ServerDirected,
}

/// Where a breaker's state lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharing {
    /// Each replica has its own breakers (in-process).
    #[default]
    Local,
    /// All replicas share the same breakers (one window, one probe budget), as a shared store
    /// would give them.
    Shared,
}

/// A protected variant: the same service with breakers in front of the dependency.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protection {
    /// Its column title (default `"with"`).
    #[serde(default = "with_label")]
    pub label: String,
    /// `"dependency"` (default), `"shard"` or `"server-directed"`.
    #[serde(default)]
    pub scope: Scope,
    /// `"local"` (default) or `"shared"`.
    #[serde(default)]
    pub sharing: Sharing,
    /// For shared breakers: how long a replica decides from the state the store last told it
    /// (the Redis store's `view_ttl`; default 0, every decision sees the shared state). A
    /// replica whose view still says Closed after the fleet tripped admits calls whose
    /// results are discarded as stale; the view refreshes whenever the replica talks to the
    /// store.
    #[serde(default, with = "tripline::duration::serde")]
    pub view_ttl: Duration,
    /// The per-attempt timeout in this variant, inside the breaker (default: `client.timeout`).
    #[serde(default, with = "tripline::duration::serde::option")]
    pub timeout: Option<Duration>,
    /// Attempts per request in this variant (default: `client.attempts`; or set
    /// `retry.attempts`).
    #[serde(default)]
    pub attempts: Option<u32>,
    /// The retry policy: backoff, jitter, budget (default: `[client]`'s).
    #[serde(default)]
    pub retry: Option<crate::protection::RetrySection>,
    /// A bulkhead per replica in front of the dependency.
    #[serde(default)]
    pub bulkhead: Option<crate::protection::BulkheadSection>,
    /// Envoy's concurrency gate per replica.
    #[serde(default)]
    pub gate: Option<crate::protection::GateSection>,
    /// The Google SRE book's client-side throttle per replica.
    #[serde(default)]
    pub throttle: Option<crate::protection::ThrottleSection>,
    /// Shopify Semian's partial opening per replica: a share of calls refused in proportion
    /// to the excess error rate.
    #[serde(default)]
    pub partial: Option<crate::adaptive::PartialSection>,
    /// Priority shedding per replica, in the client or at the service's workers.
    #[serde(default)]
    pub shed: Option<crate::adaptive::ShedSection>,
    /// An adaptive concurrency limit per replica (Vegas, Gradient2, AIMD or fixed).
    #[serde(default)]
    pub limiter: Option<crate::adaptive::LimiterSection>,
    /// Fault injection per replica (a game day), playing the dependency.
    #[serde(default)]
    pub chaos: Option<crate::adaptive::ChaosSection>,
    /// Puts the retry inside the breaker: the breaker admits the retried call once and
    /// records its final result (default false: every attempt asks the breaker).
    #[serde(default)]
    pub retry_inside_breaker: bool,
    /// The variant's policies at the tiers in front of the service, by tier name.
    #[serde(default)]
    pub tiers: std::collections::BTreeMap<String, crate::protection::TierProtection>,
    /// Whether a rejected call is answered with a fallback (a cached or default answer)
    /// instead of an error (default false).
    #[serde(default)]
    pub fallback: bool,
    /// The breaker configuration, in tripline's own format.
    #[serde(default)]
    pub breaker: BreakerConfig,
    /// Whether this variant has breakers (default true); `false` compares another protection
    /// (outlier detection) alone.
    #[serde(default = "yes")]
    pub breakers: bool,
    /// Outlier detection on the dependency's hosts (needs `[dependency.hosts]`): Envoy's
    /// fields, Envoy's defaults for those unset. See [`crate::hosts::Outlier`].
    #[serde(default)]
    pub outlier: Option<crate::hosts::Outlier>,
}

fn yes() -> bool {
    true
}

fn with_label() -> String {
    "with".into()
}

/// Why a scenario could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The TOML did not parse, or a value had the wrong type or range. The message names the
    /// line, the column, the field and what is allowed.
    #[error("invalid scenario{}: {message}", origin.as_deref().map(|o| format!(" {o}")).unwrap_or_default())]
    Parse {
        /// The file, when read from one.
        origin: Option<String>,
        /// 1-based line of the offending value, when known.
        line: Option<usize>,
        /// The full message.
        message: String,
    },
    /// A value is out of its range, or inconsistent with another.
    #[error("{0}")]
    Invalid(Box<InvalidValue>),
    /// No built-in scenario has this name and no file has this path.
    #[error("unknown scenario {name:?}: not a file, and not one of the built-in scenarios ({})", available.join(", "))]
    Unknown {
        /// The name asked for.
        name: String,
        /// The built-in names.
        available: Vec<String>,
    },
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
}

/// A value out of its range, or inconsistent with another: the field, the value, what is
/// allowed, and where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid scenario{}{}: {field} {allowed}, got {value}{}",
    origin.as_deref().map(|o| format!(" {o}")).unwrap_or_default(),
    line.map(|l| format!(" at line {l}")).unwrap_or_default(),
    snippet.as_deref().map(|s| format!("\n{s}")).unwrap_or_default())]
pub struct InvalidValue {
    /// The file, when read from one.
    pub origin: Option<String>,
    /// 1-based line, when found.
    pub line: Option<usize>,
    /// The field, dotted (`endpoints[1].weight`).
    pub field: String,
    /// The value it held.
    pub value: String,
    /// What is allowed ("must be > 0").
    pub allowed: String,
    /// The source line, formatted for display.
    pub snippet: Option<String>,
}

impl ScenarioError {
    /// The 1-based line of the offending value, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            ScenarioError::Parse { line, .. } => *line,
            ScenarioError::Invalid(v) => v.line,
            _ => None,
        }
    }

    /// The offending field, when known.
    pub fn field(&self) -> Option<&str> {
        match self {
            ScenarioError::Invalid(v) => Some(&v.field),
            _ => None,
        }
    }

    fn with_origin(mut self, o: &str) -> Self {
        match &mut self {
            ScenarioError::Parse { origin, .. } => *origin = Some(o.to_string()),
            ScenarioError::Invalid(v) => v.origin = Some(o.to_string()),
            _ => {}
        }
        self
    }
}

/// A bad value: the field, the value, what is allowed.
pub(crate) struct Bad {
    pub(crate) field: String,
    pub(crate) value: String,
    pub(crate) allowed: String,
}

pub(crate) fn bad(
    field: impl Into<String>,
    value: impl fmt::Display,
    allowed: impl Into<String>,
) -> Bad {
    Bad {
        field: field.into(),
        value: value.to_string(),
        allowed: allowed.into(),
    }
}

impl Scenario {
    /// Reads and checks a scenario from TOML text.
    pub fn from_toml(src: &str) -> Result<Self, ScenarioError> {
        let scenario: Scenario = toml::from_str(src).map_err(|e| {
            if let Some(v) = e
                .span()
                .and_then(|s| table_field_error(src, s.start, e.message()))
            {
                return ScenarioError::Invalid(Box::new(v));
            }
            let line = e.span().map(|s| line_of(src, s.start));
            let field = e.span().and_then(|s| key_at(src, s.start));
            let mut message = e.to_string().trim_end().to_string();
            if let Some(f) = field {
                message.push_str(&format!("\n(field `{f}`)"));
            }
            ScenarioError::Parse {
                origin: None,
                line,
                message,
            }
        })?;
        scenario.validate().map_err(|b| {
            let line = locate(src, &b.field);
            ScenarioError::Invalid(Box::new(InvalidValue {
                origin: None,
                line,
                snippet: line.and_then(|l| {
                    src.lines()
                        .nth(l - 1)
                        .map(|t| format!("{l:>4} | {}", t.trim_end()))
                }),
                field: b.field,
                value: b.value,
                allowed: b.allowed,
            }))
        })?;
        Ok(scenario)
    }

    /// Loads a built-in scenario by name, or a scenario file by path. A file without a `name`
    /// is named after its stem.
    ///
    /// ```
    /// use tripline_sim::{Scenario, ScenarioError};
    /// assert_eq!(Scenario::load("fowler")?.name, "fowler");
    /// let err = Scenario::load("fowlr").unwrap_err();
    /// assert!(err.to_string().contains("fowler, fraud-checkout"));
    /// # Ok::<(), ScenarioError>(())
    /// ```
    pub fn load(name_or_path: &str) -> Result<Self, ScenarioError> {
        if let Some(src) = builtin(name_or_path) {
            return Scenario::from_toml(src).map_err(|e| e.with_origin(name_or_path));
        }
        let path = Path::new(name_or_path);
        if !path.is_file() {
            return Err(ScenarioError::Unknown {
                name: name_or_path.to_string(),
                available: BUILTIN.iter().map(|(n, _)| n.to_string()).collect(),
            });
        }
        let src = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: name_or_path.to_string(),
            source,
        })?;
        let mut s = Scenario::from_toml(&src).map_err(|e| e.with_origin(name_or_path))?;
        if s.name.is_empty() {
            s.name = path
                .file_stem()
                .map(|x| x.to_string_lossy().into_owned())
                .unwrap_or_default();
        }
        Ok(s)
    }

    /// The breakers one protected run holds in front of the dependency (`[service]`'s).
    pub fn breaker_count(&self, p: &Protection) -> u64 {
        if !p.breakers {
            return 0;
        }
        let replicas = match p.sharing {
            Sharing::Local => u64::from(self.service.replicas),
            Sharing::Shared => 1,
        };
        let keys = match p.scope {
            Scope::Dependency => 1,
            Scope::Shard => self.shards.map_or(1, |s| u64::from(s.count)),
            // At most: the shards' breakers are made only for the shards a server blames.
            Scope::ServerDirected => 1 + self.shards.map_or(0, |s| u64::from(s.count)),
        };
        replicas * keys
    }

    /// How many tiers a request crosses: the `[[tiers]]` in front, and `[service]`.
    pub fn tier_count(&self) -> usize {
        self.tiers.len() + 1
    }

    /// The name of tier `k` (0 is where requests arrive; the last is `[service]`).
    pub fn tier_name(&self, k: usize) -> &str {
        self.tiers.get(k).map_or(&self.service.name, |t| &t.name)
    }

    /// The client of tier `k` in a variant (`None`: the unprotected run), resolved from the
    /// tier's own settings and the variant's.
    pub(crate) fn client_spec(
        &self,
        variant: Option<usize>,
        k: usize,
    ) -> Result<ClientSpec, crate::protection::Bad> {
        let p = variant.and_then(|i| self.protection.get(i));
        match self.tiers.get(k) {
            Some(t) => {
                let base_prefix = format!("tiers[{k}].client.");
                let over = p.and_then(|p| p.tiers.get(&t.name));
                let prefix = match variant {
                    Some(i) => format!("protection[{i}].tiers.{}.", t.name),
                    None => String::new(),
                };
                let pol = over.map(|o| o.policies());
                ClientSpec::resolve(&t.client, &base_prefix, pol.as_ref(), &prefix, t.workers)
            }
            None => {
                let pol = p.map(Protection::policies);
                let prefix = variant.map_or(String::new(), |i| format!("protection[{i}]."));
                ClientSpec::resolve(
                    &self.client,
                    "client.",
                    pol.as_ref(),
                    &prefix,
                    self.service.workers,
                )
            }
        }
    }

    /// When the incident starts and ends: the earliest fault start and the latest fault end,
    /// or `None` without faults. The end is not capped at the duration: a fault that outlasts
    /// the arrivals still acts on the requests that drain after them, and a breaker cannot
    /// have closed "after recovery" before the dependency recovered, so
    /// `time_to_close_after_recovery_s` is `null` when the faults outlast the run.
    pub fn incident(&self) -> Option<(Duration, Duration)> {
        let from = self.dependency.faults.iter().map(|f| f.from).min()?;
        let until = self.dependency.faults.iter().map(|f| f.until).max()?;
        Some((from, until))
    }

    /// The dependency's longest call: its longest latency, or past a capacity (which slows
    /// calls in proportion) the latency cap.
    fn longest_call(&self) -> Duration {
        let dep = &self.dependency;
        let longest = [Some(dep.latency), dep.error_latency]
            .into_iter()
            .chain(dep.faults.iter().flat_map(|f| [f.latency, f.error_latency]))
            .flatten()
            .map(|d| d.max())
            .max()
            .unwrap_or_default();
        let capacity = dep.capacity.is_some() || dep.faults.iter().any(|f| f.capacity.is_some());
        if capacity && dep.overload == Overload::Slow && !longest.is_zero() {
            crate::dist::MAX_LATENCY
        } else if dep.optimistic_writes {
            longest * 4
        } else {
            longest
        }
    }

    /// An upper bound on how long a run of this scenario can last in virtual time: the
    /// arrivals, then, for every tier a request crosses, the longest it can wait for a worker
    /// there and hold one, over every variant. A request holds a worker for every attempt at
    /// its longest (a bulkhead's longest wait, then the timeout or the longest answer from
    /// below: the dependency's longest latency, or the tier below's longest wait and hold),
    /// with the backoffs between (each at its ceiling) and its longest local work. It waits
    /// at most the queue timeout, or without one `⌈queue_limit ÷ workers⌉` times its longest
    /// hold (a full pool frees all its workers within that time). A request sent below when
    /// its caller was about to give up can outlive it, so the tiers' bounds add up. A scenario
    /// whose bound passes [`MAX_RUN`] is refused.
    ///
    /// ```
    /// use std::time::Duration;
    /// let s = tripline_sim::Scenario::load("fraud-checkout")?;
    /// // 15 minutes of arrivals, then at most 10 s in the queue and 1 s call + 5 ms of work.
    /// assert_eq!(s.longest_run(), Duration::from_millis(15 * 60_000 + 10_000 + 1_000 + 5));
    /// # Ok::<(), tripline_sim::ScenarioError>(())
    /// ```
    pub fn longest_run(&self) -> Duration {
        let variants = std::iter::once(None).chain((0..self.protection.len()).map(Some));
        variants
            .map(|v| {
                let n = self.tier_count();
                // From the service up: (wait, hold) of each tier.
                let mut below = self.longest_call();
                let mut total = Duration::ZERO;
                for k in (0..n).rev() {
                    let Ok(spec) = self.client_spec(v, k) else {
                        continue;
                    };
                    let (workers, queue_limit, queue_timeout, work) = match self.tiers.get(k) {
                        Some(t) => (t.workers, t.queue_limit, t.queue_timeout, t.work.max()),
                        None => (
                            self.service.workers,
                            self.service.queue_limit,
                            self.service.queue_timeout,
                            self.endpoints
                                .iter()
                                .map(|e| e.work.max())
                                .max()
                                .unwrap_or_default(),
                        ),
                    };
                    // An injected latency comes before the call, inside the timeout.
                    let call = below.saturating_add(spec.longest_injected());
                    let attempt = spec
                        .longest_wait()
                        .saturating_add(spec.timeout.map_or(call, |t| t.min(call)));
                    let hold = attempt
                        .saturating_mul(spec.attempts)
                        .saturating_add(spec.longest_backoffs())
                        .saturating_add(work);
                    let wait = match queue_timeout {
                        Some(t) => t,
                        None => hold.saturating_mul(queue_limit.div_ceil(workers.max(1))),
                    };
                    total = total.saturating_add(wait).saturating_add(hold);
                    below = wait.saturating_add(hold);
                }
                self.duration.saturating_add(total)
            })
            .max()
            .unwrap_or(self.duration)
    }

    /// Checks every value and every cross-field rule, naming the first bad field.
    pub(crate) fn validate(&self) -> Result<(), Bad> {
        let d = self.duration;
        if d.is_zero() || d > WEEK {
            return Err(bad("duration", fmt_d(d), "must be between 1ns and 7 days"));
        }
        let a = &self.arrivals;
        match a.process {
            Process::Burst => {
                let Some(count) = a.count else {
                    return Err(bad(
                        "arrivals.count",
                        "none",
                        "must be set with process = \"burst\" (how many requests arrive at time zero)",
                    ));
                };
                range("arrivals.count", count, 1, 1_000_000)?;
                if let Some(r) = a.rate {
                    return Err(bad(
                        "arrivals.rate",
                        r,
                        "must not be set with process = \"burst\" (set arrivals.count)",
                    ));
                }
            }
            _ => {
                let Some(rate) = a.rate else {
                    return Err(bad(
                        "arrivals.rate",
                        "none",
                        "must be set: a number of requests per second in (0, 10000000]",
                    ));
                };
                if !(rate.is_finite() && rate > 0.0 && rate <= 1e7) {
                    return Err(bad(
                        "arrivals.rate",
                        rate,
                        "must be a number of requests per second in (0, 10000000]",
                    ));
                }
                if let Some(c) = a.count {
                    return Err(bad(
                        "arrivals.count",
                        c,
                        "applies to process = \"burst\" only",
                    ));
                }
                if rate * d.as_secs_f64() > MAX_REQUESTS {
                    return Err(bad(
                        "arrivals.rate",
                        rate,
                        format!(
                            "must keep rate × duration at most {MAX_REQUESTS:.0} requests per run (duration is {})",
                            fmt_d(d)
                        ),
                    ));
                }
            }
        }
        let runs = (1 + self.protection.len()) as f64
            * self
                .sweep
                .as_ref()
                .map_or(1, |s| s.values.len() * s.repeat as usize + 1) as f64;
        let total = a.expected(d) * runs;
        if total > MAX_TOTAL_REQUESTS {
            return Err(bad(
                "arrivals",
                format!("{total:.0} requests over all runs"),
                format!(
                    "must keep the requests of all runs together (variants × sweep values) at most {MAX_TOTAL_REQUESTS:.0}"
                ),
            ));
        }
        let mut held: u64 = 0;
        for (k, t) in self.tiers.iter().enumerate() {
            let f = |x: &str| format!("tiers[{k}].{x}");
            if t.name.trim().is_empty() || t.name.len() > 40 {
                return Err(bad(
                    f("name"),
                    format!("{:?}", t.name),
                    "must be 1 to 40 characters",
                ));
            }
            if self.tiers[..k].iter().any(|o| o.name == t.name) || t.name == self.service.name {
                return Err(bad(
                    f("name"),
                    format!("{:?}", t.name),
                    "must be unique among the tiers and service.name",
                ));
            }
            range(&f("replicas"), t.replicas, 1, 1000)?;
            range(&f("workers"), t.workers, 1, 1_000_000)?;
            range(&f("queue_limit"), t.queue_limit, 0, 10_000_000)?;
            if let Some(q) = t.queue_timeout {
                pos_dur(&f("queue_timeout"), q)?;
            }
            held += u64::from(t.replicas) * (u64::from(t.workers) + u64::from(t.queue_limit));
        }
        if self.tiers.len() > 8 {
            return Err(bad("tiers", self.tiers.len(), "must list at most 8 tiers"));
        }
        let sv = &self.service;
        if sv.name.trim().is_empty() || sv.name.len() > 40 {
            return Err(bad(
                "service.name",
                format!("{:?}", sv.name),
                "must be 1 to 40 characters",
            ));
        }
        range("service.replicas", sv.replicas, 1, 1000)?;
        range("service.workers", sv.workers, 1, 1_000_000)?;
        range("service.queue_limit", sv.queue_limit, 0, 10_000_000)?;
        held += u64::from(sv.replicas) * (u64::from(sv.workers) + u64::from(sv.queue_limit));
        if held > MAX_HELD {
            let field = if self.tiers.is_empty() {
                "service.queue_limit"
            } else {
                "tiers"
            };
            return Err(bad(
                field,
                sv.queue_limit,
                format!(
                    "must keep replicas × (workers + queue_limit), over all tiers, at most {MAX_HELD} (requests held at once; it is {held})"
                ),
            ));
        }
        if let Some(t) = sv.queue_timeout {
            pos_dur("service.queue_timeout", t)?;
        }
        if self.endpoints.is_empty() {
            return Err(bad(
                "endpoints",
                "none",
                "must list at least one endpoint ([[endpoints]] with a name)",
            ));
        }
        if self.endpoints.len() > MAX_ENDPOINTS {
            return Err(bad(
                "endpoints",
                self.endpoints.len(),
                format!("must list at most {MAX_ENDPOINTS} endpoints"),
            ));
        }
        for (i, e) in self.endpoints.iter().enumerate() {
            if e.name.trim().is_empty() {
                return Err(bad(
                    format!("endpoints[{i}].name"),
                    "\"\"",
                    "must not be empty",
                ));
            }
            if self.endpoints[..i].iter().any(|o| o.name == e.name) {
                return Err(bad(
                    format!("endpoints[{i}].name"),
                    format!("{:?}", e.name),
                    "must be unique",
                ));
            }
            if !(e.weight.is_finite() && e.weight > 0.0 && e.weight <= 1e9) {
                return Err(bad(
                    format!("endpoints[{i}].weight"),
                    e.weight,
                    "must be a number in (0, 1e9]",
                ));
            }
        }
        // Every tier's client, unprotected.
        for k in 0..self.tier_count() {
            self.client_spec(None, k).map_err(Bad::from)?;
        }
        let dep = &self.dependency;
        if let Some(cap) = dep.capacity {
            range("dependency.capacity", cap, 1, 10_000_000)?;
        }
        if let Some(s) = self.shards {
            range("shards.count", s.count, 1, 100_000)?;
        }
        let any_capacity =
            dep.capacity.is_some() || dep.faults.iter().any(|f| f.capacity.is_some());
        if dep.overload == Overload::Fail {
            if dep.hosts.is_some() {
                return Err(bad(
                    "dependency.overload",
                    "\"fail\"",
                    "must be \"slow\" with [dependency.hosts] (each host slows past its capacity)",
                ));
            }
            if !any_capacity {
                return Err(bad(
                    "dependency.overload",
                    "\"fail\"",
                    "needs a dependency.capacity (the calls it serves at once)",
                ));
            }
        }
        if dep.optimistic_writes {
            let clash = if dep.hosts.is_some() {
                Some("[dependency.hosts]")
            } else if any_capacity {
                Some("a capacity")
            } else {
                None
            };
            if let Some(what) = clash {
                return Err(bad(
                    "dependency.optimistic_writes",
                    "true",
                    format!(
                        "must be false with {what} (a row under optimistic concurrency serves every call; conflicts are what limit it)"
                    ),
                ));
            }
        }
        for (i, f) in dep.faults.iter().enumerate() {
            if f.from >= f.until {
                return Err(bad(
                    format!("dependency.faults[{i}].until"),
                    fmt_d(f.until),
                    format!("must be after `from` ({})", fmt_d(f.from)),
                ));
            }
            if f.until > WEEK * 2 {
                return Err(bad(
                    format!("dependency.faults[{i}].until"),
                    fmt_d(f.until),
                    "must be at most 14 days",
                ));
            }
            if let Some(c) = f.capacity {
                range(
                    &format!("dependency.faults[{i}].capacity"),
                    c,
                    1,
                    10_000_000,
                )?;
                if dep.hosts.is_some() {
                    return Err(bad(
                        format!("dependency.faults[{i}].capacity"),
                        c,
                        "must be unset with [dependency.hosts] (each host has its own capacity)",
                    ));
                }
            }
            if let Some(list) = &f.shards {
                let Some(s) = self.shards else {
                    return Err(bad(
                        format!("dependency.faults[{i}].shards"),
                        format!("{list:?}"),
                        "needs a [shards] table with the shard count",
                    ));
                };
                if let Some(x) = list.iter().find(|&&x| x >= s.count) {
                    return Err(bad(
                        format!("dependency.faults[{i}].shards"),
                        x,
                        format!("must list shard numbers below shards.count ({})", s.count),
                    ));
                }
            }
        }
        crate::hosts::validate(self).map_err(|(field, value, allowed)| Bad {
            field,
            value,
            allowed,
        })?;
        if self.protection.len() > 8 {
            return Err(bad(
                "protection",
                self.protection.len(),
                "must list at most 8 variants",
            ));
        }
        for (i, p) in self.protection.iter().enumerate() {
            let label = p.label.trim();
            if label.is_empty() || label.len() > 24 || label == "without" {
                return Err(bad(
                    format!("protection[{i}].label"),
                    format!("{:?}", p.label),
                    "must be 1 to 24 characters and not \"without\"",
                ));
            }
            if self.protection[..i].iter().any(|o| o.label == p.label) {
                return Err(bad(
                    format!("protection[{i}].label"),
                    format!("{:?}", p.label),
                    "must be unique",
                ));
            }
            if p.scope == Scope::ServerDirected
                && let Err(e) = tripline::registry::Key::new(&self.dependency.name)
            {
                return Err(bad(
                    "dependency.name".to_string(),
                    format!("{:?}", self.dependency.name),
                    format!(
                        "a name that can be a registry key, for a server-directed breaker ({})",
                        e.allowed()
                    ),
                ));
            }
            if p.scope != Scope::Dependency && self.shards.is_none() {
                return Err(bad(
                    format!("protection[{i}].scope"),
                    if p.scope == Scope::Shard {
                        "\"shard\""
                    } else {
                        "\"server-directed\""
                    },
                    "needs a [shards] table with the shard count",
                ));
            }
            if let Some(name) = p
                .tiers
                .keys()
                .find(|n| !self.tiers.iter().any(|t| &t.name == *n))
            {
                return Err(bad(
                    format!("protection[{i}].tiers.{name}"),
                    format!("{name:?}"),
                    format!(
                        "must name a tier in front of the service (the [[tiers]]: {})",
                        if self.tiers.is_empty() {
                            "none".to_string()
                        } else {
                            self.tiers
                                .iter()
                                .map(|t| t.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    ),
                ));
            }
            for k in 0..self.tier_count() {
                self.client_spec(Some(i), k).map_err(Bad::from)?;
            }
            if !p.view_ttl.is_zero() {
                if p.sharing != Sharing::Shared {
                    return Err(bad(
                        format!("protection[{i}].view_ttl"),
                        fmt_d(p.view_ttl),
                        "applies to shared breakers only (sharing = \"shared\")",
                    ));
                }
                if p.view_ttl > Duration::from_secs(3600) {
                    return Err(bad(
                        format!("protection[{i}].view_ttl"),
                        fmt_d(p.view_ttl),
                        "must be at most 1h",
                    ));
                }
            }
            let n = self.breaker_count(p);
            let views = u64::from(self.service.replicas).saturating_mul(n);
            if !p.view_ttl.is_zero() && views > MAX_VIEWS {
                return Err(bad(
                    format!("protection[{i}].view_ttl"),
                    fmt_d(p.view_ttl),
                    format!(
                        "must be 0 with more than {MAX_VIEWS} views (replicas × shared breakers; here {views} views): each replica would remember each breaker"
                    ),
                ));
            }
            if n > MAX_BREAKERS {
                return Err(bad(
                    format!("protection[{i}].scope"),
                    format!("{n} breakers"),
                    format!("must need at most {MAX_BREAKERS} breakers (replicas × shards)"),
                ));
            }
            let cells = window_cells(&p.breaker);
            if n.saturating_mul(cells) > MAX_WINDOW_CELLS {
                return Err(bad(
                    format!("protection[{i}].breaker.window"),
                    format!("{cells} cells × {n} breakers"),
                    format!(
                        "must keep window cells × breakers at most {MAX_WINDOW_CELLS} (use a smaller window or fewer breakers)"
                    ),
                ));
            }
        }
        if let Some(sweep) = &self.sweep {
            sweep.check(self)?;
        }
        let longest = self.longest_run();
        if longest > MAX_RUN {
            // Only an unbounded wait in a queue can get here: every other term is at most
            // days, and the duration at most a week.
            let field = if self.tiers.is_empty() {
                "service.queue_limit"
            } else {
                "tiers"
            };
            return Err(bad(
                field,
                sv.queue_limit,
                format!(
                    "must keep the longest possible run at most {} days (arrivals, then the last request's wait in the queue and its time holding a worker: here up to {:.1} days); with no queue_timeout a queued request may wait ⌈queue_limit ÷ workers⌉ times the longest a request holds a worker; set service.queue_timeout or client.timeout, or a smaller queue_limit",
                    MAX_RUN.as_secs() / 86_400,
                    longest.as_secs_f64() / 86_400.0
                ),
            ));
        }
        Ok(())
    }
}

impl Protection {
    /// The policies this variant sets on `[service]`'s client.
    pub fn policies(&self) -> Policies<'_> {
        Policies {
            timeout: self.timeout,
            attempts: self.attempts,
            fallback: Some(self.fallback),
            retry_inside_breaker: self.retry_inside_breaker,
            breaker: self.breakers.then_some(&self.breaker),
            scope: self.scope,
            sharing: self.sharing,
            view_ttl: self.view_ttl,
            retry: self.retry.as_ref(),
            bulkhead: self.bulkhead.as_ref(),
            gate: self.gate.as_ref(),
            throttle: self.throttle.as_ref(),
            partial: self.partial.as_ref(),
            shed: self.shed.as_ref(),
            limiter: self.limiter.as_ref(),
            chaos: self.chaos.as_ref(),
        }
    }
}

fn window_cells(b: &BreakerConfig) -> u64 {
    match b.window() {
        tripline::WindowConfig::Count { size } => u64::from(size),
        tripline::WindowConfig::Time { length, bucket } => {
            let buckets = length.as_nanos() / bucket.as_nanos().max(1);
            u64::try_from(buckets).unwrap_or(u64::MAX) * u64::from(b.stripes())
        }
    }
}

impl From<crate::protection::Bad> for Bad {
    fn from((field, value, allowed): crate::protection::Bad) -> Self {
        Bad {
            field,
            value,
            allowed,
        }
    }
}

pub(crate) fn range(field: &str, v: u32, lo: u32, hi: u32) -> Result<(), Bad> {
    if v < lo || v > hi {
        return Err(bad(field, v, format!("must be in [{lo}, {hi}]")));
    }
    Ok(())
}

fn pos_dur(field: &str, v: Duration) -> Result<(), Bad> {
    if v.is_zero() || v > Duration::from_secs(3600) {
        return Err(bad(field, fmt_d(v), "must be between 1ns and 1h"));
    }
    Ok(())
}

/// A table's own check failing on one of its fields (a `[protection.breaker]` whose
/// `ramp_up.from` is 0: `tripline::BreakerConfig` checks its fields when it is read, and the
/// TOML reader reports the whole table), as an error naming that field, its line, its value
/// and what is allowed, like every other field's. `None` unless the message is a field's
/// check (`ramp_up.from must be ..., got 0`) and the field is found in the table.
fn table_field_error(src: &str, offset: usize, message: &str) -> Option<InvalidValue> {
    let (field, rest) = message.split_once(" must ")?;
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']');
    if field.is_empty() || !field.chars().all(ok) {
        return None;
    }
    let (allowed, value) = rest.rsplit_once(", got ")?;
    let at = line_of(src, offset);
    let lines: Vec<&str> = src.lines().collect();
    let header = |l: &str| {
        let t = l.trim();
        t.starts_with('[')
            .then(|| t.trim_matches(['[', ']']).trim().to_string())
    };
    // The table's path: its header's, or the key of an inline table under the header above.
    let here = lines.get(at - 1)?;
    let table = match header(here) {
        Some(h) => h,
        None => {
            let key = here.split_once('=')?.0.trim();
            let above = lines[..at - 1].iter().rev().find_map(|l| header(l));
            // The error names a field of the line's own key (`ramp_up.from` on a
            // `ramp_up = { from = 0 }` line, checked as it was read): the header's table holds it.
            let own = field == key || field.starts_with(&format!("{key}."));
            match (above, own) {
                (Some(h), true) => h,
                (Some(h), false) => format!("{h}.{key}"),
                (None, true) => String::new(),
                (None, false) => key.to_string(),
            }
        }
    };
    // `protection` is an array of tables: this is the one opened last before the line.
    let path = match table.strip_prefix("protection") {
        Some(rest) if rest.is_empty() || rest.starts_with('.') => {
            let n = lines[..at]
                .iter()
                .filter(|l| l.trim() == "[[protection]]")
                .count();
            format!("protection[{}]{rest}", n.checked_sub(1)?)
        }
        _ => table,
    };
    let full = if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    };
    let line = locate(src, &full)?;
    Some(InvalidValue {
        origin: None,
        line: Some(line),
        snippet: lines
            .get(line - 1)
            .map(|t| format!("{line:>4} | {}", t.trim_end())),
        field: full,
        value: value.to_string(),
        allowed: format!("must {allowed}"),
    })
}

fn line_of(src: &str, offset: usize) -> usize {
    let end = offset.min(src.len());
    src.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The key written on the line where `offset` falls, if the line is `key = value`.
fn key_at(src: &str, offset: usize) -> Option<String> {
    let offset = offset.min(src.len());
    let start = src[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = src[start..].lines().next()?;
    let t = line.trim_start();
    if t.starts_with('[') {
        let name = t.trim_start_matches('[').split(']').next()?.trim();
        return (!name.is_empty()).then(|| name.to_string());
    }
    let (key, _) = t.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.contains(' ')).then(|| key.to_string())
}

/// One step of a dotted field path: a key, or an index into an array.
#[derive(Debug, PartialEq)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// Splits `protection[1].retry.budget[0].ratio` into its steps.
fn steps(field: &str) -> Option<Vec<Step<'_>>> {
    let mut out = Vec::new();
    for part in field.split('.') {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Step::Key(key));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let close = r.find(']')?;
            out.push(Step::Index(r[..close].parse().ok()?));
            rest = &r[close + 1..];
        }
    }
    Some(out)
}

/// Finds the line of a dotted field path (`protection[1].retry.budget[0].ratio`) in the
/// source: it walks the parsed document, whatever way each table is written (headers, arrays
/// of tables, inline tables, dotted keys), and stops at the deepest part that exists: the
/// value's line, or its table's.
fn locate(src: &str, field: &str) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let doc = DeTable::parse(src).ok()?;
    let steps = steps(field)?;
    let mut table: &DeTable<'_> = doc.get_ref();
    let mut value: Option<&DeValue<'_>> = None;
    let mut best: Option<usize> = None;
    for step in steps {
        let here = match (step, value) {
            (Step::Key(k), None) => table.get_key_value(k).map(|(key, v)| (key.span(), v)),
            (Step::Key(k), Some(DeValue::Table(t))) => {
                table = t;
                t.get_key_value(k).map(|(key, v)| (key.span(), v))
            }
            (Step::Index(i), Some(DeValue::Array(a))) => a.get(i).map(|v| (v.span(), v)),
            _ => None,
        };
        let Some((span, v)) = here else { break };
        let line = line_of(src, span.start);
        // A table from a `[header]` has no span of its own worth reporting: keep the key's.
        if span.start < src.len() && (span.start > 0 || span.end > 0) {
            best = Some(line);
        }
        value = Some(v.get_ref());
        if let DeValue::Table(t) = v.get_ref() {
            table = t;
        }
    }
    best
}

/// The scenarios that ship with the crate: (name, TOML source).
pub const BUILTIN: &[(&str, &str)] = &[
    ("fowler", include_str!("../scenarios/fowler.toml")),
    (
        "fraud-checkout",
        include_str!("../scenarios/fraud-checkout.toml"),
    ),
    ("gymfolks", include_str!("../scenarios/gymfolks.toml")),
    (
        "gymfolks-cascade",
        include_str!("../scenarios/gymfolks-cascade.toml"),
    ),
    ("retry-storm", include_str!("../scenarios/retry-storm.toml")),
    ("hot-shard", include_str!("../scenarios/hot-shard.toml")),
    ("mercari", include_str!("../scenarios/mercari.toml")),
    (
        "backoff-contention",
        include_str!("../scenarios/backoff-contention.toml"),
    ),
    (
        "backoff-contention-aws",
        include_str!("../scenarios/backoff-contention-aws.toml"),
    ),
    ("metastable", include_str!("../scenarios/metastable.toml")),
    (
        "sustained-errors",
        include_str!("../scenarios/sustained-errors.toml"),
    ),
    (
        "slow-recovery",
        include_str!("../scenarios/slow-recovery.toml"),
    ),
    ("semian", include_str!("../scenarios/semian.toml")),
];

/// The TOML source of a built-in scenario.
///
/// ```
/// assert!(tripline_sim::builtin("gymfolks").unwrap().contains("replicas = 12"));
/// assert!(tripline_sim::builtin("nope").is_none());
/// ```
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_follows_tables_and_arrays() {
        let src = "duration = \"1s\"\n[arrivals]\nrate = 0\n[[endpoints]]\nname = \"a\"\n[[endpoints]]\nname = \"b\"\nweight = -1\n[dependency]\nlatency = \"1ms\"\n[[dependency.faults]]\nfrom = \"2s\"\nuntil = \"1s\"\n";
        assert_eq!(locate(src, "arrivals.rate"), Some(3));
        assert_eq!(locate(src, "endpoints[1].weight"), Some(8));
        assert_eq!(locate(src, "dependency.faults[0].until"), Some(13));
        assert_eq!(locate(src, "duration"), Some(1));
        assert_eq!(
            locate("arrivals = { rate = 0 }\n", "arrivals.rate"),
            Some(1)
        );
    }

    #[test]
    fn every_builtin_parses() {
        for (name, src) in BUILTIN {
            let s = Scenario::from_toml(src).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&s.name, name);
            assert!(!s.description.is_empty());
        }
    }
}
