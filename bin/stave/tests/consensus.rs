//! Validators as real `stave node` processes, set up by `stave testnet init`: four agree
//! on one chain under a transfer load sent to all of them; one SIGKILLed, the other three
//! keep finalizing, and restarted it catches up to the same chain; one SIGSTOPped catches
//! up once resumed; one whose consensus engine fails exits, and the other three go on;
//! with one whose wall clock is 5 s ahead or behind (libfaketime) the chain keeps
//! finalizing and no proposal is refused for its timestamp; `stave testnet run` starts
//! and stops a whole network. What needs no
//! process of its own (agreement, a stopped validator, nodes that must never join) is
//! tested in process, in `crates/launch/tests/consensus.rs`.

mod support;

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use serde_json::json;
use stave_sdk::LocalSigner;
use support::{
    JsonRpc, Node, account, block_id, dashboard_metrics, free_ports, get, included, probe,
    quantity, send_beside, send_transfers, wait_final, wait_for,
};

/// Sends `signal` to `node`'s process.
fn signal(node: &Node, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(node.child.id()).expect("a pid");
    // SAFETY: `kill` only sends a signal to the test's own child process.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "signal {signal}");
}

#[test]
fn a_paused_validator_reaches_the_others_head_when_resumed() {
    let root = tempfile::tempdir().expect("tempdir");
    let testnet = Testnet::init(root.path(), 4);
    let nodes: Vec<Node> = (0..4).map(|i| testnet.launch(i)).collect();
    let senders: Vec<LocalSigner> = (0..3).map(account).collect();
    let first = send_beside(&senders, &nodes, 0, 5);
    wait_final(&nodes, &first, "transfers final everywhere");

    // SIGSTOP validator 3, as a long pause (swapping, a stalled disk) would: its process
    // and connections stay, and the others queue what they send it.
    signal(&nodes[3], libc::SIGSTOP);
    let more = send_beside(&senders, &nodes, 5, 5);
    wait_final(&nodes[..3], &more, "transfers final without validator 3");
    // The blocks it missed are now seconds old. Once resumed it gets them whichever way
    // comes first: a catch-up on its peers' certified runs (an old finalized block, or its
    // head standing still), marshal's deliveries, or the ancestors of a proposal it is
    // asked to verify; which one wins depends on timing, so only the outcome is checked.
    std::thread::sleep(Duration::from_secs(4));
    let target = nodes[..3].iter().map(Node::head).min().expect("nodes");
    signal(&nodes[3], libc::SIGCONT);
    wait_for("validator 3 to catch up", Duration::from_secs(120), || {
        nodes[3].head() >= target
    });
    assert!(included(&nodes[3], &more));
    assert_eq!(block_id(&nodes[3], target), block_id(&nodes[0], target));
}

/// Held by the testnet of the running test: one testnet at a time. 4-node testnets side
/// by side crowd the 2 cores, and ports are chosen free well before the nodes bind them
/// (below the ephemeral range, so no connection takes one: `support::free_ports`).
static ONE_TESTNET: Mutex<()> = Mutex::new(());

/// Ports and directory of a testnet made by `stave testnet init`.
struct Testnet {
    dir: PathBuf,
    rpc: u16,
    metrics: u16,
    /// Each node's consensus public key, as `stave testnet init` printed it (empty for a
    /// full node).
    validators: Vec<String>,
    /// Declared in the tests before their nodes, so it is released after they stop.
    _alone: MutexGuard<'static, ()>,
}

impl Testnet {
    /// `stave testnet init --nodes N` into `dir` on free ports, blocks every 200 ms.
    fn init(dir: &Path, nodes: u16) -> Self {
        Self::init_with(dir, nodes, 0, 0, &[])
    }

