//! libFuzzer entry point; the target itself is `tollgate_fuzz::token_bucket::run`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::token_bucket::run(data));
