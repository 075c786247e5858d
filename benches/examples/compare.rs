//! tollgate next to the rate limiters you might pick instead, measured side by side in one
//! process (about 20 s).
//!
//! Compared: every tollgate limiter, its mutex twin (`tollgate::baseline`), governor's direct
//! limiter (`check()`), rate-net's `DirectLimiter`, ratelimit's `Ratelimiter` and the
//! `std::sync::Mutex` token bucket people write by hand. Each is built with its crate's
//! recommended constructor and the same quota, and asked for one unit at a time:
//!
//! - one thread, every request allowed, then every request denied (a drained limiter);
//! - the same limiters on a coarse clock (tollgate's `CoarseClock`, governor's
//!   `QuantaUpkeepClock`, rate-net's `CoarseClock`, each refreshed every 1 ms), the sliding
//!   window's mutex twin on tollgate's;
//! - two threads on one shared limiter;
//! - what reading each clock costs by itself (the floor under every precise-clock limiter).
//!
//! Rounds are interleaved: every round times each subject once, in a rotating order, so a
//! burst of load from elsewhere on the machine hits all of them alike; each subject's figure
//! is its median round. It prints ns per request, and ratios: "× governor" is governor's
//! time over the limiter's (above 1: faster than governor).
//!
//! ```text
//! cargo run --release --example compare
//! cargo run --profile bench-lto --example compare     # fat LTO, one codegen unit
//! cargo run --release --example compare -- --write-readme
//! ```
//!
//! With `--write-readme` it also writes the README's performance table from this run, and
//! the whole of what it printed into `benches/README.md` (each between its `compare:begin`
//! and `compare:end` markers), so the figures there are one run's.
//!
//! For criterion's statistics on the same subjects, run `cargo bench --bench compare` (see
//! `benches/README.md`).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "../peers/mod.rs"]
mod peers;
#[path = "../together/mod.rs"]
mod together;
use peers::{assert_answers, spans, Check, CoarseClocks, Family, Floor, Visit};
use together::first_start_to_last_end;
use tollgate_test_support::marked::Transcript;

/// Everything the run prints, kept for `--write-readme`.
static OUTPUT: Transcript = Transcript::new();

/// `println!`, and the line kept in [`OUTPUT`].
macro_rules! say {
    ($($arg:tt)*) => { OUTPUT.line(&format!($($arg)*)) };
}

/// The CPU and how many of them: `/proc/cpuinfo`'s model name and numbers, where there is one.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
            .and_then(|l| l.split_once(':'))
            .map_or(String::from("?"), |(_, v)| v.trim().to_owned())
    };
    if info.is_empty() {
        format!("{cpus} CPUs")
    } else {
        format!(
            "{} (family {}, model {}), {cpus} CPUs",
            field("model name"),
            field("cpu family"),
            field("model")
        )
    }
}

/// Requests per subject per round, all threads together: a round of well under a millisecond,
/// shorter than a scheduler's time slice, so most rounds run without being preempted even on a
/// busy machine, and the median round is one that was not.
const OPS: u64 = 20_000;
/// Rounds; each subject's figure is its median round.
const ROUNDS: usize = 101;

/// One timed round: the wall time, and how much of it the threads ran side by side.
#[derive(Clone, Copy)]
struct Round {
    wall: Duration,
    /// The threads' own spans added up, over the wall time, minus one, over `threads - 1`:
    /// 1 when all threads ran for the whole round together, 0 when they took turns (or
    /// paused).
    overlap: f64,
}

/// Times `OPS` requests from `threads` threads to one limiter: from the first thread's start
/// to the last one's end, so a thread scheduled only after another finished cannot hide the
/// contention it would have met.
fn time_batch<L: Check>(limiter: &L, threads: usize) -> Round {
    let spans = spans(limiter, threads, OPS / threads as u64);
    let wall = first_start_to_last_end(&spans);
    let busy: f64 = spans.iter().map(|s| (s.1 - s.0).as_secs_f64()).sum();
    let overlap = if threads > 1 {
        // A gap where neither thread ran reads below 0: that is "took turns" too.
        ((busy / wall.as_secs_f64() - 1.0) / (threads - 1) as f64).clamp(0.0, 1.0)
    } else {
        0.0
    };
    Round { wall, overlap }
}

