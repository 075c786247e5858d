//! A sketch with exact entries for its heaviest keys: [`HybridSketchLimiter`].
//!
//! # Design
//!
//! A [`SketchLimiter`] (fixed window) and a table of `M` exact entries, one 16-byte word each,
//! fixed at construction. A key of hash `h` has one slot, picked by `h` (direct-mapped: a
//! key is in at most one place, so two racing promotions cannot make two entries for it). An
//! entry is named by the whole 64-bit hash, not the key: the sketch itself only knows keys by
//! that hash (equal hashes, equal column and lanes), so two keys of one hash sharing an entry
//! are one key to both parts, and the entry's count of the hash bounds each key's.
//!
//! - A request whose slot holds an **active** entry of its hash, in its window, is decided by
//!   the entry alone (one compare-exchange), and the sketch is not touched: a heavy key stops
//!   filling the lanes it shares with the tail.
//! - Any other request goes to the sketch. A key whose estimate reaches the promotion
//!   threshold (three quarters of the limit unless set) is **promoted** into its slot if the
//!   slot is empty or expired: the slot is claimed **pending**, then the sketch's estimate of
//!   the key in the window (at least its true count, since the key counted only in the
//!   sketch) is read and the entry made active charged with it.
//! - An active entry found in an older window is **re-promoted** the same way in the new
//!   window: the key's admissions there so far are in the sketch only.
//! - An entry is replaced only once its window ended more than the clock's
//!   [`Clock::max_skew_nanos`] ago: a key that falls back to the sketch has no admission in
//!   the entry in any window a request can still read, and all its others are in the sketch
//!   (which never forgot them). A live entry is never evicted: a heavy key whose slot is
//!   taken stays in the sketch, judged as by the plain sketch. (A clock that steps back
//!   further than that, into the window of an entry since replaced, is not covered: the
//!   sketch would judge the key there without the entry's count.) A request that finds,
//!   after its sketch admission, another key's entry of a later window than its reading in
//!   its slot is denied: it stalled, reading in hand, while its key's entry of its window
//!   may have been taken back, and the sketch does not hold what that entry counted.
//!
//! # Slot layout (`u128`)
//!
//! | bits                | field     | meaning                                          |
//! |---------------------|-----------|--------------------------------------------------|
//! | `0..64`             | `tag`     | the key's 64-bit hash                            |
//! | `64`                | `used`    | the slot holds an entry (all zero: empty)        |
//! | `65`                | `pending` | claimed, the sketch's estimate not yet charged   |
//! | `66 .. 66 + b`      | `count`   | units of the key in `window`, `≤ limit`          |
//! | `66 + b .. 128`     | `window`  | window number `t / period`                       |
//!
//! `b = bits(limit)`. Every window number up to the horizon fits the `62 - b` bits left for
//! every quota of a period of 7 ns or more (see `fits`); a limiter of a shorter period keeps
//! no exact entries (it is the plain sketch).
//!
//! # Invariant
//!
//! For every key `x` and window `w`, the units admitted to `x` in `w` are at most: the
//! sketch's estimate of `x` if `x` has no active entry of `w`, the entry's count if it has.
//! An admission needs `count + n ≤ limit` in the part that decides it, so no key passes its
//! limit in a window; on one stream a key's room only shrinks within a window (promotion
//! charges the estimate that already bounded it), so, as for the sketch, it admits no more
//! per key than the exact [`KeyedLimiter`](crate::KeyedLimiter).
//!
//! The race at promotion: a request `B` that found no active entry is admitted by the sketch
//! while a promoter `A` claims the slot and reads the estimate. After its admission, `B`
//! reads the slot by a read-modify-write (`fetch_or(0)`, `Release`); `A` claims it by a
//! compare-exchange (`Acquire`) and then reads the sketch. Every write to a slot is a
//! read-modify-write, so the two are ordered in the slot's modification order: if `B`'s came
//! first, `A`'s claim reads from its release sequence, so `B`'s sketch write happens before
//! `A`'s read of the sketch, which counts it; if `A`'s came first, `B` reads the claim or a
//! later value. Then `B`, before it answers, charges its units to a pending or active entry
//! of its window with the same check (`count + n ≤ limit`, else it answers a denial: the
//! sketch is then charged for units it did not admit, which only overcounts), answers a
//! denial if the entry is already in a later window, and leaves an entry of an earlier
//! window to its re-promotion (whose claim comes after `B`'s read-modify-write, so its read
//! of the sketch counts `B`). A request counted in both parts is one that raced a
//! promotion: an overcount, never a fresh count; none is counted in neither.
//!
//! # Loom model
//!
//! The column's word is the sketch's (`cell.rs`, its models) and a slot is a one-word
//! compare-exchange counter, the pattern of the keyed map's fixed window word; what the hybrid
//! adds is the promotion race and its release-acquire pair, modelled in
//! `loom-tests/tests/sketch_hybrid.rs` (a promotion racing a sketch admission of the same
//! key), with the admission's read-modify-write made a plain `Relaxed` load as a planted
//! defect in a checked copy of `try_acquire_n` (`hybrid/planted.rs`); and a request whose
//! reading predates its key's entry taken back by another key in a later window, with the
//! denial on that entry left out of a checked copy of `recheck` as a planted defect.
//!
//! # Orderings
//!
//! Every slot operation is `Relaxed` (one word, publishing nothing else), but for the
//! promotion race above: a sketch admission's `Release` read-modify-write of the slot and a
//! claim's `Acquire`. (A `SeqCst` fence pair would do as well; on x86 it cost about as much
//! again as the whole request.)

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};

