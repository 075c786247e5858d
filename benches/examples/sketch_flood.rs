//! A flood of one-shot keys over well-behaved ones, against six keyed limiters in one run:
//! `SketchLimiter` and `HybridSketchLimiter` (fixed memory), `KeyedLimiter` unbounded and
//! bounded (`KeyedBuilder::max_keys`, `WhenFull::Deny`), `KeyedTable` made for as many keys
//! (fixed memory, `WhenFull::Deny`), and governor's keyed limiter (a DashMap); then heavy keys
//! over well-behaved ones, where the hybrid's exact entries pay.
//!
//! ```text
//! cargo run --release --example sketch_flood                 # both tables
//! cargo run --release --example sketch_flood -- heavy        # the heavy keys' table only
//! cargo run --release --example sketch_flood -- --write-docs # both, into docs/keyed.md
//! ```
//!
//! With `--write-docs` it also writes both tables from this run into docs/keyed.md (between
//! its `sketch_flood:begin` and `sketch_flood:end` markers), so the figures there are one
//! run's.
//!
//! Workload, per row: 1,000 well-behaved keys send 50 requests each (half their quota of 100
//! per second), spread evenly through a flood of `N` one-shot keys (10^4, 10^6, 10^7), all
//! within one window (time frozen on a manual clock, for every limiter: governor's
//! `FakeRelativeClock`). An exact limiter admits every well-behaved request; "false denials"
//! is the share of them a limiter denied. One thread.
//!
//! The sketch has one size for every row, from `SketchSize::for_load(10^7 + 5·10^4, 50,
//! 0.01)`: the documented sizing for this workload at its largest. Memory is what the
//! allocator holds for the limiter after the run (a counting global allocator; the sketch's
//! is all allocated at construction); ns per request is this thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) over the whole stream, so that time the shared machine gives
//! to other processes is not charged to whichever limiter was running. The hybrid is the same
//! sketch with `EXACT` exact entries (16 B each).
//!
//! Second table (heavy keys): per window, `HEAVY_KEYS` keys send `PER_HEAVY` requests each
//! (twice their limit), `LIGHT_KEYS` keys `PER_LEGIT` each, in one shuffled order (seeded);
//! `WINDOWS` windows, the clock one period on between them, summed over `SEEDS` hasher seeds
//! (the same seeds for both). The sketch is sized for the light keys' load
//! (`SketchSize::for_load(LIGHT_KEYS·PER_LEGIT, 50, 0.01)`): the heavy keys are abusers the
//! sizing did not plan for. "False denials" counts
//! the light keys' denied requests (an exact limiter denies none), in the first window (where
//! a heavy key fills its lanes up to the promotion threshold before it is promoted) and in the
//! later ones (heavy keys re-promoted at their first request, the sketch left to the light).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use tollgate::{
    Algorithm, HybridSketchLimiter, KeyedLimit, KeyedLimiter, KeyedTable, ManualClock, Quota,
    SketchLimiter, SketchSize, WhenFull,
};
use tollgate_test_support::cpu::thread_cpu;
use tollgate_test_support::marked::Transcript;

/// Counts live bytes on top of the system allocator.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to `System` with the same layout; the counter only observes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            // Relaxed: a tally read on this thread after the work.
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            // Relaxed: as in `alloc`.
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) };
        // Relaxed: as in `alloc`.
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Relaxed: as in `alloc`.
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    // Relaxed: see `alloc`.
    LIVE.load(Ordering::Relaxed)
}

const LIMIT: u64 = 100;
const LEGIT_KEYS: u64 = 1_000;
const PER_LEGIT: u64 = 50;
const LEGIT: u64 = LEGIT_KEYS * PER_LEGIT;
const BOUND: usize = 100_000;
const LARGEST: u64 = 10_000_000;
const EXACT: usize = 4_096;
const HEAVY_KEYS: u64 = 500;
const PER_HEAVY: u64 = 2 * LIMIT;
const LIGHT_KEYS: u64 = 10_000;
const WINDOWS: u64 = 4;
/// Hasher seeds the heavy table sums over (collisions differ by seed).
const SEEDS: u64 = 8;

