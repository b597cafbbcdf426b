//! A producer and followers in this process over mutual TLS: a transaction sent to a
//! follower before it has a peer reaches the producer once they connect and is included;
//! the follower imports the producer's blocks (rebuilt from compact blocks); a follower
//! started from an empty data dir later catches up by number; a follower fed blocks far
//! ahead of its head by a hostile peer keeps following its producer.

mod support;

use std::{collections::HashSet, path::Path, sync::Arc, time::Duration};

use serde_json::{Value, json};
use stave_launch::{NodeConfig, P2pConfig, Role, RunningNode};
use stave_net::{
    Gossip, GossipConfig, Network, NetworkConfig, NodeIdentity, NodeTls, StaticPeer, TxAdmission,
};
use stave_primitives::{Header, merkle_root};
use support::{JsonRpc, account, block_id, height, p2p_identities, scrape, transfer, wait_for};

/// How long the nodes get for each step.
const LIMIT: Duration = Duration::from_secs(30);

/// A dev-chain node in `datadir` with `p2p`, producing or following, blocks every 200 ms.
fn node(datadir: &Path, p2p: &P2pConfig, role: Role) -> RunningNode {
    RunningNode::start(config(datadir, p2p, role)).expect("the node starts")
}

/// The config of [`node`], without metrics.
fn config(datadir: &Path, p2p: &P2pConfig, role: Role) -> NodeConfig {
    let mut config = NodeConfig::dev().expect("the dev chain");
    config.datadir = Some(datadir.to_path_buf());
    config.block_time = Duration::from_millis(200);
    config.role = role;
    config.p2p = Some(p2p.clone());
    config.in_process()
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

/// A peer that admits no transaction.
struct NoTxs;

impl TxAdmission for NoTxs {
    fn admit(&self, txs: &[bytes::Bytes]) -> Vec<bool> {
        vec![false; txs.len()]
    }
}

/// An empty block numbered `number` on no parent of the chain: well formed (its empty
/// body matches its root), so gossip passes it on, but it never imports.
fn empty_block(number: u64) -> Vec<u8> {
    let header = Header {
        number,
        transactions_root: merkle_root(&[]),
        ..Header::default()
    };
    let body = stave_codec::encode_transactions(&[]).expect("encodes");
    stave_codec::encode_block_parts(&header, &body)
}

#[test]
fn a_follower_fed_blocks_far_ahead_keeps_following_its_producer() {
    let root = tempfile::tempdir().expect("tempdir");
    let identities = p2p_identities(root.path(), 3);
    // The only node of this test binary with metrics (the recorder is the process's).
    let mut follower = config(
        &root.path().join("follower"),
        &identities[1],
        Role::Follower,
    );
    follower.metrics_addr = Some("127.0.0.1:0".parse().expect("an address"));
    let follower = RunningNode::start(follower).expect("the follower starts");
    let metrics = follower.metrics_addr().expect("metrics");
    let producer = node(
        &root.path().join("producer"),
        &dialling(&identities[0], "node1.stave", &follower),
        Role::Producer,
    );
    wait_for("the follower to follow", LIMIT, || height(&follower) >= 2);

    // A third peer, allowed like the producer, announces blocks ahead of the follower's
    // head: some within its window of held blocks, most far beyond it.
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let hostile = &identities[2];
    let read = |path: &Path| std::fs::read_to_string(path).expect("reads");
    let ca = stave_net::tls::ca_certificate_from_pem(&read(&hostile.ca)).expect("a CA");
    let identity = NodeIdentity::from_pem("node", &read(&hostile.cert), &read(&hostile.key))
        .expect("an identity");
    let allowed: HashSet<_> = hostile.allowed.iter().copied().collect();
    let tls = NodeTls::new(&ca, &identity, allowed).expect("TLS");
    let local = identity.node_id().expect("an id");
    let follower_id = follower.node_id().expect("P2P");
    let peers = vec![StaticPeer {
        name: "node1.stave".to_owned(),
        address: follower.p2p_addr().expect("P2P"),
    }];
    let (network, gossip) = runtime.block_on(async {
        let config = NetworkConfig::new(hostile.listen, peers);
        let network = Network::start(config, tls, local).await.expect("starts");
        let (gossip, _blocks) = Gossip::start(
            network.clone(),
            Arc::new(NoTxs),
            None,
            GossipConfig::default(),
        );
        (network, gossip)
    });
    wait_for("the hostile peer to connect", LIMIT, || {
        network.peers().contains(&follower_id)
    });
    let head = height(&follower);
    let _runtime = runtime.enter();
    for offset in (2..200).chain((1..2_000).map(|i| i * 1_000)) {
        gossip
            .announce_block(&empty_block(head + offset))
            .expect("announces");
        // Paced, so the follower's inbox of rebuilt blocks (which drops past 64) takes
        // most of them.
        std::thread::sleep(Duration::from_millis(1));
    }
    // The far ones reached the follower, and it held none of them.
    let ignored = || {
        scrape(metrics)
            .lines()
            .find_map(|line| line.strip_prefix("stave_follower_blocks_ignored_total "))
            .and_then(|count| count.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    wait_for("far blocks ignored", LIMIT, || ignored() >= 100.0);

    // The follower still follows the producer, block for block.
    let target = height(&producer) + 5;
    wait_for("the follower past the announcements", LIMIT, || {
        height(&follower) >= target
    });
    assert_eq!(
        block_id(&follower, target).0,
        block_id(&producer, target).0,
        "block {target}"
    );
    network.shutdown();
}
