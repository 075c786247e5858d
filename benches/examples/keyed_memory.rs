//! Bytes per key of a keyed limiter, counted by a global allocator: 1,000,000 `u64` keys in
//! tollgate's `KeyedLimiter` (each algorithm), in tollgate's `KeyedTable` (token bucket and
//! fixed window) and in governor's keyed limiter.
//!
//! ```text
//! cargo run --release --example keyed_memory            # 1,000,000 keys
//! cargo run --release --example keyed_memory -- 100000  # another count
//! ```
//!
//! The count is of bytes requested from the allocator and not yet returned (the allocator's
//! own per-block overhead, 8–16 bytes per block for glibc, is not included), measured after
//! the keys are inserted, while the limiter is alive. Time is frozen (a `ManualClock`), so no
//! key goes idle. Rows:
//! - "grown, before any sweep": keys inserted into an empty map, measured right after the
//!   last insert (the map hands the tables it outgrew to the epoch collector as it goes);
//! - "grown": the same, then one `evict_idle` (which evicts nothing here);
//! - "presized": `KeyedBuilder::capacity(keys)`, so the map never grows;
//! - "KeyedTable, for the keys": `KeyedTable::try_with_clock(.., keys, ..)`, its whole table
//!   allocated at construction (what its `bytes()` reports, and the manual clock's 24 bytes),
//!   then every key asked once; a key that finds no slot is counted and printed.
//!
//! "peak" is the most held at any moment while inserting: while the map grows, its old and
//! new tables are both live; a `KeyedTable` never grows, so its peak is its size.
//!
//! Then a check that requests allocate nothing: on existing keys, for every algorithm of the
//! map; on existing and new keys, for both of the table's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use tollgate::{Algorithm, KeyedLimiter, KeyedTable, ManualClock, Quota};

/// Counts live bytes and blocks on top of the system allocator.
struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static LIVE_BLOCKS: AtomicIsize = AtomicIsize::new(0);
static PEAK_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to `System` with the same layout; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            record(layout.size() as isize, 1);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            record(layout.size() as isize, 1);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        record(-(layout.size() as isize), -1);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            record(new_size as isize - layout.size() as isize, 0);
        }
        p
    }
}

