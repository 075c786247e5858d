//! Sliding-window counter: `K` slots per period; one head word holds the slot being filled and
//! the whole window's count, so an admission is one load and one compare-exchange.
//!
//! | word              | narrow `u64` bits | wide `u128` bits  | field   | meaning                     |
//! |-------------------|-------------------|-------------------|---------|-----------------------------|
//! | `head`            | `2·cb..=63`       | `64 + cb..=127`   | `epoch` | slot `now / slot_len` filling |
//! |                   | `cb..2·cb`        | `0..=63`          | `older` | slots `epoch-K..epoch` summed |
//! |                   | `0..cb`           | `64..64 + cb`     | `total` | `older` + the head slot's count |
//! | `ring[e % (K+1)]` | `cb..=63` / `0..cb` |                 | `epoch` / `count` | finished slot `e` |
//!
//! `cb = count_bits = bits(limit)`, `slot_len = ceil(period / K)`; the head is narrow when
//! epoch and two counts fit 64 bits, else wide. At slot `cur` the live slots are `cur-K..=cur`.
//!
//! **Invariant.** `total - older` is the head slot's exact count (admissions and refunds
//! change `total` only; a move sets all three fields at once), and `older` is at least what
//! the slots `epoch-K..epoch` hold: the mover that writes the head sums their ring entries,
//! and each entry is at least its slot's final count. So `total` bounds the window, and an
//! admission in the head's slot is `total + n <= limit` and `total += n`, nothing else read.
//! A move (first admission of a later slot) writes the finished slot `(epoch, count)` into
//! the ring with `fetch_max`, before the compare-exchange: the count of the head it replaces
//! is final, losing movers' values are smaller (loaded before admissions) or larger (before a
//! refund, which is then lost), and `fetch_max` keeps the largest, so a delayed loser never
//! lowers an entry. Entries are never subtracted, only summed, so a larger one only
//! over-counts. Denials and moves read the ring; admissions in the head's slot never do.
//!
//! **Orderings.** Head load `Acquire`, pairing with the `Release` of the move that put the
//! head in its slot (admissions and refunds are read-modify-writes continuing its release
//! sequence), so the ring entries it finished are seen; CAS `Release` on success (publishes
//! the ring write before it), `Acquire` on failure (the next decision's load). Ring
//! `fetch_max` and loads `Relaxed`, ordered by the head's `Release`/`Acquire`. Refunds `Relaxed`.
//!
//! # Semantics
//!
//! An admission at `s` in slot `e` counts until slot `e + K + 1` begins, which is at least
//! `period` later: like the exact log, no window of length `period` ever holds more than
//! `limit` admissions, and at most about `period / K` longer than the log would keep it (the
//! one-slot hold). Memory: the head (8 bytes, or 16 when wide) and a ring of `8 × (K + 1)`
//! bytes whatever the limit. No background thread.
//!
//! # Time going backwards
//!
//! A `now` in a slot before the head's counts in the head's slot (a straggler whose clock
//! reads an older slot counts in the head's slot too): time stands still for the limiter until
//! the clock is back, and nothing expires early. A refund whose `now` is in another slot than
//! the head's gives nothing back: only the head's own slot may hold its charge.
//!
//! # The ring form
//!
//! A `Limits` member keeps the head as `(epoch, count)` and sums the ring on every request
//! ([`decide`], [`finished`]): the same decisions, on its own one-word head.

use super::{count_mask, Algo, AlwaysFits, Step};
use crate::decision::Decision;
use crate::quota::{bits, Quota, QuotaError, WindowParams, DEFAULT_SLOTS, HORIZON, MAX_SLOTS};
use crate::sync::{AtomicU128, AtomicU64, Ordering};

#[cfg(not(feature = "std"))]
use alloc::boxed::Box;
#[cfg(not(feature = "std"))]
use alloc::vec::Vec;

/// The head's three fields, unpacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The slot being filled.
    pub epoch: u64,
    /// What the slots `epoch - K .. epoch` held when the head moved to `epoch` (at least).
    pub older: u64,
    /// `older` plus the head slot's count: the window's count while now is in `epoch`.
    pub total: u64,
}

impl Head {
    /// The head slot's own count.
    #[inline(always)]
    pub(crate) fn count(&self) -> u64 {
        // Saturating: `total >= older` holds (refunds give back at most the head's count);
        // this only keeps a broken word from wrapping.
        self.total.saturating_sub(self.older)
    }
}

