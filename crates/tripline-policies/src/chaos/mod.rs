//! Fault injection for game days: latency, errors or hangs injected into a share of calls.
//!
//! # Why inject faults?
//!
//! A breaker that has never opened is a breaker nobody has seen open. The proof that it works
//! is a game day: "inject a 5–10 s stall into the dependency in staging and assert the breaker
//! opens, the rest of the service stays green, and the breaker half-opens and closes on its
//! own after the stall clears". [`Chaos`] is the injector for that, in the spirit of Polly's
//! chaos strategies: a list of [`FaultRule`]s, each a [`Fault`] and the share of calls it hits,
//! switched on and off at run time ([`Chaos::enable`], [`Chaos::disable`],
//! [`Chaos::reconfigure`]), with a predicate per request on the tower layer
//! ([`ChaosLayer::when`]) so that one route, one tenant or one host takes the faults.
//!
//! # The faults
//!
//! | fault | what the caller sees |
//! |---|---|
//! | [`Fault::Latency`] | the call, after an extra delay (a slow dependency) |
//! | [`Fault::Error`] | an [`InjectedFault`] error, without the call being made (a failing dependency) |
//! | [`Fault::Hang`] | nothing, ever: the call never completes (a dependency that accepts and never answers); only a timeout outside it ends it |
//!
//! An injected fault plays the *dependency*: it sits innermost, inside the timeout (the
//! [pipeline](crate::pipeline) puts it there), so an injected stall is cut by the timeout and
//! counted by the breaker as the failure a real stall would be, and an injected error is a
//! failure, never a local refusal.
//!
//! # Deciding
//!
//! The rules are tried in order, and a call gets at most one fault: the first rule whose draw
//! falls below its rate. Draws come from an injected random generator, so a game day replayed
//! with the same seed hits the same calls. While the injector is disabled (the default: a
//! chaos layer left in a production build does nothing until an operator turns it on) a call
//! costs one atomic load and draws nothing. [`Chaos::decide`] is the decision alone, for a
//! simulator that applies the fault on its own virtual time.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tripline_policies::chaos::{Chaos, ChaosConfig, Fault};
//!
//! let chaos = Chaos::new(
//!     ChaosConfig::builder().latency(1.0, Duration::from_secs(5)).build()?,
//! );
//! assert_eq!(chaos.decide(), None); // off until switched on
//! chaos.enable();
//! assert_eq!(chaos.decide(), Some(Fault::Latency(Duration::from_secs(5))));
//! let start = tokio::time::Instant::now();
//! chaos.inject().await?; // the stall, on tokio's (here paused) clock
//! assert_eq!(start.elapsed(), Duration::from_secs(5));
//! chaos.disable();
//! assert_eq!(chaos.stats().latency, 2);
//! # Ok(())
//! # }
//! ```

pub mod error;
#[cfg(feature = "tower")]
pub mod future;
#[cfg(feature = "tower")]
mod layer;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{RngCore, SeedableRng};
use tripline::ConfigError;

use crate::draws::Draws;

pub use error::InjectedFault;
#[cfg(feature = "tower")]
pub use layer::ChaosLayer;

/// The most rules one injector holds.
pub const MAX_RULES: usize = 64;
/// The longest injected latency.
pub const MAX_LATENCY: Duration = Duration::from_secs(86_400);

/// What an injected fault does to a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The call is made after this extra delay.
    Latency(Duration),
    /// The call is not made; it fails with an [`InjectedFault`].
    Error,
    /// The call is not made and never completes.
    Hang,
}

impl Fault {
    /// `latency`, `error` or `hang`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Fault::Latency(_) => "latency",
            Fault::Error => "error",
            Fault::Hang => "hang",
        }
    }
}

/// A fault and the share of calls it hits.
///
/// ```
/// use std::time::Duration;
/// use tripline_policies::chaos::FaultRule;
///
/// assert!(FaultRule::latency(0.1, Duration::from_secs(5)).is_ok());
/// let err = FaultRule::error(1.5).unwrap_err();
/// assert_eq!(err.to_string(), "rate must be in [0, 1], got 1.5");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultRule {
    fault: Fault,
    rate: f64,
    rate_ppm: u32,
}

impl FaultRule {
    /// `fault` for a share `rate` of calls, in `[0, 1]` (Polly's injection rate). A latency
    /// must be in `(0, 1 day]`.
    pub fn new(fault: Fault, rate: f64) -> Result<Self, ConfigError> {
        if !(rate.is_finite() && (0.0..=1.0).contains(&rate)) {
            return Err(ConfigError::new("rate", rate, "in [0, 1]"));
        }
        if let Fault::Latency(d) = fault {
            if d.is_zero() || d > MAX_LATENCY {
                return Err(ConfigError::new(
                    "delay",
                    format!("{d:?}"),
                    format!("in (0ns, {MAX_LATENCY:?}]"),
                ));
            }
        }
        Ok(Self {
            fault,
            rate,
            rate_ppm: (rate * 1_000_000.0).round() as u32,
        })
    }

