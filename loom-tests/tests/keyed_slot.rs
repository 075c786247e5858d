//! loom models of the keyed limiter's eviction protocols: a request that races the eviction of
//! its key is never lost on the orphaned limiter, and an eviction never hands a used key a
//! fresh limiter. Two protocols, each run through the same scenarios:
//! - the one-word limiters (token bucket, fixed window; `src/keyed/word.rs`): the eviction
//!   mark is a value of the limiter's own word, so an admission's compare-exchange commits it
//!   and proves the limiter live in one step;
//! - the boxed limiters (sliding window, sliding log; `src/keyed/slot.rs`): a state word
//!   beside the core, confirmed by an RMW after each admission.
//!
//! The map is modelled without papaya: one key, whose entry is an index into slots made up
//! front (all fresh, all alike), in an atomic word. A lookup is an `Acquire` load; inserting
//! and removing are compare-exchanges, as papaya's are: the model adds no synchronization
//! the real map does not have (a mutex would). Time comes from a `ManualClock`, read once per
//! sweep and once per lookup of a request (after it), as the keyed map reads its clock.
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p loom-tests --test keyed_slot
//! ```
//!
//! The `planted_*` tests run the real slots with one deliberate defect each (compiled in by a
//! const parameter) and expect loom to find the interleaving that over-admits.
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use tollgate::__loom::{StatePlant, StateSlotModel, WordPlant, WordSlotModel};
use tollgate::{Clock, ManualClock};

/// A slot of the keyed map, with its protocol (sound or planted) chosen per call.
trait Slot: Send + Sync + 'static {
    type Plant: Copy + Send + Sync + 'static;
    const SOUND: Self::Plant;
    /// How long after one admission a limiter of 1 per second is fresh again.
    const IDLE: Duration;

    /// A fresh limiter of `limit` per second.
    fn fresh(limit: u64) -> Self;
    /// A request of cost 1: `Some(allowed)`, or `None` if evicted under it.
    fn acquire(&self, now_ns: u64, plant: Self::Plant) -> Option<bool>;
    /// The evictor: true if the slot is now evicted and must be removed.
    fn try_evict(&self, now_ns: u64, plant: Self::Plant) -> bool;
}

/// [`Slot`] for a slot model of `tollgate::__loom`: its `acquire` and `try_evict` run the
/// protocol its plant names, `$fresh` makes a fresh limiter, `$idle` is its `IDLE`.
macro_rules! slot_model {
    ($model:ident, $plant:ident, $fresh:ident, $idle:expr) => {
        impl Slot for $model {
            type Plant = $plant;
            const SOUND: $plant = $plant::Sound;
            const IDLE: Duration = $idle;

            fn fresh(limit: u64) -> Self {
                $model::$fresh(limit)
            }

            fn acquire(&self, now_ns: u64, plant: $plant) -> Option<bool> {
                $model::acquire(self, now_ns, plant)
            }

            fn try_evict(&self, now_ns: u64, plant: $plant) -> bool {
                $model::try_evict(self, now_ns, plant)
            }
        }
    };
}

slot_model!(
    WordSlotModel,
    WordPlant,
    token_bucket,
    Duration::from_secs(1)
);
// The sliding window counts an admission for up to a period and one slot.
slot_model!(
    StateSlotModel,
    StatePlant,
    sliding_window,
    Duration::from_secs(2)
);

/// A one-key map. `entry` is 0 (no limiter) or `i + 1` (the limiter `slots[i]`); each new
/// limiter takes the next unused slot, so a removed limiter is never reused.
struct OneKeyMap<S> {
    entry: AtomicUsize,
    next: AtomicUsize,
    slots: Vec<S>,
    clock: ManualClock,
}

impl<S: Slot> OneKeyMap<S> {
    /// A map whose key already has a limiter (`slots[0]`), with `spare` more for re-creation;
    /// the clock reads two seconds, long after the limiter's last use: it is fresh.
    fn with_key(limit: u64, spare: usize) -> OneKeyMap<S> {
        let clock = ManualClock::new();
        clock.set(Duration::from_secs(2));
        OneKeyMap {
            entry: AtomicUsize::new(1),
            next: AtomicUsize::new(1),
            slots: (0..=spare).map(|_| S::fresh(limit)).collect(),
            clock,
        }
    }

    /// papaya's get, then `try_insert` on a miss: the index of the key's limiter.
    fn get_or_insert(&self) -> usize {
        let current = self.entry.load(Ordering::Acquire);
        if current != 0 {
            return current;
        }
        let mine = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        assert!(
            mine <= self.slots.len(),
            "the model ran out of spare limiters"
        );
        match self
            .entry
            .compare_exchange(0, mine, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => mine,
            Err(winner) => winner, // the loser's limiter is dropped unused
        }
    }

