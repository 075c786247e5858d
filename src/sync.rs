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
