//! `KeyedTable`: every key admitted exactly its quota, on a frozen `ManualClock` and under
//! racing threads; a table holds the keys it was made for; idle keys give their slots to new
//! keys and come back fresh; busy keys keep theirs, and a new key that finds no slot is
//! decided by the policy.

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use tollgate::{Algorithm, KeyedError, KeyedTable, ManualClock, Quota, WhenFull};
use tollgate_test_support::{BuildShifted, StallClock};

/// The two algorithms a table holds.
const ONE_WORD: [Algorithm; 2] = [Algorithm::TokenBucket, Algorithm::FixedWindow];

/// A hasher that hashes a `u64` key to itself: placements the same in every run.
type Identity = BuildShifted<0>;

/// The slots of a table made for at most 170 keys: 64 buckets of 4, every key's whole search.
const SMALL: u64 = 256;

fn keys(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap()
}

fn table<K: std::hash::Hash + ?Sized>(
    algorithm: Algorithm,
    quota: Quota,
    for_keys: usize,
) -> (KeyedTable<K, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let t = KeyedTable::try_with_clock(algorithm, quota, keys(for_keys), clock.clone()).unwrap();
    (t, clock)
}

/// How many of `requests` requests for `key` are admitted.
fn passed<K: std::hash::Hash + ?Sized, C: tollgate::Clock, S: std::hash::BuildHasher>(
    t: &KeyedTable<K, C, S>,
    key: &K,
    requests: usize,
) -> usize {
    (0..requests)
        .filter(|_| t.try_acquire(key).is_allowed())
        .count()
}

/// A table made for `for_keys` keys (at most 170: its 256 slots are every key's whole
/// search, so the keys of a test compete for all of them).
fn crowded(
    algorithm: Algorithm,
    quota: Quota,
    for_keys: usize,
) -> (KeyedTable<u64, ManualClock, Identity>, ManualClock) {
    assert!(for_keys <= 170);
    let (t, clock) = table::<u64>(algorithm, quota, for_keys);
    assert_eq!(t.slots() as u64, SMALL);
    (t.with_hasher(Identity::default()), clock)
}

#[test]
fn each_key_is_admitted_exactly_its_quota_in_each_period() {
    let quota = Quota::per_second(3).unwrap();
    for algorithm in ONE_WORD {
        let (t, clock) = table::<u64>(algorithm, quota, 1000);
        for period in 0..3 {
            for key in 0..1000u64 {
                assert_eq!(
                    passed(&t, &key, 5),
                    3,
                    "{algorithm:?}: key {key}, period {period}"
                );
            }
            clock.advance(Duration::from_secs(1));
        }
        assert_eq!(t.len(), 1000, "{algorithm:?}");
    }
}

#[test]
fn string_keys_are_looked_up_by_reference() {
    let (t, _clock) = table::<str>(Algorithm::TokenBucket, Quota::per_second(2).unwrap(), 8);
    let owned = String::from("10.0.0.1");
    assert_eq!(passed(&t, owned.as_str(), 3), 2);
    assert_eq!(passed(&t, "10.0.0.1", 1), 0);
    assert_eq!(passed(&t, "10.0.0.2", 3), 2);
}

#[test]
fn a_table_holds_the_keys_it_was_made_for() {
    // A fixed hasher, so the placement (and this test) is the same in every run.
    const KEYS: u64 = 100_000;
    let quota = Quota::per_second(1).unwrap();
    let (t, _clock) = table::<u64>(Algorithm::TokenBucket, quota, KEYS as usize);
    let t = t.with_hasher(BuildHasherDefault::<DefaultHasher>::default());
    let spread = |k: u64| k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for k in 0..KEYS {
        assert!(
            t.try_acquire(&spread(k)).is_allowed(),
            "key {k} found no slot"
        );
    }
    assert_eq!(t.len(), KEYS as usize);
    // Each key kept its own limiter: its second request, in the same instant, is denied.
    for k in 0..KEYS {
        assert!(!t.try_acquire(&spread(k)).is_allowed(), "key {k}");
    }
    assert!(t.slots() >= KEYS as usize * 3 / 2);
}

