//! A keyed limiter of fixed memory: columns of atomic counters instead of a map of keys.
//!
//! # State
//!
//! | part      | what                                                                    |
//! |-----------|-------------------------------------------------------------------------|
//! | `cells`   | `columns` words of 16 bytes (`cell.rs`: window number + lanes)          |
//! | `pairs`   | the lane pairs a key may count in, `C(lanes, 2)` entries, read only    |
//! | `hasher`  | seeded per limiter ([`KeyHasher`]): a client cannot aim at a column   |
//!
//! A key's 64-bit hash is mixed again (murmur3's finalizer), then split: its high 32 bits pick
//! the column (multiply-shift), its low 32 bits the lane pair. Nothing is allocated after
//! construction; nothing is swept or evicted; a request reads the clock once and touches one
//! word.
//!
//! # Invariant
//!
//! Every lane of a key counts at least the key's admissions in the lane's window, so the
//! key's minimum lane overestimates its count: it never admits more in a window than the
//! limit (see `cell.rs` for the proof and the conservative update). On one stream of
//! requests it admits no more units per key in total than a
//! [`KeyedLimiter`](crate::KeyedLimiter) with the same quota (a key's room only shrinks
//! within a window as other keys write into its lanes, and a greedy count with a smaller,
//! shrinking room never takes more than one with the full room: by induction over the
//! requests). Its errors are false denials only.
//!
//! # Orderings
//!
//! One `Relaxed` compare-exchange on one column word per admission, one `Relaxed` load per
//! denial (see `cell.rs`). The lane pairs and parameters are written before the limiter is
//! shared.

mod cell;
mod hybrid;
#[cfg(tollgate_loom)]
pub(crate) use hybrid::loom_model as hybrid_loom;
mod size;

use core::borrow::Borrow;
use core::fmt;
use core::hash::{BuildHasher, Hash};
use core::marker::PhantomData;

use crate::clock::{Clock, MonotonicClock, Origin};
use crate::decision::Decision;
use crate::keyed::{remix, KeyHasher};
use crate::quota::{Quota, QuotaError};

use cell::{Cell, CellParams, KeyLanes};
pub use hybrid::HybridSketchLimiter;
pub use size::{SizeError, SketchSize, MAX_COLUMNS};

/// The fixed window's packing for `quota` (always exists: a limit is at most 2^48 - 1).
pub(crate) fn fixed_params(quota: &Quota) -> CellParams {
    CellParams::new(quota.period_ns(), quota.limit(), false)
        .expect("a limit of at most 48 bits packs one lane")
}

/// A keyed rate limiter of fixed memory: `limit` per key per window, counted in a sketch of
/// atomic counters shared by all keys, so that a flood of new keys allocates nothing and
/// evicts nothing.
///
/// Each key hashes (with a per-limiter random seed) to one column of 16 bytes and two of its
/// up to eight lanes; a key's count is the smaller of its two lanes, which other keys can
/// only raise. So the sketch **never admits more** for a key than an exact
/// [`KeyedLimiter`](crate::KeyedLimiter) of the same quota (fixed window) would: its only
/// error is a *false denial*, when other keys have filled both lanes of a key. (With a clock
/// that steps back the two part ways: the exact map counts a request behind the key's window
/// in that later window, the sketch denies it; a request after the clock is back may then
/// pass the sketch and not the exact map. Every admission still fits the key's own limit per
/// window.) Its
/// [`Decision`]s are never optimistic against the key's own count: `remaining` is at most
/// what an exact limiter charged with the key's admissions would have left, `retry_after`
/// and `reset_after` at least its.
///
/// Two forms:
/// - fixed window ([`SketchLimiter::new`]): `limit` per window `[k·period, (k+1)·period)`;
/// - two-window weighted ([`SketchLimiter::try_sliding`]): a key's count is its count in
///   this window plus its count in the last one weighted by the part of that window still
///   within a period; at most `limit` per fixed window as well.
///
/// Memory is [`SketchSize::bytes`], fixed at construction; size it with
/// [`SketchSize::for_load`] for the false denials you accept. There is no token-bucket
/// form: a bucket's level is not a count that other keys' traffic can only raise (it
/// refills by time since the key's own last request), so an overestimate of it cannot be
/// kept by shared counters.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Quota, SketchLimiter, SketchSize};
///
/// let clock = ManualClock::new();
/// let quota = Quota::per_second(5)?;
/// let per_ip = SketchLimiter::<str, _>::with_clock(quota, SketchSize::columns(1 << 16)?, clock.clone());
/// let passed = (0..8).filter(|_| per_ip.try_acquire("10.0.0.1").is_allowed()).count();
/// assert_eq!(passed, 5); // with no collision, the sketch answers as the exact map
/// let denied = per_ip.try_acquire("10.0.0.1");
/// assert_eq!(denied.retry_after(), Some(Duration::from_secs(1)));
/// assert_eq!(per_ip.bytes(), 16 << 16); // 1 MiB, for any number of keys
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SketchLimiter<K: ?Sized, C = MonotonicClock, S = KeyHasher> {
    cells: Box<[Cell]>,
    params: CellParams,
    pairs: Box<[KeyLanes]>,
    quota: Quota,
    hasher: S,
    clock: C,
    /// Where the sketch's time starts: its first reading, aligned down to its window length
    /// (windows stay aligned to the clock's zero, and its horizon runs from its start).
    origin: Origin,
    _key: PhantomData<fn(&K)>,
}

