//! Prints what a fuzz input decodes to, and the reference model's answer to each request:
//! `cargo run --manifest-path fuzz/Cargo.toml --example show -- <target> <file>`.

use std::time::Duration;

use tollgate_fuzz::model::{
    FixedWindowModel, SlidingLogModel, SlidingWindowModel, TokenBucketModel,
};
use tollgate_fuzz::{decode, Op, Outcome};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, target, file] = &args[..] else {
        panic!("usage: show <target> <input file>");
    };
    let data = std::fs::read(file).expect("readable input");
    let Some((spec, ops)) = decode(&data) else {
        println!("too short to decode");
        return;
    };
    println!("{spec:?}");
    let Some(quota) = spec.build() else {
        println!(
            "quota refused: {:?}",
            tollgate::Quota::try_new(spec.limit.get(), Duration::from_nanos(spec.period_ns.get()))
        );
        return;
    };
    println!("{quota:?}, slots {}", spec.slots());
    let mut model: Box<dyn FnMut(u64, u64) -> Outcome> = match target.as_str() {
        "token_bucket" => {
            let mut m = TokenBucketModel::new(&quota);
            Box::new(move |t, n| m.acquire(t, n))
        }
        "fixed_window" => {
            let mut m = FixedWindowModel::new(&quota);
            Box::new(move |t, n| m.acquire(t, n))
        }
        "sliding_window" => {
            let mut m = SlidingWindowModel::new(&quota, spec.slots());
            Box::new(move |t, n| m.acquire(t, n))
        }
        "sliding_log" => {
            let mut m = SlidingLogModel::new(&quota);
            Box::new(move |t, n| m.acquire(t, n))
        }
        _ => panic!("no model for {target}"),
    };
    let period_ns = u64::try_from(quota.period().as_nanos()).unwrap();
    let mut now = 0u64;
    let mut last: Option<(u64, u64, Outcome)> = None;
    for (step, op) in ops.iter().enumerate() {
        let (from, wait, n) = match *op {
            Op::Advance(s) => {
                now = now.saturating_add(s.nanos(period_ns));
                println!("{step}: advance to {now}");
                continue;
            }
            Op::StepBack(s) => {
                now = now.saturating_sub(s.nanos(period_ns));
                println!("{step}: step back to {now}");
                continue;
            }
            Op::Refund(c) => {
                // The replay here models requests only: a refund is printed, not applied.
                println!("{step}: refund {} at {now} (not applied here)", c.units());
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
                let o = model(now, others.units());
                println!("{step}: overtaken by {} at {now}: {o:?}", others.units());
                last = None;
                if refund {
                    println!(
                        "{step}: refund {} at {read} (not applied here)",
                        cost.units()
                    );
                } else {
                    let o = model(read, cost.units());
                    println!("{step}: {} at {read}, overtaken: {o:?}", cost.units());
                    last = Some((read, cost.units(), o));
                }
                continue;
            }
            Op::Acquire(c) => (now, 0, c.units()),
            Op::RetryAfter => match last {
                Some((
                    at,
                    n,
                    Outcome {
                        retry_after_ns: Some(r),
                        ..
                    },
                )) => (at, r, n),
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
                )) if r > 0 => (at, r - 1, n),
                _ => continue,
            },
        };
        now = from.saturating_add(wait);
        let o = model(now, n);
        println!("{step}: {op:?}: {n} at {now}: {o:?}");
        last = Some((now, n, o));
    }
}
