//! A short side-by-side run (about 10 s): every tollgate limiter, its mutex twin, and the
//! crates users would pick instead (governor, rate-net, ratelimit, a hand-written
//! `std::sync::Mutex` bucket), on one thread (every request allowed; every request denied), on
//! two threads sharing one limiter, and on the coarse clock. Prints ns per request and the
//! ratios to the twin and to governor, then the targets.
//!
//! It times the same subjects as the criterion benches (`benches/peers`), with a plain loop:
//! the best of a few rounds, so a busy machine disturbs it less. For the statistically careful
//! comparison run `cargo bench --bench compare` (see `benches/README.md`).
//!
//! Run: `cargo run --release --example compare`

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

#[path = "../benches/peers/mod.rs"]
mod peers;
use peers::{assert_answers, Check, CoarseClocks, Family, Floor, Visit};

/// Requests per round, all threads together.
const OPS: u64 = 300_000;
/// Rounds per subject; the fastest is kept.
const ROUNDS: usize = 5;

/// ns per request, `threads` threads sharing `OPS` requests to one limiter: the best round.
fn measure<L: Check>(limiter: &L, threads: usize) -> f64 {
    let per_thread = OPS / threads as u64;
    let round = || -> Duration {
        let barrier = Barrier::new(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        let start = Instant::now();
                        for _ in 0..per_thread {
                            black_box(limiter.check());
                        }
                        (start, Instant::now())
                    })
                })
                .collect();
            // From the first start to the last end: a thread scheduled only after another
            // finished cannot hide the contention it would have met.
            let spans: Vec<(Instant, Instant)> = handles
                .into_iter()
                .map(|h| h.join().expect("bench thread"))
                .collect();
            let start = spans.iter().map(|s| s.0).min().expect("a thread");
            spans.iter().map(|s| s.1).max().expect("a thread") - start
        })
    };
    let best = (0..ROUNDS).map(|_| round()).min().expect("a round");
    best.as_nanos() as f64 / (per_thread * threads as u64) as f64
}

/// One scenario's results, in the order the subjects came.
struct Scenario {
    threads: usize,
    expect_allowed: bool,
    rows: Vec<(&'static str, Family, f64)>,
}

impl Visit for Scenario {
    fn visit<L: Check>(&mut self, name: &'static str, family: Family, limiter: L) {
        assert_answers(name, &limiter, self.expect_allowed);
        let ns = measure(&limiter, self.threads);
        self.rows.push((name, family, ns));
    }
}

fn run(threads: usize, expect_allowed: bool, subjects: impl FnOnce(&mut Scenario)) -> Scenario {
    let mut s = Scenario {
        threads,
        expect_allowed,
        rows: Vec::new(),
    };
    subjects(&mut s);
    s
}

fn print(title: &str, s: &Scenario) -> HashMap<&'static str, f64> {
    let ns: HashMap<_, _> = s.rows.iter().map(|&(n, _, x)| (n, x)).collect();
    let governor = ns
        .get("governor")
        .or_else(|| ns.get("governor/precise"))
        .copied();
    println!("\n{title}");
    println!(
        "  {:<20} {:>8} {:>8} {:>8} {:>10}",
        "limiter", "ns/req", "Mops/s", "× twin", "× governor"
    );
    for &(name, family, x) in &s.rows {
        let twin = match family {
            Family::Ours => ns.get(format!("Mutex{name}").as_str()).copied(),
            _ => None,
        };
        let vs = |other: Option<f64>| match other {
            Some(o) => format!("{:.2}×", o / x),
            None => String::new(),
        };
        let vs_gov = if family == Family::Twin {
            None
        } else {
            governor
        };
        println!(
            "  {name:<20} {x:>8.1} {:>8.1} {:>8} {:>10}",
            1e3 / x,
            vs(twin),
            vs(vs_gov)
        );
    }
    ns
}

fn main() {
    let started = Instant::now();
    // First: governor's upkeep clock insists on starting quanta's upkeep thread itself.
    let clocks = CoarseClocks::start();
    println!(
        "tollgate vs its mutex twins and the crates users pick instead: ns per request (best of \
         {ROUNDS} rounds of {OPS}); ratios > 1 mean tollgate is faster. One run on a shared \
         machine: compare within the run, expect ±25% between runs."
    );

    let allowed = run(1, true, peers::allowed);
    let a = print("1 thread, every request allowed", &allowed);
    let denied = run(1, false, peers::denied);
    print("1 thread, every request denied (the deny path)", &denied);
    let two = run(2, true, peers::allowed);
    let t = print(
        "2 threads on one shared limiter, every request allowed",
        &two,
    );
    let coarse = run(1, true, |s| peers::coarse_vs_precise(s, &clocks));
    let c = print("coarse clock vs precise clock (1 thread, allowed)", &coarse);

    let floor = Floor::new(clocks.tollgate.clone());
    let floor_ns = {
        let f = |g: &dyn Fn() -> bool| {
            (0..ROUNDS)
                .map(|_| {
                    let start = Instant::now();
                    for _ in 0..OPS {
                        black_box(g());
                    }
                    start.elapsed().as_nanos() as f64 / OPS as f64
                })
                .fold(f64::INFINITY, f64::min)
        };
        println!("\nthe floor (1 thread)");
        let raw = f(&|| black_box(floor.quanta_raw()) != 0);
        let mono = f(&|| black_box(floor.monotonic()) != 0);
        let cas = f(&|| floor.monotonic_cas());
        let coarse = f(&|| black_box(floor.coarse()) != 0);
        let coarse_cas = f(&|| floor.coarse_cas());
        println!("  quanta raw TSC read {raw:>8.1} ns");
        println!("  MonotonicClock      {mono:>8.1} ns");
        println!("  MonotonicClock+CAS  {cas:>8.1} ns");
        println!("  CoarseClock         {coarse:>8.1} ns");
        println!("  CoarseClock+CAS     {coarse_cas:>8.1} ns");
        cas
    };

    println!("\ntargets (issue 4)");
    let tb = a["TokenBucket"];
    let gov = a["governor"];
    println!(
        "  TokenBucket vs governor check():           {:.2}× (target ≥ 1)",
        gov / tb
    );
    println!(
        "  TokenBucket over the clock+CAS floor:      {:+.0}% (target ≤ +5%)",
        100.0 * (tb / floor_ns - 1.0)
    );
    println!(
        "  TokenBucket coarse vs governor (default):  {:.2}× (target ≥ 2.5)",
        c["governor/precise"] / c["TokenBucket/coarse"]
    );
    println!(
        "  2 threads: TokenBucket vs its mutex twin:  {:.2}× (target ≥ 3)",
        t["MutexTokenBucket"] / t["TokenBucket"]
    );
    println!("(whole run: {:.1} s)", started.elapsed().as_secs_f64());
}