    /// papaya's `remove_if(key, |v| ptr::eq(v, slot))`.
    fn remove_if_same(&self, index: usize) {
        let _ = self
            .entry
            .compare_exchange(index, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// `KeyedLimiter::try_acquire`: true if admitted.
    fn request(&self, plant: S::Plant) -> bool {
        loop {
            let index = self.get_or_insert();
            // As the map: the clock is read after the lookup.
            let now = self.clock.now_nanos();
            match self.slots[index - 1].acquire(now, plant) {
                Some(allowed) => return allowed,
                None => self.remove_if_same(index), // evicted under us: help, then redo
            }
        }
    }

    /// One entry of `KeyedLimiter::evict_idle`.
    fn evict(&self, plant: S::Plant) {
        let now = self.clock.now_nanos();
        let index = self.entry.load(Ordering::Acquire);
        if index != 0 && self.slots[index - 1].try_evict(now, plant) {
            self.remove_if_same(index);
        }
    }
}

/// Limit 1. The key's limiter is fresh (so evicting it is legitimate); one request and one
/// eviction race. The request must pass, and a later request at the same instant must not:
/// its admission is on the map's limiter.
fn one_request_against_one_eviction<S: Slot>(
    requester: S::Plant,
    evictor: S::Plant,
) -> impl Fn() + Send + Sync + 'static {
    move || {
        let map = Arc::new(OneKeyMap::<S>::with_key(1, 2));
        let m = map.clone();
        let request = thread::spawn(move || m.request(requester));
        let m = map.clone();
        let evict = thread::spawn(move || m.evict(evictor));
        let allowed = request.join().unwrap();
        evict.join().unwrap();
        assert!(allowed, "a fresh limiter of 1 denied its first request");
        let again = map.request(S::SOUND);
        assert!(!again, "admitted twice at one instant with a limit of 1");
    }
}

/// Limit 2, two requests and one eviction: exactly two admissions, wherever the eviction
/// falls, and the limiter left in the map holds both.
fn two_requests_and_an_eviction<S: Slot>() {
    let map = Arc::new(OneKeyMap::<S>::with_key(2, 3));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let m = map.clone();
            thread::spawn(move || m.request(S::SOUND))
        })
        .collect();
    map.evict(S::SOUND);
    for t in threads {
        assert!(t.join().unwrap(), "a request within the limit was denied");
    }
    assert!(
        !map.request(S::SOUND),
        "a third admission at one instant with a limit of 2"
    );
}

/// Two evictors and one request on a fresh key: the request is kept, and a used key is never
/// evicted by the second sweep either.
fn two_sweeps_and_a_request<S: Slot>(evictor: S::Plant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let map = Arc::new(OneKeyMap::<S>::with_key(1, 2));
        let sweeps: Vec<_> = (0..2)
            .map(|_| {
                let m = map.clone();
                thread::spawn(move || m.evict(evictor))
            })
            .collect();
        assert!(map.request(S::SOUND));
        for t in sweeps {
            t.join().unwrap();
        }
        map.evict(S::SOUND);
        assert!(
            !map.request(S::SOUND),
            "admitted twice at one instant with a limit of 1"
        );
    }
}

/// Limit 1, the key used at time 0. Three threads: one moves the clock to when the limiter is
/// full again (`S::IDLE`), one requests, one sweeps; each reads the clock before or after the
/// move. Whatever each read and wherever the eviction falls, the request and one more request
/// after the move admit exactly one between them: the second if the first was decided at time
/// 0 (denied), else the first. A request that read time 0 and found the limiter evicted must
/// not spend the new limiter's burst at time 0.
fn time_moving_under_a_request_and_a_sweep<S: Slot>(
    requester: S::Plant,
) -> impl Fn() + Send + Sync + 'static {
    move || time_moving::<S>(requester)
}

fn time_moving<S: Slot>(requester: S::Plant) {
    let map = Arc::new(OneKeyMap::<S>::with_key(1, 2));
    map.clock.set(Duration::ZERO);
    assert!(
        map.request(S::SOUND),
        "a fresh limiter of 1 denied its first request"
    );
    let clock = map.clock.clone();
    let mover = thread::spawn(move || clock.set(S::IDLE));
    let m = map.clone();
    let request = thread::spawn(move || m.request(requester));
    let m = map.clone();
    let sweep = thread::spawn(move || m.evict(S::SOUND));
    mover.join().unwrap();
    let first = request.join().unwrap();
    sweep.join().unwrap();
    let second = map.request(S::SOUND);
    assert!(
        first != second,
        "once idle after a use, a limit of 1 admitted {} of two requests",
        u8::from(first) + u8::from(second)
    );
}

