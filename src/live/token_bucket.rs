//! The live token bucket: [`Retune`] for [`Gcra`], its `tat` carried over a quota change.
//!
//! # Word
//!
//! | bits    | field   | meaning                                                             |
//! |---------|---------|---------------------------------------------------------------------|
//! | 64..128 | `epoch` | the version of the parameters (in the cell) its `tat` is counted in |
//! | 0..64   | `tat`   | `tat` (see `algo/token_bucket.rs`), in ticks of the first quota (at most 16 per ns) |
//!
//! # Invariant
//!
//! A change publishes, then carries the word to the new version; a request loads the word,
//! then the parameters, and decides under the version the word is counted in: the current
//! one, or the previous one if the change has not carried the word yet (its slot stays whole
//! until the next change, which waits for this one); if that is gone too, the word has been
//! carried since, and the request loads it again. Its compare-exchange compares the whole
//! epoch: epochs only grow, so a request that loaded the word before a change never writes
//! after it, however many changes ran meanwhile (a parity bit would be an ABA: two changes
//! that leave a full bucket's `tat` as it was bring back the very word it loaded).
//!
//! # Orderings
//!
//! A request loads the word `Acquire` and a change carries it `Release`, so parameters and
//! word belong together: the parameters read after a word carried to version `v` are `v`'s
//! or later. A request's compare-exchange is `Relaxed` on success (an admission publishes
//! nothing), `Acquire` on failure (as the load); the changer loads the word `Relaxed` (it
//! wrote the parameters itself) and its compare-exchange fails `Relaxed`.

use super::{ParamCell, ParamWords, Retune};
use crate::algo::token_bucket::{
    admit_at, allowed, decide, decide_at, refunded, refused, ticks, Gcra,
};
use crate::algo::Algo;
use crate::decision::Decision;
use crate::quota::{GcraParams, Quota, QuotaError};
use crate::sync::{AtomicU128, Ordering};

/// The `tat` that carries a bucket's level from `old` to `new` at tick `now`: the debt
/// `tat - now` (the tokens used, in ticks of `old`) counted in tokens of `new`, rounded up,
/// and at most the new capacity (a bucket is never emptier than empty). `None` when full.
///
/// No write counted in `old` leaves `tat` more than `old`'s capacity past the reading it was
/// made at (an admission's check, a carry's cap), so `tat - capacity` is no later than that
/// reading. A `now` before it is older than the write: a change that stalled, reading in
/// hand, while a request drained the bucket (or a clock stepped back). Carried from such a
/// `now`, the debt would be cut to the capacity and the bucket refilled by the gap: it is
/// carried from `tat - capacity` instead, which keeps the whole of what the word counts.
pub(crate) fn carried(old: &GcraParams, new: &GcraParams, tat: u64, now: u64) -> Option<u64> {
    let now = now.max(tat.saturating_sub(old.capacity));
    if tat <= now {
        return None;
    }
    let debt = (u128::from(tat - now) * u128::from(new.interval))
        .div_ceil(u128::from(old.interval))
        .min(u128::from(new.capacity));
    // debt ≤ capacity < 2^62 and now ≤ 2^63: no overflow.
    Some(now + debt as u64)
}

#[cfg(tollgate_loom)]
pub(crate) mod planted;

/// The finest tick of a live bucket, in ticks per ns.
const LIVE_MAX_SCALE: u32 = 16;

/// A live bucket's word: `epoch` (the version of the parameters `tat` is counted in) beside
/// `tat`, compared and exchanged together (a live keyed bucket's word too).
#[inline]
pub(crate) fn join(epoch: u64, tat: u64) -> u128 {
    u128::from(epoch) << 64 | u128::from(tat)
}

/// A live word's `(epoch, tat)`.
#[inline]
pub(crate) fn split(word: u128) -> (u64, u64) {
    ((word >> 64) as u64, word as u64)
}

/// The parameters a live word of epoch `epoch` is counted in, and that epoch: `version`'s
/// (read after the word), or if a change to `version` has not carried the word yet, the
/// previous ones; `None` if the cell no longer holds those (the word has been carried since
/// it was loaded).
#[inline]
fn counted_in(cell: &ParamCell, epoch: u64) -> Option<(GcraParams, u64)> {
    let (version, words) = cell.read_versioned();
    if epoch == version {
        return Some((GcraParams::from_words(words), version));
    }
    let previous = version.wrapping_sub(1);
    if epoch != previous {
        return None;
    }
    let words = cell.read_version(previous)?;
    Some((GcraParams::from_words(words), epoch))
}

