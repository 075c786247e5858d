//! `KeyedLimit`: every implementor answers through the trait exactly as through its own
//! methods. Each case drives two twins (same quota, each on its own `ManualClock`, advanced
//! together) with one pseudo-random stream of requests: one twin through the trait, the other
//! through the type's inherent methods, and compares every decision, fields included.

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;
use std::time::Duration;

use tollgate::{
    Algorithm, Decision, HybridSketchLimiter, KeyedLimit, KeyedLimiter, ManualClock, Metered,
    Quota, SketchLimiter, SketchSize,
};

/// One request of the stream.
#[derive(Clone, Copy, Debug)]
enum Ask {
    /// `try_acquire`: the trait's provided method against the inherent one.
    One,
    /// `try_acquire_n`, `n` from 0 to above the capacity.
    N(u64),
}

/// A fixed hasher, so that two sketches put every key in the same column and lanes.
type Fixed = BuildHasherDefault<DefaultHasher>;

/// What `$limiter`'s own methods answer to an [`Ask`], for [`agree`]'s `inherent`.
macro_rules! own_methods {
    ($limiter:expr) => {
        |k, ask| match ask {
            Ask::One => $limiter.try_acquire(k),
            Ask::N(n) => $limiter.try_acquire_n(k, n),
        }
    };
}

fn quota() -> Quota {
    Quota::per_second(5).unwrap()
}

fn sketch(clock: &ManualClock, sliding: bool) -> SketchLimiter<str, ManualClock, Fixed> {
    // Few columns: keys share lanes, so false denials are part of what must agree.
    let size = SketchSize::columns(2).unwrap();
    let l = if sliding {
        SketchLimiter::try_sliding_with_clock(quota(), size, clock.clone()).unwrap()
    } else {
        SketchLimiter::with_clock(quota(), size, clock.clone())
    };
    l.with_hasher(Fixed::default())
}

fn map(algorithm: Algorithm, clock: &ManualClock) -> KeyedLimiter<String, ManualClock> {
    KeyedLimiter::try_with_clock(algorithm, quota(), clock.clone()).unwrap()
}

const KEYS: [&str; 5] = ["alice", "bob", "carol", "dave", "erin"];

/// Drives `via_trait` only through [`KeyedLimit`] and its twin through `inherent`, `clocks`
/// advanced together, and asserts every pair of decisions and the quota equal.
fn agree<L: KeyedLimit<str> + ?Sized>(
    what: &str,
    via_trait: &L,
    inherent: impl Fn(&str, Ask) -> Decision,
    clocks: [&ManualClock; 2],
) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let (mut allowed, mut denied) = (0, 0);
    for step in 0..3_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let key = KEYS[(x % KEYS.len() as u64) as usize];
        let ask = match (x >> 8) % 3 {
            0 => Ask::N((x >> 16) % 8),
            _ => Ask::One,
        };
        let a = match ask {
            Ask::One => via_trait.try_acquire(key),
            Ask::N(n) => via_trait.try_acquire_n(key, n),
        };
        let b = inherent(key, ask);
        assert_eq!(a, b, "{what}: step {step}, {key} asks {ask:?}");
        if a.is_allowed() {
            allowed += 1;
        } else {
            denied += 1;
        }
        let dt = Duration::from_millis((x >> 20) % 97);
        clocks[0].advance(dt);
        clocks[1].advance(dt);
    }
    // The stream exercised both answers.
    assert!(
        allowed > 100 && denied > 100,
        "{what}: {allowed} allowed, {denied} denied"
    );
    assert_eq!(via_trait.quota(), quota(), "{what}");
}

fn clocks() -> (ManualClock, ManualClock) {
    (ManualClock::new(), ManualClock::new())
}

