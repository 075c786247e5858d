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
//! The pure steps ([`plan`], [`credit`]) are apart from the compare-exchange loops that commit them.

use core::fmt;
use core::time::Duration;
use std::cell::RefCell;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::algo::token_bucket::{decide, Gcra, TokenBucket};
use crate::algo::Core;
use crate::clock::{duration_to_nanos, Clock};
use crate::decision::Decision;
use crate::limiter::Limiter;
use crate::quota::{GcraParams, HORIZON};
use crate::sync::{AtomicU64, Ordering};

/// A lease policy the bucket cannot honour, or a setting outside its range.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Lease, LeaseError};
/// assert_eq!(Lease::new(0, Duration::from_millis(1)), Err(LeaseError::ZeroTokens));
/// println!("{}", LeaseError::ZeroTtl); // "a lease must live at least 1 ns"
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseError {
    /// `max_tokens` was 0: a lease could hold nothing.
    ZeroTokens,
    /// The time to live was zero.
    ZeroTtl,
    /// The clock-read interval was 0 spends.
    ZeroClockEvery,
    /// The cap on parked tokens is below one lease.
    CapBelowLease {
        /// The cap asked for.
        max_parked: u64,
        /// The lease size it must hold at least.
        max_tokens: u64,
    },
    /// A lease larger than the bucket's burst could never be granted whole.
    LeaseAboveBurst {
        /// The lease size asked for.
        max_tokens: u64,
        /// The bucket's burst.
        burst: u64,
    },
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LeaseError::ZeroTokens => f.write_str("a lease must hold at least 1 token"),
            LeaseError::ZeroTtl => f.write_str("a lease must live at least 1 ns"),
            LeaseError::ZeroClockEvery => {
                f.write_str("a lease must read the clock at least every 1 spend")
            }
            LeaseError::CapBelowLease {
                max_parked,
                max_tokens,
            } => write!(
                f,
                "the cap of {max_parked} parked tokens is below one lease of {max_tokens}"
            ),
            LeaseError::LeaseAboveBurst { max_tokens, burst } => write!(
                f,
                "a lease of {max_tokens} tokens is above the bucket's burst of {burst}"
            ),
        }
    }
}

impl std::error::Error for LeaseError {}

/// How [`Leased`] hands out tokens: at most `max_tokens` per lease, a lease spent from for at
/// most `ttl`, at most `max_parked` tokens parked in all leases together.
///
/// ```
/// use std::time::Duration;
/// use tollgate::Lease;
///
/// let lease = Lease::new(64, Duration::from_millis(1))?.with_max_parked(1024)?;
/// assert_eq!((lease.max_tokens(), lease.max_parked()), (64, 1024));
/// assert_eq!(lease.bypass_above(), 32); // larger costs go straight to the bucket
/// # Ok::<(), tollgate::LeaseError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    max_tokens: u64,
    ttl_ns: u64,
    max_parked: u64,
    clock_every: u32,
}

/// The default cap on parked tokens, in leases: `max_parked = 16 × max_tokens`.
const DEFAULT_PARKED_LEASES: u64 = 16;

/// The default number of spends between two clock reads on the fast path.
const DEFAULT_CLOCK_EVERY: u32 = 8;

impl Lease {
    /// At most `max_tokens` per lease, each spent from for at most `ttl` (see
    /// [`Lease::with_clock_every`] for how that is checked), with a cap on parked tokens of
    /// `16 × max_tokens` (saturating) until [`Lease::with_max_parked`] says otherwise.
    ///
    /// # Errors
    /// [`LeaseError::ZeroTokens`], [`LeaseError::ZeroTtl`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Lease, LeaseError};
    /// let lease = Lease::new(32, Duration::from_micros(500))?;
    /// assert_eq!(lease.max_parked(), 512);
    /// assert_eq!(Lease::new(8, Duration::ZERO), Err(LeaseError::ZeroTtl));
    /// # Ok::<(), LeaseError>(())
    /// ```
    pub fn new(max_tokens: u64, ttl: Duration) -> Result<Lease, LeaseError> {
        if max_tokens == 0 {
            return Err(LeaseError::ZeroTokens);
        }
        if ttl.is_zero() {
            return Err(LeaseError::ZeroTtl);
        }
        Ok(Lease {
            max_tokens,
            ttl_ns: duration_to_nanos(ttl),
            max_parked: max_tokens.saturating_mul(DEFAULT_PARKED_LEASES),
            clock_every: DEFAULT_CLOCK_EVERY,
        })
    }

