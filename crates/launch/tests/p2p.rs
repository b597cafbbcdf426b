//! A producer and followers in this process over mutual TLS: a transaction sent to a
//! follower before it has a peer reaches the producer once they connect and is included;
//! the follower imports the producer's blocks (rebuilt from compact blocks); a follower
//! started from an empty data dir later catches up by number.

mod support;

use std::{path::Path, time::Duration};

use serde_json::{Value, json};
use stave_launch::{NodeConfig, P2pConfig, Role, RunningNode};
use stave_net::StaticPeer;
use support::{JsonRpc, account, block_id, height, p2p_identities, transfer, wait_for};

/// How long the nodes get for each step.
const LIMIT: Duration = Duration::from_secs(30);

/// A dev-chain node in `datadir` with `p2p`, producing or following, blocks every 200 ms.
fn node(datadir: &Path, p2p: &P2pConfig, role: Role) -> RunningNode {
    let mut config = NodeConfig::dev().expect("the dev chain");
    config.datadir = Some(datadir.to_path_buf());
    config.block_time = Duration::from_millis(200);
    config.role = role;
    config.p2p = Some(p2p.clone());
    RunningNode::start(config.in_process()).expect("the node starts")
}

/// `config` dialling `peer` (named `name` in its certificate).
fn dialling(config: &P2pConfig, name: &str, peer: &RunningNode) -> P2pConfig {
    P2pConfig {
        peers: vec![StaticPeer {
            name: name.to_owned(),
            address: peer.p2p_addr().expect("P2P"),
        }],
        ..config.clone()
    }
}

#[test]
fn followers_get_txs_and_blocks_by_gossip_and_catch_up_by_number() {
    let root = tempfile::tempdir().expect("tempdir");
    let identities = p2p_identities(root.path(), 3);
    let follower = node(
        &root.path().join("follower"),
        &identities[1],
        Role::Follower,
    );
    assert!(follower.node_id().is_some());

    // A transfer sent to the follower before it has a peer reaches the producer once they
    // connect (the follower offers a new peer what its pool holds), and is included.
    let alice = account(0);
    let hash = follower.result("eth_sendRawTransaction", json!([transfer(&alice, 0)]));
    let producer = node(
        &root.path().join("producer"),
        &dialling(&identities[0], "node1.stave", &follower),
        Role::Producer,
    );
    let receipt = |node: &RunningNode| node.result("eth_getTransactionReceipt", json!([hash]));
    wait_for("inclusion on the producer", LIMIT, || {
        !receipt(&producer).is_null()
    });
    // The follower imported the same block (a compact block rebuilt from its pool).
    wait_for("the block on the follower", LIMIT, || {
        !receipt(&follower).is_null()
    });
    assert_eq!(
        receipt(&follower)["blockHash"],
        receipt(&producer)["blockHash"]
    );
    assert_eq!(
        follower.result(
            "eth_getTransactionCount",
            json!([alice.address(), "latest"])
        ),
        json!("0x1")
    );

    // The follower stops; the producer goes on; a new follower, from an empty data dir,
    // fetches every block by number.
    let stopped = follower.stop().expect("stops");
    assert!(stopped.error.is_none(), "{:?}", stopped.error);
    wait_for("blocks while no one follows", LIMIT, || {
        height(&producer) >= stopped.head + 5
    });
    let target = height(&producer);
    let late = node(
        &root.path().join("late"),
        &dialling(&identities[2], "node0.stave", &producer),
        Role::Follower,
    );
    wait_for("catch-up", LIMIT, || height(&late) >= target);
    let hash_of = |node: &RunningNode, number| -> Value { block_id(node, number).0 };
    for number in [1, stopped.head, target] {
        assert_eq!(
            hash_of(&late, number),
            hash_of(&producer, number),
            "block {number}"
        );
    }
}
