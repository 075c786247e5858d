//! The keyed table for the loom models (`loom-tests/tests/keyed_table.rs`): the real table of
//! the smallest size ([`PROBE`](super::PROBE) buckets, one stripe) for the sound runs; each
//! planted defect runs its request through a checked copy of the real path (`planted/`, a
//! file per defect). Keys hash to themselves, so a model picks its keys' tags, and their
//! homes through [`TableModel::home`].

use core::hash::BuildHasherDefault;
use core::num::NonZeroUsize;

use super::planted::{
    fresh_takeover_word, relaxed_first_word, relaxed_tag, stale_claim_reading, unlocked_claim,
    untagged_admission,
};
use super::{home_of, KeyedTable};
use crate::clock::ManualClock;
use crate::keyed::options::Algorithm;
use crate::quota::Quota;
use crate::sketch::hybrid_loom::Same;
use crate::sync::Ordering;

/// Which protocol a request runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TablePlant {
    /// The protocol of `keyed/table.rs`.
    Sound,
    /// Defect: an admission commits on the word it loaded without checking the slot's tag
    /// again after the load.
    UntaggedAdmission,
    /// Defect: a takeover stores the new key's first word (its first admission) `Relaxed`,
    /// not `Release`.
    RelaxedFirstWord,
    /// Defect: a takeover stores the new tag `Relaxed`, not `Release`.
    RelaxedTag,
    /// Defect: a claim scans and takes a slot without its stripe lock.
    UnlockedClaim,
    /// Defect: a takeover stores a fresh word 0 and decides the new key's first admission on
    /// it by an exchange, and a claim takes over a slot whose word is 0.
    FreshTakeoverWord,
    /// Defect: a claim decides at the reading the request took before its scan, not at one
    /// taken after it.
    StaleClaimReading,
}

/// A token-bucket table on a manual clock, keys hashing to themselves.
#[derive(Debug)]
pub struct TableModel {
    table: KeyedTable<u64, ManualClock, BuildHasherDefault<Same>>,
}

impl TableModel {
    /// A table of `limit` per second (bursts of `limit`) made for `keys` keys, reading `clock`.
    pub fn token_bucket(limit: u64, keys: usize, clock: ManualClock) -> Self {
        let quota = Quota::per_second(limit).expect("a small limit");
        let keys = NonZeroUsize::new(keys).expect("at least one key");
        let table = KeyedTable::try_with_clock(Algorithm::TokenBucket, quota, keys, clock)
            .expect("a small table")
            .with_hasher(BuildHasherDefault::<Same>::default());
        TableModel { table }
    }

    /// One unit for `key` (its tag: `key`, or 1 for 0): allowed?
    pub fn acquire(&self, key: u64, plant: TablePlant) -> bool {
        match plant {
            TablePlant::Sound => self.table.try_acquire_n(&key, 1),
            TablePlant::UntaggedAdmission => {
                untagged_admission::Mutant(&self.table).try_acquire_n(&key, 1)
            }
            TablePlant::RelaxedFirstWord => {
                relaxed_first_word::Mutant(&self.table).try_acquire_n(&key, 1)
            }
            TablePlant::RelaxedTag => relaxed_tag::Mutant(&self.table).try_acquire_n(&key, 1),
            TablePlant::UnlockedClaim => unlocked_claim::Mutant(&self.table).try_acquire_n(&key, 1),
            TablePlant::FreshTakeoverWord => {
                fresh_takeover_word::Mutant(&self.table).try_acquire_n(&key, 1)
            }
            TablePlant::StaleClaimReading => {
                stale_claim_reading::Mutant(&self.table).try_acquire_n(&key, 1)
            }
        }
        .is_allowed()
    }

    /// The bucket `key`'s search starts at, its home: the table's own, from its tag (`key`,
    /// or 1 for 0), so that a model can pick keys that share a bucket or not.
    pub fn home(&self, key: u64) -> usize {
        home_of(key.max(1), self.table.buckets.len())
    }

    /// The slots holding `key`'s tag. Read once the racing threads joined.
    pub fn slots_of(&self, key: u64) -> usize {
        let tag = key.max(1);
        self.table
            .buckets
            .iter()
            .flat_map(|bucket| &bucket.0)
            // Relaxed: read after the racers joined, which orders it after all their writes.
            .filter(|slot| slot.tag.load(Ordering::Relaxed) == tag)
            .count()
    }
}
