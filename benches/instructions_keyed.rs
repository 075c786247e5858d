//! Instruction counts of the keyed hot paths (gungraun, under valgrind's callgrind): part of the
//! regression gate, with `benches/instructions.rs`.
//!
//! `KeyedLimiter::try_acquire` on one `u64` key already in the map, for the two one-word
//! algorithms (token bucket, fixed window), fixed-quota and live, and `KeyedTable::try_acquire`
//! on one key already in the table (made for [`TABLE_KEYS`] keys), for the same two algorithms;
//! allowed and denied: [`CALLS`](gate::CALLS) requests on a clock frozen at one second. The
//! key's first request, which makes its limiter (in the map: inserts it; in the table: takes
//! its slot), is made in the argument expression with the rest of the setup, outside the
//! measurement; the map or table is handed back so that its drop is not counted either.
//!
//! A binary of its own: with one codegen unit, the keyed map's calls into the sliding window's
//! and log's cores (every algorithm's map is reachable from `try_acquire`) would change what the
//! compiler inlines into the single limiters of `benches/instructions.rs`, and the other way
//! round.

// gungraun's macros generate undocumented modules, one per benchmark function.
#![allow(missing_docs)]

use std::num::NonZeroUsize;

use gungraun::prelude::*;
use tollgate::{Algorithm, KeyedLimiter, KeyedTable, ManualClock, Quota};

mod gate;
mod peers;
mod together;
use gate::{closed, gate_bench, open, started};
use peers::{drained, Check, TollgateKeyed, TollgateTable};

type Keyed = TollgateKeyed<u64, ManualClock>;
type Table = TollgateTable<u64, ManualClock>;

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

/// The keys a [`KeyedTable`] here is made for: its size changes where the key's slot is, not
/// the instructions that find it.
const TABLE_KEYS: usize = 1024;

/// A table of `algorithm` made for [`TABLE_KEYS`] keys, with [`HOT_KEY`] in it: the key's first
/// request, which takes its slot, is made here.
fn table(algorithm: Algorithm, quota: Quota) -> Table {
    let keys = NonZeroUsize::new(TABLE_KEYS).unwrap();
    let table =
        started(|c| KeyedTable::try_with_clock(algorithm, quota, keys, c)).expect("the quota fits");
    let limiter = TollgateTable(table, HOT_KEY);
    assert!(limiter.check(), "a new key's first request is allowed");
    assert_eq!(limiter.0.len(), 1);
    limiter
}

/// A map's (or table's) benchmarks: `allowed` on the one `$make(Algorithm::$algorithm, open())`
/// builds, `denied` on the one `$make(Algorithm::$algorithm, closed())` builds, [`drained`].
macro_rules! keyed_bench {
    ($name:ident = $make:ident($algorithm:ident)) => {
        keyed_bench!($name(Keyed) = $make($algorithm));
    };
    ($name:ident($limiter:ty) = $make:ident($algorithm:ident)) => {
        gate_bench!(
            $name($limiter),
            allowed = $make(Algorithm::$algorithm, open()),
            denied = drained($make(Algorithm::$algorithm, closed())),
        );
    };
}

keyed_bench!(keyed_token_bucket = keyed(TokenBucket));
keyed_bench!(keyed_fixed_window = keyed(FixedWindow));
keyed_bench!(keyed_live_token_bucket = live(TokenBucket));
keyed_bench!(keyed_live_fixed_window = live(FixedWindow));
keyed_bench!(keyed_table_token_bucket(Table) = table(TokenBucket));
keyed_bench!(keyed_table_fixed_window(Table) = table(FixedWindow));

library_benchmark_group!(
    name = keyed_limiters,
    benchmarks = [
        keyed_token_bucket,
        keyed_fixed_window,
        keyed_live_token_bucket,
        keyed_live_fixed_window,
        keyed_table_token_bucket,
        keyed_table_fixed_window
    ]
);

main!(
    config = gate::config();
    library_benchmark_groups = keyed_limiters
);
