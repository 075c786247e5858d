//! `RedisLimiter`: the script calls, the per-call deadline, the circuit breaker, the deny
//! cache, the failure policy.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};
use tollgate::{Algorithm, Clock, Decision, KeyedLimiter, ManualClock, MonotonicClock, Quota};

use crate::deny_cache::DenyCache;
use crate::error::Error;
use crate::lease::Leases;
use crate::params::{plan, Plan, Unit, MAX_SAFE};

/// The four scripts, each loaded once per server and called by its SHA1.
struct Script {
    body: &'static str,
    sha: String,
}

impl Script {
    fn new(body: &'static str) -> Self {
        Script {
            body,
            sha: redis::Script::new(body).get_hash().to_owned(),
        }
    }
}

fn script_for(algorithm: Algorithm) -> (&'static str, &'static [&'static str]) {
    match algorithm {
        Algorithm::TokenBucket => (
            concat!(
                include_str!("scripts/prelude.lua"),
                include_str!("scripts/token_bucket.lua")
            ),
            &[":tb"],
        ),
        Algorithm::FixedWindow => (
            concat!(
                include_str!("scripts/prelude.lua"),
                include_str!("scripts/fixed_window.lua")
            ),
            &[":fw"],
        ),
        Algorithm::SlidingWindow => (
            concat!(
                include_str!("scripts/prelude.lua"),
                include_str!("scripts/sliding_window.lua")
            ),
            &[":swc"],
        ),
        Algorithm::SlidingLog => (
            concat!(
                include_str!("scripts/prelude.lua"),
                include_str!("scripts/sliding_log.lua")
            ),
            &[":log"],
        ),
    }
}

/// Where the limiter's state lives: one Redis server or a Redis Cluster.
///
/// ```
/// use tollgate_redis::Target;
/// let single: Target = "redis://127.0.0.1:6379".into();
/// let cluster = Target::cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]);
/// # let _ = (single, cluster);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum Target {
    /// One server (or a primary behind a proxy), through an auto-reconnecting multiplexed
    /// connection.
    Server(redis::Client),
    /// A Redis Cluster: keys hash-tagged so that each limiter's keys share a slot.
    Cluster(Box<ClusterClient>),
    /// A URL that could not be parsed; `build` reports it.
    Invalid(String),
}

impl Target {
    /// A cluster reached through any of `nodes` (URLs such as `redis://127.0.0.1:7000`).
    ///
    /// ```
    /// let t = tollgate_redis::Target::cluster(["redis://127.0.0.1:7000"]);
    /// # let _ = t;
    /// ```
    pub fn cluster<S: AsRef<str>>(nodes: impl IntoIterator<Item = S>) -> Target {
        let nodes: Vec<String> = nodes.into_iter().map(|s| s.as_ref().to_owned()).collect();
        match ClusterClient::new(nodes.clone()) {
            Ok(c) => Target::Cluster(Box::new(c)),
            Err(e) => Target::Invalid(format!("{nodes:?}: {e}")),
        }
    }
}

impl From<redis::Client> for Target {
    fn from(c: redis::Client) -> Self {
        Target::Server(c)
    }
}

impl From<ClusterClient> for Target {
    fn from(c: ClusterClient) -> Self {
        Target::Cluster(Box::new(c))
    }
}

impl From<&str> for Target {
    fn from(url: &str) -> Self {
        match redis::Client::open(url) {
            Ok(c) => Target::Server(c),
            Err(e) => Target::Invalid(format!("{url}: {e}")),
        }
    }
}

impl From<String> for Target {
    fn from(url: String) -> Self {
        Target::from(url.as_str())
    }
}

#[derive(Clone)]
enum Conn {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    async fn query(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        match self.clone() {
            Conn::Server(mut c) => cmd.query_async(&mut c).await,
            Conn::Cluster(mut c) => cmd.query_async(&mut c).await,
        }
    }
}

/// What a [`RedisLimiter::check`] answers when Redis cannot (timeout, connection, open circuit,
/// or any other error).
///
/// ```
/// use std::time::Duration;
/// use tollgate_redis::FailurePolicy;
/// let abuse = FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) };
/// let login = FailurePolicy::FailOpen;
/// # let _ = (abuse, login);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit every request while Redis is unavailable (Envoy's default): availability over
    /// the limit.
    FailOpen,
    /// Deny every request, telling the client to retry after `retry_after`. The default,
    /// with one second: nothing is admitted that Redis did not admit.
    FailClosed {
        /// The `retry_after` of the denials.
        retry_after: Duration,
    },
    /// Decide locally with this process's own limiter (typically the quota divided by the
    /// number of instances, bounded in keys).
    Local(Arc<KeyedLimiter<Vec<u8>>>),
}

impl std::fmt::Debug for FailurePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailurePolicy::FailOpen => f.write_str("FailOpen"),
            FailurePolicy::FailClosed { retry_after } => f
                .debug_struct("FailClosed")
                .field("retry_after", retry_after)
                .finish(),
            FailurePolicy::Local(_) => f.write_str("Local(..)"),
        }
    }
}

