//! loom models of the hybrid sketch (`src/sketch/hybrid.rs`):
//! - a promotion of a key races a request of the same key admitted by the sketch, and the key
//!   is never admitted past its limit, whatever the interleaving: either the promotion's claim
//!   (`Acquire`) comes after the racer's read-modify-write of the slot (`Release`), and its
//!   read of the sketch counts the racer's units, or the racer's read-modify-write sees the
//!   claim and charges them;
//! - a request of a key whose clock reading is older than the key's entry being taken back by
//!   another key in the next window is not admitted in its reading's window past the limit:
//!   finding the other key's entry of a later window, it is denied.
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p loom-tests --test sketch_hybrid
//! ```
//!
//! The `planted_*` tests run the real hybrid with one defect each in a checked copy of its
//! request (`src/sketch/hybrid/planted.rs`): the racer's read-modify-write made a plain
//! `Relaxed` load, or the denial on a later entry left out; loom must find the interleaving
//! that over-admits.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{expect_caught, model};
use tollgate::__loom::{HybridModel, HybridPlant};

const OVER: &str = "admitted past its limit";

/// The key (column 0, lane pair 0, the one slot).
const X: u64 = 0;
/// Another key: the second column of two (lane pair 0), the same one slot.
const Y: u64 = 1 << 63;

/// What a key admitted past its limit in one of two windows fails with.
const OVER_TWO_WINDOWS: &str = "admitted past its limit in two windows";

/// Limit 2, promotion at 1. Two requests of X race: each is admitted by the sketch (or by
/// the entry, once one is active) and reaching 1 promotes X. Then X is drained: X gets at
/// most 2 in all.
fn a_promotion_racing_a_sketch_admission(plant: HybridPlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let l = Arc::new(HybridModel::new(2, 1, 1));
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

/// Limit 2, promotion at 1, two columns (X in one, Y in the other) and one slot. One thread
/// requests X once. The other requests X twice at time 0 (the first, counted in the sketch,
/// promotes X; the second is counted in X's entry), moves the clock to one second, when X's
/// entry has ended, and requests Y, whose promotion takes the slot. The racing request may
/// read time 0 and find Y's entry of window 1 in the slot (a stale load of the clock, or a
/// reading taken before the move): the sketch has room for X in window 0 (it counted one
/// unit), but the entry taken back held the other. Then X is drained at one second: X gets
/// at most 2 in each window, 4 in all.
fn a_request_stalled_across_its_entry_taken_back(
    plant: HybridPlant,
) -> impl Fn() + Send + Sync + 'static {
    move || {
        let l = Arc::new(HybridModel::new(2, 2, 1));
        let other = l.clone();
        let racer = thread::spawn(move || other.acquire(X, plant));
        let first = (0..2).filter(|_| l.acquire(X, plant)).count() as u64;
        l.set_clock(Duration::from_secs(1));
        assert!(l.acquire(Y, plant), "Y denied its first unit");
        let raced = racer.join().expect("racer");
        let after = (0..3)
            .take_while(|_| l.acquire(X, HybridPlant::Sound))
            .count() as u64;
        let total = first + u64::from(raced) + after;
        assert!(
            total <= 4,
            "X {OVER_TWO_WINDOWS}: {total} of 2 and 2 ({first} at 0, {} racing, {after} at one second)",
            u8::from(raced)
        );
    }
}

#[test]
fn hybrid_a_request_stalled_across_its_entry_taken_back() {
    model(
        "hybrid a request stalled across its entry taken back",
        a_request_stalled_across_its_entry_taken_back(HybridPlant::Sound),
    );
}

#[test]
fn planted_ignored_later_entry_admits_past_the_limit() {
    expect_caught(
        "hybrid sketch admission behind another key's later entry",
        OVER_TWO_WINDOWS,
        a_request_stalled_across_its_entry_taken_back(HybridPlant::IgnoresLaterEntry),
    );
}
