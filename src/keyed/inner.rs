//! One algorithm's map: lookup, the first request's insert, the sweep, the bound's check.

use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::ptr;

use crate::clock::{duration_to_nanos, Clock};
use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::sync::Ordering;

use super::map::{Bound, Keyed, Shared};
use super::map::{FLUSH_EVERY, RESIZE_CHUNK};
use super::options::WhenFull;
use super::plans::{KeySlot, SlotMaker};
use super::slot::Attempt;

impl<K, M, S> Keyed<K, M, S>
where
    K: Hash + Eq,
    M: SlotMaker,
    S: BuildHasher,
{
    pub(super) fn new(maker: M, hasher: S, capacity: usize) -> Self {
        Keyed {
            maker,
            map: papaya::HashMap::builder()
                .hasher(hasher)
                .capacity(capacity)
                .resize_mode(papaya::ResizeMode::Incremental(RESIZE_CHUNK))
                .build(),
        }
    }

    /// [`Keyed::new`], once a limiter for `quota` could be made.
    pub(super) fn checked(
        maker: M,
        quota: &Quota,
        hasher: S,
        capacity: usize,
    ) -> Result<Self, QuotaError> {
        maker.check(quota)?;
        Ok(Keyed::new(maker, hasher, capacity))
    }

    /// Evicts every key fresh at `now` less the clock's skew: a request that finds its key
    /// gone (or marked) reads the clock after this sweep, at most `shared.skew` earlier than
    /// `now`, and freshness only grows with time, so the evicted limiter was fresh at that
    /// request's reading too: its new limiter hands out nothing the old one would not have.
    pub(super) fn sweep(&self, shared: &Shared, now: u64) -> usize {
        let judged_at = now.saturating_sub(shared.skew);
        let map = self.map.pin();
        let mut evicted = 0;
        for (key, slot) in map.iter() {
            if slot.try_evict(judged_at) {
                // A requester that saw the mark may have removed it already: gone either way.
                let _ = map.remove_if(key, |_, v| ptr::eq(v, slot));
                evicted += 1;
            }
        }
        drop(map);
        // Hand the removed entries (and any table a resize left behind) to the epoch
        // collector now, rather than when this thread's batch happens to fill up.
        papaya::Guard::flush(&self.map.guard());
        // Relaxed: a count.
        shared.evicted.fetch_add(evicted as u64, Ordering::Relaxed);
        evicted
    }

    /// A request under `guard`, a guard of this map's collector.
    #[inline]
    pub(super) fn acquire<Q, C: Clock, G: papaya::Guard>(
        &self,
        shared: &Shared,
        clock: &C,
        key: &Q,
        n: u64,
        quota: &Quota,
        guard: &G,
    ) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let map = &self.map;
        loop {
            let found = map.get(key, guard);
            // Read after the lookup: a request that finds its key evicted (gone, or marked)
            // has synchronized with the evictor, so its reading is no earlier than the one
            // the evictor found the limiter fresh at. An earlier reading could spend a new
            // limiter's burst at an instant when the evicted one had none.
            let mut now = clock.now_nanos();
            let slot = match found {
                Some(slot) => slot,
                None => match self.insert(shared, guard, key, quota, now, n) {
                    Ok(slot) => {
                        // Read again once the key has a limiter: a thread that stalled after
                        // the reading above may find, when it inserts, that the key was made,
                        // drained and evicted meanwhile. Its insert read the eviction's
                        // removal (papaya's loads are `Acquire`), so this reading is no
                        // earlier than the evictor's; the stale one could start a new limit
                        // at an instant when the evicted limiter had none left.
                        now = clock.now_nanos();
                        slot
                    }
                    Err(decision) => return decision,
                },
            };
            match slot.acquire(now, n) {
                Attempt::Decided(decision) => return decision,
                Attempt::Evicted => {
                    // Help the evictor remove the orphan, then redo on a new limiter (and a
                    // new reading of the clock).
                    let _ = map.remove_if(key, |_, v| ptr::eq(v, slot), guard);
                }
            }
        }
    }

    /// The miss path: make the key's limiter and insert it, unless another thread won the
    /// race (then its limiter is used and ours dropped) or the bound says otherwise.
    #[cold]
    #[inline(never)]
    pub(super) fn insert<'g, Q, G>(
        &self,
        shared: &Shared,
        guard: &'g G,
        key: &Q,
        quota: &Quota,
        now: u64,
        n: u64,
    ) -> Result<&'g M::Slot, Decision>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        G: papaya::Guard,
    {
        let Ok(slot) = self.maker.make(quota) else {
            return Err(Decision::exceeds(0, 0));
        };
        if let Some(bound) = &shared.bound
            && !self.make_room(shared, bound, now)
        {
            return Err(match bound.when_full {
                WhenFull::Deny => {
                    let period = duration_to_nanos(self.maker.in_force(quota).period());
                    Decision::denied(0, now, now.saturating_add(period), 0)
                }
                // Judged by the fresh limiter, which is then dropped.
                WhenFull::AdmitUntracked => slot.untracked(now, n),
            });
        }
        let map = &self.map;
        Ok(match map.try_insert(key.to_owned(), slot, guard) {
            Ok(inserted) => {
                if map.len().is_multiple_of(FLUSH_EVERY) {
                    // A growing map retires its old tables (half the new one's size, all
                    // told) into this thread's batch of garbage, freed only once the batch
                    // fills; sweeps may be rare. Hand them to the collector now and then:
                    // they are freed once the threads pinning the map let go.
                    guard.flush();
                }
                inserted
            }
            Err(occupied) => occupied.current,
        })
    }

    /// Whether a new key may be inserted under `bound`, sweeping idle keys first if the map
    /// is full and a sweep is due (at most once per period of the map's `quota`).
    pub(super) fn make_room(&self, shared: &Shared, bound: &Bound, now: u64) -> bool {
        if self.map.len() < bound.max_keys {
            return true;
        }
        // Relaxed (all three): the throttle only spaces sweeps out; a lost race sweeps twice
        // or once fewer, which is harmless.
        let misses = bound.full_misses.fetch_add(1, Ordering::Relaxed) + 1;
        let last = bound.last_sweep_ns.load(Ordering::Relaxed);
        let period = duration_to_nanos(self.maker.in_force(&shared.quota).period());
        let due =
            misses >= (bound.max_keys as u64 / 16).max(1) || now.saturating_sub(last) >= period;
        if due
            && bound
                .last_sweep_ns
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            bound.full_misses.store(0, Ordering::Relaxed);
            self.sweep(shared, now);
        }
        self.map.len() < bound.max_keys
    }
}