use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::keyed::{remix, KeyHasher};
use crate::quota::{bits, Quota, HORIZON};
use crate::sync::{AtomicU128, Ordering};

use super::cell::{Cell, KeyLanes};
use super::{SketchLimiter, SketchSize};

#[cfg(tollgate_loom)]
mod planted;

const USED: u64 = 1;
const PENDING: u64 = 2;
/// Bits of the slot's high half below the count.
const FLAG_BITS: u32 = 2;

/// An entry's fields, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    tag: u64,
    pending: bool,
    count: u64,
    window: u64,
}

/// What a request found in its slot.
enum Found {
    /// No entry of its hash.
    Miss,
    /// An entry of its hash, claimed, not yet charged.
    Pending(Entry),
    /// An active entry of its hash.
    Active(Entry, u128),
}

/// The count field's width.
#[derive(Clone, Copy, Debug)]
struct Layout {
    count_bits: u32,
}

impl Layout {
    fn pack(self, e: Entry) -> u128 {
        let hi = e.window << (FLAG_BITS + self.count_bits)
            | e.count << FLAG_BITS
            | if e.pending { PENDING } else { 0 }
            | USED;
        u128::from(hi) << 64 | u128::from(e.tag)
    }

    fn unpack(self, word: u128) -> Option<Entry> {
        let hi = (word >> 64) as u64;
        (hi & USED != 0).then(|| Entry {
            tag: word as u64,
            pending: hi & PENDING != 0,
            count: hi >> FLAG_BITS & ((1u64 << self.count_bits) - 1),
            window: hi >> (FLAG_BITS + self.count_bits),
        })
    }
}