/// One subject, kept alive for the whole scenario; `batch` times one round of it.
struct Subject {
    name: &'static str,
    family: Family,
    batch: Box<dyn Fn() -> Round>,
    rounds: Vec<f64>,
    overlaps: Vec<f64>,
}

/// A scenario's subjects: collected first, then timed in interleaved rounds.
struct Scenario {
    threads: usize,
    expect_allowed: bool,
    subjects: Vec<Subject>,
}

impl Visit for Scenario {
    fn visit<L: Check + 'static>(&mut self, name: &'static str, family: Family, limiter: L) {
        assert_answers(name, &limiter, self.expect_allowed);
        let threads = self.threads;
        // The limiter moves into the closure: the timed loop inside is statically dispatched;
        // the boxed call is once per round.
        self.subjects.push(Subject {
            name,
            family,
            batch: Box::new(move || time_batch(&limiter, threads)),
            rounds: Vec::with_capacity(ROUNDS),
            overlaps: Vec::with_capacity(ROUNDS),
        });
    }
}

impl Scenario {
    /// Collects the subjects, times them in interleaved rounds, and drops them.
    fn run(threads: usize, expect_allowed: bool, subjects: impl FnOnce(&mut Scenario)) -> Results {
        let mut s = Scenario {
            threads,
            expect_allowed,
            subjects: Vec::new(),
        };
        subjects(&mut s);
        let n = s.subjects.len();
        for round in 0..ROUNDS {
            for i in 0..n {
                let subject = &mut s.subjects[(round + i) % n];
                let r = (subject.batch)();
                subject.rounds.push(r.wall.as_nanos() as f64 / OPS as f64);
                subject.overlaps.push(r.overlap);
            }
        }
        let mut overlaps: Vec<f64> = s.subjects.iter().flat_map(|x| x.overlaps.clone()).collect();
        let overlap = median(&mut overlaps);
        let rows = s
            .subjects
            .into_iter()
            .map(|mut x| (x.name, x.family, median(&mut x.rounds)))
            .collect();
        Results { rows, overlap }
    }
}

/// A scenario's medians, ns per request, in the order the subjects came.
struct Results {
    rows: Vec<(&'static str, Family, f64)>,
    /// The median round's share of time the threads ran side by side (see [`Round`]).
    overlap: f64,
}

impl Results {
    fn ns(&self, name: &str) -> Option<f64> {
        self.rows.iter().find(|r| r.0 == name).map(|r| r.2)
    }

