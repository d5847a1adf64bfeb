#![no_main]
//! `oxlet::fuzzing::kubeconfig` (its doc says what it feeds and checks).

libfuzzer_sys::fuzz_target!(|data: &[u8]| oxlet::fuzzing::kubeconfig(data));
