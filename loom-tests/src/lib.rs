//! Helpers for tollgate's loom models. Everything here exists only under `--cfg tollgate_loom`:
//!
//! ```text
//! CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tollgate_loom" cargo test --release -p loom-tests
//! ```
//!
//! - [`model`] explores every interleaving of a closure's loom threads up to a preemption
//!   bound (3, or `LOOM_MAX_PREEMPTIONS`) and prints one line: executions and time.
//! - [`expect_caught`] runs a model over a planted mutant and asserts that loom finds the bug.
//! - [`assert_serializable`] checks that what racing threads were answered is what some serial
//!   order of the same calls answers.
//! - [`real_and_twin!`] runs each model on a limiter and on its mutex twin.
#![cfg(tollgate_loom)]
#![forbid(unsafe_code)]

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use tollgate::{Decision, Limiter};

pub mod mutants;

/// The preemption bound when `LOOM_MAX_PREEMPTIONS` is not set. 2–3 threads of 1–2 operations
/// explore in well under a second each at bound 3; unbounded, 3 × 2 does not finish.
pub const DEFAULT_PREEMPTION_BOUND: usize = 3;

/// Branches one execution may take before loom gives up on it. The serial replays after the
/// threads join add branches without adding interleavings; loom's default (1,000) is too
/// tight for them.
const MAX_BRANCHES: usize = 20_000;

/// What one model run explored.
#[derive(Clone, Copy, Debug)]
pub struct Explored {
    /// Executions (interleavings) loom ran.
    pub executions: usize,
    /// Wall time of the whole exploration.
    pub elapsed: Duration,
    /// The preemption bound it ran under (`None`: unbounded).
    pub bound: Option<usize>,
}

fn builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    // `Builder::new` reads LOOM_MAX_PREEMPTIONS; only when it is unset do we bound it.
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(DEFAULT_PREEMPTION_BOUND);
    }
    if std::env::var_os("LOOM_MAX_BRANCHES").is_none() {
        builder.max_branches = MAX_BRANCHES;
    }
    builder
}

fn explore<F>(f: F) -> Explored
where
    F: Fn() + Sync + Send + 'static,
{
    let builder = builder();
    let executions = Arc::new(AtomicUsize::new(0));
    let counter = executions.clone();
    let start = Instant::now();
    builder.check(move || {
        // Relaxed: a tally read after loom returns, on the same OS thread; orders nothing.
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    Explored {
        // Relaxed: loom ran every execution on this thread; see the increment.
        executions: executions.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
        bound: builder.preemption_bound,
    }
}

fn bound_text(bound: Option<usize>) -> String {
    bound.map_or_else(|| "unbounded".to_string(), |b| b.to_string())
}

/// Runs `f` under loom with a preemption bound of 3 (or `LOOM_MAX_PREEMPTIONS`), and prints
/// `loom model <name>: ...` with the executions explored and the time taken. If an execution
/// fails, panics with the model's name and the failing interleaving's panic message, so that
/// a test running several models says which one failed.
pub fn model<F>(name: &str, f: F) -> Explored
where
    F: Fn() + Sync + Send + 'static,
{
    let explored = panic::catch_unwind(AssertUnwindSafe(|| explore(f)))
        .unwrap_or_else(|payload| panic!("loom model {name} failed: {}", panic_text(&*payload)));
    println!(
        "loom model {name}: bound {}, {} executions, {:.2} s",
        bound_text(explored.bound),
        explored.executions,
        explored.elapsed.as_secs_f64()
    );
    explored
}

thread_local! {
    /// Set while a model is expected to fail: its panics are the point, not news.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

fn install_quiet_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                default(info);
            }
        }));
    });
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<non-string panic>".to_string()
    }
}

