#![no_main]
//! `oxlet::fuzzing::kubelet_config` (its doc says what it feeds and checks).

libfuzzer_sys::fuzz_target!(|data: &[u8]| oxlet::fuzzing::kubelet_config(data));