fn record(bytes: isize, blocks: isize) {
    // Relaxed: counters read only by this single-threaded example after the work is done.
    let now = LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes;
    LIVE_BLOCKS.fetch_add(blocks, Ordering::Relaxed);
    PEAK_BYTES.fetch_max(now.max(0) as usize, Ordering::Relaxed);
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> (isize, isize) {
    (
        LIVE_BYTES.load(Ordering::Relaxed),
        LIVE_BLOCKS.load(Ordering::Relaxed),
    )
}

/// Live bytes and blocks per key after `fill` made a limiter with `keys` keys.
fn per_key<T>(keys: u64, fill: impl FnOnce() -> T) -> (f64, f64, f64) {
    let (bytes0, blocks0) = live();
    PEAK_BYTES.store(bytes0.max(0) as usize, Ordering::Relaxed);
    let limiter = fill();
    let (bytes1, blocks1) = live();
    let peak = PEAK_BYTES.load(Ordering::Relaxed) as f64 - bytes0 as f64;
    drop(limiter);
    let k = keys as f64;
    (
        (bytes1 - bytes0) as f64 / k,
        (blocks1 - blocks0) as f64 / k,
        peak / k,
    )
}

fn main() {
    let keys: u64 = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("a key count"))
        .unwrap_or(1_000_000);
    let quota = Quota::per_second(5).expect("a valid quota");
    println!("{keys} u64 keys (8 bytes each), live bytes per key after inserting them all:");
    println!(
        "{:<46} {:>10} {:>12} {:>14}",
        "limiter", "bytes/key", "blocks/key", "peak bytes/key"
    );
    let row = |name: &str, (bytes, blocks, peak): (f64, f64, f64)| {
        println!("{name:<46} {bytes:>10.1} {blocks:>12.2} {peak:>14.1}");
    };
    let fill = |limiter: &KeyedLimiter<u64, ManualClock>| {
        for key in 0..keys {
            let _ = limiter.try_acquire(&key);
        }
    };
    let result = per_key(keys, || {
        let limiter = KeyedLimiter::<u64, _>::try_with_clock(
            Algorithm::TokenBucket,
            quota,
            ManualClock::new(),
        )
        .expect("a valid quota");
        fill(&limiter);
        limiter
    });
    row("tollgate TokenBucket, grown, before any sweep", result);
    for algorithm in Algorithm::ALL {
        let result = per_key(keys, || {
            let limiter =
                KeyedLimiter::<u64, _>::try_with_clock(algorithm, quota, ManualClock::new())
                    .expect("a valid quota");
            fill(&limiter);
            assert_eq!(limiter.evict_idle(), 0);
            limiter
        });
        row(&format!("tollgate {algorithm:?}, grown"), result);
        let result = per_key(keys, || {
            let limiter = KeyedLimiter::<u64>::builder(algorithm, quota)
                .capacity(keys as usize)
                .build_with_clock(ManualClock::new())
                .expect("a valid quota");
            fill(&limiter);
            limiter
        });
        row(&format!("tollgate {algorithm:?}, presized"), result);
    }
    // Maps whose quotas can change while they run.
    for algorithm in [Algorithm::TokenBucket, Algorithm::FixedWindow] {
        let result = per_key(keys, || {
            let limiter = KeyedLimiter::<u64>::builder(algorithm, quota)
                .live()
                .build_with_clock(ManualClock::new())
                .expect("a valid quota");
            fill(&limiter);
            limiter
        });
        row(&format!("tollgate {algorithm:?}, live, grown"), result);
    }
    // Tables of a fixed size, made for the keys: each key takes a slot, none grows.
    let table_keys = NonZeroUsize::new(keys as usize).expect("a key count above 0");
    let table = |algorithm| {
        KeyedTable::<u64, _>::try_with_clock(algorithm, quota, table_keys, ManualClock::new())
            .expect("a valid quota and a table that fits")
    };
    for algorithm in [Algorithm::TokenBucket, Algorithm::FixedWindow] {
        let mut no_slot = 0;
        let result = per_key(keys, || {
            let table = table(algorithm);
            no_slot = (0..keys)
                .filter(|key| !table.try_acquire(key).is_allowed())
                .count();
            table
        });
        row(
            &format!("tollgate KeyedTable {algorithm:?}, for the keys"),
            result,
        );
        if no_slot > 0 {
            println!("  ({no_slot} of the {keys} keys found no slot: denied, `WhenFull::Deny`)");
        }
    }
    let gov_quota = governor::Quota::per_second(NonZeroU32::new(5).expect("non-zero"));
    let result = per_key(keys, || {
        let limiter = governor::RateLimiter::keyed(gov_quota);
        for key in 0..keys {
            let _ = limiter.check_key(&key);
        }
        limiter
    });
    row("governor keyed (DashMap)", result);
    // The hit path allocates nothing: requests on existing keys, every algorithm.
    for algorithm in Algorithm::ALL {
        let limiter = KeyedLimiter::<u64, _>::try_with_clock(algorithm, quota, ManualClock::new())
            .expect("a valid quota");
        for key in 0..1_000 {
            let _ = limiter.try_acquire(&key);
        }
        let blocks = live().1;
        for round in 0..10 {
            for key in 0..1_000 {
                let _ = limiter.try_acquire_n(&key, round % 2);
            }
        }
        let allocated = live().1 - blocks;
        println!("{algorithm:?}: {allocated} allocations in 10,000 requests on existing keys");
        assert_eq!(allocated, 0);
    }
    for algorithm in [Algorithm::TokenBucket, Algorithm::FixedWindow] {
        let table = table(algorithm);
        let blocks = live().1;
        for round in 0..10 {
            for key in 0..1_000 {
                let _ = table.try_acquire_n(&key, round % 2);
            }
        }
        let allocated = live().1 - blocks;
        println!(
            "KeyedTable {algorithm:?}: {allocated} allocations in 10,000 requests, 1,000 new keys"
        );
        assert_eq!(allocated, 0);
    }
}