/// Who answered a [`RedisLimiter::check`].
///
/// ```
/// use tollgate_redis::Source;
/// let from_policy = |s: Source| !matches!(s, Source::Redis | Source::DenyCache);
/// assert!(from_policy(Source::FailOpen) && !from_policy(Source::DenyCache));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// Redis's script.
    Redis,
    /// The local deny cache (a denial Redis gave earlier, still in force).
    DenyCache,
    /// [`FailurePolicy::FailOpen`].
    FailOpen,
    /// [`FailurePolicy::FailClosed`].
    FailClosed,
    /// [`FailurePolicy::Local`].
    Local,
    /// A token of a lease the script granted earlier
    /// ([`RedisLimiterBuilder::leases`]).
    Lease,
    /// Nobody: Redis answered with an error that is not an outage (a script or reply error,
    /// a key of the wrong type, a test clock out of range). The request is denied whatever
    /// the policy, and [`Checked::error`] says why.
    Error,
}

/// A decision and who made it; `error` is why Redis did not, when it did not.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Decision;
/// use tollgate_redis::{Checked, Error, Source};
/// let c = Checked {
///     decision: Decision::from_parts(true, 0, None, Duration::ZERO, false),
///     source: Source::FailOpen,
///     error: Some(Error::CircuitOpen),
/// };
/// assert!(c.decision.is_allowed() && c.error.is_some());
/// ```
#[derive(Debug)]
pub struct Checked {
    /// The answer.
    pub decision: Decision,
    /// Who answered.
    pub source: Source,
    /// The error the policy answered for, if any.
    pub error: Option<Error>,
}

/// Counts of answers by source, since the limiter was built.
///
/// ```
/// let s = tollgate_redis::Stats::default();
/// assert_eq!(s.redis_allowed + s.policy_allowed, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Admissions by Redis.
    pub redis_allowed: u64,
    /// Denials by Redis.
    pub redis_denied: u64,
    /// Denials answered by the local deny cache.
    pub cache_denied: u64,
    /// Admissions spent from leases (each token granted by Redis beforehand).
    pub lease_allowed: u64,
    /// Calls that failed (each one answered by the policy in [`RedisLimiter::check`]).
    pub errors: u64,
    /// Admissions made by the failure policy while Redis was unavailable.
    pub policy_allowed: u64,
    /// Denials made by the failure policy while Redis was unavailable.
    pub policy_denied: u64,
}

#[derive(Default)]
struct Counters {
    redis_allowed: AtomicU64,
    redis_denied: AtomicU64,
    cache_denied: AtomicU64,
    lease_allowed: AtomicU64,
    errors: AtomicU64,
    policy_allowed: AtomicU64,
    policy_denied: AtomicU64,
}

fn bump(c: &AtomicU64) {
    // Relaxed: a statistic; nothing is ordered by it.
    c.fetch_add(1, Ordering::Relaxed);
}

/// Stop asking Redis after `threshold` failures in a row, for `pause`; then one probe.
struct Breaker {
    threshold: u32,
    pause: u64,
    /// Set while failures are being counted or the circuit is open; lets the success path
    /// skip the lock. A stale `false` only delays a reset of the count to the next success.
    troubled: AtomicBool,
    state: Mutex<BreakerState>,
}

#[derive(Default)]
struct BreakerState {
    failures: u32,
    /// While open: when the next probe may go (each probe moves it one pause on, so a probe
    /// whose caller gave up never keeps the circuit shut).
    open_until: Option<u64>,
}

impl Breaker {
    fn lock(&self) -> std::sync::MutexGuard<'_, BreakerState> {
        match self.state.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Whether Redis may be asked now.
    fn allows(&self, now: u64) -> bool {
        // Relaxed: a hint; the decision is made under the lock.
        if self.threshold == 0 || !self.troubled.load(Ordering::Relaxed) {
            return true;
        }
        let mut s = self.lock();
        match s.open_until {
            None => true,
            Some(t) if now >= t => {
                s.open_until = Some(now.saturating_add(self.pause));
                true
            }
            Some(_) => false,
        }
    }

    fn success(&self) {
        // Relaxed: see `troubled`.
        if self.threshold == 0 || !self.troubled.load(Ordering::Relaxed) {
            return;
        }
        let mut s = self.lock();
        *s = BreakerState::default();
        // Relaxed: written under the lock; readers only take it as a hint.
        self.troubled.store(false, Ordering::Relaxed);
    }

    fn failure(&self, now: u64) {
        if self.threshold == 0 {
            return;
        }
        let mut s = self.lock();
        // Relaxed: written under the lock; readers only take it as a hint.
        self.troubled.store(true, Ordering::Relaxed);
        s.failures = s.failures.saturating_add(1);
        if s.failures >= self.threshold {
            s.open_until = Some(now.saturating_add(self.pause));
        }
    }
}

enum LocalClock {
    Monotonic(MonotonicClock),
    Test(ManualClock),
}

impl LocalClock {
    fn now(&self) -> u64 {
        match self {
            LocalClock::Monotonic(c) => c.now_nanos(),
            LocalClock::Test(c) => c.now_nanos(),
        }
    }
}

