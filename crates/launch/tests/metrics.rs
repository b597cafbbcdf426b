//! The one node of this test process serves Prometheus metrics (the recorder is global to
//! a process, so this test has a binary of its own): every metric the Grafana dashboard
//! queries is exported, but the network's, which come from a node with peers
//! (`bin/stave/tests/p2p.rs` checks those).

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
    let exported = scrape(metrics_addr);
    let used = dashboard_metrics();
    assert!(used.len() >= 6, "{used:?}");
    for name in used.iter().filter(|name| !name.starts_with("stave_net_")) {
        assert!(
            exported.contains(&format!("# TYPE {name} ")),
            "{name} is not exported:\n{exported}"
        );
    }
}
