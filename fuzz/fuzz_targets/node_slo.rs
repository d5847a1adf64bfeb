#![no_main]
//! `oxlet::fuzzing::node_slo` (its doc says what it feeds and checks).

libfuzzer_sys::fuzz_target!(|data: &[u8]| oxlet::fuzzing::node_slo(data));
