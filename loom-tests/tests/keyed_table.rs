//! loom models of the keyed table (`src/keyed/table.rs`): a key's first requests racing each
//! other end on one slot, and a takeover of an idle key's slot racing that key's own request
//! hands neither key more than its quota: a request commits only on its own key's word, and
//! the idle key's request, if its slot was taken, ends on a slot of its own, on a limiter that
//! starts no earlier than the takeover (also when it read the clock before it).
//!
//! The table is the real one at its smallest under loom: two buckets of four slots (the
//! `PROBE` of a loom build), one stripe lock. Keys hash to themselves; each model's keys are
//! the first the table homes in its first bucket. A token bucket of 1 or 2 per second (bursts
//! of 1 or 2); time from a `ManualClock`, frozen while the threads race; a key's admissions
//! at that instant, its racing requests and requests after them until one is denied, must be
//! exactly its burst, as many among the racing ones as every serial order admits (each
//! model's keys start with a full bucket).
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p loom-tests --test keyed_table
//! ```
//!
//! The `planted_*` tests run the table with one deliberate defect each, in a checked copy of
//! its request path (`src/keyed/table/planted/`), and expect loom to find the interleaving
//! where a key is admitted more or less than its burst, or holds two slots.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use loom_tests::{expect_caught, model};
use tollgate::__loom::{TableModel, TablePlant};
use tollgate::ManualClock;

/// What a key's admissions at one instant, against its burst, fail with.
const INEXACT: &str = "at one instant, with a burst of";
/// What a key holding more or fewer slots than one fails with.
const SLOTS: &str = "slots after its requests";
/// What a key's admissions at time 0 and one second, against its bursts of 1, fail with.
const OVER_A_SECOND: &str = "at time 0 and one second, with bursts of 1";

/// The keys of a model, all homed in the first bucket (under the one stripe lock).
#[derive(Clone, Copy)]
struct Keys {
    /// The key whose slot is at stake.
    x: u64,
    /// A new key that takes over an idle slot.
    a: u64,
    /// An idle key whose slot the first requests of `x` take over.
    y: u64,
}

/// The first `N` keys from 1 up that `table` homes in `bucket`, whatever its home function.
fn homed<const N: usize>(table: &TableModel, bucket: usize) -> [u64; N] {
    let mut keys = (1..).filter(|&k| table.home(k) == bucket);
    std::array::from_fn(|_| keys.next().expect("a key of that home"))
}

/// A table of `burst` per second (bursts of `burst`) made for one key, at time 0.
fn table(burst: u64) -> (Arc<TableModel>, ManualClock, Keys) {
    let clock = ManualClock::new();
    let table = TableModel::token_bucket(burst, 1, clock.clone());
    let [x, a, y] = homed(&table, 0);
    (Arc::new(table), clock, Keys { x, a, y })
}

/// A table of `burst` per second holding `idle(keys)` in the first slot, idle: it took the
/// slot at time 0 and the clock reads one second, its bucket full again. The table was made
/// for one key: it is filled, so a new key takes the idle slot over rather than an unused one.
fn table_with_idle(burst: u64, idle: fn(Keys) -> u64) -> (Arc<TableModel>, Keys) {
    let (table, clock, keys) = table(burst);
    assert!(table.acquire(idle(keys), TablePlant::Sound), "setup");
    clock.set(Duration::from_secs(1));
    (table, keys)
}

/// Runs `first` on a spawned thread and `second` on this one.
fn race(
    table: &Arc<TableModel>,
    first: (u64, TablePlant),
    second: (u64, TablePlant),
) -> (bool, bool) {
    let t = table.clone();
    let spawned = thread::spawn(move || t.acquire(first.0, first.1));
    let here = table.acquire(second.0, second.1);
    (spawned.join().expect("racer"), here)
}

/// After the race, with `key`'s bucket full when it began: its racing requests admitted
/// `raced`, exactly `racing` (what every serial order admits of them), and requests after
/// them at the same instant, until one is denied, admit the rest of its `burst`; `key`
/// holds one slot.
fn exactly(table: &TableModel, key: u64, burst: usize, raced: usize, racing: usize) {
    let after = (0..=burst)
        .take_while(|_| table.acquire(key, TablePlant::Sound))
        .count();
    assert!(
        raced == racing && raced + after == burst,
        "key {key} admitted {raced} racing and {after} after {INEXACT} {burst}"
    );
    let slots = table.slots_of(key);
    assert!(slots == 1, "key {key} holds {slots} {SLOTS}");
}

/// Two first requests of `X` race on an empty table of bursts of 1: one takes the first
/// slot's tag, the other finds it (on the request path, or under the stripe lock); one
/// admission.
fn two_first_requests(plant: TablePlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let (table, _clock, Keys { x, .. }) = table(1);
        let (a, b) = race(&table, (x, plant), (x, plant));
        exactly(&table, x, 1, usize::from(a) + usize::from(b), 1);
    }
}