/// A keyed rate limiter of fixed memory, as [`SketchLimiter`] (fixed window), that keeps
/// exact counts for up to `exact_keys` of its heaviest keys: a key whose count reaches the
/// promotion threshold moves to an exact entry, carrying what the sketch counted for it, and
/// from then on no longer fills the sketch's lanes that it shares with other keys. Its
/// guarantee is the sketch's: it **never admits more** for a key than an exact
/// [`KeyedLimiter`](crate::KeyedLimiter) of the same quota would (forward clocks); its only
/// error is a false denial, fewer of them than the plain sketch when a few heavy keys share
/// lanes with well-behaved ones.
///
/// Memory is the sketch's [`SketchSize::bytes`] plus 16 bytes per exact entry, fixed at
/// construction; no request allocates. An entry is taken back only after its window ended
/// (nothing live is evicted), so a key never gets a fresh limit by losing its entry. There
/// is no two-window (sliding) form. A quota of a period under 7 ns whose window numbers and
/// limit do not share an entry's word keeps no exact entries ([`HybridSketchLimiter::exact_keys`]
/// is then 0).
///
/// ```
/// use tollgate::{HybridSketchLimiter, ManualClock, Quota, SketchSize};
///
/// let clock = ManualClock::new();
/// let quota = Quota::per_second(10)?;
/// let per_ip = HybridSketchLimiter::<str, _>::with_clock(quota, SketchSize::columns(1 << 12)?, 256, clock.clone());
/// let passed = (0..20).filter(|_| per_ip.try_acquire("10.0.0.1").is_allowed()).count();
/// assert_eq!(passed, 10); // as the exact map
/// assert!(per_ip.is_exact("10.0.0.1")); // heavy: promoted, with its count
/// assert_eq!(per_ip.bytes(), (16 << 12) + 16 * 256);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct HybridSketchLimiter<K: ?Sized, C = MonotonicClock, S = KeyHasher> {
    sketch: SketchLimiter<K, C, S>,
    slots: Box<[AtomicU128]>,
    layout: Layout,
    promote_at: u64,
    /// The clock's [`Clock::max_skew_nanos`], read once: how long past its window an entry
    /// stays.
    skew: u64,
}

/// Whether every window number of `quota`'s period up to the horizon fits beside its limit
/// in a slot's 62 bits. For a period of at least 7 ns, always: [`Quota::try_new`] made the
/// fixed and sliding windows fit `bits(HORIZON / ⌈len / 8⌉ + 1) + bits(limit) ≤ 64`, and
/// `⌈len / 8⌉ ≤ len / 4` gives two more bits of window number than `len` needs (checked in
/// the tests). A shorter period (a rate near 10^9 per second) may not: that limiter keeps no
/// exact entries.
fn fits(quota: &Quota) -> bool {
    bits(HORIZON / quota.period_ns().max(1)) + bits(quota.limit()) <= 62
}

impl<K: ?Sized> HybridSketchLimiter<K> {
    /// A hybrid of a fixed-window sketch of `size` and `exact_keys` exact entries, on the
    /// default [`MonotonicClock`].
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, Quota, SketchSize};
    /// let per_key = HybridSketchLimiter::<u64>::new(Quota::per_second(100)?, SketchSize::columns(1 << 16)?, 1024);
    /// assert!(per_key.try_acquire(&7).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(quota: Quota, size: SketchSize, exact_keys: usize) -> Self {
        HybridSketchLimiter::with_clock(quota, size, exact_keys, MonotonicClock::new())
    }
}

impl<K: ?Sized, C: Clock> HybridSketchLimiter<K, C> {
    /// A hybrid of a fixed-window sketch of `size` and `exact_keys` exact entries, reading
    /// time from `clock`.
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, ManualClock, Quota, SketchSize};
    /// let l = HybridSketchLimiter::<u32, _>::with_clock(Quota::per_second(2)?, SketchSize::columns(64)?, 8, ManualClock::new());
    /// assert!(l.try_acquire(&1).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(quota: Quota, size: SketchSize, exact_keys: usize, clock: C) -> Self {
        let exact_keys = if fits(&quota) { exact_keys } else { 0 };
        let skew = clock.max_skew_nanos();
        let sketch = SketchLimiter::with_clock(quota, size, clock);
        HybridSketchLimiter::around(sketch, exact_keys, skew)
    }
}

impl<K: ?Sized, C, S> HybridSketchLimiter<K, C, S> {
    fn around(sketch: SketchLimiter<K, C, S>, exact_keys: usize, skew: u64) -> Self {
        let limit = sketch.quota.limit();
        HybridSketchLimiter {
            layout: Layout {
                count_bits: bits(limit).max(1),
            },
            slots: (0..exact_keys).map(|_| AtomicU128::new(0)).collect(),
            promote_at: (3 * limit).div_ceil(4).max(1),
            skew,
            sketch,
        }
    }

