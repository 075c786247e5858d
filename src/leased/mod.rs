//! `Leased`: a token bucket whose threads take tokens in small pre-paid leases and spend them
//! with no shared write, so one hot key scales past one cache line.
//!
//! # State
//!
//! | where      | word           | bits   | meaning                                                  |
//! |------------|----------------|--------|----------------------------------------------------------|
//! | shared     | `tat`          | 0..=63 | the bucket's GCRA word, exactly as in `TokenBucket`      |
//! | shared     | `reserved`     | 0..=63 | Σ over threads of their `Holder::reserved`, ≤ `max_parked`|
//! | per thread | `Holder::left` | plain  | tokens of this thread's lease not yet spent              |
//! | per thread | `Holder::reserved` | plain | this thread's share of `reserved`                     |
//!
//! # Invariant
//!
//! Pre-pay: a lease's tokens leave `tat` (one compare-exchange) before any is spent. For every
//! thread `left ≤ reserved ≤ max_tokens − 1` (a grant's request takes at least 1 of it), and
//! `reserved` (shared) `≤ max_parked`, so at most `max_parked` tokens (none when
//! `max_tokens = 1`) are ever parked outside `tat`: in any interval `[a, b]`, `a = b`
//! included, admitted ≤ `burst + rate·(b − a) + parked at a`, hence at most
//! `burst + rate·(b − a) + max_overshoot()`. The bound is reached: tokens parked while the
//! bucket was rich, spent at the instant another thread drains the refilled bucket. The
//! `ttl` does not shorten it: a lease past its `ttl` is not spent from, but its tokens go back
//! to a bucket that misses them, to be taken again. A thread's `reserved` grows (CAS on
//! `reserved`, capped) before its lease grows, and shrinks only after the lease's leftover
//! went back to `tat`.
//!
//! # Orderings
//!
//! Every shared access is `Relaxed`: `tat` and `reserved` are independent counters that
//! publish no other memory, each kept exact by compare-exchange (or `fetch_sub`) on its own
//! modification order. A lease lives in its owner's thread-local slot: plain fields, no atomics.
//!
//! The pure steps ([`plan`](plan::plan), [`credit`](plan::credit)) are apart from the compare-exchange loops that commit them.

use core::fmt;
use std::cell::RefCell;
use std::sync::Arc;

use crate::algo::token_bucket::Gcra;
use crate::algo::Core;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::limiter::TokenBucket;
use crate::sync::Ordering;

mod lease;
#[cfg(tollgate_loom)]
pub(crate) mod loom_model;
mod plan;
#[cfg(tollgate_loom)]
mod planted;
mod shared;

pub use lease::{Lease, LeaseError};
#[cfg(tollgate_loom)]
pub use planted::Planted;
use shared::{Holder, Home, Shared};

/// One thread's lease on one limiter, found by the limiter's address (its `Arc` keeps the
/// address from being reused while the slot lives). Dropping it (the thread exits, or the
/// limiter is gone) gives the lease back.
struct Slot {
    key: usize,
    home: Arc<dyn Home>,
    holder: Holder,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.home.give_back(&mut self.holder);
    }
}

std::thread_local! {
    static SLOTS: RefCell<Vec<Slot>> = const { RefCell::new(Vec::new()) };
}