/// The sound models on the protocol of `S`, each named `{protocol}: {scenario}`: a request
/// and a sweep under a moving clock admit once, a request racing an eviction is never lost,
/// two requests and an eviction admit exactly the limit, two sweeps racing a request keep it.
fn sound_models<S: Slot>(protocol: &str) {
    let name = |scenario: &str| format!("{protocol}: {scenario}");
    loom_tests::model(
        &name("time moving under a request and a sweep"),
        time_moving_under_a_request_and_a_sweep::<S>(S::SOUND),
    );
    loom_tests::model(
        &name("a request racing an eviction"),
        one_request_against_one_eviction::<S>(S::SOUND, S::SOUND),
    );
    loom_tests::model(
        &name("two requests and an eviction"),
        two_requests_and_an_eviction::<S>,
    );
    loom_tests::model(
        &name("two sweeps racing a request"),
        two_sweeps_and_a_request::<S>(S::SOUND),
    );
}

// The one-word protocol (token bucket).

#[test]
fn the_word_slot_passes_the_sound_models() {
    sound_models::<WordSlotModel>("keyed word slot");
}

/// Planted: a requester that reads the mark redoes without the `Acquire` fence. loom must
/// find the redo whose clock reading is older than the evictor's, spending the new limiter's
/// burst at time 0.
#[test]
fn planted_word_requester_without_fence_is_caught() {
    loom_tests::expect_caught(
        "keyed word slot mutant: requester skips the fence",
        "admitted 2 of two",
        time_moving_under_a_request_and_a_sweep::<WordSlotModel>(WordPlant::RequesterSkipsFence),
    );
}

/// Planted: the evictor checks freshness, then stores the mark. loom must find the admission
/// that lands between the check and the store, lost with the orphan.
#[test]
fn planted_word_evictor_that_stores_is_caught() {
    loom_tests::expect_caught(
        "keyed word slot mutant: evictor stores the mark",
        "admitted twice",
        one_request_against_one_eviction::<WordSlotModel>(
            WordPlant::Sound,
            WordPlant::EvictorStores,
        ),
    );
}

/// Planted: the evictor checks one load and compare-exchanges from a reload, so the CAS no
/// longer proves that the word it judged fresh is the word it marks.
#[test]
fn planted_word_evictor_that_reloads_is_caught() {
    loom_tests::expect_caught(
        "keyed word slot mutant: evictor reloads before the mark",
        "admitted twice",
        one_request_against_one_eviction::<WordSlotModel>(
            WordPlant::Sound,
            WordPlant::EvictorReloads,
        ),
    );
}

/// Planted: a requester that finds the mark answers as a fresh limiter would, without going
/// back to the map: its admission is recorded nowhere.
#[test]
fn planted_word_requester_that_trusts_the_mark_is_caught() {
    loom_tests::expect_caught(
        "keyed word slot mutant: requester trusts the mark",
        "admitted twice",
        one_request_against_one_eviction::<WordSlotModel>(
            WordPlant::RequesterTrustsMark,
            WordPlant::Sound,
        ),
    );
}

// The state-word protocol (sliding window).

#[test]
fn the_state_slot_passes_the_sound_models() {
    sound_models::<StateSlotModel>("keyed state slot");
}

/// Planted: without the round in the state word. loom must find the ABA: a sweep whose
/// attempt the request cancelled completes the other sweep's attempt with its own stale
/// freshness check.
#[test]
fn planted_state_evictor_without_round_is_caught() {
    loom_tests::expect_caught(
        "keyed state slot mutant: evictor without round",
        "admitted twice",
        two_sweeps_and_a_request::<StateSlotModel>(StatePlant::EvictorWithoutRound),
    );
}

/// Planted: the requester trusts its admission without the state RMW. loom must find the
/// interleaving where the evictor removes the limiter between the lookup and the admission.
#[test]
fn planted_state_requester_without_state_check_is_caught() {
    loom_tests::expect_caught(
        "keyed state slot mutant: requester skips check",
        "admitted twice",
        one_request_against_one_eviction::<StateSlotModel>(
            StatePlant::RequesterSkipsCheck,
            StatePlant::Sound,
        ),
    );
}

/// Planted: the evictor marks the slot on its pre-check alone. loom must find the
/// interleaving where the admission lands between the check and the mark.
#[test]
fn planted_state_evictor_without_recheck_is_caught() {
    loom_tests::expect_caught(
        "keyed state slot mutant: evictor skips recheck",
        "admitted twice",
        one_request_against_one_eviction::<StateSlotModel>(
            StatePlant::Sound,
            StatePlant::EvictorSkipsRecheck,
        ),
    );
}
