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

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, RedisResult, Value};

/// The breaker's rules as a Redis Functions library, loaded with `FUNCTION LOAD` (without
/// `REPLACE`) the first time a node answers that a function is missing.
pub(crate) const LIBRARY: &str = include_str!("breaker.lua");
/// The library's name. It changes with every change of the library's text (a test pins the
/// text's hash to the name), so a node that holds a library of this name holds this text, and
/// loading it needs no `REPLACE`: the first replica to load it wins, the others are told it
/// exists (a cheap refusal that compiles nothing).
pub(crate) const LIBRARY_NAME: &str = "tripline_6";
/// The library's function names start with this (the library's name and layout version).
pub(crate) const FUNCTION_PREFIX: &str = "tripline_6_";

/// How long one connection attempt (TCP, TLS, `AUTH`, `SELECT`) may take. It runs in the
/// supervisor, never inside a call's bound.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Backoff between connection attempts: from the first to the last, doubling. The last is short
/// so that a replica remembering an Open breaker is back soon after Redis is, to bring back
/// what Redis lost.
const RECONNECT_FIRST: Duration = Duration::from_millis(10);
const RECONNECT_MAX: Duration = Duration::from_millis(250);
/// While connected, the supervisor sends a `PING` this often (when no call has reported the
/// connection broken meanwhile), so that a connection Redis dropped (a restart, a failover) is
/// made again without waiting for a call to fail on it, and one that stopped answering (a
/// partition) is given up within `HEARTBEAT + CONNECT_TIMEOUT`.
const HEARTBEAT: Duration = Duration::from_millis(200);
/// How long the library stays unloadable after `FUNCTION LOAD` was refused for memory
/// (`maxmemory` under `noeviction`): meanwhile calls run the same functions through `EVALSHA`.
const OOM_RETRY: Duration = Duration::from_secs(1);

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
    loader: Arc<Loader>,
}

/// Loading the library, once per backend at a time.
#[derive(Debug, Default)]
struct Loader {
    /// Held while one task loads; the others wait for its outcome instead of loading too.
    lock: tokio::sync::Mutex<()>,
    /// Loads that succeeded (or found the library there): a task that saw the function missing
    /// before a load finished retries its call without loading again.
    loads: AtomicU64,
    /// When a load was last refused for memory: until `OOM_RETRY` after it, calls go through
    /// `EVALSHA` of the same library.
    oom_at: Mutex<Option<tokio::time::Instant>>,
}

/// What a backend does when a connection to Redis is made again after one was lost: each
/// breaker on it that remembers a state Redis may have lost tells Redis at once.
pub(crate) trait Reconnected: Send + Sync {
    /// Called synchronously once the connection is made again, before any call can use it
    /// (keep it short: it runs on the supervisor); `new_server`: the connection reached another
    /// server process than the last one (a restart, a failover: its `run_id` changed, or could
    /// not be read), which may have lost state.
    fn reconnecting(&self, new_server: bool);

