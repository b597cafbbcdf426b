//! Fuzz target: see `net_checks::finalized_push` for the property.
#![no_main]

#[path = "../net_checks.rs"]
mod net_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| net_checks::finalized_push(data));
