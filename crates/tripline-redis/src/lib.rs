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
//! # Where the in-process breaker goes, this one goes
//! [`SharedBreaker`] implements [`tripline::Breaker`], the interface of every host of the
//! rules, so it takes the in-process breaker's place unchanged: in the pipeline
//! (`Pipeline::builder().breaker(shared)`), the tower `BreakerLayer` and the gRPC layer (it is
//! asked in `poll_ready`, since admission may need a round trip), the reqwest
//! `BreakerMiddleware`, the metrics (`BreakerMetrics::for_breaker`: the in-process breaker's
//! series and labels, the hashed label where scopes are hashed) and the operator's page
//! (`DashboardBuilder::shared_breaker`: its kill switch is thrown in Redis). The change from one
//! replica to a fleet is the line that builds the breaker. [`SharedRegistry`] holds one per
//! key (endpoint, tenant, shard), keyed, configured and bounded as the in-process registry is
//! (its docs say why it is a holder of its own); it is a
//! [`ScopeHolder`](tripline::registry::ScopeHolder), so
//! [`DirectedOn`](tripline::registry::DirectedOn) runs server-directed shard breakers on it:
//! the shard the server blames is tripped fleet-wide.
//!
//! # How it works
//! * **One library, the same rules.** Admission, recording, probe release, timers and operator
//!   actions are functions of one Redis Functions library (`tripline_6`), called with `FCALL`;
//!   each runs atomically. A node that answers that it lacks the library is given it with
//!   `FUNCTION LOAD` (without `REPLACE`), once per backend at a time: when a node loses it
//!   (a restart, a `FUNCTION FLUSH`) the first replica's load wins and every other replica's
//!   load is refused at once ("already exists", a few microseconds: nothing is compiled). The
//!   name changes with every change of the library's text (a test pins the text to the name),
//!   so during a rolling upgrade replicas of two releases each call their own library over the
//!   same keys; see "Rolling upgrades" below. It is a second implementation of the in-process
//!   breaker's rules, and it passes the same conformance vectors (`tripline::conformance`):
//!   identical decisions, verdicts, states, windows and transitions. A differential property
//!   test runs random configurations and histories on both and requires them to agree at every
//!   step. Every rule of [`tripline::BreakerConfig`] is hosted; see "Every rule" below. Known
//!   differences: past 2,097,151 calls in one time-window bucket the in-process window halves
//!   that bucket's 21-bit counts (keeping its rates), while the library counts exactly (up to
//!   2³² per bucket); and a breaker that has not left Closed counts its time Closed (for the
//!   backoff's `healthy_after`) from the first call that made its record, not from when a
//!   replica started. Rates are compared in integers, in parts per million
//!   (`failures * 1_000_000 >= ppm * calls`), the same integers the in-process breaker uses; a
//!   100 % threshold still trips. Redis 7.0 or later is required (Functions); Valkey works too.
//! * **Every rule.** Thresholds, windows, minimum calls, the consecutive rule, the open wait
//!   with jitter and backoff, `Retry-After` hints, half-open probes under either policy, the
//!   maximum half-open wait and where it goes (`half_open.after_max_wait`, Open or Closed),
//!   automatic transitions, failure-kind weights (a failure weighing `n` is `n` outcomes in the
//!   fleet's window and in its run of consecutive failures; a kind weighing 0 is ignored) and
//!   calls in flight run in the functions, fleet-wide. `slow_call_rule = false` is the
//!   replica's (no call it times is slow, and it reports no calls in flight). Three rules are
//!   each replica's by nature, and run there: **lumping** (`lumping_interval` folds one
//!   client's burst of errors into one, as Semian's lumping does: each replica lumps its own
//!   failures, and a lumped failure is not sent), the **ramp** after recovery (`ramp_up`: each
//!   replica admits the ramp's share of its own calls from the moment the fleet's probes closed
//!   the breaker, by the in-process rule; of the first `n` calls of a step `floor(n × share)`,
//!   so the replicas together never admit more than one breaker seeing all their calls would;
//!   [`SharedMetrics::ramp_rejections`]), and **call durations** (`call_durations`: measured by
//!   each replica on its own clock, kept over the calls of this replica that the fleet counted,
//!   in a window of the breaker's shape that starts afresh whenever the fleet enters Closed:
//!   [`SharedMetrics::mean_duration`]). Operator transitions are the in-process ones, fleet-wide:
//!   [`SharedBreaker::transition_to`], [`SharedBreaker::transition_to_open_for`],
//!   [`SharedBreaker::transition_to_open_until`], [`SharedBreaker::transition_to_half_open`]
//!   and the rest, judged by the state Redis holds. Two settings of the in-process breaker
//!   are not hosted yet, and [`SharedBreaker::new`] refuses a configuration that sets them
//!   (naming the field), rather than run without them: the fixed Closed `interval` (the
//!   fleet's Closed generation lasts until its state changes) and the open-wait function
//!   `open_duration_fn` (the fleet opens for the configured wait).
//! * **Lean calls.** The library's helpers are created once, when it is loaded, not per call.
//!   The configuration is stored once per scope, in the scope's config hash, under a version
//!   (a hash of the configuration), and each call carries only the version; a node parses a
//!   version once and keeps it. The record is one string, a MessagePack map: a call in Closed
//!   reads it with one `GET` and writes it back with one `SET`; a count window of at most 512
//!   outcomes lives in the record itself, a larger ring in the window key (one `BITFIELD` per
//!   outcome), and a time window's buckets there too (one `BITFIELD` per call, and at a bucket
//!   boundary the buckets that left the window are cleared with at most two `GETRANGE`s and
//!   two `SETRANGE`s, decoding at most half the ring whatever the idle gap, never an argument
//!   list or a Lua stack that grows with it). TTLs are renewed once per eighth of `idle_ttl`,
//!   not per call. A rejection writes nothing. BENCHMARKS.md has the cost in Redis CPU per
//!   call.
//! * **Keys.** All keys of one breaker share the hash tag `{prefix:scope}` (a Redis Cluster
//!   keeps them in one slot) and every one is declared to the functions: the record (a hash),
//!   the window (a string), the in-flight hash, the quorum's votes (a sorted set), a capped
//!   events stream and the config hash ([`Keys`]). Scopes are chosen by the user
//!   (`dep:payments`, `region:eu-west`, `tenant:acme`) and become key names: never put
//!   credentials or personal data in them, or hash them: with
//!   [`SharedConfigBuilder::hash_scopes`] every scope is known outside the process only by a
//!   keyed hash of it (HMAC-SHA256 with a secret the application supplies): Redis keys, the
//!   shadow breaker's name (so its metrics labels and traces), rejections and log lines carry
//!   `h:` and 32 hex digits ([`SharedBreaker::label`]), the readable scope stays in the process
//!   ([`SharedBreaker::name`]). A scope is 1 to 200 bytes without braces (1 to 1024 bytes of
//!   anything when hashed).
//! * **Time** is Redis `TIME`, read inside the functions and clamped so it never goes
//!   backwards, so replicas with skewed clocks agree. Replicas measure call durations (for the
//!   slow-call rule) with their own monotonic clocks, which needs no agreement. The functions
//!   keep time and durations in whole microseconds.
//! * **Epochs and origins.** Every transition moves the epoch except Open → HalfOpen, to
//!   `max(epoch + 1, now)` (the functions' clock, microseconds). A permit carries the epoch it
//!   was admitted in and the record's *origin*; a result from another epoch or origin is
//!   discarded as stale. A missing record reads as Closed and starts over with an epoch taken
//!   from the clock and a new origin, which every reply carries: the new record never has the
//!   lost one's origin, so permits of a lost record never count in the record that replaced it.
//!   A record that a failover rolled back keeps its origin and goes back to an older epoch;
//!   since epochs never fall below the clock, its next transitions take epochs later than any
//!   of the history it lost (all taken before the failover, on clocks that agree to within the
//!   failover's time), so a permit of that history never counts either.
//! * **Probes** are fleet-wide: HalfOpen admits at most `half_open.permitted_calls` probes
//!   across all replicas, each holding a lease with a token (chosen at random by the replica)
//!   and a deadline (`half_open.probe_lease`, which must exceed the slowest probe: put the
//!   timeout inside; `redis_timeout` must be shorter). A probe's result counts while its lease
//!   is held: until the result or an abandon releases it, or until an acquire after the
//!   deadline reclaims it; a result whose lease was reclaimed, or whose token is not the
//!   lease's, is stale. (So a result that arrives after the deadline still counts if no acquire
//!   has reclaimed its slot meanwhile, exactly as in-process.) A claim that nobody will use
//!   costs nothing: an admission carries the caller's deadline (its Redis timeout, in the
//!   functions' clock as estimated from the last reply) and claims no lease once that has
//!   passed, and a caller that gives up on an admission (a paused or overloaded Redis) sends a
//!   release for its token right behind it.
//! * **Expiry.** A record that is not Closed never expires (`PTTL` is -1). A Closed record
//!   expires after `idle_ttl` without traffic (renewed lazily: between 7/8 of `idle_ttl` and
//!   `idle_ttl` after its last call); windows, votes, events and configurations expire too.
//!   Starting a replica writes nothing.
//! * **No lock across the call.** Acquire and record are separate atomic functions; nothing is
//!   held while the protected call runs.
//! * **Round trips.** A replica decides from the state Redis last returned while that view is
//!   younger than `view_ttl` (100 ms by default): a Closed breaker costs one round trip per
//!   call (the record, whose answer refreshes the view), an Open breaker one per `view_ttl` (so
//!   an operator's reset reaches every replica), a HalfOpen breaker that has no probe to give
//!   one per `view_ttl` or per expiring lease, whichever comes first. `view_ttl = 0` asks Redis
//!   on every acquire. A replica that has not recorded for a while learns of a fleet-wide trip
//!   within `view_ttl`.
//! * **Batching** (optional, [`Batching`]): while Closed, outcomes are buffered and sent
//!   together; the functions apply them in order, so a trip happens at the outcome that causes
//!   it and the rest of the batch is stale. A batch goes out when it holds `max_batch`
//!   outcomes, when a failure or slow call in it has waited `flush_every`, or when its oldest
//!   outcome has waited `success_wait`; one call never applies more than `max_batch` outcomes
//!   (at most [`MAX_BATCH`]), so no replica holds Redis for long. Failures carrying a
//!   `Retry-After` hint and every probe are sent at once, behind what is already buffered. A
//!   breaker dropped with outcomes buffered still sends them (its flusher keeps it until the
//!   buffer is empty) as long as the runtime runs: call [`SharedBreaker::flush`] before
//!   shutting the runtime down. A replica keeps one batch in flight;
//!   outcomes arriving meanwhile wait for the next one, up to 16 batches' worth, beyond which
//!   they reach only the shadow breaker (counted in [`SharedMetrics::lost_records`]).
//!   [`Batching::lean`] (failures within 10 ms, successes within 250 ms) brings a healthy
//!   replica at 500 calls/s to a few hundredths of a round trip per call; its reaction delays
//!   are bounded: the fleet sees this replica's failures within `flush_every` plus a round
//!   trip, and this replica sees the fleet's trip within `view_ttl`.
//! * **Calls in flight past the slow-call duration** count as slow before they finish, as in
//!   the in-process breaker: each replica tracks its own calls with the same cohort rule
//!   ([`tripline::inflight::InFlight`]), sends its overdue count with outcomes and, once per
//!   half slow-call duration, with an acquire that asks Redis to evaluate every rule (the
//!   in-process breaker's periodic check); the functions add the counts of the current epoch
//!   that are still fresh.
//! * **Time windows' success gate.** As in-process, a failure or slow call always evaluates
//!   the rules; a fast success in a time window evaluates them when the last evaluation found
//!   fewer than `minimum_calls` calls (or none has happened in this epoch), or when the clock
//!   has entered a new bucket since the last success evaluated.
//! * **Quorum** (optional): the breaker trips on the rules only when failures or slow calls
//!   come from at least `quorum.replicas` distinct replicas within `quorum.within`, so one
//!   replica with a broken network cannot open it for the fleet. Votes live in a sorted set by
//!   time, trimmed to `quorum.within` (and to 10,000 replicas) whenever one is cast or
//!   counted, so churning replica ids do not pile up.
//! * **Redis is a dependency too.** Every call (an acquire, a record, with whatever it sends
//!   before it) is bounded by `redis_timeout` (25 ms by default) and goes through a breaker on
//!   Redis itself (a tripline
//!   [`CircuitBreaker`](tripline::CircuitBreaker), 3 consecutive failures, 1 s open). Connecting
//!   and authenticating happen outside that bound, in a supervisor task that keeps the reason
//!   of its last failed attempt: a call made without a connection fails at once with that
//!   reason ([`SharedBreaker::last_redis_error`]), and [`SharedBreaker::check`] reports it, or
//!   an ACL or an eviction policy that cannot host the breaker, before traffic arrives. Redis
//!   Cluster redirections and `TRYAGAIN` during a slot migration do not count against the
//!   breaker on Redis (up to [`REDIRECTIONS_FORGIVEN`] in a row). While Redis is unreachable a
//!   replica first keeps what it saw: a breaker it last saw Open keeps rejecting until the
//!   deadline it saw, one it saw ForcedOpen keeps rejecting. Otherwise its local shadow
//!   breaker decides ([`Fallback::Local`], the default), which has seen this replica's outcomes
//!   all along and follows the fleet's transitions (it trips with the fleet, so after the
//!   deadline it probes locally before it closes), or it rejects ([`Fallback::Reject`]);
//!   [`SharedBreaker::mode`] and [`SharedMetrics`] say so, and the first decision of each
//!   fallback episode is logged (a `tracing` warning with Redis's reason: a wrong URL, a wrong
//!   password, Redis down; the `tracing` feature is on by default), as is the return to shared
//!   decisions. A replica whose last view of the breaker was Closed cannot know of a trip that
//!   Redis has and it has not seen: while Redis is unreachable its local breaker admits what
//!   its own window allows (with [`Fallback::Reject`] nothing). The connection is watched: a
//!   `PING` every 200 ms finds a connection Redis dropped (a restart, a failover) or that
//!   stopped answering (a partition) without waiting for a call to fail on it, and it is made
//!   again within 250 ms of Redis answering. Calls in flight when Redis stalls
//!   time out together and each counts as a failure, so one stall longer than `redis_timeout`
//!   with three calls in flight opens the breaker on Redis for a second; where such stalls are
//!   normal, raise `redis_timeout` or give [`SharedConfigBuilder::redis_breaker`] a rate-based
//!   configuration. A call that timed out is abandoned by the replica but not by Redis: a
//!   paused or overloaded server may still run it later, so an outcome counted as lost can
//!   still land.
//! * **Lost state.** A record that is not Closed never expires, but Redis can still lose it: a
//!   restart without persistence, an `allkeys-*` eviction, a failover to a replica that had not
//!   received the trip, a `FLUSHALL`. A replica that saw the breaker Open (or HalfOpen, or
//!   ForcedOpen) within the last `idle_ttl` sends its view with every call, and the functions
//!   bring it back, in that same call, over a Closed record that cannot follow from it
//!   (another origin, or an epoch that went back): once fleet-wide (an event with reason
//!   `restored`, [`SharedMetrics::restores`] and [`SharedMetrics::lost_state`] on the replica
//!   that did it): Open until the deadline it saw (or with no wait left, so that the fleet
//!   probes before it closes), or ForcedOpen. Such a replica does not wait for traffic or for
//!   `view_ttl`: after every reconnection (a restart, a failover) it tells Redis at once. And a
//!   replica whose view dates from before a reconnection asks Redis rather than decide from
//!   it. So the fleet holds the trip again within one round trip of the first remembering
//!   replica reaching Redis; a replica that never saw the trip and reaches Redis before any
//!   replica that did cannot know of it, and admits until then (measured in the crate's tests:
//!   10 of 10 calls before, 0 after), unless it fails closed for a while where Redis may have
//!   lost a trip: [`SharedConfigBuilder::loss_hold`] (after a reconnection to another server
//!   process, or a record that started over or went back, a replica whose view is Closed
//!   rejects for the hold, asking Redis on each call; 0 of 10 admitted in the same tests, at
//!   the price of rejecting every breaker it saw Closed for the hold after each restart or
//!   failover of Redis). So deleting a breaker's keys does not reset it while
//!   replicas remember it: use [`SharedBreaker::reset`]. A record that starts over at an
//!   operator's action (a reset, or a forced state, from any replica, after the loss) is the
//!   operator's word: replicas take it as it is and restore nothing. A window lost while its
//!   record says it held calls is counted in [`SharedMetrics::lost_windows`], and so is a
//!   Closed record lost between calls (an eviction, a restart) while a replica had seen it
//!   within its idle TTL.
//! * **Events.** Exactly one replica performs each transition; it publishes it to its
//!   subscribers ([`SharedBreaker::subscribe`]) and the functions append it to the events
//!   stream ([`SharedBreaker::fleet_events`]). A call that timed out (or lost its connection)
//!   may still run, and a transition it performs reaches no reply: the replica's next reply
//!   that shows a newer epoch makes it read the stream and publish the transitions it
//!   performed that no reply carried.
//!
//! Every replica of a scope should use the same [`tripline::BreakerConfig`]: each call is
//! decided with the configuration its version names.
//!
//! # Running Redis for tripline
//! What the guarantees above need from Redis, and what each setting costs.
//! [`SharedBreaker::check`] reads most of it (`INFO`) and says what is wrong.
//! * **Version.** Redis 7.0 or later (Functions), or Valkey 7.2 or later.
//! * **`maxmemory-policy`.** `noeviction` keeps every key (best); the breaker's functions are
//!   flagged `allow-oom`, so a trip is still recorded when Redis refuses other writes, and a
//!   rejection writes nothing at all. A node at its limit refuses `FUNCTION LOAD`: a replica
//!   that finds the library missing then runs the same library as a script (`EVALSHA`,
//!   flagged `allow-oom`) until a load succeeds, so it keeps deciding in Redis. Under
//!   `volatile-*` the Open, HalfOpen and operator states are safe (they carry no TTL, so they
//!   are never evicted), but a Closed breaker is not: its record carries its idle TTL, and
//!   under memory pressure Redis may evict it (or its window) between calls, and a breaker
//!   whose failures are evicted does not trip. Each loss is counted in
//!   [`SharedMetrics::lost_windows`] and logged, and [`SharedBreaker::check`] warns of the
//!   policy. `allkeys-*` with a `maxmemory` limit can evict an Open record: `check` refuses it
//!   ([`CheckError::UnsafeEviction`]; without a limit nothing is evicted, and it warns); a
//!   fleet that runs on it anyway brings lost Open records back (see "Lost state"), but a
//!   breaker that no replica saw Open is simply gone. Best: a Redis (or a database) of its
//!   own, with `noeviction`, or enough memory that nothing is evicted.
//! * **Persistence.** Without it (`appendonly no`, no RDB) a restart forgets every breaker:
//!   replicas bring back what they saw Open, the rest start Closed with empty windows. With
//!   `appendonly yes` (and `appendfsync everysec`, the default) a restart keeps all but about
//!   the last second. The functions do not `WAIT`: a trip is answered before a replica of Redis
//!   has it.
//! * **Replication and failover.** A failover to a replica that lagged behind loses the last
//!   writes; a breaker that tripped in that gap comes back through the replicas that saw it
//!   (an epoch that went back is detected). Point the backend at the primary (the functions
//!   write): through a proxy or a DNS name that follows failovers. Redis Sentinel discovery is
//!   not built in; resolve the primary with Sentinel and give its URL, or use a proxy.
//! * **ACLs.** Redis checks every command a function runs against the user too, so the user
//!   needs those commands as well as `FCALL`: [`acl_rules`] gives the whole rule
//!   ([`ACL_COMMANDS`]: `+ping` to connect, `+fcall`, `+function|load` (or an administrator
//!   loads the library once per node), `+evalsha +eval` for a node at its memory limit, `+info`
//!   for `check`, `+xrevrange` for [`SharedBreaker::fleet_events`], and the functions'
//!   commands), with the keys under the prefix (`~{tripline:*`), e.g.
//!   `ACL SETUSER app on >secret resetkeys resetchannels -@all ~{tripline:* +ping +fcall ...`
//!   (add `+select` for a URL with a database index). The crate's tests run the breaker as
//!   such a user. Renamed or disabled `FCALL` cannot work; `check` says so
//!   ([`CheckError::Functions`]).
//! * **TLS.** With the `tls` feature, `rediss://host:port/` verifies the server against the
//!   system's root certificates; [`Backend::single_tls`] takes your own CA (and a client
//!   certificate for `tls-auth-clients yes`). Managed services (ElastiCache, Memorystore, Azure
//!   Cache) that require encryption in transit work this way.
//! * **Cluster.** With the `cluster` feature, [`Backend::cluster`]: a breaker's keys share one
//!   hash tag, so they live on one node and move together; during a slot migration calls fall
//!   back for as long as the keys are split (`TRYAGAIN`) without opening the breaker on Redis.
//!   The library is loaded on every primary, and again on a node that lacks it.
//!
#![cfg_attr(
    not(feature = "tls"),
    doc = "[`Backend::single_tls`]: #running-redis-for-tripline"
)]
#![cfg_attr(
    not(feature = "cluster"),
    doc = "[`Backend::cluster`]: #running-redis-for-tripline"
)]
//! * **Latency.** `redis_timeout` (25 ms by default) bounds every call; it must be shorter than
//!   `half_open.probe_lease`. A breaker on the same Redis as heavy traffic waits behind it: give
//!   it a Redis whose p99 is well under `redis_timeout`.
//! * **TLS URLs.** A `rediss://` URL to a port without TLS leaves the handshake waiting (the
//!   server reads the greeting as an unfinished command) until the 2 s connect timeout; calls
//!   meanwhile fall back, and `check` and [`SharedBreaker::last_redis_error`] say that the
//!   handshake did not finish and what that usually means.
//! * **Rolling upgrades.** A release whose library has another name (`tripline_6` here) runs
//!   beside the previous one over the same keys: the record's layout is the same from
//!   `tripline_3` on (the record as one MessagePack string), fields a release adds are kept by
//!   the other, and each replica's calls go to its own library. The crate's tests run a fleet
//!   of `tripline_5` and `tripline_6` replicas as one breaker (a trip by either, K probes
//!   across both). `tripline_6` adds the failure-count-in-time rule (two configuration fields,
//!   the record's failure times tagged with their epoch, so a `tripline_5` replica's transitions
//!   leave none behind that count): during the upgrade only the new replicas apply it. From `tripline_2` or older (the record as a hash) there is no rolling
//!   upgrade: stop the old replicas first (the new ones then start Closed).

mod backend;
mod config;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod health;
mod registry;
#[cfg(feature = "server")]
pub mod server;
mod store;

pub use backend::Backend;
pub use config::{
    Batching, Fallback, MAX_BATCH, Quorum, SharedConfig, SharedConfigBuilder, TimeSource,
};
pub use health::{ACL_COMMANDS, CheckError, Health, acl_rules};
pub use registry::{SharedRegistry, SharedRegistryError};
pub use store::{
    FleetEvent, Keys, Mode, REDIRECTIONS_FORGIVEN, SharedBreaker, SharedMetrics, SharedPermit,
    SharedTransitionError, Snapshot, Transition,
};
