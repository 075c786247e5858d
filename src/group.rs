//! Several limits at once, all or nothing: [`Limits`] admits a request only if every
//! [`Member`] admits it, then charges every member; a denial charges none.
//!
//! | member state (the word: one `AtomicU64` per member, own cache line)          | as in           |
//! |------------------------------------------------------------------------------|-----------------|
//! | token bucket: word `tat`, theoretical arrival time in ticks                  | `TokenBucket`   |
//! | fixed window: word `window << count_bits \| count`                           | `FixedWindow`   |
//! | sliding window: word = head `slot << count_bits \| count` (the slot filling)  | `SlidingWindow` |
//! | sliding window: ring of `K + 1` words `slot << count_bits \| count`, finished | `SlidingWindow` |
//!
//! Invariant: every member's state is, at every instant, the state its own algorithm would
//! hold after the admissions the group reported (plus the in-flight reservations of checks
//! that have not returned), or one that counts more (a rollback that could not give its units
//! back): a member never admits more than its quota, whatever the interleaving.
//! Orderings: member loads `Relaxed`, except a sliding member's head and a rollback's
//! (`Acquire`); charges and rollbacks `Release` on success, charges `Acquire` on failure; a
//! sliding member's ring written `Relaxed` (`fetch_max`) before its head's `Release`
//! compare-exchange and read `Relaxed` after its `Acquire` load, as in `SlidingWindow`; why
//! each suffices is at each operation.
//!
//! # One check
//!
//! 1. Read the group's clock once.
//! 2. Peek: load every member's word (a sliding member's ring too) and decide on it with the
//!    algorithm's pure `decide`. Any denial ends the check here: nothing was written, and the
//!    decision is the most restrictive member's. Denials stay read-only, as for a single
//!    limiter.
//! 3. Charge, in member order: a compare-exchange from the peeked word to the decided one (a
//!    sliding member whose head moves to a new slot first writes the slot it leaves to its
//!    ring, as its own algorithm does). If it fails (another thread moved the member), decide
//!    again on the word it found; if the member now denies, roll back the members already
//!    charged and return its denial.
//!
//! Every thread charges members in the same order, so at a frozen instant the group admits
//! exactly what a serial run would: a reservation that is rolled back was made by a thread
//! that a later member denied, and that member stays exhausted for everyone at that instant.
//! Only the admissions are serializable: while a reservation that will be rolled back is in
//! flight, another check may report that member's `remaining` as if it were kept (less than
//! a serial run would say, never more).
//!
//! # Rollback: a token is never handed out twice
//!
//! - Fixed window: the receipt is the window the charge was counted in. The rollback
//!   subtracts its units only while the word is still in that window; once the window has
//!   moved on, the charge belongs to a finished window that no decision reads again, and the
//!   rollback does nothing. Exact in every interleaving.
//! - Sliding window: the receipt is the head's slot the charge was counted in (the slot of
//!   the head it wrote). The rollback subtracts its units from the head's count only while
//!   the head is still in that slot. Once the head has moved on, the slot's count, this
//!   charge included, is in the ring (the mover wrote it before moving the head), and
//!   decisions keep reading it until the slot leaves the window: subtracting from the head
//!   then would take back another admission's unit, and the charge would be counted once
//!   and handed out twice. So it gives nothing back (at most `n` units lost, never one
//!   gained). A mover racing the rollback may already hold the count from before it and
//!   write that into the ring (`fetch_max` keeps the larger): the rollback is then lost
//!   too, the same conservative way. At a frozen instant every charge is counted in the one
//!   slot the head reaches and the head stays there, so every rollback is exact.
//! - Token bucket: the charge's span is `[wrote − n × interval, wrote]` on the `tat` axis.
//!   The rollback gives back only what the word still owes to it: the part of that span
//!   still ahead of the rollback's clock reading, never below that reading. A check that
//!   charged after it read the clock no later (the rollback's `Acquire` load sees that
//!   charge with its reading), so it built on at most that part; the part before it had
//!   refilled, and without this charge that check would have started from its own reading.
//!   Giving back the whole `n × interval` would hand the refilled part out twice (1 per
//!   second, burst 2: a charge at 0 s, another at 0.9 s building on it, the first rolled back
//!   to a `tat` of 1 s instead of 1.9 s, then two more at 1.0 s: three in 0.1 s). At a frozen
//!   instant the whole span is ahead of the reading, and the rollback is exact; once the
//!   clock is past `wrote` it gives nothing back. This second clock read happens only on
//!   this race path. A reading on this thread may be up to the clock's `max_skew_nanos`
//!   earlier than one it has seen a charge of (0 for the manual and coarse clocks, 8 µs for
//!   the monotonic clock), so the rollback judges at its reading plus that margin: it may
//!   keep up to that much of its charge, never give back a refilled part.
//!
//! # Time
//!
//! Each member counts from its own origin (see [`Member`]), copied into every group over it:
//! a check reads the clock once and decides member `i` at that reading less its origin.
//!
//! The loom model `loom-tests/tests/group.rs` checks all three under racing checks, and
//! catches three planted rollbacks (a bucket's that restores the replaced word even when
//! others wrote after it, a bucket's that subtracts its whole charge while its clock is before
//! the charge's `tat`, a sliding member's that subtracts from the head whatever its slot) and
//! a sliding head peeked `Relaxed`.

