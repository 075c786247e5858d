//! The parameter cell's and the live limiter's planted defects, for the loom models
//! (`loom-tests/tests/live.rs`); built only for them (`cfg(tollgate_loom)`).
//!
//! [`Cell`] runs a [`ParamCell`]'s read and write, and [`Bucket`] a live token bucket's
//! change and request, as copies of the real ones in `mod.rs`, with a const parameter
//! choosing the defect and the planted lines marked `// PLANTED` (the token bucket's own part
//! is copied in `token_bucket/planted.rs`); `loom-tests/tests/mutants_match.rs` fails if
//! a copy differs from the real code anywhere else (the const parameter aside). The product's
//! types know nothing of it.

use core::ops::Deref;

use super::token_bucket::planted as token_bucket;
use super::{Live, ParamCell, Retune};
use crate::algo::token_bucket::Gcra;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::sync::{fence, Backoff, Ordering};

/// A planted protocol of the cell or the live bucket.
pub(crate) type Plant = u8;
/// Planted defect: the reader keeps its words without the second `seq` load.
pub(crate) const READER_SKIPS_RECHECK: Plant = 1;
/// Planted defect: the writer stores the words with no fence after the odd `seq`.
pub(crate) const WRITER_SKIPS_FENCE: Plant = 2;
pub(crate) use token_bucket::{CARRIED_FROM_READING, ONE_BIT_VERSION, READER_IGNORES_VERSION};

/// A real cell run through the copied protocol.
pub(crate) struct Cell<'a, const N: usize> {
    pub(crate) cell: &'a ParamCell<N>,
}

impl<const N: usize> Deref for Cell<'_, N> {
    type Target = ParamCell<N>;

    fn deref(&self) -> &ParamCell<N> {
        self.cell
    }
}

impl<const N: usize> Cell<'_, N> {
    /// [`ParamCell::read_versioned`] with `PLANT`.
    #[inline]
    pub(crate) fn read_versioned<const PLANT: Plant>(&self) -> (u64, [u64; N]) {
        let backoff = Backoff::new();
        loop {
            // Acquire: pairs with the writer's `version` store, after which the slot's words
            // and even `seq` are visible.
            let version = self.version.load(Ordering::Acquire);
            if let Some(read) = self.read_slot::<PLANT>((version & 1) as usize) {
                return read;
            }
            // Two quotas were published while this read ran: read the newer one.
            backoff.snooze();
        }
    }

    /// `ParamCell::read_slot` with `PLANT`.
    #[inline]
    fn read_slot<const PLANT: Plant>(&self, i: usize) -> Option<(u64, [u64; N])> {
        let slot = &self.slots[i];
        // Acquire: a later writer's odd `seq` is seen before that writer's words.
        let seq = slot.seq.load(Ordering::Acquire);
        if seq & 1 == 1 {
            return None;
        }
        // Relaxed: validated by the `seq` reload below.
        let words = core::array::from_fn(|w| slot.words[w].load(Ordering::Relaxed));
        let version = (seq + i as u64).wrapping_sub(2);
        if PLANT == READER_SKIPS_RECHECK {
            return Some((version, words)); // PLANTED: no second `seq` load
        }
        // Acquire fence: pairs with the writer's Release fence, so a word from a later writer
        // makes the reload see its odd `seq`.
        fence(Ordering::Acquire);
        // Relaxed: ordered after the word loads by the fence.
        (slot.seq.load(Ordering::Relaxed) == seq).then_some((version, words))
    }

    /// [`ParamCell::write`] with `PLANT`.
    pub(crate) fn write<const PLANT: Plant>(&self, words: [u64; N]) -> u64 {
        // Relaxed: only writers store `version`, and they hold the writer lock.
        let version = self.version.load(Ordering::Relaxed);
        let slot = &self.slots[((version + 1) & 1) as usize];
        // Relaxed: only writers store `seq`, under the lock.
        let seq = slot.seq.load(Ordering::Relaxed);
        // Relaxed: the Release fence below orders it before the words.
        slot.seq.store(seq + 1, Ordering::Relaxed);
        if PLANT != WRITER_SKIPS_FENCE {
            // PLANTED: the fence may be skipped
            // Release fence: pairs with the reader's Acquire fence (see the module's orderings).
            fence(Ordering::Release); // PLANTED
        }
        for (word, value) in slot.words.iter().zip(words) {
            // Relaxed: a reader validates them with `seq`.
            word.store(value, Ordering::Relaxed);
        }
        // Release: a reader that sees the even `seq` sees these words.
        slot.seq.store(seq + 2, Ordering::Release);
        // Release: a reader that sees the new version sees the filled slot.
        self.version.store(version + 1, Ordering::Release);
        version + 1
    }
}

/// The algorithm the copies run: the live token bucket's.
type A = Gcra;

/// A real live token bucket run through the copied protocol.
pub(crate) struct Bucket<'a, C> {
    pub(crate) live: &'a Live<Gcra, C>,
}

impl<C> Deref for Bucket<'_, C> {
    type Target = Live<Gcra, C>;

    fn deref(&self) -> &Live<Gcra, C> {
        self.live
    }
}

impl<C: Clock> Bucket<'_, C> {
    /// [`Live::set_quota`] with `PLANT`.
    pub(crate) fn set_quota<const PLANT: Plant>(&self, quota: Quota) -> Result<(), QuotaError> {
        let mut current = self.lock();
        let old = A::unpack(self.params.read());
        let new = A::retune(&old, &current, &quota)?;
        token_bucket::publish::<PLANT>(
            // PLANTED: the copied publish
            &self.state,
            &self.params,
            &old,
            &new,
            self.origin.now(&self.clock),
        );
        *current = quota;
        Ok(())
    }

    /// [`Limiter::try_acquire_n`](crate::Limiter::try_acquire_n) with `PLANT`.
    #[inline]
    pub(crate) fn try_acquire_n<const PLANT: Plant>(&self, n: u64) -> Decision {
        // PLANTED: the copied acquire
        token_bucket::acquire_live::<PLANT>(
            &self.state,
            &self.params,
            self.origin.now(&self.clock),
            n,
        )
    }
}
