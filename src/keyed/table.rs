//! [`KeyedTable`]: exact one-word limiters (token bucket, fixed window) for many keys in one
//! table of fixed size, with no epoch guard, no allocation and no shared write but the key's.
//!
//! | slot field | type  | meaning                                                            |
//! |------------|-------|--------------------------------------------------------------------|
//! | `tag`      | `u64` | the key's 64-bit hash (0 read as 1); 0: the slot was never used    |
//! | `word`     | `u64` | the key's limiter (`tat`; `window, count`), `EVICTED`: being taken |
//!
//! Slots come in buckets of 4 (16 bytes each, one cache line). A key lives in one slot among
//! the [`PROBE`] buckets from its home bucket (picked by its hash), before the first unused one.
//!
//! **Invariant.** At most one slot holds a tag: a slot gets a tag only from a thread holding
//! the tag's home stripe lock, after its scan (under that lock) found no slot of the tag before
//! the first unused one; slots are never unused again, so no scan stops short of a tag's slot.
//! A used slot changes tag only from a word fresh at the taker's reading less the clock's
//! `max_skew_nanos` (and not 0, a claim's word before its first admission), which it replaces
//! with `EVICTED` by compare-exchange, then stores the new tag and the new key's first
//! admission. An admission is a compare-exchange on a word read with its slot's tag checked
//! after it. A slot's word never comes back to a value it had: words only grow, 0 is only a
//! never-used slot's, and a taken slot's first word is above the fresh word it replaced; so an
//! admission commits only on the word of its own key's slot.
//!
//! **Orderings.** Tag loads and admissions' compare-exchanges are `Relaxed`; a word is loaded
//! `Acquire` (and a failed exchange reads `Acquire`), pairing with the `Release` of the first
//! word a taker stores after the new tag (admissions continue its release sequence), so the
//! tag check after it sees the new tag. The `EVICTED` exchange and the new tag's store are
//! `Release`: a request that reads `EVICTED`, a later word or the new tag (its key gone),
//! issues an `Acquire` fence before it reads the clock again, so its redo reads no earlier
//! than the taker's reading less the skew the taker allowed for. A claim reads the clock
//! again after its scan, behind such a fence, so a key's new limiter never starts at a
//! reading from before the takeover of its old one. Stripe locks order a stripe's claims.

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::marker::PhantomData;

use crate::algo::fixed_window::Fixed;
use crate::algo::token_bucket::Gcra;
use crate::algo::Algo;
use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Origin};
use crate::decision::Decision;
use crate::quota::{GcraParams, Quota, WindowParams};
use crate::sync::{fence, AtomicU64, Backoff, Mutex, Ordering};

use super::error::KeyedError;
use super::options::{remix, Algorithm, KeyHasher, WhenFull};
use super::word::{is_fresh, WordRule, EVICTED};

/// The table for the loom models (`loom-tests/tests/keyed_table.rs`), sound and planted.
#[cfg(tollgate_loom)]
pub(crate) mod loom_model;
#[cfg(tollgate_loom)]
mod planted;

/// Slots per bucket: 4 × 16 bytes, one cache line.
const BUCKET: usize = 4;
/// Buckets a key may live in, from its home bucket on: 256 slots, 4 KiB. At 1.5 slots a key,
/// linear probing displaces a key by 23 buckets at the median of the most displaced key of a
/// table of 10^6 keys, 38 at the most over 120 such tables (simulated with uniform homes).
#[cfg(not(tollgate_loom))]
pub(crate) const PROBE: usize = 64;
/// Under loom, two buckets: a scan of 256 slots is more than the model checker can explore,
/// and the models' tables are of the smallest size, [`PROBE`] buckets.
#[cfg(tollgate_loom)]
pub(crate) const PROBE: usize = 2;
/// Buckets per stripe lock.
#[cfg(not(tollgate_loom))]
const STRIPE: usize = 8;
/// Under loom, one: a key's probe reaches a bucket of another stripe.
#[cfg(tollgate_loom)]
const STRIPE: usize = 1;

/// One key's limiter.
struct Slot {
    tag: AtomicU64,
    word: AtomicU64,
}

/// Four slots on one cache line.
#[repr(align(64))]
struct Bucket([Slot; BUCKET]);

impl Bucket {
    fn empty() -> Self {
        Bucket(core::array::from_fn(|_| Slot {
            tag: AtomicU64::new(0),
            word: AtomicU64::new(0),
        }))
    }
}