use core::fmt;
use std::sync::Arc;
use std::vec::Vec;

use crossbeam_utils::CachePadded;

use crate::algo::sliding_window::{self, Geometry};
use crate::algo::{count_mask, fixed_window, token_bucket};
use crate::clock::{Clock, Origin, Since};
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::quota::{GcraParams, Quota, QuotaError, WindowParams, DEFAULT_SLOTS, HORIZON};
use crate::sync::{AtomicU64, Ordering};

/// The most members a group may have: the check keeps its per-member state on the stack.
pub const MAX_MEMBERS: usize = 8;

#[derive(Clone, Copy, Debug)]
enum Rule {
    Bucket(GcraParams),
    Window(WindowParams),
    Sliding(Geometry),
}

/// One limit of a [`Limits`] group: a token bucket, a fixed window or a sliding window,
/// without a clock (the group reads one clock for all its members).
///
/// Share a member between groups with an `Arc` (a global limit that every client's group
/// includes); every group that shares a member must read clones of one clock. A member counts
/// time from its own origin: the clock's reading when the first group over it was made,
/// aligned down to its window (slot) length, so that windows stay aligned to the clock's zero;
/// later groups over it count from the same origin.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::{Limiter, Limits, ManualClock, Member, Quota};
/// let global = Arc::new(Member::token_bucket(Quota::per_second(100)?));
/// let clock = ManualClock::new();
/// let alice = Limits::new(clock.clone(), [Arc::new(Member::token_bucket(Quota::per_second(5)?)), global.clone()])?;
/// let bob = Limits::new(clock.clone(), [Arc::new(Member::token_bucket(Quota::per_second(5)?)), global])?;
/// assert!(alice.try_acquire().is_allowed() && bob.try_acquire().is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Member {
    /// The member's word: a bucket's `tat`, a window's `(window, count)`, a sliding window's
    /// head `(slot, count)`.
    word: CachePadded<AtomicU64>,
    /// A sliding window's finished slots, `(slot, count)` at `slot % (K + 1)`; empty for the
    /// other members.
    ring: Box<[AtomicU64]>,
    rule: Rule,
    /// Where the member's time starts: the clock reading of the first group made over it,
    /// aligned to its window (slot) length; [`UNSET`] until then. Set once (a
    /// compare-exchange), then only read, by each group's constructor.
    origin: AtomicU64,
}

/// A member's `origin` before any group was made over it.
const UNSET: u64 = u64::MAX;

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("rule", &self.rule)
            // Relaxed: a diagnostic read.
            .field("word", &self.word.load(Ordering::Relaxed))
            .field("ring", &self.ring)
            .finish()
    }
}