    /// The same limiter, fresh (nothing counted), hashing keys with `hasher` instead of the
    /// randomly seeded [`KeyHasher`] (see [`SketchLimiter::with_hasher`]).
    ///
    /// ```
    /// use std::hash::BuildHasherDefault;
    /// use std::collections::hash_map::DefaultHasher;
    /// use tollgate::{HybridSketchLimiter, ManualClock, Quota, SketchSize};
    /// let l = HybridSketchLimiter::<u64, _>::with_clock(Quota::per_second(2)?, SketchSize::columns(8)?, 4, ManualClock::new())
    ///     .with_hasher(BuildHasherDefault::<DefaultHasher>::default());
    /// assert!(l.try_acquire(&3).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_hasher<S2>(self, hasher: S2) -> HybridSketchLimiter<K, C, S2> {
        let mut fresh = HybridSketchLimiter::around(
            self.sketch.with_hasher(hasher),
            self.slots.len(),
            self.skew,
        );
        fresh.promote_at = self.promote_at;
        fresh
    }

    /// The same limiter, promoting a key once the sketch's estimate of its count in a window
    /// reaches `units` (clamped to `1..=limit`; three quarters of the limit by default). A low
    /// threshold promotes well-behaved keys too (filling the entries), a high one lets a heavy
    /// key fill its lanes that far in the window it is promoted in.
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, ManualClock, Quota, SketchSize};
    /// let l = HybridSketchLimiter::<u64, _>::with_clock(Quota::per_second(10)?, SketchSize::columns(64)?, 4, ManualClock::new())
    ///     .promote_at(3);
    /// assert_eq!(l.promotion_threshold(), 3);
    /// assert!(l.try_acquire_n(&1, 2).is_allowed());
    /// assert!(!l.is_exact(&1));
    /// assert!(l.try_acquire(&1).is_allowed());
    /// assert!(l.is_exact(&1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn promote_at(mut self, units: u64) -> Self {
        self.promote_at = units.clamp(1, self.sketch.quota.limit());
        self
    }

    /// The estimate at which a key is promoted to an exact entry.
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, Quota, SketchSize};
    /// let l = HybridSketchLimiter::<u8>::new(Quota::per_second(10)?, SketchSize::columns(4)?, 2);
    /// assert_eq!(l.promotion_threshold(), 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn promotion_threshold(&self) -> u64 {
        self.promote_at
    }

    /// The quota every key is limited to.
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, Quota, SketchSize};
    /// let q = Quota::per_second(3)?;
    /// assert_eq!(HybridSketchLimiter::<u8>::new(q, SketchSize::columns(4)?, 2).quota(), q);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.sketch.quota
    }

    /// Exact entries, fixed at construction: as asked, or 0 for a quota too fine for an
    /// entry's word (a period under 7 ns, see the type's documentation).
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, Quota, SketchSize};
    /// assert_eq!(HybridSketchLimiter::<u8>::new(Quota::per_second(3)?, SketchSize::columns(4)?, 32).exact_keys(), 32);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn exact_keys(&self) -> usize {
        self.slots.len()
    }

    /// Bytes of counters, fixed at construction: the sketch's 16 per column and 16 per exact
    /// entry.
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, Quota, SketchSize};
    /// assert_eq!(HybridSketchLimiter::<u8>::new(Quota::per_second(3)?, SketchSize::columns(4)?, 2).bytes(), 96);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn bytes(&self) -> usize {
        self.sketch.bytes() + core::mem::size_of_val(&*self.slots)
    }
}