#[test]
fn keyed_limiter_answers_through_the_trait_as_its_own_methods() {
    for algorithm in Algorithm::ALL {
        let (c1, c2) = clocks();
        let (t, i) = (map(algorithm, &c1), map(algorithm, &c2));
        agree(&format!("{algorithm:?}"), &t, own_methods!(i), [&c1, &c2]);
        assert_eq!(KeyedLimit::<str>::quota(&t), i.quota());
        assert_eq!(t.len(), i.len());
    }
}

#[test]
fn a_pin_answers_through_the_trait_as_its_own_methods() {
    for algorithm in Algorithm::ALL {
        let (c1, c2) = clocks();
        let (t, i) = (map(algorithm, &c1), map(algorithm, &c2));
        let (tp, ip) = (t.pin(), i.pin());
        agree(
            &format!("pinned {algorithm:?}"),
            &tp,
            own_methods!(ip),
            [&c1, &c2],
        );
        assert_eq!(KeyedLimit::<str>::quota(&tp), i.quota());
    }
}

#[test]
fn a_metered_map_answers_and_counts_through_the_trait_as_its_own_methods() {
    for algorithm in Algorithm::ALL {
        let (c1, c2) = clocks();
        let (t, i) = (
            Metered::new(map(algorithm, &c1)),
            Metered::new(map(algorithm, &c2)),
        );
        agree(
            &format!("metered {algorithm:?}"),
            &t,
            own_methods!(i),
            [&c1, &c2],
        );
        assert_eq!(t.snapshot(), i.snapshot(), "metered {algorithm:?}");
        assert_eq!(t.snapshot().decisions(), 3_000);
    }
}

#[test]
fn a_sketch_answers_through_the_trait_as_its_own_methods() {
    for sliding in [false, true] {
        let (c1, c2) = clocks();
        let (t, i) = (sketch(&c1, sliding), sketch(&c2, sliding));
        agree(
            &format!("sketch, sliding: {sliding}"),
            &t,
            own_methods!(i),
            [&c1, &c2],
        );
        assert_eq!(KeyedLimit::<str>::quota(&t), i.quota());
    }
}

#[test]
fn a_hybrid_sketch_answers_through_the_trait_as_its_own_methods() {
    let (c1, c2) = clocks();
    // Two exact entries for five keys, promoted at 3 of 5: promotions and slot contention are
    // part of what must agree.
    let hybrid = |clock: &ManualClock| {
        HybridSketchLimiter::<str, _>::with_clock(
            quota(),
            SketchSize::columns(2).unwrap(),
            2,
            clock.clone(),
        )
        .with_hasher(Fixed::default())
        .promote_at(3)
    };
    let (t, i) = (hybrid(&c1), hybrid(&c2));
    agree("hybrid sketch", &t, own_methods!(i), [&c1, &c2]);
    assert_eq!(KeyedLimit::<str>::quota(&t), i.quota());
}

#[test]
fn a_metered_sketch_counts_what_the_sketch_answers() {
    let (c1, c2) = clocks();
    let (t, i) = (Metered::new(sketch(&c1, false)), sketch(&c2, false));
    agree("metered sketch", &t, own_methods!(i), [&c1, &c2]);
    let s = t.snapshot();
    assert_eq!(s.decisions(), 3_000);
    assert_eq!(s.evicted_keys, 0);
}

#[test]
fn a_map_of_owned_keys_is_asked_by_owned_or_borrowed_keys() {
    let clock = ManualClock::new();
    let l = map(Algorithm::FixedWindow, &clock);
    let by_owned: &dyn KeyedLimit<String> = &l;
    let by_borrowed: &dyn KeyedLimit<str> = &l;
    assert!(by_owned.try_acquire_n(&"alice".to_owned(), 4).is_allowed());
    // The same key's limiter: one unit left of five.
    assert_eq!(by_borrowed.try_acquire("alice").remaining(), 0);
    assert!(!by_owned.try_acquire(&"alice".to_owned()).is_allowed());
    assert_eq!(l.len(), 1);
}