struct Inner {
    /// The connection; replaced by a fresh one after a `READONLY` reply (a demoted primary:
    /// the name it was reached by may lead to the new primary now).
    conn: RwLock<Conn>,
    /// How to open that fresh connection (single server only; a cluster client refreshes its
    /// own slot map).
    reopen: Option<(redis::Client, ConnectionManagerConfig)>,
    algorithm: Algorithm,
    quota: Quota,
    plan: Plan,
    script: Script,
    suffixes: &'static [&'static str],
    prefix: Vec<u8>,
    timeout: Duration,
    policy: FailurePolicy,
    deny: Option<DenyCache>,
    leases: Option<Leases>,
    clock: LocalClock,
    unit: Unit,
    breaker: Breaker,
    counters: Counters,
}

/// Settings of a [`RedisLimiter`]; made by [`RedisLimiter::builder`].
#[must_use = "a builder does nothing until `build().await`"]
pub struct RedisLimiterBuilder {
    target: Target,
    algorithm: Algorithm,
    quota: Quota,
    prefix: Vec<u8>,
    timeout: Duration,
    connect_timeout: Duration,
    policy: FailurePolicy,
    deny_cache: usize,
    test_clock: Option<ManualClock>,
    breaker: (u32, Duration),
    leases: Option<(u64, Duration)>,
}

impl RedisLimiterBuilder {
    /// The prefix of every key (default `tollgate`): keys are `{prefix:key}:alg`.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::{Algorithm, Quota};
    /// let l = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(5)?)
    ///     .key_prefix("api:v1")
    ///     .build()
    ///     .await?;
    /// # let _ = l; Ok(()) }
    /// ```
    pub fn key_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = prefix.as_ref().to_vec();
        self
    }

    /// The deadline of each call (default 20 ms, whole milliseconds are enough): past it the
    /// call returns [`Error::Timeout`] and [`RedisLimiter::check`] answers by the policy.
    /// The `redis` crate's own defaults are seconds: far too long on a request's hot path.
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use std::time::Duration;
    /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::FixedWindow, Quota::per_second(5)?)
    ///     .timeout(Duration::from_millis(5));
    /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn timeout(mut self, deadline: Duration) -> Self {
        self.timeout = deadline;
        self
    }

    /// The deadline of the first connection in `build` (default 1 s).
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use std::time::Duration;
    /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::FixedWindow, Quota::per_second(5)?)
    ///     .connect_timeout(Duration::from_millis(200));
    /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn connect_timeout(mut self, deadline: Duration) -> Self {
        self.connect_timeout = deadline;
        self
    }

    /// What [`RedisLimiter::check`] answers when Redis cannot (default: fail closed, retry
    /// after one second).
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(5)?)
    ///     .failure_policy(tollgate_redis::FailurePolicy::FailOpen);
    /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn failure_policy(mut self, policy: FailurePolicy) -> Self {
        self.policy = policy;
        self
    }

    /// How many denied keys the local deny cache holds (default 10,000; 0 turns it off).
    /// A key Redis denied until `t` is denied locally until `t` without a round trip.
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(5)?)
    ///     .deny_cache(0);
    /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn deny_cache(mut self, max_keys: usize) -> Self {
        self.deny_cache = max_keys;
        self
    }

    /// After `failures` failed calls in a row, answer [`Error::CircuitOpen`] at once for
    /// `pause`, then let one call probe Redis (default 5 failures, 250 ms; 0 turns it off).
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use std::time::Duration;
    /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(5)?)
    ///     .circuit_breaker(3, Duration::from_millis(100));
    /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn circuit_breaker(mut self, failures: u32, pause: Duration) -> Self {
        self.breaker = (failures, pause);
        self
    }

    /// Token bucket only: when a request passes, take up to `size` tokens in the same call
    /// and spend the rest here, without a round trip, for at most `lifetime` (tokens left
    /// then lapse). Never more than the script granted; the admissions of any span
    /// `[t0, t1]` are at most what the bucket admits in `[t0 - lifetime, t1]`. Off by default.
    ///
    /// ```
    /// # use tollgate::{Algorithm, Quota};
    /// # use std::time::Duration;
    /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(10_000)?)
    ///     .leases(20, Duration::from_millis(50));
    /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn leases(mut self, size: u64, lifetime: Duration) -> Self {
        self.leases = (size > 1).then_some((size, lifetime));
        self
    }

    /// Send this clock's time instead of using Redis `TIME`, in nanoseconds: decisions are
    /// then exactly the in-process limiter's for the same sequence, on a real server, with no
    /// sleeping. For tests. Keys then live at least an hour of real time (real time passing
    /// between calls must not expire state the test clock still counts).
    ///
    /// ```
    /// # use tollgate::{Algorithm, ManualClock, Quota};
    /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::SlidingLog, Quota::per_second(5)?)
    ///     .test_clock(ManualClock::new());
    /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn test_clock(mut self, clock: ManualClock) -> Self {
        self.test_clock = Some(clock);
        self
    }

    /// Checks the quota, connects, and loads the script.
    ///
    /// # Errors
    /// [`Error::Quota`] if the script cannot represent the quota exactly (a period that is
    /// not a whole number of microseconds, a token bucket whose capacity reaches 2^52
    /// ticks); [`Error::Connection`] or [`Error::Timeout`] if Redis cannot be reached.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), tollgate_redis::Error> {
    /// use tollgate::{Algorithm, Quota};
    /// let l = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(5)?)
    ///     .build()
    ///     .await?;
    /// assert!(l.try_acquire("alice").await?.is_allowed());
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<RedisLimiter, Error> {
        let unit = if self.test_clock.is_some() {
            Unit::Nanos
        } else {
            Unit::Micros
        };
        let plan = plan(self.algorithm, &self.quota, unit)?;
        if self.leases.is_some() && self.algorithm != Algorithm::TokenBucket {
            return Err(Error::Unsupported(
                "leases take tokens ahead: the token bucket only",
            ));
        }
        let deadline = self.connect_timeout;
        let connect = async {
            match self.target {
                Target::Server(client) => {
                    let client = with_tcp_settings(client)?;
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(deadline))
                        .set_response_timeout(None)
                        .set_number_of_retries(6)
                        .set_min_delay(Duration::from_millis(50))
                        .set_max_delay(Duration::from_secs(1));
                    ConnectionManager::new_with_config(client.clone(), config.clone())
                        .await
                        .map(|c| (Conn::Server(c), Some((client, config))))
                }
                Target::Cluster(client) => client
                    .get_async_connection()
                    .await
                    .map(|c| (Conn::Cluster(c), None)),
                Target::Invalid(what) => Err(RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "invalid Redis target",
                    what,
                ))),
            }
        };
        if self.prefix.iter().any(|&b| b == b'{' || b == b'}') {
            return Err(Error::KeyPrefix(
                String::from_utf8_lossy(&self.prefix).into_owned(),
            ));
        }
        let (conn, reopen) = tokio::time::timeout(deadline, connect)
            .await
            .map_err(|_| Error::Timeout { after: deadline })?
            .map_err(Error::Connection)?;
        // Scripts read `TIME` and replicate by their effects: Redis 5 or later.
        let info = redis::cmd("INFO").arg("server").clone();
        let info = tokio::time::timeout(deadline, conn.query(&info))
            .await
            .map_err(|_| Error::Timeout { after: deadline })?
            .map_err(classify)?;
        if let Some(version) = server_version(&info) {
            if version < (5, 0) {
                return Err(Error::ServerTooOld {
                    version: format!("{}.{}", version.0, version.1),
                });
            }
        }
        let (body, suffixes) = script_for(self.algorithm);
        let script = Script::new(body);
        let clock = match self.test_clock {
            Some(c) => LocalClock::Test(c),
            None => LocalClock::Monotonic(MonotonicClock::new()),
        };
        let limiter = RedisLimiter {
            inner: Arc::new(Inner {
                conn: RwLock::new(conn),
                reopen,
                algorithm: self.algorithm,
                quota: self.quota,
                plan,
                script,
                suffixes,
                prefix: self.prefix,
                timeout: self.timeout,
                policy: self.policy,
                deny: (self.deny_cache > 0).then(|| DenyCache::new(self.deny_cache)),
                leases: self.leases.map(|(size, life)| Leases::new(size, life)),
                clock,
                unit,
                breaker: Breaker {
                    threshold: self.breaker.0,
                    pause: u64::try_from(self.breaker.1.as_nanos()).unwrap_or(u64::MAX),
                    troubled: AtomicBool::new(false),
                    state: Mutex::new(BreakerState::default()),
                },
                counters: Counters::default(),
            }),
        };
        // Load the script where the keys live (on a cluster, EVALSHA reloads per node on demand).
        let conn = limiter.inner.conn();
        if let Conn::Server(_) = conn {
            let load = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(limiter.inner.script.body)
                .clone();
            tokio::time::timeout(deadline, conn.query(&load))
                .await
                .map_err(|_| Error::Timeout { after: deadline })?
                .map_err(Error::Connection)?;
        }
        Ok(limiter)
    }
}