/// A token bucket that scales one hot key across threads: each thread takes tokens from the
/// bucket in small pre-paid leases (one compare-exchange per lease) and spends them with a
/// thread-local decrement, no shared write and, on most spends, no clock read.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Lease, Leased, Limiter, ManualClock, Quota, TokenBucket};
///
/// let clock = ManualClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(1_000)?, clock.clone());
/// let limiter = Leased::try_new(bucket, Lease::try_new(8, Duration::from_millis(1))?)?;
/// // One thread at one instant: the burst (its leases are paid from the bucket first).
/// let passed = (0..2_000).filter(|_| limiter.try_acquire().is_allowed()).count();
/// assert_eq!(passed, 1_000);
/// assert_eq!(limiter.max_overshoot(), 128); // 16 leases of 8 by default
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Guarantees
///
/// | in any interval `[a, b]`   | admitted at most                               |
/// |----------------------------|------------------------------------------------|
/// | [`TokenBucket`]            | `burst + rate·(b − a)`                         |
/// | `Leased`                   | `burst + rate·(b − a) + max_overshoot()`       |
/// | `Leased`, one instant      | `burst + max_overshoot()`                      |
///
/// `max_overshoot()` is the policy's cap on parked tokens ([`Lease::with_max_parked`]), a
/// constant whatever the number of threads (0 for leases of one token, which park nothing).
/// Example: 1 M/s, leases of 64, a cap of 1024: at most 1024 extra admissions in any window,
/// on top of what the exact bucket allows. The bound is reached, even at one instant: threads
/// that parked tokens while the bucket was rich, then stayed idle while it refilled, spend
/// them at the instant another thread drains the full bucket. A lease's `ttl` does not
/// shorten it (an expired lease's tokens go back to the bucket, to be taken again).
///
/// - **Leases shrink as the bucket empties**: a grant takes at most `available / (2 × cores)`
///   tokens, never less than the request, so the last tokens go out one request at a time.
///   A lease also grows only with demand (twice what the thread spent from its last one).
/// - **Large costs bypass leases**: above [`Lease::bypass_above`] a request is decided by the
///   bucket alone, exactly.
/// - **Give-back**: a lease past its `ttl`, or too small for the next request, goes back to
///   the bucket (never above its burst) in the same compare-exchange that takes the next one.
///   A thread that exits gives its lease back; one that stays idle keeps its lease (and its
///   share of the cap) until its next request: under-admission, never over.
/// - A thread spends from its lease at most [`Lease::clock_every`]` − 1` times past its `ttl`.
///
/// # Decisions
///
/// A denial always comes from the bucket itself, after this thread's lease was given back:
/// `remaining`, `retry_after` and `reset_after` are exact *for the bucket*, but up to
/// `max_overshoot()` tokens may sit in other threads' leases meanwhile (so `remaining` is a
/// lower bound, and the request might pass up to `max_overshoot() / rate` earlier than
/// `retry_after` says, when other leases come back). An admission from a lease reports
/// `remaining` = the bucket's level at the lease's grant + what the lease has left: off by the
/// other leases' grants and the refill since (at most `max_overshoot()` + `rate × ttl`), and
/// `reset_after` as computed at the grant (at most `ttl` too long).
///
/// # Cost
///
/// Per thread and limiter, one thread-local slot (about 100 bytes); the clock must be `'static`
/// (own it, or share it through an `Arc`).
pub struct Leased<C: Clock + 'static = crate::limiter::DefaultClock> {
    shared: Arc<Shared<C>>,
}

impl<C: Clock + 'static> Leased<C> {
    /// Leases from `bucket` by `lease`. Never fails: a lease larger than the bucket's burst is
    /// cut down to the burst; use
    /// [`Leased::try_new`] to have that refused instead.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Lease, Leased, ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// let limiter = Leased::new(bucket, Lease::try_new(64, Duration::from_millis(1))?);
    /// assert_eq!(limiter.lease().max_tokens(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(bucket: TokenBucket<C>, lease: Lease) -> Leased<C> {
        let burst = burst_of(bucket.core());
        let max_tokens = lease.max_tokens.min(burst);
        let lease = Lease {
            max_tokens,
            ..lease
        };
        Leased::build(bucket, lease)
    }

    /// Leases from `bucket` by `lease`, if the bucket can honour it.
    ///
    /// # Errors
    /// [`LeaseError::LeaseAboveBurst`] when `lease.max_tokens()` is above the bucket's burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Lease, LeaseError, Leased, ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// let err = Leased::try_new(bucket, Lease::try_new(64, Duration::from_millis(1))?).unwrap_err();
    /// assert_eq!(err, LeaseError::LeaseAboveBurst { max_tokens: 64, burst: 10 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_new(bucket: TokenBucket<C>, lease: Lease) -> Result<Leased<C>, LeaseError> {
        let burst = burst_of(bucket.core());
        if lease.max_tokens > burst {
            return Err(LeaseError::LeaseAboveBurst {
                max_tokens: lease.max_tokens,
                burst,
            });
        }
        Ok(Leased::build(bucket, lease))
    }

    fn build(bucket: TokenBucket<C>, lease: Lease) -> Leased<C> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        Leased {
            shared: Arc::new(Shared::new(bucket, lease, 2 * cores)),
        }
    }

    /// The most admissions above the exact bucket's in any interval, one instant included:
    /// the most tokens leases can park at once, the cap on parked tokens (none when a lease
    /// holds one token: its request takes it). Reached when parked tokens are spent at the
    /// instant another thread drains the refilled bucket.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Lease, Leased, Quota, TokenBucket};
    /// let lease = Lease::try_new(64, Duration::from_millis(1))?.with_max_parked(1024)?;
    /// let limiter = Leased::new(TokenBucket::new(Quota::per_second(1_000_000)?), lease);
    /// assert_eq!(limiter.max_overshoot(), 1024);
    /// let one = Lease::try_new(1, Duration::from_millis(1))?;
    /// let single = Leased::new(TokenBucket::new(Quota::per_second(100)?), one);
    /// assert_eq!(single.max_overshoot(), 0); // a lease of 1 parks nothing
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_overshoot(&self) -> u64 {
        parkable(&self.shared.lease)
    }

    /// The policy in force (after [`Leased::new`]'s adjustment to the burst).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Lease, Leased, Quota, TokenBucket};
    /// let lease = Lease::try_new(8, Duration::from_millis(1))?;
    /// let limiter = Leased::new(TokenBucket::new(Quota::per_second(100)?), lease);
    /// assert_eq!(limiter.lease(), lease);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lease(&self) -> Lease {
        self.shared.lease
    }

    /// Gives the calling thread's lease back to the bucket now, instead of on its next
    /// request past the `ttl` or at thread exit. Returns the tokens the bucket took back (fewer
    /// than the lease held if the bucket refilled to its burst meanwhile).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Lease, Leased, Limiter, ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(100)?, ManualClock::new());
    /// let limiter = Leased::new(bucket, Lease::try_new(8, Duration::from_millis(1))?);
    /// for _ in 0..2 {
    ///     assert!(limiter.try_acquire().is_allowed()); // leases of 1, then 2 (1 left)
    /// }
    /// assert_eq!(limiter.give_back(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn give_back(&self) -> u64 {
        self.with_holder(|shared, h| shared.give_back(h).credited, |_| 0)
    }

    /// The address that identifies this limiter's slot in a thread's table.
    #[inline]
    fn key(&self) -> usize {
        Arc::as_ptr(&self.shared) as *const () as usize
    }

    /// Runs `f` on this thread's lease, made on first use, or `or_else` if the thread's table
    /// is unavailable (being torn down at thread exit, or already in use further up the stack).
    #[inline]
    fn with_holder<R>(
        &self,
        f: impl FnOnce(&Shared<C>, &mut Holder) -> R,
        or_else: impl FnOnce(&Shared<C>) -> R,
    ) -> R {
        let key = self.key();
        let shared = &*self.shared;
        let done = SLOTS.try_with(|slots| {
            let mut slots = slots.try_borrow_mut().ok()?;
            // The search and the slot's making stay out of this path's frame.
            let slot = match near(&mut slots, key) {
                Some(slot) => slot,
                None => self.find_or_make(&mut slots, key),
            };
            Some(f(shared, &mut slot.holder))
        });
        match done {
            Ok(Some(r)) => r,
            _ => or_else(shared),
        }
    }
}

