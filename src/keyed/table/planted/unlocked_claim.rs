//! Defect: a claim scans and takes a slot without its stripe lock: two first requests of one
//! key can take two slots (one an idle key's, the other unused while the first is being taken
//! over), each with a fresh limiter.

use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};

use crate::algo::fixed_window::Fixed;
use crate::algo::token_bucket::Gcra;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::keyed::table::{decide_on, home_of, Pass, Rule, Scan};
use crate::keyed::word::{WordRule, EVICTED};
use crate::sync::{fence, Backoff, Ordering};

mutant!();

impl<K: ?Sized, C: Clock, S: BuildHasher> Mutant<'_, K, C, S> {
    #[inline]
    pub(crate) fn try_acquire_n<Q>(&self, key: &Q, n: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let tag = match self.hasher.hash_one(key) {
            0 => 1,
            h => h,
        };
        match &self.rule {
            Rule::TokenBucket(p) => self.acquire::<Gcra>(p, tag, n),
            Rule::FixedWindow(p) => self.acquire::<Fixed>(p, tag, n),
        }
    }

    #[inline]
    fn acquire<R: WordRule>(&self, p: &R::Params, tag: u64, n: u64) -> Decision {
        let home = home_of(tag, self.buckets.len());
        let mut now = self.now();
        let backoff = Backoff::new();
        loop {
            if let Pass::Decided(d) = self.find::<R>(p, tag, home, now, n) {
                return d;
            }
            // Acquire: the key's slot taken by another key, or no slot of the key, was read
            // `Relaxed`; the reading below comes after the claim that did it.
            fence(Ordering::Acquire);
            now = self.now();
            if let Pass::Decided(d) = self.claim::<R>(p, tag, home, now, n) {
                return d;
            }
            // The key's slot is being taken over (`EVICTED`, its tag not yet the taker's): let
            // the taker finish, spinning a little longer each time, then yielding.
            backoff.snooze();
            // Acquire: as above, for a slot taken while this thread decided on it.
            fence(Ordering::Acquire);
            now = self.now();
        }
    }

    #[cold]
    fn claim<R: WordRule>(&self, p: &R::Params, tag: u64, home: usize, now: u64, n: u64) -> Pass {
        if R::admit(p, 0, now, n).is_none() {
            // A zero cost or a denial on a fresh limiter: nothing to keep.
            return Pass::Decided(R::decide(p, 0, now, n).0);
        }
        // PLANTED: no stripe lock
        // A word fresh at this reading (less the skew) is fresh at any later one.
        let judge = now.saturating_sub(self.skew);
        loop {
            let scan = self.scan::<R>(p, tag, home, judge);
            // Acquire: the scan read the tags `Relaxed`; a slot of this key that another
            // key took over after this request's reading was among them. Read again: a
            // new limiter of this key starts no earlier than the taker judged the old one
            // fresh (see the orderings).
            fence(Ordering::Acquire);
            let now = self.now();
            match scan {
                Scan::Found(slot) => return decide_on::<R>(slot, p, tag, now, n),
                Scan::Unused(slot) => {
                    // Relaxed: claims of this tag are ordered by the stripe lock; another
                    // tag's claim of the slot is decided by this exchange.
                    if slot
                        .tag
                        .compare_exchange(0, tag, Ordering::Relaxed, Ordering::Relaxed)
                        .is_err()
                    {
                        continue;
                    }
                    // Relaxed: a count.
                    self.used.fetch_add(1, Ordering::Relaxed);
                    // The word is 0, which no claim takes over: the first admission is an
                    // admission like any other.
                    return decide_on::<R>(slot, p, tag, now, n);
                }
                Scan::Idle(slot, word) => {
                    let Some(first) = R::admit(p, 0, now, n) else {
                        return Pass::Decided(R::decide(p, 0, now, n).0);
                    };
                    // Release: a request of the key this slot held that reads `EVICTED` (or
                    // a later word) reads the clock again after this (see the orderings).
                    if slot
                        .word
                        .compare_exchange(word, EVICTED, Ordering::Release, Ordering::Relaxed)
                        .is_err()
                    {
                        continue;
                    }
                    // Release: a request that reads this tag and redoes (its key gone)
                    // reads the clock again after the taker's reading (see the orderings).
                    slot.tag.store(tag, Ordering::Release);
                    // The admission itself, not a fresh word 0 to admit on next: a slot's
                    // word never comes back to a value it had, so no request that read it
                    // before can commit on it (see the invariant). Release: a request that
                    // reads this word (or an admission after it) sees the tag above.
                    slot.word.store(first, Ordering::Release);
                    return Pass::Decided(R::admitted(p, 0, first, now, n));
                }
                Scan::Full => return Pass::Decided(self.full::<R>(p, now, n)),
            }
            // Lost to another claim, or to an admission of the idle key: scan again.
        }
    }
}
