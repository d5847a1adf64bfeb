#![no_main]
//! `oxlet::fuzzing::quantity` (its doc says what it feeds and checks).

libfuzzer_sys::fuzz_target!(|data: &[u8]| oxlet::fuzzing::quantity(data));
