//! The leased bucket's planted defects, for the loom models (`loom-tests/tests/leased.rs`);
//! built only for them (`cfg(tollgate_loom)`).
//!
//! [`Mutant`] is a [`Shared`] with one [`Planted`] bug: its protocol (`covers`, `acquire`,
//! `renew`, `give_back`, `exchange`, `reserve`) is a copy of the real one in `shared.rs` with
//! the planted lines marked `// PLANTED`, and `loom-tests/tests/mutants_match.rs` fails if a
//! copy differs from the real code anywhere else. The product's types know nothing of it.

use core::ops::Deref;

use super::plan::{plan, Ask, Plan};
use super::shared::{Holder, Shared};
use crate::algo::token_bucket::decide;
use crate::clock::{duration_to_nanos, Clock};
use crate::decision::Decision;
use crate::quota::GcraParams;
use crate::sync::Ordering;

/// A planted bug, for the loom models to catch; `None` is the real protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// A leased bucket's shared state with a planted bug: the state is the real one; the
/// protocol below is the copy.
pub(crate) struct Mutant<C> {
    shared: Shared<C>,
    planted: Planted,
}

impl<C> Deref for Mutant<C> {
    type Target = Shared<C>;

    fn deref(&self) -> &Shared<C> {
        &self.shared
    }
}

impl<C: Clock> Mutant<C> {
    /// `shared` running the protocol with `planted`.
    pub(super) fn new(shared: Shared<C>, planted: Planted) -> Self {
        Mutant { shared, planted }
    }

    fn planted(&self, bug: Planted) -> bool {
        self.planted == bug
    }

    /// The spend test: may `n` come out of a lease holding `left`?
    #[inline(always)]
    pub(super) fn covers(&self, left: u64, n: u64) -> bool {
        if self.planted(Planted::SpendOffByOne) {
            // PLANTED: one spend more than the lease holds (`left + 1 ≥ n`)
            return left + 1 >= n;
        }
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
            // PLANTED: the expiry check skipped under `TtlIgnored`
            if now < h.granted_at || (now >= h.expires_at && !self.planted(Planted::TtlIgnored)) {
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
            h.left = if self.planted(Planted::GrantKeepsRequest) {
                // PLANTED: the request's own `n` parked as well
                plan.taken
            } else {
                plan.taken - n
            };
            h.spent = n;
            h.granted_at = now;
            h.expires_at = now.saturating_add(self.lease.ttl_ns);
            // PLANTED: `clock_every`, not `clock_every − 1`, under `ClockEveryOffByOne`
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
            let step = if self.planted(Planted::UnclampedGiveBack) && give > 0 {
                // PLANTED: the give-back credited in full, unclamped
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
    pub(super) fn reserve(&self, want: u64) -> u64 {
        let cap = self.lease.max_parked;
        // Relaxed: the reservation is a counter whose CAS keeps it exact; it publishes nothing.
        let mut cur = self.reserved.load(Ordering::Relaxed);
        loop {
            let got = want.min(cap.saturating_sub(cur));
            if got == 0 {
                return 0;
            }
            if self.planted(Planted::ReserveLoadStore) {
                // PLANTED: a load and a store, not a compare-exchange
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
}

/// [`plan`] with the give-back clamp missing (the [`Planted::UnclampedGiveBack`] bug): the
/// word moves back by everything handed in, and may fall below `now`.
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
