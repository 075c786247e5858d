//! Real Redis servers for the tests: each test binary starts its own on free loopback ports,
//! persistence off, and stops them when dropped. No mock anywhere.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate::{
    Algorithm, Clock, Decision, FixedWindow, Limiter, ManualClock, Quota, SlidingLog,
    SlidingWindow, TokenBucket,
};
use tollgate_redis::{BlockingRedisLimiter, RedisLimiter, Target};
use tollgate_test_support::clock_and_cost;

/// The message when the servers are not installed: the tests never skip silently.
const MISSING: &str = "redis-server and redis-cli are needed on PATH for these tests: \
                       run `bash scripts/test.sh`, which installs them";

fn require(tool: &str) {
    let found = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(found, "{tool} not found. {MISSING}");
}

/// A multi-thread runtime of `workers` worker threads, time and I/O enabled.
pub fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// A port free for the server and, for cluster nodes, for its bus (port + 10000).
pub fn free_port(with_bus: bool) -> u16 {
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = l.local_addr().unwrap().port();
        if port > 55_000 {
            continue;
        }
        if !with_bus || TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// One `redis-server` process.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    dir: PathBuf,
    extra: Vec<String>,
    /// Arguments `redis-cli` needs to talk to this server (TLS).
    cli_extra: Vec<String>,
}

impl RedisServer {
    /// A standalone server on a free port.
    pub fn start() -> RedisServer {
        RedisServer::start_with(free_port(false), Vec::new())
    }

    pub fn start_with(port: u16, extra: Vec<String>) -> RedisServer {
        RedisServer::start_full(port, extra, Vec::new())
    }

    /// A standalone server that asks clients for `password` (`requirepass`); the harness's
    /// `redis-cli` gives it.
    pub fn start_with_password(password: &str) -> RedisServer {
        let pass = |flag: &str| vec![flag.to_owned(), password.to_owned()];
        let mut cli = pass("-a");
        cli.push("--no-auth-warning".to_owned());
        RedisServer::start_full(free_port(false), pass("--requirepass"), cli)
    }

    /// A server that speaks TLS only (`--port 0`, `--tls-port` a free port) with the
    /// certificate `cert` and its key `key`, clients not asked for certificates; the harness's
    /// `redis-cli` trusts `ca`.
    pub fn start_tls(cert: &Path, key: &Path, ca: &Path) -> RedisServer {
        let port = free_port(false);
        let (extra, cli) = tls_args(port, cert, key, ca);
        RedisServer::start_full(port, extra, cli)
    }

