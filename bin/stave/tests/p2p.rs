//! Two real `stave node` processes over mutual TLS: a transaction sent to the follower before
//! the producer runs reaches the producer once they connect and is included; the follower
//! imports the producer's blocks (rebuilt from compact blocks); SIGKILLed and restarted, it
//! catches up by number; and a node with peers exports the network metrics the dashboard
//! shows.

mod support;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use stave_primitives::{Address, B256, U256};
use stave_sdk::{LocalSigner, TxBuilder};
use support::{Node, free_port};

/// Hardhat/Anvil account 0, funded by the dev genesis both nodes start from.
const ALICE_KEY: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

fn stave(args: &[&str], dir: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "stave {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8")
}

/// A node's directory, ports and config.
struct Member {
    dir: PathBuf,
    rpc: u16,
    metrics: u16,
    p2p: u16,
}

impl Member {
    fn launch(&self) -> Node {
        let mut command = Command::new(env!("CARGO_BIN_EXE_stave"));
        command
            .args(["node", "--config"])
            .arg(self.dir.join("node.toml"));
        Node::launch(command, self.rpc, self.metrics)
    }
}

/// Keys, certificates and configs for a producer (node 0) and a follower (node 1).
fn network(root: &Path) -> Vec<Member> {
    stave(&["keys", "ca", "--out", "ca"], root);
    let members: Vec<Member> = (0..2)
        .map(|i| Member {
            dir: root.join(format!("node{i}")),
            rpc: free_port(),
            metrics: free_port(),
            p2p: free_port(),
        })
        .collect();
    let ids: Vec<String> = (0..2)
        .map(|i| {
            let out = stave(
                &[
                    "keys",
                    "node",
                    "--ca",
                    "ca",
                    "--name",
                    &format!("node{i}.stave"),
                    "--out",
                    &format!("node{i}"),
                ],
                root,
            );
            let line: Value =
                serde_json::from_str(out.lines().last().expect("a line")).expect("JSON");
            line["node_id"].as_str().expect("node id").to_owned()
        })
        .collect();
    for (i, member) in members.iter().enumerate() {
        let other = 1 - i;
        let config = format!(
            "datadir = \"data\"\nrpc_addr = \"127.0.0.1:{}\"\nmetrics_addr = \"127.0.0.1:{}\"\n\
             block_time_ms = 200\nproducer = {}\n\n[p2p]\nlisten = \"127.0.0.1:{}\"\n\
             ca = \"ca.pem\"\ncert = \"node.pem\"\nkey = \"node.key\"\nallowed = [\"{}\", \"{}\"]\n\n\
             [[p2p.peers]]\nname = \"node{other}.stave\"\naddress = \"127.0.0.1:{}\"\n",
            member.rpc,
            member.metrics,
            i == 0,
            member.p2p,
            ids[0],
            ids[1],
            members[other].p2p,
        );
        std::fs::write(member.dir.join("node.toml"), config).expect("writes");
    }
    members
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn block_hash(node: &Node, number: u64) -> Value {
    let block = node.result(
        "eth_getBlockByNumber",
        json!([format!("0x{number:x}"), false]),
    );
    block.get("hash").cloned().unwrap_or(Value::Null)
}

#[test]
fn a_follower_gossips_txs_imports_blocks_and_catches_up_after_sigkill() {
    let root = tempfile::tempdir().expect("tempdir");
    let members = network(root.path());
    let mut follower = members[1].launch();

    // A transfer sent to the follower before the producer runs reaches it once they
    // connect (the follower offers a new peer what its pool holds), and is included.
    let alice = LocalSigner::from_secret(&ALICE_KEY.parse::<B256>().expect("hex")).expect("key");
    let tx = alice.sign_tx(TxBuilder::new(1337, 4_000_000_000).transfer(
        0,
        Address::repeat_byte(0x77),
        U256::from(1),
    ));
    let hash = follower.result(
        "eth_sendRawTransaction",
        json!([format!("0x{}", hex::encode(tx.encoded()))]),
    );
    let producer = members[0].launch();
    let receipt = |node: &Node| node.result("eth_getTransactionReceipt", json!([hash]));
    wait_for("inclusion on the producer", || {
        !receipt(&producer).is_null()
    });
    // The follower imported the same block (a compact block rebuilt from its pool).
    wait_for("the block on the follower", || {
        !receipt(&follower).is_null()
    });
    let included = receipt(&producer);
    assert_eq!(receipt(&follower)["blockHash"], included["blockHash"]);
    assert_eq!(
        follower.result(
            "eth_getTransactionCount",
            json!([alice.address(), "latest"])
        ),
        json!("0x1")
    );

    // The network's metrics, as the dashboard queries them.
    let exported = follower.metrics();
    for name in Node::dashboard_metrics()
        .iter()
        .filter(|name| name.starts_with("stave_net_"))
    {
        assert!(
            exported.contains(&format!("# TYPE {name} ")),
            "{name} is not exported:\n{exported}"
        );
    }

    // SIGKILL the follower; the producer goes on; the restarted follower catches up.
    drop(follower);
    let before = producer.head();
    wait_for("blocks while the follower is down", || {
        producer.head() >= before + 5
    });
    let target = producer.head();
    follower = members[1].launch();
    wait_for("catch-up", || follower.head() >= target);
    for number in [before, target] {
        assert_eq!(block_hash(&follower, number), block_hash(&producer, number));
    }
}
