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

/// One rate-limiting algorithm, split into what a limiter shares and what it owns.
///
/// Implemented by the four algorithms' marker types only; the public limiters are
/// [`RateLimiter`](crate::RateLimiter)s over them.
pub trait Algo {
    /// Everything fixed by the quota: made once, read-only, shared by every state of a plan.
    type Params: Clone + Debug + Send + Sync;
    /// One limiter's atomics.
    type State: Debug + Send + Sync;

    /// The parameters for `quota`, or why this algorithm cannot represent it.
    fn params(quota: &Quota) -> Result<Self::Params, QuotaError>;

    /// A fresh state (nothing admitted yet), or why it cannot be allocated.
    fn state(params: &Self::Params) -> Result<Self::State, QuotaError>;

    /// Decides one request of cost `n` at `now_ns` and commits its writes to `state`.
    fn acquire(state: &Self::State, params: &Self::Params, now_ns: u64, n: u64) -> Decision;

    /// What `acquire` would decide now, writing nothing: a read of `state` and the pure
    /// decision.
    fn peek(state: &Self::State, params: &Self::Params, now_ns: u64, n: u64) -> Decision;

    /// The length, in ns, a limiter's origin is aligned to (see `clock::Origin`): a window's
    /// or slot's length, so that windows stay aligned to the clock's zero; 1 by default.
    fn grain(params: &Self::Params) -> u64 {
        let _ = params;
        1
    }

    /// Gives back up to `n` units at `now_ns` (see `Limiter::refund`); returns the whole
    /// units given back. The default gives back nothing.
    fn refund(state: &Self::State, params: &Self::Params, now_ns: u64, n: u64) -> u64 {
        let _ = (state, params, now_ns, n);
        0
    }
}

/// An [`Algo`] whose parameters and state exist for every validated [`Quota`]: its
/// constructors that are not `try_*` cannot fail.
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