    /// Caps the tokens parked in all leases together, whatever the number of threads: this
    /// is [`Leased::max_overshoot`] (unless a lease holds a single token, and parks none).
    ///
    /// # Errors
    /// [`LeaseError::CapBelowLease`] when `max_parked < max_tokens`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Lease, LeaseError};
    /// let lease = Lease::new(16, Duration::from_millis(1))?;
    /// assert_eq!(lease.with_max_parked(256)?.max_parked(), 256);
    /// assert!(matches!(lease.with_max_parked(8), Err(LeaseError::CapBelowLease { .. })));
    /// # Ok::<(), LeaseError>(())
    /// ```
    pub fn with_max_parked(self, max_parked: u64) -> Result<Lease, LeaseError> {
        if max_parked < self.max_tokens {
            return Err(LeaseError::CapBelowLease {
                max_parked,
                max_tokens: self.max_tokens,
            });
        }
        Ok(Lease { max_parked, ..self })
    }

    /// Reads the clock on the fast path once every `spends` spends (default 8); the other
    /// spends are a thread-local decrement with no clock read. `1` checks the time to live on
    /// every spend. A lease is spent from at most `spends − 1` times after its `ttl` passed,
    /// whatever the idle time in between (the leftover then goes back to the bucket).
    ///
    /// # Errors
    /// [`LeaseError::ZeroClockEvery`] for 0.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Lease;
    /// let lease = Lease::new(16, Duration::from_millis(1))?.with_clock_every(1)?;
    /// assert_eq!(lease.clock_every(), 1);
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    pub fn with_clock_every(self, spends: u32) -> Result<Lease, LeaseError> {
        if spends == 0 {
            return Err(LeaseError::ZeroClockEvery);
        }
        Ok(Lease {
            clock_every: spends,
            ..self
        })
    }

    /// The most tokens one lease holds.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(tollgate::Lease::new(8, Duration::from_millis(1))?.max_tokens(), 8);
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    pub fn max_tokens(&self) -> u64 {
        self.max_tokens
    }

    /// How long a lease is spent from at most.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let lease = tollgate::Lease::new(8, Duration::from_millis(2))?;
    /// assert_eq!(lease.ttl(), Duration::from_millis(2));
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    pub fn ttl(&self) -> Duration {
        Duration::from_nanos(self.ttl_ns)
    }

    /// The cap on tokens parked in all leases together.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(tollgate::Lease::new(8, Duration::from_millis(1))?.max_parked(), 128);
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    pub fn max_parked(&self) -> u64 {
        self.max_parked
    }

    /// Spends between two clock reads on the fast path.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(tollgate::Lease::new(8, Duration::from_millis(1))?.clock_every(), 8);
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    pub fn clock_every(&self) -> u32 {
        self.clock_every
    }

    /// Costs above this go straight to the bucket, exactly, never through a lease:
    /// `max(1, max_tokens / 2)`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(tollgate::Lease::new(1, Duration::from_millis(1))?.bypass_above(), 1);
    /// # Ok::<(), tollgate::LeaseError>(())
    /// ```
    #[inline]
    pub fn bypass_above(&self) -> u64 {
        (self.max_tokens / 2).max(1)
    }
}

/// What one compare-exchange on `tat` does: give back, then take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The word to write, if anything changes.
    pub(crate) write: Option<u64>,
    /// `tat` after the give-back, before the take: what the decision is made on.
    pub(crate) base: u64,
    /// Tokens of the give-back the bucket was missing, hence credited.
    pub(crate) credited: u64,
    /// Tokens taken: 0 (denied), or `n ≤ taken ≤ want`.
    pub(crate) taken: u64,
}

