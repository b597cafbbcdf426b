//! Fuzz target: see `statetest_checks::statetest` for the property.
#![no_main]

#[path = "../statetest_checks.rs"]
mod statetest_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| statetest_checks::statetest(data));
