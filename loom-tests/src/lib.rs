//! Helpers for tollgate's loom models. Everything here exists only under `--cfg loom`:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test --release -p loom-tests
//! ```
#![cfg(loom)]

/// Runs `f` under loom with a preemption bound of 3, or `LOOM_MAX_PREEMPTIONS` if set:
/// 2–3 threads of 2 operations explore in seconds at bound 3; unbounded they do not finish.
pub fn model<F>(f: F)
where
    F: Fn() + Sync + Send + 'static,
{
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}