impl Member {
    /// A GCRA token bucket, as [`TokenBucket`](crate::TokenBucket): bursts up to the quota's
    /// burst, then `limit / period`.
    ///
    /// ```
    /// let m = tollgate::Member::token_bucket(tollgate::Quota::per_second(10)?);
    /// # let _ = m;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn token_bucket(quota: Quota) -> Member {
        let params = quota.gcra().expect("a validated quota has GCRA parameters");
        Member::with_rule(Rule::Bucket(params))
    }

    /// A fixed window, as [`FixedWindow`](crate::FixedWindow): `limit` per window
    /// `[k·period, (k+1)·period)` from the clock's zero.
    ///
    /// ```
    /// let m = tollgate::Member::fixed_window(tollgate::Quota::per_minute(600)?);
    /// # let _ = m;
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn fixed_window(quota: Quota) -> Member {
        let params = quota
            .window(1)
            .expect("a validated quota fits a fixed window");
        Member::with_rule(Rule::Window(params))
    }

    /// A sliding-window counter, as [`SlidingWindow`](crate::SlidingWindow): `limit` per any
    /// window of length `period`, counted in [`DEFAULT_SLOTS`](crate::DEFAULT_SLOTS) slots.
    /// Every validated quota fits.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Limits, ManualClock, Member, Quota};
    /// let clock = ManualClock::new();
    /// let g = Limits::new(clock.clone(), [Arc::new(Member::sliding_window(Quota::per_second(4)?))])?;
    /// clock.set(Duration::from_millis(900));
    /// assert_eq!((0..6).filter(|_| g.try_acquire().is_allowed()).count(), 4);
    /// clock.set(Duration::from_millis(1_100)); // a fixed window would be empty again
    /// assert!(!g.try_acquire().is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn sliding_window(quota: Quota) -> Member {
        Member::try_sliding_window_with_slots(quota, DEFAULT_SLOTS)
            .expect("a validated quota fits a sliding window of the default slots")
    }

    /// A sliding-window counter of `slots` slots (1 to 4096), as
    /// [`SlidingWindow::try_with_slots`](crate::SlidingWindow::try_with_slots).
    ///
    /// # Errors
    /// [`QuotaError::InvalidSlots`] outside `1..=4096`; [`QuotaError::RateTooHigh`] if the
    /// slots are too short for the counter and slot number to share a word.
    ///
    /// ```
    /// use tollgate::{Member, Quota, QuotaError};
    /// let m = Member::try_sliding_window_with_slots(Quota::per_minute(60)?, 60)?;
    /// # let _ = m;
    /// assert!(matches!(
    ///     Member::try_sliding_window_with_slots(Quota::per_minute(60)?, 0),
    ///     Err(QuotaError::InvalidSlots { slots: 0 })
    /// ));
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn try_sliding_window_with_slots(quota: Quota, slots: u32) -> Result<Member, QuotaError> {
        let g = Geometry::new(&quota, slots)?;
        Ok(Member {
            word: CachePadded::new(AtomicU64::new(0)),
            ring: (0..g.ring_len()).map(|_| AtomicU64::new(0)).collect(),
            rule: Rule::Sliding(g),
            origin: AtomicU64::new(UNSET),
        })
    }

    fn with_rule(rule: Rule) -> Member {
        Member {
            word: CachePadded::new(AtomicU64::new(0)),
            ring: Box::default(),
            rule,
            origin: AtomicU64::new(UNSET),
        }
    }

    /// The member's origin: the one the first group over it set, else `reading` (the new
    /// group's clock now) aligned to the member's window or slot length, which it sets.
    fn origin_at(&self, reading: u64) -> Origin {
        let grain = match &self.rule {
            Rule::Bucket(_) => 1,
            Rule::Window(p) => p.len,
            Rule::Sliding(g) => g.p.len,
        };
        // Below `UNSET`: a clock that reads `u64::MAX` starts one ns earlier.
        let mine = Origin::at(reading, grain).nanos().min(UNSET - 1);
        // Relaxed (both): the origin is one value, set once; a racing constructor reads the
        // winner's value from the failed compare-exchange. The member's word is not read here.
        let set =
            match self
                .origin
                .compare_exchange(UNSET, mine, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => mine,
                Err(theirs) => theirs,
            };
        Origin::at(set, 1)
    }

    /// The member's word, for a decision on it.
    #[inline]
    fn load(&self, plant: Plant) -> u64 {
        match self.rule {
            // Acquire: pairs with the `Release` of the head compare-exchange that moved the head
            // to its slot (every later charge, rollback or refund is a read-modify-write that
            // continues its release sequence), so `decide` sees the ring entries it finished.
            Rule::Sliding(_) if plant != Plant::RelaxedSlidingHead => {
                self.word.load(Ordering::Acquire)
            }
            // Relaxed: a stale word only makes the charge's compare-exchange fail, or denies on
            // a state the member really had.
            _ => self.word.load(Ordering::Relaxed),
        }
    }

    /// The algorithm's pure decision on `word` (for a sliding member, `word` is its head,
    /// loaded `Acquire`, and the ring is read here).
    #[inline]
    fn decide(&self, word: u64, now_ns: u64, n: u64) -> crate::algo::Step {
        match &self.rule {
            Rule::Bucket(p) => token_bucket::decide(p, word, now_ns, n),
            Rule::Window(p) => fixed_window::decide(p, word, now_ns, n),
            Rule::Sliding(g) => self.decide_sliding(g, word, now_ns, n),
        }
    }

    /// A sliding member's decision on its head `head` and its ring. Kept out of
    /// [`Member::decide`], so that the one-word members' decisions stay as small as before.
    #[inline(never)]
    fn decide_sliding(&self, g: &Geometry, head: u64, now_ns: u64, n: u64) -> crate::algo::Step {
        // Relaxed: after the `Acquire` load of the head (see `Member::load`), as the sliding
        // window's own ring loads.
        let ring = |i: usize| self.ring[i].load(Ordering::Relaxed);
        let (d, write) = sliding_window::decide(g, head, ring, now_ns, n);
        (d, write.map(|w| w.head))
    }

    /// A sliding member's ring write before its head moves from `head` to `new_head`: the slot
    /// it leaves, final before any thread can see a head past it. Nothing for the others.
    #[inline]
    fn finish_slot(&self, head: u64, new_head: u64) {
        if let Rule::Sliding(g) = &self.rule {
            if let Some((i, word)) = sliding_window::finished(g, head, new_head) {
                // Relaxed: published by the `Release` head compare-exchange that follows;
                // `fetch_max` keeps the largest count if several movers race.
                self.ring[i].fetch_max(word, Ordering::Relaxed);
            }
        }
    }

    /// Gives back up to `n` units at `now_ns`, as the member's algorithm does (see
    /// [`Limiter::refund`]); the units given back.
    fn refund(&self, now_ns: u64, n: u64) -> u64 {
        // Relaxed: a stale word only makes the compare-exchange below fail.
        let mut cur = self.word.load(Ordering::Relaxed);
        loop {
            let (given, new) = match &self.rule {
                Rule::Bucket(p) => {
                    let now = now_ns.min(HORIZON) * u64::from(p.scale);
                    token_bucket::refunded(p, cur, now, n)
                }
                Rule::Window(p) => fixed_window::refunded(p, cur, now_ns, n),
                // As the sliding window's refund: the head slot's count, while now is in it.
                Rule::Sliding(g) => fixed_window::refunded(&g.p, cur, now_ns, n),
            };
            let Some(new) = new else {
                return given;
            };
            // Release: as a rollback (see `Member::roll_back`). Relaxed load and failure: a
            // stale word only makes this compare-exchange fail.
            match self
                .word
                .compare_exchange_weak(cur, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return given,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Undoes a charge of `n` that replaced `replaced` with `wrote` (see the module docs).
    fn roll_back<C: Clock>(&self, clock: &C, replaced: u64, wrote: u64, n: u64, plant: Plant) {
        // Acquire: pairs with the `Release` of every charge and rollback, so that the clock
        // reading below is at least as late as that of every bucket charge it sees.
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            let new = match &self.rule {
                // The window moved on: the charge is in a finished window.
                Rule::Window(p) => match given_back_in_slot(cur, wrote, p.count_bits, n, false) {
                    Some(new) => new,
                    None => return,
                },
                // The head moved on: the charge is in a finished slot (in the ring, or about to
                // be); giving it back from the head would hand it out twice.
                Rule::Sliding(g) => {
                    let any_slot = plant == Plant::AnySlotRollback;
                    match given_back_in_slot(cur, wrote, g.p.count_bits, n, any_slot) {
                        Some(new) => new,
                        None => return,
                    }
                }
                Rule::Bucket(_) if plant == Plant::StoreRollback => replaced,
                // The planted defect (the loom models' only): the whole charge back while the
                // clock reads before its `tat`.
                Rule::Bucket(p) if plant == Plant::WholeChargeBeforeTat => {
                    let now = clock.now_nanos().min(HORIZON) * u64::from(p.scale);
                    if now >= wrote {
                        return;
                    }
                    cur.saturating_sub(n * p.interval)
                }
                Rule::Bucket(p) => {
                    // Judged at the reading plus the clock's cross-thread skew: a charge this
                    // load sees may have read up to that much later than this reading.
                    let at = clock.now_nanos().saturating_add(clock.max_skew_nanos());
                    let now = at.min(HORIZON) * u64::from(p.scale);
                    // What the word still owes to this charge: the part of its span
                    // `[wrote − n·interval, wrote]` still ahead of now (a charge after it
                    // read no later than now, and built on at most that much of it).
                    let owed = wrote.saturating_sub(now.max(wrote - n * p.interval));
                    if owed == 0 || cur <= now {
                        return; // refilled already, or the bucket is full: nothing owed
                    }
                    // Never before now: a bucket is never fuller than full.
                    cur.saturating_sub(owed).max(now)
                }
            };
            // Release: a later rollback's `Acquire` load sees what this one saw (on a sliding
            // member's head, a read-modify-write that continues the release sequence of the
            // move into its slot). Failure `Acquire`: it is the next load.
            match self
                .word
                .compare_exchange_weak(cur, new, Ordering::Release, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// A window or sliding member's rollback of `n` units counted in the window (slot) of
/// `wrote`, on the word `cur`: `cur` with its count down by `n` while `cur` is still in that
/// window; `None` once it has moved on (window numbers only grow, so the window cannot come
/// back). `any_slot` is a planted defect for the loom model: give back whatever the window.
#[inline]
fn given_back_in_slot(
    cur: u64,
    wrote: u64,
    count_bits: u32,
    n: u64,
    any_slot: bool,
) -> Option<u64> {
    if cur >> count_bits != wrote >> count_bits && !any_slot {
        return None;
    }
    // Same window: the count includes this charge's `n`, unless a refund took units first;
    // never below zero either way.
    Some(cur - (cur & count_mask(count_bits)).min(n))
}

/// Why a group could not be made.
///
/// ```
/// use tollgate::{Limits, LimitsError, ManualClock, Member};
/// let none: [std::sync::Arc<Member>; 0] = [];
/// assert_eq!(Limits::new(ManualClock::new(), none).unwrap_err(), LimitsError::Empty);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitsError {
    /// A group needs at least one member.
    Empty,
    /// More members than [`MAX_MEMBERS`].
    TooMany {
        /// The number of members given.
        members: usize,
    },
}

impl fmt::Display for LimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitsError::Empty => f.write_str("a group of limits needs at least one member"),
            LimitsError::TooMany { members } => write!(
                f,
                "a group of limits has at most {MAX_MEMBERS} members, not {members}"
            ),
        }
    }
}

impl std::error::Error for LimitsError {}

/// Several limits checked all or nothing (per client AND per route AND global): a request is
/// admitted only if every member admits it, and then every member is charged; a denial
/// charges none. The decision is the most restrictive member's: on a denial the one with the
/// longest wait (a cost above some member's capacity first), on an admission the one with
/// the fewest remaining, so its `remaining`, `retry_after` and `reset_after` are right for the
/// response headers. One clock reading per check.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::{Limiter, Limits, ManualClock, Member, Quota};
///
/// let clock = ManualClock::new();
/// let per_second = Arc::new(Member::token_bucket(Quota::per_second(5)?));
/// let per_minute = Arc::new(Member::fixed_window(Quota::per_minute(8)?));
/// let limits = Limits::new(clock.clone(), [per_second, per_minute])?;
///
/// assert_eq!((0..10).filter(|_| limits.try_acquire().is_allowed()).count(), 5);
/// clock.advance(Duration::from_secs(1));
/// let (d, member) = limits.try_acquire_explained(1);
/// assert_eq!((d.remaining(), member), (2, 1)); // the minute's window is the tighter one now
/// assert_eq!((0..10).filter(|_| limits.try_acquire().is_allowed()).count(), 2);
/// let (d, member) = limits.try_acquire_explained(1);
/// assert_eq!((d.retry_after(), member), (Some(Duration::from_secs(59)), 1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Limits<C> {
    clock: C,
    members: Vec<Arc<Member>>,
    /// Each member's origin (`Member::origin`), copied here once: member `i` decides at the
    /// clock's reading less `origins[i]`.
    origins: [Origin; MAX_MEMBERS],
    /// A planted broken rollback, for the loom models to catch.
    #[cfg(tollgate_loom)]
    plant: Plant,
}

