//! What the `leased` fuzz target and `tests/leased.rs` share (the tests include this file by
//! path): virtual threads driven one request at a time, and the envelope check.
//!
//! A virtual thread is an OS thread that acts only when handed a command and waits for the
//! answer, so a run is one deterministic sequence while every thread keeps its own
//! thread-local lease, exactly as in production; ending one ends the OS thread and gives its
//! lease back before [`Worker::exit`] returns.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

use tollgate::{Decision, Leased, Limiter, ManualClock, Quota};

/// The limiters' time horizon (2^58 ns): past it, time stands still.
const HORIZON: u64 = 1 << 58;

/// What a virtual thread is asked to do.
pub enum Cmd {
    /// `try_acquire_n(n)`; answers the decision and 0.
    Acquire(u64),
    /// Answers the bucket's own level (a cost of 0, decided by the bucket alone), then gives
    /// the lease back and answers what the bucket took back.
    GiveBack,
}

/// A virtual thread on one shared limiter.
pub struct Worker {
    to: Sender<Cmd>,
    from: Receiver<(Decision, u64)>,
    handle: JoinHandle<()>,
}

impl Worker {
    /// Starts the thread.
    pub fn spawn(limiter: Arc<Leased<ManualClock>>) -> Worker {
        let (to, commands) = channel::<Cmd>();
        let (answers, from) = channel();
        let handle = thread::spawn(move || {
            for cmd in commands {
                let answer = match cmd {
                    Cmd::Acquire(n) => (limiter.try_acquire_n(n), 0),
                    Cmd::GiveBack => (limiter.try_acquire_n(0), limiter.give_back()),
                };
                if answers.send(answer).is_err() {
                    break;
                }
            }
        });
        Worker { to, from, handle }
    }

    /// Runs one command and waits for its answer.
    pub fn run(&self, cmd: Cmd) -> (Decision, u64) {
        self.to.send(cmd).expect("worker alive");
        self.from.recv().expect("worker answers")
    }

    /// Ends the thread; its lease is back in the bucket when this returns.
    pub fn exit(self) {
        drop(self.to);
        self.handle.join().expect("worker thread");
    }
}

/// `admitted[a, b] ≤ burst + rate·(b − a) + slack` for every `a ≤ b` in the current stretch of
/// non-decreasing clock readings, in O(1) per admission.
///
/// With `S_j` the units admitted up to and including admission `j` at reading `t_j`, and
/// `rate = L / P` (limit per period in ns), the window from admission `i` to `j` holds
/// `S_j − S_{i−1}`; the bound is `P·(S_j − S_{i−1}) − L·(t_j − t_i) ≤ (burst + slack)·P`.
/// Keeping `min_i (P·S_{i−1} − L·t_i)` makes every check one subtraction. A reading behind
/// the last one starts a new stretch: a bucket whose clock steps back is, by design, as it was
/// at that earlier instant, so windows across a step back are not comparable.
pub struct Envelope {
    limit: i128,
    period: i128,
    allowance: i128,
    admitted: i128,
    last: u64,
    min_start: Option<i128>,
}

impl Envelope {
    /// The envelope of `quota` with `slack` extra units.
    pub fn new(quota: &Quota, slack: u64) -> Self {
        let period = quota.period().as_nanos() as i128;
        Envelope {
            limit: i128::from(quota.limit()),
            period,
            allowance: (i128::from(quota.burst()) + i128::from(slack)) * period,
            admitted: 0,
            last: 0,
            min_start: None,
        }
    }

    /// Records an admission of `n` at reading `t`; `Err` says by how much the bound broke.
    pub fn admit(&mut self, t: u64, n: u64) -> Result<(), String> {
        let t = t.min(HORIZON);
        if t < self.last {
            self.min_start = None;
        }
        self.last = t;
        let t = i128::from(t);
        let start = self.period * self.admitted - self.limit * t;
        let min = self.min_start.map_or(start, |m| m.min(start));
        self.min_start = Some(min);
        self.admitted += i128::from(n);
        let end = self.period * self.admitted - self.limit * t;
        if end - min > self.allowance {
            return Err(format!(
                "{} units over burst + rate × time + slack at t = {t} ns",
                (end - min - self.allowance) as f64 / self.period as f64
            ));
        }
        Ok(())
    }
}
