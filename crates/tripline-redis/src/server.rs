//! Throwaway real `redis-server` processes for tests, benchmarks and examples.
//!
//! [`RedisServer`] starts one `redis-server` on a free `127.0.0.1` port, in a fresh temporary
//! directory, without persistence; [`RedisCluster`] starts several cluster-enabled masters and
//! joins them with `redis-cli --cluster create`. Both wait until the server (or every node)
//! answers, and kill their processes and remove their directories when dropped. Nothing is
//! mocked: the binaries `redis-server` and `redis-cli` must be on `PATH` (Debian and Ubuntu:
//! `apt-get install redis-server redis-tools`), or [`ServerError::NotInstalled`] says so.
//!
//! ```no_run
//! use tripline_redis::server::{RedisCluster, RedisServer, ServerError};
//!
//! # fn main() -> Result<(), ServerError> {
//! let mut server = RedisServer::start()?;
//! assert_eq!(server.cli(&["PING"])?, "PONG");
//! let url = server.url(); // "redis://127.0.0.1:PORT/", for `redis::Client::open`
//! # let _ = url;
//!
//! // Simulate an outage, then bring the server back on the same port (empty: no persistence).
//! server.kill();
//! server.restart()?;
//! server.cli(&["CLIENT", "PAUSE", "200"])?;
//!
//! let cluster = RedisCluster::start(3)?;
//! cluster.cli(&["SET", "{user:1}name", "ada"])?;
//! assert_eq!(cluster.cli(&["GET", "{user:1}name"])?, "ada");
//! # Ok(())
//! # }
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

const SERVER_BIN: &str = "redis-server";
const CLI_BIN: &str = "redis-cli";
const INSTALL_HINT: &str = "Debian/Ubuntu: `sudo apt-get install -y redis-server redis-tools`; \
                            macOS: `brew install redis`";
/// How long a server may take to answer after it was spawned.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a cluster may take to reach `cluster_state:ok` on every node after `--cluster create`.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(30);
const START_POLL: Duration = Duration::from_millis(10);
const CLUSTER_POLL: Duration = Duration::from_millis(50);
/// Fresh ports tried by `start` when redis-server finds its port taken.
const PORT_ATTEMPTS: usize = 8;
/// Binds to port 0 tried while looking for a free (cluster) port.
const FREE_PORT_ATTEMPTS: usize = 200;
/// Tries of `restart` (100 ms apart) when the old port is briefly taken.
const RESTART_ATTEMPTS: usize = 10;
const RESTART_RETRY_DELAY: Duration = Duration::from_millis(100);
/// Redis Cluster's bus listens on the client port plus this.
const CLUSTER_BUS_OFFSET: u16 = 10_000;
const CLUSTER_SLOTS: &str = "16384";
const LOG_TAIL_LINES: usize = 30;
/// Connect and reply timeout of one readiness probe: a local redis-server answers in
/// microseconds, and a probe that times out is simply repeated, while something else squatting
/// the port (accepting, never answering) must not stall the loop that notices our server exit.
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
/// Connect and reply timeout of one `CLUSTER INFO` poll.
const POLL_TIMEOUT: Duration = Duration::from_secs(1);
const MAX_BULK_LEN: usize = 16 << 20;