/// `X` holds an idle slot, bursts of 2; `A`'s first request takes it over while `X` requests.
/// Whatever the interleaving, each request is admitted (`X` on its own word before the
/// takeover, or on a slot of its own after it), never on the other key's word (where it
/// would spend a unit of the other's burst and keep its own), and each key ends on a slot of
/// its own. `X` requests on the spawned thread: from that first schedule loom's search
/// reaches more races than the other way round, among them `X` loading the first word `A`
/// stored.
fn a_takeover_racing_the_idle_key(plant: TablePlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let (table, Keys { x, a, .. }) = table_with_idle(2, |k| k.x);
        let (x_allowed, a_allowed) = race(&table, (x, plant), (a, plant));
        exactly(&table, x, 2, usize::from(x_allowed), 1);
        exactly(&table, a, 2, usize::from(a_allowed), 1);
    }
}

/// `Y` holds an idle slot, bursts of 1; two first requests of `X` race for it: one takes it
/// over, the other finds `X` there (never, while the slot is being taken, the unused slot
/// after it); one admission.
fn two_first_requests_for_an_idle_slot(plant: TablePlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let (table, Keys { x, .. }) = table_with_idle(1, |k| k.y);
        let (a, b) = race(&table, (x, plant), (x, plant));
        exactly(&table, x, 1, usize::from(a) + usize::from(b), 1);
    }
}

/// A table of bursts of 1 made for five keys: four homed in the second bucket (under the
/// second stripe lock) fill it, each used at time 0. The first request of `X`, homed in the
/// first bucket, races that of `A`, homed in the second: its home bucket full, `A`'s scan
/// goes on into the first bucket, where `X` is claiming a slot. Each is admitted once and
/// ends on a slot of its own, though the slot a claim took holds word 0 (a fresh limiter)
/// until that claim admits.
fn a_claim_racing_a_claim_from_another_stripe(
    plant: TablePlant,
) -> impl Fn() + Send + Sync + 'static {
    move || {
        let clock = ManualClock::new();
        let table = Arc::new(TableModel::token_bucket(1, 5, clock));
        let [x] = homed(&table, 0);
        let [a, fill @ ..] = homed::<5>(&table, 1);
        for key in fill {
            assert!(table.acquire(key, TablePlant::Sound), "setup");
        }
        let (x_allowed, a_allowed) = race(&table, (x, plant), (a, plant));
        exactly(&table, x, 1, usize::from(x_allowed), 1);
        exactly(&table, a, 1, usize::from(a_allowed), 1);
    }
}

/// `X` used at time 0, bursts of 1, homed in the first bucket; the second bucket (under the
/// second stripe lock) full of keys used at half a second. One thread moves the clock to one
/// second, when `X` is idle and they are not, and makes the first request of `A`, homed in
/// the second bucket: its scan goes on into the first, and takes `X`'s slot over under the
/// second stripe's lock, not `X`'s. `X` requests, reading time 0 or one second. `X`'s
/// request and one more at one second admit exactly one between them: a request that read
/// time 0 and found its slot taken must not spend a fresh burst at time 0.
fn time_moving_under_a_takeover(plant: TablePlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let clock = ManualClock::new();
        let table = Arc::new(TableModel::token_bucket(1, 5, clock.clone()));
        let [x] = homed(&table, 0);
        let [a, fill @ ..] = homed::<5>(&table, 1);
        clock.set(Duration::from_millis(500));
        for key in fill {
            assert!(table.acquire(key, TablePlant::Sound), "setup");
        }
        clock.set(Duration::ZERO);
        assert!(table.acquire(x, TablePlant::Sound), "setup");
        let t = table.clone();
        let racer = thread::spawn(move || t.acquire(x, plant));
        clock.set(Duration::from_secs(1));
        assert!(table.acquire(a, plant), "an idle slot's taker denied");
        let first = racer.join().expect("racer");
        let second = table.acquire(x, TablePlant::Sound);
        assert!(
            first != second,
            "key {x} admitted {} of two requests, the first racing a takeover, with a burst of 1",
            u8::from(first) + u8::from(second)
        );
        assert_eq!(table.slots_of(a), 1, "A took X's slot");
    }
}

/// An empty table made for one key, bursts of 1. One thread makes `X`'s first request at time
/// 0, which claims the first slot, moves the clock to one second, when `X` is idle, and makes
/// `A`'s first request, which takes `X`'s slot over; the other thread requests `X`, from
/// time 0: it may find no slot of `X` yet and wait for the stripe lock, reading in hand,
/// while `X` claims, goes idle and loses its slot, or load the claim's word 0 before the
/// claim's admission. `X`'s requests and its requests after them at one second, until one is
/// denied, admit exactly two (its burst at 0 and again at one second), on one slot of its
/// own: a new limiter of `X` must not start at the racing request's reading of 0 (where `X`
/// had spent its burst), nor may the racing request's exchange from 0 commit on `A`'s slot.
/// `A` is admitted once.
fn a_request_stalled_across_a_takeover(plant: TablePlant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let (table, clock, Keys { x, a, .. }) = table(1);
        let t = table.clone();
        let racer = thread::spawn(move || t.acquire(x, plant));
        let first = table.acquire(x, plant);
        clock.set(Duration::from_secs(1));
        let a_allowed = table.acquire(a, plant);
        let raced = racer.join().expect("racer");
        let after = (0..=2)
            .take_while(|_| table.acquire(x, TablePlant::Sound))
            .count();
        let admitted = usize::from(first) + usize::from(raced) + after;
        assert!(
            admitted == 2,
            "key {x} admitted {admitted} {OVER_A_SECOND}: {} first, {} racing, {after} after",
            u8::from(first),
            u8::from(raced)
        );
        let slots = table.slots_of(x);
        assert!(slots == 1, "key {x} holds {slots} {SLOTS}");
        exactly(&table, a, 1, usize::from(a_allowed), 1);
    }
}

