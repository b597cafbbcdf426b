//! Fuzz target: see `txpool_checks::txpool_ops` for the property.
#![no_main]

#[path = "../txpool_checks.rs"]
mod txpool_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| txpool_checks::txpool_ops(data));
