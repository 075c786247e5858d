//! What the keyed benches (`keyed.rs`, `sketch.rs`) share: a quota no benchmark's request
//! rate reaches, in tollgate's and governor's terms, and the keys of the `million_keys` groups.

use std::num::NonZeroU32;

use governor::Quota as GovQuota;
use tollgate::Quota;
use tollgate_test_support::XorShift64Star;

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
