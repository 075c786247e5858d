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
// exchanged together (cmpxchg16b on x86_64, casp or ldxp/stxp on aarch64).
#[cfg(all(not(tollgate_loom), feature = "std"))]
pub(crate) use portable_atomic::AtomicU128;
// Loom has no 128-bit atomic: under loom it is one loom `AtomicU64` holding both halves
// narrowed to 32 bits each (the models' values are small), so the model still sees every
// access to the word with its ordering.
#[cfg(all(tollgate_loom, feature = "std"))]
pub(crate) use loom_u128::AtomicU128;

#[cfg(all(tollgate_loom, feature = "std"))]
mod loom_u128 {
    use super::{AtomicU64, Ordering};

    /// A 128-bit word as a loom `AtomicU64`: each 64-bit half in 32 bits, `u64::MAX` kept.
    #[derive(Debug)]
    pub struct AtomicU128(AtomicU64);

    fn narrow(half: u64) -> u64 {
        if half == u64::MAX {
            return u64::from(u32::MAX);
        }
        assert!(
            half < u64::from(u32::MAX),
            "a loom model's word half is below 2^32 - 1"
        );
        half
    }

    fn widen(half: u64) -> u64 {
        if half == u64::from(u32::MAX) {
            u64::MAX
        } else {
            half
        }
    }

    fn pack(v: u128) -> u64 {
        narrow((v >> 64) as u64) << 32 | narrow(v as u64)
    }

    fn unpack(v: u64) -> u128 {
        u128::from(widen(v >> 32)) << 64 | u128::from(widen(v & u64::from(u32::MAX)))
    }

    impl AtomicU128 {
        pub(crate) fn new(v: u128) -> Self {
            AtomicU128(AtomicU64::new(pack(v)))
        }

        pub(crate) fn load(&self, order: Ordering) -> u128 {
            unpack(self.0.load(order))
        }

        pub(crate) fn compare_exchange(
            &self,
            current: u128,
            new: u128,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u128, u128> {
            self.0
                .compare_exchange(pack(current), pack(new), success, failure)
                .map(unpack)
                .map_err(unpack)
        }

        pub(crate) fn compare_exchange_weak(
            &self,
            current: u128,
            new: u128,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u128, u128> {
            self.0
                .compare_exchange_weak(pack(current), pack(new), success, failure)
                .map(unpack)
                .map_err(unpack)
        }
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
