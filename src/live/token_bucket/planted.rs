//! The live token bucket's planted defects, for the loom models (`loom-tests/tests/live.rs`);
//! built only for them (`cfg(tollgate_loom)`).
//!
//! Copies of the live bucket's protocol in `token_bucket.rs` (`carried`, `counted_in`,
//! `live_update`, `Retune::publish`, `Retune::acquire_live`) with a const parameter choosing
//! the defect and the planted lines marked `// PLANTED`; `loom-tests/tests/mutants_match.rs`
//! fails if a copy differs from the real code anywhere else (the const parameter aside). The
//! product's types know nothing of it.

use super::{admit_at, allowed, decide_at, join, refused, split, ticks};
use crate::decision::Decision;
use crate::live::ParamCell;
use crate::quota::GcraParams;
use crate::sync::{AtomicU128, Ordering};

/// A request's or a change's planted protocol.
pub(crate) type Plant = u8;
/// Planted defect: the token bucket judges a word under the parameters it read, whichever
/// parameters the word is counted in.
pub(crate) const READER_IGNORES_VERSION: Plant = 3;
/// Planted defect: the token bucket's word keeps one bit of its version (its parity), as it
/// once did: two changes while a request runs bring the word back to the value it loaded.
pub(crate) const ONE_BIT_VERSION: Plant = 4;
/// Planted defect: a change carries the word's debt from its own clock reading, however
/// stale, as it once did: a change that read the clock before a drain at a later instant
/// cuts the drain's debt to one burst past its reading, and the bucket is full again.
pub(crate) const CARRIED_FROM_READING: Plant = 5;

/// `carried` with `PLANT`.
fn carried<const PLANT: Plant>(
    old: &GcraParams,
    new: &GcraParams,
    tat: u64,
    now: u64,
) -> Option<u64> {
    let now = if PLANT == CARRIED_FROM_READING {
        now // PLANTED: the debt carried from the change's reading, however stale
    } else {
        now.max(tat.saturating_sub(old.capacity))
    };
    if tat <= now {
        return None;
    }
    let debt = (u128::from(tat - now) * u128::from(new.interval))
        .div_ceil(u128::from(old.interval))
        .min(u128::from(new.capacity));
    // debt ≤ capacity < 2^62 and now ≤ 2^63: no overflow.
    Some(now + debt as u64)
}

/// The epoch a word counted in parameter version `version` carries: the version itself, or
/// its parity for [`ONE_BIT_VERSION`].
#[inline]
fn epoch_of<const PLANT: Plant>(version: u64) -> u64 {
    if PLANT == ONE_BIT_VERSION {
        version & 1
    } else {
        version
    }
}

/// `counted_in` with `PLANT`.
#[inline]
fn counted_in<const PLANT: Plant>(cell: &ParamCell, epoch: u64) -> Option<(GcraParams, u64)> {
    let (version, words) = cell.read_versioned();
    let current = epoch_of::<PLANT>(version); // PLANTED: the epoch may be a parity
    if epoch == current || PLANT == READER_IGNORES_VERSION {
        // PLANTED: the word may be judged under whatever parameters were read
        return Some((GcraParams::from_words(words), current));
    }
    let previous = version.wrapping_sub(1);
    if epoch != epoch_of::<PLANT>(previous) {
        // PLANTED: the previous epoch may be a parity
        return None;
    }
    let words = cell.read_version(previous)?;
    Some((GcraParams::from_words(words), epoch))
}

/// `live_update` with `PLANT`.
#[inline]
fn live_update<T, const PLANT: Plant>(
    word: &AtomicU128,
    cell: &ParamCell,
    now_ns: u64,
    f: impl Fn(&GcraParams, u64, u64) -> (T, Option<u64>),
) -> T {
    // Acquire: a word a change carried to version v (or any later write, through the
    // release sequence) makes the parameters read after it version v or later.
    let mut current = word.load(Ordering::Acquire);
    loop {
        let (epoch, tat) = split(current);
        let Some((p, epoch)) = counted_in::<PLANT>(cell, epoch) else {
            // The word has been carried since it was loaded: load it again.
            crate::sync::Backoff::new().snooze();
            // Acquire: as the first load.
            current = word.load(Ordering::Acquire);
            continue;
        };
        let (outcome, write) = f(&p, tat, ticks(&p, now_ns));
        let Some(tat) = write else {
            return outcome;
        };
        // Relaxed success: an admission publishes nothing. Acquire failure: as the first
        // load. Weak: a spurious failure loops once more.
        match word.compare_exchange_weak(
            current,
            join(epoch, tat),
            Ordering::Relaxed,
            Ordering::Acquire,
        ) {
            Ok(_) => return outcome,
            Err(actual) => current = actual,
        }
    }
}

/// `Retune::publish` for the token bucket with `PLANT`.
pub(crate) fn publish<const PLANT: Plant>(
    word: &AtomicU128,
    cell: &ParamCell,
    old: &GcraParams,
    new: &GcraParams,
    now_ns: u64,
) {
    let version = epoch_of::<PLANT>(cell.write(new.to_words())); // PLANTED: maybe a parity
    let now = ticks(new, now_ns);
    // Relaxed: the changer wrote the parameters itself; the word is only compared.
    let mut current = word.load(Ordering::Relaxed);
    // The previous change carried the word before it returned: it is counted in
    // `version - 1`.
    while split(current).0 != version {
        let tat = split(current).1;
        let carried = join(version, carried::<PLANT>(old, new, tat, now).unwrap_or(tat));
        // Release: the carried word publishes the parameters it is counted in. Relaxed
        // failure: the value is only compared again.
        match word.compare_exchange_weak(current, carried, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
}

/// `Retune::acquire_live` for the token bucket with `PLANT`.
#[inline]
pub(crate) fn acquire_live<const PLANT: Plant>(
    word: &AtomicU128,
    cell: &ParamCell,
    now_ns: u64,
    n: u64,
) -> Decision {
    // As `acquire_at`: the loop runs `admit_at` alone, the decision is made once settled.
    let (p, now, admitted, tat) = live_update::<_, PLANT>(word, cell, now_ns, |p, tat, now| {
        let write = admit_at(p, tat, now, n);
        ((*p, now, write, tat), write)
    });
    match admitted {
        Some(new_tat) => allowed(&p, now, new_tat),
        None if n == 0 => decide_at(&p, tat, now, 0).0,
        None => refused(&p, tat, now, n),
    }
}
