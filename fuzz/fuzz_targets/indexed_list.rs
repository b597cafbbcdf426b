//! Fuzz target: see `checks::indexed_list` for the property.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::indexed_list(data));
