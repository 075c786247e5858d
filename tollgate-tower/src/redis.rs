//! [`RedisBackend`]: the layer's decisions from a [`tollgate_redis::RedisLimiter`], one limit
//! per key shared by every instance of the service.
//!
//! The key is written to bytes ([`RedisKey`]) inside `try_acquire`, before the future is
//! returned, so the future owns everything it needs and borrows nothing from the request.
//! The per-call deadline is the limiter's ([`RedisLimiterBuilder::timeout`]): past it the
//! future resolves, it never hangs the request.
//!
//! [`RedisLimiterBuilder::timeout`]: tollgate_redis::RedisLimiterBuilder::timeout

use core::future::Future;
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll};
use std::net::IpAddr;

use tollgate::{Decision, Quota};
use tollgate_redis::{Error, RedisLimiter};

use crate::Backend;

/// A key the [`RedisBackend`] can send: its bytes, written into the Redis key name.
///
/// Distinct keys write distinct bytes: addresses as text (`203.0.113.7`, `2001:db8::`, so an
/// IPv4 and an IPv6 key never meet), integers in decimal, strings and byte strings as they
/// are, and a pair as its first part's length in decimal, `:`, then both parts.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate_tower::RedisKey;
/// let mut out = Vec::new();
/// "203.0.113.7".parse::<IpAddr>()?.write_key(&mut out);
/// assert_eq!(out, b"203.0.113.7");
/// out.clear();
/// (7u32, Box::<str>::from("/users/{id}")).write_key(&mut out);
/// assert_eq!(out, b"1:7/users/{id}");
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
pub trait RedisKey {
    /// Appends this key's bytes to `out`.
    fn write_key(&self, out: &mut Vec<u8>);
}

impl RedisKey for () {
    fn write_key(&self, _: &mut Vec<u8>) {}
}

impl RedisKey for IpAddr {
    fn write_key(&self, out: &mut Vec<u8>) {
        use std::io::Write;
        // Writing into a Vec cannot fail.
        let _ = write!(out, "{self}");
    }
}

macro_rules! bytes_key {
    ($target:ty => $($t:ty),*) => {$(
        impl RedisKey for $t {
            fn write_key(&self, out: &mut Vec<u8>) {
                let unsized_key: &$target = self;
                out.extend_from_slice(unsized_key.as_ref());
            }
        }
    )*};
}
bytes_key!(str => Box<str>, String, &'static str);
bytes_key!([u8] => Box<[u8]>, Vec<u8>, &'static [u8]);

macro_rules! int_key {
    ($($t:ty),*) => {$(
        impl RedisKey for $t {
            fn write_key(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(itoa::Buffer::new().format(*self).as_bytes());
            }
        }
    )*};
}
int_key!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);

impl<A: RedisKey, B: RedisKey> RedisKey for (A, B) {
    fn write_key(&self, out: &mut Vec<u8>) {
        let mut first = Vec::new();
        self.0.write_key(&mut first);
        out.extend_from_slice(itoa::Buffer::new().format(first.len()).as_bytes());
        out.push(b':');
        out.extend_from_slice(&first);
        self.1.write_key(out);
    }
}

/// What the backend does when the limiter cannot decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failures {
    /// Every error reaches the layer, whose `OnError` answers.
    ToLayer,
    /// Redis unavailable: the limiter's `FailurePolicy` answers; other errors reach the layer.
    LimiterPolicy,
}

/// A [`Backend`] over a [`RedisLimiter`]: every instance of the service built on the same
/// Redis, prefix, algorithm and quota shares one limit per key.
///
/// By default a failed call (timeout, lost connection, open circuit, a script error) reaches
/// the layer as an `Err`, and the layer answers as its [`OnError`](crate::OnError) says
/// (`503` unless set). With [`RedisBackend::limiter_policy`] the limiter's own
/// [`FailurePolicy`](tollgate_redis::FailurePolicy) answers instead while Redis is
/// unavailable (e.g. a local limiter per instance, or a `429` with its `Retry-After`).
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use std::net::IpAddr;
/// use std::time::Duration;
/// use tollgate::{Algorithm, Quota};
/// use tollgate_redis::RedisLimiter;
/// use tollgate_tower::{OnError, PeerIp, RateLimitLayer, RedisBackend};
///
/// let quota = Quota::per_minute(100)?;
/// let limiter = RedisLimiter::builder("redis://127.0.0.1/", Algorithm::SlidingWindow, quota)
///     .timeout(Duration::from_millis(10))
///     .build()
///     .await?;
/// let layer = RateLimitLayer::new(PeerIp::default(), RedisBackend::<IpAddr>::new(limiter, quota))
///     .on_error(OnError::Allow); // Redis down: let requests through uncounted
/// # let _ = layer; Ok(()) }
/// ```
pub struct RedisBackend<K> {
    limiter: RedisLimiter,
    quota: Quota,
    failures: Failures,
    key: PhantomData<fn(&K)>,
}