/// The new head an admission writes, and the finished slot `(ring index, packed word)` to
/// write into the ring first when the head moves past a slot with a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    /// The new head.
    pub head: Head,
    /// `(ring index, epoch << count_bits | count)` of the slot the head leaves.
    pub finished: Option<(usize, u64)>,
}

/// The slot geometry: a window split into `slots` slots of `p.len` ns.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    pub(crate) p: WindowParams,
    pub(crate) slots: u64,
}

impl Geometry {
    /// The geometry of `quota` split into `slots` slots.
    ///
    /// # Errors
    /// [`QuotaError::InvalidSlots`] or [`QuotaError::RateTooHigh`].
    pub fn new(quota: &Quota, slots: u32) -> Result<Geometry, QuotaError> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(QuotaError::InvalidSlots { slots });
        }
        let p = quota.window(slots).ok_or(QuotaError::RateTooHigh {
            limit: quota.limit(),
            period: quota.period(),
        })?;
        Ok(Geometry {
            p,
            slots: u64::from(slots),
        })
    }

    /// Ring entries: one more than the slots, so that no live slot is ever overwritten.
    pub(crate) fn ring_len(&self) -> usize {
        self.slots as usize + 1
    }

    /// Bits of a packed word that hold a count.
    #[inline(always)]
    pub fn count_bits(&self) -> u32 {
        self.p.count_bits
    }

    /// Whether the head's three fields fit one `u64`: the slot number up to the horizon (and
    /// one more) and two counts.
    pub fn narrow(&self) -> bool {
        bits(HORIZON / self.p.len + 1) + 2 * self.p.count_bits <= u64::BITS
    }
}

/// The pure decision on the head `head`; `ring(i)` reads ring entry `i`, and is called only
/// when the head moves to a later slot or the request is not a plain admission in the head's
/// slot. Returns the head to write, if any, and the ring write to make before it.
#[inline(always)]
pub fn decide_head(
    g: &Geometry,
    head: Head,
    ring: impl Fn(usize) -> u64,
    now_ns: u64,
    n: u64,
) -> Step<Move> {
    let p = &g.p;
    // Clamped once, for the slots and the durations alike: past the horizon time stands
    // still, so a counted slot never reads as expired (and a swept key as fresh).
    let now_ns = now_ns.min(HORIZON);
    // The reading is in the head's slot or an earlier one: `now_ns / len <= epoch`, as one
    // multiplication.
    let in_head_slot = now_ns < (head.epoch + 1) * p.len;
    // The fast path: an admission in the head's slot (or a straggler's, whose reading is in
    // an earlier one) reads nothing but the head.
    if in_head_slot && n != 0 && n <= p.limit.saturating_sub(head.total) {
        let remaining = p.limit - head.total - n;
        let reset = ((head.epoch + g.slots + 1) * p.len).saturating_sub(now_ns);
        let head = Head {
            total: head.total + n,
            ..head
        };
        let write = Move {
            head,
            finished: None,
        };
        return (Decision::allowed(remaining, reset), Some(write));
    }
    // A denial in the head's slot that the head's own count decides: what the older slots
    // hold could leave first, but leaves too little while the head slot counts, so the
    // request passes when the head slot leaves the window (what the ring walk would find).
    let count = head.count();
    if in_head_slot && n != 0 && n <= p.limit && count + n > p.limit {
        let end = (head.epoch + g.slots + 1) * p.len;
        let remaining = p.limit.saturating_sub(head.total);
        let reset = end.saturating_sub(now_ns);
        return (Decision::denied(remaining, now_ns, end, reset), None);
    }
    decide_slow(g, head, ring, now_ns, n)
}

/// When a denied request of `n` could pass: slot `e` stops counting when slot `e + k + 1`
/// begins, so the first moment enough of `total` has left, walking the live slots
/// `first..=cur` oldest first (`count_of(e)`: slot `e`'s count). Saturating: a denial may read
/// ring entries that movers are writing concurrently; it decides on a snapshot that may be
/// stale, never unsafe.
#[inline]
fn pass_at(
    p: &WindowParams,
    k: u64,
    first: u64,
    cur: u64,
    total: u64,
    n: u64,
    count_of: impl Fn(u64) -> u64,
) -> u64 {
    let mut left = total;
    for e in first..=cur {
        left = left.saturating_sub(count_of(e));
        if left + n <= p.limit {
            return (e + k + 1) * p.len;
        }
    }
    (cur + 1) * p.len
}

