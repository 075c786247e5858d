//! [`RedisLimiterBuilder`]: the settings, checked; the connection made, the server's version
//! checked and the script loaded by `build`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError};
use tollgate::{Algorithm, ManualClock, MonotonicClock, Quota};

use crate::breaker::Breakers;
use crate::deny_cache::DenyCache;
use crate::error::Error;
use crate::lease::Leases;
use crate::limiter::{Inner, LocalClock, RedisLimiter};
use crate::params::{plan, Unit};
use crate::policy::{Counters, FailurePolicy};
use crate::reply::{classify, server_version};
use crate::script::{script_for, Script};
use crate::target::{with_tcp_settings, Conn, Target};

/// Builder methods that each set one field: every `pub fn name(args) => field = value;`
/// becomes `pub fn name(mut self, args) -> Self` with its doc comment, setting `field` to
/// `value`.
macro_rules! setters {
    ($(
        $(#[$doc:meta])*
        pub fn $name:ident($($arg:ident: $ty:ty),+) => $field:ident = $value:expr;
    )*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, $($arg: $ty),+) -> Self {
            self.$field = $value;
            self
        }
    )*};
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
    /// The defaults, documented on each setting.
    pub(crate) fn new(target: Target, algorithm: Algorithm, quota: Quota) -> Self {
        RedisLimiterBuilder {
            target,
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

    setters! {
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
        pub fn key_prefix(prefix: impl AsRef<[u8]>) => prefix = prefix.as_ref().to_vec();

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
        pub fn timeout(deadline: Duration) => timeout = deadline;

        /// The deadline of the first connection in `build` (default 1 s).
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use std::time::Duration;
        /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::FixedWindow, Quota::per_second(5)?)
        ///     .connect_timeout(Duration::from_millis(200));
        /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
        /// ```
        pub fn connect_timeout(deadline: Duration) => connect_timeout = deadline;

        /// What [`RedisLimiter::check`] answers when Redis cannot (default: fail closed, retry
        /// after one second).
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(5)?)
        ///     .failure_policy(tollgate_redis::FailurePolicy::FailOpen);
        /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
        /// ```
        pub fn failure_policy(policy: FailurePolicy) => policy = policy;

        /// How many denied keys the local deny cache holds (default 10,000; 0 turns it off).
        /// A key Redis denied until `t` is denied locally until `t` without a round trip.
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(5)?)
        ///     .deny_cache(0);
        /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
        /// ```
        pub fn deny_cache(max_keys: usize) => deny_cache = max_keys;

        /// After `failures` failed calls in a row, answer [`Error::CircuitOpen`] at once for
        /// `pause`, then let one call probe Redis (default 5 failures, 250 ms; 0 turns it off).
        /// On a cluster, each primary has its own breaker, counting the calls of the keys it
        /// serves: one dead primary's keys are answered at once while the others' keys are still
        /// asked (the slot map is read at `build` and again after failures and every 10 s).
        ///
        /// ```
        /// # use tollgate::{Algorithm, Quota};
        /// # use std::time::Duration;
        /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(5)?)
        ///     .circuit_breaker(3, Duration::from_millis(100));
        /// # let _ = b; Ok::<(), tollgate::QuotaError>(())
        /// ```
        pub fn circuit_breaker(failures: u32, pause: Duration) => breaker = (failures, pause);

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
        pub fn leases(size: u64, lifetime: Duration)
            => leases = (size > 1).then_some((size, lifetime));

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
        pub fn test_clock(clock: ManualClock) => test_clock = Some(clock);
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
        let cluster = matches!(self.target, Target::Cluster(_));
        let connect = async {
            match self.target {
                Target::Server(client) => {
                    let client = with_tcp_settings(client)?;
                    // One attempt first: a certificate refused, a password refused or a server
                    // that does not answer as Redis is final and reported as it is, at once.
                    // Only a connection refused, dropped or slow (a server starting or
                    // restarting) is tried again, by the manager, until the deadline.
                    if let Err(e) = client.get_multiplexed_async_connection().await
                        && !(e.is_connection_refusal()
                            || e.is_connection_dropped()
                            || e.is_timeout())
                    {
                        return Err(e);
                    }
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
        if let Some(version) = server_version(&info)
            && version < (5, 0)
        {
            return Err(Error::ServerTooOld {
                version: format!("{}.{}", version.0, version.1),
            });
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
                breakers: Breakers::new(
                    self.breaker.0,
                    u64::try_from(self.breaker.1.as_nanos()).unwrap_or(u64::MAX),
                    cluster,
                ),
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
        // Which primary serves which slot: one breaker each.
        if cluster && limiter.inner.breakers.map_due(limiter.inner.clock.now(), 0) {
            limiter.read_map().await;
        }
        Ok(limiter)
    }
}
