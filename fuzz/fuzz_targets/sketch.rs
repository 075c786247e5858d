//! libFuzzer entry point; the target itself is `tollgate_fuzz::sketch::run`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::sketch::run(data));