/// One of tollgate's four algorithms with its state on Redis: every instance that builds a
/// limiter with the same target, prefix, algorithm and quota shares one limit per key.
///
/// Each call runs one Lua script (integer arithmetic, time from Redis `TIME`, all-or-nothing
/// costs, denials read-only) and returns the same [`Decision`] as the in-process limiter.
/// Cloning is cheap and shares the connection; concurrent calls are pipelined on it.
///
/// ```no_run
/// # async fn f() -> Result<(), tollgate_redis::Error> {
/// use std::time::Duration;
/// use tollgate::{Algorithm, Quota};
/// use tollgate_redis::{FailurePolicy, RedisLimiter, Source};
///
/// let limiter = RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(100)?)
///     .key_prefix("edge")
///     .timeout(Duration::from_millis(10))
///     .failure_policy(FailurePolicy::FailOpen)
///     .build()
///     .await?;
/// let d = limiter.try_acquire("10.0.0.1").await?; // a typed error if Redis cannot answer
/// let c = limiter.check("10.0.0.1", 1).await; // never an error: the policy answers instead
/// if c.source != Source::Redis {
///     eprintln!("answered by {:?}: {:?}", c.source, c.error);
/// }
/// # let _ = d; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisLimiter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("algorithm", &self.inner.algorithm)
            .field("quota", &self.inner.quota)
            .field("timeout", &self.inner.timeout)
            .field("policy", &self.inner.policy)
            .finish_non_exhaustive()
    }
}

