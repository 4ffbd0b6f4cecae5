//! # tripline
//!
//! A circuit breaker per dependency: it watches recent outcomes and, once the evidence says the
//! dependency is sick (a failure rate or a slow-call rate at or above its threshold over a
//! sliding window, with a minimum number of calls seen, or a run of consecutive failures), it
//! fails calls in nanoseconds instead of letting them pile up on a dependency that is already
//! falling over. After an open wait it admits a bounded number of probes, and only the probes'
//! results can close it again. "Open" means calls are blocked, as in an electrical circuit.
//!
//! ```
//! use tripline::{BreakerConfig, CallError, CircuitBreaker, ManualClock, State};
//! use std::time::Duration;
//!
//! // The GymFolks team's breaker for a flaky exercise-catalog vendor.
//! let config = BreakerConfig::builder()
//!     .count_window(20)
//!     .minimum_calls(10)
//!     .failure_rate_threshold(50.0)
//!     .slow_call_rate_threshold(30.0)
//!     .slow_call_duration(Duration::from_secs(2))
//!     .open_duration(Duration::from_secs(15))
//!     .half_open_calls(3)
//!     .build()?;
//! let clock = ManualClock::new();
//! let breaker = CircuitBreaker::with_clock("exercise-catalog", config, clock.clone());
//!
//! for _ in 0..10 {
//!     let _ = breaker.call(|| Err::<(), _>("503"));
//! }
//! assert_eq!(breaker.state(), State::Open);
//! let r = breaker.call(|| Ok::<_, &str>("never called"));
//! assert!(matches!(r, Err(CallError::Rejected(_))));
//!
//! clock.advance(Duration::from_secs(15));
//! for _ in 0..3 {
//!     breaker.call(|| Ok::<_, &str>("recovered")).unwrap();
//! }
//! assert_eq!(breaker.state(), State::Closed);
//! # Ok::<(), tripline::ConfigError>(())
//! ```
//!
//! ## The rules
//! * States: [`State::Closed`], [`State::Open`], [`State::HalfOpen`], and the operator states
//!   [`State::Disabled`], [`State::MetricsOnly`], [`State::ForcedOpen`]. Automatic edges are
//!   only Closed→Open (trip), Open→HalfOpen (wait elapsed), HalfOpen→Closed (probes proved
//!   recovery) and HalfOpen→Open (probes failed, or no verdict within `half_open.max_wait`).
//!   Closed never goes to HalfOpen and Open never goes straight to Closed.
//! * Rates are compared in integer parts per million: `bad × 10⁶ ≥ threshold_ppm × total`, so a
//!   100 % threshold trips when every call is bad, and a threshold that is not a whole number
//!   of ppm is rounded toward tripping (`100 × 2 / 3` percent trips at 2 failures of 3). Every
//!   rule is a pure function in [`rules`], with its worked cases.
//! * No lock of the breaker's is held while user code runs: events (transitions, rejections,
//!   outcomes) are queued in sequence order and delivered after every lock is released, and
//!   the clock is read before any lock is taken, so a listener, a clock or a metrics recorder
//!   may call back into the breaker (see [`Listener`]).
//! * Every transition bumps a generation. A [`Permit`] carries the generation it was granted in;
//!   a result from an older generation is discarded and counted ([`Recorded::Stale`]).
//!   [`CircuitBreaker::counts`] gives the current generation's [`Counts`] (gobreaker's:
//!   calls admitted, successes, failures, ignored, abandoned, in flight, refused), and an
//!   optional fixed Closed interval ([`BreakerConfigBuilder::interval`], gobreaker's
//!   `Interval`) starts a new generation at each boundary, every count cleared.
//! * The open wait is `open.duration` with optional jitter, backoff and a capped `Retry-After`
//!   hint, or the result of a function of the open period
//!   ([`BreakerConfigBuilder::open_duration_fn`], Polly's `BreakDurationGenerator`), called
//!   with no lock held and clamped to [1ms, 7 days].
//! * Half-open probes are leases with a deadline (`half_open.probe_lease`); an expired lease is
//!   reclaimed by the next acquire after its deadline, and a result arriving once its lease was
//!   reclaimed is refused as stale (a late result that beats every reclaim still counts; the
//!   Redis store follows the same rule).
//! * Calls still in flight past the slow-call duration count as slow (see the rule in
//!   [`WindowSnapshot::in_flight_slow`] and the `inflight` notes in the README).
//! * Operators move a breaker with [`CircuitBreaker::transition_to`] and its `transition_to_*`
//!   siblings along the edges of [`State::operator_targets`]; a missing edge (HalfOpen from
//!   Disabled, say) is a [`TransitionError`] that lists the edges there are.
//! * A refusal says why ([`RejectReason`]) and what its `retry_after` means; a classifier may
//!   label a failure with a [`FailureKind`] that the breaker counts, ignores or weighs.
//!
//! Coming from resilience4j, gobreaker, Polly or failsafe-go: `docs/porting.md` in the
//! repository maps their settings and calls to these, with the deliberate differences.
//!
//! ## Features
//! * `serde` (default): configurations from TOML or JSON, durations written like `"250ms"`.
//! * `tokio`: [`CircuitBreaker::call_async`] with the timeout inside the breaker, a fallback
//!   helper, [`TokioClock`] for paused-time tests and `run_timer` for automatic transitions.
//! * `metrics`: [`observe::BreakerMetrics`], breaker figures through the `metrics` facade.
//! * `tracing`: [`observe::TracingListener`], transitions as `tracing` events.
//! * `trace`: [`trace`], a recorder that writes every call's outcome and duration to a trace
//!   (JSON Lines or CSV) from a background thread, and a reader for traces; `tripline replay`
//!   and `tripline tune` replay them to choose a configuration from data.
//!
//! [`shadow::ShadowCandidate`] runs a candidate configuration beside the live breaker on the
//! live traffic and reports where the two would have decided differently.
//!
//! [`Breaker`] is the one interface of every host of the rules (this in-process breaker and
//! the fleet-wide one in `tripline-redis`): the policies, the metrics and the operator's page
//! are generic over it, so going from one replica to a fleet changes the line that builds the
//! breaker, not the call path (see [`host`]).
//!
//! [`registry::Registry`] keeps keyed breakers (per dependency, endpoint, host, tenant, shard),
//! bounded in memory and never evicting one that is not Closed.
//!
//! The [`rules`] module holds every decision as a pure function over plain values, with worked
//! cases; the breaker is a host of those functions in atomics. The [`conformance`] module holds
//! the rules as data (step-by-step vectors) with a runner, so every host (the pure rules, the
//! in-process breaker, the Redis store) is checked against the same expectations.
//!
//! (A link to an item of a feature that is off leads to the features above.)
//!
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`CircuitBreaker::call_async`]: #features\n[`TokioClock`]: #features"
)]
#![cfg_attr(
    not(feature = "metrics"),
    doc = "[`observe::BreakerMetrics`]: #features"
)]
#![cfg_attr(
    not(feature = "tracing"),
    doc = "[`observe::TracingListener`]: #features"
)]
#![cfg_attr(not(feature = "trace"), doc = "[`trace`]: #features")]
#![cfg_attr(not(feature = "serde"), doc = "[`conformance`]: #features")]
#![forbid(unsafe_code)]

