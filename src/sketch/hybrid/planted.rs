//! The hybrid's planted defect, for the loom model (`loom-tests/tests/sketch_hybrid.rs`);
//! built only for it (`cfg(tollgate_loom)`).
//!
//! [`RelaxedRecheck`] runs a copy of [`HybridSketchLimiter::try_acquire_n`] whose sketch admission
//! reads the slot again by a `Relaxed` load instead of the `Release` read-modify-write (the
//! line marked `// PLANTED`): it may then miss a promotion's claim while the promotion's read
//! of the sketch misses its write, and the key's new entry starts short of it. `loom-tests/tests/mutants_match.rs` fails if the
//! copy differs from the real code anywhere else. The product's types know nothing of it.

use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::ops::Deref;

use super::{Found, HybridSketchLimiter};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::sync::Ordering;

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
        let (cell, lanes) = self.sketch.at_hash(h);
        let t = self.now();
        let Some(slot) = self.slot(h) else {
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
