//! The token bucket with its compare-exchange loop replaced by load, decide, plain store: two
//! racing admissions both decide on the same `tat` and both pass, one on a token already taken.

use tollgate::__loom::token_bucket::{admit_at, allowed, decide_at, refused, ticks, Gcra};
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

mutant! {
    /// The token bucket, committing by load and store.
    LoadStore
}

impl Algo for LoadStore {
    same_as!(Gcra);

    fn acquire(tat: &AtomicU64, p: &GcraParams, now_ns: u64, n: u64) -> Decision {
        acquire_at(tat, p, ticks(p, now_ns), n)
    }
}

/// The real bucket's compare-exchange loop at tick `now`, committing by load and store.
#[inline(always)]
fn acquire_at(tat: &AtomicU64, p: &GcraParams, now: u64, n: u64) -> Decision {
    // Relaxed load and CAS: the CAS orders admissions on this one word, and nothing else is
    // published (see the module's orderings). The loop runs `admit_at` alone (a closure this
    // small is always inlined); the decision is made once it is settled, on the `tat` the
    // compare-exchange replaced, or the one a denial read.
    // PLANTED: a store, not a compare-exchange
    let (admitted, decided_on) = load_then_store(
        tat,
        Ordering::Relaxed,
        Ordering::Relaxed,
        Ordering::Relaxed,
        |tat| {
            let write = admit_at(p, tat, now, n);
            (write, write)
        },
    );
    let d = match admitted {
        Some(new_tat) => allowed(p, now, new_tat),
        // A zero cost passes and takes nothing.
        None if n == 0 => decide_at(p, decided_on, now, 0).0,
        // A denial, or a cost above the burst: nothing was written. Never allowed on this
        // path, which lets a caller that asks only `is_allowed` skip all of it.
        None => refused(p, decided_on, now, n),
    };
    debug_assert_eq!((d, admitted), decide_at(p, decided_on, now, n));
    d
}