impl<K> Clone for RedisBackend<K> {
    fn clone(&self) -> Self {
        RedisBackend {
            limiter: self.limiter.clone(),
            quota: self.quota,
            failures: self.failures,
            key: PhantomData,
        }
    }
}

impl<K> core::fmt::Debug for RedisBackend<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("limiter", &self.limiter)
            .field("quota", &self.quota)
            .field("failures", &self.failures)
            .finish()
    }
}

impl<K> RedisBackend<K> {
    /// Decisions from `limiter`, which was built with `quota` (the quota the
    /// `RateLimit-Policy` header announces: pass the one given to `RedisLimiter::builder`).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use tollgate::{Algorithm, Quota};
    /// let quota = Quota::per_second(5)?;
    /// let limiter = tollgate_redis::RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, quota)
    ///     .build()
    ///     .await?;
    /// let backend = tollgate_tower::RedisBackend::<Box<[u8]>>::new(limiter, quota);
    /// # let _ = backend; Ok(()) }
    /// ```
    pub fn new(limiter: RedisLimiter, quota: Quota) -> Self {
        RedisBackend {
            limiter,
            quota,
            failures: Failures::ToLayer,
            key: PhantomData,
        }
    }

    /// While Redis is unavailable (timeout, connection, open circuit), answer with the
    /// limiter's [`FailurePolicy`](tollgate_redis::FailurePolicy) rather than an `Err`.
    /// Any other error (a script or reply error: a bug, not an outage) still reaches the
    /// layer's [`OnError`](crate::OnError).
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Quota};
    /// use tollgate_redis::{FailurePolicy, RedisLimiter};
    /// let quota = Quota::per_second(5)?;
    /// let limiter = RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, quota)
    ///     .failure_policy(FailurePolicy::FailClosed { retry_after: Duration::from_secs(2) })
    ///     .build()
    ///     .await?;
    /// // Redis frozen: 429 with `Retry-After: 2` after the limiter's deadline.
    /// let backend = tollgate_tower::RedisBackend::<()>::new(limiter, quota).limiter_policy();
    /// # let _ = backend; Ok(()) }
    /// ```
    pub fn limiter_policy(mut self) -> Self {
        self.failures = Failures::LimiterPolicy;
        self
    }

    /// The limiter, e.g. for its [`stats`](RedisLimiter::stats).
    ///
    /// ```no_run
    /// # fn f(b: tollgate_tower::RedisBackend<()>) {
    /// println!("{} calls failed", b.limiter().stats().errors);
    /// # }
    /// ```
    pub fn limiter(&self) -> &RedisLimiter {
        &self.limiter
    }
}

/// A decision in flight on Redis, resolved within the limiter's deadline.
///
/// ```no_run
/// # async fn f(b: tollgate_tower::RedisBackend<()>) {
/// use tollgate_tower::Backend;
/// let pending: tollgate_tower::RedisDecision = b.try_acquire(&(), 1);
/// let decision = pending.await;
/// # let _ = decision; }
/// ```
#[must_use = "a decision does nothing unless awaited"]
pub struct RedisDecision(Pin<Box<dyn Future<Output = Result<Decision, Error>> + Send>>);

impl core::fmt::Debug for RedisDecision {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("RedisDecision(..)")
    }
}

impl Future for RedisDecision {
    type Output = Result<Decision, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl<K> Backend for RedisBackend<K>
where
    K: RedisKey + core::hash::Hash + Eq + Clone + Send + Sync + 'static,
{
    type Key = K;
    type Error = Error;
    type Future = RedisDecision;

    fn try_acquire(&self, key: &K, cost: u64) -> RedisDecision {
        let mut bytes = Vec::new();
        key.write_key(&mut bytes);
        let limiter = self.limiter.clone();
        match self.failures {
            Failures::ToLayer => RedisDecision(Box::pin(async move {
                limiter.try_acquire_n(&bytes, cost).await
            })),
            Failures::LimiterPolicy => RedisDecision(Box::pin(async move {
                let checked = limiter.check(&bytes, cost).await;
                match checked.error {
                    Some(e) if !e.is_unavailable() => Err(e),
                    _ => Ok(checked.decision),
                }
            })),
        }
    }

    fn quota(&self) -> Quota {
        self.quota
    }
}
