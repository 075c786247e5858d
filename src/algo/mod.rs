//! The four algorithms, one file each, and what they share.
//!
//! Every algorithm is an [`Algo`]: parameters made once from a [`Quota`] (shared by every
//! limiter of one plan), a state of atomics (one per limiter), and `acquire`, which commits
//! one request to a state under those parameters. [`Core`] pairs one state with its
//! parameters; the public [`RateLimiter`](crate::RateLimiter) adds a clock.
//!
//! Every file opens with its state-word layout, its invariant and its memory orderings, and
//! keeps the pure decision (`decide`: snapshot, now, cost → decision and write, no atomics)
//! apart from the commit. The lock-free ones commit through the one compare-exchange loop,
//! [`update`].

use core::fmt::Debug;

use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::sync::{AtomicU64, Ordering};

pub(crate) mod fixed_window;
#[cfg(tollgate_loom)]
pub mod planted;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window;
pub(crate) mod token_bucket;

/// What one request does: the decision, and the write to commit if it must write.
pub type Step<W = u64> = (Decision, Option<W>);

/// The count field of a packed `(number, count)` word: its low `count_bits` bits.
#[inline]
pub(crate) const fn count_mask(count_bits: u32) -> u64 {
    (1u64 << count_bits) - 1
}

/// The sealing of [`Algo`]: only this crate's algorithms implement it.
pub(crate) mod sealed {
    /// Implemented by the four algorithms' marker types; not nameable outside the crate.
    pub trait Sealed {}
}

/// One rate-limiting algorithm, split into what a limiter shares and what it owns.
///
/// Implemented by the four algorithms' marker types only (the trait is sealed); the public
/// limiters are [`RateLimiter`](crate::RateLimiter)s over them. Its items are the crate's
/// own: a user names it as a bound, to write code generic over the four limiters.
///
/// ```
/// use tollgate::{Algo, Clock, FixedWindow, Limiter, ManualClock, Quota, RateLimiter, TokenBucket};
///
/// /// How many of `n` unit requests pass now, on any of the four limiters.
/// fn admitted<A: Algo, C: Clock>(limiter: &RateLimiter<A, C>, n: u32) -> usize {
///     (0..n).filter(|_| limiter.try_acquire().is_allowed()).count()
/// }
///
/// let quota = Quota::per_second(3)?;
/// assert_eq!(admitted(&TokenBucket::with_clock(quota, ManualClock::new()), 5), 3);
/// assert_eq!(admitted(&FixedWindow::with_clock(quota, ManualClock::new()), 5), 3);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait Algo: sealed::Sealed {
    /// Everything fixed by the quota: made once, read-only, shared by every state of a plan.
    #[doc(hidden)]
    type Params: Clone + Debug + Send + Sync;
    /// One limiter's atomics.
    #[doc(hidden)]
    type State: Debug + Send + Sync;

    /// The parameters for `quota`, or why this algorithm cannot represent it.
    #[doc(hidden)]
    fn params(quota: &Quota) -> Result<Self::Params, QuotaError>;

    /// A fresh state (nothing admitted yet), or why it cannot be allocated.
    #[doc(hidden)]
    fn state(params: &Self::Params) -> Result<Self::State, QuotaError>;

    /// Decides one request of cost `n` at `now_ns` and commits its writes to `state`.
    #[doc(hidden)]
    fn acquire(state: &Self::State, params: &Self::Params, now_ns: u64, n: u64) -> Decision;

    /// What `acquire` would decide now, writing nothing: a read of `state` and the pure
    /// decision.
    #[doc(hidden)]
    fn peek(state: &Self::State, params: &Self::Params, now_ns: u64, n: u64) -> Decision;

    /// The length, in ns, a limiter's origin is aligned to (see `clock::Origin`): a window's
    /// or slot's length, so that windows stay aligned to the clock's zero; 1 by default.
    #[doc(hidden)]
    fn grain(params: &Self::Params) -> u64 {
        let _ = params;
        1
    }

    /// Gives back up to `n` units at `now_ns` (see `Limiter::refund`); returns the whole
    /// units given back. The default gives back nothing.
    #[doc(hidden)]
    fn refund(state: &Self::State, params: &Self::Params, now_ns: u64, n: u64) -> u64 {
        let _ = (state, params, now_ns, n);
        0
    }
}

/// An [`Algo`] whose parameters and state exist for every validated [`Quota`]: its
/// constructors that are not `try_*` cannot fail. The token bucket, the fixed window and the
/// sliding-window counter (not the sliding log, whose ring is allocated by its limit). Sealed,
/// as [`Algo`].
///
/// ```
/// use tollgate::{AlwaysFits, Limiter, Quota, RateLimiter, SlidingWindow};
///
/// /// A limiter of `quota` on the default clock, whichever of the three it is.
/// fn make<A: AlwaysFits>(quota: Quota) -> RateLimiter<A> {
///     RateLimiter::new(quota)
/// }
///
/// let l: SlidingWindow = make(Quota::per_second(10)?);
/// assert!(l.try_acquire_n(10).is_allowed());
/// assert!(!l.try_acquire().is_allowed());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait AlwaysFits: Algo {}

/// One limiter without a clock: a state and its parameters.
#[derive(Debug)]
pub(crate) struct Core<A: Algo> {
    pub(crate) state: A::State,
    pub(crate) params: A::Params,
}

impl<A: Algo> Core<A> {
    /// A fresh limiter under `params`.
    pub(crate) fn with_params(params: A::Params) -> Result<Self, QuotaError> {
        Ok(Core {
            state: A::state(&params)?,
            params,
        })
    }

    /// A fresh limiter for `quota`.
    pub(crate) fn try_new(quota: &Quota) -> Result<Self, QuotaError> {
        Self::with_params(A::params(quota)?)
    }

    /// One request of cost `n` at `now_ns`, committed.
    #[inline]
    pub(crate) fn acquire(&self, now_ns: u64, n: u64) -> Decision {
        A::acquire(&self.state, &self.params, now_ns, n)
    }
}

impl<A: AlwaysFits> Core<A> {
    /// A fresh limiter for `quota`, which every validated quota fits.
    pub(crate) fn new(quota: &Quota) -> Self {
        match Self::try_new(quota) {
            Ok(core) => core,
            Err(_) => unreachable!("a validated quota fits every `AlwaysFits` algorithm"),
        }
    }
}

/// The one compare-exchange loop. `propose` turns the word's value into an outcome and, when
/// the request must write, the new value; a lost race runs it again on the value that won.
/// Returns the outcome and the value it was proposed on (the one replaced, if it wrote).
///
/// The orderings are the caller's (`load` for the first load, `success` / `failure` for the
/// compare-exchange); each call site says why they suffice.
#[inline(always)]
pub fn update<T>(
    word: &AtomicU64,
    load: Ordering,
    success: Ordering,
    failure: Ordering,
    mut propose: impl FnMut(u64) -> (T, Option<u64>),
) -> (T, u64) {
    // The caller's ordering (see above).
    let mut current = word.load(load);
    loop {
        let (outcome, write) = propose(current);
        let Some(new) = write else {
            return (outcome, current);
        };
        // The caller's orderings (see above); weak: a spurious failure only loops once more.
        match word.compare_exchange_weak(current, new, success, failure) {
            Ok(_) => return (outcome, current),
            Err(actual) => current = actual,
        }
    }
}
