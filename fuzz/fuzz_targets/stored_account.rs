//! Fuzz target: see `checks::stored_account` for the property.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::stored_account(data));