/// Of `give` tokens handed back at `now` (ticks), how many the bucket can take without rising
/// above its burst: the whole tokens it is missing, `(tat − now) / interval`.
#[inline]
pub(crate) fn credit(p: &GcraParams, tat: u64, now: u64, give: u64) -> u64 {
    // A clock that stepped back can leave `tat − now` above the capacity: at most the burst
    // is missing, and `tokens` needs its argument below 2^62.
    give.min(p.tokens(tat.saturating_sub(now).min(p.capacity)))
}

/// What a grant asks of the word: give `give` back, then take at least `n` and at most
/// `want`, and no more than `max(n, available / share)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask {
    give: u64,
    n: u64,
    want: u64,
    share: u64,
}

/// The pure grant: on word `tat` at `now_ns`, credit what the bucket misses of `give`, then
/// take `k` tokens, `n ≤ k ≤ want`, and no more than `max(n, available / share)`, so that the
/// last tokens go out one request at a time. Nothing is taken when fewer than `n` are there.
#[inline]
pub(crate) fn plan(p: &GcraParams, tat: u64, now_ns: u64, ask: Ask) -> Plan {
    let Ask {
        give,
        n,
        want,
        share,
    } = ask;
    let now = now_ns.min(HORIZON) * u64::from(p.scale);
    let credited = credit(p, tat, now, give);
    // credited × interval ≤ tat − now: no underflow, and the result stays ≥ now.
    let base = tat - credited * p.interval;
    let start = base.max(now);
    // start − now ≤ capacity unless the clock stepped back; then fewer (or no) tokens.
    let available = p.tokens((now + p.capacity).saturating_sub(start));
    if n == 0 || n > available {
        return Plan {
            write: (credited > 0).then_some(base),
            base,
            credited,
            taken: 0,
        };
    }
    let taken = want.min(available).min((available / share).max(n)).max(n);
    Plan {
        // taken ≤ available: start + taken × interval ≤ now + capacity (the invariant).
        write: Some(start + taken * p.interval),
        base,
        credited,
        taken,
    }
}

/// A planted bug, for the loom models to catch (`tollgate::__loom`); `None` in every build
/// but the models'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(tollgate_loom), allow(dead_code))]
pub enum Planted {
    /// The real protocol.
    None,
    /// The spend test admits when `left + 1 ≥ n` (the `<=`-for-`<` slip of batched
    /// consumption): one spend from an empty lease.
    SpendOffByOne,
    /// The give-back credits all it is handed, even to a full bucket.
    UnclampedGiveBack,
    /// A grant parks all it took, the request's own `n` included: `n` is spent twice.
    GrantKeepsRequest,
    /// The reservation is a load and a store, not a compare-exchange: racing grants lose
    /// each other's reservations and exceed the cap.
    ReserveLoadStore,
    /// The spend's clock check ignores the lease's expiry: a lease is spent from past its
    /// `ttl`.
    TtlIgnored,
    /// A grant counts `clock_every` spends before the next clock read instead of
    /// `clock_every − 1`: one spend more past the `ttl` than the policy says.
    ClockEveryOffByOne,
}

/// One thread's lease on one limiter. Written only by its owner.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Holder {
    /// Unspent tokens of the current lease.
    left: u64,
    /// This thread's share of the shared reservation; always `≥ left`.
    reserved: u64,
    /// Tokens spent from the current lease, the request that took it included: its demand.
    spent: u64,
    /// The clock reading at the grant, and the one after which the lease is no longer spent.
    granted_at: u64,
    expires_at: u64,
    /// Spends before the next clock read.
    until_check: u32,
    /// The bucket's level right after the grant, and its time to full then (for decisions).
    level: u64,
    reset_ns: u64,
    /// Tokens handed back that the bucket could not take (it was full): lost, never admitted.
    lost: u64,
}

