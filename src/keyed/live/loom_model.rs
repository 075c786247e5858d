//! A live keyed token bucket for the loom models (`loom-tests/tests/keyed_live.rs`): one key's
//! slot and its plan, the map replaced by that one entry (the change's walk visits it), on the
//! real code for the sound runs; each planted defect is a checked copy of it (`planted.rs`).

use super::planted::{Plan, Slot, CHANGE_SKIPS_WALK, REQUESTER_SKIPS_CARRY, WORD_WITHOUT_EPOCH};
use super::{BucketSlot, LivePlan};
use crate::algo::token_bucket::Gcra;
use crate::clock::{Clock, ManualClock};
use crate::keyed::plans::KeySlot;
use crate::keyed::slot::Attempt;
use crate::quota::Quota;
use crate::sync::Arc;

/// Which protocol the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyedLivePlant {
    /// The protocol of `keyed/live.rs`.
    Sound,
    /// Defect: a request decides a word counted in the previous version without
    /// carrying it.
    RequesterSkipsCarry,
    /// Defect: a change publishes without carrying the plan's words first.
    ChangeSkipsWalk,
    /// Defect: requests write epoch 0 whatever version they decided under.
    WordWithoutEpoch,
}

/// One key of a live keyed token bucket map, on a manual clock.
#[derive(Debug)]
pub struct KeyedLiveModel {
    slot: BucketSlot,
    clock: ManualClock,
    plant: KeyedLivePlant,
}

impl KeyedLiveModel {
    /// A key of a map whose plan has `quota`, its limiter fresh.
    pub fn new(quota: Quota, clock: ManualClock, plant: KeyedLivePlant) -> Self {
        let plan = Arc::new(LivePlan::<Gcra>::new(&quota).expect("a model's quota fits"));
        KeyedLiveModel {
            slot: BucketSlot::new(plan),
            clock,
            plant,
        }
    }

    /// A request of cost `n`: `Some(admitted)`, or `None` if it found the key evicted.
    pub fn acquire(&self, n: u64) -> Option<bool> {
        let now = self.clock.now_nanos();
        let slot = Slot { slot: &self.slot };
        let attempt = match self.plant {
            KeyedLivePlant::RequesterSkipsCarry => slot.acquire::<REQUESTER_SKIPS_CARRY>(now, n),
            KeyedLivePlant::WordWithoutEpoch => slot.acquire::<WORD_WITHOUT_EPOCH>(now, n),
            _ => KeySlot::acquire(&self.slot, now, n),
        };
        match attempt {
            Attempt::Decided(d) => Some(d.is_allowed()),
            Attempt::Evicted => None,
        }
    }

    /// A quota change of the key's plan (its walk visits this one key).
    pub fn set_quota(&self, quota: Quota) {
        let now = || self.clock.now_nanos();
        let walk = || self.slot.carry();
        let changed = match self.plant {
            KeyedLivePlant::ChangeSkipsWalk => Plan {
                plan: &self.slot.plan,
            }
            .change::<CHANGE_SKIPS_WALK>(quota, now, walk),
            _ => self.slot.plan.change(quota, now, walk),
        };
        changed.expect("a model's quota fits");
    }

    /// An eviction attempt at the clock's now: whether it marked the key evicted.
    pub fn evict(&self) -> bool {
        self.slot.try_evict(self.clock.now_nanos())
    }
}