/// Why a throwaway server or cluster could not be started or driven.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A binary (`redis-server` or `redis-cli`) is not on `PATH`.
    #[error("`{binary}` was not found on PATH; install Redis ({INSTALL_HINT})")]
    NotInstalled {
        /// The missing binary.
        binary: &'static str,
    },
    /// An I/O error: creating the temporary directory, writing the config, spawning, probing.
    #[error("I/O error around a throwaway redis-server: {0}")]
    Io(#[from] io::Error),
    /// An extra config directive cannot be written as one line of `redis.conf`.
    #[error("invalid redis config directive {name:?} {value:?}: {reason}")]
    InvalidDirective {
        /// The directive's name.
        name: String,
        /// The directive's value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Binding to port 0 never gave a usable port (for a cluster node, one whose bus port
    /// `port + 10000` is free as well).
    #[error("no free loopback port found in {attempts} attempts")]
    NoFreePort {
        /// How many ports were tried.
        attempts: usize,
    },
    /// redis-server kept failing because its port (or cluster bus port) was taken.
    #[error("redis-server could not listen on port {port} (address in use); log tail:\n{log_tail}")]
    PortTaken {
        /// The last port tried.
        port: u16,
        /// The last lines redis-server logged on its last try.
        log_tail: String,
    },
    /// redis-server exited before it answered, for a reason other than a taken port
    /// (typically a bad config directive).
    #[error("redis-server on port {port} exited during startup ({status}); log tail:\n{log_tail}")]
    Exited {
        /// The port it was given.
        port: u16,
        /// How it exited.
        status: ExitStatus,
        /// The last lines it logged.
        log_tail: String,
    },
    /// redis-server did not answer on its port in time; it was killed.
    #[error("redis-server on port {port} did not answer within {waited:?}; log tail:\n{log_tail}")]
    NotReady {
        /// The port it was given.
        port: u16,
        /// How long it was waited for.
        waited: Duration,
        /// The last lines it logged.
        log_tail: String,
    },
    /// `redis-cli` exited with a failure status (an error *reply* is not a failure for
    /// `redis-cli`: it comes back as the `Ok` text `ERR ...`).
    #[error("`redis-cli {}` failed ({status}): {} {}", .args.join(" "), .stderr.trim(), .stdout.trim())]
    Cli {
        /// Its arguments.
        args: Vec<String>,
        /// How it exited.
        status: ExitStatus,
        /// What it wrote to stdout.
        stdout: String,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// A Redis Cluster needs at least three masters.
    #[error("a Redis Cluster needs at least 3 masters, asked for {n}")]
    ClusterTooSmall {
        /// The number asked for.
        n: usize,
    },
    /// The cluster did not reach `cluster_state:ok` (with every slot assigned and every node
    /// known) on every node in time.
    #[error("cluster on ports {ports:?} not ok within {waited:?}: {detail}")]
    ClusterNotReady {
        /// The nodes' ports.
        ports: Vec<u16>,
        /// How long it was waited for.
        waited: Duration,
        /// The last `CLUSTER INFO` (or error) of a node that was not ready.
        detail: String,
    },
}

/// One throwaway `redis-server` on `127.0.0.1`, killed (SIGKILL) and its directory removed when
/// dropped.
///
/// It is also killed, and its directory removed, within about a second of this process's end
/// when it is never dropped (a server held in a `static`, a test process killed by its
/// harness): a small watchdog (`sh`) beside it polls for this process and cleans up after it.
///
/// It runs without persistence (`save ""`, `appendonly no`), with `protected-mode no` and, on
/// Redis 7 and later, `enable-debug-command local` (so `DEBUG SLEEP` works), from a
/// `redis.conf` in its temporary directory; it logs to `redis.log` there.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    watchdog: Option<Child>,
    port: u16,
    config: PathBuf,
    log: PathBuf,
    dir: TempDir,
}

impl RedisServer {
    /// Starts `redis-server` on a free `127.0.0.1` port in a fresh temporary directory, without
    /// persistence, and waits (at most 10 s) until it answers.
    pub fn start() -> Result<Self, ServerError> {
        Self::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra config directives appended to the generated
    /// `redis.conf`, e.g. `&[("maxmemory", "2mb"), ("maxmemory-policy", "volatile-lru")]`.
    ///
    /// Each pair becomes the line `name value`, so a value may hold several words
    /// (`("save", "3600 1")`); an empty value is written as `""`. Do not override `port`,
    /// `bind` or `dir`.
    pub fn start_with(extra: &[(&str, &str)]) -> Result<Self, ServerError> {
        Self::spawn(extra, false)
    }

    /// The port it listens on (on `127.0.0.1`); it keeps it across [`kill`](Self::kill) and
    /// [`restart`](Self::restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Its temporary directory: `redis.conf`, `redis.log` (its stdout and stderr) and, for a
    /// cluster node, `nodes.conf`. Removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kills the process (SIGKILL) and waits for it; does nothing if it is not running. Its
    /// port and directory stay for [`restart`](Self::restart).
    pub fn kill(&mut self) {
        // The server first, then its watchdog (which would otherwise kill it within a second
        // of this process's end, and remove the directory a restart needs).
        for child in [self.child.take(), self.watchdog.take()]
            .into_iter()
            .flatten()
        {
            let mut child = child;
            // `kill` only fails when the child has already been reaped, which `take` rules out,
            // or has already exited, which `wait` then collects.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (killing it first if it still
    /// runs) and waits until it answers. Its data is gone: nothing was persisted.
    ///
    /// If the port was taken in the meantime it retries for about 1 s, then fails with
    /// [`ServerError::PortTaken`].
    pub fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        let mut log_tail = String::new();
        for attempt in 0..RESTART_ATTEMPTS {
            if attempt > 0 {
                thread::sleep(RESTART_RETRY_DELAY);
            }
            match launch(&self.config, &self.log, self.port) {
                Ok(child) => {
                    self.watchdog = watchdog(&child, self.dir.path());
                    self.child = Some(child);
                    return Ok(());
                }
                Err(Launch::PortInUse { log_tail: tail }) => log_tail = tail,
                Err(Launch::Failed(error)) => return Err(error),
            }
        }
        Err(ServerError::PortTaken {
            port: self.port,
            log_tail,
        })
    }

    /// Runs `redis-cli -h 127.0.0.1 -p PORT <args>` and returns its stdout, trimmed (e.g.
    /// `cli(&["PTTL", "key"])`, `cli(&["CONFIG", "SET", "maxmemory", "1mb"])`,
    /// `cli(&["DEBUG", "SLEEP", "0.5"])`).
    ///
    /// `redis-cli` prints replies raw (no `(integer)` prefix; one line per array element) and
    /// reports an error reply as text (`ERR ...`) with success; it fails, giving
    /// [`ServerError::Cli`], when it cannot connect, e.g. after [`kill`](Self::kill).
    pub fn cli(&self, args: &[&str]) -> Result<String, ServerError> {
        let port = self.port.to_string();
        run_cli(&["-h", "127.0.0.1", "-p", &port], args)
    }

    /// Creates the temporary directory and starts a server in it, retrying with a fresh port
    /// while redis-server reports its port taken.
    fn spawn(extra: &[(&str, &str)], cluster: bool) -> Result<Self, ServerError> {
        for &(name, value) in extra {
            validate_directive(name, value)?;
        }
        let major = server_major_version()?;
        let dir = tempfile::Builder::new()
            .prefix("tripline-redis-")
            .tempdir()?;
        let config = dir.path().join("redis.conf");
        let log = dir.path().join("redis.log");
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port(cluster)?;
            if cluster {
                // A failed try may have written our node's identity; start afresh.
                match fs::remove_file(dir.path().join("nodes.conf")) {
                    Err(error) if error.kind() != io::ErrorKind::NotFound => {
                        return Err(error.into());
                    }
                    _ => {}
                }
            }
            let text = config_text(port, dir.path(), major, cluster, extra);
            fs::write(&config, text)?;
            match launch(&config, &log, port) {
                Ok(child) => {
                    return Ok(Self {
                        watchdog: watchdog(&child, dir.path()),
                        child: Some(child),
                        port,
                        config,
                        log,
                        dir,
                    });
                }
                Err(Launch::PortInUse { log_tail }) => last = Some((port, log_tail)),
                Err(Launch::Failed(error)) => return Err(error),
            }
        }
        let (port, log_tail) = last.unwrap_or_default();
        Err(ServerError::PortTaken { port, log_tail })
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // `dir` (a `TempDir`) is removed when the fields drop, after the process is gone.
        self.kill();
    }
}

/// A throwaway Redis Cluster: `n` masters (no replicas) on free loopback ports, all slots
/// assigned; every node is killed and its directory removed when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `n` (at least 3) cluster-enabled masters on free `127.0.0.1` ports (each with its
    /// bus port, `port + 10000`, free too), joins them with
    /// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`, then waits (at most
    /// 30 s) until every node reports `cluster_state:ok`, all 16384 slots assigned and all `n`
    /// nodes known.
    pub fn start(n: usize) -> Result<Self, ServerError> {
        Self::start_with(n, &[])
    }

    /// Like [`start`](Self::start), with extra config directives for every node (see
    /// [`RedisServer::start_with`]), e.g. `&[("cluster-node-timeout", "2000")]`.
    pub fn start_with(n: usize, extra: &[(&str, &str)]) -> Result<Self, ServerError> {
        if n < 3 {
            return Err(ServerError::ClusterTooSmall { n });
        }
        let nodes = (0..n)
            .map(|_| RedisServer::spawn(extra, true))
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = Self { nodes };

        let addresses: Vec<String> = cluster
            .ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addresses.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        let output = run_cli(&[], &args)?;
        // redis-cli exits 0 on some failures and prints them, like everything else, to stdout.
        if output.contains("[ERR]") {
            return Err(ServerError::ClusterNotReady {
                ports: cluster.ports(),
                waited: Duration::ZERO,
                detail: format!("`redis-cli --cluster create` reported:\n{output}"),
            });
        }
        cluster.wait_until_ok()?;
        Ok(cluster)
    }

    /// The nodes' URLs, `redis://127.0.0.1:PORT/`, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes' ports, in node order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// The nodes, e.g. to run `redis-cli` against one of them.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes, mutably, e.g. to [`kill`](RedisServer::kill) one and
    /// [`restart`](RedisServer::restart) it later (it rejoins from its `nodes.conf`; the slots
    /// it served are empty, since nothing was persisted).
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// Runs `redis-cli -c -h 127.0.0.1 -p <first node's port> <args>` (cluster mode: it follows
    /// `MOVED`/`ASK` redirections) and returns its stdout, trimmed; see [`RedisServer::cli`].
    pub fn cli(&self, args: &[&str]) -> Result<String, ServerError> {
        let port = self.nodes.first().map_or(0, RedisServer::port).to_string();
        run_cli(&["-c", "-h", "127.0.0.1", "-p", &port], args)
    }

    /// Polls `CLUSTER INFO` on every node until all agree the cluster is complete and ok.
    fn wait_until_ok(&self) -> Result<(), ServerError> {
        let started = Instant::now();
        let known = self.nodes.len().to_string();
        loop {
            let mut detail = None;
            for node in &self.nodes {
                let not_ok = match command(node.port, &["CLUSTER", "INFO"], POLL_TIMEOUT) {
                    Ok(Ok(info)) => {
                        let field = |name: &str| {
                            info.lines()
                                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                                .map(str::trim)
                        };
                        let ok = field("cluster_state") == Some("ok")
                            && field("cluster_slots_assigned") == Some(CLUSTER_SLOTS)
                            && field("cluster_slots_ok") == Some(CLUSTER_SLOTS)
                            && field("cluster_known_nodes") == Some(known.as_str());
                        (!ok).then(|| format!("CLUSTER INFO on port {}:\n{info}", node.port))
                    }
                    Ok(Err(reply)) => Some(format!("CLUSTER INFO on port {}: {reply}", node.port)),
                    Err(error) => Some(format!("CLUSTER INFO on port {}: {error}", node.port)),
                };
                if not_ok.is_some() {
                    detail = not_ok;
                    break;
                }
            }
            let Some(detail) = detail else {
                return Ok(());
            };
            if started.elapsed() >= CLUSTER_TIMEOUT {
                return Err(ServerError::ClusterNotReady {
                    ports: self.ports(),
                    waited: started.elapsed(),
                    detail,
                });
            }
            thread::sleep(CLUSTER_POLL);
        }
    }
}

/// A TCP proxy on a free `127.0.0.1` port in front of a server, to put a network fault between
/// clients and Redis: a delay on everything that passes, stalls of one chunk in `n` (what a
/// lost packet costs a TCP stream: a retransmission later), a partition (connections stay up
/// and new ones are accepted, but nothing passes either way until it heals, as when a network
/// drops every packet), dropped connections, and a new target for new connections (a
/// failover behind a stable address). Stopped, with every connection through it closed, when
/// dropped.
///
/// ```no_run
/// use std::time::Duration;
/// use tripline_redis::server::{Proxy, RedisServer};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = RedisServer::start()?;
/// let proxy = Proxy::start(server.port())?;
/// let url = proxy.url(); // clients connect here
/// proxy.set_delay(Duration::from_millis(5));
/// proxy.partition();
/// proxy.heal();
/// # let _ = url;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    state: std::sync::Arc<ProxyState>,
    accept: Option<thread::JoinHandle<()>>,
}

