//! loom model of the keyed limiter's eviction protocol (`src/keyed/slot.rs`): a request that
//! races the eviction of its key is never lost on the orphaned limiter, and an eviction never
//! hands a used key a fresh limiter.
//!
//! The map is modelled without papaya: one key, whose entry is an index into slots made up
//! front (all fresh, all alike), in an atomic word. A lookup is an `Acquire` load; inserting
//! and removing are compare-exchanges, as papaya's are: the model adds no synchronization
//! the real map does not have (a mutex would).
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p loom-tests --test keyed_slot
//! ```
//!
//! The three `planted_*` tests run broken variants of the protocol and expect loom to find
//! the interleaving that over-admits.
#![cfg(tollgate_loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use tollgate::__keyed_slot_model::{ModelSlot, Variant};

/// One second in ns: the token bucket of `limit` per second refills fully in it.
const SECOND: u64 = 1_000_000_000;

/// A one-key map. `entry` is 0 (no limiter) or `i + 1` (the limiter `slots[i]`); each new
/// limiter takes the next unused slot, so a removed limiter is never reused.
struct OneKeyMap {
    entry: AtomicUsize,
    next: AtomicUsize,
    slots: Vec<ModelSlot>,
}

impl OneKeyMap {
    /// A map whose key already has a limiter (`slots[0]`), with `spare` more for re-creation.
    fn with_key(limit: u64, spare: usize) -> OneKeyMap {
        OneKeyMap {
            entry: AtomicUsize::new(1),
            next: AtomicUsize::new(1),
            slots: (0..=spare)
                .map(|_| ModelSlot::token_bucket(limit))
                .collect(),
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

    /// `KeyedLimiter::try_acquire` at `now`: true if admitted.
    fn request(&self, now: u64, variant: Variant) -> bool {
        loop {
            let index = self.get_or_insert();
            match self.slots[index - 1].acquire(now, variant) {
                Some(allowed) => return allowed,
                None => self.remove_if_same(index), // evicted under us: help, then redo
            }
        }
    }

    /// One entry of `KeyedLimiter::evict_idle` at `now`.
    fn evict(&self, now: u64, variant: Variant) {
        let index = self.entry.load(Ordering::Acquire);
        if index != 0 && self.slots[index - 1].try_evict(now, variant) {
            self.remove_if_same(index);
        }
    }
}

/// Limit 1. The key's limiter is fresh (as if last used long ago, so evicting it is
/// legitimate); one request and one eviction race at `now`. The request must pass, and a
/// later request at the same instant must not: its admission is on the map's limiter.
fn one_request_against_one_eviction(
    requester: Variant,
    evictor: Variant,
) -> impl Fn() + Send + Sync + 'static {
    move || {
        let map = Arc::new(OneKeyMap::with_key(1, 2));
        let now = 2 * SECOND;
        let m = map.clone();
        let request = thread::spawn(move || m.request(now, requester));
        let m = map.clone();
        let evict = thread::spawn(move || m.evict(now, evictor));
        let allowed = request.join().unwrap();
        evict.join().unwrap();
        assert!(allowed, "a fresh limiter of 1 denied its first request");
        let again = map.request(now, Variant::Correct);
        assert!(!again, "admitted twice at one instant with a limit of 1");
    }
}

#[test]
fn a_request_racing_an_eviction_is_never_lost() {
    let model = one_request_against_one_eviction(Variant::Correct, Variant::Correct);
    loom_tests::model("keyed slot: a request racing an eviction", model);
}

/// Limit 2, two requests and one eviction: exactly two admissions, wherever the eviction
/// falls, and the limiter left in the map holds both.
#[test]
fn two_requests_and_an_eviction_admit_exactly_the_limit() {
    loom_tests::model("keyed slot: two requests and an eviction", || {
        let map = Arc::new(OneKeyMap::with_key(2, 3));
        let now = 2 * SECOND;
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let m = map.clone();
                thread::spawn(move || m.request(now, Variant::Correct))
            })
            .collect();
        map.evict(now, Variant::Correct);
        for t in threads {
            assert!(t.join().unwrap(), "a request within the limit was denied");
        }
        assert!(
            !map.request(now, Variant::Correct),
            "a third admission at one instant with a limit of 2"
        );
    });
}

/// Two evictors and one request on a fresh key: the request is kept, and a used key is never
/// evicted by the second sweep either.
fn two_sweeps_and_a_request(evictor: Variant) -> impl Fn() + Send + Sync + 'static {
    move || {
        let map = Arc::new(OneKeyMap::with_key(1, 2));
        let now = 2 * SECOND;
        let sweeps: Vec<_> = (0..2)
            .map(|_| {
                let m = map.clone();
                thread::spawn(move || m.evict(now, evictor))
            })
            .collect();
        assert!(map.request(now, Variant::Correct));
        for t in sweeps {
            t.join().unwrap();
        }
        map.evict(now, Variant::Correct);
        assert!(
            !map.request(now, Variant::Correct),
            "admitted twice at one instant with a limit of 1"
        );
    }
}

#[test]
fn two_sweeps_racing_a_request_keep_it() {
    loom_tests::model(
        "keyed slot: two sweeps racing a request",
        two_sweeps_and_a_request(Variant::Correct),
    );
}

/// Planted bug: the first design, without the round in the state word. loom must find the
/// ABA: a sweep whose attempt the request cancelled completes the other sweep's attempt with
/// its own stale freshness check.
#[test]
fn planted_evictor_without_round_is_caught() {
    let model = two_sweeps_and_a_request(Variant::EvictorWithoutRound);
    loom_tests::expect_caught(
        "keyed slot mutant: evictor without round",
        "admitted twice",
        model,
    );
}

/// Planted bug: the requester trusts its admission without the state RMW. loom must find the
/// interleaving where the evictor removes the limiter between the lookup and the admission.
#[test]
fn planted_requester_without_state_check_is_caught() {
    let model = one_request_against_one_eviction(Variant::RequesterSkipsCheck, Variant::Correct);
    loom_tests::expect_caught(
        "keyed slot mutant: requester skips check",
        "admitted twice",
        model,
    );
}

/// Planted bug: the evictor marks the slot on its pre-check alone. loom must find the
/// interleaving where the admission lands between the check and the mark.
#[test]
fn planted_evictor_without_recheck_is_caught() {
    let model = one_request_against_one_eviction(Variant::Correct, Variant::EvictorSkipsRecheck);
    loom_tests::expect_caught(
        "keyed slot mutant: evictor skips recheck",
        "admitted twice",
        model,
    );
}
