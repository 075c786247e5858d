//! libFuzzer entry point; the target itself is `tollgate_fuzz::sliding_log::run`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::sliding_log::run(data));
