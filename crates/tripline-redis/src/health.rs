//! [`SharedBreaker::check`](crate::SharedBreaker::check): whether a Redis can host the shared
//! breaker, asked before traffic arrives.

use redis::RedisError;

/// The commands a Redis ACL user of the shared breaker needs: `PING` (connecting, and the
/// connection's heartbeat), `FCALL` and `FUNCTION LOAD` (the library; without `FUNCTION LOAD`
/// an administrator loads it on every node), `EVALSHA` and `EVAL` (the same library as a
/// script, while a node at its memory limit refuses `FUNCTION LOAD`), `INFO` (for
/// [`SharedBreaker::check`](crate::SharedBreaker::check)), `XREVRANGE` (for
/// [`SharedBreaker::fleet_events`](crate::SharedBreaker::fleet_events)), and every command the
/// functions run, since Redis checks each of them against the user too. Add `+select` for a
/// URL with a database index. See [`acl_rules`] for a whole rule with the key pattern.
pub const ACL_COMMANDS: &str = "+ping +fcall +function|load +evalsha +eval +info +xrevrange \
    +get +set +del +exists +getrange +setrange +bitfield +hget +hset +hdel +hlen +hgetall \
    +pexpire +zadd +zcard +zremrangebyscore +zremrangebyrank +xadd +time";

/// The ACL rules of a user for the shared breakers under `key_prefix`: the keys (`~{prefix:*`:
/// every key of every breaker under the prefix, hashed scopes included) and
/// [`ACL_COMMANDS`].
///
/// ```
/// let rules = tripline_redis::acl_rules("tripline");
/// assert!(rules.starts_with("~{tripline:* +ping +fcall"));
/// // ACL SETUSER app on >secret resetkeys resetchannels -@all <rules>
/// ```
pub fn acl_rules(key_prefix: &str) -> String {
    format!("~{{{key_prefix}:* {ACL_COMMANDS}")
}

/// Why a Redis cannot host the shared breaker, from [`SharedBreaker::check`](crate::SharedBreaker::check).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// No connection: refused, a missing socket, a TLS failure, a wrong or missing password
    /// (`WRONGPASS`, `NOAUTH`), a database index out of range. The text is Redis's own.
    #[error("cannot connect to Redis: {0}")]
    Connect(RedisError),
    /// Redis answers but cannot run the breaker's functions: older than 7.0 (no Functions),
    /// `FCALL` or `FUNCTION` renamed or disabled, or an ACL user without `+@scripting` or
    /// without access to the breaker's keys.
    #[error(
        "Redis cannot run the breaker's functions (needs Redis 7.0 or later, FCALL and FUNCTION LOAD allowed, and the keys under the prefix): {0}"
    )]
    Functions(RedisError),
    /// `maxmemory-policy` is `allkeys-*` with a `maxmemory` limit: under memory pressure Redis
    /// may evict an Open breaker's record, which then reads as Closed. Use `noeviction` (best),
    /// or a `volatile-*` policy (only Closed breakers' keys carry a TTL: see
    /// [`Health::warnings`]). Without a limit (`maxmemory 0`) nothing is evicted, and `check`
    /// only warns.
    #[error(
        "maxmemory-policy {policy} with a maxmemory limit can evict an Open breaker: use noeviction or a volatile-* policy"
    )]
    UnsafeEviction {
        /// The policy Redis reported.
        policy: String,
    },
}

/// What [`SharedBreaker::check`](crate::SharedBreaker::check) found: the breaker's functions
/// ran, and these are the Redis settings that matter to it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// `redis_version` (empty if `INFO` was not allowed).
    pub redis_version: String,
    /// `maxmemory_policy` (empty if `INFO` was not allowed).
    pub maxmemory_policy: String,
    /// `maxmemory` in bytes (0: no limit).
    pub maxmemory: u64,
    /// Whether the append-only file is on.
    pub aof_enabled: bool,
    /// `master` or `slave`.
    pub role: String,
    /// Settings that weaken a guarantee, in words (see the crate docs, "Running Redis for
    /// tripline").
    pub warnings: Vec<String>,
}

