//! The txpool's drops, counted by reason, over JSON-RPC (`txpool_status`'s `dropped`) and
//! Prometheus (`stave_txpool_dropped_total`, every reason exported from the start). A
//! binary of its own: the metrics recorder is global to a process.

mod support;

use std::time::Duration;

use serde_json::json;
use stave_launch::{NodeConfig, RunningNode};
use stave_txpool::DropReason;
use support::{JsonRpc, account, scrape, transfer, transfer_with_fee};

#[test]
fn drops_are_counted_by_reason_over_json_rpc_and_prometheus() {
    let mut config = NodeConfig::dev().expect("the dev chain").in_process();
    config.metrics_addr = Some("127.0.0.1:0".parse().expect("an address"));
    config.block_time = Duration::from_millis(100);
    let node = RunningNode::start(config).expect("starts");
    let metrics_addr = node
        .metrics_addr()
        .expect("the only recorder of the process");

    // A queued transaction, then its replacement: one drop, reason "replaced".
    let alice = account(0);
    node.result("eth_sendRawTransaction", json!([transfer(&alice, 5)]));
    node.result(
        "eth_sendRawTransaction",
        json!([transfer_with_fee(&alice, 5, 8_000_000_000)]),
    );
    let status = node.result("txpool_status", json!([]));
    // go-ethereum's fields are unchanged.
    assert_eq!(
        (&status["pending"], &status["queued"]),
        (&json!("0x0"), &json!("0x1"))
    );
    let dropped = status["dropped"].as_object().expect("an object");
    assert_eq!(
        dropped.keys().collect::<std::collections::BTreeSet<_>>(),
        DropReason::LABELS
            .iter()
            .map(|label| label.to_string())
            .collect::<Vec<_>>()
            .iter()
            .collect()
    );
    for (reason, count) in dropped {
        let expected = if reason == "replaced" { "0x1" } else { "0x0" };
        assert_eq!(count, &json!(expected), "{reason}");
    }

    let exported = scrape(metrics_addr);
    for reason in DropReason::LABELS {
        let prefix = format!("stave_txpool_dropped_total{{reason=\"{reason}\"}} ");
        let value = exported
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("{reason} is not exported:\n{exported}"));
        let expected = if reason == "replaced" { "1" } else { "0" };
        assert_eq!(value, expected, "{reason}");
    }
}