/// The slot of the limiter at `key` if it is one of the thread's first two: most threads use
/// one or two leased limiters, and finding either takes no loop.
#[inline(always)]
fn near(slots: &mut [Slot], key: usize) -> Option<&mut Slot> {
    match slots {
        [first, ..] if first.key == key => Some(first),
        [_, second, ..] if second.key == key => Some(second),
        _ => None,
    }
}

impl<C: Clock + 'static> Leased<C> {
    /// This limiter's slot in a thread's table past the first two: found, or made (after
    /// dropping the slots of limiters dropped since, which only their slot still holds).
    #[cold]
    #[inline(never)]
    fn find_or_make<'s>(&self, slots: &'s mut Vec<Slot>, key: usize) -> &'s mut Slot {
        let i = match slots.iter().position(|s| s.key == key) {
            Some(i) => i,
            None => {
                slots.retain(|s| Arc::strong_count(&s.home) > 1);
                slots.push(Slot {
                    key,
                    home: self.shared.clone(),
                    holder: Holder::default(),
                });
                slots.len() - 1
            }
        };
        &mut slots[i]
    }
}

/// The most tokens leases of `lease` can park at once: every thread's share of the
/// reservation is at most `max_tokens − 1` (a grant's request takes at least 1), and all
/// together at most the cap, which enough threads reach.
fn parkable(lease: &Lease) -> u64 {
    if lease.max_tokens < 2 {
        0
    } else {
        lease.max_parked
    }
}

fn burst_of(core: &Core<Gcra>) -> u64 {
    let p = &core.params;
    p.tokens(p.capacity)
}

impl<C: Clock + 'static> Leased<C> {
    /// Every request the thread's first two slots cannot spend without a clock read: a clock
    /// check due, a lease to renew, a cost it does not cover, another slot, or no table at all.
    #[cold]
    #[inline(never)]
    fn acquire_slow(&self, n: u64) -> Decision {
        self.with_holder(
            |shared, h| shared.acquire(h, n),
            // No thread-local slot: decide on the bucket alone, exactly.
            |shared| shared.core().acquire(shared.now(), n),
        )
    }
}

impl<C: Clock + 'static> Limiter for Leased<C> {
    #[inline]
    fn try_acquire_n(&self, n: u64) -> Decision {
        // The usual request: a spend from the lease in one of the thread's first two slots, no
        // clock read; the frame holds only that, everything else is in `acquire_slow`.
        let key = self.key();
        let shared = &*self.shared;
        let spent = SLOTS.try_with(|slots| {
            let mut slots = slots.try_borrow_mut().ok()?;
            let slot = near(&mut slots, key)?;
            shared.spend(&mut slot.holder, n)
        });
        match spent {
            Ok(Some(d)) => d,
            _ => self.acquire_slow(n),
        }
    }
}

impl<C: Clock + fmt::Debug + 'static> fmt::Debug for Leased<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leased")
            .field("core", &*self.shared.core)
            .field("lease", &self.shared.lease)
            // Relaxed: a snapshot for display only.
            .field("reserved", &self.shared.reserved.load(Ordering::Relaxed))
            .finish()
    }
}
