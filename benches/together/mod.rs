//! A start line for the threads of a contention benchmark: each thread arrives and spins until
//! all have, so they set off within a few hundred nanoseconds of each other.
//!
//! `std::sync::Barrier` parks the threads that arrive first and wakes them through the kernel:
//! on a virtual machine that wake can take longer than a whole timed round (tens of
//! microseconds), and the threads then take turns instead of contending, so a contended
//! figure would be an uncontended one.

#![allow(dead_code)] // each bench target uses a part of this module

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Releases `threads` threads together: each calls [`Together::wait`] once.
pub struct Together {
    waiting: AtomicUsize,
}

impl Together {
    /// A start line for `threads` threads.
    pub fn new(threads: usize) -> Self {
        Together {
            waiting: AtomicUsize::new(threads),
        }
    }

    /// Arrives, then spins until every thread has arrived.
    pub fn wait(&self) {
        // AcqRel/Acquire: a thread sets off only after it has seen every other thread's arrival,
        // and with it whatever that thread wrote before arriving.
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        while self.waiting.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
        }
    }
}

/// Runs `work(thread)` on `threads` threads released together; returns each thread's (start,
/// end).
pub fn spans(threads: usize, work: impl Fn(usize) + Sync) -> Vec<(Instant, Instant)> {
    let start = Together::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (start, work) = (&start, &work);
                s.spawn(move || {
                    start.wait();
                    let began = Instant::now();
                    work(t);
                    (began, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    })
}

/// From the first thread's start to the last one's end: threads the scheduler ran one after
/// another cannot pass for threads that contended.
pub fn first_start_to_last_end(spans: &[(Instant, Instant)]) -> Duration {
    let start = spans.iter().map(|s| s.0).min().expect("a thread");
    let end = spans.iter().map(|s| s.1).max().expect("a thread");
    end - start
}
