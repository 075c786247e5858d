//! A short side-by-side run: every limiter and its mutex twin, single thread (all allowed,
//! all denied) and two threads on one limiter, printed as a table of ns per request and the
//! twin's time over the lock-free one's. For the full, statistically careful comparison with
//! the peer crates, see `benches/` (criterion).
//!
//! Run: `cargo run --release --example compare`

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use tollgate::baseline::{MutexFixedWindow, MutexSlidingLog, MutexSlidingWindow, MutexTokenBucket};
use tollgate::{FixedWindow, Limiter, Quota, SlidingLog, SlidingWindow, TokenBucket};

const OPS: u64 = 2_000_000;

/// ns per request for `threads` threads each making OPS / threads requests.
fn measure(limiter: &dyn Limiter, threads: u64) -> f64 {
    let per_thread = OPS / threads;
    let barrier = Barrier::new(threads as usize);
    let elapsed: Duration = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..per_thread {
                        let _ = black_box(limiter.try_acquire());
                    }
                    start.elapsed()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).max().unwrap()
    });
    elapsed.as_nanos() as f64 / (per_thread * threads) as f64
}

fn pair(name: &str, quota: Quota) -> (Box<dyn Limiter>, Box<dyn Limiter>) {
    match name {
        "TokenBucket" => (
            Box::new(TokenBucket::new(quota)),
            Box::new(MutexTokenBucket::new(quota)),
        ),
        "FixedWindow" => (
            Box::new(FixedWindow::new(quota)),
            Box::new(MutexFixedWindow::new(quota)),
        ),
        "SlidingWindow" => (
            Box::new(SlidingWindow::new(quota)),
            Box::new(MutexSlidingWindow::new(quota)),
        ),
        _ => (
            Box::new(SlidingLog::new(quota)),
            Box::new(MutexSlidingLog::new(quota)),
        ),
    }
}

fn main() {
    // Allowed: a limit far above what the loop can reach. Denied: a limit of 1 per hour.
    let open = Quota::per_second(1_000_000_000).unwrap();
    let closed = Quota::per_hour(1).unwrap();
    println!(
        "{:<14} {:<22} {:>10} {:>10} {:>8}",
        "limiter", "scenario", "lock-free", "mutex", "ratio"
    );
    for name in ["TokenBucket", "FixedWindow", "SlidingWindow", "SlidingLog"] {
        for (scenario, quota, threads) in [
            ("1 thread, allowed", open, 1),
            ("1 thread, denied", closed, 1),
            ("2 threads, allowed", open, 2),
        ] {
            if name == "SlidingLog" && quota == open {
                // A log of 10^9 entries is 8 GB: the log's allowed path is measured at 10^6/s.
                let q = Quota::per_second(1_000_000).unwrap();
                let (a, b) = pair(name, q);
                let (x, y) = (measure(&*a, threads), measure(&*b, threads));
                println!(
                    "{name:<14} {scenario:<22} {x:>8.1}ns {y:>8.1}ns {:>7.2}x",
                    y / x
                );
                continue;
            }
            let (a, b) = pair(name, quota);
            if quota == closed {
                let _ = (a.try_acquire(), b.try_acquire()); // drain
            }
            let (x, y) = (measure(&*a, threads), measure(&*b, threads));
            println!(
                "{name:<14} {scenario:<22} {x:>8.1}ns {y:>8.1}ns {:>7.2}x",
                y / x
            );
        }
    }
    println!(
        "(ratio = mutex twin time / lock-free time, same run; 2 threads on this 2-core machine)"
    );
}