impl<K: ?Sized> SketchLimiter<K> {
    /// A fixed-window sketch of `size` on the default [`MonotonicClock`].
    ///
    /// ```
    /// use tollgate::{Quota, SketchLimiter, SketchSize};
    /// let per_key = SketchLimiter::<u64>::new(Quota::per_second(100)?, SketchSize::for_load(1_000_000, 50, 0.01)?);
    /// assert!(per_key.try_acquire(&7).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(quota: Quota, size: SketchSize) -> Self {
        SketchLimiter::with_clock(quota, size, MonotonicClock::new())
    }

    /// A two-window weighted sketch of `size` on the default [`MonotonicClock`].
    ///
    /// # Errors
    /// [`QuotaError::LimitTooLarge`] for a limit of `2^32` or more (two windows of it do not
    /// share one lane pair).
    ///
    /// ```
    /// use tollgate::{Quota, SketchLimiter, SketchSize};
    /// let per_key = SketchLimiter::<u64>::try_sliding(Quota::per_second(100)?, SketchSize::columns(1024)?)?;
    /// assert!(per_key.is_sliding());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_sliding(quota: Quota, size: SketchSize) -> Result<Self, QuotaError> {
        SketchLimiter::try_sliding_with_clock(quota, size, MonotonicClock::new())
    }
}

impl<K: ?Sized, C: Clock> SketchLimiter<K, C> {
    /// A fixed-window sketch of `size` reading time from `clock`.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, SketchLimiter, SketchSize};
    /// let l = SketchLimiter::<u32, _>::with_clock(Quota::per_second(1)?, SketchSize::columns(64)?, ManualClock::new());
    /// assert!(l.try_acquire(&1).is_allowed());
    /// assert!(!l.try_acquire(&1).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(quota: Quota, size: SketchSize, clock: C) -> Self {
        SketchLimiter::from_params(
            quota,
            fixed_params(&quota),
            size,
            clock,
            KeyHasher::default(),
        )
    }

    /// A two-window weighted sketch of `size` reading time from `clock`.
    ///
    /// # Errors
    /// As [`SketchLimiter::try_sliding`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, SketchLimiter, SketchSize};
    /// let clock = ManualClock::new();
    /// let l = SketchLimiter::<u32, _>::try_sliding_with_clock(Quota::per_second(10)?, SketchSize::columns(64)?, clock.clone())?;
    /// assert!(l.try_acquire_n(&1, 10).is_allowed());
    /// clock.set(Duration::from_millis(1_500)); // half of the last window still counts: 5
    /// assert!(l.try_acquire_n(&1, 5).is_allowed());
    /// assert!(!l.try_acquire(&1).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_sliding_with_clock(
        quota: Quota,
        size: SketchSize,
        clock: C,
    ) -> Result<Self, QuotaError> {
        let params = CellParams::new(quota.period_ns(), quota.limit(), true).ok_or(
            QuotaError::LimitTooLarge {
                limit: quota.limit(),
                max: u64::from(u32::MAX),
            },
        )?;
        Ok(SketchLimiter::from_params(
            quota,
            params,
            size,
            clock,
            KeyHasher::default(),
        ))
    }
}

impl<K: ?Sized, C, S> SketchLimiter<K, C, S> {
    fn from_params(quota: Quota, params: CellParams, size: SketchSize, clock: C, hasher: S) -> Self
    where
        C: Clock,
    {
        let origin = Origin::of(&clock, params.len);
        let columns = size.for_params(&params);
        let cells = (0..columns).map(|_| Cell::new()).collect();
        let lanes = params.lanes as u8;
        let pairs = if params.lanes_per_key() == 1 {
            (0..lanes).map(|i| KeyLanes(i, i)).collect()
        } else {
            (0..lanes)
                .flat_map(|a| (a + 1..lanes).map(move |b| KeyLanes(a, b)))
                .collect()
        };
        SketchLimiter {
            cells,
            params,
            pairs,
            quota,
            hasher,
            clock,
            origin,
            _key: PhantomData,
        }
    }

