//! `stave node --dev` as a real process: it runs without transparent huge pages, SIGKILL
//! loses no block that RPC reported, SIGTERM stops it cleanly, a bad config file is a
//! clear error. What needs no process of its own (JSON-RPC answers, config files,
//! metrics) is tested in process, in `crates/launch/tests`.

mod support;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use stave_primitives::{Address, B256, U256};
use stave_sdk::{LocalSigner, TxBuilder};
use support::{JsonRpc, Node, quantity};

/// The first Hardhat/Anvil dev account's key (public knowledge).
const ALICE_KEY: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// An unknown key is a clear error, not a silent default (`NodeConfig` tests in
/// `crates/launch` check the rest of the file's reading).
#[test]
fn an_unknown_config_key_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bad.toml"), "rpc_port = 1\n").expect("writes");
    let output = Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(["node", "--config"])
        .arg(dir.path().join("bad.toml"))
        .output()
        .expect("runs");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown field"));
}

/// mimalloc madvises its arena for huge pages; the node turns them off for itself, so
/// memory it reuses after mimalloc returned it is not zeroed 2 MiB at a time.
#[test]
fn the_node_runs_without_transparent_huge_pages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(dir.path());
    let status = std::fs::read_to_string(format!("/proc/{}/status", node.child.id()))
        .expect("reads the node's status");
    let thp = status
        .lines()
        .find_map(|line| line.strip_prefix("THP_enabled:"))
        .expect("the kernel reports THP_enabled");
    assert_eq!(thp.trim(), "0", "{status}");
}

#[test]
fn sigkill_loses_no_block_rpc_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let datadir = dir.path().join("chain");
    let alice = LocalSigner::from_secret(&ALICE_KEY.parse::<B256>().expect("hex")).expect("key");
    let builder = TxBuilder::new(1337, 4_000_000_000);
    let mut nonce = 0;
    let mut reported: Vec<(u64, Value)> = Vec::new();
    let mut sent: Vec<Value> = Vec::new();
    let mut included: Vec<Value> = Vec::new();
    for round in 0..5 {
        let node = Node::start(&datadir);
        // Every block reported before the crash is still there, unchanged.
        for (number, hash) in &reported {
            let block = node.result(
                "eth_getBlockByNumber",
                json!([format!("{number:#x}"), false]),
            );
            assert_eq!(&block["hash"], hash, "round {round}: block {number}");
        }
        // And every transaction included before the crash is found by its hash, in one of
        // those blocks.
        for hash in &included {
            let receipt = node.result("eth_getTransactionReceipt", json!([hash]));
            let number = quantity(&receipt["blockNumber"])
                .unwrap_or_else(|| panic!("round {round}: no receipt for {hash}: {receipt}"));
            assert_eq!(
                Some(&receipt["blockHash"]),
                reported.get(number as usize).map(|(_, hash)| hash),
                "round {round}: {hash}"
            );
        }
        let expected_balance = U256::from(nonce);
        let receiver = Address::repeat_byte(0x77);
        let balance = node.result("eth_getBalance", json!([receiver, "latest"]));
        assert_eq!(
            balance,
            json!(format!("{expected_balance:#x}")),
            "round {round}"
        );
        for _ in 0..20 {
            let tx = alice.sign_tx(builder.transfer(nonce, receiver, U256::from(1)));
            let raw = format!("0x{}", hex::encode(tx.encoded()));
            sent.push(node.result("eth_sendRawTransaction", json!([raw])));
            nonce += 1;
        }
        // Wait until the txs are in, then remember what RPC reported.
        let deadline = Instant::now() + Duration::from_secs(20);
        while node.result(
            "eth_getTransactionCount",
            json!([alice.address(), "latest"]),
        ) != json!(format!("{nonce:#x}"))
        {
            assert!(Instant::now() < deadline, "txs were not included");
            std::thread::sleep(Duration::from_millis(20));
        }
        let head = node.head();
        for number in reported.len() as u64..=head {
            let block = node.result(
                "eth_getBlockByNumber",
                json!([format!("{number:#x}"), false]),
            );
            reported.push((number, block["hash"].clone()));
        }
        included.append(&mut sent);
        // SIGKILL while blocks keep coming.
        std::thread::sleep(Duration::from_millis(30 * round));
        drop(node);
    }
    // And a clean stop on SIGTERM.
    let mut node = Node::start(&datadir);
    let status = Command::new("kill")
        .args(["-TERM", &node.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let exit = node.child.wait().expect("exits");
    assert!(exit.success(), "{exit:?}");
    // A clean stop writes the state layers to disk: the next start re-executes nothing.
    let store = stave_storage::LmdbStore::open(&datadir, 1 << 30).expect("opens");
    let (head, _) = stave_storage::read::head(&store)
        .expect("reads")
        .expect("a head");
    assert!(head as usize >= reported.len() - 1);
    assert_eq!(
        stave_storage::read::flushed_height(&store).expect("reads"),
        Some(head)
    );
}