/// Keys in sequence under a hasher whose output is as regular as its input (the identity, a
/// common choice for integer keys; a fast hasher's top bits can be nearly as regular): each
/// key still finds a slot, as the table spreads homes by mixing the hash again.
#[test]
fn keys_in_sequence_under_an_identity_hash_each_find_a_slot() {
    const KEYS: u64 = 200_000;
    let quota = Quota::per_second(1).unwrap();
    for algorithm in ONE_WORD {
        let (t, _clock) = table::<u64>(algorithm, quota, KEYS as usize);
        let t = t.with_hasher(Identity::default());
        // From 1: under the identity, 0 hashes to 0, read as 1 (a shared limiter).
        let left_out = (1..=KEYS)
            .filter(|k| !t.try_acquire(k).is_allowed())
            .count();
        assert_eq!(left_out, 0, "{algorithm:?}");
        assert_eq!(t.len() as u64, KEYS, "{algorithm:?}");
    }
}

#[test]
fn a_new_key_refused_on_its_first_request_takes_no_slot() {
    let quota = Quota::per_second(5).unwrap();
    for algorithm in ONE_WORD {
        let (t, _clock) = table::<u64>(algorithm, quota, 8);
        let zero = t.try_acquire_n(&1, 0);
        assert!(
            zero.is_allowed() && zero.remaining() == 5,
            "{algorithm:?}: {zero:?}"
        );
        assert!(t.try_acquire_n(&2, 6).exceeds_capacity(), "{algorithm:?}");
        assert!(t.is_empty(), "{algorithm:?}");
        // A zero cost on a key that has a slot reads it.
        assert!(t.try_acquire_n(&3, 4).is_allowed());
        assert_eq!(t.try_acquire_n(&3, 0).remaining(), 1, "{algorithm:?}");
        assert_eq!(t.len(), 1, "{algorithm:?}");
    }
}

