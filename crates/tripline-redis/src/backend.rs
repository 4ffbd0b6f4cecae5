//! Connections to Redis: one server, or a Redis Cluster.
//!
//! # Why not `ConnectionManager`
//! The redis crate's `ConnectionManager` reconnects by itself, but a call made while it
//! reconnects waits for the reconnection (connect timeout, retries with backoff). Under a
//! per-call bound of a few milliseconds that turns every configuration mistake (a wrong
//! password, a missing one, a wrong database index, a refused connection) into "Redis did not
//! answer in time". Here a small supervisor task owns the connection instead: it connects and
//! authenticates outside any call's bound, keeps the error of its last attempt, and retries with
//! a backoff. A call finds either a live connection, used under the call's bound, or the reason
//! there is none, at once.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, RedisResult, Value};

/// The breaker's rules as a Redis Functions library, loaded with `FUNCTION LOAD REPLACE` the
/// first time a node answers that the function is missing.
pub(crate) const LIBRARY: &str = include_str!("breaker.lua");
/// The library's function names start with this (the library's name and layout version).
pub(crate) const FUNCTION_PREFIX: &str = "tripline_4_";

/// How long one connection attempt (TCP, TLS, `AUTH`, `SELECT`) may take. It runs in the
/// supervisor, never inside a call's bound.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Backoff between connection attempts: from the first to the last, doubling.
const RECONNECT_FIRST: Duration = Duration::from_millis(10);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the shared state lives. Cloning is cheap and clones share the connection.
///
/// Building a backend never waits for Redis: a supervisor task connects (and authenticates) in
/// the background and reconnects after a failure, so a replica starts (on its local shadow
/// breaker) while Redis is down, and every call is bounded by the shared breaker's Redis
/// timeout. A call made while there is no connection fails at once with the reason of the last
/// connection attempt (wrong password, refused connection, unknown database), never with a
/// timeout; [`crate::SharedBreaker::check`] reports it before traffic arrives.
///
/// URLs: `redis://[user:password@]host:port/db`, `unix:///path/to/socket`, and, with the `tls`
/// feature, `rediss://host:port/` (the system's root certificates, or your own with
/// [`Backend::single_tls`]).
///
#[cfg_attr(
    not(feature = "tls"),
    doc = "[`Backend::single_tls`]: crate#running-redis-for-tripline"
)]
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
    Single(Arc<Link>),
    #[cfg(feature = "cluster")]
    Cluster {
        client: Box<redis::cluster::ClusterClient>,
        conn: tokio::sync::OnceCell<redis::cluster_async::ClusterConnection>,
    },
}

/// One server's connection, owned by a supervisor task.
struct Link {
    client: redis::Client,
    state: Mutex<LinkState>,
    /// Woken on every change of `state`.
    changed: tokio::sync::Notify,
    /// Wakes the supervisor to reconnect (shared with it, so that it holds no strong
    /// reference to the link while it waits).
    broken: Arc<tokio::sync::Notify>,
}

enum LinkState {
    /// No connection; the error of the last attempt, if one failed already.
    Down(Option<Fault>),
    /// Connected: the connection and its number (so that a call reports the connection it
    /// used as broken, not a newer one).
    Up(MultiplexedConnection, u64),
}

/// An error kept to be reported again: its kind and text.
#[derive(Clone, Debug)]
pub(crate) struct Fault {
    kind: ErrorKind,
    text: String,
    /// A refused connection, a missing socket, a timeout: it may pass (Redis restarting). A
    /// wrong password or database index does not.
    transient: bool,
}

impl Fault {
    pub(crate) fn of(e: &RedisError) -> Self {
        Self {
            kind: e.kind(),
            text: e.to_string(),
            transient: e.is_io_error() || e.is_connection_refusal() || e.is_timeout(),
        }
    }

    pub(crate) fn to_error(&self, what: &'static str) -> RedisError {
        RedisError::from((self.kind, what, self.text.clone()))
    }
}