/// The algorithm and its parameters.
#[derive(Debug)]
enum Rule {
    TokenBucket(GcraParams),
    FixedWindow(WindowParams),
}

/// What one pass over a key's slots ended with.
enum Pass {
    Decided(Decision),
    /// The key's slot was taken by another key, or the key has none: redo at a new reading.
    Redo,
}

/// Exact per-key limiters (token bucket or fixed window) in one table of fixed size: for a
/// proxy that bounds the clients it tracks and wants the fewest bytes and cache misses per
/// key. Each key's limiter is one 16-byte slot, named by the key's 64-bit hash; the table for
/// `keys` keys holds `1.5 × keys` slots (24 bytes a key) and never grows, allocates or frees.
///
/// A request hashes its key, reads the clock, and finds the key's slot in its home cache
/// line or the next ones: one load and, to admit, one compare-exchange on that slot. No epoch
/// guard, no lock. A key's first request takes a slot under a lock striped over the table,
/// either a slot never used or one whose limiter is idle (back to full capacity: taking it
/// hands no one a fresh burst early). A key that finds none of its 256 slots free is decided by
/// the [`WhenFull`] policy ([`WhenFull::Deny`] by default); that happens only when those slots
/// are all held by keys that are not idle. A table holding no more keys than it was made for
/// leaves none out: at 1.5 slots a key the most displaced of a million keys sits 38 buckets
/// (152 slots) from home at most over 120 simulated tables, and the tests fill tables to their
/// keys.
///
/// Against [`KeyedLimiter`](crate::KeyedLimiter): no per-key plans, no sliding algorithms,
/// no sweeps to run (idle slots are taken over on demand), a fixed memory. Keys are known
/// only by their hash: two keys of one 64-bit hash (with the default random seed, a chance of
/// one in 2^64 for any two keys) share one limiter, so each is admitted at most its quota,
/// never more.
///
/// ```
/// use std::num::NonZeroUsize;
/// use tollgate::{Algorithm, KeyedTable, ManualClock, Quota};
///
/// let clock = ManualClock::new();
/// let keys = NonZeroUsize::new(100_000).unwrap();
/// let per_ip = KeyedTable::<str, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(5)?, keys, clock)?;
/// let passed = (0..10).filter(|_| per_ip.try_acquire("10.0.0.1").is_allowed()).count();
/// assert_eq!(passed, 5);
/// assert!(per_ip.try_acquire("10.0.0.2").is_allowed());
/// assert_eq!(per_ip.len(), 2);
/// assert!(per_ip.bytes() < 25 * 100_000 + 4096);
/// # Ok::<(), tollgate::KeyedError>(())
/// ```
pub struct KeyedTable<K: ?Sized, C = MonotonicClock, S = KeyHasher> {
    buckets: Box<[Bucket]>,
    stripes: Box<[Mutex<()>]>,
    rule: Rule,
    quota: Quota,
    when_full: WhenFull,
    clock: C,
    origin: Origin,
    /// The clock's [`Clock::max_skew_nanos`], read once: the margin a takeover keeps.
    skew: u64,
    hasher: S,
    /// Slots ever claimed. Relaxed: a count, written only when a key takes an unused slot.
    used: AtomicU64,
    /// The keys the table was made for.
    keys: u64,
    key: PhantomData<fn(&K)>,
}

impl<K: Hash + ?Sized> KeyedTable<K> {
    /// A table for `keys` keys on the default [`MonotonicClock`], with the default hasher.
    ///
    /// # Errors
    /// As [`KeyedTable::try_with_clock`].
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, Quota};
    /// let per_user = KeyedTable::<u64>::try_new(Algorithm::FixedWindow, Quota::per_minute(60)?, NonZeroUsize::new(1024).unwrap())?;
    /// assert!(per_user.try_acquire(&42).is_allowed());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn try_new(
        algorithm: Algorithm,
        quota: Quota,
        keys: core::num::NonZeroUsize,
    ) -> Result<Self, KeyedError> {
        KeyedTable::try_with_clock(algorithm, quota, keys, MonotonicClock::new())
    }
}

