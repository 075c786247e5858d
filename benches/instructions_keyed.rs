//! Instruction counts of the keyed map's hot path (gungraun, under valgrind's callgrind): part of
//! the regression gate, with `benches/instructions.rs`.
//!
//! `KeyedLimiter::try_acquire` on one `u64` key already in the map, for the two one-word
//! algorithms (token bucket, fixed window), allowed and denied: [`CALLS`](gate::CALLS) requests
//! on a clock frozen at one second. The key's first request, which makes its limiter and inserts
//! it, is made in the argument expression with the rest of the setup, outside the measurement;
//! the map is handed back so that its drop is not counted either.
//!
//! A binary of its own: with one codegen unit, the keyed map's calls into the sliding window's
//! and log's cores (every algorithm's map is reachable from `try_acquire`) would change what the
//! compiler inlines into the single limiters of `benches/instructions.rs`, and the other way
//! round.

// gungraun's macros generate undocumented modules, one per benchmark function.
#![allow(missing_docs)]

use gungraun::prelude::*;
use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota};

mod gate;
mod peers;
mod together;
use gate::{closed, gate_bench, open, started};
use peers::{drained, Check, TollgateKeyed};

type Keyed = TollgateKeyed<u64, ManualClock>;

/// The one key every request asks for.
const HOT_KEY: u64 = 0x7f00_0001;

/// A map of `algorithm` with [`HOT_KEY`] in it: the key's first request, which makes its limiter
/// and inserts it, is made here.
fn keyed(algorithm: Algorithm, quota: Quota) -> Keyed {
    let map =
        started(|c| KeyedLimiter::try_with_clock(algorithm, quota, c)).expect("the quota fits");
    hot(map)
}

/// A map whose quotas can change while it runs (`live()`).
fn live(algorithm: Algorithm, quota: Quota) -> Keyed {
    let map = started(|c| {
        KeyedLimiter::builder(algorithm, quota)
            .live()
            .build_with_clock(c)
    })
    .expect("the quota fits");
    hot(map)
}

/// The map with its hot key inserted (outside the measurement).
fn hot(map: KeyedLimiter<u64, ManualClock>) -> Keyed {
    let limiter = TollgateKeyed(map, HOT_KEY);
    assert!(limiter.check(), "a new key's first request is allowed");
    assert_eq!(limiter.0.len(), 1);
    limiter
}

/// A map's benchmarks: `allowed` on the map `$make(Algorithm::$algorithm, open())` builds,
/// `denied` on the one `$make(Algorithm::$algorithm, closed())` builds, [`drained`].
macro_rules! keyed_bench {
    ($name:ident = $make:ident($algorithm:ident)) => {
        gate_bench!(
            $name(Keyed),
            allowed = $make(Algorithm::$algorithm, open()),
            denied = drained($make(Algorithm::$algorithm, closed())),
        );
    };
}

keyed_bench!(keyed_token_bucket = keyed(TokenBucket));
keyed_bench!(keyed_fixed_window = keyed(FixedWindow));
keyed_bench!(keyed_live_token_bucket = live(TokenBucket));
keyed_bench!(keyed_live_fixed_window = live(FixedWindow));

library_benchmark_group!(
    name = keyed_limiters,
    benchmarks = [
        keyed_token_bucket,
        keyed_fixed_window,
        keyed_live_token_bucket,
        keyed_live_fixed_window
    ]
);

main!(
    config = gate::config();
    library_benchmark_groups = keyed_limiters
);
