//! The sliding window's admission where its head fits one 64-bit word, against its mutex twin
//! and the fixed window (and the fixed window's twin), all on one `ManualClock`.
//!
//! `cargo run --release --example compare` measures every limiter at 10^9 requests per
//! second, so that no request is denied: at that limit the sliding window's head (slot
//! number and two counts) needs 128 bits, and an admission pays a 16-byte load and
//! compare-exchange. With a one-second period and the default 8 slots, the slot number takes
//! 32 bits and each count `bits(limit)`: limits below 2^16 per second keep the head in one
//! word, as most per-client limits do. Here the limit is 60,000 per second, and
//! the clock moves two seconds on between rounds (outside the timing) so that every request
//! is allowed; a manual clock's reading is one load, so the figures are the limiters' own cost.
//!
//! Rounds are interleaved in a rotating order; each subject's figure is its median round.
//!
//! ```text
//! cargo run --release --example sliding_narrow
//! cargo run --release --example sliding_narrow -- --write-readme
//! ```
//!
//! With `--write-readme` it also writes what it printed into `benches/README.md`, between its
//! `sliding_narrow:begin` and `sliding_narrow:end` markers.

use std::hint::black_box;
use std::time::{Duration, Instant};

use tollgate::baseline::{MutexFixedWindow, MutexSlidingWindow};
use tollgate::{FixedWindow, Limiter, ManualClock, Quota, SlidingWindow};

/// Requests per round: fewer than the limit, so none is denied.
const OPS: u64 = 20_000;
const ROUNDS: usize = 201;

/// ns per request over one round of `OPS` requests, each asserted allowed.
fn round(l: &dyn Limiter) -> f64 {
    let start = Instant::now();
    for _ in 0..OPS {
        assert!(black_box(l.try_acquire()).is_allowed());
    }
    start.elapsed().as_nanos() as f64 / OPS as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let quota = Quota::per_second(60_000).expect("valid quota");
    let clock = ManualClock::new();
    let subjects: [(&str, Box<dyn Limiter>); 4] = [
        (
            "SlidingWindow",
            Box::new(SlidingWindow::with_clock(quota, clock.clone())),
        ),
        (
            "MutexSlidingWindow",
            Box::new(MutexSlidingWindow::with_clock(quota, clock.clone())),
        ),
        (
            "FixedWindow",
            Box::new(FixedWindow::with_clock(quota, clock.clone())),
        ),
        (
            "MutexFixedWindow",
            Box::new(MutexFixedWindow::with_clock(quota, clock.clone())),
        ),
    ];
    let mut times = vec![Vec::with_capacity(ROUNDS); subjects.len()];
    for r in 0..ROUNDS {
        clock.advance(Duration::from_secs(2));
        for k in 0..subjects.len() {
            let i = (r + k) % subjects.len();
            times[i].push(round(subjects[i].1.as_ref()));
        }
    }
    let ns: Vec<f64> = times.into_iter().map(median).collect();
    let mut out = format!(
        "One thread, every request allowed, 60,000 per second (the sliding window's head in one \
         word), manual clock: median ns per request of {ROUNDS} interleaved rounds of {OPS}\n"
    );
    for ((name, _), t) in subjects.iter().zip(&ns) {
        out += &format!("  {name:<20} {t:>6.1}\n");
    }
    out += &format!(
        "  SlidingWindow: {:.2}× its twin, {:.2}× the fixed window's time (the fixed window: \
         {:.2}× its twin)\n",
        ns[1] / ns[0],
        ns[0] / ns[2],
        ns[3] / ns[2]
    );
    print!("{out}");
    if std::env::args().any(|a| a == "--write-readme") {
        let command = "cargo run --release --example sliding_narrow -- --write-readme";
        // This crate's folder is benches/.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
        let section = format!("```text\n{out}```\n");
        match tollgate_test_support::marked::replace(path, "sliding_narrow", command, &section) {
            Ok(()) => println!("wrote {path}"),
            Err(e) => {
                eprintln!("could not write {path}: {e}");
                std::process::exit(1);
            }
        }
    }
}
