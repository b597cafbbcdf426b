//! The Ethereum state tests packed many to a block (`stave_statetest::pack`): the Cancun
//! cases of the shared GeneralStateTests, each on addresses of its own, run as blocks of
//! up to 200 transactions from many fixtures over their merged pre-states, through the
//! serial executor and the parallel one on 2 and 8 threads. Every pack must pass
//! `Pack::check`: the executors agree byte for byte, and each transaction does in the
//! block what it does alone (its status, gas and logs; its changes, since the pack's
//! post-state is the union of the cases', the coinbase aside, and is the post-state of
//! the transactions run one block each, the coinbase included). A case is packed only
//! if, run alone on its moved addresses, it gave its fixture's state root and logs hash.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use stave_exec::ParallelExecutor;
use stave_statetest::{fixture_files, pack, parse};

fn shared_dir() -> PathBuf {
    std::env::var_os("STAVE_SHARED_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared"),
        PathBuf::from,
    )
}

/// Most transactions of a pack.
const MAX_TXS: usize = 200;

/// Directories left out: each case is run five times or more here (alone, with a richer
/// coinbase, in the pack through three executors, and as a block of its own), which for
/// these slow ones takes minutes; `general_state_tests.rs` runs them.
const SLOW: &[&str] = &["stTimeConsuming", "VMTests"];

#[test]
fn packed_cancun_cases_run_as_one_block_as_they_do_alone_in_both_executors() {
    let root = shared_dir().join("vectors/ethereum-tests/GeneralStateTests");
    assert!(
        root.is_dir(),
        "{} is missing: the shared vectors sit beside the repository (or set STAVE_SHARED_DIR)",
        root.display()
    );
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("readable")
        .map(|entry| entry.expect("readable").path())
        .filter(|dir| !SLOW.iter().any(|slow| dir.ends_with(slow)))
        .collect();
    dirs.sort();
    let mut tests = Vec::new();
    for file in fixture_files(&dirs).expect("the fixtures are readable") {
        let bytes = std::fs::read(&file).expect("readable");
        tests.extend(parse(&bytes).expect("every fixture parses"));
    }
    let packing = pack(&tests, "Cancun", MAX_TXS).expect("the cases run alone");
    let executors: Vec<ParallelExecutor> = [2, 8]
        .into_iter()
        .map(|threads| ParallelExecutor::new(threads).expect("threads start"))
        .collect();
    let mut failures = Vec::new();
    // Packs by their number of transactions.
    let mut sizes = BTreeMap::<usize, usize>::new();
    for (i, pack) in packing.packs.iter().enumerate() {
        match pack.check(&executors) {
            Ok(()) => *sizes.entry(pack.len()).or_default() += 1,
            Err(error) => failures.push(format!(
                "pack {i} of {} cases ({}, ...): {error}",
                pack.len(),
                pack.names().take(3).collect::<Vec<_>>().join(", ")
            )),
        }
    }
    let shared: usize = sizes
        .iter()
        .filter(|(txs, _)| **txs > 1)
        .map(|(txs, packs)| txs * packs)
        .sum();
    let alone = sizes.get(&1).copied().unwrap_or_default();
    println!(
        "{} packs: {shared} cases in packs of 2 to {MAX_TXS} transactions, {alone} alone",
        packing.packs.len()
    );
    println!("packs by size: {sizes:?}");
    println!("cases not packed: {:?}", packing.excluded);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // A vacuous pass is a failure: most cases must share blocks, some full ones.
    assert!(shared > 4_000, "{shared} cases shared a block");
    assert!(
        sizes.get(&MAX_TXS).is_some_and(|packs| *packs >= 4),
        "{sizes:?}"
    );
}