/// The shared part of a [`Leased`]: the bucket, the reservation counter and the policy.
pub(crate) struct Shared<C> {
    bucket: TokenBucket<C>,
    reserved: CachePadded<AtomicU64>,
    lease: Lease,
    /// `lease.bypass_above()`, kept at hand for the fast path.
    bypass: u64,
    /// A grant takes at most `available / share` tokens: `2 × available_parallelism`.
    share: u64,
    #[cfg(tollgate_loom)]
    planted: Planted,
}

impl<C: Clock> Shared<C> {
    fn new(bucket: TokenBucket<C>, lease: Lease, share: u64) -> Self {
        Shared {
            bucket,
            reserved: CachePadded::new(AtomicU64::new(0)),
            bypass: lease.bypass_above(),
            lease,
            share: share.max(1),
            #[cfg(tollgate_loom)]
            planted: Planted::None,
        }
    }

    #[inline(always)]
    fn planted(&self, _bug: Planted) -> bool {
        #[cfg(tollgate_loom)]
        return self.planted == _bug;
        #[cfg(not(tollgate_loom))]
        false
    }

    #[inline]
    fn core(&self) -> &Core<Gcra> {
        self.bucket.core()
    }

    #[inline]
    fn now(&self) -> u64 {
        self.bucket.now_ns()
    }

    /// The spend test: may `n` come out of a lease holding `left`?
    #[inline(always)]
    fn covers(&self, left: u64, n: u64) -> bool {
        if self.planted(Planted::SpendOffByOne) {
            return left + 1 >= n;
        }
        left >= n
    }

    /// One request through this thread's lease `h`.
    #[inline]
    pub(crate) fn acquire(&self, h: &mut Holder, n: u64) -> Decision {
        if n != 0 && n <= self.bypass && self.covers(h.left, n) {
            if h.until_check == 0 {
                let now = self.now();
                if now < h.granted_at || (now >= h.expires_at && !self.planted(Planted::TtlIgnored))
                {
                    return self.renew(h, now, n);
                }
                h.until_check = self.lease.clock_every - 1;
            } else {
                h.until_check -= 1;
            }
            h.left = h.left.saturating_sub(n);
            h.spent += n;
            return Decision::allowed(h.level + h.left, h.reset_ns);
        }
        let now = self.now();
        if n == 0 || n > self.bypass {
            return self.core().acquire(now, n);
        }
        self.renew(h, now, n)
    }

    /// The slow path: give the old lease back and take a new one, sized by the last lease's
    /// demand, the bucket's level and the cap, in one compare-exchange on `tat`.
    #[cold]
    fn renew(&self, h: &mut Holder, now: u64, n: u64) -> Decision {
        let p = &self.core().params;
        let want = h.spent.saturating_mul(2).clamp(n, self.lease.max_tokens);
        // The lease will park `want − n`: make room in this thread's reservation first.
        if want - n > h.reserved {
            h.reserved += self.reserve(want - n - h.reserved);
        }
        let want = want.min(n + h.reserved);
        let give = h.left;
        let plan = self.exchange(now, give, n, want);
        h.lost += give - plan.credited;
        let decision = if plan.taken == 0 {
            h.left = 0;
            h.spent = 0;
            decide(p, plan.base, now, n).0
        } else {
            h.left = if self.planted(Planted::GrantKeepsRequest) {
                plan.taken
            } else {
                plan.taken - n
            };
            h.spent = n;
            h.granted_at = now;
            h.expires_at = now.saturating_add(self.lease.ttl_ns);
            h.until_check =
                self.lease.clock_every - u32::from(!self.planted(Planted::ClockEveryOffByOne));
            let after = decide(p, plan.base, now, plan.taken).0;
            h.level = after.remaining();
            h.reset_ns = duration_to_nanos(after.reset_after());
            Decision::allowed(h.level + h.left, h.reset_ns)
        };
        // The leftover is back in `tat` (or lost): only now may the reservation shrink.
        if h.reserved > h.left {
            self.release(h.reserved - h.left);
            h.reserved = h.left;
        }
        decision
    }