    /// [`Testnet::init`] with `spare` nodes beside the validators
    /// (`--spare-validators`), `full` full nodes after them (`--full-nodes`) and more
    /// `stave testnet init` arguments.
    fn init_with(dir: &Path, nodes: u16, spare: u16, full: u16, args: &[&str]) -> Self {
        // A test that failed while holding it leaves nothing to repair.
        let alone = ONE_TESTNET.lock().unwrap_or_else(PoisonError::into_inner);
        let all = nodes + spare + full;
        let (rpc, metrics, p2p) = (free_ports(all), free_ports(all), free_ports(all));
        let output = support::succeeds(
            Command::new(env!("CARGO_BIN_EXE_stave"))
                .args(["testnet", "init", "--nodes", &nodes.to_string(), "--dir"])
                .arg(dir)
                .args(["--spare-validators", &spare.to_string()])
                .args(["--full-nodes", &full.to_string()])
                .args(["--rpc-port", &rpc.to_string()])
                .args(["--metrics-port", &metrics.to_string()])
                .args(["--p2p-port", &p2p.to_string()])
                .args(["--block-time-ms", "200"])
                .args(args),
        );
        let validators = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| {
                let member: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
                // A full node has none.
                member["validator"].as_str().unwrap_or_default().to_owned()
            })
            .collect();
        Self {
            dir: dir.to_path_buf(),
            rpc,
            metrics,
            validators,
            _alone: alone,
        }
    }

    fn config(&self, index: u16) -> PathBuf {
        self.dir.join(format!("node{index}/config.toml"))
    }

    /// Starts validator `index` as its own `stave node --config` process.
    fn launch(&self, index: u16) -> Node {
        self.launch_with(index, &[])
    }

    /// Starts validator `index`, whose config turns JSON-RPC off, as its own process.
    fn launch_without_rpc(&self, index: u16) -> Node {
        let mut command = Command::new(env!("CARGO_BIN_EXE_stave"));
        command.args(["node", "--config"]).arg(self.config(index));
        Node::launch_without_rpc(command, self.metrics + index)
    }

    /// Node `index`'s data dir, opened once the node has stopped (once per process).
    fn stored(&self, index: u16) -> stave_storage::LmdbStore {
        let datadir = self.dir.join(format!("node{index}/data"));
        stave_storage::LmdbStore::open(&datadir, stave_storage::DEFAULT_MAP_SIZE)
            .expect("the stopped node's data dir opens")
    }

    /// [`Testnet::launch`] with the environment variables `env` set for the process.
    fn launch_with(&self, index: u16, env: &[(&str, &str)]) -> Node {
        let mut command = Command::new(env!("CARGO_BIN_EXE_stave"));
        command.args(["node", "--config"]).arg(self.config(index));
        command.envs(env.iter().copied());
        Node::launch(command, self.rpc + index, self.metrics + index)
    }
}

/// The value of counter or gauge `name` in a Prometheus scrape (0 when absent).
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

/// The values of every series of the gauge `name` that carries labels.
fn labelled(metrics: &str, name: &str) -> Vec<u64> {
    metrics
        .lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|rest| rest.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .map(|value| value as u64)
        .collect()
}

#[test]
fn four_validators_agree_under_load_and_a_killed_one_catches_up() {
    let root = tempfile::tempdir().expect("tempdir");
    let testnet = Testnet::init(root.path(), 4);
    let mut nodes: Vec<Node> = (0..4).map(|i| testnet.launch(i)).collect();

    // Eight senders, each sending to one validator; gossip carries the txs to the others.
    let senders: Vec<LocalSigner> = (0..8).map(account).collect();
    let mut hashes = Vec::new();
    for (i, sender) in senders.iter().enumerate() {
        hashes.extend(send_transfers(&nodes[i % 4], sender, 0, 10));
    }
    wait_final(&nodes, &hashes, "all transfers final on every validator");
    let head = nodes.iter().map(Node::head).min().expect("nodes");
    let reference = block_id(&nodes[0], head);
    assert!(!reference.0.is_null());
    for node in &nodes[1..] {
        assert_eq!(block_id(node, head), reference, "block {head} differs");
    }

    // SIGKILL validator 3: three of four are a quorum and keep finalizing.
    drop(nodes.pop());
    let more = send_beside(&senders[..3], &nodes, 10, 5);
    wait_final(&nodes, &more, "transfers final without validator 3");
    // The survivors see who stopped voting: one validator's last vote falls behind the
    // others' as they go on.
    wait_for(
        "validator 3's last vote to lag",
        Duration::from_secs(60),
        || {
            let mut last_votes =
                labelled(&nodes[0].metrics(), "stave_consensus_validator_last_view");
            assert_eq!(
                last_votes.len(),
                4,
                "one series per validator: {last_votes:?}"
            );
            last_votes.sort_unstable();
            last_votes[0] + 3 <= last_votes[1]
        },
    );

    // Restarted, it catches up to the same chain.
    let target = nodes.iter().map(Node::head).min().expect("nodes");
    let restarted = testnet.launch(3);
    wait_for("validator 3 to catch up", Duration::from_secs(120), || {
        restarted.head() >= target
    });
    assert!(included(&restarted, &more));
    for number in [head, target] {
        assert_eq!(block_id(&restarted, number), block_id(&nodes[0], number));
    }
    // It took the senders of the blocks it missed from its peers rather than recovering
    // them: the 15 transfers sent while it was down at least.
    let metrics = restarted.metrics();
    let agreed = counter(&metrics, "stave_agreed_senders_total");
    assert!(agreed >= 15, "agreed senders: {agreed}\n{metrics}");
    // It imported them before its engine delivered them: certified runs from its peers.
    let caught_up = counter(&metrics, "stave_caught_up_blocks_total");
    assert!(caught_up >= 1, "blocks caught up: {caught_up}\n{metrics}");
    // The consensus metrics the dashboard queries, on a validator that finalized blocks.
    let metrics = nodes[0].metrics();
    for name in dashboard_metrics()
        .iter()
        .filter(|name| name.starts_with("stave_consensus_"))
    {
        assert!(
            metrics.contains(&format!("# TYPE {name} ")),
            "{name} is not exported:\n{metrics}"
        );
    }
    assert!(metrics.contains("stave_consensus_finalization_seconds_bucket"));
}

