//! The Ethereum Foundation's GeneralStateTests through Stave's executors: `stave evm
//! statetest` and the CI test that walks the shared fixtures.
//!
//! [`fixture`] parses a fixture file (outside bytes: typed errors, a fuzz target);
//! [`Runner`] runs each case as a one-transaction block on the test's pre-state
//! ([`World`], whose Ethereum state root alloy-trie computes), through the serial
//! executor, the parallel one or both, and compares the state root and the logs hash
//! with the fixture's; [`SKIPS`] is the one list of cases not run, each with its reason.
//! [`pack()`] packs cases of many fixtures, each moved to addresses of its own, into
//! blocks of many transactions, which [`Pack::check`] runs through both executors and
//! compares with the cases run alone.

pub mod fixture;
mod pack;
mod runner;
mod skip;
mod world;

pub use fixture::{Case, Env, FixtureError, Indexes, PreAccount, StateTest, parse};
pub use pack::{Exclusion, Pack, PackError, Packing, pack};
pub use runner::{CaseReport, Executors, Runner, StateTestError, Summary, Verdict, fixture_files};
pub use skip::{SKIPS, Skip, skip_for};
pub use world::World;
