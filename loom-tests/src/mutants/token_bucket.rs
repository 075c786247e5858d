//! The token bucket with its compare-exchange loop replaced by load, decide, plain store: two
//! racing admissions both decide on the same `tat` and both pass, one on a token already taken.

use tollgate::__loom::token_bucket::{admit, decide, Gcra};
use tollgate::__loom::{Algo, AtomicU64, GcraParams, Ordering};
use tollgate::Decision;

/// PLANTED: the loop of `update` with a plain store where its compare-exchange belongs, so an
/// admission overwrites whatever was admitted since its load.
fn load_then_store<T>(
    word: &AtomicU64,
    load: Ordering,
    store: Ordering,
    _failure: Ordering,
    mut propose: impl FnMut(u64) -> (T, Option<u64>),
) -> (T, u64) {
    // The real bucket's ordering: the ordering is not what is broken here.
    let current = word.load(load);
    let (outcome, write) = propose(current);
    if let Some(new) = write {
        // As above.
        word.store(new, store);
    }
    (outcome, current)
}

/// The token bucket, committing by load and store.
#[derive(Debug)]
pub struct LoadStore;

impl Algo for LoadStore {
    same_as!(Gcra);

    fn acquire(tat: &AtomicU64, p: &GcraParams, now_ns: u64, n: u64) -> Decision {
        // The `tat` the decision is made on: the one a denial read, or the one an admission's
        // compare-exchange replaced. Relaxed load and CAS: the CAS orders admissions on this
        // one word, and nothing else is published (see the module's orderings).
        let ((), decided_on) = load_then_store(
            // PLANTED: a store, not a compare-exchange
            tat,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |tat| {
                let write = admit(p, tat, now_ns, n);
                debug_assert_eq!(write, decide(p, tat, now_ns, n).1);
                ((), write)
            },
        );
        decide(p, decided_on, now_ns, n).0
    }
}
