//! [`SharedBreaker::check`](crate::SharedBreaker::check): whether a Redis can host the shared
//! breaker, asked before traffic arrives.

use redis::RedisError;

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
    /// `maxmemory-policy` is `allkeys-*`: under memory pressure Redis may evict an Open
    /// breaker's record, which then reads as Closed. Use `noeviction`, or a `volatile-*`
    /// policy (only Closed breakers' keys carry a TTL).
    #[error(
        "maxmemory-policy {policy} can evict an Open breaker: use noeviction or a volatile-* policy"
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
                "maxmemory-policy {}: under memory pressure Redis may evict a Closed breaker's window (its record says so: SharedMetrics::lost_windows)",
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

    /// Whether the eviction policy can evict a key without a TTL.
    pub(crate) fn unsafe_eviction(&self) -> bool {
        self.maxmemory_policy.starts_with("allkeys-")
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
        assert!(Health::from_info("maxmemory_policy:allkeys-lru\n").unsafe_eviction());
    }
}
