//! The txpool's drops, counted by reason, over JSON-RPC (`txpool_status`'s `dropped`) and
//! Prometheus (`stave_txpool_dropped_total`, every reason exported from the start). A
//! binary of its own: the metrics recorder is global to a process.

mod support;

use serde_json::json;
use stave_txpool::DropReason;
use support::{JsonRpc, account, dev_node_with_metrics, replace_a_queued_transfer, scrape};

#[test]
fn drops_are_counted_by_reason_over_json_rpc_and_prometheus() {
    let (node, metrics_addr) = dev_node_with_metrics(100);

    // A queued transaction, then its replacement: one drop, reason "replaced".
    let alice = account(0);
    replace_a_queued_transfer(&node, &alice);
    let status = node.result("txpool_status", json!([]));
    // go-ethereum's fields are unchanged.
    assert_eq!(
        (&status["pending"], &status["queued"]),
        (&json!("0x0"), &json!("0x1"))
    );
    let dropped = status["dropped"].as_object().expect("an object");
    let mut reasons: Vec<&str> = dropped.keys().map(String::as_str).collect();
    let mut expected_reasons = DropReason::LABELS.to_vec();
    reasons.sort_unstable();
    expected_reasons.sort_unstable();
    assert_eq!(reasons, expected_reasons);
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