/// A planted rollback defect (the loom models' only); `Sound` is the real code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plant {
    Sound,
    /// A bucket's rollback restores the word it replaced even when others wrote after it.
    #[cfg_attr(not(tollgate_loom), allow(dead_code))]
    StoreRollback,
    /// A sliding member's rollback subtracts from the head whatever slot it is in.
    #[cfg_attr(not(tollgate_loom), allow(dead_code))]
    AnySlotRollback,
    /// A check's peek loads a sliding member's head `Relaxed` instead of `Acquire`.
    #[cfg_attr(not(tollgate_loom), allow(dead_code))]
    RelaxedSlidingHead,
    /// A bucket's rollback after others charged subtracts its whole `n × interval` while the
    /// rollback's clock is before the charge's `tat` (the tokens of the charge that had
    /// already refilled are handed out twice).
    #[cfg_attr(not(tollgate_loom), allow(dead_code))]
    WholeChargeBeforeTat,
}

impl<C: fmt::Debug> fmt::Debug for Limits<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("clock", &self.clock)
            .field("members", &self.members)
            .finish()
    }
}

/// The tighter of the decision so far and member `i`'s (the earlier member on a tie).
#[inline]
fn tightest(so_far: Option<(Decision, usize)>, d: Decision, i: usize) -> (Decision, usize) {
    match so_far {
        Some((w, j)) if !tighter(&d, &w) => (w, j),
        _ => (d, i),
    }
}

