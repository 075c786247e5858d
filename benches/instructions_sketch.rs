//! Instruction counts of the fixed-memory keyed limiters (gungraun, under valgrind's callgrind):
//! part of the regression gate, with `benches/instructions.rs` and
//! `benches/instructions_keyed.rs`.
//!
//! `SketchLimiter::try_acquire` (fixed-window and two-window) and
//! `HybridSketchLimiter::try_acquire` on one `u64` key, allowed and denied:
//! [`CALLS`](gate::CALLS) requests on a clock frozen at one second. The limiter is built (and,
//! for the denied rows, drained) in the argument expression, outside the measurement, and
//! handed back so that its drop is not counted either. The hybrid's allowed rows keep the key in
//! the sketch (its limit is far above the calls); its denied rows find it in its exact entry
//! (promoted while it was drained).
//!
//! A binary of its own, as the keyed map's is: with one codegen unit, the sketches' calls into
//! the hasher change what the compiler inlines into the keyed map's and table's requests.

// gungraun's macros generate undocumented modules, one per benchmark function.
#![allow(missing_docs)]

use gungraun::prelude::*;
use tollgate::{HybridSketchLimiter, ManualClock, Quota, SketchLimiter, SketchSize};

mod gate;
mod peers;
mod together;
use gate::{closed, gate_bench, open, started};
use peers::{drained, TollgateKeyedLimit};

type Sketch = TollgateKeyedLimit<SketchLimiter<u64, ManualClock>, u64>;
type Hybrid = TollgateKeyedLimit<HybridSketchLimiter<u64, ManualClock>, u64>;

/// The one key every request asks for.
const HOT_KEY: u64 = 0x7f00_0001;

/// The sketches' columns: their number changes which column the key is in, not the
/// instructions that reach it.
const COLUMNS: u64 = 4096;

/// The hybrid's exact entries.
const ENTRIES: usize = 64;

/// A fixed-window sketch (`sliding` false) or a two-window one.
fn sketch(sliding: bool, quota: Quota) -> Sketch {
    let size = SketchSize::columns(COLUMNS).unwrap();
    let sketch = started(|c| match sliding {
        false => SketchLimiter::with_clock(quota, size, c),
        true => SketchLimiter::try_sliding_with_clock(quota, size, c).expect("the quota fits"),
    });
    TollgateKeyedLimit(sketch, HOT_KEY)
}

/// A hybrid of [`ENTRIES`] exact entries, promoting at its default threshold.
fn hybrid(quota: Quota) -> Hybrid {
    let size = SketchSize::columns(COLUMNS).unwrap();
    let hybrid = started(|c| HybridSketchLimiter::with_clock(quota, size, ENTRIES, c));
    TollgateKeyedLimit(hybrid, HOT_KEY)
}

/// The hybrid, its key checked to be in its exact entry.
fn in_entry(hybrid: Hybrid) -> Hybrid {
    assert!(hybrid.0.is_exact(&hybrid.1), "a drained key is promoted");
    hybrid
}

gate_bench!(
    sketch_fixed_window(Sketch),
    allowed = sketch(false, open()),
    denied = drained(sketch(false, closed())),
);
gate_bench!(
    sketch_sliding(Sketch),
    allowed = sketch(true, open()),
    denied = drained(sketch(true, closed())),
);
gate_bench!(
    hybrid_sketch(Hybrid),
    allowed = hybrid(open()),
    denied = in_entry(drained(hybrid(closed()))),
);

library_benchmark_group!(
    name = sketches,
    benchmarks = [sketch_fixed_window, sketch_sliding, hybrid_sketch]
);

main!(
    config = gate::config();
    library_benchmark_groups = sketches
);
