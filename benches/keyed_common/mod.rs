//! What the keyed benches (`keyed.rs`, `sketch.rs`) share: a quota no benchmark's request
//! rate reaches, in tollgate's and governor's terms, the keys of the `million_keys` groups, and
//! the two ways they time requests (one key; keys in turn).

use std::hint::black_box;
use std::num::NonZeroU32;

use criterion::measurement::WallTime;
use criterion::BenchmarkGroup;
use governor::Quota as GovQuota;
use tollgate::{KeyedLimit, Quota};
use tollgate_test_support::XorShift64Star;

use crate::timing::on_cpu_bench;

/// Never denies at the request rates of a benchmark: every limiter takes its admission path.
pub const RATE: u32 = 1_000_000_000;
/// The key space of the `million_keys` groups.
pub const MILLION: u64 = 1_000_000;

/// [`RATE`] per second.
pub fn quota() -> Quota {
    Quota::per_second(u64::from(RATE)).unwrap()
}

/// [`RATE`] per second, for governor.
pub fn gov_quota() -> GovQuota {
    GovQuota::per_second(NonZeroU32::new(RATE).unwrap())
}

/// A fixed sequence of keys in `0..MILLION`, drawn by xorshift64*.
pub fn random_keys(len: usize) -> Vec<u64> {
    let mut rng = XorShift64Star(0x9E37_79B9_7F4A_7C15);
    (0..len).map(|_| rng.below(MILLION)).collect()
}

/// Benchmarks requests for the one key 42 to `limiter` as `id` in `g` (see [`on_cpu_bench`]).
pub fn on_one_key(g: &mut BenchmarkGroup<'_, WallTime>, id: &str, limiter: &impl KeyedLimit<u64>) {
    on_cpu_bench(g, id, || limiter.try_acquire(black_box(&42)).is_allowed());
}

/// Benchmarks `request` as `id` in `g` (see [`on_cpu_bench`]), each request for the next key of
/// `keys` (a power of two of them), from the second on.
pub fn on_keys(
    g: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    keys: &[u64],
    mut request: impl FnMut(&u64) -> bool,
) {
    let mask = keys.len() - 1;
    let mut at = 0;
    on_cpu_bench(g, id, || {
        at = (at + 1) & mask;
        request(&keys[at])
    });
}
