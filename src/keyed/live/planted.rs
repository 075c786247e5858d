//! The live keyed token bucket's planted defects, for the loom models
//! (`loom-tests/tests/keyed_live.rs`); built only for them (`cfg(tollgate_loom)`).
//!
//! [`Plan`] runs a [`LivePlan`]'s change and count, and [`Slot`] a [`BucketSlot`]'s request,
//! as copies of the real ones in `live.rs`, with a const parameter choosing the defect and the
//! planted lines marked `// PLANTED`; `loom-tests/tests/mutants_match.rs` fails if a copy
//! differs from the real code anywhere else (the const parameter aside). The product's types
//! know nothing of it.

use core::ops::Deref;

use super::{evicted, packed, plan_words, BucketSlot, LivePlan};
use crate::algo::token_bucket::{admit_at, allowed, decide_at, refused, ticks, Gcra};
use crate::keyed::slot::Attempt;
use crate::keyed::word::EVICTED;
use crate::live::token_bucket::{carried, join, split};
use crate::live::{Retune, PARAM_WORDS};
use crate::quota::{GcraParams, Quota, QuotaError};
use crate::sync::{AtomicU128, Backoff, Ordering};

/// A planted protocol of a live keyed bucket.
pub(crate) type Plant = u8;
/// Planted defect: a request decides a word counted in the previous version without carrying
/// it (under whatever parameters it read).
pub(crate) const REQUESTER_SKIPS_CARRY: Plant = 21;
/// Planted defect: a change publishes without first carrying the plan's words.
pub(crate) const CHANGE_SKIPS_WALK: Plant = 22;
/// Planted defect: a bucket word keeps no version: requests write epoch 0 whatever they read.
pub(crate) const WORD_WITHOUT_EPOCH: Plant = 23;

/// A real plan run through the copied protocol.
pub(crate) struct Plan<'a, R: Retune> {
    pub(crate) plan: &'a LivePlan<R>,
}

impl<R: Retune> Deref for Plan<'_, R> {
    type Target = LivePlan<R>;

    fn deref(&self) -> &LivePlan<R> {
        self.plan
    }
}

impl<R: Retune> Plan<'_, R> {
    /// `LivePlan::change` with `PLANT`.
    pub(crate) fn change<const PLANT: Plant>(
        &self,
        quota: Quota,
        now_ns: impl FnOnce() -> u64,
        carry: impl FnOnce(),
    ) -> Result<(), QuotaError> {
        let mut current = self.lock();
        let old = self.params();
        let new = R::retune(&old, &current, &quota)?;
        if PLANT != CHANGE_SKIPS_WALK {
            carry(); // PLANTED: the walk may be skipped
        }
        // Read after the walk: the change takes effect when it is published.
        self.cell.write(plan_words(R::pack(&new), now_ns()));
        *current = quota;
        Ok(())
    }
}

impl Plan<'_, Gcra> {
    /// `LivePlan::counted` with `PLANT`.
    #[inline]
    fn counted<const PLANT: Plant>(
        &self,
        word: &AtomicU128,
        epoch: u64,
        tat: u64,
    ) -> Option<(u64, GcraParams, u64)> {
        let (version, words) = self.cell.read_versioned();
        let p = GcraParams::from_words(packed(words));
        if epoch == version || tat == 0 || PLANT == REQUESTER_SKIPS_CARRY {
            // PLANTED: a word of the previous version may be taken as it is
            return Some((version, p, tat));
        }
        if epoch + 1 == version {
            // The previous parameters stay whole until the next change, which first carries
            // this word; gone means it has been carried.
            let old = GcraParams::from_words(packed(self.cell.read_version(epoch)?));
            let since = ticks(&p, words[PARAM_WORDS]);
            return Some((version, p, carried(&old, &p, tat, since).unwrap_or(tat)));
        }
        if epoch > version {
            // Not reached (the word's Release, our Acquire): load it again.
            return None;
        }
        // Loaded before the walk of the change to `version - 1`, which carried it before that
        // change published (and so before this read of `version`): the word has changed.
        // Acquire: as a request's load; it sees the walk's write (the change's Release of
        // `version`, our Acquire), and a word never takes a value back.
        if word.load(Ordering::Acquire) != join(epoch, tat) {
            return None;
        }
        // Not reached (see the module's invariant). Were it: empty at the change, never a
        // token it might not have.
        debug_assert!(false, "a word counted in version {epoch} read at {version}");
        Some((version, p, ticks(&p, words[PARAM_WORDS]) + p.capacity))
    }
}

/// A real key's bucket run through the copied protocol.
pub(crate) struct Slot<'a> {
    pub(crate) slot: &'a BucketSlot,
}

impl Deref for Slot<'_> {
    type Target = BucketSlot;

    fn deref(&self) -> &BucketSlot {
        self.slot
    }
}

impl Slot<'_> {
    /// `KeySlot::acquire` for the live bucket with `PLANT`.
    #[inline]
    pub(crate) fn acquire<const PLANT: Plant>(&self, now_ns: u64, n: u64) -> Attempt {
        // Acquire: the cell read after it holds the word's version or a later one.
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            let (epoch, tat) = split(word);
            if tat == EVICTED {
                return evicted();
            }
            let plan = Plan { plan: &self.plan }; // PLANTED: the copied count
            let Some((version, p, tat)) = plan.counted::<PLANT>(&self.word, epoch, tat) else {
                Backoff::new().snooze();
                // Acquire: as the first load.
                word = self.word.load(Ordering::Acquire);
                continue;
            };
            let now = ticks(&p, now_ns);
            let Some(new_tat) = admit_at(&p, tat, now, n) else {
                // A denial or a zero cost: decided on the carried word, nothing written.
                return Attempt::Decided(if n == 0 {
                    decide_at(&p, tat, now, 0).0
                } else {
                    refused(&p, tat, now, n)
                });
            };
            // PLANTED: the word may keep no version
            let version = if PLANT == WORD_WITHOUT_EPOCH {
                0
            } else {
                version
            };
            // Release: a request that loads this word reads parameters of `version` or later.
            // Acquire failure: as the first load. Weak: a spurious failure loops once more.
            match self.word.compare_exchange_weak(
                word,
                join(version, new_tat),
                Ordering::Release,
                Ordering::Acquire,
            ) {
                Ok(_) => return Attempt::Decided(allowed(&p, now, new_tat)),
                Err(current) => word = current,
            }
        }
    }
}
