//! The sliding-window counter as documented: the period split into `K` slots of
//! `ceil(period / K)` ns; an admission in slot `e` counts until slot `e + K + 1` begins. A
//! reading in a slot before that of the newest admission counts in the newest admission's
//! slot (time stands still until the clock is back). `remaining` is `limit` minus what counts
//! now; full capacity returns when the newest counted admission stops counting.
//!
//! A live sliding window (`Live`'s documentation) keeps its slots' counts when its limit
//! changes, and the new limit applies to their sum at once: a lowered limit may find more
//! counted than it allows, and then denies every cost above zero until enough has left. Its
//! period never changes.
//!
//! A refund (`Limiter::refund`) lowers the count of the newest admission's slot by up to `n`
//! when its reading falls in that slot, and gives nothing when it falls in another (a later
//! slot has begun, or the reading is older than the newest admission's slot).

use tollgate::{Quota, QuotaError};

use crate::{Outcome, HORIZON};

/// The sliding window's reference model.
#[derive(Clone, Debug)]
pub struct SlidingWindowModel {
    limit: u64,
    period: u64,
    slots: u64,
    slot_len: u64,
    /// (slot, units) of every admission still able to count, oldest first.
    admitted: Vec<(u64, u64)>,
    /// The slot of the newest admission (0 before any).
    newest_slot: u64,
}

impl SlidingWindowModel {
    /// An empty window of `slots` slots for `quota`.
    pub fn new(quota: &Quota, slots: u32) -> Self {
        let period = u64::try_from(quota.period().as_nanos()).expect("a period fits");
        let slots = u64::from(slots);
        SlidingWindowModel {
            limit: quota.limit(),
            period,
            slots,
            slot_len: period.div_ceil(slots),
            admitted: Vec::new(),
            newest_slot: 0,
        }
    }

    /// Whether an admission in slot `e` still counts in slot `now`.
    fn counts(&self, e: u64, now: u64) -> bool {
        now < e + self.slots + 1
    }

    /// Units counted in slot `now`.
    fn counted(&self, now: u64) -> u64 {
        let counted = self.admitted.iter().filter(|&&(e, _)| self.counts(e, now));
        counted.map(|&(_, units)| units).sum()
    }

    /// When (ns) an admission in slot `e` stops counting.
    fn leaves_at(&self, e: u64) -> u64 {
        (e + self.slots + 1) * self.slot_len
    }

    /// One request of `n` units at clock reading `now_ns`.
    pub fn acquire(&mut self, now_ns: u64, n: u64) -> Outcome {
        // Past the horizon time stands still, for the window and every duration alike: a
        // reading past it is the horizon.
        let now_ns = now_ns.min(HORIZON);
        let slot = (now_ns / self.slot_len).max(self.newest_slot);
        let total = self.counted(slot);
        // A lowered limit may leave more counted than it allows: nothing is left then.
        let left = self.limit.saturating_sub(total);
        let reset = |model: &Self| {
            let newest = model
                .admitted
                .iter()
                .rev()
                .find(|&&(e, _)| model.counts(e, slot));
            newest.map_or(0, |&(e, _)| model.leaves_at(e).saturating_sub(now_ns))
        };
        if n > self.limit {
            return Outcome::exceeds(left, reset(self));
        }
        if n <= left {
            if n > 0 {
                self.admitted.push((slot, n));
                self.newest_slot = slot;
                let newest = self.newest_slot;
                let slots = self.slots;
                self.admitted.retain(|&(e, _)| newest < e + slots + 1);
            }
            return Outcome::allowed(left - n, reset(self));
        }
        // The first instant, among those when some admission stops counting, at which n
        // more fit.
        let pass_at = self
            .admitted
            .iter()
            .map(|&(e, _)| self.leaves_at(e))
            .filter(|&at| at > now_ns.min(HORIZON))
            .find(|&at| self.counted((at / self.slot_len).max(slot)) + n <= self.limit)
            .expect("once everything counted now has left, n ≤ limit fits");
        Outcome::denied(left, now_ns, pass_at, reset(self))
    }

    /// A live window's change to `quota`: the new limit, or the period refused.
    pub fn set_quota(&mut self, quota: &Quota) -> Result<(), QuotaError> {
        super::same_period(self.period, quota)?;
        self.limit = quota.limit();
        Ok(())
    }

    /// A refund of `n` units at clock reading `now_ns` (`Limiter::refund`): taken off the
    /// admissions of the slot that counts now, newest first, unless a later slot has begun;
    /// the units given back.
    pub fn refund(&mut self, now_ns: u64, n: u64) -> u64 {
        if now_ns.min(HORIZON) / self.slot_len != self.newest_slot {
            return 0;
        }
        let mut given = 0;
        for (e, units) in self.admitted.iter_mut().rev() {
            if *e != self.newest_slot || given == n {
                break;
            }
            let take = (n - given).min(*units);
            *units -= take;
            given += take;
        }
        // An admission refunded to nothing counts no more (nor for `reset_after`).
        self.admitted.retain(|&(_, units)| units > 0);
        given
    }
}