/// Whether `a` is more restrictive than `b` (see [`Limits`]): a denial over an admission;
/// between denials a cost above capacity, then no retry, then the longer retry; between
/// admissions fewer remaining, then the longer reset. Each field is read only when the ones
/// before it tie.
#[inline]
fn tighter(a: &Decision, b: &Decision) -> bool {
    match (a.is_allowed(), b.is_allowed()) {
        (false, true) => true,
        (true, false) => false,
        (true, true) => {
            let (ra, rb) = (a.remaining(), b.remaining());
            ra < rb || (ra == rb && a.reset_after() > b.reset_after())
        }
        (false, false) => {
            let (ea, eb) = (a.exceeds_capacity(), b.exceeds_capacity());
            if ea != eb {
                return ea;
            }
            match (a.retry_after(), b.retry_after()) {
                (None, Some(_)) => true,
                (Some(x), Some(y)) => x > y,
                _ => false,
            }
        }
    }
}

impl<C: Clock> Limits<C> {
    /// A group of `members`, reading time from `clock`.
    ///
    /// # Errors
    /// [`LimitsError::Empty`] or [`LimitsError::TooMany`] (more than [`MAX_MEMBERS`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Limits, ManualClock, Member, Quota};
    /// let one = Limits::new(ManualClock::new(), [Arc::new(Member::fixed_window(Quota::per_second(1)?))])?;
    /// assert_eq!(one.members().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(
        clock: C,
        members: impl IntoIterator<Item = Arc<Member>>,
    ) -> Result<Limits<C>, LimitsError> {
        let members: Vec<_> = members.into_iter().collect();
        match members.len() {
            0 => Err(LimitsError::Empty),
            n if n > MAX_MEMBERS => Err(LimitsError::TooMany { members: n }),
            _ => Ok(Limits {
                origins: {
                    let reading = clock.now_nanos();
                    let mut origins = [Origin::at(0, 1); MAX_MEMBERS];
                    for (o, m) in origins.iter_mut().zip(&members) {
                        *o = m.origin_at(reading);
                    }
                    origins
                },
                clock,
                members,
                #[cfg(tollgate_loom)]
                plant: Plant::Sound,
            }),
        }
    }

    /// The members, in the order they are charged.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Limits, ManualClock, Member, Quota};
    /// let m = Arc::new(Member::token_bucket(Quota::per_second(1)?));
    /// let g = Limits::new(ManualClock::new(), [m.clone()])?;
    /// assert!(Arc::ptr_eq(&g.members()[0], &m));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn members(&self) -> &[Arc<Member>] {
        &self.members
    }

    /// Asks every member for `n` units, all or nothing, and says which member the decision
    /// comes from (its index in [`Limits::members`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Limits, ManualClock, Member, Quota};
    /// let g = Limits::new(ManualClock::new(), [
    ///     Arc::new(Member::token_bucket(Quota::per_second(10)?)),
    ///     Arc::new(Member::token_bucket(Quota::per_second(3)?)),
    /// ])?;
    /// let (d, by) = g.try_acquire_explained(4);
    /// assert!(d.exceeds_capacity() && by == 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire_explained(&self, n: u64) -> (Decision, usize) {
        // One reading for every member, each counting it from its own origin.
        let now = self.clock.now_nanos();
        // Per member: the word peeked (then the word each charge replaced), and the word to
        // write (then the word written); bit `i` of `writes` says member `i` has one.
        let mut seen = [0u64; MAX_MEMBERS];
        let mut wrote = [0u64; MAX_MEMBERS];
        let Peeked {
            mut worst,
            mut by,
            denied,
            writes,
        } = self.peek_at(now, n, &mut seen, &mut wrote);
        if denied {
            return (worst, by);
        }
        // Charge, in member order.
        for (i, m) in self.members.iter().enumerate() {
            if writes & (1 << i) == 0 {
                continue; // nothing to write (a zero cost)
            }
            m.finish_slot(seen[i], wrote[i]);
            // Release: a rollback's `Acquire` load that reads this word also sees this
            // thread's clock reading (see `Member::roll_back`), and a sliding member's ring
            // entry written just before is seen by whoever sees this head. Failure `Acquire`:
            // a sliding member next decides on the ring the found head published (for the
            // others, a stale word would only fail again).
            while let Err(cur) = m.word.compare_exchange_weak(
                seen[i],
                wrote[i],
                Ordering::Release,
                Ordering::Acquire,
            ) {
                let (d, write) = m.decide(cur, self.origins[i].since(now), n);
                match write {
                    Some(t) if d.is_allowed() => {
                        (seen[i], wrote[i]) = (cur, t);
                        m.finish_slot(cur, t);
                        // The member's decision on a later word: it replaces its own peek.
                        if by == i || tighter(&d, &worst) {
                            (worst, by) = (d, i);
                        }
                    }
                    _ => {
                        self.roll_back(&seen[..i], &wrote[..i], writes, n);
                        return (d, i);
                    }
                }
            }
        }
        (worst, by)
    }

    /// Decides every member at `now` on a load of its word, writing nothing; records each
    /// word read and each word to write.
    #[inline]
    fn peek_at(
        &self,
        now: u64,
        n: u64,
        seen: &mut [u64; MAX_MEMBERS],
        wrote: &mut [u64; MAX_MEMBERS],
    ) -> Peeked {
        let mut worst: Option<(Decision, usize)> = None;
        let (mut denied, mut writes) = (false, 0u32);
        for (i, m) in self.members.iter().enumerate() {
            // The member's own ordering (see `Member::load`).
            let word = m.load(self.plant());
            let (d, write) = m.decide(word, self.origins[i].since(now), n);
            denied |= !d.is_allowed();
            seen[i] = word;
            if let Some(w) = write {
                wrote[i] = w;
                writes |= 1 << i;
            }
            worst = Some(tightest(worst, d, i));
        }
        let (worst, by) = worst.expect("a group has at least one member");
        Peeked {
            worst,
            by,
            denied,
            writes,
        }
    }

    /// What [`Limits::try_acquire_explained`] would answer now, charging nothing: every
    /// member's word read once and decided at one clock reading.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Limiter, Limits, ManualClock, Member, Quota};
    /// let g = Limits::new(ManualClock::new(), [
    ///     Arc::new(Member::token_bucket(Quota::per_second(10)?)),
    ///     Arc::new(Member::fixed_window(Quota::per_second(3)?)),
    /// ])?;
    /// let (d, by) = g.peek_explained(2);
    /// assert_eq!((d.remaining(), by), (1, 1));
    /// assert_eq!(g.peek(3), g.try_acquire_n(3)); // peeking charged nothing
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek_explained(&self, n: u64) -> (Decision, usize) {
        let Peeked { worst, by, .. } = self.peek_at(
            self.clock.now_nanos(),
            n,
            &mut [0; MAX_MEMBERS],
            &mut [0; MAX_MEMBERS],
        );
        (worst, by)
    }

    /// The planted defect of a loom model's group; always `Sound` outside the models.
    #[inline(always)]
    fn plant(&self) -> Plant {
        #[cfg(tollgate_loom)]
        return self.plant;
        #[cfg(not(tollgate_loom))]
        Plant::Sound
    }

    /// Rolls back the charges of the first members, newest first.
    #[cold]
    fn roll_back(&self, replaced: &[u64], wrote: &[u64], writes: u32, n: u64) {
        let plant = self.plant();
        for (i, m) in self.members.iter().enumerate().take(wrote.len()).rev() {
            if writes & (1 << i) != 0 {
                let clock = Since {
                    clock: &self.clock,
                    origin: self.origins[i],
                };
                m.roll_back(&clock, replaced[i], wrote[i], n, plant);
            }
        }
    }
}

