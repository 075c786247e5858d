//! How a keyed map makes a key's limiter: per-plan parameters shared by the one-word
//! limiters, a fresh boxed core for the others.

use core::marker::PhantomData;

use crate::decision::Decision;
use crate::quota::{Quota, QuotaError};
use crate::sync::Arc;

use crate::algo::Algo;

use super::slot::{Attempt, StateSlot};
use super::word::{PlanRef, WordRule, WordSlot};
use super::KeyHasher;

/// What the map stores per key: a limiter that takes requests and can be evicted.
pub(crate) trait KeySlot: Send + Sync + 'static {
    /// A request of cost `n` at `now_ns`, under the eviction protocol.
    fn acquire(&self, now_ns: u64, n: u64) -> Attempt;

    /// Marks the slot evicted if it is fresh at `now_ns`; true if it did.
    fn try_evict(&self, now_ns: u64) -> bool;

    /// The answer of this limiter, never shared with a map, to a request: how a new key is
    /// judged when the map is full and admits untracked keys.
    fn untracked(&self, now_ns: u64, n: u64) -> Decision;
}

impl<R: WordRule, P: PlanRef<R>> KeySlot for WordSlot<R, P> {
    #[inline]
    fn acquire(&self, now_ns: u64, n: u64) -> Attempt {
        WordSlot::acquire(self, now_ns, n)
    }

    #[inline]
    fn try_evict(&self, now_ns: u64) -> bool {
        WordSlot::try_evict(self, now_ns)
    }

    fn untracked(&self, now_ns: u64, n: u64) -> Decision {
        self.decide_fresh(now_ns, n)
    }
}

impl<A: Algo + 'static> KeySlot for Box<StateSlot<A>> {
    #[inline]
    fn acquire(&self, now_ns: u64, n: u64) -> Attempt {
        StateSlot::acquire(self, now_ns, n)
    }

    #[inline]
    fn try_evict(&self, now_ns: u64) -> bool {
        StateSlot::try_evict(self, now_ns)
    }

    fn untracked(&self, now_ns: u64, n: u64) -> Decision {
        self.commit(now_ns, n)
    }
}

/// Makes the slots of one map.
pub(crate) trait SlotMaker: Send + Sync {
    /// The map's value.
    type Slot: KeySlot;

    /// A fresh limiter for a key whose first request carries `quota`.
    fn make(&self, quota: &Quota) -> Result<Self::Slot, QuotaError>;

    /// The quota in force for the plan named `name`: `name` itself, unless a live map's
    /// change replaced it. Read on the full map's path only.
    fn in_force(&self, name: &Quota) -> Quota {
        *name
    }

    /// Whether [`SlotMaker::make`] can make a limiter for `quota`.
    fn check(&self, quota: &Quota) -> Result<(), QuotaError> {
        self.make(quota).map(drop)
    }
}

/// Plans by name: the map's own quota's, and one for every other quota a key was first given,
/// each made once and shared by its keys.
///
/// The table only grows: a plan lives as long as the map (a few dozen bytes per distinct
/// quota), so that a key's limiter is its word and a pointer to its plan.
pub(crate) struct PlanTable<P> {
    name: Quota,
    default: Arc<P>,
    others: papaya::HashMap<Quota, Arc<P>, KeyHasher>,
}

impl<P: Send + Sync> PlanTable<P> {
    /// A table whose plan named `name` (the map's own) is `default`.
    pub(crate) fn new(name: &Quota, default: P) -> Self {
        PlanTable {
            name: *name,
            default: Arc::new(default),
            others: papaya::HashMap::builder()
                .hasher(KeyHasher::default())
                .build(),
        }
    }

    /// The plan named `name`, if a key (or a change) has used it.
    pub(crate) fn find(&self, name: &Quota) -> Option<Arc<P>> {
        if *name == self.name {
            return Some(self.default.clone());
        }
        self.others.pin().get(name).cloned()
    }

    /// The plan named `name`, made by `make` on its first use.
    pub(crate) fn plan(
        &self,
        name: &Quota,
        make: impl FnOnce(&Quota) -> Result<P, QuotaError>,
    ) -> Result<Arc<P>, QuotaError> {
        if *name == self.name {
            return Ok(self.default.clone());
        }
        let others = self.others.pin();
        if let Some(plan) = others.get(name) {
            return Ok(plan.clone());
        }
        let made = Arc::new(make(name)?);
        // A racing first use of the same name may have won: one plan either way.
        Ok(match others.try_insert(*name, made) {
            Ok(plan) => plan.clone(),
            Err(occupied) => occupied.current.clone(),
        })
    }
}

/// The plans of a map of one-word limiters: each quota's parameters, shared by its keys.
pub(crate) struct Plans<R: WordRule>(PlanTable<R::Params>);

impl<R: WordRule> Plans<R> {
    pub(crate) fn new(quota: &Quota) -> Result<Self, QuotaError> {
        Ok(Plans(PlanTable::new(quota, R::params(quota)?)))
    }
}

impl<R: WordRule> SlotMaker for Plans<R> {
    type Slot = WordSlot<R>;

    #[inline]
    fn make(&self, quota: &Quota) -> Result<WordSlot<R>, QuotaError> {
        Ok(WordSlot::new(self.0.plan(quota, R::params)?))
    }

    /// Without making (and keeping) a plan for `quota`.
    fn check(&self, quota: &Quota) -> Result<(), QuotaError> {
        R::params(quota).map(drop)
    }
}

/// Makes boxed limiters of several words, each with its own parameters.
pub(crate) struct Boxed<C>(PhantomData<fn() -> C>);

impl<C> Boxed<C> {
    pub(crate) fn new() -> Self {
        Boxed(PhantomData)
    }
}

impl<A: Algo + 'static> SlotMaker for Boxed<A> {
    type Slot = Box<StateSlot<A>>;

    #[inline]
    fn make(&self, quota: &Quota) -> Result<Box<StateSlot<A>>, QuotaError> {
        Ok(Box::new(StateSlot::new(quota)?))
    }
}
