//! Planted mutants: each algorithm's commit code with one deliberate change, for the models to
//! catch.
//!
//! Every mutant is an [`Algo`] over the real algorithm's parameters and state, whose `acquire`
//! is a copy of the real one with the planted lines marked `// PLANTED`. The plain test
//! `tests/mutants_match.rs` reads both sources and fails if a copy differs from the real code
//! anywhere but in its planted lines, so a mutant cannot drift from the code it breaks.
//!
//! | mutant                                   | what is planted                                      |
//! |------------------------------------------|------------------------------------------------------|
//! | [`token_bucket::LoadStore`]              | the compare-exchange loop replaced by load, decide,  |
//! |                                          | plain store                                          |
//! | [`fixed_window::StoreNewWindow`]         | a new window (its reset and first count) committed by|
//! |                                          | a plain store, not the compare-exchange              |
//! | [`sliding_window::RelaxedHead`]          | the head loaded (and the CAS failing) `Relaxed`      |
//! | [`sliding_window::RingAfterCas`]         | the finished slot written to the ring after the CAS  |
//! | [`sliding_window::StaleRingStore`]       | the finished slot stored into the ring, not          |
//! |                                          | `fetch_max`ed (a late loser lowers it)               |
//! | [`sliding_log::UnvalidatedRead`]         | the optimistic denial returned without re-checking   |
//! |                                          | `seq`                                                |
//! | [`sliding_log::NoLock`]                  | the optimistic admission recorded without the lock   |
//! | [`refund::FixedLaterWindow`]             | a refund lowers a word in a later window than its    |
//! |                                          | reading                                              |
//! | [`refund::SlidingLaterSlot`]             | a refund lowers a head in a later slot than its      |
//! |                                          | reading                                              |
//! | [`refund::BucketBehindReading`]          | a refund moves back a `tat` written with a later     |
//! |                                          | reading (more than the capacity past its own)        |
//!
//! The mutants' `acquire` is the real one; a `refund` mutant's planted line calls a planted
//! copy of the real refund helper (`tollgate::__loom::planted`), compared with it the same way.

use tollgate::__loom::{self, Algo, RateLimiter};
use tollgate::Clock;

/// The parts of an [`Algo`] a mutant takes from the real algorithm `$real` unchanged: its
/// parameters, its state, how both are made and its `peek`; with `acquire`, its `acquire` too.
macro_rules! same_as {
    ($real:ty) => {
        type Params = <$real as tollgate::__loom::Algo>::Params;
        type State = <$real as tollgate::__loom::Algo>::State;

        fn params(quota: &tollgate::Quota) -> Result<Self::Params, tollgate::QuotaError> {
            <$real as tollgate::__loom::Algo>::params(quota)
        }

        fn state(params: &Self::Params) -> Result<Self::State, tollgate::QuotaError> {
            <$real as tollgate::__loom::Algo>::state(params)
        }

        same_as!($real: peek);
    };
    ($real:ty, acquire) => {
        same_as!($real);
        same_as!($real: acquire);
    };
    // One decision of `$real` (`acquire` or `peek`: the same signature).
    ($real:ty: $decide:ident) => {
        fn $decide(
            state: &Self::State,
            params: &Self::Params,
            now_ns: u64,
            n: u64,
        ) -> tollgate::Decision {
            <$real as tollgate::__loom::Algo>::$decide(state, params, now_ns, n)
        }
    };
}

/// A mutant's type: a unit struct, sealed as the real algorithms are; its `impl Algo` follows.
macro_rules! mutant {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name;

        impl tollgate::__loom::Sealed for $name {}
    };
}

pub mod fixed_window;
pub mod refund;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;

/// A limiter running the mutant `M` under `params` (the real algorithm's), reading `clock`.
pub fn mutant<M: Algo, C: Clock>(params: M::Params, clock: C) -> RateLimiter<M, C> {
    __loom::limiter(params, clock).expect("a model's small quota allocates")
}