    /// Called (in a task of its own) after every reconnection.
    fn reconnected(self: Arc<Self>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
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
    /// The number of the current (or last) connection: 0 before the first.
    number: AtomicU64,
    /// When the attempt in progress began, while one runs.
    attempt: Mutex<Option<tokio::time::Instant>>,
    /// The URL asks for TLS (`rediss://`).
    tls: bool,
    /// Told after every reconnection.
    listeners: Mutex<Vec<Weak<dyn Reconnected>>>,
    /// The `run_id` of the server the last connection reached (`None` before the first, or
    /// when `INFO` was refused).
    run_id: Mutex<Option<String>>,
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

    /// A failed connection attempt, with what it means for a TLS URL: a `rediss://` URL to a
    /// port without TLS leaves the handshake waiting (the server reads the greeting as an
    /// unfinished command) until the connect timeout.
    fn of_attempt(e: &RedisError, tls: bool) -> Self {
        let mut f = Self::of(e);
        if tls && (e.is_timeout() || e.kind() == ErrorKind::Io) {
            f.text = format!("{} ({TLS_HINT})", f.text);
        }
        f
    }

    pub(crate) fn to_error(&self, what: &'static str) -> RedisError {
        RedisError::from((self.kind, what, self.text.clone()))
    }
}

/// What a TLS handshake that does not finish usually means.
const TLS_HINT: &str = "the TLS handshake did not finish: is the server's port a TLS port? \
                        A rediss:// URL to a plain port waits until the connect timeout (2s)";

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
        ping(&mut c).await?;
        Ok(c)
    }

    /// The server process a connection reached: its `run_id` (`None` if `INFO` is refused).
    async fn run_id(c: &mut MultiplexedConnection) -> Option<String> {
        let info = tokio::time::timeout(
            CONNECT_TIMEOUT,
            redis::cmd("INFO").arg("server").query_async::<String>(c),
        )
        .await
        .ok()?
        .ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|id| id.trim().to_string())
    }

    /// Why no call can be made right now, while an attempt is still running (the first, or
    /// after a loss): how long it has run, and for TLS what a hang usually means.
    fn connecting(&self) -> Option<String> {
        if !matches!(&*lock(&self.state), LinkState::Down(None)) {
            return None;
        }
        let ran = lock(&self.attempt).map(|t| t.elapsed());
        let mut text = match ran {
            Some(d) => format!(
                "tripline: still connecting to Redis (the connection attempt has run for {})",
                humantime::format_duration(Duration::from_millis(d.as_millis() as u64))
            ),
            None => "tripline: still connecting to Redis".to_string(),
        };
        if self.tls && ran.is_some_and(|d| d >= Duration::from_millis(100)) {
            text.push_str(&format!("; {TLS_HINT}"));
        }
        Some(text)
    }

    fn listen(&self, l: Weak<dyn Reconnected>) {
        let mut ls = lock(&self.listeners);
        ls.retain(|w| w.strong_count() > 0);
        ls.push(l);
    }

    fn live_listeners(&self) -> Vec<Arc<dyn Reconnected>> {
        let mut ls = lock(&self.listeners);
        ls.retain(|w| w.strong_count() > 0);
        ls.iter().filter_map(Weak::upgrade).collect()
    }

    /// Tells every live listener that a connection was made again.
    fn tell_reconnected(&self) {
        for l in self.live_listeners() {
            tokio::spawn(l.reconnected());
        }
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

/// A `PING`, bounded by the connect timeout.
async fn ping(c: &mut MultiplexedConnection) -> RedisResult<()> {
    let _: Value = tokio::time::timeout(CONNECT_TIMEOUT, redis::cmd("PING").query_async(c))
        .await
        .map_err(|_| {
            RedisError::from((
                ErrorKind::Io,
                "tripline: Redis did not answer PING within the connect timeout (2s)",
            ))
        })??;
    Ok(())
}

/// Connects, then watches the connection (a call reporting it broken, or a `PING` every
/// `HEARTBEAT` failing), and connects again; after every reconnection the link's listeners
/// (the breakers on it) are told.
async fn supervise(link: Weak<Link>, broken: Arc<tokio::sync::Notify>) {
    let mut n = 0u64;
    let mut backoff = RECONNECT_FIRST;
    loop {
        let Some(l) = link.upgrade() else { return };
        *lock(&l.attempt) = Some(tokio::time::Instant::now());
        let attempt = l.connect().await;
        *lock(&l.attempt) = None;
        match attempt {
            Ok(mut c) => {
                n += 1;
                backoff = RECONNECT_FIRST;
                let mut woken = std::pin::pin!(broken.notified());
                woken.as_mut().enable();
                let id = Link::run_id(&mut c).await;
                let new_server = {
                    let mut last = lock(&l.run_id);
                    let changed = id.is_none() || *last != id;
                    *last = id;
                    changed
                };
                if n > 1 {
                    for listener in l.live_listeners() {
                        listener.reconnecting(new_server);
                    }
                }
                l.number.store(n, Ordering::Release);
                l.set(LinkState::Up(c.clone(), n));
                if n > 1 {
                    l.tell_reconnected();
                }
                drop(l);
                loop {
                    if tokio::time::timeout(HEARTBEAT, woken.as_mut())
                        .await
                        .is_ok()
                    {
                        break;
                    }
                    if let Err(e) = ping(&mut c).await {
                        let Some(l) = link.upgrade() else { return };
                        l.failed(n, &e);
                        if matches!(&*lock(&l.state), LinkState::Up(_, m) if *m == n) {
                            // Not a connection error (the server is loading, say): keep it.
                            continue;
                        }
                        break;
                    }
                    if link.strong_count() == 0 {
                        return;
                    }
                }
            }
            Err(e) => {
                l.set(LinkState::Down(Some(Fault::of_attempt(&e, l.tls))));
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
        let tls = matches!(
            client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        );
        let link = Arc::new(Link {
            client,
            state: Mutex::new(LinkState::Down(None)),
            changed: tokio::sync::Notify::new(),
            broken: broken.clone(),
            number: AtomicU64::new(0),
            attempt: Mutex::new(None),
            tls,
            listeners: Mutex::new(Vec::new()),
            run_id: Mutex::new(None),
        });
        rt.spawn(supervise(Arc::downgrade(&link), broken));
        Ok(Self {
            inner: Arc::new(Target::Single(link)),
            loader: Arc::default(),
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
            loader: Arc::default(),
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
                    _ => {
                        let mut detail = format!("still connecting after {within:?}");
                        if link.tls {
                            detail.push_str(&format!(" ({TLS_HINT})"));
                        }
                        RedisError::from((
                            ErrorKind::Io,
                            "tripline: no connection to Redis",
                            detail,
                        ))
                    }
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

    /// The number of the current connection (0 before the first, and for a cluster): it
    /// changes with every reconnection.
    pub(crate) fn connection(&self) -> u64 {
        match &*self.inner {
            Target::Single(link) => link.number.load(Ordering::Acquire),
            #[cfg(feature = "cluster")]
            Target::Cluster { .. } => 0,
        }
    }

    /// Tells `l` after every reconnection (one server; a cluster's client reconnects by
    /// itself, and tells no one).
    pub(crate) fn on_reconnect(&self, l: Weak<dyn Reconnected>) {
        match &*self.inner {
            Target::Single(link) => link.listen(l),
            #[cfg(feature = "cluster")]
            Target::Cluster { .. } => drop(l),
        }
    }

    /// While the very first connection attempt (or one after a loss whose error was not kept)
    /// is still running: what a call that cannot be made is waiting for.
    pub(crate) fn connecting(&self) -> Option<String> {
        match &*self.inner {
            Target::Single(link) => link.connecting(),
            #[cfg(feature = "cluster")]
            Target::Cluster { .. } => None,
        }
    }

    /// Loads the library (on every primary of a cluster), once per backend at a time: a task
    /// that finds the function missing while another loads waits for that load. `FUNCTION
    /// LOAD` without `REPLACE`: when another replica loaded it meanwhile, the node refuses at
    /// once (it compiles nothing), and the call goes ahead. A node at its memory limit under
    /// `noeviction` refuses `FUNCTION LOAD`: then calls run the same library through
    /// `EVALSHA` (flagged `allow-oom`) until a load succeeds.
    async fn load_library(&self, seen: u64) -> RedisResult<Loaded> {
        let loader = &self.loader;
        let _one = loader.lock.lock().await;
        if loader.loads.load(Ordering::Acquire) != seen {
            return Ok(Loaded::Functions);
        }
        let mut cmd = redis::cmd("FUNCTION");
        cmd.arg("LOAD").arg(LIBRARY);
        match self.query::<Value>(&cmd).await {
            Ok(_) => {}
            // "Library 'tripline_6' already exists": another replica's load won.
            Err(e)
                if e.to_string()
                    .contains(&format!("'{LIBRARY_NAME}' already exists")) => {}
            Err(e) if is_oom(&e) => {
                *lock(&loader.oom_at) = Some(tokio::time::Instant::now());
                return Ok(Loaded::Eval);
            }
            Err(e) => return Err(e),
        }
        *lock(&loader.oom_at) = None;
        loader.loads.fetch_add(1, Ordering::AcqRel);
        Ok(Loaded::Functions)
    }

    /// Whether a load was refused for memory less than `OOM_RETRY` ago.
    fn evaluating(&self) -> bool {
        lock(&self.loader.oom_at).is_some_and(|t| t.elapsed() < OOM_RETRY)
    }

    /// Calls one of the library's functions, loading the library once if the node does not
    /// have it (a restart without persistence, a new node, `FUNCTION FLUSH`).
    pub(crate) async fn fcall(
        &self,
        function: &str,
        keys: &[&str],
        args: &[&str],
    ) -> RedisResult<Vec<Value>> {
        if self.evaluating() {
            return self.eval(function, keys, args).await;
        }
        let seen = self.loader.loads.load(Ordering::Acquire);
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function).arg(keys.len()).arg(keys).arg(args);
        match self.query(&cmd).await {
            Err(e) if missing_function(&e) => match self.load_library(seen).await? {
                Loaded::Functions => self.query(&cmd).await,
                Loaded::Eval => self.eval(function, keys, args).await,
            },
            r => r,
        }
    }

    /// `function` of the library run as a script: `EVALSHA`, or `EVAL` when the node does
    /// not have the script yet.
    async fn eval(&self, function: &str, keys: &[&str], args: &[&str]) -> RedisResult<Vec<Value>> {
        let (script, sha) = eval_script();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha.as_str())
            .arg(keys.len())
            .arg(keys)
            .arg(function)
            .arg(args);
        match self.query(&cmd).await {
            Err(e) if e.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(script.as_str())
                    .arg(keys.len())
                    .arg(keys)
                    .arg(function)
                    .arg(args);
                self.query(&cmd).await
            }
            r => r,
        }
    }
}

/// How the library's functions are reached.
enum Loaded {
    /// `FCALL`: the node has the library.
    Functions,
    /// `EVALSHA`: the node cannot take the library now (out of memory).
    Eval,
}

fn is_oom(e: &RedisError) -> bool {
    e.code() == Some("OOM") || e.to_string().contains("OOM")
}

/// The library as one script for `EVAL`, and its SHA-1: the same text, flagged `allow-oom`,
/// whose `register_function` calls fill a table that the first argument (the function's name)
/// picks from.
fn eval_script() -> &'static (String, String) {
    static SCRIPT: OnceLock<(String, String)> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        let body = LIBRARY
            .split_once('\n')
            .map_or(LIBRARY, |(_, rest)| rest)
            .replace("redis.register_function", "register_function");
        let script = format!(
            "#!lua flags=allow-oom\n\
             local functions = {{}}\n\
             local function register_function(f) functions[f.function_name] = f.callback end\n\
             {body}\n\
             local name = table.remove(ARGV, 1)\n\
             return functions[name](KEYS, ARGV)\n"
        );
        let sha = sha1_smol::Sha1::from(script.as_bytes())
            .digest()
            .to_string();
        (script, sha)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SHA-1 of `breaker.lua` as released under [`LIBRARY_NAME`].
    const PINNED: &str = "7463c181bae3630614ec27f78992a856a54b3d8e";

    /// A node that holds a library of this name holds this text (loads use no `REPLACE`):
    /// any change of the text must come with a new name.
    #[test]
    fn the_library_text_is_pinned_to_its_name() {
        let digest = sha1_smol::Sha1::from(LIBRARY.as_bytes())
            .digest()
            .to_string();
        assert_eq!(
            (LIBRARY_NAME, digest.as_str()),
            ("tripline_6", PINNED),
            "breaker.lua changed: give it a new name (its shebang, LIBRARY_NAME, \
             FUNCTION_PREFIX) and pin the new text here"
        );
    }

    #[test]
    fn the_library_names_its_functions_with_the_prefix() {
        assert!(LIBRARY.starts_with(&format!("#!lua name={LIBRARY_NAME}\n")));
        assert_eq!(FUNCTION_PREFIX, format!("{LIBRARY_NAME}_"));
        let registered = LIBRARY.matches("function_name = '").count();
        let prefixed = LIBRARY
            .matches(&format!("function_name = '{FUNCTION_PREFIX}"))
            .count();
        assert_eq!(registered, prefixed);
        assert_eq!(registered, 10);
    }
}