/// What one limiter did with one stream.
struct Run {
    bytes: isize,
    ns: f64,
    false_denials: u64,
}

/// One request for `key` to a tollgate keyed limiter: admitted?
fn admits<L: KeyedLimit<u64>>(limiter: &L, key: u64) -> bool {
    limiter.try_acquire(&key).is_allowed()
}

/// Runs the stream of `flood` one-shot keys and the well-behaved keys through `check`
/// (true: admitted), on a limiter that `make` builds (counted from before it is built).
fn run<L>(flood: u64, make: impl FnOnce() -> L, check: impl Fn(&L, u64) -> bool) -> Run {
    let before = live();
    let limiter = make();
    let total = flood + LEGIT;
    let stride = total / LEGIT;
    let (mut legit, mut denied, mut next_flood) = (0u64, 0u64, 1u64 << 40);
    let start = thread_cpu();
    for i in 0..total {
        if i % stride == 0 && legit < LEGIT {
            legit += 1;
            denied += u64::from(!check(&limiter, legit % LEGIT_KEYS));
        } else {
            next_flood += 1;
            black_box(check(&limiter, next_flood));
        }
    }
    let ns = (thread_cpu() - start).as_nanos() as f64 / total as f64;
    let bytes = live() - before;
    drop(limiter);
    Run {
        bytes,
        ns,
        false_denials: denied,
    }
}

/// Everything printed, for `--write-docs`.
static OUT: Transcript = Transcript::new();

/// `println!`, kept in `OUT` too.
macro_rules! say {
    () => { say!("") };
    ($($t:tt)*) => { OUT.line(&format!($($t)*)) };
}

