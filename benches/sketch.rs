//! The fixed-memory keyed sketch (`SketchLimiter`) against the keyed maps: tollgate's
//! `KeyedLimiter` (papaya) and governor's keyed limiter (a DashMap), on their default clocks.
//!
//! ```text
//! nice -n 10 cargo bench --bench sketch
//! ```
//!
//! Timed in the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), as `keyed.rs` is:
//! on a shared machine wall time charges other processes' slices to whichever limiter ran.
//! The sketch has 2^18 columns (4 MiB) throughout; `hybrid` is `HybridSketchLimiter` on the
//! same sketch with 4,096 exact entries (64 KiB more). Groups (one scenario each; compare
//! within one run, the machine is shared):
//! - `sketch/one_key`: one key, every request admitted (a quota of 10^9 per second);
//! - `sketch/million_keys`: 1,000,000 keys seen up front, requests on keys drawn at random
//!   (a fixed xorshift sequence): cache misses dominate;
//! - `sketch/new_keys`: every request a key never seen before (a flood of one-shot keys):
//!   the maps allocate and grow on each, the sketch does what it always does. The maps
//!   are rebuilt every 2^20 keys so that memory stays bounded; that cost is counted.
#![allow(missing_docs)]

mod keyed_common;
mod timing;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use governor::RateLimiter;
use tollgate::{Algorithm, HybridSketchLimiter, KeyedLimiter, SketchLimiter, SketchSize};
use tollgate_test_support::cpu::thread_cpu;

use keyed_common::{gov_quota, on_keys, on_one_key, quota, random_keys, MILLION};
use timing::{on_cpu_bench, per_request};

/// 2^18 columns (4 MiB), the size of the flood example's sketch: larger than the caches,
/// as a sketch for a flood is.
fn sketch() -> SketchLimiter<u64> {
    SketchLimiter::new(quota(), SketchSize::columns(1 << 18).unwrap())
}

/// The same sketch with 4,096 exact entries (`HybridSketchLimiter`).
fn hybrid() -> HybridSketchLimiter<u64> {
    HybridSketchLimiter::new(quota(), SketchSize::columns(1 << 18).unwrap(), 4_096)
}

fn one_key(c: &mut Criterion) {
    let mut g = per_request(c, "sketch/one_key");
    let s = sketch();
    on_one_key(&mut g, "sketch", &s);
    let hy = hybrid();
    on_one_key(&mut g, "hybrid", &hy);
    let k = KeyedLimiter::<u64>::try_new(Algorithm::FixedWindow, quota()).unwrap();
    on_one_key(&mut g, "keyed", &k);
    let gov = RateLimiter::keyed(gov_quota());
    on_cpu_bench(&mut g, "governor", || {
        gov.check_key(black_box(&42u64)).is_ok()
    });
    g.finish();
}

fn million_keys(c: &mut Criterion) {
    let mut g = per_request(c, "sketch/million_keys");
    let keys = random_keys(1 << 20);
    let s = sketch();
    let k = KeyedLimiter::<u64>::try_new(Algorithm::FixedWindow, quota()).unwrap();
    let gov = RateLimiter::keyed(gov_quota());
    for key in 0..MILLION {
        let _ = (
            s.try_acquire(&key),
            k.try_acquire(&key),
            gov.check_key(&key),
        );
    }
    on_keys(&mut g, "sketch", &keys, |key| {
        s.try_acquire(key).is_allowed()
    });
    let hy = hybrid();
    for key in 0..MILLION {
        let _ = hy.try_acquire(&key);
    }
    on_keys(&mut g, "hybrid", &keys, |key| {
        hy.try_acquire(key).is_allowed()
    });
    on_keys(&mut g, "keyed", &keys, |key| {
        k.try_acquire(key).is_allowed()
    });
    on_keys(&mut g, "governor", &keys, |key| gov.check_key(key).is_ok());
    g.finish();
}

/// `iters` requests on fresh keys through `check`, with `fresh` rebuilding the limiter every
/// 2^20 keys (timed).
fn on_new_keys<L>(
    iters: u64,
    mut fresh: impl FnMut() -> L,
    check: impl Fn(&L, u64) -> bool,
) -> Duration {
    let start = thread_cpu();
    let mut limiter = fresh();
    for i in 0..iters {
        if i & ((1 << 20) - 1) == (1 << 20) - 1 {
            limiter = fresh();
        }
        black_box(check(&limiter, i.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    }
    thread_cpu() - start
}

fn new_keys(c: &mut Criterion) {
    let mut g = per_request(c, "sketch/new_keys");
    let s = sketch();
    g.bench_function("sketch", |b| {
        b.iter_custom(|iters| on_new_keys(iters, || &s, |s, k| s.try_acquire(&k).is_allowed()))
    });
    let hy = hybrid();
    g.bench_function("hybrid", |b| {
        b.iter_custom(|iters| on_new_keys(iters, || &hy, |h, k| h.try_acquire(&k).is_allowed()))
    });
    g.bench_function("keyed", |b| {
        b.iter_custom(|iters| {
            on_new_keys(
                iters,
                || KeyedLimiter::<u64>::try_new(Algorithm::FixedWindow, quota()).unwrap(),
                |l, k| l.try_acquire(&k).is_allowed(),
            )
        })
    });
    g.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            on_new_keys(
                iters,
                || RateLimiter::keyed(gov_quota()),
                |l, k| l.check_key(&k).is_ok(),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, one_key, million_keys, new_keys);
criterion_main!(benches);
