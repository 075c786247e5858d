//! `Decision`: what a limiter answered, in 24 bytes, computed lazily where it pays.
//!
//! | word    | bits    | meaning                                                      |
//! |---------|---------|--------------------------------------------------------------|
//! | `flags` | 63      | allowed                                                      |
//! |         | 62      | exceeds capacity (a cost the limiter can never allow)        |
//! |         | 53..=61 | zero                                                         |
//! |         | 48..=52 | `scale - 1`: `retry` and `reset` count ticks of `1/scale` ns |
//! |         | 0..=47  | remaining (never above `MAX_LIMIT` = 2^48 - 1)               |
//! | `retry` | 0..=63  | ticks until the same request would pass; `u64::MAX` = none   |
//! | `reset` | 0..=63  | ticks until the limiter is back to full capacity             |
//!
//! Invariant: `scale` is in `1..=32` (five bits hold `scale - 1`, so no encoding reads as 0).
//! The window algorithms and the twins count in whole nanoseconds (scale 1); the token bucket
//! hands over its own ticks and the accessors round them up to nanoseconds, so the division
//! by `scale` happens only when a caller asks for a duration, never on the limiter's hot path.
//! Equality and hashing compare what the accessors answer, not the encoding: a decision in
//! ticks equals the same decision in nanoseconds.
//!
//! No atomics here: a `Decision` is a plain value.

use core::fmt;
use core::hash::{Hash, Hasher};
use core::time::Duration;

use crate::clock::duration_to_nanos;
use crate::quota::HORIZON;

const ALLOWED: u64 = 1 << 63;
const EXCEEDS: u64 = 1 << 62;
const SCALE_SHIFT: u32 = 48;
const SCALE_MASK: u64 = 0x1f;
const REMAINING: u64 = (1 << SCALE_SHIFT) - 1;
/// `retry` when there is no wait that helps: allowed, exceeds capacity, or past the horizon.
pub(crate) const NO_RETRY: u64 = u64::MAX;

/// The answer to one request: allowed or not, and what the caller may tell its client.
///
/// `remaining` and `reset_after` map onto the IETF `RateLimit` header fields `r` and `t`
/// (draft-ietf-httpapi-ratelimit-headers); `retry_after` onto `Retry-After`.
///
/// A `Decision` is `Copy` and 24 bytes. The limiter fills it with what it already has at hand;
/// the accessors turn that into durations when asked, so a caller that only branches on
/// [`is_allowed`](Decision::is_allowed) pays for nothing else.
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
#[derive(Clone, Copy)]
pub struct Decision {
    flags: u64,
    retry: u64,
    reset: u64,
}

impl Decision {
    /// An admission: `remaining` is what is left after it; `reset` in ns.
    #[inline]
    pub(crate) fn allowed(remaining: u64, reset: u64) -> Decision {
        debug_assert!(remaining <= REMAINING);
        // The mask keeps the flags out of reach of `remaining`, and lets the compiler see
        // that `is_allowed` does not depend on it.
        Decision {
            flags: ALLOWED | (remaining & REMAINING),
            retry: NO_RETRY,
            reset,
        }
    }

    /// A denial that passes after `retry` (in ns, or [`NO_RETRY`]); `reset` in ns.
    #[inline]
    pub(crate) fn denied_after(remaining: u64, retry: u64, reset: u64) -> Decision {
        debug_assert!(remaining <= REMAINING);
        Decision {
            flags: remaining & REMAINING,
            retry,
            reset,
        }
    }

    /// A denial: the request passes once the clock reads `pass_at_ns`, unless that lies past
    /// the horizon, where time stands still and it never will.
    #[inline]
    pub(crate) fn denied(remaining: u64, now_ns: u64, pass_at_ns: u64, reset_ns: u64) -> Decision {
        let retry = if pass_at_ns > HORIZON {
            NO_RETRY
        } else {
            pass_at_ns.saturating_sub(now_ns)
        };
        Decision::denied_after(remaining, retry, reset_ns)
    }

    /// A cost above what the limiter can ever allow.
    #[inline]
    pub(crate) fn exceeds(remaining: u64, reset_ns: u64) -> Decision {
        debug_assert!(remaining <= REMAINING);
        Decision {
            flags: EXCEEDS | (remaining & REMAINING),
            retry: NO_RETRY,
            reset: reset_ns,
        }
    }

    /// The same decision with `retry` and `reset` read as ticks of `1/scale` ns (`1..=32`),
    /// rounded up to whole ns by the accessors.
    #[inline]
    pub(crate) fn in_ticks(self, scale: u32) -> Decision {
        debug_assert!((1..=32).contains(&scale));
        let bits = (u64::from(scale).wrapping_sub(1) & SCALE_MASK) << SCALE_SHIFT;
        Decision {
            flags: self.flags | bits,
            ..self
        }
    }

