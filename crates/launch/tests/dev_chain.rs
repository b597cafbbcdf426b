//! A dev node's chain as a developer's tools steer it: the state of every block kept
//! (across restarts and SIGKILL: `bin/stave/tests/node.rs`), snapshots the chain goes back to, and accounts impersonated
//! without their keys.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use stave_launch::{History, NodeConfig, RunningNode};
use support::{JsonRpc, account};

/// A dev node in `datadir` that makes blocks only when asked (its block time is a minute).
fn on_demand(datadir: &std::path::Path, history: History) -> RunningNode {
    let mut config = NodeConfig::dev().expect("the dev chain").in_process();
    config.block_time = Duration::from_secs(60);
    config.datadir = Some(datadir.to_path_buf());
    config.history = history;
    RunningNode::start(config).expect("the node starts")
}

fn number(value: &Value) -> u64 {
    u64::from_str_radix(
        value.as_str().expect("a quantity").trim_start_matches("0x"),
        16,
    )
    .expect("hex")
}

const BEEF: &str = "0x000000000000000000000000000000000000beef";

/// Sends `wei` to [`BEEF`] from dev account 0 and mines it; returns the block it is in.
fn pay_beef(node: &RunningNode, wei: u64) -> u64 {
    let from = account(0).address();
    let hash = node.result(
        "eth_sendTransaction",
        json!([{"from": from, "to": BEEF, "value": format!("{wei:#x}")}]),
    );
    node.result("evm_mine", json!([]));
    let receipt = node.result("eth_getTransactionReceipt", json!([hash]));
    assert_eq!(receipt["status"], json!("0x1"), "{receipt}");
    number(&receipt["blockNumber"])
}

fn balance_at(node: &RunningNode, address: &str, block: u64) -> Value {
    node.call("eth_getBalance", json!([address, format!("{block:#x}")]))
}

#[test]
fn every_block_state_is_served_after_the_layers_moved_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let node = on_demand(dir.path(), History::All);
    let first = pay_beef(&node, 1_000);
    // Far past the 128 blocks the layers hold, and past several flushes.
    node.result("anvil_mine", json!(["0x190"]));
    let second = pay_beef(&node, 5);
    node.result("anvil_mine", json!(["0x40"]));
    let read = |node: &RunningNode| {
        [0, first - 1, first, second - 1, second]
            .map(|block| balance_at(node, BEEF, block)["result"].clone())
    };
    let expected = ["0x0", "0x0", "0x3e8", "0x3e8", "0x3ed"].map(Value::from);
    assert_eq!(read(&node), expected);
    // The sender's nonce at its block, and a call on the state of the first block.
    let sender = account(0).address();
    assert_eq!(
        node.result(
            "eth_getTransactionCount",
            json!([sender, format!("{:#x}", first - 1)])
        ),
        json!("0x0")
    );
    let traced = node.result(
        "debug_traceBlockByNumber",
        json!([format!("{first:#x}"), {"tracer": "callTracer"}]),
    );
    assert_eq!(traced[0]["result"]["to"], json!(BEEF), "{traced}");
    node.stop().expect("stops");
}

#[test]
fn the_chain_goes_back_to_a_snapshot_and_forward_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let node = on_demand(dir.path(), History::All);
    pay_beef(&node, 1);
    let outer = node.result("evm_snapshot", json!([]));
    let at_outer = JsonRpc::head(&node);
    pay_beef(&node, 10);
    let inner = node.result("evm_snapshot", json!([]));
    assert_ne!(outer, inner);
    node.result("anvil_mine", json!(["0xc8"]));
    pay_beef(&node, 100);
    // A transaction waiting in the pool goes with the reverted blocks.
    let waiting = node.result(
        "eth_sendTransaction",
        json!([{"from": account(1).address(), "to": BEEF, "value": "0x1"}]),
    );
    assert_eq!(node.result("evm_revert", json!([outer])), json!(true));
    assert_eq!(JsonRpc::head(&node), at_outer);
    assert_eq!(
        node.result("eth_getBalance", json!([BEEF, "latest"])),
        json!("0x1")
    );
    assert_eq!(
        node.result("eth_getTransactionByHash", json!([waiting])),
        Value::Null
    );
    assert_eq!(
        node.result(
            "eth_getBlockByNumber",
            json!([format!("{:#x}", at_outer + 1), false])
        ),
        Value::Null
    );
    // Reverting drops the snapshot and every later one.
    assert_eq!(node.result("evm_revert", json!([outer])), json!(false));
    assert_eq!(node.result("evm_revert", json!([inner])), json!(false));
    // The chain goes on from there, and the account's nonce is as it was.
    let block = pay_beef(&node, 7);
    assert_eq!(block, at_outer + 1);
    assert_eq!(
        node.result("eth_getBalance", json!([BEEF, "latest"])),
        json!("0x8")
    );
    node.stop().expect("stops");
}

#[test]
fn an_impersonated_account_sends_without_its_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let node = on_demand(dir.path(), History::All);
    let whale = "0x00000000000000000000000000000000000cafe0";
    node.result("anvil_setBalance", json!([whale, "0xde0b6b3a7640000"]));
    let send = || {
        node.call(
            "eth_sendTransaction",
            json!([{"from": whale, "to": BEEF, "value": "0x2a"}]),
        )
    };
    let refused = send();
    assert!(refused["error"]["message"].is_string(), "{refused}");
    node.result("anvil_impersonateAccount", json!([whale]));
    let hash = send()["result"].clone();
    node.result("evm_mine", json!([]));
    let receipt = node.result("eth_getTransactionReceipt", json!([hash]));
    assert_eq!(receipt["status"], json!("0x1"), "{receipt}");
    assert_eq!(receipt["from"], json!(whale));
    let tx = node.result("eth_getTransactionByHash", json!([hash]));
    assert_eq!(tx["from"], json!(whale));
    assert_eq!(
        node.result("eth_getBalance", json!([BEEF, "latest"])),
        json!("0x2a")
    );
    // A second, equal transaction from another impersonated account has its own hash.
    let other = "0x00000000000000000000000000000000000cafe1";
    node.result("anvil_setBalance", json!([other, "0xde0b6b3a7640000"]));
    node.result("hardhat_impersonateAccount", json!([other]));
    let first = node.result(
        "eth_sendTransaction",
        json!([{"from": whale, "to": BEEF, "value": "0x1", "nonce": "0x1", "gas": "0x5208"}]),
    );
    let second = node.result(
        "eth_sendTransaction",
        json!([{"from": other, "to": BEEF, "value": "0x1", "nonce": "0x1", "gas": "0x5208"}]),
    );
    assert_ne!(first, second);
    node.result("anvil_stopImpersonatingAccount", json!([whale]));
    assert!(send()["error"].is_object());
    node.result("anvil_autoImpersonateAccount", json!([true]));
    assert!(send()["result"].is_string());
    node.stop().expect("stops");
}