/// What the peek of every member found.
struct Peeked {
    worst: Decision,
    by: usize,
    denied: bool,
    writes: u32,
}

/// The group as one limiter: generic code, [`Wait`](crate::Wait) and
/// [`Metered`](crate::Metered) work on it.
impl<C: Clock> Limiter for Limits<C> {
    #[inline]
    fn try_acquire_n(&self, n: u64) -> Decision {
        self.try_acquire_explained(n).0
    }

    fn peek(&self, n: u64) -> Decision {
        self.peek_explained(n).0
    }

    /// Gives back up to `n` units to every member (see [`Limiter::refund`] for what each
    /// algorithm gives back); returns the fewest any member took back.
    fn refund(&self, n: u64) -> u64 {
        let now = self.clock.now_nanos();
        self.members
            .iter()
            .zip(&self.origins)
            .map(|(m, o)| m.refund(o.since(now), n))
            .min()
            .unwrap_or(0)
    }
}

/// For the loom model only: a group whose bucket rollback restores the word it replaced even
/// when others have written since (a token handed out twice).
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub fn planted_store_rollback<C: Clock>(
    clock: C,
    members: impl IntoIterator<Item = Arc<Member>>,
) -> Limits<C> {
    planted(clock, members, Plant::StoreRollback)
}

