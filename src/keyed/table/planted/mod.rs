//! The keyed table's planted defects, for the loom models (`loom-tests/tests/keyed_table.rs`);
//! built only for them (`cfg(tollgate_loom)`).
//!
//! Each module (a file of its own) is one defect: a `Mutant` wrapping a real table, whose request runs copies of
//! the real `try_acquire_n` and `acquire` (the same text, calling the module's copies), of the
//! function the defect is planted in, with the planted lines marked `// PLANTED`, and of the
//! functions between them; the rest is the real table's. `loom-tests/tests/mutants_match.rs`
//! fails if a copy differs from the real code anywhere else. The product's types know nothing
//! of them.

/// A real table whose requests run the copies of the module it is declared in.
macro_rules! mutant {
    () => {
        /// A real table, requested through this module's copies.
        pub(crate) struct Mutant<'a, K: ?Sized, C, S>(
            pub(crate) &'a $crate::keyed::table::KeyedTable<K, C, S>,
        );

        impl<K: ?Sized, C, S> core::ops::Deref for Mutant<'_, K, C, S> {
            type Target = $crate::keyed::table::KeyedTable<K, C, S>;

            fn deref(&self) -> &Self::Target {
                self.0
            }
        }
    };
}

pub(crate) mod fresh_takeover_word;
pub(crate) mod relaxed_first_word;
pub(crate) mod relaxed_tag;
pub(crate) mod stale_claim_reading;
pub(crate) mod unlocked_claim;
pub(crate) mod untagged_admission;