    /// An extra delay of `delay` for a share `rate` of calls.
    pub fn latency(rate: f64, delay: Duration) -> Result<Self, ConfigError> {
        Self::new(Fault::Latency(delay), rate)
    }

    /// An [`InjectedFault`] error for a share `rate` of calls.
    pub fn error(rate: f64) -> Result<Self, ConfigError> {
        Self::new(Fault::Error, rate)
    }

    /// A hang for a share `rate` of calls.
    pub fn hang(rate: f64) -> Result<Self, ConfigError> {
        Self::new(Fault::Hang, rate)
    }

    /// The fault.
    pub fn fault(&self) -> Fault {
        self.fault
    }

    /// The share of calls it hits.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

/// The settings of a [`Chaos`] injector.
///
/// | field | default | why |
/// |---|---|---|
/// | `enabled` | false | an injector compiled into a build does nothing until switched on |
/// | `rules` | none | tried in order; a call gets at most one fault (at most 64 rules) |
///
/// In TOML (feature `serde`):
///
/// ```toml
/// enabled = true
/// rules = [
///     { fault = "latency", rate = 0.2, delay = "5s" },
///     { fault = "error", rate = 0.05 },
///     { fault = "hang", rate = 0.01 },
/// ]
/// ```
#[derive(Clone, Debug, PartialEq, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(try_from = "raw::RawChaosConfig")
)]
pub struct ChaosConfig {
    enabled: bool,
    rules: Vec<FaultRule>,
}

impl ChaosConfig {
    /// A builder starting from the defaults (disabled, no rule).
    pub fn builder() -> ChaosConfigBuilder {
        ChaosConfigBuilder {
            config: Self::default(),
            error: None,
        }
    }

    /// Whether faults are injected.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The rules, in the order they are tried.
    pub fn rules(&self) -> &[FaultRule] {
        &self.rules
    }
}

/// Builds a [`ChaosConfig`], checking every rule.
#[derive(Clone, Debug)]
pub struct ChaosConfigBuilder {
    config: ChaosConfig,
    error: Option<ConfigError>,
}

impl ChaosConfigBuilder {
    /// Injects as soon as the injector is made (default false: switch it on with
    /// [`Chaos::enable`]).
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.config.enabled = enabled;
        self
    }

    fn push(mut self, rule: Result<FaultRule, ConfigError>) -> Self {
        let n = self.config.rules.len();
        match rule {
            Ok(r) => self.config.rules.push(r),
            Err(e) if self.error.is_none() => {
                self.error = Some(ConfigError::new(
                    format!("rules[{n}].{}", e.field()),
                    e.value(),
                    e.allowed(),
                ));
            }
            Err(_) => {}
        }
        self
    }

    /// Adds a rule.
    pub fn rule(self, rule: FaultRule) -> Self {
        self.push(Ok(rule))
    }

    /// Adds an extra delay of `delay` for a share `rate` of calls.
    pub fn latency(self, rate: f64, delay: Duration) -> Self {
        self.push(FaultRule::latency(rate, delay))
    }

    /// Adds an [`InjectedFault`] error for a share `rate` of calls.
    pub fn error(self, rate: f64) -> Self {
        self.push(FaultRule::error(rate))
    }

    /// Adds a hang for a share `rate` of calls.
    pub fn hang(self, rate: f64) -> Self {
        self.push(FaultRule::hang(rate))
    }

    /// The configuration.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tripline_policies::chaos::ChaosConfig;
    ///
    /// let err = ChaosConfig::builder().error(0.1).latency(0.2, Duration::ZERO).build().unwrap_err();
    /// assert_eq!(err.to_string(), "rules[1].delay must be in (0ns, 86400s], got 0ns");
    /// ```
    pub fn build(self) -> Result<ChaosConfig, ConfigError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.config.rules.len() > MAX_RULES {
            return Err(ConfigError::new(
                "rules",
                format!("{} rules", self.config.rules.len()),
                format!("at most {MAX_RULES} rules"),
            ));
        }
        Ok(self.config)
    }
}

/// Counts of what the injector decided since it was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChaosStats {
    /// Calls decided while enabled (the predicate's choice included, on the tower layer).
    pub calls: u64,
    /// Calls delayed.
    pub latency: u64,
    /// Calls failed with an [`InjectedFault`].
    pub errors: u64,
    /// Calls hung.
    pub hangs: u64,
}

