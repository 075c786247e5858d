//! loom models of the hybrid sketch (`src/sketch/hybrid.rs`): a promotion of a key races a
//! request of the same key admitted by the sketch, and the key is never admitted past its
//! limit, whatever the interleaving: either the promotion's claim (`Acquire`) comes after
//! the racer's read-modify-write of the slot (`Release`), and its read of the sketch counts
//! the racer's units, or the racer's read-modify-write sees the claim and charges them.
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p loom-tests --test sketch_hybrid
//! ```
//!
//! The `planted_*` test runs the real hybrid with the racer's read-modify-write made a plain
//! `Relaxed` load (`src/sketch/hybrid/planted.rs`) and expects loom to find the interleaving
//! that over-admits.
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::{expect_caught, model};
use tollgate::__loom::{HybridModel, HybridPlant};

const OVER: &str = "admitted past its limit";

/// The key (column 0, lane pair 0, the one slot).
const X: u64 = 0;

/// Limit 2, promotion at 1. Two requests of X race: each is admitted by the sketch (or by
/// the entry, once one is active) and reaching 1 promotes X. Then X is drained: X gets at
/// most 2 in all.
fn a_promotion_racing_a_sketch_admission(plant: HybridPlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let l = Arc::new(HybridModel::new(2, 1));
        let other = l.clone();
        let t = thread::spawn(move || other.acquire(X, plant));
        let first = l.acquire(X, plant);
        let second = t.join().expect("racer");
        let drained = (0..3)
            .take_while(|_| l.acquire(X, HybridPlant::Sound))
            .count() as u64;
        let total = u64::from(first) + u64::from(second) + drained;
        assert!(total <= 2, "X {OVER}: {total} of 2");
        assert!(l.is_exact(X), "X never promoted");
    }
}

#[test]
fn hybrid_a_promotion_racing_a_sketch_admission() {
    model(
        "hybrid a promotion racing a sketch admission",
        a_promotion_racing_a_sketch_admission(HybridPlant::Sound),
    );
}

#[test]
fn planted_relaxed_recheck_misses_a_racing_admission() {
    expect_caught(
        "hybrid relaxed re-read of the slot after a sketch admission",
        OVER,
        a_promotion_racing_a_sketch_admission(HybridPlant::RelaxedRecheck),
    );
}