/// Runs a model over a planted mutant and asserts that loom finds its bug: some execution
/// must panic with a message containing `expected` (the model's own assertion, so that a
/// failure for an unrelated reason, such as loom running out of branches, does not count).
/// Prints `loom mutant <name>: caught after N executions in T s` and returns the message.
pub fn expect_caught<F>(name: &str, expected: &str, f: F) -> String
where
    F: Fn() + Sync + Send + 'static,
{
    install_quiet_hook();
    let executions = Arc::new(AtomicUsize::new(0));
    let counter = executions.clone();
    let builder = builder();
    let start = Instant::now();
    QUIET.with(|q| q.set(true));
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        builder.check(move || {
            // Relaxed: a tally read after loom returns, on the same OS thread; orders nothing.
            counter.fetch_add(1, Ordering::Relaxed);
            f();
        })
    }));
    QUIET.with(|q| q.set(false));
    let elapsed = start.elapsed();
    // Relaxed: loom ran every execution on this thread; see the increment.
    let executions = executions.load(Ordering::Relaxed);
    let message = match outcome {
        Ok(()) => panic!(
            "loom did not catch the mutant {name}: {executions} executions at bound {} all passed",
            bound_text(builder.preemption_bound)
        ),
        Err(payload) => panic_text(&*payload),
    };
    assert!(
        message.contains(expected),
        "mutant {name} failed, but not on the model's check ({expected:?}): {message}"
    );
    println!(
        "loom mutant {name}: caught after {executions} executions in {:.2} s (bound {}): {}",
        elapsed.as_secs_f64(),
        bound_text(builder.preemption_bound),
        message.lines().next().unwrap_or("")
    );
    message
}

/// One thread's calls in program order: the cost it asked for and the decision it got.
pub type Calls = Vec<(u64, Decision)>;

/// The message [`assert_serializable`] panics with.
pub const NOT_SERIALIZABLE: &str = "no serial order explains";

/// Asserts that the decisions racing threads got are exactly those of some serial order of
/// the same calls (each thread's calls kept in program order). `replay` runs costs one after
/// another on a fresh limiter in the model's starting state and returns its decisions.
///
/// At a frozen instant this is the whole contract: admissions are exactly what was left,
/// and every `remaining`, `retry_after` and `reset_after` is what that order would say.
pub fn assert_serializable(threads: &[Calls], replay: impl Fn(&[u64]) -> Vec<Decision>) {
    let total: usize = threads.iter().map(Vec::len).sum();
    let mut next = vec![0usize; threads.len()];
    let mut order = Vec::with_capacity(total);
    if !search(threads, &mut next, &mut order, total, &replay) {
        panic!("{NOT_SERIALIZABLE} the racing calls {threads:?}");
    }
}

fn search(
    threads: &[Calls],
    next: &mut [usize],
    order: &mut Vec<(u64, Decision)>,
    total: usize,
    replay: &impl Fn(&[u64]) -> Vec<Decision>,
) -> bool {
    if order.len() == total {
        let costs: Vec<u64> = order.iter().map(|&(n, _)| n).collect();
        let got: Vec<Decision> = order.iter().map(|&(_, d)| d).collect();
        return replay(&costs) == got;
    }
    for t in 0..threads.len() {
        if next[t] < threads[t].len() {
            order.push(threads[t][next[t]]);
            next[t] += 1;
            let found = search(threads, next, order, total, replay);
            next[t] -= 1;
            order.pop();
            if found {
                return true;
            }
        }
    }
    false
}

/// Runs `n`-unit requests until one is denied (at most `max`), returning the units admitted:
/// after a race, how much the limiter still had.
pub fn drain(limiter: &dyn Limiter, max: u64) -> u64 {
    let mut taken = 0;
    for _ in 0..max {
        if !limiter.try_acquire().is_allowed() {
            break;
        }
        taken += 1;
    }
    taken
}

/// A model body over [`scenario`] whose check is: the racers plus a drain at `settle` admit
/// exactly `expected` units, so nothing passed over the limit and no admission was lost.
pub fn exactly_admitted<L: Limiter + 'static>(
    make: fn(tollgate::ManualClock) -> L,
    start: Duration,
    before: &'static [Step],
    threads: &'static [&'static [Step]],
    settle: Duration,
    expected: u64,
) -> impl Fn() + Send + Sync + 'static {
    scenario(
        make,
        start,
        before,
        threads,
        move |clock, limiter, calls| {
            let raced = admitted_units(calls);
            clock.set(settle);
            let after = drain(limiter, expected + 2);
            assert_eq!(raced + after, expected, "over the limit or lost: {calls:?}");
        },
    )
}

