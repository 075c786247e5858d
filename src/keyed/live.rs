//! Live quotas on a keyed map: each plan's parameters in a two-slot cell, so that a change
//! reaches every key of the plan, and the one-word limiters' state carried to it.
//!
//! # Words
//!
//! | word                       | bits     | meaning                                               |
//! |----------------------------|----------|-------------------------------------------------------|
//! | plan cell (`ParamCell<5>`) | words 0–3 | the plan's parameters, packed by `Retune::pack`      |
//! |                            | word 4   | the map's now (ns) when they took effect (`since`)   |
//! | bucket slot's `word`       | 0..64    | `tat`, in ticks of the plan's first quota; `u64::MAX` once evicted |
//! |                            | 64..128  | `epoch`: the version of the plan's parameters `tat` is counted in |
//! | window slot's word         | 0..64    | as a fixed map's (`word.rs`): a count reads right under every limit |
//!
//! # Invariant
//!
//! A bucket word counted in the plan's version `v` is read under `v`; one counted in `v - 1`
//! is first carried to `v` at `since` (as a live bucket's change carries it, see
//! `live/token_bucket.rs`); `tat == 0` (a key never charged) is full under every version. A change,
//! under the plan's lock, first walks the map and carries every word of the plan counted in an
//! older version to the current one, then publishes the new parameters over the slot of the
//! previous ones. So when version `v + 1` is published, no word of the plan with `tat ≠ 0` is
//! counted in `v - 1` or earlier, and none can be written: a request writes the version it
//! read after loading the word, and its compare-exchange fails on any word the walk carried
//! since (the epoch only grows and, within an epoch, `tat` only grows: no ABA); one that loaded
//! it before the walk and reads the cell after the next change finds it changed and loads it
//! again. The walk visits every entry present when it starts (papaya's iteration), and a
//! request's word was present when the request loaded it.
//!
//! # Orderings
//!
//! Bucket word: loaded `Acquire` and written `Release` (requests, the walk): a word counted in
//! version `v` makes the cell read after it hold `v` or later. The cell is `live/mod.rs`'s
//! seqlock. The eviction mark is as in `word.rs` (`Release`, and the redo's `Acquire` fence).

use core::fmt;
use core::ptr;

use crate::algo::fixed_window::Fixed;
use crate::algo::token_bucket::{admit_at, allowed, decide, decide_at, refused, ticks, Gcra};
use crate::algo::Algo;
use crate::decision::Decision;
use crate::live::token_bucket::{carried, join, split};
use crate::live::{ParamCell, Retune, PARAM_WORDS};
use crate::quota::{GcraParams, Quota, QuotaError};
use crate::sync::{fence, Arc, AtomicU128, Backoff, Mutex, MutexGuard, Ordering};

use super::plans::{KeySlot, PlanTable, SlotMaker};
use super::slot::Attempt;
use super::word::{PlanRef, WordSlot, EVICTED};

/// Words of a live plan's cell: the packed parameters and the map's now (ns) they took effect at.
const PLAN_WORDS: usize = PARAM_WORDS + 1;

/// One plan of a live map: its parameters, and its quota under the lock that makes one
/// change at a time.
pub(crate) struct LivePlan<R: Retune> {
    cell: ParamCell<PLAN_WORDS>,
    writer: Mutex<Quota>,
    rule: core::marker::PhantomData<fn() -> R>,
}

impl<R: Retune> fmt::Debug for LivePlan<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LivePlan")
            .field("quota", &*self.lock())
            .finish_non_exhaustive()
    }
}

/// The packed parameters and `since` as one cell value.
fn plan_words(packed: [u64; PARAM_WORDS], since: u64) -> [u64; PLAN_WORDS] {
    let mut words = [0; PLAN_WORDS];
    words[..PARAM_WORDS].copy_from_slice(&packed);
    words[PARAM_WORDS] = since;
    words
}