/// Blocks per epoch in the epochs test: at 200 ms blocks, an epoch every 2 s or less.
const EPOCH_LENGTH: u64 = 10;

/// Waits until every node in `nodes` has committed block `height`.
fn wait_height(nodes: &[Node], height: u64, what: &str) {
    wait_for(what, Duration::from_secs(120), || {
        nodes.iter().all(|node| node.head() >= height)
    });
}

/// Validators move from epoch to epoch under load without a restart; one SIGKILLed just
/// before a boundary and restarted after it enters the epoch the others are in and
/// votes there: with another validator then stopped, the chain finalizes only with its
/// votes (three of four are the quorum).
#[test]
fn validators_cross_epochs_and_one_killed_before_a_boundary_votes_after_it() {
    let root = tempfile::tempdir().expect("tempdir");
    let length = EPOCH_LENGTH.to_string();
    let testnet = Testnet::init_with(root.path(), 4, 0, 0, &["--epoch-length", &length]);
    let mut nodes: Vec<Node> = (0..4).map(|i| testnet.launch(i)).collect();
    let senders: Vec<LocalSigner> = (0..4).map(account).collect();
    let first = send_beside(&senders, &nodes, 0, 10);
    wait_final(&nodes, &first, "transfers final on every validator");
    wait_height(&nodes, 3 * EPOCH_LENGTH, "three epochs");
    for node in &nodes {
        let epoch = counter(&node.metrics(), "stave_consensus_epoch");
        assert!(epoch >= 3, "a validator still in epoch {epoch}");
    }

    // SIGKILL validator 3 two blocks before the end of an epoch.
    wait_for(
        "two blocks before a boundary",
        Duration::from_secs(60),
        || nodes[0].head() % EPOCH_LENGTH == EPOCH_LENGTH - 3,
    );
    drop(nodes.pop());
    let killed_at = nodes[0].head();
    let more = send_beside(&senders[..3], &nodes, 10, 5);
    wait_final(&nodes, &more, "transfers final without validator 3");
    wait_height(
        &nodes,
        killed_at + EPOCH_LENGTH,
        "the next epoch without validator 3",
    );

    // Restarted, it reaches the others' epoch and chain.
    let restarted = testnet.launch(3);
    let target = nodes.iter().map(Node::head).min().expect("nodes");
    wait_height(
        std::slice::from_ref(&restarted),
        target,
        "validator 3 to catch up",
    );
    for number in [killed_at, target] {
        assert_eq!(block_id(&restarted, number), block_id(&nodes[0], number));
    }
    // Validator 0 stopped: validators 1, 2 and 3 are the quorum, so blocks are final only
    // if validator 3 votes in the epoch it rejoined in, and in those after it.
    let stopped = nodes.remove(0);
    drop(stopped);
    nodes.push(restarted);
    let last = send_beside(&senders[1..3], &nodes, 15, 3);
    wait_final(&nodes, &last, "transfers final with validator 3's votes");
    let head = nodes[0].head();
    wait_height(
        &nodes,
        head + EPOCH_LENGTH,
        "another epoch with validator 3's votes",
    );
    // Read while the chain runs, one node may have entered the next epoch a block before
    // another: they must agree once that block is in everywhere.
    let epochs = || -> Vec<u64> {
        nodes
            .iter()
            .map(|node| counter(&node.metrics(), "stave_consensus_epoch"))
            .collect()
    };
    wait_for(
        "every validator in the same epoch",
        Duration::from_secs(30),
        || {
            let epochs = epochs();
            epochs.iter().all(|&epoch| epoch == epochs[0])
        },
    );
}

