//! One interpreter of a decoded stream of [`Op`]s: the clock it implies and the requests,
//! refunds and retry probes it makes, handed to whatever runs them (the differential
//! targets, and `examples/show.rs`, which prints them).

use crate::{Op, Outcome};

/// Why a request is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// An `Acquire` op.
    Request,
    /// The later request of an `Overtaken` op, at the clock's later reading.
    Overtaking,
    /// The overtaken request, on the older reading.
    Overtaken,
    /// A retry probe of the last request, `waited` ns after it; `must_pass` for
    /// `RetryAfter`, not for `RetryJustBefore`.
    Retry { waited: u64, must_pass: bool },
}

/// What runs a stream: each method is one thing the stream does, in order.
pub trait Steps {
    /// An advance left the clock at `now`.
    fn advanced(&mut self, _step: usize, _now: u64) {}
    /// A step back of `back` ns from `from` (the clock saturates at 0).
    fn stepped_back(&mut self, _step: usize, _from: u64, _back: u64) {}
    /// An `Overtaken` op read the clock at `read`, and it moved on to `now`.
    fn overtaking(&mut self, _step: usize, _read: u64, _now: u64) {}
    /// A request of `n` units at clock reading `now`: its answer.
    fn acquire(&mut self, step: usize, now: u64, n: u64, ask: Ask) -> Outcome;
    /// A refund of `n` units at clock reading `now`.
    fn refund(&mut self, step: usize, now: u64, n: u64);
}

/// Runs `ops` on `steps`, spans scaled to a period of `period_ns`, the clock from 0.
pub fn run(ops: &[Op], period_ns: u64, steps: &mut impl Steps) {
    let mut now: u64 = 0;
    // The last request: when, its cost and decision, for the retry probes.
    let mut last: Option<(u64, u64, Outcome)> = None;
    for (step, &op) in ops.iter().enumerate() {
        let (from, n, ask) = match op {
            Op::Advance(span) => {
                now = now.saturating_add(span.nanos(period_ns));
                steps.advanced(step, now);
                continue;
            }
            Op::StepBack(span) => {
                let back = span.nanos(period_ns);
                steps.stepped_back(step, now, back);
                now = now.saturating_sub(back);
                continue;
            }
            Op::Refund(cost) => {
                steps.refund(step, now, cost.units());
                // A probe assumes nothing changed the state since the denial it probes.
                last = None;
                continue;
            }
            Op::Overtaken {
                by,
                others,
                refund,
                cost,
            } => {
                let read = now;
                now = now.saturating_add(by.nanos(period_ns));
                steps.overtaking(step, read, now);
                steps.acquire(step, now, others.units(), Ask::Overtaking);
                last = None;
                if refund {
                    steps.refund(step, read, cost.units());
                } else {
                    let n = cost.units();
                    last = Some((read, n, steps.acquire(step, read, n, Ask::Overtaken)));
                }
                continue;
            }
            Op::Acquire(cost) => (now, cost.units(), Ask::Request),
            Op::RetryAfter => match last {
                Some((
                    at,
                    n,
                    Outcome {
                        retry_after_ns: Some(r),
                        ..
                    },
                )) => (
                    at,
                    n,
                    Ask::Retry {
                        waited: r,
                        must_pass: true,
                    },
                ),
                _ => continue,
            },
            Op::RetryJustBefore => match last {
                Some((
                    at,
                    n,
                    Outcome {
                        retry_after_ns: Some(r),
                        ..
                    },
                )) if r > 0 => (
                    at,
                    n,
                    Ask::Retry {
                        waited: r - 1,
                        must_pass: false,
                    },
                ),
                _ => continue,
            },
        };
        // A retry probe waits from the instant of the denial it probes, whatever the clock
        // did since (no request came in between: it is the last one).
        let wait = match ask {
            Ask::Retry { waited, .. } => waited,
            _ => 0,
        };
        now = from.saturating_add(wait);
        let got = steps.acquire(step, now, n, ask);
        last = Some((now, n, got));
    }
}
