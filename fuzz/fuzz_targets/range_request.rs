//! Fuzz target: see `net_checks::range_request` for the property.
#![no_main]

#[path = "../net_checks.rs"]
mod net_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| net_checks::range_request(data));