#[test]
fn the_table_passes_the_sound_models() {
    model(
        "keyed table: two first requests of a key",
        two_first_requests(TablePlant::Sound),
    );
    model(
        "keyed table: a takeover racing the idle key's request",
        a_takeover_racing_the_idle_key(TablePlant::Sound),
    );
    model(
        "keyed table: two first requests of a key for an idle slot",
        two_first_requests_for_an_idle_slot(TablePlant::Sound),
    );
}

/// Planted: an admission without the tag check after the word's load. loom must find `X`'s
/// request committing on the word `A` just got: `X` admitted there and again on a slot of
/// its own, or `A` denied on `X`'s admission.
#[test]
fn planted_untagged_admission_is_caught() {
    expect_caught(
        "keyed table mutant: admission without the tag check",
        INEXACT,
        a_takeover_racing_the_idle_key(TablePlant::UntaggedAdmission),
    );
}

/// Planted: the takeover's first word stored `Relaxed`. loom must find `X`'s request that
/// loads it, reads its own tag still (nothing orders the new one before it), and commits on
/// `A`'s word.
#[test]
fn planted_relaxed_first_word_is_caught() {
    expect_caught(
        "keyed table mutant: first word of a takeover stored Relaxed",
        INEXACT,
        a_takeover_racing_the_idle_key(TablePlant::RelaxedFirstWord),
    );
}

/// Planted: claims without the stripe lock. loom must find the second claim that scans while
/// the first takes the idle slot over (its word `EVICTED`, its tag not yet `X`'s) and takes
/// the unused slot after it: two slots for `X`, each a fresh bucket.
#[test]
fn planted_unlocked_claim_is_caught() {
    expect_caught(
        "keyed table mutant: claim without the stripe lock",
        INEXACT,
        two_first_requests_for_an_idle_slot(TablePlant::UnlockedClaim),
    );
}

/// Claims of two stripes racing for the first bucket's slots.
#[test]
fn a_claim_racing_a_claim_from_another_stripe_admits_each_key_once() {
    model(
        "keyed table: a claim racing a claim from another stripe",
        a_claim_racing_a_claim_from_another_stripe(TablePlant::Sound),
    );
}

/// Time moving under a takeover: a request that finds its key gone by reading the new tag
/// redoes at a reading no earlier than the taker's.
#[test]
fn time_moving_under_a_takeover_admits_once() {
    model(
        "keyed table: time moving under a takeover",
        time_moving_under_a_takeover(TablePlant::Sound),
    );
}

/// Planted: the takeover's new tag stored `Relaxed`. loom must find `X`'s request that read
/// time 0, reads `A`'s tag, and redoes at time 0 again (its `Acquire` fence synchronizing with
/// nothing): a fresh burst at 0 for `X`, then another admission at one second.
#[test]
fn planted_relaxed_tag_is_caught() {
    expect_caught(
        "keyed table mutant: new tag of a takeover stored Relaxed",
        "the first racing a takeover",
        time_moving_under_a_takeover(TablePlant::RelaxedTag),
    );
}

/// Planted: a takeover stores a fresh word 0 and decides the new key's first admission on it
/// by an exchange, and claims take over a slot whose word is 0. loom must find one key's
/// claim that took an unused slot, loaded its word 0 and checked its tag, stalled before its
/// exchange while the other key's claim (under the other stripe lock) takes the slot over
/// and stores 0 again: the stalled exchange from 0 commits on the taker's word, and the
/// taker, its own exchange failing, is denied on the other key's admission.
#[test]
fn planted_fresh_takeover_word_is_caught() {
    expect_caught(
        "keyed table mutant: a takeover's fresh word 0",
        INEXACT,
        a_claim_racing_a_claim_from_another_stripe(TablePlant::FreshTakeoverWord),
    );
}

#[test]
fn a_request_stalled_across_a_takeover_admits_a_burst_each_second() {
    model(
        "keyed table: a request stalled across a takeover of its key's slot",
        a_request_stalled_across_a_takeover(TablePlant::Sound),
    );
}

/// Planted: a claim decides at the reading taken before its scan. loom must find `X`'s racing
/// request that read 0, found no slot, and took the lock after the takeover: it starts a
/// new limiter at 0, and `X` is admitted three times across one second.
#[test]
fn planted_stale_claim_reading_is_caught() {
    expect_caught(
        "keyed table: the claim's stale reading",
        OVER_A_SECOND,
        a_request_stalled_across_a_takeover(TablePlant::StaleClaimReading),
    );
}
