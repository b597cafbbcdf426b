//! `stave load` against a real `stave node --dev`: every transaction it sends is included
//! and none refused, at `max` and at a fixed rate, for each workload; a node it cannot
//! reach or on another chain is a one-line error.

mod support;

use std::process::{Command, Output};

use serde_json::Value;
use support::{JsonRpc, Node, free_port};

fn stave_load(rpc: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(["load", "--rpc", rpc])
        .args(args)
        .output()
        .expect("runs")
}

/// Runs `stave load --json` against `node`; the JSON report (the last line of stdout).
fn load(node: &Node, args: &[&str]) -> Value {
    let rpc = format!("http://127.0.0.1:{}", node.port);
    let mut args = args.to_vec();
    args.push("--json");
    let output = stave_load(&rpc, &args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stave load {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().expect("a report");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"))
}

fn number(report: &Value, key: &str) -> f64 {
    report[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number: {report}"))
}

/// Every transaction was sent, accepted and included; none refused; the figures are sane.
fn assert_all_included(report: &Value, workload: &str, accounts: u64, txs: u64) {
    assert_eq!(report["workload"], workload, "{report}");
    assert_eq!(report["accounts"], accounts, "{report}");
    assert_eq!(report["txs"], txs, "{report}");
    for key in ["sent", "accepted", "included"] {
        assert_eq!(report[key], txs, "{key}: {report}");
    }
    assert_eq!(report["rejected"], 0, "{report}");
    for key in ["sent_tps", "accepted_tps", "included_tps", "duration_s"] {
        assert!(number(report, key) > 0.0, "{key}: {report}");
    }
    let latency = &report["latency_ms"];
    let (p50, p90, p99) = (
        number(latency, "p50"),
        number(latency, "p90"),
        number(latency, "p99"),
    );
    assert!(0.0 < p50 && p50 <= p90 && p90 <= p99, "{report}");
    // Blocks come every 100 ms; nothing should wait anywhere near a minute.
    assert!(p99 < 60_000.0, "{report}");
}

#[test]
fn every_sent_transaction_is_included_at_max_and_at_a_fixed_rate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&dir.path().join("chain"));

    let report = load(
        &node,
        &["--accounts", "20", "--txs", "2000", "--rate", "max"],
    );
    assert_all_included(&report, "transfer", 20, 2000);
    assert_eq!(report["rate"], "max");

    // The same senders again: their nonces continue from the node's pending counts.
    let report = load(
        &node,
        &["--accounts", "5", "--txs", "200", "--workload", "erc20"],
    );
    assert_all_included(&report, "erc20", 5, 200);

    let report = load(
        &node,
        &[
            "--accounts",
            "10",
            "--txs",
            "300",
            "--rate",
            "200",
            "--workload",
            "conflict",
        ],
    );
    assert_all_included(&report, "conflict", 10, 300);
    assert_eq!(report["rate"], 200.0);
    // 300 txs at 200 tx/s take 1.5 s to send: the rate is kept, not exceeded.
    let sent_tps = number(&report, "sent_tps");
    assert!((100.0..=240.0).contains(&sent_tps), "{report}");
}

#[test]
fn an_unreachable_node_or_another_chain_is_a_one_line_error() {
    let output = stave_load(&format!("http://127.0.0.1:{}", free_port()), &[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot reach a node"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");

    let dir = tempfile::tempdir().expect("tempdir");
    let node = Node::start(&dir.path().join("chain"));
    let rpc = format!("http://127.0.0.1:{}", node.port);
    let output = stave_load(&rpc, &["--chain-id", "5"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("chain id 1337, expected 5"), "{stderr}");
}

/// A gas-free chain (a genesis with `baseFeePerGas` 0): the node suggests no tip and a
/// zero gas price, an account that holds nothing sends a zero-priced transaction that is
/// included with its gas metered, and `stave load` runs on it with every transaction
/// included.
#[test]
fn a_gas_free_chain_takes_zero_priced_transactions_from_accounts_without_funds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (spec, _) = stave_primitives::dev::dev_chain().expect("the dev chain");
    let node = Node::with_genesis(dir.path(), &spec.with_base_fee(0).to_json());
    assert_eq!(node.result("eth_gasPrice", serde_json::json!([])), "0x0");
    assert_eq!(
        node.result("eth_maxPriorityFeePerGas", serde_json::json!([])),
        "0x0"
    );

    let pauper = stave_sdk::LocalSigner::from_secret(&alloy_primitives::B256::repeat_byte(0x5a))
        .expect("a key");
    assert_eq!(
        node.result(
            "eth_getBalance",
            serde_json::json!([pauper.address(), "latest"])
        ),
        "0x0"
    );
    let tx = stave_sdk::TxBuilder::eip1559(1337, 0, 0).build(
        0,
        50_000,
        alloy_primitives::TxKind::Call(alloy_primitives::Address::repeat_byte(7)),
        alloy_primitives::U256::ZERO,
        alloy_primitives::Bytes::new(),
    );
    let raw = format!("0x{}", hex::encode(pauper.sign_tx(tx).encoded()));
    let hash = node.result("eth_sendRawTransaction", serde_json::json!([raw]));
    let mut receipt = Value::Null;
    support::wait_for(
        "the zero-priced transaction",
        std::time::Duration::from_secs(30),
        || {
            receipt = node.result("eth_getTransactionReceipt", serde_json::json!([hash]));
            !receipt.is_null()
        },
    );
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    assert_eq!(receipt["gasUsed"], "0x5208", "gas is metered: {receipt}");
    assert_eq!(receipt["effectiveGasPrice"], "0x0", "{receipt}");

    let report = load(&node, &["--txs", "400", "--accounts", "8"]);
    assert_all_included(&report, "transfer", 8, 400);
}
