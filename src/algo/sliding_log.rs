//! Sliding log: exact. An admission at `s` counts while `now - s < period`.
//!
//! | word         | bits   | field    | meaning                                         |
//! |--------------|--------|----------|-------------------------------------------------|
//! | `seq`        | 1..=63 | `count`  | admissions ever made (`c`)                      |
//! |              | 0      | `locked` | a writer is recording admissions                |
//! | `entries[i]` | 0..=63 | `time`   | ns of admission `j` where `j % limit == i`      |
//!
//! **Invariant.** The entries are a ring of the last `limit` admission times (8 bytes each,
//! allocated once), non-decreasing along `j`; only the holder of the `locked` bit writes them
//! or the count. So the oldest entry still in the ring decides: `n` more may pass when
//! admission `c + n - limit - 1` (the newest that `n` new entries would overwrite) has left
//! the window.
//!
//! **Orderings.** Lock: CAS `seq` even → odd with `Acquire`, then a `Release` fence before the
//! entry writes, so a reader that sees an entry written under the lock also sees `seq` odd.
//! Unlock: store of the new even `seq` with `Release`, publishing the entries. Optimistic read:
//! `seq` `Acquire`; entries `Relaxed`; an `Acquire` fence; `seq` again `Relaxed`: equal and even
//! means the entries read were one consistent state. Optimistic admission: the lock CAS expects
//! exactly the `seq` the snapshot was read under; its success proves no admission came between
//! (each raises the count in `seq`), so the snapshot's decision stands and is recorded as is.
//!
//! # Not lock-free: a per-limiter sequence lock
//!
//! Admitting writes `n` entries and the count: several words, so admissions serialize on the
//! `locked` bit of `seq` (a spin lock with backoff, per limiter, never global). Denials do not
//! take it: they read `seq`, the entries they need, and `seq` again (a seqlock read), and
//! return if nothing changed, so a flood of denials writes nothing. A thread preempted while
//! holding the lock delays that one limiter's admissions; the lock-free algorithms have no
//! such pause. This is the price of exactness with `O(limit)` state; the sliding-window
//! counter gives the same "never more than `limit` per `period`" bound lock-free, at the cost
//! of keeping an admission up to `period / K` longer.
//!
//! # Time going backwards
//!
//! The limiter's now is `max(now, newest entry)`: entries are recorded in order and nothing
//! expires early; admissions count from the later of the two times.

use super::{Algo, Core, Step};
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError, HORIZON};
use crate::sync::{fence, AtomicU64, Backoff, Ordering};

#[cfg(not(feature = "std"))]
use alloc::boxed::Box;
#[cfg(not(feature = "std"))]
use alloc::vec::Vec;

/// The `locked` bit of `seq`.
pub const LOCKED: u64 = 1;

/// The log's quota, in ns.
#[derive(Clone, Copy, Debug)]
pub struct LogParams {
    pub(crate) limit: u64,
    pub(crate) period: u64,
}

