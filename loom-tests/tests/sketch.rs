//! loom models of the keyed sketch's column (`src/sketch/cell.rs`): requests of keys whose
//! lanes overlap in one 16-byte word race on it, and no key is ever admitted past its limit,
//! whatever the interleaving: the minimum of a key's lanes, its check and the raise of its
//! lanes are one compare-exchange.
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p loom-tests --test sketch
//! ```
//!
//! The `planted_*` tests run the real column with one deliberate defect each (compiled in by
//! a const parameter) and expect loom to find the interleaving that over-admits.
#![cfg(tollgate_loom)]

use loom::sync::Arc;
use loom::thread;
use loom_tests::{expect_caught, model};
use tollgate::__loom::{SketchCellModel, SketchPlant};

const SEC: u64 = 1_000_000_000;

/// Key A counts in lanes 0 and 1, key B in lanes 1 and 2: they share lane 1.
const A: (u8, u8) = (0, 1);
const B: (u8, u8) = (1, 2);

const OVER: &str = "admitted past its limit";

fn acquire(cell: &SketchCellModel, key: (u8, u8), now: u64, plant: SketchPlant) -> bool {
    cell.acquire(key.0, key.1, now, 1, plant)
}

/// Units a key still gets at `now` after the race (at most `max`).
fn drain(cell: &SketchCellModel, key: (u8, u8), now: u64, max: u64) -> u64 {
    (0..max)
        .take_while(|_| acquire(cell, key, now, SketchPlant::Sound))
        .count() as u64
}

/// Limit 1. A and B race once each on the shared column; then each is drained. Each key
/// gets exactly 1 in all (never 2: a lost raise of A's lanes lets A in twice), and the
/// racers both pass (they fit whatever the order: B's other lane is empty).
fn two_keys_on_shared_lanes(plant: SketchPlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let cell = Arc::new(SketchCellModel::new(1));
        let other = cell.clone();
        let b = thread::spawn(move || acquire(&other, B, SEC / 2, plant));
        let a = acquire(&cell, A, SEC / 2, plant);
        let b = b.join().expect("racer");
        let a_total = u64::from(a) + drain(&cell, A, SEC / 2, 2);
        let b_total = u64::from(b) + drain(&cell, B, SEC / 2, 2);
        assert!(
            a_total <= 1 && b_total <= 1,
            "a key {OVER}: A {a_total}, B {b_total}"
        );
        assert!(
            a && b,
            "a racer denied though its lanes had room: A {a}, B {b}"
        );
    }
}

/// Limit 2. Two requests of A race (its lanes also hold one of B's units on lane 1); then A
/// is drained: A gets exactly 2 in all.
fn one_key_twice_on_a_polluted_lane(plant: SketchPlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let cell = Arc::new(SketchCellModel::new(2));
        assert!(acquire(&cell, B, SEC / 2, SketchPlant::Sound), "setup");
        let other = cell.clone();
        let t = thread::spawn(move || acquire(&other, A, SEC / 2, plant));
        let first = acquire(&cell, A, SEC / 2, plant);
        let second = t.join().expect("racer");
        let total = u64::from(first) + u64::from(second) + drain(&cell, A, SEC / 2, 4);
        assert!(total <= 2, "A {OVER}: {total} of 2");
        assert_eq!(total, 2, "A lost units it had: {total} of 2");
    }
}

/// Limit 1, A's window 0 full. A request of A in window 1 races one still reading window 0
/// that then reads window 1 too: the stale one never passes (its window is full, or the
/// column has moved on to window 1 and holds no count of window 0 any more), and window 1
/// takes exactly one of the two others (a new window resets and counts in one step).
fn a_stale_clock_racing_a_new_window(plant: SketchPlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let cell = Arc::new(SketchCellModel::new(1));
        assert!(acquire(&cell, A, SEC / 2, SketchPlant::Sound), "setup");
        let other = cell.clone();
        let late = thread::spawn(move || acquire(&other, A, SEC + SEC / 2, plant));
        let stale = acquire(&cell, A, SEC - 1, plant);
        let caught_up = acquire(&cell, A, SEC + SEC / 2, plant);
        let late = late.join().expect("racer");
        assert!(!stale, "A {OVER} of window 0");
        assert!(late || caught_up, "A denied in a fresh window");
        assert!(!(late && caught_up), "A {OVER} of window 1");
    }
}

#[test]
fn sketch_two_keys_on_shared_lanes() {
    model(
        "sketch two keys on shared lanes",
        two_keys_on_shared_lanes(SketchPlant::Sound),
    );
}

#[test]
fn sketch_one_key_twice_on_a_polluted_lane() {
    model(
        "sketch one key twice on a polluted lane",
        one_key_twice_on_a_polluted_lane(SketchPlant::Sound),
    );
}

#[test]
fn sketch_a_stale_clock_racing_a_new_window() {
    model(
        "sketch a stale clock racing a new window",
        a_stale_clock_racing_a_new_window(SketchPlant::Sound),
    );
}

#[test]
fn planted_load_then_store_loses_a_shared_lane() {
    expect_caught(
        "sketch load-then-store (two keys)",
        OVER,
        two_keys_on_shared_lanes(SketchPlant::LoadThenStore),
    );
}

#[test]
fn planted_load_then_store_admits_one_key_twice() {
    expect_caught(
        "sketch load-then-store (one key)",
        OVER,
        one_key_twice_on_a_polluted_lane(SketchPlant::LoadThenStore),
    );
}

#[test]
fn planted_load_then_store_loses_a_window_reset() {
    expect_caught(
        "sketch load-then-store (new window)",
        OVER,
        a_stale_clock_racing_a_new_window(SketchPlant::LoadThenStore),
    );
}

#[test]
fn planted_raise_min_only_under_counts() {
    expect_caught(
        "sketch raise-min-only",
        OVER,
        one_key_twice_on_a_polluted_lane(SketchPlant::RaiseMinOnly),
    );
}
