//! The sliding log with one seqlock bug each: the optimistic denial returned without
//! re-checking `seq` (it may have decided on a torn ring), or the optimistic admission
//! recorded without taking the lock (two racing admissions decide on the same count).
//!
//! Each is a copy of the real `LogState::acquire`, as a trait method on the real state; the
//! helpers it calls (`read_and_decide`, `record_and_unlock`, `acquire_locked`) are the real ones.

use tollgate::__loom::sliding_log::{Log, LogParams, LogState, LOCKED};
use tollgate::__loom::{fence, Algo, Ordering};
use tollgate::Decision;

/// The optimistic denial, returned without re-checking `seq`.
#[derive(Debug)]
pub struct UnvalidatedRead;

/// The optimistic admission, recorded without the lock.
#[derive(Debug)]
pub struct NoLock;

/// [`UnvalidatedRead`]'s copy of `LogState::acquire`.
trait Unvalidated {
    fn acquire(&self, p: &LogParams, now_ns: u64, n: u64) -> Decision;
}

/// [`NoLock`]'s copy of `LogState::acquire`.
trait Unlocked {
    fn acquire(&self, p: &LogParams, now_ns: u64, n: u64) -> Decision;
}

impl Unvalidated for LogState {
    fn acquire(&self, p: &LogParams, now_ns: u64, n: u64) -> Decision {
        // Optimistic: decide on a snapshot; a denial returns without writing anything.
        // Acquire: pairs with the unlocking Release store, so the entries it published are seen.
        let seq = self.seq.load(Ordering::Acquire);
        if seq & LOCKED == 0 {
            let (decision, write) = self.read_and_decide(p, seq >> 1, now_ns, n);
            match write {
                None => {
                    return decision; // PLANTED: no fence, no second read of seq
                }
                Some(time) => {
                    // Lock from exactly the seq the snapshot was read under: success means no
                    // admission came between (each one raises the count in seq), so the
                    // snapshot was consistent and the decision stands without re-deciding.
                    // Acquire: orders the writes below after the lock.
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

impl Unlocked for LogState {
    fn acquire(&self, p: &LogParams, now_ns: u64, n: u64) -> Decision {
        // Optimistic: decide on a snapshot; a denial returns without writing anything.
        // Acquire: pairs with the unlocking Release store, so the entries it published are seen.
        let seq = self.seq.load(Ordering::Acquire);
        if seq & LOCKED == 0 {
            let (decision, write) = self.read_and_decide(p, seq >> 1, now_ns, n);
            match write {
                None => {
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
                    {
                        // PLANTED: records (and stores seq) without taking the lock
                        self.record_and_unlock(p, seq >> 1, n, time);
                        return decision;
                    }
                }
            }
        }
        self.acquire_locked(p, now_ns, n)
    }
}

impl tollgate::__loom::Sealed for UnvalidatedRead {}

impl Algo for UnvalidatedRead {
    same_as!(Log);

    fn acquire(state: &LogState, p: &LogParams, now_ns: u64, n: u64) -> Decision {
        Unvalidated::acquire(state, p, now_ns, n)
    }
}

impl tollgate::__loom::Sealed for NoLock {}

impl Algo for NoLock {
    same_as!(Log);

    fn acquire(state: &LogState, p: &LogParams, now_ns: u64, n: u64) -> Decision {
        Unlocked::acquire(state, p, now_ns, n)
    }
}
