//! Fuzz target: see `checks::indexed_list` for the property.
#![no_main]

include!("../checks.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| indexed_list(data));
