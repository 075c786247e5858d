//! The sliding log with one seqlock bug each: the optimistic denial returned without
//! re-checking `seq` (it may have decided on a torn ring), or the optimistic admission
//! recorded without taking the lock (two racing admissions decide on the same count).
//!
//! The two are one [`Mutant`], its const parameter choosing the defect: a copy of the real
//! `LogState::acquire`, as a trait method on the real state, carrying each defect's planted
//! lines under its `PLANT`; the helpers it calls (`read_and_decide`, `record_and_unlock`,
//! `acquire_locked`) are the real ones.

use tollgate::__loom::sliding_log::{Log, LogParams, LogState, LOCKED};
use tollgate::__loom::{fence, Algo, Ordering};
use tollgate::Decision;

use super::Plant;

/// The optimistic denial, returned without re-checking `seq`.
pub type UnvalidatedRead = Mutant<UNVALIDATED_READ>;

/// The optimistic admission, recorded without the lock.
pub type NoLock = Mutant<NO_LOCK>;

const UNVALIDATED_READ: Plant = 1;
const NO_LOCK: Plant = 2;

/// The sliding log with the planted defect `PLANT`: [`UnvalidatedRead`] or [`NoLock`].
#[derive(Debug)]
pub struct Mutant<const PLANT: Plant>;

/// The mutants' copy of `LogState::acquire`.
trait Planted {
    fn acquire<const PLANT: Plant>(&self, p: &LogParams, now_ns: u64, n: u64) -> Decision;
}

impl Planted for LogState {
    fn acquire<const PLANT: Plant>(&self, p: &LogParams, now_ns: u64, n: u64) -> Decision {
        // Optimistic: decide on a snapshot; a denial returns without writing anything.
        // Acquire: pairs with the unlocking Release store, so the entries it published are seen.
        let seq = self.seq.load(Ordering::Acquire);
        if seq & LOCKED == 0 {
            let (decision, write) = self.read_and_decide(p, seq >> 1, now_ns, n);
            match write {
                None => {
                    if PLANT == UNVALIDATED_READ {
                        return decision; // PLANTED: no fence, no second read of seq
                    } // PLANTED
                      // Acquire fence: the entry loads above happen before the re-check below.
                    fence(Ordering::Acquire);
                    // Relaxed: ordered by the fence; unchanged means no writer touched the
                    // entries while they were read.
                    if self.seq.load(Ordering::Relaxed) == seq {
                        return decision;
                    }
                }
                Some(time) => {
                    // Lock from exactly the seq the snapshot was read under: success means no
                    // admission came between (each one raises the count in seq), so the
                    // snapshot was consistent and the decision stands without re-deciding.
                    // Acquire: orders the writes below after the lock.
                    if PLANT == NO_LOCK {
                        // PLANTED: records (and stores seq) without taking the lock
                        self.record_and_unlock(p, seq >> 1, n, time);
                        return decision;
                    } // PLANTED
                    if self
                        .seq
                        .compare_exchange(seq, seq | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        self.record_and_unlock(p, seq >> 1, n, time);
                        return decision;
                    }
                }
            }
        }
        self.acquire_locked(p, now_ns, n)
    }
}

impl<const PLANT: Plant> tollgate::__loom::Sealed for Mutant<PLANT> {}

impl<const PLANT: Plant> Algo for Mutant<PLANT> {
    same_as!(Log);

    fn acquire(state: &LogState, p: &LogParams, now_ns: u64, n: u64) -> Decision {
        Planted::acquire::<PLANT>(state, p, now_ns, n)
    }
}
