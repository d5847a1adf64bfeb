#![no_main]
//! `oxlet::fuzzing::http_request` (its doc says what it feeds and checks).

libfuzzer_sys::fuzz_target!(|data: &[u8]| oxlet::fuzzing::http_request(data));
