//! Fuzz target: see `net_checks::header_senders` for the property.
#![no_main]

#[path = "../net_checks.rs"]
mod net_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| net_checks::header_senders(data));
