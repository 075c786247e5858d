//! Deterministic generators for the workspace's tests and benchmarks (reproducible streams
//! from a seed), the quotas of the random-stream tests, the checks every limiter's decisions
//! and a sketch's against a key's exact limiter must pass, a clock that holds a thread after
//! a reading, a recorder of `tracing` events, and the writer of the docs' generated sections.
//! Dev-only (`publish = false`).
//!
//! Each generator's sequence is fixed: tests assert exact outcomes of streams drawn from
//! them, so a change here changes what they test.

mod capacity;
pub mod cpu;
pub mod events;
pub mod marked;
mod shadow;
mod stall;
mod two_window;

pub use capacity::check_costs_above_capacity;
pub use shadow::check_against_shadow;
pub use stall::StallClock;
pub use two_window::TwoWindow;

use std::hash::{BuildHasherDefault, Hasher};
use std::time::Duration;

use tollgate::Quota;

/// SplitMix64: one 64-bit state, a full-period stream.
///
/// ```
/// let mut rng = tollgate_test_support::SplitMix64(7);
/// assert_ne!(rng.next(), rng.next());
/// assert!(rng.below(10) < 10);
/// ```
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next value of the stream.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next value reduced to `0..n` (modulo: the small bias does not matter here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// xorshift64*: one non-zero 64-bit state.
///
/// ```
/// let mut rng = tollgate_test_support::XorShift64Star(0x9E37_79B9_7F4A_7C15);
/// assert_ne!(rng.next(), rng.next());
/// ```
pub struct XorShift64Star(pub u64);

impl XorShift64Star {
    /// The next value of the stream.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// The next value reduced to `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One step of a random clock-and-cost stream for a limiter of `limit` per `period`
/// nanoseconds, the clock reading `now`: the clock's next reading (half the steps advance
/// it by up to half a period, one in ten steps it back by up to two periods, one in ten
/// jumps up to 20 periods, the rest keep it) and the cost to ask for then (0, up to twice
/// the limit, `u64::MAX` or a little less, or mostly 1).
///
/// ```
/// use tollgate_test_support::{clock_and_cost, SplitMix64};
/// let mut rng = SplitMix64(1);
/// let (now, cost) = clock_and_cost(&mut rng, 1_000, 5, 0);
/// let _ = (now, cost);
/// ```
pub fn clock_and_cost(rng: &mut SplitMix64, period: u64, limit: u64, now: u64) -> (u64, u64) {
    let now = match rng.below(10) {
        0..=4 => now.saturating_add(rng.below(period / 2 + 2)),
        5 => now.saturating_sub(rng.below(period * 2)),
        6 => now.saturating_add(rng.below(period * 20)),
        _ => now,
    };
    let cost = match rng.below(8) {
        0 => 0,
        1 => rng.below(limit * 2 + 2),
        2 => u64::MAX - rng.below(3),
        _ => 1,
    };
    (now, cost)
}

/// The quotas of the random-stream tests (the core crate's limiters against their twins,
/// tollgate-redis's against the core's): round (5/s), fractional (3 per 7 s, burst 7), a
/// short period (100 per 10 ms), one per ns, inexact (999/s, burst 20) and a long log
/// (50,000 per hour).
///
/// ```
/// assert_eq!(tollgate_test_support::stream_quotas().len(), 6);
/// ```
pub fn stream_quotas() -> [Quota; 6] {
    [
        Quota::per_second(5).unwrap(),
        Quota::try_new(3, Duration::from_secs(7))
            .unwrap()
            .with_burst(7)
            .unwrap(),
        Quota::try_new(100, Duration::from_millis(10)).unwrap(),
        Quota::try_new(1, Duration::from_nanos(1)).unwrap(),
        Quota::per_second(999).unwrap().with_burst(20).unwrap(),
        Quota::per_hour(50_000).unwrap(),
    ]
}

/// A hasher that hashes a `u64` key to itself shifted left by `SHIFT` bits (bytes are folded
/// in, the first highest): tests pick which columns, lanes and slots their keys fall in.
///
/// ```
/// use std::hash::BuildHasher;
/// use tollgate_test_support::BuildShifted;
/// assert_eq!(BuildShifted::<0>::default().hash_one(7u64), 7);
/// assert_eq!(BuildShifted::<58>::default().hash_one(1u64), 1 << 58);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Shifted<const SHIFT: u32>(u64);

impl<const SHIFT: u32> Hasher for Shifted<SHIFT> {
    fn finish(&self) -> u64 {
        self.0 << SHIFT
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = bytes.iter().fold(self.0, |h, &b| h << 8 | u64::from(b));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// What builds [`Shifted`] hashers, for a keyed limiter's `with_hasher`.
pub type BuildShifted<const SHIFT: u32> = BuildHasherDefault<Shifted<SHIFT>>;

/// A hasher for the sketches, which mix every hash again (murmur3's 64-bit finalizer) before
/// they read a column, lanes or a slot off it: it hashes a `u64` key to the value that mix
/// turns into the key shifted left by `SHIFT` bits (the finalizer undone, step by step), so a
/// sketch places key `k` as [`Shifted`] would place it unmixed.
///
/// ```
/// use std::hash::BuildHasher;
/// use tollgate_test_support::BuildPlaced;
/// let h = BuildPlaced::<0>::default();
/// assert_eq!(h.hash_one(0u64), 0);
/// assert_ne!(h.hash_one(7u64), 7);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Placed<const SHIFT: u32>(Shifted<SHIFT>);

impl<const SHIFT: u32> Hasher for Placed<SHIFT> {
    fn finish(&self) -> u64 {
        let mut h = self.0.finish();
        h ^= h >> 33;
        h = h.wrapping_mul(0x9cb4_b2f8_1293_37db);
        h ^= h >> 33;
        h = h.wrapping_mul(0x4f74_430c_22a5_4005);
        h ^ (h >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }
    fn write_u64(&mut self, v: u64) {
        self.0.write_u64(v);
    }
}

/// What builds [`Placed`] hashers, for a sketch's `with_hasher`.
pub type BuildPlaced<const SHIFT: u32> = BuildHasherDefault<Placed<SHIFT>>;