/// The packed parameters of a cell value.
#[inline]
fn packed(words: [u64; PLAN_WORDS]) -> [u64; PARAM_WORDS] {
    let mut packed = [0; PARAM_WORDS];
    packed.copy_from_slice(&words[..PARAM_WORDS]);
    packed
}

impl<R: Retune> LivePlan<R> {
    fn new(quota: &Quota) -> Result<Self, QuotaError> {
        let params = R::live_params(quota)?;
        Ok(LivePlan {
            cell: ParamCell::new(plan_words(R::pack(&params), 0)),
            writer: Mutex::new(*quota),
            rule: core::marker::PhantomData,
        })
    }

    /// The current parameters.
    #[inline]
    fn params(&self) -> R::Params {
        R::unpack(packed(self.cell.read()))
    }

    /// The quota in force.
    pub(crate) fn quota(&self) -> Quota {
        *self.lock()
    }

    fn lock(&self) -> MutexGuard<'_, Quota> {
        // A panic while holding the lock leaves the quota as it was or as set: never torn.
        self.writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Replaces the quota at `now_ns`: `carry` runs first, under the lock, with the version
    /// about to become the previous one; then the new parameters are published.
    fn change(
        &self,
        quota: Quota,
        now_ns: impl FnOnce() -> u64,
        carry: impl FnOnce(),
    ) -> Result<(), QuotaError> {
        let mut current = self.lock();
        let old = self.params();
        let new = R::retune(&old, &current, &quota)?;
        carry();
        // Read after the walk: the change takes effect when it is published.
        self.cell.write(plan_words(R::pack(&new), now_ns()));
        *current = quota;
        Ok(())
    }
}

/// A window's words read right under every limit: a window plan's keys need no carrying.
impl PlanRef<Fixed> for Arc<LivePlan<Fixed>> {
    type Params<'a> = Read<<Fixed as Algo>::Params>;

    #[inline(always)]
    fn params(&self) -> Self::Params<'_> {
        Read(LivePlan::params(self))
    }
}

/// Parameters read from a live plan's cell, for one request.
pub(crate) struct Read<P>(P);

impl<P> core::ops::Deref for Read<P> {
    type Target = P;

    #[inline(always)]
    fn deref(&self) -> &P {
        &self.0
    }
}

/// A live bucket plan's view of a word.
impl LivePlan<Gcra> {
    /// The version a request decides the word `(epoch, tat)`, loaded from `word`, under, its
    /// parameters, and `tat` counted in them; `None` if the word must be loaded again (it was
    /// carried since).
    #[inline]
    fn counted(&self, word: &AtomicU128, epoch: u64, tat: u64) -> Option<(u64, GcraParams, u64)> {
        let (version, words) = self.cell.read_versioned();
        let p = GcraParams::from_words(packed(words));
        if epoch == version || tat == 0 {
            return Some((version, p, tat));
        }
        if epoch + 1 == version {
            // The previous parameters stay whole until the next change, which first carries
            // this word; gone means it has been carried.
            let old = GcraParams::from_words(packed(self.cell.read_version(epoch)?));
            let since = ticks(&p, words[PARAM_WORDS]);
            return Some((version, p, carried(&old, &p, tat, since).unwrap_or(tat)));
        }
        if epoch > version {
            // Not reached (the word's Release, our Acquire): load it again.
            return None;
        }
        // Loaded before the walk of the change to `version - 1`, which carried it before that
        // change published (and so before this read of `version`): the word has changed.
        // Acquire: as a request's load; it sees the walk's write (the change's Release of
        // `version`, our Acquire), and a word never takes a value back.
        if word.load(Ordering::Acquire) != join(epoch, tat) {
            return None;
        }
        // Not reached (see the module's invariant). Were it: empty at the change, never a
        // token it might not have.
        debug_assert!(false, "a word counted in version {epoch} read at {version}");
        Some((version, p, ticks(&p, words[PARAM_WORDS]) + p.capacity))
    }
}