    /// Gives this thread's lease back and releases its reservation.
    pub(crate) fn give_back(&self, h: &mut Holder) -> Plan {
        let plan = self.exchange(self.now(), h.left, 0, 0);
        h.lost += h.left - plan.credited;
        h.left = 0;
        h.spent = 0;
        if h.reserved > 0 {
            self.release(h.reserved);
            h.reserved = 0;
        }
        plan
    }

    /// The compare-exchange loop around [`plan`].
    fn exchange(&self, now: u64, give: u64, n: u64, want: u64) -> Plan {
        let core = self.core();
        let p = &core.params;
        // Relaxed: `tat` publishes nothing else; a stale value fails the compare-exchange.
        let ask = Ask {
            give,
            n,
            want,
            share: self.share,
        };
        let mut tat = core.state.load(Ordering::Relaxed);
        loop {
            let step = if self.planted(Planted::UnclampedGiveBack) && give > 0 {
                unclamped(p, tat, now, ask)
            } else {
                plan(p, tat, now, ask)
            };
            let Some(new) = step.write else {
                return step;
            };
            // Relaxed: admissions and give-backs are ordered by this word's modification order.
            match core
                .state
                .compare_exchange_weak(tat, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return step,
                Err(current) => tat = current,
            }
        }
    }

    /// Adds up to `want` to the shared reservation without passing the cap; returns what it got.
    fn reserve(&self, want: u64) -> u64 {
        let cap = self.lease.max_parked;
        // Relaxed: the reservation is a counter whose CAS keeps it exact; it publishes nothing.
        let mut cur = self.reserved.load(Ordering::Relaxed);
        loop {
            let got = want.min(cap.saturating_sub(cur));
            if got == 0 {
                return 0;
            }
            if self.planted(Planted::ReserveLoadStore) {
                // Relaxed: the planted bug is the missing read-modify-write, not the ordering.
                self.reserved.store(cur + got, Ordering::Relaxed);
                return got;
            }
            // Relaxed: as the load above.
            match self.reserved.compare_exchange_weak(
                cur,
                cur + got,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return got,
                Err(now) => cur = now,
            }
        }
    }

    fn release(&self, amount: u64) {
        // Relaxed: a counter; every thread's share was added before it is subtracted.
        self.reserved.fetch_sub(amount, Ordering::Relaxed);
    }
}

/// [`plan`] with the give-back clamp missing (the [`Planted::UnclampedGiveBack`] bug): the
/// word moves back by everything handed in, and may fall below `now`.
#[cfg_attr(not(tollgate_loom), allow(dead_code))]
fn unclamped(p: &GcraParams, tat: u64, now_ns: u64, ask: Ask) -> Plan {
    let base = tat.saturating_sub(ask.give * p.interval);
    let mut step = plan(p, base, now_ns, Ask { give: 0, ..ask });
    step.base = base;
    step.credited = ask.give;
    if step.write.is_none() {
        step.write = Some(base);
    }
    step
}

/// What a thread-local slot can do with its limiter without knowing the clock type.
trait Home: Send + Sync {
    fn give_back(&self, h: &mut Holder);
}

