//! Fuzz target: see `checks::block` for the property.
#![no_main]

include!("../checks.rs");

libfuzzer_sys::fuzz_target!(|data: &[u8]| block(data));
