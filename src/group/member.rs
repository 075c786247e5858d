//! One member of a group: its rule, its word, and the check, commit and rollback a group
//! runs on it.

use core::fmt;

use crossbeam_utils::CachePadded;

use crate::algo::sliding_window::{self, Geometry};
use crate::algo::{count_mask, fixed_window, token_bucket};
use crate::clock::{Clock, Origin};
use crate::quota::{GcraParams, Quota, QuotaError, WindowParams, DEFAULT_SLOTS, HORIZON};
use crate::sync::{AtomicU64, Ordering};

#[derive(Clone, Copy, Debug)]
pub(super) enum Rule {
    Bucket(GcraParams),
    Window(WindowParams),
    Sliding(Geometry),
}

/// One limit of a [`Limits`](crate::Limits) group: a token bucket, a fixed window or a sliding window,
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
/// let alice = Limits::try_new(clock.clone(), [Arc::new(Member::token_bucket(Quota::per_second(5)?)), global.clone()])?;
/// let bob = Limits::try_new(clock.clone(), [Arc::new(Member::token_bucket(Quota::per_second(5)?)), global])?;
/// assert!(alice.try_acquire().is_allowed() && bob.try_acquire().is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Member {
    /// The member's word: a bucket's `tat`, a window's `(window, count)`, a sliding window's
    /// head `(slot, count)`.
    pub(super) word: CachePadded<AtomicU64>,
    /// A sliding window's finished slots, `(slot, count)` at `slot % (K + 1)`; empty for the
    /// other members.
    pub(super) ring: Box<[AtomicU64]>,
    pub(super) rule: Rule,
    /// Where the member's time starts: the clock reading of the first group made over it,
    /// aligned to its window (slot) length; [`UNSET`] until then. Set once (a
    /// compare-exchange), then only read, by each group's constructor.
    pub(super) origin: AtomicU64,
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
    /// let g = Limits::try_new(clock.clone(), [Arc::new(Member::sliding_window(Quota::per_second(4)?))])?;
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

    pub(super) fn with_rule(rule: Rule) -> Member {
        Member {
            word: CachePadded::new(AtomicU64::new(0)),
            ring: Box::default(),
            rule,
            origin: AtomicU64::new(UNSET),
        }
    }

    /// The member's origin: the one the first group over it set, else `reading` (the new
    /// group's clock now) aligned to the member's window or slot length, which it sets.
    pub(super) fn origin_at(&self, reading: u64) -> Origin {
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
    pub(super) fn load(&self) -> u64 {
        match self.rule {
            // Acquire: pairs with the `Release` of the head compare-exchange that moved the head
            // to its slot (every later charge, rollback or refund is a read-modify-write that
            // continues its release sequence), so `decide` sees the ring entries it finished.
            Rule::Sliding(_) => self.word.load(Ordering::Acquire),
            // Relaxed: a stale word only makes the charge's compare-exchange fail, or denies on
            // a state the member really had.
            _ => self.word.load(Ordering::Relaxed),
        }
    }

    /// The algorithm's pure decision on `word` (for a sliding member, `word` is its head,
    /// loaded `Acquire`, and the ring is read here).
    #[inline]
    pub(super) fn decide(&self, word: u64, now_ns: u64, n: u64) -> crate::algo::Step {
        match &self.rule {
            Rule::Bucket(p) => token_bucket::decide(p, word, now_ns, n),
            Rule::Window(p) => fixed_window::decide(p, word, now_ns, n),
            Rule::Sliding(g) => self.decide_sliding(g, word, now_ns, n),
        }
    }

    /// A sliding member's decision on its head `head` and its ring. Kept out of
    /// [`Member::decide`], so that the one-word members' decisions stay as small as before.
    #[inline(never)]
    pub(super) fn decide_sliding(
        &self,
        g: &Geometry,
        head: u64,
        now_ns: u64,
        n: u64,
    ) -> crate::algo::Step {
        // Relaxed: after the `Acquire` load of the head (see `Member::load`), as the sliding
        // window's own ring loads.
        let ring = |i: usize| self.ring[i].load(Ordering::Relaxed);
        let (d, write) = sliding_window::decide(g, head, ring, now_ns, n);
        (d, write.map(|w| w.head))
    }

    /// A sliding member's ring write before its head moves from `head` to `new_head`: the slot
    /// it leaves, final before any thread can see a head past it. Nothing for the others.
    #[inline]
    pub(super) fn finish_slot(&self, head: u64, new_head: u64) {
        if let Rule::Sliding(g) = &self.rule
            && let Some((i, word)) = sliding_window::finished(g, head, new_head)
        {
            // Relaxed: published by the `Release` head compare-exchange that follows;
            // `fetch_max` keeps the largest count if several movers race.
            self.ring[i].fetch_max(word, Ordering::Relaxed);
        }
    }

    /// Gives back up to `n` units at `now_ns`, as the member's algorithm does (see
    /// [`Limiter::refund`]); the units given back.
    pub(super) fn refund(&self, now_ns: u64, n: u64) -> u64 {
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

    /// Undoes a charge of `n` that wrote `wrote` (see the module docs).
    pub(super) fn roll_back<C: Clock>(&self, clock: &C, wrote: u64, n: u64) {
        // Acquire: pairs with the `Release` of every charge and rollback, so that the clock
        // reading below is at least as late as that of every bucket charge it sees.
        let mut cur = self.word.load(Ordering::Acquire);
        loop {
            let new = match &self.rule {
                // The window moved on: the charge is in a finished window.
                Rule::Window(p) => match given_back_in_slot(cur, wrote, p.count_bits, n) {
                    Some(new) => new,
                    None => return,
                },
                // The head moved on: the charge is in a finished slot (in the ring, or about to
                // be); giving it back from the head would hand it out twice.
                Rule::Sliding(g) => match given_back_in_slot(cur, wrote, g.p.count_bits, n) {
                    Some(new) => new,
                    None => return,
                },
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
/// back).
#[inline]
fn given_back_in_slot(cur: u64, wrote: u64, count_bits: u32, n: u64) -> Option<u64> {
    if cur >> count_bits != wrote >> count_bits {
        return None;
    }
    // Same window: the count includes this charge's `n`, unless a refund took units first;
    // never below zero either way.
    Some(cur - (cur & count_mask(count_bits)).min(n))
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::group::Limits;
    use crate::limiter::Limiter;
    use crate::ManualClock;
    use core::time::Duration;
    use std::sync::Arc;

    /// A group of one sliding member (4 per second in 2 slots of 500 ms) on `clock`.
    fn sliding(clock: &ManualClock) -> (Arc<Member>, Limits<ManualClock>) {
        let m = Member::try_sliding_window_with_slots(Quota::per_second(4).unwrap(), 2).unwrap();
        let m = Arc::new(m);
        (m.clone(), Limits::try_new(clock.clone(), [m]).unwrap())
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
        let (_, wrote) = charge(&m, &g, 2);
        // Another admission after it, in the same slot.
        let _ = charge(&m, &g, 1);
        m.roll_back(&clock, wrote, 2);
        assert_eq!(g.peek(0).remaining(), 2, "exactly the charge's 2 came back");
    }

    #[test]
    fn a_sliding_rollback_after_the_head_moved_gives_nothing_back() {
        let clock = ManualClock::new();
        let (m, g) = sliding(&clock);
        clock.set(Duration::from_millis(100));
        let (_, wrote) = charge(&m, &g, 2);
        // The head moves to slot 1 (finishing slot 0 with its 2 into the ring), and 1 more
        // is admitted there; then the charge in slot 0 is rolled back.
        clock.set(Duration::from_millis(600));
        let _ = charge(&m, &g, 1);
        let (head, ring) = (
            m.word.load(Ordering::Relaxed),
            m.ring[0].load(Ordering::Relaxed),
        );
        m.roll_back(&clock, wrote, 2);
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
        let outcome = |later: u64| {
            let clock = ManualClock::new();
            let m = Arc::new(Member::token_bucket(bucket));
            let g = Limits::try_new(clock.clone(), [m.clone()]).unwrap();
            let (_, wrote) = charge(&m, &g, 1);
            clock.set(Duration::from_millis(later));
            let _ = charge(&m, &g, 1);
            m.roll_back(&clock, wrote, 1);
            let tat = m.word.load(Ordering::Relaxed);
            clock.set(Duration::from_secs(1));
            (tat, (0..4).filter(|_| g.try_acquire().is_allowed()).count())
        };
        // Exactly the word the later charge alone would have left, 1.9 s; then one at 1 s: 2
        // in [0.9 s, 1 s], the burst.
        assert_eq!(outcome(900), (1_900_000_000, 1));
        // At a frozen instant the whole charge is owed: exact.
        assert_eq!(outcome(0).0, 1_000_000_000);
    }

    #[test]
    fn a_window_rollback_never_takes_more_than_the_count() {
        // A refund that took the charge's units before its rollback: the count stays at zero
        // instead of borrowing from the window number.
        let clock = ManualClock::new();
        let m = Arc::new(Member::fixed_window(Quota::per_second(5).unwrap()));
        let g = Limits::try_new(clock.clone(), [m.clone()]).unwrap();
        let (_, wrote) = charge(&m, &g, 2);
        assert_eq!(g.refund(5), 2);
        m.roll_back(&clock, wrote, 2);
        assert_eq!(m.word.load(Ordering::Relaxed), 0);
        assert_eq!(g.peek(0).remaining(), 5);
    }
}