mod breaker;
mod clock;
pub mod config;
#[cfg(feature = "serde")]
pub mod conformance;
pub mod duration;
mod error;
mod event;
pub mod host;
pub mod inflight;
mod lifecycle;
pub mod observe;
mod operator;
mod outcome;
pub mod registry;
pub mod rules;
pub mod shadow;
mod state;
mod sync;
#[cfg(feature = "trace")]
pub mod trace;
mod window;

pub use breaker::{
    CircuitBreaker, Counts, KindCounts, Metrics, OwnedPermit, Permit, ProbeCounts, Recorded,
    Rejections,
};
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use config::{
    AfterMaxWait, Backoff, BreakerConfig, BreakerConfigBuilder, FailureCount, FailureKindWeights,
    HalfOpenPolicy, OpenDurationFn, OpenWaitArgs, RampCurve, RampUp, WindowConfig,
};
pub use error::{
    BreakerName, CallError, ConfigError, RejectReason, Rejected, TransitionError, TripCause,
};
pub use event::{Event, EventKind, EventLog, Listener, Reason};
pub use host::{Breaker, BreakerPermit, OperatorError, Reach};
pub use outcome::{Blaming, Classification, Classify, FailureKind, Outcome, ResultClassifier};
pub use state::State;
pub use window::WindowSnapshot;
