//! The lease protocol without thread-local storage, for the loom models
//! (`loom-tests/tests/leased.rs`): each model thread owns its [`LeaseHolder`] by `&mut`,
//! exactly as a thread owns its slot.

use super::planted::{Mutant, Planted};
use super::{Holder, Lease, Shared};
use crate::clock::ManualClock;
use crate::decision::Decision;
use crate::limiter::TokenBucket;
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
    shared: Mutant<ManualClock>,
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
        let shared = Shared::new(TokenBucket::with_clock(quota, clock), lease, share);
        LeaseModel {
            shared: Mutant::new(shared, planted),
        }
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
        super::burst_of(self.shared.core())
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