impl RedisLimiter {
    /// Starts the settings of a limiter on `target` (a `redis::Client`, a URL, or a
    /// [`Target::cluster`]).
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota};
    /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::SlidingWindow, Quota::per_minute(600)?);
    /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn builder(
        target: impl Into<Target>,
        algorithm: Algorithm,
        quota: Quota,
    ) -> RedisLimiterBuilder {
        RedisLimiterBuilder {
            target: target.into(),
            algorithm,
            quota,
            prefix: b"tollgate".to_vec(),
            timeout: Duration::from_millis(20),
            connect_timeout: Duration::from_secs(1),
            policy: FailurePolicy::FailClosed {
                retry_after: Duration::from_secs(1),
            },
            deny_cache: 10_000,
            test_clock: None,
            breaker: (5, Duration::from_millis(250)),
            leases: None,
        }
    }

    /// Asks for one unit for `key` (any bytes: empty, binary, with braces).
    ///
    /// # Errors
    /// [`Error::Timeout`], [`Error::Connection`], [`Error::CircuitOpen`], [`Error::Script`],
    /// [`Error::BadReply`], [`Error::ClockOutOfRange`].
    ///
    /// ```no_run
    /// # async fn f(l: tollgate_redis::RedisLimiter) -> Result<(), tollgate_redis::Error> {
    /// if !l.try_acquire("alice").await?.is_allowed() { /* 429 */ }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, key: impl AsRef<[u8]>) -> Result<Decision, Error> {
        self.try_acquire_n(key, 1).await
    }

    /// Asks for `n` units for `key` at once: all are taken or none; `n = 0` peeks.
    ///
    /// # Errors
    /// As [`RedisLimiter::try_acquire`].
    ///
    /// ```no_run
    /// # async fn f(l: tollgate_redis::RedisLimiter) -> Result<(), tollgate_redis::Error> {
    /// let d = l.try_acquire_n("upload:alice", 5).await?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub async fn try_acquire_n(&self, key: impl AsRef<[u8]>, n: u64) -> Result<Decision, Error> {
        let quota = self.inner.quota;
        let plan = self.inner.plan.clone();
        self.acquire(key.as_ref(), n, &quota, &plan)
            .await
            .map(|(d, _)| d)
    }

    /// Asks for one unit for `key` under `quota` (a plan's rule) instead of the limiter's.
    /// Keys of different plans should not share a name: the state is the key's, whatever
    /// quota is asked.
    ///
    /// # Errors
    /// [`Error::Quota`] if the script cannot represent `quota`; otherwise as
    /// [`RedisLimiter::try_acquire`].
    ///
    /// ```no_run
    /// # async fn f(l: tollgate_redis::RedisLimiter) -> Result<(), Box<dyn std::error::Error>> {
    /// let pro = tollgate::Quota::per_second(50)?;
    /// let d = l.try_acquire_with("carol", &pro).await?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub async fn try_acquire_with(
        &self,
        key: impl AsRef<[u8]>,
        quota: &Quota,
    ) -> Result<Decision, Error> {
        let plan = plan(self.inner.algorithm, quota, self.inner.unit)?;
        self.acquire(key.as_ref(), 1, quota, &plan)
            .await
            .map(|(d, _)| d)
    }

    /// Asks for many keys at once, each `(key, n)`: the calls go out together on the one
    /// connection (pipelined) and the answers come back in the same order.
    ///
    /// ```no_run
    /// # async fn f(l: tollgate_redis::RedisLimiter) {
    /// let answers = l.try_acquire_many([("alice", 1), ("bob", 2)]).await;
    /// assert_eq!(answers.len(), 2);
    /// # }
    /// ```
    pub async fn try_acquire_many<K: AsRef<[u8]>>(
        &self,
        batch: impl IntoIterator<Item = (K, u64)>,
    ) -> Vec<Result<Decision, Error>> {
        let calls: Vec<_> = batch
            .into_iter()
            .map(|(key, n)| async move { self.try_acquire_n(key, n).await })
            .collect();
        join_in_order(calls).await
    }

    /// Asks for `n` units for `key` and never fails: when Redis cannot answer (an outage,
    /// [`Error::is_unavailable`]), the failure policy does, and [`Checked::source`] says who
    /// answered. Any other error is a bug, not an outage: it is denied (retry after 1 s) with
    /// [`Source::Error`], never admitted by the policy.
    ///
    /// ```no_run
    /// # async fn f(l: tollgate_redis::RedisLimiter) {
    /// let c = l.check("alice", 1).await;
    /// if !c.decision.is_allowed() { /* 429, Retry-After: c.decision.retry_after() */ }
    /// # }
    /// ```
    pub async fn check(&self, key: impl AsRef<[u8]>, n: u64) -> Checked {
        let key = key.as_ref();
        let quota = self.inner.quota;
        let plan = self.inner.plan.clone();
        match self.acquire(key, n, &quota, &plan).await {
            Ok((decision, source)) => Checked {
                decision,
                source,
                error: None,
            },
            Err(error) => {
                let c = &self.inner.counters;
                let (decision, source) = if !error.is_unavailable() {
                    // A bug (the script's, the reply's, the settings'): never admitted by
                    // the policy, reported as an error.
                    let retry = Duration::from_secs(1);
                    (
                        Decision::from_parts(false, 0, Some(retry), retry, false),
                        Source::Error,
                    )
                } else {
                    match &self.inner.policy {
                        FailurePolicy::FailOpen => (
                            Decision::from_parts(true, 0, None, Duration::ZERO, false),
                            Source::FailOpen,
                        ),
                        FailurePolicy::FailClosed { retry_after } => (
                            Decision::from_parts(false, 0, Some(*retry_after), *retry_after, false),
                            Source::FailClosed,
                        ),
                        FailurePolicy::Local(local) => (local.try_acquire_n(key, n), Source::Local),
                    }
                };
                if source != Source::Error {
                    bump(if decision.is_allowed() {
                        &c.policy_allowed
                    } else {
                        &c.policy_denied
                    });
                }
                Checked {
                    decision,
                    source,
                    error: Some(error),
                }
            }
        }
    }

    /// Forgets `key`: its limiter is full again.
    ///
    /// # Errors
    /// [`Error::Timeout`] or [`Error::Connection`].
    ///
    /// ```no_run
    /// # async fn f(l: tollgate_redis::RedisLimiter) -> Result<(), tollgate_redis::Error> {
    /// l.reset("alice").await?;
    /// # Ok(()) }
    /// ```
    pub async fn reset(&self, key: impl AsRef<[u8]>) -> Result<(), Error> {
        let keys = self.keys(key.as_ref());
        if let Some(cache) = &self.inner.deny {
            cache.forget(key.as_ref());
        }
        if let Some(leases) = &self.inner.leases {
            leases.forget(key.as_ref());
        }
        let cmd = redis::cmd("DEL").arg(&keys).clone();
        self.with_deadline(self.inner.conn().query(&cmd))
            .await?
            .map(drop)
            .map_err(classify)
    }

    /// Sends a bare `PING` on the limiter's connection, within its deadline: a readiness
    /// probe, and the round trip the scripts' cost is measured against.
    ///
    /// # Errors
    /// [`Error::Timeout`] or [`Error::Connection`].
    ///
    /// ```no_run
    /// # async fn f(l: tollgate_redis::RedisLimiter) -> Result<(), tollgate_redis::Error> {
    /// l.ping().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ping(&self) -> Result<(), Error> {
        let cmd = redis::cmd("PING");
        self.with_deadline(self.inner.conn().query(&cmd))
            .await?
            .map(drop)
            .map_err(classify)
    }

    /// Counts of answers by source so far.
    ///
    /// ```no_run
    /// # fn f(l: tollgate_redis::RedisLimiter) {
    /// let s = l.stats();
    /// println!("{} admitted by the policy while Redis was down", s.policy_allowed);
    /// # }
    /// ```
    pub fn stats(&self) -> Stats {
        let c = &self.inner.counters;
        // Relaxed: statistics, read as a snapshot of independent counters.
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            redis_allowed: get(&c.redis_allowed),
            redis_denied: get(&c.redis_denied),
            cache_denied: get(&c.cache_denied),
            lease_allowed: get(&c.lease_allowed),
            errors: get(&c.errors),
            policy_allowed: get(&c.policy_allowed),
            policy_denied: get(&c.policy_denied),
        }
    }

    /// The Redis keys of `key`: `{prefix:key}` then the algorithm's suffix, so that every key
    /// of one limiter shares a cluster slot (the hash tag is the part up to the first `}`).
    /// In `key`, `}` is written `\]` and `\` is written `\\`: no key ends the tag early (so
    /// no key chooses its slot, or shares one tag with another), and distinct keys stay
    /// distinct. The prefix has no braces (checked by `build`).
    fn keys(&self, key: &[u8]) -> Vec<Vec<u8>> {
        let inner = &self.inner;
        let mut tag = Vec::with_capacity(inner.prefix.len() + key.len() + 8);
        tag.push(b'{');
        tag.extend_from_slice(&inner.prefix);
        tag.push(b':');
        for &b in key {
            match b {
                b'}' => tag.extend_from_slice(b"\\]"),
                b'\\' => tag.extend_from_slice(b"\\\\"),
                _ => tag.push(b),
            }
        }
        tag.push(b'}');
        inner
            .suffixes
            .iter()
            .map(|suffix| {
                let mut k = Vec::with_capacity(tag.len() + suffix.len());
                k.extend_from_slice(&tag);
                k.extend_from_slice(suffix.as_bytes());
                k
            })
            .collect()
    }

    async fn with_deadline<T>(&self, f: impl std::future::Future<Output = T>) -> Result<T, Error> {
        tokio::time::timeout(self.inner.timeout, f)
            .await
            .map_err(|_| Error::Timeout {
                after: self.inner.timeout,
            })
    }

    async fn acquire(
        &self,
        key: &[u8],
        n: u64,
        quota: &Quota,
        plan: &Plan,
    ) -> Result<(Decision, Source), Error> {
        let inner = &*self.inner;
        let c = &inner.counters;
        let now = inner.clock.now();
        if let Some(d) = inner
            .deny
            .as_ref()
            .and_then(|d| d.check(key, n, quota, now))
        {
            bump(&c.cache_denied);
            return Ok((d, Source::DenyCache));
        }
        // Leases hold tokens of the limiter's own quota only.
        let leases = inner
            .leases
            .as_ref()
            .filter(|l| n >= 1 && n <= l.size && quota == &inner.quota);
        if let Some(d) = leases.and_then(|l| l.take(key, n, now)) {
            bump(&c.lease_allowed);
            return Ok((d, Source::Lease));
        }
        let lease = leases.map_or(0, |l| l.size);
        let result = self.ask(key, n, plan, now, lease).await;
        if let (Ok((d, Some(taken))), Some(l)) = (&result, leases) {
            if d.is_allowed() {
                l.keep(key, taken.saturating_sub(n), now, d);
            }
        }
        let result = result.map(|(d, _)| d);
        match &result {
            Ok(d) => {
                inner.breaker.success();
                bump(if d.is_allowed() {
                    &c.redis_allowed
                } else {
                    &c.redis_denied
                });
                if !d.is_allowed() {
                    if let Some(cache) = &inner.deny {
                        cache.remember(key, n, quota, now, d);
                    }
                }
            }
            Err(Error::CircuitOpen) => bump(&c.errors),
            Err(e) => {
                bump(&c.errors);
                if e.is_unavailable() {
                    inner.breaker.failure(inner.clock.now());
                } else {
                    inner.breaker.success();
                }
            }
        }
        result.map(|d| (d, Source::Redis))
    }

    /// One script call: EVALSHA, and EVAL (which reloads the script) if Redis lost it
    /// (a restart, a failover, `SCRIPT FLUSH`).
    async fn ask(
        &self,
        key: &[u8],
        n: u64,
        plan: &Plan,
        now: u64,
        lease: u64,
    ) -> Result<(Decision, Option<u64>), Error> {
        let inner = &*self.inner;
        let time = match inner.unit {
            Unit::Nanos if now >= MAX_SAFE => return Err(Error::ClockOutOfRange { nanos: now }),
            Unit::Nanos => now.to_string(),
            Unit::Micros => String::new(),
        };
        if !inner.breaker.allows(inner.clock.now()) {
            return Err(Error::CircuitOpen);
        }
        let keys = self.keys(key);
        let mut args = redis::Cmd::new();
        args.arg(keys.len())
            .arg(&keys)
            .arg(n.min(plan.capacity + 1))
            .arg(time)
            .arg(&plan.args[..plan.arity]);
        if lease > 0 {
            args.arg(lease);
        }
        let conn = inner.conn();
        let call = async {
            let mut evalsha = redis::cmd("EVALSHA");
            evalsha.arg(&inner.script.sha);
            let reply = match conn.query(&with_args(evalsha, &args)).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    let mut eval = redis::cmd("EVAL");
                    eval.arg(inner.script.body);
                    conn.query(&with_args(eval, &args)).await
                }
                other => other,
            };
            reply.map_err(|e| {
                if e.code() == Some("READONLY") {
                    inner.reopen();
                }
                classify(e)
            })
        };
        let reply = self.with_deadline(call).await??;
        decision(&reply, inner.unit)
    }
}