impl<K: Hash + ?Sized, C: Clock> KeyedTable<K, C> {
    /// A table for `keys` keys reading time from `clock`, with the default hasher.
    ///
    /// # Errors
    /// [`KeyedError::Algorithm`] for the sliding window and log (their limiters span several
    /// words); [`KeyedError::Capacity`] if the table cannot be allocated.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedError, KeyedTable, ManualClock, Quota};
    /// let keys = NonZeroUsize::new(10).unwrap();
    /// let q = Quota::per_second(1)?;
    /// assert!(KeyedTable::<u64, _>::try_with_clock(Algorithm::TokenBucket, q, keys, ManualClock::new()).is_ok());
    /// let sliding = KeyedTable::<u64, _>::try_with_clock(Algorithm::SlidingWindow, q, keys, ManualClock::new());
    /// assert_eq!(sliding.err(), Some(KeyedError::Algorithm(Algorithm::SlidingWindow)));
    /// let huge = KeyedTable::<u64, _>::try_with_clock(Algorithm::TokenBucket, q, NonZeroUsize::MAX, ManualClock::new());
    /// assert_eq!(huge.err(), Some(KeyedError::Capacity));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_with_clock(
        algorithm: Algorithm,
        quota: Quota,
        keys: core::num::NonZeroUsize,
        clock: C,
    ) -> Result<Self, KeyedError> {
        let (rule, grain) = match algorithm {
            Algorithm::TokenBucket => {
                let p = <Gcra as Algo>::params(&quota)?;
                let grain = <Gcra as Algo>::grain(&p);
                (Rule::TokenBucket(p), grain)
            }
            Algorithm::FixedWindow => {
                let p = <Fixed as Algo>::params(&quota)?;
                let grain = <Fixed as Algo>::grain(&p);
                (Rule::FixedWindow(p), grain)
            }
            other => return Err(KeyedError::Algorithm(other)),
        };
        // 1.5 slots a key, in whole buckets, at least one probe's worth.
        let slots = keys
            .get()
            .checked_add(keys.get() / 2)
            .ok_or(KeyedError::Capacity)?;
        let buckets = slots.div_ceil(BUCKET).max(PROBE);
        let mut table = Vec::new();
        table
            .try_reserve_exact(buckets)
            .map_err(|_| KeyedError::Capacity)?;
        table.extend((0..buckets).map(|_| Bucket::empty()));
        let stripes = (0..buckets.div_ceil(STRIPE))
            .map(|_| Mutex::new(()))
            .collect();
        Ok(KeyedTable {
            buckets: table.into_boxed_slice(),
            stripes,
            rule,
            quota,
            when_full: WhenFull::Deny,
            origin: Origin::of(&clock, grain),
            skew: clock.max_skew_nanos(),
            clock,
            hasher: KeyHasher::default(),
            used: AtomicU64::new(0),
            keys: keys.get() as u64,
            key: PhantomData,
        })
    }
}