    fn print(&self, title: &str, governor: &str) {
        let gov = self.ns(governor);
        say!("\n{title}");
        say!(
            "  {:<26} {:>8} {:>8} {:>11} {:>11}",
            "limiter",
            "ns/req",
            "Mreq/s",
            "× its twin",
            "× governor"
        );
        for &(name, family, x) in &self.rows {
            let twin = match family {
                Family::Ours => self.ns(&format!("Mutex{name}")),
                _ => None,
            };
            let vs_gov = match family {
                Family::Twin => None,
                _ => gov,
            };
            let ratio =
                |other: Option<f64>| other.map_or(String::new(), |o| format!("{:.2}×", o / x));
            say!(
                "  {name:<26} {x:>8.1} {:>8.1} {:>11} {:>11}",
                1e3 / x,
                ratio(twin),
                ratio(vs_gov)
            );
        }
    }
}

/// The median of `rounds` (sorted in place).
fn median(rounds: &mut [f64]) -> f64 {
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

/// A closure as a subject: the floor's operations, timed like the limiters.
struct Op<F>(F);

impl<F: Fn() -> bool + Sync> Check for Op<F> {
    #[inline]
    fn check(&self) -> bool {
        (self.0)()
    }
}

/// Hands `s` the floor's operation `op` as a subject named `name`, on its own handle to the
/// floor's clocks.
fn floor_op(
    s: &mut Scenario,
    floor: &Arc<Floor>,
    name: &'static str,
    op: impl Fn(&Floor) -> bool + Sync + 'static,
) {
    let f = Arc::clone(floor);
    s.visit(name, Family::Peer, Op(move || op(&f)));
}

/// One line of the summary: how tollgate's `ours` compares with `theirs` in `s`.
fn verdict(what: &str, s: &Results, ours: &str, theirs: &str) {
    if let (Some(a), Some(b)) = (s.ns(ours), s.ns(theirs)) {
        let r = b / a;
        let word = if r >= 1.0 { "faster" } else { "slower" };
        let by = if r >= 1.0 { r } else { 1.0 / r };
        say!("  {what:<58} {a:>6.1} vs {b:>6.1} ns: {r:.2}× ({by:.2}× {word})");
    }
}

fn main() {
    let started = Instant::now();
    // First: governor's upkeep clock insists on starting quanta's upkeep thread itself.
    let clocks = CoarseClocks::start();
    say!(
        "tollgate and the limiters you might use instead, in one process: ns per request, \
         median of {ROUNDS} interleaved rounds of {OPS} requests each. \"× governor\" is \
         governor's time over the row's (above 1: faster than governor). Wall times on a \
         shared machine move between runs; the ratios within one run are the comparison."
    );
    say!("Machine: {}.", machine());

    let allowed = Scenario::run(1, true, peers::allowed);
    allowed.print(
        "One thread, every request allowed (precise clock)",
        "governor",
    );
    let denied = Scenario::run(1, false, peers::denied);
    denied.print(
        "One thread, every request denied (precise clock)",
        "governor",
    );
    let coarse = Scenario::run(1, true, |s| peers::coarse_vs_precise(s, &clocks));
    coarse.print(
        "Precise vs coarse clock (one thread, allowed)",
        "governor/precise",
    );
    let two = Scenario::run(2, true, peers::allowed);
    two.print(
        "Two threads on one shared limiter, every request allowed",
        "governor",
    );
    say!(
        "  (the two threads ran side by side for {:.0}% of the median round; the rest of the \
         time the machine ran one of them, or something else)",
        100.0 * two.overlap
    );

    // The floor, in interleaved rounds too: each clock read alone, and with one uncontended
    // compare-exchange after it (what every lock-free admission on that clock pays at least).
    let floor = Arc::new(Floor::new(clocks.tollgate.clone()));
    let reads = Scenario::run(1, true, |s| {
        floor_op(s, &floor, "quanta raw", |f| black_box(f.quanta_raw()) != 0);
        floor_op(s, &floor, "MonotonicClock", |f| {
            black_box(f.monotonic()) != 0
        });
        floor_op(s, &floor, "MonotonicClock+CAS", |f| f.monotonic_cas());
        floor_op(s, &floor, "CoarseClock", |f| black_box(f.coarse()) != 0);
        floor_op(s, &floor, "CoarseClock+CAS", |f| f.coarse_cas());
    });
    say!("\nWhat reading a clock costs (one thread, median ns per read)");
    let raw = reads.ns("quanta raw").unwrap_or(f64::NAN);
    for (name, what) in [
        ("quanta raw", "the TSC itself (quanta raw)"),
        ("MonotonicClock", "MonotonicClock"),
        ("MonotonicClock+CAS", "MonotonicClock + one CAS"),
        ("CoarseClock", "CoarseClock"),
        ("CoarseClock+CAS", "CoarseClock + one CAS"),
    ] {
        say!("  {what:<30} {:>6.1}", reads.ns(name).unwrap_or(f64::NAN));
    }

    say!("\nIn short (TokenBucket, tollgate's GCRA bucket, against governor's GCRA):");
    verdict(
        "precise clock, allowed",
        &allowed,
        "TokenBucket",
        "governor",
    );
    verdict("precise clock, denied", &denied, "TokenBucket", "governor");
    verdict(
        "coarse clock, allowed (vs QuantaUpkeepClock)",
        &coarse,
        "TokenBucket/coarse",
        "governor/coarse",
    );
    verdict("two threads, one limiter", &two, "TokenBucket", "governor");
    verdict(
        "two threads, one limiter, vs its mutex twin",
        &two,
        "TokenBucket",
        "MutexTokenBucket",
    );
    if let Some(tb) = allowed.ns("TokenBucket") {
        say!(
            "  a precise-clock TokenBucket request is {tb:.1} ns, of which reading the TSC \
             alone is {raw:.1} ns"
        );
    }
    say!(
        "\nThe sliding window (held to the limit in every window) against its mutex twin and \
         the fixed window (ratios: the other's time over the sliding window's):"
    );
    for (what, s) in [
        ("one thread, allowed", &allowed),
        ("one thread, denied", &denied),
        ("two threads, one limiter", &two),
    ] {
        verdict(
            &format!("{what}, vs MutexSlidingWindow"),
            s,
            "SlidingWindow",
            "MutexSlidingWindow",
        );
        verdict(
            &format!("{what}, vs FixedWindow"),
            s,
            "SlidingWindow",
            "FixedWindow",
        );
    }
    verdict(
        "one thread, allowed, coarse clock, vs MutexSlidingWindow",
        &coarse,
        "SlidingWindow/coarse",
        "MutexSlidingWindow/coarse",
    );
    verdict(
        "one thread, allowed, coarse clock, vs FixedWindow",
        &coarse,
        "SlidingWindow/coarse",
        "FixedWindow/coarse",
    );
    say!("(whole run: {:.1} s)", started.elapsed().as_secs_f64());

    if std::env::args().any(|a| a == "--write-readme") {
        let command = "cargo run --release --example compare -- --write-readme";
        let output = OUTPUT.text();
        // This crate's folder is benches/: the README is the workspace root's, one up.
        for (path, section) in [
            (
                concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"),
                readme_table(&allowed, &denied, &reads),
            ),
            (
                concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"),
                format!("```text\n{output}```\n"),
            ),
        ] {
            match tollgate_test_support::marked::replace(path, "compare", command, &section) {
                Ok(()) => println!("wrote {path}"),
                Err(e) => {
                    eprintln!("could not write {path}: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}

/// The README's table: each limiter's time, allowed and denied, against its twin and governor,
/// and the clock-read floor under the bucket.
fn readme_table(allowed: &Results, denied: &Results, reads: &Results) -> String {
    let ratio = |s: &Results, other: &str, name: &str| match (s.ns(other), s.ns(name)) {
        (Some(o), Some(x)) => format!("{:.2}×", o / x),
        _ => String::new(),
    };
    let ns = |s: &Results, name: &str| s.ns(name).map_or(String::new(), |x| format!("{x:.1}"));
    let mut out = String::from(
        "| limiter | allowed ns | × twin | × governor | denied ns | × twin | × governor |\n\
         |---------|-----------:|-------:|-----------:|----------:|-------:|-----------:|\n",
    );
    for name in ["TokenBucket", "FixedWindow", "SlidingWindow", "SlidingLog"] {
        let twin = format!("Mutex{name}");
        out += &format!(
            "| {name} | {} | {} | {} | {} | {} | {} |\n",
            ns(allowed, name),
            ratio(allowed, &twin, name),
            ratio(allowed, "governor", name),
            ns(denied, name),
            ratio(denied, &twin, name),
            ratio(denied, "governor", name),
        );
    }
    out += &format!(
        "| governor 0.10 | {} | | 1.00× | {} | | 1.00× |\n",
        ns(allowed, "governor"),
        ns(denied, "governor"),
    );
    if let (Some(tb), Some(raw), Some(floor)) = (
        allowed.ns("TokenBucket"),
        reads.ns("quanta raw"),
        reads.ns("MonotonicClock+CAS"),
    ) {
        out += &format!(
            "\nReading the TSC alone costs {raw:.1} ns of TokenBucket's {tb:.1} in that run, and \
             one uncontended compare-exchange after our clock's read brings the floor to \
             {floor:.1} ns: the bucket takes {:.2}× its floor.\n",
            tb / floor
        );
    }
    out
}
