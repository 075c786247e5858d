//! The groups the loom models (`loom-tests/tests/group.rs`) race: the real [`Limits`] for the
//! sound runs, and each planted defect as a checked copy of its check (`planted.rs`).

use std::sync::Arc;

use super::planted::{Mutant, Plant};
use super::{Limits, Member};
use crate::clock::{Clock, ManualClock};
use crate::decision::Decision;
use crate::limiter::Limiter;

/// A group of limits (on a manual clock unless a model needs its own), sound or with one
/// planted defect.
#[derive(Debug)]
pub enum GroupModel<C = ManualClock> {
    /// The real group.
    Sound(Limits<C>),
    /// The group through the planted copy of its check.
    #[doc(hidden)]
    Planted(PlantedGroup<C>),
}

/// A group run through a planted copy of its check.
#[derive(Debug)]
pub struct PlantedGroup<C = ManualClock>(Mutant<C>);

impl<C: Clock> GroupModel<C> {
    /// The real group of `members`.
    pub fn sound(clock: C, members: impl IntoIterator<Item = Arc<Member>>) -> Self {
        GroupModel::Sound(
            Limits::try_new(clock, members).expect("a model's group has 1 to 8 members"),
        )
    }

    fn planted(clock: C, members: impl IntoIterator<Item = Arc<Member>>, plant: Plant) -> Self {
        let limits = Limits::try_new(clock, members).expect("a model's group has 1 to 8 members");
        GroupModel::Planted(PlantedGroup(Mutant { limits, plant }))
    }

    /// The group's members, in the order they are charged.
    pub fn members(&self) -> &[Arc<Member>] {
        match self {
            GroupModel::Sound(g) => g.members(),
            GroupModel::Planted(g) => g.0.members(),
        }
    }

    /// [`Limits::try_acquire_explained`].
    pub fn try_acquire_explained(&self, n: u64) -> (Decision, usize) {
        match self {
            GroupModel::Sound(g) => g.try_acquire_explained(n),
            GroupModel::Planted(g) => g.0.try_acquire_explained(n),
        }
    }
}

impl<C: Clock> Limiter for GroupModel<C> {
    fn try_acquire_n(&self, n: u64) -> Decision {
        self.try_acquire_explained(n).0
    }

    fn peek(&self, n: u64) -> Decision {
        match self {
            GroupModel::Sound(g) => g.peek(n),
            GroupModel::Planted(g) => g.0.peek_explained(n).0,
        }
    }

    fn refund(&self, n: u64) -> u64 {
        match self {
            GroupModel::Sound(g) => g.refund(n),
            GroupModel::Planted(g) => g.0.refund(n),
        }
    }
}

/// Constructors of a group with one planted defect each, on any clock (`name: Plant;`).
macro_rules! planted_groups {
    ($($(#[$doc:meta])* $name:ident: $plant:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name<C: Clock>(
            clock: C,
            members: impl IntoIterator<Item = Arc<Member>>,
        ) -> GroupModel<C> {
            GroupModel::planted(clock, members, Plant::$plant)
        }
    )*};
}

planted_groups! {
    /// A group whose bucket rollback restores the word it replaced even when others have written
    /// since (a token handed out twice).
    planted_store_rollback: StoreRollback;

    /// A group whose sliding member's rollback subtracts its units from the head even after the
    /// head has moved to a later slot (a token handed out twice: the charge stays counted in the
    /// finished slot, and the head gives back another's unit).
    planted_any_slot_rollback: AnySlotRollback;

    /// A group whose bucket rollback, after others charged, subtracts the whole charge while its
    /// own clock reads before the charge's `tat` (the part of the charge that had already refilled,
    /// and that a later charge built on, is handed out twice).
    planted_whole_charge_rollback: WholeChargeBeforeTat;

    /// A group whose peek loads a sliding member's head `Relaxed`, so that it may see a head past a
    /// slot without that slot's ring entry (and count too little).
    planted_relaxed_sliding_head: RelaxedSlidingHead;

    /// A group whose members refund through the refund helpers as they were before their stale
    /// checks: a window or sliding member gives back units of a window (slot) later than the
    /// refund's reading, a bucket moves a `tat` more than the capacity past it (units the racing
    /// requests of the later window were admitted on are handed out again). The refund models
    /// run it on a clock of their own, which freezes the refund's reading.
    planted_stale_refund: StaleRefund;
}