#[test]
fn idle_keys_give_their_slots_to_new_keys_and_come_back_fresh() {
    let quota = Quota::per_second(2).unwrap();
    for algorithm in ONE_WORD {
        // Made for 16 keys: 256 slots to share.
        let (t, clock) = crowded(algorithm, quota, 16);
        for key in 2..2 + SMALL {
            assert_eq!(passed(&t, &key, 3), 2, "{algorithm:?}: key {key}");
        }
        assert_eq!(t.len() as u64, SMALL, "{algorithm:?}");
        // Every slot is held by a drained key: a new key finds none.
        assert!(!t.try_acquire(&500).is_allowed(), "{algorithm:?}");
        clock.advance(Duration::from_secs(1));
        // A period on, the old keys are idle: new keys take their slots.
        for key in 1000..1000 + SMALL {
            assert_eq!(passed(&t, &key, 3), 2, "{algorithm:?}: key {key}");
        }
        assert_eq!(t.len() as u64, SMALL, "{algorithm:?}: no slot was added");
        // An old key whose slot was taken comes back with a fresh limiter, which is what
        // its idle one was; the new keys, drained, keep theirs.
        assert_eq!(
            passed(&t, &2, 3),
            0,
            "{algorithm:?}: every slot is busy again"
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(passed(&t, &2, 3), 2, "{algorithm:?}");
    }
}

/// A request that found no slot for its key and stalled, reading in hand, while the key
/// claimed a slot, went idle a period on and lost the slot to a new key: the slot it then
/// claims starts at a reading after that takeover. At its stale reading the key had spent
/// its quota, so a limiter started there would admit the key twice at one instant, and once
/// more at the takeover's.
#[test]
fn a_request_stalled_before_its_claim_starts_the_new_slot_after_the_takeover() {
    let quota = Quota::per_second(1).unwrap();
    for algorithm in ONE_WORD {
        let clock = StallClock::new();
        let t = KeyedTable::try_with_clock(algorithm, quota, keys(1), clock.clone())
            .unwrap()
            .with_hasher(Identity::default());
        let stalled = thread::scope(|s| {
            let racer = s.spawn(|| {
                // Its second reading: taken again after its search found no slot.
                clock.hold(2);
                t.try_acquire(&7u64).is_allowed()
            });
            clock.wait_held();
            assert!(t.try_acquire(&7u64).is_allowed(), "{algorithm:?}");
            clock.set(Duration::from_secs(1));
            // New keys until one takes the idle key's slot over (the table holds the one key
            // it was made for) rather than claiming an unused one.
            let took_over = (1000..1256u64).any(|key| {
                let used = t.len();
                assert!(t.try_acquire(&key).is_allowed(), "{algorithm:?}");
                t.len() == used
            });
            assert!(took_over, "{algorithm:?}: no new key took the idle slot");
            clock.release();
            racer.join().unwrap()
        });
        assert!(stalled, "{algorithm:?}: the key was idle, its quota back");
        assert_eq!(
            passed(&t, &7, 2),
            0,
            "{algorithm:?}: a period and the stall after its first admission, the key was \
             admitted twice already"
        );
    }
}

#[test]
fn busy_keys_keep_their_slots_and_a_new_key_is_denied_by_default() {
    let quota = Quota::per_second(4).unwrap();
    for algorithm in ONE_WORD {
        let (t, clock) = crowded(algorithm, quota, 1);
        for key in 2..2 + SMALL {
            assert_eq!(passed(&t, &key, 1), 1, "{algorithm:?}: key {key}");
        }
        let full = t.try_acquire(&7000);
        assert!(!full.is_allowed(), "{algorithm:?}");
        assert_eq!(full.remaining(), 0, "{algorithm:?}");
        assert_eq!(
            full.retry_after(),
            Some(Duration::from_secs(1)),
            "{algorithm:?}"
        );
        // Each busy key kept its count: 3 more, not a fresh 4.
        for key in 2..2 + SMALL {
            assert_eq!(passed(&t, &key, 4), 3, "{algorithm:?}: key {key}");
        }
        // Half a period on, the buckets refilled their two tokens but are not full; the
        // windows still count every admission: no slot is idle.
        clock.advance(Duration::from_millis(500));
        assert!(!t.try_acquire(&7000).is_allowed(), "{algorithm:?}");
    }
}

#[test]
fn a_table_can_judge_new_keys_untracked_when_full() {
    let quota = Quota::per_second(2).unwrap();
    let (t, _clock) = crowded(Algorithm::TokenBucket, quota, 1);
    let t = t.when_full(WhenFull::AdmitUntracked);
    for key in 2..2 + SMALL {
        assert_eq!(passed(&t, &key, 3), 2, "key {key}");
    }
    // No slot for key 7000: each request is judged by a fresh limiter, never kept.
    assert_eq!(passed(&t, &7000, 5), 5);
    assert!(t.try_acquire_n(&7000, 3).exceeds_capacity());
    assert_eq!(t.len() as u64, SMALL);
}

#[test]
fn keys_of_one_hash_share_one_limiter() {
    // Under `Identity`, key 0 hashes to 0, which the table reads as 1: keys 0 and 1 share a
    // limiter, and together they are admitted the quota, never more.
    let quota = Quota::per_second(3).unwrap();
    for algorithm in ONE_WORD {
        let (t, _clock) = crowded(algorithm, quota, 8);
        assert_eq!(passed(&t, &0, 2) + passed(&t, &1, 5), 3, "{algorithm:?}");
        assert_eq!(t.len(), 1, "{algorithm:?}");
    }
}

#[test]
fn an_algorithm_of_several_words_or_a_table_too_large_is_an_error() {
    let quota = Quota::per_second(1).unwrap();
    for algorithm in [Algorithm::SlidingWindow, Algorithm::SlidingLog] {
        let t = KeyedTable::<u64, _>::try_with_clock(algorithm, quota, keys(8), ManualClock::new());
        assert_eq!(t.err(), Some(KeyedError::Algorithm(algorithm)));
    }
    for huge in [usize::MAX, usize::MAX / 3, 1 << 60] {
        let t = KeyedTable::<u64, _>::try_with_clock(
            Algorithm::TokenBucket,
            quota,
            keys(huge),
            ManualClock::new(),
        );
        assert_eq!(t.err(), Some(KeyedError::Capacity), "{huge}");
    }
}

#[test]
// Thousands of racing requests: minutes under miri. The slot protocol is model-checked by
// loom (loom-tests/tests/keyed_table.rs).
#[cfg_attr(miri, ignore)]
fn threads_racing_a_new_key_admit_exactly_the_quota_and_take_one_slot() {
    // On an empty table the racers' first candidate is the same unused slot, whose tag the
    // first exchange decides; the stripe lock matters when claims can take idle slots (the
    // test below).
    let quota = Quota::per_second(50).unwrap();
    for algorithm in ONE_WORD {
        for round in 0..8u64 {
            let (t, _clock) = table::<u64>(algorithm, quota, 64);
            let t = Arc::new(t);
            let start = Arc::new(Barrier::new(8));
            let allowed = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let (t, start, allowed) = (t.clone(), start.clone(), allowed.clone());
                    thread::spawn(move || {
                        start.wait();
                        allowed.fetch_add(passed(&t, &round, 25), Ordering::Relaxed);
                    })
                })
                .collect();
            for h in threads {
                h.join().unwrap();
            }
            assert_eq!(
                allowed.load(Ordering::Relaxed),
                50,
                "{algorithm:?}, round {round}"
            );
            assert_eq!(t.len(), 1, "{algorithm:?}, round {round}");
        }
    }
}