    fn start_full(port: u16, extra: Vec<String>, cli_extra: Vec<String>) -> RedisServer {
        require("redis-server");
        require("redis-cli");
        let dir =
            std::env::temp_dir().join(format!("tollgate-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut s = RedisServer {
            port,
            child: None,
            dir,
            extra,
            cli_extra,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server ({e}). {MISSING}"));
        self.child = Some(child);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let start = Instant::now();
        while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // Listening is not yet serving: wait for a PING to answer.
        while self.cli(&["PING"]).trim() != "PONG" {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no PONG on {addr}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `redis://`, or `rediss://` for a server that speaks TLS only.
    pub fn url(&self) -> String {
        let tls = self.cli_extra.first().is_some_and(|a| a == "--tls");
        let scheme = if tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// Runs `redis-cli` against this server; its standard output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(&self.cli_extra)
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("server running").id();
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// Kills the server (SIGKILL): every connection drops, all state is lost.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

/// The suffix of `algorithm`'s state key: the state of `key` is `{tollgate:<key>}:<suffix>`.
pub fn state_suffix(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::TokenBucket => "tb",
        Algorithm::FixedWindow => "fw",
        Algorithm::SlidingWindow => "swc",
        Algorithm::SlidingLog => "log",
    }
}

impl RedisServer {
    /// `PTTL` of `algorithm`'s state key of `key`, in milliseconds, parsed as a `T` (a
    /// negative answer, no key or no expiry, fails to parse as an unsigned `T`).
    pub fn state_pttl<T: std::str::FromStr>(&self, key: &str, algorithm: Algorithm) -> T
    where
        T::Err: std::fmt::Debug,
    {
        let state = format!("{{tollgate:{key}}}:{}", state_suffix(algorithm));
        self.cli(&["PTTL", &state]).trim().parse().unwrap()
    }
}

impl RedisServer {
    /// This cluster node's id.
    pub fn id(&self) -> String {
        self.cli(&["CLUSTER", "MYID"]).trim().to_owned()
    }

    /// Whether this cluster node owns `slot` now (by its own `CLUSTER NODES` line).
    pub fn serves(&self, slot: u16) -> bool {
        let nodes = self.cli(&["CLUSTER", "NODES"]);
        let Some(me) = nodes.lines().find(|l| l.contains("myself")) else {
            return false;
        };
        me.split(' ').skip(8).any(|r| {
            let mut ends = r.split('-');
            match (ends.next().and_then(|a| a.parse::<u16>().ok()), ends.next()) {
                (Some(a), Some(b)) => b.parse::<u16>().is_ok_and(|b| (a..=b).contains(&slot)),
                (Some(a), None) => a == slot,
                _ => false,
            }
        })
    }

    /// A field of `INFO replication`.
    pub fn replication(&self, field: &str) -> Option<String> {
        let info = self.cli(&["INFO", "replication"]);
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .map(|v| v.trim().to_owned())
    }
}

/// Waits (bounded) until `replica`'s link to `primary` is up and it has every write the
/// primary has.
pub fn wait_synced(primary: &RedisServer, replica: &RedisServer) {
    let start = Instant::now();
    loop {
        let up = replica.replication("master_link_status").as_deref() == Some("up");
        let theirs = primary.replication("master_repl_offset");
        let ours = replica.replication("slave_repl_offset");
        if up && theirs.is_some() && theirs == ours {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "replica not synced: {theirs:?} {ours:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &self.child {
            // A paused server ignores SIGKILL until continued on some systems: continue first.
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The arguments of a server that speaks TLS only on `port` (`--port 0`), with the certificate
/// `cert` and its key `key`, clients not asked for certificates; and `redis-cli`'s, trusting
/// `ca`.
fn tls_args(port: u16, cert: &Path, key: &Path, ca: &Path) -> (Vec<String>, Vec<String>) {
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let server = vec![
        "--port".into(),
        "0".into(),
        "--tls-port".into(),
        port.to_string(),
        "--tls-cert-file".into(),
        path(cert),
        "--tls-key-file".into(),
        path(key),
        "--tls-ca-cert-file".into(),
        path(ca),
        "--tls-auth-clients".into(),
        "no".into(),
    ];
    let cli = vec!["--tls".into(), "--cacert".into(), path(ca)];
    (server, cli)
}

/// A Redis Cluster of three primaries on loopback, created with `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

/// A node's arguments: cluster mode, its own config file, a 2 s node timeout, and `extra`.
fn cluster_args(port: u16, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        &format!("nodes-{port}.conf"),
        "--cluster-node-timeout",
        "2000",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn cluster_node(port: u16, extra: &[&str]) -> RedisServer {
    RedisServer::start_with(port, cluster_args(port, extra))
}

/// A port free for a node and its bus, and not one of `taken`'s.
fn node_port(taken: &[RedisServer]) -> u16 {
    loop {
        let p = free_port(true);
        if taken.iter().all(|n| n.port != p) {
            break p;
        }
    }
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(&[])
    }

    /// Three primaries, each started with `extra` arguments too.
    pub fn start_with(extra: &[&str]) -> RedisCluster {
        let mut nodes: Vec<RedisServer> = Vec::new();
        while nodes.len() < 3 {
            nodes.push(cluster_node(node_port(&nodes), extra));
        }
        RedisCluster::form(nodes)
    }

    /// Three primaries that speak TLS only, to clients and on the cluster bus, with the
    /// certificate `cert` (for 127.0.0.1) and its key `key`; the harness's `redis-cli` trusts
    /// `ca`, and the nodes' URLs are `rediss://`.
    pub fn start_tls(cert: &Path, key: &Path, ca: &Path) -> RedisCluster {
        let mut nodes: Vec<RedisServer> = Vec::new();
        while nodes.len() < 3 {
            let port = node_port(&nodes);
            let (tls, cli) = tls_args(port, cert, key, ca);
            let mut args =
                cluster_args(port, &["--tls-cluster", "yes", "--tls-replication", "yes"]);
            args.extend(tls);
            nodes.push(RedisServer::start_full(port, args, cli));
        }
        RedisCluster::form(nodes)
    }

    /// Joins `nodes` into one cluster (`redis-cli --cluster create`, no replicas) and waits
    /// until every node sees all slots served.
    fn form(nodes: Vec<RedisServer>) -> RedisCluster {
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(&nodes[0].cli_extra)
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let start = Instant::now();
        loop {
            let ok = nodes.iter().all(|n| {
                let info = n.cli(&["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok") && info.contains("cluster_slots_assigned:16384")
            });
            if ok {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "cluster not ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        RedisCluster { nodes }
    }

    /// A new node, started with `extra` too, joined as a replica of `nodes[primary]` and
    /// synced (its link up, its offset the primary's).
    pub fn add_replica(&self, primary: usize, extra: &[&str]) -> RedisServer {
        let replica = cluster_node(node_port(&self.nodes), extra);
        let p = &self.nodes[primary];
        replica.cli(&["CLUSTER", "MEET", "127.0.0.1", &p.port.to_string()]);
        let id = p.id();
        let start = Instant::now();
        // The replica must know the primary before it can follow it.
        while replica.cli(&["CLUSTER", "REPLICATE", &id]).trim() != "OK" {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "CLUSTER REPLICATE refused"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        wait_synced(p, &replica);
        replica
    }

    /// Index of the node that serves `key`'s slot.
    pub fn node_of(&self, key: &str) -> usize {
        let slot = self.nodes[0].cli(&["CLUSTER", "KEYSLOT", key]);
        let slot: u16 = slot.trim().parse().expect("a slot");
        self.nodes
            .iter()
            .position(|n| n.serves(slot))
            .expect("a node serves every slot")
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Keys stored on each node, in node order.
    pub fn keys_per_node(&self) -> Vec<usize> {
        self.nodes
            .iter()
            .map(|n| n.cli(&["DBSIZE"]).trim().parse().unwrap_or(0))
            .collect()
    }
}

/// The in-process limiter and the Redis one on the same clock; every call goes to both.
pub struct Both {
    pub name: String,
    local: Box<dyn Limiter>,
    remote: BlockingRedisLimiter,
    pub key: Vec<u8>,
    calls: std::sync::atomic::AtomicU64,
}

impl Limiter for Both {
    fn try_acquire_n(&self, n: u64) -> Decision {
        let local = self.local.try_acquire_n(n);
        let remote = self
            .remote
            .try_acquire_n(&self.key, n)
            .unwrap_or_else(|e| panic!("{}: Redis failed: {e}", self.name));
        // Relaxed: a call counter for the failure message; nothing is ordered by it.
        let call = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            remote, local,
            "{}: call {call}, n = {n}: Redis (left) and in-process (right) differ",
            self.name
        );
        local
    }
}

pub fn both(target: &Target, algorithm: Algorithm, quota: Quota, clock: &ManualClock) -> Both {
    let local: Box<dyn Limiter> = match algorithm {
        Algorithm::TokenBucket => Box::new(TokenBucket::with_clock(quota, clock.clone())),
        Algorithm::FixedWindow => Box::new(FixedWindow::with_clock(quota, clock.clone())),
        Algorithm::SlidingWindow => Box::new(SlidingWindow::with_clock(quota, clock.clone())),
        Algorithm::SlidingLog => Box::new(
            SlidingLog::try_with_clock(quota, clock.clone())
                .expect("a test quota the log can hold"),
        ),
    };
    let builder = RedisLimiter::builder(target.clone(), algorithm, quota)
        .test_clock(clock.clone())
        .deny_cache(0)
        .timeout(Duration::from_secs(5));
    let remote = BlockingRedisLimiter::build(builder).expect("build the Redis limiter");
    Both {
        name: format!("{algorithm:?} {quota:?}"),
        local,
        remote,
        key: format!("{algorithm:?}/{quota:?}/{}", rand_suffix()).into_bytes(),
        calls: Default::default(),
    }
}

/// A fresh key per subject, so subjects never share state on the one server.
fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Relaxed: only uniqueness matters, which fetch_add gives under any ordering.
    NEXT.fetch_add(1, Ordering::Relaxed)
}

pub fn all(target: &Target, quota: Quota) -> Vec<(Both, ManualClock)> {
    Algorithm::ALL
        .iter()
        .map(|&a| {
            let clock = ManualClock::new();
            (both(target, a, quota, &clock), clock)
        })
        .collect()
}

pub fn admitted(limiter: &dyn Limiter, n: u64) -> u64 {
    (0..n)
        .filter(|_| limiter.try_acquire().is_allowed())
        .count() as u64
}

/// SplitMix64: reproducible streams.
#[allow(unused_imports)] // not every test that includes this module draws from it
pub use tollgate_test_support::SplitMix64 as Rng;

/// Long random streams (advances, steps back, jumps, costs of every size, 0 and u64::MAX)
/// on every algorithm and each quota: `Both` asserts identical decisions on every call.
pub fn random_streams(target: &Target, quotas: &[Quota], steps: usize) {
    for (qi, &quota) in quotas.iter().enumerate() {
        for algorithm in Algorithm::ALL {
            let mut rng = Rng(qi as u64 * 31 + algorithm as u64);
            let clock = ManualClock::new();
            let s = both(target, algorithm, quota, &clock);
            let period = quota.period().as_nanos() as u64;
            for _ in 0..steps {
                let (now, n) = clock_and_cost(&mut rng, period, quota.limit(), clock.now_nanos());
                clock.set(Duration::from_nanos(now));
                let _ = s.try_acquire_n(n);
            }
        }
    }
}

/// Eight clients, each with its own connection, on one hot key at one frozen instant of a
/// test clock: the total cost admitted (client `i`'s call `j` costs `1 + (i + j) % max_cost`).
pub async fn eight_clients_admitted(
    target: &Target,
    algorithm: Algorithm,
    quota: Quota,
    calls: u64,
    max_cost: u64,
) -> u64 {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(100));
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let l = RedisLimiter::builder(target.clone(), algorithm, quota)
            .test_clock(clock.clone())
            .timeout(Duration::from_secs(5))
            .build()
            .await
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u64;
            for j in 0..calls {
                let cost = 1 + (i + j) % max_cost;
                if l.try_acquire_n("hot", cost).await.unwrap().is_allowed() {
                    admitted += cost;
                }
            }
            admitted
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total
}

/// A limiter of `algorithm` and `quota` on `target`, every call bounded by 5 s: how most
/// tests build one.
pub async fn limiter_on(
    target: impl Into<Target>,
    algorithm: Algorithm,
    quota: Quota,
) -> RedisLimiter {
    RedisLimiter::builder(target, algorithm, quota)
        .timeout(Duration::from_secs(5))
        .build()
        .await
        .unwrap()
}

/// Whether each call of `calls` (a key and a cost) passed, asked of `limiter` as one batch;
/// every call must get an answer.
pub async fn admitted_in_batch<K: AsRef<[u8]>>(
    limiter: &RedisLimiter,
    calls: impl IntoIterator<Item = (K, u64)>,
) -> Vec<bool> {
    limiter
        .try_acquire_many(calls)
        .await
        .into_iter()
        .map(|d| d.unwrap().is_allowed())
        .collect()
}

/// A naive client-side fixed window, the approach the scripts replace: read the count, then
/// increment it if below the limit. Two round trips, and clients racing between them both
/// pass. For the benchmarks' comparison.
pub async fn naive_fixed_window(
    conn: &mut redis::aio::ConnectionManager,
    key: &str,
    limit: u64,
) -> bool {
    let count: Option<u64> = redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
    if count.unwrap_or(0) >= limit {
        return false;
    }
    let (n, _): (u64, bool) = redis::pipe()
        .cmd("INCR")
        .arg(key)
        .cmd("EXPIRE")
        .arg(key)
        .arg(60)
        .query_async(conn)
        .await
        .unwrap();
    n <= limit
}