impl Inner {
    /// The current connection (a cheap clone of a shared, multiplexed one).
    fn conn(&self) -> Conn {
        match self.conn.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the connection with a fresh one to the same target, connected on first use:
    /// after a `READONLY` reply the old one is attached to a replica.
    fn reopen(&self) {
        let Some((client, config)) = &self.reopen else {
            return;
        };
        if let Ok(fresh) = ConnectionManager::new_lazy_with_config(client.clone(), config.clone()) {
            let mut c = match self.conn.write() {
                Ok(c) => c,
                Err(poisoned) => poisoned.into_inner(),
            };
            *c = Conn::Server(fresh);
        }
    }
}

/// `TCP_NODELAY` (a check is one small write: never held back for the next one) and keepalive
/// probes after 30 s idle (a peer gone without a FIN is found), unless the client's own
/// settings already ask for keepalive.
fn with_tcp_settings(client: redis::Client) -> redis::RedisResult<redis::Client> {
    let info = client.get_connection_info().clone();
    let mut tcp = info.tcp_settings().clone().set_nodelay(true);
    if tcp.keepalive().is_none() {
        tcp = tcp.set_keepalive(
            redis::io::tcp::socket2::TcpKeepalive::new().with_time(Duration::from_secs(30)),
        );
    }
    redis::Client::open(info.set_tcp_settings(tcp))
}

/// `(major, minor)` from an `INFO server` reply's `redis_version`.
fn server_version(info: &Value) -> Option<(u32, u32)> {
    let text = match info {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))?;
    let mut parts = v.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// Runs `calls` together, first polled in order (so on one connection they are sent, and run
/// by Redis, in that order); their outputs in the same order.
async fn join_in_order<F: std::future::Future>(calls: Vec<F>) -> Vec<F::Output> {
    let mut calls: Vec<_> = calls.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = calls.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (call, slot) in calls.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match call.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *slot = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// `head` followed by every argument of `args`.
fn with_args(mut head: Cmd, args: &Cmd) -> Cmd {
    for a in args.args_iter() {
        if let redis::Arg::Simple(bytes) = a {
            head.arg(bytes);
        }
    }
    head
}

/// The server error codes that say Redis cannot serve now, not that the script is wrong.
const OUTAGE_CODES: [&str; 7] = [
    "LOADING",
    "BUSY",
    "OOM",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
];

/// An outage (the connection's, or a server that cannot serve now), or a script's own error
/// (a server error reply), or a reply that is not the script's.
fn classify(e: RedisError) -> Error {
    if e.code().is_some_and(|c| OUTAGE_CODES.contains(&c)) {
        return Error::Unavailable(e);
    }
    match e.kind() {
        ErrorKind::Server(_) | ErrorKind::Extension => Error::Script(e),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Error::BadReply(e.to_string()),
        _ => Error::Connection(e),
    }
}

/// The script's five integers as a decision, times converted from the script's unit to ns;
/// and a sixth, the units taken, after an admission with a lease. The scripts reply with one
/// string of space-separated integers; an array of integers is read the same.
fn decision(reply: &Value, unit: Unit) -> Result<(Decision, Option<u64>), Error> {
    let bad = || Error::BadReply(format!("{reply:?}"));
    let mut v = [0i64; 6];
    let mut len = 0;
    match reply {
        Value::BulkString(bytes) => {
            let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
            for word in text.split(' ') {
                let slot = v.get_mut(len).ok_or_else(bad)?;
                *slot = word.parse().map_err(|_| bad())?;
                len += 1;
            }
        }
        Value::Array(items) if items.len() <= 6 => {
            for (slot, item) in v.iter_mut().zip(items) {
                let Value::Int(i) = item else {
                    return Err(bad());
                };
                *slot = *i;
            }
            len = items.len();
        }
        _ => return Err(bad()),
    }
    if len != 5 && len != 6 {
        return Err(bad());
    }
    let [allowed, remaining, retry, reset, exceeds, taken] = v;
    if remaining < 0 || reset < 0 || retry < -1 || taken < 0 {
        return Err(bad());
    }
    let ns = |units: i64| Duration::from_nanos((units as u64).saturating_mul(unit.nanos()));
    let d = Decision::from_parts(
        allowed == 1,
        remaining as u64,
        (retry >= 0).then(|| ns(retry)),
        ns(reset),
        exceeds == 1,
    );
    Ok((d, (len == 6).then_some(taken as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_map_onto_decisions_in_nanoseconds() {
        let reply = Value::Array(vec![
            Value::Int(0),
            Value::Int(2),
            Value::Int(1_500),
            Value::Int(3_000),
            Value::Int(0),
        ]);
        let (d, taken) = decision(&reply, Unit::Micros).unwrap();
        assert_eq!(taken, None);
        let text = Value::BulkString(b"0 2 1500 3000 0".to_vec());
        assert_eq!(decision(&text, Unit::Micros).unwrap(), (d, None));
        assert!(!d.is_allowed() && !d.exceeds_capacity());
        assert_eq!(d.remaining(), 2);
        assert_eq!(d.retry_after(), Some(Duration::from_micros(1_500)));
        assert_eq!(d.reset_after(), Duration::from_millis(3));
    }

    #[test]
    fn malformed_replies_are_typed_errors() {
        for reply in [
            Value::Nil,
            Value::Array(vec![Value::Int(1); 4]),
            Value::Array(vec![Value::Int(-5); 5]),
            Value::Array(vec![Value::Nil; 5]),
            Value::BulkString(b"1 2 3".to_vec()),
            Value::BulkString(b"1 2 x 4 5".to_vec()),
            Value::BulkString(b"1 -2 3 4 5".to_vec()),
            Value::BulkString(b"1 2 3 4 5 6 7".to_vec()),
        ] {
            assert!(matches!(
                decision(&reply, Unit::Nanos),
                Err(Error::BadReply(_))
            ));
        }
    }

    #[test]
    fn server_versions_are_read_from_info() {
        let info = |v: &str| {
            Value::BulkString(
                format!("# Server\r\nredis_version:{v}\r\nredis_mode:standalone\r\n").into_bytes(),
            )
        };
        assert_eq!(server_version(&info("7.0.15")), Some((7, 0)));
        assert_eq!(server_version(&info("4.0.9")), Some((4, 0)));
        assert_eq!(server_version(&Value::Nil), None);
    }

    #[test]
    fn the_breaker_opens_after_the_threshold_and_probes_once() {
        let b = Breaker {
            threshold: 2,
            pause: 100,
            troubled: AtomicBool::new(false),
            state: Mutex::new(BreakerState::default()),
        };
        assert!(b.allows(0));
        b.failure(0);
        assert!(b.allows(1));
        b.failure(1);
        assert!(!b.allows(50));
        assert!(b.allows(101)); // the probe
        assert!(!b.allows(102)); // only one
        b.failure(102); // the probe failed: open again
        assert!(!b.allows(150));
        assert!(b.allows(202));
        b.success();
        assert!(b.allows(203) && b.allows(204));
    }
}
