//! The property the `statetest` fuzz target checks, shared with
//! `crates/statetest/tests/fuzz_corpus.rs`, which replays the checked-in corpus under
//! `cargo test`: any bytes given to the state test fixture parser are tests or a typed
//! error, never a panic, and a parsed test builds its pre-state, hashes its root and runs
//! its cases (one report each) without a panic.

use stave_statetest::{Executors, Runner, World, parse};

/// Most block gas a fuzzed test runs with, so one input stays quick.
const GAS_CAP: u64 = 1_000_000;

/// `stave_statetest::parse` over arbitrary bytes, then the serial run of what parsed.
pub fn statetest(data: &[u8]) {
    let Ok(tests) = parse(data) else { return };
    let runner =
        Runner::new(Executors::Serial, "Cancun").expect("a serial runner starts no threads");
    for test in &tests {
        let _root = World::from_pre(&test.pre).root();
        if test.env.gas_limit > GAS_CAP {
            continue;
        }
        let cases = test
            .cases
            .iter()
            .filter(|case| case.fork == "Cancun")
            .count();
        assert_eq!(runner.run_test(test).len(), cases, "one report per case");
    }
}
