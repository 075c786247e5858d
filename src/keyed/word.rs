//! A key's limiter whose whole state is one word (token bucket, fixed window), with the
//! eviction mark folded into that word: an admission's own compare-exchange both commits it
//! and proves the limiter is still the key's.
//!
//! # State word
//!
//! | value                  | meaning                                                       |
//! |------------------------|---------------------------------------------------------------|
//! | `0 ..= u64::MAX - 1`   | the algorithm's word: the bucket's `tat`, the window's        |
//! |                        | `window << count_bits \| count` (see `algo/`)                  |
//! | `u64::MAX` (`EVICTED`) | final: an evictor found the limiter fresh and took it          |
//!
//! Neither algorithm ever writes `u64::MAX`: an admitted `tat` is below `2^63 + 2^62`, and a
//! window number is below `2^(64 - count_bits) - 1`. The parameters are the plan's, shared by
//! every key made from the same quota (an `Arc`), so a slot is 16 bytes.
//!
//! # Invariant
//!
//! Every write is a compare-exchange. An admission strictly increases the word (a `tat` only
//! grows, a window's count only grows, a later window is larger); `EVICTED` is installed only
//! on a word that is fresh at the evictor's now, and never left. So no value comes back (no
//! ABA), and each admission is either in a word an evictor judged fresh (already expired at
//! its now) or fails against `EVICTED` and is redone on the key's new limiter: at one instant,
//! every admission is counted exactly once, on the limiter that stays in the map.
//!
//! # Orderings
//!
//! The word is the whole state: requests load and compare-exchange it `Relaxed`. The
//! admission and the eviction are compare-exchanges on the same word, so its modification
//! order alone decides which came first; a stale load only makes a compare-exchange fail.
//! The mark is installed `Release`, and a requester that reads it issues an `Acquire` fence
//! before it reads the clock again for its redo: the redo's now is no earlier than the now at
//! which the evictor found the limiter fresh (the sweep judges at its reading less the clock's
//! `max_skew_nanos`, the most a reading on the redoing thread may lag it), so a request with a
//! stale reading cannot spend a fresh limiter's burst at an instant when the evicted one had
//! none.

use core::marker::PhantomData;
use core::time::Duration;

use crate::algo::fixed_window::{self, Fixed};
use crate::algo::token_bucket::{self, Gcra};
use crate::algo::{Algo, Step};
use crate::decision::Decision;
use crate::quota::{GcraParams, WindowParams};
use crate::sync::{fence, Arc, AtomicU64, Ordering};

use super::slot::Attempt;

#[cfg(tollgate_loom)]
pub(crate) mod planted;

/// The final value of an evicted slot's word.
pub(crate) const EVICTED: u64 = u64::MAX;

/// An algorithm whose whole state is one word: its pure decision on that word. Its
/// parameters are the [`Algo`]'s, made once per plan.
pub(crate) trait WordRule: Algo<State = AtomicU64> + 'static
where
    Self::Params: 'static,
{
    /// The pure decision: word, now, cost → decision and the new word if it must be written.
    fn decide(p: &Self::Params, word: u64, now_ns: u64, n: u64) -> Step;

    /// The new word alone, when `decide` would write one (the compare-exchange loop's step).
    #[inline]
    fn admit(p: &Self::Params, word: u64, now_ns: u64, n: u64) -> Option<u64> {
        Self::decide(p, word, now_ns, n).1
    }

    /// The decision of an admission that replaced `word` with `new_word`, the one `admit`
    /// gave: what `decide` says on `word`.
    #[inline]
    fn admitted(p: &Self::Params, word: u64, _new_word: u64, now_ns: u64, n: u64) -> Decision {
        Self::decide(p, word, now_ns, n).0
    }
}

/// The token bucket (GCRA): the word is `tat`.
impl WordRule for Gcra {
    #[inline]
    fn decide(p: &GcraParams, tat: u64, now_ns: u64, n: u64) -> Step {
        token_bucket::decide(p, tat, now_ns, n)
    }

    #[inline]
    fn admit(p: &GcraParams, tat: u64, now_ns: u64, n: u64) -> Option<u64> {
        token_bucket::admit(p, tat, now_ns, n)
    }

    /// Read off the new `tat` alone, as the bucket's own loop does.
    #[inline]
    fn admitted(p: &GcraParams, tat: u64, new_tat: u64, now_ns: u64, n: u64) -> Decision {
        let d = token_bucket::allowed(p, token_bucket::ticks(p, now_ns), new_tat);
        debug_assert_eq!(d, token_bucket::decide(p, tat, now_ns, n).0);
        d
    }
}

/// The fixed window: the word is `window << count_bits | count`.
impl WordRule for Fixed {
    #[inline]
    fn decide(p: &WindowParams, word: u64, now_ns: u64, n: u64) -> Step {
        fixed_window::decide(p, word, now_ns, n)
    }

    #[inline]
    fn admit(p: &WindowParams, word: u64, now_ns: u64, n: u64) -> Option<u64> {
        let new_word = fixed_window::admit(p, word, now_ns, n);
        debug_assert_eq!(new_word, fixed_window::decide(p, word, now_ns, n).1);
        new_word
    }
}

