//! The parameter cell and the live token bucket for the loom models
//! (`loom-tests/tests/live.rs`): the real code for the sound runs, and each planted defect as
//! a checked copy of it (`planted.rs`, `token_bucket/planted.rs`).

use super::planted::{
    Bucket, Cell, CARRIED_FROM_READING, ONE_BIT_VERSION, READER_IGNORES_VERSION,
    READER_SKIPS_RECHECK, WRITER_SKIPS_FENCE,
};
use super::{Live, ParamCell, ParamWords};
use crate::algo::token_bucket::Gcra;
use crate::clock::ManualClock;
use crate::limiter::Limiter;
use crate::quota::Quota;

/// Which protocol the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LivePlant {
    /// The protocol of `live/`.
    Sound,
    /// Defect: the cell's reader keeps its words without re-checking `seq`.
    ReaderSkipsRecheck,
    /// Defect: the cell's writer stores the words with no fence after the odd `seq`.
    WriterSkipsFence,
    /// Defect: the token bucket judges a word under whatever parameters it read.
    ReaderIgnoresVersion,
    /// Defect: the token bucket's word keeps only the parity of its version.
    OneBitVersion,
    /// Defect: a token bucket's change carries the debt from its own clock reading, however
    /// stale (cut to one burst past it).
    CarriedFromReading,
}

/// A parameter cell under a chosen protocol.
#[derive(Debug)]
pub struct CellModel(ParamCell, LivePlant);

impl CellModel {
    /// A cell holding `words`.
    pub fn new(words: ParamWords, plant: LivePlant) -> Self {
        CellModel(ParamCell::new(words), plant)
    }

    /// One read.
    pub fn read(&self) -> ParamWords {
        let cell = Cell { cell: &self.0 };
        match self.1 {
            LivePlant::ReaderSkipsRecheck => cell.read_versioned::<READER_SKIPS_RECHECK>().1,
            _ => self.0.read(),
        }
    }

    /// One write (the model runs one writer thread).
    pub fn write(&self, words: ParamWords) {
        let cell = Cell { cell: &self.0 };
        match self.1 {
            LivePlant::WriterSkipsFence => cell.write::<WRITER_SKIPS_FENCE>(words),
            _ => self.0.write(words),
        };
    }
}

/// A live token bucket on a manual clock, its changes under a chosen protocol.
#[derive(Debug)]
pub struct LiveModel(Live<Gcra, ManualClock>, LivePlant);

impl LiveModel {
    /// A live token bucket of `quota`.
    pub fn token_bucket(quota: Quota, clock: ManualClock, plant: LivePlant) -> Self {
        LiveModel(Live::with_clock(quota, clock), plant)
    }

    /// A request of cost `n`: whether it was admitted.
    pub fn acquire(&self, n: u64) -> bool {
        let bucket = Bucket { live: &self.0 };
        let decision = match self.1 {
            LivePlant::ReaderIgnoresVersion => bucket.try_acquire_n::<READER_IGNORES_VERSION>(n),
            LivePlant::OneBitVersion => bucket.try_acquire_n::<ONE_BIT_VERSION>(n),
            _ => self.0.try_acquire_n(n),
        };
        decision.is_allowed()
    }

    /// A quota change.
    pub fn set_quota(&self, quota: Quota) {
        let bucket = Bucket { live: &self.0 };
        match self.1 {
            LivePlant::OneBitVersion => bucket.set_quota::<ONE_BIT_VERSION>(quota),
            LivePlant::CarriedFromReading => bucket.set_quota::<CARRIED_FROM_READING>(quota),
            _ => self.0.set_quota(quota),
        }
        .expect("a model's quota fits");
    }
}