/// A requester that found the mark: its redo reads the clock no earlier than the evictor.
#[cold]
fn evicted() -> Attempt {
    // Acquire (with the evictor's Release mark): as in `word.rs`.
    fence(Ordering::Acquire);
    Attempt::Evicted
}

/// One key's live token bucket: the word with its version, and its plan (32 bytes).
#[derive(Debug)]
pub(crate) struct BucketSlot {
    word: AtomicU128,
    plan: Arc<LivePlan<Gcra>>,
}

impl BucketSlot {
    fn new(plan: Arc<LivePlan<Gcra>>) -> Self {
        BucketSlot {
            // Never charged: full under every version.
            word: AtomicU128::new(join(0, 0)),
            plan,
        }
    }

    /// The evictor: marks the slot evicted if its bucket, carried to the current version, is
    /// full at `now_ns`.
    pub(crate) fn try_evict(&self, now_ns: u64) -> bool {
        // Acquire: as a request's load.
        let word = self.word.load(Ordering::Acquire);
        let (epoch, tat) = split(word);
        if tat == EVICTED {
            return false;
        }
        let Some((_, p, tat)) = self.plan.counted(&self.word, epoch, tat) else {
            // Carried since the load: the next sweep decides.
            return false;
        };
        if tat > ticks(&p, now_ns) {
            return false;
        }
        // Release: as in `word.rs`. Fails if anything wrote since the load (the epoch only
        // grows, and `tat` only grows within an epoch).
        self.word
            .compare_exchange(
                word,
                join(epoch, EVICTED),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// The change's walk: carries the word to the plan's current version.
    fn carry(&self) {
        // Acquire: as a request's load.
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            let (epoch, tat) = split(word);
            if tat == EVICTED {
                return;
            }
            // The walker holds the plan's lock: the cell does not change under it.
            let Some((version, _, tat)) = self.plan.counted(&self.word, epoch, tat) else {
                return;
            };
            if epoch == version {
                return;
            }
            // Release: as a request's write. Acquire failure: as the first load.
            match self.word.compare_exchange(
                word,
                join(version, tat),
                Ordering::Release,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(current) => word = current,
            }
        }
    }
}

impl KeySlot for BucketSlot {
    /// A request of cost `n` at `now_ns`.
    #[inline]
    fn acquire(&self, now_ns: u64, n: u64) -> Attempt {
        // Acquire: the cell read after it holds the word's version or a later one.
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            let (epoch, tat) = split(word);
            if tat == EVICTED {
                return evicted();
            }
            let Some((version, p, tat)) = self.plan.counted(&self.word, epoch, tat) else {
                Backoff::new().snooze();
                // Acquire: as the first load.
                word = self.word.load(Ordering::Acquire);
                continue;
            };
            let now = ticks(&p, now_ns);
            let Some(new_tat) = admit_at(&p, tat, now, n) else {
                // A denial or a zero cost: decided on the carried word, nothing written.
                return Attempt::Decided(if n == 0 {
                    decide_at(&p, tat, now, 0).0
                } else {
                    refused(&p, tat, now, n)
                });
            };
            // Release: a request that loads this word reads parameters of `version` or later.
            // Acquire failure: as the first load. Weak: a spurious failure loops once more.
            match self.word.compare_exchange_weak(
                word,
                join(version, new_tat),
                Ordering::Release,
                Ordering::Acquire,
            ) {
                Ok(_) => return Attempt::Decided(allowed(&p, now, new_tat)),
                Err(current) => word = current,
            }
        }
    }

    fn try_evict(&self, now_ns: u64) -> bool {
        BucketSlot::try_evict(self, now_ns)
    }

    fn untracked(&self, now_ns: u64, n: u64) -> Decision {
        decide(&LivePlan::params(&self.plan), 0, now_ns, n).0
    }
}

