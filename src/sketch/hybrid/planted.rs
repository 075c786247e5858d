//! The hybrid's planted defects, for the loom models (`loom-tests/tests/sketch_hybrid.rs`);
//! built only for them (`cfg(tollgate_loom)`).
//!
//! [`RelaxedRecheck`] runs a copy of [`HybridSketchLimiter::try_acquire_n`] whose sketch admission
//! reads the slot again by a `Relaxed` load instead of the `Release` read-modify-write (the
//! line marked `// PLANTED`): it may then miss a promotion's claim while the promotion's read
//! of the sketch misses its write, and the key's new entry starts short of it.
//! [`IgnoresLaterEntry`] runs a copy of the real `try_acquire_n`, word for word, calling a
//! copy of `recheck` without its denial on another key's entry of a later window: a request
//! whose reading predates the loss of its key's entry of that window is admitted by the
//! sketch, which never counted what the entry held. `loom-tests/tests/mutants_match.rs` fails
//! if a copy differs from the real code anywhere else. The product's types know nothing of
//! them.

use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::ops::Deref;

use super::{Entry, Found, HybridSketchLimiter};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::keyed::remix;
use crate::sync::{AtomicU128, Ordering};

/// A hybrid whose sketch admissions read the slot again with no ordering.
pub(crate) struct RelaxedRecheck<'a, K: ?Sized, C, S>(pub(crate) &'a HybridSketchLimiter<K, C, S>);

impl<K: ?Sized, C, S> Deref for RelaxedRecheck<'_, K, C, S> {
    type Target = HybridSketchLimiter<K, C, S>;

    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl<K, C, S> RelaxedRecheck<'_, K, C, S>
where
    K: ?Sized,
    C: Clock,
    S: BuildHasher,
{
    /// The real `try_acquire_n`, with the planted line.
    pub(crate) fn try_acquire_n<Q>(&self, key: &Q, n: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let h = self.sketch.hasher.hash_one(key);
        let mixed = remix(h);
        let (cell, lanes) = self.sketch.at_mixed(mixed);
        let t = self.now();
        let Some(slot) = self.slot(mixed) else {
            return cell.acquire(&self.sketch.params, t, n, lanes);
        };
        let w = t / self.len();
        let mut found = self.find(slot, h);
        while let Found::Active(e, word) = found {
            if e.window >= w {
                match self.exact(slot, e, word, t, n) {
                    Ok(d) => return d,
                    Err(()) => found = self.find(slot, h),
                }
            } else {
                // An entry of an older window: the key's units in `w` so far are in the
                // sketch only. Claim it pending for `w` and charge it with the estimate.
                self.claim(slot, word, h, w, t, (cell, lanes));
                found = self.find(slot, h);
            }
        }
        let pending = matches!(found, Found::Pending(_));
        let d = cell.acquire(&self.sketch.params, t, n, lanes);
        let d = if d.is_allowed() && n > 0 {
            // Release, and a read-modify-write: it reads the slot's latest word, and a claim
            // after it (Acquire) sees the sketch's write above (see the module's promotion race).
            let word = slot.load(Ordering::Relaxed); // PLANTED: a plain load, not the read-modify-write
            self.recheck(slot, word, h, w, t, n, d)
        } else {
            d
        };
        if !pending && self.limit() - d.remaining().min(self.limit()) >= self.promote_at {
            self.promote(slot, h, w, t, cell, lanes);
        }
        d
    }
}

/// A hybrid whose sketch admissions stand whatever entry of a later window their slot holds.
pub(crate) struct IgnoresLaterEntry<'a, K: ?Sized, C, S>(
    pub(crate) &'a HybridSketchLimiter<K, C, S>,
);

impl<K: ?Sized, C, S> Deref for IgnoresLaterEntry<'_, K, C, S> {
    type Target = HybridSketchLimiter<K, C, S>;

    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl<K, C, S> IgnoresLaterEntry<'_, K, C, S>
where
    K: ?Sized,
    C: Clock,
    S: BuildHasher,
{
    /// The real `try_acquire_n`, calling the copied `recheck`.
    pub(crate) fn try_acquire_n<Q>(&self, key: &Q, n: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let h = self.sketch.hasher.hash_one(key);
        let mixed = remix(h);
        let (cell, lanes) = self.sketch.at_mixed(mixed);
        let t = self.now();
        let Some(slot) = self.slot(mixed) else {
            return cell.acquire(&self.sketch.params, t, n, lanes);
        };
        let w = t / self.len();
        let mut found = self.find(slot, h);
        while let Found::Active(e, word) = found {
            if e.window >= w {
                match self.exact(slot, e, word, t, n) {
                    Ok(d) => return d,
                    Err(()) => found = self.find(slot, h),
                }
            } else {
                // An entry of an older window: the key's units in `w` so far are in the
                // sketch only. Claim it pending for `w` and charge it with the estimate.
                self.claim(slot, word, h, w, t, (cell, lanes));
                found = self.find(slot, h);
            }
        }
        let pending = matches!(found, Found::Pending(_));
        let d = cell.acquire(&self.sketch.params, t, n, lanes);
        let d = if d.is_allowed() && n > 0 {
            // Release, and a read-modify-write: it reads the slot's latest word, and a claim
            // after it (Acquire) sees the sketch's write above (see the module's promotion race).
            let word = slot.fetch_or(0, Ordering::Release);
            self.recheck(slot, word, h, w, t, n, d)
        } else {
            d
        };
        if !pending && self.limit() - d.remaining().min(self.limit()) >= self.promote_at {
            self.promote(slot, h, w, t, cell, lanes);
        }
        d
    }

    /// The real `recheck`, with the planted line.
    #[allow(clippy::too_many_arguments)]
    fn recheck(
        &self,
        slot: &AtomicU128,
        mut word: u128,
        h: u64,
        w: u64,
        t: u64,
        n: u64,
        admitted: Decision,
    ) -> Decision {
        loop {
            let e = match self.layout.unpack(word) {
                Some(e) if e.tag == h && e.window >= w => e,
                // PLANTED: no denial on another key's entry of a later window
                _ => return admitted,
            };
            let d = self.judge(e.count, e.window, t, n);
            if !d.is_allowed() {
                return d;
            }
            let new = self.layout.pack(Entry {
                count: e.count + n,
                ..e
            });
            // Relaxed: the slot's own word; a failure rereads.
            match slot.compare_exchange(word, new, Ordering::Relaxed, Ordering::Relaxed) {
                // The tighter of the two answers: the sketch's and the entry's.
                Ok(_) if d.remaining() < admitted.remaining() => return d,
                Ok(_) => return admitted,
                Err(actual) => word = actual,
            }
        }
    }
}