/// One step of a racing thread.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// `try_acquire_n(n)`, recorded with its decision.
    Acquire(u64),
    /// Sets the shared manual clock (forwards or backwards).
    SetClock(Duration),
}

/// A model body: a limiter from `make` on a fresh [`ManualClock`](tollgate::ManualClock) at
/// zero; the `before` steps run alone (each acquire must pass), then the clock is set to
/// `start`; then one thread per entry of
/// `threads` runs its steps (the first on the model's main thread, the others spawned), and
/// `check` sees the clock, the limiter and every thread's calls after all joined.
pub fn scenario<L, M, K>(
    make: M,
    start: Duration,
    before: &'static [Step],
    threads: &'static [&'static [Step]],
    check: K,
) -> impl Fn() + Send + Sync + 'static
where
    L: Limiter + 'static,
    M: Fn(tollgate::ManualClock) -> L + Send + Sync + 'static,
    K: Fn(&tollgate::ManualClock, &L, &[Calls]) + Send + Sync + 'static,
{
    move || {
        let clock = tollgate::ManualClock::new();
        let limiter = loom::sync::Arc::new(make(clock.clone()));
        setup(&*limiter, &clock, before);
        clock.set(start);
        let run = |limiter: &L, clock: &tollgate::ManualClock, steps: &[Step]| -> Calls {
            let mut calls = Calls::new();
            for step in steps {
                match *step {
                    Step::Acquire(n) => calls.push((n, limiter.try_acquire_n(n))),
                    Step::SetClock(t) => clock.set(t),
                }
            }
            calls
        };
        let spawned: Vec<_> = threads[1..]
            .iter()
            .map(|&steps| {
                let (limiter, clock) = (limiter.clone(), clock.clone());
                loom::thread::spawn(move || run(&limiter, &clock, steps))
            })
            .collect();
        let mut calls = vec![run(&limiter, &clock, threads[0])];
        calls.extend(spawned.into_iter().map(|h| h.join().expect("racer")));
        check(&clock, &limiter, &calls);
    }
}

/// The model at a frozen instant: every thread only acquires, and the decisions must be those
/// of some serial order ([`assert_serializable`]), replayed on a fresh limiter from `make`.
pub fn frozen<L, M>(
    make: M,
    at: Duration,
    before: &'static [Step],
    threads: &'static [&'static [Step]],
) -> impl Fn() + Send + Sync + 'static
where
    L: Limiter + 'static,
    M: Fn(tollgate::ManualClock) -> L + Send + Sync + Copy + 'static,
{
    scenario(make, at, before, threads, move |_, _, calls| {
        assert_serializable(calls, |costs| {
            let clock = tollgate::ManualClock::new();
            let fresh = make(clock.clone());
            setup(&fresh, &clock, before);
            clock.set(at);
            costs.iter().map(|&n| fresh.try_acquire_n(n)).collect()
        });
    })
}

/// Functions of a limiter's `make` that return an [`exactly_admitted`] model: each is named,
/// documented and given the model's start, setup steps, threads, settle instant and expected
/// admissions.
#[macro_export]
macro_rules! exactly_admitted_models {
    ($($(#[$doc:meta])* $name:ident: $start:expr, $before:expr, $threads:expr, $settle:expr, $expected:expr;)*) => {$(
        $(#[$doc])*
        fn $name<L: ::tollgate::Limiter + 'static>(
            make: fn(::tollgate::ManualClock) -> L,
        ) -> impl Fn() + Send + Sync + 'static {
            $crate::exactly_admitted(make, $start, $before, $threads, $settle, $expected)
        }
    )*};
}