impl<K: ?Sized, C: Clock, S: BuildHasher> KeyedTable<K, C, S> {
    /// The same table, empty, hashing keys with `hasher` instead of the randomly seeded
    /// [`KeyHasher`]. A hasher with a fixed seed lets clients pick keys that share a home (and
    /// fill their 256 slots) or a hash (and share a limiter): use one only for keys you trust.
    ///
    /// ```
    /// use std::collections::hash_map::DefaultHasher;
    /// use std::hash::BuildHasherDefault;
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, ManualClock, Quota};
    /// let t = KeyedTable::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, NonZeroUsize::new(8).unwrap(), ManualClock::new())?
    ///     .with_hasher(BuildHasherDefault::<DefaultHasher>::default());
    /// assert!(t.try_acquire(&1).is_allowed());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn with_hasher<S2: BuildHasher>(mut self, hasher: S2) -> KeyedTable<K, C, S2> {
        for bucket in self.buckets.iter_mut() {
            *bucket = Bucket::empty();
        }
        KeyedTable {
            buckets: self.buckets,
            stripes: self.stripes,
            rule: self.rule,
            quota: self.quota,
            when_full: self.when_full,
            clock: self.clock,
            origin: self.origin,
            skew: self.skew,
            hasher,
            used: AtomicU64::new(0),
            keys: self.keys,
            key: PhantomData,
        }
    }

    /// The same table, deciding a new key that finds no free slot by `when_full` instead of
    /// [`WhenFull::Deny`].
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, ManualClock, Quota, WhenFull};
    /// let t = KeyedTable::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, NonZeroUsize::new(8).unwrap(), ManualClock::new())?
    ///     .when_full(WhenFull::AdmitUntracked);
    /// assert!(t.try_acquire(&1).is_allowed());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// Asks for one unit for `key`, in any borrowed form of `K` (`&str` for `String` keys).
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, ManualClock, Quota};
    /// let t = KeyedTable::<str, _>::try_with_clock(Algorithm::FixedWindow, Quota::per_second(1)?, NonZeroUsize::new(8).unwrap(), ManualClock::new())?;
    /// assert!(t.try_acquire("alice").is_allowed());
    /// assert!(!t.try_acquire("alice").is_allowed());
    /// assert!(t.try_acquire("bob").is_allowed());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.try_acquire_n(key, 1)
    }

    /// Asks for `n` units for `key` at once: all or none. A key's first request takes a
    /// slot only if it is admitted: a zero cost, or one above the quota's burst, is decided
    /// on a fresh limiter and leaves the table as it was.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, ManualClock, Quota};
    /// let t = KeyedTable::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(10)?, NonZeroUsize::new(8).unwrap(), ManualClock::new())?;
    /// assert!(t.try_acquire_n(&9, 7).is_allowed());
    /// assert!(!t.try_acquire_n(&9, 4).is_allowed());
    /// assert!(t.try_acquire_n(&5, 11).exceeds_capacity());
    /// assert_eq!(t.len(), 1);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    #[inline]
    pub fn try_acquire_n<Q>(&self, key: &Q, n: u64) -> Decision
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

    /// The quota every key is limited to.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, Quota};
    /// let q = Quota::per_second(3)?;
    /// assert_eq!(KeyedTable::<u8>::try_new(Algorithm::TokenBucket, q, NonZeroUsize::new(2).unwrap())?.quota(), q);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Slots a key has taken since the table was made: keys held, those whose limiter went
    /// idle included (a key keeps its slot until a new key takes it over).
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, ManualClock, Quota};
    /// let t = KeyedTable::<u64, _>::try_with_clock(Algorithm::TokenBucket, Quota::per_second(1)?, NonZeroUsize::new(8).unwrap(), ManualClock::new())?;
    /// let _ = (t.try_acquire(&1), t.try_acquire(&2), t.try_acquire(&1));
    /// assert_eq!(t.len(), 2);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn len(&self) -> usize {
        // Relaxed: a count.
        self.used.load(Ordering::Relaxed) as usize
    }

    /// Whether no key has taken a slot yet.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, Quota};
    /// assert!(KeyedTable::<u64>::try_new(Algorithm::TokenBucket, Quota::per_second(1)?, NonZeroUsize::new(8).unwrap())?.is_empty());
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots in the table, fixed at construction: about 1.5 per key asked for.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, Quota};
    /// let t = KeyedTable::<u64>::try_new(Algorithm::TokenBucket, Quota::per_second(1)?, NonZeroUsize::new(100_000).unwrap())?;
    /// assert_eq!(t.slots(), 150_000);
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn slots(&self) -> usize {
        self.buckets.len() * BUCKET
    }

    /// Bytes the table holds, fixed at construction: 16 per slot and its stripe locks.
    ///
    /// ```
    /// use std::num::NonZeroUsize;
    /// use tollgate::{Algorithm, KeyedTable, Quota};
    /// let t = KeyedTable::<u64>::try_new(Algorithm::TokenBucket, Quota::per_second(1)?, NonZeroUsize::new(1_000_000).unwrap())?;
    /// assert!(t.bytes() as f64 / 1e6 < 24.5); // per key asked for
    /// # Ok::<(), tollgate::KeyedError>(())
    /// ```
    pub fn bytes(&self) -> usize {
        core::mem::size_of_val(&*self.buckets) + core::mem::size_of_val(&*self.stripes)
    }

    /// The clock's now in the table's time.
    #[inline(always)]
    fn now(&self) -> u64 {
        self.origin.now(&self.clock)
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

    /// The request path: the key's slot, if it has one, decides.
    #[inline(always)]
    fn find<R: WordRule>(&self, p: &R::Params, tag: u64, home: usize, now: u64, n: u64) -> Pass {
        for i in 0..PROBE {
            for slot in &self.bucket(home + i).0 {
                // Relaxed: see the module's orderings.
                let seen = slot.tag.load(Ordering::Relaxed);
                if seen == tag {
                    return decide_on::<R>(slot, p, tag, now, n);
                }
                if seen == 0 {
                    return Pass::Redo;
                }
            }
        }
        Pass::Redo
    }

    /// Bucket `i`, counted on past the last one from the first (`i < 2 × buckets`).
    #[inline(always)]
    fn bucket(&self, i: usize) -> &Bucket {
        let len = self.buckets.len();
        &self.buckets[if i >= len { i - len } else { i }]
    }

    /// A key with no slot: take one under the home stripe's lock, or decide by the policy.
    #[cold]
    fn claim<R: WordRule>(&self, p: &R::Params, tag: u64, home: usize, now: u64, n: u64) -> Pass {
        if R::admit(p, 0, now, n).is_none() {
            // A zero cost or a denial on a fresh limiter: nothing to keep.
            return Pass::Decided(R::decide(p, 0, now, n).0);
        }
        let _stripe = self.stripes[home / STRIPE]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
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

    /// The key's slot, else the first slot it may take: once the table holds the keys it was
    /// made for, an idle one (fresh at `judge`) before the first unused one; else that one,
    /// else an idle one.
    fn scan<R: WordRule>(&self, p: &R::Params, tag: u64, home: usize, judge: u64) -> Scan<'_> {
        let mut idle = None;
        for i in 0..PROBE {
            for slot in &self.bucket(home + i).0 {
                // Relaxed: the claims of this tag are ordered by the stripe lock; another
                // tag's claim is decided by a compare-exchange.
                let seen = slot.tag.load(Ordering::Relaxed);
                if seen == tag {
                    return Scan::Found(slot);
                }
                if seen == 0 {
                    // Below the keys it was made for, the table fills its unused slots first:
                    // taking idle ones over would only move keys around.
                    // Relaxed: a count, read as a hint.
                    let filled = self.used.load(Ordering::Relaxed) >= self.keys;
                    return match idle {
                        Some((slot, word)) if filled => Scan::Idle(slot, word),
                        _ => Scan::Unused(slot),
                    };
                }
                if idle.is_none() {
                    // Relaxed: a hint; the exchange that takes the slot decides.
                    let word = slot.word.load(Ordering::Relaxed);
                    // 0: a claim of an unused slot, its first admission still to come;
                    // `EVICTED`: being taken over.
                    if word != 0 && word != EVICTED && is_fresh::<R>(p, word, judge) {
                        idle = Some((slot, word));
                    }
                }
            }
        }
        match idle {
            Some((slot, word)) => Scan::Idle(slot, word),
            None => Scan::Full,
        }
    }

    /// A new key that found no slot: the policy's decision.
    fn full<R: WordRule>(&self, p: &R::Params, now: u64, n: u64) -> Decision {
        match self.when_full {
            WhenFull::Deny => {
                let period = duration_to_nanos(self.quota.period());
                Decision::denied(0, now, now.saturating_add(period), 0)
            }
            // Judged by a fresh limiter, not kept.
            WhenFull::AdmitUntracked => R::decide(p, 0, now, n).0,
        }
    }
}

