//! The Ethereum Foundation's GeneralStateTests through Stave's executors: `stave evm
//! statetest` and the CI test that walks the shared fixtures.
//!
//! [`fixture`] parses a fixture file (outside bytes: typed errors, a fuzz target);
//! [`Runner`] runs each case as a one-transaction block on the test's pre-state
//! ([`World`], whose Ethereum state root alloy-trie computes), through the serial
//! executor, the parallel one or both, and compares the state root and the logs hash
//! with the fixture's; [`SKIPS`] is the one list of cases not run, each with its reason.

pub mod fixture;
mod runner;
mod skip;
mod world;

pub use fixture::{Case, Env, FixtureError, Indexes, PreAccount, StateTest, parse};
pub use runner::{CaseReport, Executors, Runner, StateTestError, Summary, Verdict, fixture_files};
pub use skip::{SKIPS, Skip, skip_for};
pub use world::World;