fn mib(bytes: isize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

fn main() {
    let quota = Quota::per_second(LIMIT).expect("a valid quota");
    if std::env::args().nth(1).as_deref() == Some("heavy") {
        heavy_keys(quota);
        return;
    }
    let size = SketchSize::for_load(LARGEST + LEGIT, LIMIT - PER_LEGIT, 0.01)
        .expect("a size for the largest row");
    say!(
        "quota {LIMIT}/s; {LEGIT_KEYS} keys × {PER_LEGIT} requests in a flood of one-shot keys; \
         sketch: {} columns of 16 B (SketchSize::for_load({}, {}, 0.01)); hybrid: the sketch and {EXACT} exact entries; \
         bounded map: max_keys {BOUND}, Deny; table: made for {BOUND} keys, Deny",
        size.column_count(&quota),
        LARGEST + LEGIT,
        LIMIT - PER_LEGIT
    );
    say!();
    say!(
        "| flood keys | limiter                  | memory      | ns/request | false denials        |"
    );
    say!(
        "|-----------:|--------------------------|------------:|-----------:|----------------------|"
    );
    let (mut largest, mut smallest_sketch) = (None, 0isize);
    for flood in [10_000u64, 1_000_000, LARGEST] {
        let rows: [(&str, Run); 6] = [
            (
                "SketchLimiter",
                run(
                    flood,
                    || SketchLimiter::<u64, _>::with_clock(quota, size, ManualClock::new()),
                    admits,
                ),
            ),
            (
                "HybridSketchLimiter",
                run(
                    flood,
                    || {
                        HybridSketchLimiter::<u64, _>::with_clock(
                            quota,
                            size,
                            EXACT,
                            ManualClock::new(),
                        )
                    },
                    admits,
                ),
            ),
            (
                "KeyedLimiter (unbounded)",
                run(
                    flood,
                    || {
                        KeyedLimiter::<u64, _>::try_with_clock(
                            Algorithm::FixedWindow,
                            quota,
                            ManualClock::new(),
                        )
                        .expect("a keyed map")
                    },
                    admits,
                ),
            ),
            (
                "KeyedLimiter (bounded)",
                run(
                    flood,
                    || {
                        KeyedLimiter::<u64>::builder(Algorithm::FixedWindow, quota)
                            .max_keys(NonZeroUsize::new(BOUND).expect("non-zero"), WhenFull::Deny)
                            .build_with_clock(ManualClock::new())
                            .expect("a keyed map")
                    },
                    admits,
                ),
            ),
            (
                "KeyedTable",
                run(
                    flood,
                    || {
                        KeyedTable::<u64, _>::try_with_clock(
                            Algorithm::FixedWindow,
                            quota,
                            NonZeroUsize::new(BOUND).expect("non-zero"),
                            ManualClock::new(),
                        )
                        .expect("a keyed table")
                    },
                    admits,
                ),
            ),
            (
                "governor keyed (DashMap)",
                run(
                    flood,
                    || {
                        let q = governor::Quota::per_second(
                            NonZeroU32::new(LIMIT as u32).expect("non-zero"),
                        );
                        governor::RateLimiter::dashmap_with_clock(q, FakeRelativeClock::default())
                    },
                    |l, k| l.check_key(&k).is_ok(),
                ),
            ),
        ];
        if flood == 10_000 {
            smallest_sketch = rows[0].1.bytes;
        }
        for (name, r) in &rows {
            say!(
                "| {flood:>10} | {name:<24} | {:>11} | {:>10.1} | {:>6} of {LEGIT} ({:.2} %) |",
                mib(r.bytes),
                r.ns,
                r.false_denials,
                100.0 * r.false_denials as f64 / LEGIT as f64
            );
        }
        largest = Some(rows);
    }
    if let Some(
        [(_, sketch), (_, hybrid), (_, unbounded), (_, bounded), (_, table), (_, governor)],
    ) = largest
    {
        say!();
        say!(
            "at {LARGEST} flood keys, other's ns/request over the sketch's: unbounded map {:.2}×, \
             bounded map {:.2}×, table {:.2}×, governor {:.2}× (hybrid: {:.2}×, {:.2}×, {:.2}×); \
             memory, largest row over smallest: sketch {:.2}×",
            unbounded.ns / sketch.ns,
            bounded.ns / sketch.ns,
            table.ns / sketch.ns,
            governor.ns / sketch.ns,
            unbounded.ns / hybrid.ns,
            bounded.ns / hybrid.ns,
            governor.ns / hybrid.ns,
            sketch.bytes as f64 / smallest_sketch as f64,
        );
    }
    heavy_keys(quota);
    if std::env::args().any(|a| a == "--write-docs") {
        let out = OUT.text();
        // This crate's folder is benches/; docs/ is the workspace root's.
        let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/keyed.md");
        let command = "cargo run --release --example sketch_flood -- --write-docs";
        match tollgate_test_support::marked::replace(docs, "sketch_flood", command, &out) {
            Ok(()) => println!("\nwrote docs/keyed.md"),
            Err(e) => {
                eprintln!("docs/keyed.md not written: {e}");
                std::process::exit(1);
            }
        }
    }
}

/// The light keys' denials in the first window and in the later ones, and ns per request
/// (summed over seeds: `ns` is the mean).
#[derive(Default)]
struct Heavy {
    bytes: usize,
    ns: f64,
    first: u64,
    later: u64,
    runs: u64,
}

impl Heavy {
    fn add(&mut self, r: Heavy) {
        self.ns = (self.ns * self.runs as f64 + r.ns) / (self.runs + 1) as f64;
        self.runs += 1;
        self.bytes = r.bytes;
        self.first += r.first;
        self.later += r.later;
    }
}

/// One window's requests: every light key `PER_LEGIT` times, every heavy key `PER_HEAVY`
/// times (keys from `1 << 40`), shuffled by a seeded xorshift.
fn window_order(seed: u64) -> Vec<u64> {
    let mut keys: Vec<u64> = (0..LIGHT_KEYS)
        .flat_map(|k| std::iter::repeat_n(k, PER_LEGIT as usize))
        .chain((0..HEAVY_KEYS).flat_map(|k| std::iter::repeat_n((1 << 40) + k, PER_HEAVY as usize)))
        .collect();
    let mut x = seed | 1;
    for i in (1..keys.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        keys.swap(i, (x % (i as u64 + 1)) as usize);
    }
    keys
}

fn heavy_run<L>(
    orders: &[Vec<u64>],
    clock: &ManualClock,
    l: &L,
    bytes: usize,
    check: impl Fn(&L, u64) -> bool,
) -> Heavy {
    let (mut first, mut later, mut n) = (0u64, 0u64, 0u64);
    let start = thread_cpu();
    for (w, order) in orders.iter().enumerate() {
        for &k in order {
            let ok = check(l, k);
            n += 1;
            if k < LIGHT_KEYS && !ok {
                if w == 0 {
                    first += 1;
                } else {
                    later += 1;
                }
            }
        }
        clock.advance(Duration::from_secs(1));
    }
    Heavy {
        bytes,
        ns: (thread_cpu() - start).as_nanos() as f64 / n as f64,
        first,
        later,
        runs: 1,
    }
}

fn heavy_keys(quota: Quota) {
    let light = LIGHT_KEYS * PER_LEGIT;
    let size = SketchSize::for_load(light, LIMIT - PER_LEGIT, 0.01)
        .expect("a size for the heavy workload");
    let orders: Vec<Vec<u64>> = (0..WINDOWS).map(|w| window_order(0x9e37 + w)).collect();
    say!();
    say!(
        "heavy keys: {HEAVY_KEYS} keys × {PER_HEAVY} requests and {LIGHT_KEYS} keys × {PER_LEGIT} per window, \
         {WINDOWS} windows, {SEEDS} hasher seeds; sketch (sized for the light keys): {} columns (SketchSize::for_load({}, {}, 0.01)); hybrid: + {EXACT} exact entries",
        size.column_count(&quota),
        light,
        LIMIT - PER_LEGIT
    );
    say!();
    say!(
        "| limiter                     | memory   | ns/request | light false denials, window 1 | later windows                |"
    );
    say!(
        "|-----------------------------|---------:|-----------:|------------------------------:|-----------------------------:|"
    );
    // A plain sketch given the hybrid's memory: its columns plus one per exact entry (16 B each).
    let wide =
        SketchSize::columns(size.column_count(&quota) + EXACT as u64).expect("a column count");
    let (mut s, mut w, mut h) = (Heavy::default(), Heavy::default(), Heavy::default());
    for seed in 0..SEEDS {
        // A plain sketch of `columns` on its own clock, hashed with this seed.
        let plain = |columns| {
            let clock = ManualClock::new();
            let sketch = SketchLimiter::<u64, _>::with_clock(quota, columns, clock.clone())
                .with_hasher(foldhash::fast::FixedState::with_seed(seed));
            heavy_run(&orders, &clock, &sketch, sketch.bytes(), admits)
        };
        s.add(plain(size));
        w.add(plain(wide));
        let clock = ManualClock::new();
        let hybrid = HybridSketchLimiter::<u64, _>::with_clock(quota, size, EXACT, clock.clone())
            .with_hasher(foldhash::fast::FixedState::with_seed(seed));
        h.add(heavy_run(&orders, &clock, &hybrid, hybrid.bytes(), admits));
    }
    let light = light * SEEDS;
    for (name, r) in [
        ("SketchLimiter", &s),
        ("SketchLimiter (same memory)", &w),
        ("HybridSketchLimiter", &h),
    ] {
        say!(
            "| {name:<27} | {:>8} | {:>10.1} | {:>6} of {light} ({:.3} %) | {:>6} of {} ({:.3} %) |",
            format!("{} KiB", r.bytes / 1024),
            r.ns,
            r.first,
            100.0 * r.first as f64 / light as f64,
            r.later,
            light * (WINDOWS - 1),
            100.0 * r.later as f64 / (light * (WINDOWS - 1)) as f64
        );
    }
    let ratio = |a: u64, b: u64| match b {
        0 => "none for the hybrid".to_string(),
        _ => format!("{:.1}×", a as f64 / b as f64),
    };
    say!();
    say!(
        "light false denials, sketch of the same memory / hybrid: window 1 {}, later windows {}; \
         ns/request, hybrid / sketch of the same memory: {:.2}×",
        ratio(w.first, h.first),
        ratio(w.later, h.later),
        h.ns / w.ns
    );
}
