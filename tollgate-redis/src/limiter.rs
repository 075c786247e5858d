//! [`RedisLimiter`]: the script calls, the per-call deadline, the circuit breaker, the deny
//! cache, the leases, the failure policy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, ServerErrorKind};
use tollgate::{Algorithm, Clock, Decision, ManualClock, MonotonicClock, Quota};

use crate::breaker::{Breaker, Breakers};
use crate::builder::RedisLimiterBuilder;
use crate::deny_cache::DenyCache;
use crate::error::Error;
use crate::lease::Leases;
use crate::params::{plan, Plan, Unit, MAX_SAFE};
use crate::policy::{bump, Checked, Counters, FailurePolicy, Source, Stats};
use crate::reply::{classify, decision};
use crate::script::Script;
use crate::target::{Conn, Target};

pub(crate) enum LocalClock {
    Monotonic(MonotonicClock),
    Test(ManualClock),
}

impl LocalClock {
    pub(crate) fn now(&self) -> u64 {
        match self {
            LocalClock::Monotonic(c) => c.now_nanos(),
            LocalClock::Test(c) => c.now_nanos(),
        }
    }
}

pub(crate) struct Inner {
    /// The connection; replaced by a fresh one after a `READONLY` reply (a demoted primary:
    /// the name it was reached by may lead to the new primary now).
    pub(crate) conn: RwLock<Conn>,
    /// How to open that fresh connection (single server only; a cluster client refreshes its
    /// own slot map).
    pub(crate) reopen: Option<(redis::Client, ConnectionManagerConfig)>,
    pub(crate) algorithm: Algorithm,
    pub(crate) quota: Quota,
    pub(crate) plan: Plan,
    pub(crate) script: Script,
    pub(crate) suffixes: &'static [&'static str],
    pub(crate) prefix: Vec<u8>,
    pub(crate) timeout: Duration,
    pub(crate) policy: FailurePolicy,
    pub(crate) deny: Option<DenyCache>,
    pub(crate) leases: Option<Leases>,
    pub(crate) clock: LocalClock,
    pub(crate) unit: Unit,
    /// One breaker, or one per cluster primary.
    pub(crate) breakers: Breakers,
    pub(crate) counters: Counters,
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
    pub(crate) inner: Arc<Inner>,
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
        RedisLimiterBuilder::new(target.into(), algorithm, quota)
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
    /// connection (pipelined) and the answers come back in the same order. Calls on one key
    /// within a batch are counted as Redis receives them, which on a cluster need not be the
    /// batch's order (a call a node first refuses with `NOSCRIPT` runs again after the load).
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
        let keys = self.keys(key);
        let breaker = inner.breakers.of(hash_tag(&keys[0]));
        let result = self.ask(&keys, &breaker, n, plan, now, lease).await;
        if let (Ok((d, Some(taken))), Some(l)) = (&result, leases)
            && d.is_allowed()
        {
            l.keep(key, taken.saturating_sub(n), now, d);
        }
        let result = result.map(|(d, _)| d);
        match &result {
            Ok(d) => {
                breaker.success();
                self.read_map_if_due(now, MAP_EVERY);
                bump(if d.is_allowed() {
                    &c.redis_allowed
                } else {
                    &c.redis_denied
                });
                if !d.is_allowed()
                    && let Some(cache) = &inner.deny
                {
                    cache.remember(key, n, quota, now, d);
                }
            }
            Err(Error::CircuitOpen) => bump(&c.errors),
            Err(e) => {
                bump(&c.errors);
                if e.is_unavailable() {
                    let now = inner.clock.now();
                    breaker.failure(now);
                    // A dead or moved primary: the slots may be served elsewhere now.
                    self.read_map_if_due(now, MAP_EVERY_IN_TROUBLE);
                } else {
                    breaker.success();
                }
            }
        }
        result.map(|d| (d, Source::Redis))
    }

    /// On a cluster, reads the slot map again (in the background) if it was last read `every`
    /// ns ago or more: each primary's breaker then serves the slots that primary holds now.
    fn read_map_if_due(&self, now: u64, every: u64) {
        if self.inner.breakers.map_due(now, every) {
            let limiter = self.clone();
            tokio::spawn(async move { limiter.read_map().await });
        }
    }

    /// Reads the cluster's slot map (`CLUSTER SLOTS`) into the breakers, within
    /// [`MAP_DEADLINE`]; a failed read changes nothing (the next one is due soon).
    pub(crate) async fn read_map(&self) {
        let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
        let conn = self.inner.conn();
        if let Ok(Ok(reply)) = tokio::time::timeout(MAP_DEADLINE, conn.query(&cmd)).await {
            self.inner.breakers.read_map(&reply);
        }
    }

    /// One script call: EVALSHA, and EVAL (which reloads the script) if Redis lost it
    /// (a restart, a failover, `SCRIPT FLUSH`).
    async fn ask(
        &self,
        keys: &[Vec<u8>],
        breaker: &Breaker,
        n: u64,
        plan: &Plan,
        now: u64,
        lease: u64,
    ) -> Result<(Decision, Option<u64>), Error> {
        let inner = &*self.inner;
        // The script's one argument: `n, now, a, b, c, lease` as little-endian doubles (see
        // prelude.lua), every one an integer below 2^53, so exact. `now` negative: Redis TIME.
        let time = match inner.unit {
            Unit::Nanos if now >= MAX_SAFE => return Err(Error::ClockOutOfRange { nanos: now }),
            Unit::Nanos => now as f64,
            Unit::Micros => -1.0,
        };
        if !breaker.allows(inner.clock.now()) {
            return Err(Error::CircuitOpen);
        }
        let [a, b, c] = plan.args;
        let mut packed = [0u8; 48];
        let words = [
            n.min(plan.capacity + 1) as f64,
            time,
            a as f64,
            b as f64,
            c as f64,
            lease.min(plan.capacity) as f64,
        ];
        for (bytes, word) in packed.chunks_exact_mut(8).zip(words) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
        let mut args = redis::Cmd::new();
        args.arg(keys.len()).arg(keys).arg(&packed[..]);
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
    pub(crate) fn conn(&self) -> Conn {
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

/// How often a cluster's slot map is read again while calls succeed (ns of the local clock).
const MAP_EVERY: u64 = 10_000_000_000;
/// How often at most while calls fail: a failover moves slots within seconds.
const MAP_EVERY_IN_TROUBLE: u64 = 500_000_000;
/// The deadline of one read of the slot map.
const MAP_DEADLINE: Duration = Duration::from_secs(1);

/// The hash tag of one of our keys (`{tag}suffix`): the bytes between the first `{` and the
/// first `}` after it, which decide the key's cluster slot.
fn hash_tag(key: &[u8]) -> &[u8] {
    let open = key.iter().position(|&b| b == b'{').map_or(0, |i| i + 1);
    let close = key[open..]
        .iter()
        .position(|&b| b == b'}')
        .map_or(key.len(), |i| open + i);
    &key[open..close]
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
