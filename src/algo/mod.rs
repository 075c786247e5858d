//! The four algorithms, one file each. Every file opens with its state-word layout, its
//! invariant and its memory orderings, and keeps the pure decision (state, now, cost → new
//! state, decision) apart from the compare-exchange loop that commits it.

pub(crate) mod fixed_window;
pub(crate) mod sliding_log;
pub(crate) mod sliding_window;
pub(crate) mod token_bucket;
