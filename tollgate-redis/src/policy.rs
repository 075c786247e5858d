//! What answers when Redis cannot ([`FailurePolicy`]), who answered ([`Source`],
//! [`Checked`]) and the counts of answers by source ([`Stats`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tollgate::{Decision, KeyedLimiter};

use crate::error::Error;

/// What a [`RedisLimiter::check`](crate::RedisLimiter::check) answers when Redis cannot
/// (timeout, connection, open circuit, or any other error).
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

/// Who answered a [`RedisLimiter::check`](crate::RedisLimiter::check).
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
    /// ([`RedisLimiterBuilder::leases`](crate::RedisLimiterBuilder::leases)).
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
    /// Calls that failed (each one answered by the policy in
    /// [`RedisLimiter::check`](crate::RedisLimiter::check)).
    pub errors: u64,
    /// Admissions made by the failure policy while Redis was unavailable.
    pub policy_allowed: u64,
    /// Denials made by the failure policy while Redis was unavailable.
    pub policy_denied: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) redis_allowed: AtomicU64,
    pub(crate) redis_denied: AtomicU64,
    pub(crate) cache_denied: AtomicU64,
    pub(crate) lease_allowed: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) policy_allowed: AtomicU64,
    pub(crate) policy_denied: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    // Relaxed: a statistic; nothing is ordered by it.
    c.fetch_add(1, Ordering::Relaxed);
}
