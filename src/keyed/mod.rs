//! Keyed limiters: one limiter per client (IP, API key, route) in a concurrent map.
//!
//! [`KeyedLimiter`] keeps a `papaya::HashMap` from keys to slots, one map type per algorithm
//! (static dispatch, no allocation on the hot path). The one-word limiters (token bucket,
//! fixed window) store their word and a pointer to their plan's shared parameters: 16 bytes
//! per key, the eviction mark folded into the word (see `word.rs`). The sliding window and
//! log store a boxed core beside a state word for eviction (see `slot.rs`). The map owns one
//! clock, read once per lookup.
//!
//! # Hot path
//!
//! Pin the map (an epoch guard, no allocation); hash the key and look it up; read the clock
//! (after the lookup, so that a request that finds its key evicted reads a time no earlier
//! than the evictor's); for the one-word limiters, one load and, to admit, one
//! compare-exchange that both commits and proves the limiter was not evicted. Only a miss allocates: it makes the key's limiter
//! and inserts it with `try_insert`, so that two racing first requests end on one limiter
//! (the loser's is dropped unused).
//!
//! # Eviction and capacity
//!
//! [`KeyedLimiter::evict_idle`] removes exactly the keys whose limiter is fresh (full capacity
//! at the map's now, less the clock's [`Clock::max_skew_nanos`]: a request redone on another
//! thread may read up to that much earlier, and the limiter must be fresh at its reading too);
//! a request racing the eviction redoes itself on the key's new limiter.
//!
//! # Time
//!
//! The map counts time from its own start: its first reading, aligned down to a multiple of
//! the map's quota's window (fixed window) or slot (sliding window) length, is its origin for
//! every key and every sweep. Windows of the map's quota stay aligned to the clock's zero; a
//! plan of another period counts its windows from the map's origin.
//! [`KeyedBuilder::max_keys`] bounds the map: a new key that finds it full first sweeps idle
//! keys (throttled, see [`KeyedBuilder::max_keys`]), then [`WhenFull`] decides.

mod live;
#[cfg(tollgate_loom)]
pub(crate) use live::loom_model as live_loom;
#[cfg(tollgate_loom)]
pub(crate) mod loom;
mod plans;
mod slot;
mod word;

mod builder;
mod error;
mod inner;
#[macro_use]
mod map;
mod options;
mod pin;
mod request;
mod table;
#[cfg(tollgate_loom)]
pub(crate) use table::loom_model as table_loom;

