//! The fixed window with a new window committed by a plain store: its reset and its first
//! count overwrite whatever a racing admission counted in that window since the load, so the
//! window admits more than its limit (the bug of a counter reset by a separate store).

use tollgate::__loom::fixed_window::{decide, Fixed};
use tollgate::__loom::{update, Algo, AtomicU64, Ordering, Step, WindowParams};
use tollgate::Decision;

/// PLANTED: decides as the real window, but a request that opens a new window writes it with
/// a plain store and reports no write to the compare-exchange loop.
fn store_new_window(word: &AtomicU64, p: &WindowParams, current: u64, now_ns: u64, n: u64) -> Step {
    let (decision, write) = decide(p, current, now_ns, n);
    match write {
        Some(new) if new >> p.count_bits != current >> p.count_bits => {
            // Relaxed, as the real window: the plain store is what is broken.
            word.store(new, Ordering::Relaxed);
            (decision, None)
        }
        _ => (decision, write),
    }
}

mutant! {
    /// The fixed window, opening windows by a plain store.
    StoreNewWindow
}

impl Algo for StoreNewWindow {
    same_as!(Fixed);

    fn acquire(word: &AtomicU64, p: &WindowParams, now_ns: u64, n: u64) -> Decision {
        // Relaxed load and CAS: one word, publishing nothing else, its admissions totally
        // ordered by its modification order (see the module's orderings).
        let (decision, _) = update(
            word,
            Ordering::Relaxed,
            Ordering::Relaxed,
            Ordering::Relaxed,
            |current| store_new_window(word, p, current, now_ns, n), // PLANTED
        );
        decision
    }
}
