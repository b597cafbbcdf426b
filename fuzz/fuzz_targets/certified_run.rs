//! Fuzz target: see `consensus_checks::certified_run` for the property.
#![no_main]

#[path = "../consensus_checks.rs"]
mod consensus_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| consensus_checks::certified_run(data));
