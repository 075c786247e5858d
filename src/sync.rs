//! The only place tollgate takes its atomics from.
//!
//! Under `--cfg tollgate_loom` every type here is loom's, so the model checker sees every load, store and
//! compare-exchange the algorithms make, the manual clock's included. Otherwise `AtomicU64` comes
//! from `portable-atomic`, which is the native instruction wherever the target has one (x86_64,
//! aarch64) and a documented fallback where it does not (see the README's platform table).
//!
//! Nothing outside this module names `core::sync::atomic`, `portable_atomic` or `loom` directly.

#[cfg(tollgate_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(tollgate_loom)]
pub(crate) use loom::sync::Arc;
// The keyed limiter's per-slot state word (std only, like the keyed map).
#[cfg(all(tollgate_loom, feature = "std"))]
pub(crate) use loom::sync::atomic::AtomicU32;

#[cfg(all(not(tollgate_loom), feature = "std"))]
pub(crate) use portable_atomic::AtomicU32;

// A live keyed token bucket's word: `tat` beside the version it is counted in, compared and
// exchanged together (cmpxchg16b on x86_64, casp or ldxp/stxp on aarch64); a sliding window's
// wide head (no_std too: portable-atomic's fallback where the target has no such instruction).
#[cfg(not(tollgate_loom))]
pub(crate) use portable_atomic::AtomicU128;
// Loom has no 128-bit atomic: under loom it is one loom `AtomicU64` holding the number of its
// value in a table of every value seen (equal values, equal numbers), so the model sees every
// access to the word with its ordering, and a compare-exchange on numbers is one on values.
#[cfg(tollgate_loom)]
pub(crate) use loom_u128::AtomicU128;

#[cfg(tollgate_loom)]
mod loom_u128 {
    extern crate std;

    use super::{AtomicU64, Ordering};
    use std::sync::Mutex;
    use std::vec::Vec;

    /// Every value a model's 128-bit word has held, by number (first seen, first numbered).
    /// Outside the model: loom runs every thread of a model on one OS thread, and a value's
    /// number never changes, so the table is the same for every execution that sees it.
    static VALUES: Mutex<Vec<u128>> = Mutex::new(Vec::new());

    /// A 128-bit word as a loom `AtomicU64` holding its value's number.
    #[derive(Debug)]
    pub struct AtomicU128(AtomicU64);

    fn number(v: u128) -> u64 {
        let mut values = VALUES.lock().unwrap_or_else(|e| e.into_inner());
        let i = match values.iter().position(|&x| x == v) {
            Some(i) => i,
            None => {
                values.push(v);
                values.len() - 1
            }
        };
        i as u64
    }

    fn value(i: u64) -> u128 {
        VALUES.lock().unwrap_or_else(|e| e.into_inner())[i as usize]
    }

    /// A compare-exchange of the loom word's (`$name`, strong or weak) on the values' numbers.
    macro_rules! exchange {
        ($(#[$attr:meta])* $name:ident) => {
            $(#[$attr])*
            pub(crate) fn $name(
                &self,
                current: u128,
                new: u128,
                success: Ordering,
                failure: Ordering,
            ) -> Result<u128, u128> {
                // The caller's orderings, on the numbers.
                self.0
                    .$name(number(current), number(new), success, failure)
                    .map(value)
                    .map_err(value)
            }
        };
    }

    impl AtomicU128 {
        pub(crate) fn new(v: u128) -> Self {
            AtomicU128(AtomicU64::new(number(v)))
        }

        pub(crate) fn load(&self, order: Ordering) -> u128 {
            // The caller's ordering, on the number.
            value(self.0.load(order))
        }

        exchange!(
            #[cfg_attr(not(feature = "std"), allow(dead_code))]
            compare_exchange
        );

        /// `fetch_or` as a compare-exchange loop on the numbers: the successful exchange is
        /// the read-modify-write, with the caller's ordering.
        #[cfg_attr(not(feature = "std"), allow(dead_code))]
        pub(crate) fn fetch_or(&self, v: u128, order: Ordering) -> u128 {
            // Relaxed: the first guess only; the exchange below reads the word again.
            let mut current = self.0.load(Ordering::Relaxed);
            loop {
                let old = value(current);
                match self.0.compare_exchange_weak(
                    current,
                    number(old | v),
                    order,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return old,
                    Err(actual) => current = actual,
                }
            }
        }

        exchange!(compare_exchange_weak);
    }
}
#[cfg(not(tollgate_loom))]
pub(crate) use portable_atomic::{fence, AtomicU64, Ordering};
// Only the std clocks share state through an `Arc`; the no_std core never allocates one, so it
// also builds where `alloc::sync::Arc` does not exist (targets without atomic CAS).
#[cfg(all(not(tollgate_loom), feature = "std"))]
pub(crate) use std::sync::Arc;

// The coarse clock's published time lives in a `static`, so it needs a `const` constructor,
// which loom's atomics do not have: it is portable-atomic's under loom too. No model reads
// the coarse clock.
#[cfg(feature = "std")]
pub(crate) use portable_atomic::AtomicU64 as StaticAtomicU64;

/// A process-wide counter in a `static`, outside every lock-free protocol (the metrics pick a
/// counter stripe with it): always std's, since loom's atomics cannot live in a `static`.
#[cfg(feature = "std")]
pub(crate) use core::sync::atomic::AtomicUsize as StaticAtomicUsize;

// The mutex twins' lock. Under loom it is loom's, so a model also explores a thread being
// preempted between its clock read and taking the lock, as it can be with std's.
#[cfg(all(tollgate_loom, feature = "std"))]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(all(not(tollgate_loom), feature = "std"))]
pub(crate) use std::sync::{Mutex, MutexGuard};

/// Waits politely while another thread holds a short critical section.
///
/// Under loom a spin must yield to the scheduler, or the model never lets the holder finish.
pub(crate) struct Backoff {
    #[cfg(not(tollgate_loom))]
    inner: crossbeam_utils::Backoff,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff {
            #[cfg(not(tollgate_loom))]
            inner: crossbeam_utils::Backoff::new(),
        }
    }

    pub(crate) fn snooze(&self) {
        #[cfg(tollgate_loom)]
        loom::thread::yield_now();
        #[cfg(not(tollgate_loom))]
        self.inner.snooze();
    }
}
