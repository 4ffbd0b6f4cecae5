//! The fleet across a network that fails: replicas and Redis joined by links that can be
//! delayed, made to lose packets, or cut (one replica's link, or Redis's), while the fleet
//! trips, probes and recovers. Every decision is recorded with the deciding replica's view,
//! and the history is checked: no call admitted by the shared state while any replica's last
//! view was Open and unexpired (nor by a replica's local fallback while its own view was),
//! every call bounded by the Redis timeout, at most K probes fleet-wide at any time.
//!
//! Two networks run the same scenario:
//! * **Network namespaces** (Linux, root): Redis in a namespace of its own, each replica in
//!   another (a thread moved into it), each joined to Redis's by a veth pair. A cut is a link
//!   set down (packets vanish: no reset reaches either side); delay and loss are `tc netem`
//!   where the kernel has it. Where namespaces cannot be made (no privilege, not Linux) the test
//!   says so and runs the proxy version only; where `netem` is missing it says so and the proxy
//!   version covers delay and loss.
//! * **An in-process TCP proxy** per replica ([`tripline_redis::server::Proxy`]), which always
//!   runs: a held chunk is a delay, an occasional long hold a lost packet's retransmission, a
//!   proxy that forwards nothing a cut.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use tripline::{BreakerConfig, Clock, ManualClock, Outcome, Rejected, State, WindowConfig};
use tripline_redis::server::{Proxy, RedisServer};
use tripline_redis::{Backend, Fallback, SharedBreaker, SharedConfig, SharedPermit, TimeSource};

const SECOND: Duration = Duration::from_secs(1);
const REPLICAS: usize = 4;
const K: u32 = 2;
/// Every call's bound.
const REDIS_TIMEOUT: Duration = Duration::from_millis(50);
/// How much longer than the Redis timeout a call may take on a loaded machine (a call that
/// is not bounded waits for TCP: seconds).
const SLACK: Duration = Duration::from_millis(450);
const OPEN: Duration = Duration::from_secs(30);

fn config() -> BreakerConfig {
    BreakerConfig::builder()
        .window(WindowConfig::Count { size: 20 })
        .minimum_calls(12)
        .failure_rate_threshold(50.0)
        .open_duration(OPEN)
        .half_open_calls(K)
        .probe_lease(10 * SECOND)
        .count_in_flight_as_slow(false)
        .build()
        .unwrap()
}

/// One decision, as the history records it.
#[derive(Clone, Debug)]
struct Decision {
    replica: usize,
    /// The manual clock when it was made (microseconds).
    at: u64,
    admitted: bool,
    probe: bool,
    local: bool,
    /// What the deciding replica's last view was just before, and right after.
    view: Option<State>,
    view_after: Option<State>,
    /// How long the acquire took, and the record after it (real time).
    took: Duration,
    /// For an Open rejection, the deadline it gave (manual microseconds).
    open_until: Option<u64>,
    phase: &'static str,
}

/// What a replica answers: admitted, a probe, decided locally, its view before, how long it
/// took, an Open rejection's time left, its view after.
type Reply = Result<
    (
        bool,
        bool,
        bool,
        Option<State>,
        Duration,
        Option<Duration>,
        Option<State>,
    ),
    String,
>;

/// What a replica is asked to do, on its own thread (in its own namespace).
enum Job {
    /// Acquire; record `outcome` at once, or hold an admitted permit (`None`).
    Call(Option<Outcome>),
    /// Record every held permit's outcome.
    Settle(Outcome),
    /// Wait (at most this long, outside any call) for a connection to Redis.
    Connect(Duration),
}

