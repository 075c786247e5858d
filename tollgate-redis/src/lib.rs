//! # tollgate-redis
//!
//! tollgate's four rate limiters with their state on Redis or a Redis Cluster: one limit per
//! key shared by every instance of a service, with the same [`Decision`]s as in process.
//!
//! ## Quick start
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use tollgate::{Algorithm, Quota};
//! use tollgate_redis::RedisLimiter;
//!
//! let limiter = RedisLimiter::builder("redis://127.0.0.1/", Algorithm::TokenBucket, Quota::per_second(100)?)
//!     .build()
//!     .await?;
//! let d = limiter.try_acquire("user:42").await?;
//! println!("allowed {}, {} left", d.is_allowed(), d.remaining());
//! # Ok(()) }
//! ```
//!
//! ## How
//!
//! One Lua script per algorithm, run with `EVALSHA` (reloaded by `EVAL` after a restart,
//! failover or `SCRIPT FLUSH`):
//!
//! - **integers only**, every value below 2^53 (Lua's numbers are doubles): time in
//!   microseconds of Redis `TIME`, one clock for every client; quotas the scripts cannot hold
//!   exactly are refused at build time with a [`QuotaError`];
//! - **all-or-nothing** costs; **denials write nothing** (no replication or AOF traffic from
//!   a denied hot key; the one exception: the first call under another quota stores the
//!   state converted); keys expire with relative TTLs once the limiter is full again;
//! - each algorithm's keys share one hash tag, `{prefix:key}`, so they share a cluster slot;
//! - the sliding log is one sorted set whose members carry the running total of the costs
//!   (unique even for two admissions in one microsecond, no second key to drift apart) and
//!   reads `O(log n + cost)` members on a denial, never the whole log;
//! - state records what it was counted in (the bucket's interval, scale and capacity, the
//!   windows' lengths): a key asked under another quota is converted, never misread.
//!
//! Per call: a deadline ([`RedisLimiterBuilder::timeout`], 20 ms by default), a circuit
//! breaker (on a cluster, one per primary), a bounded local deny cache (a key denied until `t` is denied locally until `t`:
//! never an extra admission), optional leases of tokens spent locally
//! ([`RedisLimiterBuilder::leases`]), and a [`FailurePolicy`] applied by [`RedisLimiter::check`],
//! which says which [`Source`] answered. [`BlockingRedisLimiter`] serves callers without an
//! async runtime.
//!
//! ## TLS
//!
//! With the `tls` feature, `rediss://` targets connect with rustls: the platform's root
//! certificates by default, or a client's own authority and certificate through
//! `redis::Client::build_with_tls` (then passed as the target).
//!
//! ## Time
//!
//! Decisions use Redis's clock. If it steps back (a failover to a primary whose clock is
//! behind), no algorithm admits more than it would have at the later time: the token bucket
//! and the windows count against their stored state, the log records at its newest entry. If
//! it jumps forward by `d`, at most what the quota allows in `d` is added, as for any clock.
//!
//! [`RedisLimiterBuilder::test_clock`] sends a [`ManualClock`](tollgate::ManualClock)'s time
//! instead, in nanoseconds: the in-process decision sequences replay on a real server with
//! identical answers, all fields.
#![warn(missing_docs)]
// docs.rs (nightly): each feature-gated item says which feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod blocking;
mod breaker;
mod builder;
mod deny_cache;
mod error;
mod lease;
mod limiter;
mod params;
mod policy;
mod reply;
mod script;
mod target;

pub use blocking::BlockingRedisLimiter;
pub use builder::RedisLimiterBuilder;
pub use error::Error;
pub use limiter::RedisLimiter;
pub use policy::{Checked, FailurePolicy, Source, Stats};
pub use target::Target;
pub use tollgate::{Algorithm, Decision, Quota, QuotaError};

/// The README's examples, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