/// `stave gov` with `args` through validator 0's JSON-RPC, as the dev mnemonic's account
/// `member` (the committee member of validator `member`); its output. It must succeed.
fn gov(testnet: &Testnet, member: usize, args: &[&str]) -> String {
    let (_, accounts) = stave_primitives::dev::dev_chain().expect("the dev chain");
    let secret = accounts[member].secret.to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(["gov"])
        .args(args)
        .args(["--rpc", &format!("http://127.0.0.1:{}", testnet.rpc)])
        .args(["--key", &secret])
        .output()
        .expect("runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        output.status.success(),
        "stave gov {args:?}: {stdout}{stderr}"
    );
    stdout
}

/// The committee (members 0, 1 and 2 of 4: a majority) makes `action` on `target`.
fn decide(testnet: &Testnet, action: &str, target: &str) {
    let proposed = gov(testnet, 0, &["propose", action, target]);
    let proposal: serde_json::Value = serde_json::from_str(proposed.trim()).expect("JSON");
    let id = proposal["proposal"].as_str().expect("an id");
    let id = u64::from_str_radix(id.trim_start_matches("0x"), 16)
        .expect("a hex id")
        .to_string();
    gov(testnet, 1, &["vote", &id]);
    let applied = gov(testnet, 2, &["vote", &id]);
    assert!(applied.contains("\"applied\":true"), "{applied}");
}

/// The consortium changes its validators on chain, no running validator restarting. A
/// fifth node (`--spare-validators 1`) follows four validators under load; the committee
/// adds it with `stave gov`, and from the next epoch it votes: with one of the four
/// SIGKILLed, the other three and it are the quorum (4 of 5), so the chain finalizes
/// only with its votes. The committee then removes the killed validator: restarted, it is
/// refused by every member, and from the next epoch 3 of the 4 left are the quorum, so
/// the chain goes on with a second one stopped.
#[test]
fn the_committee_adds_a_validator_that_votes_from_the_next_epoch_and_removes_one() {
    let root = tempfile::tempdir().expect("tempdir");
    let length = EPOCH_LENGTH.to_string();
    let testnet = Testnet::init_with(root.path(), 4, 1, 0, &["--epoch-length", &length]);
    let mut nodes: Vec<Node> = (0..5).map(|i| testnet.launch(i)).collect();
    let senders: Vec<LocalSigner> = (4..8).map(account).collect();
    let first = send_beside(&senders, &nodes[..4], 0, 5);
    wait_final(
        &nodes[..4],
        &first,
        "transfers final on the four validators",
    );
    assert_eq!(counter(&nodes[4].metrics(), "stave_consensus_voting"), 0);

    decide(&testnet, "add-validator", &testnet.validators[4]);
    wait_for("the fifth node to vote", Duration::from_secs(120), || {
        counter(&nodes[4].metrics(), "stave_consensus_voting") == 1
    });
    let target = nodes[0].head();
    wait_height(&nodes[4..], target, "the fifth node to reach the others");
    assert_eq!(block_id(&nodes[4], target), block_id(&nodes[0], target));

    // Validator 3 killed: 0, 1, 2 and the new one are the quorum.
    let killed = nodes.remove(3);
    drop(killed);
    let more = send_beside(&senders, &nodes, 5, 5);
    wait_final(
        &nodes,
        &more,
        "transfers final with the new validator's votes",
    );

    decide(&testnet, "remove-validator", &testnet.validators[3]);
    let removed_at = nodes[0].head();
    wait_height(
        &nodes,
        removed_at + 2 * EPOCH_LENGTH,
        "an epoch without validator 3",
    );
    // Restarted, validator 3 is refused by every member: the contract no longer admits
    // it (their configs still list it), so no member counts it as a peer and it gets no
    // block from anyone.
    let refused = testnet.launch(3);
    let stuck = refused.head();
    std::thread::sleep(Duration::from_secs(5));
    for node in &nodes {
        assert_eq!(counter(&node.metrics(), "stave_net_allowed_peers"), 4);
        assert_eq!(
            counter(&node.metrics(), "stave_net_peers"),
            3,
            "the other members only"
        );
    }
    assert_eq!(refused.head(), stuck);
    assert!(nodes[0].head() > stuck);
    // Validator 0 stopped too: 1, 2 and the new one are 3 of the 4 left.
    let stopped = nodes.remove(0);
    drop(stopped);
    let last = send_beside(&senders, &nodes, 10, 3);
    wait_final(
        &nodes,
        &last,
        "transfers final among three of the four left",
    );
}

