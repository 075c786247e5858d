//! The keyed slot protocols for the loom models (`loom-tests/tests/keyed_slot.rs`): the real
//! slots, and each planted defect as a checked copy of the real code with one change
//! (`slot/planted.rs`, `word/planted.rs`). Only under `--cfg tollgate_loom`, reached through
//! `tollgate::__loom`.

use crate::algo::sliding_window::Sliding;
use crate::algo::token_bucket::Gcra;
use crate::algo::Algo;
use crate::quota::Quota;
use crate::sync::Arc;

use super::slot::planted::{self as slot, Mutant as StateMutant};
use super::slot::{Attempt, StateSlot};
use super::word::planted::{self as word, Mutant as WordMutant};
use super::word::WordSlot;

/// Which protocol a request or an eviction on a one-word slot runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WordPlant {
    /// The protocol of `word.rs`.
    Sound,
    /// Defect: the evictor checks freshness, then marks with a plain store.
    EvictorStores,
    /// Defect: the evictor checks one load and compare-exchanges from a reload.
    EvictorReloads,
    /// Defect: a requester takes the mark for a fresh limiter and admits without the map.
    RequesterTrustsMark,
    /// Defect: a requester that reads the mark redoes without the `Acquire` fence, so its
    /// next clock reading may be older than the evictor's.
    RequesterSkipsFence,
}

/// Which protocol a request or an eviction on a boxed slot runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatePlant {
    /// The protocol of `slot.rs`.
    Sound,
    /// Defect: the requester trusts its admission without the state RMW.
    RequesterSkipsCheck,
    /// Defect: the evictor marks `EVICTED` on its pre-check alone, with no re-check.
    EvictorSkipsRecheck,
    /// Defect: the evictor's `EVICTING` keeps the round (an ABA).
    EvictorWithoutRound,
}

fn answer(attempt: Attempt) -> Option<bool> {
    match attempt {
        Attempt::Decided(d) => Some(d.is_allowed()),
        Attempt::Evicted => None,
    }
}

fn per_second(limit: u64) -> Quota {
    Quota::per_second(limit).expect("a model's limit is valid")
}

/// A keyed token bucket of `limit` per second as the map stores it: one word and the plan.
#[derive(Debug)]
pub struct WordSlotModel(WordSlot<Gcra>);

impl WordSlotModel {
    /// A fresh slot: a token bucket of `limit` per second.
    pub fn token_bucket(limit: u64) -> Self {
        let params = <Gcra as Algo>::params(&per_second(limit)).expect("a token bucket");
        WordSlotModel(WordSlot::new(Arc::new(params)))
    }

    /// A request of cost 1 at `now_ns`: `Some(allowed)`, or `None` if the slot was evicted
    /// under it (remove it from the map and redo the request).
    pub fn acquire(&self, now_ns: u64, plant: WordPlant) -> Option<bool> {
        answer(match plant {
            WordPlant::RequesterTrustsMark => {
                WordMutant(&self.0).acquire::<{ word::REQUESTER_TRUSTS_MARK }>(now_ns, 1)
            }
            WordPlant::RequesterSkipsFence => {
                WordMutant(&self.0).acquire::<{ word::REQUESTER_SKIPS_FENCE }>(now_ns, 1)
            }
            _ => self.0.acquire(now_ns, 1),
        })
    }

    /// The evictor: true if the slot is now evicted and must be removed from the map.
    pub fn try_evict(&self, now_ns: u64, plant: WordPlant) -> bool {
        match plant {
            WordPlant::EvictorStores => {
                WordMutant(&self.0).try_evict::<{ word::EVICTOR_STORES }>(now_ns)
            }
            WordPlant::EvictorReloads => {
                WordMutant(&self.0).try_evict::<{ word::EVICTOR_RELOADS }>(now_ns)
            }
            _ => self.0.try_evict(now_ns),
        }
    }
}

/// A keyed sliding window of `limit` per second as the map stores it: the state word and
/// the core.
#[derive(Debug)]
pub struct StateSlotModel(StateSlot<Sliding>);

impl StateSlotModel {
    /// A fresh slot: a sliding window of `limit` per second.
    pub fn sliding_window(limit: u64) -> Self {
        StateSlotModel(StateSlot::new(&per_second(limit)).expect("a sliding window"))
    }

    /// A request of cost 1 at `now_ns`: `Some(allowed)`, or `None` if the slot was evicted
    /// under it (remove it from the map and redo the request).
    pub fn acquire(&self, now_ns: u64, plant: StatePlant) -> Option<bool> {
        answer(match plant {
            StatePlant::RequesterSkipsCheck => {
                StateMutant(&self.0).acquire::<{ slot::REQUESTER_SKIPS_CHECK }>(now_ns, 1)
            }
            _ => self.0.acquire(now_ns, 1),
        })
    }

    /// The evictor: true if the slot is now evicted and must be removed from the map.
    pub fn try_evict(&self, now_ns: u64, plant: StatePlant) -> bool {
        match plant {
            StatePlant::EvictorSkipsRecheck => {
                StateMutant(&self.0).try_evict::<{ slot::EVICTOR_SKIPS_RECHECK }>(now_ns)
            }
            StatePlant::EvictorWithoutRound => {
                StateMutant(&self.0).try_evict::<{ slot::EVICTOR_WITHOUT_ROUND }>(now_ns)
            }
            _ => self.0.try_evict(now_ns),
        }
    }
}
