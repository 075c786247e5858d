//! The live windows: [`Retune`] for the fixed window and the sliding-window counter.
//!
//! # Words
//!
//! A window's state is its algorithm's own (`algo/fixed_window.rs`, `algo/sliding_window.rs`):
//! its count reads right under every quota a change may bring, so a change only publishes the
//! parameters. Their four words in the cell:
//!
//! | word | meaning                                                          |
//! |------|------------------------------------------------------------------|
//! | 0    | `len`: the window's (or slot's) length in ns, fixed by the first quota |
//! | 1    | `count_bits`: the count field, every bit the window number leaves |
//! | 2    | `limit`: the current quota's limit                               |
//! | 3    | `slots`: the sliding window's slots (1 for the fixed window)     |
//!
//! # Invariant
//!
//! A change keeps `len`, `count_bits` and `slots` (a new period is refused), and takes a new
//! limit only if it fits the count field: the state's words mean the same under every quota.
//!
//! # Orderings
//!
//! None of their own: the parameters are read and written through the cell (`mod.rs`), and
//! the state is the algorithm's, with its orderings.

use super::{ParamWords, Retune};
use crate::algo::count_mask;
use crate::algo::fixed_window::Fixed;
use crate::algo::sliding_window::{Geometry, Sliding};
use crate::quota::{Quota, QuotaError, WindowParams, DEFAULT_SLOTS};

/// Window parameters as four words, for a live limiter's parameter cell.
fn window_words(p: &WindowParams, slots: u64) -> ParamWords {
    [p.len, u64::from(p.count_bits), p.limit, slots]
}

/// The window parameters (and slots) [`window_words`] made `w` from.
fn window_from_words(w: ParamWords) -> (WindowParams, u64) {
    let p = WindowParams {
        len: w[0],
        count_bits: w[1] as u32,
        limit: w[2],
    };
    (p, w[3])
}

/// The window parameters of `to` in the packing of `current` (whose quota is `from`): the
/// same window length and count field, the new limit.
fn retuned_window(
    current: &WindowParams,
    from: &Quota,
    to: &Quota,
) -> Result<WindowParams, QuotaError> {
    if to.period() != from.period() {
        return Err(QuotaError::PeriodFixed {
            period: to.period(),
            fixed: from.period(),
        });
    }
    let max = count_mask(current.count_bits);
    if to.limit() > max {
        return Err(QuotaError::LimitTooLarge {
            limit: to.limit(),
            max,
        });
    }
    Ok(WindowParams {
        limit: to.limit(),
        ..*current
    })
}

impl Retune for Fixed {
    super::plain_live_state!();

    /// One window, the count given every bit the window number leaves.
    fn live_params(quota: &Quota) -> Result<WindowParams, QuotaError> {
        quota.window_roomy(1).ok_or(QuotaError::RateTooHigh {
            limit: quota.limit(),
            period: quota.period(),
        })
    }

    fn retune(
        current: &WindowParams,
        from: &Quota,
        to: &Quota,
    ) -> Result<WindowParams, QuotaError> {
        retuned_window(current, from, to)
    }

    fn pack(p: &WindowParams) -> ParamWords {
        window_words(p, 1)
    }

    fn unpack(words: ParamWords) -> WindowParams {
        window_from_words(words).0
    }
}

impl Retune for Sliding {
    super::plain_live_state!();

    /// The default slots, the count given every bit the slot number leaves.
    fn live_params(quota: &Quota) -> Result<Geometry, QuotaError> {
        let g = Geometry::new(quota, DEFAULT_SLOTS)?;
        let p = quota
            .window_roomy(DEFAULT_SLOTS)
            .ok_or(QuotaError::RateTooHigh {
                limit: quota.limit(),
                period: quota.period(),
            })?;
        Ok(Geometry { p, ..g })
    }

    /// The same slots and count field, the new limit.
    fn retune(current: &Geometry, from: &Quota, to: &Quota) -> Result<Geometry, QuotaError> {
        Ok(Geometry {
            p: retuned_window(&current.p, from, to)?,
            ..*current
        })
    }

    fn pack(g: &Geometry) -> ParamWords {
        window_words(&g.p, g.slots)
    }

    fn unpack(words: ParamWords) -> Geometry {
        let (p, slots) = window_from_words(words);
        Geometry { p, slots }
    }
}