/// `stave load` against the full node on `port` with `txs` transfers from `accounts`
/// senders: every one is included there (finalized by the validators, imported by the
/// full node).
fn load_through(port: u16, txs: usize, accounts: usize) {
    let output = Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(["load", "--rpc", &format!("http://127.0.0.1:{port}")])
        .args([
            "--txs",
            &txs.to_string(),
            "--accounts",
            &accounts.to_string(),
        ])
        .arg("--json")
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stave load: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a report")).expect("JSON");
    assert_eq!(report["included"], txs, "{report}");
    assert_eq!(report["rejected"], 0, "{report}");
}

/// Four validators that serve no JSON-RPC and two full nodes (`--full-nodes 2
/// --no-validator-rpc`), epochs of 10 blocks, so the full nodes check certificates of
/// several epochs: `stave load` sent only to the full nodes is finalized in full (its
/// transactions reach the validators by gossip); a full node SIGKILLed and restarted
/// catches up on certificates and serves again; no run a peer brought was refused; and
/// once all stop, every node holds the same blocks, state roots included.
#[test]
fn full_nodes_serve_the_load_and_follow_the_validators_on_certificates() {
    let root = tempfile::tempdir().expect("tempdir");
    let length = EPOCH_LENGTH.to_string();
    let testnet = Testnet::init_with(
        root.path(),
        4,
        0,
        2,
        &["--epoch-length", &length, "--no-validator-rpc"],
    );
    let validators: Vec<Node> = (0..4).map(|i| testnet.launch_without_rpc(i)).collect();
    for i in 0..4 {
        assert_eq!(
            probe(testnet.rpc + i),
            None,
            "validator {i} serves JSON-RPC"
        );
    }
    let mut full: Vec<Node> = (4..6).map(|i| testnet.launch(i)).collect();
    load_through(full[0].port, 1_000, 20);
    load_through(full[1].port, 600, 20);
    wait_height(&full, 3 * EPOCH_LENGTH, "three epochs on the full nodes");

    // Full node 5 SIGKILLed; more load through the other; restarted, it catches up.
    drop(full.pop());
    load_through(full[0].port, 600, 20);
    let target = full[0].head();
    full.push(testnet.launch(5));
    wait_height(&full[1..], target, "the restarted full node to catch up");
    assert_eq!(block_id(&full[1], target), block_id(&full[0], target));
    for node in full.iter().chain(&validators) {
        let refused = counter(&node.metrics(), "stave_catch_up_runs_refused_total");
        assert_eq!(refused, 0, "an honest peer's run was refused");
    }
    assert!(
        counter(&full[1].metrics(), "stave_caught_up_blocks_total") > 0,
        "the full node imported certified runs"
    );

    // Every node, stopped, holds the same blocks.
    for node in validators.into_iter().chain(full) {
        node.terminate();
    }
    let stores: Vec<stave_storage::LmdbStore> = (0..6).map(|i| testnet.stored(i)).collect();
    let block = |store: &stave_storage::LmdbStore, number: u64| {
        let header = stave_storage::read::header(store, number)
            .expect("reads")
            .expect("the block is stored");
        (header.hash_slow(), header.state_root)
    };
    let common = stores
        .iter()
        .map(|store| {
            stave_storage::read::head(store)
                .expect("reads")
                .expect("a head")
                .0
        })
        .min()
        .expect("nodes");
    assert!(common >= target);
    for number in [target, common] {
        let reference = block(&stores[0], number);
        for (i, store) in stores.iter().enumerate().skip(1) {
            assert_eq!(block(store, number), reference, "node {i}'s block {number}");
        }
    }
}