/// [`decide_head`] past its fast path: a move to a later slot, a zero cost, a denial. `now_ns`
/// is clamped.
#[inline(never)]
fn decide_slow(
    g: &Geometry,
    head: Head,
    ring: impl Fn(usize) -> u64,
    now_ns: u64,
    n: u64,
) -> Step<Move> {
    let (p, k) = (&g.p, g.slots);
    let mask = count_mask(p.count_bits);
    let cur = (now_ns / p.len).max(head.epoch);
    let first = cur.saturating_sub(k);
    let ring_len = k + 1;
    let head_count = head.count();
    // Slots after the head's were never filled; those before it are in the ring, final.
    let count_of = |e: u64| -> u64 {
        if e == head.epoch {
            head_count
        } else if e < head.epoch {
            let w = ring((e % ring_len) as usize);
            if w >> p.count_bits == e {
                w & mask
            } else {
                0
            }
        } else {
            0
        }
    };
    // In the head's slot the head's total is the window's count (its `older` was summed from
    // the ring when it moved); past it, the live slots summed now.
    let total: u64 = if cur == head.epoch {
        head.total
    } else {
        (first..=cur.min(head.epoch)).map(count_of).sum()
    };
    let remaining = p.limit.saturating_sub(total);
    // Full capacity returns when the newest counted slot leaves the window.
    let reset = |newest: Option<u64>| match newest {
        Some(e) => ((e + k + 1) * p.len).saturating_sub(now_ns),
        None => 0,
    };
    let newest = || (first..=cur).rev().find(|&e| count_of(e) != 0);
    if n > p.limit {
        return (Decision::exceeds(remaining, reset(newest())), None);
    }
    // `remaining`, not `total + n <= limit`: a live window whose limit was lowered may count
    // more than it, and a zero cost still passes.
    if n <= remaining {
        if n == 0 {
            return (Decision::allowed(remaining, reset(newest())), None);
        }
        // Here `cur > head.epoch` (the fast path took the rest): the head moves to `cur`,
        // carrying the live slots before it, and finishes its slot if that one still counts.
        let finished = (head_count != 0 && head.epoch >= first).then(|| {
            (
                (head.epoch % ring_len) as usize,
                head.epoch << p.count_bits | head_count,
            )
        });
        let write = Move {
            head: Head {
                epoch: cur,
                older: total,
                total: total + n,
            },
            finished,
        };
        return (
            Decision::allowed(remaining - n, reset(Some(cur))),
            Some(write),
        );
    }
    let pass_at = pass_at(p, k, first, cur, total, n, count_of);
    (
        Decision::denied(remaining, now_ns, pass_at, reset(newest())),
        None,
    )
}

/// A refund of `n` on `head` at `now_ns`: the units given back and the new head. Only the head
/// slot's count goes down, and only while `now_ns` reads the head's slot: a head in an earlier
/// slot holds nothing of the charge, and one already in a later slot (another request moved
/// it between the refund's clock reading and this load) counts other admissions only. Pure.
#[inline]
pub(crate) fn refunded(g: &Geometry, head: Head, now_ns: u64, n: u64) -> (u64, Option<Head>) {
    let stale = now_ns.min(HORIZON) / g.p.len != head.epoch;
    let given = if stale { 0 } else { n.min(head.count()) };
    let head = Head {
        total: head.total - given,
        ..head
    };
    (given, (given > 0).then_some(head))
}

/// A head word: a [`Head`] packed into a `u64` or `u128` with `count_bits`-bit counts.
pub trait Packed: Copy + Eq {
    /// The fields of `self`.
    fn unpack(self, count_bits: u32) -> Head;
    /// `head` packed.
    fn pack(head: Head, count_bits: u32) -> Self;
}

impl Packed for u64 {
    #[inline(always)]
    fn unpack(self, cb: u32) -> Head {
        let mask = count_mask(cb);
        Head {
            epoch: self >> (2 * cb),
            older: (self >> cb) & mask,
            total: self & mask,
        }
    }
    #[inline(always)]
    fn pack(h: Head, cb: u32) -> u64 {
        h.epoch << (2 * cb) | h.older << cb | h.total
    }
}

