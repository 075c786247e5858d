//! A flood of one-shot keys over well-behaved ones, against four keyed limiters in one run:
//! `SketchLimiter` (fixed memory), `KeyedLimiter` unbounded and bounded
//! (`KeyedBuilder::max_keys`, `WhenFull::Deny`), and governor's keyed limiter (a DashMap).
//!
//! ```text
//! cargo run --release --example sketch_flood
//! ```
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
//! to other processes is not charged to whichever limiter was running.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use tollgate::{Algorithm, KeyedLimiter, ManualClock, Quota, SketchLimiter, SketchSize, WhenFull};

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

/// This thread's CPU time so far.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// What one limiter did with one stream.
struct Run {
    bytes: isize,
    ns: f64,
    false_denials: u64,
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

fn mib(bytes: isize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

fn main() {
    let quota = Quota::per_second(LIMIT).expect("a valid quota");
    let size = SketchSize::for_load(LARGEST + LEGIT, LIMIT - PER_LEGIT, 0.01)
        .expect("a size for the largest row");
    println!(
        "quota {LIMIT}/s; {LEGIT_KEYS} keys × {PER_LEGIT} requests in a flood of one-shot keys; \
         sketch: {} columns of 16 B (SketchSize::for_load({}, {}, 0.01)); bounded map: max_keys {BOUND}, Deny",
        size.column_count(&quota),
        LARGEST + LEGIT,
        LIMIT - PER_LEGIT
    );
    println!();
    println!(
        "| flood keys | limiter                  | memory      | ns/request | false denials        |"
    );
    println!(
        "|-----------:|--------------------------|------------:|-----------:|----------------------|"
    );
    for flood in [10_000u64, 1_000_000, LARGEST] {
        let rows: [(&str, Run); 4] = [
            (
                "SketchLimiter",
                run(
                    flood,
                    || SketchLimiter::<u64, _>::with_clock(quota, size, ManualClock::new()),
                    |l, k| l.try_acquire(&k).is_allowed(),
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
                    |l, k| l.try_acquire(&k).is_allowed(),
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
                    |l, k| l.try_acquire(&k).is_allowed(),
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
        for (name, r) in rows {
            println!(
                "| {flood:>10} | {name:<24} | {:>11} | {:>10.1} | {:>6} of {LEGIT} ({:.2} %) |",
                mib(r.bytes),
                r.ns,
                r.false_denials,
                100.0 * r.false_denials as f64 / LEGIT as f64
            );
        }
    }
}
