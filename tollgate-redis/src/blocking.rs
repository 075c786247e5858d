//! A blocking wrapper for callers without an async runtime.

use std::sync::Arc;

use tollgate::{Decision, Quota};

use crate::{Checked, Error, RedisLimiter, RedisLimiterBuilder};

/// A [`RedisLimiter`] for synchronous code: it owns a one-thread tokio runtime that drives
/// the connection, and each call blocks until its answer (within the limiter's deadline).
/// Clones share the runtime and the connection; it may be called from many threads.
///
/// Do not call it from inside an async runtime (tokio panics on a nested `block_on`): use
/// [`RedisLimiter`] there.
///
/// ```no_run
/// use tollgate::{Algorithm, Quota};
/// use tollgate_redis::{BlockingRedisLimiter, RedisLimiter};
///
/// let builder = RedisLimiter::builder("redis://127.0.0.1/", Algorithm::FixedWindow, Quota::per_minute(60)?);
/// let limiter = BlockingRedisLimiter::build(builder)?;
/// let d = limiter.try_acquire("alice")?;
/// # let _ = d; Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct BlockingRedisLimiter {
    limiter: RedisLimiter,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl BlockingRedisLimiter {
    /// Builds the limiter on a runtime of its own.
    ///
    /// # Errors
    /// As [`RedisLimiterBuilder::build`]; [`Error::Connection`] if the runtime cannot start.
    ///
    /// ```no_run
    /// # use tollgate::{Algorithm, Quota};
    /// let b = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(5)?);
    /// let l = tollgate_redis::BlockingRedisLimiter::build(b)?;
    /// # let _ = l; Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn build(builder: RedisLimiterBuilder) -> Result<Self, Error> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("tollgate-redis")
            .enable_all()
            .build()
            .map_err(|e| Error::Connection(e.into()))?;
        let limiter = runtime.block_on(builder.build())?;
        Ok(BlockingRedisLimiter {
            limiter,
            runtime: Arc::new(runtime),
        })
    }

    /// As [`RedisLimiter::try_acquire`], blocking.
    ///
    /// # Errors
    /// As [`RedisLimiter::try_acquire`].
    ///
    /// ```no_run
    /// # fn f(l: tollgate_redis::BlockingRedisLimiter) -> Result<(), tollgate_redis::Error> {
    /// let allowed = l.try_acquire("alice")?.is_allowed();
    /// # let _ = allowed; Ok(()) }
    /// ```
    pub fn try_acquire(&self, key: impl AsRef<[u8]>) -> Result<Decision, Error> {
        self.runtime.block_on(self.limiter.try_acquire(key))
    }

    /// As [`RedisLimiter::try_acquire_n`], blocking.
    ///
    /// # Errors
    /// As [`RedisLimiter::try_acquire`].
    ///
    /// ```no_run
    /// # fn f(l: tollgate_redis::BlockingRedisLimiter) -> Result<(), tollgate_redis::Error> {
    /// let d = l.try_acquire_n("alice", 3)?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub fn try_acquire_n(&self, key: impl AsRef<[u8]>, n: u64) -> Result<Decision, Error> {
        self.runtime.block_on(self.limiter.try_acquire_n(key, n))
    }

    /// As [`RedisLimiter::try_acquire_with`], blocking.
    ///
    /// # Errors
    /// As [`RedisLimiter::try_acquire_with`].
    ///
    /// ```no_run
    /// # fn f(l: tollgate_redis::BlockingRedisLimiter) -> Result<(), Box<dyn std::error::Error>> {
    /// let d = l.try_acquire_with("carol", &tollgate::Quota::per_second(50)?)?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub fn try_acquire_with(
        &self,
        key: impl AsRef<[u8]>,
        quota: &Quota,
    ) -> Result<Decision, Error> {
        self.runtime
            .block_on(self.limiter.try_acquire_with(key, quota))
    }

    /// As [`RedisLimiter::check`], blocking: never fails, the policy answers instead.
    ///
    /// ```no_run
    /// # fn f(l: tollgate_redis::BlockingRedisLimiter) {
    /// let c = l.check("alice", 1);
    /// # let _ = c; }
    /// ```
    pub fn check(&self, key: impl AsRef<[u8]>, n: u64) -> Checked {
        self.runtime.block_on(self.limiter.check(key, n))
    }

    /// The async limiter inside, sharing this one's connection.
    ///
    /// ```no_run
    /// # fn f(l: tollgate_redis::BlockingRedisLimiter) {
    /// let stats = l.inner().stats();
    /// # let _ = stats; }
    /// ```
    pub fn inner(&self) -> &RedisLimiter {
        &self.limiter
    }
}