pub use builder::KeyedBuilder;
pub use error::KeyedError;
use map::Keyed;
pub use map::KeyedLimiter;
pub(crate) use options::remix;
pub use options::{Algorithm, KeyHasher, WhenFull};
pub use pin::KeyedPin;
pub use request::KeyedLimit;
pub use table::KeyedTable;

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::clock::ManualClock;
    use crate::decision::Decision;
    use crate::quota::Quota;
    use core::time::Duration;

    /// Everything a caller can read from a decision.
    fn seen(d: Decision) -> (bool, u64, Option<Duration>, Duration, bool) {
        let parts = (d.is_allowed(), d.remaining(), d.retry_after());
        (
            parts.0,
            parts.1,
            parts.2,
            d.reset_after(),
            d.exceeds_capacity(),
        )
    }

    #[test]
    fn a_pin_decides_as_the_limiter_does() {
        for algorithm in Algorithm::ALL {
            let quota = Quota::per_second(4).unwrap();
            let plan = Quota::per_second(9).unwrap();
            let (c1, c2) = (ManualClock::new(), ManualClock::new());
            let plain =
                KeyedLimiter::<u64, _>::try_with_clock(algorithm, quota, c1.clone()).unwrap();
            let pinned =
                KeyedLimiter::<u64, _>::try_with_clock(algorithm, quota, c2.clone()).unwrap();
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let mut pin = pinned.pin();
            // Shorter under miri, which is a thousand times slower.
            for step in 0..if cfg!(miri) { 200 } else { 4_000u32 } {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let key = x % 5;
                let (a, b) = match (x >> 8) % 8 {
                    0 => (
                        plain.try_acquire_n(&key, x >> 16 & 7),
                        pin.try_acquire_n(&key, x >> 16 & 7),
                    ),
                    1 => (
                        plain.try_acquire_with(&key, &plan),
                        pin.try_acquire_with(&key, &plan),
                    ),
                    _ => (plain.try_acquire(&key), pin.try_acquire(&key)),
                };
                assert_eq!(seen(a), seen(b), "{algorithm:?}, step {step}");
                let dt = Duration::from_millis(x >> 20 & 127);
                c1.advance(dt);
                c2.advance(dt);
                if step % 97 == 0 {
                    // Evict under the pin: its next requests must find the keys' new limiters.
                    assert_eq!(
                        plain.evict_idle(),
                        pinned.evict_idle(),
                        "{algorithm:?}, step {step}"
                    );
                }
                if step % 1000 == 999 {
                    pin = pinned.pin();
                }
            }
            drop(pin);
            assert_eq!(plain.len(), pinned.len());
        }
    }

    std::thread_local! {
        /// Whether this thread reads the clock behind the others (a core whose counter lags).
        static BEHIND: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
    }

    /// How far behind: within the skew the clock declares.
    const LAG: u64 = 8_000;

    /// A clock whose readings on a "behind" thread are `LAG` ns earlier than on the others,
    /// and which says so ([`Clock::max_skew_nanos`]) unless `hides` (then the sweep keeps no
    /// margin).
    #[derive(Clone, Debug, Default)]
    struct Skewed(ManualClock, bool);

    impl Clock for Skewed {
        fn now_nanos(&self) -> u64 {
            let t = self.0.now_nanos();
            if BEHIND.with(|b| b.get()) {
                t.saturating_sub(LAG)
            } else {
                t
            }
        }
        fn max_skew_nanos(&self) -> u64 {
            if self.1 {
                0
            } else {
                LAG
            }
        }
    }

    /// Units of `n` asked one by one on a thread that reads the clock `LAG` behind, after
    /// everything before (the join orders it after the sweep).
    fn behind(l: &KeyedLimiter<u8, Skewed>, key: u8, n: u64) -> usize {
        std::thread::scope(|s| {
            s.spawn(|| {
                BEHIND.with(|b| b.set(true));
                (0..n).filter(|_| l.try_acquire(&key).is_allowed()).count()
            })
            .join()
            .unwrap()
        })
    }

    /// A key drained on a lagging thread; a sweep on a thread ahead of it, `500` ns after the
    /// key is full again by the sweeper's reading; then the lagging thread asks again, at a
    /// reading before that, on a clock that declares its skew or `hides` it. Returns what it
    /// got with the sweep and without.
    fn drained_swept_and_asked(algorithm: Algorithm, hides: bool) -> (usize, usize) {
        let quota = Quota::per_second(3).unwrap();
        // When a key drained at 0 is fresh again: the sliding window's admission counts until
        // slot 0 + 8 + 1 (of 125 ms) begins.
        let fresh_at = match algorithm {
            Algorithm::SlidingWindow => 1_125_000_000,
            _ => 1_000_000_000,
        };
        let got = |sweep: bool| {
            let clock = Skewed(ManualClock::new(), hides);
            let l = KeyedLimiter::<u8, _>::try_with_clock(algorithm, quota, clock.clone()).unwrap();
            clock.0.set(Duration::from_nanos(LAG)); // the lagging thread reads 0
            assert_eq!(behind(&l, 1, 3), 3);
            clock.0.set(Duration::from_nanos(fresh_at + 500));
            if sweep {
                let _ = l.evict_idle();
            }
            behind(&l, 1, 3) // at fresh_at + 500 - LAG: the key is not full yet
        };
        (got(true), got(false))
    }

    #[test]
    fn a_sweep_keeps_a_margin_for_readings_that_lag_on_other_threads() {
        for algorithm in Algorithm::ALL {
            let (swept, kept) = drained_swept_and_asked(algorithm, false);
            assert_eq!(swept, kept, "{algorithm:?}: the sweep handed out nothing");
            // Without the margin (the clock hides its skew) the sweep evicts the key, and the
            // lagging thread's new limiter admits a fresh burst at an instant when the old one
            // had less: the margin is what keeps the sweep sound.
            let (swept, kept) = drained_swept_and_asked(algorithm, true);
            assert!(
                swept > kept,
                "{algorithm:?}: a sweep without margin over-admits"
            );
        }
    }

    #[test]
    fn a_key_evicted_under_a_pin_starts_afresh() {
        let clock = ManualClock::new();
        let l = KeyedLimiter::<u64, _>::try_with_clock(
            Algorithm::TokenBucket,
            Quota::per_second(2).unwrap(),
            clock.clone(),
        )
        .unwrap();
        let pin = l.pin();
        assert!(pin.try_acquire_n(&1, 2).is_allowed());
        assert!(!pin.try_acquire(&1).is_allowed());
        clock.advance(Duration::from_secs(1));
        assert_eq!(l.evict_idle(), 1);
        assert!(l.is_empty());
        let d = pin.try_acquire(&1);
        assert!(d.is_allowed());
        assert_eq!(
            d.remaining(),
            1,
            "a new limiter: its full burst less this request"
        );
        assert_eq!(l.len(), 1);
    }
}