/// What a scan under the stripe lock found.
enum Scan<'a> {
    /// The key's slot.
    Found(&'a Slot),
    /// A slot never used.
    Unused(&'a Slot),
    /// A used slot whose limiter is fresh, and its word.
    Idle(&'a Slot, u64),
    /// Neither.
    Full,
}

/// The bucket a tag's search starts at: the tag mixed again ([`remix`]: a home read off a
/// fast hasher's bits directly would crowd keys in sequence onto a few cache lines), then
/// scaled to `0..buckets`.
#[inline(always)]
fn home_of(tag: u64, buckets: usize) -> usize {
    ((u128::from(remix(tag)) * buckets as u128) >> 64) as usize
}

/// The request on `slot`, found holding `tag`.
#[inline(always)]
fn decide_on<R: WordRule>(slot: &Slot, p: &R::Params, tag: u64, now: u64, n: u64) -> Pass {
    // Acquire: see the module's orderings (the tag check below).
    let mut word = slot.word.load(Ordering::Acquire);
    loop {
        // Relaxed: ordered after the word's load by its `Acquire`.
        if word == EVICTED || slot.tag.load(Ordering::Relaxed) != tag {
            return Pass::Redo;
        }
        let Some(new) = R::admit(p, word, now, n) else {
            // A denial or a zero cost: decided on `word`, nothing written.
            return Pass::Decided(R::decide(p, word, now, n).0);
        };
        // Relaxed on success: the word's modification order orders this admission against
        // every other write to it; Acquire on failure, as the load above.
        match slot
            .word
            .compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Acquire)
        {
            Ok(_) => return Pass::Decided(R::admitted(p, word, new, now, n)),
            Err(current) => word = current,
        }
    }
}

impl<K: ?Sized, C, S> fmt::Debug for KeyedTable<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedTable")
            .field("rule", &self.rule)
            .field("quota", &self.quota)
            .field("slots", &(self.buckets.len() * BUCKET))
            .field("when_full", &self.when_full)
            // Relaxed: a count.
            .field("used", &self.used.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}