impl Health {
    /// Reads the fields of `INFO server memory persistence replication`.
    pub(crate) fn from_info(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let mut h = Self {
            redis_version: field("redis_version"),
            maxmemory_policy: field("maxmemory_policy"),
            maxmemory: field("maxmemory").parse().unwrap_or(0),
            aof_enabled: field("aof_enabled") == "1",
            role: field("role"),
            warnings: Vec::new(),
        };
        if h.maxmemory > 0 && h.maxmemory_policy.starts_with("volatile-") {
            h.warnings.push(format!(
                "maxmemory-policy {}: under memory pressure Redis may evict a Closed breaker's record or window (a Closed record carries its idle TTL), and a breaker whose failures are evicted between calls does not trip; each loss is counted (SharedMetrics::lost_windows) and logged. Open, HalfOpen and operator states carry no TTL and are never evicted. Use noeviction where every trip matters",
                h.maxmemory_policy
            ));
        }
        if h.maxmemory == 0 && h.maxmemory_policy.starts_with("allkeys-") {
            h.warnings.push(format!(
                "maxmemory-policy {} evicts nothing while maxmemory is 0, but would evict Open breakers once a limit is set: use noeviction or a volatile-* policy",
                h.maxmemory_policy
            ));
        }
        if !h.aof_enabled {
            h.warnings.push(
                "appendonly no: a restart forgets every breaker; replicas bring back the Open breakers they saw, the rest start Closed"
                    .into(),
            );
        }
        if h.role == "slave" {
            h.warnings
                .push("this node is a replica: it refuses the breaker's writes".into());
        }
        h
    }

    /// Whether the eviction policy can evict a key without a TTL: `allkeys-*` under a memory
    /// limit (with `maxmemory 0` nothing is evicted).
    pub(crate) fn unsafe_eviction(&self) -> bool {
        self.maxmemory_policy.starts_with("allkeys-") && self.maxmemory > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_info_and_warns() {
        let h = Health::from_info(
            "# Server\r\nredis_version:7.0.15\r\n# Memory\r\nmaxmemory:1048576\r\nmaxmemory_policy:volatile-lru\r\n# Persistence\r\naof_enabled:0\r\n# Replication\r\nrole:master\r\n",
        );
        assert_eq!(h.redis_version, "7.0.15");
        assert_eq!(h.maxmemory, 1_048_576);
        assert!(!h.aof_enabled);
        assert_eq!(h.warnings.len(), 2, "{:?}", h.warnings);
        assert!(!h.unsafe_eviction());
        assert!(
            Health::from_info("maxmemory:1048576\nmaxmemory_policy:allkeys-lru\n")
                .unsafe_eviction()
        );
        // No limit, no eviction: a warning, not a refusal.
        let h = Health::from_info("maxmemory:0\nmaxmemory_policy:allkeys-lru\naof_enabled:1\n");
        assert!(!h.unsafe_eviction());
        assert_eq!(h.warnings.len(), 1, "{:?}", h.warnings);
    }

    /// The ACL names every command the library runs (Redis checks each one against the user).
    #[test]
    fn the_acl_names_every_command_the_functions_run() {
        let library = crate::backend::LIBRARY;
        let mut missing = Vec::new();
        for call in ["redis.call('", "redis.pcall('"] {
            for part in library.split(call).skip(1) {
                let name = part
                    .split('\'')
                    .next()
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                if !ACL_COMMANDS
                    .split_whitespace()
                    .any(|c| c == format!("+{name}"))
                {
                    missing.push(name);
                }
            }
        }
        assert!(missing.is_empty(), "ACL_COMMANDS lacks {missing:?}");
    }
}