struct Inner {
    enabled: AtomicBool,
    /// Guards the rules (swapped whole by `reconfigure`, cloned out by each decision). Nothing
    /// runs under it but that swap or clone.
    rules: Mutex<Arc<[FaultRule]>>,
    /// The generator, drawn from with no lock held (it may call back in): see `crate::draws`.
    draws: Draws,
    calls: AtomicU64,
    latency: AtomicU64,
    errors: AtomicU64,
    hangs: AtomicU64,
}

/// A fault injector shared by every call it may hit. Cloning is cheap; clones share the
/// switch, the rules and the counts. See the [module docs](self).
#[derive(Clone)]
pub struct Chaos {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Chaos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chaos")
            .field("enabled", &self.is_enabled())
            .field("rules", &self.config().rules)
            .finish_non_exhaustive()
    }
}

impl Default for Chaos {
    /// A disabled injector with no rule.
    fn default() -> Self {
        Self::new(ChaosConfig::default())
    }
}

impl Chaos {
    /// An injector drawing from a generator seeded by the OS.
    pub fn new(config: ChaosConfig) -> Self {
        Self::with_rng(config, rand_pcg::Pcg64Mcg::from_os_rng())
    }

    /// An injector drawing from `rng` (seed it to hit the same calls on every run). The
    /// generator runs with no lock of the injector held, so it may call the injector; a
    /// decision made while it is in use (by another thread, or from inside it) draws from the
    /// injector's own spare stream instead of waiting for it.
    pub fn with_rng(config: ChaosConfig, rng: impl RngCore + Send + 'static) -> Self {
        Self {
            inner: Arc::new(Inner {
                enabled: AtomicBool::new(config.enabled),
                rules: Mutex::new(config.rules.into()),
                draws: Draws::new(rng),
                calls: AtomicU64::new(0),
                latency: AtomicU64::new(0),
                errors: AtomicU64::new(0),
                hangs: AtomicU64::new(0),
            }),
        }
    }

    /// Starts injecting.
    pub fn enable(&self) {
        self.set_enabled(true);
    }

    /// Stops injecting; calls already delayed or hung stay so.
    pub fn disable(&self) {
        self.set_enabled(false);
    }

    /// Switches injection on or off.
    pub fn set_enabled(&self, enabled: bool) {
        self.inner.enabled.store(enabled, Ordering::Release);
    }

    /// Whether faults are injected now.
    pub fn is_enabled(&self) -> bool {
        self.inner.enabled.load(Ordering::Acquire)
    }

    /// Replaces the rules and the switch at run time.
    pub fn reconfigure(&self, config: ChaosConfig) {
        *crate::lock(&self.inner.rules) = config.rules.into();
        self.set_enabled(config.enabled);
    }

    /// The rules and the switch now.
    pub fn config(&self) -> ChaosConfig {
        ChaosConfig {
            enabled: self.is_enabled(),
            rules: crate::lock(&self.inner.rules).to_vec(),
        }
    }

    /// The fault for one call, if any, counted: the first rule whose draw (32 random bits,
    /// compared with the rate in millionths in integers) falls below its rate. `None` while
    /// disabled, without a draw.
    pub fn decide(&self) -> Option<Fault> {
        let i = &*self.inner;
        if !i.enabled.load(Ordering::Acquire) {
            return None;
        }
        i.calls.fetch_add(1, Ordering::Relaxed);
        let rules = Arc::clone(&crate::lock(&i.rules));
        let fault = i.draws.with(|rng| {
            rules.iter().find_map(|r| {
                let u = u64::from(rng.next_u32());
                (u * 1_000_000 < u64::from(r.rate_ppm) << 32).then_some(r.fault)
            })
        })?;
        let counter = match fault {
            Fault::Latency(_) => &i.latency,
            Fault::Error => &i.errors,
            Fault::Hang => &i.hangs,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Some(fault)
    }

    /// Decides, and applies the fault on tokio's timer: waits out a latency, fails with an
    /// [`InjectedFault`], or never completes. Run it just before the call it plays the
    /// dependency for.
    pub async fn inject(&self) -> Result<(), InjectedFault> {
        apply(self.decide()).await
    }

    /// What the injector decided so far.
    pub fn stats(&self) -> ChaosStats {
        let i = &*self.inner;
        ChaosStats {
            calls: i.calls.load(Ordering::Relaxed),
            latency: i.latency.load(Ordering::Relaxed),
            errors: i.errors.load(Ordering::Relaxed),
            hangs: i.hangs.load(Ordering::Relaxed),
        }
    }
}

/// Applies a decided fault on tokio's timer.
pub(crate) async fn apply(fault: Option<Fault>) -> Result<(), InjectedFault> {
    match fault {
        None => Ok(()),
        Some(Fault::Latency(d)) => {
            tokio::time::sleep(d).await;
            Ok(())
        }
        Some(Fault::Error) => Err(InjectedFault::new()),
        Some(Fault::Hang) => std::future::pending().await,
    }
}

/// Which requests the tower layer may hit: any `Fn(&Req) -> bool`, or [`AllRequests`].
pub trait Targets<Req> {
    /// Whether `req` may take a fault.
    fn targets(&self, req: &Req) -> bool;
}

impl<Req, F: Fn(&Req) -> bool> Targets<Req> for F {
    fn targets(&self, req: &Req) -> bool {
        self(req)
    }
}

/// Every request may take a fault.
#[derive(Clone, Copy, Debug, Default)]
pub struct AllRequests;

impl<Req> Targets<Req> for AllRequests {
    fn targets(&self, _: &Req) -> bool {
        true
    }
}

#[cfg(feature = "tower")]
mod service {
    use std::task::{Context, Poll};