/// For the loom model only: a group whose sliding member's rollback subtracts its units from
/// the head even after the head has moved to a later slot (a token handed out twice: the
/// charge stays counted in the finished slot, and the head gives back another's unit).
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub fn planted_any_slot_rollback<C: Clock>(
    clock: C,
    members: impl IntoIterator<Item = Arc<Member>>,
) -> Limits<C> {
    planted(clock, members, Plant::AnySlotRollback)
}

/// For the loom model only: a group whose bucket rollback, after others charged, subtracts
/// the whole charge while its own clock reads before the charge's `tat` (the part of the
/// charge that had already refilled, and that a later charge built on, is handed out twice).
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub fn planted_whole_charge_rollback<C: Clock>(
    clock: C,
    members: impl IntoIterator<Item = Arc<Member>>,
) -> Limits<C> {
    planted(clock, members, Plant::WholeChargeBeforeTat)
}

/// For the loom model only: a group whose peek loads a sliding member's head `Relaxed`, so
/// that it may see a head past a slot without that slot's ring entry (and count too little).
#[cfg(tollgate_loom)]
#[doc(hidden)]
pub fn planted_relaxed_sliding_head<C: Clock>(
    clock: C,
    members: impl IntoIterator<Item = Arc<Member>>,
) -> Limits<C> {
    planted(clock, members, Plant::RelaxedSlidingHead)
}