    /// A decision made elsewhere (a shared store, a script on a server, a test double), in the
    /// form every limiter answers.
    ///
    /// Values beyond what a `Decision` holds saturate: `remaining` above 2^48 - 1 reads as
    /// 2^48 - 1, durations beyond `u64::MAX` ns read as `u64::MAX` ns (a `retry_after` that
    /// long reads back one nanosecond shorter, since `u64::MAX` ns means "none"). `retry_after`
    /// is dropped for an allowed decision and for one that exceeds capacity.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Decision;
    ///
    /// let d = Decision::from_parts(false, 0, Some(Duration::from_millis(250)), Duration::from_secs(1), false);
    /// assert!(!d.is_allowed() && !d.exceeds_capacity());
    /// assert_eq!(d.remaining(), 0);
    /// assert_eq!(d.retry_after(), Some(Duration::from_millis(250)));
    /// assert_eq!(d.reset_after(), Duration::from_secs(1));
    /// ```
    pub fn from_parts(
        allowed: bool,
        remaining: u64,
        retry_after: Option<Duration>,
        reset_after: Duration,
        exceeds_capacity: bool,
    ) -> Decision {
        let mut flags = remaining.min(REMAINING);
        if allowed {
            flags |= ALLOWED;
        }
        if exceeds_capacity {
            flags |= EXCEEDS;
        }
        // Only a denial that retrying can cure has a retry, as with every limiter here.
        let retry = match retry_after {
            Some(d) if !allowed && !exceeds_capacity => duration_to_nanos(d).min(NO_RETRY - 1),
            _ => NO_RETRY,
        };
        Decision {
            flags,
            retry,
            reset: duration_to_nanos(reset_after),
        }
    }

    /// Ticks of this decision to whole ns, rounded up.
    #[inline]
    fn ns(&self, ticks: u64) -> u64 {
        // `scale - 1` is five bits: the divisor is 1..=32, never zero.
        let scale = ((self.flags >> SCALE_SHIFT) & SCALE_MASK) + 1;
        if scale == 1 {
            ticks
        } else {
            ticks.div_ceil(scale)
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
        (self.retry != NO_RETRY).then(|| Duration::from_nanos(self.ns(self.retry)))
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
        Duration::from_nanos(self.ns(self.reset))
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

    /// What the accessors answer, in one tuple: what equality and hashing compare.
    fn parts(&self) -> (bool, u64, Option<Duration>, Duration, bool) {
        (
            self.is_allowed(),
            self.remaining(),
            self.retry_after(),
            self.reset_after(),
            self.exceeds_capacity(),
        )
    }
}

/// Two decisions are equal when every accessor answers the same, however each was encoded.
impl PartialEq for Decision {
    fn eq(&self, other: &Decision) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Decision {}

impl Hash for Decision {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_round_up_to_whole_nanoseconds() {
        let d = Decision::denied_after(0, 7, 9).in_ticks(3);
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(3)));
        assert_eq!(d.reset_after(), Duration::from_nanos(3));
        let exact = Decision::denied_after(0, 6, 9).in_ticks(3);
        assert_eq!(exact.retry_after(), Some(Duration::from_nanos(2)));
        let widest = Decision::allowed(REMAINING, u64::MAX).in_ticks(32);
        assert_eq!(
            widest.reset_after(),
            Duration::from_nanos(u64::MAX.div_ceil(32))
        );
        assert_eq!(widest.remaining(), REMAINING);
        assert!(widest.is_allowed() && !widest.exceeds_capacity());
    }

    #[test]
    fn equality_compares_answers_not_encodings() {
        let in_ticks = Decision::denied_after(2, 30, 60).in_ticks(3);
        let in_ns = Decision::denied_after(2, 10, 20);
        assert_eq!(in_ticks, in_ns);
        let other = Decision::denied_after(2, 11, 20);
        assert_ne!(in_ticks, other);
    }

    #[cfg(feature = "std")]
    #[test]
    fn equal_decisions_hash_alike() {
        use std::hash::BuildHasher;
        let state = std::collections::hash_map::RandomState::new();
        let in_ticks = Decision::allowed(4, 96).in_ticks(32);
        let in_ns = Decision::allowed(4, 3);
        assert_eq!(state.hash_one(in_ticks), state.hash_one(in_ns));
    }

    #[test]
    fn from_parts_saturates_what_it_cannot_hold() {
        let d = Decision::from_parts(true, u64::MAX, None, Duration::MAX, false);
        assert_eq!(d.remaining(), REMAINING);
        assert_eq!(d.reset_after(), Duration::from_nanos(u64::MAX));
        assert_eq!(d.retry_after(), None);
        let long = Decision::from_parts(false, 0, Some(Duration::MAX), Duration::ZERO, false);
        assert_eq!(long.retry_after(), Some(Duration::from_nanos(u64::MAX - 1)));
        assert!(!long.exceeds_capacity() && !long.is_allowed());
        // A cost no wait can cure has no retry, whatever the parts said.
        let never = Decision::from_parts(false, 0, Some(Duration::MAX), Duration::ZERO, true);
        assert_eq!(never.retry_after(), None);
        assert!(never.exceeds_capacity() && !never.is_allowed());
    }

    #[test]
    fn from_parts_round_trips_a_limiter_decision() {
        let d = Decision::denied(3, 100, 350, 900).in_ticks(1);
        let copy = Decision::from_parts(
            d.is_allowed(),
            d.remaining(),
            d.retry_after(),
            d.reset_after(),
            d.exceeds_capacity(),
        );
        assert_eq!(copy, d);
        assert_eq!(copy.retry_after(), Some(Duration::from_nanos(250)));
    }
}
