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
//! catches three broken rollbacks (a bucket's that restores the replaced word even when
//! others wrote after it, a bucket's that subtracts its whole charge while its clock is before
//! the charge's `tat`, a sliding member's that subtracts from the head whatever its slot) and
//! a sliding head peeked `Relaxed`, each a checked copy of this code.

use core::fmt;
use std::sync::Arc;
use std::vec::Vec;

use crate::clock::{Clock, Origin, Since};
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::sync::Ordering;

mod member;

pub use member::Member;

/// The most members a group may have: the check keeps its per-member state on the stack.
pub const MAX_MEMBERS: usize = 8;

/// Why a group could not be made.
///
/// ```
/// use tollgate::{Limits, LimitsError, ManualClock, Member};
/// let none: [std::sync::Arc<Member>; 0] = [];
/// assert_eq!(Limits::try_new(ManualClock::new(), none).unwrap_err(), LimitsError::Empty);
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
/// let limits = Limits::try_new(clock.clone(), [per_second, per_minute])?;
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
    /// let one = Limits::try_new(ManualClock::new(), [Arc::new(Member::fixed_window(Quota::per_second(1)?))])?;
    /// assert_eq!(one.members().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_new(
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
            }),
        }
    }

    /// The members, in the order they are charged.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tollgate::{Limits, ManualClock, Member, Quota};
    /// let m = Arc::new(Member::token_bucket(Quota::per_second(1)?));
    /// let g = Limits::try_new(ManualClock::new(), [m.clone()])?;
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
    /// let g = Limits::try_new(ManualClock::new(), [
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
                        self.roll_back(&wrote[..i], writes, n);
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
            let word = m.load();
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
    /// let g = Limits::try_new(ManualClock::new(), [
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

    /// Rolls back the charges of the first members, newest first.
    #[cold]
    fn roll_back(&self, wrote: &[u64], writes: u32, n: u64) {
        for (i, m) in self.members.iter().enumerate().take(wrote.len()).rev() {
            if writes & (1 << i) != 0 {
                let clock = Since {
                    clock: &self.clock,
                    origin: self.origins[i],
                };
                m.roll_back(&clock, wrote[i], n);
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

/// The loom models' groups, sound and planted.
#[cfg(tollgate_loom)]
pub(crate) mod loom_model;
#[cfg(tollgate_loom)]
mod planted;
