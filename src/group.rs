//! Several limits at once, all or nothing: [`Limits`] admits a request only if every
//! [`Member`] admits it, then charges every member; a denial charges none.
//!
//! | member word (one `AtomicU64` per member, own cache line) | as in            |
//! |----------------------------------------------------------|------------------|
//! | token bucket: `tat`, theoretical arrival time in ticks   | `TokenBucket`    |
//! | fixed window: `window << count_bits \| count`             | `FixedWindow`    |
//!
//! Invariant: every member's word is, at every instant, the word its own algorithm would hold
//! after the admissions the group reported (plus the in-flight reservations of checks that
//! have not returned): a member never admits more than its quota, whatever the interleaving.
//! Orderings: member loads `Relaxed` except a rollback's (`Acquire`), charges and rollbacks
//! `Release` on success; why each suffices is at each operation.
//!
//! # One check
//!
//! 1. Read the group's clock once.
//! 2. Peek: load every member's word and decide on it with the algorithm's pure `decide`. Any
//!    denial ends the check here: nothing was written, and the decision is the most
//!    restrictive member's. Denials stay read-only, as for a single limiter.
//! 3. Charge, in member order: a compare-exchange from the peeked word to the decided one. If
//!    it fails (another thread moved the member), decide again on the word it found; if the
//!    member now denies, roll back the members already charged and return its denial.
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
//! - Token bucket: if the word is still the one the charge wrote, the rollback restores the
//!   word it replaced (exact). Otherwise others were admitted after it; subtracting the
//!   charge's `n × interval` is exact unless one of them found the bucket full again (its
//!   clock past the charge's `tat`), in which case the charge's tokens had already refilled
//!   and giving them back would admit them twice. So the rollback reads the clock (after an
//!   `Acquire` load that sees every admission it must account for) and subtracts only while
//!   the clock is still before the charge's `tat`; past it, it gives nothing back (at most `n`
//!   tokens lost, only by a thread delayed for the whole span of its charge). This second
//!   clock read happens only on this race path. It assumes the clock does not step back
//!   across threads (the manual clock; the monotonic clock up to its 8 µs).
//!
//! The loom model `loom-tests/tests/group.rs` checks both members under racing checks and
//! catches a planted rollback that restores the replaced word even when others wrote after it.

use core::fmt;
use std::sync::Arc;
use std::vec::Vec;

use crossbeam_utils::CachePadded;

use crate::algo::{fixed_window, token_bucket};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::quota::{GcraParams, Quota, WindowParams, HORIZON};
use crate::sync::{AtomicU64, Ordering};

/// The most members a group may have: the check keeps its per-member state on the stack.
pub const MAX_MEMBERS: usize = 8;

#[derive(Clone, Copy, Debug)]
enum Rule {
    Bucket(GcraParams),
    Window(WindowParams),
}

/// One limit of a [`Limits`] group: a token bucket or a fixed window without a clock (the
/// group reads one clock for all its members).
///
/// Share a member between groups with an `Arc` (a global limit that every client's group
/// includes); every group that shares a member must read clones of one clock, since a member
/// counts time from that clock's zero.
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
    word: CachePadded<AtomicU64>,
    rule: Rule,
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("rule", &self.rule)
            // Relaxed: a diagnostic read.
            .field("word", &self.word.load(Ordering::Relaxed))
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

    fn with_rule(rule: Rule) -> Member {
        Member {
            word: CachePadded::new(AtomicU64::new(0)),
            rule,
        }
    }

    /// The algorithm's pure decision on `word`.
    #[inline]
    fn decide(&self, word: u64, now_ns: u64, n: u64) -> crate::algo::Step {
        match &self.rule {
            Rule::Bucket(p) => token_bucket::decide(p, word, now_ns, n),
            Rule::Window(p) => fixed_window::decide(p, word, now_ns, n),
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
    fn roll_back<C: Clock>(
        &self,
        clock: &C,
        replaced: u64,
        wrote: u64,
        n: u64,
        store_mutant: bool,
    ) {
        // Acquire: pairs with the `Release` of every charge and rollback, so that a bucket
        // admission that found the bucket full (its clock past `wrote`) is seen together with
        // a clock reading at least as late as its own.
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            let new = match &self.rule {
                Rule::Window(p) => {
                    if cur >> p.count_bits != wrote >> p.count_bits {
                        return; // the window moved on: the charge is in a finished window
                    }
                    // Same window: the count includes this charge's `n`.
                    cur - n
                }
                Rule::Bucket(_) if cur == wrote || store_mutant => replaced,
                Rule::Bucket(p) => {
                    let now = clock.now_nanos().min(HORIZON) * u64::from(p.scale);
                    if now >= wrote {
                        return; // the charge's tokens may have refilled: give nothing back
                    }
                    cur.saturating_sub(n * p.interval)
                }
            };
            // Release: a later rollback's `Acquire` load sees what this one saw. Failure
            // `Acquire`: it is the next load.
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
    /// A planted broken rollback, for the loom model to catch.
    #[cfg(tollgate_loom)]
    store_mutant: bool,
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
                clock,
                members,
                #[cfg(tollgate_loom)]
                store_mutant: false,
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
            // Release: a rollback's `Acquire` load that reads this word also sees this
            // thread's clock reading (see `Member::roll_back`).
            while let Err(cur) = m.word.compare_exchange_weak(
                seen[i],
                wrote[i],
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                let (d, write) = m.decide(cur, now, n);
                match write {
                    Some(t) if d.is_allowed() => {
                        (seen[i], wrote[i]) = (cur, t);
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
            // Relaxed: a stale word only makes the charge's compare-exchange fail, or denies
            // on a state the member really had.
            let word = m.word.load(Ordering::Relaxed);
            let (d, write) = m.decide(word, now, n);
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

    /// Rolls back the charges of the first members, newest first.
    #[cold]
    fn roll_back(&self, replaced: &[u64], wrote: &[u64], writes: u32, n: u64) {
        #[cfg(tollgate_loom)]
        let store_mutant = self.store_mutant;
        #[cfg(not(tollgate_loom))]
        let store_mutant = false;
        for (i, m) in self.members.iter().enumerate().take(wrote.len()).rev() {
            if writes & (1 << i) != 0 {
                m.roll_back(&self.clock, replaced[i], wrote[i], n, store_mutant);
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
            .map(|m| m.refund(now, n))
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
    let mut g = Limits::new(clock, members).expect("a model's group has 1 to 8 members");
    g.store_mutant = true;
    g
}