impl Link {
    async fn connect(&self) -> RedisResult<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        let mut c = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        // A server that wants a password this client did not give answers the first command
        // with NOAUTH: that is a failed connection, not a failed call.
        let _: Value =
            tokio::time::timeout(CONNECT_TIMEOUT, redis::cmd("PING").query_async(&mut c))
                .await
                .map_err(|_| {
                    RedisError::from((ErrorKind::Io, "tripline: PING after connecting timed out"))
                })??;
        Ok(c)
    }

    fn set(&self, s: LinkState) {
        *lock(&self.state) = s;
        self.changed.notify_waiters();
    }

    /// The live connection, or why there is none. Waits only while the very first connection
    /// attempt is still running (the caller's own bound applies).
    async fn get(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        loop {
            let changed = self.changed.notified();
            match &*lock(&self.state) {
                LinkState::Up(c, n) => return Ok((c.clone(), *n)),
                LinkState::Down(Some(f)) => {
                    return Err(f.to_error("tripline: not connected to Redis"));
                }
                LinkState::Down(None) => {}
            }
            changed.await;
        }
    }

    /// A call on connection `n` failed with `e`: if the connection is gone, mark it down and
    /// wake the supervisor.
    fn failed(&self, n: u64, e: &RedisError) {
        if !(e.is_unrecoverable_error() || e.is_connection_dropped() || e.is_io_error()) {
            return;
        }
        let mut s = lock(&self.state);
        if matches!(&*s, LinkState::Up(_, m) if *m == n) {
            *s = LinkState::Down(Some(Fault::of(e)));
            drop(s);
            self.changed.notify_waiters();
            self.broken.notify_one();
        }
    }
}

/// Connects, then waits until a call reports the connection broken, and again.
async fn supervise(link: Weak<Link>, broken: Arc<tokio::sync::Notify>) {
    let mut n = 0u64;
    let mut backoff = RECONNECT_FIRST;
    loop {
        let Some(l) = link.upgrade() else { return };
        match l.connect().await {
            Ok(c) => {
                n += 1;
                backoff = RECONNECT_FIRST;
                let woken = broken.notified();
                l.set(LinkState::Up(c, n));
                drop(l);
                woken.await;
            }
            Err(e) => {
                l.set(LinkState::Down(Some(Fault::of(&e))));
                drop(l);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RECONNECT_MAX);
            }
        }
        // A backend nobody holds stops here.
        if link.strong_count() == 0 {
            return;
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // Ends a supervisor waiting for a broken connection.
        self.broken.notify_one();
    }
}

/// Whether an error is a Redis Cluster redirection or a retry during a slot migration
/// (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`): Redis is there, the slot is moving.
pub(crate) fn is_redirection(e: &RedisError) -> bool {
    e.is_cluster_error()
}

fn missing_function(e: &RedisError) -> bool {
    e.to_string().contains("Function not found")
}

impl Backend {
    /// One Redis server (or a primary behind a proxy), e.g. `redis://127.0.0.1:6379/`. The
    /// connection is multiplexed and re-established by a supervisor task after Redis restarts.
    /// Call it within a Tokio runtime (the supervisor runs on it); outside one it returns an
    /// error.
    pub fn single(url: &str) -> RedisResult<Self> {
        Self::from_client(redis::Client::open(url)?)
    }