impl<C: Clock> Home for Shared<C> {
    fn give_back(&self, h: &mut Holder) {
        let _ = Shared::give_back(self, h);
    }
}

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
/// let limiter = Leased::try_new(bucket, Lease::new(8, Duration::from_millis(1))?)?;
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
    /// let limiter = Leased::new(bucket, Lease::new(64, Duration::from_millis(1))?);
    /// assert_eq!(limiter.lease().max_tokens(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(bucket: TokenBucket<C>, lease: Lease) -> Leased<C> {
        let burst = burst_of(&bucket);
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
    /// let err = Leased::try_new(bucket, Lease::new(64, Duration::from_millis(1))?).unwrap_err();
    /// assert_eq!(err, LeaseError::LeaseAboveBurst { max_tokens: 64, burst: 10 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_new(bucket: TokenBucket<C>, lease: Lease) -> Result<Leased<C>, LeaseError> {
        let burst = burst_of(&bucket);
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
    /// let lease = Lease::new(64, Duration::from_millis(1))?.with_max_parked(1024)?;
    /// let limiter = Leased::new(TokenBucket::new(Quota::per_second(1_000_000)?), lease);
    /// assert_eq!(limiter.max_overshoot(), 1024);
    /// let one = Lease::new(1, Duration::from_millis(1))?;
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
    /// let lease = Lease::new(8, Duration::from_millis(1))?;
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
    /// let limiter = Leased::new(bucket, Lease::new(8, Duration::from_millis(1))?);
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
            // Most threads use one or two leased limiters: the first slot is the usual hit.
            let i = if slots.first().is_some_and(|s| s.key == key) {
                0
            } else if let Some(i) = slots.iter().position(|s| s.key == key) {
                i
            } else {
                // Slots of limiters dropped since (only the slot still holds them).
                slots.retain(|s| Arc::strong_count(&s.home) > 1);
                slots.push(Slot {
                    key,
                    home: self.shared.clone(),
                    holder: Holder::default(),
                });
                slots.len() - 1
            };
            Some(f(shared, &mut slots[i].holder))
        });
        match done {
            Ok(Some(r)) => r,
            _ => or_else(shared),
        }
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

fn burst_of<C>(bucket: &TokenBucket<C>) -> u64 {
    let p = &bucket.core().params;
    p.tokens(p.capacity)
}

impl<C: Clock + 'static> Limiter for Leased<C> {
    #[inline]
    fn try_acquire_n(&self, n: u64) -> Decision {
        self.with_holder(
            |shared, h| shared.acquire(h, n),
            // No thread-local slot: decide on the bucket alone, exactly.
            |shared| shared.core().acquire(shared.now(), n),
        )
    }
}

impl<C: Clock + fmt::Debug + 'static> fmt::Debug for Leased<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leased")
            .field("bucket", &self.shared.bucket)
            .field("lease", &self.shared.lease)
            // Relaxed: a snapshot for display only.
            .field("reserved", &self.shared.reserved.load(Ordering::Relaxed))
            .finish()
    }
}

/// The lease protocol without thread-local storage, for the loom models
/// (`loom-tests/tests/leased.rs`): each model thread owns its [`LeaseHolder`] by `&mut`,
/// exactly as a thread owns its slot.
#[cfg(tollgate_loom)]
pub mod loom_model {
    use super::{Holder, Lease, Planted, Shared};
    use crate::algo::token_bucket::TokenBucket;
    use crate::clock::ManualClock;
    use crate::decision::Decision;
    use crate::quota::{Quota, HORIZON};
    use crate::sync::Ordering;

    /// One model thread's lease.
    #[derive(Debug, Default)]
    pub struct LeaseHolder(Holder);

    impl LeaseHolder {
        /// A holder whose last lease had `spent` tokens spent from it: its next request asks
        /// for a lease of `2 × spent` (at most `max_tokens`).
        pub fn with_demand(spent: u64) -> Self {
            LeaseHolder(Holder {
                spent,
                ..Holder::default()
            })
        }
        /// Unspent tokens of the lease.
        pub fn left(&self) -> u64 {
            self.0.left
        }
        /// This holder's share of the reservation.
        pub fn reserved(&self) -> u64 {
            self.0.reserved
        }
        /// Tokens handed back that the bucket could not take.
        pub fn lost(&self) -> u64 {
            self.0.lost
        }
        /// The clock reading (ns) at the current lease's grant.
        pub fn granted_at(&self) -> u64 {
            self.0.granted_at
        }
    }

    /// A leased bucket on a manual clock, with an optional planted bug.
    pub struct LeaseModel {
        shared: Shared<ManualClock>,
    }

    impl LeaseModel {
        /// The model of `Leased::new(TokenBucket::with_clock(quota, clock), lease)`, with
        /// grants limited to `available / share`.
        pub fn new(
            quota: Quota,
            lease: Lease,
            share: u64,
            clock: ManualClock,
            planted: Planted,
        ) -> Self {
            let mut shared = Shared::new(TokenBucket::with_clock(quota, clock), lease, share);
            shared.planted = planted;
            LeaseModel { shared }
        }

