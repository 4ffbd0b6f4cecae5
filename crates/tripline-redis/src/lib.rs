//! One circuit breaker for a whole fleet: the window and state of a
//! [tripline](https://docs.rs/tripline) breaker in Redis, so that twelve replicas trip,
//! probe and recover as one breaker instead of each learning on its own.
//!
//! ```no_run
//! use std::time::Duration;
//! use tripline::BreakerConfig;
//! use tripline_redis::{Backend, SharedBreaker, SharedConfig};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let breaker = SharedBreaker::new(
//!     "dep:exercise-catalog",
//!     BreakerConfig::default(),
//!     SharedConfig::default(),
//!     Backend::single("redis://127.0.0.1:6379/")?,
//! )?;
//! let card = breaker
//!     .call_or_else(
//!         Some(Duration::from_millis(2500)),
//!         || async { Ok::<_, std::io::Error>("exercise details") },
//!         |_rejected_or_failed| async { "cached card" },
//!     )
//!     .await;
//! # let _ = card;
//! # Ok(())
//! # }
//! ```
//!
//! # How it works
//! * **One script, the same rules.** Admission, recording, probe release, timers and operator
//!   actions are one Lua script run with `EVALSHA` (reloaded once on `NOSCRIPT`). It is a
//!   second implementation of the in-process breaker's rules, and it passes the same
//!   conformance vectors (`tripline::conformance`): identical decisions, verdicts, states,
//!   windows and transitions. A differential property test runs random configurations and
//!   histories on both and requires them to agree at every step. One known difference: past
//!   65,535 calls in one time-window bucket the in-process window halves that bucket's 16-bit
//!   counts (keeping its rates), while the script keeps counting exactly. Rates are compared in integers, in parts per million
//!   (`failures * 1_000_000 >= ppm * calls`), the same integers the in-process breaker uses;
//!   a 100 % threshold still trips.
//! * **Keys.** All keys of one breaker share the hash tag `{prefix:scope}` (a Redis Cluster
//!   keeps them in one slot) and every one is declared in `KEYS`: the record (a hash), the
//!   window (a string ring of one byte per outcome for a count window, a hash of buckets
//!   for a time window), the in-flight and quorum hashes and a capped events stream. Scopes
//!   are chosen by the user (`dep:payments`, `region:eu-west`, `tenant:acme`) and become key
//!   names: never put credentials or personal data in them.
//! * **Time** is Redis `TIME`, read inside the script and clamped so it never goes backwards,
//!   so replicas with skewed clocks agree. Replicas measure call durations (for the slow-call
//!   rule) with their own monotonic clocks, which needs no agreement. The script keeps time
//!   and durations in whole microseconds.
//! * **Epochs.** Every transition bumps the epoch except Open → HalfOpen. A permit carries
//!   the epoch it was admitted in; a result from another epoch is discarded as stale.
//! * **Probes** are fleet-wide: HalfOpen admits at most `half_open.permitted_calls` probes
//!   across all replicas, each holding a lease with a token and a deadline
//!   (`half_open.probe_lease`, which must exceed the slowest probe: put the timeout inside).
//!   An expired lease is reclaimed by the next acquire, not before; the late result of its
//!   probe, or any result with a token that is no longer the lease's, is stale. Abandoning a
//!   probe releases its lease.
//! * **Expiry.** A record that is not Closed never expires (`PTTL` is -1), so a memory policy
//!   like `volatile-lru` can never evict an Open breaker into admitting everything. A Closed
//!   record expires after `idle_ttl` without traffic; windows expire with their data. A
//!   missing record reads as Closed and starts over, with an epoch taken from the clock so
//!   that permits of a lost record cannot match it. Starting a replica writes nothing.
//! * **No lock across the call.** Acquire and record are separate atomic scripts; nothing is
//!   held while the protected call runs.
//! * **Round trips.** A replica decides from the state Redis last returned while that view
//!   is younger than `view_ttl` (100 ms by default): a Closed breaker costs one round trip
//!   per call (the record, whose answer refreshes the view), an Open breaker one per
//!   `view_ttl` (so an operator's reset reaches every replica), a HalfOpen breaker that has
//!   no probe to give one per `view_ttl` or per expiring lease, whichever comes first. `view_ttl = 0` asks Redis on every acquire. A replica that has not
//!   recorded for a while learns of a fleet-wide trip within `view_ttl`.
//! * **Batching** (optional): while Closed, outcomes are buffered and sent together every
//!   `flush_every` or `max_batch` outcomes, whichever comes first; the script applies them
//!   in order, so a trip happens at the outcome that causes it and the rest of the batch is
//!   stale. Failures carrying a `Retry-After` hint and every probe are sent at once. A
//!   replica keeps one batch in flight (sent by the caller whose outcome made it due, or by a
//!   background flusher; a caller sends at most one, and one that is cancelled mid-send
//!   gives the role back); outcomes arriving meanwhile wait for the next one, up
//!   to 16 batches' worth, beyond which they reach only the shadow breaker (counted in
//!   [`SharedMetrics::lost_records`]): a replica cannot queue more work on Redis than Redis
//!   applies.
//! * **Calls in flight past the slow-call duration** count as slow before they finish, as in
//!   the in-process breaker: each replica tracks its own calls with the same cohort rule
//!   ([`tripline::inflight::InFlight`]), sends its overdue count with every outcome and, once
//!   per half slow-call duration, with an acquire that asks Redis to evaluate every rule (the
//!   in-process breaker's periodic check); the script adds the counts of the current epoch
//!   that are still fresh.
//! * **Quorum** (optional): the breaker trips on the rules only when failures or slow calls
//!   come from at least `quorum.replicas` distinct replicas within `quorum.within`, so one
//!   replica with a broken network cannot open it for the fleet.
//! * **Redis is a dependency too.** Every script call is bounded by `redis_timeout` (25 ms by
//!   default) and goes through a breaker on Redis itself (a tripline
//!   [`CircuitBreaker`](tripline::CircuitBreaker), 3 consecutive failures, 1 s open). While
//!   Redis is unreachable a replica decides with its local shadow breaker, which has seen
//!   this replica's outcomes all along ([`Fallback::Local`], the default), or rejects
//!   ([`Fallback::Reject`]); [`SharedBreaker::mode`] and [`SharedMetrics`] say so. Calls in
//!   flight when Redis stalls time out together and each counts as a failure, so one stall
//!   longer than `redis_timeout` with three calls in flight opens the breaker on Redis for a
//!   second; where such stalls are normal, raise `redis_timeout` or give
//!   [`SharedConfigBuilder::redis_breaker`] a rate-based configuration. It returns
//!   to shared decisions by itself once a probe call to Redis succeeds. A script call that
//!   timed out is abandoned by the replica but not by Redis: a paused or overloaded server may
//!   still run it later, so an outcome counted as lost can still land, and an admission that
//!   nobody waits for anymore can hold a probe lease until its deadline.
//! * **Events.** Exactly one replica performs each transition; it publishes it to its
//!   subscribers ([`SharedBreaker::subscribe`]) and the script appends it to the events
//!   stream ([`SharedBreaker::fleet_events`]).
//!
//! Every replica of a scope should use the same [`tripline::BreakerConfig`]: the script takes
//! the configuration from each call.

mod backend;
mod config;
mod health;
#[cfg(feature = "server")]
pub mod server;
mod store;

pub use backend::Backend;
pub use config::{
    Batching, Fallback, MAX_BATCH, Quorum, SharedConfig, SharedConfigBuilder, TimeSource,
};
pub use health::{CheckError, Health};
pub use store::{
    FleetEvent, Keys, Mode, REDIRECTIONS_FORGIVEN, SharedBreaker, SharedMetrics, SharedPermit,
    Snapshot, Transition,
};