    /// One server over TLS (`rediss://host:port/`) whose certificate is signed by
    /// `root_cert_pem` (a PEM CA certificate), optionally presenting a client certificate and
    /// key (PEM) for servers that require mutual TLS (`tls-auth-clients yes`).
    #[cfg(feature = "tls")]
    pub fn single_tls(
        url: &str,
        root_cert_pem: &[u8],
        client_cert_and_key_pem: Option<(&[u8], &[u8])>,
    ) -> RedisResult<Self> {
        let client = redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: client_cert_and_key_pem.map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.to_vec(),
                    client_key: key.to_vec(),
                }),
                root_cert: Some(root_cert_pem.to_vec()),
            },
        )?;
        Self::from_client(client)
    }

    fn from_client(client: redis::Client) -> RedisResult<Self> {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return Err(RedisError::from((
                ErrorKind::Client,
                "tripline: Backend::single must be called within a Tokio runtime",
            )));
        };
        let broken = Arc::new(tokio::sync::Notify::new());
        let link = Arc::new(Link {
            client,
            state: Mutex::new(LinkState::Down(None)),
            changed: tokio::sync::Notify::new(),
            broken: broken.clone(),
        });
        rt.spawn(supervise(Arc::downgrade(&link), broken));
        Ok(Self {
            inner: Arc::new(Target::Single(link)),
        })
    }

    /// A Redis Cluster, from any of its nodes. A breaker's keys share one hash tag, so they
    /// live in one slot and its functions run on one node. Redirections (`MOVED`, `ASK`) and
    /// `TRYAGAIN` during a slot migration are retried a few times within milliseconds, so that
    /// the retries fit in the Redis timeout.
    #[cfg(feature = "cluster")]
    pub fn cluster(urls: &[String]) -> RedisResult<Self> {
        let client = redis::cluster::ClusterClient::builder(urls.iter().map(String::as_str))
            .connection_timeout(CONNECT_TIMEOUT)
            .retries(4)
            .min_retry_wait(1)
            .max_retry_wait(4)
            .retry_wait_formula(1, 2)
            .build()?;
        Ok(Self {
            inner: Arc::new(Target::Cluster {
                client: Box::new(client),
                conn: tokio::sync::OnceCell::new(),
            }),
        })
    }

    /// Waits (at most `within`) until the backend is connected; the reason if it is not.
    pub(crate) async fn connected(&self, within: Duration) -> RedisResult<()> {
        let wait = async {
            match &*self.inner {
                Target::Single(link) => loop {
                    // Down after a failed attempt that may pass: wait for the next one, up to
                    // `within`; one that will not pass is the answer.
                    let changed = link.changed.notified();
                    match &*lock(&link.state) {
                        LinkState::Up(..) => return Ok(()),
                        LinkState::Down(Some(f)) if !f.transient => {
                            return Err(f.to_error("tripline: cannot connect to Redis"));
                        }
                        LinkState::Down(_) => {}
                    }
                    changed.await;
                },
                #[cfg(feature = "cluster")]
                Target::Cluster { client, conn } => conn
                    .get_or_try_init(|| client.get_async_connection())
                    .await
                    .map(|_| ()),
            }
        };
        match tokio::time::timeout(within, wait).await {
            Ok(r) => r,
            Err(_) => Err(match &*self.inner {
                Target::Single(link) => match &*lock(&link.state) {
                    LinkState::Down(Some(f)) => f.to_error("tripline: cannot connect to Redis"),
                    _ => RedisError::from((
                        ErrorKind::Io,
                        "tripline: no connection to Redis",
                        format!("still connecting after {within:?}"),
                    )),
                },
                #[cfg(feature = "cluster")]
                Target::Cluster { .. } => RedisError::from((
                    ErrorKind::Io,
                    "tripline: no connection to the Redis Cluster",
                    format!("still connecting after {within:?}"),
                )),
            }),
        }
    }

    /// Runs one command.
    pub(crate) async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> RedisResult<T> {
        match &*self.inner {
            Target::Single(link) => {
                let (mut c, n) = link.get().await?;
                let r = cmd.query_async(&mut c).await;
                if let Err(e) = &r {
                    link.failed(n, e);
                }
                r
            }
            #[cfg(feature = "cluster")]
            Target::Cluster { client, conn } => {
                let c = conn
                    .get_or_try_init(|| client.get_async_connection())
                    .await?;
                cmd.query_async(&mut c.clone()).await
            }
        }
    }

    /// Loads the library (on every primary of a cluster).
    pub(crate) async fn load_library(&self) -> RedisResult<()> {
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg("REPLACE").arg(LIBRARY);
        let _: Value = self.query(&cmd).await?;
        Ok(())
    }

    /// Calls one of the library's functions, loading the library once if the node does not
    /// have it (a restart without persistence, a new node, `FUNCTION FLUSH`).
    pub(crate) async fn fcall(
        &self,
        function: &str,
        keys: &[&str],
        args: &[&str],
    ) -> RedisResult<Vec<Value>> {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function).arg(keys.len()).arg(keys).arg(args);
        match self.query(&cmd).await {
            Err(e) if missing_function(&e) => {
                self.load_library().await?;
                self.query(&cmd).await
            }
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_names_its_functions_with_the_prefix() {
        assert!(LIBRARY.starts_with("#!lua name=tripline_4\n"));
        let registered = LIBRARY.matches("function_name = '").count();
        let prefixed = LIBRARY
            .matches(&format!("function_name = '{FUNCTION_PREFIX}"))
            .count();
        assert_eq!(registered, prefixed);
        assert_eq!(registered, 10);
    }
}