#[derive(Debug)]
struct ProxyState {
    target: std::sync::Mutex<u16>,
    delay_micros: std::sync::atomic::AtomicU64,
    /// One chunk in this many is held for `stall_micros` (0: none).
    stall_one_in: std::sync::atomic::AtomicU64,
    stall_micros: std::sync::atomic::AtomicU64,
    chunks: std::sync::atomic::AtomicU64,
    partitioned: std::sync::atomic::AtomicBool,
    stop: std::sync::atomic::AtomicBool,
    /// Both ends of every connection, to close them.
    conns: std::sync::Mutex<Vec<TcpStream>>,
}

/// How often a blocked proxy thread looks at the proxy's settings.
const PROXY_POLL: Duration = Duration::from_millis(2);

impl Proxy {
    /// Starts a proxy to `127.0.0.1:target_port`.
    pub fn start(target_port: u16) -> Result<Self, ServerError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let state = std::sync::Arc::new(ProxyState {
            target: std::sync::Mutex::new(target_port),
            delay_micros: 0.into(),
            stall_one_in: 0.into(),
            stall_micros: 0.into(),
            chunks: 0.into(),
            partitioned: false.into(),
            stop: false.into(),
            conns: std::sync::Mutex::new(Vec::new()),
        });
        let st = state.clone();
        let accept = thread::spawn(move || {
            use std::sync::atomic::Ordering::Relaxed;
            while !st.stop.load(Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let target = *st.target.lock().unwrap_or_else(|e| e.into_inner());
                        let Ok(upstream) = TcpStream::connect((Ipv4Addr::LOCALHOST, target)) else {
                            drop(client);
                            continue;
                        };
                        let _ = client.set_nonblocking(false);
                        let _ = client.set_nodelay(true);
                        let _ = upstream.set_nodelay(true);
                        if let (Ok(c2), Ok(u2)) = (client.try_clone(), upstream.try_clone()) {
                            let mut conns = st.conns.lock().unwrap_or_else(|e| e.into_inner());
                            conns.push(c2);
                            conns.push(u2);
                        }
                        for (from, to) in [
                            (client.try_clone(), upstream.try_clone()),
                            (upstream.try_clone(), client.try_clone()),
                        ] {
                            if let (Ok(from), Ok(to)) = (from, to) {
                                let st = st.clone();
                                thread::spawn(move || forward(from, to, &st));
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(PROXY_POLL),
                    Err(_) => thread::sleep(PROXY_POLL),
                }
            }
        });
        Ok(Self {
            port,
            state,
            accept: Some(accept),
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Holds everything that passes, each way, for `delay` (zero: none).
    pub fn set_delay(&self, delay: Duration) {
        self.state.delay_micros.store(
            delay.as_micros() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Holds one chunk in `one_in` for `stall` more (`one_in` 0: none), as a lost packet
    /// holds a TCP stream until it is sent again.
    pub fn set_loss(&self, one_in: u64, stall: Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        self.state
            .stall_micros
            .store(stall.as_micros() as u64, Relaxed);
        self.state.stall_one_in.store(one_in, Relaxed);
    }

    /// Lets nothing through, either way, until [`heal`](Self::heal): connections stay open (no
    /// reset, no close), new ones are accepted and hang.
    pub fn partition(&self) {
        self.state
            .partitioned
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Ends a partition: what was held goes on.
    pub fn heal(&self) {
        self.state
            .partitioned
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// New connections go to `127.0.0.1:port` from now on.
    pub fn retarget(&self, port: u16) {
        *self.state.target.lock().unwrap_or_else(|e| e.into_inner()) = port;
    }

    /// Closes every connection made through the proxy (both ends).
    pub fn drop_connections(&self) {
        let conns =
            std::mem::take(&mut *self.state.conns.lock().unwrap_or_else(|e| e.into_inner()));
        for c in conns {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state
            .stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.drop_connections();
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// Copies `from` to `to` chunk by chunk, under the proxy's settings, until either side closes.
fn forward(mut from: TcpStream, mut to: TcpStream, st: &ProxyState) {
    use std::sync::atomic::Ordering::Relaxed;
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if st.stop.load(Relaxed) {
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => break,
        };
        while st.partitioned.load(Relaxed) && !st.stop.load(Relaxed) {
            thread::sleep(PROXY_POLL);
        }
        let mut hold = st.delay_micros.load(Relaxed);
        let one_in = st.stall_one_in.load(Relaxed);
        if one_in > 0 && st.chunks.fetch_add(1, Relaxed) % one_in == one_in - 1 {
            hold += st.stall_micros.load(Relaxed);
        }
        if hold > 0 {
            thread::sleep(Duration::from_micros(hold));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

/// Why one launch of redis-server failed.
enum Launch {
    /// It exited because its port (or cluster bus port) was in use: worth a retry.
    PortInUse { log_tail: String },
    /// Anything else.
    Failed(ServerError),
}

impl From<io::Error> for Launch {
    fn from(error: io::Error) -> Self {
        Launch::Failed(error.into())
    }
}

/// A `sh` beside the server that polls, once a second, whether this process still runs, and
/// when it does not, kills the server and removes its directory: a server that is never
/// dropped (held in a `static`, or its process killed) does not outlive its process. `None`
/// where no `sh` can be started (the server then lives until it is dropped, as before).
fn watchdog(server: &Child, dir: &Path) -> Option<Child> {
    // The directory goes first, so that once the server's connections close it is gone.
    const SCRIPT: &str = "while kill -0 \"$1\" 2>/dev/null; do sleep 1; done; \
        rm -rf -- \"$3\"; kill -9 \"$2\" 2>/dev/null";
    Command::new("sh")
        .args(["-c", SCRIPT, "tripline-redis-watchdog"])
        .arg(std::process::id().to_string())
        .arg(server.id().to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

/// Kills and reaps its child when dropped, unless [`defuse`](Reaper::defuse)d.
struct Reaper(Option<Child>);

impl Reaper {
    fn child(&mut self) -> io::Result<&mut Child> {
        self.0
            .as_mut()
            .ok_or_else(|| io::Error::other("redis-server child already handed over"))
    }

    fn defuse(mut self) -> Option<Child> {
        self.0.take()
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Spawns `redis-server <config>` (stdout and stderr appended to `log`) and waits until the
/// process itself answers on `port`: `INFO server` must report the child's pid, so a server
/// that some other test started on the same port is not mistaken for ours.
fn launch(config: &Path, log: &Path, port: u16) -> Result<Child, Launch> {
    let offset = fs::metadata(log).map_or(0, |metadata| metadata.len());
    let stdout = OpenOptions::new().create(true).append(true).open(log)?;
    let stderr = stdout.try_clone()?;
    let child = Command::new(SERVER_BIN)
        .arg(config)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|error| Launch::Failed(spawn_error(SERVER_BIN, error)))?;
    let mut reaper = Reaper(Some(child));
    let pid = reaper.child()?.id();
    let started = Instant::now();
    loop {
        if let Some(status) = reaper.child()?.try_wait()? {
            let log_tail = log_tail(log, offset);
            return Err(if log_tail.contains("Address already in use") {
                Launch::PortInUse { log_tail }
            } else {
                Launch::Failed(ServerError::Exited {
                    port,
                    status,
                    log_tail,
                })
            });
        }
        if probe_pid(port) == Some(pid) {
            return reaper
                .defuse()
                .ok_or_else(|| io::Error::other("redis-server child lost").into());
        }
        let waited = started.elapsed();
        if waited >= START_TIMEOUT {
            drop(reaper);
            return Err(Launch::Failed(ServerError::NotReady {
                port,
                waited,
                log_tail: log_tail(log, offset),
            }));
        }
        thread::sleep(START_POLL);
    }
}

/// The pid reported by the server answering on `port`, if one answers.
fn probe_pid(port: u16) -> Option<u32> {
    let info = command(port, &["INFO", "server"], PROBE_TIMEOUT)
        .ok()?
        .ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))?
        .trim()
        .parse()
        .ok()
}

/// Sends one command to `127.0.0.1:port` over RESP and reads one reply: `Ok(Ok(text))` for a
/// simple string, integer or bulk string (nil reads as ""), `Ok(Err(text))` for an error reply.
fn command(port: u16, args: &[&str], timeout: Duration) -> io::Result<Result<String, String>> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())?;

    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end_matches(['\r', '\n']);
    let invalid = || io::Error::new(io::ErrorKind::InvalidData, format!("bad reply {line:?}"));
    match line.split_at_checked(1) {
        Some(("+" | ":", rest)) => Ok(Ok(rest.to_owned())),
        Some(("-", rest)) => Ok(Err(rest.to_owned())),
        Some(("$", "-1")) => Ok(Ok(String::new())),
        Some(("$", len)) => {
            let len: usize = len.parse().map_err(|_| invalid())?;
            if len > MAX_BULK_LEN {
                return Err(invalid());
            }
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body)?;
            body.truncate(len);
            Ok(Ok(String::from_utf8_lossy(&body).into_owned()))
        }
        _ => Err(invalid()),
    }
}

/// A port that was free on `127.0.0.1` a moment ago; for a cluster node, one below 55536 whose
/// bus port (`port + 10000`) was free too.
fn free_port(cluster: bool) -> Result<u16, ServerError> {
    for _ in 0..FREE_PORT_ATTEMPTS {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        if !cluster {
            return Ok(port);
        }
        let Some(bus) = port.checked_add(CLUSTER_BUS_OFFSET) else {
            continue;
        };
        if TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok() {
            return Ok(port);
        }
    }
    Err(ServerError::NoFreePort {
        attempts: FREE_PORT_ATTEMPTS,
    })
}

/// The `redis.conf` of a throwaway server; `extra` comes last, so it overrides the defaults.
fn config_text(
    port: u16,
    dir: &Path,
    major: Option<u32>,
    cluster: bool,
    extra: &[(&str, &str)],
) -> String {
    let mut text = format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         protected-mode no\n\
         daemonize no\n\
         dir {}\n\
         logfile \"\"\n\
         save \"\"\n\
         appendonly no\n",
        quote(&dir.to_string_lossy())
    );
    // `enable-debug-command` (Redis 7) is an unknown directive, fatal, before it.
    if major.is_some_and(|major| major >= 7) {
        text.push_str("enable-debug-command local\n");
    }
    if cluster {
        text.push_str("cluster-enabled yes\ncluster-config-file nodes.conf\n");
    }
    for &(name, value) in extra {
        let value = if value.is_empty() { "\"\"" } else { value };
        text.push_str(&format!("{name} {value}\n"));
    }
    text
}

/// `value` as one double-quoted argument of a redis config line.
fn quote(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for c in value.chars() {
        if matches!(c, '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

fn validate_directive(name: &str, value: &str) -> Result<(), ServerError> {
    let reason = if name.is_empty() {
        Some("empty name")
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("the name holds whitespace or a control character")
    } else if value.chars().any(|c| matches!(c, '\n' | '\r' | '\0')) {
        Some("the value holds a line break or NUL")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ServerError::InvalidDirective {
            name: name.to_owned(),
            value: value.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// The major version of `redis-server` (`None` if its `--version` cannot be parsed), or
/// [`ServerError::NotInstalled`].
fn server_major_version() -> Result<Option<u32>, ServerError> {
    static MAJOR: OnceLock<Option<u32>> = OnceLock::new();
    if let Some(&major) = MAJOR.get() {
        return Ok(major);
    }
    let output = Command::new(SERVER_BIN)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|error| spawn_error(SERVER_BIN, error))?;
    // "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=..."
    let major = String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .and_then(|version| version.split('.').next()?.parse().ok());
    Ok(*MAJOR.get_or_init(|| major))
}

/// Runs `redis-cli <prefix> <args>`; its stdout, trimmed, or [`ServerError::Cli`].
fn run_cli(prefix: &[&str], args: &[&str]) -> Result<String, ServerError> {
    let output = Command::new(CLI_BIN)
        .args(prefix)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| spawn_error(CLI_BIN, error))?;
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if !output.status.success() {
        return Err(ServerError::Cli {
            args: prefix
                .iter()
                .chain(args)
                .map(|&arg| arg.to_owned())
                .collect(),
            status: output.status,
            stdout,
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(stdout)
}

fn spawn_error(binary: &'static str, error: io::Error) -> ServerError {
    if error.kind() == io::ErrorKind::NotFound {
        ServerError::NotInstalled { binary }
    } else {
        ServerError::Io(error)
    }
}

/// The last lines of `log` written after byte `offset` (or why it could not be read).
fn log_tail(log: &Path, offset: u64) -> String {
    let read = || -> io::Result<String> {
        let mut file = File::open(log)?;
        file.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(error) => format!("(could not read {}: {error})", log.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server held past its process's end (never dropped: a `static`, a killed test) is
    /// killed and its directory removed by its watchdog.
    #[test]
    fn a_server_never_dropped_does_not_outlive_its_process() -> Result<(), ServerError> {
        use std::io::Read;
        if std::env::var_os("TRIPLINE_REDIS_NEVER_DROPPED").is_some() {
            let server = RedisServer::start()?;
            println!("port={} dir={}", server.port(), server.dir().display());
            std::mem::forget(server);
            std::process::exit(0);
        }
        let out = Command::new(std::env::current_exe()?)
            .args([
                "--exact",
                "server::tests::a_server_never_dropped_does_not_outlive_its_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("TRIPLINE_REDIS_NEVER_DROPPED", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        // libtest prints the test's name first, on the same line.
        let line = text
            .lines()
            .find_map(|l| l.split_once("port=").map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("the child printed no port ({:?}): {text}", out.status));
        let (port, dir) = line.split_once(" dir=").expect("port and dir");
        let port: u16 = port.parse().expect("a port");
        // The server is gone when its connection closes (or when nothing listens any more);
        // the read timeout bounds the wait for a failure, it times nothing that passes.
        if let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            conn.set_read_timeout(Some(Duration::from_secs(60)))?;
            let mut buf = [0u8; 64];
            loop {
                match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
                    Err(e) => {
                        panic!("redis-server on {port} still runs after its process ended: {e}")
                    }
                }
            }
        }
        assert!(
            !Path::new(dir).exists(),
            "{dir} outlived the process that made it"
        );
        Ok(())
    }

    #[test]
    fn server_answers_dies_and_comes_back_on_the_same_port() -> Result<(), ServerError> {
        let mut server = RedisServer::start()?;
        let port = server.port();
        assert_eq!(server.url(), format!("redis://127.0.0.1:{port}/"));
        assert_eq!(server.cli(&["PING"])?, "PONG");
        assert_eq!(server.cli(&["SET", "k", "v"])?, "OK");
        assert_eq!(server.cli(&["DEBUG", "SLEEP", "0"])?, "OK");
        assert_eq!(server.cli(&["CONFIG", "GET", "save"])?, "save");

        server.kill();
        server.kill(); // idempotent
        assert!(matches!(
            server.cli(&["PING"]),
            Err(ServerError::Cli { .. })
        ));

        server.restart()?;
        assert_eq!(server.port(), port);
        assert_eq!(server.cli(&["PING"])?, "PONG");
        // Nothing was persisted.
        assert_eq!(server.cli(&["EXISTS", "k"])?, "0");
        Ok(())
    }

    #[test]
    fn restart_reports_a_port_taken_meanwhile() -> Result<(), ServerError> {
        let mut server = RedisServer::start()?;
        server.kill();
        let squatter = TcpListener::bind((Ipv4Addr::LOCALHOST, server.port()))?;
        match server.restart() {
            Err(ServerError::PortTaken { port, log_tail }) => {
                assert_eq!(port, server.port());
                assert!(log_tail.contains("Address already in use"), "{log_tail}");
            }
            other => panic!("expected PortTaken, got {other:?}"),
        }
        drop(squatter);
        server.restart()?;
        assert_eq!(server.cli(&["PING"])?, "PONG");
        Ok(())
    }

    #[test]
    fn extra_directives_apply_and_bad_ones_fail_with_the_log() -> Result<(), ServerError> {
        let server =
            RedisServer::start_with(&[("maxmemory", "2mb"), ("maxmemory-policy", "volatile-lru")])?;
        assert_eq!(
            server.cli(&["CONFIG", "GET", "maxmemory"])?,
            "maxmemory\n2097152"
        );
        assert_eq!(
            server.cli(&["CONFIG", "GET", "maxmemory-policy"])?,
            "maxmemory-policy\nvolatile-lru"
        );

        match RedisServer::start_with(&[("no-such-directive", "1")]) {
            Err(ServerError::Exited { log_tail, .. }) => {
                assert!(log_tail.contains("no-such-directive"), "{log_tail}");
            }
            other => panic!("expected Exited, got {other:?}"),
        }
        assert!(matches!(
            RedisServer::start_with(&[("maxmemory", "1mb\nport 1")]),
            Err(ServerError::InvalidDirective { .. })
        ));
        Ok(())
    }

    #[test]
    fn drop_kills_the_server_and_removes_its_dir() -> Result<(), ServerError> {
        let server = RedisServer::start()?;
        let dir = server.dir.path().to_owned();
        let port = server.port();
        assert!(dir.join("redis.log").exists());
        drop(server);
        assert!(!dir.exists());
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err());
        Ok(())
    }

    #[test]
    fn cluster_of_three_is_ok_and_follows_redirections() -> Result<(), ServerError> {
        let cluster = RedisCluster::start(3)?;
        assert_eq!(cluster.ports().len(), 3);
        assert_eq!(cluster.urls().len(), 3);
        for port in cluster.ports() {
            assert!(port < 55_536);
        }
        let info = cluster.cli(&["CLUSTER", "INFO"])?;
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert_eq!(cluster.cli(&["SET", "{x}a", "1"])?, "OK");
        assert_eq!(cluster.cli(&["GET", "{x}a"])?, "1");
        // Keys of other slots land on other nodes and are found through redirections.
        for key in ["a", "b", "c", "d", "e", "f"] {
            assert_eq!(cluster.cli(&["SET", key, key])?, "OK");
            assert_eq!(cluster.cli(&["GET", key])?, key);
        }
        Ok(())
    }

    #[test]
    fn cluster_needs_three_masters() {
        assert!(matches!(
            RedisCluster::start(2),
            Err(ServerError::ClusterTooSmall { n: 2 })
        ));
    }
}