/// Where a one-word limiter reads its parameters: its plan's fixed ones, shared by the keys of
/// one quota (`Arc<R::Params>`), or a live plan's parameter cell (see `live/mod.rs`).
pub(crate) trait PlanRef<R: WordRule>: Send + Sync + 'static {
    /// The parameters one request decides under: a reference to the fixed ones, or a copy
    /// read from the cell.
    type Params<'a>: core::ops::Deref<Target = R::Params>
    where
        Self: 'a;

    /// The parameters for one request.
    fn params(&self) -> Self::Params<'_>;
}

impl<R: WordRule> PlanRef<R> for Arc<R::Params>
where
    R::Params: Send + Sync,
{
    type Params<'a> = &'a R::Params;

    #[inline(always)]
    fn params(&self) -> &R::Params {
        self
    }
}

/// One key's one-word limiter: the word and its plan (16 bytes).
#[derive(Debug)]
pub(crate) struct WordSlot<R: WordRule, P = Arc<<R as Algo>::Params>> {
    word: AtomicU64,
    plan: P,
    rule: PhantomData<fn() -> R>,
}

/// Whether `word` is as good as a new limiter at `now_ns`: a zero-cost request (pure, it
/// writes nothing) reports, in `reset_after`, the time until full capacity.
#[inline]
pub(crate) fn is_fresh<R: WordRule>(p: &R::Params, word: u64, now_ns: u64) -> bool {
    R::decide(p, word, now_ns, 0).0.reset_after() == Duration::ZERO
}

impl<R: WordRule, P: PlanRef<R>> WordSlot<R, P> {
    /// A fresh limiter on `plan`.
    pub(crate) fn new(plan: P) -> Self {
        WordSlot {
            word: AtomicU64::new(0),
            plan,
            rule: PhantomData,
        }
    }

    /// The decision a fresh limiter on this plan would give, writing nothing.
    pub(crate) fn decide_fresh(&self, now_ns: u64, n: u64) -> Decision {
        R::decide(&self.plan.params(), 0, now_ns, n).0
    }

    /// A request of cost `n` at `now_ns`: one load, and for an admission one compare-exchange.
    #[inline]
    pub(crate) fn acquire(&self, now_ns: u64, n: u64) -> Attempt {
        let params = self.plan.params();
        let p = &*params;
        // Relaxed: see the module's orderings.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            if word == EVICTED {
                // Acquire (with the evictor's Release mark): the redo's clock reading is at
                // least the one the evictor judged the limiter fresh at.
                fence(Ordering::Acquire);
                return Attempt::Evicted;
            }
            let Some(new_word) = R::admit(p, word, now_ns, n) else {
                // A denial or a zero cost: decided on `word`, nothing written.
                return Attempt::Decided(R::decide(p, word, now_ns, n).0);
            };
            // Relaxed: the compare-exchange orders this admission against every other write
            // to the word, the evictor's mark included; nothing else is published.
            match self.word.compare_exchange_weak(
                word,
                new_word,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Attempt::Decided(R::admitted(p, word, new_word, now_ns, n)),
                Err(current) => word = current,
            }
        }
    }

    /// The evictor: marks the slot `EVICTED` if it is fresh at `now_ns`; true if it did (the
    /// entry must then be removed from the map).
    #[inline]
    pub(crate) fn try_evict(&self, now_ns: u64) -> bool {
        // Relaxed: the compare-exchange below decides; a stale load only makes it fail.
        let word = self.word.load(Ordering::Relaxed);
        if word == EVICTED || !is_fresh::<R>(&self.plan.params(), word, now_ns) {
            return false;
        }
        // Release: a requester that reads the mark and acquires it reads the clock again no
        // earlier than `now_ns`. Fails if anything (an admission) wrote since the check.
        self.word
            .compare_exchange(word, EVICTED, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::quota::Quota;

    fn bucket(limit: u64) -> WordSlot<Gcra> {
        let quota = Quota::per_second(limit).unwrap();
        WordSlot::new(Arc::new(<Gcra as Algo>::params(&quota).unwrap()))
    }

    #[test]
    fn a_word_slot_is_16_bytes() {
        assert_eq!(core::mem::size_of::<WordSlot<Gcra>>(), 16);
        assert_eq!(core::mem::size_of::<WordSlot<Fixed>>(), 16);
    }

    #[test]
    fn an_evicted_word_sends_every_request_back_to_the_map() {
        let slot = bucket(2);
        assert!(slot.try_evict(0), "a new limiter is fresh");
        assert_eq!(slot.word.load(Ordering::Relaxed), EVICTED);
        assert_eq!(slot.acquire(0, 1), Attempt::Evicted);
        assert_eq!(slot.acquire(0, 0), Attempt::Evicted);
        assert!(!slot.try_evict(0), "marked once");
    }

    #[test]
    fn a_used_word_is_kept_until_it_is_full_again() {
        let slot = bucket(2);
        assert!(matches!(slot.acquire(0, 1), Attempt::Decided(d) if d.is_allowed()));
        assert!(!slot.try_evict(499_999_999));
        assert!(slot.try_evict(500_000_000));
    }

    #[test]
    fn a_request_on_an_evicted_word_is_redone_through_the_map() {
        let slot = bucket(1);
        assert!(slot.try_evict(0));
        assert_eq!(slot.acquire(0, 1), Attempt::Evicted);
    }
}
