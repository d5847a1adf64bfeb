#![no_main]
//! `oxlet::fuzzing::container_log` (its doc says what it feeds and checks).

libfuzzer_sys::fuzz_target!(|data: &[u8]| oxlet::fuzzing::container_log(data));