impl Packed for u128 {
    #[inline(always)]
    fn unpack(self, cb: u32) -> Head {
        let hi = (self >> 64) as u64;
        Head {
            epoch: hi >> cb,
            older: self as u64,
            total: hi & count_mask(cb),
        }
    }
    #[inline(always)]
    fn pack(h: Head, cb: u32) -> u128 {
        u128::from(h.epoch << cb | h.total) << 64 | u128::from(h.older)
    }
}

/// The atomic holding a [`Packed`] head.
pub trait HeadAtomic {
    /// The packed head.
    type Word: Packed;
    /// The head, loaded with `order`.
    fn load(&self, order: Ordering) -> Self::Word;
    /// A weak compare-exchange of the head.
    fn cas_weak(
        &self,
        current: Self::Word,
        new: Self::Word,
        success: Ordering,
        failure: Ordering,
    ) -> Result<Self::Word, Self::Word>;
}

/// `HeadAtomic` for an atomic of the word's own width: its load and weak compare-exchange.
macro_rules! head_atomic {
    ($atomic:ty, $word:ty) => {
        impl HeadAtomic for $atomic {
            type Word = $word;
            #[inline(always)]
            fn load(&self, order: Ordering) -> $word {
                // The caller's ordering (see `HeadCell::update`'s callers).
                <$atomic>::load(self, order)
            }
            #[inline(always)]
            fn cas_weak(
                &self,
                c: $word,
                n: $word,
                s: Ordering,
                f: Ordering,
            ) -> Result<$word, $word> {
                // The caller's orderings (see `HeadCell::update`'s callers).
                self.compare_exchange_weak(c, n, s, f)
            }
        }
    };
}
head_atomic!(AtomicU64, u64);
head_atomic!(AtomicU128, u128);

/// The head word, narrow or wide (see the module's layout).
#[derive(Debug)]
pub enum HeadCell {
    /// Epoch and both counts in one `u64`.
    Narrow(AtomicU64),
    /// `(epoch, total)` in the high half, `older` in the low half.
    Wide(AtomicU128),
}

/// The compare-exchange loop on one packed head (as [`super::update`]).
#[inline(always)]
fn update_on<A: HeadAtomic, T>(
    word: &A,
    cb: u32,
    load: Ordering,
    success: Ordering,
    failure: Ordering,
    mut propose: impl FnMut(Head) -> (T, Option<Head>),
) -> (T, Head) {
    // The caller's ordering (see `HeadCell::update`).
    let mut current = word.load(load);
    loop {
        let head = current.unpack(cb);
        let (outcome, write) = propose(head);
        let Some(new) = write else {
            return (outcome, head);
        };
        // The caller's orderings; weak: a spurious failure only loops once more.
        match word.cas_weak(current, A::Word::pack(new, cb), success, failure) {
            Ok(_) => return (outcome, head),
            Err(actual) => current = actual,
        }
    }
}

impl HeadCell {
    /// A fresh head (slot 0, nothing counted) in the form `g` needs.
    fn new(g: &Geometry) -> HeadCell {
        if g.narrow() {
            HeadCell::Narrow(AtomicU64::new(0))
        } else {
            HeadCell::Wide(AtomicU128::new(0))
        }
    }

    /// The one compare-exchange loop on the head: `propose` turns the head into an outcome
    /// and, when the request must write, the new head; a lost race runs it again on the head
    /// that won. Returns the outcome and the head it was proposed on. The orderings are the
    /// caller's, as [`super::update`]'s.
    #[inline(always)]
    pub fn update<T>(
        &self,
        g: &Geometry,
        load: Ordering,
        success: Ordering,
        failure: Ordering,
        propose: impl FnMut(Head) -> (T, Option<Head>),
    ) -> (T, Head) {
        let cb = g.p.count_bits;
        match self {
            HeadCell::Narrow(w) => update_on(w, cb, load, success, failure, propose),
            HeadCell::Wide(w) => update_on(w, cb, load, success, failure, propose),
        }
    }

