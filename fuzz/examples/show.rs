//! Prints what a fuzz input decodes to, and the reference model's answer to each request:
//! `cargo run --manifest-path fuzz/Cargo.toml --example show -- <target> <file>`.

use std::time::Duration;

use tollgate_fuzz::model::{
    FixedWindowModel, SlidingLogModel, SlidingWindowModel, TokenBucketModel,
};
use tollgate_fuzz::stream::{self, Ask, Steps};
use tollgate_fuzz::{decode, Outcome};

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
    let model: Box<dyn FnMut(u64, u64) -> Outcome> = match target.as_str() {
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
    stream::run(&ops, period_ns, &mut Show(model));
}

/// Prints each step of the stream and the model's answer to each request.
struct Show(Box<dyn FnMut(u64, u64) -> Outcome>);

impl Steps for Show {
    fn advanced(&mut self, step: usize, now: u64) {
        println!("{step}: advance to {now}");
    }
    fn stepped_back(&mut self, step: usize, from: u64, back: u64) {
        println!("{step}: step back to {}", from.saturating_sub(back));
    }
    fn acquire(&mut self, step: usize, now: u64, n: u64, ask: Ask) -> Outcome {
        let o = (self.0)(now, n);
        match ask {
            Ask::Request => println!("{step}: acquire {n} at {now}: {o:?}"),
            Ask::Overtaking => println!("{step}: overtaken by {n} at {now}: {o:?}"),
            Ask::Overtaken => println!("{step}: {n} at {now}, overtaken: {o:?}"),
            Ask::Retry { waited, must_pass } => {
                let probe = if must_pass {
                    "retry after"
                } else {
                    "retry just before"
                };
                println!("{step}: {probe} {waited} ns: {n} at {now}: {o:?}");
            }
        }
        o
    }
    fn refund(&mut self, step: usize, now: u64, n: u64) {
        // The replay here models requests only: a refund is printed, not applied.
        println!("{step}: refund {n} at {now} (not applied here)");
    }
}
