//! libFuzzer entry point; the target itself is `tollgate_fuzz::keyed_table::run`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::keyed_table::run(data));