/// `/health` answers 200 while a node runs; `/ready` 503 with the reason while a validator
/// has no peer, 200 once the others are up; unknown paths 404.
#[test]
fn ready_waits_for_peers_and_health_only_for_the_process() {
    let root = tempfile::tempdir().expect("tempdir");
    let testnet = Testnet::init(root.path(), 4);
    let first = testnet.launch(0);
    let endpoint = std::net::SocketAddr::from(([127, 0, 0, 1], first.metrics_port));
    assert!(get(endpoint, "/health").starts_with("HTTP/1.1 200"));
    let alone = get(endpoint, "/ready");
    assert!(alone.starts_with("HTTP/1.1 503"), "{alone}");
    assert!(alone.contains("no peer connected"), "{alone}");
    assert!(get(endpoint, "/nowhere").starts_with("HTTP/1.1 404"));
    assert!(get(endpoint, "/metrics").starts_with("HTTP/1.1 200"));
    let _others: Vec<Node> = (1..4).map(|i| testnet.launch(i)).collect();
    wait_for("validator 0 to be ready", Duration::from_secs(60), || {
        get(endpoint, "/ready").starts_with("HTTP/1.1 200")
    });
}

#[test]
fn testnet_run_starts_every_node_and_stops_them_on_sigterm() {
    let root = tempfile::tempdir().expect("tempdir");
    let testnet = Testnet::init(root.path(), 2);
    let mut runner = Command::new(env!("CARGO_BIN_EXE_stave"))
        .args(["testnet", "run", "--dir"])
        .arg(root.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    // Both nodes serve RPC and finalize blocks together.
    let probe = |index: u16| probe(testnet.rpc + index);
    wait_for(
        "both nodes to finalize blocks",
        Duration::from_secs(60),
        || (0..2).all(|i| probe(i).is_some_and(|head| head >= 2)),
    );

    // SIGTERM to the runner stops every node.
    let pid = libc::pid_t::try_from(runner.id()).expect("pid");
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = runner.wait().expect("waits");
    assert!(status.success(), "{status}");
    wait_for("the nodes to stop", Duration::from_secs(20), || {
        (0..2).all(|i| probe(i).is_none())
    });
    for i in 0..2 {
        let log = std::fs::read_to_string(root.path().join(format!("node{i}/node.log")))
            .expect("a log per node");
        // Stopped by itself on SIGTERM (not killed after the runner's grace period).
        assert!(log.contains("SIGTERM: stopping"), "node {i}:\n{log}");
        assert!(log.contains("stopped at block"), "node {i}:\n{log}");
        // Having written its state layers: the next start re-executes nothing.
        let store =
            stave_storage::LmdbStore::open(&root.path().join(format!("node{i}/data")), 1 << 30)
                .expect("opens");
        let head = stave_storage::read::head(&store)
            .expect("reads")
            .map(|(number, _)| number);
        assert!(head >= Some(2), "node {i}: head {head:?}");
        assert_eq!(
            stave_storage::read::flushed_height(&store).expect("reads"),
            head,
            "node {i}"
        );
    }
}

/// A validator whose consensus engine fails exits with code 1 and one line naming the
/// engine, rather than answer JSON-RPC with a chain that no longer moves; the other three
/// keep finalizing. The fault is a real one: its journal directory replaced by a file
/// while it runs, so the journal section of the next view cannot be created (commonware
/// panics on a journal it cannot write; chmod would not do, tests run as root).
#[test]
fn a_validator_whose_consensus_engine_fails_exits_and_the_others_go_on() {
    let root = tempfile::tempdir().expect("tempdir");
    let testnet = Testnet::init(root.path(), 4);
    let mut nodes: Vec<Node> = (0..4).map(|i| testnet.launch(i)).collect();
    let senders: Vec<LocalSigner> = (0..3).map(account).collect();
    let first = send_beside(&senders, &nodes, 0, 3);
    wait_final(&nodes, &first, "transfers final everywhere");

    let data = testnet.dir.join("node3/data");
    std::fs::rename(data.join("consensus"), data.join("consensus.moved")).expect("moves");
    std::fs::write(data.join("consensus"), "not a directory").expect("writes");
    let status = nodes[3].exit_within(Duration::from_secs(30));
    let stderr = nodes[3].stderr();
    let status = status.unwrap_or_else(|| panic!("validator 3 still runs:\n{stderr}"));
    assert_eq!(status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one line says what failed:\n{stderr}");
    assert!(
        errors[0].contains("the consensus engine panicked"),
        "{stderr}"
    );

    let more = send_beside(&senders, &nodes[..3], 3, 3);
    wait_final(&nodes[..3], &more, "transfers final without validator 3");
}

/// libfaketime, which shifts the wall clock of a process it is preloaded into, and only
/// that one (`scripts/test.sh` installs it: Debian's and Ubuntu's `faketime` package).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// Runs four validators, validator 3 with its wall clock `offset` seconds off (its timers
/// keep the real monotonic clock), under transfers sent to it and to validator 0, and
/// checks that the chain keeps finalizing on one chain and that no validator refused a
/// proposal for its timestamp: its own proposals, and those of the others built on them,
/// are accepted. Returns the validators.
fn validators_with_one_clock_off(testnet: &Testnet, offset: i64) -> Vec<Node> {
    assert!(
        Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: install faketime (scripts/test.sh does)"
    );
    let mut nodes: Vec<Node> = (0..3).map(|i| testnet.launch(i)).collect();
    let faketime = format!("{offset:+}s");
    nodes.push(testnet.launch_with(
        3,
        &[
            ("LD_PRELOAD", LIBFAKETIME),
            ("FAKETIME", &faketime),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
    ));
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", nodes[3].child.id()))
        .expect("the process's mappings");
    assert!(maps.contains("libfaketime"), "libfaketime is not loaded");

    let senders: Vec<LocalSigner> = (0..2).map(account).collect();
    let mut hashes = send_transfers(&nodes[3], &senders[0], 0, 5);
    hashes.extend(send_transfers(&nodes[0], &senders[1], 0, 5));
    wait_final(&nodes, &hashes, "transfers final on every validator");
    let window = Duration::from_secs(10);
    let from = nodes.iter().map(Node::head).min().expect("nodes");
    std::thread::sleep(window);
    let to = nodes.iter().map(Node::head).min().expect("nodes");
    eprintln!(
        "validator 3's clock {offset:+} s: {} blocks finalized on every validator in {window:?}",
        to - from
    );
    // 200 ms blocks make 50 in the window; a generous floor for a loaded machine.
    assert!(to >= from + 10, "only {} blocks in {window:?}", to - from);
    assert_eq!(block_id(&nodes[3], to), block_id(&nodes[0], to));
    for (i, node) in nodes.iter_mut().enumerate() {
        let stderr = node.stderr();
        assert!(
            !stderr.contains("is outside ["),
            "validator {i} refused a proposal for its timestamp:\n{stderr}"
        );
    }
    nodes
}

#[test]
fn a_validator_whose_clock_is_5_s_ahead_leaves_the_chain_finalizing() {
    let root = tempfile::tempdir().expect("tempdir");
    let testnet = Testnet::init(root.path(), 4);
    let nodes = validators_with_one_clock_off(&testnet, 5);
    // Only validator 3 stamps blocks ahead of the real clock (the others stamp theirs, or
    // their parent's), and its stamps lead by 5 s: a head stamped after now shows that its
    // proposals are final, and the others build on them.
    let head = nodes[0].head();
    let block = nodes[0].result(
        "eth_getBlockByNumber",
        json!([format!("0x{head:x}"), false]),
    );
    let stamped = quantity(&block["timestamp"]).expect("a timestamp");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    assert!(stamped > now, "head {head} stamped {stamped} at {now}");
}

#[test]
fn a_validator_whose_clock_is_5_s_behind_leaves_the_chain_finalizing() {
    let root = tempfile::tempdir().expect("tempdir");
    let testnet = Testnet::init(root.path(), 4);
    validators_with_one_clock_off(&testnet, -5);
}