impl<K, C, S> HybridSketchLimiter<K, C, S>
where
    K: ?Sized,
    C: Clock,
    S: BuildHasher,
{
    /// The sketch's now, clamped to the horizon (where time stands still).
    #[inline]
    fn now(&self) -> u64 {
        self.sketch.origin.now(&self.sketch.clock).min(HORIZON)
    }

    /// The slot of a key whose hash mixed again ([`remix`]) is `mixed`: multiplied by a
    /// constant, so that keys of one column (the high half of `mixed`) fall in different slots.
    #[inline]
    fn slot(&self, mixed: u64) -> Option<&AtomicU128> {
        let spread = mixed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        let i = (spread * self.slots.len() as u64) >> 32;
        self.slots.get(i as usize)
    }

    /// What the slot of `h` holds for `h`.
    #[inline]
    fn find(&self, slot: &AtomicU128, h: u64) -> Found {
        // Relaxed: the slot's own word (see the module's orderings).
        let word = slot.load(Ordering::Relaxed);
        match self.layout.unpack(word) {
            Some(e) if e.tag == h && e.pending => Found::Pending(e),
            Some(e) if e.tag == h => Found::Active(e, word),
            _ => Found::Miss,
        }
    }

    fn len(&self) -> u64 {
        self.sketch.params.len
    }

    fn limit(&self) -> u64 {
        self.sketch.quota.limit()
    }

    /// The exact entry's decision on `n` at `t`, `count` units in the entry's window
    /// `window ≥ t / len`, and whether it admits (with a write of `n`).
    fn judge(&self, count: u64, window: u64, t: u64, n: u64) -> Decision {
        let (len, limit) = (self.len(), self.limit());
        let start = window * len;
        let end = start + len;
        let left = limit.saturating_sub(count);
        let behind = start > t;
        let reset = |c: u64| if c > 0 { end - t } else { 0 };
        if n > limit {
            return Decision::exceeds(if behind { 0 } else { left }, reset(count));
        }
        if behind {
            // An entry in a later window than this reading: denied, as the sketch's column.
            let pass_at = if n <= left { start } else { end };
            return Decision::denied(0, t, pass_at, reset(count));
        }
        if n <= left {
            Decision::allowed(left - n, reset(count + n))
        } else {
            Decision::denied(left, t, end, reset(count))
        }
    }

    /// Asks for one unit for `key`.
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, ManualClock, Quota, SketchSize};
    /// let l = HybridSketchLimiter::<String, _>::with_clock(Quota::per_second(1)?, SketchSize::columns(1024)?, 16, ManualClock::new());
    /// assert!(l.try_acquire("alice").is_allowed());
    /// assert!(!l.try_acquire("alice").is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire<Q>(&self, key: &Q) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.try_acquire_n(key, 1)
    }

    /// Asks for `n` units for `key` at once: all or none. A cost above the limit is denied
    /// with [`Decision::exceeds_capacity`].
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, ManualClock, Quota, SketchSize};
    /// let l = HybridSketchLimiter::<u64, _>::with_clock(Quota::per_second(10)?, SketchSize::columns(1024)?, 16, ManualClock::new());
    /// assert!(l.try_acquire_n(&9, 7).is_allowed());
    /// assert!(!l.try_acquire_n(&9, 4).is_allowed());
    /// assert!(l.try_acquire_n(&9, 3).is_allowed()); // 10 of 10: promoted, charged 10
    /// assert!(l.is_exact(&9));
    /// assert!(!l.try_acquire(&9).is_allowed());
    /// assert!(l.try_acquire_n(&9, 11).exceeds_capacity());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire_n<Q>(&self, key: &Q, n: u64) -> Decision
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

    /// The exact path: `n` against an active entry of window `e.window ≥ t / len`; `Err` when
    /// the slot changed under the compare-exchange.
    #[inline]
    fn exact(
        &self,
        slot: &AtomicU128,
        e: Entry,
        word: u128,
        t: u64,
        n: u64,
    ) -> Result<Decision, ()> {
        let d = self.judge(e.count, e.window, t, n);
        if !d.is_allowed() || n == 0 {
            return Ok(d);
        }
        let new = self.layout.pack(Entry {
            count: e.count + n,
            ..e
        });
        // Relaxed: the slot's modification order orders its admissions, as a fixed window's
        // word; a failure rereads.
        slot.compare_exchange(word, new, Ordering::Relaxed, Ordering::Relaxed)
            .map(|_| d)
            .map_err(|_| ())
    }

    /// After the sketch admitted `n` for `h` in window `w`: the units also go to an entry of
    /// `w` the slot now holds, which must have room for them (else the answer is a denial),
    /// and an entry of a later window denies.
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
                Some(e) if e.window > w => return self.overtaken(e.window, t, &admitted),
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

    /// A sketch admission at `t` that found its slot holding another key's entry of `window`,
    /// later than `t`'s: denied, as by a column in a later window. The reading is older than
    /// the one that entry was made at, and a slot is taken only from an entry whose window
    /// has ended: the key's own entry of `t`'s window may have been taken back since the
    /// reading, with units the sketch never counted. (The sketch keeps this request's units:
    /// an overcount.)
    #[cold]
    fn overtaken(&self, window: u64, t: u64, sketch: &Decision) -> Decision {
        let reset = crate::clock::duration_to_nanos(sketch.reset_after());
        Decision::denied(0, t, window * self.len(), reset)
    }

    /// Claims the slot of `h` for it in window `w` if it is empty or expired, then charges it.
    #[cold]
    fn promote(&self, slot: &AtomicU128, h: u64, w: u64, t: u64, cell: &Cell, lanes: KeyLanes) {
        // Relaxed: the slot's own word.
        let word = slot.load(Ordering::Relaxed);
        if let Some(e) = self.layout.unpack(word) {
            let expired = (e.window + 1)
                .saturating_mul(self.len())
                .saturating_add(self.skew)
                <= t;
            if e.tag == h || !expired {
                return;
            }
        }
        self.claim(slot, word, h, w, t, (cell, lanes));
    }

    /// Claims `slot`, read as `word`, pending for `h` in window `w`, and charges the claim with
    /// the sketch's estimate of `h` at `t` (its column and lanes `at`); nothing if another
    /// request changed the slot first.
    #[cold]
    fn claim(&self, slot: &AtomicU128, word: u128, h: u64, w: u64, t: u64, at: (&Cell, KeyLanes)) {
        let claim = self.layout.pack(Entry {
            tag: h,
            pending: true,
            count: 0,
            window: w,
        });
        // Acquire: the read of the sketch in `charge_estimate` sees every sketch admission
        // whose read-modify-write of the slot came before (see the module's promotion race).
        if slot
            .compare_exchange(word, claim, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            self.charge_estimate(slot, h, w, t, at.0, at.1);
        }
    }

    /// A pending entry of `h` in `w` just claimed: read the sketch's estimate of `h` at `t`
    /// and make the entry active with it (unless the slot moved on, which drops the claim).
    #[cold]
    fn charge_estimate(
        &self,
        slot: &AtomicU128,
        h: u64,
        w: u64,
        t: u64,
        cell: &Cell,
        lanes: KeyLanes,
    ) {
        // Relaxed: after the claim's Acquire (see the module's promotion race).
        let left = cell.peek(&self.sketch.params, t, 0, lanes).remaining();
        let estimate = self.limit() - left.min(self.limit());
        // Relaxed: the slot's own word.
        let mut word = slot.load(Ordering::Relaxed);
        loop {
            let e = match self.layout.unpack(word) {
                Some(e) if e.tag == h && e.pending && e.window == w => e,
                _ => return,
            };
            let active = self.layout.pack(Entry {
                pending: false,
                count: (e.count + estimate).min(self.limit()),
                ..e
            });
            // Relaxed: the slot's own word; a failure rereads.
            match slot.compare_exchange(word, active, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => word = actual,
            }
        }
    }

    /// What [`HybridSketchLimiter::try_acquire_n`] would answer now, counting nothing.
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, ManualClock, Quota, SketchSize};
    /// let l = HybridSketchLimiter::<u64, _>::with_clock(Quota::per_second(3)?, SketchSize::columns(64)?, 8, ManualClock::new());
    /// assert_eq!(l.peek(&1, 1).remaining(), 2);
    /// assert_eq!(l.peek(&1, 1).remaining(), 2); // nothing was counted
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek<Q>(&self, key: &Q, n: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let h = self.sketch.hasher.hash_one(key);
        let mixed = remix(h);
        let (cell, lanes) = self.sketch.at_mixed(mixed);
        let t = self.now();
        let w = t / self.len();
        let sketch = || cell.peek(&self.sketch.params, t, n, lanes);
        let Some(slot) = self.slot(mixed) else {
            return sketch();
        };
        match self.find(slot, h) {
            Found::Active(e, _) if e.window >= w => self.judge(e.count, e.window, t, n),
            Found::Pending(e) if e.window >= w => {
                let d = sketch();
                let x = self.judge(e.count, e.window, t, n);
                if !x.is_allowed() || x.remaining() < d.remaining() {
                    x
                } else {
                    d
                }
            }
            _ => {
                let d = sketch();
                // Relaxed: the slot's own word. As the request's check after its admission.
                let other = self.layout.unpack(slot.load(Ordering::Relaxed));
                match other {
                    Some(e) if d.is_allowed() && n > 0 && e.tag != h && e.window > w => {
                        self.overtaken(e.window, t, &d)
                    }
                    _ => d,
                }
            }
        }
    }

    /// Whether `key` holds an active exact entry (promoted, in its window or until its next
    /// request re-promotes it).
    ///
    /// ```
    /// use tollgate::{HybridSketchLimiter, ManualClock, Quota, SketchSize};
    /// let l = HybridSketchLimiter::<u64, _>::with_clock(Quota::per_second(4)?, SketchSize::columns(64)?, 8, ManualClock::new());
    /// assert!(l.try_acquire_n(&5, 2).is_allowed());
    /// assert!(!l.is_exact(&5));
    /// assert!(l.try_acquire(&5).is_allowed()); // 3 of 4: promoted
    /// assert!(l.is_exact(&5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_exact<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let h = self.sketch.hasher.hash_one(key);
        self.slot(remix(h))
            .is_some_and(|slot| matches!(self.find(slot, h), Found::Active(..)))
    }
}

