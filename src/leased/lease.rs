//! The lease policy ([`Lease`]) and the errors of a policy the bucket cannot honour.

use core::fmt;
use core::time::Duration;

use crate::clock::duration_to_nanos;

/// A lease policy the bucket cannot honour, or a setting outside its range.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Lease, LeaseError};
/// assert_eq!(Lease::try_new(0, Duration::from_millis(1)), Err(LeaseError::ZeroTokens));
/// println!("{}", LeaseError::ZeroTtl); // "a lease must live at least 1 ns"
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseError {
    /// `max_tokens` was 0: a lease could hold nothing.
    ZeroTokens,
    /// The time to live was zero.
    ZeroTtl,
    /// The clock-read interval was 0 spends.
    ZeroClockEvery,
    /// The cap on parked tokens is below one lease.
    CapBelowLease {
        /// The cap asked for.
        max_parked: u64,
        /// The lease size it must hold at least.
        max_tokens: u64,
    },
    /// A lease larger than the bucket's burst could never be granted whole.
    LeaseAboveBurst {
        /// The lease size asked for.
        max_tokens: u64,
        /// The bucket's burst.
        burst: u64,
    },
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LeaseError::ZeroTokens => f.write_str("a lease must hold at least 1 token"),
            LeaseError::ZeroTtl => f.write_str("a lease must live at least 1 ns"),
            LeaseError::ZeroClockEvery => {
                f.write_str("a lease must read the clock at least every 1 spend")
            }
            LeaseError::CapBelowLease {
                max_parked,
                max_tokens,
            } => write!(
                f,
                "the cap of {max_parked} parked tokens is below one lease of {max_tokens}"
            ),
            LeaseError::LeaseAboveBurst { max_tokens, burst } => write!(
                f,
                "a lease of {max_tokens} tokens is above the bucket's burst of {burst}"
            ),
        }
    }
}

impl std::error::Error for LeaseError {}

/// How [`Leased`](crate::Leased) hands out tokens: at most `max_tokens` per lease, a lease spent from for at
/// most `ttl`, at most `max_parked` tokens parked in all leases together.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Lease;
///
/// let lease = Lease::try_new(64, Duration::from_millis(1))?.with_max_parked(1024)?;
/// assert_eq!((lease.max_tokens(), lease.max_parked()), (64, 1024));
/// assert_eq!(lease.bypass_above(), 32); // larger costs go straight to the bucket
/// # Ok::<(), tollgate::LeaseError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    pub(super) max_tokens: u64,
    pub(super) ttl_ns: u64,
    pub(super) max_parked: u64,
    pub(super) clock_every: u32,
}

/// The default cap on parked tokens, in leases: `max_parked = 16 × max_tokens`.
const DEFAULT_PARKED_LEASES: u64 = 16;

/// The default number of spends between two clock reads on the fast path.
const DEFAULT_CLOCK_EVERY: u32 = 8;

impl Lease {
    /// At most `max_tokens` per lease, each spent from for at most `ttl` (see
    /// [`Lease::with_clock_every`] for how that is checked), with a cap on parked tokens of
    /// `16 × max_tokens` (saturating) until [`Lease::with_max_parked`] says otherwise.
    ///
    /// # Errors
    /// [`LeaseError::ZeroTokens`], [`LeaseError::ZeroTtl`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Lease, LeaseError};
    /// let lease = Lease::try_new(32, Duration::from_micros(500))?;
    /// assert_eq!(lease.max_parked(), 512);
    /// assert_eq!(Lease::try_new(8, Duration::ZERO), Err(LeaseError::ZeroTtl));
    /// # Ok::<(), LeaseError>(())
    /// ```
    pub fn try_new(max_tokens: u64, ttl: Duration) -> Result<Lease, LeaseError> {
        if max_tokens == 0 {
            return Err(LeaseError::ZeroTokens);
        }
        if ttl.is_zero() {
            return Err(LeaseError::ZeroTtl);
        }
        Ok(Lease {
            max_tokens,
            ttl_ns: duration_to_nanos(ttl),
            max_parked: max_tokens.saturating_mul(DEFAULT_PARKED_LEASES),
            clock_every: DEFAULT_CLOCK_EVERY,
        })
    }

    /// Caps the tokens parked in all leases together, whatever the number of threads: this
    /// is [`Leased::max_overshoot`](crate::Leased::max_overshoot) (unless a lease holds a single token, and parks none).
    ///
    /// # Errors
    /// [`LeaseError::CapBelowLease`] when `max_parked < max_tokens`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Lease, LeaseError};
    /// let lease = Lease::try_new(16, Duration::from_millis(1))?;
    /// assert_eq!(lease.with_max_parked(256)?.max_parked(), 256);
    /// assert!(matches!(lease.with_max_parked(8), Err(LeaseError::CapBelowLease { .. })));
    /// # Ok::<(), LeaseError>(())
    /// ```
    pub fn with_max_parked(self, max_parked: u64) -> Result<Lease, LeaseError> {
        if max_parked < self.max_tokens {
            return Err(LeaseError::CapBelowLease {
                max_parked,
                max_tokens: self.max_tokens,
            });
        }
        Ok(Lease { max_parked, ..self })
    }

    /// Reads the clock on the fast path once every `spends` spends (default 8); the other
    /// spends are a thread-local decrement with no clock read. `1` checks the time to live on
    /// every spend. A lease is spent from at most `spends − 1` times after its `ttl` passed,
    /// whatever the idle time in between (the leftover then goes back to the bucket).
    ///
    /// # Errors
    /// [`LeaseError::ZeroClockEvery`] for 0.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Lease;
    /// let lease = Lease::try_new(16, Duration::from_millis(1))?.with_clock_every(1)?;
    /// assert_eq!(lease.clock_every(), 1);
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    pub fn with_clock_every(self, spends: u32) -> Result<Lease, LeaseError> {
        if spends == 0 {
            return Err(LeaseError::ZeroClockEvery);
        }
        Ok(Lease {
            clock_every: spends,
            ..self
        })
    }

    /// The most tokens one lease holds.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(tollgate::Lease::try_new(8, Duration::from_millis(1))?.max_tokens(), 8);
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    pub fn max_tokens(&self) -> u64 {
        self.max_tokens
    }

    /// How long a lease is spent from at most.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let lease = tollgate::Lease::try_new(8, Duration::from_millis(2))?;
    /// assert_eq!(lease.ttl(), Duration::from_millis(2));
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    pub fn ttl(&self) -> Duration {
        Duration::from_nanos(self.ttl_ns)
    }

    /// The cap on tokens parked in all leases together.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(tollgate::Lease::try_new(8, Duration::from_millis(1))?.max_parked(), 128);
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    pub fn max_parked(&self) -> u64 {
        self.max_parked
    }

    /// Spends between two clock reads on the fast path.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(tollgate::Lease::try_new(8, Duration::from_millis(1))?.clock_every(), 8);
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    pub fn clock_every(&self) -> u32 {
        self.clock_every
    }

    /// Costs above this go straight to the bucket, exactly, never through a lease:
    /// `max(1, max_tokens / 2)`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(tollgate::Lease::try_new(1, Duration::from_millis(1))?.bypass_above(), 1);
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    #[inline]
    pub fn bypass_above(&self) -> u64 {
        (self.max_tokens / 2).max(1)
    }
}