/// The live bucket's compare-exchange loop: `f` decides on a `tat` under the parameters it
/// is counted in, read after the word (a request that finds the word not yet carried by a
/// change is decided under the previous quota, on the state before the change: it never
/// waits for the change). Its compare-exchange compares the epoch too, and epochs only
/// grow: a word carried since the load never matches again, however many changes ran.
#[inline]
fn live_update<T>(
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
        let Some((p, epoch)) = counted_in(cell, epoch) else {
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

/// Why a live bucket ticking `scale` times per ns cannot take `quota`: a rate above one token
/// per tick, or a capacity of 2^62 ticks or more (a burst too large, or a single token's
/// interval that long: a period too long for the tick).
fn refusal(quota: &Quota, scale: u32) -> QuotaError {
    let (limit, period) = (u128::from(quota.limit()), quota.period());
    let ticks = u128::from(quota.period_ns()) * u128::from(scale);
    if ticks < limit {
        return QuotaError::RateTooHigh {
            limit: quota.limit(),
            period,
        };
    }
    let interval = ticks.div_ceil(limit);
    let max = ((1u128 << 62) - 1) / interval;
    if max == 0 {
        // The longest period whose one token's interval still fits: (2^62 - 1) ticks a token.
        let longest = ((1u128 << 62) - 1) * limit / u128::from(scale);
        return QuotaError::PeriodTooLong {
            period,
            max: core::time::Duration::from_nanos(longest.min(u128::from(u64::MAX)) as u64),
        };
    }
    QuotaError::BurstTooLarge {
        burst: quota.burst(),
        max: max as u64,
    }
}

impl Retune for Gcra {
    /// `(epoch, tat)`: a fresh bucket is full, counted in version 0.
    type LiveState = AtomicU128;

    fn live_state(_: &GcraParams) -> Result<AtomicU128, QuotaError> {
        Ok(AtomicU128::new(join(0, 0)))
    }

    /// The quota's own tick, or 1/16 ns if it is finer (a rate above 16 per ns then runs at
    /// 16 per ns: slower, never faster).
    fn live_params(quota: &Quota) -> Result<GcraParams, QuotaError> {
        let p = Self::params(quota)?;
        if p.scale <= LIVE_MAX_SCALE {
            return Ok(p);
        }
        quota
            .gcra_at_scale_or_slower(LIVE_MAX_SCALE)
            .ok_or_else(|| refusal(quota, LIVE_MAX_SCALE))
    }

    /// The new quota in the first quota's ticks.
    fn retune(current: &GcraParams, _: &Quota, to: &Quota) -> Result<GcraParams, QuotaError> {
        to.gcra_at_scale(current.scale)
            .ok_or_else(|| refusal(to, current.scale))
    }

    /// Publishes the new parameters, then carries the word to them (unless a request did).
    fn publish(
        word: &AtomicU128,
        cell: &ParamCell,
        old: &GcraParams,
        new: &GcraParams,
        now_ns: u64,
    ) {
        let version = cell.write(new.to_words());
        let now = ticks(new, now_ns);
        // Relaxed: the changer wrote the parameters itself; the word is only compared.
        let mut current = word.load(Ordering::Relaxed);
        // The previous change carried the word before it returned: it is counted in
        // `version - 1`.
        while split(current).0 != version {
            let tat = split(current).1;
            let carried = join(version, carried(old, new, tat, now).unwrap_or(tat));
            // Release: the carried word publishes the parameters it is counted in. Relaxed
            // failure: the value is only compared again.
            match word.compare_exchange_weak(current, carried, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    #[inline]
    fn acquire_live(word: &AtomicU128, cell: &ParamCell, now_ns: u64, n: u64) -> Decision {
        // As `acquire_at`: the loop runs `admit_at` alone, the decision is made once settled.
        let (p, now, admitted, tat) = live_update(word, cell, now_ns, |p, tat, now| {
            let write = admit_at(p, tat, now, n);
            ((*p, now, write, tat), write)
        });
        match admitted {
            Some(new_tat) => allowed(&p, now, new_tat),
            None if n == 0 => decide_at(&p, tat, now, 0).0,
            None => refused(&p, tat, now, n),
        }
    }

    #[inline]
    fn peek_live(word: &AtomicU128, cell: &ParamCell, now_ns: u64, n: u64) -> Decision {
        // Acquire: as in `live_update`.
        let mut current = word.load(Ordering::Acquire);
        loop {
            let (epoch, tat) = split(current);
            if let Some((p, _)) = counted_in(cell, epoch) {
                return decide(&p, tat, now_ns, n).0;
            }
            crate::sync::Backoff::new().snooze();
            // Acquire: as in `live_update`.
            current = word.load(Ordering::Acquire);
        }
    }

    fn refund_live(word: &AtomicU128, cell: &ParamCell, now_ns: u64, n: u64) -> u64 {
        live_update(word, cell, now_ns, |p, tat, now| refunded(p, tat, now, n))
    }

    fn pack(p: &GcraParams) -> ParamWords {
        p.to_words()
    }

    fn unpack(words: ParamWords) -> GcraParams {
        GcraParams::from_words(words)
    }
}