impl<K: ?Sized, C, S> fmt::Debug for HybridSketchLimiter<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HybridSketchLimiter")
            .field("sketch", &self.sketch)
            .field("exact_keys", &self.slots.len())
            .field("promote_at", &self.promote_at)
            .finish()
    }
}

/// A column or two and one exact entry shared by every key, for the loom models: the real
/// hybrid and its planted defects. Only under `--cfg tollgate_loom`, reached through
/// `tollgate::__loom`.
#[cfg(tollgate_loom)]
pub mod loom_model {
    use core::hash::{BuildHasherDefault, Hasher};
    use core::time::Duration;

    use super::planted::{IgnoresLaterEntry, RelaxedRecheck};
    use super::HybridSketchLimiter;
    use crate::clock::ManualClock;
    use crate::quota::Quota;
    use crate::sketch::SketchSize;

    /// Hashes a `u64` key to itself: the keyed table's models pick their keys' tags.
    #[derive(Debug, Default)]
    pub struct Same(u64);

    impl Hasher for Same {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 = self.0 << 8 | u64::from(b);
            }
        }
        fn write_u64(&mut self, v: u64) {
            self.0 = v;
        }
    }

    /// Hashes a `u64` key to the value the hybrid mixes back into the key (murmur3's
    /// finalizer undone, step by step): the hybrid's models pick their keys' columns and lanes.
    #[derive(Debug, Default)]
    pub struct Placed(Same);

    impl Hasher for Placed {
        fn finish(&self) -> u64 {
            let mut h = self.0.finish();
            h ^= h >> 33;
            h = h.wrapping_mul(0x9cb4_b2f8_1293_37db);
            h ^= h >> 33;
            h = h.wrapping_mul(0x4f74_430c_22a5_4005);
            h ^ (h >> 33)
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.write(bytes);
        }
        fn write_u64(&mut self, v: u64) {
            self.0.write_u64(v);
        }
    }

    /// Which protocol a request runs.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum HybridPlant {
        /// The protocol of `hybrid.rs`.
        Sound,
        /// Defect: a sketch admission reads the slot again by a `Relaxed` load, not the
        /// `Release` read-modify-write.
        RelaxedRecheck,
        /// Defect: a sketch admission stands when its slot holds another key's entry of a
        /// later window than its reading.
        IgnoresLaterEntry,
    }

    /// A hybrid of `columns` columns and one exact entry, `limit` per second, on a manual
    /// clock at 0.
    #[derive(Debug)]
    pub struct HybridModel {
        limiter: HybridSketchLimiter<u64, ManualClock, BuildHasherDefault<Placed>>,
        clock: ManualClock,
    }

    impl HybridModel {
        /// A fresh hybrid of `columns` columns promoting at `promote_at` (through [`Placed`],
        /// key `k` is in column `(k >> 32) * columns >> 32`).
        pub fn new(limit: u64, columns: u64, promote_at: u64) -> Self {
            let quota = Quota::per_second(limit).expect("a small limit");
            let size = SketchSize::columns(columns).expect("a column or two");
            let clock = ManualClock::new();
            let limiter = HybridSketchLimiter::with_clock(quota, size, 1, clock.clone())
                .with_hasher(BuildHasherDefault::<Placed>::default())
                .promote_at(promote_at);
            HybridModel { limiter, clock }
        }

        /// Sets the clock to `at`.
        pub fn set_clock(&self, at: Duration) {
            self.clock.set(at);
        }

        /// One unit for `key`: allowed?
        pub fn acquire(&self, key: u64, plant: HybridPlant) -> bool {
            match plant {
                HybridPlant::Sound => self.limiter.try_acquire_n(&key, 1),
                HybridPlant::RelaxedRecheck => RelaxedRecheck(&self.limiter).try_acquire_n(&key, 1),
                HybridPlant::IgnoresLaterEntry => {
                    IgnoresLaterEntry(&self.limiter).try_acquire_n(&key, 1)
                }
            }
            .is_allowed()
        }

        /// Whether `key` holds the exact entry.
        pub fn is_exact(&self, key: u64) -> bool {
            self.limiter.is_exact(&key)
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_accepted_quota_fits_a_slot() {
        use core::time::Duration;
        // Every seventh period under miri (1, 8, .., 64): the same arithmetic, no memory to check.
        for period in (1..=64u64).step_by(if cfg!(miri) { 7 } else { 1 }) {
            for b in 0..48 {
                for limit in [1u64 << b, (2u64 << b) - 1] {
                    if let Ok(q) = Quota::try_new(limit, Duration::from_nanos(period)) {
                        assert!(period < 7 || fits(&q), "{limit} per {period} ns");
                        let l = HybridSketchLimiter::<u8, _>::with_clock(
                            q,
                            SketchSize::columns(1).unwrap(),
                            4,
                            crate::clock::ManualClock::new(),
                        );
                        assert_eq!(l.exact_keys(), if fits(&q) { 4 } else { 0 });
                    }
                }
            }
        }
        for (limit, period) in [(1, u64::MAX >> 8), (u64::from(u32::MAX), 1 << 40)] {
            let q = Quota::try_new(limit, Duration::from_nanos(period)).unwrap();
            assert!(fits(&q), "{limit} per {period} ns");
        }
    }

    #[test]
    fn an_entry_packs_and_unpacks() {
        let l = Layout { count_bits: 7 };
        let e = Entry {
            tag: u64::MAX,
            pending: true,
            count: 100,
            window: (1 << 55) - 1,
        };
        assert_eq!(l.unpack(l.pack(e)), Some(e));
        assert_eq!(l.unpack(0), None);
        let e = Entry {
            tag: 0,
            pending: false,
            count: 0,
            window: 0,
        };
        assert_eq!(l.unpack(l.pack(e)), Some(e));
    }
}