    /// The same limiter, fresh (nothing counted), hashing keys with `hasher` instead of the
    /// randomly seeded [`KeyHasher`]. A hasher whose seed clients can learn lets them aim
    /// at a key's column and deny it: keep the default unless you must reproduce a run.
    ///
    /// ```
    /// use std::hash::BuildHasherDefault;
    /// use std::collections::hash_map::DefaultHasher;
    /// use tollgate::{ManualClock, Quota, SketchLimiter, SketchSize};
    /// let l = SketchLimiter::<u64, _>::with_clock(Quota::per_second(2)?, SketchSize::columns(8)?, ManualClock::new())
    ///     .with_hasher(BuildHasherDefault::<DefaultHasher>::default());
    /// assert!(l.try_acquire(&3).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_hasher<S2>(self, hasher: S2) -> SketchLimiter<K, C, S2> {
        SketchLimiter {
            cells: (0..self.cells.len()).map(|_| Cell::new()).collect(),
            params: self.params,
            pairs: self.pairs,
            quota: self.quota,
            hasher,
            clock: self.clock,
            origin: self.origin,
            _key: PhantomData,
        }
    }

    /// The quota every key is limited to.
    ///
    /// ```
    /// use tollgate::{Quota, SketchLimiter, SketchSize};
    /// let q = Quota::per_second(3)?;
    /// assert_eq!(SketchLimiter::<u8>::new(q, SketchSize::columns(4)?).quota(), q);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Columns of the sketch.
    ///
    /// ```
    /// use tollgate::{Quota, SketchLimiter, SketchSize};
    /// assert_eq!(SketchLimiter::<u8>::new(Quota::per_second(3)?, SketchSize::columns(4)?).columns(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn columns(&self) -> usize {
        self.cells.len()
    }

    /// Bytes of counters, fixed at construction: 16 per column.
    ///
    /// ```
    /// use tollgate::{Quota, SketchLimiter, SketchSize};
    /// assert_eq!(SketchLimiter::<u8>::new(Quota::per_second(3)?, SketchSize::columns(4)?).bytes(), 64);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn bytes(&self) -> usize {
        core::mem::size_of_val(&*self.cells)
    }

    /// Whether this is the two-window weighted form.
    ///
    /// ```
    /// use tollgate::{Quota, SketchLimiter, SketchSize};
    /// assert!(!SketchLimiter::<u8>::new(Quota::per_second(3)?, SketchSize::columns(4)?).is_sliding());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_sliding(&self) -> bool {
        self.params.sliding
    }
}

impl<K, C, S> SketchLimiter<K, C, S>
where
    K: ?Sized,
    C: Clock,
    S: BuildHasher,
{
    /// The column and lanes of `key`: its hash mixed again, whose high half picks the column,
    /// its low half the lane pair.
    #[inline]
    fn locate<Q: Hash + ?Sized>(&self, key: &Q) -> (&Cell, KeyLanes) {
        self.at_mixed(remix(self.hasher.hash_one(key)))
    }

    /// The column and lanes of a key whose hash mixed again ([`remix`]) is `h` (see
    /// [`SketchLimiter::locate`]): a fast hasher's bits can keep a pattern for keys in
    /// sequence, which read directly would crowd them into a few columns.
    #[inline]
    fn at_mixed(&self, h: u64) -> (&Cell, KeyLanes) {
        let column = ((h >> 32) * self.cells.len() as u64) >> 32;
        let pair = (u64::from(h as u32) * self.pairs.len() as u64) >> 32;
        (&self.cells[column as usize], self.pairs[pair as usize])
    }

    /// Asks for one unit for `key`.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, SketchLimiter, SketchSize};
    /// let l = SketchLimiter::<String, _>::with_clock(Quota::per_second(1)?, SketchSize::columns(1024)?, ManualClock::new());
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
    /// use tollgate::{ManualClock, Quota, SketchLimiter, SketchSize};
    /// let l = SketchLimiter::<u64, _>::with_clock(Quota::per_second(10)?, SketchSize::columns(1024)?, ManualClock::new());
    /// assert!(l.try_acquire_n(&9, 7).is_allowed());
    /// assert!(!l.try_acquire_n(&9, 4).is_allowed());
    /// assert!(l.try_acquire_n(&9, 11).exceeds_capacity());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_n<Q>(&self, key: &Q, n: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let (cell, lanes) = self.locate(key);
        cell.acquire(&self.params, self.origin.now(&self.clock), n, lanes)
    }

    /// What [`SketchLimiter::try_acquire_n`] would answer now, counting nothing.
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, SketchLimiter, SketchSize};
    /// let l = SketchLimiter::<u64, _>::with_clock(Quota::per_second(3)?, SketchSize::columns(64)?, ManualClock::new());
    /// assert_eq!(l.peek(&1, 1).remaining(), 2);
    /// assert_eq!(l.peek(&1, 1).remaining(), 2); // nothing was counted
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn peek<Q>(&self, key: &Q, n: u64) -> Decision
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let (cell, lanes) = self.locate(key);
        cell.peek(&self.params, self.origin.now(&self.clock), n, lanes)
    }
}

impl<K: ?Sized, C, S> fmt::Debug for SketchLimiter<K, C, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SketchLimiter")
            .field("quota", &self.quota)
            .field("columns", &self.cells.len())
            .field("lanes", &self.params.lanes)
            .field("sliding", &self.params.sliding)
            .finish()
    }
}

/// One column shared by two keys, for the loom models.
#[cfg(tollgate_loom)]
pub(crate) mod loom_model;