    /// The head, loaded with `order`.
    #[inline(always)]
    pub fn load(&self, g: &Geometry, order: Ordering) -> Head {
        let cb = g.p.count_bits;
        match self {
            // The caller's ordering.
            HeadCell::Narrow(w) => w.load(order).unpack(cb),
            // The caller's ordering.
            HeadCell::Wide(w) => w.load(order).unpack(cb),
        }
    }
}

/// One request on the head `word` and the ring `ring`: the compare-exchange loop around
/// [`decide_head`], the finished slot written to the ring before the head moves past it.
#[inline(always)]
fn acquire_on<A: HeadAtomic>(
    word: &A,
    ring: &[AtomicU64],
    g: &Geometry,
    now_ns: u64,
    n: u64,
) -> Decision {
    let cb = g.count_bits();
    // Acquire: pairs with the Release of the CAS that moved the head here, so the ring
    // entries of the slots it finished are visible to a move or a denial.
    let mut current = word.load(Ordering::Acquire);
    loop {
        // Relaxed: ordered after the Acquire head load; see the module's orderings.
        let read = |i: usize| ring[i].load(Ordering::Relaxed);
        let (decision, write) = decide_head(g, current.unpack(cb), read, now_ns, n);
        let Some(write) = write else {
            return decision;
        };
        if let Some((i, finished)) = write.finished {
            // Relaxed: published by the Release CAS that follows; fetch_max keeps the
            // largest count if several movers race, so a late loser never lowers it.
            ring[i].fetch_max(finished, Ordering::Relaxed);
        }
        let new = A::Word::pack(write.head, cb);
        // Release on success: publishes the ring write above to whoever sees the new head.
        // Acquire on failure: the returned head is the next one decided on. Weak: a
        // spurious failure only loops once more.
        match word.cas_weak(current, new, Ordering::Release, Ordering::Acquire) {
            Ok(_) => return decision,
            Err(actual) => current = actual,
        }
    }
}

/// One sliding window's atomics: the head and the ring of finished slots.
#[derive(Debug)]
pub struct SlotRing {
    /// The slot being filled and the window's counts.
    pub head: HeadCell,
    /// The last `K + 1` finished slots, `(epoch, count)` each, at `epoch % (K + 1)`.
    pub ring: Box<[AtomicU64]>,
}

/// The sliding-window counter: parameters [`Geometry`], state a [`SlotRing`].
#[derive(Debug)]
pub struct Sliding;

impl super::sealed::Sealed for Sliding {}

impl Algo for Sliding {
    type Params = Geometry;
    type State = SlotRing;

    /// The default geometry: [`DEFAULT_SLOTS`] slots.
    fn params(quota: &Quota) -> Result<Geometry, QuotaError> {
        Geometry::new(quota, DEFAULT_SLOTS)
    }

    fn state(g: &Geometry) -> Result<SlotRing, QuotaError> {
        let ring: Vec<AtomicU64> = (0..g.ring_len()).map(|_| AtomicU64::new(0)).collect();
        Ok(SlotRing {
            head: HeadCell::new(g),
            ring: ring.into_boxed_slice(),
        })
    }

    /// Slots are aligned to the clock's zero: the origin is a multiple of the slot length.
    fn grain(g: &Geometry) -> u64 {
        g.p.len
    }

    /// The compare-exchange loop around [`decide_head`] ([`acquire_on`]) on the head's form.
    #[inline]
    fn acquire(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
        match &s.head {
            HeadCell::Narrow(word) => acquire_on(word, &s.ring, g, now_ns, n),
            HeadCell::Wide(word) => acquire_on(word, &s.ring, g, now_ns, n),
        }
    }

