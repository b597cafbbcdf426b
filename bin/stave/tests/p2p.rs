//! Two real `stave node` processes over mutual TLS, set up with `stave keys`: the follower
//! imports the producer's blocks; SIGKILLed and restarted, it catches up by number (its
//! `/ready` answering 503 "syncing" until it has); and a
//! node with peers exports the network metrics the dashboard shows. Gossip of
//! transactions and blocks is tested in process, in `crates/launch/tests/p2p.rs`.

mod support;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::{Value, json};
use support::{
    JsonRpc, Node, account, dashboard_metrics, free_port, get, included, send_transfers, wait_for,
};

/// How long the nodes get for each step.
const LIMIT: Duration = Duration::from_secs(30);

fn stave(args: &[&str], dir: &Path) -> String {
    let output = support::succeeds(
        Command::new(env!("CARGO_BIN_EXE_stave"))
            .args(args)
            .current_dir(dir),
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

fn block_hash(node: &Node, number: u64) -> Value {
    let block = node.result(
        "eth_getBlockByNumber",
        json!([format!("0x{number:x}"), false]),
    );
    block.get("hash").cloned().unwrap_or(Value::Null)
}

#[test]
fn a_sigkilled_follower_catches_up_and_nodes_with_peers_export_network_metrics() {
    let root = tempfile::tempdir().expect("tempdir");
    let members = network(root.path());
    let producer = members[0].launch();
    let mut follower = members[1].launch();
    wait_for("blocks on the follower", LIMIT, || follower.head() >= 2);

    // The network's metrics, as the dashboard queries them.
    let exported = follower.metrics();
    for name in dashboard_metrics()
        .iter()
        .filter(|name| name.starts_with("stave_net_"))
    {
        assert!(
            exported.contains(&format!("# TYPE {name} ")),
            "{name} is not exported:\n{exported}"
        );
    }

    // SIGKILL the follower; the producer goes on, with blocks full enough that catching
    // up takes a while; the restarted follower catches up.
    drop(follower);
    let before = producer.head();
    // In rounds of 60 a sender, each included before the next: the pool refuses a nonce
    // more than 64 past the sender's next one, which a block in the making can leave
    // behind.
    for round in 0..10 {
        let sent: Vec<Value> = (0..10)
            .flat_map(|i| send_transfers(&producer, &account(i), round * 60, 60))
            .collect();
        wait_for("a round of transfers on the producer", LIMIT, || {
            included(&producer, &sent)
        });
    }
    wait_for("blocks while the follower is down", LIMIT, || {
        producer.head() >= before + 5
    });
    let target = producer.head();
    follower = members[1].launch();
    // `/ready` says so while it catches up, and answers 200 once it has.
    let ready = std::net::SocketAddr::from(([127, 0, 0, 1], follower.metrics_port));
    let deadline = std::time::Instant::now() + LIMIT;
    let mut said_syncing = false;
    // Asked often (not at `wait_for`'s pace): the catch-up takes a second or so.
    while follower.head() < target {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out catching up"
        );
        let answer = get(ready, "/ready");
        said_syncing |= answer.starts_with("HTTP/1.1 503") && answer.contains("syncing: block");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(said_syncing, "/ready never said it was syncing");
    wait_for("the caught-up follower to be ready", LIMIT, || {
        get(ready, "/ready").starts_with("HTTP/1.1 200")
    });
    // Catching up, it prefetched each block's state while the block before executed.
    let metrics = follower.metrics();
    assert!(
        metrics.contains("stave_stage_seconds_count{stage=\"prefetch\"}"),
        "{metrics}"
    );
    for number in [before, target] {
        assert_eq!(block_hash(&follower, number), block_hash(&producer, number));
    }
}
