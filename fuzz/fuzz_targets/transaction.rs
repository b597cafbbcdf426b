//! Fuzz target: see `checks::transaction` for the property.
#![no_main]

include!("../checks.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| transaction(data));
