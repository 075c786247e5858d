//! libFuzzer entry point; the target itself is `tollgate_fuzz::sketch_hybrid::run`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::sketch_hybrid::run(data));