#[cfg(tollgate_loom)]
fn planted<C: Clock>(
    clock: C,
    members: impl IntoIterator<Item = Arc<Member>>,
    plant: Plant,
) -> Limits<C> {
    let mut g = Limits::new(clock, members).expect("a model's group has 1 to 8 members");
    g.plant = plant;
    g
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::ManualClock;
    use core::time::Duration;

    /// A group of one sliding member (4 per second in 2 slots of 500 ms) on `clock`.
    fn sliding(clock: &ManualClock) -> (Arc<Member>, Limits<ManualClock>) {
        let m = Member::try_sliding_window_with_slots(Quota::per_second(4).unwrap(), 2).unwrap();
        let m = Arc::new(m);
        (m.clone(), Limits::new(clock.clone(), [m]).unwrap())
    }

    /// One charge of `n` as a check makes it: (the head replaced, the head written).
    fn charge(m: &Member, g: &Limits<ManualClock>, n: u64) -> (u64, u64) {
        let before = m.word.load(Ordering::Relaxed);
        assert!(g.try_acquire_n(n).is_allowed());
        (before, m.word.load(Ordering::Relaxed))
    }

    #[test]
    fn a_sliding_rollback_in_the_same_slot_gives_back_exactly() {
        let clock = ManualClock::new();
        let (m, g) = sliding(&clock);
        clock.set(Duration::from_millis(100));
        let _ = charge(&m, &g, 1);
        let (replaced, wrote) = charge(&m, &g, 2);
        // Another admission after it, in the same slot.
        let _ = charge(&m, &g, 1);
        m.roll_back(&clock, replaced, wrote, 2, Plant::Sound);
        assert_eq!(g.peek(0).remaining(), 2, "exactly the charge's 2 came back");
    }

    #[test]
    fn a_sliding_rollback_after_the_head_moved_gives_nothing_back() {
        let clock = ManualClock::new();
        let (m, g) = sliding(&clock);
        clock.set(Duration::from_millis(100));
        let (replaced, wrote) = charge(&m, &g, 2);
        // The head moves to slot 1 (finishing slot 0 with its 2 into the ring), and 1 more
        // is admitted there; then the charge in slot 0 is rolled back.
        clock.set(Duration::from_millis(600));
        let _ = charge(&m, &g, 1);
        let (head, ring) = (
            m.word.load(Ordering::Relaxed),
            m.ring[0].load(Ordering::Relaxed),
        );
        m.roll_back(&clock, replaced, wrote, 2, Plant::Sound);
        assert_eq!(
            m.word.load(Ordering::Relaxed),
            head,
            "the head gave nothing back"
        );
        assert_eq!(m.ring[0].load(Ordering::Relaxed), ring, "the ring is final");
        assert_eq!(g.peek(0).remaining(), 1, "the lost rollback still counts");
        // Slot 0 leaves the window at 1.5 s; slot 1's admission still counts until 2 s.
        clock.set(Duration::from_millis(1_600));
        assert_eq!(
            g.peek(0).remaining(),
            3,
            "the admission in slot 1 was not given back"
        );
        // What the planted defect does instead: take the unit back from slot 1.
        m.roll_back(&clock, replaced, wrote, 2, Plant::AnySlotRollback);
        assert_eq!(
            g.peek(0).remaining(),
            4,
            "the planted rollback hands a unit out twice"
        );
    }

    #[test]
    fn the_ring_write_from_two_heads_is_the_one_decide_asks_for() {
        // The charge keeps only the head it replaced and the head it writes; the ring write
        // it derives from them must be the sliding window's own, over many heads and times.
        let g = Geometry::new(&Quota::per_second(6).unwrap(), 3).unwrap();
        let ring = [0u64; 4];
        let mut x = 7u64;
        let mut checked = 0;
        // Shorter under miri, which is a thousand times slower.
        let runs = if cfg!(miri) { 1_000 } else { 20_000 };
        for _ in 0..runs {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let (slot, count) = ((x >> 40) % 50, (x >> 20) % 7);
            let head = slot << g.p.count_bits | count;
            let now = slot * g.p.len + (x >> 8) % (4 * g.p.len);
            let (_, write) = sliding_window::decide(&g, head, |i| ring[i], now, 1 + x % 2);
            if let Some(w) = write {
                assert_eq!(sliding_window::finished(&g, head, w.head), w.finished);
                checked += u64::from(w.finished.is_some());
            }
        }
        assert!(checked > runs / 20, "only {checked} slot moves");
    }

    #[test]
    fn a_bucket_rollback_gives_back_only_what_the_word_still_owes() {
        // 1 per second, burst 2. A charge at 0 s (tat 0 -> 1 s) is rolled back after another
        // check charged at 0.9 s (tat 1 -> 2 s): that charge built on the first one's 1 s
        // where alone it would have built on 0.9 s, so only 0.1 s of the first is still owed.
        let bucket = Quota::per_second(1).unwrap().with_burst(2).unwrap();
        let outcome = |plant: Plant, later: u64| {
            let clock = ManualClock::new();
            let m = Arc::new(Member::token_bucket(bucket));
            let g = Limits::new(clock.clone(), [m.clone()]).unwrap();
            let (replaced, wrote) = charge(&m, &g, 1);
            clock.set(Duration::from_millis(later));
            let _ = charge(&m, &g, 1);
            m.roll_back(&clock, replaced, wrote, 1, plant);
            let tat = m.word.load(Ordering::Relaxed);
            clock.set(Duration::from_secs(1));
            (tat, (0..4).filter(|_| g.try_acquire().is_allowed()).count())
        };
        // Exactly the word the later charge alone would have left, 1.9 s; then one at 1 s: 2
        // in [0.9 s, 1 s], the burst.
        assert_eq!(outcome(Plant::Sound, 900), (1_900_000_000, 1));
        // At a frozen instant the whole charge is owed: exact.
        assert_eq!(outcome(Plant::Sound, 0).0, 1_000_000_000);
        // The old rollback (the whole charge back, its clock before 1 s): 3 in 0.1 s.
        assert_eq!(
            outcome(Plant::WholeChargeBeforeTat, 900),
            (1_000_000_000, 2)
        );
    }

    #[test]
    fn a_window_rollback_never_takes_more_than_the_count() {
        // A refund that took the charge's units before its rollback: the count stays at zero
        // instead of borrowing from the window number.
        let clock = ManualClock::new();
        let m = Arc::new(Member::fixed_window(Quota::per_second(5).unwrap()));
        let g = Limits::new(clock.clone(), [m.clone()]).unwrap();
        let (replaced, wrote) = charge(&m, &g, 2);
        assert_eq!(g.refund(5), 2);
        m.roll_back(&clock, replaced, wrote, 2, Plant::Sound);
        assert_eq!(m.word.load(Ordering::Relaxed), 0);
        assert_eq!(g.peek(0).remaining(), 5);
    }
}
