//! The mutex twins: each algorithm again, written independently with plain fields behind a
//! [`std::sync::Mutex`].
//!
//! They answer exactly as the lock-free limiters do (the same [`Decision`](crate::Decision)
//! for the same calls at the same times), by separate code: u128 arithmetic instead of packed
//! words, deques instead of rings, a forward search instead of a closed form. That makes them
//! the reference for differential tests and fuzzing, and the baseline for benchmarks: what a
//! straightforward, correct, locked implementation costs.
//!
//! ```
//! use tollgate::baseline::MutexTokenBucket;
//! use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
//!
//! let quota = Quota::per_second(3)?;
//! let (clock_a, clock_b) = (ManualClock::new(), ManualClock::new());
//! let lock_free = TokenBucket::with_clock(quota, clock_a);
//! let twin = MutexTokenBucket::with_clock(quota, clock_b);
//! for _ in 0..5 {
//!     assert_eq!(lock_free.try_acquire(), twin.try_acquire());
//! }
//! # Ok::<(), tollgate::QuotaError>(())
//! ```

mod fixed_window;
mod sliding_log;
mod sliding_window;
mod token_bucket;

pub use fixed_window::MutexFixedWindow;
pub use sliding_log::MutexSlidingLog;
pub use sliding_window::MutexSlidingWindow;
pub use token_bucket::MutexTokenBucket;

use crate::sync::{Mutex, MutexGuard};
use std::sync::PoisonError;

/// Locks, ignoring poison: the twins' state is valid after any panic (none can happen inside).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Time as the limiters see it: nanoseconds, standing still past the horizon.
fn clamp(now_ns: u64) -> u64 {
    now_ns.min(crate::quota::HORIZON)
}
