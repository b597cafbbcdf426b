//! The one node of this test process serves Prometheus metrics (the recorder is global to
//! a process, so this test has a binary of its own): every metric the Grafana dashboard
//! queries is exported, but the network's and consensus's, which come from nodes with
//! peers and validators (`bin/stave/tests/p2p.rs` and `consensus.rs` check those); each
//! JSON-RPC method is counted and timed under its own name, histograms are Prometheus
//! histograms, and the process and the storage map are measured.

mod support;

use std::time::Duration;

use serde_json::json;
use support::{
    JsonRpc, account, dashboard_metrics, dev_node_with_metrics, replace_a_queued_transfer, scrape,
    transfer, wait_for,
};

#[test]
fn the_grafana_dashboard_uses_only_metrics_the_node_exports() {
    let (node, metrics_addr) = dev_node_with_metrics(100);
    // One admission, one refusal, one drop (a queued tx replaced), one included tx.
    let alice = account(0);
    replace_a_queued_transfer(&node, &alice);
    assert_eq!(
        node.call("eth_sendRawTransaction", json!(["0x00"]))["error"]["code"],
        json!(-32000)
    );
    node.result("eth_sendRawTransaction", json!([transfer(&alice, 0)]));
    wait_for("the tx included", Duration::from_secs(20), || {
        node.result(
            "eth_getTransactionCount",
            json!([alice.address(), "latest"]),
        ) == json!("0x1")
    });
    // A method no module serves is counted as `unknown`, never under its own name.
    node.call("eth_noSuchMethod", json!([]));
    let exported = scrape(metrics_addr);
    let used = dashboard_metrics();
    assert!(used.len() >= 6, "{used:?}");
    for name in used
        .iter()
        .filter(|name| !name.starts_with("stave_net_") && !name.starts_with("stave_consensus_"))
    {
        assert!(
            exported.contains(&format!("# TYPE {name} ")),
            "{name} is not exported:\n{exported}"
        );
    }
    let value = |series: &str| -> f64 {
        exported
            .lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series}:\n{exported}"))
    };
    assert!(value("stave_rpc_requests_total{method=\"eth_sendRawTransaction\"}") >= 2.0);
    assert!(value("stave_rpc_errors_total{method=\"eth_sendRawTransaction\"}") >= 1.0);
    assert!(value("stave_rpc_requests_total{method=\"unknown\"}") >= 1.0);
    assert!(!exported.contains("eth_noSuchMethod"));
    assert!(exported.contains("# TYPE stave_rpc_request_seconds histogram"));
    assert!(exported.contains("# TYPE stave_stage_seconds histogram"));
    assert!(value("stave_rpc_request_seconds_count{method=\"eth_getTransactionCount\"}") >= 1.0);
    let (used, map) = (
        value("stave_storage_map_used_bytes"),
        value("stave_storage_map_bytes"),
    );
    assert!(used > 0.0 && used < map, "{used} of {map}");
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_open_fds") > 0.0);
}