struct Replica {
    jobs: mpsc::Sender<(Job, mpsc::Sender<Reply>)>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Replica {
    /// A replica on a thread of its own (moved into `netns` first, if given), its breaker on
    /// `url` with the shared manual clock.
    fn start(
        id: usize,
        url: String,
        netns: Option<String>,
        clock: ManualClock,
        fallback: Fallback,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<(Job, mpsc::Sender<_>)>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = thread::spawn(move || {
            if let Some(ns) = netns {
                if let Err(e) = enter_netns(&ns) {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let breaker: SharedBreaker<ManualClock> = rt.block_on(async {
                SharedBreaker::with_clock(
                    "dep:across-the-network",
                    config(),
                    SharedConfig::builder()
                        .time_source(TimeSource::Local)
                        .redis_timeout(REDIS_TIMEOUT)
                        // Every acquire asks Redis (a replica deciding from a view learns of a
                        // trip within view_ttl, which this check would count against it).
                        .view_ttl(Duration::ZERO)
                        .fallback(fallback)
                        .replica_id(format!("r{id}"))
                        .build()
                        .unwrap(),
                    Backend::single(&url).unwrap(),
                    clock,
                )
                .unwrap()
            });
            let _ = ready_tx.send(Ok(()));
            let mut held: Vec<SharedPermit<ManualClock>> = Vec::new();
            for (job, reply) in rx {
                let r = rt.block_on(async {
                    match job {
                        Job::Call(outcome) => {
                            let view = breaker.last_known_state();
                            let started = Instant::now();
                            let r = breaker.acquire().await;
                            let mut retry = None;
                            let out = match r {
                                Ok(p) => {
                                    let (probe, local) = (p.is_probe(), p.is_local());
                                    match outcome {
                                        Some(o) => {
                                            p.record(o).await;
                                        }
                                        None => held.push(p),
                                    }
                                    (true, probe, local)
                                }
                                Err(e) => {
                                    retry = opened(&e);
                                    (false, false, false)
                                }
                            };
                            let after = breaker.last_known_state();
                            Ok((out.0, out.1, out.2, view, started.elapsed(), retry, after))
                        }
                        Job::Settle(o) => {
                            let started = Instant::now();
                            for p in held.drain(..) {
                                p.record(o).await;
                            }
                            Ok((false, false, false, None, started.elapsed(), None, None))
                        }
                        Job::Connect(within) => breaker
                            .check(within)
                            .await
                            .map(|_| (false, false, false, None, Duration::ZERO, None, None))
                            .map_err(|e| e.to_string()),
                    }
                });
                let _ = reply.send(r);
            }
        });
        ready_rx
            .recv()
            .unwrap()
            .unwrap_or_else(|e| panic!("replica {id}: {e}"));
        Self {
            jobs: tx,
            thread: Some(thread),
        }
    }

    fn ask(&self, job: Job) -> Reply {
        let (tx, rx) = mpsc::channel();
        self.jobs.send((job, tx)).unwrap();
        rx.recv().unwrap()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let (tx, _) = mpsc::channel();
        self.jobs = tx;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An Open rejection's time left.
fn opened(e: &Rejected) -> Option<Duration> {
    (e.state() == State::Open)
        .then(|| e.retry_after())
        .flatten()
}

/// The faults a network can have.
trait Network {
    fn name(&self) -> &'static str;
    /// Redis, for setting up and reading (`redis-cli` arguments).
    fn cli(&self, args: &[&str]) -> String;
    fn cut(&self, replica: usize);
    fn cut_redis(&self);
    fn heal(&self);
    /// A delay on one replica's link, and loss on another's.
    fn degrade(&self, delayed: usize, lossy: usize);
}

/// The scenario and its history check, on `net` with `replicas`.
struct Run<'a> {
    net: &'a dyn Network,
    replicas: Vec<Replica>,
    clock: ManualClock,
    history: Vec<Decision>,
    /// Probes held (replica, admitted at).
    probes: Vec<(usize, u64)>,
    max_probes: usize,
    fallback: Fallback,
}

impl Run<'_> {
    fn now(&self) -> u64 {
        self.clock.now() / 1000
    }

    fn call(&mut self, replica: usize, outcome: Option<Outcome>, phase: &'static str) {
        let (admitted, probe, local, view, took, retry, view_after) =
            self.replicas[replica].ask(Job::Call(outcome)).unwrap();
        let at = self.now();
        if probe && outcome.is_none() {
            self.probes.push((replica, at));
        }
        // Probes held whose leases are still live, fleet-wide.
        let lease = 10 * 1_000_000;
        let live = self.probes.iter().filter(|(_, t)| at < t + lease).count();
        self.max_probes = self.max_probes.max(live);
        self.history.push(Decision {
            replica,
            at,
            admitted,
            probe,
            local,
            view,
            took,
            open_until: retry.map(|r| at + r.as_micros() as u64),
            view_after,
            phase,
        });
    }

    fn round(&mut self, outcome: Outcome, n: usize, phase: &'static str) {
        for _ in 0..n {
            for r in 0..self.replicas.len() {
                self.call(r, Some(outcome), phase);
            }
        }
    }

    /// Checks the history: each admitted call against every replica's last Open view,
    /// replayed from what each replica's view was after each of its calls.
    fn check(&self) {
        let n = self.replicas.len();
        let mut views: Vec<u64> = vec![0; n];
        let mut violations = Vec::new();
        let mut local_admits = BTreeMap::<usize, usize>::new();
        for d in &self.history {
            assert!(
                d.took <= REDIS_TIMEOUT + REDIS_TIMEOUT + SLACK,
                "{}: a call (acquire and record) took {:?}, past twice the Redis timeout {REDIS_TIMEOUT:?}: {d:?}",
                self.net.name(),
                d.took
            );
            if d.admitted && d.view == Some(State::ForcedOpen) {
                violations.push(format!("{d:?}: admitted through a kill switch"));
            }
            if d.admitted && !d.probe {
                let held: Vec<usize> = (0..n).filter(|&i| views[i] > d.at).collect();
                if d.local {
                    // A replica deciding alone keeps what it saw; one that never saw the trip
                    // cannot know of it (with Fallback::Reject it rejects).
                    if views[d.replica] > d.at {
                        violations.push(format!("{d:?}: its own last view was Open"));
                    }
                    if !held.is_empty() {
                        *local_admits.entry(d.replica).or_default() += 1;
                    }
                } else if !held.is_empty() {
                    violations.push(format!("{d:?}: replicas {held:?} held an Open view"));
                }
            }
            // The replica's view now: an Open rejection gives its deadline; an Open view
            // learnt from a reply (a record that found the breaker tripped) ends at most one
            // open wait from now; any other view holds nothing.
            views[d.replica] = match (d.view_after, d.open_until) {
                (_, Some(u)) => u,
                (Some(State::Open), None) => d.at + OPEN.as_micros() as u64,
                (Some(State::ForcedOpen), None) => u64::MAX,
                _ => 0,
            };
        }
        assert!(
            violations.is_empty(),
            "{}: {}",
            self.net.name(),
            violations.join("\n")
        );
        assert_eq!(
            self.max_probes,
            K as usize,
            "{}: probes at once (K = {K})",
            self.net.name()
        );
        if self.fallback == Fallback::Reject {
            assert!(local_admits.is_empty(), "{local_admits:?}");
        }
        println!(
            "MEASURED {} ({:?}): {} decisions; admitted locally by replicas that had not seen the trip while another held Open: {local_admits:?}; at most {} probes at once",
            self.net.name(),
            self.fallback,
            self.history.len(),
            self.max_probes
        );
    }
}

/// The scenario: a healthy fleet, a degraded network while the dependency starts failing, a
/// replica cut off, the trip, Redis cut off, the heal, the probes (held, so that rounds
/// overlap), the recovery.
fn scenario(net: &dyn Network, replicas: Vec<Replica>, clock: ManualClock, fallback: Fallback) {
    for r in &replicas {
        r.ask(Job::Connect(10 * SECOND)).unwrap();
    }
    let mut run = Run {
        net,
        replicas,
        clock,
        history: Vec::new(),
        probes: Vec::new(),
        max_probes: 0,
        fallback,
    };
    run.round(Outcome::Success, 2, "healthy");
    run.clock.advance(SECOND);
    net.degrade(1, 2);
    net.cut(3);
    run.round(Outcome::Failure, 4, "failing, degraded, replica 3 cut off");
    run.clock.advance(Duration::from_millis(150));
    run.round(Outcome::Failure, 3, "tripped");
    net.cut_redis();
    run.clock.advance(Duration::from_millis(150));
    run.round(Outcome::Failure, 3, "Redis cut off");
    net.heal();
    for r in &run.replicas {
        let _ = r.ask(Job::Connect(10 * SECOND));
    }
    run.clock.advance(OPEN);
    // The probes: held, K at most fleet-wide, the others rejected.
    for _ in 0..3 {
        for r in 0..run.replicas.len() {
            run.call(r, None, "half-open, probes held");
        }
    }
    for r in &run.replicas {
        r.ask(Job::Settle(Outcome::Success)).unwrap();
    }
    run.clock.advance(Duration::from_millis(150));
    run.round(Outcome::Success, 3, "recovered");
    let closed = run
        .history
        .iter()
        .rev()
        .take(run.replicas.len())
        .all(|d| d.admitted && !d.local);
    assert!(
        closed,
        "{}: the fleet did not recover: {:?}",
        net.name(),
        &run.history[run.history.len() - 8..]
    );
    let tripped = run
        .history
        .iter()
        .any(|d| d.phase == "tripped" && !d.admitted);
    assert!(tripped, "{}: the fleet never tripped", net.name());
    run.check();
    let _ = net.cli(&["PING"]);
}

/// Per replica a proxy in front of one loopback redis-server.
struct ProxyNet {
    server: RedisServer,
    proxies: Vec<Proxy>,
}

impl Network for ProxyNet {
    fn name(&self) -> &'static str {
        "in-process proxies"
    }
    fn cli(&self, args: &[&str]) -> String {
        self.server.cli(args).unwrap()
    }
    fn cut(&self, replica: usize) {
        self.proxies[replica].partition();
    }
    fn cut_redis(&self) {
        for p in &self.proxies {
            p.partition();
        }
    }
    fn heal(&self) {
        for p in &self.proxies {
            p.heal();
            p.set_delay(Duration::ZERO);
            p.set_loss(0, Duration::ZERO);
        }
    }
    fn degrade(&self, delayed: usize, lossy: usize) {
        self.proxies[delayed].set_delay(Duration::from_millis(10));
        // One chunk in five held 200 ms: a retransmission after a lost packet.
        self.proxies[lossy].set_loss(5, Duration::from_millis(200));
    }
}

/// The scenario through a proxy per replica.
fn across_proxies(fallback: Fallback) {
    let server = RedisServer::start().expect("redis-server");
    let proxies: Vec<Proxy> = (0..REPLICAS)
        .map(|_| Proxy::start(server.port()).unwrap())
        .collect();
    let clock = ManualClock::new();
    let replicas = proxies
        .iter()
        .enumerate()
        .map(|(i, p)| Replica::start(i, p.url(), None, clock.clone(), fallback))
        .collect();
    let net = ProxyNet { server, proxies };
    scenario(&net, replicas, clock, fallback);
}

#[test]
fn the_fleet_across_in_process_proxies() {
    for fallback in [Fallback::Local, Fallback::Reject] {
        across_proxies(fallback);
    }
}

/// Redis and each replica in network namespaces of their own, joined by veth pairs.
struct Namespaces {
    prefix: String,
    redis: Mutex<Option<std::process::Child>>,
    netem: bool,
    links: usize,
    dir: tempfile::TempDir,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(not(target_os = "linux"))]
fn enter_netns(_name: &str) -> Result<(), String> {
    Err("network namespaces need Linux".into())
}

#[cfg(target_os = "linux")]
fn enter_netns(name: &str) -> Result<(), String> {
    use std::os::fd::AsFd;
    let f =
        std::fs::File::open(format!("/run/netns/{name}")).map_err(|e| format!("{name}: {e}"))?;
    rustix::thread::move_into_link_name_space(
        f.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(|e| format!("setns {name}: {e}"))
}

impl Namespaces {
    fn redis_ns(&self) -> String {
        format!("{}r", self.prefix)
    }
    fn replica_ns(&self, i: usize) -> String {
        format!("{}{i}", self.prefix)
    }
    fn link(&self, i: usize) -> String {
        format!("{}v{i}", self.prefix)
    }
    fn replica_url(i: usize) -> String {
        format!("redis://10.213.{i}.1:6379/")
    }

    /// Builds the namespaces and links and starts Redis; `Err` says why it cannot.
    fn build(replicas: usize) -> Result<Self, String> {
        let prefix = format!("trl{}", std::process::id() % 100_000);
        let ns = Self {
            prefix,
            redis: Mutex::new(None),
            netem: false,
            links: replicas,
            dir: tempfile::tempdir().map_err(|e| e.to_string())?,
        };
        let mut ns = ns;
        ip(&["netns", "add", &ns.redis_ns()])?;
        ip(&["-n", &ns.redis_ns(), "link", "set", "lo", "up"])?;
        for i in 0..replicas {
            let (r, link) = (ns.replica_ns(i), ns.link(i));
            ip(&["netns", "add", &r])?;
            ip(&["-n", &r, "link", "set", "lo", "up"])?;
            let peer = format!("{link}p");
            ip(&["link", "add", &link, "type", "veth", "peer", "name", &peer])?;
            ip(&["link", "set", &link, "netns", &ns.redis_ns()])?;
            ip(&["link", "set", &peer, "netns", &r])?;
            ip(&[
                "-n",
                &ns.redis_ns(),
                "addr",
                "add",
                &format!("10.213.{i}.1/24"),
                "dev",
                &link,
            ])?;
            ip(&[
                "-n",
                &r,
                "addr",
                "add",
                &format!("10.213.{i}.2/24"),
                "dev",
                &peer,
            ])?;
            ip(&["-n", &ns.redis_ns(), "link", "set", &link, "up"])?;
            ip(&["-n", &r, "link", "set", &peer, "up"])?;
        }
        // netem where the kernel has it.
        ns.netem = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.redis_ns(),
                "tc",
                "qdisc",
                "add",
                "dev",
                &ns.link(0),
                "root",
                "netem",
                "delay",
                "1ms",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
        if ns.netem {
            let _ = ns.tc(&["qdisc", "del", "dev", &ns.link(0), "root"]);
        }
        let dir = ns.dir.path().to_string_lossy().into_owned();
        let child = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.redis_ns(),
                "redis-server",
                "--port",
                "6379",
                "--bind",
                "0.0.0.0",
                "--protected-mode",
                "no",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                &dir,
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server: {e}"))?;
        *ns.redis.lock().unwrap() = Some(child);
        let started = Instant::now();
        while ns.cli(&["PING"]) != "PONG" {
            if started.elapsed() > 10 * SECOND {
                return Err("redis-server in its namespace did not answer".into());
            }
            thread::sleep(Duration::from_millis(10));
        }
        Ok(ns)
    }

    fn tc(&self, args: &[&str]) -> Result<(), String> {
        let rns = self.redis_ns();
        let mut all = vec!["netns", "exec", rns.as_str(), "tc"];
        all.extend(args);
        let out = std::process::Command::new("ip")
            .args(&all)
            .output()
            .map_err(|e| e.to_string())?;
        out.status
            .success()
            .then_some(())
            .ok_or_else(|| String::from_utf8_lossy(&out.stderr).into_owned())
    }

    fn set_link(&self, i: usize, up: bool) {
        ip(&[
            "-n",
            &self.redis_ns(),
            "link",
            "set",
            &self.link(i),
            if up { "up" } else { "down" },
        ])
        .unwrap();
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        if let Some(mut c) = self.redis.lock().unwrap().take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for i in 0..self.links {
            let _ = ip(&["netns", "del", &self.replica_ns(i)]);
            // A link left behind by a build that stopped half way.
            let _ = ip(&["link", "del", &self.link(i)]);
        }
        let _ = ip(&["netns", "del", &self.redis_ns()]);
    }
}

impl Network for Namespaces {
    fn name(&self) -> &'static str {
        "network namespaces"
    }
    fn cli(&self, args: &[&str]) -> String {
        let rns = self.redis_ns();
        let mut all = vec!["netns", "exec", rns.as_str(), "redis-cli", "-p", "6379"];
        all.extend(args);
        std::process::Command::new("ip")
            .args(&all)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }
    fn cut(&self, replica: usize) {
        self.set_link(replica, false);
    }
    fn cut_redis(&self) {
        for i in 0..self.links {
            self.set_link(i, false);
        }
    }
    fn heal(&self) {
        for i in 0..self.links {
            self.set_link(i, true);
            if self.netem {
                let _ = self.tc(&["qdisc", "del", "dev", &self.link(i), "root"]);
            }
        }
    }
    fn degrade(&self, delayed: usize, lossy: usize) {
        if self.netem {
            self.tc(&[
                "qdisc",
                "add",
                "dev",
                &self.link(delayed),
                "root",
                "netem",
                "delay",
                "10ms",
            ])
            .unwrap();
            self.tc(&[
                "qdisc",
                "add",
                "dev",
                &self.link(lossy),
                "root",
                "netem",
                "loss",
                "20%",
            ])
            .unwrap();
        }
    }
}

/// The scenario across network namespaces where this machine allows them. Where it does not
/// (no privilege, not Linux, no `ip`), the test says why and runs the in-process proxy version
/// instead, so it never skips (under `CI=true` or not).
#[test]
fn the_fleet_across_network_namespaces() {
    let ns = match Namespaces::build(REPLICAS) {
        Ok(ns) => ns,
        Err(why) => {
            println!(
                "NOTE network namespaces cannot be made here ({why}): running the in-process proxy version instead"
            );
            across_proxies(Fallback::Local);
            return;
        }
    };
    if !ns.netem {
        println!(
            "NOTE tc netem is not in this kernel: links are cut (set down) but not delayed or made lossy here; the in-process proxy version covers delay and loss"
        );
    }
    let clock = ManualClock::new();
    let replicas = (0..REPLICAS)
        .map(|i| {
            Replica::start(
                i,
                Namespaces::replica_url(i),
                Some(ns.replica_ns(i)),
                clock.clone(),
                Fallback::Local,
            )
        })
        .collect();
    scenario(&ns, replicas, clock, Fallback::Local);
}
