//! The typed error of every call that asks Redis.

use std::fmt;
use std::time::Duration;

use tollgate::QuotaError;

/// Why a limiter could not answer from Redis. Non-exhaustive: match with a `_` arm.
///
/// ```
/// use std::time::Duration;
/// use tollgate_redis::Error;
/// let e = Error::Timeout { after: Duration::from_millis(10) };
/// assert!(e.is_unavailable());
/// assert_eq!(e.to_string(), "no answer from Redis within 10ms");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// No answer within the per-call deadline ([`RedisLimiterBuilder::timeout`](crate::RedisLimiterBuilder::timeout)).
    Timeout {
        /// The deadline that passed.
        after: Duration,
    },
    /// The connection failed, was refused, dropped or is reconnecting.
    Connection(redis::RedisError),
    /// Redis answered that it cannot serve now: `LOADING`, `BUSY` (a script or command
    /// running too long), `OOM` (maxmemory reached), `READONLY` (a demoted primary: the
    /// connection is reopened), `MASTERDOWN`, `CLUSTERDOWN` or `TRYAGAIN`. An outage.
    Unavailable(redis::RedisError),
    /// Redis answered with an error to the script (other than a missing script, which is
    /// reloaded by itself, and the outages of [`Error::Unavailable`]): a key of the wrong
    /// type, a script error. A bug, not an outage.
    Script(redis::RedisError),
    /// The script answered something that is not its five integers.
    BadReply(String),
    /// The quota cannot be represented exactly by the scripts (see the crate docs).
    Quota(QuotaError),
    /// The test clock reads 2^52 ns (about 52 days) or later: beyond what a script counts
    /// exactly in nanoseconds.
    ClockOutOfRange {
        /// The reading, in nanoseconds.
        nanos: u64,
    },
    /// A setting the algorithm does not support (leases on anything but the token bucket).
    Unsupported(&'static str),
    /// Too many calls failed in a row: Redis (on a cluster, the primary that serves the key)
    /// is not asked again until the circuit breaker's pause has passed.
    CircuitOpen,
    /// A key prefix with `{` or `}`: it would move or split the hash tag that keeps a key's
    /// state in one cluster slot.
    KeyPrefix(String),
    /// The server is older than Redis 5 (the scripts read `TIME`, which needs replication by
    /// effects).
    ServerTooOld {
        /// `major.minor` of the server.
        version: String,
    },
}

impl Error {
    /// Whether Redis could not answer (timeout, connection, open circuit, or a server that
    /// cannot serve now: [`Error::Unavailable`]), the cases a
    /// [`FailurePolicy`](crate::FailurePolicy) answers for and the circuit breaker counts. A
    /// quota, script or reply error is a bug to fix, not an outage: it is never papered over
    /// ([`RedisLimiter::check`](crate::RedisLimiter::check) denies it, with
    /// [`Source::Error`](crate::Source::Error)).
    ///
    /// ```
    /// use tollgate_redis::Error;
    /// assert!(Error::CircuitOpen.is_unavailable());
    /// assert!(!Error::BadReply("nil".into()).is_unavailable());
    /// ```
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. }
                | Error::Connection(_)
                | Error::Unavailable(_)
                | Error::CircuitOpen
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Timeout { after } => write!(f, "no answer from Redis within {after:?}"),
            Error::Connection(e) => write!(f, "Redis connection failed: {e}"),
            Error::Unavailable(e) => write!(f, "Redis cannot serve now: {e}"),
            Error::Script(e) => write!(f, "Redis refused the limiter's script: {e}"),
            Error::BadReply(r) => write!(f, "unexpected reply from the limiter's script: {r}"),
            Error::Quota(e) => write!(f, "quota not representable on Redis: {e}"),
            Error::ClockOutOfRange { nanos } => write!(
                f,
                "test clock reads {nanos} ns, at or past the 2^52 ns the scripts count exactly"
            ),
            Error::Unsupported(what) => write!(f, "unsupported setting: {what}"),
            Error::CircuitOpen => write!(f, "Redis circuit open after repeated failures"),
            Error::KeyPrefix(p) => write!(f, "key prefix {p:?} holds a brace"),
            Error::ServerTooOld { version } => {
                write!(f, "Redis {version} is too old: 5.0 or later is needed")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connection(e) | Error::Script(e) | Error::Unavailable(e) => Some(e),
            Error::Quota(e) => Some(e),
            _ => None,
        }
    }
}

impl From<QuotaError> for Error {
    fn from(e: QuotaError) -> Self {
        Error::Quota(e)
    }
}
