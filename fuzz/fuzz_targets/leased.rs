//! libFuzzer entry point; the target itself is `tollgate_fuzz::leased::run`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::leased::run(data));
