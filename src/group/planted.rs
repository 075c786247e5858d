//! The group's planted defects, for the loom models (`loom-tests/tests/group.rs`); built only
//! for them (`cfg(tollgate_loom)`).
//!
//! [`Mutant`] runs a [`Limits`] check, and [`MemberMutant`] a member's load and rollback, as
//! copies of the real ones in `mod.rs` and `member.rs` with one [`Plant`] each and the
//! planted lines marked `// PLANTED`; `loom-tests/tests/mutants_match.rs` fails if a copy
//! differs from the real code anywhere else. The product's types know nothing of it.

use core::ops::Deref;

use super::member::{Member, Rule};
use super::{tighter, tightest, Limits, Peeked, MAX_MEMBERS};
use crate::algo::{count_mask, fixed_window, planted, token_bucket};
use crate::clock::{Clock, Since};
use crate::decision::Decision;
use crate::quota::HORIZON;
use crate::sync::Ordering;

/// A planted defect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plant {
    /// A bucket's rollback restores the word it replaced even when others wrote after it.
    StoreRollback,
    /// A sliding member's rollback subtracts from the head whatever slot it is in.
    AnySlotRollback,
    /// A check's peek loads a sliding member's head `Relaxed` instead of `Acquire`.
    RelaxedSlidingHead,
    /// A bucket's rollback after others charged subtracts its whole `n × interval` while the
    /// rollback's clock is before the charge's `tat` (the tokens of the charge that had
    /// already refilled are handed out twice).
    WholeChargeBeforeTat,
    /// A refund runs the refund helpers as they were before their stale checks: a window or
    /// sliding member gives back from a window (slot) later than its reading's, a bucket
    /// moves a `tat` more than the capacity past its reading.
    StaleRefund,
}

/// A real group run through the copied check.
#[derive(Debug)]
pub(crate) struct Mutant<C> {
    pub(crate) limits: Limits<C>,
    pub(crate) plant: Plant,
}

impl<C> Deref for Mutant<C> {
    type Target = Limits<C>;

    fn deref(&self) -> &Limits<C> {
        &self.limits
    }
}

/// A real member run through the copied load and rollback.
pub(crate) struct MemberMutant<'a> {
    member: &'a Member,
    plant: Plant,
}

impl Deref for MemberMutant<'_> {
    type Target = Member;

    fn deref(&self) -> &Member {
        self.member
    }
}

impl<C: Clock> Mutant<C> {
    fn member<'a>(&self, member: &'a Member) -> MemberMutant<'a> {
        MemberMutant {
            member,
            plant: self.plant,
        }
    }

    /// [`Limits::try_acquire_explained`] with the plant.
    pub(crate) fn try_acquire_explained(&self, n: u64) -> (Decision, usize) {
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
                        // PLANTED: the words replaced too, for the store rollback
                        self.roll_back(&seen[..i], &wrote[..i], writes, n);
                        return (d, i);
                    }
                }
            }
        }
        (worst, by)
    }

    /// `Limits::peek_at` with the plant.
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
            let word = self.member(m).load(); // PLANTED: the copied load
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

    /// [`Limits::peek_explained`] with the plant.
    pub(crate) fn peek_explained(&self, n: u64) -> (Decision, usize) {
        let Peeked { worst, by, .. } = self.peek_at(
            self.clock.now_nanos(),
            n,
            &mut [0; MAX_MEMBERS],
            &mut [0; MAX_MEMBERS],
        );
        (worst, by)
    }

    /// `Limits::refund` (the `Limiter` method) with the plant.
    pub(crate) fn refund(&self, n: u64) -> u64 {
        let now = self.clock.now_nanos();
        self.members
            .iter()
            .zip(&self.origins)
            .map(|(m, o)| self.member(m).refund(o.since(now), n)) // PLANTED: the copied refund
            .min()
            .unwrap_or(0)
    }

    /// `Limits::roll_back` with the plant.
    #[cold]
    fn roll_back(&self, replaced: &[u64], wrote: &[u64], writes: u32, n: u64) {
        // PLANTED: the words replaced too, for the store rollback (above)
        for (i, m) in self.members.iter().enumerate().take(wrote.len()).rev() {
            if writes & (1 << i) != 0 {
                let clock = Since {
                    clock: &self.clock,
                    origin: self.origins[i],
                };
                // PLANTED: the copied rollback, given the word it replaced
                self.member(m).roll_back(&clock, replaced[i], wrote[i], n);
            }
        }
    }
}

