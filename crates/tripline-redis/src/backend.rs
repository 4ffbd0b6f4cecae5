//! Connections to Redis: one server, or a Redis Cluster.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisResult, Script};

/// The breaker's rules as one Lua script, sent with `EVALSHA` and loaded again on `NOSCRIPT`
/// (once per call: a server that keeps answering `NOSCRIPT` yields an error, not a loop).
pub(crate) static SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("breaker.lua")));

/// Where the shared state lives. Cloning is cheap and clones share the connection.
///
/// Connecting is lazy: building a backend never waits for Redis, so a replica starts (on its
/// local shadow breaker) while Redis is down, and every call is bounded by the shared
/// breaker's Redis timeout.
///
/// ```
/// use tripline_redis::Backend;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let backend = Backend::single("redis://127.0.0.1:6379/").unwrap();
/// # let _ = backend;
/// # }
/// ```
#[derive(Clone)]
pub struct Backend {
    inner: Arc<Target>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &*self.inner {
            Target::Single(_) => "single",
            #[cfg(feature = "cluster")]
            Target::Cluster { .. } => "cluster",
        };
        f.debug_struct("Backend")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

enum Target {
    Single(ConnectionManager),
    #[cfg(feature = "cluster")]
    Cluster {
        client: Box<redis::cluster::ClusterClient>,
        conn: tokio::sync::OnceCell<redis::cluster_async::ClusterConnection>,
    },
}

/// How long a connection attempt may take, and how often a broken connection is retried in
/// the background, before a call gives up (each call is also bounded by the Redis timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

impl Backend {
    /// One Redis server (or a primary behind a proxy), e.g. `redis://127.0.0.1:6379/`. The
    /// connection is multiplexed and reconnects by itself after Redis restarts. Call it
    /// within a Tokio runtime (the connection's driver runs on it); outside one it returns an
    /// error.
    pub fn single(url: &str) -> RedisResult<Self> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "tripline: Backend::single must be called within a Tokio runtime",
            )));
        }
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(200));
        let manager = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Self {
            inner: Arc::new(Target::Single(manager)),
        })
    }

    /// A Redis Cluster, from any of its nodes. A breaker's keys share one hash tag, so they
    /// live in one slot and its script runs on one node.
    #[cfg(feature = "cluster")]
    pub fn cluster(urls: &[String]) -> RedisResult<Self> {
        let client = redis::cluster::ClusterClient::builder(urls.iter().map(String::as_str))
            .connection_timeout(CONNECT_TIMEOUT)
            .retries(2)
            .build()?;
        Ok(Self {
            inner: Arc::new(Target::Cluster {
                client: Box::new(client),
                conn: tokio::sync::OnceCell::new(),
            }),
        })
    }

    /// Runs the breaker script.
    pub(crate) async fn eval(&self, inv: &redis::ScriptInvocation<'_>) -> RedisResult<Vec<String>> {
        match &*self.inner {
            Target::Single(m) => inv.invoke_async(&mut m.clone()).await,
            #[cfg(feature = "cluster")]
            Target::Cluster { client, conn } => {
                let c = conn
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                inv.invoke_async(&mut c.clone()).await
            }
        }
    }

    /// Runs one command.
    pub(crate) async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> RedisResult<T> {
        match &*self.inner {
            Target::Single(m) => cmd.query_async(&mut m.clone()).await,
            #[cfg(feature = "cluster")]
            Target::Cluster { client, conn } => {
                let c = conn
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                cmd.query_async(&mut c.clone()).await
            }
        }
    }
}
