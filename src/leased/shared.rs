//! The shared part of a leased bucket: the bucket, the reservation and the lease protocol
//! that spends, grants and gives back through one thread's [`Holder`].

use crossbeam_utils::CachePadded;

use super::lease::Lease;
use super::plan::{plan, Ask, Plan};
use crate::algo::token_bucket::{decide, Gcra};
use crate::algo::Core;
use crate::clock::{duration_to_nanos, Clock, Origin};
use crate::decision::Decision;
use crate::limiter::TokenBucket;
use crate::sync::{AtomicU64, Ordering};

/// One thread's lease on one limiter. Written only by its owner.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Holder {
    /// Unspent tokens of the current lease.
    pub(super) left: u64,
    /// This thread's share of the shared reservation; always `≥ left`.
    pub(super) reserved: u64,
    /// Tokens spent from the current lease, the request that took it included: its demand.
    pub(super) spent: u64,
    /// The clock reading at the grant, and the one after which the lease is no longer spent.
    pub(super) granted_at: u64,
    pub(super) expires_at: u64,
    /// Spends before the next clock read.
    pub(super) until_check: u32,
    /// The bucket's level right after the grant, and its time to full then (for decisions).
    pub(super) level: u64,
    pub(super) reset_ns: u64,
    /// Tokens handed back that the bucket could not take (it was full): lost, never admitted.
    pub(super) lost: u64,
}

/// The shared part of a [`Leased`]: the bucket, the reservation counter and the policy.
pub(crate) struct Shared<C> {
    /// The bucket's `tat` and parameters, on cache lines of their own: a renewal's
    /// compare-exchange takes the line from the other cores, and what every spend and clock
    /// read uses (the clock, the origin, the policy) must not go with it.
    pub(super) core: CachePadded<Core<Gcra>>,
    /// The bucket's clock and the origin its readings count from.
    clock: C,
    origin: Origin,
    pub(super) reserved: CachePadded<AtomicU64>,
    pub(super) lease: Lease,
    /// `lease.bypass_above()`, kept at hand for the fast path.
    pub(super) bypass: u64,
    /// A grant takes at most `available / share` tokens: `2 × available_parallelism`.
    pub(super) share: u64,
}

impl<C: Clock> Shared<C> {
    pub(super) fn new(bucket: TokenBucket<C>, lease: Lease, share: u64) -> Self {
        let (core, clock, origin) = bucket.into_parts();
        Shared {
            core: CachePadded::new(core),
            clock,
            origin,
            reserved: CachePadded::new(AtomicU64::new(0)),
            bypass: lease.bypass_above(),
            lease,
            share: share.max(1),
        }
    }

    #[inline]
    pub(super) fn core(&self) -> &Core<Gcra> {
        &self.core
    }

    #[inline]
    pub(super) fn now(&self) -> u64 {
        self.origin.now(&self.clock)
    }

    /// The spend test: may `n` come out of a lease holding `left`?
    #[inline(always)]
    pub(super) fn covers(&self, left: u64, n: u64) -> bool {
        left >= n
    }

    /// A spend from this thread's lease with no clock read: the lease covers `n`, `n` is
    /// neither 0 nor above the bypass, and the lease's clock check is not due. `None` when any
    /// of that fails: the request then takes [`Shared::acquire`].
    #[inline(always)]
    pub(crate) fn spend(&self, h: &mut Holder, n: u64) -> Option<Decision> {
        if n != 0 && n <= self.bypass && h.until_check != 0 && self.covers(h.left, n) {
            h.until_check -= 1;
            Some(self.take(h, n))
        } else {
            None
        }
    }

    /// `n` out of the lease `h` covers: the admission.
    #[inline(always)]
    fn take(&self, h: &mut Holder, n: u64) -> Decision {
        h.left = h.left.saturating_sub(n);
        h.spent += n;
        Decision::allowed(h.level + h.left, h.reset_ns)
    }

    /// One request through this thread's lease `h`.
    #[inline]
    pub(crate) fn acquire(&self, h: &mut Holder, n: u64) -> Decision {
        if let Some(d) = self.spend(h, n) {
            return d;
        }
        if n != 0 && n <= self.bypass && self.covers(h.left, n) {
            // The lease covers it and its clock check is due.
            let now = self.now();
            if now < h.granted_at || now >= h.expires_at {
                return self.renew(h, now, n);
            }
            h.until_check = self.lease.clock_every - 1;
            return self.take(h, n);
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
    pub(super) fn renew(&self, h: &mut Holder, now: u64, n: u64) -> Decision {
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
            h.left = plan.taken - n;
            h.spent = n;
            h.granted_at = now;
            h.expires_at = now.saturating_add(self.lease.ttl_ns);
            h.until_check = self.lease.clock_every - 1;
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
    pub(super) fn exchange(&self, now: u64, give: u64, n: u64, want: u64) -> Plan {
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
            let step = plan(p, tat, now, ask);
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
    pub(super) fn reserve(&self, want: u64) -> u64 {
        let cap = self.lease.max_parked;
        // Relaxed: the reservation is a counter whose CAS keeps it exact; it publishes nothing.
        let mut cur = self.reserved.load(Ordering::Relaxed);
        loop {
            let got = want.min(cap.saturating_sub(cur));
            if got == 0 {
                return 0;
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

    pub(super) fn release(&self, amount: u64) {
        // Relaxed: a counter; every thread's share was added before it is subtracted.
        self.reserved.fetch_sub(amount, Ordering::Relaxed);
    }
}

/// What a thread-local slot can do with its limiter without knowing the clock type.
pub(super) trait Home: Send + Sync {
    fn give_back(&self, h: &mut Holder);
}

impl<C: Clock> Home for Shared<C> {
    fn give_back(&self, h: &mut Holder) {
        let _ = Shared::give_back(self, h);
    }
}