/// The pure decision over `count` admissions whose times `time(j)` returns (for `j` in
/// the last `limit`). Returns the time to record `n` entries at, if admitted with `n > 0`.
#[inline]
pub(crate) fn decide(
    p: &LogParams,
    count: u64,
    time: impl Fn(u64) -> u64,
    now_ns: u64,
    n: u64,
) -> Step {
    let oldest = count.saturating_sub(p.limit);
    let newest = if count > 0 { time(count - 1) } else { 0 };
    // Clamped once, for the window and the durations alike: past the horizon time stands
    // still, so a live entry never reads as expired (and a swept key as fresh).
    let now_ns = now_ns.min(HORIZON);
    let now = now_ns.max(newest);
    // Entries are sorted: binary search for the first still in the window. (Saturating:
    // an optimistic read may see a torn, unsorted ring; the seqlock discards it.)
    let (mut lo, mut hi) = (oldest, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if now.saturating_sub(time(mid)) < p.period {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let live = count - lo;
    let remaining = p.limit - live;
    // Full capacity returns when the newest live entry leaves the window.
    let reset = if live > 0 {
        (newest + p.period).saturating_sub(now_ns)
    } else {
        0
    };
    if n > p.limit {
        return (Decision::exceeds(remaining, reset), None);
    }
    if live + n <= p.limit {
        if n == 0 {
            return (Decision::allowed(remaining, reset), None);
        }
        let reset = (now + p.period).saturating_sub(now_ns);
        return (Decision::allowed(remaining - n, reset), Some(now));
    }
    // The newest entry that n new ones would overwrite must leave the window first.
    let pass_at = time(count + n - p.limit - 1) + p.period;
    (Decision::denied(remaining, now_ns, pass_at, reset), None)
}

/// One sliding log's atomics: the sequence word and the ring of admission times.
#[derive(Debug)]
pub struct LogState {
    /// `count << 1 | locked`.
    pub seq: AtomicU64,
    /// The ring of the last `limit` admission times.
    pub entries: Box<[AtomicU64]>,
}

impl LogState {
    /// The ring index of admission `j`, one of the last `limit` before `count`, given
    /// `count_mod = count % limit`: no division per lookup.
    #[inline]
    fn index(p: &LogParams, count: u64, count_mod: u64, j: u64) -> usize {
        let back = count - j; // 1..=limit
        (if back <= count_mod {
            count_mod - back
        } else {
            count_mod + p.limit - back
        }) as usize
    }

    /// Reads the ring as it stands with `count` admissions and decides on it.
    #[inline]
    pub fn read_and_decide(&self, p: &LogParams, count: u64, now_ns: u64, n: u64) -> Step {
        let count_mod = count % p.limit;
        // Relaxed: validated by the seqlock (readers) or owned under the lock (writers).
        let time = |j| self.entries[Self::index(p, count, count_mod, j)].load(Ordering::Relaxed);
        decide(p, count, time, now_ns, n)
    }

    /// Records `n` admissions at `time` after `count` and unlocks: the caller holds the lock.
    #[inline]
    pub fn record_and_unlock(&self, p: &LogParams, count: u64, n: u64, time: u64) {
        // Release fence: a reader that sees any entry written below also sees seq odd.
        fence(Ordering::Release);
        let limit = p.limit;
        let mut i = count % limit;
        for _ in 0..n {
            // Relaxed: published by the Release unlock below.
            self.entries[i as usize].store(time, Ordering::Relaxed);
            i = if i + 1 == limit { 0 } else { i + 1 };
        }
        // Release: unlocks and publishes the entries.
        self.seq.store((count + n) << 1, Ordering::Release);
    }

    /// One request: decided on an optimistic snapshot, or under the lock if that fails.
    #[inline]
    pub fn acquire(&self, p: &LogParams, now_ns: u64, n: u64) -> Decision {
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

    /// The decision on a consistent snapshot, writing nothing: the optimistic read of
    /// `acquire`, retried while an admission holds the lock or lands during the read.
    fn peek(&self, p: &LogParams, now_ns: u64, n: u64) -> Decision {
        let backoff = Backoff::new();
        loop {
            // Acquire: pairs with the unlocking Release store, so its entries are seen.
            let seq = self.seq.load(Ordering::Acquire);
            if seq & LOCKED == 0 {
                let (decision, _) = self.read_and_decide(p, seq >> 1, now_ns, n);
                // Acquire fence: the entry loads above happen before the re-check below.
                fence(Ordering::Acquire);
                // Relaxed: ordered by the fence; unchanged means the snapshot was consistent.
                if self.seq.load(Ordering::Relaxed) == seq {
                    return decision;
                }
            }
            backoff.snooze();
        }
    }

    /// Takes the lock, then decides and records: the path when the optimistic one fails.
    #[cold]
    pub fn acquire_locked(&self, p: &LogParams, now_ns: u64, n: u64) -> Decision {
        let backoff = Backoff::new();
        let seq = loop {
            // Relaxed: only a hint; the CAS below is the lock's acquire.
            let seq = self.seq.load(Ordering::Relaxed);
            if seq & LOCKED == 0 {
                // Acquire: the previous holder's entries (published by its Release) are seen.
                if self
                    .seq
                    .compare_exchange_weak(seq, seq | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    break seq;
                }
            }
            backoff.snooze();
        };
        let count = seq >> 1;
        let (decision, write) = self.read_and_decide(p, count, now_ns, n);
        match write {
            Some(time) => self.record_and_unlock(p, count, n, time),
            // Release: unlocks; nothing was written.
            None => self.seq.store(seq, Ordering::Release),
        }
        decision
    }
}

/// The sliding log: parameters [`LogParams`], state a [`LogState`] of `limit` entries.
#[derive(Debug)]
pub struct Log;

impl super::sealed::Sealed for Log {}

impl Algo for Log {
    type Params = LogParams;
    type State = LogState;

    fn params(quota: &Quota) -> Result<LogParams, QuotaError> {
        Ok(LogParams {
            limit: quota.limit(),
            period: quota.period_ns(),
        })
    }

    /// Allocates the ring of `limit` entries, or says why it cannot.
    fn state(p: &LogParams) -> Result<LogState, QuotaError> {
        let too_large = QuotaError::LogTooLarge { limit: p.limit };
        let len = usize::try_from(p.limit).map_err(|_| too_large)?;
        if len > isize::MAX as usize / 8 {
            return Err(too_large);
        }
        let mut entries = Vec::new();
        entries.try_reserve_exact(len).map_err(|_| too_large)?;
        entries.extend((0..len).map(|_| AtomicU64::new(0)));
        Ok(LogState {
            seq: AtomicU64::new(0),
            entries: entries.into_boxed_slice(),
        })
    }

    #[inline]
    fn acquire(state: &LogState, p: &LogParams, now_ns: u64, n: u64) -> Decision {
        state.acquire(p, now_ns, n)
    }

    #[inline]
    fn peek(state: &LogState, p: &LogParams, now_ns: u64, n: u64) -> Decision {
        state.peek(p, now_ns, n)
    }
}

/// The clock-less sliding log a keyed map stores per key.
pub(crate) type SlidingLogCore = Core<Log>;

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[test]
    fn the_oldest_entry_decides() {
        let p = LogParams {
            limit: 2,
            period: 10,
        };
        let log = [3u64, 7];
        let (d, w) = decide(&p, 2, |j| log[j as usize % 2], 12, 1);
        assert!(!d.is_allowed() && w.is_none());
        assert_eq!(d.retry_after(), Some(Duration::from_nanos(1))); // 3 leaves at 13
        let (d, w) = decide(&p, 2, |j| log[j as usize % 2], 13, 1);
        assert!(d.is_allowed());
        assert_eq!(w, Some(13));
        assert_eq!(d.remaining(), 0);
    }

    #[test]
    fn an_earlier_clock_records_at_the_newest_time() {
        let p = LogParams {
            limit: 3,
            period: 10,
        };
        let log = [50u64, 0, 0];
        let (d, w) = decide(&p, 1, |j| log[j as usize % 3], 20, 1);
        assert!(d.is_allowed());
        assert_eq!(w, Some(50));
    }
}