/// The plans of a live map: the map's own quota's, and one per quota a key was first given
/// (named by that quota for the map's life, whatever it is changed to).
pub(crate) struct LivePlans<R: Retune>(PlanTable<LivePlan<R>>);

impl<R: Retune> LivePlans<R> {
    pub(crate) fn new(quota: &Quota) -> Result<Self, QuotaError> {
        Ok(LivePlans(PlanTable::new(quota, LivePlan::new(quota)?)))
    }

    /// The plan named `name`, if a key or a change has used it.
    fn find(&self, name: &Quota) -> Option<Arc<LivePlan<R>>> {
        self.0.find(name)
    }

    /// The plan named `name`, made (at `name`) on its first use.
    pub(crate) fn plan(&self, name: &Quota) -> Result<Arc<LivePlan<R>>, QuotaError> {
        self.0.plan(name, LivePlan::new)
    }
}

impl SlotMaker for LivePlans<Gcra> {
    type Slot = BucketSlot;

    fn in_force(&self, name: &Quota) -> Quota {
        self.find(name).map_or(*name, |plan| plan.quota())
    }

    #[inline]
    fn make(&self, quota: &Quota) -> Result<BucketSlot, QuotaError> {
        Ok(BucketSlot::new(self.plan(quota)?))
    }

    fn check(&self, quota: &Quota) -> Result<(), QuotaError> {
        Gcra::live_params(quota).map(drop)
    }
}

impl SlotMaker for LivePlans<Fixed> {
    type Slot = WordSlot<Fixed, Arc<LivePlan<Fixed>>>;

    fn in_force(&self, name: &Quota) -> Quota {
        self.find(name).map_or(*name, |plan| plan.quota())
    }

    #[inline]
    fn make(&self, quota: &Quota) -> Result<Self::Slot, QuotaError> {
        Ok(WordSlot::new(self.plan(quota)?))
    }

    fn check(&self, quota: &Quota) -> Result<(), QuotaError> {
        Fixed::live_params(quota).map(drop)
    }
}

/// A live map's quota change, by algorithm: what must be carried before the change publishes.
pub(crate) trait LiveMap {
    /// Replaces the quota of the plan named `name` (made now if no key has used it yet).
    fn set_quota(
        &self,
        name: &Quota,
        quota: Quota,
        now_ns: impl FnOnce() -> u64,
    ) -> Result<(), QuotaError>;
}

impl<K, S> LiveMap for super::Keyed<K, LivePlans<Gcra>, S>
where
    K: core::hash::Hash + Eq,
    S: core::hash::BuildHasher,
{
    fn set_quota(
        &self,
        name: &Quota,
        quota: Quota,
        now_ns: impl FnOnce() -> u64,
    ) -> Result<(), QuotaError> {
        let plan = self.maker.plan(name)?;
        plan.change(quota, now_ns, || {
            // Every word of the plan counted in the version about to be overwritten (or
            // earlier, never charged) is carried to the current one.
            let map = self.map.pin();
            for (_, slot) in map.iter() {
                if ptr::eq(&*slot.plan, &*plan) {
                    slot.carry();
                }
            }
        })
    }
}

impl<K, S> LiveMap for super::Keyed<K, LivePlans<Fixed>, S>
where
    K: core::hash::Hash + Eq,
    S: core::hash::BuildHasher,
{
    fn set_quota(
        &self,
        name: &Quota,
        quota: Quota,
        now_ns: impl FnOnce() -> u64,
    ) -> Result<(), QuotaError> {
        // A window's count reads right under the new limit: nothing to carry.
        self.maker.plan(name)?.change(quota, now_ns, || {})
    }
}

/// One key of a live keyed token bucket for the loom models
/// (`loom-tests/tests/keyed_live.rs`), sound and planted.
#[cfg(tollgate_loom)]
pub(crate) mod loom_model;
#[cfg(tollgate_loom)]
mod planted;
