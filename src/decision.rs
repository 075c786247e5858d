//! `Decision`: what a limiter answered, in 24 bytes.
//!
//! | word    | bits   | meaning                                                    |
//! |---------|--------|------------------------------------------------------------|
//! | `flags` | 63     | allowed                                                    |
//! |         | 62     | exceeds capacity (a cost the limiter can never allow)      |
//! |         | 0..=61 | remaining (never above `MAX_LIMIT` < 2^48)                 |
//! | `retry` | 0..=63 | ns until the same request would pass; `u64::MAX` = none    |
//! | `reset` | 0..=63 | ns until the limiter is back to full capacity              |

use core::fmt;
use core::time::Duration;

use crate::quota::HORIZON;

const ALLOWED: u64 = 1 << 63;
const EXCEEDS: u64 = 1 << 62;
const REMAINING: u64 = (1 << 62) - 1;
const NO_RETRY: u64 = u64::MAX;

/// The answer to one request: allowed or not, and what the caller may tell its client.
///
/// `remaining` and `reset_after` map onto the IETF `RateLimit` header fields `r` and `t`
/// (draft-ietf-httpapi-ratelimit-headers); `retry_after` onto `Retry-After`.
///
/// ```
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
/// use std::time::Duration;
///
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// let first = bucket.try_acquire();
/// assert!(first.is_allowed());
/// assert_eq!(first.remaining(), 1);
/// assert_eq!(first.reset_after(), Duration::from_millis(500));
/// let _ = bucket.try_acquire();
/// let third = bucket.try_acquire();
/// assert!(!third.is_allowed());
/// assert_eq!(third.retry_after(), Some(Duration::from_millis(500)));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[must_use = "a decision that is not checked does not limit anything"]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    flags: u64,
    retry: u64,
    reset: u64,
}

impl Decision {
    /// An admission: `remaining` is what is left after it.
    #[inline]
    pub(crate) fn allowed(remaining: u64, reset_ns: u64) -> Decision {
        debug_assert!(remaining <= REMAINING);
        Decision {
            flags: ALLOWED | remaining,
            retry: NO_RETRY,
            reset: reset_ns,
        }
    }

    /// A denial: the request passes once the clock reads `pass_at_ns`, unless that lies past
    /// the horizon, where time stands still and it never will.
    #[inline]
    pub(crate) fn denied(remaining: u64, now_ns: u64, pass_at_ns: u64, reset_ns: u64) -> Decision {
        debug_assert!(remaining <= REMAINING);
        let retry = if pass_at_ns > HORIZON {
            NO_RETRY
        } else {
            pass_at_ns.saturating_sub(now_ns)
        };
        Decision {
            flags: remaining,
            retry,
            reset: reset_ns,
        }
    }

    /// A cost above what the limiter can ever allow.
    #[inline]
    pub(crate) fn exceeds(remaining: u64, reset_ns: u64) -> Decision {
        debug_assert!(remaining <= REMAINING);
        Decision {
            flags: EXCEEDS | remaining,
            retry: NO_RETRY,
            reset: reset_ns,
        }
    }

    /// Whether the request passed (and its cost was taken).
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, FixedWindow};
    /// let w = FixedWindow::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// assert!(w.try_acquire().is_allowed());
    /// assert!(!w.try_acquire().is_allowed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.flags & ALLOWED != 0
    }

    /// How many more unit requests would pass right now, after this decision.
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, SlidingLog};
    /// let log = SlidingLog::try_with_clock(Quota::per_second(10)?, ManualClock::new())?;
    /// assert_eq!(log.try_acquire_n(4).remaining(), 6);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.flags & REMAINING
    }

    /// For a denied request, the exact minimal wait after which the same request would pass
    /// if nothing else were admitted meanwhile. `None` when the request was allowed, when it
    /// can never pass ([`Decision::exceeds_capacity`]), or when it would pass only past the
    /// limiters' time horizon (2^58 ns after the clock's zero).
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, FixedWindow};
    /// # use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let w = FixedWindow::with_clock(Quota::per_second(1)?, clock.clone());
    /// clock.advance(Duration::from_millis(300));
    /// let _ = w.try_acquire();
    /// assert_eq!(w.try_acquire().retry_after(), Some(Duration::from_millis(700)));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn retry_after(&self) -> Option<Duration> {
        (self.retry != NO_RETRY).then(|| Duration::from_nanos(self.retry))
    }

    /// How long until the limiter is back to its full capacity if no further request is
    /// admitted: the `t` of the IETF `RateLimit` header. Zero when it is full now.
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
    /// # use std::time::Duration;
    /// let b = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
    /// assert_eq!(b.try_acquire_n(2).reset_after(), Duration::from_millis(500));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset)
    }

    /// Whether the cost asked for is larger than the limiter can ever allow (above the
    /// token bucket's burst, or a window's limit). Such a request is denied at once, takes
    /// nothing, and has no `retry_after`: retrying would never help.
    ///
    /// ```
    /// # use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
    /// let b = TokenBucket::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// let d = b.try_acquire_n(6);
    /// assert!(d.exceeds_capacity() && !d.is_allowed() && d.retry_after().is_none());
    /// assert_eq!(d.remaining(), 5); // nothing was taken
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn exceeds_capacity(&self) -> bool {
        self.flags & EXCEEDS != 0
    }
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.is_allowed())
            .field("remaining", &self.remaining())
            .field("retry_after", &self.retry_after())
            .field("reset_after", &self.reset_after())
            .field("exceeds_capacity", &self.exceeds_capacity())
            .finish()
    }
}