        /// One request through `h`.
        pub fn acquire(&self, h: &mut LeaseHolder, n: u64) -> Decision {
            self.shared.acquire(&mut h.0, n)
        }

        /// Gives `h`'s lease back. Returns `(credited, tat_after, now_ticks)`.
        pub fn give_back(&self, h: &mut LeaseHolder) -> (u64, u64, u64) {
            let now = self.now_ticks();
            let plan = self.shared.give_back(&mut h.0);
            (plan.credited, plan.base, now)
        }

        /// The clock in the bucket's ticks.
        pub fn now_ticks(&self) -> u64 {
            let p = &self.shared.core().params;
            self.shared.now().min(HORIZON) * u64::from(p.scale)
        }

        /// Tokens in the bucket now.
        pub fn level(&self) -> u64 {
            let p = &self.shared.core().params;
            let now = self.now_ticks();
            // Relaxed: read after the model's threads joined.
            let tat = self.shared.core().state.load(Ordering::Relaxed);
            p.tokens((now + p.capacity).saturating_sub(tat.max(now)))
        }

        /// The shared reservation.
        pub fn reserved(&self) -> u64 {
            // Relaxed: a counter read; the models read it after joins or as a bound check.
            self.shared.reserved.load(Ordering::Relaxed)
        }

        /// The bucket's burst.
        pub fn burst(&self) -> u64 {
            super::burst_of(&self.shared.bucket)
        }

        /// The cap on parked tokens.
        pub fn max_parked(&self) -> u64 {
            self.shared.lease.max_parked
        }

        /// What `Leased::max_overshoot` says for this policy.
        pub fn max_overshoot(&self) -> u64 {
            super::parkable(&self.shared.lease)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::Quota;

    fn params(limit: u64) -> GcraParams {
        Quota::per_second(limit).unwrap().gcra().unwrap()
    }

    fn ask(give: u64, n: u64, want: u64, share: u64) -> Ask {
        Ask {
            give,
            n,
            want,
            share,
        }
    }

    #[test]
    fn a_grant_takes_up_to_want_and_never_past_the_share() {
        let p = params(100); // interval 10 ms, burst 100
        let full = plan(&p, 0, 0, ask(0, 1, 64, 1));
        assert_eq!((full.taken, full.write), (64, Some(64 * p.interval)));
        // 100 available, a share of 4: at most 25.
        assert_eq!(plan(&p, 0, 0, ask(0, 1, 64, 4)).taken, 25);
        // 3 available, a share of 4: the request alone, exactly as the plain bucket.
        let tat = 97 * p.interval;
        assert_eq!(plan(&p, tat, 0, ask(0, 2, 64, 4)).taken, 2);
        let denied = plan(&p, tat, 0, ask(0, 4, 64, 4));
        assert_eq!((denied.taken, denied.write), (0, None));
    }

    #[test]
    fn a_give_back_is_credited_only_up_to_the_burst() {
        let p = params(100);
        // 10 tokens missing at t = 0: 4 of 4 credited, then 10 of 25.
        let tat = 10 * p.interval;
        assert_eq!(credit(&p, tat, 0, 4), 4);
        assert_eq!(credit(&p, tat, 0, 25), 10);
        let back = plan(&p, tat, 0, ask(25, 0, 0, 1));
        assert_eq!((back.credited, back.write), (10, Some(0)));
        // A full bucket takes nothing back and is not written.
        assert_eq!(plan(&p, 0, 5_000, ask(3, 0, 0, 1)).write, None);
        // A clock far behind the word: at most the burst is missing.
        assert_eq!(credit(&p, u64::MAX / 4, 0, u64::MAX), 100);
    }

    #[test]
    fn a_denied_grant_still_returns_the_old_lease() {
        let p = params(100);
        let tat = 100 * p.interval; // empty
        let step = plan(&p, tat, 0, ask(2, 3, 8, 1));
        assert_eq!((step.credited, step.taken), (2, 0));
        assert_eq!(step.write, Some(98 * p.interval));
    }
}
