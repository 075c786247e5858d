//! One column shared by two keys, for the loom models (`loom-tests/tests/sketch.rs`): the real
//! cell for the sound runs, and each planted defect as a checked copy of it
//! (`cell/planted.rs`). Only under `--cfg tollgate_loom`, reached through `tollgate::__loom`.

use super::cell::planted::{self as cell, Mutant};
use super::cell::{Cell, CellParams, KeyLanes};

/// Which protocol a request runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SketchPlant {
    /// The protocol of `cell.rs`.
    Sound,
    /// Defect: decide on one load, then store the new word (no compare-exchange).
    LoadThenStore,
    /// Defect: an admission raises only the key's smaller lane.
    RaiseMinOnly,
}

/// One column of a fixed-window sketch of `limit` per second, eight lanes when the limit
/// is small.
#[derive(Debug)]
pub struct SketchCellModel {
    cell: Cell,
    params: CellParams,
}

impl SketchCellModel {
    /// A fresh column of `limit` per second.
    pub fn new(limit: u64) -> Self {
        SketchCellModel {
            cell: Cell::new(),
            params: CellParams::new(1_000_000_000, limit, false).expect("a small limit"),
        }
    }

    /// A request of `n` for the key counting in lanes `a` and `b` at `now_ns`: allowed?
    pub fn acquire(&self, a: u8, b: u8, now_ns: u64, n: u64, plant: SketchPlant) -> bool {
        let (p, k) = (&self.params, KeyLanes(a, b));
        match plant {
            SketchPlant::Sound => self.cell.acquire(p, now_ns, n, k),
            SketchPlant::LoadThenStore => {
                Mutant { cell: &self.cell }.acquire::<{ cell::LOAD_THEN_STORE }>(p, now_ns, n, k)
            }
            SketchPlant::RaiseMinOnly => {
                Mutant { cell: &self.cell }.acquire::<{ cell::RAISE_MIN_ONLY }>(p, now_ns, n, k)
            }
        }
        .is_allowed()
    }
}