    /// The head and the ring read as `acquire` reads them, and [`decide_head`]; the slot it
    /// would finish is not written.
    #[inline]
    fn peek(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> Decision {
        // Acquire: as in `acquire`, the ring entries of the slots the head finished are seen.
        let head = s.head.load(g, Ordering::Acquire);
        // Relaxed: ordered after the Acquire head load; see the module's orderings.
        let ring = |i: usize| s.ring[i].load(Ordering::Relaxed);
        decide_head(g, head, ring, now_ns, n).0
    }

    /// The head slot's count down by up to `n`, while now is in the head's slot; nothing once
    /// the head slot has ended (its count is final, perhaps already in the ring), nor when the
    /// head is already in a later slot than now (another request moved it between the clock
    /// reading and the load: its count holds none of this charge).
    fn refund(s: &SlotRing, g: &Geometry, now_ns: u64, n: u64) -> u64 {
        // Relaxed load and CAS: the refund publishes nothing, and as a read-modify-write it
        // continues the release sequence of the head's last move. A mover racing it may
        // write the slot's count from before the refund into the ring (`fetch_max` keeps the
        // larger): the refund is then lost, never an admission gained.
        let (given, _) = s.head.update(
            g,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |head| refunded(g, head, now_ns, n),
        );
        given
    }
}

impl AlwaysFits for Sliding {}

/// The writes a ring-form admission makes: the new head, and a finished slot for the ring.
#[cfg(any(feature = "std", test))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Write {
    /// The new head.
    pub(crate) head: u64,
    /// `(ring index, packed word)` when the head moves past a slot with a count.
    pub(crate) finished: Option<(usize, u64)>,
}

/// The ring write an admission that replaces `head` with `new_head` must make first: the
/// finished slot `(ring index, head)` when the head moves to a later slot and the slot it
/// leaves counted something; `None` otherwise. The same as [`decide`]'s `Write::finished`,
/// from the two heads alone (for a caller that keeps only those: a `Limits` member).
#[cfg(feature = "std")]
#[inline(always)]
pub(crate) fn finished(g: &Geometry, head: u64, new_head: u64) -> Option<(usize, u64)> {
    let count_bits = g.p.count_bits;
    let epoch = head >> count_bits;
    let moved = new_head >> count_bits != epoch;
    let counted = head & count_mask(count_bits) != 0;
    (moved && counted).then(|| ((epoch % (g.slots + 1)) as usize, head))
}

/// The pure decision of the ring form: `head` is `(epoch, count)`, `ring(i)` reads ring entry
/// `i`, summed on every request. Returns the writes to make, if any.
#[cfg(any(feature = "std", test))]
#[inline(always)]
pub(crate) fn decide(
    g: &Geometry,
    head: u64,
    ring: impl Fn(usize) -> u64,
    now_ns: u64,
    n: u64,
) -> Step<Write> {
    let (p, k) = (&g.p, g.slots);
    let mask = count_mask(p.count_bits);
    let (head_epoch, head_count) = (head >> p.count_bits, head & mask);
    // Clamped once, for the slots and the durations alike: past the horizon time stands
    // still, so a counted slot never reads as expired (and a swept key as fresh).
    let now_ns = now_ns.min(HORIZON);
    let cur = (now_ns / p.len).max(head_epoch);
    let first = cur.saturating_sub(k);
    let ring_len = k + 1;
    let count_of = |e: u64| -> u64 {
        if e == head_epoch {
            head_count
        } else if e < cur {
            let w = ring((e % ring_len) as usize);
            if w >> p.count_bits == e {
                w & mask
            } else {
                0
            }
        } else {
            0
        }
    };
    let total: u64 = (first..=cur).map(count_of).sum();
    let remaining = p.limit.saturating_sub(total);
    // Full capacity returns when the newest counted slot leaves the window.
    let reset = |newest: Option<u64>| match newest {
        Some(e) => ((e + k + 1) * p.len).saturating_sub(now_ns),
        None => 0,
    };
    let newest = (first..=cur).rev().find(|&e| count_of(e) != 0);
    if n > p.limit {
        return (Decision::exceeds(remaining, reset(newest)), None);
    }
    // `remaining`, not `total + n <= limit`: a live window whose limit was lowered may count
    // more than it, and a zero cost still passes.
    if n <= remaining {
        if n == 0 {
            return (Decision::allowed(remaining, reset(newest)), None);
        }
        let (count, finished) = if head_epoch == cur {
            (head_count + n, None)
        } else {
            let finished = (head_count != 0).then(|| ((head_epoch % ring_len) as usize, head));
            (n, finished)
        };
        let write = Write {
            head: cur << p.count_bits | count,
            finished,
        };
        return (
            Decision::allowed(remaining - n, reset(Some(cur))),
            Some(write),
        );
    }
    let pass_at = pass_at(p, k, first, cur, total, n, count_of);
    (
        Decision::denied(remaining, now_ns, pass_at, reset(newest)),
        None,
    )
}

#[cfg(test)]
#[path = "sliding_window_tests.rs"]
mod tests;
