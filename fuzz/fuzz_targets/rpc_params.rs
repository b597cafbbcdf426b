//! Fuzz target: see `rpc_checks::rpc_params` for the property.
#![no_main]

#[path = "../rpc_checks.rs"]
mod rpc_checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| rpc_checks::rpc_params(data));
