//! How many columns a sketch has: given directly, or from the load it must carry.
//!
//! No atomics here: sizes are plain values, resolved once at construction.

use core::fmt;

use super::cell::CellParams;

/// Most columns a sketch takes (2^30 columns of 16 bytes: 16 GiB).
///
/// ```
/// use tollgate::{SketchSize, SizeError, MAX_COLUMNS};
/// assert!(SketchSize::columns(MAX_COLUMNS).is_ok());
/// assert_eq!(SketchSize::columns(MAX_COLUMNS + 1), Err(SizeError::TooLarge { columns: MAX_COLUMNS + 1 }));
/// ```
pub const MAX_COLUMNS: u64 = 1 << 30;

/// The size of a [`SketchLimiter`](crate::SketchLimiter): a number of columns of 16 bytes
/// each (one atomic word holding a window number and up to eight small counters, "lanes").
///
/// Either given directly ([`SketchSize::columns`]) or derived from the load it must carry
/// ([`SketchSize::for_load`]) with this formula:
///
/// ```text
/// columns = ⌈ e · U · d / (k · h · δ^(1/h)) ⌉
/// ```
///
/// - `U`: units admitted per window across all keys (a flood of one-shot keys counts one
///   each);
/// - `h`: the headroom of a well-behaved key, the units of its limit it leaves unused in a
///   window (a key using 50 of 100 has `h = 50`);
/// - `δ`: the false-denial rate wanted for such a key's requests;
/// - `k`: lanes per column (`min(8, 64 / bits(limit))`, `min(4, 32 / bits(limit))` for
///   the sliding form) and `d`: lanes per key (2, or 1 when `k < 3`).
///
/// Why: a key's request is falsely denied only if every one of its lanes carries at least
/// `h` units of other keys. One lane's foreign load is about Poisson with mean
/// `λ = U·d / (k·columns)`, and `P(Poisson(λ) ≥ h) ≤ (e·λ / h)^h`; setting that to `δ`
/// gives the formula. It counts one lane only and ignores the conservative update (which
/// raises a lane only as far as the key needs), so the measured rate is lower.
///
/// ```
/// use tollgate::{Quota, SketchSize};
/// let quota = Quota::per_second(100)?;
/// // 10^7 one-shot keys a second, keys that use half their limit, 1 % false denials.
/// let size = SketchSize::for_load(10_000_000, 50, 0.01)?;
/// assert!(size.bytes(&quota) < 4 << 20); // under 4 MiB, whatever the number of keys
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SketchSize(Size);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Size {
    Columns(u64),
    Load {
        units: u64,
        headroom: u64,
        rate: f64,
    },
}

/// A [`SketchSize`] that cannot be made.
///
/// ```
/// use tollgate::{SketchSize, SizeError};
/// assert_eq!(SketchSize::columns(0), Err(SizeError::ZeroColumns));
/// assert_eq!(SketchSize::for_load(1_000, 5, 0.0), Err(SizeError::Rate));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SizeError {
    /// No columns asked for.
    ZeroColumns,
    /// The headroom was 0: a key at its limit is denied by any other key's unit.
    ZeroHeadroom,
    /// The false-denial rate is not in `(0, 1)`.
    Rate,
    /// More columns than [`MAX_COLUMNS`].
    TooLarge {
        /// The columns the size asks for (saturated at `u64::MAX`).
        columns: u64,
    },
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::ZeroColumns => write!(f, "a sketch needs at least one column"),
            SizeError::ZeroHeadroom => write!(f, "the headroom must be at least 1 unit"),
            SizeError::Rate => write!(f, "the false-denial rate must lie strictly between 0 and 1"),
            SizeError::TooLarge { columns } => write!(
                f,
                "{columns} columns asked for, at most {MAX_COLUMNS} (16 GiB) are taken"
            ),
        }
    }
}

impl std::error::Error for SizeError {}

impl SketchSize {
    /// Exactly `columns` columns (16 bytes each).
    ///
    /// # Errors
    /// [`SizeError::ZeroColumns`], or [`SizeError::TooLarge`] above [`MAX_COLUMNS`].
    ///
    /// ```
    /// use tollgate::{Quota, SketchSize};
    /// let size = SketchSize::columns(1 << 16)?;
    /// assert_eq!(size.bytes(&Quota::per_second(5)?), 1 << 20);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn columns(columns: u64) -> Result<SketchSize, SizeError> {
        match columns {
            0 => Err(SizeError::ZeroColumns),
            c if c > MAX_COLUMNS => Err(SizeError::TooLarge { columns: c }),
            c => Ok(SketchSize(Size::Columns(c))),
        }
    }

    /// Sized by the formula above for `units` per window, a well-behaved key's `headroom`
    /// and a false-denial rate `rate`; the lanes `k` and `d` come from the quota of the
    /// sketch it sizes.
    ///
    /// # Errors
    /// [`SizeError::ZeroHeadroom`], [`SizeError::Rate`] (not in `(0, 1)`), or
    /// [`SizeError::TooLarge`] when even a column of one lane would need more than
    /// [`MAX_COLUMNS`].
    ///
    /// ```
    /// use tollgate::{Quota, SketchSize};
    /// let q = Quota::per_minute(600)?;
    /// let size = SketchSize::for_load(1_000_000, 300, 0.001)?;
    /// assert!(size.column_count(&q) < 10_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_load(units: u64, headroom: u64, rate: f64) -> Result<SketchSize, SizeError> {
        if headroom == 0 {
            return Err(SizeError::ZeroHeadroom);
        }
        if !(rate > 0.0 && rate < 1.0) {
            return Err(SizeError::Rate);
        }
        let size = SketchSize(Size::Load {
            units,
            headroom,
            rate,
        });
        // The most columns any packing resolves to: one lane per column, one per key.
        let worst = size.resolve(1, 1);
        if worst > MAX_COLUMNS {
            return Err(SizeError::TooLarge { columns: worst });
        }
        Ok(size)
    }

    /// The columns of a sketch of `quota` (fixed window) of this size.
    ///
    /// ```
    /// use tollgate::{Quota, SketchSize};
    /// let q = Quota::per_second(5)?;
    /// assert_eq!(SketchSize::columns(7)?.column_count(&q), 7);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn column_count(&self, quota: &crate::Quota) -> u64 {
        self.for_params(&super::fixed_params(quota))
    }

    /// The bytes of a sketch of `quota` (fixed window) of this size: 16 per column, fixed at
    /// construction.
    ///
    /// ```
    /// use tollgate::{Quota, SketchSize};
    /// let q = Quota::per_second(5)?;
    /// assert_eq!(SketchSize::columns(1000)?.bytes(&q), 16_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn bytes(&self, quota: &crate::Quota) -> u64 {
        self.column_count(quota) * 16
    }

    pub(crate) fn for_params(&self, p: &CellParams) -> u64 {
        self.resolve(u64::from(p.lanes), u64::from(p.lanes_per_key()))
    }

    fn resolve(&self, lanes: u64, per_key: u64) -> u64 {
        match self.0 {
            Size::Columns(c) => c,
            Size::Load {
                units,
                headroom,
                rate,
            } => {
                let h = headroom as f64;
                let c = core::f64::consts::E * units as f64 * per_key as f64
                    / (lanes as f64 * h * rate.powf(1.0 / h));
                // `as` saturates; at least one column.
                (c.ceil() as u64).max(1)
            }
        }
    }
}