/// New keys take idle slots over while those slots' own keys come back. Each round, two
/// periods after the last (every slot idle), requests half the keys of the last round and as
/// many new ones; two threads walk them in opposite orders, so a new key often takes an old
/// key's slot between that key's lookup and its admission. All 32 share the 256 slots of a
/// table made for one key, so every claim prefers an idle slot. Every key must be admitted
/// exactly its limit in every round: an admission committed on another key's word lets one
/// more through, a lost one shows as one fewer. (With the stripe lock removed, or the tag
/// check after the word's load, this fails in some runs here, about one in two and one in
/// four; the loom model finds each every time.)
#[test]
#[cfg_attr(miri, ignore)]
fn takeovers_racing_requests_never_lose_or_invent_an_admission() {
    const LIMIT: u64 = 3;
    const KEYS: u64 = 32;
    const PASSES: u64 = 3;
    const ROUNDS: u64 = 2000;
    let quota = Quota::per_second(LIMIT).unwrap();
    for algorithm in ONE_WORD {
        let (t, clock) = crowded(algorithm, quota, 1);
        let t = Arc::new(t);
        let barrier = Arc::new(Barrier::new(3));
        let admitted: Arc<Vec<AtomicU64>> =
            Arc::new((0..ROUNDS * KEYS).map(|_| AtomicU64::new(0)).collect());
        // Round r's keys: 2 + r·KEYS/2 .. 2 + r·KEYS/2 + KEYS (2 and up: no two share a hash).
        let key_of = |round: u64, i: u64| 2 + round * KEYS / 2 + i;
        let requesters: Vec<_> = (0..2)
            .map(|side| {
                let (t, barrier, admitted) = (t.clone(), barrier.clone(), admitted.clone());
                thread::spawn(move || {
                    for round in 0..ROUNDS {
                        barrier.wait();
                        for j in 0..PASSES * KEYS {
                            let i = if side == 0 {
                                j % KEYS
                            } else {
                                KEYS - 1 - j % KEYS
                            };
                            if t.try_acquire(&key_of(round, i)).is_allowed() {
                                admitted[(round * KEYS + i) as usize]
                                    .fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        barrier.wait();
                    }
                })
            })
            .collect();
        for round in 0..ROUNDS {
            clock.set(Duration::from_secs(2 * round));
            barrier.wait();
            barrier.wait();
            for i in 0..KEYS {
                let n = admitted[(round * KEYS + i) as usize].load(Ordering::Relaxed);
                assert_eq!(
                    n,
                    LIMIT,
                    "{algorithm:?}: round {round}, key {}",
                    key_of(round, i)
                );
            }
        }
        for h in requesters {
            h.join().unwrap();
        }
        assert!(t.len() as u64 <= SMALL, "{algorithm:?}");
    }
}