/// Runs models on a limiter and on its mutex twin: in
/// `real_and_twin! { "algo/", real, twin; "name": body(LIMIT); ... }`, where `real` and `twin`
/// make a limiter of the const generic limit they are given, each `"name": body(LIMIT);` runs
/// `body(real::<LIMIT>)` as the model `algo/name` and `body(twin::<LIMIT>)` as
/// `algo/twin name`.
#[macro_export]
macro_rules! real_and_twin {
    ($prefix:literal, $real:ident, $twin:ident; $($name:literal: $body:ident($limit:expr);)*) => {$(
        $crate::model(concat!($prefix, $name), $body($real::<{ $limit }>));
        $crate::model(concat!($prefix, "twin ", $name), $body($twin::<{ $limit }>));
    )*};
}

/// Models of threads racing on a fresh limiter frozen at `at`, no setup: each named function
/// runs `frozen` with its threads' steps.
macro_rules! frozen_models {
    ($($(#[$doc:meta])* $name:ident: $threads:expr;)*) => {$(
        $(#[$doc])*
        pub fn $name<L, M>(make: M, at: Duration) -> impl Fn() + Send + Sync + 'static
        where
            L: Limiter + 'static,
            M: Fn(tollgate::ManualClock) -> L + Send + Sync + Copy + 'static,
        {
            frozen(make, at, &[], $threads)
        }
    )*};
}

frozen_models! {
    /// Three threads, one unit each, at the frozen instant `at` on a fresh limiter: with a
    /// limit of 2, exactly 2 pass, and every decision is what some serial order says.
    frozen_three_units: &[
        &[Step::Acquire(1)],
        &[Step::Acquire(1)],
        &[Step::Acquire(1)],
    ];
    /// Costs 2, 2 and 1 racing at `at`: with a limit of 3, whichever 2 wins, the other 2 is
    /// denied and the 1 passes (or the 1 and one 2 pass): all or nothing, as some serial order.
    frozen_mixed_costs: &[
        &[Step::Acquire(2)],
        &[Step::Acquire(2)],
        &[Step::Acquire(1)],
    ];
    /// Two threads, two unit calls each, at `at`: with a limit of 3, 3 of the 4 pass, serially
    /// explained.
    frozen_two_calls_each: &[
        &[Step::Acquire(1), Step::Acquire(1)],
        &[Step::Acquire(1), Step::Acquire(1)],
    ];
}

/// The three frozen-instant models on limiters of limit 2 (`two`) and 3 (`three`) frozen at
/// `at`, in this order: `{prefix}frozen 3x1`, `{prefix}frozen mixed costs 3x1`,
/// `{prefix}frozen 2x2`.
pub fn frozen_models<L2, M2, L3, M3>(prefix: &str, two: M2, three: M3, at: Duration)
where
    L2: Limiter + 'static,
    M2: Fn(tollgate::ManualClock) -> L2 + Send + Sync + Copy + 'static,
    L3: Limiter + 'static,
    M3: Fn(tollgate::ManualClock) -> L3 + Send + Sync + Copy + 'static,
{
    model(&format!("{prefix}frozen 3x1"), frozen_three_units(two, at));
    model(
        &format!("{prefix}frozen mixed costs 3x1"),
        frozen_mixed_costs(three, at),
    );
    model(
        &format!("{prefix}frozen 2x2"),
        frozen_two_calls_each(three, at),
    );
}

/// Runs setup steps alone; every acquire must pass.
fn setup(limiter: &dyn Limiter, clock: &tollgate::ManualClock, steps: &[Step]) {
    for step in steps {
        match *step {
            Step::Acquire(n) => assert!(limiter.try_acquire_n(n).is_allowed(), "setup"),
            Step::SetClock(t) => clock.set(t),
        }
    }
}

/// Units admitted across all threads' calls.
pub fn admitted_units(calls: &[Calls]) -> u64 {
    calls
        .iter()
        .flatten()
        .filter(|(_, d)| d.is_allowed())
        .map(|&(n, _)| n)
        .sum()
}