impl MemberMutant<'_> {
    /// `Member::load` with the plant.
    #[inline]
    fn load(&self) -> u64 {
        match self.rule {
            // Acquire: pairs with the `Release` of the head compare-exchange that moved the head
            // to its slot (every later charge, rollback or refund is a read-modify-write that
            // continues its release sequence), so `decide` sees the ring entries it finished.
            Rule::Sliding(_) if self.plant != Plant::RelaxedSlidingHead => {
                // PLANTED: the head may be loaded `Relaxed`
                self.word.load(Ordering::Acquire)
            }
            // Relaxed: a stale word only makes the charge's compare-exchange fail, or denies on
            // a state the member really had.
            _ => self.word.load(Ordering::Relaxed),
        }
    }

    /// `Member::refund` with the plant.
    fn refund(&self, now_ns: u64, n: u64) -> u64 {
        // Relaxed: a stale word only makes the compare-exchange below fail.
        let mut cur = self.word.load(Ordering::Relaxed);
        loop {
            let (given, new) = match &self.rule {
                // PLANTED: the refund helpers as they were before their stale checks
                Rule::Bucket(p) if self.plant == Plant::StaleRefund => {
                    let now = now_ns.min(HORIZON) * u64::from(p.scale);
                    planted::token_bucket::refunded(p, cur, now, n)
                }
                Rule::Window(p) if self.plant == Plant::StaleRefund => {
                    planted::fixed_window::refunded(p, cur, now_ns, n)
                }
                Rule::Sliding(g) if self.plant == Plant::StaleRefund => {
                    planted::fixed_window::refunded(&g.p, cur, now_ns, n)
                }
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

    /// `Member::roll_back` with the plant.
    fn roll_back<C: Clock>(
        &self,
        clock: &C,
        replaced: u64, // PLANTED: the word the charge replaced, for the store rollback
        wrote: u64,
        n: u64,
    ) {
        // Acquire: pairs with the `Release` of every charge and rollback, so that the clock
        // reading below is at least as late as that of every bucket charge it sees.
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            let new = match &self.rule {
                // The window moved on: the charge is in a finished window.
                Rule::Window(p) => match given_back_in_slot(cur, wrote, p.count_bits, n, false) {
                    // PLANTED: `false`, the real check
                    Some(new) => new,
                    None => return,
                },
                // The head moved on: the charge is in a finished slot (in the ring, or about to
                // be); giving it back from the head would hand it out twice.
                Rule::Sliding(g) => {
                    let any_slot = self.plant == Plant::AnySlotRollback; // PLANTED
                    match given_back_in_slot(cur, wrote, g.p.count_bits, n, any_slot) {
                        Some(new) => new,
                        None => return,
                    }
                }
                Rule::Bucket(_) if self.plant == Plant::StoreRollback => replaced, // PLANTED
                // PLANTED: the whole charge back while the clock reads before its `tat`.
                Rule::Bucket(p) if self.plant == Plant::WholeChargeBeforeTat => {
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

/// `given_back_in_slot` with `any_slot`: give back whatever the window.
#[inline]
fn given_back_in_slot(
    cur: u64,
    wrote: u64,
    count_bits: u32,
    n: u64,
    any_slot: bool, // PLANTED: give back whatever the window
) -> Option<u64> {
    if cur >> count_bits != wrote >> count_bits && !any_slot {
        // PLANTED: `&& !any_slot`
        return None;
    }
    // Same window: the count includes this charge's `n`, unless a refund took units first;
    // never below zero either way.
    Some(cur - (cur & count_mask(count_bits)).min(n))
}
