//! Fuzz target: see `config_checks::config_toml` for the property.
#![no_main]

#[path = "../config_checks.rs"]
mod config_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| config_checks::config_toml(data));