    use tower_service::Service;

    use super::future::ResponseFuture;
    use super::{AllRequests, Chaos, Fault, Targets};
    use crate::BoxError;

    /// A service with faults injected into the requests `W` targets. Made by
    /// [`ChaosLayer`](super::ChaosLayer).
    ///
    /// A latency delays the response: the inner service is called at once (its future, lazy
    /// as futures are, is first polled after the delay). An error fails the request with an
    /// [`InjectedFault`](super::InjectedFault) and a hang never completes; neither calls the
    /// inner service. Readiness is the inner service's. Nothing is allocated per request.
    #[derive(Clone, Debug)]
    pub struct ChaosService<S, W = AllRequests> {
        inner: S,
        chaos: Chaos,
        targets: W,
    }

    impl<S, W> ChaosService<S, W> {
        /// `inner` with faults from `chaos` for the requests `targets` selects.
        pub const fn new(inner: S, chaos: Chaos, targets: W) -> Self {
            Self {
                inner,
                chaos,
                targets,
            }
        }

        /// The injector.
        pub fn chaos(&self) -> &Chaos {
            &self.chaos
        }

        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// The inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    }

    impl<S, W, Req> Service<Req> for ChaosService<S, W>
    where
        S: Service<Req>,
        S::Error: Into<BoxError>,
        W: Targets<Req>,
    {
        type Response = S::Response;
        type Error = BoxError;
        type Future = ResponseFuture<S::Future>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            self.inner.poll_ready(cx).map_err(Into::into)
        }

        fn call(&mut self, req: Req) -> Self::Future {
            let fault = if self.chaos.is_enabled() && self.targets.targets(&req) {
                self.chaos.decide()
            } else {
                None
            };
            match fault {
                None => ResponseFuture::pass(self.inner.call(req)),
                Some(Fault::Latency(d)) => ResponseFuture::delayed(self.inner.call(req), d),
                Some(Fault::Error) => ResponseFuture::failed(),
                Some(Fault::Hang) => ResponseFuture::hung(),
            }
        }
    }
}

#[cfg(feature = "tower")]
pub use service::ChaosService;

#[cfg(feature = "serde")]
mod raw {
    //! The serialized form.
    use std::time::Duration;

    use serde::Deserialize;
    use tripline::ConfigError;

    use super::{ChaosConfig, Fault, FaultRule};

    #[derive(Deserialize)]
    #[serde(tag = "fault", rename_all = "kebab-case", deny_unknown_fields)]
    enum RawRule {
        Latency {
            rate: f64,
            #[serde(with = "tripline::duration::serde")]
            delay: Duration,
        },
        Error {
            rate: f64,
        },
        Hang {
            rate: f64,
        },
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct RawChaosConfig {
        #[serde(default)]
        enabled: bool,
        #[serde(default)]
        rules: Vec<RawRule>,
    }

    impl TryFrom<RawChaosConfig> for ChaosConfig {
        type Error = ConfigError;
        fn try_from(r: RawChaosConfig) -> Result<Self, ConfigError> {
            let mut b = ChaosConfig::builder().enabled(r.enabled);
            for rule in r.rules {
                let (fault, rate) = match rule {
                    RawRule::Latency { rate, delay } => (Fault::Latency(delay), rate),
                    RawRule::Error { rate } => (Fault::Error, rate),
                    RawRule::Hang { rate } => (Fault::Hang, rate),
                };
                b = b.push(FaultRule::new(fault, rate));
            }
            b.build()
        }
    }
}
